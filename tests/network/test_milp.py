"""The sizing MILP against independent oracles.

Oracles, never the code's own output:
  * the closed form `bill_of_materials(..., convention=physical)` (another module, another author),
    with prices built here by hand from the paper's per-port figures;
  * the published counts of railonly.md §2 (V1 Table 2 and the H100 cost spreadsheet);
  * brute force over the domain count with the closed form, for the optimizing objectives.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import pyomo.environ as pyo
import pytest

from designer.errors import InfeasibleDesign, SolverError, SpecError
from designer.network.api import frontier, load_network_study, solve_network
from designer.network.design import NetworkResult, design_to_system
from designer.network.milp import build_model, chosen, combo_figures, enumerate_combos, milp_counts
from designer.network.solve import run_highs
from designer.network.topology import ComponentPrices, bill_of_materials
from designer.spec.network_study import NetworkStudy, study_catalog

REPO = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).parent / "golden"

# railonly.md §2, V1 (HotNets 2023): $748 per switch port and $374 per transceiver; 17.6 W per port
# and 9.25 W per transceiver (inferred there). NICs are excluded by the paper (price 0 here); a DAC
# link end at $50 / 0.1 W only matters when DACs are chosen.
V1 = ComponentPrices(name="v1-by-hand", switch_port_usd=748.0, switch_port_w=17.6, transceiver_usd=374.0,
                     transceiver_w=9.25, dac_usd=50.0, dac_w=0.1, nic_usd=0.0, nic_w=0.0, source="railonly.md §2")

PAPER_CATALOG = "\n".join(
    ["switches:"]
    + [f"  - {{id: paper_r{r}, name: 'paper switch {r}x400G', modes: [{{radix: {r}, port_gbps: 400}}], "
       f"price_usd: {748 * r}, power_w: {17.6 * r:.1f}, source: 'railonly.md §2 V1 per-port figures x {r}'}}"
       for r in (32, 64, 128, 256)]
    + ["media:",
       "  - {id: paper_optic, kind: optic, gbps: 400, reach_m: 2000, price_usd: 374, power_w: 9.25, source: 'railonly.md §2 V1'}",
       "  - {id: paper_dac, kind: dac, gbps: 400, reach_m: 3, ends_per_module: 2, price_usd: 50, power_w: 0.1, source: test}",
       "platforms:",
       "  - {id: paper_node, gpu: h100_sxm, hb_domain_size: 8, price_usd: 258000, power_w: 10200, source: test}",
       "nics:",
       "  - {id: paper_nic, gbps: 400, price_usd: 0, power_w: 0, source: 'NICs excluded by the paper'}"]) + "\n"

PLATFORM_OF_K = {8: "hgx_h100_8", 72: "gb200_nvl72", 256: "gh200_nvl256"}


@pytest.fixture(scope="module")
def paper_catalog(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("cat") / "paper.yaml"
    path.write_text(PAPER_CATALOG)
    return str(path)


def study(cat: str, *, family="rail-optimized", k=8, radix=64, count=None, lo=None, hi=None, npg=(1,),
          dac=False, ratios=(3.0,), objective=None, budgets=None, hooks=(), solver=None, platforms=None,
          switches=None, multiple_of=None) -> NetworkStudy:
    gpus = {"count": count} if count is not None else {"min": lo, "max": hi}
    if multiple_of is not None:
        gpus["multiple_of"] = multiple_of
    data = {
        "catalog": {"extra_files": [cat]},
        "choices": {
            "platforms": platforms or [PLATFORM_OF_K[k]],
            "nics": [{"id": "paper_nic", "nics_per_gpu": list(npg)}],
            "switches": switches or [{"id": f"paper_r{radix}"}],
            "families": [family] if isinstance(family, str) else list(family),
            "oversubscription": list(ratios),
            "media": {"nic_links": "dac" if dac else "optic", "optic": "paper_optic", "dac": "paper_dac",
                      **({"nic_link_length_m": 2.0} if dac else {})},
        },
        "gpus": gpus,
        "objective": objective or {"kind": "min_cost"},
        "budgets": budgets or {},
        "hooks": list(hooks),
        "solver": solver or {},
    }
    return NetworkStudy.model_validate(data)


def solve_raw(st: NetworkStudy):
    """Build and solve, returning the MILP's own figures (not the closed-form extraction)."""
    cat = study_catalog(st)
    built = build_model(st, cat)
    out = run_highs(built.model, st.solver)
    assert out.status == "optimal", out
    combo, n_domains = chosen(built)
    return combo, n_domains, milp_counts(built, combo)


