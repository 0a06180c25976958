"""Computation of one transformer training step: FLOPs per layer and the time they take.

Everything here is a pure function of its arguments and works elementwise on numpy arrays (one entry
per strategy), so the same code scores one strategy or a hundred thousand.

FLOP counts (per microbatch, per GPU, forward):
- every matmul X[M,K] @ W[K,N] costs 2·M·N·K FLOPs (one multiply and one add per MAC);
- backward of a linear layer = 2 × forward (one GEMM for the input gradient, one for the weight
  gradient; Narayanan et al. SC'21 §5.1, Kaplan et al. 2020 §2.1);
- backward of the attention core = 2.5 × forward (five matmuls against two: QKᵀ and AV are
  recomputed from the saved statistics, then dV, dP, dQ, dK; Dao 2023, arXiv 2307.08691 §3.1.2);
- recomputation adds the forward of what it drops: the whole layer (full) or the modules listed
  (selective; Megatron's --recompute-modules; the default core_attn is Korthikanti et al. 2022 §5),
  or, under torchtitan's per-op policy, the even-numbered matmuls the backward reads
  (alternate_matmul_flops_per_token).
For the Megatron GPT layer this gives 24·b·s·h² + 4·b·s²·h forward FLOPs per layer and 2·b·s·h·V for
the logits, the terms of the paper's F = 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)) (training-runs.md).

Time: each GEMM runs at peak × η(M, N, K), an efficiency curve of the GEMM shape whose ceiling
depends on the GPU generation and the GEMM precision (designer/data/compute_efficiency.yaml). The
fused attention kernels run at a per-(kernel, generation) fraction of the 16-bit peak, forward and
backward apart. Element-wise, memory-bound kernels (norms, activation, residual adds, dropout where
the model has it, fp8 casts and transposes, the optimizer step) are timed as HBM bytes / (η_hbm ×
HBM bandwidth), counting the bytes each kernel reads and writes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from designer.perf.records import UNFUSED_CLAMP, UNFUSED_EXPERT_BIAS, UNFUSED_ROPE
from designer.spec.llm import LLMSpec

ACT_BYTES = 2.0  # bf16/fp16 activations (fp8 GEMMs still keep 16-bit activations between kernels)
FP8_BYTES = 1.0  # an fp8 copy of an activation (torch.float8_e4m3fn)
MASK_BYTES = 1.0  # dropout masks are stored as uint8 in PyTorch/Megatron (Korthikanti et al. 2022 §4.1)
# PyTorch eager mode (Strategy.elementwise_kernels "eager") runs each op as its own kernel. HBM bytes
# per element beyond what the fused kernels below move, read off torchtitan's Llama (9dec370,
# torchtitan/models/norms.py RMSNorm, torchtitan/models/llama/model.py apply_rotary_emb, FeedForward),
# 16-bit activations, fp32 where the code casts:
# RMSNorm: x.float() 2+4, pow(2) 4+4, mean 4, x * rsqrt 4+4, type_as 2+4, * weight 2+2 = 36 against the
# fused kernel's read + write 4 (a LayerNorm is one F.layer_norm kernel either way)
EAGER_RMSNORM_EXTRA_BYTES = 32.0
# RoPE on each query and key element: .float() 2+4, complex multiply 4+4, type_as 4+2 (the fused count has none)
EAGER_ROPE_BYTES = 20.0
# gated MLP per inner element: silu(w1 x) 2+2, times w3 x 2+2+2 = 10 against the fused 6
EAGER_GATED_ACT_EXTRA_BYTES = 4.0
# Steps a framework runs op by op where everything else is fused (Strategy.unfused_ops), HBM bytes
# counted from the code in 16 bits, forward + backward. The layer's element-wise work is priced forward
# and twice again backward (LayerWork.backward_s), so each enters as a third of its two passes.
# A clamped gated activation's clamp, per activation output element (Megatron-Core fused_bias_geglu.py
# weighted_bias_quick_geglu_impl, and experts.py's glu() alike): forward, the gate half clamped (read
# 2, write 2), the linear half clamped (2 + 2), the two concatenated for the fused kernel (read 4,
# write 4) = 16; backward (the concatenation's gradient is two free narrow views), PyTorch's
# clamp_backward (FunctionsManual.cpp) masks each gradient where its saved input is in range: the
# gate half `where(self <= max, grad, 0)` (the bool mask read 2 write 1, the where read 3 write 2 = 8),
# the linear half `where((self >= min).logical_and_(self <= max), grad, 0)` (3 + 3 + 3 + 5 = 14), and
# the halves' gradients concatenated back by the chunk's backward (read 4, write 4) = 30
UNFUSED_CLAMP_BYTES = (16.0 + 30.0) / 3
# The routed experts' output bias added expert by expert, per routed output element (Megatron-Core
# experts.py TEGroupedMLP._apply_bias at v0.15: torch.cat([t + b * p for each expert's split]), with
# 16-bit routing probabilities, the router's dtype unless moe_router_dtype makes it fp32, which
# GPT-OSS's provider does not): forward b * p (write 2), t + b*p (read 4, write 2), the concatenation
# (read 2, write 2) = 12; backward the gradients of b and p (grad * p and grad * b, each read 2,
# write 2, summed: read 2) and the splits' gradients concatenated back (read 2, write 2) = 16
UNFUSED_EXPERT_BIAS_BYTES = (12.0 + 16.0) / 3
# Megatron-Core's unfused rotary embedding, per query and key element (rope_utils.py
# _apply_rotary_pos_emb_bshd): forward t * cos (read 2, write 2), _rotate_half's negated half (1 + 1)
# and concatenation (2 + 2), * sin (2 + 2), the sum (read 4, write 2), torch.cat((t, t_pass)) (2 + 2) = 24;
# backward the gradients through * sin (4), the rotation (negation 2, concatenation 4), * cos (4), their
# sum into t's gradient (read 4, write 2), the slice's gradient written into the whole tensor (write 2,
# read 2, write 2), and the empty t_pass slice's, a whole zero tensor (write 2) added to it (read 4,
# write 2) = 34. (MLA's interleaved rope part adds a de-interleaving copy, not counted.)
UNFUSED_ROPE_BYTES = (24.0 + 34.0) / 3
LOW_PRECISIONS = ("fp8", "mxfp8", "nvfp4")
# fp8 recipes with one scale per tensor, whose transposed copy is a transpose of the quantised one
PER_TENSOR_FP8_RECIPES = ("delayed", "current")
ATTENTION_KERNELS = ("flash", "flash2", "flash3", "cudnn", "unfused", "triton")  # StrategyArrays.kernel codes
KERNEL_UNFUSED = 4
FLASH_BLOCK = 128  # query/key tile of the fused attention kernels (FA2/FA3, cuDNN): causal blocks


@dataclass(frozen=True)
class ComputeCalibration:
    """Parameters of the compute-time model. Loaded from designer/data/compute_efficiency.yaml."""

    gemm_k_half: float  # reduction length at which a GEMM reaches half of its ceiling (K term)
    gemm_mn_half: float  # smaller output dimension at which the (M,N) term halves
    gemm_ceilings: tuple[tuple[str, str, float], ...]  # (architecture, precision, ceiling)
    gpu_gemm_ceilings: tuple[tuple[str, str, float], ...]  # (gpu id, precision, ceiling) overrides
    hbm_efficiency: float  # fraction of HBM peak bandwidth element-wise kernels reach
    attention: tuple[tuple[str, str, float, float], ...]  # (kernel, architecture, forward, backward) of the 16-bit peak
    default_flash: tuple[tuple[str, str], ...]  # (architecture, kernel) that "flash" means
    optimizer_bytes_per_param: float  # HBM traffic of the mixed-precision Adam step per local parameter
    framework_per_iteration_s: float  # host-side work per iteration (optimizer launch, data, logging)
    framework_per_layer_s: float  # host launch overhead per layer per microbatch, forward + backward
    overlap_slowdown: float = 0.0  # compute lost per second of communication hidden behind it
    grouped_gemm_efficiency: float = 1.0  # expert GEMMs (grouped, one problem per local expert) vs the dense ceiling
    fp8_recipe_gemm_factors: tuple[tuple[str, float], ...] = ()  # fp8 recipe -> its GEMM kernels vs tensorwise
    framework_per_expert_s: float = 0.0  # exposed host time per local expert per MoE layer per microbatch, fwd + bwd
    learned_busiest_rank_load: float = 1.0  # a learned router's busiest EP rank: its routed tokens over the mean
    attention_seq_half: tuple[tuple[str, float], ...] = ()  # fused kernel -> query length at half its ceiling
    attention_head_dim_half: tuple[tuple[str, float], ...] = ()  # fused kernel -> head-dim constant of its speed
    # (architecture, forward, backward): a fused kernel's fixed work per 128-query tile, in key tiles of
    # its own work (attention_local_tile_overhead_for)
    attention_local_tile_overhead: tuple[tuple[str, float, float], ...] = ()
    gpu_clock_scales: tuple[tuple[str, float], ...] = ()  # gpu id -> sustained-clock factor on its generation's GEMM ceilings
    # (gpu id, forward, backward): the fused attention kernels' speed on this part over its generation's
    attention_clock_scales: tuple[tuple[str, float, float], ...] = ()
    clock_scale_exempt: tuple[str, ...] = ()  # GEMM precisions whose peak already spends that headroom (nvfp4)
    # (architecture or gpu id, 8-bit format, forward, backward): cuDNN's 8-bit attention over its 16-bit speed
    attention_low_precision_speedup: tuple[tuple[str, str, float, float], ...] = ()
    # (architecture, low precision, ratio): the low-precision GEMM kernel's fraction of its own peak over
    # the BF16 kernel's fraction of the BF16 peak, inputs already quantised (the kernel rate a compiler
    # that fuses the quantisation reaches; fused_gemm_ceiling)
    kernel_efficiency_over_bf16: tuple[tuple[str, str, float], ...] = ()

    def attention_speedup(self, gpu_name: str, architecture: str, fmt: str) -> tuple[float, float]:
        """Forward and backward speed of cuDNN's fused attention in an 8-bit format over its 16-bit
        speed on this GPU (its own entry, else its generation's); (1, 1) where no figure exists."""
        table = {(key, f): (fw, bw) for key, f, fw, bw in self.attention_low_precision_speedup}
        return table.get((gpu_name, fmt), table.get((architecture, fmt), (1.0, 1.0)))

    def busiest_rank_load(self, training) -> float:
        """The busiest EP rank's routed tokens over the mean that a run is priced with
        (TrainingSpec.moe_load_balance): 1 under forced balance, else the run's stated
        moe_busiest_rank_load or the calibrated load of a learned router."""
        if training.moe_load_balance != "learned":
            return 1.0
        return training.moe_busiest_rank_load or self.learned_busiest_rank_load

    def clock_scale(self, gpu_name: str, precision: str) -> float:
        """How much faster than its generation's GEMM ceilings a GPU sustains its tensor cores (a part
        that holds higher clocks under load; 1 for the rest), for GEMMs in `precision`. 1 for a
        precision the part's own peak already raises past its generation's (clock_scale_exempt):
        that rate spends the power headroom the clocks come from."""
        if precision in self.clock_scale_exempt:
            return 1.0
        return dict(self.gpu_clock_scales).get(gpu_name, 1.0)

    def attention_clock_scale(self, gpu_name: str) -> tuple[float, float]:
        """Forward and backward speed of the fused attention kernels on this part over its
        generation's figures (attention_clock_scales; (1, 1) for a part without an entry). Apart from
        the GEMMs' clock factor: attention's softmax and its tiles' fixed work do not gain what the
        GEMMs gain from the same clocks (cuDNN's own benchmark, GB300 over GB200)."""
        for name, f, b in self.attention_clock_scales:
            if name == gpu_name:
                return f, b
        return 1.0, 1.0

    def gemm_ceiling(self, gpu_name: str, architecture: str, precision: str) -> float:
        for name, prec, eff in self.gpu_gemm_ceilings:
            if name == gpu_name and prec == precision:
                return eff
        for arch, prec, eff in self.gemm_ceilings:
            if arch == architecture and prec == precision:
                return eff * self.clock_scale(gpu_name, precision)
        raise KeyError(f"no GEMM ceiling for {architecture}/{precision} in compute_efficiency.yaml")

    def fused_gemm_ceiling(self, gpu_name: str, architecture: str, precision: str) -> float | None:
        """The low-precision GEMM ceiling where the quantisation is fused into neighbouring kernels
        (TrainingSpec.low_precision_casts "fused"): the kernel rate, the GPU's BF16 ceiling times the
        kernel's efficiency over BF16's (compute_efficiency.yaml low_precision.kernel_efficiency_over_bf16);
        None where no kernel figure exists."""
        for arch, prec, ratio in self.kernel_efficiency_over_bf16:
            if arch == architecture and prec == precision:
                # the BF16 kernel's fraction at the clock the low-precision kernel holds
                bf16 = self.gemm_ceiling(gpu_name, architecture, "bf16")
                return bf16 * ratio * self.clock_scale(gpu_name, precision) / self.clock_scale(gpu_name, "bf16")
        return None

    def attention_table(self, architecture: str, gpu_name: str = "",
                        low_precision_format: str | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Forward and backward efficiency per kernel code (ATTENTION_KERNELS); nan where the kernel
        does not exist on this generation; the unfused entry is unused (it runs as GEMMs). The fused
        kernels run at the part's own speed over its generation's (attention_clock_scale).
        With an 8-bit format ("fp8", "mxfp8") cuDNN's kernel runs at its 8-bit speed
        (attention_speedup), still counted against the 16-bit peak."""
        fwd = np.full(len(ATTENTION_KERNELS), np.nan)
        bwd = np.full(len(ATTENTION_KERNELS), np.nan)
        clock_fwd, clock_bwd = self.attention_clock_scale(gpu_name)
        for kernel, arch, f, b in self.attention:
            if arch == architecture:
                i = ATTENTION_KERNELS.index(kernel)
                fwd[i], bwd[i] = f * clock_fwd, b * clock_bwd
        if low_precision_format is not None:
            sf, sb = self.attention_speedup(gpu_name, architecture, low_precision_format)
            i = ATTENTION_KERNELS.index("cudnn")
            fwd[i], bwd[i] = fwd[i] * sf, bwd[i] * sb
        fwd[KERNEL_UNFUSED] = bwd[KERNEL_UNFUSED] = 1.0
        return self._alias_flash(fwd, architecture), self._alias_flash(bwd, architecture)

    def attention_local_tile_overhead_for(self, architecture: str) -> tuple[float, float] | None:
        """Forward and backward fixed work per 128-query tile of the fused attention kernels on this
        generation, in key tiles' worth of their own work (loading the query tile, the softmax's
        running statistics, writing the output and its log-sum-exp; the backward's dO and delta):
        what makes a local layer, whose tiles walk only a few key tiles, slower per FLOP than a
        global one (local_tile_efficiency). None where no figure exists (no correction)."""
        for arch, f, b in self.attention_local_tile_overhead:
            if arch == architecture:
                return f, b
        return None

    def attention_seq_half_table(self, architecture: str) -> np.ndarray:
        """Per kernel code, the query length (tokens per call) at which the fused kernel reaches half
        of its ceiling; 0 (no ramp) for the unfused path and kernels without a figure."""
        return self._fused_kernel_table(self.attention_seq_half, architecture)

    def attention_head_dim_half_table(self, architecture: str) -> np.ndarray:
        """Per kernel code, the head-dimension constant of the fused kernel's speed (d/(d + d_half),
        relative to head dim 128); 0 (no dependence) for the unfused path and kernels without a figure."""
        return self._fused_kernel_table(self.attention_head_dim_half, architecture)

    def _fused_kernel_table(self, pairs: tuple[tuple[str, float], ...], architecture: str) -> np.ndarray:
        """(kernel, value) pairs as an array per kernel code, 0 for the unfused path and kernels absent."""
        out = np.zeros(len(ATTENTION_KERNELS))
        for kernel, value in pairs:
            out[ATTENTION_KERNELS.index(kernel)] = value
        out[KERNEL_UNFUSED] = 0.0
        return self._alias_flash(out, architecture)

    def _alias_flash(self, per_kernel: np.ndarray, architecture: str) -> np.ndarray:
        """Code 0 ("flash") takes the entry of the kernel the generation's standard stack runs."""
        default = dict(self.default_flash).get(architecture)
        if default is not None:
            per_kernel[0] = per_kernel[ATTENTION_KERNELS.index(default)]
        return per_kernel


def gemm_efficiency(m, n, k, max_eff: float, calib: ComputeCalibration):
    """Achieved fraction of peak for an [M,K]x[K,N] GEMM.

    η = η_max · K/(K + K½) · d/(d + D½), d = min(M, N). Why this shape: a GEMM tile loops over K, so
    its fixed prologue/epilogue (loading the first tiles, writing C) is amortised over K; and a small
    output dimension leaves SMs idle or tiles partly filled (wave and tile quantisation). Both
    saturate for the large shapes cuBLAS reaches its ceiling on (NVIDIA "Matrix Multiplication
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
class Precisions:
    """The peaks and ceilings one evaluation runs at (one design, one precision).

    gemm_*: the linear layers (low precision where the recipe says); hi_*: 16-bit GEMMs (attention
    core when unfused, the router, the output layer, which Transformer Engine leaves in 16-bit);
    cast_bytes_per_element: HBM bytes the quantisation of one GEMM operand element moves (0 in 16-bit)."""

    gemm_peak_flops: float
    gemm_max_eff: float
    hi_peak_flops: float
    hi_max_eff: float
    cast_bytes_per_element: float
    attn_fwd_eff: np.ndarray  # per kernel code, fraction of hi_peak_flops
    attn_bwd_eff: np.ndarray
    saved_input_bytes_per_element: float = ACT_BYTES  # a linear layer's input as saved for its backward
    tp_gather_bytes_per_element: float = ACT_BYTES  # a GEMM input as a sequence-parallel all-gather moves it
    attn_seq_half: np.ndarray | None = None  # per kernel code, query length at half the ceiling (None: no ramp)
    attn_head_dim_half: np.ndarray | None = None  # per kernel code, head-dim constant (None: no dependence)
    # forward and backward fixed work per query tile of the fused kernels, in key tiles (None: no correction)
    attn_local_tile_overhead: tuple[float, float] | None = None
    # a layer whose low-precision GEMMs and casts are slower than 16-bit runs in 16-bit, as Transformer
    # Engine's recipes keep such layers; False where the recipe converts every linear layer regardless
    bf16_fallback: bool = True
    # overlapped TP fuses the sequence-parallel all-gathers into their matmuls; False where the recipe's
    # scales keep them apart (compute_efficiency.yaml low_precision.async_tp_unfused_gathers)
    tp_overlap_hides_gathers: bool = True
    # Under sequence parallelism a recipe that gathers its GEMM inputs in 8 bits quantises them on the
    # rank's shard (False: it gathers 16-bit and casts the gathered tensor, torchao's rowwise); a
    # per-tensor scaled copy is then transposed from the gathered tensor, while a block-scaled format
    # (MXFP8, NVFP4, blockwise) cannot transpose its scales and quantises both copies on the shard
    sp_cast_on_shard: bool = False
    sp_transpose_after_gather: bool = False


@dataclass(frozen=True)
class LayerWork:
    """Forward work of one layer for one microbatch on one GPU (arrays over strategies), in parts so
    the backward pass, recomputation and overlap can be priced from them.

    *_gemm_s: linear-layer GEMM seconds (attn_gemm_s: QKV and output projections, mla_up_s: the MLA
    up-projections and out_proj_s: the output projection inside it; mlp_gemm_s: dense MLP or
    router + experts + shared experts);
    attn_fwd_s / attn_bwd_s: the attention core, forward and backward; norm_s, residual_s, mlp_mem_s
    (act_fn_s: its activation-function part), attn_mem_s, rope_s: element-wise seconds; cast_s: low-precision
    quantisation of the GEMM inputs (forward), cast_bwd_s: of the GEMM output gradients (backward).
    *_flops: executed forward FLOPs; attn_flops_model: the non-causal count (MFU conventions);
    attn_flops_causal: exactly half of it."""

    attn_gemm_s: np.ndarray
    mla_up_s: np.ndarray
    out_proj_s: np.ndarray
    mlp_gemm_s: np.ndarray
    attn_fwd_s: np.ndarray
    attn_bwd_s: np.ndarray
    norm_s: np.ndarray
    residual_s: np.ndarray
    mlp_mem_s: np.ndarray
    act_fn_s: np.ndarray
    attn_mem_s: np.ndarray
    cast_s: np.ndarray
    dense_flops: np.ndarray
    attn_flops: np.ndarray
    attn_flops_model: np.ndarray
    rope_s: np.ndarray = 0.0  # the rotary embedding of the queries and keys where it runs op by op
    qk_norm_s: np.ndarray = 0.0  # QK-norm: each query and key head normalised (LLMSpec.qk_norm)
    cast_bwd_s: np.ndarray = 0.0  # low-precision quantisation of the output gradients (backward)
    alternate_mm_s: np.ndarray = 0.0  # the matmuls torchtitan's per-op checkpointing recomputes (forward)
    # the activation's saved input kept in fp8: its quantising copy (forward), and as long again its
    # dequantising copy (backward)
    act_store_s: np.ndarray = 0.0
    # the dense MLP's output GEMM (fc2 / down projection), part of mlp_gemm_s, where no backward reads its
    # output (it feeds only the residual stream); 0 for an MoE block, whose expert outputs the combine
    # reads, and where dropout follows the MLP
    mlp_out_gemm_s: np.ndarray = 0.0
    # the MLP block's GEMMs that run tensor-parallel on the gathered sequence: a dense MLP's, or an MoE
    # block's shared experts (0 without them; the routed experts take the rank's own tokens)
    tp_mlp_gemm_s: np.ndarray = 0.0

    @property
    def gemm_s(self):
        return self.attn_gemm_s + self.mlp_gemm_s

    @property
    def memory_s(self):
        return (self.norm_s + self.residual_s + self.mlp_mem_s + self.attn_mem_s + self.cast_s + self.rope_s
                + self.qk_norm_s)

    @property
    def forward_s(self):
        return self.gemm_s + self.attn_fwd_s + self.memory_s + self.act_store_s

    @property
    def backward_s(self):
        """2× the linear GEMMs and the element-wise traffic, the output gradients' casts (the inputs'
        transposed copies the weight gradients read were written in the forward), the attention
        core's own backward."""
        return 2 * (self.gemm_s + self.memory_s - self.cast_s) + self.cast_bwd_s + self.attn_bwd_s + self.act_store_s


