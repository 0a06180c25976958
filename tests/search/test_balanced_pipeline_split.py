"""The balanced pipeline split: end stages sized so the output layer, the loss and MTP modules on the
last stage do not make it the slowest (designer.perf.iteration.balanced_end_stages), and the search
trying it beside Megatron's own split."""

from designer.launch import megatron_pipeline_layout
from designer.perf.iteration import balanced_end_stages
from designer.perf.model import Metrics, evaluate_system, load_perf_calibration
from designer.search.space import DesignSpace
from designer.spec.llm import LLMSpec, Recompute, Schedule, TrainingSpec
from designer.spec.models import load_model
from designer.spec.study import StrategySpace
from tests.perf import modern_runs

CAL = load_perf_calibration()

# A toy whose output layer is exactly 1.5 layers of work. Per token, forward, at sequence 1,024:
# attention projections 2 * 4h^2 = 8,388,608 (h = 1,024, 8 heads of 128, no GQA), MLP 2 * 2 * 4,096 * h =
# 16,777,216, attention core 2 * s * heads * (128 + 128) = 4,194,304 counted half (causal): a layer is
# 27,262,976 FLOPs. The output layer is 2 * h * V: V = 19,968 makes it 40,894,464 = 1.5 layers.
TOY = LLMSpec(name="toy-8l", layers=8, hidden_size=1024, ffn_size=4096, heads=8, vocab_size=19_968)


def test_the_toy_split_by_hand():
    # pp 4: Megatron's even split 2 + 2 + 2 + 2 leaves 3.5 layers of work on the last stage. With equal
    # middle stages, 1 + 3 + 3 + 1 and 3 + 2 + 2 + 1 both bring the busiest stage to 3 layers; the
    # lighter first stage wins the tie
    assert balanced_end_stages(TOY, 1024, 4) == (1, 1)
    # pp 2: f + l = 8, the busiest max(f, l + 1.5) is least at f = 5, l = 3 (5 layers; 4 + 4 leaves 5.5)
    assert balanced_end_stages(TOY, 1024, 2) == (5, 3)
    # pp 3: Megatron's uneven 3 + 3 + 2 leaves 3.5 on the last stage; no split with equal middle stages
    # does better (3 + 3 + 2 is the only one at 3.5), so Megatron's split stands
    assert balanced_end_stages(TOY, 1024, 3) is None
    # pp 8: one layer per stage, nothing to move
    assert balanced_end_stages(TOY, 1024, 8) is None
    assert balanced_end_stages(TOY, 1024, 1) is None


def test_a_heavy_output_layer_moves_the_middle_stages_far_from_the_mean():
    # 24 layers of 8h^2 + 2 * 2 * 3,072 * h + (2 * 2,048 * 12 * 128) / 2 = 17,301,504 FLOPs per token
    # (h = 768); the output layer 2 * h * 120,000 = 184,320,000 is 10.65 layers. On 3 stages the last
    # holds it: with one layer there (11.65), f + m = 23 leaves the busiest at 12 (11 + 12 or 12 + 11;
    # the lighter first stage wins); two layers there make it 12.65. Megatron's 8 + 8 + 8 leaves 18.65.
    llm = LLMSpec(name="wide-head", layers=24, hidden_size=768, ffn_size=3072, heads=12, vocab_size=120_000)
    assert balanced_end_stages(llm, 2048, 3) == (11, 1)


def test_deepseek_v3_on_16_stages_is_its_published_layout():
    # Megatron-Bridge's DeepSeek-V3 recipes on PP 16 run 4 + 14 x 4 + 1 layers with the MTP module and the
    # loss on the last stage (deepseek_v3.py, layout "Et*4|(t*4|)*14tmL"); Megatron's own uneven split
    # would be 3 + 14 x 4 + 2
    assert balanced_end_stages(load_model("deepseek-v3"), 4096, 16) == (4, 1)


