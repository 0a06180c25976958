"""networkx builders for small instances of every topology family, to cross-check the closed forms.

The builder wires a real folded Clos, switch by switch, and derives its own tier count and switch
counts from the wiring; tests then compare them with `designer.network.topology.bill_of_materials`
(physical convention). Structure, per plane (planes as in topology.py):

* tier count: one switch tier if the plane's E endpoints fit one switch (E <= R); otherwise group
  the endpoints into leaves of h = R/2 and keep grouping by h until at most R groups remain, which
  a top tier (all R ports down) can join.
* leaves: rail-only and fat-tree chunk the plane's endpoint sequence (fat-tree in domain-major order:
  consecutive GPUs); rail-optimized / oversubscribed chunk each rail separately (rail-pure leaves),
  rails in rank order, or pack floor(h/D) whole rails per leaf when a rail is no longer than h.
* middle tier l: the uplinks of the tier below, in order, are cut into pods of h**l consecutive
  uplinks (h child subtrees when non-blocking); a pod gets ceil(uplinks / h) switches of h down ports.
* top tier: all uplinks of the tier below go to ceil(uplinks / R) switches.
* within a pod or the top, uplink k goes to switch (k + k // s) mod s of the s switches: round robin
  that shifts by one after each pass, so loads differ by at most one and lower switches whose
  uplinks land in different passes share a switch. If small lower subtrees (few uplinks each)
  still leave the plane in pieces, top-tier links are swapped pairwise until it is one fabric
  (port counts unchanged; `_join_components`).
* oversubscription r at tier b: the tier's switches get ceil(down / r) uplinks in total, at least one
  each, the rest in proportion to their downlinks.
* one-tier planes of a packed family share physical switches (floor(R / E) planes per chassis);
  each plane keeps its own switch node (a partition) with the chassis as an attribute, so no
  network path joins two planes.

Nodes: ("gpu", domain, rank) kind="gpu" tier=0; ("hb", domain) kind="hb"; switches
("switch", plane, level, index) kind="switch" tier=level, with rail (local rank, or None when the
switch serves several rails), plane and chassis. Edges: kind "hb" or "network"; network edges carry
links (parallel links between the same pair), capacity (bytes/s, both ways: links x port rate) and
medium ("optical" or "dac").
"""

from __future__ import annotations

import math
from collections import Counter
from fractions import Fraction
from typing import Hashable

import networkx as nx

from designer.errors import SpecError
from designer.network.topology import (
    RAIL_PURE_LEAF_FAMILIES,
    Family,
    ceil_div,
    exact_ratio,
    resolve_oversubscribed_level,
    tier_name,
    validate_inputs,
)
from designer.units import gbps_to_bytes_per_s

MAX_GRAPH_GPUS = 16384  # larger instances are the closed form's job; the graph is a cross-check

# railonly.md §1: DGX/HGX H100 NVLink4, 450 GB/s per direction per GPU.
H100_NVLINK_BYTES_PER_S = 450e9


def graph_tier_count(n_endpoints: int, radix: int) -> int:
    """Tier count found by grouping (see module docstring), independent of topology.tiers_needed."""
    if n_endpoints <= radix:
        return 1
    half = radix // 2
    groups, levels = math.ceil(n_endpoints / half), 1
    while groups > radix:
        groups, levels = math.ceil(groups / half), levels + 1
    return levels + 1


def _split_uplinks(downs: list[int], ratio: Fraction | None) -> list[int]:
    """Uplinks per switch: equal to downlinks, or ceil(sum / r) in total, >= 1 each, rest pro rata."""
    if ratio is None:
        return list(downs)
    total = ceil_div(sum(downs), ratio)
    if total < len(downs):
        raise SpecError(
            f"oversubscription={float(ratio)}: {len(downs)} switches would share {total} uplinks, "
            f"so some would have none"
        )
    spare_total = total - len(downs)
    weights = [d - 1 for d in downs]
    weight_sum = sum(weights)
    ups, cumulative, given = [], 0, 0
    for w in weights:
        cumulative += w
        upto = math.floor(Fraction(cumulative * spare_total, weight_sum)) if weight_sum else 0
        ups.append(1 + upto - given)
        given = upto
    return ups