# ---------------------------------------------------------------------------------------------
# 1. Published counts (railonly.md §2)
# ---------------------------------------------------------------------------------------------

# V1 Table 2, K = 256: (N, R, fat-tree switches, transceivers, rail-only switches, transceivers, saving %).
TABLE2 = [
    (32768, 32, 7168, 262144, 3072, 131072, 54.55),
    (32768, 64, 2560, 196608, 1536, 131072, 37.50),
    (32768, 128, 1280, 196608, 256, 65536, 75.00),
    (32768, 256, 384, 131072, 128, 65536, 60.00),
    (65536, 64, 5120, 393216, 3072, 262144, 37.5),
]


@pytest.mark.parametrize("n,r,ft_sw,ft_tx,ro_sw,ro_tx,saving", TABLE2)
def test_railonly_table2(paper_catalog, n, r, ft_sw, ft_tx, ro_sw, ro_tx, saving):
    _, _, ft = solve_raw(study(paper_catalog, family="rail-optimized", k=256, radix=r, count=n))
    _, _, ro = solve_raw(study(paper_catalog, family="rail-only", k=256, radix=r, count=n))
    assert (ft["switch_count"], ft["transceiver_count"]) == (ft_sw, ft_tx)
    assert (ro["switch_count"], ro["transceiver_count"]) == (ro_sw, ro_tx)
    # cost = switches * R * $748 + transceivers * $374 (NICs are $0 here, as in the paper)
    assert ft["network_capex_usd"] == pytest.approx(ft_sw * r * 748 + ft_tx * 374)
    assert 100 * (1 - ro["network_capex_usd"] / ft["network_capex_usd"]) == pytest.approx(saving, abs=0.01)


def test_fat_tree_baseline_cost_v1(paper_catalog):
    # railonly.md §2: the N = 32,768, R = 64 baseline costs $196,083,712 at V1 prices
    # (2560 * 64 * 748 + 196608 * 374).
    _, _, got = solve_raw(study(paper_catalog, family="rail-optimized", k=256, radix=64, count=32768))
    assert got["network_capex_usd"] == pytest.approx(196_083_712)


@pytest.mark.parametrize("n,family,switches,tiers", [
    (512, "rail-only", 8, {1: 8}),  # one tier: 8 rails of 64 GPUs, one switch each
    (1024, "rail-only", 48, {1: 32, 2: 16}),  # 8 rails x (4 leaves + 2 spines)
    (2048, "rail-only", 96, {1: 64, 2: 32}),
    (4096, "rail-only", 192, {1: 128, 2: 64}),  # 8 x (16 + 8)
    (32768, "rail-optimized", 2560, {1: 1024, 2: 1024, 3: 512}),  # full k = 64 fat-tree
    (65536, "rail-optimized", 5120, {1: 2048, 2: 2048, 3: 1024}),
])
def test_published_64_port_counts(paper_catalog, n, family, switches, tiers):
    # railonly.md §2, "Published switch counts for 64-port 400G fabrics" (H100 cost spreadsheet).
    _, _, got = solve_raw(study(paper_catalog, family=family, k=8, radix=64, count=n))
    assert got["switch_count"] == switches
    assert got["switches_by_level"] == tiers


# ---------------------------------------------------------------------------------------------
# 2. MILP == closed form (physical convention) wherever both apply
# ---------------------------------------------------------------------------------------------

COUNTS = {8: (1024, 32768, 131072), 72: (1152, 32760, 131040), 256: (1024, 32768, 131072)}
CASES = [(fam, k, n, r) for fam in ("rail-optimized", "rail-only", "fat-tree", "oversubscribed")
         for k, ns in COUNTS.items() for n in ns for r in (32, 64, 128, 256)]


def _closed(family, n, k, r, **kw):
    return bill_of_materials(family, n, k, r, prices=V1, port_gbps=400.0, convention="physical",
                             oversubscription=kw.pop("oversubscription", 3.0 if family == "oversubscribed" else 1.0),
                             **kw)


