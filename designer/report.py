"""Terminal rendering of records (rich tables). Presentation only: no computation lives here."""

from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Any, Iterator, Sequence

from rich.console import Console
from rich.table import Table

# Wide enough for the design tables when output goes to a file or pipe (rich defaults to 80 columns).
console = Console(width=None if Console().is_terminal else 160)


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        if value == int(value) and abs(value) < 1e15:
            return f"{int(value):,}"
        return f"{value:,.4g}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def print_bom(bom: dict[str, Any]) -> None:
    console.print(f"[bold]{bom['family']}[/bold]: {bom['n_gpus']:,} GPUs, HB domain {bom['hb_domain_size']}, "
                  f"radix {bom['radix']} x {bom['port_gbps']:g}G, {bom['nics_per_gpu'] / bom['gpus_per_nic']:g} NIC(s) per GPU, "
                  f"{bom['convention']} counting, prices {bom['prices_name']}")
    table = Table("tier", "switches", "down ports", "up ports", "down links", "oversubscription", "span GPUs")
    for t in bom["tiers"]:
        table.add_row(t["name"], _fmt(t["switches"]), _fmt(t["down_ports_per_switch"]), _fmt(t["up_ports_per_switch"]),
                      _fmt(t["down_links"]), f"{t['oversubscription']:.3g}:1", _fmt(t["span_gpus"]))
    console.print(table)
    totals = Table("item", "value")
    for key in ("switch_count", "transceiver_count", "dac_count", "nic_count", "switch_cost_usd", "optics_cost_usd",
                "nic_cost_usd", "cost_usd", "power_w", "bisection_bandwidth_bytes_per_s"):
        totals.add_row(key, _fmt(bom[key]))
    console.print(totals)


def print_mapping(title: str, row: dict[str, Any]) -> None:
    table = Table(title=title, show_header=False)
    for key, value in row.items():
        table.add_row(key, _fmt(value))
    console.print(table)


@contextmanager
def progress_bar() -> Iterator[Any]:
    """A rich progress bar fed by the pipeline's ProgressEvents: the stage, the design being searched,
    the evaluations done, and the size of the best-so-far Pareto front."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=False) as progress:
        task = progress.add_task("starting", total=None)

        def update(event: Any) -> None:
            if event.stage == "milp":
                text = f"MILP: {event.message or 'sizing candidate designs'}"
            elif event.stage == "search":
                text = (f"design {event.design_index + 1}/{event.n_designs} {event.method} "
                        f"| front so far: {event.front_size} points")
            else:
                text = f"done | front: {event.front_size} points"
                progress.update(task, completed=event.total or event.done, total=event.total or None, description=text)
                return
            progress.update(task, completed=event.done, total=event.total or None, description=text)

        yield update


def print_rows(title: str, rows: list[dict[str, Any]]) -> None:
    if not rows:
        console.print(f"{title}: (empty)")
        return
    table = Table(title=title)
    for name in rows[0]:
        if name in ("design", "design_id"):
            # whole ids, never cut with an ellipsis, so they can be copied into `designer` commands
            table.add_column(name, no_wrap=True, min_width=max(len(str(r[name])) for r in rows))
        else:
            table.add_column(name, overflow="fold")
    for row in rows:
        table.add_row(*(_fmt(v) for v in row.values()))
    console.print(table)


def milp_status_line(milp: dict) -> str | None:
    """One line when some MILP stopped at its time limit: 'MILP: incumbent, gap x%' and what to do."""
    if milp.get("status") != "incumbent":
        return None
    gap, limit = milp.get("max_gap"), milp.get("time_limit_s")
    head = f"MILP: incumbent, gap {gap:.1%}" if gap is not None else "MILP: incumbent"
    where = f" on {milp['n_incumbent']} of {milp['n_designs']} designs" if "n_incumbent" in milp else ""
    limit_s = f" at solver.time_limit_s = {limit:g} s" if limit is not None else ""
    return (f"{head}{where} (HiGHS stopped{limit_s}; the gap is against the tighter of its bound and the LP "
            "relaxation): raise the time limit for proven optima")


def written_summary(files: Sequence[str]) -> str:
    """The files a run wrote, as written: top-level files by name, a folder as 'folder/ (N files)'."""
    top = [f for f in files if "/" not in f]
    folders: dict[str, int] = {}
    for f in files:
        if "/" in f:
            folders[f.split("/", 1)[0]] = folders.get(f.split("/", 1)[0], 0) + 1
    return ", ".join([*top, *(f"{d}/ ({n} files)" for d, n in sorted(folders.items()))])


def print_study_summary(result: Any) -> None:
    from designer.pipeline import summary_table

    print_rows(f"Pareto front ({len(result.pareto)} points): capex vs time-to-train", summary_table(result))
    milp = result.meta.get("milp", {})
    for line in milp.get("dropped_levels", []):
        console.print(f"[yellow]frontier level dropped[/yellow] {line}")
    line = milp_status_line(milp)
    if line:
        console.print(f"[yellow]{line}[/yellow]")
    ds = result.meta.get("design_search")
    if ds:
        console.print(f"co-design: {ds['n_evaluated']} of {ds['space_size']} cluster designs evaluated ({ds['method']}), "
                      f"{ds['milp_solves']} MILP solves, {ds['inner_searches']} strategy searches, "
                      f"{len(ds['dropped_gpu_counts'])} GPU counts without a valid strategy (meta.json)")
    console.print(f"written to {result.out_dir}: {written_summary(result.files)}")


def print_goal(result: Any) -> None:
    """The goal's answer, its binding limit and the runner-up of each other family and platform."""
    a = result.goal
    if a is None:
        return
    console.print(f"[bold]{a.message}[/bold]")
    if a.answer is not None:
        console.print(f"  strategy: {a.answer.strategy}; design {a.answer.design_id}")
    for r in a.runners_up:
        console.print(f"  runner-up, {r.group}: {r.point.n_gpus:,} x {r.point.platform} ({r.point.label}), "
                      f"{r.behind:+.1%} on {result.spec.goal.minimize}")


