"""Assembly of one iteration: bubble per schedule, communication volumes per tier, overlap, rail-only."""

from __future__ import annotations

import dataclasses

import pytest

from designer.perf import collectives as coll
from designer.perf.model import evaluate_system, load_perf_calibration
from designer.perf.records import Infeasible, Metrics
from designer.spec.llm import Recompute, RecomputeModule, Schedule, Strategy, TrainingSpec
from designer.spec.models import load_model
from tests.perf.systems import cluster

CAL = load_perf_calibration()
# no optimizer step and no host overheads, so iteration = pipeline time exactly (bubble tests)
CAL_NO_OPT = dataclasses.replace(CAL, compute=dataclasses.replace(
    CAL.compute, optimizer_bytes_per_param=0.0, framework_per_iteration_s=0.0, framework_per_layer_s=0.0))


def _ev(llm, tr, st, sy, calib=CAL):
    r = evaluate_system(llm, tr, st, sy, calib=calib)
    assert isinstance(r, Metrics), r
    return r


@pytest.mark.parametrize("schedule,v,want", [
    (Schedule.one_f_one_b, 1, 3 / 8),  # (p−1)/m = 3/8
    (Schedule.gpipe, 1, 3 / 8),  # same bubble as 1F1B
    (Schedule.interleaved, 2, 3 / 16),  # (p−1)/(v·m) = 3/16
])
def test_pipeline_bubble_fraction(schedule, v, want):
    # gpt-1.7b, pp 4 inside one DGX (dp 1, so no DP traffic), m = 8 microbatches; a vocabulary of 8
    # makes the output layer negligible, so the four stages of 6 layers are even.
    llm = load_model("gpt-1.7b").model_copy(update={"vocab_size": 8})
    tr = TrainingSpec(sequence_length=2048, global_batch_sequences=8, precision="fp16", total_tokens=1e9)
    r = _ev(llm, tr, Strategy(pp=4, dp=1, tp=1, microbatch_size=1, schedule=schedule, virtual_stages=v, zero_stage=0),
            cluster("a100_80gb", 8, nic_gbps=200), CAL_NO_OPT)
    b = r.breakdown
    # (the residual output layer and loss leave the last stage 0.2% slower)
    assert b.bubble_s / (r.iteration_time_s - b.bubble_s) == pytest.approx(want, rel=3e-3)


def test_tp_bytes_four_ring_allreduces_per_layer():
    # gpt-1.7b on one A100 node, tp 8, no recompute, b = 1, s = 2048, 4 microbatches: per layer and
    # microbatch 4 all-reduces of n = s·h·2 = 9,437,184 B; ring: each GPU sends 2·(7/8)·n.
    # 24 layers x 4 microbatches x 4 x 2·(7/8)·n = 6,341,787,648 B inside the HB domain.
    llm = load_model("gpt-1.7b")
    tr = TrainingSpec(sequence_length=2048, global_batch_sequences=4, precision="fp16", total_tokens=1e9)
    r = _ev(llm, tr, Strategy(tp=8, dp=1, microbatch_size=1, zero_stage=0), cluster("a100_80gb", 8, nic_gbps=200))
    n = 2048 * 2304 * 2
    assert r.tier_bytes.hb_bytes == pytest.approx(24 * 4 * 4 * 2 * 7 / 8 * n)
    assert r.tier_bytes.rail_bytes == 0 and r.tier_bytes.spine_bytes == 0
    assert r.binding_tier == "hb"


@pytest.mark.parametrize("gpu,precision,recipe,gather_bytes", [
    ("h100_sxm", "bf16", "delayed", 2.0),  # 16-bit: both collectives carry 2-byte elements
    ("h100_sxm", "fp8", "delayed", 1.0),  # Transformer Engine gathers the fp8 copy
    ("h100_sxm", "fp8", "rowwise", 2.0),  # torchtitan's rowwise recipe gathers in 16-bit
    ("b200", "mxfp8", "delayed", 1.0 + 1.0 / 32),  # MXFP8: one E8M0 scale per 32 elements
])
def test_sequence_parallel_gathers_move_the_quantised_copy(gpu, precision, recipe, gather_bytes):
    # gpt-1.7b on one node, tp 8 with sequence parallelism, no recompute, b = 1, s = 2048, 4 microbatches:
    # per layer and microbatch 4 reduce-scatters of n = s·h·2 bytes (16-bit outputs) and 6 all-gathers of
    # s·h·gather_bytes (GEMM inputs: 2 forward, the 2 output gradients backward, and the 2 inputs gathered
    # again for the weight gradients, Megatron-Core's LinearWithGradAccumulationAndAsyncCommunication);
    # a ring sends (7/8) of each per GPU. 24 layers x 4 microbatches.
    llm = load_model("gpt-1.7b")
    tr = TrainingSpec(sequence_length=2048, global_batch_sequences=4, precision=precision, fp8_recipe=recipe,
                      total_tokens=1e9)
    r = _ev(llm, tr, Strategy(tp=8, dp=1, microbatch_size=1, zero_stage=0, sequence_parallel=True),
            cluster(gpu, 8, nic_gbps=400))
    elems = 2048 * 2304
    assert r.type_bytes.tp_hb_bytes == pytest.approx(24 * 4 * 7 / 8 * elems * (4 * 2.0 + 6 * gather_bytes))