def test_the_search_tries_the_balanced_split_and_the_launch_states_it():
    llm = load_model("deepseek-v3")
    tr = TrainingSpec(sequence_length=4096, global_batch_sequences=2048, total_tokens=1e12)
    space = StrategySpace(tp=(1,), pp=(16,), ep=(8,), sequence_parallel=(False,), microbatch_sizes=(1,),
                          schedules=(Schedule.one_f_one_b, Schedule.interleaved), virtual_stages=(2,))
    ds = DesignSpace.build_uncached(llm, tr, space, n_gpus=256, hb_domain_size=8)
    strategies = ds.table().strategies()
    splits = {(s.schedule, s.pp_first_stage_layers, s.pp_last_stage_layers) for s in strategies}
    # 1F1B with either split; interleaving two chunks per rank needs two layers on each end stage,
    # so only Megatron's split there
    assert splits == {(Schedule.one_f_one_b, None, None), (Schedule.one_f_one_b, 4, 1),
                      (Schedule.interleaved, None, None)}
    assert "pipeline_split" in ds.choices and ds.contains(strategies[0])
    balanced = next(s for s in strategies if s.pp_first_stage_layers == 4)
    assert ds.nearest({"pipeline_split": "balanced", "schedule": "1f1b"}).pp_first_stage_layers == 4
    assert megatron_pipeline_layout(balanced, llm) == ["--decoder-first-pipeline-num-layers", "4",
                                                       "--decoder-last-pipeline-num-layers", "1"]
    # Megatron's split only: no balanced rows
    only = DesignSpace.build_uncached(llm, tr, space.model_copy(update={"pipeline_split": ("megatron",)}),
                                      n_gpus=256, hb_domain_size=8)
    assert all(s.pp_first_stage_layers is None for s in only.table().strategies())
    # one balanced 1F1B row per recompute option, EP overlap and dispatcher
    assert ds.size - only.size == len(space.recompute) * len(space.overlap_ep_comm) * len(space.moe_dispatcher)


def test_the_balanced_split_is_faster_where_the_last_stage_paced():
    # Megatron-Bridge's DeepSeek-V3 run on 256 B200s, PP 16 (tests/perf/data/modern_runs.yaml MB2509-09),
    # measured at 2,265 tokens/s per GPU with its recipe's 4 + 14 x 4 + 1 layout
    row = next(r for r in modern_runs.rows() if r["id"] == "MB2509-09")
    llm, tr, st, sy = modern_runs.case(row)
    assert (st.pp_first_stage_layers, st.pp_last_stage_layers) == balanced_end_stages(llm, tr.sequence_length, st.pp)
    calib = modern_runs.calibration_for(row, CAL)
    balanced = evaluate_system(llm, tr, st, sy, calib=calib)
    megatron = evaluate_system(llm, tr, st.model_copy(update={"pp_first_stage_layers": None, "pp_last_stage_layers": None}),
                               sy, calib=calib)
    assert isinstance(megatron, Metrics) and isinstance(balanced, Metrics)
    # 3 + 14 x 4 + 2: the last stage's two layers, the MTP module and two output heads pace; 4 + 14 x 4 + 1
    # leaves the middle stages' four layers to pace
    assert balanced.iteration_time_s < 0.95 * megatron.iteration_time_s
    measured = row["measured"]["tokens_per_s_per_gpu"]
    assert abs(balanced.tokens_per_s / row["gpus"] / measured - 1) < abs(megatron.tokens_per_s / row["gpus"] / measured - 1)


def test_a_balanced_only_space_keeps_megatrons_split_where_no_balanced_one_runs():
    llm = load_model("deepseek-v3")
    tr = TrainingSpec(sequence_length=4096, global_batch_sequences=2048, total_tokens=1e12)
    space = StrategySpace(tp=(1,), pp=(1, 16), ep=(8,), sequence_parallel=(False,), microbatch_sizes=(1,),
                          schedules=(Schedule.one_f_one_b, Schedule.interleaved), virtual_stages=(2,),
                          recompute=(Recompute.full,), pipeline_split=("balanced",))
    ds = DesignSpace.build_uncached(llm, tr, space, n_gpus=256, hb_domain_size=8)
    got = {(s.pp, s.schedule, s.pp_first_stage_layers, s.pp_last_stage_layers) for s in ds.table().strategies()}
    # pp 1 has no split; interleaving two chunks cannot run 4 + 14 x 4 + 1 (the last rank's second chunk
    # would be empty), so it keeps Megatron's; 1F1B on 16 stages runs the balanced split
    assert got == {(1, Schedule.one_f_one_b, None, None), (16, Schedule.one_f_one_b, 4, 1),
                   (16, Schedule.interleaved, None, None)}
    assert "pipeline_split" not in ds.choices


def test_designer_space_says_a_dense_model_ignores_listed_moe_values():
    from designer.search.space import explain_space

    llm, tr = load_model("llama3-70b"), TrainingSpec(sequence_length=8192, global_batch_sequences=512, total_tokens=1e12)
    listed = explain_space(llm, tr, StrategySpace(moe_dispatcher=("alltoall", "deepep")), hb_domain_size=8)
    assert [(r.dim, r.value) for r in listed if r.dim == "moe_dispatcher"] == [("moe_dispatcher", ["deepep"])]
    # the defaults (two values each, for MoE models) are not the study's doing: nothing to report
    assert not [r for r in explain_space(llm, tr, StrategySpace(), hb_domain_size=8)
                if r.dim in ("moe_dispatcher", "overlap_ep_comm")]
