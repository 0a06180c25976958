"""Topology families as closed-form bills of materials (BOM).

Sources: /work/shared/reference/railonly.md §1 (terms), §2 (counting model, prices, oracle counts),
§7 (what an engine adds: oversubscribed spines, DAC vs optics, NIC cost); collectives.md §3.3
(fat-tree capacity with r:1 oversubscription: capacity from a subtree upward = hosts x B / r).

Vocabulary
----------
N GPUs in HB domains of K GPUs, so D = N/K domains. Every GPU has `nics_per_gpu` NICs of
`port_gbps` each; every switch port runs at the NIC speed (railonly.md §2), radix R, h = R/2.

A *plane* is a set of NIC ports wired into one fabric with no link to any other plane:

* rail-only: one plane per (local rank, NIC index): P = K * nics_per_gpu planes of E = D
  endpoints each. Each is its own Clos; there is no network path between planes (railonly.md §1).
* rail-optimized, oversubscribed, fat-tree: one plane per NIC index: P = nics_per_gpu planes of
  E = N endpoints each (NIC j of every GPU goes to plane j). Every plane is one Clos over all N GPUs,
  so nics_per_gpu multiplies every count.
  - rail-optimized / oversubscribed: the leaves are rail switches: a leaf takes NIC j of GPUs of one
    local rank from up to h consecutive domains (rail-pure leaves), so each rail needs ceil(D/h) leaves.
    Rails shorter than a leaf (D <= h) are packed whole, floor(h/D) rails per leaf, as the paper packs
    short rails onto shared switches (railonly.md §2).
  - fat-tree: a leaf takes h consecutive GPUs (domain-major order: all ranks of whole domains).

Counting conventions
--------------------
`Convention.paper` (railonly.md §2, reproduces V1 Table 2): L = tiers_needed(E, R);
switches = (2L-1) * E * P / R (a partly filled top tier is scaled linearly and rails share switches,
so the result may be fractional); links = L * N * nics; transceivers = 2 * links (an optic at both
ends of every link, NIC side included). Only rail-optimized, fat-tree and rail-only are defined.

`Convention.physical`: integer switch counts of a buildable folded Clos, per plane:

    L = tiers_needed(E, R)                    smallest L >= 1 with E <= 2 * h**L
    L == 1 (E <= R, one switch serves a plane; whole planes are packed onto shared switches):
        switches = ceil(P / floor(R / E))
        links    = P * E                        (NIC-leaf only)
    L >= 2, per plane, tiers l = 1 .. L:
        d_1 = E                                 downlinks into the leaves (one per NIC)
        s_1 = K * ceil(D / h)                   rail-optimized, oversubscribed, D > h (rail-pure leaves)
        s_1 = ceil(K / floor(h / D))            rail-optimized, oversubscribed, D <= h (whole rails)
        s_1 = ceil(E / h)                       fat-tree, rail-only (E = D for rail-only)
        s_l = ceil(d_l / h)                     2 <= l <= L-1 (h ports down, h ports up; a pod of
                                                the tier takes h**l consecutive uplinks)
        s_L = ceil(d_L / R)                     top tier: all R ports face down
        u_l = ceil(d_l / r)   if l == b         r:1 at the boundary above tier b (oversubscribed)
        u_l = d_l             otherwise         (non-blocking: as many links up as down)
        d_{l+1} = u_l                           links between tier l and l+1
    plane totals are multiplied by P; every switch has R ports (bought whole). Planes share
    switches only in the one-tier case; multi-tier planes are separate fabrics.
    The top tier is counted by its ports, ceil(d_L / R), as the paper scales a partly filled top
    tier: enough ports for every uplink, spread as evenly as whole links allow. Where the switches
    below do not divide the top switches' ports evenly, that wiring is not strictly non-blocking
    for every permutation (full switches below need identical uplink vectors: 1,152 GPUs on 64-port
    switches, 36 leaves, take 32 spines for that, not 18), and rail-pure leaves beyond R
    (NVL72 domains on 64-port switches) cannot be; the counts, the bisection and the performance
    model keep the even-spread reading.
    Oversubscription does not re-split ports: tier-b switches keep h down and h up ports and leave
    the uplink ports they do not need empty, so r shrinks only the tiers above b.
    validity for oversubscribed: 1 <= b <= L-1 and u_b >= s_b (every tier-b switch keeps an uplink).
    ceil(d / r) is taken with r as the exact rational Fraction(r).limit_denominator(10**6).

    links_nic_leaf = P * E;  links between tier l and l+1 = P * u_l;  link_count = their sum
    transceivers   = 2 * optical links; with dac_for_nic_links the NIC-leaf links are DAC (no optic).

All relations are monotone non-decreasing in E and d_l and non-increasing in r.

Tier capacity and span (TierBOM)
--------------------------------
* `oversubscription` of a tier: d_l / u_l at its uplinks (1.0 when non-blocking; the top has none).
  With the ceilings it can be slightly below the requested r.
* `capacity_per_gpu_bytes_per_s`: bandwidth per GPU available to traffic that *reaches* this tier
  (i.e. whose lowest common tier is this one), when every GPU under the subtree sends at once:
  nics_per_gpu * port_gbps (as bytes/s) divided by the product of the oversubscriptions of the tiers
  below it (collectives.md §3.3: hosts x B / r).
* `span_gpus`: GPUs of one plane under one switch-subtree of the tier, for a full subtree.
  Leaves: h, capped at E (rail-pure leaves: min(h, D), or floor(h/D)*D for packed whole rails).
  A pod of middle tier l takes h**l consecutive uplinks (h**(l-1) switches of h down ports: h child
  subtrees when non-blocking), so it spans min(E, floor(h**l * E / d_l)) GPUs. The top spans the plane.
"""

