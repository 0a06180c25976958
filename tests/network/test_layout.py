"""Cable lengths from the floor, the medium of every link layer, and how both enter the MILP.

Oracles, never the code's own output:
  * floors laid out by hand here (rack by rack, with the length model of prices-and-layout.md §3:
    L = 5 m + 0.6 m x racks along the row + 4.27 m x rows crossed) and the reference's worked
    examples (36 racks ~13 m, 64 racks ~18 m, 128 racks ~27 m with the switch mid-floor);
  * a networkx grid of the floor's positions, shortest paths = Manhattan distances;
  * bills of materials and capex derived by hand from the closed-form relations (railonly.md §2)
    and the test catalog's prices written below;
  * brute force over the domain count with those hand formulas, for the MILP's answers.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from designer.errors import SpecError
from designer.network.api import solve_network
from designer.network.layout import (
    MediumOption,
    cheapest_reaching,
    eligible,
    layer_lengths,
    layer_worst_m,
    link_lane_gbps,
    rack_plan,
)
from designer.network.milp import enumerate_combos, media_at
from designer.spec.catalog import Platform
from designer.spec.network_study import FloorLayout, NetworkStudy, study_catalog

SLACK, WIDTH, PITCH = 5.0, 0.6, 4.27  # prices-and-layout.md §3 (B.18's cable length model)

# A test catalog: an NVL72-like rack (72 GPUs, 4 per host, 120 kW: one liquid rack, §1a), an 8-GPU
# H100 node at 10.2 kW, a 400G NIC, 128- and 64-port 400G switches, and media priced far below the
# shipped ones (which stay in the merged catalog) so they are the cheapest wherever they reach:
# DAC 3 m $1 per cable (NVIDIA's splitter DACs reach 3 m, §2a), AOC 20 m $5 per cable, SR 50 m $10 per end, DR 500 m $15 per end.
CATALOG = """
platforms:
  - {id: t_nvl72, gpu: gb200, hb_domain_size: 72, gpus_per_host: 4, price_usd: 3000000, power_w: 120000, source: test}
  - {id: t_node, gpu: h100_sxm, hb_domain_size: 8, price_usd: 250000, power_w: 10200, source: test}
  - {id: t_big, gpu: gh200, hb_domain_size: 256, gpus_per_host: 1, price_usd: 1.0e7, power_w: 480000, source: test}
nics:
  - {id: t_nic, gbps: 400, price_usd: 1000, power_w: 20, source: test}
switches:
  - {id: t_sw128, modes: [{radix: 128, port_gbps: 400}], price_usd: 128000, power_w: 1280, source: test}
  - {id: t_sw64, modes: [{radix: 64, port_gbps: 400}], price_usd: 64000, power_w: 640, source: test}
media:
  - {id: t_dac, kind: dac, gbps: 400, reach_m: 3, ends_per_module: 2, price_usd: 1, power_w: 0.1, source: test}
  - {id: t_aoc, kind: aoc, gbps: 400, reach_m: 20, ends_per_module: 2, price_usd: 5, power_w: 10, source: test}
  - {id: t_sr, kind: optic, gbps: 400, reach_m: 50, price_usd: 10, power_w: 8, source: test}
  - {id: t_dr, kind: optic, gbps: 400, reach_m: 500, price_usd: 15, power_w: 9, source: test}
