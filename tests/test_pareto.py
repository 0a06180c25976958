"""The non-dominated filter and the hypervolume on hand-made point sets (values worked out by hand)."""

import numpy as np
import pytest

from designer.pareto import Point, front_rows, hypervolume, nondominated_mask, pareto_front


def test_two_objectives_hand_made():
    # (cost, time): b dominates d (cheaper and faster); e duplicates a; c is the fastest, f is infinite.
    pts = [Point((1.0, 10.0), "a"), Point((2.0, 5.0), "b"), Point((4.0, 1.0), "c"), Point((3.0, 6.0), "d"),
           Point((1.0, 10.0), "e"), Point((0.5, float("inf")), "f"), Point((2.0, 7.0), "g")]
    front = pareto_front(pts)
    assert [p.item for p in front] == ["a", "b", "c"]


def test_ties_in_first_objective_keep_only_the_better_second():
    mask = nondominated_mask(np.array([[1.0, 3.0], [1.0, 2.0], [2.0, 1.0], [2.0, 1.0]]))
    assert mask.tolist() == [False, True, True, False]


def test_three_objectives():
    v = np.array([
        [1, 1, 9],   # front
        [1, 1, 9],   # duplicate of row 0
        [2, 2, 2],   # front
        [3, 3, 3],   # dominated by row 2
        [9, 0, 9],   # front (best in objective 2)
        [2, 2, 8],   # dominated by row 2
        [1, 2, 9],   # dominated by row 0
    ], dtype=float)
    assert nondominated_mask(v).tolist() == [True, False, True, False, True, False, False]


def test_front_rows_keeps_payload():
    rows = [{"capex_usd": 10.0, "time_to_train_s": 5.0, "design": "x"},
            {"capex_usd": 20.0, "time_to_train_s": 5.0, "design": "y"},
            {"capex_usd": 30.0, "time_to_train_s": 1.0, "design": "z"}]
    assert [r["design"] for r in front_rows(rows, ["capex_usd", "time_to_train_s"])] == ["x", "z"]


def test_hypervolume_2d_by_hand():
    # Staircase with ref (10, 10): (2,8) -> [2,4)x[8,10) = 4; (4,4) -> [4,7)x[4,10) = 18; (7,1) -> [7,10)x[1,10) = 27.
    assert hypervolume([[2, 8], [4, 4], [7, 1]], [10, 10]) == pytest.approx(49.0)
    # Dominated points, duplicates and points outside the reference box add nothing.
    assert hypervolume([[2, 8], [4, 4], [7, 1], [5, 5], [4, 4], [11, 0]], [10, 10]) == pytest.approx(49.0)
    assert hypervolume([], [1, 1]) == 0.0


def test_hypervolume_3d_by_hand():
    # Two boxes from the origin-side corners to ref (4,4,4): (1,1,3) gives 3*3*1 = 9; (2,2,1) gives 2*2*3 = 12;
    # their overlap is [2,4)^2 x [3,4) = 4, so the union is 17.
    assert hypervolume([[1, 1, 3], [2, 2, 1]], [4, 4, 4]) == pytest.approx(17.0)
    # Agrees with a Monte-Carlo-free grid count on a 0.25 lattice.
    pts = np.array([[1, 3, 2], [2, 1, 3], [3, 2, 1], [0.5, 3.5, 3.5]])
    g = np.arange(0.125, 4, 0.25)
    X, Y, Z = np.meshgrid(g, g, g, indexing="ij")
    cells = np.stack([X.ravel(), Y.ravel(), Z.ravel()], axis=1)
    dominated = np.zeros(len(cells), bool)
    for p in pts:
        dominated |= np.all(cells >= p, axis=1)
    assert hypervolume(pts, [4, 4, 4]) == pytest.approx(dominated.sum() * 0.25**3)
