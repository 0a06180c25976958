"""Uneven pipeline stages, ZB-H1 and DualPipe bubbles, ZeRO-3/FSDP with pipelines, HSDP, MoE tokens
under sequence parallelism, and jobs on part of an HB domain: hand-computed cases."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from designer.perf import compute as cmp
from designer.perf.iteration import iteration_arrays, stage_layout
from designer.perf.model import evaluate_system, load_perf_calibration
from designer.perf.records import Metrics, StrategyArrays
from designer.spec.llm import Recompute, Schedule, Strategy, TrainingSpec
from designer.spec.models import load_model
from tests.perf.systems import cluster

CAL = load_perf_calibration()
# no host overheads and no optimizer step: iteration = pipeline (+ DP) exactly
BARE = dataclasses.replace(CAL, compute=dataclasses.replace(
    CAL.compute, optimizer_bytes_per_param=0.0, framework_per_iteration_s=0.0, framework_per_layer_s=0.0))


def _layout(llm, **kw):
    return stage_layout(llm, StrategyArrays.from_strategies([Strategy(**kw)]))


def test_uneven_stages_of_llama_405b():
    # 126 layers on 16 stages: by default Megatron's uneven form, ceil(126/16) = 8 on each of the 14
    # middle stages and the 126 - 112 = 14 left shared by the end stages, 7 and 7 (Llama 3 405B's).
    llm = load_model("llama3-405b")
    a = _layout(llm, pp=16, dp=1)
    assert (int(a.first[0]), int(a.mid_max[0]), int(a.last[0])) == (7, 8, 7)
    b = _layout(llm, pp=16, dp=1, pp_first_stage_layers=7, pp_last_stage_layers=7)
    assert (int(b.first[0]), int(b.mid_max[0]), int(b.last[0]), bool(b.valid[0])) == (7, 8, 7, True)
    bad = _layout(llm, pp=2, dp=1, pp_first_stage_layers=100, pp_last_stage_layers=30)
    assert not bool(bad.valid[0])
    # DeepSeek-V3: 61 layers on 16 stages: 14 middle stages of ceil(61/16) = 4, the 5 left as 3 on the
    # first (its 3 dense layers) and 2 on the last
    ds = load_model("deepseek-v3")
    c = _layout(ds, pp=16, dp=1)
    assert (int(c.first[0]), int(c.first_moe[0]), int(c.last[0]), int(c.last_moe[0])) == (3, 0, 2, 2)
    # 61 on 32: ceil = 2 leaves 61 - 60 = 1 for both ends, so the layers split as evenly as possible:
    # 29 stages of 2 then 3 of 1
    e = _layout(ds, pp=32, dp=1)
    assert (int(e.first[0]), int(e.mid_max[0]), int(e.last[0]), bool(e.valid[0])) == (2, 2, 1, True)


@pytest.mark.parametrize("n_layers", [1, 7, 32, 61, 80, 96, 126, 127])
def test_scalar_and_vectorized_stage_splits_agree(n_layers):
    from designer.perf.iteration import default_end_stages
    from designer.spec.llm import pipeline_stage_layers

    llm = load_model("llama3-8b").model_copy(update={"layers": n_layers})
    for pp in range(1, n_layers + 1):
        stages = pipeline_stage_layers(n_layers, pp)
        assert sum(stages) == n_layers and len(stages) == pp and min(stages) >= 1
        assert max(stages) == -(-n_layers // pp)  # the slowest stage holds ceil(L / pp) layers
        a = _layout(llm, pp=pp, dp=1)
        assert (int(a.first[0]), int(a.last[0])) == (stages[0], stages[-1])
        if pp > 2:
            assert int(a.mid_max[0]) == max(stages[1:-1])
        f, last = default_end_stages(n_layers, np.array([pp]))
        if n_layers % pp and int(f[0]) > 0:  # the Megatron first/last form: equal middle stages
            assert len(set(stages[1:-1])) <= 1 and (int(f[0]), int(last[0])) == (stages[0], stages[-1])


def test_uneven_stages_are_priced_by_the_slowest_stage():
    # 126 layers on pp 16 (7, 8 x 14, 7) against a 128-layer copy on pp 16 (8 x 16), both with a
    # vocabulary of 8 so that the embedding and output layer weigh nothing: the pace stage holds 8
    # layers in both, so the per-microbatch stage time is equal: a per-layer average (126 / 16 =
    # 7.875 layers) would price it 1.6 % too fast.
    llm = load_model("llama3-405b").model_copy(update={"vocab_size": 8})
    big = llm.model_copy(update={"layers": 128})
    tr = TrainingSpec(sequence_length=8192, global_batch_sequences=256, precision="bf16", total_tokens=1e12)
    s = Strategy(tp=8, pp=16, dp=16, sequence_parallel=True, recompute="full")
    sysm = cluster("h100_sxm", 2048)
    a = evaluate_system(llm, tr, s, sysm, calib=CAL)
    b = evaluate_system(big, tr, s, sysm, calib=CAL)
    assert isinstance(a, Metrics) and isinstance(b, Metrics), (a, b)
    # (the 128-layer last stage also carries the final norm and the 8-word output layer: < 0.5 %)
    assert a.row()["compute_s"] == pytest.approx(b.row()["compute_s"], rel=5e-3)
    assert a.row()["compute_s"] <= b.row()["compute_s"]
    # a microbatch passes every stage once: the fill and drain are sum_i t_i - t_max, 126 - 8 = 118
    # layer times against 128 - 8 = 120
    assert a.row()["bubble_s"] / b.row()["bubble_s"] == pytest.approx(118 / 120, rel=5e-3)
    assert a.iteration_time_s <= b.iteration_time_s


def test_pp_need_not_divide_the_layers():
    llm = load_model("llama3-405b")
    tr = TrainingSpec(sequence_length=8192, global_batch_sequences=64, precision="fp8", total_tokens=1e12)
    r = evaluate_system(llm, tr, Strategy(tp=8, pp=16, dp=1, sequence_parallel=True, recompute="full",
                                          zero_stage=3), cluster("h100_sxm", 128), calib=CAL)
    assert isinstance(r, Metrics), r


@pytest.mark.parametrize("schedule", ["zero_bubble", "dualpipe"])
def test_zero_bubble_and_dualpipe_bubbles(schedule):
    # Per layer: forward F, backward B + W with B the input gradients and W the weight-gradient
    # GEMMs (= the forward GEMM time). 1F1B's fill is (p−1)(F+B+W); ZB-H1 moves W into it:
    # (p−1)(F+B−W) (Qi et al. 2023 §3); DualPipe: (p/2−1)(F&B + B' − 3W) with F&B = F+B+W and B'
    # the full backward B+W (DeepSeek-V3 Table 2: "B denotes the execution time of a full backward
    # chunk"), (p/2−1)(F+2B−W). For pure GEMM layers (B = W = F) these are a third and
    # 2(p/2−1)/(3(p−1)) of 1F1B's; here from the layer's own parts.
    from designer.perf import iteration as it

    # llama3-8b, 32 layers on 8 stages of 4, no TP (so no exposed TP traffic in the stage times), a
    # vocabulary of 8 (so the last stage is not slower)
    llm = load_model("llama3-8b").model_copy(update={"vocab_size": 8})
    tr = TrainingSpec(sequence_length=4096, global_batch_sequences=64, total_tokens=1e9)
    sy = cluster("h100_sxm", 8)
    base = dict(tp=1, pp=8, dp=1, microbatch_size=1, zero_stage=1, recompute="full")
    one = evaluate_system(llm, tr, Strategy(**base), sy, calib=BARE)
    other = evaluate_system(llm, tr, Strategy(**base, schedule=schedule), sy, calib=BARE)
    assert isinstance(one, Metrics) and isinstance(other, Metrics), other
    ctx = it._context(llm, tr, StrategyArrays.from_strategies([Strategy(**base)]), sy, BARE)
    lt = it.compute_term(ctx, ctx.dense, False)
    f, w = float(lt.fwd_s[0]), float(lt.w_s[0])
    b = float(lt.bwd_s[0]) - w
    p = 8
    want = (f + b - w) / (f + b + w) if schedule == "zero_bubble" else (p / 2 - 1) * (f + 2 * b - w) / ((p - 1) * (f + b + w))
    # (the stage-boundary send/recv, exposed, counts with B)
    assert other.breakdown.bubble_s / one.breakdown.bubble_s == pytest.approx(want, rel=0.03)
    # (full recompute puts a forward without W into the backward, so less moves than a third)
    assert want < 1.0


def test_dualpipe_ranks_pace_the_mean_of_their_two_stages():
    # DualPipe's rank r holds stage r of one direction and stage pp-1-r of the other and runs half
    # the microbatches through each (deepseek-ai/DualPipe examples/example_dualpipe.py), so a rank's
    # time per microbatch is the mean of its two stages. 13 layers on pp 6 with ends of 2 and 2:
    # middle stages 3, 2, 2, 2. 1F1B is paced by max(3 L, 2 L + logits); DualPipe pairs the first
    # with the last, (2 L + 2 L + logits) / 2, and the long middle stage with a short one, 2.5 L.
    from designer.perf import iteration as it

    llm = load_model("llama3-8b").model_copy(update={"layers": 13})
    tr = TrainingSpec(sequence_length=4096, global_batch_sequences=64, total_tokens=1e9)
    sy = cluster("h100_sxm", 8)
    base = dict(tp=1, pp=6, dp=1, microbatch_size=1, zero_stage=1, recompute="full",
                pp_first_stage_layers=2, pp_last_stage_layers=2)
    lay = _layout(llm, **base)
    assert (int(lay.first[0]), int(lay.mid_max[0]), int(lay.mid_long[0]), int(lay.last[0])) == (2, 3, 1, 2)
    ctx = it._context(llm, tr, StrategyArrays.from_strategies([Strategy(**base)]), sy, BARE)
    dense = it.compute_term(ctx, ctx.dense, False)
    layer = float(dense.compute_s[0])
    logits = 3 * float(ctx.logits_s[0])
    send = float(it.pp_term(ctx, dense, None).exposed_s[0])
    assert logits > layer  # the output layer of a 128k vocabulary: the last stage paces 1F1B
    for schedule, want in (("1f1b", max(3 * layer, 2 * layer + logits)),
                           ("dualpipe", max((4 * layer + logits) / 2, 2.5 * layer))):
        r = iteration_arrays(llm, tr, StrategyArrays.from_strategies([Strategy(**base, schedule=schedule)]), sy, BARE)
        assert int(r["code"][0]) == 0
        assert float(r["stage_pace_s"][0]) == pytest.approx(want + send, rel=1e-9), schedule


@pytest.mark.parametrize("zero_stage,reshard,ratio", [(1, True, 2.0), (3, False, 2.0), (3, True, 34 / 33)])
def test_a_dualpipe_rank_syncs_both_of_its_stages(zero_stage, reshard, ratio):
    # 32 layers on 8 even stages of 4 (a vocabulary of 8: the ends weigh next to nothing, their
    # embedding, output layer and final norm 3e-6 of a stage), 16 microbatches
    # per DP rank. A DualPipe rank holds two stages, so its data-parallel traffic per iteration is
    # twice a 1F1B rank's where it moves the stage once (ZeRO-1's reduce-scatter and gather, FSDP
    # without resharding); resharded FSDP gathers per microbatch the one stage it runs (forward and
    # backward, 2 x 16 stage gathers either way) and reduces both: (32 + 2) / (32 + 1).
    llm = load_model("llama3-8b").model_copy(update={"vocab_size": 8})
    tr = TrainingSpec(sequence_length=4096, global_batch_sequences=64, total_tokens=1e9)
    sy = cluster("h100_sxm", 32)
    base = dict(tp=1, pp=8, dp=4, microbatch_size=1, zero_stage=zero_stage, recompute="full",
                fsdp_reshard_after_forward=reshard)
    one = evaluate_system(llm, tr, Strategy(**base), sy, calib=CAL)
    dual = evaluate_system(llm, tr, Strategy(**base, schedule="dualpipe"), sy, calib=CAL)
    assert isinstance(one, Metrics) and isinstance(dual, Metrics), dual
    assert dual.type_bytes.total_bytes("dp") / one.type_bytes.total_bytes("dp") == pytest.approx(ratio, rel=1e-5)


def test_zero3_with_pipelines_gathers_once_when_not_resharded():
    # FSDP under PP (torchtitan: reshard_after_forward off): one gather and one reduce-scatter of the
    # stage per iteration, instead of a gather forward and backward per microbatch.
    llm = load_model("llama3-8b")
    tr = TrainingSpec(sequence_length=4096, global_batch_sequences=64, total_tokens=1e9)
    sy = cluster("h100_sxm", 64)
    kw = dict(tp=1, pp=4, dp=16, microbatch_size=1, zero_stage=3, recompute="full")
    per_mb = evaluate_system(llm, tr, Strategy(**kw), sy, calib=CAL)
    once = evaluate_system(llm, tr, Strategy(**kw, fsdp_reshard_after_forward=False), sy, calib=CAL)
    m = 64 // 16
    # the stage's weights, gathered forward + backward per microbatch (2m) vs once, gradients once
    assert per_mb.type_bytes.total_bytes("dp") / once.type_bytes.total_bytes("dp") == pytest.approx((2 * m + 1) / 2, rel=1e-6)
    assert once.memory.other_bytes > per_mb.memory.other_bytes  # the gathered stage stays resident


def test_hsdp_shards_inside_the_node_and_all_reduces_across():
    # HSDP of 8 on 64 GPUs: weights and gradients shard over the 8 GPUs of a node (optimizer state
    # 1/8), and each 1/8 shard of the gradients is all-reduced across the 8 nodes.
    llm = load_model("llama3-8b")
    tr = TrainingSpec(sequence_length=4096, global_batch_sequences=64, total_tokens=1e9)
    sy = cluster("h100_sxm", 64)
    full = evaluate_system(llm, tr, Strategy(dp=64, zero_stage=3, recompute="full"), sy, calib=CAL)
    hsdp = evaluate_system(llm, tr, Strategy(dp=64, zero_stage=3, recompute="full", shard_group_size=8), sy, calib=CAL)
    assert hsdp.memory.optimizer_bytes == pytest.approx(full.memory.optimizer_bytes * 8, rel=1e-9)
    # the full shard rings over all 64 ranks across the rails; HSDP's gathers stay in the node and only
    # the 1/8 gradient shards cross: fewer rail bytes
    assert hsdp.type_bytes.dp_rail_bytes < full.type_bytes.dp_rail_bytes


def test_hsdp_replica_all_reduce_goes_per_layer_behind_the_backward():
    # HSDP of 8 on 64 H100s under ZeRO-3: after each layer's reduce-scatter inside the node, its 1/8
    # gradient shard is all-reduced across the 8 nodes on the same stream (PyTorch FSDP HYBRID_SHARD's
    # post-backward hook; FSDP2 on a 2-D mesh). Per layer P/L parameters: a gather of P/L x 2 B in the
    # node forward and again backward, a reduce-scatter of P/L x 2 B, and an all-reduce of its 1/8
    # across one GPU per node. With compute to spare (8K tokens per layer) and no overlap slowdown,
    # only the first layer's four collectives stay exposed; the other 31 layers' hide.
    from designer.perf.collectives import collective_estimate_vec, load_collective_calibration
    from designer.perf.compute import total_params

    llm = load_model("llama3-8b")
    n_layers = llm.layers
    tr = TrainingSpec(sequence_length=8192, global_batch_sequences=64, total_tokens=1e9)  # 1 microbatch
    sy = cluster("h100_sxm", 64)
    calib = dataclasses.replace(BARE, compute=dataclasses.replace(BARE.compute, overlap_slowdown=0.0))
    r = evaluate_system(llm, tr, Strategy(dp=64, zero_stage=3, shard_group_size=8), sy, calib=calib)
    assert isinstance(r, Metrics)
    layer_b = total_params(llm) / n_layers * 2.0
    cc = load_collective_calibration()

    def t(op, nbytes, size, per_domain, span):
        return float(collective_estimate_vec(op, nbytes, size, per_domain, span, True, sy, cc).time_s)

    node_ag, node_rs = t("all_gather", layer_b, 8, 8, 1), t("reduce_scatter", layer_b, 8, 8, 1)
    replica_ar = t("all_reduce", layer_b / 8, 8, 1, 8)
    assert r.breakdown.exposed_comm_s == pytest.approx(2 * node_ag + node_rs + replica_ar, rel=1e-6)
    # and the replicas' traffic is all of it on the network: L all-reduces of the 1/8 shards
    assert r.breakdown.dp_s == pytest.approx(n_layers * (2 * node_ag + node_rs + replica_ar), rel=1e-6)


def test_interleaved_chunks_sync_behind_the_later_chunks_backward():
    """Megatron-Core's interleaved schedule reduces each chunk's gradients once its last microbatch's
    backward is done; the last group of g = min(m, pp) microbatches runs chunk by chunk, so the
    first chunk to finish has 1 + (v-1)·g chunk passes to hide behind and the last only its own.
    By hand, with the overlap slowdown k: v = 4, g = 4 (m 8, pp 4), one pass 1 s, 3 s of
    reduction: window (1 + 3·4)/4 = 3.25 s holds it all, exposed k·3; the last chunk's 0.75 s
    behind its 0.25 s exposes 0.5 + 0.25 k, less. With v = 1 it is one pass: 2 + k."""
    from types import SimpleNamespace

    from designer.perf.iteration import chunked_exposed

    k = load_perf_calibration().compute.overlap_slowdown
    calib = SimpleNamespace(compute=SimpleNamespace(overlap_slowdown=k))
    # (m_flush: the microbatches of one pipeline schedule, all of them here)
    ctx = SimpleNamespace(v=np.array([4.0, 1.0]), m_flush=np.array([8.0, 8.0]), pp=np.array([4.0, 4.0]), calib=calib)
    got = chunked_exposed(np.array([3.0, 3.0]), np.array([1.0, 1.0]), np.array([0.01, 0.01]), ctx)
    assert got == pytest.approx([max(3 * k, 0.5 + 0.25 * k), 2 + k])
    # a long reduction behind few microbatches: the window (1 + 3·2)/4 = 1.75 s binds (m 2)
    ctx2 = SimpleNamespace(v=np.array([4.0]), m_flush=np.array([2.0]), pp=np.array([4.0]), calib=calib)
    assert chunked_exposed(np.array([3.0]), np.array([1.0]), np.array([0.01]), ctx2) == pytest.approx(
        [3.0 - 1.75 + k * 1.75])
    # one bucket never hides
    assert chunked_exposed(np.array([3.0]), np.array([100.0]), np.array([0.5]), ctx2) == pytest.approx([1.5])


def test_block_recompute_of_n_layers_is_that_share_of_full_recompute():
    """Megatron's block method (--recompute-method block --recompute-num-layers N): the first N of
    each chunk's L layers are recomputed in full, the rest keep their activations. Llama-2 7B on pp 4:
    L = 8 per stage. The recomputed forward is N/L of full recompute's, and the saved activations
    step down by the same amount per recomputed layer; N = L is full recompute."""
    llm = load_model("llama2-7b")
    tr = TrainingSpec(sequence_length=4096, global_batch_sequences=64, total_tokens=1e9)
    sy = cluster("h100_sxm", 32)
    sy = sy.model_copy(update={"gpu": sy.gpu.model_copy(update={"hbm_bytes": 1e13})})
    base = Strategy(tp=2, pp=4, dp=4, microbatch_size=1)

    def run(**kw):
        m = evaluate_system(llm, tr, base.model_copy(update=kw), sy, calib=CAL)
        assert isinstance(m, Metrics)
        return m

    none, full = run(recompute=Recompute.none), run(recompute=Recompute.full)
    part = {n: run(recompute=Recompute.full, recompute_num_layers=n) for n in (2, 4, 6, 8)}
    span = full.breakdown.compute_s - none.breakdown.compute_s
    assert span > 0
    for n, m in part.items():
        assert m.breakdown.compute_s - none.breakdown.compute_s == pytest.approx(n / 8 * span, rel=1e-9)
    act = {n: m.memory.activations_bytes for n, m in part.items()}
    assert act[2] - act[4] == pytest.approx(act[4] - act[6], rel=1e-9) and act[2] > act[4] > act[6]
    assert act[8] == pytest.approx(full.memory.activations_bytes, rel=1e-12)
    assert part[8].iteration_time_s == pytest.approx(full.iteration_time_s, rel=1e-12)
    assert none.memory.activations_bytes > act[2]
    # executed FLOPs: a quarter of full recompute's extra forward at N = 2
    assert part[2].hardware_flops_per_iteration - none.hardware_flops_per_iteration == pytest.approx(
        0.25 * (full.hardware_flops_per_iteration - none.hardware_flops_per_iteration), rel=1e-9)
    # the vectorized records carry it both ways
    st = base.model_copy(update={"recompute": Recompute.full, "recompute_num_layers": 3})
    assert StrategyArrays.from_strategies([st]).to_strategy(0) == st
    with pytest.raises(ValueError, match="recompute_num_layers 2 needs recompute 'full'"):
        Strategy(tp=2, recompute=Recompute.selective, recompute_num_layers=2)


def test_moe_tokens_are_split_over_tp_under_sp():
    # Mixtral layer, tp 4, etp 1, sp: each rank dispatches its s/4 tokens, so the expert FLOPs per GPU
    # are a quarter of the unsplit count, and the all-to-all bytes too. The router, replicated over
    # TP, scores the rank's own s/4 tokens (Megatron-Core router.py: a sequence-parallel input), so
    # the whole layer's FLOPs per GPU are a quarter of tp 1's.
    llm = load_model("mixtral-8x7b")
    one = np.ones(1)
    prec = cmp.Precisions(gemm_peak_flops=989e12, gemm_max_eff=0.7, hi_peak_flops=989e12, hi_max_eff=0.7,
                          cast_bytes_per_element=0.0, attn_fwd_eff=np.ones(5) * 0.5, attn_bwd_eff=np.ones(5) * 0.4)
    kw = dict(moe_layer=True, b=one, s=4096, cp=one, ep=one * 8, sp=np.ones(1, bool), kernel=np.zeros(1, int),
              prec=prec, hbm_bytes_per_s=3.35e12, calib=CAL.compute)
    w1 = cmp.layer_forward(llm, tp=one, etp=one, **kw)
    w4 = cmp.layer_forward(llm, tp=one * 4, etp=one, **kw)
    expert = lambda w, t: float(w.dense_flops[0]) - 2 * 4096 * (6144 + 4096) * 4096 / t - 2 * 4096 / t * 8 * 4096  # noqa: E731
    assert expert(w4, 4) == pytest.approx(expert(w1, 1) / 4, rel=1e-9)
    assert float(w4.dense_flops[0]) == pytest.approx(float(w1.dense_flops[0]) / 4, rel=1e-12)



@pytest.mark.parametrize("moe_layer", [False, True])
def test_mla_down_projections_run_on_the_ranks_own_tokens_under_sp(moe_layer):
    # DeepSeek-V3's down projections (h -> q LoRA 1536 and h -> kv LoRA 512 + rope 64) are replicated
    # over TP and take the layer input as it comes: s/tp tokens under sequence parallelism
    # (Megatron-Core multi_latent_attention.py, "q_compressed: [s / TP, b, q_lora_rank]"); the up
    # projections and the output projection split by heads, the MLP (or the experts and the router)
    # by TP. So a layer's FLOPs per GPU at tp 8 with SP are an eighth of tp 1's; without SP each rank
    # repeats the whole down projection, 2·7168·2112 FLOPs per token of the 4096.
    llm = load_model("deepseek-v3")
    one = np.ones(1)
    prec = cmp.Precisions(gemm_peak_flops=989e12, gemm_max_eff=0.7, hi_peak_flops=989e12, hi_max_eff=0.7,
                          cast_bytes_per_element=0.0, attn_fwd_eff=np.ones(5) * 0.5, attn_bwd_eff=np.ones(5) * 0.4)
    kw = dict(moe_layer=moe_layer, b=one, s=4096, cp=one, ep=one * 8, etp=one, kernel=np.zeros(1, int), prec=prec,
              hbm_bytes_per_s=3.35e12, calib=CAL.compute)
    w1 = cmp.layer_forward(llm, tp=one, sp=np.ones(1, bool), **kw)
    w8 = cmp.layer_forward(llm, tp=one * 8, sp=np.ones(1, bool), **kw)
    assert float(w8.dense_flops[0]) == pytest.approx(float(w1.dense_flops[0]) / 8, rel=1e-12)
    if not moe_layer:
        no_sp = cmp.layer_forward(llm, tp=one * 8, sp=np.zeros(1, bool), **kw)
        down = 2 * 7168 * (1536 + 512 + 64) * 4096
        assert float(no_sp.dense_flops[0]) - float(w8.dense_flops[0]) == pytest.approx(down * 7 / 8, rel=1e-12)

def test_part_of_an_nvl72_rack_can_be_stated(tmp_path):
    # 8 GPUs of a GB200 NVL72 rack: one NVLink domain of 8, no scale-out traffic needed
    from designer.scenario import Scenario, evaluate_scenario

    sc = Scenario.model_validate({
        "model": "llama3-8b",
        "training": {"sequence_length": 8192, "global_batch_sequences": 128, "precision": "fp8", "total_tokens": 1e12},
        "strategy": {"dp": 8, "microbatch_size": 2},
        "system": {"platform": "gb200_nvl72", "n_gpus": 8, "gpus_per_domain": 8, "nic": "cx7_400g", "switch": "qm9790"}})
    r = evaluate_scenario(sc)
    assert isinstance(r, Metrics) and r.n_gpus == 8
    assert r.tier_bytes.rail_bytes == 0 and r.tier_bytes.spine_bytes == 0 and r.tier_bytes.hb_bytes > 0


def test_optimizer_offload_by_hand():
    # Llama-3 8B on 8 H100s, DP 8 with ZeRO-1: the 12 B/param of fp32 master + Adam leave HBM; the
    # step streams 2 + 2 B/param over PCIe Gen5 (64 GB/s) and runs 30 B/param on the host's DDR5
    # (77 GB/s per GPU, catalog) for the 1/8 shard.
    from designer.perf.compute import total_params

    llm = load_model("llama3-8b")
    tr = TrainingSpec(sequence_length=8192, global_batch_sequences=8, total_tokens=1e9)
    sy = cluster("h100_sxm", 8)
    kw = dict(dp=8, zero_stage=1, recompute="full")
    on = evaluate_system(llm, tr, Strategy(**kw), sy, calib=CAL)
    off = evaluate_system(llm, tr, Strategy(**kw, offload_optimizer=True), sy, calib=CAL)
    assert isinstance(off, Metrics) and off.memory.optimizer_bytes == 0.0
    assert on.memory.optimizer_bytes == pytest.approx(12 * total_params(llm) / 8, rel=1e-5)  # (final norm)
    local = total_params(llm) / 8
    step_on = local * 30 / (3.35e12 * CAL.compute.hbm_efficiency)
    step_off = local * 4 / 64e9 + local * 30 / 77e9
    assert off.iteration_time_s - on.iteration_time_s == pytest.approx(step_off - step_on, rel=1e-4)


def test_optimizer_offload_beyond_host_memory_is_explained():
    # Llama-3 70B on one 8-GPU node with TP 8: 105 GB of optimizer state per GPU, hosts of 64 GB
    llm = load_model("llama3-70b")
    tr = TrainingSpec(sequence_length=8192, global_batch_sequences=8, total_tokens=1e9)
    sy = cluster("h100_sxm", 8)
    sy = sy.model_copy(update={"gpu": sy.gpu.model_copy(update={"host_memory_bytes": 64e9})})
    r = evaluate_system(llm, tr, Strategy(tp=8, dp=1, zero_stage=1, recompute="full", offload_optimizer=True,
                                          sequence_parallel=True), sy, calib=BARE)
    assert not isinstance(r, Metrics) and r.kind == "memory" and "host memory" in r.reason


def test_deduplicated_dispatch_by_hand():
    # DeepSeek-V3 (256 experts, top-8, 4 of 8 router groups) on 8 nodes, a group per node: 4 distinct
    # nodes per token, where an ungrouped router would reach 8·(1 − C(224, 8)/C(256, 8)), so a
    # node-deduplicated dispatch sends 4/8 of the per-expert copies; without groups (Qwen3-235B: 128
    # experts, top-8, 4 nodes) D = 4·(1 − C(96, 8)/C(128, 8)).
    from math import comb

    from designer.perf.collectives import expected_distinct_domains, routing_reach

    ds, qw = load_model("deepseek-v3"), load_model("qwen3-235b-a22b")
    assert 8 * (1 - comb(224, 8) / comb(256, 8)) > 4
    assert float(routing_reach(256, 8, 8, 8, groups=ds.moe.routing_groups)[0]) == pytest.approx(4.0)
    want = 4 * (1 - comb(96, 8) / comb(128, 8)) / 8
    assert float(expected_distinct_domains(128, 8, 4, qw.moe.max_nodes_per_token)) / 8 == pytest.approx(want)
    assert float(expected_distinct_domains(128, 8, 1)) == pytest.approx(1.0)  # inside one node: one domain
    tr = TrainingSpec(sequence_length=4096, global_batch_sequences=256, total_tokens=1e12)
    st = Strategy(tp=1, pp=8, dp=32, ep=32, zero_stage=1, recompute="full")
    sy = cluster("h100_sxm", 256)
    a = evaluate_system(qw, tr, st, sy, calib=CAL)
    b = evaluate_system(qw, tr, st.model_copy(update={"moe_dispatcher": "deepep"}), sy, calib=CAL)
    # on the network: the all-to-all sends k copies of each token, (p − g)/p of them off the node;
    # the deduplicated dispatch D copies, (N − 1)/N of them off the node (N = 4 nodes of 8 here),
    # and forwards one copy per distinct rank inside the node: the network bytes fall by D/k
    def net(r):
        return r.type_bytes.ep_rail_bytes + r.type_bytes.ep_spine_bytes

    assert net(b) == pytest.approx(net(a) * want, rel=1e-9)
    assert b.type_bytes.ep_spine_bytes == 0.0  # the RDMA phase stays on the rails
    assert b.iteration_time_s < a.iteration_time_s


def test_round_robin_gate_reach_by_hand():
    # 12 experts, top-5, in blocks of 3 per rank: the 12 tokens' starts t*5 mod 12 cover every
    # residue mod 3 four times; 5 consecutive experts span 2 ranks from residues 0 and 1, 3 from
    # residue 2 -> 7/3 ranks. Two domains of 6 experts: 1 domain from starts 0 and 1 mod 6, else 2 -> 5/3.
    from designer.perf.collectives import round_robin_reach, routing_reach

    assert round_robin_reach(12, 5, 1, 4) == pytest.approx((1.0, 7 / 3))
    assert round_robin_reach(12, 5, 2, 2) == pytest.approx((5 / 3, 7 / 3))
    # Qwen3-30B-A3B on EP 8 (16 experts per rank, top-8 aligned at multiples of 8): one rank per token;
    # DeepSeek-V3 on EP 64 over 8 nodes (4 per rank): two ranks, one node
    assert round_robin_reach(128, 8, 1, 8) == (1.0, 1.0)
    assert round_robin_reach(256, 8, 8, 8) == (1.0, 2.0)
    # the forwarding copies are the distinct ranks: 1 under the gate; uniform routing limited to 4 of 8
    # nodes draws its 8 experts from those nodes' 128 on 32 ranks: 32(1 - C(124, 8)/C(128, 8))
    from math import comb

    d, copies = routing_reach(128, 8, 1, 8, None, "round_robin")
    assert (float(d), float(copies)) == (1.0, 1.0)
    d_u, k_u = routing_reach(256, 8, 8, 8, 4)
    assert float(d_u) == 4.0
    assert float(k_u) == pytest.approx(32 * (1 - comb(124, 8) / comb(128, 8)), rel=1e-12)
    with pytest.raises(ValueError, match="moe_routing"):
        routing_reach(128, 8, 1, 8, None, "random")


def test_round_robin_gate_moves_fewer_dispatch_bytes():
    # Qwen3-30B-A3B, EP 8 on one H100 node, DeepEP: under the round-robin gate every token's 8 experts
    # sit on one rank, so the NVLink bytes of the deduplicated dispatch fall by the ratio of the
    # copies (1 rank against uniform routing's 8(1 - C(112, 8)/C(128, 8)) = 5.30 of 8)
    from math import comb

    llm = load_model("qwen3-30b-a3b")
    st = Strategy(tp=1, pp=1, dp=8, ep=8, zero_stage=3, recompute="full", moe_dispatcher="deepep")
    sy = cluster("h100_sxm", 8)
    runs = {}
    for routing in ("uniform", "round_robin"):
        # both at the mean load (a round-robin gate is; TrainingSpec.moe_load_balance), so only the reach differs
        tr = TrainingSpec(sequence_length=4096, global_batch_sequences=64, total_tokens=1e12, moe_routing=routing,
                          moe_load_balance="forced")
        runs[routing] = evaluate_system(llm, tr, st, sy, calib=CAL)
    r_uni = 8 * (1 - comb(112, 8) / comb(128, 8))
    u, rr = runs["uniform"].type_bytes.ep_hb_bytes, runs["round_robin"].type_bytes.ep_hb_bytes
    assert rr == pytest.approx(u / r_uni, rel=1e-9)
    assert runs["round_robin"].iteration_time_s < runs["uniform"].iteration_time_s


def test_interleaved_pipeline_sends_hide_behind_the_other_chunks():
    # Llama-3 70B on 8 H100 nodes, TP 8 inside each node, PP 8 across them, 2 chunks per GPU, 16
    # microbatches. Megatron-Core's interleaved schedule posts each chunk's sends and receives ahead
    # (overlap_p2p_comm): of the m·v = 32 forward chunk steps, (v − 1)·pp + pp − 1 = 15 are warm-up and
    # stay exposed; the steady 17/32 hide behind the stage's compute (far longer than the sends), at
    # the overlap slowdown's price. Every stage gains δ per microbatch, and the bubble (pp − 1)·δ/v.
    # The price scales with the channels a send to the next node holds: NCCL 2.29+ gives a network
    # peer ceil(50 GB/s / 14 GB/s) = 4 (a 400 Gb/s NIC per GPU), against the 2 per NVLink a peer in
    # the node gets, 36 on the H100's 18 links: 4/36 of a collective's.
    llm = load_model("llama3-70b")
    tr = TrainingSpec(sequence_length=4096, global_batch_sequences=16, total_tokens=1e12)
    sy = cluster("h100_sxm", 64)
    st = Strategy(tp=8, pp=8, dp=1, sequence_parallel=True, schedule=Schedule.interleaved, virtual_stages=2,
                  zero_stage=1, recompute="full")
    on = evaluate_system(llm, tr, st, sy, calib=CAL)
    off = evaluate_system(llm, tr, st.model_copy(update={"overlap_pp_comm": False}), sy, calib=CAL)
    assert on.breakdown.pp_s == off.breakdown.pp_s > 0
    m, pp, v = 16, 8, 2
    per_mb = on.breakdown.pp_s / m
    delta = per_mb * (17 / 32) * (1 - CAL.compute.overlap_slowdown * 4 / 36)
    assert off.iteration_time_s - on.iteration_time_s == pytest.approx((m + (pp - 1) / v) * delta, rel=1e-6)
    # 1F1B blocks on its sends: the flag changes nothing there
    plain = st.model_copy(update={"schedule": Schedule.one_f_one_b, "virtual_stages": 1})
    a = evaluate_system(llm, tr, plain, sy, calib=CAL)
    b = evaluate_system(llm, tr, plain.model_copy(update={"overlap_pp_comm": False}), sy, calib=CAL)
    assert a.iteration_time_s == b.iteration_time_s


def test_each_pipeline_flush_fills_and_drains_the_pipeline():
    # llama3-8b on 8 even stages of 4 layers (no TP, a vocabulary of 8 so the last stage is not
    # slower), 64 microbatches. One 1F1B schedule costs (p-1) stage times of fill and drain beside
    # the m stage times of its steady state; PyTorch pipelining, which runs one schedule per
    # gradient-accumulation step, pays it once per step: 4 schedules of 16 microbatches add
    # 3 (p-1) stage times. Nothing else changes: the microbatches held in flight stay min(m, p).
    llm = load_model("llama3-8b").model_copy(update={"vocab_size": 8})
    tr = TrainingSpec(sequence_length=4096, global_batch_sequences=64, total_tokens=1e9)
    sy = cluster("h100_sxm", 8)
    base = dict(tp=1, pp=8, dp=1, microbatch_size=1, zero_stage=1, recompute="full")
    one = evaluate_system(llm, tr, Strategy(**base), sy, calib=BARE)
    four = evaluate_system(llm, tr, Strategy(**base, pipeline_flushes=4), sy, calib=BARE)
    assert isinstance(one, Metrics) and isinstance(four, Metrics), four
    stage_s = (one.iteration_time_s - one.breakdown.bubble_s) / 64  # the steady state: m stage times
    # (the end stages' embedding and 8-word output layer make the pace stage a little slower than
    # the mean one, whose time the fill counts)
    assert one.breakdown.bubble_s == pytest.approx(7 * stage_s, rel=0.005)
    assert four.breakdown.bubble_s == pytest.approx(4 * one.breakdown.bubble_s, rel=1e-9)
    assert four.iteration_time_s - one.iteration_time_s == pytest.approx(3 * one.breakdown.bubble_s, rel=1e-9)
    assert four.memory_per_gpu_bytes == one.memory_per_gpu_bytes
    # GPipe holds every microbatch of its schedule: a quarter of them per flush
    gpipe = dict(base, schedule="gpipe")
    g1 = evaluate_system(llm, tr, Strategy(**gpipe), sy, calib=BARE)
    g4 = evaluate_system(llm, tr, Strategy(**gpipe, pipeline_flushes=4), sy, calib=BARE)
    assert g4.memory_per_gpu_bytes < g1.memory_per_gpu_bytes
    # flushes must divide the microbatches: one line naming both
    bad = evaluate_system(llm, tr, Strategy(**base, pipeline_flushes=5), sy, calib=BARE)
    assert not isinstance(bad, Metrics) and "pipeline_flushes" in bad.reason


@pytest.mark.parametrize("sharding", [dict(zero_stage=0), dict(zero_stage=3, fsdp_reshard_after_forward=False)])
def test_each_pipeline_schedule_syncs_the_gradients_of_its_accumulation_step(sharding):
    # PyTorch pipelining turns the gradient sync back on for the last backward of each schedule step
    # (torch.distributed.pipelining.stage, backward_maybe_with_nosync), so a run of 4 schedules per
    # iteration reduces its gradients 4 times: DDP all-reduces the stage's buffer 4 times, FSDP
    # (weights kept from forward to backward) gathers each layer's weights and reduce-scatters its
    # gradients once per schedule. Megatron-Core's single schedule syncs once. Every DP byte moved
    # is then 4 times one schedule's.
    llm = load_model("llama3-8b")
    tr = TrainingSpec(sequence_length=4096, global_batch_sequences=128, total_tokens=1e9)
    sy = cluster("h100_sxm", 32)
    base = dict(tp=1, pp=2, dp=16, microbatch_size=1, recompute="full", **sharding)
    one = evaluate_system(llm, tr, Strategy(**base), sy, calib=CAL)
    four = evaluate_system(llm, tr, Strategy(**base, pipeline_flushes=4), sy, calib=CAL)
    assert isinstance(one, Metrics) and isinstance(four, Metrics)
    assert one.breakdown.dp_s > 0
    assert four.breakdown.dp_s == pytest.approx(4 * one.breakdown.dp_s, rel=1e-9)


def test_each_data_parallel_bucket_pays_a_collective_call():
    # ZeRO-1 of Llama-3 8B over 64 H100s (one stage holds every weight: G = 2 B x parameters of
    # bf16 gradients). One bucket: one reduce-scatter and one all-gather of the whole buffer. Buckets
    # of b bytes: k = ceil(G / b) calls of each, every extra call paying a call's fixed cost (the time
    # of a 1-byte collective on the same group: its latency and host floor) over the same bytes.
    from designer.perf import collectives as coll
    from designer.perf.placement import place

    llm = load_model("llama3-8b")
    tr = TrainingSpec(sequence_length=4096, global_batch_sequences=64, total_tokens=1e9)
    sy = cluster("h100_sxm", 64)
    kw = dict(dp=64, zero_stage=1, recompute="full", overlap_dp_comm=True)
    one = evaluate_system(llm, tr, Strategy(**kw, dp_bucket_bytes=1e12), sy, calib=BARE)
    small = evaluate_system(llm, tr, Strategy(**kw, dp_bucket_bytes=1e7), sy, calib=BARE)
    k = np.ceil(2.0 * cmp.total_params(llm) / 1e7)
    g = place(np.array([1]), np.array([1]), np.array([64]), np.array([1]), np.array([1]), sy).grad
    fixed = sum(coll.collective_time_s_vec(op, np.array([1.0]), g.size, g.ranks_per_domain, g.extent_domains,
                                           g.same_rail, sy, CAL.collectives)[0] for op in ("reduce_scatter", "all_gather"))
    assert small.breakdown.dp_s - one.breakdown.dp_s == pytest.approx((k - 1) * fixed, rel=1e-6)
    assert small.type_bytes.total_bytes("dp") == pytest.approx(one.type_bytes.total_bytes("dp"), rel=1e-12)
    # Megatron-Core's default bucket: max(40M, 1M x dp) elements (distributed_data_parallel.py)
    assert CAL.dp_bucket_elements(8) == 40e6 and CAL.dp_bucket_elements(64) == 64e6


def test_a_precision_the_gpu_lacks_is_refused():
    llm = load_model("llama3-8b")
    st = Strategy(dp=8)
    for gpu, prec in (("a100_80gb", "fp8"), ("h100_sxm", "mxfp8"), ("h200_sxm", "nvfp4")):
        tr = TrainingSpec(sequence_length=4096, global_batch_sequences=64, total_tokens=1e9, precision=prec)
        m = evaluate_system(llm, tr, st, cluster(gpu, 8), calib=CAL)
        assert not isinstance(m, Metrics) and m.kind == "compatibility" and f"precision {prec}" in m.reason
    tr = TrainingSpec(sequence_length=4096, global_batch_sequences=64, total_tokens=1e9, precision="mxfp8")
    assert isinstance(evaluate_system(llm, tr, st, cluster("b200", 8), calib=CAL), Metrics)


def test_an_expert_tp_that_does_not_divide_the_experts_is_named():
    llm = load_model("mixtral-8x7b")
    tr = TrainingSpec(sequence_length=4096, global_batch_sequences=64, total_tokens=1e9)
    m = evaluate_system(llm, tr, Strategy(tp=2, ep=8, dp=4, expert_tp=3, sequence_parallel=True),
                        cluster("h100_sxm", 8), calib=CAL)
    assert m.reason == "expert_tp 3 does not divide the expert FFN size 14336"


def _arrays(llm, tr, strategies, sy, calib=CAL):
    return iteration_arrays(llm, tr, StrategyArrays.from_strategies(strategies), sy, calib)


def test_host_bound_stages_fill_and_drain_at_their_own_pace():
    # gpt-1.7b (24 layers, a vocabulary of 8) on 4 even stages of 6 layers at a 256-token sequence:
    # each layer's GPU time is below the host's launch time per layer, so every stage lasts its
    # launches, 6 x framework_per_layer_s. The fill and drain of a 1F1B pipeline are then (p - 1)
    # such stage times, as for GPU-bound even stages.
    llm = load_model("gpt-1.7b").model_copy(update={"vocab_size": 8})
    tr = TrainingSpec(sequence_length=256, global_batch_sequences=16, total_tokens=1e9)
    sy = cluster("h100_sxm", 8)
    calib = dataclasses.replace(CAL, compute=dataclasses.replace(
        CAL.compute, optimizer_bytes_per_param=0.0, framework_per_iteration_s=0.0))
    r = _arrays(llm, tr, [Strategy(tp=2, pp=4, dp=1, microbatch_size=1, zero_stage=0)], sy, calib)
    pace = float(r["stage_pace_s"][0])
    assert pace == pytest.approx(6 * CAL.compute.framework_per_layer_s, rel=1e-9)
    assert float(r["stage_mean_s"][0]) == pytest.approx(pace, rel=1e-9)
    assert float(r["bubble_s"][0]) == pytest.approx(3 * pace, rel=1e-9)


def test_a_first_stage_that_paces_syncs_its_own_parameters():
    # Llama 3 8B on 4 stages, ZeRO-1 over 8: the data-parallel bytes are those of the stage that
    # paces, a linear function of its parameters. Even stages (8/8/8/8): the last one paces (its
    # output layer), 8 layers + the output matrix + the final norm. First/last of 12/4: the first
    # paces, 12 layers + the input embedding.
    llm = load_model("llama3-8b")
    tr = TrainingSpec(sequence_length=4096, global_batch_sequences=64, total_tokens=1e9)
    sy = cluster("h100_sxm", 32)
    base = dict(tp=1, pp=4, dp=8, microbatch_size=1, zero_stage=1, recompute="full")
    r = _arrays(llm, tr, [Strategy(**base), Strategy(**base, pp_first_stage_layers=12, pp_last_stage_layers=4)], sy)
    dp_bytes = sum(r[f"type_dp_{t}_bytes"] for t in ("hb", "rail", "spine"))
    layer, emb = cmp.dense_layer_params(llm), llm.vocab_size * llm.hidden_size
    even_last = 8 * layer + emb + cmp.final_norm_params(llm)
    first = 12 * layer + emb
    assert float(dp_bytes[1] / dp_bytes[0]) == pytest.approx(first / even_last, rel=1e-9)


def test_the_pace_middle_stage_counts_its_moe_layers_past_the_dense_prefix():
    # DeepSeek-V3 (3 dense layers, then 58 MoE) on 16 stages with first/last of 2/3: 14 middle
    # stages of 4 layers. The first of them (layers 2-5) still holds the dense layer 2; every later
    # one holds 4 MoE layers, and one of those paces.
    a = _layout(load_model("deepseek-v3"), pp=16, dp=1, pp_first_stage_layers=2, pp_last_stage_layers=3)
    assert (int(a.mid_max[0]), int(a.mid_moe[0])) == (4, 4)


def test_expert_optimizer_states_shard_over_the_expert_data_parallel_group():
    # Mixtral 8x7B on 64 GPUs at TP 8, expert TP 1, EP 2: the expert weights are replicated over
    # 64 / (2 x 1) = 32 ranks, and ZeRO-1 shards their optimizer states over those 32 (as the memory
    # model does); the dense ones over DP 8. The step is memory-bound over the local shard.
    from designer.perf import iteration as it

    llm = load_model("mixtral-8x7b")
    tr = TrainingSpec(sequence_length=4096, global_batch_sequences=256, total_tokens=1e9)
    sy = cluster("h100_sxm", 64)
    s = Strategy(tp=8, pp=1, dp=8, ep=2, expert_tp=1, microbatch_size=1, zero_stage=1, recompute="full")
    c = it._context(llm, tr, StrategyArrays.from_strategies([s]), sy, CAL)
    d, mo = it.compute_term(c, c.dense, False), it.compute_term(c, c.moe, True)
    stt = it.stage_times(c, d, mo, 0.0, 0.0, it.pp_term(c, d, mo).exposed_s)
    sp_ = it.stage_params(c, stt)
    local = float(sp_.peak_dense[0]) / 8 + float(sp_.peak_expert[0]) / 32
    want = float(cmp.optimizer_step_s(np.array([local]), sy.gpu.hbm_bandwidth_bytes_per_s, CAL.compute)[0])
    assert float(it.optimizer_term(c, sp_)[0]) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("schedule, v, loss", [("gpipe", 1, "fused"), ("interleaved", 4, "fused"), ("gpipe", 1, "eager")])
def test_the_last_stage_holds_its_schedules_microbatches(schedule, v, loss):
    # Llama 3 8B on 8 stages of 4 layers, 32 microbatches, full recompute. The last stage holds,
    # under GPipe, every microbatch's activations (32 x 4 layers) and its loss tensors (the logits'
    # 4 bytes each, kept until that microbatch's backward); under the interleaved schedule its
    # (v-1)·pp = 24 warm-up chunks and the one in flight, 25 chunks of a v-th of the stage
    # (Megatron-Core's num_warmup_microbatches on the last rank), and one microbatch's logits (the
    # warm-up chunks are earlier model chunks): more than the first rank's, so it is the worst rank.
    from designer.perf import iteration as it

    llm = load_model("llama3-8b")
    tr = TrainingSpec(sequence_length=4096, global_batch_sequences=32, total_tokens=1e9)
    sy = cluster("h100_sxm", 8)
    s = Strategy(tp=1, pp=8, dp=1, microbatch_size=1, zero_stage=1, recompute="full", schedule=schedule,
                 virtual_stages=v, cross_entropy=loss)
    c = it._context(llm, tr, StrategyArrays.from_strategies([s]), sy, CAL)
    acts = it.layer_activation_bytes(c)
    act_d, full_d = acts.dense, acts.dense_full
    held = 32 if schedule == "gpipe" else ((v - 1) * 8 + 1) / v
    # the loss at its peak: 4 bytes per logit fused, 12 eager (memory.LOGIT_BYTES_AT_PEAK), of which
    # 4 (the fp32 buffer) stay saved for each microbatch GPipe holds
    peak = 4.0 if loss == "fused" else 12.0
    logits = 4096 * llm.vocab_size * (peak + (31 * 4.0 if schedule == "gpipe" else 0.0))
    want = held * 4 * float(act_d[0]) + float(full_d[0]) + logits
    r = _arrays(llm, tr, [s], sy)
    assert float(r["activations_bytes"][0]) == pytest.approx(want, rel=1e-9)



def test_a_middle_rank_holds_the_parameters_of_its_heaviest_middle_stage():
    # DeepSeek-V3 (3 dense layers, then MoE) on 16 stages with first/last of 2/3: the first middle
    # stage (layers 2-5) holds the dense layer 2 and 3 MoE layers, the later ones 4 MoE layers. With
    # EP 8 a MoE layer's experts (256 x 3 x 7168 x 2048) over 8 ranks outweigh a dense layer's MLP
    # difference, so the middle rank's expert parameters are 4 layers' worth: 4 x moe_e / 8.
    from designer.perf import iteration as it

    llm = load_model("deepseek-v3-no-mtp")
    tr = TrainingSpec(sequence_length=4096, global_batch_sequences=1024, total_tokens=1e12)
    sy = cluster("h100_sxm", 1024)
    s = Strategy(tp=1, pp=16, dp=64, ep=8, expert_tp=1, zero_stage=1, microbatch_size=1, recompute="full",
                 pp_first_stage_layers=2, pp_last_stage_layers=3)
    c = it._context(llm, tr, StrategyArrays.from_strategies([s]), sy, CAL)
    d, mo = it.compute_term(c, c.dense, False), it.compute_term(c, c.moe, True)
    stt = it.stage_times(c, d, mo, 0.0, 0.0, it.pp_term(c, d, mo).exposed_s)
    sp_ = it.stage_params(c, stt)
    _, moe_e = cmp.moe_layer_params(llm)
    assert (int(c.stages.mid_first_moe[0]), int(c.stages.mid_moe[0])) == (3, 4)
    assert float(sp_.rank_expert[1][0]) == pytest.approx(4 * moe_e / 8, rel=1e-12)


@pytest.mark.parametrize("shared_experts, blocks", [(0, 1), (1, 2)])
def test_an_moe_layer_gathers_over_tp_for_its_attention_and_shared_experts_only(shared_experts, blocks):
    # Mixtral 8x7B at TP 4 with SP, expert TP 1: the routed experts take the rank's own s/4 tokens
    # through the dispatcher, so only the attention's input is gathered and its output reduce-
    # scattered over TP (Megatron-Core token_dispatcher.py gathers over expt_tp alone). A layer's TP
    # bytes are then half a dense layer's of the same width; with a shared expert, itself a TP MLP on
    # the gathered sequence, the same as a dense layer's.
    base = load_model("mixtral-8x7b")
    moe = base.moe.model_copy(update={"shared_experts": shared_experts})
    llm = base.model_copy(update={"moe": moe})
    dense = base.model_copy(update={"moe": None})
    tr = TrainingSpec(sequence_length=4096, global_batch_sequences=64, total_tokens=1e9)
    sy = cluster("h100_sxm", 8)
    s = [Strategy(tp=4, dp=2, ep=4, expert_tp=1, sequence_parallel=True, microbatch_size=1, recompute="full")]
    tp_bytes = [float(_arrays(m, tr, s, sy)["type_tp_hb_bytes"][0]) for m in (llm, dense)]
    assert tp_bytes[0] / tp_bytes[1] == pytest.approx(blocks / 2, rel=1e-12)


def test_expert_tp_gathers_the_received_tokens_over_its_group():
    # Mixtral 8x7B on one 8-GPU node at TP 4 with SP, EP 4: expert TP 2 adds, per MoE layer and
    # microbatch, an all-gather of the tokens each rank received over its expert-TP pair after the
    # dispatch and a reduce-scatter before the combine, and their mirrors backward; full recompute
    # repeats the forward's: 3 + 3. Each moves, per rank, (etp - 1)/etp of the gathered total
    # etp x received, i.e. the received bytes: b·(s/tp)·load·top_k·h·2 with the default load
    # imbalance (the busiest rank's share). The all-to-all over EP 4 is the same in both.
    llm = load_model("mixtral-8x7b")
    tr = TrainingSpec(sequence_length=4096, global_batch_sequences=64, total_tokens=1e9)
    sy = cluster("h100_sxm", 8)
    base = dict(tp=4, dp=2, ep=4, sequence_parallel=True, microbatch_size=1, recompute="full")
    r = _arrays(llm, tr, [Strategy(**base, expert_tp=1), Strategy(**base, expert_tp=2)], sy)
    from designer.perf import iteration as it
    load = float(it._context(llm, tr, StrategyArrays.from_strategies([Strategy(**base)]), sy, CAL).expert_load)
    received = 1 * (4096 / 4) * load * 2 * 4096 * 2
    per_layer = 6 * received
    want = per_layer * 32 * r["microbatches"][1]
    assert float(r["type_ep_hb_bytes"][1] - r["type_ep_hb_bytes"][0]) == pytest.approx(want, rel=1e-9)


def test_8_bit_weights_are_kept_only_where_megatron_gathers_them():
    # Llama 3 8B, FP8 current scaling with the 8-bit weight gather: with the distributed optimizer
    # (ZeRO-1) the weights are 1 byte + the 1-byte transpose; at ZeRO-0 Megatron-LM refuses the gather
    # ("--fp8-param-gather only supported with distributed optimizer ..."), and beside an offloaded
    # optimizer it needs delayed scaling: there the weights stay 16-bit with the 2-byte fp8 copies,
    # as without the gather
    llm = load_model("llama3-8b")
    sy = cluster("h100_sxm", 8)
    for zero, offload, same_as_without in ((1, False, False), (0, False, True), (1, True, True)):
        got = []
        for gather in (True, False):
            tr = TrainingSpec(sequence_length=4096, global_batch_sequences=64, total_tokens=1e9, precision="fp8",
                              fp8_recipe="current", fp8_param_gather=gather)
            s = Strategy(tp=1, dp=8, zero_stage=zero, offload_optimizer=offload, microbatch_size=1, recompute="full")
            got.append(float(_arrays(llm, tr, [s], sy)["weights_bytes"][0]))
        assert (got[0] == got[1]) == same_as_without, (zero, offload, got)
        if not same_as_without:
            # the transformer linears: 1 + 1 bytes against 2 + 2; the embedding, the output layer and
            # the final norm (V·h·2 + h, no 8-bit copies) 2 bytes either way
            plain = llm.vocab_size * llm.hidden_size * 2 + llm.hidden_size
            linear = (got[1] - 2 * plain) / 4
            assert got[0] == pytest.approx(2 * linear + 2 * plain, rel=1e-12)
            assert linear == pytest.approx(cmp.total_params(llm) - plain, rel=1e-12)


@pytest.mark.parametrize("batch, flushes, feasible", [(4, 1, False), (12, 1, False), (16, 1, True), (24, 1, True),
                                                       (16, 2, True), (24, 2, False)])
def test_interleaving_needs_the_microbatches_in_whole_groups_of_pp(batch, flushes, feasible):
    # Megatron-Core's interleaved schedule takes the microbatches pp at a time per virtual stage and
    # raises unless m >= pp and m is a multiple of pp (schedules.py, microbatch_group_size_per_vp_stage
    # defaulting to pp). Llama-3 70B, PP 8, DP 1, microbatch 1: m = batch / flushes per schedule.
    llm = load_model("llama3-70b")
    tr = TrainingSpec(sequence_length=4096, global_batch_sequences=batch, total_tokens=1e12)
    sy = cluster("h100_sxm", 64)
    st = Strategy(tp=8, pp=8, dp=1, sequence_parallel=True, schedule=Schedule.interleaved, virtual_stages=2,
                  recompute="full", pipeline_flushes=flushes)
    m = evaluate_system(llm, tr, st, sy, calib=CAL)
    assert isinstance(m, Metrics) is feasible
    if not feasible:
        assert f"the {batch // flushes} microbatches of a pipeline schedule must be a multiple of" in m.reason
    # 1F1B takes any count
    assert isinstance(evaluate_system(llm, tr, st.model_copy(update={"schedule": Schedule.one_f_one_b,
                                                                       "virtual_stages": 1}), sy, calib=CAL), Metrics)


def test_expert_gradient_buckets_take_the_dense_data_parallel_groups_size():
    # Megatron-Core sets its bucket once from the dense data-parallel group, max(40M, 1M x dp)
    # elements (distributed_data_parallel.py), and the expert buffers use it too. Mixtral 8x7B, EP 8
    # over DP 64: the dense group of 64 gives 64M-element buckets (bf16 gradients here: 128 MB); the
    # expert group of 8 would give 40M. The default therefore prices the same as 128 MB buckets stated.
    llm = load_model("mixtral-8x7b")
    tr = TrainingSpec(sequence_length=4096, global_batch_sequences=256, total_tokens=1e9)
    sy = cluster("h100_sxm", 64)
    kw = dict(dp=64, ep=8, zero_stage=1, recompute="full", overlap_dp_comm=True)
    default = evaluate_system(llm, tr, Strategy(**kw), sy, calib=CAL)
    stated = evaluate_system(llm, tr, Strategy(**kw, dp_bucket_bytes=CAL.dp_bucket_elements(64) * 2), sy, calib=CAL)
    expert_sized = evaluate_system(llm, tr, Strategy(**kw, dp_bucket_bytes=CAL.dp_bucket_elements(8) * 2), sy,
                                   calib=CAL)
    assert default.breakdown.dp_s == stated.breakdown.dp_s != expert_sized.breakdown.dp_s


def test_pytorchs_interleaved_schedule_runs_fewer_microbatches_than_stages_at_their_cost():
    # PyTorch's ScheduleInterleaved1F1B (torchtitan; the batch-first layout) runs max(1, m // pp)
    # rounds and needs m to be a multiple of them: m = 2 or 9 on pp 4 is no multiple of 4, but 2 runs
    # (one round) and 9 does not (two rounds). With m < pp a microbatch still passes all v·pp chunks
    # in turn: the m microbatches take (pp + (m − 1)/v)·t, so the bubble is ((pp − 1) + (pp − m)(v − 1))/v
    # stage times, against (pp − 1)/v once m >= pp: 5/3 of it at pp 4, v 2, m 2.
    llm = load_model("llama3-70b")
    sy = cluster("h100_sxm", 32)
    st = Strategy(tp=8, pp=4, dp=1, sequence_parallel=True, schedule=Schedule.interleaved, virtual_stages=2,
                  recompute="full", activation_layout="batch_first")

    def run(batch):
        tr = TrainingSpec(sequence_length=4096, global_batch_sequences=batch, total_tokens=1e12)
        return evaluate_system(llm, tr, st, sy, calib=BARE)

    few, full, bad = run(2), run(4), run(9)
    assert isinstance(few, Metrics) and isinstance(full, Metrics)
    assert not isinstance(bad, Metrics) and "in max(1, m // pp 4) rounds" in bad.reason
    # (to 0.2 %: the stage time holds the pipeline sends' exposed share, whose warm-up part follows m)
    assert few.breakdown.bubble_s / full.breakdown.bubble_s == pytest.approx(5 / 3, rel=2e-3)
    # Megatron-Core's (sequence-first) refuses m = 2 on pp 4
    tr = TrainingSpec(sequence_length=4096, global_batch_sequences=2, total_tokens=1e12)
    assert not isinstance(evaluate_system(llm, tr, st.model_copy(update={"activation_layout": "sequence_first"}), sy,
                                          calib=BARE), Metrics)


@pytest.mark.parametrize("schedule", [dict(), dict(schedule="interleaved", virtual_stages=2)])
def test_every_stages_data_parallel_sync_counts_not_only_the_pace_stages(schedule):
    # GPT-OSS-120B's 36 layers on 8 stages split 3, 5 x 6, 3: the last stage (3 layers, the
    # 201k-token output layer and the loss) paces the pipeline, while each middle stage holds 5
    # layers of experts to gather and reduce under FSDP. Every stage syncs its own parameters at the
    # end of the schedule and the iteration waits for the slowest, so more HBM bandwidth (H200's
    # 4.8 TB/s against H100's 3.35, the same tensor cores and links) never makes the iteration
    # slower: priced on the pace stage alone, the faster memory moved the pace from the last stage to
    # a middle one on H200 and its 1.5x traffic surfaced, 29-32 % slower than H100
    llm = load_model("gpt-oss-120b")
    tr = TrainingSpec(sequence_length=4096, global_batch_sequences=1152, total_tokens=1e12)
    st = Strategy(tp=1, pp=8, dp=72, ep=8, zero_stage=3, **schedule)
    assert [int(x) for x in (stage_layout(llm, StrategyArrays.from_strategies([st])).first[0],
                             stage_layout(llm, StrategyArrays.from_strategies([st])).mid_max[0])] == [3, 5]
    h100 = evaluate_system(llm, tr, st, cluster("h100_sxm", 576), calib=CAL)
    h200 = evaluate_system(llm, tr, st, cluster("h200_sxm", 576), calib=CAL)
    base = cluster("h100_sxm", 576)
    faster_hbm = base.model_copy(update={"gpu": base.gpu.model_copy(
        update={"hbm_bandwidth_bytes_per_s": 1.5 * base.gpu.hbm_bandwidth_bytes_per_s})})
    fast = evaluate_system(llm, tr, st, faster_hbm, calib=CAL)
    assert all(isinstance(m, Metrics) for m in (h100, h200, fast))
    assert h200.iteration_time_s <= h100.iteration_time_s
    assert fast.iteration_time_s <= h100.iteration_time_s
    # the same data-parallel traffic either way: the stage that holds the most is priced on both
    assert h200.type_bytes.total_bytes("dp") == pytest.approx(h100.type_bytes.total_bytes("dp"), rel=1e-9)


def test_a_per_microbatch_reduction_hides_behind_its_own_microbatch_only():
    # DeepSpeed's stage 2 reduces the gradients after every microbatch (m reductions per iteration),
    # each behind that microbatch's backward: priced with the interleaved schedule's closing window
    # (1 + (v-1)·g passes) m times over, the 128 reductions of DeepSeek-V3 on 1,024 H200 (pp 8, v 4)
    # hid behind about 800 passes, and a 1.5x faster GPU came out 14 % slower (49.9 -> 57.1 s). With
    # each reduction behind its own pass, a faster GPU is never slower, and hiding 128 reductions
    # leaves at most 128 passes of the stage as the budget
    from designer.perf.model import evaluate_many

    llm = load_model("deepseek-v3")
    tr = TrainingSpec(sequence_length=4096, global_batch_sequences=2048, total_tokens=1e12)
    base = cluster("h200_sxm", 1024)
    S = StrategyArrays(tp=8, pp=8, dp=16, ep=8, cp=1, sp=True, mbs=1, schedule=2, v=4, zero=2, qwz=False, qgz=False,
                       hpz=False, recompute=1, overlap_dp=True, overlap_tp=True, etp=1, pp_first=10, pp_last=1,
                       shard_group=16, offload_opt=True, dedup=True, grouped_gemm=True)
    times = []
    for f in (1.0, 1.1, 1.5, 2.0):
        gpu = base.gpu.model_copy(update={"peak_flops": {k: v * f for k, v in base.gpu.peak_flops.items()}})
        vm = evaluate_many(llm, tr, S, base.model_copy(update={"gpu": gpu}), calib=CAL)
        assert vm.feasible[0]
        times.append(float(vm.iteration_time_s[0]))
    assert all(b <= a for a, b in zip(times, times[1:])), times


def test_the_data_parallel_sync_hides_behind_the_passes_wall_time_exposed_ep_traffic_included():
    # The EP all-to-all overlapped with compute (DualPipe, Strategy.overlap_ep_comm) and the
    # data-parallel sync both hide behind the same passes. The sync's window left out the EP
    # traffic the compute could not hide, so a faster GPU hid less of both at once: DeepSeek-V3 on
    # 1,024 H200 under DualPipe (CP 4, EP 16, ZeRO-2 with HSDP) came out 3.5 % slower at 1.5x the
    # peak, and FP8 slower than BF16. The window is the passes' wall time: compute plus every
    # exposed term, EP's included; then the iteration lasts at least as long as the longer of the
    # passes and the sync, and shrinking the compute never lengthens it by more than DualPipe's
    # bubble, (pp/2 - 1)(F&B + B - 3W), gains as the weight-gradient GEMMs W shrink inside a
    # communication-bound stage (here 0.002 % from 1.5x to 2x the peak).
    from designer.perf.model import evaluate_many

    llm = load_model("deepseek-v3")
    base = cluster("h200_sxm", 1024, hb_size=8, leaf_span=8)
    S = StrategyArrays(tp=8, pp=4, dp=8, ep=16, cp=4, sp=True, mbs=1, schedule=4, v=1, zero=2, qwz=False,
                       qgz=False, hpz=False, recompute=1,
                       overlap_dp=True, overlap_tp=True, shard_group=8, prefetch=1, overlap_ep=True,
                       offload_opt=True, dedup=True, cp_comm=2, cp_lb=True, grouped_gemm=True)
    tr = {p: TrainingSpec(sequence_length=4096, global_batch_sequences=2048, total_tokens=1e12, precision=p)
          for p in ("bf16", "fp8")}
    times = []
    for f in (1.0, 1.1, 1.5, 2.0):
        gpu = base.gpu.model_copy(update={"peak_flops": {k: v * f for k, v in base.gpu.peak_flops.items()}})
        vm = evaluate_many(llm, tr["bf16"], S, base.model_copy(update={"gpu": gpu}), calib=CAL)
        assert vm.feasible[0]
        times.append(float(vm.iteration_time_s[0]))
    assert all(b <= a * (1 + 1e-4) for a, b in zip(times, times[1:])), times
    fp8 = evaluate_many(llm, tr["fp8"], S, base, calib=CAL)
    assert fp8.feasible[0] and float(fp8.iteration_time_s[0]) <= times[0]


@pytest.mark.parametrize("rc_modules,overlap,forward_share", [(0, False, 2 / 4), (8, False, 2 / 6), (0, True, None)])
def test_the_ep_traffic_a_forward_waits_on_is_its_own_dispatch_and_combine(rc_modules, overlap, forward_share):
    # Not overlapped, a layer's forward waits on its own dispatch and combine: 2 of the 4 equal
    # all-to-alls (BF16, Megatron's alltoall dispatcher), 2 of 6 where the MoE block is recomputed
    # (its forward's pair again, in the backward pass). That share of the exposed EP time is in the
    # forward pass the data-parallel weight gathers hide behind. Overlapped (1F1B all-to-all
    # overlap), a microbatch's forward runs beside another's backward: what the merged compute
    # leaves exposed is split as that compute is.
    from designer.perf import iteration as it

    llm = load_model("qwen3-30b-a3b")
    tr = TrainingSpec(sequence_length=4096, global_batch_sequences=1024, total_tokens=1e12)
    S = StrategyArrays(tp=2, pp=8, dp=16, ep=8, cp=2, sp=True, mbs=1, schedule=1, v=1, zero=3, qwz=False, qgz=False,
                       hpz=False, recompute=1 if rc_modules else 0, overlap_dp=True, overlap_tp=False,
                       rc_modules=rc_modules or 1, overlap_ep=overlap,
                       grouped_gemm=True)
    ctx = it._context(llm, tr, S, cluster("h100_sxm", 512, hb_size=8, leaf_span=8), CAL)
    moe = it.compute_term(ctx, ctx.moe, True)
    ep = it.ep_term(ctx, moe)
    assert float(ep.moe_exposed_s[0]) > 0
    share = float(ep.moe_exposed_fwd_s[0] / ep.moe_exposed_s[0])
    if forward_share is None:
        assert share == pytest.approx(float(moe.fwd_s[0] / moe.compute_s[0]), rel=1e-12)
        assert float(ep.moe_exposed_s[0]) < float(ep.moe_total_s[0])
    else:
        assert share == pytest.approx(forward_share, rel=1e-12)
        assert float(ep.moe_exposed_s[0]) == pytest.approx(float(ep.moe_total_s[0]), rel=1e-12)


def test_a_stage_quicker_than_the_pace_hides_its_sync_through_its_waits():
    # Llama-3 8B on 256 H100, pp 8 with end stages of 1 and 2 layers, ZeRO-3 over the CP group: the
    # middle stages pace the pipeline (host-bound, their launches), and the last stage's per-layer
    # gathers and reduce-scatters hid behind its own two layers' passes only. A 1.5x faster GPU then
    # shrank those passes, not the pace, and the iteration came out 1.3 % longer. The quick stage
    # waits between its passes for its neighbours and its sync runs on through the waits: its window
    # is the pace, and a faster GPU leaves no more of the sync exposed.
    llm = load_model("llama3-8b")
    tr = TrainingSpec(sequence_length=4096, global_batch_sequences=512, total_tokens=1e12)
    base = cluster("h100_sxm", 256, hb_size=8, leaf_span=8)
    # (the pipeline sends 1/tp slices, pipeline_scatter_gather, so that the middle stages stay
    # host-bound at every speed)
    S = StrategyArrays(tp=8, pp=8, dp=1, ep=1, cp=4, sp=False, mbs=1, schedule=3, v=1, zero=3, qwz=False, qgz=False,
                       hpz=False, recompute=0, overlap_dp=True, overlap_tp=False, pp_first=1, pp_last=2,
                       reshard=True, prefetch=1, cp_lb=True, pp_sg=True)
    beyond_pipeline = []
    for f in (1.0, 1.5, 2.0):
        gpu = base.gpu.model_copy(update={"peak_flops": {k: v * f for k, v in base.gpu.peak_flops.items()}})
        out = iteration_arrays(llm, tr, S, base.model_copy(update={"gpu": gpu}), CAL)
        assert out["code"][0] == 0
        beyond_pipeline.append(float(out["iteration_time_s"][0] - out["pipeline_s"][0]))
    assert all(b <= a for a, b in zip(beyond_pipeline, beyond_pipeline[1:])), beyond_pipeline


@pytest.mark.parametrize("schedule,extra", [
    (3, dict(zero=0, recompute=0, pp_first=12, pp_last=13, prefetch=2)),  # ZB-H1, uneven end stages
    (4, dict(zero=2, recompute=1, prefetch=2, offload_opt=True)),  # DualPipe
])
def test_a_host_bound_stages_bubble_does_not_grow_with_a_faster_gpu(schedule, extra):
    # Llama-3 8B on 256 H100, tp 8 × cp 4 × pp 8: the stages are host-bound (their launches outlast
    # their GPU work). ZB-H1's (p-1)(F + B - W) and DualPipe's (p/2-1)(F&B + B - 3W) credit the
    # weight-gradient passes W that fill the bubble; taken at the GPU's time, a 1.5x faster GPU
    # shortened W, not the launch-bound pace, and the pipeline came out longer (7.8051 -> 7.8067 s
    # under ZB-H1). Each pass lasts at least its third of the launches, so it no longer does.
    llm = load_model("llama3-8b")
    tr = TrainingSpec(sequence_length=4096, global_batch_sequences=512, total_tokens=1e12)
    base = cluster("h100_sxm", 256, hb_size=8, leaf_span=8)
    S = StrategyArrays(**dict(dict(tp=8, pp=8, dp=1, ep=1, cp=4, sp=True, mbs=1, schedule=schedule, v=1, qwz=False,
                                   qgz=False, hpz=False, overlap_dp=False, overlap_tp=True, cp_lb=True), **extra))
    pipeline, bubble = [], []
    for f in (1.0, 1.5, 2.0):
        gpu = base.gpu.model_copy(update={"peak_flops": {k: v * f for k, v in base.gpu.peak_flops.items()}})
        out = iteration_arrays(llm, tr, S, base.model_copy(update={"gpu": gpu}), CAL)
        assert out["code"][0] == 0
        pipeline.append(float(out["pipeline_s"][0]))
        bubble.append(float(out["bubble_s"][0]))
    assert all(b <= a for a, b in zip(pipeline, pipeline[1:])), pipeline
    assert all(b <= a for a, b in zip(bubble, bubble[1:])), bubble


def test_a_launch_bound_stages_backward_window_does_not_shrink_with_a_faster_gpu():
    # Qwen3-30B on 256 B200, pp 1, full recompute, ZeRO-2: the stage is launch-bound (48 layers'
    # launches outlast its GPU work), and DeepSpeed's stage 2 reduces after every microbatch behind
    # that microbatch's backward. The passes were given the stage's length in proportion to their
    # floors (a third of the launches forward, its GPU time backward), so a faster GPU shortened the
    # backward window inside a stage of unchanged length: 0.24 % slower at 1.5x the peak. The forward
    # takes its GPU time or its third of the launches and the backward the rest of the stage.
    llm = load_model("qwen3-30b-a3b")
    tr = TrainingSpec(sequence_length=4096, global_batch_sequences=1024, total_tokens=1e12)
    base = cluster("b200", 256, hb_size=8, leaf_span=8)
    S = StrategyArrays(tp=8, pp=1, dp=16, ep=8, cp=2, sp=True, mbs=1, schedule=1, v=1, zero=2, qwz=False, qgz=False,
                       hpz=False, recompute=2, overlap_dp=True, overlap_tp=True, etp=1, prefetch=2, ag_dispatch=True,
                       cp_comm=1, cp_lb=True, grouped_gemm=True)
    times = []
    for f in (1.0, 1.5, 2.0):
        gpu = base.gpu.model_copy(update={"peak_flops": {k: v * f for k, v in base.gpu.peak_flops.items()}})
        out = iteration_arrays(llm, tr, S, base.model_copy(update={"gpu": gpu}), CAL)
        assert out["code"][0] == 0
        times.append(float(out["iteration_time_s"][0]))
    assert all(b <= a for a, b in zip(times, times[1:])), times


def test_dualpipe_needs_twice_its_ranks_in_microbatches():
    # DualPipe.step asserts an even chunk count of at least twice its ranks (deepseek-ai/DualPipe
    # dualpipe.py: `num_chunks % 2 == 0 and num_chunks >= num_ranks * 2`): pp 8 takes 16 microbatches,
    # not 8 or 14
    llm = load_model("llama3-8b")
    sy = cluster("h100_sxm", 64)
    for batch, fits in ((64, False), (112, False), (128, True)):
        tr = TrainingSpec(sequence_length=4096, global_batch_sequences=batch, total_tokens=1e9)
        st = Strategy(tp=1, pp=8, dp=8, microbatch_size=1, recompute="full", schedule="dualpipe")
        code = int(iteration_arrays(llm, tr, StrategyArrays.from_strategies([st]), sy, CAL)["code"][0])
        assert (code != 15) == fits, (batch, code)


@pytest.mark.parametrize("interval,first_dense,pp", [(2, 0, 3), (2, 1, 3), (3, 2, 4), (2, 3, 5), (1, 3, 4)])
def test_moe_layers_per_stage_are_counted_by_position(interval, first_dense, pp):
    # the MoE layers of each stage, from the model's own per-layer flags and the stage boundaries
    base = load_model("mixtral-8x7b")
    llm = base.model_copy(update={"layers": 24, "moe": base.moe.model_copy(update={
        "moe_layer_interval": interval, "first_dense_layers": first_dense})})
    flags = llm.moe_layer_flags()
    lay = _layout(llm, tp=1, pp=pp, dp=1, schedule="1f1b")
    first, mid, last = int(lay.first[0]), int(lay.mid_max[0]), int(lay.last[0])
    assert first + (pp - 2) * mid + last == 24  # even stages here (24 over 3 or 4), Megatron's split over 5
    assert int(lay.first_moe[0]) == sum(flags[:first])
    assert int(lay.last_moe[0]) == sum(flags[24 - last:])
    if pp > 2 and int(lay.mid_long[0]) == pp - 2:
        # the pace middle stage: the last of the long ones
        start = first + (pp - 3) * mid
        assert int(lay.mid_moe[0]) == sum(flags[start:start + mid])


def test_megatron_core_sends_the_whole_activation_without_sequence_parallelism():
    # Llama-3 8B, tp 8 x pp 4 over 4 nodes (one stage a node), 1F1B: per microbatch a stage boundary
    # carries one [b, s, h] activation forward and its gradient back. Under sequence parallelism each
    # TP rank sends its 1/8; without it Megatron-Core sends the whole activation from every TP rank
    # (p2p_communication.py), and Megatron-LM's SC'21 scatter/gather sent 1/8 and all-gathered it over
    # NVLink after (pipeline_scatter_gather). So the pipeline's bytes per GPU beyond the node are 8x
    # the sequence-parallel ones without it and the same with the slices (their all-gather stays on
    # the NVLink domain).
    from designer.perf.model import evaluate_system

    llm = load_model("llama3-8b")
    tr = TrainingSpec(sequence_length=4096, global_batch_sequences=32, total_tokens=1e9)
    sy = cluster("h100_sxm", 32)
    base = dict(tp=8, pp=4, dp=1, microbatch_size=1, recompute="full", overlap_pp_comm=False)
    sent = {}
    for name, kw in (("sp", dict(sequence_parallel=True)), ("whole", dict(sequence_parallel=False)),
                     ("slices", dict(sequence_parallel=False, pipeline_scatter_gather=True))):
        m = evaluate_system(llm, tr, Strategy(**base, **kw), sy, calib=CAL)
        assert isinstance(m, Metrics), m
        sent[name] = m.type_bytes.total_bytes("pp") - m.type_bytes.pp_hb_bytes
    assert sent["whole"] == pytest.approx(8 * sent["sp"], rel=1e-9)
    assert sent["slices"] == pytest.approx(sent["sp"], rel=1e-9)
