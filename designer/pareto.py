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
    """The exact volume dominated by `points` (minimized) and bounded by `ref`, for 1, 2 or 3 objectives.
    Points not strictly better than `ref` in every objective add nothing."""
    r = np.asarray(ref, dtype=float)
    p = np.asarray(points, dtype=float).reshape(-1, len(r))
    p = p[np.all(np.isfinite(p), axis=1) & np.all(p < r, axis=1)]
    if not len(p):
        return 0.0
    p = p[nondominated_mask(p)]
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
            total += hypervolume(p[: i + 1, :2], r[:2]) * (z[i + 1] - z[i])
        return float(total)
    raise ValueError(f"hypervolume is implemented for 1 to 3 objectives, got {len(r)}")


def front_rows(rows: Sequence[dict[str, Any]], objectives: Sequence[str]) -> list[dict[str, Any]]:
    """The non-dominated result rows (dicts holding the objective columns), sorted by the objectives."""
    pts = [Point(tuple(float(r[o]) for o in objectives), r) for r in rows]
    return [p.item for p in pareto_front(pts)]


__all__ = ["Point", "front_rows", "hypervolume", "nondominated_mask", "pareto_front"]
