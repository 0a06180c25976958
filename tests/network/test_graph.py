"""networkx builds vs the closed form: switch counts per tier, port budgets, reachability,
links across tier cuts, oversubscription, optics and bisection (max flow)."""

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from designer.errors import SpecError
from designer.network.graph import (
    MAX_GRAPH_GPUS,
    build_graph,
    graph_tier_count,
    link_count_by_medium,
    links_between_tiers,
    network_subgraph,
    ports_used_by_chassis,
    switches_by_tier,
)
from designer.network.topology import RAILONLY_V1_PRICES, Family, bill_of_materials, tiers_needed

PORT_BYTES_PER_S = 400e9 / 8


def closed_form(family, n, k, radix, **kw):
    return bill_of_materials(family, n, k, radix, prices=RAILONLY_V1_PRICES, **kw)


def assert_graph_matches_closed_form(family, n, k, radix, **kw):
    graph = build_graph(family, n, k, radix, **kw)
    bom = closed_form(family, n, k, radix, **kw)
    # tiers and switches per tier
    assert graph.graph["n_tiers"] == bom.n_tiers
    assert switches_by_tier(graph) == {t.level: t.switches for t in bom.tiers}
    # every physical switch within its radix; below the top at most h ports face down
    assert max(ports_used_by_chassis(graph).values()) <= radix
    for node, attrs in graph.nodes(data=True):
        if attrs["kind"] == "switch" and attrs["tier"] < bom.n_tiers:
            down = sum(
                graph.edges[node, other]["links"]
                for other in graph.neighbors(node)
                if graph.nodes[other]["tier"] == attrs["tier"] - 1
            )
            assert down <= radix // 2
    # links across every tier cut, and the oversubscription they give
    for tier in bom.tiers:
        assert links_between_tiers(graph, tier.level - 1) == tier.down_links
        assert links_between_tiers(graph, tier.level) == tier.up_links
        if tier.up_links:
            assert tier.down_links / tier.up_links == pytest.approx(tier.oversubscription)
    # optics: two transceivers per optical link
    media = link_count_by_medium(graph)
    assert 2 * media.get("optical", 0) == bom.transceiver_count
    assert media.get("dac", 0) == bom.dac_count
    assert sum(media.values()) == bom.link_count
    return graph, bom


def gpus_reached(graph):
    """For every GPU, the set of GPUs it reaches over network edges only."""
    reached = {}
    for component in nx.connected_components(network_subgraph(graph)):
        gpus = frozenset(n for n in component if graph.nodes[n]["kind"] == "gpu")
        for gpu in gpus:
            reached[gpu] = gpus
    return reached


def assert_reachability(graph, family):
    gpus = [n for n, kind in graph.nodes(data="kind") if kind == "gpu"]
    reached = gpus_reached(graph)
    for gpu in gpus:
        if family == Family.rail_only:
            expected = {g for g in gpus if g[2] == gpu[2]}  # ("gpu", domain, rank): its own rail only
        else:
            expected = set(gpus)
        assert reached[gpu] == expected


CASES = [
    # (family, n_gpus, K, radix, kwargs)
    (Family.rail_only, 512, 8, 64, {}),  # one tier, 8 switches (railonly.md §2 oracle)
    (Family.rail_only, 1024, 8, 64, {}),  # 48 switches (oracle)
    (Family.rail_only, 2048, 8, 64, {}),  # 96 switches (oracle)
    (Family.rail_optimized, 2048, 8, 16, {}),  # 3 tiers, h = 8
    (Family.rail_optimized, 576, 72, 32, {"nics_per_gpu": 2}),  # rails of 8 GPUs, two per leaf
    (Family.rail_optimized, 1440, 72, 32, {}),  # rails of 20 GPUs: a full and a partial leaf each
    (Family.fat_tree, 2048, 8, 8, {}),  # 5 tiers of 8-port switches
    (Family.fat_tree, 1000, 8, 64, {}),  # partly filled two tiers
    (Family.oversubscribed, 512, 8, 16, {"oversubscription": 4.0}),
    (Family.oversubscribed, 2048, 8, 16, {"oversubscription": 3.0, "oversubscribed_level": 1}),
    (Family.oversubscribed, 1536, 8, 32, {"oversubscription": 2.5}),
    (Family.rail_only, 1024, 256, 64, {}),  # 256 rails of 4 GPUs packed 16 per switch
    (Family.rail_only, 768, 8, 16, {"dac_for_nic_links": True}),
]


