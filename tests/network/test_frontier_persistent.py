"""The persistent frontier (one model, one HiGHS object, only numbers change between levels) against
independent computations of each level.

Oracles, never the code's own frontier output:
  * each level solved as its own fresh study (`gpus: {count: level}` min_cost, or the level's budget
    with max_gpus / max_flops): a separate enumeration, tightening, model and solver per level;
  * for min_cost at a GPU count, brute force over the level's combinations with the closed form
    `bill_of_materials` (designer.network.topology) for the network and the catalog price per domain.
A small open choice set of the shipped catalog (two platforms, two switches, two NICs, three
families, DAC or optics) keeps the whole file to a few seconds.
"""

from __future__ import annotations

import math

import pyomo.environ as pyo
import pytest

from designer.errors import InfeasibleDesign
from designer.network import api
from designer.network.api import solve_network
from designer.network.milp import enumerate_combos, spare_need, spare_steps_over
from designer.spec.network_study import NetworkStudy, study_catalog

CHOICES = {
    "platforms": ["hgx_h100_8", "gb200_nvl72"],
    "nics": [{"id": "cx7_400g", "nics_per_gpu": [1]}, {"id": "cx6_200g", "nics_per_gpu": [2]}],
    "switches": [{"id": "qm9790"}, {"id": "sn5600"}],
    "families": ["rail-only", "rail-optimized", "oversubscribed"],
    "oversubscription": [3],
    "media": {"nic_links": "choose"},
}
SOLVER = {"time_limit_s": 60, "rel_gap": 1e-9, "threads": 1, "seed": 0}
GPU_LEVELS = [576, 1152, 2880, 5760, 14400]  # multiples of 72 and of 8: both platforms compete


def base(**kw) -> dict:
    return {"name": "pf", "choices": CHOICES, "solver": SOLVER, **kw}


def n_gpus_frontier(levels, **kw) -> NetworkStudy:
    return NetworkStudy.model_validate(base(
        gpus={"min": min(levels), "max": max(levels)},
        objective={"kind": "frontier", "frontier": {"vary": "n_gpus", "levels": list(levels), "optimize": "min_cost"}},
        **kw))


def fresh_min_cost(level: int, **kw):
    st = NetworkStudy.model_validate(base(gpus={"count": level}, objective={"kind": "min_cost"}, **kw))
    return solve_network(st).design


def assert_same_design(got, want) -> None:
    assert got.job_gpus == want.job_gpus and got.n_gpus == want.n_gpus
    assert got.capex_usd == pytest.approx(want.capex_usd, rel=1e-9)
    if got.label == want.label:  # the same choices: every count must agree too
        for field in ("switch_count", "switch_port_count", "transceiver_count", "dac_count", "nic_count"):
            assert getattr(got.bom, field) == getattr(want.bom, field), field
        assert (got.n_domains, got.spare_domains) == (want.n_domains, want.spare_domains)
        assert got.power_w == pytest.approx(want.power_w, rel=1e-9)


def brute_force_min_capex_usd(level: int) -> float:
    """Cheapest closed-form capex over every combination that builds exactly `level` GPUs."""
    st = NetworkStudy.model_validate(base(gpus={"count": level}))
    best = math.inf
    for c in enumerate_combos(st, study_catalog(st)):
        for d in range(c.d_min, c.d_max + 1):
            best = min(best, c.domain_usd * d + c.bom(d).cost_usd)
    return best


def test_min_cost_per_gpu_level_matches_fresh_solves_and_brute_force():
    res = solve_network(n_gpus_frontier(GPU_LEVELS))
    assert [d.level for d in res.designs] == GPU_LEVELS and res.dropped_levels == ()
    assert res.status == "optimal" and len(res.solve_times_s) == len(GPU_LEVELS)
    for d, level in zip(res.designs, GPU_LEVELS):
        assert d.n_gpus == level
        assert_same_design(d, fresh_min_cost(level))
        assert d.capex_usd == pytest.approx(brute_force_min_capex_usd(level), rel=1e-9)


