"""Memory model against Korthikanti et al. 2022 (Table 2) and ZeRO (Rajbhandari et al. 2020 §5)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from designer.perf import memory as mem
from designer.perf.model import evaluate_system, load_perf_calibration
from designer.perf.records import Infeasible, Metrics, StrategyArrays
from designer.spec.llm import Recompute, Strategy, TrainingSpec
from designer.spec.models import load_model
from tests.perf.systems import cluster

CAL = load_perf_calibration()


def _act(llm, *, t, sp, rc, b=1, s=2048, flash=False):
    return float(mem.activation_bytes_per_layer(llm, moe_layer=False, b=np.array([b]), s=s, tp=np.array([t]),
                                                cp=np.array([1]), sp=np.array([sp]), recompute=np.array([rc]),
                                                flash=flash)[0])


@pytest.mark.parametrize("t", [1, 2, 8])
def test_korthikanti_table2(t):
    # GPT-3 175B: s = 2048, h = 12288, a = 96, b = 1 (Korthikanti et al. 2022, Table 2):
    llm = load_model("gpt3-175b")
    s, b, h, a = 2048, 1, 12288, 96
    sbh = s * b * h
    # no recompute, TP only:           s·b·h·(10 + 24/t + 5·a·s/(h·t))
    assert _act(llm, t=t, sp=False, rc=mem.RECOMPUTE_NONE) == pytest.approx(sbh * (10 + 24 / t + 5 * a * s / (h * t)))
    # TP + SP:                          s·b·h/t·(34 + 5·a·s/h)
    assert _act(llm, t=t, sp=True, rc=mem.RECOMPUTE_NONE) == pytest.approx(sbh / t * (34 + 5 * a * s / h))
    # TP + SP + selective recompute:    34·s·b·h/t
    assert _act(llm, t=t, sp=True, rc=mem.RECOMPUTE_SELECTIVE) == pytest.approx(34 * sbh / t)
    # TP + selective, no SP:            s·b·h·(10 + 24/t)
    assert _act(llm, t=t, sp=False, rc=mem.RECOMPUTE_SELECTIVE) == pytest.approx(sbh * (10 + 24 / t))
    # full recompute keeps the layer input: 2·s·b·h (/t with SP)
    assert _act(llm, t=t, sp=False, rc=mem.RECOMPUTE_FULL) == pytest.approx(2 * sbh)
    assert _act(llm, t=t, sp=True, rc=mem.RECOMPUTE_FULL) == pytest.approx(2 * sbh / t)


@pytest.mark.parametrize("t", [1, 2, 8])
def test_low_precision_saves_the_linear_inputs_quantised(t):
    # GPT-3 175B as in Korthikanti Table 2, with the linear layers' saved inputs at 1 byte (the fp8
    # copy Transformer Engine keeps for the weight-gradient GEMM) instead of 2. Of the 34·s·b·h:
    # the two norm outputs (4 -> 2, replicated), the attention output (2 -> 1, split by t) and the
    # GeLU output that feeds fc2 (8 -> 4, split by t) shrink; the rest (norm inputs 4, masks 2,
    # Q K V 6, fc1 output 8) stays 16-bit: s·b·h·(8 + 19/t) + the scores' 5·a·s²·b/t.
    llm = load_model("gpt3-175b")
    s, b, h, a = 2048, 1, 12288, 96
    sbh = s * b * h

    def act(sp):
        return float(mem.activation_bytes_per_layer(
            llm, moe_layer=False, b=np.array([b]), s=s, tp=np.array([t]), cp=np.array([1]), sp=np.array([sp]),
            recompute=np.array([mem.RECOMPUTE_NONE]), flash=False, linear_input_bytes=1.0)[0])
    assert act(False) == pytest.approx(sbh * (8 + 19 / t + 5 * a * s / (h * t)))
    assert act(True) == pytest.approx(sbh / t * (27 + 5 * a * s / h))


def test_zero_paper_example_7_5b_on_64_gpus():
    # ZeRO §5 / Fig. 1: Ψ = 7.5B, N_d = 64: baseline 120 GB, P_os 31.4 GB, P_os+g 16.6 GB, P_os+g+p 1.9 GB.
    psi, nd = 7.5e9, 64
    want = [120e9, 31.4e9, 16.6e9, 1.875e9]
    for stage, w in enumerate(want):
        wb, gb, ob = mem.model_state_bytes(np.array([psi]), np.array([0.0]), dp_shard=np.array([nd]),
                                           expert_dp_shard=np.array([1.0]), zero_stage=np.array([stage]),
                                           hpz=np.array([False]), ranks_per_node_dp=np.array([8]))
        assert float(wb[0] + gb[0] + ob[0]) == pytest.approx(w, rel=0.01)


def test_hpz_adds_a_weight_copy_sharded_in_the_node():
    # hpZ: + 2Ψ / (DP ranks per node) = 2·7.5e9/8 = 1.875e9 bytes
    args = dict(dp_shard=np.array([64]), expert_dp_shard=np.array([1.0]), zero_stage=np.array([3]),
                ranks_per_node_dp=np.array([8]))
    w0 = mem.model_state_bytes(np.array([7.5e9]), np.array([0.0]), hpz=np.array([False]), **args)[0]
    w1 = mem.model_state_bytes(np.array([7.5e9]), np.array([0.0]), hpz=np.array([True]), **args)[0]
    assert float(w1[0] - w0[0]) == pytest.approx(2 * 7.5e9 / 8)


def test_in_flight_microbatches_per_schedule():
    # GPipe m; 1F1B min(m, p); interleaved p·(1 + (p−1)/(p·v)) (Korthikanti §4.2.3).
    sched = np.array([mem.SCHEDULE_GPIPE, mem.SCHEDULE_1F1B, mem.SCHEDULE_INTERLEAVED, mem.SCHEDULE_1F1B])
    got = mem.in_flight_factor(sched, np.array([8, 8, 8, 8]), np.array([32, 32, 32, 4]), np.array([1, 1, 2, 1]))
    assert got.tolist() == pytest.approx([32, 8, 8 * (1 + 7 / 16), 4])


def test_oversized_strategy_is_infeasible_with_a_one_line_reason():
    llm = load_model("gpt-1t")
    tr = TrainingSpec(sequence_length=2048, global_batch_sequences=8, total_tokens=1e9)
    r = evaluate_system(llm, tr, Strategy(tp=8, dp=1, zero_stage=0, recompute=Recompute.full),
                        cluster("a100_80gb", 8, nic_gbps=200), calib=CAL)
    assert isinstance(r, Infeasible) and r.kind == "memory"
    assert "\n" not in r.reason and "GiB" in r.reason
    # 1e12 params / 8 x 16 bytes = 2 TB per GPU, far above 80 GB
    assert r.memory_per_gpu_bytes > 1e12 * 16 / 8
    assert r.row()["feasible"] is False


def test_memory_breakdown_of_a_feasible_run():
    # gpt-18b row of Megatron Table 1 (tp 8, dp 32, ZeRO-0): weights 2 B/param of 1/8 of the model.
    llm = load_model("gpt-18b")
    tr = TrainingSpec(sequence_length=2048, global_batch_sequences=1024, precision="fp16", total_tokens=1e9)
    r = evaluate_system(llm, tr, Strategy(tp=8, dp=32, microbatch_size=8, zero_stage=0, recompute=Recompute.full),
                        cluster("a100_80gb", 256, nic_gbps=200), calib=CAL)
    assert isinstance(r, Metrics) and r.fits_in_memory
    from designer.perf.compute import total_params

    # stage params = all layers + embedding (tied, counted once) / 8; position embeddings excluded
    assert r.memory.weights_bytes == pytest.approx(2 * total_params(llm) / 8, rel=0.01)
    assert r.memory.optimizer_bytes == pytest.approx(6 * r.memory.weights_bytes, rel=1e-9)
    row = r.row()
    assert row["memory_weights_bytes"] == r.memory.weights_bytes and row["fits_in_memory"] is True


def test_fsdp_fp32_sharded_params_hold_no_16_bit_copy_at_rest():
    # Llama-3 8B, ZeRO-3 over 8 H100s: a separate 16-bit weight holds 2 B/param / 8 at rest; PyTorch
    # FSDP's fp32 shard is the master, so its weights at rest are none and the state is 16 B/param / 8
    # (4 fp32 gradient + 12 master and moments) against 18; the activations and gathers are the same.
    from designer.perf.compute import total_params

    llm = load_model("llama3-8b")
    st = Strategy(tp=1, dp=8, zero_stage=3, recompute=Recompute.full)
    runs = {}
    for flag in (False, True):
        tr = TrainingSpec(sequence_length=8192, global_batch_sequences=16, total_tokens=1e9, fp32_sharded_params=flag)
        runs[flag] = evaluate_system(llm, tr, st, cluster("h100_sxm", 8), calib=CAL)
    sep, fsdp = runs[False].memory, runs[True].memory
    n = total_params(llm)
    assert sep.weights_bytes == pytest.approx(2 * n / 8, rel=0.01)
    assert fsdp.weights_bytes == 0.0
    assert fsdp.gradients_bytes == sep.gradients_bytes == pytest.approx(4 * n / 8, rel=0.01)
    assert fsdp.optimizer_bytes == sep.optimizer_bytes
    assert fsdp.activations_bytes == sep.activations_bytes and fsdp.other_bytes == sep.other_bytes
    assert runs[False].memory_per_gpu_bytes - runs[True].memory_per_gpu_bytes == pytest.approx(sep.weights_bytes)


def test_pure_bf16_training_keeps_no_master_copy():
    # Llama 3 8B (8,030,261,248 parameters), ZeRO-3 over 8 H100s, trained as NeMo AutoModel builds its
    # models: bf16 weights that the optimizer updates in place, bf16 gradients and bf16 Adam moments
    # (fp32_master_weights false): 2 + 2 + 2 x 2 = 8 B per parameter over 8 ranks, against 2 + 4 + 12.
    llm = load_model("llama3-8b")
    st = Strategy(tp=1, dp=8, zero_stage=3, recompute=Recompute.full)
    tr = TrainingSpec(sequence_length=8192, global_batch_sequences=16, total_tokens=1e9, fp32_master_weights=False,
                      grad_accumulation_dtype="bf16", optimizer_state_dtype="bf16")
    m = evaluate_system(llm, tr, st, cluster("h100_sxm", 8), calib=CAL).memory
    assert m.weights_bytes == pytest.approx(2 * 8_030_261_248 / 8, rel=1e-9)
    assert m.gradients_bytes == pytest.approx(2 * 8_030_261_248 / 8, rel=1e-9)
    assert m.optimizer_bytes == pytest.approx(4 * 8_030_261_248 / 8, rel=1e-9)
    # the fp32 shards are the fp32 master, so the two cannot both be stated
    with pytest.raises(ValueError, match="fp32_sharded_params"):
        TrainingSpec(sequence_length=8192, global_batch_sequences=16, total_tokens=1e9, fp32_master_weights=False,
                     fp32_sharded_params=True)


@pytest.mark.parametrize("t", [1, 2, 8])
def test_fp8_activation_input_store_halves_the_saved_gate_and_up_outputs(t):
    # Llama 3 8B (SwiGLU, FFN 14336): the activation's saved input is the gate and up outputs,
    # 2 x 14336 / t elements per token at 2 bytes; Megatron's activation_func_fp8_input_store keeps an
    # fp8 copy, 1 byte each: s·b·2·14336/t bytes fewer per layer, the rest unchanged.
    llm = load_model("llama3-8b")
    s = 4096

    def act(in_bytes, rc=mem.RECOMPUTE_NONE, moe=False, model=llm):
        return float(mem.activation_bytes_per_layer(
            model, moe_layer=moe, b=np.array([1]), s=s, tp=np.array([t]), cp=np.array([1]), sp=np.array([True]),
            recompute=np.array([rc]), flash=True, act_input_bytes=in_bytes)[0])
    assert act(2.0) - act(1.0) == pytest.approx(s * 2 * 14336 / t)
    # full recompute keeps the layer input only, so there is nothing to shrink
    assert act(2.0, mem.RECOMPUTE_FULL) == act(1.0, mem.RECOMPUTE_FULL)
    # Mixtral 8x7B's experts: each token's top-2 copies hold 2 x 14336 / t gate and up outputs
    mix = load_model("mixtral-8x7b")
    assert act(2.0, moe=True, model=mix) - act(1.0, moe=True, model=mix) == pytest.approx(s * 2 * 2 * 14336 / t)


def test_fp8_activation_input_store_needs_a_gated_mlp():
    llm = load_model("gpt-1.7b")  # GeLU MLP
    tr = TrainingSpec(sequence_length=2048, global_batch_sequences=8, total_tokens=1e9)
    r = evaluate_system(llm, tr, Strategy(dp=8, activation_input_fp8=True), cluster("h100_sxm", 8), calib=CAL)
    assert isinstance(r, Infeasible) and r.kind == "compatibility"
    assert r.reason == "activation_input_fp8 needs a gated MLP (SwiGLU); model gpt-1.7b has none"


def test_dualpipe_rank_holds_the_first_and_last_stages():
    # An 8-layer model on pp 4 under DualPipe: rank 0 holds stage 0 (2 layers, the embedding) and
    # stage 3 (2 layers, the final norm and the output layer), the middle ranks two middle stages;
    # every rank holds PP + 1 = 5 microbatches' worth of one stage's activations (DeepSeek-V3 Table
    # 2), rank 0 the fp32 logits of the last stage too.
    from designer.spec.llm import LLMSpec, Schedule

    h, f, a, V, L = 1024, 4096, 16, 32000, 8
    llm = LLMSpec(name="gelu-8l", layers=L, hidden_size=h, ffn_size=f, heads=a, vocab_size=V, linear_bias=False,
                  norm="rmsnorm")
    s = 2048
    tr = TrainingSpec(sequence_length=s, global_batch_sequences=16, total_tokens=1e9)
    st = Strategy(pp=4, dp=2, microbatch_size=1, schedule=Schedule.dualpipe, zero_stage=0)
    r = evaluate_system(llm, tr, st, cluster("h100_sxm", 8), calib=CAL)
    assert isinstance(r, Metrics)
    layer = 4 * h * h + 2 * h * f + 2 * h  # Q, K, V, O; fc1, fc2; two RMSNorm weights
    rank0 = 4 * layer + 2 * V * h + h
    assert r.memory.weights_bytes == pytest.approx(2 * rank0)
    # per layer (Korthikanti Table 2 without dropout, fused attention): norm inputs and outputs 8·s·h,
    # Q K V and the attention output 8·s·h, fc1 output and GeLU output 4·s·f, the fp32 LSE 4·s·a
    act_layer = 8 * s * h + 8 * s * h + 4 * s * f + 4 * s * a
    assert r.memory.activations_bytes == pytest.approx(5 * 2 * act_layer + 4 * s * V)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=st.sampled_from(["llama3-8b", "mixtral-8x7b", "gpt3-175b"]), pp=st.sampled_from([1, 2, 4, 8]),
       schedule=st.sampled_from(["1f1b", "interleaved", "dualpipe", "zero_bubble"]), zero=st.sampled_from([0, 1, 3]),
       recompute=st.sampled_from(["none", "selective", "full"]), mbs=st.sampled_from([1, 2]),
       act_fp8=st.booleans())
def test_the_memory_breakdown_is_one_ranks_and_adds_up(model, pp, schedule, zero, recompute, mbs, act_fp8):
    # The parts reported are those of the rank holding the most, so they add up to the total it
    # holds, feasible or not (the breakdown of a too-large strategy is the one that does not fit)
    llm = load_model(model)
    ep = 8 if llm.moe is not None else 1
    tr = TrainingSpec(sequence_length=4096, global_batch_sequences=64, total_tokens=1e9)
    v = 2 if schedule == "interleaved" else 1
    st_ = Strategy(tp=8, pp=pp, dp=64 // pp, ep=ep, microbatch_size=mbs, schedule=schedule, virtual_stages=v,
                   zero_stage=zero, recompute=recompute, activation_input_fp8=act_fp8 and llm.gated_mlp)
    r = evaluate_system(llm, tr, st_, cluster("h100_sxm", 512), calib=CAL)
    if isinstance(r, Infeasible) and r.kind != "memory":
        return
    assert r.memory.total_bytes == pytest.approx(r.memory_per_gpu_bytes, rel=1e-12)
    assert min(r.memory.weights_bytes, r.memory.gradients_bytes, r.memory.activations_bytes) > 0


@pytest.mark.parametrize("tp", [1, 8])
def test_eager_cross_entropy_holds_three_fp32_copies_of_the_logits(tp):
    # Llama 3 8B, one microbatch of 2 x 8192 tokens, vocabulary 128,256 split over TP (vocab-parallel
    # loss). PyTorch's cross_entropy on upcast logits, op by op, holds at its backward's peak the saved
    # fp32 log-softmax output, the nll_loss gradient and the input gradient: 3 x 4 bytes per logit,
    # against the 4 of a fused (in-place) loss. Its HBM traffic over both passes: upcast 2 + 4, log_softmax
    # 3 reads and a write of 4, nll_loss's gradient 4, log_softmax_backward 3 reads and a write of 4, the
    # cast back 4 + 2: 48 bytes per logit, against the fused loss's 3 x (2 + 4 + 4) = 30.
    llm = load_model("llama3-8b")
    dp = 8 // tp  # ZeRO-3 over the rest of the node
    tr = TrainingSpec(sequence_length=8192, global_batch_sequences=2 * dp, total_tokens=1e12)
    sy = cluster("h100_sxm", 8)
    st = Strategy(tp=tp, dp=dp, microbatch_size=2, sequence_parallel=tp > 1, zero_stage=3, recompute=Recompute.full)
    fused = evaluate_system(llm, tr, st, sy, calib=CAL)
    eager = evaluate_system(llm, tr, st.model_copy(update={"cross_entropy": "eager"}), sy, calib=CAL)
    logits = 2 * 8192 * 128256 / tp
    assert eager.memory_per_gpu_bytes - fused.memory_per_gpu_bytes == pytest.approx(logits * (12 - 4), rel=1e-9)
    hbm = sy.gpu.hbm_bandwidth_bytes_per_s * CAL.compute.hbm_efficiency
    assert eager.iteration_time_s - fused.iteration_time_s == pytest.approx(logits * (48 - 30) / hbm, rel=1e-9)


@pytest.mark.parametrize("t", [1, 2, 8])
def test_mla_latents_live_on_the_ranks_own_tokens_with_their_norms_input(t):
    # A DeepSeek-V3 dense layer (h 7168, 128 heads, q LoRA 1536, kv LoRA 512, qk 128 + 64, v 128,
    # FFN 18432), 4096 tokens, fused attention, no recompute, 16-bit. Per token at tp 1:
    #   norm inputs 2·h·2 + norm outputs 2·h·2                       = 57344
    #   latents (1536 + 512)·(2 input of the up projection's fused norm + 2 its output) = 8192
    #   Q, K, V up-projected: 128·(2·192 + 128)·2                     = 131072
    #   the output projection's input 128·128·2                        = 32768
    #   the kernel's log-sum-exp 128·4                                 = 512
    #   the MLP's gate and up outputs and fc2 input 18432·(2·2 + 2)   = 110592
    # Under sequence parallelism every term is split over tp (the down projections run on the
    # rank's s/tp tokens: Megatron-Core multi_latent_attention.py "q_compressed: [s / TP, b,
    # q_lora_rank]").
    llm = load_model("deepseek-v3")
    per_token = 57344 + 8192 + 131072 + 32768 + 512 + 110592

    def act(recompute, rc_modules):
        return float(mem.activation_bytes_per_layer(
            llm, moe_layer=False, b=np.array([1]), s=4096, tp=np.array([t]), cp=np.array([1]), sp=np.array([True]),
            recompute=np.array([recompute]), flash=True, rc_modules=np.array([rc_modules]))[0])
    assert act(mem.RECOMPUTE_NONE, 0) == pytest.approx(4096 * per_token / t, rel=1e-12)
    # recomputing the up projections (Megatron's mla_up_proj) keeps their checkpoint's inputs: the
    # latents (2 bytes each, on the rank's tokens) and the shared rope key, gathered to the whole
    # sequence before it (64 x 2 bytes per token on every rank); the up-projected Q, K, V go
    kept = 57344 + 2048 * 2 + 32768 + 512 + 110592
    assert act(mem.RECOMPUTE_SELECTIVE, mem.RC_MLA_UP) == pytest.approx(4096 * (kept / t + 64 * 2), rel=1e-12)


def test_fp8_fused_attention_keeps_its_16_bit_output_beside_the_projections_fp8_copy():
    # Llama 3 8B (h 4096, 32 heads, 8 KV heads of 128, FFN 14336), tp 1, 4096 tokens, FP8 current
    # scaling (saved linear inputs 1 byte), fused attention, no recompute. Per token:
    #   norm inputs 2·h·2 = 16384, norm outputs (fp8) 2·h·1 = 8192
    #   Q 32·128·2, K and V 2·8·128·2, the output projection's fp8 input 32·128·1, and the kernel's
    #   own 16-bit output O 32·128·2 (FlashAttention-2 Alg. 2 / Transformer Engine's FusedAttnFunc
    #   save it for the backward)                                    = 24576
    #   log-sum-exp 32·4 = 128; gate and up outputs 14336·2·2 and the fp8 fc2 input 14336·1 = 71680
    # An 8-bit attention kernel (TrainingSpec.fp8_attention) hands its own output to the projection:
    # one 1-byte tensor, 32·128·2 bytes less.
    from designer.perf import iteration as it

    llm = load_model("llama3-8b")
    sy = cluster("h100_sxm", 8)
    st = Strategy(tp=1, dp=8, microbatch_size=1, zero_stage=1)

    def act(**kw):
        tr = TrainingSpec(sequence_length=4096, global_batch_sequences=8, total_tokens=1e9, precision="fp8",
                          fp8_recipe="current", **kw)
        c = it._context(llm, tr, StrategyArrays.from_strategies([st]), sy, CAL)
        return float(it.layer_activation_bytes(c)[0][0])
    per_token = 16384 + 8192 + 24576 + 128 + 71680
    assert act(attention_output_saved="quantized") == pytest.approx(4096 * per_token, rel=1e-12)
    assert act(fp8_attention=True) == pytest.approx(4096 * (per_token - 32 * 128 * 2), rel=1e-12)


@pytest.mark.parametrize("recipe, modules, saved, per_token_change", [
    # Megatron-Core's save_original_input on the output projection (current scaling, its default
    # there): the projection keeps the kernel's 16-bit output O, so the 1-byte copy goes: 32·128·1 less
    ("current", None, None, -32 * 128 * 1),
    # delayed scaling keeps Transformer Engine's default, the 1-byte copy beside O
    ("delayed", None, None, 0),
    # with the attention core recomputed the kernel keeps no O: the projection's 16-bit input is
    # 32·128·2 where the 1-byte copy was 32·128·1, one byte per element more
    ("current", ("core_attn",), None, 32 * 128 * 1),
    # stated by the run
    ("current", None, "quantized", 0),
    ("delayed", None, "original", -32 * 128 * 1),
])
def test_the_output_projection_keeps_the_16_bit_attention_output_where_megatron_core_does(recipe, modules, saved,
                                                                                          per_token_change):
    # Llama 3 8B as above; against the same run with the quantised copy (Transformer Engine's default)
    from designer.perf import iteration as it

    llm = load_model("llama3-8b")
    sy = cluster("h100_sxm", 8)
    rc = dict(recompute="selective", recompute_modules=modules) if modules else {}
    st = Strategy(tp=1, dp=8, microbatch_size=1, zero_stage=1, **rc)

    def act(saved_as):
        tr = TrainingSpec(sequence_length=4096, global_batch_sequences=8, total_tokens=1e9, precision="fp8",
                          fp8_recipe=recipe, attention_output_saved=saved_as)
        c = it._context(llm, tr, StrategyArrays.from_strategies([st]), sy, CAL)
        return float(it.layer_activation_bytes(c).dense[0])
    assert act(saved) - act("quantized") == pytest.approx(4096 * per_token_change, rel=1e-12, abs=1e-6)


@pytest.mark.parametrize("v", [2, 4, 8])
def test_every_interleaved_rank_holds_megatrons_warm_up_chunks(v):
    # Megatron-Core schedules.py (forward_backward_pipelining_with_interleaving): rank r runs
    # (pp - r - 1)·2 + (v - 1)·pp warm-up chunks before its first backward and holds one more, each
    # chunk a v-th of its layers: (2(pp-r-1) + (v-1)pp + 1)/v stages' worth. pp 16, 128 microbatches:
    # v 4, rank 1: (28 + 48 + 1)/4 = 19.25; rank 14: (2 + 48 + 1)/4 = 12.75. 1F1B: pp - r.
    pp, m = 16, 128
    for r in (0, 1, 7, 14, 15):
        got = float(mem.in_flight_factor(np.array([mem.SCHEDULE_INTERLEAVED]), pp, m, v, rank=r)[0])
        assert got == pytest.approx((2 * (pp - r - 1) + (v - 1) * pp + 1) / v, rel=1e-12)
        assert float(mem.in_flight_factor(np.array([mem.SCHEDULE_1F1B]), pp, m, v, rank=r)[0]) == pp - r
    # the last rank's own formula agrees with the general one
    last = float(mem.last_stage_in_flight(np.array([mem.SCHEDULE_INTERLEAVED]), pp, m, v)[0])
    assert last == pytest.approx(float(mem.in_flight_factor(np.array([mem.SCHEDULE_INTERLEAVED]), pp, m, v,
                                                            rank=pp - 1)[0]))


@pytest.mark.parametrize("precision,copy_bytes", [
    # a row-wise and a column-wise copy of each linear weight (Transformer Engine), at the format's
    # bytes per element with its scales: FP8 1; MXFP8 1 + 1/32 (an 8-bit scale per 32); NVFP4 1/2 + 1/16
    # (an 8-bit scale per 16)
    ("fp8", 2 * 1.0), ("mxfp8", 2 * (1 + 1 / 32)), ("nvfp4", 2 * (0.5 + 1 / 16))])
def test_low_precision_weight_copies_take_the_recipes_bytes_and_skip_the_embeddings(precision, copy_bytes):
    # Llama 3 8B, tp 1, pp 1, ZeRO-1 on 8 B200s: the low-precision run keeps, beside the 16-bit weights,
    # the two copies of every transformer linear, and none of the embedding, the output layer (a
    # 16-bit GEMM in Megatron) or the final norm: (copy bytes) x (all params - V·h·2 - h)
    from designer.perf import compute as cmp
    llm = load_model("llama3-8b")
    st = Strategy(dp=8, zero_stage=1, recompute=Recompute.full)
    sy = cluster("b200", 8)

    def weights(prec):
        tr = TrainingSpec(sequence_length=8192, global_batch_sequences=16, total_tokens=1e9, precision=prec)
        m = evaluate_system(llm, tr, st, sy, calib=CAL)
        assert isinstance(m, Metrics)
        return m.memory.weights_bytes
    linear = cmp.total_params(llm) - cmp.embedding_params(llm) - cmp.final_norm_params(llm)
    assert weights(precision) - weights("bf16") == pytest.approx(copy_bytes * linear, rel=1e-9)


def test_the_mtp_module_adds_its_layer_and_logits_to_the_last_stage():
    # DeepSeek-V3's MTP module runs on the last pipeline stage (Megatron-Core multi_token_prediction.py:
    # mtp_on_this_rank = is_pipeline_last_stage): one more layer's saved activations and its own fp32
    # logits per microbatch in flight. One stage (pp 1), full recompute, s 4096, b 1, tp 1: the layer
    # keeps its input, 2·s·h bytes (Korthikanti §5), and the logits s·V·4 bytes: the same model
    # without MTP holds that much less.
    from designer.perf import iteration as it
    tr = TrainingSpec(sequence_length=4096, global_batch_sequences=64, total_tokens=1e9)
    st = Strategy(dp=32, ep=32, zero_stage=1, recompute=Recompute.full)
    sy = cluster("h100_sxm", 32)
    act = {}
    for name in ("deepseek-v3", "deepseek-v3-no-mtp"):
        r = it.iteration_arrays(load_model(name), tr, StrategyArrays.from_strategies([st]), sy, CAL)
        act[name] = float(r["activations_bytes"][0])
    llm = load_model("deepseek-v3")
    assert llm.mtp_layers == 1 and load_model("deepseek-v3-no-mtp").mtp_layers == 0
    assert mem.LOGIT_BYTES_SAVED == 4
    s, h, V = 4096, llm.hidden_size, llm.vocab_size
    assert act["deepseek-v3"] - act["deepseek-v3-no-mtp"] == pytest.approx(2 * s * h + s * V * 4, rel=1e-9)


def test_tp_keeps_mlas_down_projections_and_the_router_whole():
    # Megatron-Core builds MLA's linear_q_down_proj and linear_kv_down_proj with parallel_mode
    # 'duplicated' (multi_latent_attention.py), and theoretical_memory_usage.py counts the router among
    # the replicated parameters: at tp 8 each GPU holds them whole. DeepSeek-V3, one stage, ZeRO-1:
    # per MoE layer h·(q_lora + kv_lora + rope) + q_lora + kv_lora (latent norms) + h·E more than 1/8.
    from designer.perf import iteration as it
    llm = load_model("deepseek-v3")
    m, h, E = llm.mla, llm.hidden_size, llm.moe.experts
    rep = h * (m.q_lora_rank + m.kv_lora_rank + m.qk_rope_head_dim) + m.q_lora_rank + m.kv_lora_rank
    tr = TrainingSpec(sequence_length=4096, global_batch_sequences=64, total_tokens=1e9)
    sy = cluster("h100_sxm", 64)
    w = {}
    for tp in (1, 8):
        st = Strategy(tp=tp, dp=64 // tp, ep=8, sequence_parallel=tp > 1, zero_stage=3, recompute=Recompute.full)
        r = it.iteration_arrays(llm, tr, StrategyArrays.from_strategies([st]), sy, CAL)
        # ZeRO-3 shards the 16-bit weights: undo it, to the parameters one TP rank holds. Dense side:
        # over dp (64/tp); expert side: over the expert data-parallel group (64/ep = 8 either way), so
        # scaled by 64/tp the expert side comes out E_all at tp 1 and E_all/8 at tp 8, and cancels in
        # w[8] - w[1]/8 below
        w[tp] = float(r["weights_bytes"][0]) * (64 // tp) / 2
    from designer.perf import compute as cmp
    n_dense, n_moe = cmp.layer_kinds(llm)
    replicated = n_dense * rep + n_moe * (rep + h * E)
    # the non-expert side per TP rank is (all - replicated)/tp + replicated: at tp 8 it exceeds 1/8 of
    # tp 1's by 7/8 of the replicated parameters (the MTP layer's own, 1 of 62, left within 2e-3)
    assert w[8] - w[1] / 8 == pytest.approx(replicated * (1 - 1 / 8), rel=2e-3)


def test_zero3_gathers_low_precision_weights_without_their_16_bit_copy():
    # ZeRO-3 holds the layer in use and the prefetched ones gathered. In BF16 that is 2 bytes per
    # parameter; under FP8 with 16-bit weights, the 16-bit weight and its FP8 pair (2 + 2); with the
    # weights kept and gathered in FP8 (fp8_param_gather), the FP8 pair alone (2). Llama 3 8B, one
    # dense layer 4096·(4096 + 2·1024) + 4096·4096 + 3·4096·14336 + 2·4096 parameters, prefetch 1.
    llm = load_model("llama3-8b")
    layer = 4096 * (4096 + 2 * 1024) + 4096 * 4096 + 3 * 4096 * 14336 + 2 * 4096
    st = Strategy(dp=8, zero_stage=3, recompute=Recompute.full, prefetch_layers=1)
    sy = cluster("h100_sxm", 8)

    def gathered(prec, param_gather=False):
        tr = TrainingSpec(sequence_length=8192, global_batch_sequences=16, total_tokens=1e9, precision=prec,
                          fp8_param_gather=param_gather)
        m = evaluate_system(llm, tr, st, sy, calib=CAL)
        return m.memory.other_bytes - CAL.memory.framework_reserved_bytes
    assert gathered("bf16") == pytest.approx(2 * layer * 2, rel=1e-12)
    assert gathered("fp8") == pytest.approx(2 * layer * 4, rel=1e-12)
    assert gathered("fp8", param_gather=True) == pytest.approx(2 * layer * 2, rel=1e-12)


@pytest.mark.parametrize("zero,pp,held", [(3, 2, True), (3, 1, False), (2, 2, False), (1, 2, False)])
def test_a_pipeline_holds_the_stages_unsharded_gradients_until_its_sync(zero, pp, held):
    # ZeRO-3 / FSDP under a pipeline: the schedule reduce-scatters once, after its last microbatch
    # (torch.distributed.pipelining: FSDP2's set_requires_gradient_sync(False) before it), so the
    # stage's full gradients accumulate, in fp32 here, beside their shards: params x 4 bytes more than
    # the framework reserve and the gathered layers. Without PP each microbatch reduce-scatters its
    # own, as ZeRO-2 does under PP too (priced so); ZeRO-1 keeps the whole buffer among its states.
    llm = load_model("llama3-8b")
    tr = TrainingSpec(sequence_length=4096, global_batch_sequences=64, total_tokens=1e9,
                      grad_accumulation_dtype="fp32")
    st = Strategy(pp=pp, dp=8 // pp, zero_stage=zero, recompute=Recompute.full, fsdp_reshard_after_forward=False)
    m = evaluate_system(llm, tr, st, cluster("h100_sxm", 8), calib=CAL)
    assert isinstance(m, Metrics)
    other = m.memory.other_bytes - CAL.memory.framework_reserved_bytes
    # the stage's parameters: ZeRO-2 keeps them whole at 2 bytes; ZeRO-3 shards them over dp
    params = m.memory.weights_bytes / 2 * (1 if zero < 3 else 8 // pp)
    z3 = params * 2 if zero == 3 else 0.0  # without resharding the whole stage stays gathered (16-bit)
    assert other == pytest.approx(z3 + (params * 4 if held else 0.0), rel=1e-9)


def test_attention_output_saved_needs_a_low_precision_run():
    from pydantic import ValidationError

    base = dict(sequence_length=4096, global_batch_sequences=8, total_tokens=1e9)
    with pytest.raises(ValidationError, match="attention_output_saved = 'original' with precision bf16.*allowed"):
        TrainingSpec(**base, attention_output_saved="original")
    assert TrainingSpec(**base, precision="nvfp4", attention_output_saved="quantized").attention_output_saved == "quantized"


def test_a_clamp_run_op_by_op_keeps_what_it_clamped_until_the_backward():
    # GPT-OSS 120B's MoE layer, one 4096-token sequence, EP 8 of 128 experts: 4096 x 4 = 16,384 routed
    # tokens. Megatron-Core clamps the gate and up outputs in two eager kernels before its fused
    # activation; PyTorch's clamp backward reads its input, so the fc1 output (5760 x 2 B per routed
    # token) stays beside the clamped copy the fused activation saves: 16,384 x 11,520 B more. Where
    # moe_act recomputes the activation the clamp runs inside the checkpoint and keeps nothing.
    llm = load_model("gpt-oss-120b")

    def act(clamp_bytes, modules=mem.RC_CORE_ATTN, recompute=mem.RECOMPUTE_NONE):
        return float(mem.activation_bytes_per_layer(llm, moe_layer=True, b=1, s=4096, tp=1, cp=1, sp=False,
                                                    recompute=recompute, flash=True, rc_modules=modules, ep=8,
                                                    clamp_input_bytes=clamp_bytes))

    assert act(2.0) - act(0.0) == pytest.approx(16_384 * 5760 * 2, rel=1e-12)
    moe_act = mem.RC_CORE_ATTN | mem.RC_MOE_ACT
    assert act(2.0, moe_act, mem.RECOMPUTE_SELECTIVE) == act(0.0, moe_act, mem.RECOMPUTE_SELECTIVE)
    # a model without a clamp keeps nothing more
    mixtral = load_model("mixtral-8x7b")
    kw = dict(moe_layer=True, b=1, s=4096, tp=1, cp=1, sp=False, recompute=mem.RECOMPUTE_NONE, flash=True, ep=8)
    assert float(mem.activation_bytes_per_layer(mixtral, clamp_input_bytes=2.0, **kw)) == \
        float(mem.activation_bytes_per_layer(mixtral, **kw))
    # through the evaluator (GPT-OSS 20B on one H100 node): the strategy that lists the clamp holds
    # more and takes longer
    small = load_model("gpt-oss-20b")
    training = TrainingSpec(sequence_length=4096, global_batch_sequences=64, total_tokens=1e9)
    system = cluster("h100_sxm", 8)
    base = Strategy(dp=8, ep=8, microbatch_size=1)
    plain = evaluate_system(small, training, base, system)
    clamped = evaluate_system(small, training, base.model_copy(update={"unfused_ops": ("activation_clamp",)}), system)
    assert clamped.memory.activations_bytes > plain.memory.activations_bytes
    assert clamped.iteration_time_s > plain.iteration_time_s


def _stage_params(llm, tr, strategy, system):
    from designer.perf import iteration as it

    c = it._context(llm, tr, StrategyArrays.from_strategies([strategy]), system, CAL)
    d = it.compute_term(c, c.dense, False)
    mo = it.compute_term(c, c.moe, True) if c.moe is not None else None
    stt = it.stage_times(c, d, mo, 0.0, 0.0, it.pp_term(c, d, mo).exposed_s)
    return it.stage_params(c, stt)


@pytest.mark.parametrize("pp", [1, 2])
def test_the_stages_hold_the_whole_model_once_with_mtps_embedding_copy(pp):
    # DeepSeek-V3 at tp 1, ep 1: the ranks of the pipeline together hold every parameter once
    # (compute.total_params: layers, embedding and output layer, final norm, the MTP module), and,
    # where pp > 1, the input embedding again on the rank running the MTP module (Megatron-Core
    # gpt_model.py builds the embedding `if self.pre_process or self.mtp_process`). At pp 1 the MTP
    # module sits on the one rank.
    from designer.perf import compute as cmp

    llm = load_model("deepseek-v3")
    assert llm.mtp_layers == 1 and not llm.tied_embeddings
    tr = TrainingSpec(sequence_length=4096, global_batch_sequences=64, total_tokens=1e9)
    sy = cluster("h100_sxm", 64 * pp)
    sp_ = _stage_params(llm, tr, Strategy(tp=1, pp=pp, dp=64, ep=1, microbatch_size=1, recompute="full"), sy)
    held = sp_.rank_dense[:, 0] + sp_.rank_expert[:, 0]  # the first, a middle and the last rank
    ranks = held[0] + (held[2] if pp > 1 else 0.0)
    copy = llm.vocab_size * llm.hidden_size if pp > 1 else 0.0
    assert ranks == pytest.approx(cmp.total_params(llm) + copy, rel=1e-12)


def test_zero3_gathers_one_layer_of_the_largest_kind_the_model_has():
    # Qwen3-30B-A3B has MoE layers only (its ffn_size names no layer): a ZeRO-3 rank gathers one MoE
    # layer per unit, the layer's non-expert weights and its 128 / ep experts, 2 bytes each in bf16.
    # One more prefetched layer adds exactly that; the layer is the model's whole per-layer share
    # (total parameters less the embedding, output layer and final norm, over the 48 layers).
    from designer.perf import compute as cmp
    from designer.perf.iteration import iteration_arrays

    llm = load_model("qwen3-30b-a3b")
    n_dense, n_moe = cmp.layer_kinds(llm)
    assert n_dense == 0
    ne, e = cmp.moe_layer_params(llm)
    per_layer = (cmp.total_params(llm) - cmp.embedding_params(llm) - cmp.final_norm_params(llm)) / llm.layers
    assert ne + e == pytest.approx(per_layer, rel=1e-12)
    tr = TrainingSpec(sequence_length=4096, global_batch_sequences=64, total_tokens=1e9)
    sy = cluster("h100_sxm", 64)

    def memory(prefetch, reshard=True, ep=8):
        st = Strategy(tp=1, pp=1, dp=64, ep=ep, microbatch_size=1, zero_stage=3, recompute="full",
                      prefetch_layers=prefetch, fsdp_reshard_after_forward=reshard)
        return float(iteration_arrays(llm, tr, StrategyArrays.from_strategies([st]), sy, CAL)["memory_per_gpu_bytes"][0])
    assert memory(2) - memory(1) == pytest.approx((ne + e / 8) * 2.0, rel=1e-9)
    # keeping the whole stage gathered never takes less than gathering layer by layer
    assert memory(2, reshard=False) >= memory(2)


def test_zero3_resharding_never_holds_more_than_keeping_the_stage_gathered():
    # Mixtral 8x7B on 8 stages of 4 layers with experts over ep 8 and two prefetched layers: the
    # resharded rank holds three layers' weights, never more than its whole stage kept gathered
    from designer.perf.iteration import iteration_arrays

    llm = load_model("mixtral-8x7b")
    tr = TrainingSpec(sequence_length=4096, global_batch_sequences=1024, total_tokens=1e9)
    sy = cluster("h100_sxm", 256)
    out = {}
    for reshard in (True, False):
        st = Strategy(tp=1, pp=8, dp=16, cp=2, ep=8, microbatch_size=1, zero_stage=3, recompute="full",
                      prefetch_layers=2, fsdp_reshard_after_forward=reshard)
        out[reshard] = float(iteration_arrays(llm, tr, StrategyArrays.from_strategies([st]), sy, CAL)
                             ["memory_per_gpu_bytes"][0])
    assert out[True] <= out[False]