def test_zero_volumes_on_rails():
    # tp 8 per DGX, dp 8 across 8 DGXs on one rail, m = 1: ZeRO-0 all-reduce 2·(7/8)·G,
    # ZeRO-3 3·(7/8)·G = 1.5x (collectives.md §6.1), ZeRO++ (qwZ+hpZ+qgZ) 0.25 of ZeRO-3 (§6.2).
    llm = load_model("gpt-1.7b")
    tr = TrainingSpec(sequence_length=2048, global_batch_sequences=8, precision="fp16", total_tokens=1e9)
    sy = cluster("a100_80gb", 64, nic_gbps=200)
    z0 = _ev(llm, tr, Strategy(tp=8, dp=8, zero_stage=0), sy).tier_bytes.rail_bytes
    z3 = _ev(llm, tr, Strategy(tp=8, dp=8, zero_stage=3), sy).tier_bytes.rail_bytes
    zpp = _ev(llm, tr, Strategy(tp=8, dp=8, zero_stage=3, zeropp_quantized_weights=True,
                                zeropp_quantized_gradients=True, zeropp_hierarchical_partition=True), sy).tier_bytes.rail_bytes
    from designer.perf.compute import dense_layer_params

    # 16-bit grads of one TP shard: 24 layers, the tied embedding and the final LayerNorm (2h)
    G = 2 * (24 * dense_layer_params(llm) + 51200 * 2304 + 2 * 2304) / 8
    assert z0 == pytest.approx(2 * 7 / 8 * G)
    assert z3 / z0 == pytest.approx(1.5)
    assert zpp / z3 == pytest.approx(0.25)


def test_full_recompute_costs_about_a_third():
    # Narayanan et al. §5.8: recomputation costs up to ~33% of throughput; compute grows by one forward
    # of three passes (4/3 for the layers, the logits are not recomputed).
    llm = load_model("gpt-1.7b")
    tr = TrainingSpec(sequence_length=2048, global_batch_sequences=64, precision="fp16", total_tokens=1e9)
    sy = cluster("a100_80gb", 8, nic_gbps=200)
    a = _ev(llm, tr, Strategy(tp=1, dp=8, microbatch_size=1, zero_stage=1, recompute=Recompute.none), sy)
    b = _ev(llm, tr, Strategy(tp=1, dp=8, microbatch_size=1, zero_stage=1, recompute=Recompute.full), sy)
    assert 1.25 < b.breakdown.compute_s / a.breakdown.compute_s < 4 / 3


def test_overlap_flags_never_slow_down_and_hide_dp():
    llm = load_model("llama3-8b")
    tr = TrainingSpec(sequence_length=4096, global_batch_sequences=256, total_tokens=1e12)
    sy = cluster("h100_sxm", 256)
    base = dict(tp=2, dp=128, microbatch_size=1, zero_stage=1, sequence_parallel=True, recompute=Recompute.selective)
    off = _ev(llm, tr, Strategy(**base, overlap_dp_comm=False, overlap_tp_comm=False), sy)
    on = _ev(llm, tr, Strategy(**base, overlap_dp_comm=True, overlap_tp_comm=True), sy)
    assert on.iteration_time_s < off.iteration_time_s
    assert on.breakdown.overlapped_comm_s > 0
    for r in (on, off):
        b = r.breakdown
        assert r.iteration_time_s == pytest.approx(b.compute_s + b.exposed_comm_s + b.bubble_s + b.host_s)
        # what is left after compute, bubble and host is communication the iteration waits on: no more
        # than the traffic there is
        assert 0 <= b.exposed_comm_s <= b.tp_s + b.cp_s + b.pp_s + b.dp_s + b.ep_s
        assert b.host_s >= CAL.compute.framework_per_iteration_s


def test_time_to_train_and_tokens_per_second():
    llm = load_model("llama3-8b")
    tr = TrainingSpec(sequence_length=8192, global_batch_sequences=128, total_tokens=15e12)
    r = _ev(llm, tr, Strategy(tp=1, dp=64, zero_stage=1, recompute=Recompute.full), cluster("h100_sxm", 64))
    assert r.time_to_train_s == pytest.approx(r.iteration_time_s * 15e12 / (8192 * 128))
    assert r.tokens_per_s == pytest.approx(8192 * 128 / r.iteration_time_s)
    assert 0 < r.mfu < r.hfu < 1


def test_rail_aligned_mapping_is_equally_fast_on_rail_only():
    # TP inside the DGX, DP and PP across DGXs on rails (railonly.md §1): same time as the fat-tree.
    llm = load_model("gpt3-175b")
    tr = TrainingSpec(sequence_length=2048, global_batch_sequences=1536, total_tokens=300e9)
    st = Strategy(tp=8, pp=8, dp=16, microbatch_size=1, sequence_parallel=True, recompute=Recompute.selective,
                  schedule=Schedule.interleaved, virtual_stages=3)
    fat = _ev(llm, tr, st, cluster("h100_sxm", 1024))
    rail = _ev(llm, tr, st, cluster("h100_sxm", 1024, rail_only=True))
    assert rail.iteration_time_s == pytest.approx(fat.iteration_time_s, rel=1e-12)
    assert rail.tier_bytes.spine_bytes == 0
    # railonly.md §4: > 75% of the bytes stay inside HB domains, > 97% of the GPU pairs never talk.
    assert fat.traffic.hb_share > 0.75 and fat.traffic.pair_fraction_algorithm < 0.03


def test_cross_domain_all_to_all_is_slower_on_rail_only():
    # EP 64 over 8 domains: the all-to-all crosses rails; rail-only forwards it through NVLink
    # (railonly.md §5: 8-11% slower all-to-all), so EP time grows, by less than 25%.
    llm = load_model("deepseek-v3-like")
    tr = TrainingSpec(sequence_length=4096, global_batch_sequences=1024, total_tokens=1e12)
    st = Strategy(tp=1, pp=8, dp=64, ep=64, microbatch_size=1, recompute=Recompute.full, zero_stage=1)
    fat = _ev(llm, tr, st, cluster("h100_sxm", 512))
    rail = _ev(llm, tr, st, cluster("h100_sxm", 512, rail_only=True))
    assert fat.breakdown.ep_s < rail.breakdown.ep_s < 1.25 * fat.breakdown.ep_s
    assert rail.tier_bytes.spine_bytes == 0 and fat.tier_bytes.spine_bytes > 0