def test_the_frontier_builds_one_model_and_one_solver(monkeypatch):
    builds, solvers = [], []
    real_build, real_solver = api.build_model, api.new_solver
    monkeypatch.setattr(api, "build_model", lambda *a, **k: builds.append(1) or real_build(*a, **k))
    monkeypatch.setattr(api, "new_solver", lambda: solvers.append(1) or real_solver())
    res = solve_network(n_gpus_frontier(GPU_LEVELS[:3]))
    assert len(res.designs) == 3
    assert (len(builds), len(solvers)) == (1, 1)
    builds.clear(), solvers.clear()
    solve_network(n_gpus_frontier(GPU_LEVELS[:3]), rebuild_per_level=True)
    assert (len(builds), len(solvers)) == (3, 3)


def test_levels_unordered_and_repeated_give_each_level_its_own_answer():
    # A level solved after a larger one must not inherit anything from it.
    levels = [5760, 576, 2880, 576]
    res = solve_network(n_gpus_frontier(levels))
    assert [d.level for d in res.designs] == levels
    for d, level in zip(res.designs, levels):
        assert_same_design(d, fresh_min_cost(level))


def test_a_capex_cap_drops_the_levels_it_rules_out_with_the_fresh_solves_reason():
    # $40M buys ~1,000 GPUs: 576 fits, 2,880 and 5,760 cannot (the budget rules out every combination
    # before the solve), and the level's line is the one a fresh solve of it raises.
    budgets = {"capex_usd": 4.0e7}
    res = solve_network(n_gpus_frontier([576, 2880, 5760], budgets=budgets))
    assert [d.level for d in res.designs] == [576]
    assert_same_design(res.designs[0], fresh_min_cost(576, budgets=budgets))
    want = []
    for level in (2880, 5760):
        with pytest.raises(InfeasibleDesign) as err:
            fresh_min_cost(level, budgets=budgets)
        want.append(f"n_gpus {level:g}: {err.value}")
    assert list(res.dropped_levels) == want
    assert "capex_usd budget" in want[0] and "short by" in want[0]
    assert res.slacks["capex_usd"].slack == pytest.approx(4.0e7 - res.designs[0].capex_usd)


@pytest.mark.parametrize("row,levels", [
    # switch_count is monotone in the domain count, so tightening drops 14,400 GPUs before any solve;
    ({"name": "few_switches", "metric": "switch_count", "sense": "<=", "rhs": 20}, [576, 14400]),
    # capex per GPU is not (tighten_combos leaves it alone): HiGHS itself finds the larger levels
    # infeasible on the persistent model (fresh solves, optics chosen by cable length: ~$36.80k per
    # GPU at 1,152 GPUs, ~$37.05k at 576, ~$37.8-37.9k from 2,880 on), and the explanation must still be
    # the fresh solve's.
    ({"name": "per_gpu", "metric": "capex_per_gpu_usd", "sense": "<=", "rhs": 36_900}, [576, 2880, 1152, 5760]),
])
def test_a_declared_budget_drops_levels_as_fresh_solves_do(row, levels):
    budgets = {"declared": [row]}
    res = solve_network(n_gpus_frontier(levels, budgets=budgets))
    kept = [d.level for d in res.designs]
    for level in levels:
        try:
            want = fresh_min_cost(level, budgets=budgets)
        except InfeasibleDesign as err:
            assert level not in kept
            assert f"n_gpus {level:g}: {err}" in res.dropped_levels
            continue
        assert_same_design(res.designs[kept.index(level)], want)
    assert res.dropped_levels and res.designs


def test_every_level_ruled_out_is_one_infeasible_design_line():
    with pytest.raises(InfeasibleDesign) as err:
        solve_network(n_gpus_frontier([2880, 5760], budgets={"capex_usd": 1.0e7}))
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("no level of the frontier over n_gpus (2880, 5760)")


