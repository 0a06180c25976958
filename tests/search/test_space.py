"""Every strategy the space produces is valid, and every valid strategy of the allowed values is produced."""

import itertools

import pytest

from designer.errors import SpecError
from designer.search.space import design_space, invalid_reason, strategy_key
from designer.spec.llm import LLMSpec, MoESpec, Recompute, Schedule, Strategy, TrainingSpec
from designer.spec.study import StrategySpace, StudySpec
from tests.search.split_rules import moe_values_apply, recompute_rows, split_ends

TINY = LLMSpec(name="tiny", layers=4, hidden_size=64, ffn_size=16, heads=4, kv_heads=4, vocab_size=100)
TINY_TRAIN = TrainingSpec(sequence_length=1024, global_batch_sequences=8, total_tokens=1e9)


def test_hand_counted_tiny_space():
    # 8 GPUs, HB domain 4, 4 layers, global batch 8; tp, pp in {1,2,4}; SP on/off; mbs {1,2};
    # 1F1B or interleaved with 2 chunks. Counted by hand per layout (tp, pp, dp):
    # (1,1,8):1 (1,2,4):3 (1,4,2):2 (2,1,4):4 (2,2,2):8 (2,4,1):4 (4,1,2):4 (4,2,1):8 -> 34.
    space = StrategySpace(microbatch_sizes=(1, 2), schedules=(Schedule.one_f_one_b, Schedule.interleaved),
                          virtual_stages=(2,), recompute=(Recompute.none,))
    ds = design_space(TINY, TINY_TRAIN, space, n_gpus=8, hb_domain_size=4)
    assert ds.size == 34
    assert len(ds.table()) == 34


def _brute_force(llm, training, space, n_gpus, hb):
    """Every combination of the raw allowed values, filtered by the scalar rules alone."""
    tps = space.tp or range(1, hb + 1)
    # by default the space tries every pp up to max_pp and the layer count (stages may be uneven)
    pps = space.pp or [p for p in range(1, llm.layers + 1) if p <= space.max_pp]
    eps = (space.ep or range(1, llm.moe.experts + 1)) if llm.moe else (1,)
    scheds = [(s, 1) for s in space.schedules if s != Schedule.interleaved]
    if Schedule.interleaved in space.schedules:
        scheds += [(Schedule.interleaved, v) for v in space.virtual_stages]
    out = set()
    for tp, pp, cp, ep in itertools.product(tps, pps, space.cp, eps):
        if n_gpus % (tp * pp * cp):
            continue
        dp = n_gpus // (tp * pp * cp)
        for sp, mbs, (sc, v), split, z, qw, qg, hp, (rc, mods), odp, otp, off, offw, offa, cpc, oep, disp, cg in itertools.product(
                space.sequence_parallel, space.microbatch_sizes, scheds, space.pipeline_split, space.zero_stages,
                space.zeropp_quantized_weights, space.zeropp_quantized_gradients, space.zeropp_hierarchical_partition,
                recompute_rows(llm, space), space.overlap_dp_comm, space.overlap_tp_comm, space.offload_optimizer,
                space.offload_weights, space.offload_activation_layers, space.cp_comm, space.overlap_ep_comm,
                space.moe_dispatcher, space.cuda_graphs):
            s = Strategy(tp=tp, pp=pp, dp=dp, ep=ep, cp=cp, sequence_parallel=sp, microbatch_size=mbs, schedule=sc,
                         virtual_stages=v, zero_stage=z, zeropp_quantized_weights=qw, zeropp_quantized_gradients=qg,
                         zeropp_hierarchical_partition=hp, recompute=rc, recompute_modules=mods, overlap_dp_comm=odp, overlap_tp_comm=otp,
                         offload_optimizer=off, offload_weights=offw, offload_activation_layers=offa, cp_comm=cpc,
                         overlap_ep_comm=oep, moe_dispatcher=disp, cuda_graphs=cg)
            ends = split_ends(llm, training, space, pp, sc, v, split)
            if ends is None or not moe_values_apply(llm, space, oep, disp, ep):
                continue
            s = s.model_copy(update=dict(pp_first_stage_layers=ends[0], pp_last_stage_layers=ends[1]))
            if invalid_reason(s, llm, training, n_gpus, hb) is None:
                out.add(strategy_key(s))
    return out