def _attention_dims(llm: LLMSpec):
    return llm.heads, llm.kv_heads_effective, llm.head_dim_effective


def attention_projection_flops_per_token(llm: LLMSpec, tp) -> tuple:
    """(QKV-side FLOPs, MLA up-projection FLOPs, output-projection FLOPs, qk head dim, v head dim)
    per token of one layer on one TP rank. MLA (DeepSeek-V2 §2.1): down-projections h→q_lora and
    h→kv_lora+rope are replicated over TP in Megatron-Core; the up-projections are split by heads."""
    h = llm.hidden_size
    a, kv, dh = _attention_dims(llm)
    tp = np.asarray(tp, float)
    a_local = a / tp
    if llm.mla is not None:
        mla = llm.mla
        qk = mla.qk_nope_head_dim + mla.qk_rope_head_dim
        q_in = mla.q_lora_rank or h
        down = 2 * h * ((mla.q_lora_rank or 0) + mla.kv_lora_rank + mla.qk_rope_head_dim)
        up = 2 * a_local * (q_in * qk + mla.kv_lora_rank * (mla.qk_nope_head_dim + mla.v_head_dim))
        out = 2 * a_local * mla.v_head_dim * h
        return down + up, up, out, qk, mla.v_head_dim
    kv_local = np.maximum(kv / tp, 1.0)
    return 2 * h * (a_local + 2 * kv_local) * dh, np.zeros_like(tp), 2 * a_local * dh * h, dh, dh