@pytest.mark.parametrize("kw,kind", [
    (dict(tp=8, dp=3), "divisibility"),  # batch 8 not a multiple of 3
    (dict(tp=16, dp=1), "divisibility"),  # 16 does not divide 24 heads
    (dict(tp=8, dp=1, pp=3, schedule="dualpipe", zero_stage=1), "compatibility"),  # DualPipe needs an even pp
    (dict(tp=8, dp=16), "size"),
    (dict(tp=8, dp=1, ep=2), "compatibility"),
])
def test_infeasible_kinds(kw, kind):
    llm = load_model("gpt-1.7b")
    tr = TrainingSpec(sequence_length=2048, global_batch_sequences=8, total_tokens=1e9)
    r = evaluate_system(llm, tr, Strategy(**kw), cluster("a100_80gb", 64, nic_gbps=200), calib=CAL)
    assert isinstance(r, Infeasible) and r.kind == kind and "\n" not in r.reason


def test_the_triton_attention_kernel_runs_where_it_was_measured_and_is_refused_elsewhere():
    # llm-foundry's Triton kernel has figures for the GPUs its MPT runs used (compute_efficiency.yaml
    # attention.kernels.triton: Ampere, Hopper); on Blackwell designer has none and says so
    llm = load_model("gpt-1.7b")
    tr = TrainingSpec(sequence_length=2048, global_batch_sequences=64, total_tokens=1e9)
    st = Strategy(dp=8, attention_kernel="triton")
    for gpu in ("a100_80gb", "h100_sxm"):
        assert isinstance(evaluate_system(llm, tr, st, cluster(gpu, 8), calib=CAL), Metrics)
    r = evaluate_system(llm, tr, st, cluster("b200", 8), calib=CAL)
    assert isinstance(r, Infeasible) and r.reason == "attention_kernel triton does not exist on blackwell GPUs (b200)"


def test_an_moe_model_with_tensor_parallelism_needs_sequence_parallelism():
    # Megatron-Core's MoE layer raises in training at TP > 1 without sequence parallelism
    # (moe_layer.py: "performance may degrade if MoE and tensor parallelism are enabled without also
    # enabling sequence parallelism"); a dense model, or the same MoE at TP 1 or with SP, runs
    llm = load_model("mixtral-8x7b")
    tr = TrainingSpec(sequence_length=4096, global_batch_sequences=64, total_tokens=1e9)
    sy = cluster("h100_sxm", 64)
    r = evaluate_system(llm, tr, Strategy(tp=2, dp=32, ep=8, recompute="full"), sy, calib=CAL)
    assert isinstance(r, Infeasible) and r.kind == "compatibility"
    assert r.reason.startswith("tp 2 without sequence_parallel on mixtral-8x7b, an MoE model")
    for st in (Strategy(tp=2, dp=32, ep=8, recompute="full", sequence_parallel=True),
               Strategy(dp=64, ep=8, recompute="full")):
        assert isinstance(evaluate_system(llm, tr, st, sy, calib=CAL), Metrics)
    dense = llm.model_copy(update={"moe": None})
    assert isinstance(evaluate_system(dense, tr, Strategy(tp=2, dp=32, recompute="full"), sy, calib=CAL), Metrics)


def test_moe_host_time_per_local_expert_by_hand():
    # Mixtral 8x7B: 32 MoE layers of 8 experts. At EP 2 each GPU holds 4 local experts; with
    # framework_per_expert_s = 1 ms every MoE layer and microbatch computes 4 x 1 ms longer
    # (forward + backward). 8 H100s, TP 1, DP 8, gbs 64, mbs 1: 8 microbatches, so the pure
    # compute of an iteration grows by 32 x 8 x 4 ms = 1.024 s.
    from designer.perf.iteration import iteration_arrays
    from designer.perf.records import StrategyArrays

    llm = load_model("mixtral-8x7b")
    tr = TrainingSpec(sequence_length=4096, global_batch_sequences=64, total_tokens=1e12)
    st = StrategyArrays.from_strategies([Strategy(tp=1, pp=1, dp=8, ep=2, microbatch_size=1)])
    sy = cluster("h100_sxm", 8)
    got, compute = [], []
    for per_expert in (0.0, 1e-3):
        cal = dataclasses.replace(CAL, compute=dataclasses.replace(CAL.compute, framework_per_expert_s=per_expert))
        r = iteration_arrays(llm, tr, st, sy, cal)
        got.append(float(r["host_s"][0]))
        compute.append(float(r["compute_s"][0]))
    assert llm.layers == 32 and llm.moe.experts == 8
    assert got[1] - got[0] == pytest.approx(32 * 8 * 4 * 1e-3, rel=1e-9)
    assert compute[1] == pytest.approx(compute[0], rel=1e-12)
    # replayed from captured CUDA graphs, the experts' shapes are static and nothing waits on the host
    graphed = StrategyArrays.from_strategies([Strategy(tp=1, pp=1, dp=8, ep=2, microbatch_size=1, cuda_graphs=True)])
    cal = dataclasses.replace(CAL, compute=dataclasses.replace(CAL.compute, framework_per_expert_s=1e-3))
    assert float(iteration_arrays(llm, tr, graphed, sy, cal)["host_s"][0]) == pytest.approx(got[0], rel=1e-12)
    # one grouped-GEMM kernel over the local experts, split sizes on the device: nothing launched per expert
    grouped = StrategyArrays.from_strategies([Strategy(tp=1, pp=1, dp=8, ep=2, microbatch_size=1, expert_gemm="grouped")])
    assert float(iteration_arrays(llm, tr, grouped, sy, cal)["host_s"][0]) == pytest.approx(got[0], rel=1e-12)
    assert grouped.to_strategy(0).expert_gemm == "grouped"


