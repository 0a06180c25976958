"""Price robustness (designer.analysis.robustness.robustness): wall time of the whole analysis (draws,
capex product, per-draw fronts, the goal's answers, quantiles) over 50 designs x 30 price ids, at
1,000 and 100,000 draws, against a per-draw loop with moocore.is_nondominated as the baseline.

    .venv/bin/python studies/benchmarks/bench_robustness.py [--repeats 5] [--designs 50] [--ids 30]

Prints per draw count: the median wall time of `robustness` over the repeats (front goal, then the
goal "fastest under a capex budget"), and of the baseline's front loop on the same capex matrix
(only up to --loop-max draws), with whether the two fronts agree. Inputs are random but seeded:
each design uses about half the ids with whole quantities; times on a grid so that some tie; every
price triangular within -20 % / +30 % of its point price.
"""

from __future__ import annotations

import statistics
import time

import moocore
import numpy as np
import typer

from designer.analysis.robustness import (
    PriceExposure,
    PriceRange,
    PriceTerm,
    draw_prices,
    exposure_matrix,
    front_mask,
    robustness,
)
from designer.spec.study import Goal


def synthetic(n_designs: int, n_ids: int, seed: int = 0):
    g = np.random.default_rng(seed)
    ids = [f"id{k:02d}" for k in range(n_ids)]
    point = g.uniform(100.0, 100_000.0, n_ids)
    exps = []
    for j in range(n_designs):
        use = g.random(n_ids) < 0.5
        use[g.integers(n_ids)] = True
        terms = tuple(PriceTerm(entry_id=ids[k], section="switches", quantity=float(g.integers(1, 5000)),
                                price_usd=float(point[k])) for k in range(n_ids) if use[k])
        e = PriceExposure(design_id=f"d{j:03d}", label=f"d{j}", family="f", platform="p", n_gpus=8, capex_usd=0.0,
                          terms=terms)
        exps.append(e.model_copy(update={"capex_usd": e.capex_at({})}))
    times = g.choice(np.linspace(1e6, 5e6, max(2, n_designs // 2)), size=n_designs)
    ranges = {i: PriceRange(low_usd=p * 0.8, mode_usd=p, high_usd=p * 1.3) for i, p in zip(ids, point)}
    return exps, times, ranges


def median_s(fn, repeats: int) -> float:
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def main(repeats: int = typer.Option(5, help="timed runs per figure (the median is printed)"),
         designs: int = typer.Option(50, help="designs"), ids: int = typer.Option(30, help="price ids"),
         samples: str = typer.Option("1000,100000", help="draw counts, comma-separated"),
         loop_max: int = typer.Option(10_000, help="largest draw count the per-draw baseline loop runs")) -> None:
    exps, t, ranges = synthetic(designs, ids)
    budget = float(np.median([e.capex_usd for e in exps]))
    goal = Goal.model_validate({"minimize": "time_to_train_s", "subject_to": {"capex_usd": f"<= {budget}"}})
    print(f"{designs} designs x {ids} price ids, median of {repeats}")
    for n in (int(s) for s in samples.split(",")):
        front_s = median_s(lambda: robustness(exps, t, ranges, samples=n, seed=1), repeats)
        goal_s = median_s(lambda: robustness(exps, t, ranges, samples=n, seed=1, goal=goal), repeats)
        line = f"{n:>9,} draws: robustness {front_s * 1e3:9.1f} ms (front), {goal_s * 1e3:9.1f} ms (front + goal)"
        if n <= loop_max:
            names, _, q, rest = exposure_matrix(exps)
            capex = draw_prices([ranges[i] for i in names], n, np.random.default_rng(1)) @ q + rest
            vec_s = median_s(lambda: front_mask(capex, t), repeats)
            loop_s = median_s(lambda: [moocore.is_nondominated(np.column_stack([row, t])) for row in capex], repeats)
            agree = np.array_equal(front_mask(capex, t),
                                   np.array([moocore.is_nondominated(np.column_stack([row, t])) for row in capex]))
            line += (f"; fronts alone: front_mask {vec_s * 1e3:.2f} ms, per-draw moocore loop {loop_s * 1e3:.1f} ms "
                     f"({loop_s / vec_s:.0f}x), agree: {agree}")
        print(line)


if __name__ == "__main__":
    typer.run(main)
