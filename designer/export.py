"""Writers for a study's output folder (the only module here that writes files).

    pareto.csv          one row per front point, fixed column order (PARETO_COLUMNS), units in names;
                        pareto.parquet the same
    pareto_by_<key>.csv one front per value of a design column (when the study asks for it)
    trials.parquet      one row per evaluated cluster design: its best strategy, or why it has none
                        (trials.csv too with output.formats: [parquet, csv])
    strategies/ID.parquet per design, its inner strategies (the front's designs; output.strategies: all,
                        every design), in output.formats like trials
    Every table has the stated column types of COLUMN_TYPES, whatever its values.
    designs.csv         every candidate design with its MILP status and the search method that ran
    megatron_args.txt   per front point, the Megatron-LM command-line arguments
    goal.json           the goal's answer: design, strategy, binding limit, runners-up (a goal other than front)
    meta.json           versions, seed, spec hash, MILP status and gap, wall time, search methods
    pareto.png          matplotlib plot; pareto.html the same as a self-contained interactive SVG
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd

from designer.spec.llm import LLMSpec, Precision, Recompute, Schedule, Strategy, TrainingSpec, pipeline_stage_layers

# Strategy columns, in the order they appear in every CSV.
STRATEGY_COLUMNS: tuple[str, ...] = (
    "tp", "pp", "dp", "ep", "cp", "sequence_parallel", "microbatch_size", "schedule", "virtual_stages",
    "zero_stage", "zeropp_quantized_weights", "zeropp_quantized_gradients", "zeropp_hierarchical_partition",
    "recompute", "overlap_dp_comm", "overlap_tp_comm", "offload_optimizer", "offload_weights",
    "offload_activation_layers", "cp_comm", "overlap_ep_comm", "moe_dispatcher", "cuda_graphs",
    "global_batch_sequences",
)
DESIGN_COLUMNS: tuple[str, ...] = (
    "design_id", "design_source", "label", "family", "platform", "gpu", "n_gpus", "n_domains", "hb_domain_size",
    "nic", "nics_per_gpu", "switch", "radix", "port_gbps", "oversubscription", "n_tiers", "scaleout_gbps_per_gpu",
    "switch_count", "transceiver_count", "dac_count", "nic_count",
    "compute_capex_usd", "network_capex_usd", "capex_usd", "compute_power_w", "network_power_w", "power_w",
)
METRIC_COLUMNS: tuple[str, ...] = (
    "iteration_time_s", "time_to_train_s", "time_to_train_days", "tokens_per_s", "mfu", "hfu",
    "energy_mwh", "memory_per_gpu_gb", "hbm_capacity_gb", "memory_weights_gb", "memory_gradients_gb",
    "memory_optimizer_gb", "memory_activations_gb", "memory_other_gb",
    "compute_s", "tp_s", "cp_s", "pp_s", "dp_s", "ep_s", "bubble_s", "exposed_comm_s", "overlapped_comm_s",
    "tier_hb_bytes", "tier_rail_bytes", "tier_spine_bytes", "binding_tier",
)
PARETO_COLUMNS: tuple[str, ...] = (
    "front_rank", *DESIGN_COLUMNS, *STRATEGY_COLUMNS, *METRIC_COLUMNS, "search_method", "megatron_args",
)
# strategies/<design id>.csv: the inner strategies of a design, one row each
STRATEGY_TRIAL_COLUMNS: tuple[str, ...] = (
    "design_id", "search_method", "trial_number", *STRATEGY_COLUMNS, "feasible", "reason",
    "iteration_time_s", "time_to_train_s", "mfu", "memory_per_gpu_gb", "capex_usd", "power_w", "energy_mwh",
)
# trials.csv: one row per evaluated cluster design, with its best strategy (or why it has none)
TRIAL_COLUMNS: tuple[str, ...] = (
    "design_id", "trial_number", "design_source", "label", "family", "platform", "gpu", "n_gpus", "hb_domain_size",
    "nic", "nics_per_gpu", "switch", "radix", "port_gbps", "oversubscription", "n_tiers", "scaleout_gbps_per_gpu",
    "capex_usd", "power_w", "feasible", "reason", "time_to_train_s", "time_to_train_days", "iteration_time_s", "mfu",
    "memory_per_gpu_gb", "energy_mwh", *STRATEGY_COLUMNS, "search_method", "space_size", "n_evaluations",
)

J_PER_MWH = 3.6e9
GB = 1e9


def strategy_columns(s: Strategy, training: TrainingSpec) -> dict[str, Any]:
    """The strategy's exported columns; the batch it runs is written out (the target when it has none)."""
    d = s.model_dump()
    d["schedule"] = s.schedule.value
    d["recompute"] = s.recompute.value
    d["global_batch_sequences"] = s.global_batch_sequences or training.global_batch_sequences
    return {c: d[c] for c in STRATEGY_COLUMNS}