def test_cuda_graphs_remove_the_per_layer_launch_floor():
    # A host launch floor of 1 s per layer and microbatch dwarfs gpt-1.7b's GPU time: 24 layers x
    # 4 microbatches (gbs 32, dp 8) = at least 96 s per iteration launched from the host; replayed
    # from CUDA graphs the iteration is the GPU's (and the per-iteration host time) again.
    llm = load_model("gpt-1.7b")
    tr = TrainingSpec(sequence_length=2048, global_batch_sequences=32, total_tokens=1e12)
    sy = cluster("h100_sxm", 8)
    cal = dataclasses.replace(CAL, compute=dataclasses.replace(CAL.compute, framework_per_layer_s=1.0))
    host = _ev(llm, tr, Strategy(tp=1, pp=1, dp=8, microbatch_size=1), sy, cal).iteration_time_s
    graphed = _ev(llm, tr, Strategy(tp=1, pp=1, dp=8, microbatch_size=1, cuda_graphs=True), sy, cal).iteration_time_s
    free = _ev(llm, tr, Strategy(tp=1, pp=1, dp=8, microbatch_size=1), sy,
               dataclasses.replace(CAL, compute=dataclasses.replace(CAL.compute, framework_per_layer_s=0.0))).iteration_time_s
    assert llm.layers == 24
    assert host >= 24 * 4 * 1.0
    assert graphed <= free + 1e-9 and graphed < 0.05 * host


def test_the_1f1b_all_to_all_overlap_exposes_the_per_layer_launches():
    # Megatron-Core's 1F1B all-to-all overlap synchronises between each layer's sub-stages, so the
    # host's per-layer launches add to the GPU time instead of bounding it (Megatron-LM
    # deepseek-v3-gb200-optimization §3.2). Mixtral 8x7B's 32 layers on 8 H100s (EP 8, dp 8), one
    # microbatch: a 0.1 ms launch floor per layer, far below a layer's GPU time, costs nothing
    # without the overlap and 32 x 0.1 ms with it; replayed from CUDA graphs nothing again.
    from designer.perf.iteration import iteration_arrays
    from designer.perf.records import StrategyArrays

    llm = load_model("mixtral-8x7b")
    tr = TrainingSpec(sequence_length=4096, global_batch_sequences=8, precision="bf16", total_tokens=1e12)
    sy = cluster("h100_sxm", 8)

    def t(per_layer_s, **kw):
        # timed whether or not it fits in memory (iteration_arrays prices every strategy)
        cal = dataclasses.replace(CAL, compute=dataclasses.replace(CAL.compute, framework_per_layer_s=per_layer_s))
        st = StrategyArrays.from_strategies([Strategy(tp=1, pp=1, dp=8, ep=8, microbatch_size=1, overlap_dp_comm=False,
                                                      **kw)])
        return float(iteration_arrays(llm, tr, st, sy, cal)["iteration_time_s"][0])

    assert llm.layers == 32
    assert t(1e-4) == pytest.approx(t(0.0), rel=1e-12)
    assert t(1e-4, overlap_ep_comm=True) - t(0.0, overlap_ep_comm=True) == pytest.approx(32 * 1e-4, rel=1e-9)
    assert t(1e-4, overlap_ep_comm=True, cuda_graphs=True) == pytest.approx(
        t(0.0, overlap_ep_comm=True, cuda_graphs=True), rel=1e-12)


def test_fp32_gradients_on_the_wire_double_the_data_parallel_bytes():
    # the ZeRO-0 all-reduce of test_zero_volumes_on_rails, 2·(7/8)·G, with G of 4-byte gradients
    # (TrainingSpec.grad_reduce_dtype fp32: Megatron-LM's fp32 main gradients, torchtitan's FSDP2);
    # ZeRO-3's reduce-scatter doubles too, its two 16-bit weight gathers (forward, backward) do not:
    # (2 + 2 + 4) / (2 + 2 + 2) = 4/3
    from designer.perf.compute import dense_layer_params

    llm = load_model("gpt-1.7b")
    sy = cluster("a100_80gb", 64, nic_gbps=200)
    G4 = 4 * (24 * dense_layer_params(llm) + 51200 * 2304 + 2 * 2304) / 8
    for zero, ratio in ((0, 2.0), (3, 4 / 3)):
        b = {w: _ev(llm, TrainingSpec(sequence_length=2048, global_batch_sequences=8, precision="bf16",
                                      total_tokens=1e9, grad_reduce_dtype=w),
                    Strategy(tp=8, dp=8, zero_stage=zero), sy).tier_bytes.rail_bytes for w in ("bf16", "fp32")}
        assert b["fp32"] / b["bf16"] == pytest.approx(ratio)
        if zero == 0:
            assert b["fp32"] == pytest.approx(2 * 7 / 8 * G4)


# MaxText's save_qkv_proj (only Q, K, V saved besides the layer input): selective recompute of the
# core, the norms, the MLP and the attention output projection
SAVE_QKV_PROJ = (RecomputeModule.core_attn, RecomputeModule.layernorm, RecomputeModule.mlp,
                 RecomputeModule.attn_out_proj)