@pytest.mark.parametrize("family, n, k, radix, kwargs", CASES)
def test_graph_matches_closed_form(family, n, k, radix, kwargs):
    graph, _ = assert_graph_matches_closed_form(family, n, k, radix, **kwargs)
    assert_reachability(graph, family)


def test_graph_reproduces_the_1024_gpu_oracle_by_construction():
    # railonly.md §2: 1,024 GPUs on 64-port switches -> 48 switches as 8 per-rail two-tier fabrics.
    graph = build_graph(Family.rail_only, 1024, 8, 64)
    assert sum(switches_by_tier(graph).values()) == 48
    rails = {attrs["rail"] for _, attrs in graph.nodes(data=True) if attrs["kind"] == "switch"}
    assert rails == set(range(8))  # every switch belongs to exactly one rail


def test_rail_optimized_leaves_are_rail_pure_and_fat_tree_leaves_take_whole_domains():
    ro = build_graph(Family.rail_optimized, 512, 8, 16)
    ft = build_graph(Family.fat_tree, 512, 8, 16)
    for graph, check in ((ro, "rank"), (ft, "domain")):
        for node, attrs in graph.nodes(data=True):
            if attrs["kind"] == "switch" and attrs["tier"] == 1:
                gpus = [g for g in graph.neighbors(node) if graph.nodes[g]["kind"] == "gpu"]
                assert len(gpus) == 8
                if check == "rank":  # 8 GPUs of one local rank from 8 domains
                    assert len({g[2] for g in gpus}) == 1 and len({g[1] for g in gpus}) == 8
                else:  # 8 consecutive GPUs = one whole domain
                    assert len({g[1] for g in gpus}) == 1 and len({g[2] for g in gpus}) == 8


@pytest.mark.parametrize("n, radix", [(1, 4), (4, 4), (5, 4), (8, 4), (9, 4), (17, 4), (33, 4), (512, 16), (513, 16)])
def test_graph_tier_count_agrees_with_tiers_needed(n, radix):
    assert graph_tier_count(n, radix) == tiers_needed(n, radix)


def bisection_flow(graph, half_a):
    """Max flow over network edges from GPUs in half_a to all other GPUs."""
    net = network_subgraph(graph)
    gpus = [n for n in net if net.nodes[n]["kind"] == "gpu"]
    for gpu in gpus:
        # edges without a capacity attribute are infinite in networkx's max flow
        if gpu in half_a:
            net.add_edge("source", gpu)
        else:
            net.add_edge(gpu, "sink")
    return nx.maximum_flow_value(net, "source", "sink")