from __future__ import annotations

import math
from enum import Enum
from fractions import Fraction

from pydantic import Field

from designer.errors import SpecError
from designer.spec.base import Record
from designer.spec.system import NetworkTier
from designer.units import gbps_to_bytes_per_s


class Family(str, Enum):
    """Topology families (railonly.md §1, §7)."""

    rail_optimized = "rail-optimized"  # one full-bisection Clos over all N GPUs, rails at the leaves
    rail_only = "rail-only"  # one Clos per rail over N/K GPUs, no spine (Wang et al.)
    oversubscribed = "oversubscribed"  # rail-optimized with r:1 at one tier boundary (thin spine)
    fat_tree = "fat-tree"  # plain fat-tree: leaves take consecutive GPUs (whole domains)


class Convention(str, Enum):
    """How switches are counted: the paper's linear formula or integer physical structure."""

    paper = "paper"
    physical = "physical"


class ComponentPrices(Record):
    """Linear prices per switch port and per transceiver (railonly.md §2), so the MILP can reuse them."""

    name: str
    switch_port_usd: float = Field(ge=0)
    switch_port_w: float = Field(ge=0)
    transceiver_usd: float = Field(ge=0)
    transceiver_w: float = Field(ge=0)
    # the transceiver at the NIC end of an optical NIC link, where the NIC's cage takes another module
    # (a single-port one opposite a twin-port switch module); None: transceiver_usd / _w, as the papers count
    nic_transceiver_usd: float | None = Field(default=None, ge=0)
    nic_transceiver_w: float | None = Field(default=None, ge=0)
    dac_usd: float = Field(default=0.0, ge=0)
    dac_w: float = Field(default=0.0, ge=0)
    nic_usd: float = Field(default=0.0, ge=0)
    nic_w: float = Field(default=0.0, ge=0)
    source: str


# The power constants are not in the papers we read; railonly.md §2 infers them from v5's stated
# 37/75/60% power savings and its ~4.7 MW baseline (32,768 GPUs, R = 64).
_INFERRED_POWER = "power inferred, reproduces v5 37/75/60% power savings (railonly.md §2)"

RAILONLY_V1_PRICES = ComponentPrices(
    name="railonly-v1",
    switch_port_usd=748.0,
    switch_port_w=17.6,
    transceiver_usd=374.0,
    transceiver_w=9.25,
    source="Wang et al., arXiv 2307.12169 v1 (HotNets 2023): $748/port, $374/transceiver; NICs excluded; "
    + _INFERRED_POWER,
)