@dataclass(frozen=True)
class LayerMatmul:
    """One matmul of a layer, in forward order (layer_matmuls)."""

    flops: float  # forward FLOPs per token, whole layer (no TP split)
    out_elems: object  # output elements per token on one TP rank (float or array over strategies)
    read_by_backward: bool  # the backward (or a later recomputed op) reads its output
    block: str  # "attn" (the attention projections) or "mlp" (the MLP or MoE block)
    partial_sum: bool = False  # a row-parallel output, summed over TP by an all-reduce or reduce-scatter


def layer_matmuls(llm: LLMSpec, moe_layer: bool, tp=1.0) -> list[LayerMatmul]:
    """The layer's matmuls in forward order, as torchtitan's per-op checkpointing counts them
    (RecomputeModule.alternate_matmuls): wq, wk, wv, wo (MLA: the q down and up projections, the kv
    down and up projections, wo; without a q LoRA rank one wq), then the router and the shared
    experts of an MoE layer (the routed experts' grouped GEMMs are saved ops, not counted), or w1,
    w3, w2 (w1, w2 ungated). Every output is read by the backward but the last down projection's,
    which feeds only a residual add."""
    h = llm.hidden_size
    a, kv, dh = _attention_dims(llm)
    tp = np.asarray(tp, float)
    a_l, kv_l = a / tp, np.maximum(kv / tp, 1.0)
    if llm.mla is not None:
        m = llm.mla
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        q = ([LayerMatmul(2 * h * m.q_lora_rank, m.q_lora_rank, True, "attn"),
              LayerMatmul(2 * m.q_lora_rank * a * qk, a_l * qk, True, "attn")] if m.q_lora_rank
             else [LayerMatmul(2 * h * a * qk, a_l * qk, True, "attn")])
        attn = q + [LayerMatmul(2 * h * (m.kv_lora_rank + m.qk_rope_head_dim), m.kv_lora_rank + m.qk_rope_head_dim,
                                True, "attn"),
                    LayerMatmul(2 * m.kv_lora_rank * a * (m.qk_nope_head_dim + m.v_head_dim),
                                a_l * (m.qk_nope_head_dim + m.v_head_dim), True, "attn"),
                    LayerMatmul(2 * a * m.v_head_dim * h, h, True, "attn", partial_sum=True)]
    else:
        attn = [LayerMatmul(2 * h * a * dh, a_l * dh, True, "attn"),
                LayerMatmul(2 * h * kv * dh, kv_l * dh, True, "attn"),
                LayerMatmul(2 * h * kv * dh, kv_l * dh, True, "attn"),
                LayerMatmul(2 * a * dh * h, h, True, "attn", partial_sum=True)]
    gate = 2 if llm.gated_mlp else 1

    def mlp(width):
        return ([LayerMatmul(2 * h * width, width / tp, True, "mlp")] * gate
                + [LayerMatmul(2 * width * h, h, False, "mlp", partial_sum=True)])
    if moe_layer and llm.moe is not None:
        moe = llm.moe
        mms = [LayerMatmul(2 * h * moe.experts, moe.experts, True, "mlp")]
        if moe.shared_experts:
            mms += mlp(moe.shared_experts * moe.shared_ffn_size)
    else:
        mms = mlp(llm.ffn_size)
    return attn + mms