def test_save_qkv_proj_keeps_the_layer_input_and_q_k_v_only():
    from designer.perf import memory as mem
    from designer.perf.records import recompute_module_mask

    llm = load_model("llama3-70b")  # h 8192, 64 heads / 8 KV heads of 128, no dropout
    kept = mem.activation_bytes_per_layer(llm, moe_layer=False, b=2, s=8192, tp=1, cp=1, sp=False,
                                          recompute=mem.RECOMPUTE_SELECTIVE, flash=True,
                                          rc_modules=recompute_module_mask(SAVE_QKV_PROJ))
    tokens = 2 * 8192
    # by hand, 16-bit: the layer input (h) and Q, K, V ((64 + 2 * 8) * 128)
    assert float(kept) == pytest.approx(tokens * 2 * (8192 + (64 + 2 * 8) * 128))
    # without attn_out_proj the attention output (64 * 128) and the second norm's input (h) stay
    without = mem.activation_bytes_per_layer(llm, moe_layer=False, b=2, s=8192, tp=1, cp=1, sp=False,
                                             recompute=mem.RECOMPUTE_SELECTIVE, flash=True,
                                             rc_modules=recompute_module_mask(SAVE_QKV_PROJ[:3]))
    assert float(without - kept) == pytest.approx(tokens * 2 * (64 * 128 + 8192))


def test_recomputing_the_output_projection_adds_its_forward_and_no_more():
    llm = load_model("llama3-8b")  # 32 layers, h 4096, 32 heads of 128
    tr = TrainingSpec(sequence_length=8192, global_batch_sequences=64, total_tokens=1e12)
    sy = cluster("h100_sxm", 64)
    base = dict(dp=64, microbatch_size=1, zero_stage=3, recompute=Recompute.selective)
    three = _ev(llm, tr, Strategy(**base, recompute_modules=SAVE_QKV_PROJ[:3]), sy)
    four = _ev(llm, tr, Strategy(**base, recompute_modules=SAVE_QKV_PROJ), sy)
    full = _ev(llm, tr, Strategy(**dict(base, recompute=Recompute.full)), sy)
    # the output projection's forward, 2 * h * (heads * head_dim) FLOPs per token per layer
    assert (four.hardware_flops_per_iteration - three.hardware_flops_per_iteration
            == pytest.approx(64 * 8192 * 32 * 2 * 4096 * 4096))
    assert three.breakdown.compute_s < four.breakdown.compute_s < full.breakdown.compute_s
    assert four.memory_per_gpu_bytes < three.memory_per_gpu_bytes


# torchtitan's per-op selective checkpointing (selective_ac_option 'op'): saves the attention kernel's
# output, the reduce-scatters and every odd-numbered matmul; recomputes the rest the backward reads
PER_OP_SAC = dict(recompute=Recompute.selective, recompute_modules=(RecomputeModule.alternate_matmuls,))


def test_per_op_checkpointing_recomputes_wk_wo_and_w3():
    # Llama-3 8B (h 4096, 32 heads / 8 KV heads of 128, SwiGLU 14336): of wq, wk, wv, wo, w1, w3, w2
    # the even-numbered wk, wo, w3 run again (w2's output feeds only a residual add); hand FLOPs per
    # token per layer: 2·4096·(1024 + 4096 + 14336)
    llm = load_model("llama3-8b")
    tr = TrainingSpec(sequence_length=8192, global_batch_sequences=64, total_tokens=1e12)
    sy = cluster("h100_sxm", 64)
    base = dict(dp=64, microbatch_size=1, zero_stage=3)
    none = _ev(llm, tr, Strategy(**base), sy)
    op = _ev(llm, tr, Strategy(**base, **PER_OP_SAC), sy)
    assert (op.hardware_flops_per_iteration - none.hardware_flops_per_iteration
            == pytest.approx(64 * 8192 * 32 * 2 * 4096 * (1024 + 4096 + 14336)))
    # a GPT layer (no GQA, ungated MLP: q, k, v, o, fc1, fc2): k and o only
    from designer.perf.compute import alternate_matmul_flops_per_token

    gpt = load_model("gpt-1.7b")  # h 2304
    h = 2304
    assert alternate_matmul_flops_per_token(gpt, False) == pytest.approx((2 * 2 * h * h, 8 * h * h, 0.0, 16 * h * h))
    full = _ev(llm, tr, Strategy(**dict(base, recompute=Recompute.full)), sy)
    assert none.breakdown.compute_s < op.breakdown.compute_s < full.breakdown.compute_s


def test_per_op_checkpointing_keeps_the_odd_matmuls_and_the_attention_output():
    from designer.perf import memory as mem
    from designer.perf.records import recompute_module_mask

    llm = load_model("llama3-8b")
    mask = recompute_module_mask(PER_OP_SAC["recompute_modules"])

    def kept(tp):
        return float(mem.activation_bytes_per_layer(llm, moe_layer=False, b=1, s=8192, tp=tp, cp=1, sp=tp > 1,
                                                    recompute=mem.RECOMPUTE_SELECTIVE, flash=True, rc_modules=mask))
    # by hand, 16-bit per token: the layer input (4096), wq's output (4096), wv's (1024), the attention
    # output (4096) and its fp32 log-sum-exp per head (32 · 4 bytes), w1's output (14336)
    assert kept(1) == pytest.approx(8192 * (2 * (4096 + 4096 + 1024 + 4096 + 14336) + 32 * 4))
    # TP 8 with sequence parallelism: each split by 8, plus the saved reduce-scatter after wo (4096 / 8)
    assert kept(8) == pytest.approx(8192 * (2 * (512 + 512 + 128 + 512 + 1792 + 512) + 4 * 4))