@pytest.mark.parametrize("vary,optimize,levels", [
    ("capex_usd", "max_gpus", [1.0e7, 6.0e7, 2.5e8]),
    ("power_w", "max_flops", [2.0e6, 1.0e7]),
])
def test_budget_frontier_matches_fresh_lexicographic_solves(vary, optimize, levels):
    gpus = {"min": 64, "max": 8192}
    st = NetworkStudy.model_validate(base(
        gpus=gpus, objective={"kind": "frontier", "frontier": {"vary": vary, "levels": levels, "optimize": optimize}}))
    res = solve_network(st)
    got = {d.level: d for d in res.designs}
    for level in levels:
        fresh = NetworkStudy.model_validate(base(gpus=gpus, objective={"kind": optimize}, budgets={vary: level}))
        try:
            want = solve_network(fresh).design
        except InfeasibleDesign as err:
            assert f"{vary} {level:g}: {err}" in res.dropped_levels
            continue
        d = got[level]
        # Lexicographic: the same best value first (GPUs or FLOP/s), then the same least capex.
        assert d.peak_pflops == pytest.approx(want.peak_pflops, rel=1e-9)
        assert_same_design(d, want)
        assert (d.capex_usd if vary == "capex_usd" else d.power_w) <= level * (1 + 1e-9)
    assert len(res.designs) + len(res.dropped_levels) == len(levels)


def test_spares_per_gpu_level_match_fresh_solves():
    # Spares make each level a range of built domains [L/K, built(L/K)] whose spare-need steps are
    # written only over the union of those ranges (milp.spare_steps_over).
    spares = {"confidence": 0.999}
    levels = [576, 14400]
    res = solve_network(n_gpus_frontier(levels, spares=spares))
    assert [d.level for d in res.designs] == levels
    for d, level in zip(res.designs, levels):
        want = fresh_min_cost(level, spares=spares)
        assert d.job_gpus == level and d.spare_domains >= 1
        assert_same_design(d, want)


def test_multiple_of_on_a_capex_frontier_matches_fresh_solves():
    gpus = {"min": 576, "max": 576 * 30, "multiple_of": 576}
    levels = [5.0e7, 3.0e8]
    st = NetworkStudy.model_validate(base(
        gpus=gpus, objective={"kind": "frontier", "frontier": {"vary": "capex_usd", "levels": levels,
                                                                 "optimize": "max_gpus"}}))
    res = solve_network(st)
    for d, level in zip(res.designs, levels):
        want = solve_network(NetworkStudy.model_validate(base(gpus=gpus, objective={"kind": "max_gpus"},
                                                              budgets={"capex_usd": level}))).design
        assert d.n_gpus % 576 == 0
        assert_same_design(d, want)


def _no_rail_only_above_2000_gpus(block, ctx):
    # A hook that reads the level's own study: each level must see its own GPU count.
    if (ctx.study.gpus.count or 0) > 2000 and "rail-only" in ctx.handles.family:
        block.off = pyo.Constraint(expr=ctx.handles.family["rail-only"] == 0)


def test_a_hook_that_reads_the_level_sees_each_level_as_a_fresh_solve_does():
    levels = [576, 5760]
    hooks = [_no_rail_only_above_2000_gpus]
    res = solve_network(n_gpus_frontier(levels), hooks=hooks)
    for d, level in zip(res.designs, levels):
        st = NetworkStudy.model_validate(base(gpus={"count": level}, objective={"kind": "min_cost"}))
        assert_same_design(d, solve_network(st, hooks=hooks).design)
    assert res.designs[1].family.value != "rail-only"
    assert fresh_min_cost(5760).family.value == "rail-only"  # the hook matters at that level


def test_spare_steps_over_disjoint_ranges_equal_the_availability_model():
    # Oracle: the availability model's spare need g(D) itself, D by D, on every range (and in none
    # of the gaps, where the merged step may differ from g by design).
    st = NetworkStudy.model_validate(base(gpus={"min": 576, "max": 20_000}, spares={"confidence": 0.999}))
    combos = [c for c in enumerate_combos(st, study_catalog(st)) if c.d_max - c.d_min > 200][:3]
    assert combos
    for c in combos:
        lo, hi = c.d_min, c.d_max
        ranges = [(lo + 150, lo + 170), (lo, lo + 10), (lo + 5, lo + 20), (hi - 3, hi)]  # unsorted, overlapping
        start, steps = spare_steps_over(st.spares, c, ranges)
        for a, b in ranges:
            for d in range(a, b + 1):
                assert start + sum(inc for t, inc in steps if t <= d) == spare_need(st.spares, c, d), (c.label, d)
        assert all(t > lo for t, _ in steps)