def metrics_columns(metrics_row: Mapping[str, Any], power_w: float) -> dict[str, Any]:
    """The perf Metrics.row() in the exported names and units (GB for memory, MWh for energy)."""
    r = metrics_row
    out: dict[str, Any] = {
        "iteration_time_s": r["iteration_time_s"], "time_to_train_s": r["time_to_train_s"],
        "time_to_train_days": r["time_to_train_s"] / 86400.0, "tokens_per_s": r["tokens_per_s"], "mfu": r["mfu"],
        "hfu": r["hfu"], "energy_mwh": power_w * r["time_to_train_s"] / J_PER_MWH,
        "memory_per_gpu_gb": r["memory_per_gpu_bytes"] / GB, "hbm_capacity_gb": r["hbm_capacity_bytes"] / GB,
    }
    for part in ("weights", "gradients", "optimizer", "activations", "other"):
        out[f"memory_{part}_gb"] = r[f"memory_{part}_bytes"] / GB
    for k in ("compute_s", "tp_s", "cp_s", "pp_s", "dp_s", "ep_s", "bubble_s", "exposed_comm_s", "overlapped_comm_s",
              "tier_hb_bytes", "tier_rail_bytes", "tier_spine_bytes", "binding_tier"):
        out[k] = r[k]
    return out


def pipeline_layout_args(s: Strategy, n_layers: int) -> list[str]:
    """Megatron-LM flags for the layers of each stage and chunk (designer.spec.llm.pipeline_stage_layers).

    Even stages: nothing, or --num-layers-per-virtual-pipeline-stage when interleaved. Uneven stages
    whose middle stages are equal (and, interleaved, every stage a multiple of the chunks):
    --decoder-first/last-pipeline-num-layers, the form transformer_config.py checks. Anything else: an
    explicit --pipeline-model-parallel-layout string ('E' embedding, 't' a layer, 'L' the loss, '|'
    between chunks, chunk k of stage r at position k * pp + r; pipeline_parallel_layer_layout.py)."""
    if s.pp == 1:
        return []
    v = s.virtual_stages if s.schedule == Schedule.interleaved else 1
    stages = pipeline_stage_layers(n_layers, s.pp, s.pp_first_stage_layers, s.pp_last_stage_layers)
    if not stages:
        return []
    middle = stages[1:-1]
    if len(set(stages)) == 1 and stages[0] % v == 0:
        return [f"--num-layers-per-virtual-pipeline-stage {stages[0] // v}"] if v > 1 else []
    if len(set(middle)) <= 1 and all(n % v == 0 and n > 0 for n in stages):
        out = [f"--decoder-first-pipeline-num-layers {stages[0]}", f"--decoder-last-pipeline-num-layers {stages[-1]}"]
        return out + ([f"--num-virtual-stages-per-pipeline-rank {v}"] if v > 1 else [])
    chunks = [[""] * v for _ in stages]
    for r, n in enumerate(stages):
        for k in range(v):
            c = n // v + (k < n % v)
            chunks[r][k] = "" if c == 0 else ("t" if c == 1 else f"t*{c}")
    chunks[0][0] = "E" + chunks[0][0]
    chunks[-1][-1] = chunks[-1][-1] + ("," if chunks[-1][-1] else "") + "L"
    order = [chunks[r][k] for k in range(v) for r in range(s.pp)]
    # runs of equal chunks as '(c|)*k', the grammar's repetition; the last chunk is written out
    parts, i = [], 0
    while i < len(order) - 1:
        j = i
        while j + 1 < len(order) - 1 and order[j + 1] == order[i]:
            j += 1
        k = j - i + 1
        parts.append(f"({order[i]}|)*{k}" if k > 1 else f"{order[i]}|")
        i = j + 1
    return [f"--pipeline-model-parallel-layout '{','.join(parts)},{order[-1]}'"]


