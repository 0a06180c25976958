"""HBM per GPU: weights, gradients, optimizer state, activations, other. Pure, elementwise over arrays.

Model states (Rajbhandari et al., ZeRO, SC20 §3.1, §5): mixed-precision Adam keeps a 16-bit copy of
the weights (2 B/param), 16-bit gradients (2 B/param) and fp32 master weights, momentum and
variance (4+4+4 = 12 B/param): "2+2+12 = 16 bytes per parameter". ZeRO shards the optimizer state
(stage 1), then the gradients (2), then the weights (3) over the N_d data-parallel ranks.
ZeRO++ hpZ keeps a secondary 16-bit weight shard inside each node: +2Ψ/(DP ranks per node)
(Wang et al. 2023, arXiv 2306.10209 §3.2; collectives.md §6.2).

Activations per layer per microbatch (Korthikanti et al. 2022, arXiv 2205.05198, §4, Table 2):
  no recompute, TP t, no SP:  s·b·h·(10 + 24/t + 5·a·s/(h·t))
  with SP:                   s·b·h/t·(34 + 5·a·s/h)
  selective recompute:       the 5·a·s²·b attention-core term disappears
  full recompute:            only the layer input, 2·s·b·h (/t with SP)
The code derives these sums tensor by tensor so GQA, gated MLPs, MoE and flash attention follow.

In-flight microbatches on the first pipeline stage (Narayanan et al. SC'21 §2.2; Korthikanti §4.2.3):
GPipe m, 1F1B min(m, p), interleaved p·(1 + (p−1)/(p·v)) layer-stage equivalents.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from designer.perf.compute import ACT_BYTES, MASK_BYTES, layer_matmuls
from designer.spec.llm import LLMSpec

WEIGHT_BYTES = 2.0  # 16-bit weights (ZeRO §3.1)
GRAD_BYTES = 2.0  # 16-bit gradients as communicated (ZeRO §3.1)


def gradient_bytes(dtype: str) -> float:
    """Bytes per gradient element held or sent in `dtype` ("fp32", else 16-bit): TrainingSpec's
    grad_accumulation_dtype (memory) and grad_reduce_dtype (the data-parallel wire)."""
    return 4.0 if dtype == "fp32" else GRAD_BYTES

OPTIMIZER_BYTES = 12.0  # fp32 master weights + Adam m + v (ZeRO §3.1)
# Bytes per logit element held at the loss's peak (Strategy.cross_entropy). Fused: the fp32 logits of
# Megatron's vocab-parallel cross entropy, softmax and gradient computed in place (Megatron-LM
# theoretical_memory_usage.py counts 4 bytes x s x b x V / tp; a torch.compile'd loss keeps as much).
# Eager: PyTorch's cross_entropy on the upcast logits, op by op: its backward holds the saved fp32
# log-softmax output, the nll_loss gradient and log_softmax_backward's input gradient at once, 3 x 4
# bytes (torchtitan at 9dec370 frees the 16-bit logits before the backward: train.py `del pred`).
LOGIT_BYTES_AT_PEAK = {"fused": 4.0, "eager": 12.0}
# Of those, what stays saved per logit from a microbatch's forward to its backward (the fp32 log-softmax,
# or the fused loss's fp32 buffer); the rest exists during one backward only
LOGIT_BYTES_SAVED = 4.0

SCHEDULE_GPIPE, SCHEDULE_1F1B, SCHEDULE_INTERLEAVED, SCHEDULE_ZERO_BUBBLE, SCHEDULE_DUALPIPE = 0, 1, 2, 3, 4
RECOMPUTE_NONE, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL = 0, 1, 2
# selective-recompute module bits (records.RECOMPUTE_MODULE_BITS)
RC_CORE_ATTN, RC_LAYERNORM, RC_MLP, RC_MOE, RC_MOE_ACT, RC_MLA_UP, RC_ATTN_OUT, RC_ALT_MM = 1, 2, 4, 8, 16, 32, 64, 128


@dataclass(frozen=True)
class MemoryCalibration:
    framework_reserved_bytes: float  # CUDA context, NCCL buffers, allocator fragmentation
    zero3_prefetch_layers: float  # ZeRO-3: gathered full-layer weights kept in flight (besides the one in use)


def recompute_drops(recompute, rc_modules, module_bit):
    """True where `module_bit`'s activations are dropped and recomputed: every module under full
    recomputation, the listed modules under selective."""
    recompute = np.asarray(recompute)
    return (recompute == RECOMPUTE_FULL) | ((recompute == RECOMPUTE_SELECTIVE) & ((np.asarray(rc_modules) & module_bit) > 0))


def activation_bytes_per_layer(llm: LLMSpec, *, moe_layer: bool, b, s, tp, cp, sp, recompute, flash,
                               rc_modules=RC_CORE_ATTN, ep=1, etp=1, linear_input_bytes=ACT_BYTES,
                               act_input_bytes=ACT_BYTES, expert_load=1.0, attn_out_copy_bytes=0.0,
                               attn_out_input_bytes=None, clamp_input_bytes=0.0):
    """Stored activation bytes of one layer for one microbatch on one GPU (Korthikanti Table 2, tensor
    by tensor, so GQA, MLA, gated MLPs, MoE, dropout only where the model has it, and the fused
    attention kernels follow). `flash` (array or bool): fused attention, which stores only the
    per-row fp32 log-sum-exp instead of the scores.

    linear_input_bytes: bytes per element of the tensors saved as a linear layer's input (the two
    norm outputs, the attention output, the dispatched expert input and the fc2 inputs). 16-bit by
    default; a low-precision recipe saves the quantised copy the weight-gradient GEMM reads
    (Transformer Engine keeps it unless `save_original_input` is set), its byte count per element
    from compute_efficiency.yaml (low_precision.saved_input_bytes_per_element). act_input_bytes: bytes
    per element of the gated activation's saved input, the gate and up outputs (16-bit, or 1 where
    Strategy.activation_input_fp8 keeps an fp8 copy). expert_load: the routed tokens of the busiest EP
    rank over the mean (TrainingSpec.moe_load_balance), the rank whose memory bounds the run.
    attn_out_copy_bytes: bytes per element of the fused attention kernel's own saved output where it
    is a tensor apart from the output projection's saved input: under a low-precision recipe the
    projection keeps its quantised copy and the 16-bit kernel keeps its output O for its backward
    (FlashAttention-2 Algorithm 2 reads O; Transformer Engine's FusedAttnFunc saves it); 0 where
    they are one tensor (16-bit, or an 8-bit attention kernel whose output the projection takes).
    attn_out_input_bytes: bytes per element of the output projection's saved input where it is not
    linear_input_bytes (16-bit where the projection keeps the original input, the kernel's own
    output; None: linear_input_bytes). clamp_input_bytes: bytes per element of the gate and up outputs
    a clamp run op by op keeps besides the activation's own saved input (its backward reads what it
    clamped: 16-bit where the model clamps and the framework runs the clamp unfused, else 0)."""
    h = llm.hidden_size
    a, kv, dh = llm.heads, llm.kv_heads_effective, llm.head_dim_effective
    tp = np.asarray(tp, float)
    etp = np.asarray(etp, float)
    tokens = np.asarray(b, float) * s / np.asarray(cp, float)
    mask = MASK_BYTES if llm.dropout else 0.0
    drops = functools.partial(recompute_drops, recompute, rc_modules)
    # Tensors replicated over TP unless SP splits them: the 2 norm inputs (2 bytes each) and the 2
    # norm outputs (the QKV and MLP inputs, at linear_input_bytes), and the 2 residual dropout masks
    # where the model has dropout: 4·2 + 2·1 = 10·s·b·h for GPT in 16-bit (Korthikanti).
    lin = linear_input_bytes
    proj_in = lin if attn_out_input_bytes is None else attn_out_input_bytes
    norm_out = tokens * h * 2 * lin
    # recomputing the attention core and its output projection drops the attention output (the
    # projection's input) and the second norm's input (the residual after it): MaxText's
    # save_qkv_proj keeps only the layer input and Q, K, V
    out_dropped = drops(RC_CORE_ATTN) & drops(RC_ATTN_OUT)
    norm_in = tokens * h * np.where(out_dropped, 1.0, 2.0) * ACT_BYTES
    replicated = norm_in + tokens * h * 2 * mask + np.where(drops(RC_LAYERNORM), 0.0, norm_out)
    # the fused kernel's own 16-bit output, where the output projection saved a quantised copy of it
    o_copy = np.where(np.asarray(flash, bool) & ~drops(RC_CORE_ATTN), np.asarray(attn_out_copy_bytes, float), 0.0)
    if llm.mla is not None:
        m = llm.mla
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        # latents (compressed q and kv): the down projections run on the rank's own tokens under
        # sequence parallelism (Megatron-Core multi_latent_attention.py: "q_compressed: [s / TP, b,
        # q_lora_rank]") and the up projections' fused norms (TELayerNormColumnParallelLinear)
        # keep their input and their output, gathered again in the backward; an mla_up_proj
        # recomputation keeps only its input. The rotated shared key lives in K. The up-projected Q,
        # K, V are dropped by mla_up_proj recomputation; the output projection's input is kept unless
        # attn_out_proj recomputes it with the core
        own = np.where(np.asarray(sp, bool), tokens / tp, tokens)
        latents = own * ((m.q_lora_rank or 0) + m.kv_lora_rank) * (ACT_BYTES + np.where(drops(RC_MLA_UP), 0.0, lin))
        # the recomputation's checkpoint also keeps the shared rope key, gathered to the whole
        # sequence before it (multi_latent_attention.py: k_pos_emb: [s, b, qk_pos_emb_head_dim])
        latents = latents + np.where(drops(RC_MLA_UP), tokens * m.qk_rope_head_dim * ACT_BYTES, 0.0)
        up = tokens * a / tp * (2 * qk + m.v_head_dim) * ACT_BYTES
        attn_split = (latents + np.where(drops(RC_MLA_UP), 0.0, up)
                      + np.where(out_dropped, 0.0, tokens * a / tp * m.v_head_dim * proj_in)
                      + tokens * a / tp * m.v_head_dim * o_copy)
    else:
        kv_local = np.maximum(kv / tp, 1.0)
        # Q, K, V (inputs of the core) and the attention output (input of the output projection);
        # QK-norm's kernels keep their inputs, Q and K before the norm, for their backward
        qk_in = (a / tp + kv_local) * ACT_BYTES * llm.rope_layer_fraction if llm.qk_norm else 0.0
        attn_split = tokens * dh * (a / tp * (ACT_BYTES + np.where(out_dropped, 0.0, proj_in) + o_copy)
                                    + kv_local * ACT_BYTES * 2 + qk_in)
    gate = 2.0 if llm.gated_mlp else 1.0
    act_in = np.asarray(act_input_bytes, float) if llm.gated_mlp else ACT_BYTES
    # the clamp's copy, kept with the activation's input unless the activation is recomputed
    clamp = np.asarray(clamp_input_bytes, float) if llm.activation_clamp is not None else 0.0
    if moe_layer and llm.moe is not None:
        moe = llm.moe
        # tokens dispatched to this GPU (compute.py), on the busiest rank
        routed = tokens * moe.top_k * moe.capacity_factor * etp / tp * expert_load
        fe = moe.expert_ffn_size
        # dispatched expert inputs, the activation input (gate+up) and fc2 input (the activation's
        # output, dropped by moe_act); plus the shared experts' (kept unless "moe" drops the block)
        act_out = routed * fe / etp * lin
        experts = (routed * (h * lin + gate * fe / etp * act_in)
                   + np.where(drops(RC_MOE_ACT), 0.0, act_out + routed * gate * fe / etp * clamp))
        fs = moe.shared_experts * moe.shared_ffn_size
        shared = tokens * fs / tp * (gate * (act_in + clamp) + lin)
        if moe.shared_expert_gate:
            # the shared output before its gate, on the rank's own tokens: the gate's gradient reads it
            shared = shared + np.where(sp, tokens / tp, tokens) * h * ACT_BYTES
        mlp_split = np.where(drops(RC_MOE), 0.0, experts + shared)
    else:
        # activation input (gate+up outputs) and fc2 input: 8h + 8h·... -> 16·s·b·h/t for GPT
        mlp_split = np.where(drops(RC_MLP), 0.0, tokens * llm.ffn_size / tp * (gate * (act_in + clamp) + lin))
    # Attention core: unfused keeps softmax output (2 B) and, with dropout, its mask (1 B) and
    # output (2 B): 5·a·s²·b/(t·cp) for GPT; fused kernels keep the fp32 log-sum-exp per row.
    scores = np.asarray(b, float) * a / tp * (s / np.asarray(cp, float)) * s
    core = np.where(flash, tokens * a / tp * 4.0, scores * (ACT_BYTES + (ACT_BYTES + mask if llm.dropout else 0.0)))
    core = np.where(drops(RC_CORE_ATTN), 0.0, core)
    rep = np.where(sp, replicated / tp, replicated)
    kept = rep + attn_split + mlp_split + core
    layer_input = np.where(sp, tokens * h * ACT_BYTES / tp, tokens * h * ACT_BYTES)
    if np.any(drops(RC_ALT_MM) & (np.asarray(recompute) != RECOMPUTE_FULL)):
        alt = layer_input + core + _alternate_matmuls_kept(llm, moe_layer, tokens, tp, etp, sp, expert_load)
        kept = np.where(drops(RC_ALT_MM), alt, kept)
    return np.where(np.asarray(recompute) == RECOMPUTE_FULL, layer_input, kept)


def _alternate_matmuls_kept(llm: LLMSpec, moe_layer: bool, tokens, tp, etp, sp, expert_load=1.0):
    """Bytes torchtitan's per-op checkpointing keeps of a layer besides its input and the attention
    kernel's log-sum-exp (RecomputeModule.alternate_matmuls), as a compiled graph keeps them (what the
    backward or the recomputation reads of the saved ops' outputs): the odd-numbered matmuls' 16-bit
    outputs (compute.layer_matmuls), where a row-parallel output is summed by a reduce-scatter
    (sequence parallelism) the reduce-scatter's output instead (the second norm's input is
    recomputed from it); the attention kernel's output; and of an MoE layer the dispatched tokens
    and the routed experts' GEMM outputs (grouped GEMMs and all-to-alls are saved ops)."""
    h = llm.hidden_size
    tp = np.asarray(tp, float)
    sp_tp = np.asarray(sp, bool) & (tp > 1)
    kept = 0.0
    for i, mm in enumerate(layer_matmuls(llm, moe_layer, tp), start=1):
        if i % 2 == 1 and mm.read_by_backward:
            kept = kept + (np.where(sp_tp, 0.0, mm.out_elems) if mm.partial_sum else mm.out_elems)
    kept = kept + np.where(sp_tp, h / tp, 0.0)  # the reduce-scatter after wo, saved
    kept = kept + llm.heads / tp * (llm.mla.v_head_dim if llm.mla is not None else llm.head_dim_effective)
    extra = 0.0
    if moe_layer and llm.moe is not None:
        moe = llm.moe
        gate = 2 if llm.gated_mlp else 1
        routed = tokens * moe.top_k * moe.capacity_factor * np.asarray(etp, float) / tp * expert_load
        extra = routed * (2 * h + gate * moe.expert_ffn_size / np.asarray(etp, float)) * ACT_BYTES
    return tokens * kept * ACT_BYTES + extra


