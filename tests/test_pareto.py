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


def test_epsilon_front_keeps_near_ties_off_and_zero_tolerance_is_the_exact_front():
    from designer.pareto import epsilon_front

    # capex (USD), time (s): b is $32M dearer than a for 7 minutes less of a 60-day run
    day = 86400.0
    a, b = Point((300e6, 60 * day), "a"), Point((332e6, 60 * day - 420), "b")
    c = Point((500e6, 40 * day), "c")  # a third faster: not a near-tie
    pts = [b, c, a]
    assert [p.item for p in pareto_front(pts)] == ["a", "b", "c"]
    assert [p.item for p in epsilon_front(pts, (0.0, 0.0))] == ["a", "b", "c"]
    # 1% on capex, 0.5% on time: b is within 0.5% of a's time (and a is cheaper): b leaves
    assert [p.item for p in epsilon_front(pts, (0.01, 0.005))] == ["a", "c"]
    # no tolerance on time: b's 7 minutes keep it
    assert [p.item for p in epsilon_front(pts, (0.5, 0.0))] == ["a", "b", "c"]
    # on a random front: every point left out has a kept point within the tolerance in every objective
    rng = np.random.default_rng(3)
    cloud = [Point((float(x), float(1.0 / x + 0.05 * y)), i) for i, (x, y) in enumerate(rng.random((400, 2)) + 0.1)]
    eps = (0.02, 0.02)
    kept = epsilon_front(cloud, eps)
    exact = pareto_front(cloud)
    assert 0 < len(kept) < len(exact)
    for p in exact:
        assert any(all(qi <= pi * (1 + e) for qi, pi, e in zip(q.values, p.values, eps)) for q in kept)


def test_a_study_with_a_front_tolerance_keeps_near_ties_off_its_front(tmp_path):
    from pathlib import Path

    import yaml

    from designer.errors import SpecError
    from designer.pipeline import run_study
    from designer.spec.study import load_study

    root = Path(__file__).resolve().parents[1]
    data = yaml.safe_load((root / "studies/quickstart/study.yaml").read_text())
    data["output"] = {"plots": False}
    exact_path, tol_path = tmp_path / "exact.yaml", tmp_path / "tol.yaml"
    exact_path.write_text(yaml.safe_dump(data))
    data["output"]["front_tolerance"] = {"capex_usd": 0.02, "time_to_train_s": 0.02}
    tol_path.write_text(yaml.safe_dump(data))
    exact = run_study(load_study(exact_path), out_dir=tmp_path / "a")
    tol = run_study(load_study(tol_path), out_dir=tmp_path / "b")
    assert len(tol.pareto) < len(exact.pareto)
    assert len(tol.trials) == len(exact.trials)  # every design is still in trials
    # every exact front point left out has a kept one within 2% in capex and time
    for _, p in exact.pareto.iterrows():
        assert ((tol.pareto["capex_usd"] <= p["capex_usd"] * 1.02)
                & (tol.pareto["time_to_train_s"] <= p["time_to_train_s"] * 1.02)).any()
    data["output"]["front_tolerance"] = {"power_w": 0.01}
    tol_path.write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError, match="front_tolerance names \\['power_w'\\]"):
        load_study(tol_path)