def alternate_matmul_flops_per_token(llm: LLMSpec, moe_layer: bool) -> tuple[float, float, float, float]:
    """(attention-projection FLOPs recomputed, of all of them; MLP-block FLOPs recomputed, of all of
    them) per token of one whole layer (no TP split), forward, under torchtitan's per-op selective
    checkpointing (RecomputeModule.alternate_matmuls): its policy counts the layer's matmuls in forward
    order (layer_matmuls) and recomputes the even-numbered ones, of which only those whose outputs the
    backward reads run again (a compiled graph recomputes what the backward needs; eager
    checkpointing stops early once it has). An MoE block's total counts its routed experts too."""
    mms = layer_matmuls(llm, moe_layer)
    alt = {"attn": 0.0, "mlp": 0.0}
    every = {"attn": 0.0, "mlp": 0.0}
    for i, mm in enumerate(mms, start=1):
        every[mm.block] += mm.flops
        if i % 2 == 0 and mm.read_by_backward:
            alt[mm.block] += mm.flops
    if moe_layer and llm.moe is not None:
        moe = llm.moe
        gate = 2.0 if llm.gated_mlp else 1.0
        every["mlp"] += 2 * moe.top_k * moe.capacity_factor * (gate + 1) * moe.expert_ffn_size * llm.hidden_size
    return alt["attn"], every["attn"], alt["mlp"], every["mlp"]


def causal_fraction(s_q, s_kv):
    """Share of the s_q × s_kv score blocks a causal fused kernel computes: the lower triangle plus
    the diagonal tiles, (n + 1)/(2n) for n tiles per side; with context parallelism each rank's load-
    balanced chunks see the same average."""
    n = np.maximum(np.asarray(s_kv, float) / FLASH_BLOCK, 1.0)
    return 0.5 + 0.5 / n


def cp_causal_fraction(s, cp, balanced=True):
    """Share of its s/cp × s score blocks the busiest CP rank computes under a causal mask. Load
    balanced (Megatron and torchtitan give rank i chunks i and 2cp−1−i) every rank sees the average;
    otherwise rank cp−1 holds the last chunk: cp−1 full blocks of keys and its own diagonal block."""
    cp = np.asarray(cp, float)
    last = ((cp - 1) + causal_fraction(s / cp, s / cp)) / cp
    return np.where(np.asarray(balanced, bool) | (cp <= 1), causal_fraction(s / cp, s), last)


def head_dim_factor(head_dim, d_half):
    """A fused kernel's speed at this head dimension relative to head dim 128: (d/(d + d_half)) /
    (128/(128 + d_half)), at most 1 (the kernels are tuned for 128; wider heads are not credited)."""
    if d_half is None:
        return 1.0
    d_half = np.asarray(d_half, float)
    rel = (head_dim / (head_dim + d_half)) / (128.0 / (128.0 + d_half))
    return np.where(d_half > 0, np.minimum(rel, 1.0), 1.0)


def local_tile_efficiency(local_fraction, s, overhead):
    """A local layer's fused attention speed as a share of the kernel's ceiling (before the head-dim
    factor): its 128-query tiles walk n = local_fraction · s / 128 key tiles on average (a sliding
    window of w: (w + 128)/128, the same for every tile; a chunk: the mean over the chunk's causal
    tiles) and each does `overhead` key tiles' worth of fixed work besides, n/(n + overhead) (for
    unequal tiles too: the fixed work adds once per tile). A sliding window's tiles are alike, so a
    causal layer's query-length ramp (its uneven tail) is not what limits it: cuDNN's own
    sliding-window benchmark runs at one speed from 2k to 16k tokens."""
    n = np.maximum(np.asarray(local_fraction, float) * np.asarray(s, float) / FLASH_BLOCK, 1.0)
    return n / (n + overhead)


def attended_parts(llm: LLMSpec, s, cp, balanced=True):
    """(global part, local part, local fraction, banded): the layers' mean attended fraction
    (attended_fraction) split into its global layers' part, (1 − local share) · causal, and its
    local layers' part, local share · the band; the local layers' own fraction; and whether their
    band is narrower than the causal context (a window at least as long as it is a global layer)."""
    causal = cp_causal_fraction(s, cp, balanced)
    win = llm.attention_window
    if win is None:
        return causal, 0.0 * causal, causal, np.zeros(np.shape(causal), bool)
    s = np.asarray(s, float)
    if win.kind == "sliding":
        local = (win.tokens + FLASH_BLOCK) / s
        banded = local < causal_fraction(s, s)
    else:
        chunk = np.minimum(float(win.tokens), s)
        local = chunk / s * causal_fraction(chunk, chunk)
        banded = float(win.tokens) < s
    local = np.minimum(local, causal)
    share = win.local_layer_share
    return (1.0 - share) * causal, share * local, local, np.broadcast_to(banded, np.shape(local))


def attended_fraction(llm: LLMSpec, s, cp, balanced=True):
    """Share of its s/cp × s score blocks the busiest CP rank's fused kernel computes, averaged over
    the layers: causal (cp_causal_fraction) where a layer attends to the whole context; where it is
    local (llm.attention_window), the band of key tiles each 128-query tile touches, (w + tile)/s of
    the row for a sliding window of w, or its own chunk of c, (c/s)·causal_fraction(c, c), and never
    more than causal. Under CP each rank's queries keep the same band (a local layer's load is even)."""
    global_part, local_part, _, _ = attended_parts(llm, s, cp, balanced)
    return global_part + local_part