def _compare(combo, got, bom):
    assert got["switches_by_level"] == {t.level: t.switches for t in bom.tiers}
    assert got["links_by_layer"][0] == bom.tiers[0].down_links
    for t in bom.tiers[:-1]:
        assert got["links_by_layer"][t.level] == t.up_links
    assert got["switch_count"] == bom.switch_count
    assert got["transceiver_count"] == bom.transceiver_count
    assert got["dac_count"] == bom.dac_count
    assert got["nic_count"] == bom.nic_count
    assert got["network_capex_usd"] == pytest.approx(bom.cost_usd, rel=1e-9)
    assert got["network_power_w"] == pytest.approx(bom.power_w, rel=1e-9)


@pytest.mark.parametrize("family,k,n,r", CASES)
def test_milp_equals_closed_form(paper_catalog, family, k, n, r):
    try:
        bom = _closed(family, n, k, r)
    except SpecError:
        # The closed form rejects it (e.g. oversubscribed with a single tier): so must the MILP.
        with pytest.raises((SpecError, InfeasibleDesign)):
            solve_network(study(paper_catalog, family=family, k=k, radix=r, count=n))
        return
    combo, n_domains, got = solve_raw(study(paper_catalog, family=family, k=k, radix=r, count=n))
    assert n_domains * k == n and combo.n_tiers == bom.n_tiers
    _compare(combo, got, bom)
    # The fast evaluator used for bound tightening is the same function again.
    fig = combo_figures(combo, n_domains)
    assert (fig["switch_count"], fig["transceiver_count"]) == (bom.switch_count, bom.transceiver_count)


@pytest.mark.parametrize("family,npg,dac,ratio", [
    ("rail-only", 2, True, 1.0), ("rail-optimized", 2, False, 1.0), ("fat-tree", 1, True, 1.0),
    ("oversubscribed", 1, True, 7.0), ("oversubscribed", 2, False, 1.5),
])
@pytest.mark.parametrize("n", [1024, 8192, 32768])
def test_milp_equals_closed_form_nics_media_ratio(paper_catalog, family, npg, dac, ratio, n):
    bom = _closed(family, n, 8, 64, nics_per_gpu=npg, dac_for_nic_links=dac, oversubscription=ratio)
    combo, _, got = solve_raw(study(paper_catalog, family=family, k=8, radix=64, count=n, npg=(npg,), dac=dac,
                                    ratios=(ratio,)))
    _compare(combo, got, bom)


def test_every_domain_count_in_a_range_matches(paper_catalog):
    # The ceiling rows must be exact at every D, not only at round numbers: for rail-optimized and
    # oversubscribed on 64 ports, walk D = 1..300 (through the 1 -> 2 -> 3 tier changes at
    # N = 64 and 2048) with the closed form as the oracle (combo_figures mirrors the MILP rows).
    for fam in ("rail-optimized", "oversubscribed", "rail-only", "fat-tree"):
        combos = enumerate_combos(study(paper_catalog, family=fam, k=8, radix=64, lo=8, hi=2400), 
                                  study_catalog(study(paper_catalog, family=fam, k=8, radix=64, lo=8, hi=2400)))
        for c in combos:
            for d in range(c.d_min, c.d_max + 1):
                try:
                    bom = c.bom(d)
                except SpecError:
                    continue
                fig = combo_figures(c, d)
                assert (fig["switch_count"], fig["transceiver_count"]) == (bom.switch_count, bom.transceiver_count), (c.label, d)


def test_ge_budget_cannot_inflate_counts(paper_catalog):
    # Exact (two-sided) ceilings: with "switch_count >= 50" and min cost, a one-sided model would add
    # phantom switches ($47,872 each) rather than real HB domains ($258,000 each). The exact model
    # must grow the cluster to the smallest D whose real switch count reaches 50.
    st = study(paper_catalog, family="rail-only", k=8, radix=64, lo=8, hi=8 * 600,
               budgets={"declared": [{"name": "sw", "metric": "switch_count", "sense": ">=", "rhs": 50}]})
    combo, n_domains, got = solve_raw(st)
    want = min(d for d in range(1, 601) if _closed("rail-only", 8 * d, 8, 64).switch_count >= 50)
    assert n_domains == want
    assert got["switch_count"] == _closed("rail-only", 8 * want, 8, 64).switch_count


# ---------------------------------------------------------------------------------------------
# 3. Objectives and the frontier
# ---------------------------------------------------------------------------------------------

H100_NODE_USD, H100_NODE_W = 258_000.0, 10_200.0  # catalog hgx_h100_8 (price and power per 8 GPUs)


