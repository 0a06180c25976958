"""Muon (TrainingSpec.optimizer): the matrices it orthogonalises, the Newton-Schulz cost, its optimizer
state, the layer-wise distributed optimizer's traffic, and what it cannot run with. Hand-computed cases."""

from __future__ import annotations

import dataclasses

import pytest

from designer.perf import compute as cmp
from designer.perf.model import evaluate_system, load_perf_calibration
from designer.perf.records import Infeasible, Metrics
from designer.spec.llm import Strategy, TrainingSpec
from designer.spec.models import load_model
from tests.perf.systems import cluster

CAL = load_perf_calibration()


def _params(matrices):
    return sum(float(r) * float(c) for r, c in matrices)


def test_the_matrices_of_a_llama_layer_are_its_linear_weights():
    # Llama 3 8B (h 4096, 32 heads, 8 KV heads of 128, SwiGLU FFN 14336): q and o 4096 x 4096, k and v
    # 1024 x 4096, gate+up 28672 x 4096, down 4096 x 14336 = 41,943,040 + 176,160,768 = 218,103,808
    llm = load_model("llama3-8b")
    dense, experts = cmp.muon_matrices(llm, False, 1.0)
    assert experts == []
    assert _params(dense) == 218_103_808
    # blockwise under TP 4: each rank's blocks hold a quarter (k and v: 2 KV heads of 128 each)
    assert _params(cmp.muon_matrices(llm, False, 4.0)[0]) == 218_103_808 / 4


def test_the_matrices_of_a_kimi_k2_moe_layer():
    # Kimi K2 (h 7168, MLA: q_lora 1536, kv_lora 512, 64 heads of 128 + 64 rope, v 128; router over
    # 384 experts; one shared expert and routed experts of 2048):
    # q_down 1536 x 7168 = 11,010,048; q_up 12288 x 1536 = 18,874,368; kv_down 576 x 7168 = 4,128,768;
    # kv_up 16384 x 512 = 8,388,608; out 7168 x 8192 = 58,720,256; router 384 x 7168 = 2,752,512;
    # shared 3 x 2048 x 7168 = 44,040,192: 147,914,752 on the dense side; each expert 44,040,192
    llm = load_model("kimi-k2")
    dense, expert = cmp.muon_matrices(llm, True, 1.0)
    assert _params(dense) == 147_914_752
    assert _params(expert) == 44_040_192
    # the same as the parameter count less the vectors (two norms over h, MLA's two latent norms)
    non_expert, experts = cmp.moe_layer_params(llm)
    assert _params(dense) == non_expert - 2 * 7168 - 1536 - 512
    assert _params(expert) * 384 == experts


def test_newton_schulz_flops_are_the_quintic_iterations():
    # with a flat GEMM efficiency the time is the FLOPs over the rate: per step on an m x n matrix
    # (m <= n) X X^T 2m^2 n, A A 2m^3, B X 2m^2 n; five steps on Kimi K2's expert gate+up, 4096 x 7168:
    # 5 x (4 x 4096^2 x 7168 + 2 x 4096^3) = 3.09237e12 FLOPs
    flat = dataclasses.replace(CAL.compute, gemm_k_half=0.0, gemm_mn_half=0.0)
    t, n = cmp.newton_schulz_cost([(4096, 7168)], 5, 1e15, 0.5, flat)
    flops = 5 * (4 * 4096**2 * 7168 + 2 * 4096**3)
    assert n == 4096 * 7168
    assert float(t) == pytest.approx(flops / 0.5e15, rel=1e-12)
    # a tall matrix is iterated on its transpose: the same cost
    assert float(cmp.newton_schulz_cost([(7168, 4096)], 5, 1e15, 0.5, flat)[0]) == pytest.approx(float(t), rel=1e-12)


def _dense_run(optimizer: str, zero: int, model: str = "llama3-8b"):
    """A dense model on 64 H100 at DP 64 (Llama 3 8B unless named), full recompute."""
    llm = load_model(model)
    training = TrainingSpec(sequence_length=8192, global_batch_sequences=128, precision="bf16", total_tokens=1e12,
                            optimizer=optimizer)
    return evaluate_system(llm, training, Strategy(tp=1, pp=1, dp=64, microbatch_size=1, zero_stage=zero,
                                                   recompute="full"), cluster("h100_sxm", 64), calib=CAL)