def test_per_op_checkpointing_gathers_the_sequence_parallel_inputs_again():
    # under TP with sequence parallelism the policy saves the reduce-scatters only, so the recomputed
    # forward repeats the two all-gathers of each layer: 6 all-gathers and 4 reduce-scatters per layer
    # per microbatch against 4 and 4 with Megatron's selective recompute
    from designer.perf import collectives as coll

    llm = load_model("llama3-8b")
    tr = TrainingSpec(sequence_length=8192, global_batch_sequences=16, total_tokens=1e12)
    sy = cluster("h100_sxm", 64)
    base = dict(tp=8, dp=8, microbatch_size=2, sequence_parallel=True)
    sel = _ev(llm, tr, Strategy(**base, recompute=Recompute.selective), sy)
    op = _ev(llm, tr, Strategy(**base, **PER_OP_SAC), sy)
    ag = coll.collective_time_s("all_gather", 2 * 8192 * 4096 * 2, coll.GroupShape(size=8, ranks_per_domain=8, domain_span=1, same_rail=True),
                                sy, CAL.collectives)
    assert op.breakdown.tp_s - sel.breakdown.tp_s == pytest.approx(2 * ag * 32 * 1, rel=1e-6)


def test_separate_qkv_projections_run_narrower_gemms():
    # torchtitan's Llama (wq, wk, wv) against Megatron's fused linear_qkv: same FLOPs, and under TP 8
    # the K and V GEMMs are one KV head (128) wide, below the fused 768-wide GEMM's efficiency
    from designer.perf.compute import gemm_time_s

    llm = load_model("llama3-8b")
    tr = TrainingSpec(sequence_length=8192, global_batch_sequences=8, total_tokens=1e12)
    sy = cluster("h100_sxm", 64)
    base = dict(tp=8, dp=8, microbatch_size=1, sequence_parallel=True)
    fused = _ev(llm, tr, Strategy(**base), sy)
    sep = _ev(llm, tr, Strategy(**base, qkv_projection="separate"), sy)
    assert sep.hardware_flops_per_iteration == fused.hardware_flops_per_iteration
    from designer.perf.iteration import precisions

    p = precisions(sy, tr, CAL)
    t = [gemm_time_s(8192, n, 4096, 1, p.gemm_peak_flops, p.gemm_max_eff, CAL.compute) for n in (768, 512, 128, 128)]
    # forward + backward (3 GEMMs each) per layer per microbatch, 32 layers, one microbatch per rank
    assert sep.breakdown.compute_s - fused.breakdown.compute_s == pytest.approx(
        3 * 32 * (t[1] + t[2] + t[3] - t[0]), rel=1e-6)


@pytest.mark.parametrize("b,precision,recipe,gathered_bytes", [
    (1, "bf16", "delayed", 2), (2, "bf16", "delayed", 2),
    # torchao's tensorwise fp8 gathers its inputs in 8 bits (Float8ColwiseParallel), its rowwise in 16
    (2, "fp8", "current", 1), (2, "fp8", "rowwise", 2)])
def test_batch_first_sequence_parallelism_copies_around_each_collective(b, precision, recipe, gathered_bytes):
    # Llama 3 8B on TP 8 with SP, one microbatch of b 8192-token sequences, no recompute: 32 layers of
    # 4 reduce-scatters and 4 all-gathers (forward and backward). Batch-first, PyTorch's functional
    # collectives re-lay the whole [b, s, h] tensor out around each reduce-scatter, and around each
    # all-gather of more than one sequence: read and write the tensor each time, on the stream, at the
    # width it was gathered in: 16-bit reduce-scatter outputs, the two forward GEMM inputs at the recipe's
    # width, the two backward output gradients in 16 bits (torchao quantises only before its forward gathers).
    llm = load_model("llama3-8b")
    tr = TrainingSpec(sequence_length=8192, global_batch_sequences=b, total_tokens=1e12, precision=precision,
                      fp8_recipe=recipe)
    sy = cluster("h100_sxm", 8)
    base = dict(tp=8, dp=1, microbatch_size=b, sequence_parallel=True)
    seq = _ev(llm, tr, Strategy(**base), sy)
    bat = _ev(llm, tr, Strategy(**base, activation_layout="batch_first"), sy)
    bw = sy.gpu.hbm_bandwidth_bytes_per_s * CAL.compute.hbm_efficiency
    rs_copy_s = 2 * (b * 8192 * 4096 * 2) / bw
    ag_copy_s = 2 * (b * 8192 * 4096 * gathered_bytes) / bw
    expected = 32 * (4 * rs_copy_s + ((2 * ag_copy_s + 2 * rs_copy_s) if b > 1 else 0.0))
    # ... less the two all-gathers per layer the sequence-first (Megatron-Core) layout runs again in
    # the backward for the weight gradients, which torchtitan's batch-first plan does not (it keeps
    # the gathered inputs): exposed here, no TP overlap
    shape = coll.GroupShape(size=8, ranks_per_domain=8, domain_span=1, same_rail=True)
    regather_s = coll.collective_time_s("all_gather", b * 8192 * 4096 * gathered_bytes, shape, sy, CAL.collectives)
    expected -= 32 * 2 * regather_s
    assert bat.iteration_time_s - seq.iteration_time_s == pytest.approx(expected, rel=1e-9)
    # without sequence parallelism the all-reduces need no re-layout
    plain = dict(base, sequence_parallel=False)
    assert _ev(llm, tr, Strategy(**plain, activation_layout="batch_first"), sy).iteration_time_s == \
        pytest.approx(_ev(llm, tr, Strategy(**plain), sy).iteration_time_s, rel=1e-12)


