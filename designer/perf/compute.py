"""Computation of one transformer training step: FLOPs per layer and the time they take.

Everything here is a pure function of its arguments and works elementwise on numpy arrays (one entry
per strategy), so the same code scores one strategy or a hundred thousand.

FLOP counts (per microbatch, per GPU, forward):
- every matmul X[M,K] @ W[K,N] costs 2·M·N·K FLOPs (one multiply and one add per MAC);
- backward = 2 × forward (one GEMM for the input gradient, one for the weight gradient;
  Narayanan et al. SC'21 §5.1, Kaplan et al. 2020 §2.1);
- full recomputation adds one forward of every layer; selective recomputation adds the attention
  core (QKᵀ, softmax, dropout, AV) only (Korthikanti et al. 2022, arXiv 2205.05198 §4.2/§5).
For the Megatron GPT layer this gives 24·b·s·h² + 4·b·s²·h forward FLOPs per layer and 2·b·s·h·V for
the logits, the terms of the paper's F = 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)) (training-runs.md).

Time: each GEMM runs at peak × η(M, N, K), an efficiency curve of the GEMM shape whose parameters are
data (designer/data/compute_efficiency.yaml). Element-wise, memory-bound kernels (layer norm,
softmax, dropout, activation, residual add, optimizer step) are timed as HBM bytes / (η_hbm × HBM
bandwidth), counting the bytes each kernel reads and writes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from designer.spec.llm import LLMSpec

ACT_BYTES = 2.0  # bf16/fp16 activations (fp8 GEMMs still keep 16-bit activations between kernels)
MASK_BYTES = 1.0  # dropout masks are stored as uint8 in PyTorch/Megatron (Korthikanti et al. 2022 §4.1)


@dataclass(frozen=True)
class ComputeCalibration:
    """Parameters of the compute-time model. Loaded from designer/data/compute_efficiency.yaml."""

    gemm_max_efficiency: float  # fraction of dense peak a large, well-shaped GEMM reaches
    gemm_k_half: float  # reduction length at which a GEMM reaches half of its max efficiency (K term)
    gemm_mn_half: float  # smaller output dimension at which the (M,N) term halves
    gpu_max_efficiency: tuple[tuple[str, float], ...]  # per-GPU override of gemm_max_efficiency
    hbm_efficiency: float  # fraction of HBM peak bandwidth element-wise kernels reach
    attention_kernel: str  # "unfused" (scores materialised, Megatron 2021) or "flash" (FlashAttention)
    flash_efficiency: float  # fraction of peak the fused flash-attention kernel reaches
    optimizer_bytes_per_param: float  # HBM traffic of the mixed-precision Adam step per local parameter
    fp8_gemm_fraction: float  # share of GEMM FLOPs run in fp8 when precision is fp8 (TE: linear layers)

    def max_efficiency(self, gpu_name: str) -> float:
        for name, eff in self.gpu_max_efficiency:
            if name == gpu_name:
                return eff
        return self.gemm_max_efficiency


def gemm_efficiency(m, n, k, max_eff: float, calib: ComputeCalibration):
    """Achieved fraction of peak for an [M,K]x[K,N] GEMM.

    η = η_max · K/(K + K½) · d/(d + D½), d = min(M, N). Why this shape: a GEMM tile loops over K, so
    its fixed prologue/epilogue (loading the first tiles, writing C) is amortised over K; and a small
    output dimension leaves SMs idle or tiles partly filled (wave and tile quantisation). Both
    saturate for the large shapes cuBLAS reaches ~85-90% of peak on (NVIDIA "Matrix Multiplication
    Background" guide, docs.nvidia.com/deeplearning/performance). K½ and D½ are calibrated.
    """
    m = np.asarray(m, dtype=float)
    n = np.asarray(n, dtype=float)
    k = np.asarray(k, dtype=float)
    d = np.minimum(m, n)
    return max_eff * (k / (k + calib.gemm_k_half)) * (d / (d + calib.gemm_mn_half))


def gemm_time_s(m, n, k, count, peak_flops: float, max_eff: float, calib: ComputeCalibration):
    """Seconds for `count` GEMMs of shape [M,K]x[K,N] (2·M·N·K FLOPs each)."""
    flops = 2.0 * np.asarray(m, float) * n * k * count
    return flops / (peak_flops * gemm_efficiency(m, n, k, max_eff, calib))


@dataclass(frozen=True)
class LayerWork:
    """Forward work of one layer for one microbatch on one GPU (arrays over strategies).

    dense_gemm_s / attn_core_s: GEMM seconds (weights matmuls / attention core); memory_s: element-wise
    kernel seconds of the whole layer; attn_memory_s: the part of memory_s that belongs to the
    attention core (recomputed by selective recomputation). *_flops are the executed FLOPs.
    """

    dense_gemm_s: np.ndarray
    attn_core_s: np.ndarray
    memory_s: np.ndarray
    attn_memory_s: np.ndarray
    dense_flops: np.ndarray
    attn_flops: np.ndarray
    attn_flops_model: np.ndarray  # non-causal count (PaLM/Megatron MFU convention)


def _attention_dims(llm: LLMSpec):
    return llm.heads, llm.kv_heads_effective, llm.head_dim_effective


def layer_forward(llm: LLMSpec, *, moe_layer: bool, b, s, tp, cp, ep, sp, peak_flops: float,
                  gemm_peak_flops: float, max_eff: float, hbm_bytes_per_s: float,
                  calib: ComputeCalibration) -> LayerWork:
    """Forward work of one transformer layer per microbatch per GPU.

    b: microbatch sequences; s: sequence length; tp/cp/ep: group sizes; sp: sequence parallelism
    (arrays). peak_flops is used for attention-core GEMMs, gemm_peak_flops for the linear layers (fp8
    when the precision is fp8).
    """
    h = llm.hidden_size
    a, kv, dh = _attention_dims(llm)
    b = np.asarray(b, float)
    tp = np.asarray(tp, float)
    cp = np.asarray(cp, float)
    ep = np.asarray(ep, float)
    tokens = b * s / cp  # tokens of this CP rank
    # GQA/MQA: KV heads are split over TP when they divide; otherwise each rank keeps one KV head
    # (replication, as Megatron/vLLM do when tp > kv_heads).
    kv_local = np.maximum(kv / tp, 1.0)
    a_local = a / tp

    # Linear layers (Megatron column/row parallel): QKV, attention output, MLP or experts.
    t_qkv = gemm_time_s(tokens, (a_local + 2 * kv_local) * dh, h, 1, gemm_peak_flops, max_eff, calib)
    f_qkv = 2 * tokens * (a_local + 2 * kv_local) * dh * h
    t_out = gemm_time_s(tokens, h, a_local * dh, 1, gemm_peak_flops, max_eff, calib)
    f_out = 2 * tokens * h * a_local * dh
    gate = 2.0 if llm.gated_mlp else 1.0
    mem_mlp_bytes = np.zeros_like(tokens)
    if moe_layer and llm.moe is not None:
        moe = llm.moe
        fe = moe.expert_ffn_size
        routed = tokens * moe.top_k * moe.capacity_factor  # expert tokens on this GPU (uniform routing)
        local_experts = moe.experts / ep
        m_e = routed / local_experts  # tokens per local expert
        t_mlp = (gemm_time_s(m_e, gate * fe / tp, h, local_experts, gemm_peak_flops, max_eff, calib)
                 + gemm_time_s(m_e, h, fe / tp, local_experts, gemm_peak_flops, max_eff, calib)
                 + gemm_time_s(tokens, moe.experts, h, 1, peak_flops, max_eff, calib))  # router
        f_mlp = 2 * routed * (gate + 1) * fe * h / tp + 2 * tokens * moe.experts * h
        # activation function on the routed tokens; permute + unpermute copies (read + write each)
        mem_mlp_bytes = routed * (gate + 1) * fe / tp * ACT_BYTES + 2 * 2 * routed * h * ACT_BYTES
        if moe.shared_experts:
            fs = moe.shared_experts * fe
            t_mlp = t_mlp + (gemm_time_s(tokens, gate * fs / tp, h, 1, gemm_peak_flops, max_eff, calib)
                             + gemm_time_s(tokens, h, fs / tp, 1, gemm_peak_flops, max_eff, calib))
            f_mlp = f_mlp + 2 * tokens * (gate + 1) * fs * h / tp
            mem_mlp_bytes = mem_mlp_bytes + tokens * (gate + 1) * fs / tp * ACT_BYTES
    else:
        f = llm.ffn_size
        t_mlp = (gemm_time_s(tokens, gate * f / tp, h, 1, gemm_peak_flops, max_eff, calib)
                 + gemm_time_s(tokens, h, f / tp, 1, gemm_peak_flops, max_eff, calib))
        f_mlp = 2 * tokens * (gate + 1) * f * h / tp
        # fused bias + activation: read the (gate+up) input, write the activation (Megatron fused GeLU)
        mem_mlp_bytes = tokens * (gate + 1) * f / tp * ACT_BYTES

    # Attention core: QKᵀ and AV, batched over b·a/tp heads; with CP each rank holds s/cp queries
    # against all s keys (ring attention). Non-causal FLOPs = 4·b·s²·a·dh/(tp·cp).
    attn_model = 2 * 2 * b * a_local * (s / cp) * s * dh
    if calib.attention_kernel == "flash":
        # FlashAttention skips fully masked causal blocks: half of the s² work (Dao 2023, FA2 §3.1).
        attn_exec = 0.5 * attn_model
        t_attn = attn_exec / (peak_flops * calib.flash_efficiency)
        attn_mem_bytes = np.zeros_like(tokens)  # scores never leave SRAM
    else:
        attn_exec = attn_model
        t_attn = (gemm_time_s(s / cp, s, dh, b * a_local, peak_flops, max_eff, calib)
                  + gemm_time_s(s / cp, dh, s, b * a_local, peak_flops, max_eff, calib))
        # Megatron fused scale+mask+softmax: read scores, write probs; attention dropout: read probs,
        # write output and a uint8 mask (Korthikanti et al. 2022 §4.1 count the same tensors).
        scores = b * a_local * (s / cp) * s
        attn_mem_bytes = scores * (2 * ACT_BYTES) + scores * (2 * ACT_BYTES + MASK_BYTES)

    # Element-wise kernels on [tokens, h]: two layer norms (read + write), two fused
    # bias-dropout-residual-add (read x, read residual, write out, write mask). Without sequence
    # parallelism these are replicated on every TP rank; with it they are split (Korthikanti §4.2.2).
    h_local = np.where(sp, h / tp, h)
    mem_norm_bytes = 2 * (2 * tokens * h_local * ACT_BYTES) + 2 * tokens * h_local * (3 * ACT_BYTES + MASK_BYTES)
    mem_bytes = mem_norm_bytes + mem_mlp_bytes + attn_mem_bytes
    hbm = hbm_bytes_per_s * calib.hbm_efficiency
    return LayerWork(
        dense_gemm_s=t_qkv + t_out + t_mlp,
        attn_core_s=t_attn,
        memory_s=mem_bytes / hbm,
        attn_memory_s=attn_mem_bytes / hbm,
        dense_flops=f_qkv + f_out + f_mlp,
        attn_flops=attn_exec,
        attn_flops_model=attn_model,
    )


def logits_forward(llm: LLMSpec, *, b, s, tp, cp, gemm_peak_flops: float, max_eff: float,
                   hbm_bytes_per_s: float, calib: ComputeCalibration):
    """(seconds, flops) of the output layer and the vocab-parallel cross entropy, forward, per microbatch.

    The logits GEMM is [tokens, h] x [h, V/tp]; cross entropy reads the 16-bit logits and writes and
    re-reads fp32 softmax values (Megatron vocab-parallel cross entropy)."""
    tokens = np.asarray(b, float) * s / np.asarray(cp, float)
    v_local = llm.vocab_size / np.asarray(tp, float)
    t = gemm_time_s(tokens, v_local, llm.hidden_size, 1, gemm_peak_flops, max_eff, calib)
    flops = 2 * tokens * v_local * llm.hidden_size
    ce_bytes = tokens * v_local * (ACT_BYTES + 4 + 4)
    return t + ce_bytes / (hbm_bytes_per_s * calib.hbm_efficiency), flops


def optimizer_step_s(local_params, hbm_bytes_per_s: float, calib: ComputeCalibration):
    """The Adam step plus gradient-norm clipping is memory-bound: bytes/param of HBM traffic."""
    return np.asarray(local_params, float) * calib.optimizer_bytes_per_param / (hbm_bytes_per_s * calib.hbm_efficiency)


def dense_layer_params(llm: LLMSpec) -> float:
    """Parameters of one dense transformer layer (weights + biases + 2 layer norms)."""
    h = llm.hidden_size
    a, kv, dh = _attention_dims(llm)
    attn = h * (a + 2 * kv) * dh + a * dh * h + (a + 2 * kv) * dh + h
    gate = 2 if llm.gated_mlp else 1
    mlp = (gate + 1) * h * llm.ffn_size + gate * llm.ffn_size + h
    return float(attn + mlp + 4 * h)


def moe_layer_params(llm: LLMSpec) -> tuple[float, float]:
    """(non-expert params, expert params) of one MoE layer; non-expert includes attention, norms,
    router and shared experts (which every EP rank holds)."""
    assert llm.moe is not None
    moe = llm.moe
    h = llm.hidden_size
    a, kv, dh = _attention_dims(llm)
    attn = h * (a + 2 * kv) * dh + a * dh * h + (a + 2 * kv) * dh + h
    gate = 2 if llm.gated_mlp else 1
    per_expert = (gate + 1) * h * moe.expert_ffn_size
    shared = moe.shared_experts * per_expert
    return float(attn + 4 * h + h * moe.experts + shared), float(moe.experts * per_expert)


def layer_kinds(llm: LLMSpec) -> tuple[int, int]:
    """(dense layers, MoE layers)."""
    if llm.moe is None:
        return llm.layers, 0
    moe = llm.moe
    n_moe = sum(1 for i in range(llm.layers)
                if i >= moe.first_dense_layers and (i - moe.first_dense_layers) % moe.moe_layer_interval == 0)
    return llm.layers - n_moe, n_moe


def embedding_params(llm: LLMSpec) -> float:
    """Input embedding (+ untied output layer)."""
    return float(llm.vocab_size * llm.hidden_size * (1 if llm.tied_embeddings else 2))


def total_params(llm: LLMSpec) -> float:
    n_dense, n_moe = layer_kinds(llm)
    p = n_dense * dense_layer_params(llm) + embedding_params(llm) + 2 * llm.hidden_size
    if n_moe:
        ne, e = moe_layer_params(llm)
        p += n_moe * (ne + e)
    return p


def active_params(llm: LLMSpec) -> float:
    """Parameters touched by one token (MoE: top-k routed + shared experts)."""
    if llm.moe is None:
        return total_params(llm)
    n_dense, n_moe = layer_kinds(llm)
    ne, e = moe_layer_params(llm)
    return n_dense * dense_layer_params(llm) + embedding_params(llm) + n_moe * (ne + e * llm.moe.top_k / llm.moe.experts)