def megatron_args(s: Strategy, llm: LLMSpec, training: TrainingSpec) -> str:
    """Megatron-LM (megatron/training/arguments.py) flags for one strategy. Options Megatron-LM does
    not have (GPipe, ZeRO++) are named in a trailing comment instead of being invented."""
    a = [f"--tensor-model-parallel-size {s.tp}", f"--pipeline-model-parallel-size {s.pp}"]
    notes = []
    a += pipeline_layout_args(s, llm.layers)
    if s.schedule == Schedule.gpipe and s.pp > 1:
        notes.append("GPipe schedule: Megatron-LM runs 1F1B; same bubble, more activation memory")
    if s.sequence_parallel:
        a.append("--sequence-parallel")
    if s.cp > 1:
        a.append(f"--context-parallel-size {s.cp} --cp-comm-type {'allgather' if s.cp_comm == 'all_gather' else s.cp_comm}")
        if not s.cp_load_balance:
            notes.append("CP without causal load balancing: Megatron-LM always balances")
    if s.ep > 1:
        a.append(f"--expert-model-parallel-size {s.ep}")
        if s.moe_dispatcher == "allgather":
            a.append("--moe-token-dispatcher-type allgather")
        if s.moe_dispatcher == "deepep":
            a.append("--moe-token-dispatcher-type flex --moe-enable-deepep")
        if s.overlap_ep_comm:
            a.append("--overlap-moe-expert-parallel-comm")
    a += [f"--micro-batch-size {s.microbatch_size}", f"--global-batch-size {s.global_batch_sequences or training.global_batch_sequences}",
          f"--seq-length {training.sequence_length}"]
    if s.recompute == Recompute.selective:
        a.append("--recompute-granularity selective")
    elif s.recompute == Recompute.full:
        a.append("--recompute-granularity full --recompute-method uniform --recompute-num-layers 1")
    if s.zero_stage in (1, 2):
        # The distributed optimizer shards optimizer state and reduce-scatters gradients (ZeRO-1/2).
        a.append("--use-distributed-optimizer")
    elif s.zero_stage == 3:
        a.append("--use-torch-fsdp2")
        if s.dp * s.cp > 1:
            notes.append("ZeRO-3: fully sharded weights through PyTorch FSDP2")
    if s.overlap_dp_comm and s.dp * s.cp > 1:
        a.append("--overlap-grad-reduce")
        if s.zero_stage in (1, 2):
            a.append("--overlap-param-gather")
    if s.overlap_tp_comm and s.tp > 1:
        a.append("--tp-comm-overlap")
    if s.cuda_graphs:
        a.append("--enable-cuda-graph")
    if s.offload_optimizer:
        a.append("--optimizer-cpu-offload --optimizer-offload-fraction 1.0")
    if s.offload_activation_layers:
        a.append(f"--cpu-offloading --cpu-offloading-num-layers {s.offload_activation_layers}")
    if s.offload_weights:
        notes.append("weight offload: FSDP2 CPUOffloadPolicy (no Megatron-LM flag)")
    if training.precision == Precision.bf16:
        a.append("--bf16")
    elif training.precision == Precision.fp16:
        a.append("--fp16")
    else:
        a.append("--bf16 --fp8-format hybrid")
    zpp = [n for n, on in (("qwZ", s.zeropp_quantized_weights), ("qgZ", s.zeropp_quantized_gradients),
                           ("hpZ", s.zeropp_hierarchical_partition)) if on]
    if zpp:
        notes.append(f"ZeRO++ {'/'.join(zpp)}: DeepSpeed only, no Megatron-LM flag")
    line = " ".join(a)
    return line + (f"  # {'; '.join(notes)}" if notes else "")


