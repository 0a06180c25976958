"""The non-dominated set over minimized objectives, and its hypervolume.

Every objective is minimized (capex, time-to-train, power, energy). A point a dominates b when a is
no worse in every objective and strictly better in one. Points with identical objective vectors are
duplicates: the front keeps the first of them in input order, so the result is deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, Sequence, TypeVar

import numpy as np

T = TypeVar("T")


@dataclass(frozen=True)
class Point(Generic[T]):
    """One scored candidate: its minimized objective values and whatever it came from (a design and
    a strategy, or a result row)."""

    values: tuple[float, ...]
    item: T = field(default=None, compare=False)  # type: ignore[assignment]


def nondominated_mask(values: np.ndarray) -> np.ndarray:
    """Boolean mask of the rows of `values` (n x k, minimized) on the front, duplicates removed (the
    first of equal rows is kept). Rows with a NaN or +inf are never on the front.

    The filter is moocore's (is_nondominated): 2-400x faster than the sort-and-scan it replaced on the
    sizes designer meets (studies/benchmarks/bench_pareto.py). Duplicates are collapsed first, so the
    row kept of each set of equal rows is the first in input order whatever moocore keeps."""
    import moocore

    v = np.asarray(values, dtype=float)
    if v.ndim != 2:
        raise ValueError(f"values must be a 2-D array (points x objectives), got shape {v.shape}")
    keep = np.zeros(v.shape[0], dtype=bool)
    idx = np.flatnonzero(np.all(np.isfinite(v), axis=1))
    if not len(idx):
        return keep
    unique, first = np.unique(v[idx], axis=0, return_index=True)
    keep[idx[first[moocore.is_nondominated(unique)]]] = True
    return keep


def pareto_front(points: Sequence[Point[T]]) -> list[Point[T]]:
    """The non-dominated points, sorted by their objective values (first objective ascending)."""
    if not points:
        return []
    k = len(points[0].values)
    if any(len(p.values) != k for p in points):
        raise ValueError("every point needs the same number of objective values")
    mask = nondominated_mask(np.array([p.values for p in points], dtype=float).reshape(len(points), k))
    front = [p for p, m in zip(points, mask) if m]
    return sorted(front, key=lambda p: p.values)


def hypervolume(points: Sequence[Sequence[float]] | np.ndarray, ref: Sequence[float]) -> float:
    """The exact volume dominated by `points` (minimized) and bounded by `ref` (moocore's hypervolume,
    any number of objectives). Points not strictly better than `ref` in every objective add nothing."""
    import moocore

    r = np.asarray(ref, dtype=float)
    p = np.asarray(points, dtype=float).reshape(-1, len(r))
    p = p[np.all(np.isfinite(p), axis=1) & np.all(p < r, axis=1)]
    if not len(p):
        return 0.0
    return float(moocore.hypervolume(p, ref=r))


def epsilon_front(points: Sequence[Point[T]], tolerances: Sequence[float]) -> list[Point[T]]:
    """The front without its near-ties. q covers p when q is worse than p by at most the relative
    tolerance in every objective (q_i <= p_i * (1 + eps_i): epsilon-dominance in its multiplicative
    form, Laumanns et al. 2002). The exact front is walked in order (first objective ascending, so
    the cheaper of two near-ties comes first) and a point is kept unless a point already kept covers
    it. So every point left out has a kept point within the tolerance in every objective, which is the
    promise a user relies on; a kept point may still be covered by a later, dearer one. With every
    tolerance 0 this is the exact front."""
    eps = np.asarray(tolerances, dtype=float)
    if np.any(eps < 0):
        raise ValueError(f"tolerances must be >= 0, got {list(tolerances)}")
    front = pareto_front(points)
    if not np.any(eps > 0):
        return front

    def covers(q: Point[T], p: Point[T]) -> bool:
        return all(qi <= pi * (1 + e) if pi >= 0 else qi <= pi * (1 - e) for qi, pi, e in zip(q.values, p.values, eps))

    kept: list[Point[T]] = []
    for p in front:
        if not any(covers(q, p) for q in kept):
            kept.append(p)
    return kept


def front_rows(rows: Sequence[dict[str, Any]], objectives: Sequence[str]) -> list[dict[str, Any]]:
    """The non-dominated result rows (dicts holding the objective columns), sorted by the objectives."""
    pts = [Point(tuple(float(r[o]) for o in objectives), r) for r in rows]
    return [p.item for p in pareto_front(pts)]


__all__ = ["Point", "epsilon_front", "front_rows", "hypervolume", "nondominated_mask", "pareto_front"]
