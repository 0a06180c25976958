"""Oracle: a pure-Python port of Megatron-LM's theoretical memory report (``--report-theoretical-memory``).

Ported from NVIDIA/Megatron-LM ``megatron/training/theoretical_memory_usage.py`` at commit
``d98e8a64ddf34856e74b24714e3bedb2f5a39553`` (repository HEAD, 2026-08-22; the file was last changed by
``1bcb3b9e0b029c6109d8d32872645bd540052963``, "Fix LatentMoE theoretical memory estimate (#5145)";
file blob ``ee398d3bf66907fef73f154334a4b49f5ac3661e``). This version handles MoE (``moe_layer_freq``
patterns, shared experts, latent MoE, expert/expert-tensor parallelism with the expert data-parallel size
for the distributed optimizer), multi-latent attention (MLA) and multi-token prediction (MTP).

The arithmetic of ``compute_weight_and_optimizer_memory``, ``compute_activation_memory`` and
``compute_activation_memory_without_sp`` is kept exactly, in Megatron's order of operations (so the floats
agree to the last bit), including its approximations. Upstream's own comments are quoted with ``# [MLM]``.
The defaults of :class:`MegatronArgs` are Megatron's (``megatron/training/arguments.py`` argparse defaults
and, for fields generated from ``TransformerConfig``/``ModelParallelConfig``, their ``argparse_meta``
defaults), and :func:`validate_args` ports the parts of Megatron's ``validate_args`` that change a field the
report reads (ffn / kv-channel / moe-ffn defaults, ``expert_tensor_parallel_size := tensor_model_parallel_size``,
SP switched off at TP = 1, ``data_parallel_size = world_size // (TP * PP * CP)``).

What the report assumes (upstream's comments and code, summarised):

* Weights and optimizer: bf16 training -- "bf16 model params, fp32 main gradients, fp32 main params, and fp32
  Adam states" -- i.e. 18 bytes/parameter without the distributed optimizer and ``6 + 12 / d`` with it,
  ``d`` = ``data_parallel_size`` for dense/TP-sharded parameters and the expert data-parallel size
  ``world_size // (ETP * EP * PP)`` for routed-expert parameters. Linear-layer biases (except the router
  bias), learned position embeddings, qk-layernorm (non-MLA), the MTP ``eh_proj``/``enorm``/``hnorm`` and
  the MTP copy of the word embedding are not counted. The "most loaded shard" is the first pipeline stage:
  ``1/PP`` of the transformer block plus one embedding table, plus the whole MTP block (upstream: "Most
  loaded model shard has 1/pp_size transformer layers, 1 mtp block, and 1 embedding layer").
* Activations (``compute_activation_memory``): Korthikanti et al. 2022 (arXiv 2205.05198) Table 2 with
  **selective recomputation and sequence parallelism** -- ``s*b*h*(18 + 4*ffn/h)`` bytes per layer, all
  divided by TP -- for the first pipeline stage, which holds ``L/PP`` layers for ``PP`` in-flight
  microbatches (hence ``* num_layers``), times ``1 + (PP-1)/(PP*VP)`` under the interleaved schedule or
  ``min(1, num_microbatches/PP)`` without it. It is used only when ``sequence_parallel`` and
  ``recompute_granularity == 'selective'``; every other configuration (no recompute, full recompute, or SP
  off -- which includes every TP = 1 run, since Megatron switches SP off there) goes to
  ``compute_activation_memory_without_sp``: ``s*b*h*(10 + 24/TP)`` per layer (Table 2's "TP + selective
  recompute" row, with a fixed 4h MLP) plus a 5 % overhead. Neither reads the MoE, GQA, MLA, SwiGLU or CP
  fields (upstream TODO: "This function needs to take into account query_projection_size potentially being
  different from hidden_size.").

Run ``python -m tests.perf.megatron_memory_oracle`` from the repository root to print the report for the
cases in ``tests/perf/data/megatron_memory_cases.yaml``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Literal, Optional, Sequence, Union

MEGATRON_REPO = "NVIDIA/Megatron-LM"
MEGATRON_PATH = "megatron/training/theoretical_memory_usage.py"
MEGATRON_COMMIT = "d98e8a64ddf34856e74b24714e3bedb2f5a39553"
MEGATRON_FILE_LAST_CHANGED = "1bcb3b9e0b029c6109d8d32872645bd540052963"

NUM_BYTES_IN_MEGABYTE = 1024 * 1024  # [MLM] the report's "MB" is a MiB


@dataclass(frozen=True)
class MegatronArgs:
    """The Megatron arguments the theoretical-memory report reads, named and defaulted as Megatron does.

    Defaults are Megatron's CLI defaults (``megatron/training/arguments.py`` at :data:`MEGATRON_COMMIT`;
    ``TransformerConfig`` / ``ModelParallelConfig`` fields use their ``argparse_meta`` default, e.g.
    ``num_query_groups`` = 1, ``add_bias_linear`` = True, ``normalization`` = "LayerNorm").
    ``None`` fields that Megatron derives in ``validate_args`` are filled by :func:`validate_args`.
    """

    # --- network size -------------------------------------------------------------------------------
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    padded_vocab_size: int  # tokenizer vocab padded by pad_vocab_size() (Megatron computes it at startup)
    seq_length: int
    micro_batch_size: int = 1
    global_batch_size: Optional[int] = None  # only used to derive num_microbatches
    group_query_attention: bool = False  # --group-query-attention
    num_query_groups: int = 1  # --num-query-groups (argparse default 1; ignored unless GQA)
    kv_channels: Optional[int] = None  # validate_args: hidden_size // num_attention_heads
    ffn_hidden_size: Optional[int] = None  # validate_args: 4h, or int(4h*2/3 / 64)*64 with --swiglu
    swiglu: bool = False
    normalization: Literal["LayerNorm", "RMSNorm"] = "LayerNorm"
    add_bias_linear: bool = True  # --disable-bias-linear sets False (only the router bias is counted)
    untie_embeddings_and_output_weights: bool = False
    # --- parallelism ---------------------------------------------------------------------------------
    tensor_model_parallel_size: int = 1
    pipeline_model_parallel_size: int = 1
    virtual_pipeline_model_parallel_size: Optional[int] = None
    context_parallel_size: int = 1  # not read by the report itself; enters data_parallel_size only
    expert_model_parallel_size: int = 1
    expert_tensor_parallel_size: Optional[int] = None  # validate_args: tensor_model_parallel_size
    data_parallel_size: Optional[int] = None  # validate_args: world_size // (TP * PP * CP)
    world_size: Optional[int] = None  # WORLD_SIZE; derived from data_parallel_size if not given
    use_distributed_optimizer: bool = False
    sequence_parallel: bool = False
    recompute_granularity: Optional[Literal["full", "selective"]] = None
    # --- MoE -----------------------------------------------------------------------------------------
    num_experts: Optional[int] = None
    moe_router_topk: int = 2
    moe_ffn_hidden_size: Optional[int] = None  # validate_args: ffn_hidden_size when num_experts is set
    moe_shared_expert_intermediate_size: Optional[int] = None
    moe_shared_expert_gate: bool = False
    moe_layer_freq: Union[int, Sequence[int]] = 1  # int N (1 MoE layer every N) or a 0/1 pattern
    moe_latent_size: Optional[int] = None
    # --- MLA -----------------------------------------------------------------------------------------
    multi_latent_attention: bool = False
    q_lora_rank: Optional[int] = None
    kv_lora_rank: int = 32
    qk_head_dim: int = 128
    qk_pos_emb_head_dim: int = 64
    v_head_dim: int = 128
    # --- MTP / hybrid --------------------------------------------------------------------------------
    mtp_num_layers: Optional[int] = None
    hybrid_layer_pattern: Optional[str] = None  # report refuses hybrid Mamba models


def pad_vocab_size(vocab_size: int, tensor_model_parallel_size: int, make_vocab_size_divisible_by: int = 128) -> int:
    """Megatron's ``calculate_padded_vocab_size`` (``megatron/training/vocab_utils.py``)."""
    multiple = make_vocab_size_divisible_by * tensor_model_parallel_size
    return int(math.ceil(vocab_size / multiple) * multiple)


