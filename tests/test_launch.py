"""designer.launch against the committed argument definitions of the real projects
(designer/data/launch/: Megatron-LM's parser, torchrun's parser, torchtitan's TOML schema and llama3
flavors, each with the repository, path and commit it was generated from).

Each case is a real model of models/ and a strategy built with designer.spec.llm.Strategy. The
generated Megatron-LM command must parse with an argparse parser rebuilt from the committed flag list
(so every flag exists and takes the right number of values), each value must be of the flag's type
and among its choices, and the parsed values must give back the strategy and model records. The
TOML must parse with tomllib, every table and field must exist in torchtitan's schema with a value
of the field's type, and its degrees must multiply to the cluster size.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shlex
import tomllib
from dataclasses import dataclass

import pytest

from designer.launch import (
    LAUNCH_DATA, MEGATRON_COMMIT, MEGATRON_SCRIPT, TORCHTITAN_COMMIT, megatron_launch, torchtitan_launch,
)
from designer.spec.llm import (
    AttentionKernel, Fp8Recipe, LLMSpec, Precision, RankOrder, Recompute, RecomputeModule, Schedule, Strategy,
    TrainingSpec, pipeline_stage_layers,
)
from designer.spec.models import load_model


def _load(name: str) -> dict:
    return json.loads((LAUNCH_DATA / name).read_text())


MEGATRON = _load("megatron_flags.json")
TORCHRUN = _load("torchrun_flags.json")
SCHEMA = _load("torchtitan_schema.json")
FLAVORS = _load("torchtitan_flavors.json")


@dataclass(frozen=True)
class Case:
    model: str
    training: TrainingSpec
    strategy: Strategy
    n_gpus: int
    gpus_per_node: int = 8

    @property
    def llm(self) -> LLMSpec:
        return load_model(self.model)

    def __str__(self) -> str:
        s = self.strategy
        return f"{self.model}-tp{s.tp}pp{s.pp}dp{s.dp}cp{s.cp}ep{s.ep}-z{s.zero_stage}-{s.schedule.value}"


def _train(seq: int, gb: int, **kw) -> TrainingSpec:
    return TrainingSpec(sequence_length=seq, global_batch_sequences=gb, total_tokens=kw.pop("tokens", 1e12), **kw)


CASES = [
    # dense, interleaved schedule with even chunks, ZeRO-1, selective recompute, TP overlap
    Case("llama3-70b", _train(8192, 512), Strategy(
        tp=8, pp=4, dp=8, sequence_parallel=True, schedule=Schedule.interleaved, virtual_stages=5, zero_stage=1,
        recompute=Recompute.selective, overlap_tp_comm=True), 256),
    # dense, FP8 (current scaling, fp8 weight gather), CP with all-gather, ZeRO-3 in HSDP groups, full recompute
    Case("llama3-70b", _train(8192, 1024, precision=Precision.fp8, fp8_recipe=Fp8Recipe.current, fp8_param_gather=True),
         Strategy(tp=4, dp=64, cp=2, sequence_parallel=True, zero_stage=3, shard_group_size=16,
                  recompute=Recompute.full, cp_comm="all_gather", attention_kernel=AttentionKernel.cudnn), 512),
    # dense, uneven end stages with virtual stages, pipeline-outer rank order, delayed FP8
    Case("llama3-405b", _train(8192, 2048, precision=Precision.fp8, fp8_recipe=Fp8Recipe.delayed), Strategy(
        tp=8, pp=16, dp=4, sequence_parallel=True, schedule=Schedule.interleaved, virtual_stages=2,
        pp_first_stage_layers=6, pp_last_stage_layers=8, zero_stage=1, recompute=Recompute.full,
        rank_order=RankOrder.tp_cp_pp_dp), 512),
    # GPT-3-style dense (LayerNorm, GELU, tied, dropout), fp16, plain DDP, CP ring
    Case("gpt-145b", _train(2048, 1536, precision=Precision.fp16), Strategy(
        tp=8, pp=8, dp=12, cp=2, zero_stage=0, microbatch_size=2, attention_kernel=AttentionKernel.flash2), 1536),
    # one node, ZeRO-2, torchtitan flavor of the same shape
    Case("llama3-8b", _train(8192, 64), Strategy(dp=8, zero_stage=2, microbatch_size=2, cuda_graphs=True), 8),
    # Llama architecture with no torchtitan flavor of its shape; optimizer offload; one pipeline
    # schedule per accumulation step, two per iteration (PyTorch pipelining)
    Case("llama2-7b", _train(4096, 256, grad_accumulation_dtype="bf16"), Strategy(
        tp=2, pp=2, dp=4, sequence_parallel=True, zero_stage=1, offload_optimizer=True, pipeline_flushes=2), 16),
    # MoE + MLA + MTP, DeepSeek-V3 style: EP 64, uneven stages, DeepEP, blockwise FP8, node-limited routing
    Case("deepseek-v3", _train(4096, 15360, precision=Precision.fp8, fp8_recipe=Fp8Recipe.blockwise,
                               optimizer_state_dtype="bf16"),
         Strategy(pp=16, dp=128, ep=64, zero_stage=1, moe_dispatcher="deepep", schedule=Schedule.dualpipe), 2048),
    # MoE + MTP on an interleaved uneven split: the explicit layout string
    Case("deepseek-v3", _train(4096, 4096), Strategy(
        pp=8, dp=64, ep=32, schedule=Schedule.interleaved, virtual_stages=2, zero_stage=1,
        recompute=Recompute.selective, recompute_modules=(RecomputeModule.mla_up_proj, RecomputeModule.moe_act),
        overlap_ep_comm=True), 512),
    # MoE in every layer, expert TP 1, EP all-to-all overlap, selective recompute of MoE parts, the
    # experts' split sizes kept on the device
    Case("mixtral-8x7b", _train(4096, 1024), Strategy(
        tp=2, dp=16, ep=8, expert_tp=1, sequence_parallel=True, zero_stage=1, recompute=Recompute.selective,
        recompute_modules=(RecomputeModule.moe_act, RecomputeModule.layernorm), overlap_ep_comm=True,
        expert_gemm="grouped"), 32),
    # MaxText's save_qkv_proj remat (attn_out_proj has no Megatron-LM module: said in a note)
    Case("llama3-8b", _train(8192, 64), Strategy(dp=16, zero_stage=3, recompute=Recompute.selective, recompute_modules=(
        RecomputeModule.core_attn, RecomputeModule.layernorm, RecomputeModule.mlp, RecomputeModule.attn_out_proj)), 16),
    # MoE with a 128-token sliding window in alternate layers (GPT-OSS), HybridEP-style dispatcher, priced
    # with the benchmarks' forced balance
    Case("gpt-oss-20b", _train(4096, 256, moe_load_balance="forced"), Strategy(dp=8, ep=8, zero_stage=1, moe_dispatcher="deepep"), 8),
    # Kimi K2 trained with Muon: ZeRO-1 is Megatron's layer-wise distributed optimizer
    Case("kimi-k2", _train(4096, 4096, precision=Precision.mxfp8, optimizer="muon"), Strategy(
        pp=4, dp=64, ep=64, schedule=Schedule.interleaved, virtual_stages=4, zero_stage=1, microbatch_size=2,
        moe_dispatcher="deepep"), 256),
    # MoE with ZeRO-3 (Megatron-FSDP) and pipeline, allgather dispatcher
    Case("qwen3-30b-a3b", _train(4096, 512, precision=Precision.mxfp8), Strategy(
        pp=2, dp=16, ep=8, zero_stage=3, microbatch_size=2, moe_dispatcher="allgather", cp=1), 32),
]
IDS = [str(c) for c in CASES]


# ----------------------------------------------------------------------------- parsers from the data
class ParseError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # noqa: D102 - raise instead of exiting
        raise ParseError(message)


_TYPES = {"int": int, "float": float, "str": str, None: str, "callable": str}


def parser_from_record(record: dict) -> _Parser:
    """An argparse parser with each committed option: its flags, dest, arity, type and choices."""
    p = _Parser(allow_abbrev=False, add_help=False)
    for a in record["arguments"]:
        if a["nargs"] == 0:
            p.add_argument(*a["flags"], dest=a["dest"], action="store_const", const=True, default=None)
            continue
        typ = _TYPES[a["type"]]
        choices = None if a["choices"] is None else [typ(c) for c in a["choices"]]
        p.add_argument(*a["flags"], dest=a["dest"], nargs=a["nargs"], type=typ, choices=choices, default=None)
    return p


MEGATRON_PARSER = parser_from_record(MEGATRON)
TORCHRUN_PARSER = parser_from_record(TORCHRUN)
MEGATRON_BY_FLAG = {f: a for a in MEGATRON["arguments"] for f in a["flags"]}
TORCHRUN_BY_FLAG = {f: a for a in TORCHRUN["arguments"] for f in a["flags"]}


def split_command(command: str) -> tuple[dict[str, str], list[str], list[str]]:
    """(environment, torchrun options, training-script options) of a generated shell command."""
    words = shlex.split(command, comments=True)
    env = {}
    while "=" in words[0] and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
        k, v = words.pop(0).split("=", 1)
        env[k] = v
    assert words[0] == "torchrun", words[:3]
    i = words.index(MEGATRON_SCRIPT)
    return env, words[1:i], words[i + 1:]


def options_of(words: list[str], by_flag: dict) -> list[tuple[str, list[str]]]:
    """(flag, values) in order, each flag's values counted by its committed arity."""
    out, i = [], 0
    while i < len(words):
        flag = words[i]
        assert flag in by_flag, f"{flag} is not an option of the committed parser"
        nargs = by_flag[flag]["nargs"]
        j = i + 1
        if nargs is None:
            j = i + 2
        elif nargs in ("+", "*"):
            while j < len(words) and not words[j].startswith("--"):
                j += 1
        out.append((flag, words[i + 1:j]))
        i = j
    return out