"""
SW128, SW64, NIC, NVL72, NODE = 128_000.0, 64_000.0, 1000.0, 3_000_000.0, 250_000.0
PER_LINK = {"t_dac": 1.0, "t_aoc": 5.0, "t_sr": 20.0, "t_dr": 30.0}  # cables whole, optics at both ends
REACH = {"t_dac": 3.0, "t_aoc": 20.0, "t_sr": 50.0, "t_dr": 500.0}


@pytest.fixture(scope="module")
def cat(tmp_path_factory) -> str:
    p = tmp_path_factory.mktemp("cat") / "layout.yaml"
    p.write_text(CATALOG)
    return str(p)


def study(cat, *, platform="t_nvl72", switch="t_sw128", family="rail-only", gpus, layout=None, media=None,
          objective=None, budgets=None) -> NetworkStudy:
    return NetworkStudy.model_validate({
        "catalog": {"extra_files": [cat]},
        "choices": {"platforms": [platform], "nics": [{"id": "t_nic"}], "switches": [{"id": switch}],
                    # the test AOC is offered on request, as every AOC (milp.OPT_IN_MEDIA_KINDS)
                    "families": [family], "media": {"allow": ["t_aoc"], **(media or {})}, "layout": layout or {}},
        "gpus": gpus, "objective": objective or {"kind": "min_cost"}, "budgets": budgets or {}})


def cheapest_by_hand(length_m: float, allowed=("t_dac", "t_aoc", "t_sr", "t_dr")) -> str:
    """The cheapest test medium reaching 1.1 x length (prices above)."""
    return min((m for m in allowed if REACH[m] >= 1.1 * length_m - 1e-9), key=PER_LINK.get)


# ---------------------------------------------------------------------------------------------
# 1. Lengths on floors laid out by hand
# ---------------------------------------------------------------------------------------------


def floor_4x16_end_of_row_by_hand() -> dict[tuple[int, int], float]:
    """4 rows x 16 racks, one switch for all of them at the end of row 1 (the middle row of four,
    rounded down): rack (row r, slot s) is 16 - s racks along and |r - 1| rows away."""
    return {(r, s): SLACK + WIDTH * (16 - s) + PITCH * abs(r - 1) for r in range(4) for s in range(16)}


def test_one_switch_at_the_end_of_the_middle_row_of_4x16():
    lay = FloorLayout(racks_per_row=16, leaf_placement="end_of_row")
    want = floor_4x16_end_of_row_by_hand()
    # 72 NIC links per rack (an NVL72 rack on a rail-only one-tier fabric: one per rail)
    (nic,) = layer_lengths(lay, rack_links=[72] * 64, leaf_span_racks=64)
    by_hand: dict[float, int] = {}
    for L in want.values():
        by_hand[round(L, 3)] = by_hand.get(round(L, 3), 0) + 72
    assert dict(nic) == pytest.approx(by_hand) and sum(n for _, n in nic) == 64 * 72
    # worst: row 3, slot 0: 5 + 0.6 x 16 + 4.27 x 2 = 23.14 m
    assert max(want.values()) == pytest.approx(23.14)
    assert layer_worst_m(lay, n_racks=64, leaf_span_racks=64, n_layers=1) == (pytest.approx(23.14),)


def test_lengths_are_manhattan_paths_on_a_networkx_grid_of_the_floor():
    # Positions: x in rack pitches (0..16, the switch rack at x = 16 closing the row), y in rows; the
    # grid's edges weigh one pitch each way, so shortest paths are Manhattan distances.
    g = nx.grid_2d_graph(17, 4)
    for a, b in g.edges:
        g.edges[a, b]["m"] = WIDTH if a[1] == b[1] else PITCH
    dist = nx.single_source_dijkstra_path_length(g, (16, 1), weight="m")
    lay = FloorLayout(racks_per_row=16, leaf_placement="end_of_row")
    (nic,) = layer_lengths(lay, rack_links=[1] * 64, leaf_span_racks=64)
    graph = sorted(round(SLACK + dist[(s, r)], 3) for r in range(4) for s in range(16))
    assert [L for L, n in nic for _ in range(n)] == pytest.approx(graph)


@pytest.mark.parametrize("placement,worst", [
    # leaves of 8-rack groups (two per row), each at the end of its own row: slot 0 is 16 pitches away
    ("end_of_row", SLACK + WIDTH * 16),
    # a leaf rack mid-row takes slot 8, the compute racks after it move one on: 8 pitches either side
    ("middle_of_row", SLACK + WIDTH * 8),
    # in the group's middle rack (its 4th of 8): the farthest, the 8th, is 4 pitches away
    ("in_rack", SLACK + WIDTH * 4),
])
def test_leaf_groups_of_eight_racks_on_4x16(placement, worst):
    lay = FloorLayout(racks_per_row=16, leaf_placement=placement)
    (nic,) = layer_lengths(lay, rack_links=[32] * 64, leaf_span_racks=8)
    assert max(L for L, _ in nic) == pytest.approx(worst)
    if placement == "in_rack":
        # one rack in eight holds its group's leaves: 8 of 64 racks' links are in-rack (1.5 m)
        assert dict(nic)[1.5] == 8 * 32
    if placement == "middle_of_row":
        # per row, pitches 8,7,...,1 then 1,...,8: every distance twice, 4 rows, 32 links a rack
        assert dict(nic) == pytest.approx({round(SLACK + WIDTH * k, 3): 2 * 4 * 32 for k in range(1, 9)})


@pytest.mark.parametrize("n_racks,per_row,published_m,by_hand_m", [
    # prices-and-layout.md §3 worked examples, switch mid-floor: (racks, racks per row, ~figure)
    (36, 12, 13, SLACK + WIDTH * 6 + PITCH * 1),
    (64, 16, 18, SLACK + WIDTH * 8 + PITCH * 2),
    (128, 16, 27, SLACK + WIDTH * 8 + PITCH * 4),
])
def test_reference_worked_examples_with_a_central_switch(n_racks, per_row, published_m, by_hand_m):
    lay = FloorLayout(racks_per_row=per_row, leaf_placement="central")
    (worst,) = layer_worst_m(lay, n_racks=n_racks, leaf_span_racks=n_racks, n_layers=1)
    assert worst == pytest.approx(by_hand_m)
    assert worst == pytest.approx(published_m, abs=0.5)


def test_upper_layers_run_to_the_network_area():
    # 4 x 16 racks, leaf groups of 8 at the ends of their rows; 24 upper switches, 12 per network
    # rack: an area of 2 racks in one row, centred on the middle row (1) at x = 8.
    lay = FloorLayout(racks_per_row=16, leaf_placement="end_of_row", spine_placement="central")
    nic, ls, sc = layer_lengths(lay, rack_links=[32] * 64, leaf_span_racks=8, upper_links=[2048, 1024],
                                upper_switches=24)
    # leaf-spine: from x = 16 to the area's far rack: 8 + (2 - 1) / 2 pitches along, |row - 1| rows
    # (rows 0 and 2 are both one row away): 512 uplinks a row
    want = {round(SLACK + WIDTH * 8.5 + PITCH * k, 3): n for k, n in ((0, 512), (1, 1024), (2, 512))}
    assert dict(ls) == pytest.approx(want)
    # spine-core: across the area, 1 pitch
    assert sc == ((round(SLACK + WIDTH * 1, 3), 1024),)
    assert layer_worst_m(lay, n_racks=64, leaf_span_racks=8, n_layers=3, upper_switches=24) == pytest.approx(
        (SLACK + WIDTH * 16, SLACK + WIDTH * 8.5 + PITCH * 2, SLACK + WIDTH * 1))


@settings(max_examples=150, deadline=None)
@given(n=st.integers(1, 400), span=st.integers(1, 80), per_row=st.integers(1, 24),
       leaf=st.sampled_from(["in_rack", "middle_of_row", "end_of_row", "central"]),
       spine=st.sampled_from(["central", "end_of_hall"]), upper=st.integers(0, 300))
def test_the_fast_worst_is_the_longest_of_every_link(n, span, per_row, leaf, spine, upper):
    lay = FloorLayout(racks_per_row=per_row, leaf_placement=leaf, spine_placement=spine)
    dists = layer_lengths(lay, rack_links=[3] * n, leaf_span_racks=span, upper_links=[3 * n, n], upper_switches=upper)
    fast = layer_worst_m(lay, n_racks=n, leaf_span_racks=span, n_layers=3, upper_switches=upper)
    assert fast == tuple(max(L for L, _ in d) for d in dists)


# ---------------------------------------------------------------------------------------------
# 2. Media: reach, lane rate, cheapest
# ---------------------------------------------------------------------------------------------


def test_cheapest_medium_reaching_margin_times_the_length():
    opts = [MediumOption(m, k, REACH[m], PER_LINK[m], 1.0) for m, k in
            (("t_dac", "dac"), ("t_aoc", "aoc"), ("t_sr", "optic"), ("t_dr", "optic"))]
    for L in (1.5, 2.72, 2.73, 18.18, 18.19, 45.45, 45.46, 454.0, 455.0):
        want = cheapest_by_hand(L) if 1.1 * L <= 500 else None
        got = cheapest_reaching(opts, L, 1.1)
        assert (got.id if got else None) == want, L


def test_no_passive_dac_at_200g_per_lane_and_lanes_must_match():
    dac = SimpleNamespace(id="d", kind="dac", gbps=800, lane_gbps=None)
    lacc = SimpleNamespace(id="a", kind="copper_active", gbps=800, lane_gbps=200)
    optic100 = SimpleNamespace(id="o", kind="optic", gbps=800, lane_gbps=100)
    # an 800G XDR port is 4 x 200G (prices-and-layout.md §2a): no DAC, no 100G-lane module
    lane = link_lane_gbps(800, None, None)
    assert lane == 200
    assert not eligible(dac, port_gbps=800, lane_gbps=lane)
    assert eligible(lacc, port_gbps=800, lane_gbps=lane)
    assert not eligible(optic100, port_gbps=800, lane_gbps=lane)
    # at 400G NDR (4 x 100G) the DAC is fine, the 200G-lane LACC is not
    assert link_lane_gbps(400, None, None) == 100
    assert eligible(dac, port_gbps=400, lane_gbps=100) and not eligible(lacc, port_gbps=400, lane_gbps=100)
    # a stated lane rate wins over the port's 4-lane default
    assert link_lane_gbps(800, 100.0, None) == 100


# ---------------------------------------------------------------------------------------------
# 3. Racks per platform
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("k,host,power_w,cooling,gpus", [
    (8, 8, 10_200, None, 32),  # DGX H100: 4 per air-cooled rack (NVIDIA SuperPOD H100 RA, §3)
    (8, 8, 14_300, None, 16),  # DGX B200: 2 per rack (the B200 RA's rack "exceeds 25 kW", §3)
    (72, 4, 120_000, None, 72),  # GB200 NVL72: the rack is the HB domain (§3)
    (72, 4, 142_000, None, 72),  # GB300 NVL72 at 142 kW: still one rack
    (8, 8, 14_300, "liquid", 72),  # liquid-cooled B200 hosts: floor(142 / 14.3) = 9 per rack
])
def test_gpus_per_rack_from_the_platform(k, host, power_w, cooling, gpus):
    plan = rack_plan(FloorLayout(cooling=cooling), hb_domain_size=k, host_gpus=host, domain_power_w=power_w)
    assert plan.gpus_per_rack == gpus


def test_a_multi_rack_domain_fills_whole_racks():
    # 256 GPUs at 480 kW (a GH200 NVL256-like domain) under 142 kW liquid racks: ceil(480/142) = 4 racks
    plan = rack_plan(FloorLayout(), hb_domain_size=256, host_gpus=1, domain_power_w=480_000)
    assert (plan.racks_per_domain, plan.gpus_per_rack, plan.racks(3)) == (4, 64, 12)


# ---------------------------------------------------------------------------------------------
# 4. Designs: optics where the floor needs them, copper where it does not
# ---------------------------------------------------------------------------------------------


def one_tier_rail_only_by_hand(d: int, medium: str) -> float:
    """Capex of rail-only NVL72 racks on 128-port switches, one tier (D <= 128): 72 rails of D
    endpoints, floor(128 / D) rails per switch; 72 D NIC links, one NIC per GPU (railonly.md §2)."""
    switches = math.ceil(72 / (128 // d))
    return d * NVL72 + switches * SW128 + 72 * d * PER_LINK[medium] + 72 * d * NIC


@pytest.mark.parametrize("racks,worst", [(64, SLACK + WIDTH * 16 + PITCH * 2), (128, SLACK + WIDTH * 16 + PITCH * 4)])
def test_one_tier_rail_only_over_64_to_128_racks_gets_optics_not_dac(cat, racks, worst):
    # rows of 16, as the reference's worked example (prices-and-layout.md B.18: 64 racks as 4 rows of 16)
    st = study(cat, gpus={"count": 72 * racks}, layout={"leaf_placement": "end_of_row", "racks_per_row": 16},
               media={"optic": "t_sr", "dac": "t_dac"})
    d = solve_network(st).design
    assert d.n_tiers == 1 and d.layout.n_racks == racks and d.layout.n_rows == racks // 16
    assert d.link_worst_m == (pytest.approx(worst),)
    # every NIC link is 23-32 m: an SR optic at both ends, no DAC
    assert d.link_media == ("t_sr",) and d.bom.dac_count == 0 and d.bom.transceiver_count == 2 * 72 * racks
    assert d.capex_usd == pytest.approx(one_tier_rail_only_by_hand(racks, "t_sr"), rel=1e-12)
    # The earlier fixed 2 m NIC link would have priced these as DACs:
    old = study(cat, gpus={"count": 72 * racks}, media={"optic": "t_sr", "dac": "t_dac", "nic_link_length_m": 2.0})
    before = solve_network(old).design
    assert before.link_media == ("t_dac",) and before.bom.dac_count == 72 * racks
    assert d.capex_usd - before.capex_usd == pytest.approx(72 * racks * (PER_LINK["t_sr"] - PER_LINK["t_dac"]))


def test_an_in_rack_leaf_of_one_rack_gets_dac(cat):
    # One NVL72 rack, its rail switches in the rack: 72 links of 1.5 m, x 1.1 = 1.65 m <= the DAC's 3 m.
    d = solve_network(study(cat, gpus={"count": 72}, layout={"leaf_placement": "in_rack"})).design
    assert d.link_media == ("t_dac",) and d.link_worst_m == (1.5,)
    assert d.bom.dac_count == 72 and d.bom.transceiver_count == 0 and d.dac_for_nic_links
    # the same rack with its switch at the end of the row: 5 + 0.6 = 5.6 m, an AOC (20 m)
    d = solve_network(study(cat, gpus={"count": 72}, layout={"leaf_placement": "end_of_row"})).design
    assert d.link_media == ("t_aoc",) and d.link_worst_m == (pytest.approx(5.6),)
    assert d.bom.dac_count == 0 and d.bom.transceiver_count == 2 * 72  # an AOC has an optic at each end


def test_a_two_tier_design_prices_each_layer_by_its_own_medium(cat):
    # 2,048 H100 (256 nodes, 4 per rack: 64 racks = 4 x 16) rail-optimized on 64-port switches:
    # h = 32, 8 rails x 8 leaves of 32 domains = 8 racks each (two groups a row); spines 2048 / 64 = 32.
    d = solve_network(study(cat, platform="t_node", switch="t_sw64", family="rail-optimized",
                            gpus={"count": 2048})).design
    assert d.bom.switch_count == 64 + 32 and d.layout.leaf_span_racks == 8
    # NIC-leaf: leaves at the end of their row, slot 0 is 16 pitches away: 14.6 m -> AOC (20 m).
    # Leaf-spine: 32 spines in 3 network racks (12 each) in one row centred on row 1, x = 8:
    # from x = 16: 8 + (3 - 1) / 2 = 9 pitches, 2 rows: 5 + 5.4 + 8.54 = 18.94 m -> 20.8 m > 20: SR.
    assert d.link_worst_m == pytest.approx((SLACK + WIDTH * 16, SLACK + WIDTH * 9 + PITCH * 2))
    assert d.link_media == ("t_aoc", "t_sr")
    want = 256 * NODE + 96 * SW64 + 2048 * PER_LINK["t_aoc"] + 2048 * PER_LINK["t_sr"] + 2048 * NIC
    assert d.capex_usd == pytest.approx(want, rel=1e-12)
    assert d.bom.transceiver_count == 2 * 2048 + 2 * 2048 and d.bom.dac_count == 0
    assert dict(d.media_modules) == {"t_aoc": 2048, "t_sr": 4096}


def test_max_gpus_under_capex_matches_brute_force_across_a_media_step(cat):
    # Rail-only NVL72 on 128 ports, end of row: up to 16 racks (one row) the worst link is
    # 5 + 0.6 D <= 14.6 m -> AOC; from 17 racks a second row: 5 + 9.6 + 4.27 = 18.87 m -> SR.
    def worst(d):
        rows = -(-d // 16)
        if rows == 1:
            return SLACK + WIDTH * d
        return SLACK + WIDTH * 16 + PITCH * (rows - 1 - (rows - 1) // 2)

    for budget in (4.0e7, 5.5e7, 1.5e8):
        st = study(cat, gpus={"min": 72, "max": 72 * 128}, objective={"kind": "max_gpus"},
                   budgets={"capex_usd": budget}, layout={"racks_per_row": 16})
        got = solve_network(st).design
        want = max(d for d in range(1, 129) if one_tier_rail_only_by_hand(d, cheapest_by_hand(worst(d))) <= budget)
        assert got.n_domains == want, budget
        assert got.link_media == (cheapest_by_hand(worst(want)),)
        assert got.capex_usd == pytest.approx(one_tier_rail_only_by_hand(want, got.link_media[0]), rel=1e-12)


def test_blocks_hold_the_layout_medium_at_every_domain_count(cat):
    # The media step function is exact: walk every D of every block (one- and two-tier, two platforms).
    for kw in ({"gpus": {"min": 72, "max": 72 * 300}},
               {"platform": "t_node", "switch": "t_sw64", "family": "rail-optimized", "gpus": {"min": 8, "max": 8 * 3000}},
               {"platform": "t_node", "switch": "t_sw64", "family": "fat-tree", "gpus": {"min": 8, "max": 8 * 1500},
                "layout": {"leaf_placement": "central", "spine_placement": "end_of_hall"}}):
        st = study(cat, **kw)
        combos = enumerate_combos(st, study_catalog(st))
        assert len({c.link_media for c in combos}) > 1  # the media do change over the range
        for c in combos:
            last = None
            for d in range(c.d_min, c.d_max + 1):
                media, worst = media_at(c, d)
                assert media == c.link_media, (c.label, d)
                assert last is None or all(a <= b for a, b in zip(last, worst)), (c.label, d)  # monotone
                last = worst
        # one family, platform and switch: the blocks tile the range, each D in exactly one
        covered = sorted(d for c in combos for d in range(c.d_min, c.d_max + 1))
        assert covered == list(range(covered[0], covered[-1] + 1))


# ---------------------------------------------------------------------------------------------
# 5. Bad input: one line naming the field
# ---------------------------------------------------------------------------------------------


def test_a_link_no_medium_reaches_names_its_length_and_the_longest_medium(cat):
    # 2,000 NVL72 racks (125 rows of 16) on 128-port switches, two tiers of rail-only, SR optics only
    # (50 m): the NIC links (23 m) fit, the leaf-spine links across 62 rows (~270 m) do not.
    st = study(cat, gpus={"count": 72 * 2000}, media={"nic_links": "optic", "optic": "t_sr"})
    with pytest.raises(SpecError) as err:
        solve_network(st)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("field 'choices.layout': no combination can build 144000..144000 GPUs")
    assert "the longest 400G medium allowed is t_sr (50 m)" in msg and " m (x1.1 length margin)" in msg


@pytest.mark.parametrize("layout,needle", [
    ({"rack_depth_m": 5.0}, "rack_depth_m 5 is not less than row_pitch_m 4.27"),
    ({"racks_per_row": 0}, "field 'choices.layout.racks_per_row' = 0"),
    ({"rack_width_m": -1}, "field 'choices.layout.rack_width_m' = -1"),
    ({"leaf_placement": "on_the_roof"}, "field 'choices.layout.leaf_placement' = 'on_the_roof'"),
    ({"length_margin": 0.9}, "field 'choices.layout.length_margin' = 0.9"),
])
def test_a_nonsensical_floor_is_one_line(cat, layout, needle, tmp_path):
    import yaml

    from designer.network.api import load_network_study

    p = tmp_path / "bad.yaml"
    p.write_text(yaml.safe_dump({"catalog": {"extra_files": [cat]},
                                 "choices": {"platforms": ["t_nvl72"], "nics": [{"id": "t_nic"}],
                                             "switches": [{"id": "t_sw128"}], "layout": layout},
                                 "gpus": {"count": 72}}))
    with pytest.raises(SpecError) as err:
        load_network_study(p)
    assert "\n" not in str(err.value) and needle in str(err.value)


def test_an_hb_domain_longer_than_its_row_is_one_line(cat):
    # 256 GPUs at 480 kW fill 4 liquid racks: a row of 2 cannot hold the domain.
    st = study(cat, platform="t_big", switch="t_sw128", gpus={"count": 512}, layout={"racks_per_row": 2})
    with pytest.raises(SpecError) as err:
        solve_network(st)
    assert str(err.value) == ("field 'choices.layout.racks_per_row' = 2: an HB domain of platform t_big fills 4 racks, "
                              "longer than the row; allowed: >= 4")


def test_gpus_per_rack_must_hold_whole_hosts(cat):
    st = study(cat, platform="t_nvl72", gpus={"count": 72}, layout={"gpus_per_rack": 6})
    with pytest.raises(SpecError, match=r"^field 'choices.layout.gpus_per_rack' = 6: splits a 4-GPU host"):
        solve_network(st)


# ---------------------------------------------------------------------------------------------
# 6. Platforms whose price includes the NICs
# ---------------------------------------------------------------------------------------------


@pytest.mark.skipif("includes_nics" not in Platform.model_fields, reason="catalog without includes_nics")
def test_included_nics_are_not_priced_or_powered_again(tmp_path, cat):
    extra = tmp_path / "nics.yaml"
    extra.write_text("platforms:\n  - {id: t_nvl72_nics, gpu: gb200, hb_domain_size: 72, gpus_per_host: 4, "
                     "price_usd: 3072000, power_w: 121440, includes_nics: true, included_nic: t_nic, source: test}\n")

    def design(platform):
        st = NetworkStudy.model_validate({
            "catalog": {"extra_files": [cat, str(extra)]},
            "choices": {"platforms": [platform], "nics": [{"id": "t_nic"}], "switches": [{"id": "t_sw128"}],
                        "families": ["rail-only"]},
            "gpus": {"count": 72 * 64}})
        return solve_network(st).design

    plain, inc = design("t_nvl72"), design("t_nvl72_nics")
    # The including rack costs $72,000 (72 x $1,000) and 1,440 W (72 x 20 W) more; the network the
    # same amount less, so the totals agree and no NIC is counted twice.
    assert inc.nic_capex_usd == 0 and plain.nic_capex_usd == 64 * 72 * NIC
    assert inc.capex_usd == pytest.approx(plain.capex_usd, rel=1e-12)
    assert inc.power_w == pytest.approx(plain.power_w, rel=1e-12)
    assert inc.bom.nic_count == plain.bom.nic_count == 64 * 72 and inc.priced_nic_count == 0


def test_a_rack_run_on_64_of_its_72_gpus_costs_the_whole_rack_and_wires_the_64():
    # gb200_nvl72_64 (the catalog's): 2,304 GPUs in use are 36 racks where all 72 would be 32; each rack
    # costs $3.2M either way, so the compute is 36 x $3.2M against 32 x $3.2M, and both networks are
    # rail-only planes of the same 2,304 endpoints with no NIC bought (each GPU in use has its own NIC in
    # its compute tray, which the rack's price includes)
    def design(platform):
        st = NetworkStudy.model_validate({
            "choices": {"platforms": [platform], "nics": [{"id": "cx7_400g"}], "switches": [{"id": "qm9790"}],
                        "families": ["rail-only"]},
            "gpus": {"count": 2304}})
        return solve_network(st).design

    full, part = design("gb200_nvl72"), design("gb200_nvl72_64")
    assert (full.n_domains, full.hb_domain_size) == (32, 72) and (part.n_domains, part.hb_domain_size) == (36, 64)
    assert full.compute_capex_usd == pytest.approx(32 * 3.2e6) and part.compute_capex_usd == pytest.approx(36 * 3.2e6)
    assert part.bom.nic_count == full.bom.nic_count == 2304 and part.priced_nic_count == full.priced_nic_count == 0


@pytest.mark.parametrize("racks,per_row", [(16, 16), (36, 16), (64, 16), (128, 32), (13_888, 320)])
def test_the_default_floor_grows_about_square(racks, per_row):
    # by hand: the square floor's row is sqrt(racks x 4.27 / 0.6) racks long, rounded to blocks of 16:
    # 128 racks: sqrt(910.9) = 30.2 -> 2 blocks = 32; 13,888: sqrt(98,836) = 314.4 -> 20 blocks = 320;
    # 64: 21.3 -> 1 block (16)
    assert FloorLayout().for_racks(racks).racks_per_row == per_row
    assert FloorLayout(racks_per_row=16).for_racks(racks).racks_per_row == 16  # a stated row is kept


@pytest.mark.parametrize("placement,worst", [
    # 1,024 racks: rows of 80 (5 blocks of 16, sqrt(1024 x 4.27 / 0.6) = 85.4 racks a side); leaf groups
    # of 8 racks, two per block, their leaves closing their own block's row: a block's first rack is
    # 16 pitches from them (the merged row's end would be 80 pitches, 53 m)
    ("end_of_row", SLACK + WIDTH * 16),
    # a leaf rack splitting each block: 8 pitches either side
    ("middle_of_row", SLACK + WIDTH * 8),
])
def test_a_wide_default_floor_keeps_its_leaves_beside_each_block(placement, worst):
    lay = FloorLayout(leaf_placement=placement)
    planned = lay.for_racks(1024)  # the floor the MILP plans once for its largest cluster
    assert (planned.racks_per_row, planned.racks_per_block) == (80, 16)
    assert layer_worst_m(planned, n_racks=1024, leaf_span_racks=8, n_layers=1) == (pytest.approx(worst),)
    # a stated row of 80 without blocks keeps one leaf site per row: 80 pitches
    whole = FloorLayout(leaf_placement="end_of_row", racks_per_row=80)
    if placement == "end_of_row":
        assert layer_worst_m(whole, n_racks=1024, leaf_span_racks=8, n_layers=1) == (pytest.approx(SLACK + WIDTH * 80),)
    (nic,) = layer_lengths(lay, rack_links=[4] * 1024, leaf_span_racks=8)
    assert max(L for L, _ in nic) == pytest.approx(worst)
    assert layer_worst_m(lay, n_racks=1024, leaf_span_racks=8, n_layers=1) == (pytest.approx(worst),)
    # a networkx grid of one row of the floor, network racks included (x: 0..84 for end of row, a
    # network rack after each block at x = 17b + 16; middle of row: at x = 17b + 8, racks after it
    # one pitch on); every rack's link to its own block's network rack is its path on the grid
    g = nx.grid_2d_graph(85, 1)
    for a, b in g.edges:
        g.edges[a, b]["m"] = WIDTH
    site = 16 if placement == "end_of_row" else 8
    want = []
    for blk in range(5):
        dist = nx.single_source_dijkstra_path_length(g, (17 * blk + site, 0), weight="m")
        xs = [17 * blk + s + (1 if placement == "middle_of_row" and s >= 8 else 0) for s in range(16)]
        want += [round(SLACK + dist[(x, 0)], 3) for x in xs]
    row0 = sorted(x for L, n in layer_lengths(lay, rack_links=[1] * 1024, leaf_span_racks=8)[0]
                  for x in [L] * n)
    # each of the floor's 13 rows (12 full, the last of 64 racks) repeats row 0's lengths by block
    per_row = sorted(want) * 12 + sorted(want[:64])
    assert row0 == pytest.approx(sorted(per_row))


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 2500), span=st.integers(1, 20), leaf=st.sampled_from(["middle_of_row", "end_of_row"]),
       spine=st.sampled_from(["central", "end_of_hall"]), upper=st.integers(0, 300))
def test_the_fast_worst_is_the_longest_link_on_a_default_floor(n, span, leaf, spine, upper):
    lay = FloorLayout(leaf_placement=leaf, spine_placement=spine).for_racks(n)
    dists = layer_lengths(lay, rack_links=[1] * n, leaf_span_racks=span, upper_links=[n, n], upper_switches=upper)
    fast = layer_worst_m(lay, n_racks=n, leaf_span_racks=span, n_layers=3, upper_switches=upper)
    assert fast == tuple(max(L for L, _ in d) for d in dists)


def test_default_floor_of_128_nvl72_racks_by_hand(cat):
    st = study(cat, gpus={"count": 72 * 128}, layout={"leaf_placement": "end_of_row"},
               media={"optic": "t_sr", "dac": "t_dac"})
    d = solve_network(st).design
    # 4 rows of 32, the leaf closing the middle row: the far corner is 32 pitches along and 2 rows across
    assert (d.layout.racks_per_row, d.layout.n_rows) == (32, 4)
    assert d.link_worst_m == (pytest.approx(SLACK + WIDTH * 32 + PITCH * 2),)


def test_lpo_is_offered_only_when_the_study_allows_it():
    from designer.spec.catalog import load_catalog

    real = load_catalog()
    lpo, sr = real.medium("lpo_800g_2xdr4"), real.medium("osfp_800g_2xsr4")
    # by the catalog's prices the LPO module is the cheaper 400G-per-port twin-port end, and reaches 500 m
    assert lpo.price_usd < sr.price_usd and lpo.reach_m >= 500

    def solve(allow):
        return solve_network(NetworkStudy.model_validate({
            "choices": {"platforms": ["hgx_h100_8"], "nics": [{"id": "cx7_400g"}], "switches": [{"id": "qm9790"}],
                        "families": ["rail-optimized"], "media": {"allow": allow}},
            "gpus": {"count": 8192}})).design

    plain, with_lpo = solve([]), solve(["lpo_800g_2xdr4"])
    assert "lpo_800g_2xdr4" not in plain.link_media
    assert "lpo_800g_2xdr4" in with_lpo.link_media and with_lpo.capex_usd < plain.capex_usd
    with pytest.raises(SpecError, match=r"field 'choices.media.allow.0' = 'no_such_optic': not a medium"):
        solve(["no_such_optic"])


def test_an_active_optical_cable_is_chosen_only_on_request(cat):
    # no source prices an AOC (prices-and-layout.md §2a), so an estimate never decides a default
    # design: the 5.6 m end-of-row links of one NVL72 rack take the cheapest optic (t_sr, 50 m) unless
    # the study lists the AOC, which is cheaper and long enough (20 m)
    def media(allow):
        st = study(cat, gpus={"count": 72}, layout={"leaf_placement": "end_of_row"}, media={"allow": allow})
        return solve_network(st).design.link_media

    assert media([]) == (cheapest_by_hand(5.6, ("t_dac", "t_sr", "t_dr")),) == ("t_sr",)
    assert media(["t_aoc"]) == ("t_aoc",)


def test_a_block_longer_than_its_row_is_refused():
    with pytest.raises(ValueError, match="racks_per_block 32 is more than racks_per_row 16; allowed: racks_per_block <= racks_per_row"):
        FloorLayout(racks_per_row=16, racks_per_block=32)
    # a stated block on a default floor splits its rows; one block per row where the floor is one block wide
    assert FloorLayout(racks_per_block=8).for_racks(1024).racks_per_block == 8
    assert FloorLayout().for_racks(36).racks_per_block is None


def test_the_centre_line_of_a_blocked_floor_is_its_rows_middle_whatever_the_leaf_span():
    # 2,000 racks: rows of 112 (7 blocks of 16, sqrt(2000 x 4.27 / 0.6) = 119.3), each block closed by
    # its network rack: 7 x 17 = 119 pitches, centre 59. Leaf groups of 9 racks leave 7 slots of each
    # block free; the centre stays the row's, not that of the slots in use
    from designer.network.layout import _Floor

    lay = FloorLayout(leaf_placement="end_of_row").for_racks(2000)
    assert (lay.racks_per_row, lay.racks_per_block) == (112, 16)
    for span in (8, 9, 6):
        assert _Floor(lay, 2000, span).mid == 119 // 2


@pytest.mark.parametrize("platform,nic,switch,switch_end,nic_end", [
    # NDR: a twin-port 800G 2xSR4 module serves two switch ports; ConnectX-7's cage takes a 400G
    # single-port SR4 (prices-and-layout.md §2a: "400G single-port OSFP SR4/DR4 (NIC side, CX-7)")
    ("hgx_h100_8", "cx7_400g", "qm9790", "osfp_800g_2xsr4", "osfp_400g_sr4"),
    # XDR: a twin-port 1.6T 2xDR4 at the switch, ConnectX-8's 800G single-port DR4 at the NIC
    ("hgx_b300_8", "cx8_800g", "q3400", "osfp_1p6t_2xdr4", "osfp_800g_dr4_nic"),
])
def test_an_optical_nic_link_ends_in_the_nics_own_module(platform, nic, switch, switch_end, nic_end):
    from designer.spec.catalog import load_catalog

    real = load_catalog()
    d = solve_network(NetworkStudy.model_validate({
        "choices": {"platforms": [platform], "nics": [{"id": nic, "nics_per_gpu": [1]}], "switches": [{"id": switch}],
                    "families": ["rail-only"], "media": {"nic_links": "optic"}},
        "gpus": {"count": 4096}, "objective": {"kind": "min_cost"}})).design
    # 4,096 NIC-leaf links and 4,096 leaf-spine links (rail-only, two tiers): by hand, each NIC link
    # is half a twin-port module and one NIC module, each leaf-spine link two halves of a twin-port
    s, n = real.medium(switch_end), real.medium(nic_end)
    assert d.link_media == (f"{switch_end}+{nic_end}", switch_end)
    assert dict(d.media_modules) == {switch_end: 4096 / 2 + 4096, nic_end: 4096}
    assert d.optics_capex_usd == pytest.approx(4096 * (s.price_usd / 2 + n.price_usd) + 4096 * s.price_usd, rel=1e-12)
    assert d.bom.optics_power_w == pytest.approx(4096 * (s.power_w / 2 + n.power_w) + 4096 * s.power_w, rel=1e-12)


def test_the_catalog_priced_bom_prices_the_nic_end_as_the_milp_does():
    # `designer bom --prices catalog:qm9790` (the closed form at catalog prices) and the MILP's design of
    # the same fabric buy the same optics: the NIC end of each optical NIC link in a 400G single-port
    # SR4, the switch ends in halves of twin-port 2xSR4 modules (by hand: 4096 x (700 + 550) + 4096 x 1100)
    from designer.network.prices import bom_from_cli

    bom = bom_from_cli(topology="rail-only", n_gpus=4096, hb_domain_size=8, radix=64, prices="catalog:qm9790",
                       port_gbps=400.0, nics_per_gpu=1, oversubscription=1.0, oversubscribed_level=None,
                       convention="physical", catalog_files=(), gpus_per_nic=1)
    assert bom["optics_cost_usd"] == pytest.approx(4096 * (700 + 550) + 4096 * 1100, rel=1e-12)
    assert bom["optics_power_w"] == pytest.approx(4096 * (8 + 7.5) + 4096 * 15, rel=1e-12)
    # the paper's price sets keep one price per transceiver, NIC ends included (railonly.md §2)
    paper = bom_from_cli(topology="rail-only", n_gpus=4096, hb_domain_size=8, radix=64, prices="railonly-v5",
                         port_gbps=400.0, nics_per_gpu=1, oversubscription=1.0, oversubscribed_level=None,
                         convention="physical", catalog_files=(), gpus_per_nic=1)
    assert paper["optics_cost_usd"] == pytest.approx(paper["transceiver_count"] * 199.0, rel=1e-12)


def test_each_nic_end_module_is_an_option_so_the_links_length_chooses_the_reach():
    # a 500 m twin-port DR4 at the switch faces either the catalog's 100 m single-port DR4 or a 500 m
    # one: both pairs are offered (a 200 m NIC link needs the second), each priced end by end; a cable
    # (AOC) is never paired with another cable, it is both ends itself
    from types import SimpleNamespace as M

    from designer.network.layout import nic_end_module, nic_end_modules, nic_link_option

    def medium(id_, kind, ports, reach, usd, w, ends=1):
        return M(id=id_, kind=kind, reach_class="single_mode_dr" if kind == "optic" else None, gbps=400,
                 ports_per_module=ports, ends_per_module=ends, reach_m=reach, price_usd=usd, power_w=w)

    twin = medium("twin_500", "optic", 2, 500, 1300, 17)
    short, long_ = medium("nic_100", "optic", 1, 100, 800, 9), medium("nic_500", "optic", 1, 500, 850, 9)
    assert [m.id for m in nic_end_modules(twin, [short, long_, twin], 400)] == ["nic_100", "nic_500"]
    pairs = {o.label: (o.reach_m, o.usd_per_link) for o in (nic_link_option(twin, n) for n in (short, long_))}
    assert pairs == {"twin_500+nic_100": (100, 650 + 800), "twin_500+nic_500": (500, 650 + 850)}
    # one price per NIC end (the closed form): the cheapest reaching as far as the switch end
    assert nic_end_module(twin, [short, long_], 400).id == "nic_500"
    aoc, aoc10 = medium("aoc_30", "aoc", 1, 30, 900, 16, ends=2), medium("aoc_10", "aoc", 1, 10, 700, 16, ends=2)
    assert nic_end_modules(aoc, [aoc, aoc10], 400) == [] and nic_end_module(aoc, [aoc10], 400) is None