def in_flight_factor(schedule, pp, m, v, rank=0):
    """Microbatches' worth of a stage's activations pipeline rank `rank` holds at its peak (rank 0,
    the first stage, holds the most). 1F1B and ZB-H1 (Qi et al. §3): pp − rank. Interleaved
    (Megatron-Core schedules.py forward_backward_pipelining_with_interleaving: (pp − rank − 1)·2 +
    (v − 1)·pp warm-up chunks and the one in flight, each a v-th of the stage; at rank 0 Korthikanti
    §4.2.3's (1 + (p−1)/(p·v)) × p). GPipe: every microbatch. DualPipe: PP + 1 (DeepSeek-V3 Table 2)."""
    pp = np.asarray(pp, float)
    m = np.asarray(m, float)
    v = np.asarray(v, float)
    r = np.asarray(rank, float)
    one_f = np.minimum(m, pp - r)
    inter = np.minimum(2.0 * (pp - r - 1.0) + (v - 1.0) * pp + 1.0, m * v) / np.maximum(v, 1.0)
    dual = np.minimum(m, pp + 1.0)
    return np.select([schedule == SCHEDULE_GPIPE, schedule == SCHEDULE_INTERLEAVED, schedule == SCHEDULE_DUALPIPE],
                     [m, inter, dual], one_f)


