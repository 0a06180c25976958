"""Launch configurations for one front point: the full Megatron-LM command (torchrun + pretrain_gpt.py)
and, for dense models, a torchtitan TOML.

Every flag and TOML field written here was checked against the real projects' argument definitions,
committed as data under designer/data/launch/ (designer/data/launch/generate.py rebuilds them):

- Megatron-LM, NVIDIA/Megatron-LM commit d98e8a64ddf34856e74b24714e3bedb2f5a39553 (2026-08-22):
  megatron/training/arguments.py add_megatron_arguments, which builds most options from dataclasses
  (megatron/training/argument_utils.py ArgumentGroupFactory over TransformerConfig, TrainingConfig...).
  Paths cited below as `arguments.py:N` or `transformer_config.py` are at that commit.
- torchtitan, pytorch/torchtitan commit 238fa9953e4aec2a62582121564273d7cbb1e9f1 (2026-02-23):
  torchtitan/config/job_config.py JobConfig. That is the last commit that reads TOML files
  (--job.config_file); the next one, 9810191 "[BC Breaking] Config System Refactor: TOML to Python
  Dataclass Registry", replaced them by Python config functions, so the TOML written here is for a
  torchtitan at or before 238fa99.

The functions are pure: records in, strings and frozen records out. The only file read is the
committed torchtitan flavor registry (torchtitan_flavors.json), once, to name a real flavor.
"""

from __future__ import annotations

import functools
import json
import math
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from designer.spec.llm import (
    AttentionKernel, Fp8Recipe, LLMSpec, Precision, RankOrder, Recompute, RecomputeModule, Schedule, Strategy,
    TrainingSpec, pipeline_stage_layers,
)

LAUNCH_DATA = Path(__file__).resolve().parent / "data" / "launch"
MEGATRON_COMMIT = "d98e8a64ddf34856e74b24714e3bedb2f5a39553"
TORCHTITAN_COMMIT = "238fa9953e4aec2a62582121564273d7cbb1e9f1"
MEGATRON_SCRIPT = "pretrain_gpt.py"


@dataclass(frozen=True)
class MegatronLaunch:
    """One Megatron-LM launch: environment, torchrun options, the training script and its options.
    `notes` name what the strategy asks for that Megatron-LM has no flag for (written as comments)."""

    env: tuple[tuple[str, str], ...]
    torchrun_args: tuple[str, ...]
    script: str
    script_args: tuple[str, ...]
    notes: tuple[str, ...]

    def argv(self) -> list[str]:
        return ["torchrun", *self.torchrun_args, self.script, *self.script_args]

    def command(self) -> str:
        """A shell command: the notes as `#` lines, then one line `ENV=.. torchrun .. pretrain_gpt.py ..`.
        Tokens that name a shell variable ($MASTER_ADDR...) are double-quoted so the shell expands them."""
        words = [f"{k}={shlex.quote(v)}" for k, v in self.env] + [_shell_word(w) for w in self.argv()]
        return "".join(f"# {n}\n" for n in self.notes) + " ".join(words)


@dataclass(frozen=True)
class TorchtitanLaunch:
    """A torchtitan TOML for the point, or None with the reason it is not written. `flavor` is a
    flavor of torchtitan's llama3 registry with exactly the model's shape, or None (the TOML then says
    in a comment which flavor to register and pick)."""

    toml: str | None
    model_name: str | None
    flavor: str | None
    reason: str | None
    notes: tuple[str, ...]


def _shell_word(w: str) -> str:
    return f'"{w}"' if "$" in w else shlex.quote(w)


def _check_gpus(s: Strategy, n_gpus: int, gpus_per_node: int) -> tuple[int, int]:
    """(nodes, processes per node) for torchrun; the strategy must use exactly the cluster's GPUs."""
    if gpus_per_node < 1:
        raise ValueError(f"gpus_per_node {gpus_per_node} must be >= 1")
    if s.n_gpus != n_gpus:
        raise ValueError(f"strategy uses tp*pp*dp*cp = {s.n_gpus} GPUs, the cluster has {n_gpus}")
    if n_gpus <= gpus_per_node:
        return 1, n_gpus
    if n_gpus % gpus_per_node:
        raise ValueError(f"{n_gpus} GPUs are not a whole number of {gpus_per_node}-GPU nodes "
                         "(torchrun starts the same number of processes on every node)")
    return n_gpus // gpus_per_node, gpus_per_node


def global_batch(s: Strategy, training: TrainingSpec) -> int:
    return s.global_batch_sequences or training.global_batch_sequences


def train_iterations(s: Strategy, training: TrainingSpec) -> int:
    """Optimizer steps to train on the run's tokens at the strategy's batch."""
    return math.ceil(training.total_tokens / (training.sequence_length * global_batch(s, training)))


def moe_layer_pattern(llm: LLMSpec) -> list[int]:
    """1 for an MoE layer, 0 for a dense one (LLMSpec.moe_layer_flags)."""
    return [int(f) for f in llm.moe_layer_flags()]


def _run_length_pattern(bits: list[int]) -> str:
    """Megatron's --moe-layer-freq list expression, e.g. '([0]*3+[1]*58)': arguments.py _eval_pattern
    accepts only digits, ',', '[', ']', '(', ')', '+' and '*'."""
    runs: list[list[int]] = []
    for b in bits:
        if runs and runs[-1][0] == b:
            runs[-1][1] += 1
        else:
            runs.append([b, 1])
    return "(" + "+".join(f"[{b}]*{n}" for b, n in runs) + ")"