def validate_args(args: MegatronArgs) -> MegatronArgs:
    """The parts of Megatron's ``validate_args`` that set or check a field the report reads (idempotent)."""
    tp, pp, cp = args.tensor_model_parallel_size, args.pipeline_model_parallel_size, args.context_parallel_size
    model_size = tp * pp * cp  # total_model_size (gtp_weight_remat_size = 1)
    world_size, dp = args.world_size, args.data_parallel_size
    if world_size is None:
        if dp is None:
            raise ValueError("give world_size or data_parallel_size")
        world_size = dp * model_size
    assert world_size % model_size == 0, f"world size ({world_size}) is not divisible by {model_size=}"
    if dp is None:
        dp = world_size // model_size
    assert dp == world_size // model_size, f"data_parallel_size {dp} != world_size // (TP*PP*CP)"

    ffn = args.ffn_hidden_size
    if ffn is None:
        ffn = int((4 * args.hidden_size * 2 / 3) / 64) * 64 if args.swiglu else 4 * args.hidden_size
    kv_channels = args.kv_channels
    if kv_channels is None:
        assert args.hidden_size % args.num_attention_heads == 0
        kv_channels = args.hidden_size // args.num_attention_heads

    num_experts = None if args.num_experts == 0 else args.num_experts
    moe_ffn = args.moe_ffn_hidden_size
    if num_experts is not None and moe_ffn is None:
        moe_ffn = ffn
    if args.expert_model_parallel_size > 1:
        assert num_experts is not None, "num_experts must be non None to use expert model parallelism"
        assert num_experts % args.expert_model_parallel_size == 0
    etp = args.expert_tensor_parallel_size if args.expert_tensor_parallel_size is not None else tp

    vp = args.virtual_pipeline_model_parallel_size
    if vp == 1:
        vp = None
    if args.multi_latent_attention:
        assert not args.group_query_attention, "GQA is mutually exclusive with multi latent attention."

    moe_layer_freq = args.moe_layer_freq
    if not isinstance(moe_layer_freq, int):
        moe_layer_freq = tuple(moe_layer_freq)
    return dataclasses.replace(
        args,
        world_size=world_size,
        data_parallel_size=dp,
        ffn_hidden_size=ffn,
        kv_channels=kv_channels,
        num_experts=num_experts,
        moe_ffn_hidden_size=moe_ffn,
        expert_tensor_parallel_size=etp,
        virtual_pipeline_model_parallel_size=vp,
        # [MLM] "disable sequence parallelism when tp=1 to avoid change in numerics"
        sequence_parallel=args.sequence_parallel and tp > 1,
        moe_layer_freq=moe_layer_freq,
    )