def _wire_block(
    graph: nx.Graph, block: list[Hashable], uppers: list[Hashable], port_bytes_per_s: float
) -> list[tuple[Hashable, int]]:
    """Wire the block's uplinks to the upper switches (shifted round robin); (switch, downlinks) back."""
    n_switches = len(uppers)
    links = Counter()
    for k, lower in enumerate(block):
        links[(lower, uppers[(k + k // n_switches) % n_switches])] += 1
    for (lower, upper), count in links.items():
        graph.add_edge(
            lower, upper, kind="network", links=count, capacity=count * port_bytes_per_s, medium="optical"
        )
    loads = Counter()
    for (_, upper), count in links.items():
        loads[upper] += count
    return [(upper, loads[upper]) for upper in uppers]


def build_graph(
    family: Family | str,
    n_gpus: int,
    hb_domain_size: int,
    radix: int,
    *,
    port_gbps: float = 400.0,
    nics_per_gpu: int = 1,
    oversubscription: float = 1.0,
    oversubscribed_level: int | None = None,
    dac_for_nic_links: bool = False,
    hb_bandwidth_per_gpu_bytes_per_s: float = H100_NVLINK_BYTES_PER_S,
    gpus_per_nic: int = 1,
) -> nx.Graph:
    """The network of one family as an undirected graph (module docstring); small instances only.
    With `gpus_per_nic` > 1, NIC nodes ("nic", domain, rank) each join that many consecutive GPUs of
    a domain (a PCIe switch) and are the network's endpoints."""
    family = validate_inputs(
        family, n_gpus, hb_domain_size, radix, port_gbps, nics_per_gpu, oversubscription, oversubscribed_level,
        gpus_per_nic,
    )
    if n_gpus > MAX_GRAPH_GPUS:
        raise SpecError(f"n_gpus={n_gpus}: build_graph is a cross-check for at most {MAX_GRAPH_GPUS} GPUs")
    half = radix // 2
    n_domains = n_gpus // hb_domain_size
    port_bytes_per_s = gbps_to_bytes_per_s(port_gbps)
    graph = nx.Graph(family=family, radix=radix, n_gpus=n_gpus, hb_domain_size=hb_domain_size)

    for domain in range(n_domains):
        hb = ("hb", domain)
        graph.add_node(hb, kind="hb", tier=None, rail=None, domain=domain)
        for rank in range(hb_domain_size):
            gpu = ("gpu", domain, rank)
            graph.add_node(gpu, kind="gpu", tier=0, rail=rank, domain=domain)
            graph.add_edge(gpu, hb, kind="hb", links=1, capacity=hb_bandwidth_per_gpu_bytes_per_s, medium="hb")
    ranks = hb_domain_size // gpus_per_nic  # network endpoints per domain

    def ep(domain: int, rank: int) -> tuple:
        return ("gpu", domain, rank) if gpus_per_nic == 1 else ("nic", domain, rank)

    if gpus_per_nic > 1:
        for domain in range(n_domains):
            for rank in range(ranks):
                nic_node = ("nic", domain, rank)
                graph.add_node(nic_node, kind="nic", tier=0, rail=rank, domain=domain)
                for i in range(gpus_per_nic):
                    graph.add_edge(("gpu", domain, rank * gpus_per_nic + i), nic_node, kind="pcie", links=1,
                                   capacity=port_bytes_per_s, medium="pcie")

    # Planes and, per plane, its leaf groups (lists of GPUs) and the rail of each group.
    if family == Family.rail_only:
        planes = [(rank, nic) for rank in range(ranks) for nic in range(nics_per_gpu)]
        endpoints = n_domains
    else:
        planes = [(None, nic) for nic in range(nics_per_gpu)]
        endpoints = n_domains * ranks
    n_tiers = graph_tier_count(endpoints, radix)
    boundary = None
    if family == Family.oversubscribed:
        boundary = resolve_oversubscribed_level(oversubscribed_level, n_tiers, radix)
    ratio = exact_ratio(oversubscription)
    graph.graph.update(n_tiers=n_tiers, oversubscribed_level=boundary, n_planes=len(planes))

    def leaf_groups(plane_rank: int | None) -> list[tuple[int | None, list]]:
        size = endpoints if n_tiers == 1 else half
        if family == Family.rail_only:
            sequence = [ep(d, plane_rank) for d in range(n_domains)]
            return [(plane_rank, sequence[i : i + size]) for i in range(0, len(sequence), size)]
        if family in RAIL_PURE_LEAF_FAMILIES and n_tiers > 1:
            rails = [[ep(d, rank) for d in range(n_domains)] for rank in range(ranks)]
            if n_domains <= half:  # short rails: floor(h / D) whole rails per leaf
                per_leaf = half // n_domains
                groups = []
                for first in range(0, ranks, per_leaf):
                    members = range(first, min(first + per_leaf, ranks))
                    groups.append((first if len(members) == 1 else None, [gpu for r in members for gpu in rails[r]]))
                return groups
            return [(rank, rail[i : i + size]) for rank, rail in enumerate(rails) for i in range(0, len(rail), size)]
        sequence = [ep(d, r) for d in range(n_domains) for r in range(ranks)]
        groups = []
        for i in range(0, len(sequence), size):
            in_group = {gpu[2] for gpu in sequence[i : i + size]}
            groups.append((in_group.pop() if len(in_group) == 1 else None, sequence[i : i + size]))
        return groups

    planes_per_chassis = max(1, radix // endpoints)
    for plane_index, (plane_rank, nic) in enumerate(planes):
        counters = Counter()

        plane_switches = []

        def make_switch(level: int, rail: int | None, _plane=plane_index, _counters=counters, _made=plane_switches):
            index = _counters[level]
            _counters[level] += 1
            node = ("switch", _plane, level, index)
            chassis = ("chassis", level, _plane // planes_per_chassis) if n_tiers == 1 else node
            graph.add_node(
                node, kind="switch", tier=level, tier_name=tier_name(level), rail=rail, plane=_plane,
                nic=nic, chassis=chassis, domain=None,
            )
            _made.append(node)
            return node

        lower = []  # (switch, downlinks) of the tier being wired upward
        for rail, group in leaf_groups(plane_rank):
            leaf = make_switch(1, rail)
            for gpu in group:
                graph.add_edge(
                    gpu, leaf, kind="network", links=1, capacity=port_bytes_per_s,
                    medium="dac" if dac_for_nic_links else "optical", nic=nic,
                )
            lower.append((leaf, len(group)))

        for level in range(2, n_tiers + 1):
            ups = _split_uplinks([d for _, d in lower], ratio if level - 1 == boundary else None)
            uplinks = [node for (node, _), up in zip(lower, ups) for _ in range(up)]
            rail_of = {node: graph.nodes[node]["rail"] for node, _ in lower}
            if level == n_tiers:
                blocks = [(uplinks, math.ceil(len(uplinks) / radix))]
            else:
                pod = half**level  # h child subtrees of h**(level-1) uplinks when non-blocking
                blocks = [
                    (uplinks[i : i + pod], math.ceil(len(uplinks[i : i + pod]) / half))
                    for i in range(0, len(uplinks), pod)
                ]
            new_lower = []
            for block, n_switches in blocks:
                rails = {rail_of[node] for node in block}
                rail = rails.pop() if len(rails) == 1 else None
                uppers = [make_switch(level, rail) for _ in range(n_switches)]
                new_lower += _wire_block(graph, block, uppers, port_bytes_per_s)
            if level == n_tiers:
                below = graph.subgraph(n for n in plane_switches if graph.nodes[n]["tier"] < level)
                _join_components(graph, below, [node for node, _ in new_lower], port_bytes_per_s)
            lower = new_lower
    return graph


def _move_link(graph: nx.Graph, lower: Hashable, old: Hashable, new: Hashable, port_bytes_per_s: float) -> None:
    edge = graph.edges[lower, old]
    edge["links"] -= 1
    edge["capacity"] = edge["links"] * port_bytes_per_s
    if edge["links"] == 0:
        graph.remove_edge(lower, old)
    if graph.has_edge(lower, new):
        graph.edges[lower, new]["links"] += 1
        graph.edges[lower, new]["capacity"] += port_bytes_per_s
    else:
        graph.add_edge(lower, new, kind="network", links=1, capacity=port_bytes_per_s, medium="optical")


def _join_components(graph: nx.Graph, below: nx.Graph, tops: list[Hashable], port_bytes_per_s: float) -> None:
    """Make the plane one connected fabric by swapping the lower ends of top-tier links.

    Round robin can leave small lower subtrees (few uplinks each) in separate groups. Take a link
    (a, x) on a cycle of one group and any link (b, y) of another and rewire them as (a, y), (b, x):
    every switch keeps its port count and the two groups merge. Needs links >= groups + tops - 1.
    """
    subtree_of = {n: i for i, members in enumerate(nx.connected_components(below)) for n in members}
    while True:
        groups = nx.Graph()  # subtrees below the top and top switches; links between them counted
        for top in tops:
            for lower in graph.neighbors(top):
                key = (("subtree", subtree_of[lower]), top)
                links = graph.edges[lower, top]["links"]
                if groups.has_edge(*key):
                    groups.edges[key]["links"] += links
                    groups.edges[key]["ends"].append(lower)
                else:
                    groups.add_edge(*key, links=links, ends=[lower])
        components = list(nx.connected_components(groups))
        if len(components) == 1:
            return
        bridges = set(nx.bridges(groups))
        on_cycle = [
            (u, v) for u, v, links in groups.edges(data="links")
            if links > 1 or ((u, v) not in bridges and (v, u) not in bridges)
        ]
        if not on_cycle:
            raise SpecError(
                f"oversubscription: the top tier cannot join {len(components)} groups of switches with "
                f"{sum(l for _, _, l in groups.edges(data='links'))} links; lower the oversubscription"
            )
        u, v = on_cycle[0]
        subtree, top_x = (u, v) if u[0] == "subtree" else (v, u)
        a = groups.edges[u, v]["ends"][0]
        home = next(c for c in components if top_x in c)
        other = next(c for c in components if c is not home)
        p, q = next((p, q) for p, q in groups.edges(other))
        top_y = q if p[0] == "subtree" else p
        b = groups.edges[p, q]["ends"][0]
        _move_link(graph, a, top_x, top_y, port_bytes_per_s)
        _move_link(graph, b, top_y, top_x, port_bytes_per_s)


def network_subgraph(graph: nx.Graph) -> nx.Graph:
    """GPUs, shared NICs and switches joined by network (and GPU-to-NIC) edges; HB-domain edges and
    nodes dropped."""
    edges = [(u, v) for u, v, kind in graph.edges(data="kind") if kind in ("network", "pcie")]
    sub = graph.edge_subgraph(edges).copy()
    sub.add_nodes_from((n, a) for n, a in graph.nodes(data=True) if a["kind"] == "gpu")
    return sub


def switches_by_tier(graph: nx.Graph) -> dict[int, int]:
    """Physical switches (distinct chassis) per tier."""
    chassis: dict[int, set] = {}
    for _, attrs in graph.nodes(data=True):
        if attrs["kind"] == "switch":
            chassis.setdefault(attrs["tier"], set()).add(attrs["chassis"])
    return {level: len(members) for level, members in sorted(chassis.items())}


def ports_used_by_chassis(graph: nx.Graph) -> dict[Hashable, int]:
    """Ports in use on every physical switch (parallel links each take a port)."""
    used = Counter()
    for node, attrs in graph.nodes(data=True):
        if attrs["kind"] == "switch":
            used[attrs["chassis"]] += graph.degree(node, weight="links")
    return dict(used)


def links_between_tiers(graph: nx.Graph, lower_level: int) -> int:
    """Links from tier lower_level (0 = GPUs) to tier lower_level + 1."""
    total = 0
    for u, v, attrs in graph.edges(data=True):
        if attrs["kind"] != "network":
            continue
        levels = sorted((graph.nodes[u]["tier"], graph.nodes[v]["tier"]))
        if levels == [lower_level, lower_level + 1]:
            total += attrs["links"]
    return total


def link_count_by_medium(graph: nx.Graph) -> dict[str, int]:
    counts = Counter()
    for _, _, attrs in graph.edges(data=True):
        if attrs["kind"] == "network":
            counts[attrs["medium"]] += attrs["links"]
    return dict(counts)