def _capex(family, d, k=8, r=64, node_usd=H100_NODE_USD):
    return d * node_usd + _closed(family, d * k, k, r).cost_usd


def test_max_gpus_within_capex(paper_catalog):
    budget = 3.0e8
    st = study(paper_catalog, family="rail-optimized", lo=8, hi=8 * 2000, objective={"kind": "max_gpus"},
               budgets={"capex_usd": budget})
    res = solve_network(st)
    # Oracle: the largest D whose closed-form capex fits (capex is non-decreasing in D).
    want = max(d for d in range(1, 2001) if _capex("rail-optimized", d) <= budget)
    assert res.design.n_domains == want
    assert res.slacks["capex_usd"].slack == pytest.approx(budget - _capex("rail-optimized", want))


def test_max_flops_picks_the_platform(paper_catalog):
    # H100 nodes: 8 x 989 TF for $258k; B200 nodes: 8 x 2250 TF for $370k (catalog: 8 x $35k GPU + $90k non-GPU,
    # prices-and-layout.md §1b). The paper NIC costs $0, so the B200 node's included NICs change nothing.
    # Oracle: brute force.
    budget = 2.0e8
    st = study(paper_catalog, family="rail-only", platforms=["hgx_h100_8", "hgx_b200_8"], lo=8, hi=8 * 1000,
               objective={"kind": "max_flops"}, budgets={"capex_usd": budget})
    res = solve_network(st)
    best = max((d * 8 * tf, name) for name, usd, tf in (("hgx_h100_8", 258_000.0, 989.0), ("hgx_b200_8", 370_000.0, 2250.0))
               for d in range(1, 1001) if _capex("rail-only", d, node_usd=usd) <= budget)
    assert (res.design.platform, res.design.n_gpus * 989.0 if res.design.platform == "hgx_h100_8" else res.design.n_gpus * 2250.0) == (best[1], best[0])


