"""A solve stopped by its time limit reports its incumbent with a gap against a meaningful bound (the
better of HiGHS's bound and the LP relaxation), never the trivial bound of a search that had barely
started: that made an optimal incumbent read as a 27,000% gap."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from designer.network.budgets import budget_rows
from designer.network.milp import build_model, enumerate_combos, tighten_combos
from designer.network.solve import run_highs
from designer.spec.network_study import SolverSettings, study_catalog

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "studies" / "benchmarks"))
import bench_milp  # noqa: E402  - the benchmark's realistic open choice set


def _model(study):
    catalog = study_catalog(study)
    combos = tighten_combos(enumerate_combos(study, catalog), budget_rows(study.budgets))
    return build_model(study, catalog, combos=combos, objective=study.objective.base_kind).model


@pytest.mark.parametrize("n,kind", [(1_000_000, "min_cost"), (32768, "max_flops")])
def test_a_time_limited_incumbent_has_a_valid_and_meaningful_gap(n, kind):
    study = bench_milp.studies(n)[kind]
    if n >= 1_000_000:
        # 1M GPUs in rows of 16 racks would make a hall kilometres deep, beyond the 2 km optics; rows
        # of 64 keep every link within them (designer.network.layout).
        study = study.with_updates(choices={**study.choices.model_dump(), "layout": {"racks_per_row": 64}})
    full = run_highs(_model(study), SolverSettings(time_limit_s=120, rel_gap=1e-9, threads=1))
    assert full.status == "optimal"
    opt = full.objective
    seen = []
    # Time limits around the moment HiGHS finds its first incumbent (machine-dependent): each outcome
    # is checked, whatever it is.
    for limit in (0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 3.0):
        short = run_highs(_model(study), SolverSettings(time_limit_s=limit, threads=1))
        seen.append(short.status)
        if short.status == "no_solution":
            continue
        if short.status == "optimal":
            assert short.objective == pytest.approx(opt, rel=1e-6)
            continue
        assert short.status == "incumbent" and short.bound is not None
        # the bound is a bound: below the optimum when minimizing cost, above it when maximizing FLOP/s
        if kind == "min_cost":
            assert short.bound <= opt * (1 + 1e-9) and short.objective >= opt * (1 - 1e-9)
        else:
            assert short.bound >= opt * (1 - 1e-9) and short.objective <= opt * (1 + 1e-9)
        assert short.gap == pytest.approx(abs(short.objective - short.bound) / abs(short.objective))
        assert short.gap < 1.0  # the trivial bound gave 1.0 (min_cost, bound 0) and 271 (max_flops)
    assert set(seen) - {"no_solution"}, seen
    print(kind, n, seen)


def test_the_run_summary_names_an_incumbent_and_its_gap():
    from designer.report import milp_status_line

    assert milp_status_line({"status": "optimal", "max_gap": 0.0}) is None
    line = milp_status_line({"status": "incumbent", "max_gap": 0.185, "n_incumbent": 2, "n_designs": 9,
                             "time_limit_s": 0.2})
    assert line.startswith("MILP: incumbent, gap 18.5% on 2 of 9 designs") and "time_limit_s = 0.2 s" in line