# The stated schema of every table written: a column's type does not depend on its values (a float
# column whose values happen to be whole stays float; an integer column with missing values stays
# integer, as a nullable one). Columns not listed (user constraint columns, per-tier extras) keep the
# type pandas gives them.
_INT = ("front_rank", "trial_number", "n_gpus", "n_domains", "hb_domain_size", "radix", "n_tiers", "switch_count",
        "transceiver_count", "dac_count", "nic_count", "tp", "pp", "dp", "ep", "cp", "microbatch_size",
        "virtual_stages", "zero_stage", "offload_activation_layers", "global_batch_sequences", "space_size",
        "n_evaluations")
_BOOL = ("sequence_parallel", "zeropp_quantized_weights", "zeropp_quantized_gradients", "zeropp_hierarchical_partition",
         "overlap_dp_comm", "overlap_tp_comm", "offload_optimizer", "offload_weights", "overlap_ep_comm", "cuda_graphs",
         "feasible")
_STR = ("design_id", "design_source", "label", "family", "platform", "gpu", "nic", "switch", "schedule", "recompute",
        "cp_comm", "moe_dispatcher", "binding_tier", "search_method", "megatron_args", "reason", "front_group")
_FLOAT = ("nics_per_gpu", "port_gbps", "oversubscription", "scaleout_gbps_per_gpu", "compute_capex_usd",
          "network_capex_usd", "capex_usd", "compute_power_w", "network_power_w", "power_w",
          *(c for c in METRIC_COLUMNS if c != "binding_tier"), "memory_per_gpu_gb", "energy_mwh")
COLUMN_TYPES: dict[str, str] = {**{c: "float64" for c in _FLOAT}, **{c: "Int64" for c in _INT},
                                **{c: "boolean" for c in _BOOL}, **{c: "string" for c in _STR}}
TABLE_FORMATS = ("parquet", "csv")


COLUMN_TYPES.update({"oversubscribed_level": "Int64", "gpus_per_nic": "Int64", "spare_domains": "Int64",
                     "job_gpus": "Int64", "link_count": "Int64", "switch_port_count": "Int64", "level": "float64",
                     "hb_topology": "string", "optic": "string", "dac": "string", "dac_for_nic_links": "boolean"})
# Columns named by rule (per-tier and per-constraint columns vary with the study): by their unit suffix.
_SUFFIX_TYPES = (("_usd", "float64"), ("_w", "float64"), ("_gbps", "float64"), ("_gb", "float64"), ("_s", "float64"),
                 ("_bytes_per_s", "float64"), ("_pflops", "float64"), ("_count", "Int64"))


def column_type(name: str) -> str | None:
    """The stated type of a column: COLUMN_TYPES, switch counts per tier, or its unit suffix."""
    if name in COLUMN_TYPES:
        return COLUMN_TYPES[name]
    if name.startswith("switches_"):
        return "Int64"
    for suffix, t in _SUFFIX_TYPES:
        if name.endswith(suffix):
            return t
    return None


def typed(df: pd.DataFrame, columns: Sequence[str] | None = None) -> pd.DataFrame:
    """The frame in its stated column order and types (column_type)."""
    if columns is not None:
        df = df.reindex(columns=list(columns))
    casts = {}
    for c in df.columns:
        t = column_type(str(c))
        if t is not None and str(df[c].dtype) != t:
            casts[c] = t
    if not casts:
        return df
    df = df.copy()
    for c, t in casts.items():
        col = df[c]
        if t in ("Int64", "boolean", "float64") and col.dtype == object:
            col = col.where(col.notna(), None)  # None and NaN alike are missing
            col = pd.to_numeric(col) if t != "boolean" else col
        df[c] = col.astype(t)
    return df


