"""Pareto filtering and hypervolume: designer's former hand-written numpy (kept below as the baseline)
against moocore, which designer.pareto now calls, on the sizes
designer meets: fronts of cluster designs (10^2..10^4 points, 2 and 3 objectives) and the exhaustive
strategy tables filtered per design (10^5..10^6 points, 2 objectives).

    .venv/bin/python studies/benchmarks/bench_pareto.py [--repeats 5]

Prints per size: the median wall time of each, their ratio, and whether the two agree (the same mask,
hypervolumes equal to 1e-12 relative). Inputs are random but seeded, with duplicated rows (designs with
the same cost and time are common) and a front of realistic size (anti-correlated objectives).
"""

from __future__ import annotations

import statistics
import time
from typing import Sequence

import moocore
import numpy as np
import typer

from designer.pareto import hypervolume, nondominated_mask


# ---- the former implementation of designer.pareto, the baseline ---------------------------------
def scan_mask(values: np.ndarray) -> np.ndarray:
    """(The former designer.pareto.nondominated_mask.) Boolean mask of the rows of `values` (n x k, minimized) on the front, duplicates removed (the
    first of equal rows is kept). Rows with a NaN or +inf are never on the front."""
    v = np.asarray(values, dtype=float)
    if v.ndim != 2:
        raise ValueError(f"values must be a 2-D array (points x objectives), got shape {v.shape}")
    n, k = v.shape
    keep = np.zeros(n, dtype=bool)
    finite = np.all(np.isfinite(v), axis=1)
    idx = np.flatnonzero(finite)
    if not len(idx):
        return keep
    # Lexicographic order (ties by input position): a point can only be dominated by one before it.
    order = idx[np.lexsort(tuple(v[idx, j] for j in reversed(range(k))))]
    if k == 1:
        keep[order[0]] = True
        return keep
    if k == 2:
        best_second = np.inf
        for i in order:
            if v[i, 1] < best_second:
                keep[i] = True
                best_second = v[i, 1]
        return keep
    front: list[int] = []
    for i in order:
        if front:
            f = v[front]
            # i comes after every front member in lexicographic order, so "no worse everywhere" means dominated
            # (or a duplicate, which is also dropped).
            if np.any(np.all(f <= v[i], axis=1)):
                continue
        front.append(int(i))
    keep[front] = True
    return keep



def scan_hypervolume(points: Sequence[Sequence[float]] | np.ndarray, ref: Sequence[float]) -> float:
    """(The former designer.pareto.hypervolume.) The exact volume dominated by `points` (minimized) and bounded by `ref`, for 1, 2 or 3 objectives.
    Points not strictly better than `ref` in every objective add nothing."""
    r = np.asarray(ref, dtype=float)
    p = np.asarray(points, dtype=float).reshape(-1, len(r))
    p = p[np.all(np.isfinite(p), axis=1) & np.all(p < r, axis=1)]
    if not len(p):
        return 0.0
    p = p[scan_mask(p)]
    if len(r) == 1:
        return float(r[0] - p[:, 0].min())
    if len(r) == 2:
        p = p[np.argsort(p[:, 0])]  # on the front, the second objective then decreases
        widths = np.diff(np.append(p[:, 0], r[0]))
        return float(np.sum(widths * (r[1] - p[:, 1])))
    if len(r) == 3:
        # Slice along the third objective: between consecutive z levels the dominated region is the 2-D
        # hypervolume of the points at or below that level.
        p = p[np.argsort(p[:, 2])]
        z = np.append(p[:, 2], r[2])
        total = 0.0
        for i in range(len(p)):
            total += scan_hypervolume(p[: i + 1, :2], r[:2]) * (z[i + 1] - z[i])
        return float(total)
    raise ValueError(f"hypervolume is implemented for 1 to 3 objectives, got {len(r)}")




def _points(n: int, k: int, rng: np.random.Generator) -> np.ndarray:
    # anti-correlated objectives (cost against time) with noise: fronts of a few hundred points
    base = rng.random((n, 1))
    cols = [base[:, 0]] + [1.0 - base[:, 0] + 0.3 * rng.random(n) for _ in range(k - 1)]
    v = np.round(np.column_stack(cols), 4)  # rounding makes duplicates, as equal designs do
    return v


def _median(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(repeats: int = typer.Option(5, help="timed repeats per size (the median is printed)")) -> None:
    rng = np.random.default_rng(0)
    print(f"{'case':28s} {'hand-made':>11s} {'moocore':>11s} {'ratio':>7s}  agree (and designer.pareto agrees)")
    for k, n in ((2, 100), (2, 10_000), (2, 1_000_000), (3, 100), (3, 10_000), (3, 100_000)):
        v = _points(n, k, rng)
        ours, theirs = scan_mask(v), moocore.is_nondominated(v)
        # both keep one of equal rows: compare the kept values; designer.pareto must equal the scan exactly
        same = np.array_equal(np.unique(v[ours], axis=0), np.unique(v[theirs], axis=0)) and ours.sum() == theirs.sum()
        same = same and np.array_equal(nondominated_mask(v), ours)
        t_ours = _median(lambda: scan_mask(v), repeats)
        t_theirs = _median(lambda: moocore.is_nondominated(v), repeats)
        print(f"front   k={k} n={n:>9,}     {t_ours * 1e3:9.2f}ms {t_theirs * 1e3:9.2f}ms {t_ours / t_theirs:6.1f}x  {same}")
        if n <= 10_000:
            ref = v.max(axis=0) * 1.1
            h_ours, h_theirs = scan_hypervolume(v, ref), moocore.hypervolume(v, ref=ref)
            same = abs(h_ours - h_theirs) <= 1e-12 * abs(h_theirs) and hypervolume(v, ref) == h_theirs
            t_ours = _median(lambda: scan_hypervolume(v, ref), repeats)
            t_theirs = _median(lambda: moocore.hypervolume(v, ref=ref), repeats)
            print(f"hypervol k={k} n={n:>9,}     {t_ours * 1e3:9.2f}ms {t_theirs * 1e3:9.2f}ms {t_ours / t_theirs:6.1f}x  "
                  f"{same}")


if __name__ == "__main__":
    typer.run(main)