def get_num_microbatches(args: MegatronArgs) -> Optional[int]:
    """``get_num_microbatches()`` = global_batch_size / (micro_batch_size * data_parallel_size), or None."""
    args = validate_args(args)
    if args.global_batch_size is None:
        return None
    per_step = args.micro_batch_size * args.data_parallel_size
    assert args.global_batch_size % per_step == 0, "global batch not divisible by micro batch times DP"
    return args.global_batch_size // per_step


@dataclass(frozen=True)
class WeightAndOptimizerBreakdown:
    """Every quantity ``compute_weight_and_optimizer_memory`` computes (it prints the counts, returns bytes)."""

    num_parameters_in_transformer_block: float
    num_active_parameters_in_transformer_block: float
    num_parameters_in_mtp_block: float
    num_parameters_in_embedding_layers: float
    num_total_parameters: float
    num_active_parameters: float
    tp_sharded_params_on_most_loaded_shard: float
    replicated_params_on_most_loaded_shard: float
    expert_sharded_params_on_most_loaded_shard: float
    num_parameters_on_most_loaded_model_shard: float
    num_parameters_on_other_model_shards: Optional[float]  # only when PP > 1
    data_parallel_size: int
    expert_data_parallel_size: int
    bytes_per_parameter: float  # for dense/TP-sharded/replicated parameters
    bytes_per_expert_parameter: float  # for routed-expert parameters (expert DP)
    weight_and_optimizer_memory: float  # bytes per GPU, most loaded shard