def test_frontier_min_cost_per_gpu_level(paper_catalog):
    st = study(paper_catalog, family="rail-only", lo=8, hi=8 * 1000)
    designs = frontier(st, [1024, 2048, 4096], vary="n_gpus", optimize="min_cost")
    assert [d.n_gpus for d in designs] == [1024, 2048, 4096]
    for d in designs:
        assert d.capex_usd == pytest.approx(_capex("rail-only", d.n_gpus // 8))
    # Published switch counts again (railonly.md §2): 48, 96, 192.
    assert [d.bom.switch_count for d in designs] == [48, 96, 192]


def test_frontier_max_gpus_per_capex_level(paper_catalog):
    levels = [1.0e8, 2.0e8, 4.0e8]
    st = study(paper_catalog, family="rail-optimized", lo=8, hi=8 * 4000,
               objective={"kind": "frontier", "frontier": {"vary": "capex_usd", "levels": levels, "optimize": "max_gpus"}})
    res = solve_network(st)
    got = [d.n_domains for d in res.designs]
    want = [max(d for d in range(1, 4001) if _capex("rail-optimized", d) <= lvl) for lvl in levels]
    assert got == want and got == sorted(got)
    assert [d.level for d in res.designs] == levels


# ---------------------------------------------------------------------------------------------
# 4. Solver outcomes: infeasible budgets, time limit
# ---------------------------------------------------------------------------------------------


def test_infeasible_capex_message(paper_catalog):
    # 32768 H100s: 4096 nodes x $258,000 = $1.0568e9 before any network: a $1e9 cap is short by the
    # nodes' excess plus the whole network.
    st = study(paper_catalog, family="rail-optimized", count=32768, budgets={"capex_usd": 1.0e9})
    with pytest.raises(InfeasibleDesign) as err:
        solve_network(st)
    short = 4096 * 258_000 + _closed("rail-optimized", 32768, 8, 64).cost_usd - 1.0e9
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith("capex_usd budget <= 1.00e9 is short by ")
    assert f"{short:.2e}".replace("e+0", "e") in msg and msg.endswith("for 32768 GPUs")


def test_infeasible_names_the_binding_budget_among_several(paper_catalog):
    # Power: 4096 nodes x 10.2 kW = 41.8 MW before the network, so a 30 MW cap binds; capex is ample.
    st = study(paper_catalog, family="rail-only", count=32768, budgets={"capex_usd": 1e10, "power_w": 3.0e7})
    with pytest.raises(InfeasibleDesign, match=r"^power_w budget <= 3.00e7 is short by .* W for 32768 GPUs$"):
        solve_network(st)


def test_time_limit_returns_incumbent_with_gap(paper_catalog):
    """Forced with a hook: a market-split instance (Cornuejols & Dawande 1999: 5 rows of 40 binaries,
    coefficients 0..99) caps the domain count at 20000 minus the split's total deviation. Any x is a
    feasible incumbent, but the zero-deviation split (it exists by construction) is notoriously hard
    for branch and bound, so a 1 s limit stops with an incumbent and a positive gap."""
    rng = random.Random(1)
    m, n = 5, 40
    a = [[rng.randint(0, 99) for _ in range(n)] for _ in range(m)]
    x_star = [rng.randint(0, 1) for _ in range(n)]
    b = [sum(ai * xi for ai, xi in zip(row, x_star)) for row in a]

    def market_split(block, ctx):
        block.x = pyo.Var(range(n), domain=pyo.Binary)
        block.over = pyo.Var(range(m), domain=pyo.NonNegativeReals)
        block.under = pyo.Var(range(m), domain=pyo.NonNegativeReals)
        block.split = pyo.Constraint(range(m), rule=lambda bl, i: sum(a[i][j] * bl.x[j] for j in range(n))
                                     + bl.under[i] - bl.over[i] == b[i])
        block.cap = pyo.Constraint(expr=ctx.handles.n_domains <= 20000 - sum(block.over[i] + block.under[i] for i in range(m)))

    st = study(paper_catalog, family="rail-only", lo=8, hi=8 * 20000, objective={"kind": "max_gpus"},
               solver={"time_limit_s": 1.0, "rel_gap": 0.0})
    res = solve_network(st, hooks=[market_split])
    assert res.status == "incumbent"
    assert res.gap is not None and res.gap > 0
    assert 1 <= res.design.n_domains <= 20000


# ---------------------------------------------------------------------------------------------
# 5. Records, systems, the golden .lp, spec errors
# ---------------------------------------------------------------------------------------------


def test_design_records_and_system(paper_catalog):
    res = solve_network(study(paper_catalog, family="rail-optimized", count=32768))
    assert isinstance(res, NetworkResult) and res.status == "optimal"
    d = res.design
    assert d.capex_usd == pytest.approx(d.compute_capex_usd + d.network_capex_usd)
    assert d.compute_capex_usd == 4096 * H100_NODE_USD and d.power_w == pytest.approx(4096 * H100_NODE_W + d.network_power_w)
    assert d.scaleout_gbps_per_gpu == 400
    row = d.row()
    assert row["switches_leaf"] == 1024 and row["capex_usd"] == d.capex_usd and row["n_gpus"] == 32768
    assert all(isinstance(v, (int, float, str, bool, type(None))) for v in row.values())
    system = design_to_system(d, study_catalog(study(paper_catalog, count=32768)))
    assert system.n_gpus == 32768 and system.hb.size == 8 and len(system.tiers) == 3
    assert system.nic_bandwidth_per_gpu_bytes_per_s == pytest.approx(400e9 / 8)
    # Round trip through JSON, as the pipeline's manifest does.
    assert type(d).model_validate(d.model_dump(mode="json")) == d
    assert res.to_json()["designs"][0]["n_gpus"] == 32768


def test_golden_lp(paper_catalog, tmp_path):
    """Calliope-style: the written .lp of a tiny model must not drift. Regenerate deliberately with
    DESIGNER_REGEN_GOLDEN=1 after a reviewed formulation change."""
    import os

    from pyomo.repn.tests.lp_diff import lp_diff

    st = study(paper_catalog, family=["rail-only", "oversubscribed"], lo=8, hi=8 * 40, radix=32, platforms=["paper_node"],
               ratios=(3.0,), budgets={"capex_usd": 1.0e7,
                                       "declared": [{"name": "optics", "metric": "transceiver_count", "sense": "<=", "rhs": 900}]})
    built = build_model(st, study_catalog(st))
    out = tmp_path / "tiny.lp"
    built.model.write(str(out), io_options={"symbolic_solver_labels": True})
    golden = GOLDEN / "tiny_network.lp"
    if os.environ.get("DESIGNER_REGEN_GOLDEN"):
        golden.write_text(out.read_text())
    base, test = lp_diff(golden.read_text(), out.read_text())
    assert base == test


@pytest.mark.parametrize("patch,needle", [
    ({"budgets": {"capex_usd": -5}}, "field 'budgets.capex_usd' = -5"),
    ({"colour": "red"}, "field 'colour' = 'red': unknown key"),
    ({"gpus": {"count": 1000}}, "field 'gpus.count' = 1000: not a multiple of the HB domain of platform gb200_nvl72 (72)"),
    ({"choices": {"switches": [{"id": "qm9790", "radix": [63]}]}}, "field 'choices.switches.0.radix' = 63"),
    ({"choices": {"switches": [{"id": "nope"}]}}, "field 'choices.switches.0.id' = 'nope': not in the catalog; allowed: "),
    ({"choices": {"platforms": ["dgx_z"]}}, "field 'choices.platforms.0' = 'dgx_z': not in the catalog"),
    ({"budgets": {"declared": [{"name": "x", "metric": "bananas", "rhs": 1}]}}, "field 'budgets.declared.0.metric' = 'bananas'"),
])
def test_spec_errors_are_one_line(tmp_path, patch, needle):
    import yaml

    base = {"choices": {"platforms": ["gb200_nvl72"], "nics": [{"id": "cx7_400g"}], "switches": [{"id": "qm9790"}]},
            "gpus": {"count": 1152}}
    for key, value in patch.items():
        base[key] = {**base[key], **value} if isinstance(value, dict) and key in base else value
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(base))
    with pytest.raises(SpecError) as err:
        solve_network(load_network_study(path))
    assert "\n" not in str(err.value)
    assert needle in str(err.value)


def test_radix_a_family_cannot_use(tmp_path):
    # Every family is a folded Clos (R/2 ports down, R/2 up below the top), so an odd radix is unusable.
    cat = tmp_path / "odd.yaml"
    cat.write_text("switches:\n  - {id: odd_sw, modes: [{radix: 63, port_gbps: 400}], price_usd: 1, power_w: 1, source: t}\n")
    st = NetworkStudy.model_validate({
        "catalog": {"extra_files": [str(cat)]},
        "choices": {"platforms": ["hgx_h100_8"], "nics": [{"id": "cx7_400g"}], "switches": [{"id": "odd_sw", "radix": [63]}],
                    "families": ["rail-only"]},
        "gpus": {"count": 1024}})
    with pytest.raises(SpecError, match=r"^field 'choices.switches.0.radix' = 63: family rail-only cannot use it; allowed: an even radix"):
        solve_network(st)


def test_oversubscribed_single_tier_is_rejected():
    # 128 GPUs fit one 128-port switch: there is no tier boundary to oversubscribe.
    st = NetworkStudy.model_validate({
        "choices": {"platforms": ["hgx_h100_8"], "nics": [{"id": "cx7_400g"}], "switches": [{"id": "sn5600", "radix": [128]}],
                    "families": ["oversubscribed"]},
        "gpus": {"count": 128}})
    with pytest.raises(SpecError, match="family oversubscribed needs two or more tiers; radix 128"):
        solve_network(st)


def test_example_declarative_study_changes_the_answer():
    st = load_network_study(REPO / "studies" / "network_declarative_budget.yaml")
    with_budget = solve_network(st)
    without = solve_network(st.with_updates(budgets={"declared": []}))
    # railonly.md §2: 3 link layers x 2 ends = 6 optics per GPU for a 3-tier fabric, 4 for 2 tiers.
    assert without.design.bom.transceiver_count == 6 * 32768
    assert with_budget.design.bom.transceiver_count == 4 * 32768
    assert with_budget.slacks["optics"].slack == 150000 - 4 * 32768
    assert with_budget.design.capex_usd > without.design.capex_usd


# ---------------------------------------------------------------------------------------------
# gpus.multiple_of: D = (multiple_of / K) * integer
# ---------------------------------------------------------------------------------------------


def test_multiple_of_leaves_a_fixed_count_unchanged(paper_catalog):
    plain = solve_network(study(paper_catalog, family="rail-optimized", count=4608)).design
    stepped = solve_network(study(paper_catalog, family="rail-optimized", count=4608, multiple_of=576)).design
    assert stepped.n_gpus == plain.n_gpus == 4608
    assert stepped.capex_usd == pytest.approx(plain.capex_usd) == pytest.approx(_capex("rail-optimized", 576))


def test_max_gpus_under_capex_returns_a_multiple(paper_catalog):
    budget = 3.0e8
    st = study(paper_catalog, family="rail-optimized", lo=8, hi=8 * 2000, objective={"kind": "max_gpus"},
               budgets={"capex_usd": budget}, multiple_of=64)
    res = solve_network(st)
    free = max(d for d in range(1, 2001) if _capex("rail-optimized", d) <= budget)
    want = max(d for d in range(8, 2001, 8) if _capex("rail-optimized", d) <= budget)
    assert free % 8 and want < free  # the step binds: without it the optimum is not a multiple
    assert res.design.n_domains == want and res.design.n_gpus % 64 == 0
    assert res.design.capex_usd == pytest.approx(_capex("rail-optimized", want))


def test_frontier_over_capex_with_two_platforms_stays_on_the_grid(paper_catalog):
    levels = [2.0e8, 4.0e8, 8.0e8]
    st = study(paper_catalog, family="rail-optimized", platforms=["hgx_h100_8", "gb200_nvl72"], lo=576, hi=576 * 40,
               multiple_of=576,
               objective={"kind": "frontier", "frontier": {"vary": "capex_usd", "levels": levels, "optimize": "max_gpus"}})
    res = solve_network(st)
    assert len(res.designs) == 3
    for d, lvl in zip(res.designs, levels):
        assert d.n_gpus % 576 == 0 and d.capex_usd <= lvl
    assert [d.n_gpus for d in res.designs] == sorted(d.n_gpus for d in res.designs)


def test_multiple_of_must_fit_every_domain(paper_catalog):
    st = study(paper_catalog, family="rail-optimized", platforms=["hgx_h100_8", "gb200_nvl72"], lo=576, hi=5760,
               multiple_of=144 * 5, objective={"kind": "max_gpus"}, budgets={"capex_usd": 1e8})
    solve_network(st)  # 720 = 10 x 72 = 90 x 8: allowed
    bad = study(paper_catalog, family="rail-optimized", platforms=["hgx_h100_8", "gb200_nvl72"], lo=576, hi=5760,
                multiple_of=100, objective={"kind": "max_gpus"}, budgets={"capex_usd": 1e8})
    with pytest.raises(SpecError) as err:
        solve_network(bad)
    assert str(err.value) == ("field 'gpus.multiple_of' = 100: not a multiple of every chosen HB domain size [8, 72]; "
                              "allowed: multiples of 72")


def test_a_connectx8_does_not_meet_an_800gbe_switch_port():
    # ConnectX-8 runs Ethernet as 2 x 400GbE: 800GbE on one port is not supported
    # (prices-and-layout.md §2c), so it cannot fill the SN5600's 64 x 800G ports
    st = NetworkStudy.model_validate({
        "choices": {"platforms": ["hgx_b300_8"], "nics": [{"id": "cx8_800g"}], "switches": [{"id": "sn5600", "radix": [64]}],
                    "families": ["rail-optimized"]},
        "gpus": {"count": 1024}})
    with pytest.raises(SpecError, match=r"NIC cx8_800g runs Ethernet as 2 x 400G ports, not one 800G port as sn5600"):
        solve_network(st)


def test_the_two_ends_of_a_link_run_one_lane_rate(tmp_path):
    # an 800G NIC on 200G-PAM4 lanes and an 800G InfiniBand switch on 100G-PAM4 lanes: 200G-PAM4
    # optics cannot downshift to 100G (prices-and-layout.md §2a), so no link joins them
    cat = tmp_path / "lanes.yaml"
    cat.write_text("switches:\n  - {id: ib_800_l100, modes: [{radix: 64, port_gbps: 800}], fabric: infiniband, lane_gbps: 100,"
                   " price_usd: 1, power_w: 1, source: t}\n")
    st = NetworkStudy.model_validate({
        "catalog": {"extra_files": [str(cat)]},
        "choices": {"platforms": ["hgx_b300_8"], "nics": [{"id": "cx8_800g"}], "switches": [{"id": "ib_800_l100"}],
                    "families": ["rail-optimized"]},
        "gpus": {"count": 1024}})
    with pytest.raises(SpecError, match=r"NIC cx8_800g \(200G lanes\) and ib_800_l100 \(100G lanes\) run different lane rates"):
        solve_network(st)
