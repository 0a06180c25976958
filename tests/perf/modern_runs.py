"""The measured runs of training-runs-modern.md (tests/perf/data/modern_runs.yaml) as model runs.

`cases()` turns each usable row into (row, llm, training, strategy, system) with the rules of
data/modern_systems.yaml (systems and framework defaults; nothing per row), `errors()` scores them on
tokens/s per GPU, the quantity every source measured, and `table()` formats the per-set results.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from designer import units
from designer.perf.model import PerfCalibration, at_nccl_release, evaluate_system, evaluate_many, load_perf_calibration
from designer.perf.records import Metrics
from designer.spec.catalog import load_catalog
from designer.spec.llm import Recompute, RecomputeModule, Schedule, Strategy, TrainingSpec
from designer.spec.models import load_model
from designer.spec.system import ClusterSystem, HBDomain, NetworkTier

DATA = Path(__file__).parent / "data"
SETS = ("dense-3d", "dense-fsdp", "long-ctx", "moe")


@functools.lru_cache(maxsize=1)
def rows() -> tuple[dict, ...]:
    return tuple(yaml.safe_load((DATA / "modern_runs.yaml").read_text())["rows"])


@functools.lru_cache(maxsize=1)
def heldout() -> dict:
    """Megatron-Bridge performance-summary rows that training-runs-modern.md does not copy, with the
    recipes their releases ran (data/megatron_bridge_heldout.yaml): scored, never fitted."""
    return yaml.safe_load((DATA / "megatron_bridge_heldout.yaml").read_text())


def heldout_rows() -> tuple[dict, ...]:
    return tuple(heldout()["rows"])


@functools.lru_cache(maxsize=1)
def mlperf_heldout() -> dict:
    """MLPerf Training GPT-3 (v3.0-v4.1) and Llama 3.1 (v5.0, v5.1) results that training-runs-modern.md S6
    does not copy, stated as S6's rows are, with each run's start and S6's rows' (data/mlperf_heldout.yaml):
    scored, never fitted."""
    return yaml.safe_load((DATA / "mlperf_heldout.yaml").read_text())


def mlperf_heldout_rows() -> tuple[dict, ...]:
    return tuple(mlperf_heldout()["rows"])


@functools.lru_cache(maxsize=1)
def systems() -> dict:
    return yaml.safe_load((DATA / "modern_systems.yaml").read_text())


@functools.lru_cache(maxsize=1)
def recipes() -> dict:
    """Per Megatron-Bridge row, the performance recipe's CUDA-graph, dispatcher and EP-overlap
    settings (data/megatron_bridge_recipes.yaml, read from the release's scripts/performance/); per
    NeMo row whose recipe states more than the row, its recompute, offload and shard group
    (data/nemo_recipes.yaml)."""
    bridge = yaml.safe_load((DATA / "megatron_bridge_recipes.yaml").read_text())["rows"]
    nemo = yaml.safe_load((DATA / "nemo_recipes.yaml").read_text())["rows"]
    if set(bridge) & set(nemo):
        raise ValueError(f"rows with two recipes: {sorted(set(bridge) & set(nemo))}")
    return {**bridge, **nemo}


def recipe_of(row: dict) -> dict:
    """The recipe a row ran: a held-out row's (those rows carry their `release`) from the held-out file,
    read only when one is scored, so no calibration run depends on it; a calibration row's from
    recipes(); {} where none is read."""
    if row.get("release") and row["id"] in heldout()["recipes"]:
        return heldout()["recipes"][row["id"]]
    return recipes().get(row["id"], {})


def captures_whole_iteration(recipe: dict) -> bool:
    """The designer's cuda_graphs: the recipe captures the whole iteration (Megatron cuda_graph_impl
    full_iteration, or the local implementation with scope full_iteration)."""
    impl = recipe.get("cuda_graph_impl", "none")
    return impl == "full_iteration" or (impl == "local" and recipe.get("cuda_graph_scope") == ["full_iteration"])


def hb_size(row: dict) -> int:
    """GPUs per NVLink domain the job sees: the node (8), or on NVL72 racks whole racks of 72 when
    the count allows, else 64 per rack; a job within one rack has one domain."""
    n = row["gpus"]
    if row["gpu"] not in systems()["rack_scale"]:
        return min(row["hb_domain"], n)
    if n <= 72:
        return n
    return 72 if n % 72 == 0 else 64


def system_for(row: dict) -> ClusterSystem:
    cfg = systems()
    gpu = load_catalog().gpu(row["gpu"])
    nic_gbps = cfg["nic_gbps_by_source"].get(row["source"], {}).get(row["gpu"], cfg["nic_gbps"][row["gpu"]])
    nic = units.gbps_to_bytes_per_s(nic_gbps)
    n, k = row["gpus"], hb_size(row)
    n_dom = n // k
    # rail-optimized fat-tree: rail leaves of 32 domains, a cross-rail spine above
    tiers = (NetworkTier(name="leaf", span_domains=min(32, n_dom), cross_rail=False, bandwidth_per_gpu_bytes_per_s=nic),
             NetworkTier(name="spine", span_domains=n_dom, cross_rail=True, bandwidth_per_gpu_bytes_per_s=nic))
    hb = HBDomain(size=k, bandwidth_per_gpu_bytes_per_s=gpu.hb_gb_per_s_per_direction * 1e9, in_network_reduction=k > 1
                  and gpu.architecture != "ampere")
    return ClusterSystem(gpu=gpu.perf(), n_gpus=n, hb=hb, nic_bandwidth_per_gpu_bytes_per_s=nic, tiers=tiers)


_ZERO = {"ddp": 0, "distopt": 1, "zero1": 1, "zero2": 2, "fsdp": 3, "hsdp": 3, None: 1}


# a row's stated gradient-accumulation steps ("LBS 8, GA 4")
_GA = re.compile(r"\bGA (\d+)\b")
# Megatron's 1F1B all-to-all overlap (--overlap-moe-expert-parallel-comm: a micro-batch's EP
# communication hidden behind another's compute), as the sources name it ("1F1B A2A overlap")
_EP_OVERLAP = re.compile(r"1f1b( a2a| all-to-all| ep)? overlap")


def block_checkpointing(row: dict) -> bool:
    """fms-fsdp's "Selective AC": activation checkpointing of every (1/p)-th block, p unpublished."""
    return row["framework"] == "fms-fsdp" and row["recompute"] == "selective"