def weight_and_optimizer_breakdown(args: MegatronArgs, verbose: bool = False) -> WeightAndOptimizerBreakdown:
    """Port of ``compute_weight_and_optimizer_memory`` keeping its intermediate values."""
    args = validate_args(args)
    # [MLM] Attention projection size.
    query_projection_size = args.kv_channels * args.num_attention_heads
    query_projection_to_hidden_size_ratio = query_projection_size / args.hidden_size
    # [MLM] Group Query Attention.  (upstream writes ``args.num_query_groups = args.num_attention_heads``)
    num_query_groups = args.num_query_groups if args.group_query_attention else args.num_attention_heads
    # [MLM] MoE.
    num_experts = 1 if args.num_experts is None else args.num_experts
    gated_linear_multiplier = 3 / 2 if args.swiglu else 1

    shared_expert_ffn_hidden_size = (
        0 if args.moe_shared_expert_intermediate_size is None else args.moe_shared_expert_intermediate_size
    )

    if args.num_experts is not None:
        if isinstance(args.moe_layer_freq, int):
            moe_layer_pattern = [1 if (i % args.moe_layer_freq == 0) else 0 for i in range(args.num_layers)]
        else:  # upstream: isinstance(args.moe_layer_freq, list)
            moe_layer_pattern = list(args.moe_layer_freq)
            assert len(moe_layer_pattern) == args.num_layers, (
                f"Invalid length of moe_layer_pattern: {len(moe_layer_pattern)}, expected {args.num_layers}"
            )
        num_dense_layers = args.num_layers - sum(moe_layer_pattern)
        num_moe_layers = sum(moe_layer_pattern)
        moe_ffn_hidden_size = args.moe_ffn_hidden_size
    else:
        moe_layer_pattern = [0] * args.num_layers
        num_dense_layers = args.num_layers
        num_moe_layers = 0
        moe_ffn_hidden_size = 0
    assert num_dense_layers + num_moe_layers == args.num_layers
    if args.mtp_num_layers is not None:
        mtp_layer_is_moe = moe_layer_pattern[-1]
        mtp_num_moe_layers = mtp_layer_is_moe * args.mtp_num_layers
        mtp_num_dense_layers = (1 - mtp_layer_is_moe) * args.mtp_num_layers
    else:
        mtp_num_moe_layers = 0
        mtp_num_dense_layers = 0

    # [MLM] RMSNorm does not have bias, but LayerNorm has.
    norm_size = 1 if args.normalization == "RMSNorm" else 2

    if args.multi_latent_attention:
        if args.q_lora_rank is None:
            q_term = args.hidden_size * args.num_attention_heads * (args.qk_head_dim + args.qk_pos_emb_head_dim)
        else:
            # [MLM] q lora + rope + q norm
            q_term = args.q_lora_rank * (
                args.hidden_size + args.num_attention_heads * (args.qk_head_dim + args.qk_pos_emb_head_dim) + norm_size
            )
        self_attn_term = (
            q_term
            # [MLM] kv lora + rope + kv norm
            + args.kv_lora_rank
            * (args.hidden_size + args.num_attention_heads * (args.qk_head_dim + args.v_head_dim) + norm_size)
            + args.hidden_size * args.qk_pos_emb_head_dim
            # [MLM] o proj
            + (args.num_attention_heads * args.v_head_dim) * args.hidden_size
        )
    else:
        self_attn_term = (
            2
            * args.hidden_size
            * args.hidden_size
            * (
                # [MLM] Attention.
                ((1 + (num_query_groups / args.num_attention_heads)) * query_projection_to_hidden_size_ratio)
            )
        )

    embedding_size = args.hidden_size * args.padded_vocab_size
    final_layernorm = norm_size * args.hidden_size
    if args.untie_embeddings_and_output_weights:
        num_parameters_in_embedding_layers = 2 * embedding_size
    else:
        num_parameters_in_embedding_layers = embedding_size

    attention_params = self_attn_term
    dense_mlp_params = 2 * args.hidden_size * args.ffn_hidden_size * gated_linear_multiplier
    shared_expert_params = 2 * args.hidden_size * shared_expert_ffn_hidden_size * gated_linear_multiplier
    # [MLM] Latent MoE projects tokens down before routed experts and projects them back after
    # combine. Shared experts still operate on the full hidden dimension.
    routed_expert_hidden_size = args.moe_latent_size if args.moe_latent_size is not None else args.hidden_size
    routed_expert_params = 2 * routed_expert_hidden_size * moe_ffn_hidden_size * num_experts * gated_linear_multiplier
    active_routed_expert_params = (
        2 * routed_expert_hidden_size * moe_ffn_hidden_size * args.moe_router_topk * gated_linear_multiplier
        if args.num_experts is not None
        else 0
    )
    latent_projection_params = (
        2 * args.hidden_size * args.moe_latent_size
        if args.num_experts is not None and args.moe_latent_size is not None
        else 0
    )
    layernorm_params = 2 * args.hidden_size * norm_size
    router_params = (
        (args.hidden_size * num_experts) + (num_experts if args.add_bias_linear else 0)
        if args.num_experts is not None
        else 0
    )
    shared_expert_gate_params = (
        args.hidden_size if shared_expert_ffn_hidden_size > 0 and args.moe_shared_expert_gate else 0
    )

    num_parameters_in_transformer_layer_dense = attention_params + dense_mlp_params + layernorm_params
    num_parameters_in_transformer_layer_moe = (
        attention_params
        + shared_expert_params
        + routed_expert_params
        + latent_projection_params
        + layernorm_params
        + router_params
        + shared_expert_gate_params
    )
    num_active_parameters_in_transformer_layer_moe = (
        attention_params
        + shared_expert_params
        + active_routed_expert_params
        + latent_projection_params
        + layernorm_params
        + router_params
        + shared_expert_gate_params
    )
    num_parameters_in_transformer_block = (
        num_parameters_in_transformer_layer_dense * num_dense_layers
        + num_parameters_in_transformer_layer_moe * num_moe_layers
        + final_layernorm
    )
    num_active_parameters_in_transformer_block = (
        num_parameters_in_transformer_layer_dense * num_dense_layers
        + num_active_parameters_in_transformer_layer_moe * num_moe_layers
        + final_layernorm
    )
    num_parameters_in_mtp_block = (
        num_parameters_in_transformer_layer_dense * mtp_num_dense_layers
        + num_parameters_in_transformer_layer_moe * mtp_num_moe_layers
    )
    num_total_parameters = (
        num_parameters_in_transformer_block + num_parameters_in_mtp_block + num_parameters_in_embedding_layers
    )
    num_active_parameters = (
        num_active_parameters_in_transformer_block + num_parameters_in_mtp_block + num_parameters_in_embedding_layers
    )
    if verbose:
        print(f"Number of parameters in transformer block in billions: {num_parameters_in_transformer_block / 10**9: .2f}")
        print(
            f"Number of active parameters in transformer block in billions: "
            f"{num_active_parameters_in_transformer_block / 10**9: .2f}"
        )
        if args.mtp_num_layers is not None:
            print(f"Number of parameters in mtp block in billions: {num_parameters_in_mtp_block / 10**9: .2f}")
        print(f"Number of parameters in embedding layers in billions: {num_parameters_in_embedding_layers / 10**9:.2f}")
        print(f"Total number of parameters in billions: {num_total_parameters / 10**9:.2f}")
        print(f"Total number of active parameters in billions: {num_active_parameters / 10**9:.2f}")

    expert_tensor_parallel_size = args.expert_tensor_parallel_size
    expert_model_parallel_size = args.expert_model_parallel_size
    expert_tensor_model_pipeline_parallel_size = (
        expert_tensor_parallel_size * expert_model_parallel_size * args.pipeline_model_parallel_size
    )
    expert_data_parallel_size = args.world_size // expert_tensor_model_pipeline_parallel_size

    # [MLM] Split params by how they are held on each rank: regular TP, replicated, or EP/ETP.
    tp_sharded_params_in_transformer_block = (attention_params + dense_mlp_params) * num_dense_layers + (
        attention_params + shared_expert_params
    ) * num_moe_layers
    replicated_params_in_transformer_block = (
        layernorm_params * num_dense_layers
        + (layernorm_params + latent_projection_params + router_params + shared_expert_gate_params) * num_moe_layers
        + final_layernorm
    )
    expert_sharded_params_in_transformer_block = routed_expert_params * num_moe_layers
    tp_sharded_params_in_mtp_block = (attention_params + dense_mlp_params) * mtp_num_dense_layers + (
        attention_params + shared_expert_params
    ) * mtp_num_moe_layers
    replicated_params_in_mtp_block = (
        layernorm_params * mtp_num_dense_layers
        + (layernorm_params + latent_projection_params + router_params + shared_expert_gate_params)
        * mtp_num_moe_layers
    )
    expert_sharded_params_in_mtp_block = routed_expert_params * mtp_num_moe_layers

    # [MLM] Most loaded model shard has 1/pp_size transformer layers, 1 mtp block, and 1 embedding layer.
    tp_sharded_params_on_most_loaded_shard = (
        (tp_sharded_params_in_transformer_block / args.pipeline_model_parallel_size)
        + tp_sharded_params_in_mtp_block
        + embedding_size
    ) / args.tensor_model_parallel_size
    replicated_params_on_most_loaded_shard = (
        replicated_params_in_transformer_block / args.pipeline_model_parallel_size
    ) + replicated_params_in_mtp_block
    expert_sharded_params_on_most_loaded_shard = (
        (expert_sharded_params_in_transformer_block / args.pipeline_model_parallel_size)
        + expert_sharded_params_in_mtp_block
    ) / (expert_tensor_parallel_size * expert_model_parallel_size)
    num_parameters_on_most_loaded_model_shard = (
        tp_sharded_params_on_most_loaded_shard
        + replicated_params_on_most_loaded_shard
        + expert_sharded_params_on_most_loaded_shard
    )
    if args.untie_embeddings_and_output_weights and args.pipeline_model_parallel_size == 1:
        tp_sharded_params_on_most_loaded_shard += embedding_size / args.tensor_model_parallel_size
        num_parameters_on_most_loaded_model_shard += embedding_size / args.tensor_model_parallel_size
    if verbose:
        print(
            f"Number of parameters in most loaded shard in billions: "
            f"{num_parameters_on_most_loaded_model_shard / 10**9:.4f}"
        )

    num_parameters_on_other_model_shards = None
    if args.pipeline_model_parallel_size > 1:
        # [MLM] Other shards just have 1/pp_size transformer layers.
        num_parameters_on_other_model_shards = (
            tp_sharded_params_in_transformer_block / (args.pipeline_model_parallel_size * args.tensor_model_parallel_size)
            + replicated_params_in_transformer_block / args.pipeline_model_parallel_size
            + expert_sharded_params_in_transformer_block
            / (args.pipeline_model_parallel_size * expert_tensor_parallel_size * expert_model_parallel_size)
        )
        if verbose:
            print(
                f"Number of parameters in other shards in billions: {num_parameters_on_other_model_shards / 10**9:.4f}"
            )

    def num_bytes_per_parameter(data_parallel_size):
        # [MLM] This estimator assumes bf16 training: bf16 model params, fp32 main gradients,
        # [MLM] fp32 main params, and fp32 Adam states. See docs/user-guide/features/dist_optimizer.md.
        return 18 if not args.use_distributed_optimizer else 6 + (12 / data_parallel_size)

    weight_and_optimizer_memory = (
        tp_sharded_params_on_most_loaded_shard + replicated_params_on_most_loaded_shard
    ) * num_bytes_per_parameter(args.data_parallel_size) + expert_sharded_params_on_most_loaded_shard * (
        num_bytes_per_parameter(expert_data_parallel_size)
    )

    return WeightAndOptimizerBreakdown(
        num_parameters_in_transformer_block=num_parameters_in_transformer_block,
        num_active_parameters_in_transformer_block=num_active_parameters_in_transformer_block,
        num_parameters_in_mtp_block=num_parameters_in_mtp_block,
        num_parameters_in_embedding_layers=num_parameters_in_embedding_layers,
        num_total_parameters=num_total_parameters,
        num_active_parameters=num_active_parameters,
        tp_sharded_params_on_most_loaded_shard=tp_sharded_params_on_most_loaded_shard,
        replicated_params_on_most_loaded_shard=replicated_params_on_most_loaded_shard,
        expert_sharded_params_on_most_loaded_shard=expert_sharded_params_on_most_loaded_shard,
        num_parameters_on_most_loaded_model_shard=num_parameters_on_most_loaded_model_shard,
        num_parameters_on_other_model_shards=num_parameters_on_other_model_shards,
        data_parallel_size=args.data_parallel_size,
        expert_data_parallel_size=expert_data_parallel_size,
        bytes_per_parameter=num_bytes_per_parameter(args.data_parallel_size),
        bytes_per_expert_parameter=num_bytes_per_parameter(expert_data_parallel_size),
        weight_and_optimizer_memory=weight_and_optimizer_memory,
    )