def layer_forward(llm: LLMSpec, *, moe_layer: bool, b, s, tp, cp, ep, sp, kernel, prec: Precisions,
                  hbm_bytes_per_s: float, calib: ComputeCalibration, etp=1, cp_balanced=True, eager=False,
                  qkv_separate=False, act_input_fp8=False, expert_load=1.0, unfused=0) -> LayerWork:
    """Forward work of one transformer layer per microbatch per GPU (see _layer_forward).

    Under a low-precision recipe a layer whose GEMMs are too small to repay their casts runs in
    16-bit, as recipes keep such layers in BF16 (NVIDIA's NVFP4 and FP8 recipes leave the first and
    last layers and small projections in BF16): so low precision is never slower than 16-bit, except
    under a recipe that converts every layer (Precisions.bf16_fallback False; compute_efficiency.yaml
    low_precision.converts_every_linear)."""
    kw = dict(moe_layer=moe_layer, b=b, s=s, tp=tp, cp=cp, ep=ep, sp=sp, kernel=kernel,
              hbm_bytes_per_s=hbm_bytes_per_s, calib=calib, etp=etp, cp_balanced=cp_balanced, eager=eager,
              qkv_separate=qkv_separate, act_input_fp8=act_input_fp8, expert_load=expert_load, unfused=unfused)
    low = _layer_forward(llm, prec=prec, **kw)
    if not prec.bf16_fallback or (prec.cast_bytes_per_element == 0.0 and prec.gemm_peak_flops == prec.hi_peak_flops):
        return low
    hi = _layer_forward(llm, prec=dataclasses.replace(prec, gemm_peak_flops=prec.hi_peak_flops,
                                                      gemm_max_eff=prec.hi_max_eff, cast_bytes_per_element=0.0), **kw)
    use_low = 3 * low.gemm_s + low.cast_s + low.cast_bwd_s <= 3 * hi.gemm_s
    pick = {f: np.where(use_low, getattr(low, f), getattr(hi, f))
            for f in ("attn_gemm_s", "mla_up_s", "out_proj_s", "mlp_gemm_s", "cast_s", "cast_bwd_s", "alternate_mm_s",
                      "mlp_out_gemm_s", "tp_mlp_gemm_s")}
    return dataclasses.replace(low, **pick)