# ----------------------------------------------------------------------------- Megatron-LM
def megatron_pipeline_layout(s: Strategy, llm: LLMSpec) -> list[str]:
    """Flags for the layers of each pipeline stage and virtual chunk (pipeline_stage_layers).

    Even stages: --num-layers-per-virtual-pipeline-stage when interleaved, else nothing. Uneven stages
    whose middle stages are equal (and, interleaved, every stage a multiple of the chunks):
    --decoder-first/last-pipeline-num-layers, with --num-virtual-stages-per-pipeline-rank when
    interleaved (transformer_config.py "Uneven PP" checks); MTP layers then go on the last stage.
    Anything else: --pipeline-model-parallel-layout, the explicit string of
    megatron/core/transformer/pipeline_parallel_layer_layout.py ('E' embedding, 't' decoder layer,
    'm' MTP layer, 'L' loss, '|' between chunks; chunk k of stage r is the (k * pp + r)-th; MTP must
    follow every decoder layer in the last chunk of its rank: validate_layer_layout). This is the
    token form of designer.export.pipeline_layout_args, extended with MTP."""
    if s.pp == 1:
        return []
    v = s.virtual_stages if s.schedule == Schedule.interleaved else 1
    stages = pipeline_stage_layers(llm.layers, s.pp, s.pp_first_stage_layers, s.pp_last_stage_layers)
    if not stages:
        raise ValueError(f"pp {s.pp} with first/last stage layers {s.pp_first_stage_layers}/"
                         f"{s.pp_last_stage_layers} leaves no split of {llm.layers} layers")
    middle = stages[1:-1]
    if len(set(stages)) == 1 and stages[0] % v == 0:
        return ["--num-layers-per-virtual-pipeline-stage", str(stages[0] // v)] if v > 1 else []
    if len(set(middle)) <= 1 and all(n % v == 0 and n > 0 for n in stages):
        out = ["--decoder-first-pipeline-num-layers", str(stages[0]),
               "--decoder-last-pipeline-num-layers", str(stages[-1])]
        return out + (["--num-virtual-stages-per-pipeline-rank", str(v)] if v > 1 else [])
    chunks = [[""] * v for _ in stages]
    for r, n in enumerate(stages):
        for k in range(v):
            c = n // v + (k < n % v)
            chunks[r][k] = "" if c == 0 else ("t" if c == 1 else f"t*{c}")
    chunks[0][0] = "E" + chunks[0][0]
    tail = "m" * llm.mtp_layers + "L"
    chunks[-1][-1] = chunks[-1][-1] + ("," if chunks[-1][-1] else "") + ",".join(tail)
    order = [chunks[r][k] for k in range(v) for r in range(s.pp)]
    parts, i = [], 0
    while i < len(order) - 1:  # runs of equal chunks as '(c|)*k', the grammar's repetition
        j = i
        while j + 1 < len(order) - 1 and order[j + 1] == order[i]:
            j += 1
        k = j - i + 1
        parts.append(f"({order[i]}|)*{k}" if k > 1 else f"{order[i]}|")
        i = j + 1
    return ["--pipeline-model-parallel-layout", ",".join(parts) + "," + order[-1]]


def _model_args(llm: LLMSpec, training: TrainingSpec, notes: list[str]) -> list[str]:
    a = ["--num-layers", str(llm.layers), "--hidden-size", str(llm.hidden_size),
         "--ffn-hidden-size", str(llm.ffn_size), "--num-attention-heads", str(llm.heads),
         "--seq-length", str(training.sequence_length),
         "--max-position-embeddings", str(training.sequence_length)]
    if llm.mla is not None:
        # MLA (transformer_config.py MLATransformerConfig): --qk-head-dim is the no-RoPE part of a
        # head ("q_head_dim = qk_head_dim + qk_pos_emb_head_dim"); no --q-lora-rank means an
        # uncompressed query projection (q_lora_rank None)
        mla = llm.mla
        a += ["--multi-latent-attention", "--kv-lora-rank", str(mla.kv_lora_rank),
              "--qk-head-dim", str(mla.qk_nope_head_dim), "--qk-pos-emb-head-dim", str(mla.qk_rope_head_dim),
              "--v-head-dim", str(mla.v_head_dim)]
        if mla.q_lora_rank is not None:
            a += ["--q-lora-rank", str(mla.q_lora_rank)]
    else:
        if llm.kv_heads_effective != llm.heads:
            a += ["--group-query-attention", "--num-query-groups", str(llm.kv_heads_effective)]
        if llm.head_dim is not None and llm.head_dim != llm.hidden_size // llm.heads:
            # kv_channels: the head dimension; Megatron's default is hidden_size / heads
            a += ["--kv-channels", str(llm.head_dim)]
    # the record's rotary embedding, else Megatron's default learned absolute positions (GPT-3's; a
    # model with neither, such as MPT's ALiBi, has no Megatron form: said in a note). The RoPE variant
    # (YaRN, its base and scaling) is not in the record
    pos = "rope" if llm.rotary_embedding else "learned_absolute"
    if llm.rotary_embedding:
        notes.append("--position-embedding-type rope from the model record; its base and any scaling (YaRN, "
                     "Llama 3's) are not in it: set --rotary-base and the scaling flags the model uses")
    else:
        notes.append("the model record has no rotary embedding: --position-embedding-type learned_absolute "
                     "(GPT-3's); a model with other positions (ALiBi) has no Megatron form")
    a += ["--position-embedding-type", pos, "--normalization", "RMSNorm" if llm.norm == "rmsnorm" else "LayerNorm"]
    n_nope = llm.nope_layer_interval
    if n_nope is not None:
        # every n-th layer without RoPE (arguments.py no_rope_freq_type); Megatron asserts that n divides
        # the layers, so a remainder is written as the pattern, 1 marking a NoPE layer
        whole, rest = divmod(llm.layers, n_nope)
        a += ["--no-rope-freq", f"([0]*{n_nope - 1}+[1])*{whole}+[0]*{rest}" if rest else str(n_nope)]
        if llm.qk_norm:
            notes.append(f"the model normalises Q and K in its RoPE layers only; Megatron-LM's "
                         f"{'--qk-l2-norm' if llm.qk_norm == 'l2' else '--qk-layernorm'} normalises them in every "
                         f"layer, its {whole} NoPE layers too, and has no flag for the model's form "
                         "(Megatron-Bridge's Llama 4 layer spec, llama4_utils.py, has)")
    if llm.gated_mlp:
        a.append("--swiglu")  # --ffn-hidden-size is then each of the two up projections (fc1 is doubled)
    if llm.qk_norm == "l2":
        a.append("--qk-l2-norm")  # Llama 4's weightless L2 norm (TransformerConfig.qk_l2_norm)
    elif llm.qk_norm:
        a.append("--qk-layernorm")  # normalised as --normalization says
    if llm.activation_clamp is not None:
        a += ["--activation-func-clamp-value", f"{llm.activation_clamp:g}"]
    if not llm.linear_bias:
        a.append("--disable-bias-linear")  # store_false of add_bias_linear (TransformerConfig)
        if llm.qkv_bias:
            a.append("--add-qkv-bias")  # the QKV projection's bias alone (TransformerConfig.add_qkv_bias)
    if not llm.tied_embeddings:
        a.append("--untie-embeddings-and-output-weights")
    if not llm.dropout:
        a += ["--attention-dropout", "0.0", "--hidden-dropout", "0.0"]  # Megatron's defaults are 0.1
    if llm.mtp_layers:
        a += ["--mtp-num-layers", str(llm.mtp_layers)]
    win = llm.attention_window
    if win is not None and win.kind == "sliding":
        # arguments.py --window-size (left, right) and --window-attn-skip-freq N: one full-attention
        # layer after N-1 windowed ones
        a += ["--window-size", f"{win.tokens},0"]
        if win.full_attention_every is not None:
            a += ["--window-attn-skip-freq", str(win.full_attention_every)]
    elif win is not None:
        notes.append(f"chunked attention ({win.tokens}-token chunks) has no Megatron-LM argument: these "
                     "layers run full causal attention there, slower than designer priced them")
    # Tokenizer- and data-independent: NullTokenizer takes its vocabulary size from --vocab-size
    # (megatron/core/tokenizers/text/libraries/null_tokenizer.py, EOD = vocab_size - 1) and
    # --mock-data generates token ids, so the command runs as written; Megatron pads the embedding to
    # a multiple of 128 * tp (--make-vocab-size-divisible-by) as in any real run.
    a += ["--tokenizer-type", "NullTokenizer", "--vocab-size", str(llm.vocab_size), "--mock-data"]
    notes.append("data: --mock-data with NullTokenizer; for a real run give --data-path and the model's tokenizer")
    return a


def _moe_args(llm: LLMSpec, s: Strategy, gpus_per_node: int, notes: list[str]) -> list[str]:
    moe = llm.moe
    if moe is None:
        return []
    a = ["--num-experts", str(moe.experts), "--moe-router-topk", str(moe.top_k),
         "--moe-ffn-hidden-size", str(moe.expert_ffn_size),
         # grouped GEMM: the experts of a rank in one kernel; TransformerConfig also requires it for
         # the 'moe_act' recompute module
         "--moe-grouped-gemm"]
    if moe.top_k == 1:
        # TransformerConfig: a softmax router with top-1 routing needs the softmax before the top-k
        # ("Please use --moe-router-pre-softmax when topk is 1")
        a.append("--moe-router-pre-softmax")
    if s.expert_gemm == "grouped":
        # Transformer Engine's GroupedTensor path: the experts' split sizes stay on the device
        # (transformer_config.py moe_use_grouped_tensor: "CUDA split metadata so it can be captured in
        # CUDA graphs"), where TEGroupedMLP otherwise takes them to the host (experts.py .tolist())
        a.append("--moe-use-grouped-tensor")
    bits = moe_layer_pattern(llm)
    if not all(bits):
        a += ["--moe-layer-freq", _run_length_pattern(bits)]
    if moe.shared_experts:
        # "Shared expert total ffn hidden size. It should be equal to num_shared_experts *
        # ffn_size_of_each_shared_expert" (TransformerConfig.moe_shared_expert_intermediate_size)
        a += ["--moe-shared-expert-intermediate-size", str(moe.shared_experts * moe.shared_ffn_size)]
        if moe.shared_expert_gate:
            a.append("--moe-shared-expert-gate")
    # dispatcher: TransformerConfig.moe_token_dispatcher_type Literal['allgather', 'alltoall', 'flex'];
    # DeepEP is the flex dispatcher with backend deepep (--moe-enable-deepep is deprecated there)
    if s.moe_dispatcher == "deepep":
        a += ["--moe-token-dispatcher-type", "flex", "--moe-flex-dispatcher-backend", "deepep"]
    else:
        a += ["--moe-token-dispatcher-type", s.moe_dispatcher]
    if moe.capacity_factor != 1.0:
        # the designer prices capacity_factor x the routed tokens: Megatron's capacity with padding
        # to it (dropless, Megatron's default, when the factor is 1)
        a += ["--moe-expert-capacity-factor", f"{moe.capacity_factor:g}", "--moe-pad-expert-input-to-capacity"]
    if moe.routing_groups is not None:
        # the model's own group-limited router (MoESpec.router_groups), whatever the layout
        a += ["--moe-router-num-groups", str(moe.router_groups), "--moe-router-group-topk", str(moe.router_group_topk)]
    elif moe.max_nodes_per_token is not None and s.ep > 1:
        # node-limited routing (TransformerConfig.moe_router_num_groups: "Node-limited routing: set
        # 'moe_router_num_groups' equal to number of nodes in EP group"). Expert ranks are laid out
        # expert-tp innermost, then ep (parallel_state.py expert mesh 'tp-ep-dp-pp'), so one EP group
        # spans ceil(ep * etp / gpus_per_node) nodes.
        etp = llm.expert_tp_for(s.tp, s.expert_tp)
        span = max(1, -(-s.ep * etp // gpus_per_node))
        if span > moe.max_nodes_per_token and moe.experts % span == 0:
            a += ["--moe-router-num-groups", str(span), "--moe-router-group-topk", str(moe.max_nodes_per_token)]
    return a


def _zero_args(s: Strategy, training: TrainingSpec, notes: list[str]) -> list[str]:
    a: list[str] = []
    dp_ranks = s.dp * s.cp  # Megatron's distributed optimizer and FSDP shard over the dp x cp group
    if training.optimizer == "muon":
        # Muon (TrainingSpec.optimizer), blockwise Newton-Schulz on each TP block as designer prices it.
        # Under ZeRO-1 the layer-wise distributed optimizer: arguments.py turns --use-distributed-optimizer
        # with an emerging optimizer into use_layer_wise_distributed_optimizer (and the deprecated
        # --optimizer dist_muon into both), and the gradients are all-reduced
        a += ["--optimizer", "muon", "--muon-num-ns-steps", str(training.muon_ns_steps), "--muon-tp-mode", "blockwise"]
        if s.zero_stage == 1:
            a.append("--use-distributed-optimizer")
            notes.append("Muon under ZeRO-1: this Megatron-LM routes the embedding and output layer through the "
                         "distributed optimizer (0044db1f, #4771), spreading their AdamW state evenly; designer "
                         "priced Megatron-Core 0.17's layer-wise optimizer, where one rank holds each whole")
    elif s.zero_stage == 1:
        # ZeRO-1: the distributed optimizer shards optimizer state and reduce-scatters gradients
        a.append("--use-distributed-optimizer")
    elif s.zero_stage in (2, 3):
        # ZeRO-2 / ZeRO-3 shard gradients (and weights) in memory: Megatron-FSDP's sharding strategies
        # optim_grads / optim_grads_params (arguments.py --data-parallel-sharding-strategy). Not
        # --use-torch-fsdp2: arguments.py asserts it off with pipeline and expert parallelism and
        # fp16. Megatron-FSDP asserts --ckpt-format fsdp_dtensor; its default version 1 switches
        # the distributed optimizer on itself.
        strategy = "optim_grads" if s.zero_stage == 2 else "optim_grads_params"
        a += ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", strategy, "--ckpt-format", "fsdp_dtensor"]
        # Megatron-FSDP keeps and reduces gradients in the model's dtype unless told (arguments.py
        # --megatron-fsdp-main-grads-dtype / --megatron-fsdp-grad-comm-dtype, default 'auto'): write
        # the accumulation and reduction widths designer priced (TrainingSpec.grad_accumulation_dtype,
        # grad_reduce_dtype)
        a += ["--megatron-fsdp-main-grads-dtype", training.grad_accumulation_dtype,
              "--megatron-fsdp-grad-comm-dtype", training.grad_reduce_dtype]
        if s.zero_stage == 3 and not s.fsdp_reshard_after_forward:
            notes.append("ZeRO-3 without resharding after forward: Megatron-FSDP has no such switch "
                         "(--torch-fsdp2-no-reshard-after-forward is Torch-FSDP2's)")
    if s.zero_stage >= 1 and s.shard_group_size is not None and s.shard_group_size < dp_ranks:
        # HSDP: the shards span groups of shard_group_size dp x cp ranks, replicated across groups
        # (DistributedDataParallelConfig.num_distributed_optimizer_instances; mcore_fsdp_adapter.py:
        # enable_hsdp = num_distributed_optimizer_instances > 1)
        if dp_ranks % s.shard_group_size:
            raise ValueError(f"shard_group_size {s.shard_group_size} does not divide dp*cp = {dp_ranks}")
        a += ["--num-distributed-optimizer-instances", str(dp_ranks // s.shard_group_size)]
    if s.dp_bucket_bytes is not None:
        notes.append(f"DP bucket of {s.dp_bucket_bytes:.3g} bytes: --ddp-bucket-size counts elements; "
                     "set it for the gradient dtype")
    zpp = [n for n, on in (("qwZ", s.zeropp_quantized_weights), ("qgZ", s.zeropp_quantized_gradients),
                           ("hpZ", s.zeropp_hierarchical_partition)) if on]
    if zpp:
        notes.append(f"ZeRO++ {'/'.join(zpp)}: DeepSpeed only, no Megatron-LM flag")
    return a


def _recompute_args(s: Strategy, training: TrainingSpec, notes: list[str]) -> list[str]:
    if s.recompute == Recompute.selective:
        modules = [m.value for m in s.recompute_modules] or ["core_attn"]  # Megatron's default too
        if (training.precision == Precision.fp8 and training.fp8_recipe == Fp8Recipe.delayed
                and {"moe_act", "layernorm"} & set(modules)):
            notes.append("Megatron-LM refuses moe_act/layernorm recompute with delayed fp8 scaling "
                         "(TransformerConfig.__post_init__): use --fp8-recipe tensorwise")
        if modules == ["alternate_matmuls"]:
            # torchtitan's per-op policy has no Megatron-LM counterpart; core_attn is its default
            notes.append("Megatron-LM has no per-op checkpointing (priced: torchtitan's alternate_matmuls): "
                         "--recompute-modules core_attn written, which recomputes the attention core instead")
            modules = ["core_attn"]
        if "attn_out_proj" in modules:
            # MaxText's remat vocabulary, not a Megatron-LM --recompute-modules choice
            modules = [m for m in modules if m != "attn_out_proj"] or ["core_attn"]
            notes.append("Megatron-LM has no recompute module for the attention output projection "
                         "(priced: attn_out_proj recomputed): it keeps that projection's input, "
                         "more memory and less recomputation than priced")
        return ["--recompute-granularity", "selective", "--recompute-modules", *modules]
    if s.recompute == Recompute.full and s.recompute_num_layers:
        # only the first N layers of each stage's model chunk recomputed, the rest keep their activations
        return ["--recompute-granularity", "full", "--recompute-method", "block",
                "--recompute-num-layers", str(s.recompute_num_layers)]
    if s.recompute == Recompute.full:
        # every layer's input kept, the layer recomputed: uniform method, one layer per group
        return ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
    return []


# TrainingSpec.low_precision_casts "fused" prices a compiler's fused quantisation (XLA); the launch's
# framework quantises in kernels of its own, at the calibrated in-training rate
_FUSED_CASTS_NOTE = ("low_precision_casts fused: designer priced the quantisation folded into neighbouring kernels and "
                     "the GEMMs at the low-precision kernel rate (a compiler such as XLA); {framework} runs its casts as "
                     "separate kernels, slower than priced: price low_precision_casts kernels for this launch")


def _note_fused_casts(training: TrainingSpec, framework: str, notes: list[str]) -> None:
    if training.low_precision_casts == "fused" and training.precision in (Precision.fp8, Precision.mxfp8, Precision.nvfp4):
        notes.append(_FUSED_CASTS_NOTE.format(framework=framework))


def _low_param_gather(s: Strategy, training: TrainingSpec, notes: list[str]) -> bool:
    """Whether the low-precision weight gather is written: where the perf model prices it
    (TrainingSpec.low_precision_param_gather, Megatron-LM's own conditions), else a note says why not."""
    offloaded = s.offload_optimizer or s.offload_weights
    if not training.fp8_param_gather or bool(training.low_precision_param_gather(s.zero_stage, offloaded)):
        return training.fp8_param_gather
    why = ("runs it only with the distributed optimizer or Megatron-FSDP (ZeRO-1 and up)" if s.zero_stage < 1 else
           "runs it beside an offloaded optimizer only under delayed scaling")
    notes.append(f"8-bit weight gather not written: Megatron-LM {why}; priced with 16-bit weights")
    return False


def _precision_args(s: Strategy, training: TrainingSpec, notes: list[str]) -> list[str]:
    p = training.precision
    param_gather = _low_param_gather(s, training, notes) if p in (Precision.fp8, Precision.mxfp8, Precision.nvfp4) else False
    if p == Precision.fp16:
        return ["--fp16"]
    a = ["--bf16"]  # fp8 / fp4 GEMMs run inside a bf16 model (Transformer Engine recipes)
    if p == Precision.fp8:
        # --fp8-recipe choices tensorwise|delayed|mxfp8|blockwise|custom: tensorwise is TE's
        # Float8CurrentScaling (this step's amax), the designer's 'current'
        recipe = {Fp8Recipe.delayed: "delayed", Fp8Recipe.current: "tensorwise",
                  Fp8Recipe.blockwise: "blockwise"}.get(training.fp8_recipe)
        if recipe is None:
            recipe = "tensorwise"
            notes.append(f"fp8 recipe {training.fp8_recipe.value}: Transformer Engine has no per-row recipe; "
                         "tensorwise (current scaling) written")
        # hybrid: E4M3 forward, E5M2 gradients; DeepSeek-style blockwise scaling uses E4M3 throughout
        fmt = "e4m3" if recipe == "blockwise" else "hybrid"
        a += ["--fp8-format", fmt, "--fp8-recipe", recipe]
        if param_gather:
            a.append("--fp8-param-gather")
    elif p == Precision.mxfp8:
        a += ["--fp8-format", "e4m3", "--fp8-recipe", "mxfp8"]
        if param_gather:
            a.append("--fp8-param-gather")
    elif p == Precision.nvfp4:
        a += ["--fp4-format", "e2m1", "--fp4-recipe", "nvfp4"]
        if param_gather:
            a.append("--fp4-param-gather")  # arguments.py: must go with --fp4-format
    _note_fused_casts(training, "Transformer Engine", notes)
    if training.fp8_attention:
        # arguments.py lists fp8_dot_product_attention among the TransformerConfig fields with no
        # command-line option: it is set in the model config (Megatron-Bridge: fp8_dot_product_attention)
        notes.append("fp8_attention: Megatron-LM has no command-line option for TransformerConfig."
                     "fp8_dot_product_attention; set it to True in the model config")
    # 16-bit master gradients / Adam moments: the precision-aware optimizer (arguments.py asserts it
    # for --main-grads-dtype other than fp32 and for --optimizer-cpu-offload)
    if training.grad_accumulation_dtype == "bf16":
        a += ["--main-grads-dtype", "bf16"]
    if training.optimizer_state_dtype == "bf16":
        a += ["--exp-avg-dtype", "bf16", "--exp-avg-sq-dtype", "bf16"]
    return a


def _gradient_wire_note(training: TrainingSpec, notes: list[str]) -> None:
    """Megatron-LM reduces the data-parallel gradients in the main gradients' dtype: fp32 for a bf16
    model with fp32 main gradients (arguments.py: accumulate_allreduce_grads_in_fp32, unless
    --grad-reduce-in-bf16, which also accumulates in bf16), 16 bits otherwise. Say so where designer
    priced the other width (TrainingSpec.grad_reduce_dtype); no flag is written, since reducing in bf16
    would also change how the gradients accumulate."""
    megatron_fp32 = training.precision != Precision.fp16 and training.grad_accumulation_dtype == "fp32"
    if megatron_fp32 and training.grad_reduce_dtype == "bf16":
        notes.append("gradient reduction: designer priced 16-bit gradients (grad_reduce_dtype bf16); Megatron-LM "
                     "reduces fp32 main gradients in fp32, twice the bytes; --grad-reduce-in-bf16 reduces and "
                     "accumulates them in bf16, or price grad_reduce_dtype: fp32")
    elif not megatron_fp32 and training.grad_reduce_dtype == "fp32":
        notes.append("gradient reduction: designer priced fp32 gradients (grad_reduce_dtype fp32); Megatron-LM "
                     "reduces them in the 16-bit main-gradient dtype here, half the bytes")


def megatron_launch(llm: LLMSpec, training: TrainingSpec, s: Strategy, n_gpus: int, gpus_per_node: int,
                    *, script: str = MEGATRON_SCRIPT) -> MegatronLaunch:
    """The full Megatron-LM launch of one strategy (Megatron-LM commit MEGATRON_COMMIT)."""
    nodes, per_node = _check_gpus(s, n_gpus, gpus_per_node)
    notes: list[str] = [f"designer: {llm.name} on {n_gpus} GPUs ({nodes} x {per_node}); "
                        f"Megatron-LM {MEGATRON_COMMIT[:12]}"]
    if nodes == 1:
        torchrun = ["--standalone", "--nnodes", "1", "--nproc-per-node", str(per_node)]
    else:
        # c10d rendezvous assigns node ranks itself; the endpoint is the first node's address
        torchrun = ["--nnodes", str(nodes), "--nproc-per-node", str(per_node), "--rdzv-backend", "c10d",
                    "--rdzv-endpoint", "$MASTER_ADDR:$MASTER_PORT", "--rdzv-id", "$JOB_ID"]
    a = _model_args(llm, training, notes)
    a += ["--tensor-model-parallel-size", str(s.tp), "--pipeline-model-parallel-size", str(s.pp)]
    a += megatron_pipeline_layout(s, llm)
    if s.schedule == Schedule.gpipe and s.pp > 1:
        notes.append("GPipe schedule: Megatron-LM runs 1F1B (same bubble, less activation memory)")
    elif s.schedule == Schedule.zero_bubble and s.pp > 1:
        notes.append("zero-bubble (ZB-H1) schedule: not in Megatron-LM; 1F1B written")
    elif s.schedule == Schedule.dualpipe and s.pp > 1:
        notes.append("DualPipe schedule: not in Megatron-LM; 1F1B written")
    if s.sequence_parallel:
        a.append("--sequence-parallel")
    if s.cp > 1:
        # TE DotProductAttention cp_comm_type values "p2p", "all_gather", "a2a" (transformer_config.py
        # cp_comm_type docstring; arguments.py's help text says 'allgather', which TE does not accept)
        a += ["--context-parallel-size", str(s.cp), "--cp-comm-type", s.cp_comm]
        if not s.cp_load_balance:
            notes.append("CP without causal load balancing: Megatron-LM always balances")
    if llm.moe is not None:
        etp = llm.expert_tp_for(s.tp, s.expert_tp)
        a += ["--expert-model-parallel-size", str(s.ep), "--expert-tensor-parallel-size", str(etp)]
        a += _moe_args(llm, s, gpus_per_node, notes)
        if training.moe_load_balance == "forced":
            # priced with every EP rank at the mean load, which Megatron's benchmarking switch gives
            # (router.py apply_random_logits); a model that must learn trains without it
            a.append("--moe-router-force-load-balancing")
            notes.append("MoE routing: designer priced forced balance (moe_load_balance forced), so "
                         "--moe-router-force-load-balancing is written, which replaces the router's logits with "
                         "random ones: a benchmark, not a training run; price moe_load_balance: learned for one")
    if s.rank_order == RankOrder.tp_cp_pp_dp:
        a.append("--use-tp-pp-dp-mapping")  # initialize.py: order 'tp-cp-ep-pp-dp' instead of 'tp-cp-ep-dp-pp'
    a += ["--micro-batch-size", str(s.microbatch_size), "--global-batch-size", str(global_batch(s, training)),
          "--train-iters", str(train_iterations(s, training))]
    if s.pipeline_flushes > 1 and s.pp > 1:
        notes.append(f"pipeline_flushes {s.pipeline_flushes}: Megatron-LM runs every microbatch of an iteration in "
                     "one pipeline schedule (schedules.py), so it fills and drains the pipeline once, not "
                     f"{s.pipeline_flushes} times")
    notes.append("optimizer hyperparameters are not in the designer records: add --lr, --min-lr, "
                 "--lr-decay-style, --lr-warmup-iters, --weight-decay, --clip-grad")
    a += _recompute_args(s, training, notes)
    a += _zero_args(s, training, notes)
    fsdp = s.zero_stage in (2, 3)
    if s.overlap_dp_comm and s.dp * s.cp > 1:
        a.append("--overlap-grad-reduce")
        if s.zero_stage >= 1 and training.optimizer != "muon":
            # arguments.py: --overlap-param-gather needs the distributed optimizer or Megatron-FSDP
            # (Muon's layer-wise gather runs after the step, as designer prices it)
            a.append("--overlap-param-gather")
    if not s.overlap_pp_comm and s.pp > 2 and s.schedule == Schedule.interleaved:
        a.append("--no-overlap-p2p-communication")  # overlap_p2p_comm is on by default (interleaved only)
    elif not s.overlap_pp_comm and s.pp == 2 and s.schedule == Schedule.interleaved:
        # arguments.py: with the overlap off the interleaved schedule needs pp > 2
        notes.append("pipeline sends: Megatron-LM overlaps them on an interleaved pp 2 schedule (it refuses "
                     "--no-overlap-p2p-communication there); not written")
    if s.pipeline_scatter_gather and s.pp > 1 and s.tp > 1 and not s.sequence_parallel:
        notes.append("pipeline scatter/gather: Megatron-Core sends the whole activation from every TP rank "
                     "(p2p_communication.py; the 1/tp slices of SC'21 Megatron-LM are gone): not written, "
                     "its pipeline sends take tp times the bytes priced")
    if s.overlap_tp_comm and s.tp > 1:
        if s.sequence_parallel:
            a.append("--tp-comm-overlap")  # arguments.py asserts --sequence-parallel with it
        else:
            notes.append("TP communication overlap needs sequence parallelism in Megatron-LM: not written")
    ep_overlap = False
    if s.overlap_ep_comm and llm.moe is not None and s.ep > 1:
        # TransformerConfig.__post_init__ on overlap_moe_expert_parallel_comm: alltoall/flex
        # dispatcher, virtual pipeline when pp > 1, no full recompute, no 'moe' recompute module, at
        # most one MTP layer, and a bf16/fp16 model (always here: fp8/fp4 GEMMs run in a --bf16 model)
        why = []
        if s.moe_dispatcher == "allgather":
            why.append("the allgather dispatcher")
        if s.pp > 1 and not (s.schedule == Schedule.interleaved and s.virtual_stages > 1):
            why.append("pp > 1 without virtual stages")
        if s.recompute == Recompute.full or "moe" in [m.value for m in s.recompute_modules]:
            why.append("recompute of the MoE block")
        if llm.mtp_layers > 1:
            why.append(f"{llm.mtp_layers} MTP layers")
        if why:
            notes.append(f"EP all-to-all overlap not written: Megatron-LM refuses it with {', '.join(why)}")
        else:
            ep_overlap = True
            a.append("--overlap-moe-expert-parallel-comm")
    if s.cuda_graphs:
        # the whole forward-backward in one graph, as priced (Strategy.cuda_graphs); 'local' would
        # capture per layer, leaving the collectives, embedding and loss to the host, and TransformerConfig
        # refuses it with full recompute or CPU offloading. arguments.py: full_iteration needs the NaN
        # check off (--enable-cuda-graph is the deprecated spelling)
        a += ["--cuda-graph-impl", "full_iteration", "--no-check-for-nan-in-loss-and-grad"]
        if llm.dropout and s.recompute == Recompute.selective:
            notes.append("CUDA graphs: TransformerConfig refuses attention or hidden dropout with graphed "
                         "recomputation; drop the graphs or the dropout")
    # attention kernel: TransformerConfig.attention_backend (AttnBackend flash|fused|unfused|local|auto);
    # 'fused' is TE's cuDNN fused attention, 'auto' lets TE pick the generation's best
    backend = {AttentionKernel.flash: "auto", AttentionKernel.flash2: "flash", AttentionKernel.flash3: "flash",
               AttentionKernel.cudnn: "fused", AttentionKernel.unfused: "unfused",
               AttentionKernel.triton: "flash"}[s.attention_kernel]
    a += ["--attention-backend", backend]
    if s.attention_kernel == AttentionKernel.triton:
        notes.append("attention_kernel triton (llm-foundry's Triton kernel) has no Megatron-LM backend: written as "
                     "FlashAttention-2, which runs faster than designer priced")
    if s.qkv_projection == "separate":
        notes.append("qkv_projection separate: Megatron-Core computes Q, K and V in one GEMM (linear_qkv), "
                     "which runs faster than designer priced")
    if s.activation_layout == "batch_first" and s.sequence_parallel and s.tp > 1:
        notes.append("activation_layout batch_first: Megatron-Core keeps activations sequence-first ([s, b, h]), "
                     "so its sequence-parallel collectives copy nothing, faster than designer priced")
    if s.cross_entropy == "eager":
        notes.append("cross_entropy eager: Megatron-Core's vocab-parallel cross entropy works in place on the fp32 "
                     "logits, in less memory and time than designer priced")
    if s.recomputes_whole_mlp and s.recompute_replay == "needed":
        notes.append("recompute_replay needed: Megatron-Core checkpoints reentrantly, rerunning each recomputed "
                     "module whole (the MLP down projection too), slower than designer priced")
    if "rope" in s.unfused_ops and llm.rotary_embedding:
        a.append("--no-rope-fusion")  # Megatron-LM's unfused rotary embedding, as priced
    # Megatron-Core clamps a gated activation and adds expert output biases op by op, whatever is set
    # (fused_bias_geglu.py weighted_bias_quick_geglu_impl; experts.py _apply_bias)
    has = {"activation_clamp": llm.activation_clamp is not None, "expert_bias": llm.moe is not None and llm.linear_bias}
    fused_here = [op for op, present in has.items() if present and op not in s.unfused_ops]
    if fused_here and s.elementwise_kernels == "fused":
        notes.append(f"unfused_ops lacks {', '.join(fused_here)}: Megatron-Core runs "
                     f"{'it' if len(fused_here) == 1 else 'them'} op by op, slower than designer priced")
    if s.activation_input_fp8:
        # arguments.py lists activation_func_fp8_input_store among the TransformerConfig fields with
        # no command-line option: it is set in the model config (Megatron-Bridge: the model provider)
        notes.append("activation_input_fp8: Megatron-LM has no command-line option for TransformerConfig."
                     "activation_func_fp8_input_store; set it to True in the model config")
    if s.attention_kernel in (AttentionKernel.flash2, AttentionKernel.flash3, AttentionKernel.triton):
        a += ["--flash-attention-version", "3" if s.attention_kernel == AttentionKernel.flash3 else "2"]
    precision_aware = (training.grad_accumulation_dtype == "bf16" or training.optimizer_state_dtype == "bf16"
                       or s.offload_optimizer or s.offload_weights)
    if s.offload_optimizer or s.offload_weights:
        a += ["--optimizer-cpu-offload", "--optimizer-offload-fraction", "1.0"]
    if precision_aware:
        a.append("--use-precision-aware-optimizer")
        if s.zero_stage == 0:
            # megatron/core/optimizer/__init__.py: "--use-precision-aware-optimizer only supported
            # with distributed optimizer"
            notes.append("16-bit optimizer state / optimizer offload needs the distributed optimizer in "
                         "Megatron-LM: add --use-distributed-optimizer (ZeRO-1)")
    if s.offload_weights:
        notes.append("weight offload: FSDP2 CPUOffloadPolicy / ZeRO-Infinity, no Megatron-LM flag; optimizer offload written")
    if s.offload_activation_layers:
        # arguments.py: --cpu-offloading-num-layers > 0 sets cpu_offloading itself
        a += ["--cpu-offloading-num-layers", str(s.offload_activation_layers)]
    a += _precision_args(s, training, notes)
    if not training.fp32_master_weights:
        notes.append("fp32_master_weights false: Megatron-LM keeps fp32 main parameters beside the 16-bit model "
                     "(4 B per parameter designer did not price)")
    if s.zero_stage <= 1:
        _gradient_wire_note(training, notes)  # Megatron-FSDP (ZeRO-2/3) is told both widths above
    env: list[tuple[str, str]] = []
    if (s.tp > 1 or s.cp > 1) and not fsdp and not ep_overlap:
        # arguments.py asserts CUDA_DEVICE_MAX_CONNECTIONS=1 with tp or cp > 1 before Blackwell (one
        # hardware queue keeps TP/CP communication kernels in issue order); FSDP and the EP overlap
        # want more queues, and only warn
        env.append(("CUDA_DEVICE_MAX_CONNECTIONS", "1"))
    return MegatronLaunch(env=tuple(env), torchrun_args=tuple(torchrun), script=script, script_args=tuple(a),
                          notes=tuple(notes))


def megatron_command(llm: LLMSpec, training: TrainingSpec, s: Strategy, n_gpus: int, gpus_per_node: int) -> str:
    return megatron_launch(llm, training, s, n_gpus, gpus_per_node).command()


# ----------------------------------------------------------------------------- torchtitan
@functools.cache
def torchtitan_flavors() -> Mapping[str, Any]:
    """The committed llama3 flavor registry of torchtitan TORCHTITAN_COMMIT (generate.py)."""
    return json.loads((LAUNCH_DATA / "torchtitan_flavors.json").read_text())


_LLAMA3_SHAPE = ("layers", "hidden_size", "heads", "kv_heads", "head_dim", "ffn_size", "vocab_size")


def llama3_flavor(llm: LLMSpec, flavors: Mapping[str, Any] | None = None) -> str | None:
    """The torchtitan llama3 flavor whose meta-device model has exactly this model's shape, or None.
    Debug and attention-variant flavors (flex, varlen) are skipped: they are the plain ones' shapes."""
    reg = (flavors or torchtitan_flavors())["llama3"]
    mine = {"layers": llm.layers, "hidden_size": llm.hidden_size, "heads": llm.heads,
            "kv_heads": llm.kv_heads_effective, "head_dim": llm.head_dim_effective, "ffn_size": llm.ffn_size,
            "vocab_size": llm.vocab_size}
    for name, shape in reg.items():
        if shape["attn_type"] == "sdpa" and all(shape[k] == mine[k] for k in _LLAMA3_SHAPE):
            return name
    return None


def _llama3_unsupported(llm: LLMSpec) -> list[str]:
    """What of the model torchtitan's llama3 Transformer (SwiGLU, RMSNorm, no biases, untied output,
    head_dim = dim / n_heads: torchtitan/models/llama3/model/model.py) cannot express."""
    why = []
    if not llm.gated_mlp:
        why.append("a non-gated (GELU) MLP")
    if llm.norm != "rmsnorm":
        why.append("LayerNorm")
    if llm.linear_bias:
        why.append("linear biases")
    if llm.tied_embeddings:
        why.append("tied embeddings")
    if llm.head_dim is not None and llm.head_dim != llm.hidden_size // llm.heads:
        why.append(f"head_dim {llm.head_dim} != hidden/heads")
    if llm.mla is not None:
        why.append("multi-head latent attention")
    if llm.mtp_layers:
        why.append("multi-token prediction")
    if llm.attention_window is not None:
        why.append(f"{llm.attention_window.kind} local attention")
    if llm.dropout:
        why.append("dropout")
    if llm.qk_norm:
        why.append("QK-norm")
    if llm.qkv_bias:
        why.append("a QKV bias")
    if llm.nope_layer_interval is not None:
        why.append("layers without RoPE")
    return why


def _llama3_ffn_args(dim: int, ffn: int) -> tuple[int, float | None]:
    """(multiple_of, ffn_dim_multiplier) that make torchtitan's FeedForward hidden size `ffn`
    (torchtitan/models/llama3/model/model.py FeedForward at TORCHTITAN_COMMIT: h = int(2 * 4 * dim / 3);
    h = int(ffn_dim_multiplier * h); h = multiple_of * ceil(h / multiple_of)). multiple_of = ffn rounds
    any h in (0, ffn] up to ffn."""
    h = int(2 * 4 * dim / 3)
    mult = None if h <= ffn else math.floor(ffn / h * 1e6) / 1e6
    hh = h if mult is None else int(mult * h)
    assert ffn * math.ceil(hh / ffn) == ffn, (dim, ffn, mult)
    return ffn, mult


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a JSON string is a TOML basic string
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"no TOML form for {v!r}")


def _toml(sections: list[tuple[str, dict[str, Any], list[str]]], header: list[str]) -> str:
    out = [f"# {h}" if h else "#" for h in header]
    for name, fields, comments in sections:
        out.append("")
        out += [f"# {c}" for c in comments]
        out.append(f"[{name}]")
        out += [f"{k} = {_toml_value(v)}" for k, v in fields.items()]
    return "\n".join(out) + "\n"


def _stage_modules(s: Strategy, llm: LLMSpec) -> list[list[str]]:
    """torchtitan's module_fqns_per_model_part for the designer's stage split: part i is pipeline
    stage i; looped schedules put stage i on rank i % pp, so chunk k of rank r is part k * pp + r.
    llama3 module names: tok_embeddings, layers.<i>, norm, output (model.py Transformer)."""
    v = s.virtual_stages if s.schedule == Schedule.interleaved else 1
    stages = pipeline_stage_layers(llm.layers, s.pp, s.pp_first_stage_layers, s.pp_last_stage_layers)
    counts = [0] * (s.pp * v)
    for r, n in enumerate(stages):
        for k in range(v):
            counts[k * s.pp + r] = n // v + (k < n % v)
    parts, first = [], 0
    for c in counts:
        parts.append([f"layers.{i}" for i in range(first, first + c)])
        first += c
    parts[0].insert(0, "tok_embeddings")
    parts[-1] += ["norm", "output"]
    return parts


def torchtitan_launch(llm: LLMSpec, training: TrainingSpec, s: Strategy, n_gpus: int, gpus_per_node: int,
                      *, flavors: Mapping[str, Any] | None = None) -> TorchtitanLaunch:
    """A torchtitan TOML (JobConfig of TORCHTITAN_COMMIT) for a dense model, or the reason there is none."""
    nodes, per_node = _check_gpus(s, n_gpus, gpus_per_node)
    if llm.moe is not None:
        return TorchtitanLaunch(None, None, None, (
            f"{llm.name} is MoE: torchtitan's MoE models (deepseek_v3, llama4, qwen3, gpt_oss) are not in the "
            "committed flavor registry, so no flavor of exactly this shape can be named, and a TOML cannot give a "
            "model's shape (the [model] section has only name and flavor); no TOML written"), ())
    unsupported = _llama3_unsupported(llm)
    if unsupported:
        return TorchtitanLaunch(None, None, None, (
            f"{llm.name} has {', '.join(unsupported)}: torchtitan's dense decoder (llama3: SwiGLU, RMSNorm, "
            "no biases, untied, torchtitan/models/llama3/model/model.py) cannot express it; no TOML written"), ())
    if s.zero_stage == 0 and ((s.dp > 1 and (s.tp > 1 or s.pp > 1)) or s.cp > 1):
        # torchtitan/models/llama3/infra/parallelize.py: DDP (dp_replicate > 1) only as the sole
        # parallelism ("DDP has not supported > 1D parallelism"), and FSDP over the cp ranks whenever
        # cp > 1 (parallel_dims.py: fsdp_enabled = dp_shard_enabled or cp_enabled); TP or PP alone runs
        return TorchtitanLaunch(None, None, None, (
            f"ZeRO-0 (replicated weights) with tp {s.tp}, pp {s.pp}, cp {s.cp}: torchtitan applies DDP only when data "
            "parallelism is the sole parallelism, and FSDP over the cp ranks whenever cp > 1; no TOML written"), ())
    notes: list[str] = []
    flavor = llama3_flavor(llm, flavors)
    gb = global_batch(s, training)
    header = [f"torchtitan JobConfig (pytorch/torchtitan {TORCHTITAN_COMMIT}, torchtitan/config/job_config.py)",
              f"designer: {llm.name} on {n_gpus} GPUs ({nodes} x {per_node}): tp {s.tp} pp {s.pp} dp {s.dp} cp {s.cp}",
              (f"run: NGPU={per_node} CONFIG_FILE=<this file> ./run_train.sh" if nodes == 1 else
               # run_train.sh at that commit is one node (--rdzv_endpoint localhost:0); the same torchrun
               # across nodes, with a shared c10d endpoint
               f"run on each of the {nodes} nodes: torchrun --nnodes {nodes} --nproc-per-node {per_node} "
               '--rdzv-backend c10d --rdzv-endpoint "$MASTER_ADDR:$MASTER_PORT" --rdzv-id "$JOB_ID" '
               "-m torchtitan.train --job.config_file <this file>"),
              "torchtitan read TOML until commit 238fa99; later ones take Python configs (--module/--config)."]
    model: dict[str, Any] = {"name": "llama3"}
    model_comments = []
    if flavor is not None:
        model["flavor"] = flavor
        model_comments.append(f"flavor {flavor}: torchtitan/models/llama3/__init__.py llama3_args, same shape as {llm.name}")
    else:
        mult_of, mult = _llama3_ffn_args(llm.hidden_size, llm.ffn_size)
        margs = (f"dim={llm.hidden_size}, n_layers={llm.layers}, n_heads={llm.heads}, n_kv_heads={llm.kv_heads_effective}, "
                 f"vocab_size={llm.vocab_size}, multiple_of={mult_of}"
                 + (f", ffn_dim_multiplier={mult}" if mult is not None else ""))
        model_comments += [
            f"No llama3 flavor of torchtitan {TORCHTITAN_COMMIT[:7]} has the shape of {llm.name}, and the TOML",
            "cannot give a shape: register one in torchtitan/models/llama3/__init__.py llama3_args,",
            f'  "{llm.name}": TransformerModelArgs({margs}, rope_theta=<the model\'s>),',
            f'then set flavor = "{llm.name}" here (without a flavor torchtitan builds its debugmodel).']
        notes.append(f"no torchtitan flavor of the shape of {llm.name}: the TOML says which to register")
    model_comments.append("hf_assets_path: the model's tokenizer folder (scripts/download_hf_assets.py)")
    if training.precision in (Precision.fp8, Precision.mxfp8):
        model["converters"] = ["quantize.linear.float8" if training.precision == Precision.fp8 else "quantize.linear.mx"]
    dp_total = s.dp * s.cp
    # torchtitan accumulates global_batch_size / (local_batch_size * dp) micro-steps per step
    # (job_config.py Training.global_batch_size): without PP local_batch_size is the microbatch;
    # with PP it is one pipeline schedule's batch, cut into pipeline_parallel_microbatch_size pieces,
    # and each accumulation step runs its own schedule (Strategy.pipeline_flushes of them)
    local = s.microbatch_size if s.pp == 1 else gb // (s.dp * s.pipeline_flushes)
    training_fields: dict[str, Any] = {"local_batch_size": local, "global_batch_size": gb,
                                       "seq_len": training.sequence_length,
                                       "steps": train_iterations(s, training)}
    training_comments = ["local_batch_size: sequences per data-parallel rank per forward"
                         + (" (the pipeline splits it into microbatches)" if s.pp > 1 else "")]
    if training.precision == Precision.fp16:
        notes.append("fp16: torchtitan mixes in bfloat16 or float32 only; bfloat16 written")
    training_fields["mixed_precision_param"] = "bfloat16"
    if not training.fp32_master_weights:
        notes.append("fp32_master_weights false: torchtitan builds the model in float32 and FSDP2 keeps the fp32 "
                     "shards as the master (4 B per parameter designer did not price)")
    # job_config.py at TORCHTITAN_COMMIT: mixed_precision_reduce is Literal['float32']
    training_fields["mixed_precision_reduce"] = "float32"
    if training.grad_reduce_dtype == "bf16":
        notes.append(f"gradient reduction: designer priced 16-bit gradients (grad_reduce_dtype bf16); torchtitan "
                     f"{TORCHTITAN_COMMIT[:7]} reduces in float32 only, twice the bytes; price grad_reduce_dtype: fp32")
    if s.offload_weights:
        # FSDP2 CPUOffloadPolicy: parameters, gradients and optimizer state on the host
        training_fields["enable_cpu_offload"] = True
    elif s.offload_optimizer:
        notes.append("optimizer-only offload: torchtitan offloads all of FSDP's state (training.enable_cpu_offload) or nothing")
    # data parallelism: FSDP2 shards over the dp_shard x cp mesh (torchtitan/distributed/parallel_dims.py);
    # ZeRO-0 is DDP (replicate only); ZeRO-3 FSDP; HSDP when shard groups are smaller than dp x cp.
    par: dict[str, Any] = {}
    par_comments = []
    if s.zero_stage == 0:
        par["data_parallel_replicate_degree"], par["data_parallel_shard_degree"] = s.dp, 1
    else:
        group = s.shard_group_size or dp_total
        if group % s.cp or dp_total % group:
            raise ValueError(f"shard group {group} is not a multiple of cp {s.cp} dividing dp*cp {dp_total}")
        shard = group // s.cp
        par["data_parallel_replicate_degree"], par["data_parallel_shard_degree"] = s.dp // shard, shard
        if s.zero_stage in (1, 2):
            # no ZeRO-1/2 in torchtitan: FSDP2 that keeps the gathered weights from forward to
            # backward ("never" reshard) gathers them once per step and shards gradients like ZeRO-2
            par["fsdp_reshard_after_forward"] = "never"
            par_comments.append(f"ZeRO-{s.zero_stage}: torchtitan has FSDP2 only; reshard 'never' is the nearest")
        else:
            par["fsdp_reshard_after_forward"] = "always" if s.fsdp_reshard_after_forward else "never"
    par["tensor_parallel_degree"] = s.tp
    if s.qkv_projection == "fused":
        notes.append("qkv_projection fused: torchtitan's llama3 computes Q, K and V in three GEMMs (wq, wk, wv), "
                     "slower than designer priced where the K and V GEMMs are narrow")
    if s.tp > 1 and not s.sequence_parallel:
        notes.append("TP without sequence parallelism: torchtitan's llama3 TP plan always shards the norms' sequence")
    if s.tp > 1 and s.activation_layout == "sequence_first":
        notes.append("activation_layout sequence_first: torchtitan's activations are batch-first and its TP plan "
                     "shards their sequence (Shard(1)), so each sequence-parallel collective also copies the tensor, "
                     "slower than designer priced")
    if s.overlap_tp_comm and s.tp > 1:
        par["enable_async_tensor_parallel"] = True  # job_config.py: only effective with torch.compile
    par["pipeline_parallel_degree"] = s.pp
    if s.pp > 1:
        # schedule names: torch.distributed.pipelining.schedules.get_schedule_class
        sched = {Schedule.gpipe: "GPipe", Schedule.one_f_one_b: "1F1B", Schedule.interleaved: "Interleaved1F1B",
                 Schedule.zero_bubble: "1F1B", Schedule.dualpipe: "DualPipeV"}[s.schedule]
        if s.schedule == Schedule.zero_bubble:
            notes.append("ZB-H1 on one stage per rank is not a torch.distributed.pipelining schedule "
                         "(InterleavedZeroBubble / ZBVZeroBubble need several); 1F1B written")
        if s.schedule == Schedule.dualpipe:
            notes.append("DualPipe: torchtitan runs DualPipeV (the V-shaped, one-copy form); two stages per rank")
        par["pipeline_parallel_schedule"] = sched
        par["pipeline_parallel_microbatch_size"] = s.microbatch_size
        if s.schedule == Schedule.dualpipe:
            half = [n for st in pipeline_stage_layers(llm.layers, s.pp, s.pp_first_stage_layers, s.pp_last_stage_layers)
                    for n in (st // 2, st - st // 2)]
            if min(half) < 1:
                raise ValueError("DualPipeV needs at least two layers per pipeline stage")
            v2 = s.model_copy(update={"schedule": Schedule.interleaved, "virtual_stages": 2})
            par["module_fqns_per_model_part"] = _stage_modules(v2, llm)
        else:
            par["module_fqns_per_model_part"] = _stage_modules(s, llm)
        par_comments.append("module_fqns_per_model_part: the designer's layers per stage (and per virtual chunk)")
    par["context_parallel_degree"] = s.cp
    if s.cp > 1:
        # context_parallel_rotate_method: the KV exchange of torchtitan's ring attention; 'alltoall'
        # passes shards one step at a time (the designer's p2p ring), 'allgather' gathers them all
        if s.cp_comm == "a2a":
            notes.append("Ulysses (a2a) context parallelism is not in torchtitan: ring attention written")
        par["context_parallel_rotate_method"] = "allgather" if s.cp_comm == "all_gather" else "alltoall"
        if not s.cp_load_balance:
            notes.append("CP without load balancing: torchtitan's load balancer is turned off only with None, "
                         "which TOML cannot write")
    ac = {Recompute.none: "none", Recompute.selective: "selective", Recompute.full: "full"}[s.recompute]
    if s.recomputes_whole_mlp and s.recompute_replay == "module":
        notes.append("recompute_replay module: torchtitan's checkpoint wrapper is non-reentrant and stops once the "
                     "backward's tensors are back, so the MLP down projection does not rerun, faster than designer priced")
    ac_fields: dict[str, Any] = {"mode": ac}
    ac_comments = []
    if s.recompute == Recompute.full and s.recompute_num_layers:
        # torchtitan's integer option checkpoints every n-th layer in full: the same share of layers
        # as Megatron's block method recomputing N of a chunk's L layers, spread instead of first
        per_chunk = llm.layers / (s.pp * s.virtual_stages)
        every = max(1, round(per_chunk / s.recompute_num_layers))
        ac_fields = {"mode": "selective", "selective_ac_option": str(every)}
        ac_comments.append(f"every {every}-th layer in full: the designer recomputes the first "
                           f"{s.recompute_num_layers} of each chunk's {per_chunk:g} layers (Megatron's block method)")
    if s.recompute == Recompute.selective:
        # 'op': per-op selective checkpointing (saves matmul outputs, recomputes the rest): nearest to
        # Megatron's module list; the integer form is full checkpointing of every n-th layer
        ac_fields["selective_ac_option"] = "op"
        if s.recompute_modules != (RecomputeModule.alternate_matmuls,):
            wanted = ",".join(m.value for m in s.recompute_modules) or "core_attn"
            ac_comments.append(f"selective 'op': torchtitan's op-level policy; the designer recomputes {wanted}")
    sections: list[tuple[str, dict[str, Any], list[str]]] = [
        ("job", {"dump_folder": "./outputs", "description": f"{llm.name} designer front point"}, []),
        ("model", model, model_comments),
        ("training", training_fields, training_comments),
        ("parallelism", par, par_comments),
        ("activation_checkpoint", ac_fields, ac_comments),
    ]
    # torch.compile is what designer's fused element-wise kernels and fused loss price (Strategy.
    # elementwise_kernels, cross_entropy); async TP runs only under it
    async_tp = s.overlap_tp_comm and s.tp > 1
    components = (["model"] if s.elementwise_kernels == "fused" or async_tp else []) + (
        ["loss"] if s.cross_entropy == "fused" else [])
    if components:
        what = {"model": "model: fused norms, activations and RoPE",
                "loss": "loss: the cross entropy fused over the upcast logits"}
        compile_comments = ["; ".join(what[c] for c in components) + " (as designer priced them)"]
        if async_tp:
            compile_comments.append("async TP (parallelism.enable_async_tensor_parallel) runs only under torch.compile")
        if async_tp and s.elementwise_kernels == "eager":
            notes.append("elementwise_kernels eager with async TP: torchtitan compiles the model for async TP, "
                         "fusing the element-wise ops, faster than designer priced")
        sections.append(("compile", {"enable": True, "components": components}, compile_comments))
    if training.precision == Precision.fp8:
        # torchao float8 recipes: tensorwise (current per-tensor scale), rowwise; no delayed or
        # blockwise recipe in job_config.py Float8Linear.recipe_name
        recipe = {Fp8Recipe.current: "tensorwise", Fp8Recipe.rowwise: "rowwise"}.get(training.fp8_recipe)
        if recipe is None:
            recipe = "tensorwise"
            notes.append(f"fp8 recipe {training.fp8_recipe.value}: torchao float8 has tensorwise/rowwise; tensorwise written")
        f8: dict[str, Any] = {"recipe_name": recipe, "filter_fqns": ["output"]}
        if training.fp8_param_gather and recipe == "tensorwise":
            if not training.low_precision_param_gather(s.zero_stage, s.offload_optimizer or s.offload_weights):
                # priced with 16-bit weights (TrainingSpec.low_precision_param_gather)
                notes.append("float8 all-gather not written: priced with 16-bit weight gathers (ZeRO-0, or beside a non-delayed CPU offload)")
            else:
                f8["enable_fsdp_float8_all_gather"] = True
                f8["precompute_float8_dynamic_scale_for_fsdp"] = True
        sections.append(("quantize.linear.float8", f8, ["model.converters names this section (float8 training, torchao)"]))
    elif training.precision == Precision.mxfp8:
        sections.append(("quantize.linear.mx", {"recipe_name": "mxfp8_cublas", "filter_fqns": ["output"]},
                         ["MX training (torchao mx_formats)"]))
    elif training.precision == Precision.nvfp4:
        notes.append("nvfp4: no torchtitan converter; bf16 written")
    _note_fused_casts(training, "torchao", notes)
    if training.fp8_attention:
        notes.append("fp8_attention: torchtitan's attention runs in 16 bits (its float8 converters quantise linear layers)")
    if s.activation_input_fp8:
        notes.append("activation_input_fp8: torchtitan saves the MLP activation's input in 16 bits; "
                     "it needs more memory than designer priced")
    header += [f"note: {n}" for n in notes]
    return TorchtitanLaunch(_toml(sections, header), "llama3", flavor, None, tuple(notes))


def torchtitan_toml(llm: LLMSpec, training: TrainingSpec, s: Strategy, n_gpus: int, gpus_per_node: int) -> str | None:
    return torchtitan_launch(llm, training, s, n_gpus, gpus_per_node).toml


__all__ = ["MEGATRON_COMMIT", "TORCHTITAN_COMMIT", "MegatronLaunch", "TorchtitanLaunch", "global_batch",
           "llama3_flavor", "megatron_command", "megatron_launch", "megatron_pipeline_layout", "moe_layer_pattern",
           "torchtitan_flavors", "torchtitan_launch", "torchtitan_toml", "train_iterations"]