@pytest.mark.parametrize("precision,recipe,hidden", [
    ("bf16", "delayed", ("reduce_scatter", "all_gather")),
    ("fp8", "rowwise", ("reduce_scatter",)),  # pytorch/pytorch#149990: the all-gather-matmuls do not fuse
])
def test_overlapped_tp_hides_what_its_fused_kernels_cover(precision, recipe, hidden):
    # Four Llama 3 70B layers on TP 8 with SP, one microbatch of one 8192-token sequence, no recompute:
    # per layer 4 reduce-scatters and 6 all-gathers (2 of them the backward's second gathers of the
    # weight-gradient inputs) of s·h 16-bit elements (torchao's rowwise recipe gathers in 16 bits). A
    # layer's GEMMs (h 8192) outlast its collectives, so overlapping hides each covered collective but
    # for the slowdown it inflicts on the GEMMs: overlap saves 4 layers · count · (1 − slowdown) · t per
    # covered op; an uncovered one stays exposed.
    llm = load_model("llama3-70b").model_copy(update={"layers": 4})
    tr = TrainingSpec(sequence_length=8192, global_batch_sequences=1, precision=precision, fp8_recipe=recipe,
                      total_tokens=1e12)
    sy = cluster("h100_sxm", 8)
    base = dict(tp=8, dp=1, microbatch_size=1, sequence_parallel=True)
    off = _ev(llm, tr, Strategy(**base), sy)
    on = _ev(llm, tr, Strategy(**base, overlap_tp_comm=True), sy)
    shape = coll.GroupShape(size=8, ranks_per_domain=8, domain_span=1, same_rail=True)
    t = {op: coll.collective_time_s(op, 8192 * 8192 * 2, shape, sy, CAL.collectives) for op in hidden}
    count = {"reduce_scatter": 4, "all_gather": 6}
    saved = 4 * (1 - CAL.compute.overlap_slowdown) * sum(count[op] * v for op, v in t.items())
    assert off.iteration_time_s - on.iteration_time_s == pytest.approx(saved, rel=1e-9)


@pytest.mark.parametrize("recompute,modules", [(Recompute.full, ()), (Recompute.selective, (RecomputeModule.mlp,))])
def test_recomputation_that_replays_only_what_the_backward_reads_skips_the_mlp_down_projection(recompute, modules):
    # Llama 3 8B, ZeRO-3 over 8 H100s, one microbatch of 2 x 8192 tokens per rank. A reentrant checkpoint
    # reruns the whole MLP forward in the backward; a non-reentrant one (or JAX's remat) stops once the
    # tensors the backward reads are back, and the down projection's output feeds only the residual
    # stream: per layer one [16384, 14336] x [14336, 4096] GEMM fewer, 32 layers.
    from designer.perf.compute import gemm_time_s
    from designer.perf.iteration import precisions

    llm = load_model("llama3-8b")
    tr = TrainingSpec(sequence_length=8192, global_batch_sequences=16, total_tokens=1e12)
    sy = cluster("h100_sxm", 8)
    st = Strategy(tp=1, dp=8, microbatch_size=2, zero_stage=3, recompute=recompute, recompute_modules=modules)
    module = _ev(llm, tr, st, sy)
    needed = _ev(llm, tr, st.model_copy(update={"recompute_replay": "needed"}), sy)
    p = precisions(sy, tr, CAL)
    down = gemm_time_s(16384, 4096, 14336, 1, p.gemm_peak_flops, p.gemm_max_eff, CAL.compute)
    assert module.iteration_time_s - needed.iteration_time_s == pytest.approx(32 * down, rel=1e-6)
    # and the executed FLOPs lose those GEMMs': 2 x 14336 x 4096 per token per layer, 16 x 8192 tokens
    assert module.hardware_flops_per_iteration - needed.hardware_flops_per_iteration == pytest.approx(
        32 * 2 * 14336 * 4096 * 16 * 8192, rel=1e-9)
    # dropout after the MLP draws its mask from the down projection's output, which is then read:
    # GPT-3 1.7B (with dropout) replays the same either way, in time and in FLOPs
    gpt = load_model("gpt-1.7b")
    gtr = TrainingSpec(sequence_length=2048, global_batch_sequences=64, total_tokens=1e12)
    gst = Strategy(tp=1, dp=8, microbatch_size=8, zero_stage=1, recompute=recompute, recompute_modules=modules)
    g_module, g_needed = (_ev(gpt, gtr, gst.model_copy(update={"recompute_replay": r}), sy) for r in ("module", "needed"))
    assert g_needed.iteration_time_s == pytest.approx(g_module.iteration_time_s, rel=1e-12)
    assert g_needed.hardware_flops_per_iteration == pytest.approx(g_module.hardware_flops_per_iteration, rel=1e-12)
    # without recomputation there is nothing to replay
    none = st.model_copy(update={"recompute": Recompute.none, "recompute_modules": (), "microbatch_size": 1})
    tr1 = tr.model_copy(update={"global_batch_sequences": 8})
    assert _ev(llm, tr1, none, sy).iteration_time_s == pytest.approx(
        _ev(llm, tr1, none.model_copy(update={"recompute_replay": "needed"}), sy).iteration_time_s, rel=1e-12)