RAILONLY_V5_PRICES = ComponentPrices(
    name="railonly-v5",
    switch_port_usd=694.0,
    switch_port_w=17.6,
    transceiver_usd=199.0,
    transceiver_w=9.25,
    source="Wang et al., arXiv 2307.12169 v5 (HOTI 2024): $694/port, $199/transceiver; NICs excluded; "
    + _INFERRED_POWER,
)

TIER_NAMES = ("leaf", "spine", "core")  # level 1, 2, 3; level 4 and up are "tier4", ...

RAIL_PURE_LEAF_FAMILIES = (Family.rail_optimized, Family.oversubscribed)


class TierBOM(Record):
    """One switch tier, totals over all planes. Counts are floats only under Convention.paper."""

    name: str
    level: int = Field(ge=1)  # 1 = leaf
    switches: int | float
    down_ports_per_switch: int
    up_ports_per_switch: int
    down_links: int | float  # links from the tier below (NICs for the leaves) into this tier
    up_links: int | float  # links from this tier to the next; 0 at the top
    oversubscription: float = Field(ge=1.0)  # down_links / up_links at this tier's uplinks; 1.0 at the top
    capacity_per_gpu_bytes_per_s: float  # per GPU, for traffic reaching this tier (module docstring)
    span_gpus: int  # GPUs of one plane under one full switch-subtree of this tier


class BillOfMaterials(Record):
    family: Family
    convention: Convention
    n_gpus: int
    hb_domain_size: int
    radix: int
    port_gbps: float
    nics_per_gpu: int
    oversubscription: float
    oversubscribed_level: int | None
    n_planes: int
    endpoints_per_plane: int
    gpus_per_nic: int = 1  # GPUs behind one NIC (a shared NIC); endpoints are NICs
    tiers: tuple[TierBOM, ...]
    n_tiers: int
    switch_count: int | float
    switch_port_count: int | float
    link_count: int | float
    transceiver_count: int | float
    dac_count: int
    nic_count: int
    transceivers_by_link: dict[str, int | float]
    cost_usd: float
    switch_cost_usd: float
    optics_cost_usd: float
    dac_cost_usd: float
    nic_cost_usd: float
    power_w: float
    switch_power_w: float
    optics_power_w: float
    dac_power_w: float
    nic_power_w: float
    bisection_bandwidth_bytes_per_s: float  # see bill_of_materials
    prices_name: str


def tier_name(level: int) -> str:
    return TIER_NAMES[level - 1] if level <= len(TIER_NAMES) else f"tier{level}"


def link_name(lower_level: int) -> str:
    """Name of the link layer above `lower_level` (0 = the NICs): 'nic-leaf', 'leaf-spine', ..."""
    lower = "nic" if lower_level == 0 else tier_name(lower_level)
    return f"{lower}-{tier_name(lower_level + 1)}"


def check_radix(radix: int) -> None:
    if isinstance(radix, bool) or not isinstance(radix, int) or radix < 4 or radix % 2:
        raise SpecError(f"radix={radix!r}: must be an even integer >= 4 (half the ports face down, half up)")


def tiers_needed(n_endpoints: int, radix: int) -> int:
    """L(n, R): the smallest L >= 1 with n <= 2 * (R/2)**L (railonly.md §2)."""
    check_radix(radix)
    if isinstance(n_endpoints, bool) or not isinstance(n_endpoints, int) or n_endpoints < 1:
        raise SpecError(f"n_endpoints={n_endpoints!r}: must be an integer >= 1")
    half = radix // 2
    levels, capacity = 1, radix  # 2 * h**1
    while n_endpoints > capacity:
        levels += 1
        capacity *= half
    return levels


def exact_ratio(ratio: float) -> Fraction:
    """The oversubscription as an exact rational, so ceil(d / r) has no float rounding."""
    return Fraction(ratio).limit_denominator(10**6)


def ceil_div(numerator: int, denominator: int | Fraction) -> int:
    return math.ceil(Fraction(numerator) / Fraction(denominator))