def compute_weight_and_optimizer_memory(args: MegatronArgs, verbose: bool = False) -> float:
    """Bytes of weights + gradients + optimizer state on the most loaded GPU (upstream's return value)."""
    return weight_and_optimizer_breakdown(args, verbose=verbose).weight_and_optimizer_memory


def _in_flight_and_schedule_factor(args: MegatronArgs, num_microbatches: Optional[int]):
    """The PP-schedule factor both activation functions apply, and the in-flight count they print."""
    pp, vp = args.pipeline_model_parallel_size, args.virtual_pipeline_model_parallel_size
    factor, in_flight = 1, pp
    if vp is not None:
        interleaved_schedule_memory_penalty = 1 + ((pp - 1) / (pp * vp))
        in_flight = math.ceil(interleaved_schedule_memory_penalty * pp)
        factor = interleaved_schedule_memory_penalty
    if vp is None and pp > 1:
        if num_microbatches is not None:
            factor = min(1, num_microbatches / pp)
            in_flight = min(num_microbatches, pp)
        else:
            in_flight = pp
    return factor, in_flight


def compute_activation_memory(args: MegatronArgs, num_microbatches: Optional[int], verbose: bool = False) -> float:
    """Activation bytes on the first pipeline stage, selective recompute + sequence parallel (upstream path 1).

    [MLM] Using formula in Table 2 of https://arxiv.org/pdf/2205.05198.pdf.
    [MLM] We are trying to compute the maximum activation footprint, so all calculations in this
    [MLM] function are for the first pipeline stage.
    [MLM] TODO: This function needs to take into account query_projection_size potentially being
    [MLM] different from hidden_size.
    """
    args = validate_args(args)
    # [MLM] Memory footprint from transformer layer (self-attention and MLP).
    activation_memory = (args.seq_length * args.micro_batch_size * args.hidden_size) * (
        18 + (4 * (args.ffn_hidden_size / args.hidden_size))
    )
    if verbose:
        print(
            f"Activation memory footprint per transformer layer: "
            f"{activation_memory / NUM_BYTES_IN_MEGABYTE / args.tensor_model_parallel_size:.1f} MB"
        )
    activation_memory *= args.num_layers

    # [MLM] Now add activation memory required for input embeddings, last LayerNorm and output layer.
    # [MLM] Input to embedding (pp_size microbatches in flight).
    activation_memory += 8 * args.seq_length * args.micro_batch_size * args.pipeline_model_parallel_size
    # [MLM] Dropout in embedding layer (pp_size microbatches in flight).
    activation_memory += (
        args.seq_length * args.micro_batch_size * args.hidden_size * args.pipeline_model_parallel_size
    )

    # [MLM] Multiply by interleaved PP memory factor.
    if args.virtual_pipeline_model_parallel_size is not None:
        interleaved_schedule_memory_penalty = 1 + (
            (args.pipeline_model_parallel_size - 1)
            / (args.pipeline_model_parallel_size * args.virtual_pipeline_model_parallel_size)
        )
        in_flight_microbatches = math.ceil(interleaved_schedule_memory_penalty * args.pipeline_model_parallel_size)
        if verbose:
            print(f"Memory penalty from interleaved schedule: {interleaved_schedule_memory_penalty:.2f}")
            print(f"Number of in-flight microbatches: {in_flight_microbatches}")
        activation_memory *= interleaved_schedule_memory_penalty

    # [MLM] If using non-interleaved schedule, number of microbatches in pipeline can be less than pp_size,
    # [MLM] so discount accordingly.
    if args.virtual_pipeline_model_parallel_size is None and args.pipeline_model_parallel_size > 1:
        if num_microbatches is not None:
            activation_memory *= min(1, num_microbatches / args.pipeline_model_parallel_size)
            in_flight_microbatches = min(num_microbatches, args.pipeline_model_parallel_size)
        else:
            in_flight_microbatches = args.pipeline_model_parallel_size
        if verbose:
            print(f"Number of in-flight microbatches: {in_flight_microbatches}")

    if args.pipeline_model_parallel_size == 1:
        # [MLM] Inputs to output layer and CE loss.
        activation_memory += (
            args.seq_length
            * args.micro_batch_size
            * args.hidden_size
            * 4
            * (1 + (args.padded_vocab_size / args.hidden_size))
        )

    # [MLM] Activation memory is partitioned by TP size due to tensor and sequence model parallelism.
    return activation_memory / args.tensor_model_parallel_size