def print_front(front: Any) -> None:
    cols = [c for c in ("design_id", "family", "n_gpus", "capex_usd", "power_w", "time_to_train_days", "mfu",
                        "tp", "pp", "dp", "ep", "microbatch_size", "schedule", "zero_stage", "recompute",
                        "recompute_modules")
            if c in front.columns]
    print_rows(f"Pareto front ({len(front)} points)", front[cols].to_dict("records"))


def write_designs_csv(result: Any, out_dir: Any) -> None:
    """designs.csv: one row per design of a NetworkResult, with its budget slacks."""
    from pathlib import Path

    import pandas as pd

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for i, design in enumerate(result.designs):
        row = design.row()
        slacks = result.budget_slacks[i] if i < len(result.budget_slacks) else ()
        for s in slacks:
            row[f"budget_{s.name}_slack"] = s.slack
        rows.append(row)
    from designer.export import typed

    typed(pd.DataFrame(rows)).to_csv(out / "designs.csv", index=False)


def print_network_result(result: Any) -> None:
    console.print(f"status: [bold]{result.status}[/bold]"
                  + (f", gap {result.gap:.2%}" if result.gap else "") + f", solved in {result.solve_time_s:.2f} s"
                  + (" (stopped at the time limit; the gap is against the tighter of HiGHS's bound and the LP relaxation)"
                     if result.status == "incumbent" else ""))
    print_rows("", [{"design": d.label, "family": d.family.value, "platform": d.platform, "GPUs": f"{d.n_gpus:,}",
                     "NIC": f"{d.nics_per_gpu / d.gpus_per_nic:g}x{d.nic_gbps:g}G", "switch": f"{d.switch} {d.radix}x{d.port_gbps:g}G",
                     "tiers": str(d.n_tiers), "switches": _fmt(d.bom.switch_count),
                     "optics": _fmt(d.bom.transceiver_count), "capex (M$)": f"{d.capex_usd / 1e6:,.1f}",
                     "power (MW)": f"{d.power_w / 1e6:,.2f}"} for d in result.designs])
    if result.budget_slacks and result.budget_slacks[0]:
        budgets = Table("budget", "metric", "sense", "rhs", "value", "slack", title="budgets (first design)")
        for s in result.budget_slacks[0]:
            budgets.add_row(s.name, s.metric.value, s.sense, _fmt(s.rhs), _fmt(s.value), _fmt(s.slack))
        console.print(budgets)


def print_space(data: dict[str, Any]) -> None:
    """`designer space`: the outer space and the rules that shape the strategy space, per platform."""
    if "n_designs" in data:
        console.print(f"{data['study']}: {data['n_designs']:,} cluster designs ({len(data['fabrics'])} fabrics x the GPU counts below)")
    for plat, e in data["platforms"].items():
        console.print(f"[bold]{plat}[/bold] (HB domain {e['hb_domain_size']})")
        if "gpu_counts" in e:
            counts = e["gpu_counts"]
            console.print(f"  GPU counts with a strategy: {len(counts)}" + (f" ({counts[0]:,} .. {counts[-1]:,})" if counts else ""))
            for d in e["gpu_counts_removed"][:20]:
                console.print(f"  left out: {d['reason']}")
            if len(e["gpu_counts_removed"]) > 20:
                console.print(f"  ... and {len(e['gpu_counts_removed']) - 20} more (--json lists all)")
        for r in e["strategy_values_removed"]:
            console.print(f"  {r['dim']} {r['value']}: {r['rule']}")
        if "count" in e:
            c = e["count"]
            console.print(f"  {c['n_gpus']:,} GPUs: " + (c["reason"] or f"{c['strategies']:,} valid strategies"))


def frame_records(df: Any) -> list[dict[str, Any]]:
    """A DataFrame as JSON-ready records (NaN as null, numpy scalars as Python numbers)."""
    import json

    return json.loads(df.to_json(orient="records"))


def run_json(result: Any) -> dict[str, Any]:
    """What `designer run --json` prints: the files written, the front, the MILP status and the goal."""
    milp = dict(result.meta.get("milp", {}))
    return {
        "study": result.spec.name, "out_dir": str(result.out_dir), "files": list(result.files),
        "n_front_points": len(result.pareto), "front": frame_records(result.pareto.drop(columns=["megatron_args"],
                                                                                         errors="ignore")),
        "milp": milp, "design_search": result.meta.get("design_search"), "goal": result.meta.get("goal"),
        "wall_time_s": result.meta.get("wall_time_s"),
    }
