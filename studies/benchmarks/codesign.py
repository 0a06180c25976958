"""Co-design benchmark: the outer space of cluster designs searched exhaustively and by Optuna.

The space (specs/codesign_405b.yaml): Llama-3 405B, 3 platforms x 3 NIC options x 2 switch models (Spectrum-4, Quantum-2) x
4 families at 31 GPU counts = 2,232 cluster designs. Printed:

- exhaustive over the outer space: wall time (space build, MILPs and inner searches included), MILP
  solves, inner searches and cache hits, designs without a network or a strategy and why;
- Optuna over the outer space with `--trials` trials (default 10 % of the space), per sampler and
  seed: distinct designs evaluated, wall time, and the hypervolume of its front over the exhaustive
  front's (both objectives normalized by the exhaustive front's ranges; reference point 1.1 x the
  exhaustive front's worst capex and time).

    .venv/bin/python studies/benchmarks/codesign.py [--samplers tpe nsga2 random] [--seeds 0 1 2 3 4]
"""

from __future__ import annotations

import re
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import typer

from designer.pareto import hypervolume, nondominated_mask
from designer.pipeline import make_problem, outer_identity, outer_scorer
from designer.search.exhaustive import run_exhaustive
from designer.search.outer import Evaluator, InnerCache, Knobs, Pricer, build_outer_space, run_outer_exhaustive
from designer.search.runner import OuterSettings, open_storage, run_outer_optuna
from designer.spec.network_study import study_catalog
from designer.spec.study import load_study

SPEC = Path(__file__).resolve().parent / "specs" / "codesign_405b.yaml"
app = typer.Typer(add_completion=False)


def _front(points: np.ndarray) -> np.ndarray:
    return points[nondominated_mask(points)] if len(points) else points


def _hv(points: np.ndarray, lo: np.ndarray, span: np.ndarray) -> float:
    return hypervolume((points - lo) / span, (1.1, 1.1)) if len(points) else 0.0


def _fresh(spec, problem, catalog) -> Evaluator:
    return Evaluator(problem, Pricer(spec.network, catalog), InnerCache(lambda c: run_exhaustive(problem, c)))


@app.command()
def main(samplers: list[str] = typer.Option(["tpe", "nsga2", "random"], help="outer samplers to compare"),
         seeds: list[int] = typer.Option([0, 1, 2, 3, 4], help="seeds per sampler"),
         trials: int = typer.Option(0, help="outer Optuna trials; 0: 10 % of the space")) -> None:
    spec = load_study(SPEC)
    problem = make_problem(spec)
    catalog = study_catalog(spec.network)
    t0 = time.perf_counter()
    space = build_outer_space(spec, catalog, problem)
    t_space = time.perf_counter() - t0
    ev = _fresh(spec, problem, catalog)
    t1 = time.perf_counter()
    outcomes = run_outer_exhaustive(space, ev)
    t_ex = time.perf_counter() - t1
    ok = [o for o in outcomes if np.isfinite(o.best_time_to_train_s)]
    pts = np.array([(o.candidate.capex_usd, o.best_time_to_train_s) for o in ok])
    front = _front(pts)
    lo, hi = front.min(axis=0), front.max(axis=0)
    span = np.where(hi > lo, hi - lo, 1.0)
    hv_ex = _hv(front, lo, span)
    print(f"outer space: {space.size} designs ({len(space.fabrics)} fabrics x "
          f"{ {p: len(c) for p, c in space.counts.items()} } GPU counts), built in {t_space:.2f} s; "
          f"{len(space.dropped)} counts dropped by the guard")
    print(f"exhaustive: {t_ex + t_space:.1f} s wall ({t_ex / space.size * 1e3:.1f} ms per design); "
          f"{ev.pricer.solves} MILP solves, {ev.inner.runs} inner searches ({ev.inner.hits} shared); "
          f"{len(ok)} designs with a strategy, front of {len(front)}")
    why = Counter(re.sub(r"\d[\d,.]*", "N", o.reason) if o.candidate is None else "no feasible strategy"
                  for o in outcomes if not np.isfinite(o.best_time_to_train_s))
    for r, n in why.most_common(4):
        print(f"  {n:5d} without a result: {r[:160]}")
    n_trials = trials or max(1, space.size // 10)
    print(f"optuna: {n_trials} trials per run ({n_trials / space.size:.1%} of the space); HV ratio against the exhaustive front")
    for name in samplers:
        ratios, walls, distinct = [], [], []
        for seed in seeds:
            e = _fresh(spec, problem, catalog)
            with tempfile.TemporaryDirectory() as tmp:
                st = open_storage(Path(tmp) / "optuna.journal")
                s = spec.with_updates(search={**spec.search.model_dump(), "seed": seed},
                                      design_search={**spec.design_search.model_dump(), "method": "optuna",
                                                     "n_trials": n_trials, "sampler": name})
                t2 = time.perf_counter()
                done = run_outer_optuna(space, outer_scorer(s, problem, e), storage=st, study=s.name,
                                        objectives=tuple(problem.objectives),
                                        settings=OuterSettings(n_trials, seed, name), identity=outer_identity(s))
                walls.append(time.perf_counter() - t2)
            keys = {k for _, k in done if k is not None}
            distinct.append(len(keys))
            found = []
            for key in keys:
                o = e(Knobs.from_key(key))
                if np.isfinite(o.best_time_to_train_s):
                    found.append((o.candidate.capex_usd, o.best_time_to_train_s))
            r = _hv(_front(np.array(found).reshape(-1, 2)), lo, span) / hv_ex
            ratios.append(r)
            print(f"  {name:6s} seed {seed}: HV ratio {r:.4f}, {len(keys)} distinct designs, {walls[-1]:.1f} s")
        print(f"  {name:6s} median HV ratio {statistics.median(ratios):.4f} (min {min(ratios):.4f}), "
              f"median {statistics.median(distinct):.0f} designs, median wall {statistics.median(walls):.1f} s")


if __name__ == "__main__":
    app()
