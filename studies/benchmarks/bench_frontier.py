"""Benchmark the epsilon-constraint frontier of the network MILP: one persistent model vs a rebuild per level.

    .venv/bin/python studies/benchmarks/bench_frontier.py [--repeats 3] [--levels 20] [--budget]

The whole catalog open as in bench_milp.CHOICES (6 HB platforms, 3 NICs at 1 or 2 per GPU, 4 switches
with all their port modes, 4 families, oversubscription 3:1 and 7:1, DAC or optics chosen), at least
400 Gb/s per GPU.

  * n_gpus (always): min_cost at each of `--levels` GPU counts spread geometrically from 1,024 to
    1,000,000, each rounded to a multiple of `--round` (256: every 8-GPU node and 256-GPU rack can
    build it; NVL72 racks only where 72 also divides it, as for a single solve of that count);
  * capex_usd (`--budget`): max_gpus under each of `--budget-levels` capex caps of $40k per GPU
    times a GPU count spread from 1,024 to `--budget-hi`, the count free in [512, 2 x budget-hi]
    (each level a hard MILP: the budget binds and the count is open; bench_milp's max_flops row).

Each frontier runs the persistent path (solve_network, one model re-solved with the same HiGHS
object) and the rebuild path (solve_network(..., rebuild_per_level=True): enumerate, tighten, build
and translate per level) in the same process, alternating, `--repeats` times each. Printed: the median
wall time of each path and their ratio, then per level the median HiGHS time of each path (the
persistent path's first level includes translating the whole model) and whether the two paths agree
on the optimum (capex for min_cost, GPUs then capex for max_gpus; both must match to 1e-9).
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from pathlib import Path

import typer

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_milp import CHOICES, USD_PER_GPU  # noqa: E402

from designer.network.api import solve_network  # noqa: E402
from designer.network.design import NetworkResult  # noqa: E402
from designer.spec.catalog import Catalog  # noqa: E402
from designer.spec.network_study import NetworkStudy, study_catalog  # noqa: E402

SOLVER = {"time_limit_s": 120, "rel_gap": 1e-6, "threads": 1, "seed": 0}


def geometric(lo: float, hi: float, n: int) -> list[float]:
    return [lo * (hi / lo) ** (i / (n - 1)) for i in range(n)] if n > 1 else [lo]


def gpu_levels(n: int, lo: int, hi: int, multiple: int) -> list[int]:
    levels = sorted({max(multiple, round(x / multiple) * multiple) for x in geometric(lo, hi, n)})
    if len(levels) < n:
        raise SystemExit(f"only {len(levels)} distinct multiples of {multiple} in [{lo}, {hi}]; lower --round")
    return levels


def n_gpus_study(levels: list[int]) -> NetworkStudy:
    return NetworkStudy.model_validate({
        "name": "bench-frontier-n-gpus", "choices": CHOICES, "solver": SOLVER,
        "gpus": {"min": levels[0], "max": levels[-1], "min_scaleout_gbps_per_gpu": 400},
        "objective": {"kind": "frontier", "frontier": {"vary": "n_gpus", "levels": levels, "optimize": "min_cost"}}})


def capex_study(n: int, hi: int) -> NetworkStudy:
    levels = [USD_PER_GPU * round(x) for x in geometric(1024, hi, n)]
    return NetworkStudy.model_validate({
        "name": "bench-frontier-capex", "choices": CHOICES, "solver": SOLVER,
        "gpus": {"min": 512, "max": 2 * hi, "min_scaleout_gbps_per_gpu": 400},
        "objective": {"kind": "frontier", "frontier": {"vary": "capex_usd", "levels": levels, "optimize": "max_gpus"}}})


def same_optimum(a: NetworkResult, b: NetworkResult) -> list[bool]:
    if [d.level for d in a.designs] != [d.level for d in b.designs] or a.dropped_levels != b.dropped_levels:
        return [False] * max(len(a.designs), len(b.designs))
    return [x.job_gpus == y.job_gpus and math.isclose(x.capex_usd, y.capex_usd, rel_tol=1e-9)
            for x, y in zip(a.designs, b.designs)]


def bench(title: str, study: NetworkStudy, catalog: Catalog, repeats: int) -> None:
    walls: dict[str, list[float]] = {"persistent": [], "rebuild": []}
    per_level: dict[str, list[tuple[float, ...]]] = {"persistent": [], "rebuild": []}
    results: dict[str, NetworkResult] = {}
    for _ in range(repeats):
        for path in walls:
            t0 = time.perf_counter()
            # The catalog is passed in: study_catalog would refuse GPU levels that not every chosen HB
            # domain size divides; a platform that cannot build a level simply sits that level out.
            res = solve_network(study, catalog=catalog, rebuild_per_level=(path == "rebuild"))
            walls[path].append(time.perf_counter() - t0)
            per_level[path].append(res.solve_times_s)
            results[path] = res
    fr = study.objective.frontier
    new, old = statistics.median(walls["persistent"]), statistics.median(walls["rebuild"])
    print(f"\n{title}: {len(fr.levels)} levels of {fr.vary}, optimize {fr.optimize}, {repeats} repeats")
    print(f"  persistent  median {new:7.2f} s  (min {min(walls['persistent']):.2f}, "
          f"{new / len(fr.levels):.2f} s per level)")
    print(f"  rebuild     median {old:7.2f} s  (min {min(walls['rebuild']):.2f}, "
          f"{old / len(fr.levels):.2f} s per level)")
    print(f"  rebuild / persistent = {old / new:.1f}x")
    agree = same_optimum(results["persistent"], results["rebuild"])
    print(f"  {'level':>14} {'persist_s':>9} {'rebuild_s':>9}  same  design (persistent)")
    for i, d in enumerate(results["persistent"].designs):
        p = statistics.median(t[i] for t in per_level["persistent"])
        r = statistics.median(t[i] for t in per_level["rebuild"])
        print(f"  {d.level:>14,.0f} {p:>9.3f} {r:>9.3f}  {'yes' if agree[i] else 'NO':>4}  "
              f"{d.job_gpus:,} GPUs ${d.capex_usd / 1e6:,.1f}M {d.label}")
    for line in results["persistent"].dropped_levels:
        print(f"  dropped: {line}")
    if not all(agree):
        raise SystemExit("the persistent and the rebuild frontier differ")


def main(
    repeats: int = typer.Option(3, help="timed repeats of each path (the median is printed)"),
    levels: int = typer.Option(20, help="GPU levels of the n_gpus frontier"),
    lo: int = typer.Option(1024, help="smallest GPU level"),
    hi: int = typer.Option(1_000_000, help="largest GPU level"),
    round_to: int = typer.Option(256, "--round", help="GPU levels are multiples of this"),
    budget: bool = typer.Option(False, "--budget", help="also a max_gpus frontier over capex levels"),
    budget_levels: int = typer.Option(5, help="capex levels of the budget frontier"),
    budget_hi: int = typer.Option(32_768, help="largest capex level, in GPUs at $40k"),
) -> None:
    st = n_gpus_study(gpu_levels(levels, lo, hi, round_to))
    catalog = study_catalog(st.with_updates(objective={"kind": "min_cost"}))
    bench("n_gpus frontier", st, catalog, repeats)
    if budget:
        cst = capex_study(budget_levels, budget_hi)
        bench("capex frontier", cst, study_catalog(cst), repeats)


if __name__ == "__main__":
    typer.run(main)