@pytest.mark.parametrize(
    "family, n, k, radix, kwargs",
    [
        (Family.rail_optimized, 512, 8, 16, {}),
        (Family.fat_tree, 512, 8, 16, {}),
        (Family.rail_only, 512, 8, 16, {}),
        # 4:1 above the spines: pods of 64 uplinks = one rail each; ranks 0-3 own half the 128 core links
        (Family.oversubscribed, 512, 8, 16, {"oversubscription": 4.0}),
        # 2:1 above the leaves, 2 tiers: leaves of 8 GPUs get 4 uplinks each
        (Family.oversubscribed, 128, 2, 16, {"oversubscription": 2.0}),
    ],
)
def test_bisection_max_flow_equals_closed_form(family, n, k, radix, kwargs):
    graph = build_graph(family, n, k, radix, **kwargs)
    bom = closed_form(family, n, k, radix, **kwargs)
    gpus = [g for g, kind in graph.nodes(data="kind") if kind == "gpu"]
    n_domains = n // k
    if family in (Family.oversubscribed,):
        half_a = {g for g in gpus if g[2] < k // 2}  # whole rails = whole tier-b subtrees
    else:
        half_a = {g for g in gpus if g[1] < n_domains // 2}  # first half of every rail
    assert bisection_flow(graph, half_a) == pytest.approx(bom.bisection_bandwidth_bytes_per_s)


def test_oversubscribed_uplinks_are_spread_at_least_one_per_switch():
    graph = build_graph(Family.oversubscribed, 2048, 8, 16, oversubscription=7.0, oversubscribed_level=1)
    bom = closed_form(Family.oversubscribed, 2048, 8, 16, oversubscription=7.0, oversubscribed_level=1)
    # 2048 leaf downlinks at 7:1 -> ceil(2048/7) = 293 uplinks over 256 leaves
    assert bom.tiers[0].up_links == 293 == links_between_tiers(graph, 1)
    for node, attrs in graph.nodes(data=True):
        if attrs["kind"] == "switch" and attrs["tier"] == 1:
            up = [o for o in graph.neighbors(node) if graph.nodes[o]["tier"] == 2]
            assert 1 <= sum(graph.edges[node, o]["links"] for o in up) <= 2


def test_edge_capacities_are_links_times_port_rate():
    graph = build_graph(Family.rail_optimized, 256, 8, 8, port_gbps=200.0)
    for _, _, attrs in graph.edges(data=True):
        if attrs["kind"] == "network":
            assert attrs["capacity"] == attrs["links"] * 200e9 / 8


def test_graph_refuses_large_instances():
    with pytest.raises(SpecError, match="^n_gpus"):
        build_graph(Family.rail_optimized, 8 * (MAX_GRAPH_GPUS // 8 + 1), 8, 64)


@st.composite
def small_fabric(draw):
    family = draw(st.sampled_from(list(Family)))
    k = draw(st.sampled_from([1, 2, 3, 4, 8, 72]))
    n_domains = draw(st.integers(1, max(1, 1024 // k)))
    radix = draw(st.sampled_from([8, 10, 12, 16, 24, 32]))
    kw = {"nics_per_gpu": draw(st.integers(1, 2))}
    if family == Family.oversubscribed:
        kw["oversubscription"] = draw(st.sampled_from([1.0, 1.5, 2.0, 3.0, 4.0, 7.0]))
        kw["oversubscribed_level"] = draw(st.one_of(st.none(), st.integers(1, 4)))
    return family, k * n_domains, k, radix, kw


@settings(max_examples=40, deadline=None)
@given(case=small_fabric())
def test_graph_matches_closed_form_property(case):
    family, n, k, radix, kw = case
    try:
        closed_form(family, n, k, radix, **kw)
    except SpecError:
        with pytest.raises(SpecError):
            build_graph(family, n, k, radix, **kw)
        return
    graph, _ = assert_graph_matches_closed_form(family, n, k, radix, **kw)
    assert_reachability(graph, family)


SHARED_NIC_CASES = [
    # 4 NICs per 8-GPU node (two GPUs behind each PCIe switch), and 36 per NVL72 rack
    (Family.rail_only, 1024, 8, 64),
    (Family.rail_optimized, 2048, 8, 16),
    (Family.rail_optimized, 576, 72, 32),
    (Family.fat_tree, 1024, 8, 16),
    (Family.oversubscribed, 2048, 8, 16),
]


@pytest.mark.parametrize("family, n, k, radix", SHARED_NIC_CASES)
def test_shared_nics_graph_matches_closed_form(family, n, k, radix):
    kw = {"gpus_per_nic": 2} | ({"oversubscription": 2.0} if family == Family.oversubscribed else {})
    graph, bom = assert_graph_matches_closed_form(family, n, k, radix, **kw)
    assert bom.nic_count == n // 2 == sum(1 for _, kind in graph.nodes(data="kind") if kind == "nic")
    # the fabric is the one of N/2 endpoints in domains of K/2: the same switches and links
    half = closed_form(family, n // 2, k // 2, radix, **{a: b for a, b in kw.items() if a != "gpus_per_nic"})
    assert (bom.switch_count, bom.link_count, bom.transceiver_count) == (half.switch_count, half.link_count,
                                                                         half.transceiver_count)
    # each GPU gets half a port
    assert bom.tiers[0].capacity_per_gpu_bytes_per_s == pytest.approx(PORT_BYTES_PER_S / 2)
    gpus = [x for x, kind in graph.nodes(data="kind") if kind == "gpu"]
    reached = gpus_reached(graph)
    for gpu in gpus[:: max(1, len(gpus) // 64)]:
        if family == Family.rail_only:  # its NIC's rail: GPUs of the same NIC rank in every domain
            assert reached[gpu] == {g for g in gpus if g[2] // 2 == gpu[2] // 2}
        else:
            assert reached[gpu] == set(gpus)


def test_shared_nics_need_one_nic_per_gpu_and_a_domain_they_divide():
    with pytest.raises(SpecError, match="gpus_per_nic=3"):
        closed_form(Family.rail_only, 1024, 8, 64, gpus_per_nic=3)
    with pytest.raises(SpecError, match="nics_per_gpu 1"):
        closed_form(Family.rail_only, 1024, 8, 64, gpus_per_nic=2, nics_per_gpu=2)