def last_stage_in_flight(schedule, pp, m, v):
    """Microbatches' worth of its stage's activations the last stage holds at its peak: one under
    1F1B and ZB-H1 (each forward is followed by its backward); every microbatch under GPipe; under the
    interleaved schedule its (v−1)·pp warm-up chunks and the one in flight (Megatron-Core schedules.py
    forward_backward_pipelining_with_interleaving: num_warmup_microbatches = (pp − rank − 1)·2 +
    (v − 1)·pp), each chunk a v-th of the stage. DualPipe is priced on its rank pairs (memory_term)."""
    pp = np.asarray(pp, float)
    m = np.asarray(m, float)
    v = np.asarray(v, float)
    one = np.minimum(m, 1.0)
    inter = np.minimum((v - 1.0) * pp + 1.0, m * v) / np.maximum(v, 1.0)
    return np.select([schedule == SCHEDULE_GPIPE, schedule == SCHEDULE_INTERLEAVED], [m, inter], one)


def model_state_bytes(dense_params, expert_params, *, dp_shard, expert_dp_shard, zero_stage,
                      hpz, ranks_per_node_dp, grad_bytes=GRAD_BYTES, optimizer_bytes=OPTIMIZER_BYTES,
                      extra_weight_bytes=0.0, weight_bytes=WEIGHT_BYTES):
    """(weights, gradients, optimizer) bytes per GPU for local parameter counts.

    dense_params are sharded by ZeRO over dp_shard (DP×CP ranks, or the HSDP shard group),
    expert_params over expert_dp_shard. grad_bytes: bytes per gradient as accumulated (Megatron's fp32
    main-grad buffer 4, DeepSpeed 2); optimizer_bytes: master weights + moments (12 fp32, 8 with
    16-bit moments); extra_weight_bytes: low-precision weight copies (fp8 and its transpose), kept
    per local (ZeRO-3: gathered) weight."""
    zero_stage = np.asarray(zero_stage)
    z1, z2, z3 = zero_stage >= 1, zero_stage >= 2, zero_stage >= 3
    hpz3 = z3 & hpz
    w = np.zeros_like(np.asarray(dense_params, float))
    g = np.zeros_like(w)
    o = np.zeros_like(w)
    for params, shard in ((dense_params, dp_shard), (expert_params, expert_dp_shard)):
        if np.ndim(params) == 0 and params == 0:
            continue  # no parameters of this kind (a dense model's experts)
        params = np.asarray(params, float)
        sharded = params / np.asarray(shard, float)
        # ZeRO-3 shards the weights and keeps no low-precision copy of them (it gathers one per layer)
        w = w + np.where(z3, sharded * weight_bytes, params * (weight_bytes + extra_weight_bytes))
        g = g + np.where(z2, sharded, params) * grad_bytes
        o = o + np.where(z1, sharded, params) * optimizer_bytes
        # hpZ: a secondary 16-bit copy sharded inside the node
        if np.any(hpz3):
            w = w + np.where(hpz3, params * WEIGHT_BYTES / np.maximum(ranks_per_node_dp, 1), 0.0)
    return w, g, o