@pytest.fixture(params=CASES, ids=IDS)
def case(request) -> Case:
    return request.param


def megatron_parsed(c: Case):
    launch = megatron_launch(c.llm, c.training, c.strategy, c.n_gpus, c.gpus_per_node)
    env, torchrun, script = split_command(launch.command())
    return launch, env, TORCHRUN_PARSER.parse_args(torchrun), MEGATRON_PARSER.parse_args(script), torchrun, script


# ----------------------------------------------------------------------------- the committed data
def test_committed_data_names_its_source():
    for record, repo in ((MEGATRON, "NVIDIA/Megatron-LM"), (SCHEMA, "pytorch/torchtitan"), (FLAVORS, "pytorch/torchtitan")):
        h = record["header"]
        assert h["repository"].endswith(repo) and h["path"] and re.fullmatch(r"[0-9a-f]{40}", h["commit"])
        assert re.match(r"\d{4}-\d\d-\d\dT", h["commit_date"])
    assert MEGATRON["header"]["commit"] == MEGATRON_COMMIT
    assert SCHEMA["header"]["commit"] == FLAVORS["header"]["commit"] == TORCHTITAN_COMMIT
    assert re.fullmatch(r"[0-9a-f]{40}", TORCHRUN["header"]["commit"])
    # a parser of the real size (most options come from dataclasses, not add_argument calls)
    assert len(MEGATRON["arguments"]) > 500
    assert (LAUNCH_DATA / "generate.py").is_file()


# ----------------------------------------------------------------------------- Megatron-LM
def test_every_megatron_flag_exists_with_its_arity_type_and_choices(case):
    launch, env, _, _, torchrun, script = megatron_parsed(case)
    opts = options_of(script, MEGATRON_BY_FLAG)
    flags = [f for f, _ in opts]
    assert len(flags) == len(set(flags)), f"a flag is given twice: {sorted(f for f in flags if flags.count(f) > 1)}"
    for flag, values in opts:
        a = MEGATRON_BY_FLAG[flag]
        for v in values:
            _TYPES[a["type"]](v)  # int / float options get numbers
            if a["choices"] is not None:
                assert v in a["choices"], f"{flag} {v} not in {a['choices']}"
            if flag in MEGATRON["value_constraints"]:
                assert v in MEGATRON["value_constraints"][flag]["values"], f"{flag} {v}"
    for flag, values in options_of(torchrun, TORCHRUN_BY_FLAG):
        assert TORCHRUN_BY_FLAG[flag]["choices"] is None or values[0] in TORCHRUN_BY_FLAG[flag]["choices"]
    assert set(env) <= {"CUDA_DEVICE_MAX_CONNECTIONS"}


def test_megatron_degrees_multiply_to_the_cluster(case):
    s, llm = case.strategy, case.llm
    _, _, tr, ns, _, _ = megatron_parsed(case)
    nnodes, nproc = int(tr.nnodes), int(tr.nproc_per_node)
    assert nnodes * nproc == case.n_gpus and nproc <= case.gpus_per_node
    tp, pp, cp = ns.tensor_model_parallel_size, ns.pipeline_model_parallel_size, ns.context_parallel_size or 1
    assert case.n_gpus % (tp * pp * cp) == 0
    dp = case.n_gpus // (tp * pp * cp)
    assert (tp, pp, cp, dp) == (s.tp, s.pp, s.cp, s.dp)
    assert ns.global_batch_size % (dp * ns.micro_batch_size) == 0
    if llm.moe is not None:
        assert ns.expert_model_parallel_size == s.ep and (dp * cp) % ns.expert_model_parallel_size == 0
        assert ns.expert_tensor_parallel_size == (s.expert_tp or s.tp)