def _layer_forward(llm: LLMSpec, *, moe_layer: bool, b, s, tp, cp, ep, sp, kernel, prec: Precisions,
                   hbm_bytes_per_s: float, calib: ComputeCalibration, etp=1, cp_balanced=True, eager=False,
                   qkv_separate=False, act_input_fp8=False, expert_load=1.0, unfused=0) -> LayerWork:
    """Forward work of one transformer layer per microbatch per GPU.

    b: microbatch sequences; s: sequence length; tp/cp/ep/etp: group sizes; sp: sequence parallelism;
    kernel: attention kernel code; eager: element-wise ops run as PyTorch eager kernels;
    qkv_separate: Q, K and V from three GEMMs; act_input_fp8: the gated activation's saved input kept
    in fp8 (arrays); expert_load: the routed tokens of this (the busiest) EP rank over the mean
    (TrainingSpec.moe_load_balance): its expert work, not the FLOPs counted; unfused: bitmask of the
    element-wise steps run op by op (records.UNFUSED_OPS). The router and the attention core run in
    16-bit."""
    h = llm.hidden_size
    a, kv, dh = _attention_dims(llm)
    b = np.asarray(b, float)
    tp = np.asarray(tp, float)
    cp = np.asarray(cp, float)
    ep = np.asarray(ep, float)
    etp = np.asarray(etp, float)
    kernel = np.asarray(kernel)
    unfused_bits = np.asarray(unfused)  # (the name `unfused` is the attention path's below)
    tokens = b * s / cp  # tokens of this CP rank
    # the rank's own tokens under sequence parallelism: what a layer with its weights replicated
    # over TP (MLA's down projections, the MoE router) runs on, before any all-gather; all of them
    # without it
    sp_tokens = np.where(np.asarray(sp, bool), tokens / tp, tokens)
    a_local = a / tp
    gp, ge = prec.gemm_peak_flops, prec.gemm_max_eff

    # Linear layers (Megatron column/row parallel): QKV (or MLA projections), attention output.
    f_qkv_tok, f_up_tok, f_out_tok, dqk, dv = attention_projection_flops_per_token(llm, tp)
    f_down_tok = 0.0
    if llm.mla is not None:
        mla = llm.mla
        q_in = mla.q_lora_rank or h
        down_w = (mla.q_lora_rank or 0) + mla.kv_lora_rank + mla.qk_rope_head_dim
        # the down projections are replicated over TP and take the layer's input as it comes: the
        # rank's s/tp tokens under sequence parallelism (Megatron-Core multi_latent_attention.py,
        # _qkv_down_projection: "q_compressed: [s / TP, b, q_lora_rank]"); the column-parallel up
        # projections gather the latents
        f_down_tok = 2 * h * down_w
        t_down = gemm_time_s(sp_tokens, down_w, h, 1, gp, ge, calib)
        t_up = (gemm_time_s(tokens, a_local * dqk, q_in, 1, gp, ge, calib)
                + gemm_time_s(tokens, a_local * (mla.qk_nope_head_dim + dv), mla.kv_lora_rank, 1, gp, ge, calib))
        t_qkv = t_down + t_up
        # inputs cast for the up projections: the latents (without a q LoRA rank the query's input
        # is the norm output, cast with the other [tokens, h] operands below)
        qkv_in_elems = tokens * ((mla.q_lora_rank or 0) + mla.kv_lora_rank)
        qkv_out_elems = sp_tokens * down_w + tokens * a_local * (dqk + mla.qk_nope_head_dim + dv)
    else:
        kv_local = np.maximum(kv / tp, 1.0)
        # one GEMM as wide as Q, K and V together, or three (Strategy.qkv_projection)
        t_qkv = np.where(np.asarray(qkv_separate, bool),
                         gemm_time_s(tokens, a_local * dh, h, 1, gp, ge, calib)
                         + gemm_time_s(tokens, kv_local * dh, h, 2, gp, ge, calib),
                         gemm_time_s(tokens, (a_local + 2 * kv_local) * dh, h, 1, gp, ge, calib))
        t_up = np.zeros_like(tokens)
        qkv_in_elems = np.zeros_like(tokens)
        qkv_out_elems = tokens * (a_local + 2 * kv_local) * dh
    t_out = gemm_time_s(tokens, h, a_local * dv, 1, gp, ge, calib)
    f_attn_lin = tokens * (f_qkv_tok - f_down_tok + f_out_tok) + sp_tokens * f_down_tok
    gate = 2.0 if llm.gated_mlp else 1.0
    if moe_layer and llm.moe is not None:
        moe = llm.moe
        fe = moe.expert_ffn_size
        # expert tokens on this GPU (uniform routing): the TP group's tokens are split over its tp/etp
        # expert groups (Megatron-Core dispatches the SP-local tokens; ETP ranks share theirs)
        routed = tokens * moe.top_k * moe.capacity_factor * etp / tp
        local_experts = moe.experts / ep
        # the busiest rank's tokens set the pace (dropless: every rank waits for it at the combine);
        # the FLOPs counted stay the mean's
        busiest = routed * expert_load
        m_e = busiest / local_experts  # tokens per local expert (grouped GEMM, one problem per expert)
        gge = ge * calib.grouped_gemm_efficiency
        t_mlp = (gemm_time_s(m_e, gate * fe / etp, h, local_experts, gp, gge, calib)
                 + gemm_time_s(m_e, h, fe / etp, local_experts, gp, gge, calib)
                 # the router, replicated over TP, scores the rank's own tokens (Megatron-Core router.py:
                 # its weight is marked sequence_parallel, its input the sequence-parallel shard)
                 + gemm_time_s(sp_tokens, moe.experts, h, 1, prec.hi_peak_flops, prec.hi_max_eff, calib))
        # the experts' outputs are read again (scaled by the routing probabilities, whose gradient
        # needs them; a scatter-add combine saves its indices after them): no output GEMM goes unread
        t_mlp_out = np.zeros_like(tokens)
        f_mlp = 2 * routed * (gate + 1) * fe * h / etp + 2 * sp_tokens * moe.experts * h
        # activation function on the routed tokens (read gate+up, write the product); permute and
        # unpermute copies of the dispatched tokens (read + write each)
        act_bytes = busiest * (gate + 1) * fe / etp * ACT_BYTES
        mlp_mem_bytes = act_bytes + 2 * 2 * busiest * h * ACT_BYTES
        if llm.linear_bias:
            # the experts' output bias, added expert by expert where the framework does so (or
            # everything runs eager)
            bias_unfused = np.maximum((unfused_bits & UNFUSED_EXPERT_BIAS) > 0, np.asarray(eager, float))
            mlp_mem_bytes = mlp_mem_bytes + bias_unfused * busiest * h * UNFUSED_EXPERT_BIAS_BYTES
        in_elems = busiest * (h + fe / etp)
        out_elems = busiest * (gate * fe / etp + h)
        gathered_mlp = np.zeros_like(tokens)  # the routed experts take the rank's own tokens
        t_tp_mlp = np.zeros_like(tokens)
        if moe.shared_experts:
            fs = moe.shared_experts * moe.shared_ffn_size
            t_tp_mlp = (gemm_time_s(tokens, gate * fs / tp, h, 1, gp, ge, calib)
                        + gemm_time_s(tokens, h, fs / tp, 1, gp, ge, calib))
            t_mlp = t_mlp + t_tp_mlp
            f_mlp = f_mlp + 2 * tokens * (gate + 1) * fs * h / tp
            shared_act = tokens * (gate + 1) * fs / tp * ACT_BYTES
            act_bytes = act_bytes + shared_act
            mlp_mem_bytes = mlp_mem_bytes + shared_act
            in_elems = in_elems + tokens * fs / tp
            out_elems = out_elems + tokens * gate * fs / tp
            gathered_mlp = tokens * h  # the shared experts are a TP-parallel MLP
            if moe.shared_expert_gate:
                # the gate (Megatron-Core shared_experts.py): its logits read the rank's own input tokens
                # (a one-column GEMM, bound by that read), and the scaling reads the shared output and
                # writes it gated (an eager multiply): 2 + 4 B per element of [own tokens, h]
                mlp_mem_bytes = mlp_mem_bytes + sp_tokens * h * 3 * ACT_BYTES
    else:
        f = llm.ffn_size
        t_down = gemm_time_s(tokens, h, f / tp, 1, gp, ge, calib)
        t_mlp = gemm_time_s(tokens, gate * f / tp, h, 1, gp, ge, calib) + t_down
        t_tp_mlp = t_mlp
        # dropout after the MLP draws its mask from the down projection's output: then it is read
        t_mlp_out = 0.0 * t_down if llm.dropout else t_down
        f_mlp = 2 * tokens * (gate + 1) * f * h / tp
        # fused bias + activation: read the (gate+up) input, write the activation (Megatron fused GeLU/SwiGLU)
        act_bytes = tokens * (gate + 1) * f / tp * ACT_BYTES
        mlp_mem_bytes = act_bytes
        in_elems = tokens * f / tp
        out_elems = tokens * gate * f / tp
        gathered_mlp = tokens * h

    # Attention core: QKᵀ and AV, batched over b·a/tp heads; with CP each rank holds s/cp queries
    # against all s keys (ring attention). Non-causal FLOPs = 2·b·(s/cp)·s·a/tp·(d_qk + d_v).
    attn_model = 2 * b * a_local * (s / cp) * s * (dqk + dv)
    unfused = kernel == KERNEL_UNFUSED
    global_part, local_part, local_frac, banded = attended_parts(llm, s, cp, cp_balanced)
    causal = global_part + local_part
    attn_exec = np.where(unfused, attn_model, causal * attn_model)
    # Fused kernels reach their ceiling only on long rows: one CTA per 128-query tile walks the keys,
    # so short sequences leave SMs idle and the causal tail unbalanced. Efficiency ramps as
    # L/(L + L½) with L the queries per call (the CP rank's s/cp), fitted on the kernels' published
    # causal curves: cuDNN's own SDPA benchmark, FlashAttention-3's Fig. 5e (compute_efficiency.yaml
    # attention.seq_half_tokens); the backward kernel, which tiles the same way, ramps alike.
    sq = s / cp
    ramp = 1.0 if prec.attn_seq_half is None else sq / (sq + prec.attn_seq_half[kernel])
    # heads narrower than 128 run slower per FLOP (compute_efficiency.yaml attention.head_dim_half)
    width = head_dim_factor((dqk + dv) / 2.0, None if prec.attn_head_dim_half is None
                            else prec.attn_head_dim_half[kernel])
    eff_f = prec.attn_fwd_eff[kernel] * ramp * width
    eff_b = prec.attn_bwd_eff[kernel] * ramp * width
    hp = prec.hi_peak_flops
    # a local layer's query tiles walk a few key tiles each, so the kernel's fixed work per query tile
    # weighs more (compute_efficiency.yaml attention.local_tile_overhead, from cuDNN's sliding-window
    # benchmark); never faster per FLOP than a global layer at the same query length, so the time
    # grows with the sequence across the length where the band stops spanning the context. Where the
    # band is the whole context, or the generation has no figure, it runs as a global layer
    over = prec.attn_local_tile_overhead
    loc_f, loc_b = eff_f, eff_b
    if over is not None and np.any(banded):
        tile_f = prec.attn_fwd_eff[kernel] * width * local_tile_efficiency(local_frac, s, over[0])
        tile_b = prec.attn_bwd_eff[kernel] * width * local_tile_efficiency(local_frac, s, over[1])
        loc_f = np.where(banded, np.minimum(tile_f, eff_f), eff_f)
        loc_b = np.where(banded, np.minimum(tile_b, eff_b), eff_b)
    t_fused_f = (global_part / eff_f + local_part / loc_f) * attn_model / hp
    t_fused_b = 2.5 * (global_part / eff_b + local_part / loc_b) * attn_model / hp
    t_unf = (gemm_time_s(sq, s, dqk, b * a_local, hp, prec.hi_max_eff, calib)
             + gemm_time_s(sq, dv, s, b * a_local, hp, prec.hi_max_eff, calib))
    # Megatron fused scale+mask+softmax: read scores, write probs; attention dropout (where the
    # model has it): read probs, write output and a uint8 mask (Korthikanti et al. 2022 §4.1).
    scores = b * a_local * sq * s
    drop = (2 * ACT_BYTES + MASK_BYTES) if llm.dropout else 0.0
    attn_mem_bytes = np.where(unfused, scores * (2 * ACT_BYTES + drop), 0.0)  # flash: scores stay in SRAM
    t_attn_f = np.where(unfused, t_unf, t_fused_f)
    t_attn_b = np.where(unfused, 2 * t_unf, t_fused_b)

    # Element-wise kernels on [tokens, h]: two norms (read + write), two residual adds (read x, read
    # residual, write out), fused with dropout (+ a uint8 mask) where the model has it. Without
    # sequence parallelism these are replicated on every TP rank; with it they are split
    # (Korthikanti §4.2.2).
    h_local = np.where(sp, h / tp, h)
    norm_bytes = 2 * (2 * tokens * h_local * ACT_BYTES)
    residual_bytes = 2 * tokens * h_local * (3 * ACT_BYTES + (MASK_BYTES if llm.dropout else 0.0))
    # Low-precision recipes quantise every linear-layer input (forward) and output gradient
    # (backward): read 16-bit, write the 8-bit copy and its transpose for the other GEMM operand
    # (Transformer Engine cast-transpose), + one more read for current scaling's amax pass. The
    # [tokens, h] operands of the column-parallel GEMMs (the norm outputs forward, the row-parallel
    # outputs' gradients backward) are, under sequence parallelism, quantised on the rank's 1/tp
    # shard and gathered in 8 bits (Precisions.tp_gather_bytes_per_element); the transposed copy the
    # other GEMM reads is then made from the gathered tensor: read 1 byte, write 1 (Transformer
    # Engine's LayerNormLinear: layernorm_fwd_fp8, gather_along_first_dim, fp8_transpose; torchao's
    # Float8ColwiseParallel casts before its redistribute).
    cpe = prec.cast_bytes_per_element
    # the attention input and the MLP's (forward); their counterparts' gradients (backward), alike
    gathered = tokens * h + gathered_mlp
    on_shard = 0.0
    if cpe:
        shard = ((cpe - 1.0) / tp + 2.0) if prec.sp_transpose_after_gather else cpe / tp
        on_shard = np.where(np.asarray(sp) & (tp > 1) & prec.sp_cast_on_shard, shard, cpe)
    cast_bytes = (qkv_in_elems + tokens * a_local * dv + in_elems) * cpe + gathered * on_shard
    cast_bwd_bytes = (qkv_out_elems + out_elems) * cpe + gathered * on_shard
    hbm = hbm_bytes_per_s * calib.hbm_efficiency
    # PyTorch eager mode: the same ops, one kernel each (EAGER_* above)
    eager = np.asarray(eager, float)
    if llm.norm == "rmsnorm":
        norm_bytes = norm_bytes + eager * 2 * tokens * h_local * EAGER_RMSNORM_EXTRA_BYTES
    act_store_bytes = 0.0
    if llm.gated_mlp:
        act_out_elems = act_bytes / ((gate + 1) * ACT_BYTES)  # the activation's output elements
        gated_extra = eager * act_out_elems * EAGER_GATED_ACT_EXTRA_BYTES
        if llm.activation_clamp is not None:
            # the clamp, op by op where the framework runs it so (or everything runs eager)
            clamp_unfused = np.maximum((unfused_bits & UNFUSED_CLAMP) > 0, eager)
            gated_extra = gated_extra + clamp_unfused * act_out_elems * UNFUSED_CLAMP_BYTES
        act_bytes = act_bytes + gated_extra
        mlp_mem_bytes = mlp_mem_bytes + gated_extra
        # Megatron's fp8 input store (fused_bias_swiglu.py: input.to(torch.float8_e4m3fn) forward,
        # .to(the input dtype) backward): a copy of the gate and up outputs, read 2 bytes and write 1
        # each forward, read 1 and write 2 backward
        act_store_bytes = np.asarray(act_input_fp8, float) * gate * act_out_elems * (ACT_BYTES + FP8_BYTES)
    rope_bytes = 0.0
    if llm.rotary_embedding:
        # the rotated widths: every query and key head (MLA: the shared rope key and each head's rope part)
        rotated = (a_local + 1.0) * llm.mla.qk_rope_head_dim if llm.mla is not None else \
            (a_local + np.maximum(kv / tp, 1.0)) * dh
        # eager mode's own RoPE (EAGER_ROPE_BYTES), else Megatron-Core's unfused one where it runs
        per_element = eager * EAGER_ROPE_BYTES
        rope_unfused = (unfused_bits & UNFUSED_ROPE) > 0
        if np.any(rope_unfused):
            per_element = per_element + rope_unfused * (1.0 - eager) * UNFUSED_ROPE_BYTES
        # the mean layer: NoPE layers (LLMSpec.nope_layer_interval) rotate nothing
        rope_bytes = tokens * rotated * per_element * llm.rope_layer_fraction
    qk_norm_bytes = 0.0
    if llm.qk_norm:
        # QK-norm: one norm kernel per query and key head (Megatron-Core's q_layernorm / k_layernorm,
        # Transformer Engine's fused norm; the weightless L2Norm is one jit-fused kernel, torch_norm.py):
        # read + write each element of Q and K, as the layer norms above; op by op in eager mode, as
        # eager RMSNorm. The mean layer: NoPE layers normalise nothing (Megatron-Bridge llama4_utils.py)
        qk_elems = tokens * (a_local + np.maximum(kv / tp, 1.0)) * dh * llm.rope_layer_fraction
        qk_norm_bytes = qk_elems * 2 * ACT_BYTES
        if llm.norm == "rmsnorm" or llm.qk_norm == "l2":
            qk_norm_bytes = qk_norm_bytes + eager * qk_elems * EAGER_RMSNORM_EXTRA_BYTES
    dense_flops = f_attn_lin + f_mlp
    # torchtitan's per-op checkpointing recomputes some of these GEMMs, at their block's average rate
    attn_alt, attn_all, mlp_alt, mlp_all = alternate_matmul_flops_per_token(llm, moe_layer)
    t_alt = (t_qkv + t_out) * (attn_alt / attn_all) + t_mlp * (mlp_alt / mlp_all)
    return LayerWork(
        attn_gemm_s=t_qkv + t_out, mla_up_s=t_up, out_proj_s=t_out, mlp_gemm_s=t_mlp,
        attn_fwd_s=t_attn_f, attn_bwd_s=t_attn_b,
        norm_s=norm_bytes / hbm, residual_s=residual_bytes / hbm, mlp_mem_s=mlp_mem_bytes / hbm,
        act_fn_s=act_bytes / hbm, attn_mem_s=attn_mem_bytes / hbm, cast_s=cast_bytes / hbm,
        cast_bwd_s=cast_bwd_bytes / hbm,
        dense_flops=dense_flops, attn_flops=attn_exec, attn_flops_model=attn_model, rope_s=rope_bytes / hbm,
        qk_norm_s=qk_norm_bytes / hbm,
        alternate_mm_s=t_alt, act_store_s=act_store_bytes / hbm, mlp_out_gemm_s=t_mlp_out, tp_mlp_gemm_s=t_tp_mlp,
    )