def stated_recompute(row: dict):
    """The row's recompute as its source states it: the row's own, else its performance recipe's
    (megatron_bridge_recipes.yaml `recompute`), else None (not stated)."""
    rc = row["recompute"]
    return rc if rc is not None else recipe_of(row).get("recompute")


def container_release(row: dict) -> str | None:
    """The NeMo / Megatron-Bridge container (YY.MM) a row's source names, read from the source, the
    row id or the row's notes (training-runs-modern.md: S2 is NeMo 24.07's table, S5's NeMo rows ran
    24.12, S4's ids carry their release)."""
    if row["source"] == "S2":
        return "24.07"
    if row["source"] == "S5":
        return None if row["framework"] == "maxtext" else "24.12"
    if row["source"] == "S4":
        m = re.match(r"MB(\d\d)(\d\d)", row["id"])
        return f"{m.group(1)}.{m.group(2)}"
    if row["source"] in ("S3", "S6", "S11"):
        m = re.search(r"NeMo (\d\d)\.(\d\d)", row["notes"])
        return f"{m.group(1)}.{m.group(2)}" if m else None
    return None


def attention_kernel_for(row: dict) -> str:
    """The framework's attention kernel, or FlashAttention-2 where the row's container turned cuDNN's
    off (modern_systems.yaml flash2_containers)."""
    fw = systems()["frameworks"][row["framework"]]
    return "flash2" if container_release(row) in fw.get("flash2_containers", ()) else fw["attention_kernel"]


# Megatron-Core's layout grammar (megatron/core/transformer/pipeline_parallel_layer_layout.py
# parse_str_to_list): "(..)*n" and "x*n" repeat, "," is cosmetic
_LAYOUT_REPEATS = (re.compile(r"\(([^)]+)\)\*(\d+)"), re.compile(r"(.)\*(\d+)"))


def layout_stages(layout: str) -> list[str]:
    """A Megatron-Core --pipeline-model-parallel-layout unrolled into its virtual stages: '|'
    separates them, t is a decoder layer, E, m and L the embedding, the MTP layer and the loss."""
    text = layout.replace(",", "")
    for pattern in _LAYOUT_REPEATS:
        text = pattern.sub(lambda g: g.group(1) * int(g.group(2)), text)
    return text.split("|")


