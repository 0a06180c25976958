"""Custom budgets change the answer: the custom_budget study run four ways, fronts compared.

    baseline     studies/custom_budget/study.yaml as is
    declarative  + budgets.declared: {name: optics, metric: transceiver_count, sense: "<=", rhs: 10000}
    hook         + network hook run.py:at_most_48_spines (a row holds 48 spine switches)
    trial        + trial constraint run.py:pp_at_most_2 (at most 2 pipeline stages)

Writes results/custom_budget/: fronts.csv (one front per variant, with the design and strategy of each
point), pareto.png (the four fronts on one plot) and changes.md (what moved, per variant).
Hook and constraint name this file relative to the study's folder (run.py:function), as a study
file would:
    .venv/bin/python studies/custom_budget/run.py [--out results/custom_budget]
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import pandas as pd
import typer
from rich.markup import escape

from designer.errors import InfeasibleDesign
from designer.pipeline import run_study
from designer.spec.study import load_study

HERE = Path(__file__).resolve().parent


def at_most_48_spines(block, ctx) -> None:
    """Network hook: at most 48 tier-2 (spine) switches, e.g. the spine row's space. Designs without
    a tier 2 satisfy it."""
    import pyomo.environ as pyo

    spines = ctx.handles.switches_by_level.get(2)
    if spines is not None:
        block.spine_row = pyo.Constraint(expr=spines <= 48)


def pp_at_most_2(design, strategy, metrics) -> float:
    """Operations rule: at most 2 pipeline stages (<= 0 feasible)."""
    return float(strategy.pp - 2)


def variants(base):
    net = base.network.model_dump()
    decl = {**net, "budgets": {**net["budgets"], "declared": [
        {"name": "optics", "metric": "transceiver_count", "sense": "<=", "rhs": 10000}]}}
    hook = {**net, "hooks": ["run.py:at_most_48_spines"]}
    return {
        "baseline": base,
        "declarative": base.with_updates(network=decl),
        "hook": base.with_updates(network=hook),
        "trial": base.with_updates(constraints=["run.py:pp_at_most_2"]),
    }


app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode="rich")


@app.command(help=escape(__doc__))
def main(out: Annotated[Path, typer.Option(
             "--out", help="folder for fronts.csv, pareto.png and changes.md")] = Path("results/custom_budget"),
         work: Annotated[Path, typer.Option(
             "--work", help="folder for the variants' runs (one subfolder each)")] = Path("out/custom_budget"),
         ) -> None:
    out.mkdir(parents=True, exist_ok=True)
    base = load_study(HERE / "study.yaml")
    fronts = []
    for name, spec in variants(base).items():
        try:
            r = run_study(spec.with_updates(name=f"custom_budget-{name}"), out_dir=work / name)
        except InfeasibleDesign as err:
            print(f"{name}: {err}")
            continue
        f = r.pareto.copy()
        f.insert(0, "variant", name)
        fronts.append(f)
    df = pd.concat(fronts, ignore_index=True)
    keep = ["variant", "front_rank", "design_id", "family", "n_gpus", "capex_usd", "power_w", "transceiver_count",
            "tp", "pp", "dp", "microbatch_size", "schedule", "virtual_stages", "recompute", "time_to_train_days", "mfu"]
    df[keep].to_csv(out / "fronts.csv", index=False, float_format="%.10g")

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 5))
    for name, g in df.groupby("variant", sort=False):
        g = g.sort_values("capex_usd")
        ax.step(g["capex_usd"] / 1e6, g["time_to_train_days"], where="post")
        ax.scatter(g["capex_usd"] / 1e6, g["time_to_train_days"], s=25, label=name)
    ax.set_xlabel("capex (million USD)")
    ax.set_ylabel("time to train (days)")
    ax.set_title("Llama-3-70B: how custom budgets move the front")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "pareto.png", dpi=120)

    base_f = df[df["variant"] == "baseline"].set_index("n_gpus")
    lines = ["# What each custom budget changed (vs the baseline front)", ""]
    for name, g in df.groupby("variant", sort=False):
        if name == "baseline":
            continue
        lines.append(f"## {name}")
        for _, r in g.iterrows():
            b = base_f.loc[r["n_gpus"]] if r["n_gpus"] in base_f.index else None
            if b is None:
                lines.append(f"- {int(r['n_gpus'])} GPUs: on this front, not on the baseline's")
                continue
            diffs = [f"{k} {b[k]} -> {r[k]}" for k in ("family", "transceiver_count", "tp", "pp", "dp", "schedule")
                     if b[k] != r[k]]
            dc = (r["capex_usd"] - b["capex_usd"]) / 1e6
            dt = r["time_to_train_days"] - b["time_to_train_days"]
            lines.append(f"- {int(r['n_gpus'])} GPUs: capex {dc:+.2f} $M, time {dt:+.2f} days; "
                         + ("; ".join(diffs) if diffs else "same design and strategy"))
        missing = sorted(set(base_f.index) - set(g["n_gpus"]))
        if missing:
            lines.append(f"- dropped from the front: {', '.join(str(int(m)) for m in missing)} GPUs")
        lines.append("")
    (out / "changes.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    app()