CASES = [
    (TINY, TINY_TRAIN, StrategySpace(), 8, 4),
    (TINY, TINY_TRAIN, StrategySpace(zero_stages=(0, 1, 2, 3), zeropp_quantized_weights=(False, True),
                                     zeropp_hierarchical_partition=(False, True), schedules=tuple(Schedule),
                                     virtual_stages=(2, 4), overlap_tp_comm=(False, True),
                                     offload_optimizer=(False, True)), 16, 4),
    (LLMSpec(name="gqa", layers=12, hidden_size=96, ffn_size=48, heads=12, kv_heads=2, vocab_size=10),
     TrainingSpec(sequence_length=4096, global_batch_sequences=24, total_tokens=1e9),
     StrategySpace(cp=(1, 2, 4, 8), microbatch_sizes=(1, 2, 3, 4), cp_comm=("p2p", "a2a")), 24, 6),
    (LLMSpec(name="moe", layers=8, hidden_size=64, ffn_size=32, heads=8, kv_heads=4, vocab_size=10,
             moe=MoESpec(experts=8, top_k=2, expert_ffn_size=32)),
     TrainingSpec(sequence_length=2048, global_batch_sequences=32, total_tokens=1e9),
     StrategySpace(cp=(1, 2)), 32, 8),
    (LLMSpec(name="moe", layers=8, hidden_size=64, ffn_size=32, heads=8, kv_heads=4, vocab_size=10,
             moe=MoESpec(experts=8, top_k=2, expert_ffn_size=32)),
     TrainingSpec(sequence_length=2048, global_batch_sequences=32, total_tokens=1e9),
     StrategySpace(cp=(1, 2), zero_stages=(1, 3), recompute=("full",), sequence_parallel=(False,),
                   offload_weights=(False, True), offload_activation_layers=(0, 2), overlap_ep_comm=(False, True),
                   moe_dispatcher=("alltoall", "allgather", "deepep"), cuda_graphs=(False, True)), 32, 8),
    # selective recompute's module lists: moe_act alone means nothing to a dense model, and [mlp,
    # layernorm] names the modules [layernorm, mlp] does
    (TINY, TINY_TRAIN, StrategySpace(recompute_modules=((), ("layernorm", "mlp"), ("moe_act",), ("mlp", "layernorm"),
                                                        ("alternate_matmuls",))), 8, 4),
    (LLMSpec(name="moe", layers=8, hidden_size=64, ffn_size=32, heads=8, kv_heads=4, vocab_size=10,
             moe=MoESpec(experts=8, top_k=2, expert_ffn_size=32)),
     TrainingSpec(sequence_length=2048, global_batch_sequences=32, total_tokens=1e9),
     StrategySpace(recompute_modules=(("layernorm", "moe_act"), ("mla_up_proj",), (), ("moe",)),
                   recompute=("full", "selective")), 32, 8),
]


@pytest.mark.parametrize("llm,training,space,n_gpus,hb", CASES)
def test_table_equals_brute_force(llm, training, space, n_gpus, hb):
    ds = design_space(llm, training, space, n_gpus=n_gpus, hb_domain_size=hb)
    table = ds.table()
    keys = [table.key(i) for i in range(len(table))]
    assert len(keys) == len(set(keys)) == ds.size
    for s in table.strategies():
        assert invalid_reason(s, llm, training, n_gpus, hb) is None
        assert s.n_gpus == n_gpus and s.tp <= hb
    assert set(keys) == _brute_force(llm, training, space, n_gpus, hb)