def compute_activation_memory_without_sp(
    args: MegatronArgs, num_microbatches: Optional[int], verbose: bool = False
) -> float:
    """[MLM] Compute activation memory without sequence parallelism (upstream path 2, every non-(SP+selective) run)."""
    args = validate_args(args)
    # [MLM] 4. Compute per-layer memory
    per_layer_memory = (
        args.seq_length * args.micro_batch_size * args.hidden_size * (10 + (24 / args.tensor_model_parallel_size))
    )
    if verbose:
        print(
            f"Activation memory footprint per transformer layer (precise, without SP): "
            f"{per_layer_memory / NUM_BYTES_IN_MEGABYTE:.1f} MB"
        )

    # [MLM] 5. Multiply by number of layers
    total_activation_memory = per_layer_memory * args.num_layers

    # [MLM] 6. Add embedding activations
    # [MLM] Input to embedding (pp_size microbatches in flight)
    total_activation_memory += 8 * args.seq_length * args.micro_batch_size * args.pipeline_model_parallel_size
    # [MLM] Dropout in embedding layer (pp_size microbatches in flight)
    total_activation_memory += (
        args.seq_length * args.micro_batch_size * args.hidden_size * args.pipeline_model_parallel_size
    )

    # [MLM] 7. Handle pipeline parallelism schedules
    # [MLM] Multiply by interleaved PP memory factor
    if args.virtual_pipeline_model_parallel_size is not None:
        interleaved_schedule_memory_penalty = 1 + (
            (args.pipeline_model_parallel_size - 1)
            / (args.pipeline_model_parallel_size * args.virtual_pipeline_model_parallel_size)
        )
        in_flight_microbatches = math.ceil(interleaved_schedule_memory_penalty * args.pipeline_model_parallel_size)
        if verbose:
            print(f"Memory penalty from interleaved schedule: {interleaved_schedule_memory_penalty:.2f}")
            print(f"Number of in-flight microbatches: {in_flight_microbatches}")
        total_activation_memory *= interleaved_schedule_memory_penalty

    # [MLM] If using non-interleaved schedule, number of microbatches in pipeline can be less than pp_size
    if args.virtual_pipeline_model_parallel_size is None and args.pipeline_model_parallel_size > 1:
        if num_microbatches is not None:
            total_activation_memory *= min(1, num_microbatches / args.pipeline_model_parallel_size)
            in_flight_microbatches = min(num_microbatches, args.pipeline_model_parallel_size)
        else:
            in_flight_microbatches = args.pipeline_model_parallel_size
        if verbose:
            print(f"Number of in-flight microbatches: {in_flight_microbatches}")

    # [MLM] 8. Add output layer memory if needed
    if args.pipeline_model_parallel_size == 1:
        # [MLM] Logits calculation
        logits_size = args.seq_length * args.micro_batch_size * args.padded_vocab_size
        # [MLM] The output projection is partitioned across TP
        logits_size /= args.tensor_model_parallel_size
        # [MLM] Outputs from final layer norm
        final_ln_output = args.seq_length * args.micro_batch_size * args.hidden_size
        total_activation_memory += (logits_size + final_ln_output) * 2  # [MLM] multiply by 2 for bytes

    # [MLM] 9. Add buffer for optimizer and miscellaneous temporaries (5% overhead)
    overhead_factor = 1.05
    total_activation_memory *= overhead_factor

    return total_activation_memory