def rail_leaf_count(hb_domain_size: int, n_domains: int, half: int) -> int:
    """Leaves of one rail-optimized plane: ceil(D/h) per rail, or whole short rails packed per leaf."""
    if n_domains <= half:
        return math.ceil(hb_domain_size / (half // n_domains))
    return hb_domain_size * math.ceil(n_domains / half)


def plane_layout(family: Family, n_gpus: int, hb_domain_size: int, nics_per_gpu: int,
                 gpus_per_nic: int = 1) -> tuple[int, int]:
    """(planes, endpoints per plane): rail-only has one plane per (NIC rank, NIC); the rest one per NIC
    index. With a NIC shared by `gpus_per_nic` GPUs, a domain has K / gpus_per_nic NIC ranks."""
    ranks = hb_domain_size // gpus_per_nic
    if family == Family.rail_only:
        return ranks * nics_per_gpu, n_gpus // hb_domain_size
    return nics_per_gpu, n_gpus // gpus_per_nic


# Bounds of a port's speed (1 Gb/s to 100 Tb/s) and of the rails per GPU (16): past them a value is a
# typo (a figure in bytes, an extra digit), and the counts it would give overflow the closed form
MIN_PORT_GBPS = 1.0
MAX_PORT_GBPS = 100_000.0
MAX_NICS_PER_GPU = 16


def validate_inputs(
    family: Family,
    n_gpus: int,
    hb_domain_size: int,
    radix: int,
    port_gbps: float,
    nics_per_gpu: int,
    oversubscription: float,
    oversubscribed_level: int | None,
    gpus_per_nic: int = 1,
) -> Family:
    """Shared by the closed form and the graph builder; returns the family as an enum."""
    try:
        family = Family(family)
    except ValueError:
        allowed = ", ".join(f.value for f in Family)
        raise SpecError(f"family={family!r}: must be one of {allowed}") from None
    check_radix(radix)
    for field, value in (("n_gpus", n_gpus), ("hb_domain_size", hb_domain_size), ("nics_per_gpu", nics_per_gpu)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SpecError(f"{field}={value!r}: must be an integer >= 1")
    if n_gpus > 100_000_000:
        raise SpecError(f"n_gpus={n_gpus}: beyond the supported range; allowed: 1 .. 100,000,000")
    if n_gpus % hb_domain_size:
        raise SpecError(f"n_gpus={n_gpus}: must be a multiple of hb_domain_size={hb_domain_size}")
    if isinstance(gpus_per_nic, bool) or not isinstance(gpus_per_nic, int) or gpus_per_nic < 1:
        raise SpecError(f"gpus_per_nic={gpus_per_nic!r}: must be an integer >= 1")
    if gpus_per_nic > 1 and (nics_per_gpu != 1 or hb_domain_size % gpus_per_nic):
        raise SpecError(f"gpus_per_nic={gpus_per_nic}: a shared NIC needs nics_per_gpu 1 and an HB domain "
                        f"({hb_domain_size}) that it divides")
    if not MIN_PORT_GBPS <= port_gbps <= MAX_PORT_GBPS:
        # from 1 Gb/s Ethernet to far past 1.6T ports; outside, a typo (a figure in bytes or bits)
        raise SpecError(f"port_gbps={port_gbps!r}: allowed: {MIN_PORT_GBPS:g} to {MAX_PORT_GBPS:g}")
    if nics_per_gpu > MAX_NICS_PER_GPU:
        raise SpecError(f"nics_per_gpu={nics_per_gpu}: allowed: 1 to {MAX_NICS_PER_GPU} (rails per GPU)")
    if not oversubscription >= 1.0 or math.isinf(oversubscription):
        raise SpecError(f"oversubscription={oversubscription!r}: must be a finite ratio >= 1 (1 = non-blocking)")
    if family != Family.oversubscribed:
        if oversubscription != 1.0:
            raise SpecError(
                f"oversubscription={oversubscription}: family {family.value} is non-blocking, "
                f"use family oversubscribed for r:1 > 1"
            )
        if oversubscribed_level is not None:
            raise SpecError(
                f"oversubscribed_level={oversubscribed_level}: only family oversubscribed takes a level"
            )
    return family


def resolve_oversubscribed_level(oversubscribed_level: int | None, n_tiers: int, radix: int) -> int:
    """The default boundary is the top one (a thin top tier over full-bisection pods / rails)."""
    if n_tiers < 2:
        raise SpecError(
            f"family=oversubscribed: radix={radix} serves the plane with one switch tier, "
            f"so there is no tier boundary to oversubscribe; use rail-optimized or a smaller radix"
        )
    level = n_tiers - 1 if oversubscribed_level is None else oversubscribed_level
    if isinstance(level, bool) or not isinstance(level, int) or not 1 <= level <= n_tiers - 1:
        raise SpecError(
            f"oversubscribed_level={oversubscribed_level!r}: must be an integer in 1..{n_tiers - 1} "
            f"(the boundary above that tier; this build has {n_tiers} tiers)"
        )
    return level


def _paper_tiers(endpoints: int, planes: int, radix: int, nic_bytes_per_s: float) -> tuple[TierBOM, ...]:
    """railonly.md §2: lower tiers 2E/R switches each (h down, h up), the top E/R (R down)."""
    levels = tiers_needed(endpoints, radix)
    half = radix // 2
    plane_links = endpoints * planes
    tiers = []
    for level in range(1, levels + 1):
        top = level == levels
        per_switch_down = radix if top else half
        switches = plane_links / per_switch_down
        if float(switches).is_integer():
            switches = int(switches)
        span = endpoints if top else min(endpoints, half**level)
        tiers.append(
            TierBOM(
                name=tier_name(level),
                level=level,
                switches=switches,
                down_ports_per_switch=per_switch_down,
                up_ports_per_switch=0 if top else half,
                down_links=plane_links,
                up_links=0 if top else plane_links,
                oversubscription=1.0,
                capacity_per_gpu_bytes_per_s=nic_bytes_per_s,
                span_gpus=span,
            )
        )
    return tuple(tiers)


def _physical_tiers(
    family: Family,
    endpoints: int,
    planes: int,
    hb_domain_size: int,
    radix: int,
    ratio: Fraction,
    boundary: int | None,
    nic_bytes_per_s: float,
) -> tuple[TierBOM, ...]:
    """The integer relations of the module docstring, totals over the planes."""
    levels = tiers_needed(endpoints, radix)
    half = radix // 2
    if levels == 1:
        planes_per_switch = radix // endpoints
        return (
            TierBOM(
                name=tier_name(1),
                level=1,
                switches=math.ceil(planes / planes_per_switch),
                down_ports_per_switch=radix,
                up_ports_per_switch=0,
                down_links=planes * endpoints,
                up_links=0,
                oversubscription=1.0,
                capacity_per_gpu_bytes_per_s=nic_bytes_per_s,
                span_gpus=endpoints,
            ),
        )
    domains = endpoints // hb_domain_size  # only used for rail-pure leaves, where endpoints = N
    tiers = []
    down = endpoints  # d_1: one NIC link per endpoint of the plane
    capacity = nic_bytes_per_s
    for level in range(1, levels + 1):
        top = level == levels
        if top:
            switches, up = math.ceil(down / radix), 0
        else:
            if level == 1 and family in RAIL_PURE_LEAF_FAMILIES:
                switches = rail_leaf_count(hb_domain_size, domains, half)
            else:
                switches = math.ceil(down / half)
            up = ceil_div(down, ratio) if level == boundary else down
            if up < switches:
                raise SpecError(
                    f"oversubscription={float(ratio)}: tier {tier_name(level)} has {switches * planes} switches "
                    f"but only {up * planes} uplinks, so some would have none; allowed r <= {down / switches:g}"
                )
        if level == 1 and family in RAIL_PURE_LEAF_FAMILIES:
            span = (half // domains) * domains if domains <= half else half
        elif level == 1:
            span = min(half, endpoints)
        elif top:
            span = endpoints
        else:
            span = min(endpoints, (half**level * endpoints) // down)
        ratio_here = down / up if up else 1.0
        tiers.append(
            TierBOM(
                name=tier_name(level),
                level=level,
                switches=switches * planes,
                down_ports_per_switch=radix if top else half,
                up_ports_per_switch=0 if top else half,
                down_links=down * planes,
                up_links=up * planes,
                oversubscription=ratio_here,
                capacity_per_gpu_bytes_per_s=capacity,
                span_gpus=span,
            )
        )
        capacity /= ratio_here
        down = up
    return tuple(tiers)


def bill_of_materials(
    family: Family | str,
    n_gpus: int,
    hb_domain_size: int,
    radix: int,
    *,
    prices: ComponentPrices,
    port_gbps: float = 400.0,
    nics_per_gpu: int = 1,
    oversubscription: float = 1.0,
    oversubscribed_level: int | None = None,
    convention: Convention | str = Convention.physical,
    dac_for_nic_links: bool = False,
    gpus_per_nic: int = 1,
) -> BillOfMaterials:
    """Switches, links, optics, cost, power and bisection of one family (module docstring).

    Cost = switches * R * switch_port_usd + transceivers * transceiver_usd + DACs * dac_usd
    + NICs * nic_usd (railonly.md §2 adds NICs and DACs per §7); power likewise with the _w prices.

    bisection_bandwidth_bytes_per_s: the min-cut capacity, one direction, between two halves of the
    GPUs that split every plane evenly (cut at whole tier-b subtrees when oversubscribed):
    P * min(E, u_b) / 2 * port bandwidth. A rail-only fabric has no path between planes, so under an
    arbitrary split its bisection would be 0; the plane-respecting bisection is what rail-aware
    traffic (railonly.md §1) uses.

    gpus_per_nic > 1: one NIC serves that many GPUs of a domain (e.g. 4 NICs in an 8-GPU node, two GPUs
    behind each PCIe switch). The fabric is then the one of a cluster of N / g endpoints in domains
    of K / g NIC ranks, and each GPU gets 1 / g of a port.
    """
    family = validate_inputs(
        family, n_gpus, hb_domain_size, radix, port_gbps, nics_per_gpu, oversubscription, oversubscribed_level,
        gpus_per_nic,
    )
    try:
        convention = Convention(convention)
    except ValueError:
        raise SpecError(f"convention={convention!r}: must be paper or physical") from None
    planes, endpoints = plane_layout(family, n_gpus, hb_domain_size, nics_per_gpu, gpus_per_nic)
    port_bytes_per_s = gbps_to_bytes_per_s(port_gbps)
    nic_bytes_per_s = port_bytes_per_s * nics_per_gpu / gpus_per_nic
    n_tiers = tiers_needed(endpoints, radix)

    boundary = None
    if family == Family.oversubscribed:
        boundary = resolve_oversubscribed_level(oversubscribed_level, n_tiers, radix)

    if convention == Convention.paper:
        if family == Family.oversubscribed:
            raise SpecError("family=oversubscribed: convention paper counts only full-bisection fabrics; use physical")
        if dac_for_nic_links:
            raise SpecError("dac_for_nic_links=True: convention paper puts optics on every link; use physical")
        tiers = _paper_tiers(endpoints, planes, radix, nic_bytes_per_s)
    else:
        tiers = _physical_tiers(
            family, endpoints, planes, hb_domain_size // gpus_per_nic, radix, exact_ratio(oversubscription), boundary,
            nic_bytes_per_s
        )

    link_layers = {link_name(0): tiers[0].down_links}
    for tier in tiers[:-1]:
        link_layers[link_name(tier.level)] = tier.up_links
    transceivers_by_link = {name: 2 * links for name, links in link_layers.items()}
    dac_count = 0
    if dac_for_nic_links:
        dac_count = link_layers[link_name(0)]
        transceivers_by_link[link_name(0)] = 0

    switch_count = sum(t.switches for t in tiers)
    switch_port_count = switch_count * radix
    transceiver_count = sum(transceivers_by_link.values())
    nic_count = n_gpus * nics_per_gpu // gpus_per_nic
    bisection_links = min(endpoints, tiers[boundary - 1].up_links // planes) if boundary else endpoints

    # the NIC end of every optical NIC link may take its own module (ComponentPrices.nic_transceiver_*)
    nic_ends = link_layers[link_name(0)] if not dac_for_nic_links else 0
    nic_t_usd = prices.transceiver_usd if prices.nic_transceiver_usd is None else prices.nic_transceiver_usd
    nic_t_w = prices.transceiver_w if prices.nic_transceiver_w is None else prices.nic_transceiver_w
    switch_cost_usd = switch_port_count * prices.switch_port_usd
    optics_cost_usd = (transceiver_count - nic_ends) * prices.transceiver_usd + nic_ends * nic_t_usd
    dac_cost_usd = dac_count * prices.dac_usd
    nic_cost_usd = nic_count * prices.nic_usd
    switch_power_w = switch_port_count * prices.switch_port_w
    optics_power_w = (transceiver_count - nic_ends) * prices.transceiver_w + nic_ends * nic_t_w
    dac_power_w = dac_count * prices.dac_w
    nic_power_w = nic_count * prices.nic_w

    return BillOfMaterials(
        family=family,
        convention=convention,
        n_gpus=n_gpus,
        hb_domain_size=hb_domain_size,
        radix=radix,
        port_gbps=port_gbps,
        nics_per_gpu=nics_per_gpu,
        gpus_per_nic=gpus_per_nic,
        oversubscription=oversubscription,
        oversubscribed_level=boundary,
        n_planes=planes,
        endpoints_per_plane=endpoints,
        tiers=tiers,
        n_tiers=n_tiers,
        switch_count=switch_count,
        switch_port_count=switch_port_count,
        link_count=sum(link_layers.values()),
        transceiver_count=transceiver_count,
        dac_count=dac_count,
        nic_count=nic_count,
        transceivers_by_link=transceivers_by_link,
        cost_usd=switch_cost_usd + optics_cost_usd + dac_cost_usd + nic_cost_usd,
        switch_cost_usd=switch_cost_usd,
        optics_cost_usd=optics_cost_usd,
        dac_cost_usd=dac_cost_usd,
        nic_cost_usd=nic_cost_usd,
        power_w=switch_power_w + optics_power_w + dac_power_w + nic_power_w,
        switch_power_w=switch_power_w,
        optics_power_w=optics_power_w,
        dac_power_w=dac_power_w,
        nic_power_w=nic_power_w,
        bisection_bandwidth_bytes_per_s=planes * bisection_links / 2 * port_bytes_per_s,
        prices_name=prices.name,
    )


def to_network_tiers(bom: BillOfMaterials, *, latency_per_tier_s: float = 1e-6) -> tuple[NetworkTier, ...]:
    """The plain tier list the perf model consumes (designer.spec.system.NetworkTier), lowest first.

    * bandwidth_per_gpu_bytes_per_s: nics_per_gpu * port_gbps in bytes/s, the line rate per GPU;
    * oversubscription: the cumulative oversubscription of the tiers below it (1.0 up to and including
      the oversubscribed tier), by which the perf model divides the line rate once (collectives.md
      §3.3: hosts x B / r), so the pair carries the tier's capacity_per_gpu_bytes_per_s.
    * latency_s: level * latency_per_tier_s (traffic reaching tier l climbs l tiers).
    * span_domains and cross_rail, per family:
      - rail-only: every tier stays inside one rail (cross_rail False); span = min(span_gpus, D).
      - rail-optimized / oversubscribed: tiers below the top are rail switches or pods of
        consecutive rail-major uplinks, counted as same-rail only (cross_rail False, conservative
        when a pod holds several whole rails); span = min(span_gpus, D). The top joins every rail.
      - fat-tree: leaves hold consecutive GPUs, so every tier crosses rails; span = span_gpus // K
        whole domains (at least 1); the top spans all D domains.
    """
    n_domains = bom.n_gpus // bom.hb_domain_size
    out = []
    cumulative_ratio = 1.0  # product of the oversubscriptions of the tiers below this one
    for tier in bom.tiers:
        top = tier.level == bom.n_tiers
        if bom.family == Family.rail_only:
            span, cross_rail = min(tier.span_gpus, n_domains), False
        elif top:
            span, cross_rail = n_domains, True
        elif bom.family == Family.fat_tree:
            # span_gpus counts endpoints (NICs), K / g of them per domain
            span, cross_rail = max(1, tier.span_gpus * bom.gpus_per_nic // bom.hb_domain_size), True
        else:
            span, cross_rail = min(tier.span_gpus, n_domains), bom.hb_domain_size // bom.gpus_per_nic == 1
        out.append(
            NetworkTier(
                name=tier.name,
                span_domains=max(1, span),
                cross_rail=cross_rail,
                bandwidth_per_gpu_bytes_per_s=tier.capacity_per_gpu_bytes_per_s * cumulative_ratio,
                latency_s=tier.level * latency_per_tier_s,
                oversubscription=cumulative_ratio,
            )
        )
        cumulative_ratio *= tier.oversubscription
    return tuple(out)