def test_megatron_values_round_trip_to_the_records(case):
    s, llm, t = case.strategy, case.llm, case.training
    _, env, _, ns, _, _ = megatron_parsed(case)
    assert (ns.num_layers, ns.hidden_size, ns.ffn_hidden_size, ns.num_attention_heads) == \
        (llm.layers, llm.hidden_size, llm.ffn_size, llm.heads)
    assert ns.vocab_size == llm.vocab_size and ns.seq_length == t.sequence_length
    assert ns.micro_batch_size == s.microbatch_size
    assert ns.global_batch_size == (s.global_batch_sequences or t.global_batch_sequences)
    assert ns.train_iters * ns.global_batch_size * ns.seq_length >= t.total_tokens
    assert (ns.train_iters - 1) * ns.global_batch_size * ns.seq_length < t.total_tokens
    win = llm.attention_window
    if win is None:
        assert ns.window_size is None and ns.window_attn_skip_freq is None
    else:  # arguments.py: --window-size (left, right) keys; one full layer after N-1 windowed ones
        assert ns.window_size == f"{win.tokens},0" and int(ns.window_attn_skip_freq) == win.full_attention_every
    if llm.mla is None:
        assert (ns.num_query_groups or llm.heads) == llm.kv_heads_effective
        assert bool(ns.group_query_attention) == (llm.kv_heads_effective != llm.heads)
    else:
        assert ns.multi_latent_attention and ns.kv_lora_rank == llm.mla.kv_lora_rank
        assert (ns.qk_head_dim, ns.qk_pos_emb_head_dim, ns.v_head_dim) == \
            (llm.mla.qk_nope_head_dim, llm.mla.qk_rope_head_dim, llm.mla.v_head_dim)
        assert ns.q_lora_rank == llm.mla.q_lora_rank
    assert bool(ns.swiglu) == llm.gated_mlp
    assert ns.normalization == {"rmsnorm": "RMSNorm", "layernorm": "LayerNorm"}[llm.norm]
    # store_false options: present means the feature is off
    assert bool(ns.add_bias_linear) == (not llm.linear_bias)
    assert bool(ns.untie_embeddings_and_output_weights) == (not llm.tied_embeddings)
    assert (ns.mtp_num_layers or 0) == llm.mtp_layers
    if not llm.dropout:
        assert ns.attention_dropout == 0 and ns.hidden_dropout == 0
    assert bool(ns.sequence_parallel) == s.sequence_parallel
    if s.cp > 1:
        assert ns.cp_comm_type == [s.cp_comm]
    assert bool(ns.use_tp_pp_dp_mapping) == (s.rank_order == RankOrder.tp_cp_pp_dp)
    # ZeRO: 1 the distributed optimizer, 2/3 Megatron-FSDP's gradient / weight sharding; Muon's
    # ZeRO-1 is the layer-wise distributed optimizer, without the distributed optimizer's buffers
    if t.optimizer == "muon":
        # --use-distributed-optimizer with Muon is the layer-wise optimizer (arguments.py)
        assert ns.optimizer == "muon" and bool(ns.use_distributed_optimizer) == (s.zero_stage == 1)
        assert ns.muon_num_ns_steps == t.muon_ns_steps and ns.muon_tp_mode == "blockwise"
        assert not ns.use_megatron_fsdp and not ns.overlap_param_gather
    elif s.zero_stage == 0:
        assert (ns.optimizer or "adam") == "adam"
        assert not ns.use_distributed_optimizer and not ns.use_megatron_fsdp
    elif s.zero_stage == 1:
        assert ns.use_distributed_optimizer and not ns.use_megatron_fsdp
    else:
        assert ns.use_megatron_fsdp and ns.ckpt_format == "fsdp_dtensor"
        assert ns.data_parallel_sharding_strategy == ("optim_grads" if s.zero_stage == 2 else "optim_grads_params")
    if s.shard_group_size and s.zero_stage:
        assert ns.num_distributed_optimizer_instances * s.shard_group_size == s.dp * s.cp
    assert bool(ns.overlap_grad_reduce) == (s.overlap_dp_comm and s.dp * s.cp > 1)
    if ns.overlap_param_gather:
        assert ns.overlap_grad_reduce and (ns.use_distributed_optimizer or ns.use_megatron_fsdp)
    if ns.tp_comm_overlap:
        assert s.overlap_tp_comm and ns.sequence_parallel
    if s.tp > 1 and not s.zero_stage >= 2 and not ns.overlap_moe_expert_parallel_comm:
        assert env.get("CUDA_DEVICE_MAX_CONNECTIONS") == "1"
    # recompute
    if s.recompute == Recompute.none:
        assert ns.recompute_granularity is None
    else:
        assert ns.recompute_granularity == s.recompute.value
    if s.recompute == Recompute.selective:
        # attn_out_proj is MaxText's vocabulary: Megatron-LM keeps that projection's input
        assert ns.recompute_modules == ([m.value for m in s.recompute_modules if m.value != "attn_out_proj"]
                                        or ["core_attn"])
    if s.recompute == Recompute.full:
        assert ns.recompute_method is not None and ns.recompute_num_layers >= 1
    # precision
    assert bool(ns.fp16) == (t.precision == Precision.fp16) and bool(ns.bf16) == (t.precision != Precision.fp16)
    assert (ns.fp8 is not None) == (t.precision in (Precision.fp8, Precision.mxfp8))
    assert (ns.fp4 is not None) == (t.precision == Precision.nvfp4)
    if t.precision == Precision.fp8:
        assert bool(ns.fp8_param_gather) == t.fp8_param_gather
        if t.fp8_recipe in (Fp8Recipe.delayed, Fp8Recipe.blockwise):
            assert ns.fp8_recipe == t.fp8_recipe.value
    if ns.main_grads_dtype or ns.exp_avg_dtype or ns.optimizer_cpu_offload:
        assert ns.use_precision_aware_optimizer
    assert (ns.main_grads_dtype or "fp32") == t.grad_accumulation_dtype
    assert (ns.exp_avg_dtype or "fp32") == t.optimizer_state_dtype
    assert bool(ns.optimizer_cpu_offload) == (s.offload_optimizer or s.offload_weights)


def _layout_stage_layers(layout: str, pp: int) -> tuple[list[int], list[list[str]]]:
    """Decoder layers per stage of a --pipeline-model-parallel-layout string, and its chunks, read
    with the grammar of Megatron's PipelineParallelLayerLayout.parse_str_to_list."""
    text = layout.replace(",", "")
    for pattern in (r"\(([^)]+)\)\*(\d+)", r"(.)\*(\d+)"):
        text = re.sub(pattern, lambda m: m.group(1) * int(m.group(2)), text)
    chunks = [list(c) for c in text.split("|")]
    assert len(chunks) % pp == 0
    per_stage = [0] * pp
    for i, c in enumerate(chunks):
        per_stage[i % pp] += c.count("t")
    return per_stage, chunks