def uses_sp_activation_formula(args: MegatronArgs) -> bool:
    """``report_theoretical_memory``'s branch: SP (after TP = 1 switches it off) and selective recompute."""
    args = validate_args(args)
    return bool(args.sequence_parallel and args.recompute_granularity == "selective")


def report_theoretical_memory(args: MegatronArgs, num_microbatches: Optional[int] = None, verbose: bool = False):
    """Upstream's entry point: ``(weight_and_optimizer MB, activation MB, total MB)`` (MB = MiB), or None (hybrid)."""
    args = validate_args(args)
    if args.hybrid_layer_pattern is not None:  # is_hybrid_model(args)
        print("Theoretical memory footprints not yet supported for hybrid Mamba-Transformer models.")
        return None
    weight_and_optimizer_memory = compute_weight_and_optimizer_memory(args, verbose=verbose) / NUM_BYTES_IN_MEGABYTE
    if uses_sp_activation_formula(args):
        activation_memory = (
            compute_activation_memory(args, num_microbatches=num_microbatches, verbose=verbose) / NUM_BYTES_IN_MEGABYTE
        )
    else:
        activation_memory = (
            compute_activation_memory_without_sp(args, num_microbatches=num_microbatches, verbose=verbose)
            / NUM_BYTES_IN_MEGABYTE
        )
    total_memory = weight_and_optimizer_memory + activation_memory
    if verbose:
        print(
            f"Theoretical memory footprints: weight and optimizer={weight_and_optimizer_memory:.2f} MB, "
            f"activation={activation_memory:.2f} MB, total={total_memory:.2f} MB\n"
        )
    return weight_and_optimizer_memory, activation_memory, total_memory


@dataclass(frozen=True)
class TheoreticalMemory:
    """What the report prints, in bytes per GPU (first / most loaded pipeline stage), plus parameter counts."""

    weight_and_optimizer_bytes: float
    activation_bytes: float
    total_bytes: float
    activation_formula: Literal["sp_selective", "without_sp"]
    num_microbatches: Optional[int]
    in_flight_microbatches: int  # what the report prints; the memory uses the schedule factor below
    schedule_factor: float  # interleaved penalty 1 + (PP-1)/(PP*VP), or min(1, m/PP), or 1
    weights: WeightAndOptimizerBreakdown

    @property
    def num_total_parameters(self) -> float:
        return self.weights.num_total_parameters

    @property
    def num_parameters_on_most_loaded_model_shard(self) -> float:
        return self.weights.num_parameters_on_most_loaded_model_shard

    def as_mib(self) -> tuple[float, float, float]:
        """The three numbers ``report_theoretical_memory`` prints (its "MB" is 2**20 bytes)."""
        return (
            self.weight_and_optimizer_bytes / NUM_BYTES_IN_MEGABYTE,
            self.activation_bytes / NUM_BYTES_IN_MEGABYTE,
            self.weight_and_optimizer_bytes / NUM_BYTES_IN_MEGABYTE + self.activation_bytes / NUM_BYTES_IN_MEGABYTE,
        )