def _float_text(x: float) -> str:
    """A float as CSV text that reads back as a float: 10 significant digits, and '1.0' rather than '1'."""
    t = f"{x:.10g}"
    return t if any(ch in t for ch in ".eninf") else t + ".0"


def _csv(df: pd.DataFrame, path: Path, columns: Sequence[str] | None = None) -> None:
    typed(df, columns).to_csv(path, index=False, float_format=_float_text)


def _parquet(df: pd.DataFrame, path: Path, columns: Sequence[str] | None = None) -> None:
    """Parquet through pyarrow with the stated types (the units are in the column names)."""
    typed(df, columns).to_parquet(path, engine="pyarrow", index=False, compression="zstd")


def _table(df: pd.DataFrame, folder: Path, stem: str, columns: Sequence[str] | None, formats: Sequence[str]) -> list[Path]:
    out = []
    for fmt in formats:
        p = folder / f"{stem}.{fmt}"
        (_parquet if fmt == "parquet" else _csv)(df, p, columns)
        out.append(p)
    return out


COMPLETION_RECORD = "meta.json"


def _sha256(path: Path) -> str:
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _fsync(path: Path) -> None:
    import os

    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_outputs(out_dir: Path, *, pareto: pd.DataFrame, trials: pd.DataFrame, designs: pd.DataFrame,
                  meta: Mapping[str, Any], fronts_by: pd.DataFrame | None = None, front_by: str | None = None,
                  plots: bool = True, title: str = "", strategies: pd.DataFrame | None = None,
                  formats: Sequence[str] = ("parquet",)) -> list[Path]:
    """Write the output set atomically: every file into a staging folder inside `out_dir`, fsynced;
    then the previous completion record (meta.json) is removed, each file renamed into place, and the
    new meta.json, which lists every file with its size, row count and sha256, renamed in last. A kill
    at any point leaves either the previous complete set or a folder without a matching record, which
    `read_pareto` refuses; never a torn file. Returns the paths written."""
    import os
    import shutil

    out_dir.mkdir(parents=True, exist_ok=True)
    stage = out_dir / f".staging-{os.getpid()}"
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir()
    staged = _write_files(stage, pareto=pareto, trials=trials, designs=designs, meta=meta, fronts_by=fronts_by,
                          front_by=front_by, plots=plots, title=title, strategies=strategies, formats=formats)
    files: dict[str, dict[str, Any]] = {}
    rows = {f"{stem}.{fmt}": len(df) for stem, df in (("pareto", pareto), ("trials", trials), ("designs", designs))
            for fmt in TABLE_FORMATS}
    for p in staged:
        rel = p.relative_to(stage).as_posix()
        _fsync(p)
        files[rel] = {"bytes": p.stat().st_size, "sha256": _sha256(p), **({"rows": rows[rel]} if rel in rows else {})}
    record = {**meta, "files": files}
    rec = stage / COMPLETION_RECORD
    rec.write_text(json.dumps(record, indent=2, sort_keys=True, default=str) + "\n")
    _fsync(rec)
    old = out_dir / COMPLETION_RECORD
    if old.exists():
        old.unlink()  # from here until the new record lands, the folder reads as incomplete
    written = []
    for rel in files:
        dest = out_dir / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(stage / rel, dest)
        written.append(dest)
    os.replace(rec, old)
    written.append(old)
    dfd = os.open(out_dir, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    shutil.rmtree(stage, ignore_errors=True)
    return written


def check_complete(out_dir: str | Path) -> dict[str, Any]:
    """The completion record of an output folder, after checking that every file it lists is there
    with its recorded size and hash; SpecError (one line, saying to rerun) otherwise."""
    from designer.errors import SpecError

    d = Path(out_dir)
    rec = d / COMPLETION_RECORD
    if not d.is_dir():
        raise SpecError(f"'{out_dir}' is not a study output folder (no such folder)")
    if not rec.is_file():
        if (d / "pareto.csv").exists():
            raise SpecError(f"'{out_dir}' is incomplete (no meta.json: a run was stopped while writing); rerun the study")
        raise SpecError(f"'{out_dir}' holds no study results; run `designer run STUDY.yaml --out {out_dir}` first")
    try:
        meta = json.loads(rec.read_text())
    except (ValueError, UnicodeDecodeError):
        raise SpecError(f"'{out_dir}': meta.json is not a completion record; rerun the study") from None
    files = meta.get("files") if isinstance(meta, dict) else None
    if not isinstance(files, dict):
        raise SpecError(f"'{out_dir}': meta.json lists no files (written by an older designer?); rerun the study")
    for rel, info in files.items():
        p = d / rel
        if not p.is_file() or p.stat().st_size != info.get("bytes") or _sha256(p) != info.get("sha256"):
            raise SpecError(f"'{out_dir}': {rel} does not match meta.json (another run, or one stopped while "
                            "writing, changed it); rerun the study")
    return meta


def _write_files(out_dir: Path, *, pareto: pd.DataFrame, trials: pd.DataFrame, designs: pd.DataFrame,
                 meta: Mapping[str, Any], fronts_by: pd.DataFrame | None = None, front_by: str | None = None,
                 plots: bool = True, title: str = "", strategies: pd.DataFrame | None = None,
                 formats: Sequence[str] = ("parquet",)) -> list[Path]:
    # The front is the study's export: always CSV, and Parquet too. The large tables (trials and
    # every design's strategies) in the study's output.formats: Parquet by default, since at millions
    # of rows CSV costs most of a run's time and several GB.
    written = _table(pareto, out_dir, "pareto", PARETO_COLUMNS, TABLE_FORMATS[::-1])
    written += _table(trials, out_dir, "trials", TRIAL_COLUMNS + tuple(c for c in trials.columns if c not in TRIAL_COLUMNS),
                      formats)
    if strategies is not None and len(strategies):
        folder = out_dir / "strategies"
        folder.mkdir(exist_ok=True)
        cols = STRATEGY_TRIAL_COLUMNS + tuple(c for c in strategies.columns if c not in STRATEGY_TRIAL_COLUMNS)
        for design_id, rows in strategies.groupby("design_id", sort=True):
            written += _table(rows, folder, str(design_id), cols, formats)
    p = out_dir / "designs.csv"
    _csv(designs, p)
    written.append(p)
    if fronts_by is not None and front_by:
        p = out_dir / f"pareto_by_{front_by}.csv"
        _csv(fronts_by, p, ("front_group", *PARETO_COLUMNS))
        written.append(p)
    p = out_dir / "megatron_args.txt"
    lines = [f"# {len(pareto)} Pareto points; Megatron-LM arguments per point (front_rank, design, capex, days)"]
    for _, r in pareto.iterrows():
        lines.append(f"# {int(r['front_rank'])}: {r['design_id']}  ${r['capex_usd'] / 1e6:,.1f}M  "
                     f"{r['time_to_train_days']:.1f} days  MFU {r['mfu']:.3f}")
        lines.append(str(r["megatron_args"]))
    p.write_text("\n".join(lines) + "\n")
    written.append(p)
    goal = meta.get("goal") or {}
    if goal.get("goal", "front") != "front":
        p = out_dir / "goal.json"
        p.write_text(json.dumps(goal, indent=2, sort_keys=True, default=str) + "\n")
        written.append(p)
    if plots:
        written += plot_front(out_dir, pareto, designs, fronts_by, front_by, title)
    return written


def _groups(pareto: pd.DataFrame, fronts_by: pd.DataFrame | None, front_by: str | None) -> list[tuple[str, pd.DataFrame]]:
    if fronts_by is not None and front_by and len(fronts_by):
        return [(f"{front_by} {g}", df) for g, df in fronts_by.groupby("front_group", sort=True)]
    return [("Pareto front", pareto)]


def plot_front(out_dir: Path, pareto: pd.DataFrame, designs: pd.DataFrame, fronts_by: pd.DataFrame | None,
               front_by: str | None, title: str = "") -> list[Path]:
    """pareto.png (matplotlib, headless) and pareto.html (inline SVG; hover a point for its details)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = _groups(pareto, fronts_by, front_by)
    fig, ax = plt.subplots(figsize=(7.5, 5))
    feas = designs[designs["best_time_to_train_s"].notna()] if "best_time_to_train_s" in designs else designs.iloc[0:0]
    if len(feas):
        ax.scatter(feas["capex_usd"] / 1e6, feas["best_time_to_train_s"] / 86400, s=14, color="0.75",
                   label="candidate designs (best strategy)", zorder=1)
    for name, df in groups:
        df = df.sort_values("capex_usd")
        ax.step(df["capex_usd"] / 1e6, df["time_to_train_days"], where="post", zorder=2)
        ax.scatter(df["capex_usd"] / 1e6, df["time_to_train_days"], s=30, zorder=3, label=name)
    ax.set_xlabel("capex (million USD)")
    ax.set_ylabel("time to train (days)")
    ax.set_title(title or "capex vs time to train")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    png = out_dir / "pareto.png"
    fig.savefig(png, dpi=120)
    plt.close(fig)
    htm = out_dir / "pareto.html"
    htm.write_text(_svg_page(groups, feas, title))
    return [png, htm]


_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf")


def _svg_page(groups: list[tuple[str, pd.DataFrame]], others: pd.DataFrame, title: str) -> str:
    """A dependency-free page: an SVG scatter with axes; each point's <title> is its hover text and a
    click shows the point's Megatron-LM arguments below the plot."""
    W, H, L, R, T, B = 820, 520, 80, 200, 30, 60
    xs = [v / 1e6 for _, df in groups for v in df["capex_usd"]] + [v / 1e6 for v in others.get("capex_usd", [])]
    ys = [v for _, df in groups for v in df["time_to_train_days"]] + \
         [v / 86400 for v in others.get("best_time_to_train_s", [])]
    if not xs:
        xs, ys = [0.0, 1.0], [0.0, 1.0]
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(ys), max(ys)
    pad = lambda a, b: ((b - a) * 0.08 or abs(a) * 0.1 or 1.0)  # noqa: E731
    x0, x1, y0, y1 = x0 - pad(x0, x1), x1 + pad(x0, x1), max(0.0, y0 - pad(y0, y1)), y1 + pad(y0, y1)
    sx = lambda x: L + (x - x0) / (x1 - x0) * (W - L - R)  # noqa: E731
    sy = lambda y: H - B - (y - y0) / (y1 - y0) * (H - T - B)  # noqa: E731
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
             f'<rect x="{L}" y="{T}" width="{W - L - R}" height="{H - T - B}" fill="white" stroke="#999"/>']
    for i in range(6):
        xv = x0 + (x1 - x0) * i / 5
        yv = y0 + (y1 - y0) * i / 5
        parts.append(f'<text x="{sx(xv):.1f}" y="{H - B + 18}" text-anchor="middle">{xv:,.1f}</text>')
        parts.append(f'<text x="{L - 8}" y="{sy(yv) + 4:.1f}" text-anchor="end">{yv:,.1f}</text>')
        parts.append(f'<line x1="{L}" x2="{W - R}" y1="{sy(yv):.1f}" y2="{sy(yv):.1f}" stroke="#eee"/>')
    parts.append(f'<text x="{(L + W - R) / 2}" y="{H - 15}" text-anchor="middle">capex (million USD)</text>')
    parts.append(f'<text x="18" y="{(T + H - B) / 2}" text-anchor="middle" transform="rotate(-90 18 {(T + H - B) / 2})">'
                 'time to train (days)</text>')
    for _, r in others.iterrows():
        tip = html.escape(f"{r.get('design_id', '')}: ${r['capex_usd'] / 1e6:,.2f}M, {r['best_time_to_train_s'] / 86400:.2f} days")
        parts.append(f'<circle cx="{sx(r["capex_usd"] / 1e6):.1f}" cy="{sy(r["best_time_to_train_s"] / 86400):.1f}" r="3" '
                     f'fill="#bbb"><title>{tip}</title></circle>')
    for gi, (name, df) in enumerate(groups):
        color = _COLORS[gi % len(_COLORS)]
        df = df.sort_values("capex_usd")
        pts = []
        for k, (_, r) in enumerate(df.iterrows()):
            x, y = sx(r["capex_usd"] / 1e6), sy(r["time_to_train_days"])
            if k:
                pts.append(f"{x:.1f},{pts[-1].split(',')[1]}")
            pts.append(f"{x:.1f},{y:.1f}")
        if pts:
            parts.append(f'<polyline points="{" ".join(pts)}" fill="none" stroke="{color}" stroke-width="1.5"/>')
        for _, r in df.iterrows():
            tip = (f"{r['design_id']} | {r['family']} {r['platform']} {int(r['n_gpus'])} GPUs | "
                   f"${r['capex_usd'] / 1e6:,.2f}M | {r['time_to_train_days']:.2f} days | MFU {r['mfu']:.3f} | "
                   f"tp{r['tp']} pp{r['pp']} dp{r['dp']} ep{r['ep']} cp{r['cp']} mbs{r['microbatch_size']} "
                   f"{r['schedule']} zero{r['zero_stage']} recompute {r['recompute']}")
            args = html.escape(str(r["megatron_args"]), quote=True)
            parts.append(f'<circle cx="{sx(r["capex_usd"] / 1e6):.1f}" cy="{sy(r["time_to_train_days"]):.1f}" r="5" '
                         f'fill="{color}" style="cursor:pointer" data-args="{args}" '
                         f'onclick="document.getElementById(\'args\').textContent=this.dataset.args">'
                         f'<title>{html.escape(tip)}</title></circle>')
        ly = T + 16 + 18 * gi
        parts.append(f'<circle cx="{W - R + 16}" cy="{ly - 4}" r="5" fill="{color}"/>'
                     f'<text x="{W - R + 26}" y="{ly}">{html.escape(name)}</text>')
    parts.append("</svg>")
    return ("<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>" + html.escape(title or "Pareto front") +
            "</title></head><body style='font-family:sans-serif'>\n<h3>" + html.escape(title or "Pareto front") +
            "</h3>\n" + "\n".join(parts) + "\n<p>Hover a point for its design and strategy; click it for its "
            "Megatron-LM arguments:</p>\n<pre id='args' style='white-space:pre-wrap'></pre>\n</body></html>\n")


def read_pareto(out_dir: str | Path) -> pd.DataFrame:
    """The front of a complete output folder (check_complete first: a torn or mixed folder is refused)."""
    meta = check_complete(out_dir)
    front = typed(pd.read_csv(Path(out_dir) / "pareto.csv"))
    want = meta["files"].get("pareto.csv", {}).get("rows")
    if want is not None and len(front) != want:
        from designer.errors import SpecError

        raise SpecError(f"'{out_dir}': pareto.csv has {len(front)} rows, meta.json says {want}; rerun the study")
    return front


def finite_or_none(x: float) -> float | None:
    return None if x is None or (isinstance(x, float) and not math.isfinite(x)) else x


__all__ = ["COLUMN_TYPES", "TABLE_FORMATS", "column_type", "typed", "COMPLETION_RECORD", "DESIGN_COLUMNS", "check_complete", "METRIC_COLUMNS", "PARETO_COLUMNS", "STRATEGY_COLUMNS", "STRATEGY_TRIAL_COLUMNS",
           "TRIAL_COLUMNS", "megatron_args",
           "metrics_columns", "plot_front", "read_pareto", "strategy_columns", "write_outputs"]