def layout_end_stages(layout: str, pp: int) -> tuple[int, int]:
    """The decoder layers of the first and the last pipeline rank under a layout (layout_stages):
    virtual stage i runs on pipeline rank i mod pp (PipelineParallelLayerLayout.__init__:
    layout[vpp_rank * pp + pp_rank])."""
    stages = layout_stages(layout)
    if len(stages) % pp or set("".join(stages)) - set("tEmL"):
        raise ValueError(f"pp_layout {layout!r} is no layout of {pp} pipeline ranks")
    per_rank = [sum(st.count("t") for st in stages[r::pp]) for r in range(pp)]
    return per_rank[0], per_rank[-1]


def strategy_for(row: dict) -> Strategy:
    fw = systems()["frameworks"][row["framework"]]
    rc = stated_recompute(row)
    modules: tuple = ()
    if rc is None:
        recompute = Recompute.none
    elif isinstance(rc, list):
        recompute, modules = Recompute.selective, tuple(RecomputeModule(m) for m in rc)
    else:
        recompute = Recompute(rc)
    sharding = row["sharding"]
    zero = _ZERO[sharding]
    recipe = recipe_of(row)
    # the recipe's pipeline layout (DeepSeek-V3's: the embedding and the MTP layer and loss weigh on
    # the end stages, so they hold fewer decoder layers than Megatron's default uneven split gives)
    first_layers = last_layers = None
    if recipe.get("pp_layout") and row["pp"] > 1:
        first_layers, last_layers = layout_end_stages(recipe["pp_layout"], row["pp"])
    shard_group = row["shard_group"] if sharding == "hsdp" and row["shard_group"] else recipe.get("shard_group")
    if shard_group and shard_group >= row["dp"] * row["cp"]:
        shard_group = None
    mbs = row["mbs"]
    if mbs is None and row["pp"] > 1 and fw.get("pp_microbatches") == "pp":
        mbs = max(row["gbs"] // (row["dp"] * row["pp"]), 1)  # the local batch in pp microbatches
    vp = row["vp"]
    if vp is None and fw.get("interleaved_stages_per_rank") and "interleaved" in (row.get("notes") or "").lower():
        vp = fw["interleaved_stages_per_rank"]  # the row names an interleaved schedule without its stages
    interleaved = bool(vp) and row["pp"] > 1
    # PyTorch pipelining runs one schedule per gradient-accumulation step: the row's stated "GA n"
    flushes = 1
    ga = _GA.search(row.get("notes") or "")
    if fw.get("schedule_per_accumulation_step") and row["pp"] > 1 and ga:
        flushes = int(ga.group(1))
    schedule = Schedule.interleaved if interleaved else Schedule.one_f_one_b
    if row["framework"] == "deepseek":
        schedule = Schedule.dualpipe
    overlap = (row.get("overlap") or "").lower()
    overlap_tp = fw["overlap_tp"] or "asynctp" in overlap.replace(" ", "")
    if "vanilla tp" in overlap:
        overlap_tp = False
    # the frameworks whose experts run one grouped GEMM (modern_systems.yaml expert_gemm); AutoModel
    # adds expert biases expert by expert from host-side splits (layers.py GroupedExpertsDeepEP
    # ._apply_bias: torch.split(..., tokens_per_expert.tolist())), so a model with biases launches
    # per expert there
    expert_gemm = fw.get("expert_gemm", "per_expert")
    if expert_gemm == "grouped" and fw.get("expert_bias_per_expert") and load_model(row["model"]).linear_bias:
        expert_gemm = "per_expert"
    return Strategy(
        tp=row["tp"], pp=row["pp"], dp=row["dp"], cp=row["cp"], ep=row["ep"], expert_gemm=expert_gemm,
        expert_tp=row["etp"] or (row["tp"] if fw.get("expert_tp_default") == "tp" else 1),
        sequence_parallel=fw["sequence_parallel"] and row["tp"] > 1, microbatch_size=mbs or 1,
        schedule=schedule, virtual_stages=vp if interleaved else 1, pipeline_flushes=flushes, zero_stage=zero,
        pp_first_stage_layers=first_layers, pp_last_stage_layers=last_layers,
        fsdp_reshard_after_forward=fw["reshard_under_pp"] or row["pp"] == 1, shard_group_size=shard_group,
        recompute=recompute, recompute_modules=modules, attention_kernel=attention_kernel_for(row),
        overlap_tp_comm=overlap_tp and row["tp"] > 1, cp_comm=fw.get("cp_comm", "p2p"),
        overlap_ep_comm=row["framework"] == "deepseek" or _EP_OVERLAP.search(overlap) is not None
        or recipe.get("overlap_ep_comm", False),
        # the source or its recipe names a node-deduplicating dispatcher (DeepEP, HybridEP; DeepSeek's own kernels)
        moe_dispatcher="deepep" if (row["framework"] == "deepseek" or recipe.get("moe_dispatcher") in ("deepep", "hybridep") or any(
            k in text for text in (overlap, (row.get("notes") or "").lower()) for k in ("deepep", "hybridep")))
        else "alltoall",
        cuda_graphs=captures_whole_iteration(recipe),
        elementwise_kernels="eager" if fw.get("eager_unless_compiled") and "torch.compile" not in overlap else "fused",
        cross_entropy="eager" if fw.get("eager_loss_unless_compiled") and (
            "torch.compile" not in overlap or any((row.get("notes") or "").startswith(f"{src}:")
                                                  for src in fw.get("eager_loss_sources", ()))) else "fused",
        qkv_projection=fw.get("qkv_projection", "fused"), recompute_replay=fw.get("recompute_replay", "module"),
        activation_input_fp8=fw.get("activation_input_fp8", False),
        activation_layout=fw.get("activation_layout", "sequence_first"),
        offload_activation_layers=int(recipe.get("activation_offload_layers", 0)),
        # the element-wise steps the framework runs op by op (modern_systems.yaml unfused_ops; the
        # rotary embedding for the models its provider gives YaRN-scaled RoPE)
        unfused_ops=tuple(fw.get("unfused_ops", ())) + (
            ("rope",) if row["model"] in fw.get("unfused_rope_models", ()) else ()))


# Composer's FSDP mixed_precision as llm-foundry's rows state it ("precision amp_bf16 / DEFAULT")
_FSDP_MIXED_PRECISION = re.compile(r"precision \w+ / (\w+)")


def grad_reduce_dtype(row: dict) -> str:
    """The gradients' dtype on the data-parallel wire: the framework's, or, where the framework's
    FSDP mixed-precision mode decides it, the mode the row states (modern_systems.yaml)."""
    fw = systems()["frameworks"][row["framework"]]
    by_mode = fw.get("grad_reduce_dtype_by_mixed_precision")
    mode = _FSDP_MIXED_PRECISION.search(row.get("notes") or "")
    if by_mode and mode:
        return by_mode[mode.group(1)]
    return fw.get("grad_reduce_dtype", "bf16")


def training_for(row: dict) -> TrainingSpec:
    prec = row["precision"]
    fw = systems()["frameworks"][row["framework"]]
    run_recipe = recipe_of(row)
    recipe = "mxfp8" if prec == "mxfp8" else (row["fp8_recipe"] or "delayed")
    return TrainingSpec(sequence_length=row["seq"], global_batch_sequences=row["gbs"], precision=prec,
                        fp8_recipe=row["fp8_recipe"] or "delayed", total_tokens=1e12,
                        # the framework's recipes keep FP8 weights (modern_systems.yaml), or the row says so
                        # (MLPerf v5.0 Llama: "FP8 params / FP8 param-gather", training-runs-modern.md S6)
                        fp8_param_gather=prec in ("fp8", "mxfp8") and (
                            recipe in fw.get("fp8_param_gather_recipes", ()) or any(
                                k in (row.get("notes") or "").lower() for k in ("fp8 param-gather", "fp8 all-gather"))),
                        # Muon's recipes turn the precision-aware optimizer off, fp32 main gradients
                        # (Megatron-Bridge recipes/kimi/kimi_k2.py: use_precision_aware_optimizer False,
                        # main_grads_dtype float32)
                        grad_accumulation_dtype="fp32" if run_recipe.get("optimizer") == "muon"
                        else fw.get("grad_accumulation_dtype", "fp32"),
                        grad_reduce_dtype=grad_reduce_dtype(row),
                        optimizer_state_dtype="bf16" if row["framework"] == "deepseek"
                        else fw.get("optimizer_state_dtype", "fp32"),
                        # the recipe's optimizer (Kimi K2's Megatron-Bridge recipes train with Muon)
                        optimizer=run_recipe.get("optimizer", "adam"),
                        muon_ns_steps=run_recipe.get("muon_ns_steps", 5),
                        moe_routing=fw.get("moe_routing", "uniform"),
                        # a learned router's uneven load where the source says the balance was not forced
                        # (the ModelZoo's "dropless routing (not forced balance)" rows, DeepSeek-V3's own run)
                        moe_load_balance="learned" if "not forced balance" in (row.get("notes") or "") else "forced",
                        fp32_sharded_params=fw.get("fp32_sharded_params", False),
                        fp32_master_weights=fw.get("fp32_master_weights", True),
                        # where the framework's compiler fuses the quantisation (modern_systems.yaml)
                        low_precision_casts=fw.get("low_precision_casts", "kernels"),
                        # the Megatron-Bridge recipe's fp8_dot_product_attention (megatron_bridge_recipes.yaml)
                        fp8_attention=prec in ("fp8", "mxfp8", "nvfp4") and run_recipe.get("fp8_attention", False),
                        attention_output_saved=attention_output_saved(row))


# Megatron-based stacks: Megatron-Core keeps the 16-bit attention output for the output projection
# (save_original_input, TrainingSpec.attention_output_saved) from core_v0.15 (Megatron-LM 781e765818,
# 2025-08-19; the core_v0.14.0 release branch, tagged 2025-10-08, lacks it), taken as shipped from the
# 25.11 containers on; earlier releases and the MLPerf v5.x submissions (NeMo 25.09 and older)
# kept Transformer Engine's quantised copy.
MEGATRON_FRAMEWORKS = ("megatron", "megatron-bridge", "nemo", "mlperf-nvidia", "mlperf-nvidia-nemo1")


def attention_output_saved(row: dict) -> str | None:
    """'quantized' for a low-precision Megatron-based row from before core_v0.15 (its container
    before 25.11, or not named); None (the model's default, today's Megatron-Core) otherwise."""
    if row["framework"] not in MEGATRON_FRAMEWORKS or row["precision"] not in ("fp8", "mxfp8", "nvfp4"):
        return None
    release = container_release(row)
    return None if release is not None and release >= "25.11" else "quantized"


def corrections(row: dict) -> dict:
    """The published cells a row's recipe and its neighbouring releases show to be misprinted
    (megatron_bridge_recipes.yaml `corrections`, with `correction_evidence`); empty for the rest."""
    return dict(recipe_of(row).get("corrections") or {})


def case(row: dict):
    row = {**row, **corrections(row)}
    llm = load_model(row["model"])
    if row["layers"]:
        llm = llm.model_copy(update={"layers": row["layers"]})
    return llm, training_for(row), strategy_for(row), system_for(row)


@dataclass(frozen=True)
class RowError:
    id: str
    set: str
    gpu: str
    precision: str
    measured: float  # tokens/s per GPU
    predicted: float
    memory_gb: float
    fits: bool

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1.0


# Where a source does not state its recomputation, its recipe used the least that fits: this ladder,
# first fit (Megatron-Bridge / NeMo performance recipes enable recompute only where memory needs it).
RECOMPUTE_LADDER = (
    dict(recompute=Recompute.none),
    dict(recompute=Recompute.selective),
    dict(recompute=Recompute.selective, recompute_modules=(RecomputeModule.core_attn, RecomputeModule.layernorm,
                                                           RecomputeModule.moe_act)),
    dict(recompute=Recompute.selective, recompute_modules=(RecomputeModule.core_attn, RecomputeModule.layernorm,
                                                           RecomputeModule.mlp, RecomputeModule.moe)),
    dict(recompute=Recompute.full),
)


def calibration_for(row: dict, calib: PerfCalibration) -> PerfCalibration:
    """`calib` with its collective model at the NCCL release the row's container shipped
    (row["nccl_version"], see the data file's header), or unchanged where the source names none."""
    return at_nccl_release(calib, row.get("nccl_version"))


def evaluate_row(row: dict, calib):
    """The model's verdict on a row: its stated configuration, or, where the recompute is not
    stated, the first rung of RECOMPUTE_LADDER that fits (the last rung if none does). The row is
    priced with the NCCL release of its software stack (calibration_for)."""
    llm, tr, st, sy = case(row)
    calib = calibration_for(row, calib)
    if block_checkpointing(row):
        # fms-fsdp's "Selective AC" checkpoints whole blocks, a fraction of them evenly spaced
        # (fms_fsdp/policies/ac_handler.py apply_fsdp_checkpointing, `selective_checkpointing`),
        # a fraction the source does not publish: the fewest recomputed layers that fit
        cands = [st.model_copy(update=dict(recompute=Recompute.none) if n == 0 else
                               dict(recompute=Recompute.full, recompute_modules=(), recompute_num_layers=n))
                 for n in range(llm.layers + 1)]
        fits = evaluate_many(llm, tr, cands, sy, calib=calib).feasible
        cand = cands[int(np.argmax(fits))] if fits.any() else cands[-1]
        return evaluate_system(llm, tr, cand, sy, calib=calib), cand
    if stated_recompute(row) is not None:
        return evaluate_system(llm, tr, st, sy, calib=calib), st
    for rung in RECOMPUTE_LADDER:
        cand = st.model_copy(update=rung)
        m = evaluate_system(llm, tr, cand, sy, calib=calib)
        if isinstance(m, Metrics):
            return m, cand
    return m, cand


def errors(calib=None, sets=SETS, only=None, source=rows) -> list[RowError]:
    """Per usable row of `source()` (the calibration rows; heldout_rows for the held-out ones) in
    `sets`: the model's tokens/s per GPU against the measured."""
    calib = calib or load_perf_calibration()
    out = []
    for row in source():
        if not row["use"] or row["set"] not in sets or (only and row["id"] not in only):
            continue
        llm, tr, _, sy = case(row)
        m, st = evaluate_row(row, calib)
        # a row that does not fit by the memory model still ran: it is scored on its time (the
        # memory verdict is reported beside it)
        if not isinstance(m, Metrics):
            from designer.perf.iteration import iteration_arrays
            from designer.perf.records import StrategyArrays

            r = iteration_arrays(llm, tr, StrategyArrays.from_strategies([st]), sy, calibration_for(row, calib))
            if int(r["code"][0]) != 9:
                raise AssertionError(f"{row['id']}: the model rejects the published configuration: {m.reason}")
            tps, mem_b, fits = float(r["tokens_per_s"][0]), float(r["memory_per_gpu_bytes"][0]), False
        else:
            tps, mem_b, fits = m.tokens_per_s, m.memory_per_gpu_bytes, True
        out.append(RowError(row["id"], row["set"], row["gpu"], row["precision"],
                            row["measured"]["tokens_per_s_per_gpu"], tps / row["gpus"], mem_b / 1e9, fits))
    return out


def summary(errs: list[RowError]) -> dict[str, tuple[float, float, int]]:
    """Per set: (MAPE, worst |error|, rows)."""
    out = {}
    for s in SETS:
        e = np.array([abs(r.error) for r in errs if r.set == s])
        if len(e):
            out[s] = (float(e.mean()), float(e.max()), len(e))
    return out


def assert_set_within(errs: list[RowError], name: str, mape_bound: float, within_bound: float) -> None:
    """Print set `name`'s table (pytest -s) and assert its MAPE and its share of rows within 10%."""
    errs = [e for e in errs if e.set == name]
    print("\n" + table(errs))
    mape = sum(abs(e.error) for e in errs) / len(errs)
    within = sum(abs(e.error) <= 0.10 for e in errs) / len(errs)
    assert mape <= mape_bound, f"{name}: MAPE {100 * mape:.1f}% > {100 * mape_bound:.1f}%"
    assert within >= within_bound, f"{name}: {100 * within:.0f}% of rows within 10%"


def assert_tables_show(text: str, errs: list[RowError]) -> None:
    """A validation table (studies/calibration/validation_tables.py) in `text` shows what the model
    computes now: every row of `errs` once, with its designer figure and error."""
    shown = {m[0]: (m[1], m[2]) for m in re.findall(r"^\| ([A-Z][\w.-]*) \| [\d,]+ \| ([\d,]+) \| ([+-]\d+\.\d)% \|",
                                                     text, flags=re.MULTILINE)}
    assert set(shown) == {e.id for e in errs}, "rerun studies/calibration/validation_tables.py"
    for e in errs:
        assert shown[e.id] == (f"{e.predicted:,.0f}", f"{100 * e.error:+.1f}"), (e.id, shown[e.id])


def table(errs: list[RowError]) -> str:
    lines = []
    for s, (mape, worst, n) in summary(errs).items():
        lines.append(f"## {s}: {n} rows, MAPE {100 * mape:.1f}%, worst {100 * worst:.1f}%")
        lines.append(f"{'row':14s} {'gpu':15s} {'prec':6s} {'measured':>10s} {'designer':>10s} {'error':>7s} {'mem GB':>7s}")
        for r in sorted((r for r in errs if r.set == s), key=lambda r: r.error):
            flag = "" if r.fits else " (over HBM)"
            lines.append(f"{r.id:14s} {r.gpu:15s} {r.precision:6s} {r.measured:10.0f} {r.predicted:10.0f} "
                         f"{100 * r.error:+6.1f}% {r.memory_gb:7.1f}{flag}")
    return "\n".join(lines)