def theoretical_memory(args: MegatronArgs, num_microbatches: Optional[int] = None) -> TheoreticalMemory:
    """The report for ``args``; ``num_microbatches`` defaults to ``get_num_microbatches()`` from global_batch_size."""
    args = validate_args(args)
    if args.hybrid_layer_pattern is not None:
        raise ValueError("Theoretical memory footprints not yet supported for hybrid Mamba-Transformer models.")
    if num_microbatches is None:
        num_microbatches = get_num_microbatches(args)
    weights = weight_and_optimizer_breakdown(args)
    sp = uses_sp_activation_formula(args)
    act = (compute_activation_memory if sp else compute_activation_memory_without_sp)(args, num_microbatches)
    factor, in_flight = _in_flight_and_schedule_factor(args, num_microbatches)
    return TheoreticalMemory(
        weight_and_optimizer_bytes=weights.weight_and_optimizer_memory,
        activation_bytes=act,
        total_bytes=weights.weight_and_optimizer_memory + act,
        activation_formula="sp_selective" if sp else "without_sp",
        num_microbatches=num_microbatches,
        in_flight_microbatches=in_flight,
        schedule_factor=factor,
        weights=weights,
    )


# --------------------------------------------------------------------------------------------------------
# YAML cases (tests/perf/data/megatron_memory_cases.yaml)


def args_from_case(case: dict) -> MegatronArgs:
    """Build :class:`MegatronArgs` from a case's ``args`` mapping (``vocab_size`` is padded as Megatron pads)."""
    raw = dict(case["args"])
    vocab = raw.pop("vocab_size", None)
    divisible_by = raw.pop("make_vocab_size_divisible_by", 128)
    if "padded_vocab_size" not in raw:
        raw["padded_vocab_size"] = pad_vocab_size(vocab, raw.get("tensor_model_parallel_size", 1), divisible_by)
    if isinstance(raw.get("moe_layer_freq"), str):  # Megatron's moe_freq_type accepts "[0]*3+[1]*58"
        raw["moe_layer_freq"] = tuple(_eval_pattern(raw["moe_layer_freq"]))
    elif isinstance(raw.get("moe_layer_freq"), list):
        raw["moe_layer_freq"] = tuple(raw["moe_layer_freq"])
    return MegatronArgs(**raw)


def _eval_pattern(text: str) -> list[int]:
    """Megatron's ``_eval_pattern`` for ``--moe-layer-freq`` strings, restricted to list/int arithmetic."""
    import ast

    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.List):
            return [ev(e) for e in node.elts]
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult)):
            left, right = ev(node.left), ev(node.right)
            return left + right if isinstance(node.op, ast.Add) else left * right
        raise ValueError(f"unsupported moe_layer_freq pattern: {text!r}")

    out = ev(ast.parse(text, mode="eval"))
    assert isinstance(out, list)
    return out


def case_outputs(case: dict) -> dict:
    """The numbers stored under each case's ``oracle`` key."""
    args = args_from_case(case)
    mem = theoretical_memory(args)
    wo, act, total = mem.as_mib()
    w = mem.weights
    return {
        "padded_vocab_size": args.padded_vocab_size,
        "data_parallel_size": w.data_parallel_size,
        "expert_data_parallel_size": w.expert_data_parallel_size,
        "num_microbatches": mem.num_microbatches,
        "activation_formula": mem.activation_formula,
        "in_flight_microbatches": mem.in_flight_microbatches,
        "schedule_factor": mem.schedule_factor,
        "num_total_parameters": w.num_total_parameters,
        "num_active_parameters": w.num_active_parameters,
        "num_parameters_in_transformer_block": w.num_parameters_in_transformer_block,
        "num_parameters_in_mtp_block": w.num_parameters_in_mtp_block,
        "num_parameters_in_embedding_layers": w.num_parameters_in_embedding_layers,
        "num_parameters_on_most_loaded_model_shard": w.num_parameters_on_most_loaded_model_shard,
        "expert_sharded_params_on_most_loaded_shard": w.expert_sharded_params_on_most_loaded_shard,
        "num_parameters_on_other_model_shards": w.num_parameters_on_other_model_shards,
        "bytes_per_parameter": w.bytes_per_parameter,
        "bytes_per_expert_parameter": w.bytes_per_expert_parameter,
        "weight_and_optimizer_bytes": mem.weight_and_optimizer_bytes,
        "activation_bytes": mem.activation_bytes,
        "total_bytes": mem.total_bytes,
        "weight_and_optimizer_mib": wo,
        "activation_mib": act,
        "total_mib": total,
    }


def load_cases(path=None) -> dict:
    import pathlib

    import yaml

    path = pathlib.Path(path) if path else pathlib.Path(__file__).parent / "data" / "megatron_memory_cases.yaml"
    return yaml.safe_load(path.read_text())


if __name__ == "__main__":  # pragma: no cover
    GiB = 1024**3
    print(f"{'case':34s} {'params(B)':>10s} {'shard(B)':>9s} {'W+O GiB':>9s} {'act GiB':>9s} {'total GiB':>9s}  path")
    for name, case in load_cases()["cases"].items():
        o = case_outputs(case)
        print(
            f"{name:34s} {o['num_total_parameters'] / 1e9:10.3f} {o['num_parameters_on_most_loaded_model_shard'] / 1e9:9.3f}"
            f" {o['weight_and_optimizer_bytes'] / GiB:9.2f} {o['activation_bytes'] / GiB:9.2f}"
            f" {o['total_bytes'] / GiB:9.2f}  {o['activation_formula']}"
        )
