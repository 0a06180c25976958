"""The MILP's spare HB domains (study `spares` section) against the availability model."""

from __future__ import annotations

import pytest

from designer.analysis.failures import required_spares
from designer.errors import InfeasibleDesign
from designer.network.api import solve_network
from designer.spec.network_study import FailureRates, NetworkStudy

# railonly.md §2 v5 per-port prices as catalog entries; NICs at $0 as the paper excludes them.
CATALOG = "\n".join([
    "switches:",
    "  - {id: p64, name: p, modes: [{radix: 64, port_gbps: 400}], price_usd: 44416, power_w: 1126.4, source: 'v5 $694 x 64'}",
    "media:",
    "  - {id: p_optic, kind: optic, gbps: 400, reach_m: 100, price_usd: 199, power_w: 9.25, source: 'v5'}",
    "nics:",
    "  - {id: p_nic, gbps: 400, price_usd: 0, power_w: 0, source: 'excluded by the paper'}",
]) + "\n"
PLATFORM = {8: "hgx_h100_8", 256: "gh200_nvl256"}


@pytest.fixture(scope="module")
def cat(tmp_path_factory) -> str:
    p = tmp_path_factory.mktemp("cat") / "spares.yaml"
    p.write_text(CATALOG)
    return str(p)


def study(cat, families, k=8, *, gpus, objective=None, budgets=None, spares=True, confidence=0.999) -> NetworkStudy:
    data = {
        "catalog": {"extra_files": [cat]},
        "choices": {"platforms": [PLATFORM[k]], "nics": [{"id": "p_nic"}], "switches": [{"id": "p64"}],
                    "families": list(families), "media": {"nic_links": "optic", "optic": "p_optic"}},
        "gpus": gpus, "objective": objective or {"kind": "min_cost"}, "budgets": budgets or {},
    }
    if spares:
        data["spares"] = {"confidence": confidence}
    return NetworkStudy.model_validate(data)


@pytest.mark.parametrize("family,k,n", [("rail-only", 8, 1024), ("rail-optimized", 8, 4096), ("fat-tree", 8, 4096),
                                        ("rail-only", 256, 8192), ("rail-optimized", 256, 8192),
                                        ("oversubscribed", 8, 4096)])
def test_milp_spares_equal_the_availability_minimum(cat, family, k, n):
    d = solve_network(study(cat, [family], k, gpus={"count": n})).design
    want = required_spares(family, n // k, k, 64, FailureRates(), confidence=0.999, unit_gpus=8)
    assert d.job_gpus == n
    assert d.spare_domains == want.spare_domains > 0
    assert d.n_domains == want.built_domains
    # The cost is the built cluster's: platform and network of every domain, spares included.
    assert d.compute_capex_usd == pytest.approx(d.n_domains * {8: 258_000, 256: 11_520_000}[k])
    assert d.bom.n_gpus == d.n_gpus == d.n_domains * k


def test_without_spares_nothing_changes(cat):
    d = solve_network(study(cat, ["rail-only"], gpus={"count": 1024}, spares=False)).design
    assert d.spare_domains == 0 and d.job_gpus == d.n_gpus == 1024
    assert d.row()["spare_domains"] == 0


def test_a_binding_budget_changes_the_spare_choice(cat):
    fams = ("rail-only", "rail-optimized", "fat-tree")
    rng = {"min": 512, "max": 8192}
    big = solve_network(study(cat, fams, gpus=rng, objective={"kind": "max_gpus"}, budgets={"capex_usd": 200e6})).design
    small = solve_network(study(cat, fams, gpus=rng, objective={"kind": "max_gpus"}, budgets={"capex_usd": 50e6})).design
    for d, cap in ((big, 200e6), (small, 50e6)):
        assert d.capex_usd <= cap
        # One more job domain (with the spares it would need) would break the budget: it binds.
        assert d.capex_usd + d.capex_usd / d.n_domains > cap
        want = required_spares(d.family, d.job_domains, 8, 64, FailureRates(), confidence=0.999, unit_gpus=8)
        assert d.spare_domains >= want.spare_domains
    assert small.job_gpus < big.job_gpus and small.spare_domains < big.spare_domains
    # A budget on the spare count itself: rail-only needs 34 spares for 1,024 GPUs (the test above), so
    # capping spares at 20 moves the MILP to the fat-tree, whose leaves hold whole domains.
    capped = solve_network(study(cat, ("rail-only", "fat-tree"), gpus={"count": 1024}, budgets={
        "declared": [{"name": "spares", "metric": "spare_domains", "sense": "<=", "rhs": 20}]}))
    assert capped.design.family.value == "fat-tree" and capped.design.spare_domains <= 20
    assert "spares" in capped.slacks
    with pytest.raises(InfeasibleDesign):
        solve_network(study(cat, ("rail-only",), gpus={"count": 1024}, budgets={
            "declared": [{"name": "spares", "metric": "spare_domains", "sense": "<=", "rhs": 20}]}))


def test_multiple_of_applies_to_the_job(cat):
    d = solve_network(study(cat, ["rail-optimized"], gpus={"min": 512, "max": 8192, "multiple_of": 1024},
                            objective={"kind": "max_gpus"}, budgets={"capex_usd": 200e6})).design
    assert d.job_gpus % 1024 == 0 and d.spare_domains > 0 and d.capex_usd <= 200e6
    # One more 1,024-GPU step of job (with its spares) would break the budget.
    free = solve_network(study(cat, ["rail-optimized"], gpus={"min": 512, "max": 8192},
                               objective={"kind": "max_gpus"}, budgets={"capex_usd": 200e6})).design
    assert d.job_gpus == free.job_gpus // 1024 * 1024
