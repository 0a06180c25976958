"""The price-uncertainty analysis (designer.analysis.robustness) as a table and a figure.

`robustness_frame` is one CSV-ready row per design, units in the column names; `plot_robustness`
writes horizontal bars of each design's chance to be on the front and to be the goal's answer, with
their 95 % Monte Carlo intervals (1.96 standard errors of a proportion, sqrt(p (1 - p) / samples)).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np
import pandas as pd

from designer.analysis.robustness import RobustnessResult
from designer.errors import SpecError
from designer.search.goal import DAY_S

if TYPE_CHECKING:
    from designer.network.design import NetworkDesign

Z_95 = 1.959964  # two-sided 95 % normal quantile, for the Monte Carlo intervals

COLUMNS = ("design_id", "label", "family", "platform", "n_gpus", "capex_usd", "time_to_train_s", "time_to_train_days",
           "on_point_front", "point_optimum", "p_on_front", "p_on_front_se", "p_optimum", "p_optimum_se",
           "capex_mean_usd", "capex_p5_usd", "capex_p50_usd", "capex_p95_usd", "samples", "seed", "goal")


def _se(p: float | None, n: int) -> float | None:
    return None if p is None else math.sqrt(p * (1.0 - p) / n)


def robustness_frame(result: RobustnessResult, designs: Sequence[NetworkDesign] | None = None) -> pd.DataFrame:
    """One row per design of `result`, in its order. `designs` (the NetworkDesigns the exposures were
    made from, in the same order) adds their family, platform and GPU count; capex_usd is the capex
    at the catalog's point prices."""
    if designs is not None and len(designs) != len(result.designs):
        raise SpecError(f"designs: {len(designs)} given for {len(result.designs)} in the result; give them in the "
                        "result's order")
    rows = []
    for j, d in enumerate(result.designs):
        nd = designs[j] if designs is not None else None
        if nd is not None and nd.label != d.label:
            raise SpecError(f"designs[{j}] is '{nd.label}' but the result's design {j} is '{d.label}'; give them in the "
                            "result's order")
        rows.append({
            "design_id": d.design_id, "label": d.label,
            "family": nd.family.value if nd is not None else None,
            "platform": nd.platform if nd is not None else None,
            "n_gpus": nd.n_gpus if nd is not None else None,
            "capex_usd": d.capex_point_usd, "time_to_train_s": d.time_to_train_s,
            "time_to_train_days": d.time_to_train_s / DAY_S,
            "on_point_front": d.on_point_front, "point_optimum": d.point_optimum,
            "p_on_front": d.p_on_front, "p_on_front_se": _se(d.p_on_front, result.samples),
            "p_optimum": d.p_optimum, "p_optimum_se": _se(d.p_optimum, result.samples),
            "capex_mean_usd": d.capex_mean_usd, "capex_p5_usd": d.capex_p5_usd, "capex_p50_usd": d.capex_p50_usd,
            "capex_p95_usd": d.capex_p95_usd, "samples": result.samples, "seed": result.seed, "goal": result.goal,
        })
    return pd.DataFrame(rows, columns=list(COLUMNS))


def robustness_figure(frame: pd.DataFrame, title: str = ""):
    """The matplotlib Figure (Agg canvas, no pyplot state): per design (labelled by design_id, the
    first row on top) a bar of p_on_front and, when the goal has an answer, one of p_optimum, each
    with its 95 % interval and its value written at its end; '*' marks the point-price front."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    missing = [c for c in ("design_id", "p_on_front", "p_on_front_se", "p_optimum", "p_optimum_se", "on_point_front")
               if c not in frame.columns]
    if missing:
        raise SpecError(f"frame: no column '{missing[0]}'; build it with robustness_frame")
    n = len(frame)
    has_goal = frame["p_optimum"].notna().any()
    fig = Figure(figsize=(8, 1.2 + 0.45 * max(n, 1) * (2 if has_goal else 1)))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    y = np.arange(n)[::-1].astype(float)  # first row on top
    height = 0.38 if has_goal else 0.7
    series = [("p_on_front", "on the front", "#1f77b4", y + (height / 2 if has_goal else 0.0))]
    if has_goal:
        series.append(("p_optimum", "goal's answer", "#d62728", y - height / 2))
    for col, name, color, pos in series:
        p = frame[col].astype(float).fillna(0.0).to_numpy()
        err = Z_95 * frame[f"{col}_se"].astype(float).fillna(0.0).to_numpy()
        ax.barh(pos, p, height=height, color=color, label=name, xerr=err, capsize=2,
                error_kw={"elinewidth": 0.8, "ecolor": "0.3"})
        for yy, v in zip(pos, p):
            ax.text(min(v, 1.0) + 0.01, yy, f"{v:.1%}", va="center", fontsize=8)
    labels = [f"{d} *" if on else str(d) for d, on in zip(frame["design_id"], frame["on_point_front"])]
    ax.set_yticks(y, labels, fontsize=8)
    ax.set_xlim(0.0, 1.12)
    ax.set_xlabel("probability over the price draws\n(whiskers: 95 % Monte Carlo interval; "
                  "* on the front at catalog prices)", fontsize=9)
    ax.set_title(title or "price robustness")
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig


def plot_robustness(frame: pd.DataFrame, path: str | Path, title: str = "") -> Path:
    """Write robustness_figure to `path` (PNG, SVG or PDF by its suffix), through a temporary file
    renamed into place so a reader never sees half a file."""
    path = Path(path)
    fig = robustness_figure(frame, title)
    tmp = path.with_name(f".{path.stem}.partial{path.suffix}")
    fig.savefig(tmp, dpi=120)
    os.replace(tmp, path)
    return path


__all__ = ["COLUMNS", "plot_robustness", "robustness_figure", "robustness_frame"]
