"""Declarative budgets: every metric binding and slack, slacks reported, infeasible budgets explained.

Set-up: one fixed choice (rail-only, an 8-GPU node at $258,000 / 10.2 kW, 64-port switches at the
paper's $748 and 17.6 W per port, $374 / 9.25 W optics; railonly.md §2), D = 1..600 domains. The oracle
is brute force over D with the closed form `bill_of_materials` (another module), never the MILP.
"""

from __future__ import annotations

import pytest

from designer.errors import InfeasibleDesign
from designer.network.api import solve_network
from designer.network.topology import ComponentPrices, bill_of_materials
from designer.spec.network_study import NetworkStudy

NODE_USD, NODE_W, K, R, D_MAX = 258_000.0, 10_200.0, 8, 64, 600
V1 = ComponentPrices(name="v1", switch_port_usd=748.0, switch_port_w=17.6, transceiver_usd=374.0, transceiver_w=9.25,
                     dac_usd=50.0, dac_w=0.1, nic_usd=0.0, nic_w=0.0, source="railonly.md §2")

CATALOG = """
switches:
  - {id: paper_r64, modes: [{radix: 64, port_gbps: 400}], price_usd: 47872, power_w: 1126.4, source: 'railonly.md §2 x 64'}
media:
  - {id: paper_optic, kind: optic, gbps: 400, reach_m: 100, price_usd: 374, power_w: 9.25, source: 'railonly.md §2'}
  - {id: paper_dac, kind: dac, gbps: 400, reach_m: 3, ends_per_module: 2, price_usd: 50, power_w: 0.1, source: test}
nics:
  - {id: paper_nic, gbps: 400, price_usd: 0, power_w: 0, source: 'NICs excluded by the paper'}
platforms:
  - {id: paper_node, gpu: h100_sxm, hb_domain_size: 8, price_usd: 258000, power_w: 10200, source: test}
"""


@pytest.fixture(scope="module")
def cat(tmp_path_factory) -> str:
    p = tmp_path_factory.mktemp("cat") / "paper.yaml"
    p.write_text(CATALOG)
    return str(p)


def study(cat, *, kind, declared=(), dac=False, npg=(1,), lo=1, hi=D_MAX) -> NetworkStudy:
    return NetworkStudy.model_validate({
        "catalog": {"extra_files": [cat]},
        "choices": {"platforms": ["paper_node"], "nics": [{"id": "paper_nic", "nics_per_gpu": list(npg)}],
                    "switches": [{"id": "paper_r64"}], "families": ["rail-only"],
                    "media": {"nic_links": "dac" if dac else "optic", "optic": "paper_optic", "dac": "paper_dac",
                              **({"nic_link_length_m": 2.0} if dac else {})}},
        "gpus": {"min": K * lo, "max": K * hi},
        "objective": {"kind": kind},
        "budgets": {"declared": list(declared)},
    })


def oracle(metric: str, d: int, dac: bool = False, npg: int = 1) -> float:
    """The metric at D domains, from the closed form plus the node's price and power."""
    b = bill_of_materials("rail-only", K * d, K, R, prices=V1, nics_per_gpu=npg, dac_for_nic_links=dac)
    return {
        "n_gpus": K * d, "n_domains": d, "switch_count": b.switch_count, "switch_port_count": b.switch_port_count,
        "transceiver_count": b.transceiver_count, "dac_count": b.dac_count, "nic_count": b.nic_count,
        "tiers": b.n_tiers, "capex_usd": NODE_USD * d + b.cost_usd, "compute_capex_usd": NODE_USD * d,
        "network_capex_usd": b.cost_usd, "capex_per_gpu_usd": (NODE_USD * d + b.cost_usd) / (K * d),
        "power_w": NODE_W * d + b.power_w, "network_power_w": b.power_w, "scaleout_gbps_per_gpu": 400.0 * npg,
    }[metric]


MONOTONE = ["n_gpus", "n_domains", "switch_count", "switch_port_count", "transceiver_count", "dac_count",
            "nic_count", "capex_usd", "compute_capex_usd", "network_capex_usd", "power_w", "network_power_w"]


@pytest.mark.parametrize("metric", MONOTONE)
@pytest.mark.parametrize("case", ["binding", "slack"])
def test_upper_budget(cat, metric, case):
    """metric <= rhs under max_gpus: the answer is the largest D the budget admits."""
    dac = metric == "dac_count"
    rhs = oracle(metric, 300, dac) if case == "binding" else 2 * oracle(metric, D_MAX, dac)
    res = solve_network(study(cat, kind="max_gpus", dac=dac,
                              declared=[{"name": "cap", "metric": metric, "sense": "<=", "rhs": rhs}]))
    want = max(d for d in range(1, D_MAX + 1) if oracle(metric, d, dac) <= rhs)
    assert res.design.n_domains == want
    s = res.slacks["cap"]
    assert s.value == pytest.approx(oracle(metric, want, dac)) and s.slack == pytest.approx(rhs - s.value)
    if case == "binding":
        assert want < D_MAX and oracle(metric, want + 1, dac) > rhs  # one more domain breaks it
    else:
        assert want == D_MAX and s.slack > 0 and not s.binding