@pytest.mark.parametrize("llm,training,space,n_gpus,hb", CASES)
def test_nearest_is_valid_and_fixes_valid_points(llm, training, space, n_gpus, hb):
    ds = design_space(llm, training, space, n_gpus=n_gpus, hb_domain_size=hb)
    choices = ds.choices
    names = sorted(choices)
    for combo in itertools.islice(itertools.product(*(choices[n] for n in names)), 0, 3000, 7):
        s = ds.nearest(dict(zip(names, combo)))
        assert invalid_reason(s, llm, training, n_gpus, hb) is None
        assert ds.contains(s)
    table = ds.table()
    for i in range(0, len(table), max(1, len(table) // 50)):
        s = table.strategy(i)
        params = {"tp": s.tp, "pp": s.pp, "cp": s.cp, "ep": s.ep, "sequence_parallel": s.sequence_parallel,
                  "microbatch_size": s.microbatch_size, "zero_stage": s.zero_stage, "recompute": s.recompute.value,
                  "schedule": f"interleaved:{s.virtual_stages}" if s.schedule == Schedule.interleaved else s.schedule.value,
                  "zeropp_quantized_weights": s.zeropp_quantized_weights,
                  "zeropp_quantized_gradients": s.zeropp_quantized_gradients,
                  "zeropp_hierarchical_partition": s.zeropp_hierarchical_partition,
                  "overlap_dp_comm": s.overlap_dp_comm, "overlap_tp_comm": s.overlap_tp_comm,
                  "offload_optimizer": s.offload_optimizer, "offload_weights": s.offload_weights,
                  "offload_activation_layers": s.offload_activation_layers, "cp_comm": s.cp_comm,
                  "overlap_ep_comm": s.overlap_ep_comm, "moe_dispatcher": s.moe_dispatcher,
                  "cuda_graphs": s.cuda_graphs,
                  "recompute_modules": "+".join(m.value for m in s.recompute_modules) or "core_attn"}
        assert strategy_key(ds.nearest(params)) == strategy_key(s)


def test_rules_by_example():
    moe = CASES[3][0]
    tr = CASES[3][1]
    assert "ZeRO stage 3" in invalid_reason(Strategy(dp=32, zero_stage=1, offload_weights=True), moe, tr, 32, 8)
    # 8 heads cannot split over tp 4 x cp 4 for Ulysses; the ring needs no such split
    assert "a2a" in invalid_reason(Strategy(tp=4, cp=4, dp=2, cp_comm="a2a"), moe, tr, 32, 8)
    assert invalid_reason(Strategy(tp=4, cp=4, dp=2, cp_comm="p2p"), moe, tr, 32, 8) is None
    # 12 GPUs of TP are 1.5 domains of 8; 16 would be two whole domains (then the heads rule applies)
    assert "HB domain" in invalid_reason(Strategy(tp=12, dp=4), moe, tr, 48, 8)
    assert "divide heads" in invalid_reason(Strategy(tp=16, dp=2), moe, tr, 32, 8)
    assert "divide experts" in invalid_reason(Strategy(tp=1, dp=32, ep=16), moe, tr, 32, 8)
    assert "sequence parallelism" in invalid_reason(Strategy(tp=1, dp=32, sequence_parallel=True), moe, tr, 32, 8)
    assert invalid_reason(Strategy(tp=1, pp=2, dp=16, zero_stage=2), moe, tr, 32, 8) is None  # ZeRO-2 with PP
    assert "DualPipe" in invalid_reason(Strategy(tp=1, pp=2, dp=16, microbatch_size=2, schedule="dualpipe"), moe, tr, 32, 8)  # 1 microbatch
    assert invalid_reason(Strategy(tp=1, pp=3, dp=8, microbatch_size=1), moe, tr, 24, 8) is None  # 8 layers on 3 stages
    assert "ZeRO++" in invalid_reason(Strategy(tp=1, dp=32, zero_stage=1, zeropp_quantized_weights=True), moe, tr, 32, 8)
    assert "ep 2 > 1 on a dense model" in invalid_reason(Strategy(tp=1, dp=8, ep=2), TINY, TINY_TRAIN, 8, 4)


def test_study_spec_errors_are_one_line():
    base = {"name": "s", "model": "m", "training": {"sequence_length": 8, "global_batch_sequences": 8, "total_tokens": 1e6},
            "designs": [{"name": "d"}]}
    StudySpec.model_validate(base)
    from designer.spec.load import validate
    with pytest.raises(SpecError, match=r"search.method.*'optuna', 'exhaustive' or 'auto'"):
        validate(StudySpec, {**base, "search": {"method": "grid"}})
    with pytest.raises(SpecError, match=r"zero_stages.*allowed values are 0, 1, 2, 3"):
        validate(StudySpec, {**base, "strategy_space": {"zero_stages": [4]}})
    with pytest.raises(SpecError, match=r"objectives.*must include time_to_train_s or time_to_train_with_failures_s"):
        validate(StudySpec, {**base, "objectives": ["capex_usd"]})
    with pytest.raises(SpecError, match=r"objectives.*must include a cost \(capex_usd, capex_total_usd or tco_usd\)"):
        validate(StudySpec, {**base, "objectives": ["time_to_train_s"]})
    with pytest.raises(SpecError, match=r"strategy_space.tpp.*unknown key"):
        validate(StudySpec, {**base, "strategy_space": {"tpp": [1]}})
    with pytest.raises(SpecError) as e:
        validate(StudySpec, {**base, "constraints": ["not a hook"]})
    assert "\n" not in str(e.value) and "package.module:function" in str(e.value)


def test_offload_is_a_strategy_dimension_that_rescues_short_hbm():
    # Llama-2 34B on 8 A100-40GB, TP 8 x DP 1: 4.2e9 parameters per GPU hold 6 B each (16-bit
    # weight, fp32 gradient) = 25 GB plus 12 B of optimizer state (ZeRO-1 over one rank) = 50 GB: far
    # over 40 GiB; with the states in host memory it fits.
    import numpy as np

    from designer.perf.model import evaluate_many
    from designer.search.exhaustive import to_strategy_arrays
    from designer.spec.models import load_model
    from tests.perf.systems import cluster

    llm = load_model("llama2-34b")
    tr = TrainingSpec(sequence_length=4096, global_batch_sequences=16, total_tokens=1e9)
    space = StrategySpace(tp=(8,), pp=(1,), recompute=(Recompute.full,), offload_optimizer=(False, True),
                          zero_stages=(1,))
    ds = design_space(llm, tr, space, n_gpus=8, hb_domain_size=8)
    t = ds.table()
    vm = evaluate_many(llm, tr, to_strategy_arrays(t), cluster("a100_40gb", 8, nic_gbps=200))
    off = t.columns["offload_optimizer"]
    assert not np.any(vm.feasible & ~off) and np.any(vm.feasible & off)


def test_pp_that_does_not_divide_the_layers_is_in_the_space():
    # Llama 3 405B (126 layers) on 16,384 GPUs was trained with pp 16 (Dubey et al. 2024 §3.3.2);
    # DeepSeek-V3's 61 layers (a prime) have no divisor pp > 1 at all.
    from designer.spec.models import load_model

    llm = load_model("llama3-405b")
    tr = TrainingSpec(sequence_length=8192, global_batch_sequences=2048, precision="bf16", total_tokens=1e12)
    sp = design_space(llm, tr, StrategySpace(zero_stages=(1,), recompute=(Recompute.full,)), n_gpus=16384, hb_domain_size=8)
    assert {4, 8, 16, 32, 64} <= {int(p) for p in sp.layouts[:, 1]}
    ds = load_model("deepseek-v3")
    sp2 = design_space(ds, tr, StrategySpace(ep=(8,), zero_stages=(1,), recompute=(Recompute.full,)), n_gpus=2048,
                       hb_domain_size=8)
    assert {2, 4, 8, 16} <= {int(p) for p in sp2.layouts[:, 1]}


def _megatron_layout_chunks(layout: str) -> list[str]:
    """Megatron-LM's PipelineParallelLayerLayout.parse_str_to_list (megatron/core/transformer/
    pipeline_parallel_layer_layout.py @ d98e8a64): commas dropped, '(x)*n' then 'c*n' unrolled,
    chunks split at '|'."""
    import re

    s = layout.replace(",", "")
    for pattern in (r'\(([^)]+)\)\*(\d+)', r'(.)\*(\d+)'):
        s = re.sub(pattern, lambda x: x.group(1) * int(x.group(2)), s)
    return s.split("|")


@pytest.mark.parametrize("n_layers,pp,schedule,v,want", [
    (126, 16, "1f1b", 1, ["--decoder-first-pipeline-num-layers 7", "--decoder-last-pipeline-num-layers 7"]),
    (61, 16, "1f1b", 1, ["--decoder-first-pipeline-num-layers 3", "--decoder-last-pipeline-num-layers 2"]),
    (96, 8, "interleaved", 2, ["--num-layers-per-virtual-pipeline-stage 6"]),
    (126, 16, "interleaved", 2, None), (80, 8, "interleaved", 4, None), (61, 32, "1f1b", 1, None),
])
def test_megatron_pipeline_layout_flags(n_layers, pp, schedule, v, want):
    from designer.launch import megatron_pipeline_layout
    from designer.spec.llm import pipeline_stage_layers
    from designer.spec.models import load_model

    s = Strategy(pp=pp, schedule=schedule, virtual_stages=v)
    llm = load_model("llama3-70b").model_copy(update={"layers": n_layers})
    args = megatron_pipeline_layout(s, llm)
    if want is not None:
        assert args == [w for flag in want for w in flag.split()]
        return
    # a --pipeline-model-parallel-layout: parsed as Megatron-LM parses it, pp * v chunks, chunk k of
    # stage r at k * pp + r, each stage's layers as the split, the embedding first and the loss last
    flag, layout = args
    assert flag == "--pipeline-model-parallel-layout"
    chunks = _megatron_layout_chunks(layout)
    assert len(chunks) == pp * v
    assert chunks[0].startswith("E") and chunks[-1].endswith("L")
    per_stage = [sum(chunks[k * pp + r].count("t") for k in range(v)) for r in range(pp)]
    assert tuple(per_stage) == pipeline_stage_layers(n_layers, pp)
    assert sum(per_stage) == n_layers
