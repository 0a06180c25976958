"""How well the compute model predicts runs it was not fitted on: grouped cross-validation by source.

The shipped calibration is fitted on every row (fit_compute.py), so its errors on those rows are
in-sample. Here the sources (Megatron SC'21 Table 1 and the S1..S16 sources of
training-runs-modern.md) are dealt into --folds groups of about equal row counts (largest source
first, each to the group with the fewest rows so far: deterministic). For each group the parameters
of fit_compute.py are refitted from the shipped values without that group's rows (--sweeps passes of
the same coordinate descent), and the group's rows are scored with the refit. Every row is held out
exactly once, so the held-out MAPE per set is the error to expect on a source like these that the
model has not seen.

A parameter that no training row moves (the objective the same wherever the search probed, e.g. a
GPU generation whose every row is held out) keeps its shipped value, which saw the held-out rows; each
fold prints those parameters, and the rows they touch are then not truly held out.

    python studies/calibration/cross_validate.py [--folds 4] [--sweeps 1] [--out results/validation/cross_validation.csv] [--no-readme]

About 5 minutes per fold and sweep on two cores. Writes one row per calibration row (its fold,
source, set, measured, the shipped calibration's error and the held-out error), prints the per-set
summary and rewrites it in the README between the README_START and README_END markers.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Annotated

import numpy as np
import pandas as pd
import typer
from rich.markup import escape

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fit_compute import PARAMS, case_errors, compiled_cases, fit  # noqa: E402

from designer.perf.model import load_perf_calibration  # noqa: E402
from tests.perf import modern_runs  # noqa: E402

OUT = REPO / "results" / "validation" / "cross_validation.csv"
README = REPO / "README.md"
README_START = "<!-- cross-validation: written by studies/calibration/cross_validate.py -->"
README_END = "<!-- end of cross-validation -->"


def source_of(case) -> str:
    """A case's source: Table 1 is one; a modern row's is its `source` (S1..S16)."""
    return "table1" if case[0] == "table1" else SOURCES[case[1]]


SOURCES = {row["id"]: row["source"] for row in modern_runs.rows()}


def deal(cases, folds: int) -> list[list[str]]:
    """Sources into `folds` groups of about equal row counts: the largest source first, each to the
    group with the fewest rows so far (ties: the lower group, the source's name)."""
    counts: dict[str, int] = {}
    for c in cases:
        counts[source_of(c)] = counts.get(source_of(c), 0) + 1
    groups: list[list[str]] = [[] for _ in range(folds)]
    sizes = [0] * folds
    for src in sorted(counts, key=lambda s: (-counts[s], s)):
        k = min(range(folds), key=lambda i: (sizes[i], i))
        groups[k].append(src)
        sizes[k] += counts[src]
    return groups


def mape(e) -> float:
    return float(100 * np.mean(np.abs(e))) if len(e) else float("nan")


def summary_table(frame: pd.DataFrame) -> list[str]:
    """The per-set summary as markdown: in-sample (shipped) and held-out MAPE, held-out rows within
    10%, the worst held-out rows."""
    lines = ["| set | rows | MAPE, shipped calibration (fitted on every row) | MAPE, held out | "
             "held-out rows within 10% | worst held-out rows |", "|---|---|---|---|---|---|"]
    for s, g in frame.groupby("set", sort=False):
        worst = g.reindex(g.error_held_out.abs().sort_values(ascending=False).index).head(3)
        lines.append(f"| {s} | {len(g)} | {mape(g.error_shipped):.1f}% | {mape(g.error_held_out):.1f}% | "
                     f"{int((g.error_held_out.abs() <= 0.10).sum())} / {len(g)} | "
                     + ", ".join(f"{r.row} {100 * r.error_held_out:+.0f}%" for r in worst.itertuples()) + " |")
    return lines


def readme_block(frame: pd.DataFrame) -> str:
    folds = int(frame.fold.max()) + 1
    lines = [README_START, f"{folds} folds of sources; per fold, the sources held out (and the numbers no "
             "remaining row moves, kept at their shipped values):", ""]
    for k in range(folds):
        fold = frame[frame.fold == k]
        kept = fold.fold_kept_shipped.fillna("").iloc[0]
        lines.append(f"- fold {k}: {', '.join(sorted(set(fold.source), key=_source_key))}"
                     + (f" (kept: {kept.replace('; ', ', ')})" if kept else ""))
    return "\n".join(lines + ["", *summary_table(frame), README_END])


def _source_key(s: str):
    return (0, int(s[1:])) if s[1:].isdigit() else (1, 0)


def write_readme(frame: pd.DataFrame, readme: Path = README) -> None:
    text = readme.read_text()
    start, end = text.find(README_START), text.find(README_END)
    if start < 0 or end < start:
        raise SystemExit(f"{readme.name}: the markers {README_START!r} and {README_END!r} are missing")
    readme.write_text(text[:start] + readme_block(frame) + text[end + len(README_END):])


app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode="rich")


@app.command(help=escape(__doc__))
def main(folds: Annotated[int, typer.Option("--folds", min=2, max=17, help="groups of sources")] = 4,
         sweeps: Annotated[int, typer.Option("--sweeps", min=1, max=5, help="refit passes per fold")] = 1,
         out: Annotated[Path, typer.Option("--out", help="per-row CSV")] = OUT,
         readme: Annotated[bool, typer.Option(help="also rewrite the README's cross-validation table")] = True,
         ) -> None:
    t0 = time.perf_counter()
    shipped = load_perf_calibration()
    cases = compiled_cases(shipped)
    in_sample = case_errors(cases, shipped)
    held_out = [np.nan] * len(cases)
    fold_of = [-1] * len(cases)
    kept: list[str] = []  # per fold, the parameters no training row moves
    for k, group in enumerate(deal(cases, folds)):
        test = [i for i, c in enumerate(cases) if source_of(c) in group]
        train = [c for i, c in enumerate(cases) if source_of(c) not in group]
        calib, unmoved = fit(train, shipped, PARAMS, sweeps)
        for i, e in zip(test, case_errors([cases[i] for i in test], calib)):
            held_out[i], fold_of[i] = e, k
        moved = [f"{name} {get(shipped):.3g}->{get(calib):.3g}" for (name, get, _, _), _ in PARAMS
                 if abs(get(calib) - get(shipped)) > 1e-3 * max(abs(get(shipped)), 1e-9)]
        print(f"fold {k}: sources {', '.join(group)} ({len(test)} rows held out, "
              f"{time.perf_counter() - t0:.0f} s)", flush=True)
        print(f"  refit: {'; '.join(moved) or 'nothing moved'}")
        kept.append("; ".join(sorted(unmoved)))
        print(f"  no training row moves (shipped value kept): {kept[-1] or 'none'}")
        print(f"  held-out MAPE {mape([held_out[i] for i in test]):.1f}% "
              f"(shipped calibration on the same rows {mape([in_sample[i] for i in test]):.1f}%)", flush=True)
    frame = pd.DataFrame({
        "row": [c[1] for c in cases], "set": [c[0] for c in cases], "source": [source_of(c) for c in cases],
        "fold": fold_of, "fold_kept_shipped": [kept[k] for k in fold_of], "measured": [c[6] for c in cases],
        "error_shipped": in_sample, "error_held_out": held_out})
    print("", *summary_table(frame), sep="\n")
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    frame.to_csv(partial, index=False, float_format="%.5g")
    os.replace(partial, out)  # the earlier file stays whole until this one is complete
    if readme:
        write_readme(frame)
    print(f"\nwrote {out.relative_to(REPO) if out.is_relative_to(REPO) else out} "
          f"({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    app()