def test_muon_keeps_one_moment_on_the_hidden_matrices():
    # Llama 3 8B: 8,030,261,248 parameters, of which the embedding and output layer (2 x 128256 x 4096)
    # and the final norm (4096) stay on AdamW: the 32 layers' 32 x (218,103,808 + 2 x 4096) =
    # 6,979,584,000 on Muon (their norms' few among them), each with the fp32 master and one fp32
    # momentum (8 B) instead of Adam's two moments (12 B), over the 64 ZeRO-1 ranks
    # Megatron's layer-wise optimizer deals whole parameters out, so one rank holds the output layer's
    # (or the embedding's) whole AdamW state, 525,336,576 x 12 B = 6,304,038,912 B, beside a 1/64 share
    # of the rest: (6,979,584,000 x 8 + 1,050,677,248 x 12 - 6,304,038,912) / 64 = 970,949,376 B
    adam, muon = _dense_run("adam", 1), _dense_run("muon", 1)
    assert isinstance(adam, Metrics) and isinstance(muon, Metrics)
    assert adam.memory.optimizer_bytes == pytest.approx(8_030_261_248 * 12 / 64, rel=1e-9)
    assert muon.memory.optimizer_bytes == pytest.approx(6_304_038_912 + 970_949_376, rel=1e-9)


def test_the_layer_wise_optimizer_all_reduces_and_gathers_after_the_step():
    # Megatron's distributed optimizer reduce-scatters the 16-bit gradients and all-gathers the 16-bit
    # weights ((p-1)/p of the buffer each); the layer-wise one all-reduces the gradients (twice that)
    # and all-gathers the weights: 3/2 of the bytes, and its gather, after the step, hides behind nothing
    adam, muon = _dense_run("adam", 1), _dense_run("muon", 1)
    dp_bytes = [m.type_bytes.dp_hb_bytes + m.type_bytes.dp_rail_bytes for m in (adam, muon)]
    assert dp_bytes[1] / dp_bytes[0] == pytest.approx(1.5, rel=1e-9)
    assert muon.breakdown.exposed_comm_s > adam.breakdown.exposed_comm_s
    # the Newton-Schulz matmuls lengthen the step
    assert muon.breakdown.compute_s > adam.breakdown.compute_s


def test_muon_without_sharding_orthogonalises_every_matrix_on_every_replica():
    # ZeRO-0: each replica runs all of its matrices' iterations; ZeRO-1 deals them out over 64 ranks
    # (a model whose unsharded states fit)
    adam0, muon0 = _dense_run("adam", 0, "mcore-gpt-1.7b"), _dense_run("muon", 0, "mcore-gpt-1.7b")
    adam1, muon1 = _dense_run("adam", 1, "mcore-gpt-1.7b"), _dense_run("muon", 1, "mcore-gpt-1.7b")
    extra0 = muon0.breakdown.compute_s - adam0.breakdown.compute_s
    extra1 = muon1.breakdown.compute_s - adam1.breakdown.compute_s
    assert extra0 == pytest.approx(64 * extra1, rel=1e-6)


@pytest.mark.parametrize("change", [dict(zero_stage=2), dict(zero_stage=3), dict(zero_stage=1, offload_optimizer=True)])
def test_muon_needs_whole_matrices_on_the_gpu(change):
    llm = load_model("llama3-8b")
    training = TrainingSpec(sequence_length=8192, global_batch_sequences=128, precision="bf16", total_tokens=1e12,
                            optimizer="muon")
    out = evaluate_system(llm, training, Strategy(tp=1, pp=1, dp=64, microbatch_size=1, recompute="full", **change),
                          cluster("h100_sxm", 64), calib=CAL)
    assert isinstance(out, Infeasible) and "Muon" in out.reason


def test_muon_gathers_16_bit_weights_under_fp8():
    # Megatron-Bridge turns the FP8 weight gather off under Muon's layer-wise optimizer
    t = TrainingSpec(sequence_length=4096, global_batch_sequences=64, precision="mxfp8", total_tokens=1e12,
                     fp8_param_gather=True, optimizer="muon")
    assert not bool(t.low_precision_param_gather(1, False))
    assert bool(t.model_copy(update={"optimizer": "adam"}).low_precision_param_gather(1, False))


