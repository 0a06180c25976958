"""Search quality: the Optuna front against the exact (exhaustive) front on enumerable studies.

For each study, every candidate design is searched twice: exhaustively (every valid strategy, the
vectorized model) and with Optuna (TPE, seeded, in-memory storage) on a budget of `--fraction` of the
design's space. The front over designs is built from each method's fastest feasible strategy per design.
Printed: the hypervolume ratio HV(Optuna front) / HV(exact front) (reference point: 1.1 x the worst
capex and time of the exact designs), the evaluations each used (distinct strategies scored), and the
wall time of each method, which is what `search.method: auto` weighs.

    .venv/bin/python studies/benchmarks/search_quality.py [--fraction 0.1] [--seeds 0 --seeds 1]  (list options: repeat the flag)
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import numpy as np
import optuna
import typer
from rich.markup import escape

from designer.pareto import hypervolume
from designer.pipeline import generate_candidates, make_problem
from designer.search.exhaustive import run_exhaustive
from designer.search.runner import RunnerSettings, run_optuna
from designer.spec.study import load_study

REPO = Path(__file__).resolve().parents[2]

# (label, study file, strategy-space overrides that make the space larger but still enumerable)
STUDIES = [
    ("quickstart (70B, default space)", REPO / "studies/quickstart/study.yaml", {}),
    ("quickstart, wider space (ZeRO 0-3, cp 1-2, mbs 1-8, all schedules)", REPO / "studies/quickstart/study.yaml",
     {"zero_stages": [0, 1, 2, 3], "cp": [1, 2], "microbatch_sizes": [1, 2, 4, 8],
      "schedules": ["gpipe", "1f1b", "interleaved"], "virtual_stages": [2, 4]}),
]


def front_hv(points: list[tuple[float, float]], ref: tuple[float, float]) -> float:
    return hypervolume(np.array(points, float).reshape(-1, 2), ref)


def run(label: str, path: Path, overrides: dict, fraction: float, seeds: list[int]) -> None:
    spec = load_study(path)
    if overrides:
        spec = spec.with_updates(strategy_space={**spec.strategy_space.model_dump(), **overrides})
    problem = make_problem(spec)
    cands, _ = generate_candidates(spec)
    exact, ex_evals, ex_time = [], 0, 0.0
    sizes = []
    for c in cands:
        t0 = time.perf_counter()
        t = run_exhaustive(problem, c)
        ex_time += time.perf_counter() - t0
        ex_evals += t.n_evaluations
        sizes.append(t.space_size)
        if t.best is not None:
            exact.append((c.capex_usd, float(t.time_to_train_s[t.best])))
    ref = (1.1 * max(x for x, _ in exact), 1.1 * max(y for _, y in exact))
    hv_exact = front_hv(exact, ref)
    print(f"\n== {label}: {len(cands)} designs, space sizes {min(sizes)}-{max(sizes)} (total {sum(sizes)})")
    print(f"   exhaustive: {ex_evals} evaluations, {ex_time:.2f} s", flush=True)
    for seed in seeds:
        pts, evals, trials, op_time = [], 0, 0, 0.0
        for c, size in zip(cands, sizes):
            n = max(10, int(round(fraction * size)))
            t0 = time.perf_counter()
            t = run_optuna(problem, c, storage=optuna.storages.InMemoryStorage(), study=spec.name,
                           settings=RunnerSettings(n_trials=n, seed=seed), identity="bench")
            op_time += time.perf_counter() - t0
            evals += t.n_evaluations
            trials += len(t)
            if t.best is not None:
                pts.append((c.capex_usd, float(t.time_to_train_s[t.best])))
        ratio = front_hv(pts, ref) / hv_exact if hv_exact > 0 else float("nan")
        print(f"   optuna seed {seed}: HV ratio {ratio:.4f}, {evals} evaluations ({evals / ex_evals:.1%} of exhaustive), "
              f"{trials} trials, {op_time:.2f} s (exhaustive {ex_time:.2f} s: "
              f"{'exhaustive' if ex_time <= op_time else 'optuna'} is faster)", flush=True)


app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode="rich")


@app.command(help=escape(__doc__))
def main(fraction: Annotated[float, typer.Option(
             "--fraction", help="Optuna trials per design as a fraction of its space")] = 0.1,
         seeds: Annotated[list[int], typer.Option(
             "--seeds", help="Optuna seeds, one search each (repeat the flag for several)")] = [0, 1],
         ) -> None:
    for label, path, overrides in STUDIES:
        run(label, path, overrides, fraction, seeds)


if __name__ == "__main__":
    app()
