"""LLM architecture, training run and parallelization strategy records."""

from __future__ import annotations

import math
from enum import Enum
from pathlib import Path
from typing import Literal

import numpy as np

from pydantic import Field, field_validator, model_validator

from designer.spec.base import Record


def _is_int(v: object) -> bool:
    """An integer as a study may write it (512 or 512.0, not true or "512")."""
    return (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, float) and v.is_integer())


# Upper bounds of a model's sizes: far beyond any model trained (the largest published have 126 layers,
# hidden 25,600, vocabularies up to ~1M and 384 routed experts), low enough that the performance
# model's arithmetic stays finite (a size past them is a typo, refused in one line)
MAX_LAYERS = 10_000
MAX_WIDTH = 2**22  # hidden, FFN and head sizes
MAX_HEADS = 65_536
MAX_VOCAB = 2**24
MAX_EXPERTS = 65_536
# Megatron-Core's --moe-expert-capacity-factor: 1.0-2.0 in practice; past 16 no token is ever dropped
MAX_CAPACITY_FACTOR = 16.0


class MoESpec(Record):
    experts: int = Field(ge=2, le=MAX_EXPERTS)
    top_k: int = Field(ge=1)
    expert_ffn_size: int = Field(ge=1, le=MAX_WIDTH)
    shared_experts: int = Field(default=0, ge=0, le=MAX_EXPERTS)
    # Which layers are MoE: every `moe_layer_interval`-th layer after the first `first_dense_layers`.
    moe_layer_interval: int = Field(default=1, ge=1, le=MAX_LAYERS)
    first_dense_layers: int = Field(default=0, ge=0, le=MAX_LAYERS)
    capacity_factor: float = Field(default=1.0, gt=0, le=MAX_CAPACITY_FACTOR)
    shared_expert_ffn_size: int | None = Field(default=None, ge=1, le=MAX_WIDTH, description="None means expert_ffn_size")
    shared_expert_gate: bool = Field(default=False, description=(
        "the shared experts' output scaled by a sigmoid gate of the token, one weight vector of hidden_size "
        "(Qwen2-MoE's shared_expert_gate; Megatron --moe-shared-expert-gate, shared_experts.py: "
        "output * sigmoid(linear(input, gate_weight)))"))
    # Group-limited routing, as the model's router has it (DeepSeek-V2's device-limited routing, §2.1.3:
    # 8 groups, 3 kept; DeepSeek-V3's node-limited routing, §2.1.2: 8 groups, 4 kept; the Hugging Face
    # configurations' n_group / topk_group, Megatron-Core's --moe-router-num-groups /
    # --moe-router-group-topk): the experts split into `router_groups` equal contiguous groups, and each
    # token's top-k experts taken from its `router_group_topk` best groups. None: no groups.
    router_groups: int | None = Field(default=None, ge=1, le=MAX_EXPERTS)
    router_group_topk: int | None = Field(default=None, ge=1, le=MAX_EXPERTS)
    # Node-limited routing stated against the layout instead (Megatron-Core's other use of the groups:
    # "set moe_router_num_groups equal to number of nodes in EP group"; DeepEP's benchmarks route so):
    # each token's experts lie on at most this many nodes (HB domains), whatever the EP group spans.
    # None means unrestricted.
    max_nodes_per_token: int | None = Field(default=None, ge=1)

    @property
    def shared_ffn_size(self) -> int:
        return self.shared_expert_ffn_size or self.expert_ffn_size

    @model_validator(mode="after")
    def _k(self) -> "MoESpec":
        if self.top_k > self.experts:
            raise ValueError(f"top_k {self.top_k} exceeds experts {self.experts}")
        if self.shared_expert_gate and not self.shared_experts:
            raise ValueError("shared_expert_gate true gates the shared experts' output; the model has shared_experts 0: "
                             "allowed without shared experts: shared_expert_gate false")
        groups, kept = self.router_groups, self.router_group_topk
        if (groups is None) != (kept is None):
            raise ValueError(f"router_groups {groups} and router_group_topk {kept}: both are required for group-limited "
                             "routing, or neither")
        if groups is not None:
            if self.max_nodes_per_token is not None:
                raise ValueError(f"max_nodes_per_token {self.max_nodes_per_token} and router_groups {groups}: at most one is "
                                 "allowed (both limit the groups a token reaches)")
            if self.experts % groups:
                raise ValueError(f"router_groups {groups} must divide experts {self.experts} "
                                 "(Megatron-Core splits the experts into equal groups)")
            if kept > groups:
                raise ValueError(f"router_group_topk {kept} must be at most router_groups {groups}")
            if self.top_k < kept:
                # Megatron-Core scores a group by its top (top_k // group_topk) experts (moe_utils.py
                # group_limited_topk): with fewer experts than kept groups every group scores zero
                raise ValueError(f"top_k {self.top_k} must be at least router_group_topk {kept} (a kept group "
                                 "is scored by its top top_k // router_group_topk experts)")
            if self.top_k > kept * (self.experts // groups):
                raise ValueError(f"top_k {self.top_k} must be at most router_group_topk {kept} x "
                                 f"{self.experts // groups} experts per group = {kept * (self.experts // groups)}")
        return self

    @property
    def routing_groups(self) -> tuple[int, int] | None:
        """(groups, groups kept per token) of a group-limited router; None without one, or where every
        group is kept (then the top-k is the ungrouped one)."""
        if self.router_groups is None or self.router_group_topk == self.router_groups:
            return None
        return self.router_groups, self.router_group_topk


class MLASpec(Record):
    """Multi-head latent attention (DeepSeek-V2/V3, arXiv 2405.04434 §2.1): queries and keys/values
    pass through low-rank projections; each head has a no-RoPE part and a shared RoPE part."""

    q_lora_rank: int | None = Field(default=None, ge=1, le=MAX_WIDTH, description="None means an uncompressed query projection")
    kv_lora_rank: int = Field(ge=1, le=MAX_WIDTH)
    qk_nope_head_dim: int = Field(ge=1, le=MAX_WIDTH)
    qk_rope_head_dim: int = Field(ge=0, le=MAX_WIDTH)
    v_head_dim: int = Field(ge=1, le=MAX_WIDTH)


class AttentionWindowSpec(Record):
    """Local attention in some or all layers: each query attends only to nearby keys, so the fused
    kernels skip the key tiles outside the band. `sliding`: the `tokens` keys before the query and
    itself (Mistral 7B; GPT-OSS, 128 tokens in alternate layers: Megatron-Bridge GPTOSSProvider
    window_size (128, 0), window_attn_skip_freq 2); `chunked`: the keys of the query's own block of
    `tokens` (Llama 4's 8192-token chunks in 3 of 4 layers). FLOP conventions that count full
    attention (Megatron's counter ignores windows) are unchanged; the executed work and time shrink."""

    kind: Literal["sliding", "chunked"] = "sliding"
    tokens: int = Field(ge=1, description="window (sliding) or chunk (chunked) length in tokens")
    full_attention_every: int | None = Field(
        default=None, ge=2, description="every n-th layer attends to the whole context (GPT-OSS 2, Llama 4 4); "
                                        "None: every layer is local")

    @property
    def local_layer_share(self) -> float:
        """Share of the layers whose attention is local."""
        return 1.0 if self.full_attention_every is None else 1.0 - 1.0 / self.full_attention_every


class LLMSpec(Record):
    name: str
    layers: int = Field(ge=1, le=MAX_LAYERS)
    hidden_size: int = Field(ge=1, le=MAX_WIDTH)
    ffn_size: int = Field(ge=1, le=MAX_WIDTH, description="dense FFN inner size")
    heads: int = Field(ge=1, le=MAX_HEADS)
    kv_heads: int | None = Field(default=None, ge=1, le=MAX_HEADS, description="GQA key/value heads; None means heads")
    head_dim: int | None = Field(default=None, ge=1, le=MAX_WIDTH, description="None means hidden_size // heads")
    vocab_size: int = Field(ge=1, le=MAX_VOCAB)
    tied_embeddings: bool = False
    gated_mlp: bool = Field(default=False, description="SwiGLU-style MLP with three matrices")
    rotary_embedding: bool = Field(default=False, description="rotary position embedding (RoPE) applied to the queries and keys")
    moe: MoESpec | None = None
    # Dropout in the residual branches and on the attention probabilities (GPT-2/3, Megatron 2021 GPT:
    # 0.1); modern pre-training recipes (Llama, Mixtral, DeepSeek, Qwen) train without it, so no masks
    # are stored or written.
    dropout: bool = False
    norm: Literal["layernorm", "rmsnorm"] = "layernorm"
    linear_bias: bool = Field(default=True, description="biases in the attention and MLP linear layers")
    qkv_bias: bool = Field(default=False, description="a bias on the query, key and value projections alone, as "
                           "Qwen2's (Megatron --add-qkv-bias); linear_bias true has it already")
    qk_norm: Literal[False, True, "l2"] = Field(default=False, description=(
        "each query and key head normalised before the attention: true, by the model's `norm` (Qwen3, OLMo 2; "
        "Megatron --qk-layernorm); l2, by its root mean square alone, with no weights (Llama 4; Megatron "
        "--qk-l2-norm, torch_norm.py L2Norm); false, none. Where nope_layer_interval leaves layers without "
        "RoPE, they have no QK-norm either (Megatron-Bridge llama4_utils.py: q/k_layernorm only where not "
        "is_nope_layer)"))
    nope_layer_interval: int | None = Field(default=None, ge=2, le=MAX_LAYERS, description=(
        "every n-th layer (the n-th, 2n-th, ... counting from 1) applies no rotary embedding and attends "
        "without positions, as Llama 4's NoPE layers (HF no_rope_layers; Megatron --no-rope-freq n, "
        "Megatron-Bridge nope_layer_interval); None: every layer applies RoPE where the model has it"))
    activation_clamp: float | None = Field(default=None, gt=0, description="a clamped gated activation's limit: "
                                           "the gate clamped to at most it and the linear half to within it "
                                           "(GPT-OSS: 7.0, swiglu_limit); None: no clamp")
    mla: MLASpec | None = None
    mtp_layers: int = Field(default=0, ge=0, description="multi-token-prediction modules (DeepSeek-V3: 1)")
    attention_window: AttentionWindowSpec | None = Field(default=None, description="local (sliding or chunked) "
                                                         "attention; None: every layer attends to the whole context")
    source: str = ""

    @property
    def kv_heads_effective(self) -> int:
        return self.kv_heads or self.heads

    def ulysses_fits(self, tp, cp):
        """Whether context parallelism by all-to-all (Ulysses, cp_comm a2a) splits this model's heads:
        cp divides a TP rank's query heads and its key/value heads (Transformer Engine's a2a attention
        asserts `q.shape[-2] % cp_size == 0 and k.shape[-2] % cp_size == 0`, context_parallel.py); a TP
        rank holds max(kv_heads / tp, 1) key/value heads (Megatron replicates them where tp exceeds
        them). Broadcasts over numpy arrays of tp and cp."""
        kv_per_rank = np.maximum(self.kv_heads_effective // tp, 1)
        return (self.heads % (tp * cp) == 0) & (kv_per_rank % cp == 0)

    def moe_layer_flags(self) -> tuple[bool, ...]:
        """Per layer, first to last, whether it is an MoE layer: every `moe_layer_interval`-th layer
        after the first `first_dense_layers` (none in a dense model)."""
        moe = self.moe
        if moe is None:
            return (False,) * self.layers
        return tuple(i >= moe.first_dense_layers and (i - moe.first_dense_layers) % moe.moe_layer_interval == 0
                     for i in range(self.layers))

    def expert_tp_for(self, tp, expert_tp):
        """The expert tensor parallelism a strategy runs (arrays or ints; expert_tp 0 or None: unset):
        its own, else Megatron's default, tp, except for an MoE model with linear biases, which
        Megatron-Core runs only at 1 (transformer_config.py: "Bias in Moe is only supported when
        ETP==1"; Megatron-Bridge's gpt-oss recipes set 1)."""
        default = 1 if (self.moe is not None and self.linear_bias) else tp
        if isinstance(expert_tp, np.ndarray) or isinstance(tp, np.ndarray):
            return np.where(np.asarray(expert_tp) > 0, expert_tp, default)
        return expert_tp or default

    @property
    def rope_layer_fraction(self) -> float:
        """The share of layers that apply the rotary embedding (and, with nope_layer_interval set, the
        QK-norm): all but every nope_layer_interval-th, counted exactly, floor(layers / n) of them
        (AttentionWindowSpec.local_layer_share takes 1/n, the same where n divides the layers)."""
        if self.nope_layer_interval is None:
            return 1.0
        return 1.0 - (self.layers // self.nope_layer_interval) / self.layers

    @property
    def head_dim_effective(self) -> int:
        return self.head_dim or self.hidden_size // self.heads

    @model_validator(mode="after")
    def _heads(self) -> "LLMSpec":
        if self.kv_heads is not None and self.heads % self.kv_heads:
            raise ValueError(f"heads {self.heads} is not a multiple of kv_heads {self.kv_heads}")
        if self.head_dim is None and self.hidden_size % self.heads:
            raise ValueError(f"hidden_size {self.hidden_size} is not a multiple of heads {self.heads}")
        moe = self.moe
        if moe is not None and moe.first_dense_layers >= self.layers:
            # no layer would be MoE: the model is dense, and its expert settings would say otherwise
            raise ValueError(f"moe.first_dense_layers {moe.first_dense_layers} leaves none of the {self.layers} "
                             f"layers MoE; allowed: 0 to {self.layers - 1}")
        if self.qk_norm and self.mla is not None:
            raise ValueError("qk_norm normalises each query and key head; MLA normalises its latents instead "
                             "(the model has mla set): allowed with mla: qk_norm false")
        if self.qkv_bias and self.mla is not None:
            raise ValueError("qkv_bias adds a bias to the query, key and value projections; MLA has none of its own "
                             "(the model has mla set): allowed with mla: qkv_bias false")
        if self.nope_layer_interval is not None and not self.rotary_embedding:
            raise ValueError(f"nope_layer_interval {self.nope_layer_interval} takes the rotary embedding off every "
                             f"{self.nope_layer_interval}-th layer; the model has rotary_embedding false: allowed "
                             "with it: nope_layer_interval null")
        if self.nope_layer_interval is not None and self.nope_layer_interval > self.layers:
            raise ValueError(f"nope_layer_interval {self.nope_layer_interval} leaves none of the {self.layers} layers "
                             f"without RoPE; allowed: 2 to {self.layers}")
        if self.activation_clamp is not None and not self.gated_mlp:
            raise ValueError(f"activation_clamp {self.activation_clamp} clamps a gated activation's two halves; "
                             "the model has gated_mlp false")
        return self


class Precision(str, Enum):
    """Precision of the linear-layer GEMMs. fp8 follows `fp8_recipe`; mxfp8 and nvfp4 are Blackwell's
    block-scaled formats (32-element blocks with E8M0 scales / 16-element blocks with E4M3 scales)."""

    bf16 = "bf16"
    fp16 = "fp16"
    fp8 = "fp8"
    mxfp8 = "mxfp8"
    nvfp4 = "nvfp4"


class Fp8Recipe(str, Enum):
    """How fp8 scaling factors are found (Transformer Engine recipes; torchao float8).

    delayed: per-tensor scale from an amax history (TE DelayedScaling); current: per-tensor scale from
    this step's amax, one extra reduction pass per tensor (TE Float8CurrentScaling, torchao
    tensorwise); blockwise: 1x128 activation / 128x128 weight tiles (DeepSeek-V3 §3.3, TE
    Float8BlockScaling); rowwise: per-row scales (torchao rowwise)."""

    delayed = "delayed"
    current = "current"
    blockwise = "blockwise"
    rowwise = "rowwise"


class TrainingSpec(Record):
    """The training run. `global_batch_sequences` takes three forms: a number (that batch exactly);
    `{target: 2048, tolerance: 0.1}` (any batch within 10 % of 2,048); or a list of the batches allowed,
    the first preferred. With a tolerance or a list, each strategy runs the allowed batch nearest the
    target (the larger one on a tie) that its data-parallel and microbatch split divides, so no GPU
    count is lost to the arithmetic of one batch (Calculon treats the batch as a maximum for the same
    reason); the strategy records the batch it used. The form is kept as `global_batch_sequences`
    (the target), `global_batch_tolerance` and `global_batch_choices`."""

    sequence_length: int = Field(ge=1)
    global_batch_sequences: int = Field(ge=1, description="the target batch, in sequences")
    global_batch_tolerance: float = Field(default=0.0, ge=0, lt=1, description="relative: batches in [target (1 - tol), target (1 + tol)] are allowed")
    global_batch_choices: tuple[int, ...] = Field(default=(), description="the allowed batches (the target is the first); empty: the target and its tolerance")
    precision: Precision = Precision.bf16
    fp8_recipe: Fp8Recipe = Fp8Recipe.delayed
    fp8_param_gather: bool = Field(default=False, description="keep an fp8 weight copy and all-gather it in fp8 (TE fp8 params, torchao fp8 all-gather)")
    # Where the low-precision recipe's quantisation runs: as separate cast / amax / transpose kernels
    # beside each GEMM, whose GEMMs then run at the rate calibrated on Transformer Engine's training
    # runs (compute_efficiency.yaml gemm.max_efficiency), or fused by a compiler into the neighbouring
    # kernels, whose GEMMs run at the low-precision kernel's own rate with no cast traffic (XLA, which
    # rewrites the quantise-dequantise pattern around a dot into one scaled cuBLASLt call: MaxText's
    # quantization=fp8; low_precision.kernel_efficiency_over_bf16)
    low_precision_casts: Literal["kernels", "fused"] = Field(
        default="kernels", description="kernels (Transformer Engine, torchao: separate quantisation kernels, GEMMs at "
        "the calibrated in-training rate) or fused (a compiler such as XLA folds the quantisation into neighbouring "
        "kernels: GEMMs at the low-precision kernel rate, no cast traffic); only read under fp8, mxfp8 or nvfp4")
    fp8_attention: bool = Field(default=False, description="run the fused attention in 8 bits (Transformer Engine's FP8 "
                                "dot-product attention, Megatron-Core's TransformerConfig.fp8_dot_product_attention): MXFP8 under the mxfp8 "
                                "precision, per-tensor FP8 under fp8 and nvfp4")
    # What the attention output projection saves of its input under a low-precision recipe: the
    # original 16-bit attention output, the tensor the fused kernel saves anyway (Megatron-Core from
    # core_v0.15 sets Transformer Engine's save_original_input on linear_proj under every FP8 recipe
    # but delayed scaling and under FP4; torchao's float8 linear saves its high-precision input), or a
    # quantised copy beside it (Transformer Engine's default: delayed scaling, older Megatron-Core).
    # None: by the recipe, as Megatron-Core does today (designer.perf.iteration.attention_output_saved_once).
    attention_output_saved: Literal["original", "quantized"] | None = Field(
        default=None, description="under fp8, mxfp8 or nvfp4: what the attention output projection keeps for its "
        "backward, the 16-bit attention output itself (original) or a quantised copy beside it (quantized); "
        "default: original but under delayed fp8 scaling, as Megatron-Core from v0.15")
    # Megatron forces fp32 main gradients for bf16 (arguments.py: accumulate_allreduce_grads_in_fp32);
    # DeepSpeed keeps 16-bit gradients.
    grad_accumulation_dtype: Literal["fp32", "bf16"] = "fp32"
    # The gradients as the data-parallel reduction sends them. 16 bits is what the performance recipes
    # the model is calibrated on send (Megatron-Bridge / NeMo set grad_reduce_in_fp32 False, DeepSpeed
    # reduces in the model's dtype, Composer's FSDP 'PURE'); Megatron-LM reduces fp32
    # main gradients in fp32 unless --grad-reduce-in-bf16 (arguments.py), and torchtitan's FSDP2
    # reduces in float32 (job_config.py mixed_precision_reduce), as does Composer's FSDP 'DEFAULT'
    # (llm-foundry).
    grad_reduce_dtype: Literal["bf16", "fp32"] = Field(
        default="bf16", description="gradients on the data-parallel wire: bf16 (16-bit, the performance recipes) or fp32 "
                                    "(Megatron-LM's default with fp32 main gradients, torchtitan): twice the bytes")
    # Adam moments: fp32 by default; DeepSeek-V3 keeps them in bf16 (§3.3.3)
    optimizer_state_dtype: Literal["fp32", "bf16"] = "fp32"
    # The optimizer of the hidden weight matrices. Muon (Jordan et al. 2024, "Muon: an optimizer for
    # hidden layers"; Megatron-Core's TensorParallelMuon, megatron/core/optimizer/muon.py at core_v0.17.0)
    # runs on every 2-D weight but the embedding and the output layer, which stay on AdamW
    # (layer_wise_optimizer.py is_managed_by_layer_wise_optimizer): one momentum per parameter instead of
    # Adam's two, and each step orthogonalises every matrix's update with Newton-Schulz iterations
    # (muon_ns_steps, Megatron's --muon-num-ns-steps, default 5) on its tensor-parallel block (Megatron-Bridge's muon_tp_mode
    # "blockwise", recipes/utils/optimizer_utils.py distributed_muon_with_cosine_annealing). Under
    # ZeRO-1 it is Megatron's layer-wise distributed optimizer (--optimizer muon
    # --use-distributed-optimizer, formerly dist_muon): whole parameters are dealt out over the
    # data-parallel ranks, the gradients are all-reduced and the updated weights all-gathered after
    # the step.
    optimizer: Literal["adam", "muon"] = Field(
        default="adam", description="adam (AdamW on every parameter) or muon (Muon on the hidden weight matrices, "
        "AdamW on the embedding and output layer; fp32 state, bf16 or low-precision training; ZeRO stage 0 or 1 over "
        "the whole data-parallel group, no offload)")
    # Megatron-Core's default coefficient type, "quintic", is a cycle of five coefficient sets
    # (emerging_optimizers muon_utils._COEFFICIENT_SETS), so the iterations come in fives
    muon_ns_steps: int = Field(default=5, ge=5, le=20, multiple_of=5, description="with optimizer muon: "
                               "Newton-Schulz iterations per matrix per step, a multiple of 5 (Megatron-Core "
                               "--muon-num-ns-steps, default 5)")
    # 1e18 tokens: four orders of magnitude past the largest published runs (~1e13-1e14); beyond it
    # the time to train overflows the outputs (launch iteration counts, infinite times)
    total_tokens: float = Field(gt=0, le=1e18, description="tokens to train on; gives time-to-train")
    # PyTorch FSDP (FULL_SHARD) and FSDP2 with mixed precision keep each sharded parameter in its fp32
    # dtype and cast the gathered copy to 16 bits for compute (torch.distributed.fsdp
    # MixedPrecisionPolicy docstring: "The optimizer step uses the sharded parameter in the original
    # dtype"; FSDP "does not require any extra memory to keep a high-precision copy of the parameters
    # for the optimizer step"): the fp32 shard is the optimizer's master, so the state at rest is
    # 4 + 4 (fp32 gradient) + 8 (Adam moments) = 16 B per parameter, against 18 with a separate
    # 16-bit weight (Megatron's distributed optimizer).
    fp32_sharded_params: bool = Field(
        default=False, description="ZeRO-3: the sharded fp32 parameters are the master weights, no 16-bit copy at "
        "rest (PyTorch FSDP/FSDP2 mixed precision)")
    # Whether an fp32 copy of the weights is the optimizer's master. NeMo AutoModel builds its models
    # in bfloat16 (NeMoAutoModelForCausalLM.from_config: torch_dtype "auto" selects torch.bfloat16;
    # its MoE models' parameters and experts default to bfloat16, components/moe/layers.py), FSDP2
    # shards those bf16 parameters, and torch.optim.Adam keeps its moments as zeros_like them: no fp32
    # copy anywhere, 2 + 2 + 2 x 2 = 8 B per parameter with bf16 gradients.
    fp32_master_weights: bool = Field(
        default=True, description="false: the 16-bit weights are the only copy and the optimizer updates them in "
        "place (pure bf16 training, NeMo AutoModel's models built in bfloat16): no fp32 master at rest")
    # How the router spreads tokens over the experts, for the deduplicating dispatchers' traffic:
    # uniform (a learned router; Megatron's --moe-router-force-load-balancing draws random logits,
    # router.py apply_random_logits) or round_robin (a synthetic balanced gate that gives token t the
    # k consecutive experts from t*k mod E: NeMo AutoModel's FakeBalancedGate, used by its benchmarks)
    moe_routing: Literal["uniform", "round_robin"] = Field(
        default="uniform", description="uniform (learned or random-balanced router) or round_robin (k consecutive "
        "experts per token, a synthetic benchmark gate): how many ranks and nodes a token's experts reach")
    # How evenly the router loads the EP ranks. Dropless MoE runs at the pace of its busiest rank: its
    # expert GEMMs, permutes and activations, and the tokens it receives, set every rank's time at the
    # combine. A training run's router is learned, and its busiest rank carries more than the mean
    # (compute_efficiency.yaml moe.learned_busiest_rank_load); benchmarks force the balance (Megatron's
    # --moe-router-force-load-balancing, Megatron-Bridge's performance tables, AutoModel's balanced
    # gate), which a model that must learn cannot.
    moe_load_balance: Literal["forced", "learned"] = Field(
        default="learned", description="forced (every EP rank gets the mean load: benchmarks, synthetic gates) or learned "
        "(a trained router's uneven load: the busiest rank carries moe.learned_busiest_rank_load x the mean and sets the pace)")
    moe_busiest_rank_load: float | None = Field(
        default=None, ge=1.0, le=8.0, description="with moe_load_balance learned: the busiest EP rank's routed tokens over "
        "the mean, as a run's router statistics give it (Megatron logs the tokens per expert); None: the calibrated value")

    @model_validator(mode="after")
    def _precisions(self):
        # Megatron-Core keeps Muon's momentum as zeros_like the fp32 master weights and refuses the
        # precision-aware optimizer with it ("--use-precision-aware-optimizer only supported with
        # adam", megatron/core/optimizer/optimizer_config.py) and an emerging optimizer under fp16
        if not self.fp32_master_weights and self.fp32_sharded_params:
            raise ValueError("fp32_sharded_params = True with fp32_master_weights = False: fp32 shards are the fp32 "
                             "master; allowed: one of them")
        if self.optimizer == "muon":
            for field, value, allowed in (("optimizer_state_dtype", self.optimizer_state_dtype, "fp32"),
                                          ("grad_accumulation_dtype", self.grad_accumulation_dtype, "fp32"),
                                          ("fp32_master_weights", self.fp32_master_weights, True)):
                if value != allowed:
                    raise ValueError(f"{field} = {value!r} with optimizer = 'muon': Megatron-Core keeps Muon's "
                                     f"state in fp32; allowed: {allowed!r}")
            if self.precision == Precision.fp16:
                raise ValueError("precision = 'fp16' with optimizer = 'muon': Megatron-Core runs Muon under bf16 "
                                 "or a low-precision recipe on bf16; allowed: bf16, fp8, mxfp8, nvfp4")
        return self

    @model_validator(mode="before")
    @classmethod
    def _routing_balance(cls, data):  # noqa: ANN001 - pydantic signature
        if not isinstance(data, dict):
            return data
        if data.get("moe_routing") == "round_robin":
            # a round-robin gate gives every expert the same tokens by construction: balanced
            if data.get("moe_load_balance", "forced") != "forced":
                raise ValueError(f"moe_load_balance = {data['moe_load_balance']!r} with moe_routing = 'round_robin': "
                                 "a round-robin gate loads every expert equally; allowed: forced")
            data = {**data, "moe_load_balance": "forced"}
        if data.get("moe_busiest_rank_load") is not None and data.get("moe_load_balance", "learned") == "forced":
            raise ValueError(f"moe_busiest_rank_load = {data['moe_busiest_rank_load']!r} with moe_load_balance = 'forced': "
                             "a forced balance loads every rank at the mean; give it with moe_load_balance: learned")
        return data

    @model_validator(mode="before")
    @classmethod
    def _batch_forms(cls, data):  # noqa: ANN001 - pydantic signature
        if not isinstance(data, dict):
            return data
        gb = data.get("global_batch_sequences")
        if isinstance(gb, dict):
            unknown = set(gb) - {"target", "tolerance"}
            if unknown or "target" not in gb:
                raise ValueError(f"global_batch_sequences = {gb}: give {{target: N, tolerance: r}} (keys target, tolerance)")
            # checked here, in the form the study wrote, not as the fields it becomes
            target, tol = gb["target"], gb.get("tolerance", 0.0)
            if not _is_int(target) or target < 1:
                raise ValueError(f"global_batch_sequences.target = {target!r}: must be an integer >= 1")
            if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not 0 <= tol < 1:
                raise ValueError(f"global_batch_sequences.tolerance = {tol!r}: must be a fraction >= 0 and < 1")
            data = {**data, "global_batch_sequences": target, "global_batch_tolerance": tol}
        elif isinstance(gb, (list, tuple)):
            if not gb:
                raise ValueError("global_batch_sequences = []: give at least one batch")
            if not all(_is_int(b) and b >= 1 for b in gb):
                raise ValueError(f"global_batch_sequences = {list(gb)}: every batch must be an integer >= 1")
            data = {**data, "global_batch_sequences": gb[0], "global_batch_choices": tuple(gb)}
        return data

    @field_validator("global_batch_choices")
    @classmethod
    def _choices(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        bad = [b for b in v if not isinstance(b, int) or b < 1]
        if bad:
            raise ValueError(f"global_batch_sequences list {list(v)}: every batch must be an integer >= 1")
        if len(set(v)) != len(v):
            raise ValueError(f"global_batch_sequences list {list(v)}: a batch is listed twice")
        return v

    @model_validator(mode="after")
    def _one_batch_form(self) -> "TrainingSpec":
        if self.global_batch_choices and self.global_batch_tolerance:
            raise ValueError("global_batch_sequences: give a tolerance or a list of batches, not both")
        if self.global_batch_choices and self.global_batch_choices[0] != self.global_batch_sequences:
            raise ValueError(f"global_batch_sequences {self.global_batch_sequences}: must be the first of the listed "
                             f"batches {list(self.global_batch_choices)}")
        if self.global_batch_tolerance and self.batch_range[1] < self.batch_range[0]:
            raise ValueError(f"global_batch_sequences: tolerance {self.global_batch_tolerance} leaves no batch")
        if self.fp8_attention and self.precision.value not in ("fp8", "mxfp8", "nvfp4"):
            raise ValueError(f"fp8_attention = true with precision {self.precision.value}: 8-bit attention needs "
                             "precision fp8, mxfp8 or nvfp4")
        if self.attention_output_saved is not None and self.precision.value not in ("fp8", "mxfp8", "nvfp4"):
            raise ValueError(f"attention_output_saved = {self.attention_output_saved!r} with precision "
                             f"{self.precision.value}: it must be left out, a 16-bit run keeps one 16-bit attention "
                             "output; allowed with precision fp8, mxfp8 or nvfp4")
        return self

    @property
    def batch_range(self) -> tuple[int, int]:
        """The smallest and largest batch allowed (the target twice without a tolerance or list)."""
        if self.global_batch_choices:
            return min(self.global_batch_choices), max(self.global_batch_choices)
        t, r = self.global_batch_sequences, self.global_batch_tolerance
        return max(1, math.ceil(t * (1 - r) - 1e-9)), math.floor(t * (1 + r) + 1e-9)

    @property
    def batch_is_flexible(self) -> bool:
        return bool(self.global_batch_choices) or self.batch_range != (self.global_batch_sequences,) * 2

    def batch_allowed(self, batch: int) -> bool:
        if self.global_batch_choices:
            return batch in self.global_batch_choices
        lo, hi = self.batch_range
        return lo <= batch <= hi

    def with_batch(self, batch: int) -> "TrainingSpec":
        """The same run at exactly `batch` (what the performance model prices for one strategy)."""
        if batch == self.global_batch_sequences:
            return self
        return self.model_copy(update={"global_batch_sequences": int(batch), "global_batch_tolerance": 0.0,
                                       "global_batch_choices": ()})

    def low_precision_param_gather(self, zero_stage, offloaded):
        """Whether the weights are kept and gathered in low precision (fp8_param_gather under a
        low-precision recipe), per strategy (ints and bools, or numpy arrays of them): FP8 and MXFP8
        only with sharded optimizer states or weights (Megatron-LM arguments.py: "--fp8-param-gather
        only supported with distributed optimizer, torch fsdp2, megatron fsdp"), and beside an offloaded
        optimizer only under delayed scaling ("the optimizer cpu offload must be used in conjunction
        with --fp8-recipe delayed"); NVFP4's --fp4-param-gather with no such condition. Elsewhere the
        weights stay 16-bit."""
        zero_stage, offloaded = np.asarray(zero_stage), np.asarray(offloaded, bool)
        # Muon's layer-wise distributed optimizer gathers the 16-bit weights: Megatron-Bridge turns the
        # low-precision gather off under it (scripts/performance/configs/kimi/kimi_llm_pretrain.py,
        # set_kimi_k2_common_configs: "incompatible with Muon's LayerWiseDistributedOptimizer")
        if not self.fp8_param_gather or self.optimizer == "muon" or self.precision not in (
                Precision.fp8, Precision.mxfp8, Precision.nvfp4):
            return np.zeros(zero_stage.shape, bool)
        if self.precision == Precision.nvfp4:
            return np.ones(zero_stage.shape, bool)
        delayed = self.precision == Precision.fp8 and self.fp8_recipe == Fp8Recipe.delayed
        return (zero_stage >= 1) & ~(offloaded & (not delayed))

    @property
    def tokens_per_iteration(self) -> int:
        return self.sequence_length * self.global_batch_sequences


class Schedule(str, Enum):
    """Pipeline schedules. zero_bubble is ZB-H1 (Qi et al. 2023, arXiv 2401.10241 §3): 1F1B with the
    weight-gradient GEMMs deferred into the bubble, same activation memory as 1F1B. dualpipe is
    DeepSeek-V3's bidirectional schedule (arXiv 2412.19437 §3.2.1, Table 2): two copies of the
    parameters, pp + 1 microbatches of activations in flight."""

    gpipe = "gpipe"
    one_f_one_b = "1f1b"
    interleaved = "interleaved"
    zero_bubble = "zero_bubble"
    dualpipe = "dualpipe"


class Recompute(str, Enum):
    none = "none"
    selective = "selective"
    full = "full"


class RecomputeModule(str, Enum):
    """Megatron-LM's --recompute-modules (selective granularity): the parts of a layer whose
    activations are dropped and recomputed in the backward pass."""

    core_attn = "core_attn"  # QKᵀ, softmax, dropout, AV (Korthikanti et al. 2022 §5)
    layernorm = "layernorm"  # the input/pre-MLP norms
    mlp = "mlp"  # the dense MLP
    moe = "moe"  # the whole MoE block (router, dispatch, experts, combine)
    moe_act = "moe_act"  # the activation function inside the experts
    mla_up_proj = "mla_up_proj"  # MLA's up projections of the compressed Q and KV
    # the attention output projection and the residual add after it (with core_attn: neither the
    # attention output nor the second norm's input is kept). Not a Megatron-LM module: MaxText's
    # remat policies name the projections they save (save_qkv_proj keeps only the QKV outputs, i.e.
    # core_attn + layernorm + mlp + attn_out_proj here; MaxText src/maxtext/layers/decoders.py:
    # save_only_these_names("query_proj", "value_proj", "key_proj", "kv_proj", "qkv_proj"))
    attn_out_proj = "attn_out_proj"
    # torchtitan's per-op selective activation checkpointing (selective_ac_option 'op'; the policy
    # in torchtitan/parallelisms/parallelize_llama.py at 9dec370, 2024-12, and in
    # torchtitan/distributed/activation_checkpoint.py SelectiveAC since): a whole-layer policy, taken
    # alone. The layer keeps the outputs of its attention kernel, of its reduce-scatters and of every
    # odd-numbered matmul in forward order, and recomputes every other op that the backward pass
    # needs: the even-numbered matmuls (wk, wo and w3 of Llama's wq, wk, wv, wo, w1, w3, w2; the last
    # matmul's output feeds only a residual add, so it is not recomputed), the norms, RoPE, the
    # activation and the first residual add, and under tensor parallelism the collectives that are
    # not reduce-scatters (the sequence-parallel all-gathers of the column-parallel inputs, or the
    # all-reduce after the attention output). Expert grouped GEMMs are saved (torchtitan's save list
    # holds the compute-intensive ops) and do not count.
    alternate_matmuls = "alternate_matmuls"


class AttentionKernel(str, Enum):
    """The attention implementation. flash: the generation's standard fused kernel (FlashAttention-2
    on Ampere, cuDNN/FlashAttention-3 on Hopper, cuDNN on Blackwell); flash2 / flash3 / cudnn name a
    kernel; triton is llm-foundry's Triton FlashAttention (attn_impl: triton, a port of the 2022
    HazyResearch Triton kernel that takes ALiBi as a bias: what MPT ran before FlashAttention-2 had
    ALiBi); unfused materialises the scores in HBM (Megatron 2021)."""

    flash = "flash"
    flash2 = "flash2"
    flash3 = "flash3"
    cudnn = "cudnn"
    unfused = "unfused"
    triton = "triton"


class RankOrder(str, Enum):
    """How ranks are laid out, innermost first (Megatron-Core --rank-order / order strings)."""

    tp_cp_dp_pp = "tp-cp-dp-pp"  # Megatron default; EP is folded inside DP x CP
    tp_cp_pp_dp = "tp-cp-pp-dp"  # pipeline stages inside, data parallel outermost


UnfusedOp = Literal["activation_clamp", "expert_bias", "rope"]
UNFUSED_OP_ORDER: tuple[str, ...] = ("activation_clamp", "expert_bias", "rope")


class Strategy(Record):
    """One parallelization of a training run. GPUs used = tp * pp * dp * cp; EP folds inside dp * cp
    (Megatron-Core expert groups)."""

    tp: int = Field(default=1, ge=1)
    pp: int = Field(default=1, ge=1)
    dp: int = Field(default=1, ge=1)
    ep: int = Field(default=1, ge=1)
    cp: int = Field(default=1, ge=1)
    expert_tp: int | None = Field(default=None, ge=1, description="expert tensor parallelism (Megatron --expert-tensor-parallel-size); None means tp, Megatron's default; the expert group strides over it")
    sequence_parallel: bool = False
    microbatch_size: int = Field(default=1, ge=1)
    schedule: Schedule = Schedule.one_f_one_b
    virtual_stages: int = Field(default=1, ge=1, description="model chunks per GPU for the interleaved schedule")
    pipeline_flushes: int = Field(default=1, ge=1, description="pipeline schedules run per iteration, each filling and draining the pipeline over its share of the microbatches: 1 runs them all in one (Megatron-Core); PyTorch pipelining (torchtitan, NeMo AutoModel) runs one per gradient-accumulation step")
    global_batch_sequences: int | None = Field(default=None, ge=1, description="the batch this strategy runs, within the training's tolerance; None: the training's target")
    pp_first_stage_layers: int | None = Field(default=None, ge=0, description="layers on the first stage (Megatron --decoder-first-pipeline-num-layers); None: even split")
    pp_last_stage_layers: int | None = Field(default=None, ge=0, description="layers on the last stage (--decoder-last-pipeline-num-layers); None: even split")
    zero_stage: int = Field(default=1, ge=0, le=3)
    fsdp_reshard_after_forward: bool = Field(default=True, description="ZeRO-3/FSDP: free gathered weights after forward and gather again for backward")
    shard_group_size: int | None = Field(default=None, ge=1, description="HSDP: ZeRO/FSDP shards over groups of this many DP x CP ranks and replicates across them; None: the whole group")
    dp_bucket_bytes: float | None = Field(default=None, gt=0, description="gradient / parameter bucket of the DP collectives, one call each; None: Megatron-Core's, max(40M, 1M x dp) elements")
    prefetch_layers: int = Field(default=1, ge=0, description="ZeRO-3/FSDP: layers whose weights are gathered ahead of use")
    zeropp_quantized_weights: bool = False  # qwZ
    zeropp_quantized_gradients: bool = False  # qgZ
    zeropp_hierarchical_partition: bool = False  # hpZ
    recompute: Recompute = Recompute.none
    recompute_modules: tuple[RecomputeModule, ...] = Field(default=(), description="selective recompute: the modules; empty means core_attn")
    recompute_num_layers: int = Field(default=0, ge=0, description="full recompute of only the first N layers of each pipeline stage's model chunk, the rest keeping their activations (Megatron --recompute-method block --recompute-num-layers N); 0: every layer")
    attention_kernel: AttentionKernel = AttentionKernel.flash
    rank_order: RankOrder = RankOrder.tp_cp_dp_pp
    overlap_dp_comm: bool = True
    overlap_tp_comm: bool = False
    overlap_pp_comm: bool = Field(default=True, description="interleaved schedule: each chunk's pipeline sends and receives are posted ahead and waited when the next chunk needs them, hiding behind the stage's other chunks in the steady state (Megatron-Core's default; --no-overlap-p2p-communication turns it off); 1F1B always blocks")
    pipeline_scatter_gather: bool = Field(default=False, description="without sequence parallelism, each TP rank sends its 1/tp slice of the activation to the next stage, which all-gathers it over NVLink (Megatron-LM's scatter/gather optimisation, SC'21 §4.1); Megatron-Core (since 2023) sends the whole activation from every TP rank. Under sequence parallelism the activation is already split, so either sends 1/tp")
    overlap_ep_comm: bool = Field(default=False, description="hide the MoE all-to-alls behind another microbatch's compute (Megatron 1F1B A2A overlap, DualPipe); Megatron's overlap synchronises between each layer's sub-stages, so without CUDA graphs its per-layer host launches add to the GPU time")
    moe_dispatcher: Literal["alltoall", "allgather", "deepep"] = Field(default="alltoall", description="alltoall: every (token, expert) pair crosses the network (Megatron's alltoall dispatcher); allgather: every rank gathers the EP group's tokens and keeps those of its experts, the combine reduce-scatters (Megatron's allgather dispatcher); deepep: one copy per destination node, forwarded over NVLink there (DeepEP, HybridEP, Megatron's flex dispatcher)")
    expert_gemm: Literal["per_expert", "grouped"] = Field(default="per_expert", description="how a rank's local experts run their GEMMs: per_expert, launched expert by expert from host-side token counts (Transformer Engine's GroupedLinear in Megatron-Core's TEGroupedMLP, its default), so the layer waits out a host time per local expert; grouped, with the split sizes kept on the device (Megatron --moe-use-grouped-tensor, torch._grouped_mm in torchtitan, grouped_gemm's gmm in NeMo AutoModel), nothing launched per expert (an implementation that adds expert biases expert by expert from host-side splits, as AutoModel's does, is per_expert)")
    offload_optimizer: bool = Field(default=False, description="fp32 master weights and Adam states in host memory, the step on the CPU (ZeRO-Offload, Megatron --optimizer-cpu-offload)")
    unfused_ops: tuple[UnfusedOp, ...] = Field(default=(), description="element-wise steps the framework runs op by op as PyTorch eager kernels, each through HBM, where the model has them (the rest stay fused): activation_clamp, a clamped gated activation's clamp (Megatron-Core clamps the two halves in two kernels and concatenates them before its fused activation: fused_bias_geglu.py weighted_bias_quick_geglu_impl); expert_bias, the routed experts' output bias (Megatron-Core's TEGroupedMLP adds it expert by expert from host-side splits and concatenates, experts.py _apply_bias; NeMo AutoModel's experts alike); rope, the rotary embedding (Megatron-Core's unfused apply_rotary_pos_emb, which Megatron-Bridge runs for YaRN-scaled RoPE, GPT-OSS's). elementwise_kernels eager already runs every one of them op by op")
    elementwise_kernels: Literal["fused", "eager"] = Field(default="fused", description="fused: norms, the MLP activation and the rotary embedding each run as one kernel (Transformer Engine / Megatron-Core fusions, torch.compile); eager: PyTorch eager mode runs every op of them as its own kernel through HBM (torchtitan without torch.compile: RMSNorm in fp32, RoPE through complex fp32, silu then multiply)")
    recompute_replay: Literal["module", "needed"] = Field(default="module", description="what recomputation reruns in the backward: module, the checkpointed module's whole forward (Megatron-Core's and Transformer Engine's reentrant checkpoint), its last GEMM included; needed, only what the backward reads (PyTorch's non-reentrant checkpoint, which stops once every saved tensor is back, as torchtitan's and fms-fsdp's wrappers; a compiled graph; JAX's remat under XLA, as MaxText's), so a dense MLP's down projection, whose output feeds only the residual stream, does not run again (an MoE block's expert outputs are read by the combine, dropout after the MLP draws its mask from the GEMM's output, and an eager custom-autograd linear, such as torchao's Float8Linear, saves its tensors after it runs: those rerun)")
    cross_entropy: Literal["fused", "eager"] = Field(default="fused", description="the loss over the logits: fused, the softmax and its gradient computed in place in fp32 (Megatron-Core's vocab-parallel cross entropy; a torch.compile'd loss), 4 bytes per logit at its peak and 30 moved over both passes; eager, PyTorch's cross_entropy on the upcast logits op by op (torchtitan before it compiled its loss), whose backward holds the fp32 log-softmax, its gradient and the input gradient at once: 12 bytes per logit, and 48 moved")
    qkv_projection: Literal["fused", "separate"] = Field(default="fused", description="fused: one GEMM computes Q, K and V (Megatron-Core's linear_qkv, llm-foundry's Wqkv, fms-fsdp's fused attention); separate: three GEMMs, the K and V ones only as wide as the KV heads (torchtitan's wq, wk, wv; Hugging Face's q_proj, k_proj, v_proj), which under grouped-query attention and tensor parallelism are narrow and run below the fused GEMM's efficiency")
    activation_layout: Literal["sequence_first", "batch_first"] = Field(default="sequence_first", description="how the activations lie in memory, which under sequence parallelism decides what the TP collectives cost besides their traffic: sequence_first ([s, b, h], Megatron-Core) gathers and reduce-scatters along dim 0, in place; batch_first ([b, s, h], PyTorch DTensor plans sharding the sequence as Shard(1), as torchtitan's) copies the whole tensor between the collective's rank-major layout and its own for every reduce-scatter, and for every all-gather of a microbatch of more than one sequence (torch.distributed._functional_collectives: chunk + cat)")
    activation_input_fp8: bool = Field(default=False, description="the gated MLP activation's input (gate and up outputs), saved for the backward pass, kept as an fp8 copy and cast back there (Megatron --activation-func-fp8-input-store; DeepSeek-V3 §3.3.3 caches the SwiGLU inputs in FP8): half its bytes, one quantising copy forward and one dequantising copy backward; needs a gated MLP")
    cuda_graphs: bool = Field(default=False, description="the iteration is captured in CUDA graphs (Megatron --enable-cuda-graph / cuda_graph_impl full_iteration): each collective keeps the graph fraction of the host floor of a call, and the per-layer launch floor and the MoE layers' per-expert host wait go")
    offload_weights: bool = Field(default=False, description="16-bit weights and gradients in host memory too, streamed over the host link layer by layer (FSDP2 CPUOffloadPolicy, ZeRO-Infinity offload_param); implies the optimizer offload")
    offload_activation_layers: int = Field(default=0, ge=0, description="layers per stage whose saved activations go to host memory in the forward pass and come back for the backward (Megatron --cpu-offloading-num-layers)")
    cp_comm: Literal["p2p", "all_gather", "a2a"] = Field(default="p2p", description="context-parallel attention (Megatron --cp-comm-type): p2p passes K,V blocks round a ring behind the block attention; all_gather gathers the whole K,V first (Llama 3); a2a re-shards Q,K,V and the output by heads (DeepSpeed-Ulysses)")
    cp_load_balance: bool = Field(default=True, description="causal load balancing of context parallelism: each rank holds chunks i and 2cp-1-i (Megatron, torchtitan); off, the last rank does most of the causal attention")

    @field_validator("unfused_ops")
    @classmethod
    def _one_spelling(cls, ops: tuple[str, ...]) -> tuple[str, ...]:
        """One spelling per set of steps: each once, in UNFUSED_OP_ORDER."""
        return tuple(op for op in UNFUSED_OP_ORDER if op in ops)

    @property
    def n_gpus(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    @property
    def recomputes_whole_mlp(self) -> bool:
        """A whole MLP is recomputed (full recompute, or the selective mlp / moe modules): the only
        place where recompute_replay prices anything."""
        return self.recompute == Recompute.full or (self.recompute == Recompute.selective and bool(
            {RecomputeModule.mlp, RecomputeModule.moe} & set(self.recompute_modules)))

    @model_validator(mode="after")
    def _schedule(self) -> "Strategy":
        if self.virtual_stages > 1 and self.schedule != Schedule.interleaved:
            raise ValueError(f"virtual_stages {self.virtual_stages} needs schedule 'interleaved'")
        if self.recompute_modules and self.recompute != Recompute.selective:
            raise ValueError("recompute_modules needs recompute 'selective'")
        if RecomputeModule.alternate_matmuls in self.recompute_modules and len(set(self.recompute_modules)) > 1:
            raise ValueError("recompute_modules: alternate_matmuls is a whole-layer policy (torchtitan's per-op "
                             "selective checkpointing) and takes no other module")
        if self.recompute_num_layers and self.recompute != Recompute.full:
            raise ValueError(f"recompute_num_layers {self.recompute_num_layers} needs recompute 'full' (Megatron's block method)")
        if self.pp == 1 and (self.pp_first_stage_layers is not None or self.pp_last_stage_layers is not None):
            raise ValueError("pp_first_stage_layers / pp_last_stage_layers need pp > 1 (one stage holds every layer)")
        return self


def pipeline_stage_layers(n_layers: int, pp: int, first: int | None = None, last: int | None = None) -> tuple[int, ...]:
    """Layers of each pipeline stage, first to last: the scalar statement of the vectorized split in
    designer.perf.iteration.stage_layout (tests check the two agree).

    Given end stages keep their counts. Otherwise, when pp does not divide the layers, Megatron's
    uneven form: each middle stage takes ceil(L / pp) layers and the end stages share the rest, the
    last the smaller half (126 on pp 16: 7, 8 x 14, 7). The stages left over split as evenly as
    possible, the remainder on the earlier ones. An empty tuple: the given end stages leave no split."""
    if pp == 1:
        return (n_layers,)
    if first is None and last is None and n_layers % pp:
        m = -(-n_layers // pp)
        rest = n_layers - (pp - 2) * m
        if rest // 2 >= 1:
            first, last = rest - rest // 2, rest // 2
    free = pp - (first is not None) - (last is not None)
    rest = n_layers - (first or 0) - (last or 0)
    if rest < 0 or (free == 0 and rest):
        return ()
    base, rem = divmod(rest, free) if free else (0, 0)
    middle = [base + (i < rem) for i in range(free)]
    return tuple(([first] if first is not None else []) + middle + ([last] if last is not None else []))


MODELS_DIR = Path(__file__).resolve().parents[2] / "models"