def test_newton_schulz_work_shards_over_the_data_and_expert_data_parallel_groups():
    # Qwen3-30B-A3B (48 MoE layers, h 2048, 32 heads and 4 KV heads of 128, router over 128 experts of
    # 768, no shared expert) on 64 GPUs, EP 8, ZeRO-1: each rank orthogonalises 1/64 of the layers'
    # attention and router matrices and 1/8 (its expert data-parallel group) of its 16 local experts'.
    # FLOPs per step (4m^2 n + 2m^3): q and o (4096 x 2048) 85,899,345,920 each, k and v (512 x 2048)
    # 2,415,919,104 each, router (128 x 2048) 138,412,032: 176,768,942,080 per layer; an expert's
    # gate+up (1536 x 2048) 26,575,110,144 and down (2048 x 768) 5,737,807,872: 32,312,918,016.
    # Five steps: 48 x 5 x 176,768,942,080 / 64 + 48 x 16 x 5 x 32,312,918,016 / 8 = 1.61740e13 FLOPs,
    # at the flat 16-bit GEMM rate (no shape terms). The layers' norm weights (4,352 per layer against
    # 19,136,512 in its matrices) ride with the matrices at their mean cost: +2.3e-4 of the attention
    # share, 4.1% of the whole, so within 1e-5
    flat = dataclasses.replace(CAL, compute=dataclasses.replace(CAL.compute, gemm_k_half=0.0, gemm_mn_half=0.0))
    llm = load_model("qwen3-30b-a3b")
    system = cluster("h100_sxm", 64)
    times = {}
    for optimizer in ("adam", "muon"):
        training = TrainingSpec(sequence_length=4096, global_batch_sequences=128, precision="bf16", total_tokens=1e12,
                                optimizer=optimizer, moe_load_balance="forced")
        m = evaluate_system(llm, training, Strategy(tp=1, pp=1, dp=64, ep=8, microbatch_size=1, zero_stage=1,
                                                    recompute="full"), system, calib=flat)
        assert isinstance(m, Metrics), m
        times[optimizer] = m.breakdown.compute_s
    from designer.perf.iteration import precisions
    prec = precisions(system, training, flat)
    flops = 48 * 5 * 176_768_942_080 / 64 + 48 * 16 * 5 * 32_312_918_016 / 8
    assert times["muon"] - times["adam"] == pytest.approx(flops / (prec.hi_peak_flops * prec.hi_max_eff), rel=1e-5)


@pytest.mark.parametrize("change, field", [
    (dict(optimizer_state_dtype="bf16"), "optimizer_state_dtype"),
    (dict(grad_accumulation_dtype="bf16"), "grad_accumulation_dtype"),
    (dict(precision="fp16"), "precision"),
    (dict(muon_ns_steps=3), "muon_ns_steps"),
])
def test_muon_refuses_what_megatron_refuses(change, field):
    # Megatron-Core keeps Muon's momentum in fp32, refuses the precision-aware optimizer and fp16 with
    # it, and its quintic coefficients come in fives
    with pytest.raises(ValueError, match=field):
        TrainingSpec(sequence_length=4096, global_batch_sequences=64, total_tokens=1e12, optimizer="muon", **change)


def test_muon_shards_over_the_whole_data_parallel_group():
    # the layer-wise optimizer runs without the distributed optimizer, so it has no shard group (HSDP)
    llm = load_model("llama3-8b")
    training = TrainingSpec(sequence_length=8192, global_batch_sequences=128, precision="bf16", total_tokens=1e12,
                            optimizer="muon")
    out = evaluate_system(llm, training, Strategy(tp=1, pp=1, dp=64, microbatch_size=1, zero_stage=1,
                                                  shard_group_size=8, recompute="full"), cluster("h100_sxm", 64),
                          calib=CAL)
    assert isinstance(out, Infeasible) and "shard group" in out.reason


def test_designer_space_names_what_muon_removes():
    from designer.search.space import explain_space
    from designer.spec.study import StrategySpace

    llm = load_model("llama3-8b")
    training = TrainingSpec(sequence_length=8192, global_batch_sequences=128, total_tokens=1e12, optimizer="muon")
    removed = {(r.dim, str(r.value)) for r in explain_space(
        llm, training, StrategySpace(zero_stages=(0, 1, 2, 3), offload_optimizer=(False, True)), hb_domain_size=8)}
    assert {("zero_stage", "[2, 3]"), ("offload_optimizer", "[True]")} <= removed