def test_tp_overlap_without_sequence_parallelism_hides_nothing():
    # Megatron-LM asserts --sequence-parallel with --tp-comm-overlap (arguments.py), and Transformer
    # Engine's userbuffers overlap gathers and reduce-scatters, not the all-reduces TP runs without
    # sequence parallelism: the flag changes nothing there, while with SP it hides the collectives
    llm = load_model("llama3-70b").model_copy(update={"layers": 4})
    tr = TrainingSpec(sequence_length=8192, global_batch_sequences=1, total_tokens=1e12)
    sy = cluster("h100_sxm", 8)
    base = dict(tp=8, dp=1, microbatch_size=1)
    off = _ev(llm, tr, Strategy(**base), sy)
    on = _ev(llm, tr, Strategy(**base, overlap_tp_comm=True), sy)
    assert on.iteration_time_s == off.iteration_time_s and on.breakdown.tp_s > 0
    sp = dict(base, sequence_parallel=True)
    assert _ev(llm, tr, Strategy(**sp, overlap_tp_comm=True), sy).iteration_time_s < _ev(llm, tr, Strategy(**sp), sy).iteration_time_s


def test_host_time_is_its_own_part_of_the_breakdown():
    # Llama 3 70B in NVFP4 on 576 GB300 at TP 8, CP 4: 512 tokens per rank per layer, far less GPU work
    # than the host's 1.17 ms of launches per layer (compute_efficiency.yaml framework.per_layer_s), so
    # the stage is host-bound. That wait is host_s, not exposed communication: exposed_comm_s stays
    # within the traffic there is, and captured CUDA graphs leave only the per-iteration host work
    llm = load_model("llama3-70b")
    tr = TrainingSpec(sequence_length=2048, global_batch_sequences=2304, total_tokens=1e12, precision="nvfp4")
    base = dict(tp=8, pp=2, dp=9, cp=4, sequence_parallel=True, overlap_tp_comm=True, zero_stage=0)
    sy = cluster("gb300", 576, hb_size=72)
    launched = evaluate_system(llm, tr, Strategy(**base), sy, calib=CAL)
    graphs = evaluate_system(llm, tr, Strategy(**base, cuda_graphs=True), sy, calib=CAL)
    per_iteration = CAL.compute.framework_per_iteration_s
    for r in (launched, graphs):
        b = r.breakdown
        assert r.iteration_time_s == pytest.approx(b.compute_s + b.exposed_comm_s + b.bubble_s + b.host_s)
        assert 0 <= b.exposed_comm_s <= b.tp_s + b.cp_s + b.pp_s + b.dp_s + b.ep_s
    assert graphs.breakdown.host_s == pytest.approx(per_iteration, rel=1e-12)
    microbatches = 2304 // 9
    layers_per_stage = 80 // 2
    # host-bound: each microbatch's stage lasts its launches at least, and the GPU's share of it is less
    assert launched.breakdown.host_s > per_iteration + 0.5 * microbatches * layers_per_stage * CAL.compute.framework_per_layer_s


def test_an_moe_layers_expert_launches_are_host_time():
    # Qwen3-30B-A3B on 8 H100 at EP 8: 16 local experts per MoE layer, each 0.25 ms of host launches
    # per microbatch (framework.per_expert_s), 48 MoE layers on the one stage; 16 microbatches of one
    # sequence per rank, GPU-bound otherwise: host_s = the per-iteration work + 16 x 48 x 16 x 0.25 ms,
    # and compute_s leaves it out (with the experts in one grouped kernel it goes). Full recompute
    # (what fits) reruns each layer's forward; its experts' launches are not counted again
    llm = load_model("qwen3-30b-a3b")
    tr = TrainingSpec(sequence_length=4096, global_batch_sequences=128, total_tokens=1e12, precision="bf16")
    sy = cluster("h100_sxm", 8)
    st = Strategy(tp=1, dp=8, ep=8, microbatch_size=1, zero_stage=1, recompute="full")
    r = evaluate_system(llm, tr, st, sy, calib=CAL)
    grouped = evaluate_system(llm, tr, st.model_copy(update={"expert_gemm": "grouped"}), sy, calib=CAL)
    per_expert = CAL.compute.framework_per_expert_s
    assert r.breakdown.host_s == pytest.approx(CAL.compute.framework_per_iteration_s + 16 * 48 * 16 * per_expert, rel=1e-9)
    assert grouped.breakdown.host_s == pytest.approx(CAL.compute.framework_per_iteration_s, rel=1e-12)
    assert r.breakdown.compute_s == pytest.approx(grouped.breakdown.compute_s, rel=1e-9)


def test_a_bucket_calls_fixed_cost_kept_in_the_memo_serves_other_bytes_and_bucket_counts():
    # _ct_buckets charges each further bucket call the time of a 1-byte call on the group, which
    # depends on the group and the strategy only: the value one sync keeps in the memo gives another
    # stage's sync (other bytes, other bucket counts) exactly what computing it afresh gives
    import numpy as np

    from designer.perf.iteration import _ct_buckets
    from designer.perf.placement import group_shape

    system = cluster("h100_sxm", 1024)
    ccal = load_perf_calibration().collectives
    rng = np.random.default_rng(3)
    n = 500  # past the small-batch path, where the memo applies
    g = group_shape(rng.choice([8, 16, 64, 128], n), rng.choice([1, 8], n), system)
    on, graphs = rng.random(n) < 0.7, rng.random(n) < 0.3
    for op in ("all_reduce", "reduce_scatter", "all_gather"):
        memo: dict = {}
        for nbytes, calls in ((rng.uniform(1e6, 1e10, n), rng.integers(1, 40, n)),
                              (rng.uniform(1e6, 1e10, n), rng.integers(1, 40, n))):
            kept = _ct_buckets(op, nbytes, calls, g, system, ccal, on, graphs, memo=memo, key=("dense", op))
            fresh = _ct_buckets(op, nbytes, calls, g, system, ccal, on, graphs)
            assert np.allclose(kept.time_s, fresh.time_s, rtol=1e-12, atol=0)
            assert np.any(calls[on] > 1) and np.any(kept.time_s > 0)
        assert ("dense", op) in memo