@pytest.mark.parametrize("metric", MONOTONE)
@pytest.mark.parametrize("case", ["binding", "slack"])
def test_lower_budget(cat, metric, case):
    """metric >= rhs under min_cost: the answer is the smallest D that reaches it."""
    dac = metric == "dac_count"
    rhs = oracle(metric, 300, dac) if case == "binding" else oracle(metric, 1, dac) / 2
    res = solve_network(study(cat, kind="min_cost", dac=dac,
                              declared=[{"name": "floor", "metric": metric, "sense": ">=", "rhs": rhs}]))
    want = min(d for d in range(1, D_MAX + 1) if oracle(metric, d, dac) >= rhs)
    assert res.design.n_domains == want
    s = res.slacks["floor"]
    assert s.value == pytest.approx(oracle(metric, want, dac)) and s.slack == pytest.approx(s.value - rhs)
    if case == "binding":
        assert want > 1 and oracle(metric, want - 1, dac) < rhs
    else:
        assert want == 1 and s.slack > 0


@pytest.mark.parametrize("case,rhs,want", [
    ("binding", 1, 64),  # one tier holds a rail of at most R = 64 domains (railonly.md §2: n <= 2(R/2)^1)
    ("slack", 3, D_MAX),
])
def test_tiers_budget(cat, case, rhs, want):
    res = solve_network(study(cat, kind="max_gpus", declared=[{"name": "latency", "metric": "tiers", "sense": "<=", "rhs": rhs}]))
    assert res.design.n_domains == want
    assert res.slacks["latency"].slack == rhs - (1 if want <= 64 else 2)


@pytest.mark.parametrize("case,rhs,npg", [("binding", 800, 2), ("slack", 400, 1)])
def test_scaleout_budget(cat, case, rhs, npg):
    # Two NICs per GPU double the planes and so the network: min cost takes one unless 800 Gb/s is required.
    res = solve_network(study(cat, kind="min_cost", npg=(1, 2), lo=128, hi=128,
                              declared=[{"name": "bw", "metric": "scaleout_gbps_per_gpu", "sense": ">=", "rhs": rhs}]))
    assert res.design.nics_per_gpu == npg
    assert res.slacks["bw"].slack == 400 * npg - rhs


@pytest.mark.parametrize("case", ["binding", "slack"])
def test_capex_per_gpu_budget(cat, case):
    # Not monotone in D (a switch is bought whole), so the oracle scans every D.
    per_gpu = [oracle("capex_per_gpu_usd", d) for d in range(1, D_MAX + 1)]
    rhs = oracle("capex_per_gpu_usd", 64) if case == "binding" else 2 * max(per_gpu)
    res = solve_network(study(cat, kind="max_gpus",
                              declared=[{"name": "unit", "metric": "capex_per_gpu_usd", "sense": "<=", "rhs": rhs}]))
    want = max(d for d in range(1, D_MAX + 1) if per_gpu[d - 1] <= rhs * (1 + 1e-12))
    assert res.design.n_domains == want
    assert res.slacks["unit"].value == pytest.approx(per_gpu[want - 1])  # reported per GPU, not in total
    assert (want < D_MAX) == (case == "binding")


def test_several_budgets_each_get_a_slack(cat):
    budgets = [{"name": "optics", "metric": "transceiver_count", "sense": "<=", "rhs": 1e9},
               {"name": "racks", "metric": "n_domains", "sense": "<=", "rhs": 250}]
    res = solve_network(study(cat, kind="max_gpus", declared=budgets))
    assert res.design.n_domains == 250
    assert res.slacks["racks"].binding and res.slacks["racks"].slack == 0
    assert res.slacks["optics"].slack == pytest.approx(1e9 - oracle("transceiver_count", 250))


def test_infeasible_declared_budget_message(cat):
    # 300 domains fixed; optics <= 1000 while the design needs oracle(300) transceivers.
    need = oracle("transceiver_count", 300)
    st = study(cat, kind="min_cost", lo=300, hi=300,
               declared=[{"name": "optics", "metric": "transceiver_count", "sense": "<=", "rhs": 1000}])
    with pytest.raises(InfeasibleDesign) as err:
        solve_network(st)
    assert need == 2 * 2 * 2400  # two link layers (NIC-leaf, leaf-spine), an optic at both ends
    assert str(err.value) == f"optics budget <= 1000 is short by {need - 1000:.0f} transceivers for 2400 GPUs"


def test_infeasible_lower_budget_message(cat):
    st = study(cat, kind="min_cost", lo=1, hi=10,
               declared=[{"name": "big", "metric": "n_gpus", "sense": ">=", "rhs": 100}])
    # The most the range allows is 10 domains = 80 GPUs: missed by 20 GPUs.
    with pytest.raises(InfeasibleDesign, match=r"^big budget >= 100 is missed by 20 GPUs for 80 GPUs$"):
        solve_network(st)


def test_the_message_names_the_budget_short_by_the_larger_share_with_a_per_gpu_budget(cat):
    # 300 domains fixed: the total capex budget is 2.7 % short of what they cost, the per-GPU one
    # 0.27 %. A per-GPU row's shortfall is a total (100 USD x 2400 GPUs), measured against the
    # total it allows, so the total budget, the one short by the larger share, is named first.
    cap = oracle("capex_usd", 300)
    per = oracle("capex_per_gpu_usd", 300)
    st = study(cat, kind="min_cost", lo=300, hi=300,
               declared=[{"name": "total", "metric": "capex_usd", "sense": "<=", "rhs": cap * 0.973},
                         {"name": "unit", "metric": "capex_per_gpu_usd", "sense": "<=", "rhs": per * 0.9973}])
    with pytest.raises(InfeasibleDesign) as err:
        solve_network(st)
    assert str(err.value).startswith("total budget <= ") and "also short: unit by" in str(err.value)
