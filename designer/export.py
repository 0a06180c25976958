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
    megatron_args.txt   per front point, the full Megatron-LM launch (designer.launch)
    torchtitan/RANK.toml per dense front point, a torchtitan job config
    goal.json           the goal's answer: design, strategy, binding limit, runners-up (a goal other than front)
    meta.json           versions, seed, spec hash, MILP status and gap, wall time, search methods
    robustness.csv/.png with a `robustness` section: per candidate design, its chance to stay on the
                        front and to be the goal's answer as catalog prices vary jointly
    pareto.png          matplotlib plot; report.html the interactive report (plotly, self-contained)
    previous/HASH/      an earlier spec's complete set, moved aside when the edited study reran here
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd

from designer.perf.records import Breakdown, recompute_module_label, recompute_module_mask
from designer.spec.llm import Recompute, Strategy, TrainingSpec

# Strategy columns, in the order they appear in every CSV.
STRATEGY_COLUMNS: tuple[str, ...] = (
    "tp", "pp", "dp", "ep", "cp", "sequence_parallel", "microbatch_size", "schedule", "virtual_stages",
    "zero_stage", "zeropp_quantized_weights", "zeropp_quantized_gradients", "zeropp_hierarchical_partition",
    "recompute", "recompute_modules", "overlap_dp_comm", "overlap_tp_comm", "offload_optimizer", "offload_weights",
    "offload_activation_layers", "cp_comm", "overlap_ep_comm", "moe_dispatcher", "cuda_graphs",
    "global_batch_sequences", "pp_first_stage_layers", "pp_last_stage_layers",
)
DESIGN_COLUMNS: tuple[str, ...] = (
    "design_id", "design_source", "label", "family", "platform", "gpu", "n_gpus", "n_domains", "spare_domains",
    "job_gpus", "hb_domain_size",
    "nic", "nics_per_gpu", "switch", "radix", "port_gbps", "oversubscription", "n_tiers", "scaleout_gbps_per_gpu",
    "switch_count", "transceiver_count", "dac_count", "nic_count",
    "compute_capex_usd", "network_capex_usd", "capex_usd", "compute_power_w", "network_power_w", "power_w",
)
# the per-iteration time breakdown, one column per Breakdown field, in its order
BREAKDOWN_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Breakdown))
METRIC_COLUMNS: tuple[str, ...] = (
    "iteration_time_s", "time_to_train_s", "time_to_train_days", "tokens_per_s", "mfu", "hfu",
    "energy_mwh", "memory_per_gpu_gb", "hbm_capacity_gb", "memory_weights_gb", "memory_gradients_gb",
    "memory_optimizer_gb", "memory_activations_gb", "memory_other_gb",
    *BREAKDOWN_FIELDS, "tier_hb_bytes", "tier_rail_bytes", "tier_spine_bytes", "binding_tier",
)
PARETO_COLUMNS: tuple[str, ...] = (
    "front_rank", *DESIGN_COLUMNS, *STRATEGY_COLUMNS, *METRIC_COLUMNS, "search_method", "megatron_args",
)
# With a study's `costs` / `reliability` sections (designer.search.economics), each front point and
# design row also carries these, in this order after PARETO_COLUMNS (only the declared sections' ones).
ECONOMICS_COLUMNS: tuple[str, ...] = (
    "goodput_fraction", "time_to_train_with_failures_s", "time_to_train_with_failures_days", "interruptions_per_day",
    "checkpoint_interval_s", "checkpoint_write_s", "restart_s",
    "storage_capex_usd", "frontend_capex_usd", "facility_capex_usd", "capex_total_usd", "pue", "facility_power_w",
    "energy_cost_usd", "amortized_capex_usd", "colocation_usd", "tco_usd", "usd_per_million_tokens",
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
    d["recompute_modules"] = recompute_modules_label(s)
    d["global_batch_sequences"] = s.global_batch_sequences or training.global_batch_sequences
    return {c: d[c] for c in STRATEGY_COLUMNS}


def recompute_modules_label(s: Strategy) -> str | None:
    """Selective recompute's modules joined by '+' (Megatron's default: core_attn); empty otherwise."""
    if s.recompute != Recompute.selective:
        return None
    return recompute_module_label(recompute_module_mask(s.recompute_modules))


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
    for k in (*BREAKDOWN_FIELDS, "tier_hb_bytes", "tier_rail_bytes", "tier_spine_bytes", "binding_tier"):
        out[k] = r[k]
    return out


# The stated schema of every table written: a column's type does not depend on its values (a float
# column whose values happen to be whole stays float; an integer column with missing values stays
# integer, as a nullable one). Columns not listed (user constraint columns, per-tier extras) keep the
# type pandas gives them.
_INT = ("front_rank", "trial_number", "n_gpus", "n_domains", "hb_domain_size", "radix", "n_tiers", "switch_count",
        "transceiver_count", "dac_count", "nic_count", "tp", "pp", "dp", "ep", "cp", "microbatch_size",
        "virtual_stages", "zero_stage", "offload_activation_layers", "global_batch_sequences",
        "pp_first_stage_layers", "pp_last_stage_layers", "space_size",
        "n_evaluations")
_BOOL = ("sequence_parallel", "zeropp_quantized_weights", "zeropp_quantized_gradients", "zeropp_hierarchical_partition",
         "overlap_dp_comm", "overlap_tp_comm", "offload_optimizer", "offload_weights", "overlap_ep_comm", "cuda_graphs",
         "feasible")
_STR = ("design_id", "design_source", "label", "family", "platform", "gpu", "nic", "switch", "schedule", "recompute",
        "recompute_modules", "cp_comm", "moe_dispatcher", "binding_tier", "search_method", "megatron_args", "reason",
        "front_group")
_FLOAT = ("nics_per_gpu", "port_gbps", "oversubscription", "scaleout_gbps_per_gpu", "compute_capex_usd",
          "network_capex_usd", "capex_usd", "compute_power_w", "network_power_w", "power_w",
          *(c for c in METRIC_COLUMNS if c != "binding_tier"), "memory_per_gpu_gb", "energy_mwh")
COLUMN_TYPES: dict[str, str] = {**{c: "float64" for c in _FLOAT}, **{c: "Int64" for c in _INT},
                                **{c: "boolean" for c in _BOOL}, **{c: "string" for c in _STR}}
TABLE_FORMATS = ("parquet", "csv")


COLUMN_TYPES.update({"goodput_fraction": "float64", "pue": "float64", "usd_per_million_tokens": "float64",
                     "interruptions_per_day": "float64", "time_to_train_with_failures_days": "float64"})
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
    # A design without a tier (rail-only has no spine) has no switches there: 0, not a missing value.
    # Rows without a design (a MILP-infeasible point) keep theirs missing.
    absent = [c for c in df.columns if str(c).startswith("switches_") and df[c].isna().any()]
    if absent and "switch_count" in df.columns:
        df = df.copy()
        has_design = df["switch_count"].notna()
        for c in absent:
            df[c] = df[c].where(df[c].notna() | ~has_design, 0)
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
# where an edited study's earlier results go when its rerun takes the folder: previous/<spec hash>
PREVIOUS_RESULTS = "previous"


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
                  formats: Sequence[str] = ("parquet",), limits: Sequence[Any] = (),
                  robustness: pd.DataFrame | None = None) -> list[Path]:
    """Write the output set atomically: every file into a staging folder inside `out_dir`, fsynced;
    then the previous completion record (meta.json) is removed, each file renamed into place, and the
    new meta.json, which lists every file with its size, row count and sha256, renamed in last. A kill
    at any point leaves either the previous complete set or a folder without a matching record, which
    `read_pareto` refuses; never a torn file. Returns the paths written."""
    import os
    import shutil

    out_dir.mkdir(parents=True, exist_ok=True)
    # the run holds the folder's lock (pipeline._claim_output), so any other staging folder is what a
    # killed run left behind
    for leftover in out_dir.glob(".staging-*"):
        shutil.rmtree(leftover, ignore_errors=True)
    stage = out_dir / f".staging-{os.getpid()}"
    stage.mkdir()
    try:
        staged = _write_files(stage, pareto=pareto, trials=trials, designs=designs, meta=meta, fronts_by=fronts_by,
                              front_by=front_by, plots=plots, title=title, strategies=strategies, formats=formats,
                              limits=limits, robustness=robustness)
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
    except BaseException as err:
        # nothing has moved yet: the staging folder is all this write leaves, and on a full disk it
        # would keep the disk full; the previous set is untouched
        shutil.rmtree(stage, ignore_errors=True)
        if isinstance(err, OSError) and not err.filename:
            # a failed write names no file (ENOSPC, EIO; pyarrow's IOError has neither errno nor
            # strerror): name the folder being written, and keep the message
            raise OSError(err.errno, err.strerror or str(err), str(out_dir)) from None
        raise
    old = out_dir / COMPLETION_RECORD
    _restore_partial_moves(out_dir, str(_record(old).get("spec_hash", ""))[:12])
    _finish_moves(out_dir)  # an earlier set a killed run was moving aside
    earlier = _record(old)
    previous = _listed_files(earlier)
    if (earlier.get("study") == meta.get("study") and earlier.get("spec_hash")
            and earlier.get("spec_hash") != meta.get("spec_hash")):
        # the same study from an edited spec: its results move aside rather than being replaced
        kept = _keep_earlier_results(out_dir, previous, str(earlier["spec_hash"])[:12])
        logging.getLogger(__name__).warning("the earlier results of study '%s' (spec hash %s) are in '%s'",
                                            earlier.get("study"), str(earlier["spec_hash"])[:12], kept)
        previous = set()
    if old.exists():
        old.unlink()  # from here until the new record lands, the folder reads as incomplete
    written = []
    for rel in files:
        dest = out_dir / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(stage / rel, dest)
        written.append(dest)
    # files of the previous set that this one does not have (a front design's strategies, a job
    # config) go, so the folder holds one run's outputs; files designer never listed stay
    for rel in previous - set(files):
        stale = out_dir / rel
        if stale.is_file() and stale.resolve().is_relative_to(out_dir.resolve()):
            stale.unlink()
    os.replace(rec, old)
    written.append(old)
    dfd = os.open(out_dir, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    shutil.rmtree(stage, ignore_errors=True)
    return written


def _record(path: Path) -> dict[str, Any]:
    """A completion record's contents ({} when it is absent or unreadable)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def _keep_earlier_results(out_dir: Path, listed: set[str], spec_hash: str) -> Path:
    """Move an earlier spec's files (those its record lists, then the record) into
    out_dir/previous/<its spec hash> (a new name when that one is taken). They gather in
    previous/.moving-<hash> first, renamed into place last, so a run killed while moving them leaves
    one folder that the rerun completes (_finish_moves), never two halves."""
    import os

    moving = out_dir / PREVIOUS_RESULTS / f".moving-{spec_hash}"
    root = out_dir.resolve()
    for rel in [*sorted(listed), COMPLETION_RECORD]:
        src = out_dir / rel
        if not src.is_file() or not src.resolve().is_relative_to(root):
            continue  # moved already by a killed run, or outside the folder (a hand-edited record)
        target = moving / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(src, target)
    return next((d for d in _finish_moves(out_dir) if d.name.split("-")[0] == spec_hash), moving)


def _restore_partial_moves(out_dir: Path, record_hash: str) -> None:
    """Put back the files of a set a killed run had begun to gather into previous/.moving-<hash>
    while its record (which moves last) is still the folder's: the folder describes that set again,
    whichever run comes next (the same spec replaces it; an edited one gathers it whole), and no
    part of it is left behind in previous/."""
    import os
    import shutil

    if not record_hash:
        return
    moving = out_dir / PREVIOUS_RESULTS / f".moving-{record_hash}"
    if not moving.is_dir() or (moving / COMPLETION_RECORD).is_file():
        return
    for f in sorted(p for p in moving.rglob("*") if p.is_file()):
        dest = out_dir / f.relative_to(moving)
        if not dest.exists():
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(f, dest)
    shutil.rmtree(moving, ignore_errors=True)


def _finish_moves(out_dir: Path) -> list[Path]:
    """Rename every gathered earlier set (previous/.moving-<hash> holding its record, which moves
    last) to previous/<hash>, or <hash>-2, ... when that is taken; returns the folders it named. A
    set without its record is still being gathered: its record is in the folder, and the next
    _keep_earlier_results completes it."""
    import os

    done = []
    for moving in sorted((out_dir / PREVIOUS_RESULTS).glob(".moving-*")):
        if not (moving / COMPLETION_RECORD).is_file():
            continue
        spec_hash = moving.name[len(".moving-"):]
        dest, n = out_dir / PREVIOUS_RESULTS / spec_hash, 2
        while dest.exists():
            dest, n = out_dir / PREVIOUS_RESULTS / f"{spec_hash}-{n}", n + 1
        os.replace(moving, dest)
        done.append(dest)
    return done


def _listed_files(record: dict[str, Any]) -> set[str]:
    """The files a completion record lists (none when it lists none)."""
    files = record.get("files")
    return {str(k) for k in files} if isinstance(files, dict) else set()


def check_complete(out_dir: str | Path) -> dict[str, Any]:
    """The completion record of an output folder, after checking that every file it lists is there
    with its recorded size and hash; SpecError (one line, saying to rerun) otherwise."""
    from designer.errors import SpecError

    d = Path(out_dir)
    rec = d / COMPLETION_RECORD
    if not d.is_dir():
        raise SpecError(f"'{out_dir}' is not a study output folder (no such folder)")
    if not rec.is_file():
        if any((d / PREVIOUS_RESULTS).glob(".moving-*")):
            # a run of an edited study was stopped while it set the earlier results aside
            raise SpecError(f"'{out_dir}' is incomplete (a run was stopped while moving the earlier results into "
                            f"{PREVIOUS_RESULTS}/, where they are kept); rerun the study")
        if (d / "pareto.csv").exists() or any(d.glob(".staging-*")):
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
        if not isinstance(info, dict):
            raise SpecError(f"'{out_dir}': meta.json's entry for '{rel}' is not a record of its bytes and sha256 "
                            "(the file was edited by hand?); rerun the study")
        p = d / rel
        if not p.is_file() or p.stat().st_size != info.get("bytes") or _sha256(p) != info.get("sha256"):
            raise SpecError(f"'{out_dir}': {rel} does not match meta.json (another run, or one stopped while "
                            "writing, changed it); rerun the study")
    return meta


def _write_files(out_dir: Path, *, pareto: pd.DataFrame, trials: pd.DataFrame, designs: pd.DataFrame,
                 meta: Mapping[str, Any], fronts_by: pd.DataFrame | None = None, front_by: str | None = None,
                 plots: bool = True, title: str = "", strategies: pd.DataFrame | None = None,
                 formats: Sequence[str] = ("parquet",), limits: Sequence[Any] = (),
                 robustness: pd.DataFrame | None = None) -> list[Path]:
    # The front is the study's export: always CSV, and Parquet too. The large tables (trials and
    # every design's strategies) in the study's output.formats: Parquet by default, since at millions
    # of rows CSV costs most of a run's time and several GB.
    front_cols = PARETO_COLUMNS + tuple(c for c in ECONOMICS_COLUMNS if c in pareto.columns)
    written = _table(pareto, out_dir, "pareto", front_cols, TABLE_FORMATS[::-1])
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
        _csv(fronts_by, p, ("front_group", *front_cols))
        written.append(p)
    p = out_dir / "megatron_args.txt"
    lines = [f"# {len(pareto)} Pareto points; the full Megatron-LM launch per point (front_rank, design, capex, days)"]
    for _, r in pareto.iterrows():
        lines.append(f"# {int(r['front_rank'])}: {r['design_id']}  ${r['capex_usd'] / 1e6:,.1f}M  "
                     f"{r['time_to_train_days']:.1f} days  MFU {r['mfu']:.3f}")
        lines.append(str(r["megatron_command"]) if "megatron_command" in pareto else str(r["megatron_args"]))
    p.write_text("\n".join(lines) + "\n")
    written.append(p)
    if "torchtitan_toml" in pareto:
        # torchtitan's TOML per dense front point (designer.launch: MoE models and non-llama shapes get none)
        for _, r in pareto[pareto["torchtitan_toml"].notna()].iterrows():
            folder = out_dir / "torchtitan"
            folder.mkdir(exist_ok=True)
            p = folder / f"{int(r['front_rank'])}.toml"
            p.write_text(str(r["torchtitan_toml"]))
            written.append(p)
    goal = meta.get("goal") or {}
    if goal.get("goal", "front") != "front":
        p = out_dir / "goal.json"
        p.write_text(json.dumps(goal, indent=2, sort_keys=True, default=str) + "\n")
        written.append(p)
    if robustness is not None:
        p = out_dir / "robustness.csv"
        _csv(robustness, p)
        written.append(p)
        if plots and len(robustness):
            from designer.robustness_plot import plot_robustness

            written.append(plot_robustness(robustness, out_dir / "robustness.png", title=title))
    if plots:
        from designer.report_page import write_report  # plotly and matplotlib load only when plotting

        written += write_report(out_dir, pareto=pareto, designs=designs, strategies=strategies, fronts_by=fronts_by,
                                front_by=front_by, limits=limits, title=title)
    return written


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


__all__ = ["COLUMN_TYPES", "TABLE_FORMATS", "column_type", "typed", "COMPLETION_RECORD", "DESIGN_COLUMNS", "ECONOMICS_COLUMNS", "check_complete", "METRIC_COLUMNS", "PARETO_COLUMNS", "STRATEGY_COLUMNS", "STRATEGY_TRIAL_COLUMNS",
           "TRIAL_COLUMNS",
           "metrics_columns", "read_pareto", "strategy_columns", "write_outputs"]
