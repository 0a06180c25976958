"""The same co-design front in IT capex, total capex and TCO, with its price robustness.

    .venv/bin/python studies/tco/run.py [--out DIR]

Runs studies/tco/study.yaml through designer's API (out/tco/), copies its front, robustness table
and plots to results/tco/, and draws fronts.png: every design with a feasible strategy as
(cost, days to train with failures) for the three cost measures, the study's front (chosen on IT capex
and failure-free time) marked, each front design labelled with its chance to stay on the front
when prices vary within the catalog's ranges.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Annotated

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import typer  # noqa: E402

from designer import run_study  # noqa: E402
from designer.spec.study import load_study  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SPEC = REPO / "studies" / "tco" / "study.yaml"
app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


@app.command()
def main(out: Annotated[Path, typer.Option(help="results folder")] = REPO / "results" / "tco") -> None:
    t0 = time.perf_counter()
    res = run_study(load_study(SPEC), out_dir=REPO / "out" / "tco", overwrite=True)
    trials = pd.read_parquet(res.out_dir / "trials.parquet")
    ok = trials[trials["feasible"].astype(bool)]
    rb = pd.read_csv(res.out_dir / "robustness.csv").set_index("design_id")
    front = res.pareto
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6), sharey=True)
    for ax, col, name in zip(axes, ("capex_usd", "capex_total_usd", "tco_usd"),
                             ("IT capex ($M)", "total capex ($M)", "TCO of the run ($M)")):
        for plat, g in ok.groupby("platform"):
            ax.scatter(g[col] / 1e6, g["time_to_train_with_failures_days"], s=18, alpha=0.5, label=plat)
        ax.scatter(front[col] / 1e6, front["time_to_train_with_failures_days"], s=70, facecolors="none",
                   edgecolors="k", label="front (IT capex, failure-free time)")
        for _, r in front.iterrows():
            p = rb["p_on_front"].get(r["design_id"])
            if p is not None:
                ax.annotate(f"{p:.0%}", (r[col] / 1e6, r["time_to_train_with_failures_days"]), fontsize=7,
                            xytext=(4, 4), textcoords="offset points")
        ax.set_xlabel(name)
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("days to train, with failures")
    axes[0].legend(fontsize=7)
    fig.suptitle("Llama-3-70B, 15T tokens: one front, three cost measures (labels: chance to stay on the front)")
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    fig.savefig(out / "fronts.png", dpi=120)
    for f in ("pareto.csv", "robustness.csv", "robustness.png", "pareto.png"):
        if (res.out_dir / f).exists():
            shutil.copy2(res.out_dir / f, out / f)
    cols = ["design_id", "capex_usd", "capex_total_usd", "tco_usd", "time_to_train_days", "goodput_fraction",
            "time_to_train_with_failures_days", "usd_per_million_tokens"]
    print(front[cols].to_string(index=False))
    print(f"written to {out}: fronts.png, pareto.csv, robustness.csv, robustness.png, pareto.png "
          f"({time.perf_counter() - t0:.1f} s)")


if __name__ == "__main__":
    app()
