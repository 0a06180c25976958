"""Cable lengths from the physical layout, and the medium every link layer gets.

Sources: /work/shared/reference/prices-and-layout.md §3 (rack and row pitch, where leaves sit, the
cable length model and its worked examples), §2a (media reach, lane-rate rules) and suggested change
B.18 (pick the cheapest medium whose reach covers the link times a margin).

Floor
-----
Compute racks stand in rows of `racks_per_row` at `rack_width_m` pitch, rows `row_pitch_m` apart
centre to centre. A cable between two racks leaves the first upwards, runs along the trays and drops
into the second (prices-and-layout.md §3, "cable length model"):

    L = vertical_slack_m + rack_width_m * racks along the row + row_pitch_m * rows crossed

A cable inside one rack is `in_rack_link_m` long. Racks are numbered in filling order; the NICs of a
rack are those of the GPUs in it (whole HB domains per rack, or a domain over several racks).

Leaf groups: the racks whose NICs one leaf switch (with the leaves of the other rails and planes
beside it) takes, `leaf_span_racks` consecutive racks. A group never straddles two rows when it fits
in one: a row holds floor(racks_per_row / span) whole groups (its unused slots stay free). A group
longer than a row takes whole rows of its own.

Where the leaves of a group sit (`leaf_placement`):
  * in_rack:       in the group's middle rack (a group of one rack: top of rack, every link in-rack);
  * middle_of_row: in a network rack in the middle of the row (SuperPOD H100 SU: one leaf rack, four
                   compute racks each side), the group's middle row when it spans several;
  * end_of_row:    in a network rack closing the row (NVIDIA: the tier-1 switch moves to the end of
                   the row in AI factories);
  * central:       all leaves together in the middle of the floor (the B.18 worked examples).
A network rack in the middle of a row takes a slot there, so the compute racks after it move one
pitch on. One row of 16 with the leaf mid-row: the farthest rack is 8 pitches away; at the end of
the row: 16.

Switches above the leaves (spines, cores) stand in one network area (`spine_placement`): `central`
(centred on the floor) or `end_of_hall` (beyond the last compute row). It holds
ceil(switches / switches_per_network_rack) racks in rows of racks_per_row; a leaf-to-spine link runs
from the leaf's rack to the far side of the area (its centre plus half its extent, the worst switch
of the area), a link between two upper tiers across the whole area.

Link length distribution: per layer (0 = NIC-leaf, 1 = leaf-spine, 2 = spine-core, ...) every link's
length, kept as (length, links) pairs; its worst is the longest. The medium a layer gets is the
cheapest of the candidates whose reach covers margin x the layer's worst link (one part number per
layer, as reference architectures cable a tier); `LinkLayer.bands` also reports, per reach band,
how many links the cheapest medium covering that band could serve.

Everything here is a pure function of its arguments; records are frozen.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from designer.errors import SpecError
from designer.network.topology import RAIL_PURE_LEAF_FAMILIES, Family, link_name
from designer.spec.base import Record
from designer.spec.network_study import AIR_RACK_POWER_W, COPPER_MEDIA_KINDS, LIQUID_RACK_POWER_W, FloorLayout

# Media kinds (designer.spec.catalog.MediaKind values) that are copper cables: no transceiver.
COPPER_KINDS = COPPER_MEDIA_KINDS
# The kind of a passive copper cable, which no vendor offers at 200G/lane: NVIDIA's 200G-PAM4 list
# has single-mode transceivers and linear active copper only, DAC being "too short"
# (docs.nvidia.com/networking/display/800g200gpam4list, prices-and-layout.md §2a).
PASSIVE_DAC_KIND = "dac"
PASSIVE_DAC_MAX_LANE_GBPS = 100.0
# The lane rate of a port whose NIC and switch do not state one: 4-lane OSFP/QSFP ports (HDR 4 x 50G,
# NDR / 400GbE 4 x 100G-PAM4, XDR 800G 4 x 200G-PAM4: prices-and-layout.md §2a and §2c), 200G the
# fastest lane in the reference set (a 1.6T port is 8 x 200G).
DEFAULT_LANES_PER_PORT = 4
MAX_LANE_GBPS = 200.0
LENGTH_DECIMALS = 3  # lengths are kept to the millimetre, so equal runs group exactly


# ----------------------------------------------------------------------------------------------
# Racks: GPUs per rack, racks per fabric, racks per leaf
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RackPlan:
    """How a platform fills racks: whole HB domains per rack, or one domain over several racks."""

    gpus_per_rack: int
    domains_per_rack: int  # >= 1, or 0 when a domain fills several racks
    racks_per_domain: int  # 1 unless a domain fills several racks
    cooling: str
    rack_power_w: float | None  # the power limit the count was derived from; None when given

    def racks(self, n_domains: int) -> int:
        if n_domains <= 0:
            return 0
        if self.domains_per_rack:
            return -(-n_domains // self.domains_per_rack)
        return n_domains * self.racks_per_domain


def rack_plan(layout: FloorLayout, *, hb_domain_size: int, host_gpus: int, domain_power_w: float,
              stated_gpus_per_rack: int | None = None, platform: str = "platform") -> RackPlan:
    """GPUs per rack: `layout.gpus_per_rack` if given, else the platform's own figure
    (`stated_gpus_per_rack`), else derived from the rack power limit.

    Derived: an HB domain larger than one host is a rack-scale system (NVL72: the NVLink spine is the
    rack's copper backplane), liquid-cooled by default, taking ceil(domain power / rack limit) racks
    (GB200 NVL72 at 120 kW and GB300 at 142 kW: one rack of 72, prices-and-layout.md §3). A domain
    of one host (8-GPU HGX/DGX) is air-cooled by default; a rack takes floor(limit / host power)
    hosts: DGX H100 at 10.2 kW under 41 kW gives 4 (the SuperPOD H100 rack), DGX B200 at 14.3 kW
    gives 2 (the B200 RA's > 25 kW rack); liquid cooling (142 kW) gives 9 B200 hosts. Rack space
    is not modelled: give gpus_per_rack where it binds."""
    k = hb_domain_size
    rack_scale = k > host_gpus
    cooling = layout.cooling or ("liquid" if rack_scale else "air")
    given = layout.gpus_per_rack or stated_gpus_per_rack
    if given is not None:
        if given % host_gpus:
            raise SpecError(f"field 'choices.layout.gpus_per_rack' = {given}: splits a {host_gpus}-GPU host of "
                            f"platform {platform} between racks; allowed: a multiple of {host_gpus}")
        if k <= given:
            return RackPlan(given, given // k, 1, cooling, None)
        return RackPlan(given, 0, -(-k // given), cooling, None)
    limit = layout.rack_power_w or (LIQUID_RACK_POWER_W if cooling == "liquid" else AIR_RACK_POWER_W)
    if rack_scale:
        rpd = max(1, math.ceil(domain_power_w / limit - 1e-9))
        return RackPlan(-(-k // rpd), 1 if rpd == 1 else 0, rpd, cooling, limit)
    host_w = domain_power_w / k * host_gpus
    hosts = max(1, math.floor(limit / host_w + 1e-9)) if host_w > 0 else 1
    gpus = hosts * host_gpus
    return RackPlan(gpus, max(1, gpus // k), 1, cooling, limit)


def leaf_span_racks(plan: RackPlan, family: Family, *, n_tiers: int, radix: int, n_domains: int,
                    nic_ranks: int, gpus_per_nic: int) -> int:
    """Racks whose NICs one leaf takes (designer.network.topology's leaves), at least 1, at most all.

    One switch tier: every plane on the one tier, so all racks. Rail-pure leaves (rail-optimized,
    oversubscribed) and rail-only leaves take one rail of h = R/2 consecutive domains (all of them
    when rails are packed whole, D <= h, in the rail-pure families); fat-tree leaves take h
    consecutive endpoints (h * gpus_per_nic GPUs)."""
    n_racks = plan.racks(n_domains)
    h = radix // 2
    if n_tiers == 1 or (family in RAIL_PURE_LEAF_FAMILIES and n_domains <= h):
        return max(1, n_racks)
    if family == Family.fat_tree:
        span = -(-h * gpus_per_nic // plan.gpus_per_rack)
    else:
        span = -(-h // plan.domains_per_rack) if plan.domains_per_rack else h * plan.racks_per_domain
    return max(1, min(span, n_racks))


def rack_nic_links(plan: RackPlan, n_domains: int, links_per_domain: int) -> list[int]:
    """NIC-leaf links out of each rack, in filling order (they sum to n_domains * links_per_domain)."""
    out: list[int] = []
    if plan.domains_per_rack:
        full, rest = divmod(n_domains, plan.domains_per_rack)
        out = [plan.domains_per_rack * links_per_domain] * full + ([rest * links_per_domain] if rest else [])
        return out
    base, extra = divmod(links_per_domain, plan.racks_per_domain)
    one = [base + (1 if i < extra else 0) for i in range(plan.racks_per_domain)]
    return one * n_domains


# ----------------------------------------------------------------------------------------------
# The floor: rack positions, leaf positions, lengths
# ----------------------------------------------------------------------------------------------


class _Floor:
    """Positions on a floor of n_racks compute racks in leaf groups of `span` racks (module docstring).
    x is in rack pitches along the row, y in rows."""

    def __init__(self, layout: FloorLayout, n_racks: int, span: int) -> None:
        if n_racks < 1:
            raise SpecError(f"n_racks={n_racks}: a floor needs at least one rack")
        # the default floor: about square for this many racks (a combination's floor is planned once,
        # for the largest cluster the study may build, so lengths stay monotone in its domain count)
        layout = layout.for_racks(n_racks)
        self.lay = layout
        self.n = n_racks
        self.span = max(1, min(span, n_racks))
        rpr = layout.racks_per_row
        # A row of blocks (racks_per_block; the default floor's blocks of DEFAULT_RACKS_PER_ROW side by
        # side): leaves at the end or the middle of the row close (or split) each block's own row, as a
        # scalable unit keeps its leaves beside its racks, wherever a leaf group fits in one block.
        # Central or in-rack leaves, or a group longer than a block, keep the whole row.
        self.block = rpr
        block = layout.racks_per_block or rpr
        if block < rpr and self.span <= block and layout.leaf_placement in ("end_of_row", "middle_of_row"):
            self.block = block
        self.n_groups = -(-n_racks // self.span)
        if self.span <= rpr:
            self.groups_per_block = self.block // self.span
            self.groups_per_row = (rpr // self.block) * self.groups_per_block
            self.rows_per_group = 1
            self.n_rows = -(-self.n_groups // self.groups_per_row)
            self.row_len = n_racks if self.n_rows == 1 else self.groups_per_row * self.span
        else:
            self.groups_per_block = 0
            self.groups_per_row = 0
            self.rows_per_group = -(-self.span // rpr)
            last = n_racks - (self.n_groups - 1) * self.span
            self.n_rows = (self.n_groups - 1) * self.rows_per_group + -(-last // rpr)
            self.row_len = rpr
        self.blocked = self.block < rpr
        self.gap = layout.leaf_placement in ("middle_of_row", "central")
        if self.blocked:
            # each block of a row is followed by (end of row) or split by (middle of row) its network
            # rack; the floor's centre line is the middle of its widest row, network racks included
            # (of the racks there are on a floor of one row, so that it moves on as the row fills)
            self.block_pitch = self.block + 1
            if self.n_rows == 1:
                last = self.row_slot(n_racks - 1)[1]
                extent = max(self.x_of_slot(last), int(self.block_site_x(last))) + 1
            else:
                extent = (rpr // self.block) * self.block_pitch
            self.mid = extent // 2
        else:
            self.mid = self.row_len // 2  # x of a mid-row network rack

    # rack j -> (group, row, slot)
    def group_of(self, j: int) -> int:
        return j // self.span

    def row_slot(self, j: int) -> tuple[int, int]:
        g, i = divmod(j, self.span)
        if self.groups_per_row:
            b, k = divmod(g % self.groups_per_row, self.groups_per_block)
            return g // self.groups_per_row, b * self.block + k * self.span + i
        rpr = self.lay.racks_per_row
        return g * self.rows_per_group + i // rpr, i % rpr

    def x_of_slot(self, slot: int) -> int:
        if self.blocked:
            b, s = divmod(slot, self.block)
            split = self.lay.leaf_placement == "middle_of_row" and s >= self.block // 2
            return b * self.block_pitch + s + (1 if split else 0)
        return slot + (1 if self.gap and slot >= self.mid else 0)

    def block_site_x(self, slot: int) -> float:
        """x of the network rack of the block holding `slot` (a blocked floor): after its last slot
        (end of row), or between its halves (middle of row)."""
        b = slot // self.block
        if self.lay.leaf_placement == "middle_of_row":
            return b * self.block_pitch + self.block // 2
        if self.n_rows > 1:  # the floor's rows are laid out whole: each block's rack closes its slots
            return b * self.block_pitch + self.block
        # a floor of one row grows rack by rack: the last block's rack follows its last compute rack
        last = self.row_slot(self.n - 1)[1]
        filled = self.block if b < last // self.block else last - b * self.block + 1
        return b * self.block_pitch + filled

    def group_racks(self, g: int) -> range:
        return range(g * self.span, min((g + 1) * self.span, self.n))

    def row_racks(self, r: int) -> range:
        if self.groups_per_row:
            per = self.groups_per_row * self.span
            return range(r * per, min((r + 1) * per, self.n))
        g, k = divmod(r, self.rows_per_group)
        rpr = self.lay.racks_per_row
        lo = g * self.span + k * rpr
        return range(lo, min(lo + rpr, (g + 1) * self.span, self.n))

    def centre_row(self) -> int:
        return (self.n_rows - 1) // 2

    def leaf_site(self, g: int) -> tuple[float, float, int | None]:
        """(x, row, rack) of the leaves of group g; rack is the compute rack holding them (in_rack)."""
        p = self.lay.leaf_placement
        racks = self.group_racks(g)
        if p == "central":
            return self.mid, self.centre_row(), None
        if p == "in_rack":
            jm = racks[(len(racks) - 1) // 2]
            r, s = self.row_slot(jm)
            return self.x_of_slot(s), r, jm
        first, last = self.row_slot(racks[0])[0], self.row_slot(racks[-1])[0]
        row = (first + last) // 2
        if self.blocked:
            return self.block_site_x(self.row_slot(racks[0])[1]), row, None
        return (self.mid if p == "middle_of_row" else self.row_len), row, None

    def nic_link_m(self, j: int) -> float:
        x, row, rack = self.leaf_site(self.group_of(j))
        if rack == j:
            return self.lay.in_rack_link_m
        r, s = self.row_slot(j)
        return self._run(abs(self.x_of_slot(s) - x), abs(r - row))

    def _run(self, racks_along: float, rows_crossed: float) -> float:
        lay = self.lay
        return round(lay.vertical_slack_m + lay.rack_width_m * racks_along + lay.row_pitch_m * rows_crossed,
                     LENGTH_DECIMALS)

    # the network area of the upper tiers
    def area(self, upper_switches: int) -> tuple[int, int, float]:
        """(racks along, rows, centre row) of the network area holding `upper_switches` switches."""
        n_net = max(1, -(-upper_switches // self.lay.switches_per_network_rack))
        cols = min(n_net, self.lay.racks_per_row)
        rows = -(-n_net // self.lay.racks_per_row)
        if self.lay.spine_placement == "central":
            centre = float(self.centre_row())
        else:  # end_of_hall: the area's first row one pitch beyond the last compute row
            centre = self.n_rows + (rows - 1) / 2
        return cols, rows, centre

    def leaf_spine_m(self, g: int, upper_switches: int) -> float:
        cols, rows, centre = self.area(upper_switches)
        x, row, _ = self.leaf_site(g)
        return self._run(abs(x - self.mid) + (cols - 1) / 2, abs(row - centre) + (rows - 1) / 2)

    def across_area_m(self, upper_switches: int) -> float:
        cols, rows, _ = self.area(upper_switches)
        return self._run(cols - 1, rows - 1)

    def segments(self, r: int) -> list[range]:
        """The racks of row r, one range per leaf site in it: per group for in-rack leaves, the whole
        row otherwise (the groups of a row share its leaf site)."""
        if self.groups_per_row and self.lay.leaf_placement == "in_rack":
            g0 = r * self.groups_per_row
            return [self.group_racks(g) for g in range(g0, min(g0 + self.groups_per_row, self.n_groups))]
        row = self.row_racks(r)
        if self.blocked:  # one leaf site per block
            per = self.groups_per_block * self.span
            return [range(lo, min(lo + per, row.stop)) for lo in range(row.start, row.stop, per)]
        return [row]

    def extreme_racks(self) -> set[int]:
        """Racks among which the longest NIC-leaf link lies (see layer_worst_m): the ends of every
        group's stretch of the candidate rows (a run of racks in one row with one leaf site grows
        longer towards its ends), and the leaf racks of in-rack leaves."""
        rows = {0, max(0, self.n_rows - 2), self.n_rows - 1}
        for g in {0, max(0, self.n_groups - 2), self.n_groups - 1}:
            racks = self.group_racks(g)
            first, last = self.row_slot(racks[0])[0], self.row_slot(racks[-1])[0]
            rows |= {first, max(first, last - 1), last}
        out: set[int] = set()
        for r in rows:
            for seg in self.segments(r):
                if len(seg):
                    out.update((seg[0], seg[-1]))
                    if self.lay.leaf_placement == "in_rack":
                        site = self.leaf_site(self.group_of(seg[0]))[2]
                        if site is not None:
                            out.add(site)
        return out


def _layer_names(n_layers: int) -> tuple[str, ...]:
    return tuple(link_name(i) for i in range(n_layers))


def layer_worst_m(layout: FloorLayout, *, n_racks: int, leaf_span_racks: int, n_layers: int,
                  upper_switches: int = 0, nic_link_length_m: float | None = None) -> tuple[float, ...]:
    """The longest link of each layer (0 = NIC-leaf), without the whole distribution.

    The longest NIC-leaf link is in the first, last or second-to-last row of the floor or of the
    first, last or second-to-last leaf group: full rows (and groups longer than a row) are alike
    relative to their own leaves, and with central leaves the rows farthest from the centre are the
    first and the last (the last may be partial, so the last full row is checked too); within a row,
    at an end of a group's stretch. The longest leaf-spine link starts at a group of the same rows.
    `layer_lengths` computes every link; the tests check the two agree."""
    if n_layers < 1:
        raise SpecError(f"n_layers={n_layers}: a fabric has at least the NIC-leaf layer")
    floor = _Floor(layout, n_racks, leaf_span_racks)
    racks = floor.extreme_racks()
    nic = nic_link_length_m if nic_link_length_m is not None else max(floor.nic_link_m(j) for j in racks)
    out = [nic]
    if n_layers >= 2:
        groups = {floor.group_of(j) for j in racks}
        out.append(max(floor.leaf_spine_m(g, upper_switches) for g in groups))
    out += [floor.across_area_m(upper_switches)] * (n_layers - 2)
    return tuple(out)


def _apportion(total: int, weights: Sequence[int]) -> list[int]:
    """Integers proportional to `weights` summing to `total` (largest remainder; ties to the first)."""
    w = sum(weights)
    if w == 0:
        return [0] * len(weights)
    raw = [total * x / w for x in weights]
    base = [math.floor(v) for v in raw]
    left = total - sum(base)
    order = sorted(range(len(weights)), key=lambda i: (-(raw[i] - base[i]), i))
    for i in order[:left]:
        base[i] += 1
    return base


def layer_lengths(layout: FloorLayout, *, rack_links: Sequence[int], leaf_span_racks: int,
                  upper_links: Sequence[int] = (), upper_switches: int = 0,
                  nic_link_length_m: float | None = None) -> tuple[tuple[tuple[float, int], ...], ...]:
    """Every link's length, per layer, as sorted (length_m, links) pairs.

    rack_links: NIC-leaf links out of each rack, in filling order; upper_links: links of the layers
    above (leaf-spine, spine-core, ...), totals over the planes. Leaf-spine links of a group are its
    share of the layer in proportion to its NIC links (the uplinks of its leaves)."""
    floor = _Floor(layout, len(rack_links), leaf_span_racks)
    nic: Counter[float] = Counter()
    group_links = [0] * floor.n_groups
    for j, links in enumerate(rack_links):
        if links:
            nic[nic_link_length_m if nic_link_length_m is not None else floor.nic_link_m(j)] += links
            group_links[floor.group_of(j)] += links
    layers = [nic]
    if upper_links:
        ls: Counter[float] = Counter()
        for g, n in enumerate(_apportion(upper_links[0], group_links)):
            if n:
                ls[floor.leaf_spine_m(g, upper_switches)] += n
        layers.append(ls)
        for links in upper_links[1:]:
            layers.append(Counter({floor.across_area_m(upper_switches): links} if links else {}))
    return tuple(tuple(sorted(c.items())) for c in layers)


# ----------------------------------------------------------------------------------------------
# Media: the candidates of a layer and the cheapest that reaches
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MediumOption:
    """A catalog medium priced per link: a transceiver at both ends (optic, LPO) or one cable
    (DAC, active copper, AOC; a splitter cable serves ports_per_module links). An optical NIC-leaf
    link may end in another module at the NIC (`nic_end`, nic_link_option): `id` is then the switch
    end's module, and the prices and the reach are the link's."""

    id: str
    kind: str
    reach_m: float
    usd_per_link: float
    w_per_link: float
    ports_per_module: int = 1
    nic_end: str | None = None  # the single-port module in the NIC's cage; None: `id` at both ends

    @property
    def label(self) -> str:
        """The link's modules: the switch end's, then the NIC end's where it differs."""
        return self.id if self.nic_end is None else f"{self.id}+{self.nic_end}"

    @property
    def copper(self) -> bool:
        return self.kind in COPPER_KINDS

    @property
    def transceivers_per_link(self) -> int:
        """Optical ends per link: two (a module at each end, or an AOC's two built-in ends)."""
        return 0 if self.copper else 2


def medium_option(m: Any, role: str = "link") -> MediumOption:
    """A catalog LinkMedia priced per link: price / ports_per_module per port share, times 2 for a
    one-ended module (a transceiver at each end), times 1 for a whole cable."""
    for attr in ("price_usd", "power_w"):
        if getattr(m, attr) is None:
            raise SpecError(f"catalog media '{m.id}' has no {attr}; add it in a catalog file to use it as the {role} medium")
    ends = 2 // max(1, min(2, m.ends_per_module))
    per_port = 1.0 / m.ports_per_module
    kind = m.kind.value if hasattr(m.kind, "value") else str(m.kind)
    return MediumOption(id=m.id, kind=kind, reach_m=float(m.reach_m), usd_per_link=m.price_usd * per_port * ends,
                        w_per_link=m.power_w * per_port * ends, ports_per_module=m.ports_per_module)


def nic_end_modules(switch_end: Any, candidates: Sequence[Any], port_gbps: float) -> list[Any]:
    """The modules a NIC's cage can take opposite `switch_end` on a NIC-leaf link: single-port,
    one-ended modules (no cable) of the port's speed, of the switch end's kind and reach class (one
    fibre type end to end), among `candidates` (already eligible at the port's speed and lane rate).
    A NIC port holds one module per port: ConnectX-7 a 400G single-port OSFP, ConnectX-8 an 800G
    single-port OSFP224, while the switch side takes twin-port modules (prices-and-layout.md §2a: "400G
    single-port OSFP SR4/DR4 (NIC side, CX-7)", catalog osfp_400g_sr4 / osfp_400g_dr4 /
    osfp_800g_dr4_nic). Each is a separate option, so a link's reach is chosen by its length. Empty:
    the catalog has none (or `switch_end` is a cable)."""
    if switch_end.ends_per_module != 1:
        return []
    return [m for m in candidates if m.ports_per_module == 1 and m.ends_per_module == 1 and m.gbps == port_gbps
            and m.kind == switch_end.kind and m.reach_class == switch_end.reach_class
            and m.price_usd is not None and m.power_w is not None]


def nic_end_module(switch_end: Any, candidates: Sequence[Any], port_gbps: float) -> Any | None:
    """The NIC end a fixed-price bill of materials takes (one price per transceiver): of nic_end_modules,
    the cheapest reaching as far as the switch end, else the longest reaching. None: none."""
    fits = nic_end_modules(switch_end, candidates, port_gbps)
    if not fits:
        return None
    far = [m for m in fits if m.reach_m >= switch_end.reach_m]
    return (min(far, key=lambda m: (m.price_usd, m.power_w, m.id)) if far
            else max(fits, key=lambda m: (m.reach_m, -m.price_usd, m.id)))


def nic_link_option(switch_end: Any, nic_end: Any | None) -> MediumOption:
    """An optical NIC-leaf link priced end by end: the switch end's share of its (twin-port) module and
    the NIC end's single-port module (nic_end_modules). Where the catalog has no NIC-side module of the
    switch module's class, or the switch module is itself single-port, one module type serves both ends."""
    s = medium_option(switch_end)
    if nic_end is None or nic_end.id == switch_end.id:
        return s
    n = medium_option(nic_end)
    return MediumOption(id=s.id, kind=s.kind, reach_m=min(s.reach_m, n.reach_m),
                        usd_per_link=(s.usd_per_link + n.usd_per_link) / 2, w_per_link=(s.w_per_link + n.w_per_link) / 2,
                        ports_per_module=s.ports_per_module, nic_end=n.id)


def link_lane_gbps(port_gbps: float, *stated: float | None) -> float:
    """The lane rate of a link: the fastest its ends state (NIC, switch), else port / 4 lanes up to 200G."""
    known = [s for s in stated if s is not None]
    if known:
        return float(max(known))
    return min(port_gbps / DEFAULT_LANES_PER_PORT, MAX_LANE_GBPS)


def eligible(m: Any, *, port_gbps: float, lane_gbps: float, reach_rule: Any = None) -> bool:
    """Whether catalog medium `m` can carry a port of `port_gbps` at `lane_gbps`: per-port speed at
    least the port's; no passive DAC above 100G/lane; a medium stating a lane rate must match it (PAM4
    modules do not change rate: "200G-PAM4 optics cannot downshift to 100G", prices-and-layout.md §2a);
    and, with `reach_rule(reach_class, lane)` (the catalog's reach rules), a class not offered at
    that lane rate is out."""
    kind = m.kind.value if hasattr(m.kind, "value") else str(m.kind)
    if m.gbps < port_gbps:
        return False
    if kind == PASSIVE_DAC_KIND and lane_gbps > PASSIVE_DAC_MAX_LANE_GBPS:
        return False
    lane = getattr(m, "lane_gbps", None)
    if lane is not None and lane != lane_gbps:
        return False
    if reach_rule is not None:
        cls = getattr(m, "effective_reach_class", None)
        rule = reach_rule(cls, lane_gbps) if cls is not None else None
        if rule is not None and not rule.offered:
            return False
    return True


def cheapest_reaching(options: Sequence[MediumOption], length_m: float, margin: float) -> MediumOption | None:
    """The cheapest option (then lowest power, then id) whose reach covers margin x length."""
    need = length_m * margin
    fits = [o for o in options if o.reach_m >= need - 1e-9]
    return min(fits, key=lambda o: (o.usd_per_link, o.w_per_link, o.id)) if fits else None


def longest(options: Sequence[MediumOption]) -> MediumOption | None:
    return max(options, key=lambda o: (o.reach_m, -o.usd_per_link, o.id)) if options else None


def no_reach_message(layer: str, length_m: float, margin: float, options: Sequence[MediumOption],
                     port_gbps: float, where: str = "") -> str:
    """One line: the link that no candidate reaches, and the longest candidate there is."""
    top = longest(options)
    have = (f"the longest {port_gbps:g}G medium allowed is {top.id} ({top.reach_m:g} m)" if top is not None
            else f"no {port_gbps:g}G medium is allowed there")
    return (f"{layer} links of {length_m:.1f} m{where} need a reach of {length_m * margin:.1f} m "
            f"(x{margin:g} length margin); {have}")


# ----------------------------------------------------------------------------------------------
# Reports
# ----------------------------------------------------------------------------------------------


class LengthBand(Record):
    """Links whose length times the margin falls within a reach band (longer than the previous band's
    `reach_m`, within this one's), and the cheapest medium reaching that far (None: none does)."""

    reach_m: float | None  # the band's reach; None: beyond every candidate
    links: int
    longest_m: float
    medium: str | None


class LinkLayer(Record):
    """One link layer: its links, their lengths, the medium it is cabled with."""

    name: str
    links: int
    worst_m: float
    lengths: tuple[tuple[float, int], ...]  # (length_m, links), sorted
    medium: str | None  # the layer's medium: the cheapest covering the worst link
    bands: tuple[LengthBand, ...] = ()

    @property
    def mean_m(self) -> float:
        return sum(L * n for L, n in self.lengths) / self.links if self.links else 0.0


class FabricLayout(Record):
    """The floor one design stands on and the length of every link."""

    n_racks: int
    n_rows: int
    racks_per_row: int
    gpus_per_rack: int
    cooling: str
    leaf_placement: str
    spine_placement: str
    leaf_span_racks: int
    network_racks: int  # racks of the upper tiers' switches (0 with one tier)
    length_margin: float
    layers: tuple[LinkLayer, ...]


def length_bands(lengths: Sequence[tuple[float, int]], options: Sequence[MediumOption], margin: float) -> tuple[LengthBand, ...]:
    """The links of a layer by reach band: the bands end at the candidates' distinct reaches, and each
    names the cheapest candidate reaching its end (so covering every link in it)."""
    reaches = sorted({o.reach_m for o in options})
    counts: dict[float | None, list] = {}
    for L, n in lengths:
        band = next((r for r in reaches if r >= L * margin - 1e-9), None)
        c = counts.setdefault(band, [0, 0.0])
        c[0] += n
        c[1] = max(c[1], L)
    out = []
    for band in sorted(b for b in counts if b is not None):
        n, top = counts[band]
        m = min((o for o in options if o.reach_m >= band), key=lambda o: (o.usd_per_link, o.w_per_link, o.id))
        out.append(LengthBand(reach_m=band, links=n, longest_m=top, medium=m.id))
    if None in counts:
        n, top = counts[None]
        out.append(LengthBand(reach_m=None, links=n, longest_m=top, medium=None))
    return tuple(out)


def fabric_layout(layout: FloorLayout, plan: RackPlan, *, n_domains: int, nic_links_per_domain: int,
                  leaf_span_racks: int, upper_links: Sequence[int] = (), upper_switches: int = 0,
                  layer_options: Sequence[Sequence[MediumOption]] = (),
                  layer_media: Sequence[str | None] = (),
                  nic_link_length_m: float | None = None) -> FabricLayout:
    """The whole layout of one design: every layer's lengths, its medium and its reach bands.

    layer_options: the candidate media of each layer (for the bands); layer_media: the medium each
    layer is priced with (the design's), else the cheapest candidate covering its worst link."""
    rack_links = rack_nic_links(plan, n_domains, nic_links_per_domain)
    floor = _Floor(layout, len(rack_links), leaf_span_racks)
    dists = layer_lengths(layout, rack_links=rack_links, leaf_span_racks=leaf_span_racks, upper_links=upper_links,
                          upper_switches=upper_switches, nic_link_length_m=nic_link_length_m)
    names = _layer_names(len(dists))
    layers = []
    for i, (name, dist) in enumerate(zip(names, dists)):
        opts = tuple(layer_options[i]) if i < len(layer_options) else ()
        worst = max((L for L, _ in dist), default=0.0)
        if i < len(layer_media):
            medium = layer_media[i]
        else:
            best = cheapest_reaching(opts, worst, layout.length_margin)
            medium = best.id if best is not None else None
        layers.append(LinkLayer(name=name, links=sum(n for _, n in dist), worst_m=worst, lengths=dist, medium=medium,
                                bands=length_bands(dist, opts, layout.length_margin) if opts else ()))
    n_net = -(-upper_switches // layout.switches_per_network_rack) if upper_links else 0
    return FabricLayout(n_racks=floor.n, n_rows=floor.n_rows, racks_per_row=floor.lay.racks_per_row,
                        gpus_per_rack=plan.gpus_per_rack, cooling=plan.cooling, leaf_placement=layout.leaf_placement,
                        spine_placement=layout.spine_placement, leaf_span_racks=floor.span, network_racks=n_net,
                        length_margin=layout.length_margin, layers=tuple(layers))


__all__ = [
    "COPPER_KINDS", "FabricLayout", "LengthBand", "LinkLayer", "MediumOption", "RackPlan", "cheapest_reaching",
    "eligible", "fabric_layout", "layer_lengths", "layer_worst_m", "leaf_span_racks", "length_bands",
    "link_lane_gbps", "longest", "medium_option", "nic_end_module", "nic_end_modules",
    "nic_link_option", "no_reach_message",
    "rack_nic_links", "rack_plan",
]