# HBM bytes per logit element the cross entropy moves over its forward and backward. Fused (Megatron's
# vocab-parallel cross entropy): the forward reads the 16-bit logits and writes and re-reads the fp32
# softmax (10), the backward priced at twice it, as the output layer's GEMMs are (30). Eager (PyTorch's
# cross_entropy on upcast logits, op by op), counted from its kernels: the upcast (read 2, write 4),
# log_softmax (max, sum and output passes: read 12, write 4); in the backward the nll_loss gradient
# (write 4), log_softmax_backward (read the gradient twice and the output once, write 4: 16) and the
# cast back to 16 bits (read 4, write 2): 48.
CE_BYTES_PER_LOGIT = {"fused": 3 * (ACT_BYTES + 4 + 4), "eager": 48.0}


def logits_forward(llm: LLMSpec, *, b, s, tp, cp, prec: Precisions, hbm_bytes_per_s: float,
                   calib: ComputeCalibration, ce_eager=False):
    """(seconds, flops) of the output layer and the vocab-parallel cross entropy, forward, per microbatch.

    The logits GEMM is [tokens, h] x [h, V/tp] in 16-bit (Megatron's output layer is not a Transformer
    Engine module); the cross entropy's HBM traffic is a third of CE_BYTES_PER_LOGIT (Strategy.cross_entropy),
    as the caller prices forward and backward at three times the forward."""
    tokens = np.asarray(b, float) * s / np.asarray(cp, float)
    v_local = llm.vocab_size / np.asarray(tp, float)
    t = gemm_time_s(tokens, v_local, llm.hidden_size, 1, prec.hi_peak_flops, prec.hi_max_eff, calib)
    flops = 2 * tokens * v_local * llm.hidden_size
    per_logit = np.where(ce_eager, CE_BYTES_PER_LOGIT["eager"], CE_BYTES_PER_LOGIT["fused"]) / 3
    ce_bytes = tokens * v_local * per_logit
    return t + ce_bytes / (hbm_bytes_per_s * calib.hbm_efficiency), flops


def muon_matrices(llm: LLMSpec, moe_layer: bool, tp, etp=1.0) -> tuple[list, list]:
    """The 2-D weights of one layer that Muon orthogonalises, as (rows, cols) of the block one
    tensor-parallel rank holds (Megatron-Bridge's muon_tp_mode "blockwise": each rank runs
    Newton-Schulz on its own shard), apart: (the layer's dense side, one routed expert's).

    The fused QKV weight is split into its query, key and value parts (Megatron-Core muon.py
    split_qkv, qkv_split_shapes per query group); MLA's down-projections and the router are held
    whole by every TP rank (tp_replicated_layer_params); a gated MLP's fused gate and up projection
    is one matrix (muon.py splits only QKV); each routed expert's weights are matrices of their own
    (Transformer Engine's grouped linear keeps weight0..weightN). Norms and biases are vectors, on
    the scalar optimizer."""
    h = llm.hidden_size
    a, kv, dh = _attention_dims(llm)
    tp, etp = np.asarray(tp, float), np.asarray(etp, float)
    gate = 2.0 if llm.gated_mlp else 1.0
    if llm.mla is not None:
        m = llm.mla
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        q = ([(m.q_lora_rank, h), (a / tp * qk, m.q_lora_rank)] if m.q_lora_rank
             else [(a / tp * qk, h)])
        attn = q + [(m.kv_lora_rank + m.qk_rope_head_dim, h),
                    (a / tp * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank),
                    (h, a / tp * m.v_head_dim)]
    else:
        kv_rows = np.maximum(kv / tp, 1.0) * dh
        attn = [(a / tp * dh, h), (kv_rows, h), (kv_rows, h), (h, a / tp * dh)]

    def mlp(width, split):
        return [(gate * width / split, h), (h, width / split)]
    if moe_layer and llm.moe is not None:
        moe = llm.moe
        dense = attn + [(moe.experts, h)]
        if moe.shared_experts:
            dense += mlp(moe.shared_experts * moe.shared_ffn_size, tp)
        return dense, mlp(moe.expert_ffn_size, etp)
    return attn + mlp(llm.ffn_size, tp), []