def test_megatron_pipeline_split_is_the_designers(case):
    s, llm = case.strategy, case.llm
    _, _, _, ns, _, _ = megatron_parsed(case)
    want = list(pipeline_stage_layers(llm.layers, s.pp, s.pp_first_stage_layers, s.pp_last_stage_layers))
    v = s.virtual_stages if s.schedule == Schedule.interleaved else 1
    if ns.pipeline_model_parallel_layout:
        got, chunks = _layout_stage_layers(ns.pipeline_model_parallel_layout, s.pp)
        assert len(chunks) == s.pp * v
        assert chunks[0][0] == "E" and chunks[-1][-1] == "L"
        assert sum(c.count("m") for c in chunks) == llm.mtp_layers
        assert all(c.count("m") == 0 for c in chunks[:-1])
    elif ns.decoder_first_pipeline_num_layers is not None:
        first, last = ns.decoder_first_pipeline_num_layers, ns.decoder_last_pipeline_num_layers
        middle = (llm.layers - first - last) // (s.pp - 2) if s.pp > 2 else 0
        got = [first] + [middle] * (s.pp - 2) + [last]
        assert (ns.num_virtual_stages_per_pipeline_rank or 1) == v
    else:
        per_chunk = ns.num_layers_per_virtual_pipeline_stage
        got = [llm.layers // s.pp] * s.pp
        assert (per_chunk or llm.layers // s.pp) * v == llm.layers // s.pp
    assert got == want and sum(got) == llm.layers


def test_megatron_moe_flags_match_the_moe_record(case):
    llm, s = case.llm, case.strategy
    _, _, _, ns, _, _ = megatron_parsed(case)
    if llm.moe is None:
        assert ns.num_experts is None
        return
    moe = llm.moe
    assert (ns.num_experts, ns.moe_router_topk, ns.moe_ffn_hidden_size) == (moe.experts, moe.top_k, moe.expert_ffn_size)
    shared = moe.shared_experts * moe.shared_ffn_size if moe.shared_experts else None
    assert ns.moe_shared_expert_intermediate_size == shared
    # the layer pattern, evaluated as arguments.py _eval_pattern does (digits and list operators only)
    if ns.moe_layer_freq is None:
        pattern = [1] * llm.layers
    else:
        assert not re.search(r"[^,\d\[\]\(\)\+\*]", ns.moe_layer_freq)
        pattern = eval(ns.moe_layer_freq)  # noqa: S307 - the character whitelist above
    want = [int(i >= moe.first_dense_layers and (i - moe.first_dense_layers) % moe.moe_layer_interval == 0)
            for i in range(llm.layers)]
    assert pattern == want
    # TEGroupedMLP takes the split sizes to the host unless its GroupedTensor path is on
    assert bool(ns.moe_use_grouped_tensor) == (s.expert_gemm == "grouped")
    if s.moe_dispatcher == "deepep":
        assert (ns.moe_token_dispatcher_type, ns.moe_flex_dispatcher_backend) == ("flex", "deepep")
    else:
        assert ns.moe_token_dispatcher_type == s.moe_dispatcher
    if moe.routing_groups is not None:
        # the model's own router groups, whatever the layout
        assert (ns.moe_router_num_groups, ns.moe_router_group_topk) == (moe.router_groups, moe.router_group_topk)
    elif ns.moe_router_num_groups:
        assert ns.moe_router_group_topk == moe.max_nodes_per_token < ns.moe_router_num_groups
        assert moe.experts % ns.moe_router_num_groups == 0
    # forced balance is priced and written as Megatron's benchmarking switch; a learned router is not forced
    assert bool(ns.moe_router_force_load_balancing) == (case.training.moe_load_balance == "forced")
    if ns.overlap_moe_expert_parallel_comm:
        assert s.overlap_ep_comm and ns.moe_token_dispatcher_type in ("alltoall", "flex")
        assert s.pp == 1 or ns.num_virtual_stages_per_pipeline_rank or ns.num_layers_per_virtual_pipeline_stage \
            or ns.pipeline_model_parallel_layout
        assert ns.recompute_granularity != "full" and "moe" not in (ns.recompute_modules or [])


def test_megatron_rejects_a_strategy_of_another_cluster_size():
    c = CASES[0]
    with pytest.raises(ValueError, match="GPUs"):
        megatron_launch(c.llm, c.training, c.strategy, c.n_gpus * 2, 8)
    with pytest.raises(ValueError, match="nodes"):
        megatron_launch(c.llm, c.training, c.strategy, c.n_gpus, 6)


# ----------------------------------------------------------------------------- torchtitan
def _walk_toml(table: dict, prefix: str = ""):
    """(section, field, value) of a parsed TOML, with nested tables as dotted sections."""
    for k, v in table.items():
        path = f"{prefix}.{k}" if prefix else k
        if isinstance(v, dict):
            assert path in SCHEMA["sections"], f"[{path}] is not a torchtitan config section"
            yield from _walk_toml(v, path)
        else:
            assert prefix, f"{k} outside any section"
            yield prefix, k, v


def _toml_form(v) -> str:
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float"
    if isinstance(v, str):
        return "str"
    assert isinstance(v, list)
    inner = {_toml_form(x) for x in v} or {"str"}
    assert len(inner) == 1, v
    return f"list[{inner.pop()}]"


def test_torchtitan_toml_fields_exist_with_their_types(case):
    llm = case.llm
    tt = torchtitan_launch(llm, case.training, case.strategy, case.n_gpus, case.gpus_per_node)
    if tt.toml is None:
        assert tt.reason
        # MoE, or an architecture outside torchtitan's llama3 decoder
        assert llm.moe is not None or not llm.gated_mlp or llm.norm != "rmsnorm" or llm.linear_bias or llm.tied_embeddings
        return
    assert llm.moe is None
    doc = tomllib.loads(tt.toml)
    for section, field, value in _walk_toml(doc):
        spec = SCHEMA["sections"][section].get(field)
        assert spec is not None, f"{section}.{field} is not a torchtitan field"
        assert _toml_form(value) in spec["types"], f"{section}.{field} = {value!r}: {spec['annotation']}"
        if spec["choices"] is not None:
            assert value in spec["choices"], f"{section}.{field} = {value!r} not in {spec['choices']}"
        key = f"{section}.{field}"
        if key in SCHEMA["value_constraints"]:
            vals = value if isinstance(value, list) else [value]
            assert set(vals) <= set(SCHEMA["value_constraints"][key]["values"]), key


def test_torchtitan_degrees_and_records_round_trip(case):
    llm, s, t = case.llm, case.strategy, case.training
    tt = torchtitan_launch(llm, t, s, case.n_gpus, case.gpus_per_node)
    if tt.toml is None:
        return
    doc = tomllib.loads(tt.toml)
    par, tr = doc["parallelism"], doc["training"]
    replicate, shard = par["data_parallel_replicate_degree"], par["data_parallel_shard_degree"]
    degrees = (replicate, shard, par["tensor_parallel_degree"], par["pipeline_parallel_degree"],
               par["context_parallel_degree"])
    assert math.prod(degrees) == case.n_gpus
    assert degrees[2:] == (s.tp, s.pp, s.cp) and replicate * shard == s.dp
    if s.zero_stage == 0:
        assert shard == 1
    if s.shard_group_size:
        assert shard * s.cp == s.shard_group_size
    gb = s.global_batch_sequences or t.global_batch_sequences
    assert tr["global_batch_size"] == gb and tr["seq_len"] == t.sequence_length
    assert tr["steps"] * gb * t.sequence_length >= t.total_tokens
    if s.pp > 1:
        # one schedule's batch per accumulation step: torchtitan accumulates pipeline_flushes of them
        assert tr["local_batch_size"] * s.dp * s.pipeline_flushes == gb
        assert par["pipeline_parallel_microbatch_size"] == s.microbatch_size
        parts = par["module_fqns_per_model_part"]
        layers = [int(m.split(".")[1]) for part in parts for m in part if m.startswith("layers.")]
        assert layers == list(range(llm.layers))
        assert parts[0][0] == "tok_embeddings" and parts[-1][-2:] == ["norm", "output"]
        v = len(parts) // s.pp
        per_stage = [sum(sum(m.startswith("layers.") for m in parts[k * s.pp + r]) for k in range(v)) for r in range(s.pp)]
        assert per_stage == list(pipeline_stage_layers(llm.layers, s.pp, s.pp_first_stage_layers, s.pp_last_stage_layers))
    else:
        assert tr["local_batch_size"] == s.microbatch_size and gb % (tr["local_batch_size"] * s.dp) == 0
    assert doc["activation_checkpoint"]["mode"] == s.recompute.value
    fp8 = t.precision == Precision.fp8
    assert ("float8" in doc.get("quantize", {}).get("linear", {})) == fp8
    assert ("quantize.linear.float8" in doc["model"].get("converters", [])) == fp8
    # a flavor is named only when torchtitan's registry has one of exactly this model's shape
    flavor = doc["model"].get("flavor")
    assert doc["model"]["name"] in FLAVORS["supported_models"]
    if flavor is not None:
        shape = FLAVORS[doc["model"]["name"]][flavor]
        assert (shape["layers"], shape["hidden_size"], shape["heads"], shape["kv_heads"], shape["ffn_size"],
                shape["vocab_size"]) == (llm.layers, llm.hidden_size, llm.heads, llm.kv_heads_effective,
                                         llm.ffn_size, llm.vocab_size)
        assert shape["gated_mlp"] == llm.gated_mlp and shape["tied_embeddings"] == llm.tied_embeddings
    else:
        assert all((sh["layers"], sh["hidden_size"], sh["ffn_size"], sh["vocab_size"]) !=
                   (llm.layers, llm.hidden_size, llm.ffn_size, llm.vocab_size) for sh in FLAVORS["llama3"].values())
        assert "TransformerModelArgs(" in tt.toml  # the comment says which flavor to register


def test_llama3_models_with_a_torchtitan_flavor_name_it():
    """Every shipped dense model whose shape a llama3 flavor has gets that flavor (llama3-8b/70b/405b)."""
    from designer.launch import llama3_flavor

    named = 0
    for name in ("llama3-8b", "llama3-70b", "llama3-405b"):
        llm = load_model(name)
        flavor = llama3_flavor(llm)
        assert flavor is not None, name
        shape = FLAVORS["llama3"][flavor]
        assert (shape["layers"], shape["hidden_size"], shape["ffn_size"]) == (llm.layers, llm.hidden_size, llm.ffn_size)
        named += 1
    assert named == 3


def test_what_megatron_lacks_is_said_in_comments_not_invented_as_flags():
    llm = load_model("llama3-70b")
    t = _train(8192, 512, precision=Precision.fp8, fp8_recipe=Fp8Recipe.rowwise, fp8_attention=True)
    s = Strategy(tp=8, pp=4, dp=8, sequence_parallel=True, schedule=Schedule.zero_bubble, zero_stage=3,
                 zeropp_quantized_weights=True, offload_weights=True, cp_load_balance=False)
    launch = megatron_launch(llm, t, s, 256, 8)
    _, _, script = split_command(launch.command())
    ns = MEGATRON_PARSER.parse_args(script)  # every written word is a real option or its value
    said = " ".join(launch.notes)
    # (fp8 attention is a TransformerConfig field with no command-line option at the pinned commit)
    for what in ("ZB-H1", "ZeRO++", "weight offload", "rowwise", "fp8_dot_product_attention"):
        assert what in said, what
    assert ns.fp8_recipe in MEGATRON_BY_FLAG["--fp8-recipe"]["choices"]
    assert all(n.strip() and "\n" not in n for n in launch.notes)


def test_torchtitans_llama3_model_refuses_what_it_cannot_express():
    # torchtitan's llama3 Transformer (torchtitan/models/llama3/model/model.py) has no QK-norm, no QKV
    # bias and RoPE in every layer: a dense model with any of them gets no TOML, with the reason
    llm = load_model("llama2-7b")
    for update, said in (({"qk_norm": True}, "QK-norm"), ({"qkv_bias": True}, "a QKV bias"),
                         ({"nope_layer_interval": 4}, "layers without RoPE")):
        tt = torchtitan_launch(llm.model_copy(update=update), _train(4096, 64), Strategy(dp=8), 8, 8)
        assert tt.toml is None and said in tt.reason, (update, tt.reason)
    assert torchtitan_launch(llm, _train(4096, 64), Strategy(dp=8), 8, 8).toml is not None


def test_block_recompute_of_some_layers_is_written_as_megatron_and_torchtitan_state_it():
    # Megatron-LM: --recompute-method block --recompute-num-layers N (arguments.py); torchtitan's
    # integer selective option checkpoints every n-th layer in full: 8 layers per stage, 2 of them
    llm = load_model("llama2-7b")
    tr = _train(4096, 64)
    s = Strategy(tp=2, pp=4, dp=4, recompute=Recompute.full, recompute_num_layers=2)
    args = megatron_launch(llm, tr, s, 32, 8).script_args
    i = args.index("--recompute-method")
    assert args[i + 1] == "block" and args[args.index("--recompute-num-layers") + 1] == "2"
    assert args[args.index("--recompute-granularity") + 1] == "full"
    uniform = megatron_launch(llm, tr, s.model_copy(update={"recompute_num_layers": 0}), 32, 8).script_args
    assert uniform[uniform.index("--recompute-method") + 1] == "uniform"
    tt = torchtitan_launch(llm, tr, s, 32, 8)
    ac = tomllib.loads(tt.toml)["activation_checkpoint"]
    assert ac == {"mode": "selective", "selective_ac_option": "4"}


def test_pipeline_p2p_overlap_off_is_written_for_the_interleaved_schedule_only():
    # Megatron-LM keeps overlap_p2p_comm on by default (arguments.py --no-overlap-p2p-communication,
    # store_false) and only uses it in the interleaved schedule
    llm = load_model("llama2-7b")
    tr = _train(4096, 64)
    s = Strategy(tp=2, pp=4, dp=4, schedule=Schedule.interleaved, virtual_stages=2, overlap_pp_comm=False)
    assert "--no-overlap-p2p-communication" in megatron_launch(llm, tr, s, 32, 8).script_args
    on = megatron_launch(llm, tr, s.model_copy(update={"overlap_pp_comm": True}), 32, 8).script_args
    assert "--no-overlap-p2p-communication" not in on
    plain = s.model_copy(update={"schedule": Schedule.one_f_one_b, "virtual_stages": 1})
    assert "--no-overlap-p2p-communication" not in megatron_launch(llm, tr, plain, 32, 8).script_args
    assert "--no-overlap-p2p-communication" in MEGATRON_BY_FLAG


def test_megatron_says_it_runs_one_pipeline_schedule_per_iteration():
    c = next(c for c in CASES if c.strategy.pipeline_flushes > 1)
    launch = megatron_launch(c.llm, c.training, c.strategy, c.n_gpus, c.gpus_per_node)
    assert any("pipeline_flushes 2" in n and "one pipeline schedule" in n for n in launch.notes)


def test_the_gradient_wire_designer_priced_is_said_where_the_framework_reduces_another():
    # Megatron-LM reduces a bf16 model's fp32 main gradients in fp32 (arguments.py:
    # accumulate_allreduce_grads_in_fp32), 16-bit main gradients and fp16 models in 16 bits; torchtitan
    # reduces in float32 only (job_config.py mixed_precision_reduce: Literal['float32'])
    llm = load_model("llama3-8b")
    s = Strategy(dp=8, zero_stage=1)

    def wire_notes(launch):
        return [n for n in launch.notes if n.startswith("gradient reduction")]

    default = _train(8192, 64)  # fp32 main gradients, 16-bit wire priced
    assert any("fp32, twice the bytes" in n for n in wire_notes(megatron_launch(llm, default, s, 8, 8)))
    fp32_wire = _train(8192, 64, grad_reduce_dtype="fp32")
    assert wire_notes(megatron_launch(llm, fp32_wire, s, 8, 8)) == []
    bf16_main = _train(8192, 64, grad_accumulation_dtype="bf16")
    assert wire_notes(megatron_launch(llm, bf16_main, s, 8, 8)) == []
    fp16_fp32_wire = _train(8192, 64, precision=Precision.fp16, grad_reduce_dtype="fp32")
    assert any("half the bytes" in n for n in wire_notes(megatron_launch(llm, fp16_fp32_wire, s, 8, 8)))
    tt = torchtitan_launch(llm, default, s, 8, 8)
    assert tomllib.loads(tt.toml)["training"]["mixed_precision_reduce"] == "float32"
    assert SCHEMA["sections"]["training"]["mixed_precision_reduce"]["choices"] == ["float32"]
    assert any("float32 only" in n for n in wire_notes(tt))
    assert wire_notes(torchtitan_launch(llm, fp32_wire, s, 8, 8)) == []


def test_fused_quantisation_priced_is_said_where_the_framework_quantises_in_kernels():
    # TrainingSpec.low_precision_casts fused prices a compiler's fused quantisation (XLA); Megatron-LM
    # (Transformer Engine) and torchtitan (torchao) write the same recipe, and say it runs slower
    llm = load_model("llama3-8b")
    s = Strategy(dp=8, zero_stage=1)

    def fused_notes(launch):
        return [n for n in launch.notes if n.startswith("low_precision_casts fused")]

    for casts, want in (("fused", 1), ("kernels", 0)):
        t = _train(8192, 64, precision=Precision.fp8, fp8_recipe=Fp8Recipe.current, low_precision_casts=casts)
        m, tt = megatron_launch(llm, t, s, 8, 8), torchtitan_launch(llm, t, s, 8, 8)
        assert len(fused_notes(m)) == len(fused_notes(tt)) == want
        ns = MEGATRON_PARSER.parse_args(split_command(m.command())[2])
        assert ns.fp8_recipe == "tensorwise"  # the recipe is written either way
    assert "Transformer Engine" in fused_notes(megatron_launch(llm, _train(
        8192, 64, precision=Precision.fp8, low_precision_casts="fused"), s, 8, 8))[0]
    # nothing to say for a 16-bit run
    assert fused_notes(megatron_launch(llm, _train(8192, 64, low_precision_casts="fused"), s, 8, 8)) == []


def test_a_recompute_module_megatron_lacks_is_left_out_of_its_flags_and_said():
    # attn_out_proj (MaxText's save_qkv_proj vocabulary) is not one of Megatron-LM's --recompute-modules
    llm = load_model("llama3-8b")
    s = Strategy(dp=8, zero_stage=1, recompute=Recompute.selective, recompute_modules=(
        RecomputeModule.core_attn, RecomputeModule.mlp, RecomputeModule.attn_out_proj))
    launch = megatron_launch(llm, _train(8192, 64), s, 8, 8)
    ns = MEGATRON_PARSER.parse_args(launch.script_args)
    assert ns.recompute_modules == ["core_attn", "mlp"]
    assert any("attn_out_proj" in n and "no recompute module" in n for n in launch.notes)


def test_the_triton_attention_kernel_is_written_as_flashattention2_and_said():
    # Megatron-LM's --attention-backend has no Triton kernel (AttnBackend flash|fused|unfused|local|auto):
    # FlashAttention-2 is the nearest, and the note says it runs faster than designer priced
    llm = load_model("llama2-7b")
    s = Strategy(dp=8, zero_stage=1, attention_kernel=AttentionKernel.triton)
    launch = megatron_launch(llm, _train(4096, 64), s, 8, 8)
    ns = MEGATRON_PARSER.parse_args(launch.script_args)
    assert (ns.attention_backend, ns.flash_attention_version) == ("flash", 2)
    assert any(n.startswith("attention_kernel triton") and "FlashAttention-2" in n for n in launch.notes)


def test_torchtitans_per_op_checkpointing_is_its_op_option_and_said_for_megatron():
    # alternate_matmuls is torchtitan's selective_ac_option 'op' exactly (no comment that it differs);
    # Megatron-LM has no per-op policy: core_attn is written and the note says so
    llm = load_model("llama3-8b")
    s = Strategy(dp=8, zero_stage=3, recompute=Recompute.selective,
                 recompute_modules=(RecomputeModule.alternate_matmuls,), qkv_projection="separate")
    tt = torchtitan_launch(llm, _train(8192, 64), s, 8, 8)
    assert tomllib.loads(tt.toml)["activation_checkpoint"] == {"mode": "selective", "selective_ac_option": "op"}
    assert "designer recomputes" not in tt.toml
    assert not any("qkv_projection" in n for n in tt.notes)
    launch = megatron_launch(llm, _train(8192, 64), s, 8, 8)
    ns = MEGATRON_PARSER.parse_args(launch.script_args)
    assert ns.recompute_modules == ["core_attn"]
    assert any("alternate_matmuls" in n and "no per-op" in n for n in launch.notes)
    # Megatron-Core fuses Q, K and V (linear_qkv), torchtitan never does: each says so where asked otherwise
    assert any(n.startswith("qkv_projection separate") for n in launch.notes)
    fused = torchtitan_launch(llm, _train(8192, 64), s.model_copy(update={"qkv_projection": "fused"}), 8, 8)
    assert any(n.startswith("qkv_projection fused") for n in fused.notes)


def test_per_op_checkpointing_takes_no_other_module():
    with pytest.raises(ValueError, match="alternate_matmuls is a whole-layer policy"):
        Strategy(dp=8, recompute=Recompute.selective,
                 recompute_modules=(RecomputeModule.alternate_matmuls, RecomputeModule.mlp))


def test_fp8_activation_input_store_is_said_where_no_flag_writes_it():
    # Megatron-LM's arguments.py keeps activation_func_fp8_input_store off the command line (a model
    # config field); torchtitan has no such store: both launches say so, and the parser still takes
    # the Megatron arguments
    llm = load_model("llama3-8b")
    s = Strategy(dp=8, zero_stage=1, activation_input_fp8=True)
    launch = megatron_launch(llm, _train(8192, 64), s, 8, 8)
    MEGATRON_PARSER.parse_args(launch.script_args)
    assert any(n.startswith("activation_input_fp8") and "activation_func_fp8_input_store" in n for n in launch.notes)
    tt = torchtitan_launch(llm, _train(8192, 64), s, 8, 8)
    assert any(n.startswith("activation_input_fp8") and "16 bits" in n for n in tt.notes)
    plain = megatron_launch(llm, _train(8192, 64), s.model_copy(update={"activation_input_fp8": False}), 8, 8)
    assert not any("activation_input_fp8" in n for n in plain.notes)


def test_activation_layout_is_said_where_the_framework_lays_out_otherwise():
    # torchtitan's TP plan shards a batch-first sequence (Shard(1)); Megatron-Core's activations are
    # sequence-first: each launch says so where the strategy was priced the other way
    llm = load_model("llama3-8b")
    s = Strategy(tp=8, dp=1, zero_stage=1, sequence_parallel=True)
    tt = torchtitan_launch(llm, _train(8192, 8), s, 8, 8)
    assert any(n.startswith("activation_layout sequence_first") for n in tt.notes)
    batch = s.model_copy(update={"activation_layout": "batch_first"})
    assert not any("activation_layout" in n for n in torchtitan_launch(llm, _train(8192, 8), batch, 8, 8).notes)
    mg = megatron_launch(llm, _train(8192, 8), batch, 8, 8)
    MEGATRON_PARSER.parse_args(mg.script_args)
    assert any(n.startswith("activation_layout batch_first") for n in mg.notes)
    assert not any("activation_layout" in n for n in megatron_launch(llm, _train(8192, 8), s, 8, 8).notes)


def test_torch_compile_is_written_for_what_designer_priced_fused():
    # designer's fused element-wise kernels and fused loss are what torch.compile gives torchtitan
    # (Strategy.elementwise_kernels, cross_entropy): the launch compiles the model and the loss for
    # them, neither for an eager run, and the model anyway under async TP (compile-only there)
    llm = load_model("llama3-8b")
    s = Strategy(tp=1, dp=8, zero_stage=3)

    def compiled(st):
        return tomllib.loads(torchtitan_launch(llm, _train(8192, 8), st, 8, 8).toml).get("compile")

    assert compiled(s) == {"enable": True, "components": ["model", "loss"]}
    assert compiled(s.model_copy(update={"cross_entropy": "eager"})) == {"enable": True, "components": ["model"]}
    eager = s.model_copy(update={"cross_entropy": "eager", "elementwise_kernels": "eager"})
    assert compiled(eager) is None
    tp = Strategy(tp=8, dp=1, zero_stage=1, sequence_parallel=True, overlap_tp_comm=True,
                  elementwise_kernels="eager", cross_entropy="eager")
    tt = torchtitan_launch(llm, _train(8192, 8), tp, 8, 8)
    assert tomllib.loads(tt.toml)["compile"]["components"] == ["model"]
    assert any(n.startswith("elementwise_kernels eager with async TP") for n in tt.notes)
    # Megatron-Core's loss is fused: an eager-priced one is said to run faster there
    mg = megatron_launch(llm, _train(8192, 8), s.model_copy(update={"cross_entropy": "eager"}), 8, 8)
    assert any(n.startswith("cross_entropy eager") for n in mg.notes)
    assert not any("cross_entropy" in n for n in megatron_launch(llm, _train(8192, 8), s, 8, 8).notes)


def test_recompute_replay_is_said_where_the_framework_checkpoints_otherwise():
    # torchtitan's checkpoint wrapper is non-reentrant (it stops once the backward's tensors are back);
    # Megatron-Core's checkpoint is reentrant (it reruns the module whole): each launch says so where the
    # strategy was priced the other way, and nothing without recomputation
    llm = load_model("llama3-8b")
    s = Strategy(tp=1, dp=8, zero_stage=3, recompute=Recompute.full)
    needed = s.model_copy(update={"recompute_replay": "needed"})
    assert any(n.startswith("recompute_replay module") for n in torchtitan_launch(llm, _train(8192, 8), s, 8, 8).notes)
    assert not any("recompute_replay" in n for n in torchtitan_launch(llm, _train(8192, 8), needed, 8, 8).notes)
    assert any(n.startswith("recompute_replay needed") for n in megatron_launch(llm, _train(8192, 8), needed, 8, 8).notes)
    assert not any("recompute_replay" in n for n in megatron_launch(llm, _train(8192, 8), s, 8, 8).notes)
    plain = needed.model_copy(update={"recompute": Recompute.none})
    assert not any("recompute_replay" in n for n in megatron_launch(llm, _train(8192, 8), plain, 8, 8).notes)
    # nor where no whole MLP is recomputed (the replay prices nothing else)
    attn = needed.model_copy(update={"recompute": Recompute.selective, "recompute_modules": (RecomputeModule.core_attn,)})
    assert not any("recompute_replay" in n for n in megatron_launch(llm, _train(8192, 8), attn, 8, 8).notes)
    assert not any("recompute_replay" in n for n in torchtitan_launch(
        llm, _train(8192, 8), attn.model_copy(update={"recompute_replay": "module"}), 8, 8).notes)


# ----------------------------------------------------------------------------- what Megatron-LM refuses
# Each case below is a strategy the perf model prices; the launch written for it must be one Megatron-LM
# or torchtitan starts (their checks quoted per test), or say in a note what it leaves out.


def test_cuda_graphs_capture_the_whole_iteration_as_priced():
    # Strategy.cuda_graphs prices the iteration in one graph: Megatron's full_iteration impl, which
    # arguments.py accepts only with the NaN check off; 'local' would capture per layer
    c = Case("llama3-8b", _train(8192, 64), Strategy(dp=8, recompute=Recompute.full, cuda_graphs=True), 8)
    _, _, script = split_command(megatron_launch(c.llm, c.training, c.strategy, 8, 8).command())
    ns = MEGATRON_PARSER.parse_args(script)
    assert ns.cuda_graph_impl == "full_iteration" and ns.check_for_nan_in_loss_and_grad is not None


def test_a_top_1_router_takes_its_softmax_before_the_top_k():
    # TransformerConfig: "Please use --moe-router-pre-softmax when topk is 1" (Llama 4 Scout)
    llm = load_model("llama4-scout")
    assert llm.moe.top_k == 1
    launch = megatron_launch(llm, _train(8192, 256), Strategy(tp=4, pp=4, dp=4, ep=4, sequence_parallel=True,
                                                               recompute=Recompute.full), 64, 8)
    _, _, script = split_command(launch.command())
    assert MEGATRON_PARSER.parse_args(script).moe_router_pre_softmax


def test_a_biased_moe_runs_its_experts_at_expert_tp_1():
    # transformer_config.py: "Bias in Moe is only supported when ETP==1": GPT-OSS at TP 2 runs its
    # experts at expert TP 1 unless the strategy says otherwise (then the perf model refuses it)
    llm = load_model("gpt-oss-20b")
    launch = megatron_launch(llm, _train(4096, 256), Strategy(tp=2, dp=4, ep=4, sequence_parallel=True), 8, 8)
    _, _, script = split_command(launch.command())
    assert MEGATRON_PARSER.parse_args(script).expert_tensor_parallel_size == 1


def test_position_flags_follow_the_model_record():
    # RoPE where the record has it, whatever the norm: Nemotron-4 (LayerNorm, RoPE: arXiv 2406.11704
    # §2.2) runs rope, GPT-3 (learned absolute positions) Megatron's default
    for name, pos in (("nemotron4-15b", "rope"), ("llama3-8b", "rope"), ("gpt3-175b", "learned_absolute")):
        llm = load_model(name)
        _, _, script = split_command(megatron_launch(llm, _train(4096, 256), Strategy(tp=8, dp=2), 16, 8).command())
        args = MEGATRON_PARSER.parse_args(script)
        assert args.position_embedding_type == pos, name
        assert args.no_rope_freq is None and not args.qk_l2_norm, name


def test_nope_layers_and_an_l2_qk_norm_are_written_as_megatron_takes_them():
    # Llama 4 Scout: every 4th of 48 layers without RoPE (--no-rope-freq 4) and the weightless L2
    # QK-norm (--qk-l2-norm); Megatron-LM puts that norm in every layer, the model only in its RoPE
    # layers, which the launch says in a note
    llm = load_model("llama4-scout")
    launch = megatron_launch(llm, _train(4096, 256), Strategy(dp=16, ep=16), 16, 8)
    _, _, script = split_command(launch.command())
    args = MEGATRON_PARSER.parse_args(script)
    assert (args.position_embedding_type, args.no_rope_freq, args.qk_l2_norm, args.qk_layernorm) == (
        "rope", "4", True, None)
    assert any("RoPE layers only" in n and "its 12 NoPE layers too" in n for n in launch.notes)
    # a layer count the interval does not divide (Megatron asserts that it does for the number) is written
    # as the pattern, 1 for each NoPE layer: 50 layers, the 4th, 8th, ..., 48th without RoPE
    odd = llm.model_copy(update={"layers": 50})
    _, _, script = split_command(megatron_launch(odd, _train(4096, 256), Strategy(dp=16, ep=16), 16, 8).command())
    pattern = MEGATRON_PARSER.parse_args(script).no_rope_freq
    assert pattern == "([0]*3+[1])*12+[0]*2"
    layers = eval(pattern, {"__builtins__": {}})  # as arguments.py no_rope_freq_type (_eval_pattern) does
    assert len(layers) == 50 and [i + 1 for i, x in enumerate(layers) if x] == list(range(4, 49, 4))


def test_a_qkv_only_bias_is_written_beside_the_disabled_linear_biases():
    # Qwen2-57B-A14B (Megatron-MoE-ModelZoo's configuration): --disable-bias-linear --add-qkv-bias,
    # so the QKV projection alone has a bias; its 4,608 values per layer are counted as parameters
    from designer.perf import compute as cmp

    llm = load_model("qwen2-57b-a14b")
    launch = megatron_launch(llm, _train(4096, 256), Strategy(tp=2, pp=4, dp=8, ep=8, sequence_parallel=True), 64, 8)
    _, _, script = split_command(launch.command())
    assert MEGATRON_PARSER.parse_args(script).add_qkv_bias and "--disable-bias-linear" in script
    plain = llm.model_copy(update={"qkv_bias": False})
    assert cmp.total_params(llm) - cmp.total_params(plain) == 28 * (28 + 2 * 4) * 128
    # its shared expert's sigmoid gate (HF Qwen2MoeSparseMoeBlock: Linear(3584, 1, bias=False)) is written
    # and counted: 3,584 weights in each of the 28 layers, active for every token
    args = MEGATRON_PARSER.parse_args(script)
    assert args.moe_shared_expert_gate and args.moe_shared_expert_intermediate_size == 20480
    ungated = llm.model_copy(update={"moe": llm.moe.model_copy(update={"shared_expert_gate": False})})
    assert cmp.total_params(llm) - cmp.total_params(ungated) == 28 * 3584
    assert cmp.active_params(llm) - cmp.active_params(ungated) == 28 * 3584
    assert "--moe-shared-expert-gate" not in megatron_launch(ungated, _train(4096, 256), Strategy(
        tp=2, pp=4, dp=8, ep=8, sequence_parallel=True), 64, 8).command()
    assert "--add-qkv-bias" not in megatron_launch(plain, _train(4096, 256), Strategy(
        tp=2, pp=4, dp=8, ep=8, sequence_parallel=True), 64, 8).command()
    # MLA has no QKV projection of its own to bias: a model with both is refused in one line
    with pytest.raises(ValueError, match="qkv_bias adds a bias to the query, key and value projections; MLA"):
        type(llm).model_validate({**load_model("deepseek-v2").model_dump(), "qkv_bias": True})


def test_an_8_bit_weight_gather_megatron_refuses_is_not_written_and_said():
    # arguments.py: "--fp8-param-gather only supported with distributed optimizer, torch fsdp2, megatron
    # fsdp", and beside an offloaded optimizer only under the delayed recipe
    llm = load_model("llama3-8b")
    t = _train(8192, 64, precision=Precision.fp8, fp8_recipe=Fp8Recipe.current, fp8_param_gather=True)
    for s in (Strategy(tp=2, dp=4, zero_stage=0), Strategy(dp=8, zero_stage=1, offload_optimizer=True)):
        launch = megatron_launch(llm, t, s, 8, 8)
        assert "--fp8-param-gather" not in launch.command()
        assert any("8-bit weight gather not written" in n for n in launch.notes)
    ok = megatron_launch(llm, t, Strategy(dp=8, zero_stage=1), 8, 8)
    assert "--fp8-param-gather" in ok.command()


def test_an_interleaved_pp_2_schedule_keeps_its_send_overlap():
    # arguments.py: with --no-overlap-p2p-communication the interleaved schedule needs pp > 2
    llm = load_model("llama3-8b")
    s = Strategy(pp=2, dp=4, schedule=Schedule.interleaved, virtual_stages=2, overlap_pp_comm=False)
    launch = megatron_launch(llm, _train(8192, 64), s, 8, 8)
    _, _, script = split_command(launch.command())
    assert "--no-overlap-p2p-communication" not in script
    assert any("interleaved pp 2" in n for n in launch.notes)


def test_torchtitan_has_no_replicated_weights_beside_other_parallelism():
    # torchtitan parallelize.py: "DDP has not supported > 1D parallelism", and FSDP whenever cp > 1
    llm = load_model("llama3-8b")
    for s in (Strategy(tp=2, dp=4, zero_stage=0), Strategy(dp=4, cp=2, zero_stage=0)):
        got = torchtitan_launch(llm, _train(8192, 64), s, 8, 8)
        assert got.toml is None and "torchtitan applies DDP only" in got.reason
    # data parallelism alone is DDP; TP or PP alone (dp 1) applies neither DDP nor FSDP and runs
    for s in (Strategy(dp=8, zero_stage=0), Strategy(tp=8, dp=1, zero_stage=0), Strategy(tp=4, pp=2, dp=1, zero_stage=0)):
        assert torchtitan_launch(llm, _train(8192, 64), s, 8, 8).toml is not None


def test_megatron_fsdp_is_told_the_gradient_widths_designer_priced():
    # Megatron-FSDP keeps and reduces gradients in the model's dtype unless told (arguments.py
    # --megatron-fsdp-main-grads-dtype / --megatron-fsdp-grad-comm-dtype, default 'auto'): fp32
    # accumulation and bf16 reduction as priced; the Megatron-DDP note on fp32 reduction is not said
    llm = load_model("llama3-8b")
    launch = megatron_launch(llm, _train(8192, 64), Strategy(dp=8, zero_stage=3), 8, 8)
    _, _, script = split_command(launch.command())
    ns = MEGATRON_PARSER.parse_args(script)
    assert (ns.megatron_fsdp_main_grads_dtype, ns.megatron_fsdp_grad_comm_dtype) == ("fp32", "bf16")
    assert not any("gradient reduction" in n for n in launch.notes)


def test_router_groups_are_the_models_and_a_node_limit_follows_the_layout():
    # DeepSeek-V3's router keeps 4 of its 8 groups on every layout (Megatron-MoE-ModelZoo DeepSeek-V3.yaml:
    # --moe-router-num-groups 8 --moe-router-group-topk 4), here on an EP group of 4 nodes; a node limit
    # stated against the layout (max_nodes_per_token) groups the experts by the EP group's nodes: 8 at
    # EP 64 on 8-GPU nodes, none where the group spans no more nodes than the limit
    ds = load_model("deepseek-v3")
    tr = _train(4096, 4096)
    for ep, want in ((32, (8, 4)), (64, (8, 4))):
        s = Strategy(pp=8, dp=64, ep=ep, zero_stage=1)
        ns = MEGATRON_PARSER.parse_args(split_command(megatron_launch(ds, tr, s, 512, 8).command())[2])
        assert (ns.moe_router_num_groups, ns.moe_router_group_topk) == want
    node_limited = LLMSpec.model_validate({**ds.model_dump(), "moe": {
        **ds.moe.model_dump(), "router_groups": None, "router_group_topk": None, "max_nodes_per_token": 4}})
    for ep, want in ((64, (8, 4)), (32, (None, None))):
        s = Strategy(pp=8, dp=64, ep=ep, zero_stage=1)
        ns = MEGATRON_PARSER.parse_args(split_command(megatron_launch(node_limited, tr, s, 512, 8).command())[2])
        assert (ns.moe_router_num_groups, ns.moe_router_group_topk) == want