def newton_schulz_cost(matrices: list, steps: int, peak_flops: float, max_eff: float, calib: ComputeCalibration):
    """(seconds, parameters) of Muon's orthogonalisation of `matrices` ((rows, cols) pairs): per
    Newton-Schulz step on an m x n matrix (m <= n; the iteration runs on the transpose of a tall one),
    A = X X^T (m x n by n x m), B = bA + cA A (m x m by m x m) and X' = aX + B X (m x m by m x n)
    (Jordan et al. 2024, the quintic iteration zeropower_via_newtonschulz5; emerging_optimizers
    newton_schulz), 4m^2 n + 2m^3 FLOPs. The matmuls run in bfloat16: under Megatron's
    --muon-fp32-matmul-prec "medium" (the Megatron-Bridge default) emerging_optimizers casts the
    fp32 momentum to bfloat16 for them (muon_utils.newton_schulz)."""
    t = 0.0
    n_params = 0.0
    for rows, cols in matrices:
        r, c = np.asarray(rows, float), np.asarray(cols, float)
        small, big = np.minimum(r, c), np.maximum(r, c)
        t = t + steps * (gemm_time_s(small, small, big, 1, peak_flops, max_eff, calib)
                         + gemm_time_s(small, small, small, 1, peak_flops, max_eff, calib)
                         + gemm_time_s(small, big, small, 1, peak_flops, max_eff, calib))
        n_params = n_params + r * c
    return t, n_params


def optimizer_step_s(local_params, hbm_bytes_per_s: float, calib: ComputeCalibration):
    """The Adam step plus gradient-norm clipping is memory-bound: bytes/param of HBM traffic. Muon's
    element-wise part (momentum, update, master and 16-bit weights, the clip) moves about as much,
    one moment less and the Newton-Schulz input and output more (its matmuls: newton_schulz_cost)."""
    return np.asarray(local_params, float) * calib.optimizer_bytes_per_param / (hbm_bytes_per_s * calib.hbm_efficiency)


def _norm_params(llm: LLMSpec) -> int:
    """Weights of one norm over h: scale (RMSNorm) or scale + bias (LayerNorm)."""
    return llm.hidden_size * (2 if llm.norm == "layernorm" else 1)


def final_norm_params(llm: LLMSpec) -> int:
    """Weights of the norm before the output layer (on the last pipeline stage)."""
    return _norm_params(llm)


def attention_params(llm: LLMSpec) -> float:
    """Attention weights of one layer (+ biases where the model has them; MLA's two latent norms)."""
    h = llm.hidden_size
    a, kv, dh = _attention_dims(llm)
    bias = 1 if llm.linear_bias else 0
    if llm.mla is not None:
        m = llm.mla
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        q = (h * m.q_lora_rank + m.q_lora_rank * a * qk + m.q_lora_rank) if m.q_lora_rank else h * a * qk
        kv_p = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank * a * (m.qk_nope_head_dim + m.v_head_dim)
        return float(q + kv_p + m.kv_lora_rank + a * m.v_head_dim * h + bias * h)
    # a QKV-only bias (Qwen2) is added in the projection GEMM's epilogue and its gradient reduced in
    # the weight-gradient GEMM's (cuBLASLt's BIAS and BGRADB epilogues, Transformer Engine
    # common/gemm/cublaslt_gemm.cu): its parameters count, its time does not
    qkv_bias = 1 if (llm.qkv_bias and not llm.linear_bias) else 0
    return float(h * (a + 2 * kv) * dh + a * dh * h + bias * ((a + 2 * kv) * dh + h) + qkv_bias * (a + 2 * kv) * dh)


def dense_layer_params(llm: LLMSpec) -> float:
    """Parameters of one dense transformer layer (weights, biases where present, 2 norms)."""
    h = llm.hidden_size
    gate = 2 if llm.gated_mlp else 1
    bias = 1 if llm.linear_bias else 0
    mlp = (gate + 1) * h * llm.ffn_size + bias * (gate * llm.ffn_size + h)
    return float(attention_params(llm) + mlp + 2 * _norm_params(llm))


def moe_layer_params(llm: LLMSpec) -> tuple[float, float]:
    """(non-expert params, expert params) of one MoE layer; non-expert includes attention, norms,
    router and shared experts (which every EP rank holds)."""
    assert llm.moe is not None
    moe = llm.moe
    h = llm.hidden_size
    gate = 2 if llm.gated_mlp else 1
    per_expert = (gate + 1) * h * moe.expert_ffn_size
    shared = moe.shared_experts * (gate + 1) * h * moe.shared_ffn_size + (h if moe.shared_expert_gate else 0)
    return float(attention_params(llm) + 2 * _norm_params(llm) + h * moe.experts + shared), float(moe.experts * per_expert)


def tp_replicated_layer_params(llm: LLMSpec, moe_layer: bool) -> float:
    """Parameters of one layer every TP rank holds whole: MLA's down-projections and latent norms
    (Megatron-Core multi_latent_attention.py builds linear_q_down_proj and linear_kv_down_proj with
    parallel_mode 'duplicated'), and an MoE layer's router (theoretical_memory_usage.py counts the
    router among the replicated parameters). Norm weights are left with the rest (a few h each)."""
    h = llm.hidden_size
    out = 0.0
    if llm.mla is not None:
        m = llm.mla
        q = (h * m.q_lora_rank + m.q_lora_rank) if m.q_lora_rank else 0
        out += q + h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank
    if moe_layer and llm.moe is not None:
        out += h * llm.moe.experts
    return float(out)


def layer_kinds(llm: LLMSpec) -> tuple[int, int]:
    """(dense layers, MoE layers)."""
    n_moe = sum(llm.moe_layer_flags())
    return llm.layers - n_moe, n_moe


def embedding_params(llm: LLMSpec) -> float:
    """Input embedding (+ untied output layer)."""
    return float(llm.vocab_size * llm.hidden_size * (1 if llm.tied_embeddings else 2))


def mtp_params(llm: LLMSpec) -> float:
    """DeepSeek-V3 multi-token prediction modules (§2.2): per module one transformer layer (the
    MoE kind after the dense ones), two norms and a 2h→h projection; embedding and output head are
    shared with the main model."""
    if not llm.mtp_layers:
        return 0.0
    h = llm.hidden_size
    if llm.moe is not None:
        ne, e = moe_layer_params(llm)
        layer = ne + e
    else:
        layer = dense_layer_params(llm)
    return float(llm.mtp_layers * (layer + 2 * _norm_params(llm) + 2 * h * h))


def total_params(llm: LLMSpec) -> float:
    n_dense, n_moe = layer_kinds(llm)
    p = n_dense * dense_layer_params(llm) + embedding_params(llm) + final_norm_params(llm)
    if n_moe:
        ne, e = moe_layer_params(llm)
        p += n_moe * (ne + e)
    return p + mtp_params(llm)


def active_params(llm: LLMSpec) -> float:
    """Parameters touched by one token (MoE: top-k routed + shared experts), MTP excluded."""
    if llm.moe is None:
        return total_params(llm) - mtp_params(llm)
    n_dense, n_moe = layer_kinds(llm)
    ne, e = moe_layer_params(llm)
    return (n_dense * dense_layer_params(llm) + embedding_params(llm) + final_norm_params(llm)
            + n_moe * (ne + e * llm.moe.top_k / llm.moe.experts))
