"""The network sizing MILP, as a flat list of `define_*` functions (PyPSA style).

Every function is pure model building: it takes the model and frozen inputs and adds components.
Nothing here calls a solver (designer.network.solve does).

Formulation
-----------
The discrete choices (topology family, HB platform and so its domain size K, NIC and NICs per GPU,
switch model and port mode (radix R, port speed), oversubscription ratio r, number of switch tiers L,
NIC-link media) are enumerated in Python into *combinations* c (`enumerate_combos`), after pruning the
ones that cannot work (NIC speed different from the port speed, too many NICs for the platform,
too little bandwidth per GPU, a tier count that cannot hold the GPU range). Each combination is a
binary-activated block of linear rows: one binary y[c] (exactly one is chosen) and one integer
D[c] = HB domains of that design (0 unless y[c] = 1). Everything else is linear in D[c]:

    n_gpus = sum_c K_c D[c]
    gpus.multiple_of M (a multiple of K_c): D[c] = (M / K_c) z[c], z[c] integer (with spares the job's J[c])
    per plane (designer.network.topology: P planes of E endpoints; E = D for rail-only, K*D otherwise)
      tier count:  2 h^(L-1) + 1 <= E <= 2 h^L          (h = R/2; L = tiers_needed(E, R))
      L == 1:      switches = ceil(P / floor(R / E)), a non-decreasing step function of D, written
                   exactly with one binary per step: z_j = 1 iff D >= t_j.
      L >= 2:      s_1 = K * ceil(D / h) (rail-pure leaves, D > h), ceil(K / floor(h / D)) (short
                   rails packed whole, D <= h: a step function, own block), or ceil(E / h); s_l = ceil(d_l / h) for
                   middle tiers; s_L = ceil(d_L / R); d_1 = E; d_(l+1) = u_l; u_b = ceil(d_b / r) at
                   the oversubscribed boundary b, u_l = d_l elsewhere; u_b >= s_b.
    every integer ceiling v = ceil(x / b) (x integer-valued and linear, b = p/q rational) is the pair
      p v >= q x   and   p v <= q x + (p - 1) y[c]
    which pins v to exactly the ceiling when y[c] = 1 and to 0 when y[c] = 0 (then x = 0), so counts
    are exact in both directions: a ">=" budget cannot inflate them.

These are the closed form's physical-convention relations (topology.py module docstring) written as
linear rows, so for fixed choices the MILP's switch, transceiver, cost and power figures equal
`bill_of_materials(..., convention=physical)` exactly (tests/network/test_milp.py checks this).

Cost = D * platform price + switch ports * (switch price / R) + sum over link layers of links *
     that layer's medium price per link + NICs * NIC price; power likewise (railonly.md §2 cost model,
     with NICs, DACs and HB-domain hardware added as §7 suggests). Prices come from the catalog; NICs
     a platform's price already includes (Platform.includes_nics) are not priced or powered again.

Link media (designer.network.layout): each layer (NIC-leaf, leaf-spine, spine-core, ...) is cabled
with the cheapest allowed medium whose reach covers the layer's longest link on the floor
(study.choices.layout) times the length margin. The longest link grows with D (more racks, more
rows, a larger network area), so each layer's medium is a non-decreasing step function of D. It is
written exactly the way packed short rails are: a block's domain range is cut where the media change
(media_runs), and each piece is its own block with its media fixed, so cost stays linear in D within
a block and equals the closed form priced with the same media (Combo.bom). D beyond the reach of every
allowed medium is left out of the block.

Spares (study.spares, designer.analysis.failures): D[c] is then the *built* domain count and a new
integer J[c] the job's domains, with
    J[c] <= D[c]   and   f J[c] <= D[c] - g_c(D[c])
where g_c(D) = ceil(Q_c(D) / units per domain) is the availability model's spare-domain need of the
built design (its confidence-quantile of lost units) and f the target fraction. g_c is a step function
of D, written exactly like the other step functions (one binary per change point, pinned to D >= t).
The study's GPU requirement applies to the job GPUs sum K_c J[c]; max_gpus and max_flops maximize the
job's GPUs and FLOP/s. Every cost is the built cluster's, so spares carry their platform and network
cost. The built range of each combination reaches the least D that holds the largest job.

The tier count is part of a combination (one y per tier count, as "tiers as binaries per tier
count"); its range of E is enforced through the bounds of D[c]. Before the build, `tighten_combos`
narrows each combination's D range with the budgets (every linear metric is non-decreasing in D for
fixed choices), which is exact bound propagation with integrality: without it HiGHS branches through
every combination whose LP bound, with a fractional D at the budget, is near the optimum.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from fractions import Fraction
from types import MappingProxyType
from typing import Any, Mapping, Sequence

import pyomo.environ as pyo

from designer.analysis.failures import exposure, required_spares, spare_domains_needed
from designer.errors import SpecError
from designer.network.budgets import BudgetHandles, budget_rows, define_budgets
from designer.network.hooks import HookContext, HookRef, apply_hooks
from designer.network.layout import (
    MediumOption,
    RackPlan,
    cheapest_reaching,
    eligible,
    layer_worst_m,
    leaf_span_racks,
    link_lane_gbps,
    medium_option,
    nic_end_module,
    nic_end_modules,
    nic_link_option,
    no_reach_message,
    rack_plan,
)
from designer.network.topology import (
    RAIL_PURE_LEAF_FAMILIES,
    BillOfMaterials,
    ComponentPrices,
    Convention,
    Family,
    bill_of_materials,
    exact_ratio,
    link_name,
    tiers_needed,
)
from designer.spec.catalog import Catalog, LinkMedia, MediaKind
from designer.spec.network_study import (
    COPPER_MEDIA_KINDS,
    FloorLayout,
    Metric,
    NetworkStudy,
    SparesSpec,
    family_can_use_radix,
)

USD_SCALE = 1e-6  # objective in millions of USD keeps HiGHS's numbers moderate
FLOPS_SCALE = 1e-15  # objective in PFLOP/s


# ----------------------------------------------------------------------------------------------
# The discrete choice combinations
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Combo:
    """One combination of discrete choices: a block of the MILP activated by y[index]."""

    index: int
    family: Family
    platform: str
    gpu: str
    hb_domain_size: int
    nic: str
    nic_gbps: float
    nics_per_gpu: int
    switch: str
    radix: int
    port_gbps: float
    oversubscription: float  # 1.0 unless family is oversubscribed
    oversubscribed_level: int | None  # resolved boundary b (1..L-1) for the oversubscribed family
    n_tiers: int
    dac_for_nic_links: bool  # the NIC-leaf layer is copper (link_media[0])
    optic: str | None  # the optical medium of the lowest optical layer; None: every link copper
    dac: str | None  # the NIC-leaf layer's copper medium
    prices: ComponentPrices
    domain_usd: float  # platform price per HB domain (GPUs included, scale-out network excluded)
    domain_w: float
    gpu_flops: float  # per GPU, dense, at the study's precision
    d_min: int  # domain-count range this block may take when chosen
    d_max: int
    # Rail-pure leaves with rails shorter than a leaf (D <= h): whole rails are packed per leaf, a
    # step function of D (topology.rail_leaf_count); such D get their own block.
    packed_leaves: bool = False
    # gpus.multiple_of: D (or, with spares, the job's domains J) is step * an integer, step =
    # multiple_of / K; d_min and d_max are then multiples of `step` (job_step applies to J).
    step: int = 1
    job_step: int = 1
    gpus_per_nic: int = 1  # > 1: one NIC shared by that many GPUs (nics_per_gpu is then 1)
    # The medium of each link layer (0 = NIC-leaf, l = tier l to l+1), constant over [d_min, d_max]:
    # the cheapest candidate whose reach covers the layer's longest link (designer.network.layout).
    link_media: tuple[MediumOption, ...] = ()
    # The candidates each layer chose from (the NIC-leaf layer's, then the switch-to-switch layers').
    nic_media_options: tuple[MediumOption, ...] = ()
    upper_media_options: tuple[MediumOption, ...] = ()
    floor: FloorLayout | None = None
    rack: RackPlan | None = None
    nic_link_length_m: float | None = None  # a fixed NIC-leaf length instead of the layout's
    # NICs per domain the platform's price and power already include (Platform.includes_nics, when
    # the design's NIC is the included one): those are neither priced nor powered again.
    included_nics_per_domain: float = 0.0

    @property
    def priced_nics_per_domain(self) -> float:
        return max(0.0, self.nics_per_domain - self.included_nics_per_domain)

    @property
    def nic_ranks(self) -> int:
        """NICs of one index per HB domain: K, or K / gpus_per_nic when GPUs share a NIC."""
        return self.hb_domain_size // self.gpus_per_nic

    @property
    def planes(self) -> int:
        return self.nic_ranks * self.nics_per_gpu if self.family == Family.rail_only else self.nics_per_gpu

    @property
    def endpoints_per_domain(self) -> int:
        """E = this * D: endpoints of one plane per HB domain (1 on a rail, K / g on a full plane)."""
        return 1 if self.family == Family.rail_only else self.nic_ranks

    @property
    def nics_per_domain(self) -> int:
        return self.nic_ranks * self.nics_per_gpu

    @property
    def scaleout_gbps_per_gpu(self) -> float:
        return self.nics_per_gpu * self.nic_gbps / self.gpus_per_nic

    @property
    def nic_label(self) -> str:
        return f"{self.nic}x{self.nics_per_gpu}" if self.gpus_per_nic == 1 else f"{self.nic}x1/{self.gpus_per_nic}"

    @property
    def label(self) -> str:
        o = f"/os{self.oversubscription:g}@{self.oversubscribed_level}" if self.family == Family.oversubscribed else ""
        return (f"{self.family.value}{o}/{self.platform}/{self.nic_label}/{self.switch}-{self.radix}"
                f"/L{self.n_tiers}{_NIC_MEDIUM_TAG.get(self.link_media[0].kind, '') if self.link_media else ''}")

    def bom(self, n_domains: int) -> BillOfMaterials:
        """The closed form for this combination at n_domains HB domains, every link layer priced with
        its medium (link_media) and the platform's included NICs left out (priced_bom)."""
        base = bill_of_materials(
            self.family, n_domains * self.hb_domain_size, self.hb_domain_size, self.radix,
            prices=self.prices, port_gbps=self.port_gbps, nics_per_gpu=self.nics_per_gpu,
            oversubscription=self.oversubscription,
            oversubscribed_level=self.oversubscribed_level if self.family == Family.oversubscribed else None,
            convention=Convention.physical, dac_for_nic_links=self.dac_for_nic_links, gpus_per_nic=self.gpus_per_nic)
        return priced_bom(base, self, n_domains)


# The label's tag for the NIC-leaf medium ('' for transceivers).
_NIC_MEDIUM_TAG = {"dac": "/dac", "copper_active": "/acc", "aoc": "/aoc"}


def bom_layer_links(bom: BillOfMaterials) -> tuple[int, ...]:
    """Links of each layer of a closed-form BOM: NIC-leaf, then tier l to l+1."""
    return (bom.tiers[0].down_links, *(t.up_links for t in bom.tiers[:-1]))


def priced_bom(bom: BillOfMaterials, c: Combo, n_domains: int) -> BillOfMaterials:
    """The closed form's bill of materials with each link layer priced by its own medium: a layer of
    n links costs n x usd_per_link (designer.network.layout.MediumOption), and only the NICs the
    platform does not include are priced and powered. Counts are the closed form's own (it puts the
    NIC-leaf layer on copper exactly when c.dac_for_nic_links; every layer above is optical)."""
    if not c.link_media:
        return bom
    links = bom_layer_links(bom)
    if len(links) != len(c.link_media):
        raise SpecError(f"internal: {len(links)} link layers but {len(c.link_media)} media for {c.label}")
    optics_usd = sum(n * m.usd_per_link for n, m in zip(links, c.link_media) if not m.copper)
    optics_w = sum(n * m.w_per_link for n, m in zip(links, c.link_media) if not m.copper)
    dac_usd = sum(n * m.usd_per_link for n, m in zip(links, c.link_media) if m.copper)
    dac_w = sum(n * m.w_per_link for n, m in zip(links, c.link_media) if m.copper)
    nics = c.priced_nics_per_domain * n_domains
    nic_usd, nic_w = nics * c.prices.nic_usd, nics * c.prices.nic_w
    return bom.model_copy(update={
        "optics_cost_usd": optics_usd, "optics_power_w": optics_w, "dac_cost_usd": dac_usd, "dac_power_w": dac_w,
        "nic_cost_usd": nic_usd, "nic_power_w": nic_w,
        "cost_usd": bom.switch_cost_usd + optics_usd + dac_usd + nic_usd,
        "power_w": bom.switch_power_w + optics_w + dac_w + nic_w,
        "prices_name": f"{bom.prices_name}; media {', '.join(m.id for m in c.link_media)}",
    })


def _per_port(m: LinkMedia, what: str) -> tuple[float, float]:
    if m.price_usd is None or m.power_w is None:
        raise SpecError(f"catalog media '{m.id}' has no {'price_usd' if m.price_usd is None else 'power_w'}; "
                        "add it in a catalog file to use it as the " + what)
    # A twin-port module serves two link ends; price and power are per module.
    return m.price_usd / m.ports_per_module, m.power_w / m.ports_per_module


def _pick_media(catalog: Catalog, kind: MediaKind, port_gbps: float, chosen: str | None) -> LinkMedia | None:
    """The named medium, or the cheapest of `kind` with per-port speed >= the port speed."""
    if chosen is not None:
        m = catalog.medium(chosen)
        return m if m.gbps >= port_gbps else None
    fits = [m for m in catalog.media if m.kind == kind and m.gbps >= port_gbps and m.price_usd is not None]
    return min(fits, key=lambda m: (m.price_usd / m.ports_per_module, m.id)) if fits else None


def component_prices(catalog: Catalog, switch_id: str, radix: int, port_gbps: float, nic_id: str,
                     optic: LinkMedia, dac: LinkMedia | None) -> ComponentPrices:
    """Catalog prices in the closed form's linear per-port shape. A switch is bought whole, so its
    price and power are spread over its R ports (count * R * price/R = count * price)."""
    sw, nic = catalog.switch(switch_id), catalog.nic(nic_id)
    for entry, what in ((sw, "switch"), (nic, "nic")):
        if entry.price_usd is None or entry.power_w is None:
            missing = "price_usd" if entry.price_usd is None else "power_w"
            raise SpecError(f"catalog {what} '{entry.id}' has no {missing}; add it in a catalog file or drop the choice")
    t_usd, t_w = _per_port(optic, "optic")
    d_usd, d_w = _per_port(dac, "DAC") if dac is not None else (0.0, 0.0)
    # the NIC's end of an optical NIC link: a single-port module of the optic's class (layout.nic_end_module)
    nic_end = nic_end_module(optic, catalog.media, port_gbps)
    n_usd, n_w = _per_port(nic_end, "optic") if nic_end is not None else (None, None)
    return ComponentPrices(
        name=f"catalog:{switch_id}-{radix}/{optic.id}/{dac.id if dac else 'no-dac'}/{nic_id}",
        switch_port_usd=sw.price_usd / radix, switch_port_w=sw.power_w / radix,
        transceiver_usd=t_usd, transceiver_w=t_w, nic_transceiver_usd=n_usd, nic_transceiver_w=n_w,
        dac_usd=d_usd, dac_w=d_w, nic_usd=nic.price_usd, nic_w=nic.power_w,
        source=f"designer catalog entries {switch_id}, {optic.id}" + (f" (NIC end {nic_end.id})" if nic_end is not None
                                                                     and nic_end.id != optic.id else "")
        + f", {dac.id if dac else '-'}, {nic_id}")


def _combo_prices(catalog: Catalog, switch_id: str, radix: int, nic_id: str) -> ComponentPrices:
    """Switch and NIC prices in the closed form's per-port shape (component_prices); link media are
    priced per layer (Combo.link_media), so the record's transceiver and DAC prices are 0."""
    sw, nic = catalog.switch(switch_id), catalog.nic(nic_id)
    for entry, what in ((sw, "switch"), (nic, "nic")):
        if entry.price_usd is None or entry.power_w is None:
            missing = "price_usd" if entry.price_usd is None else "power_w"
            raise SpecError(f"catalog {what} '{entry.id}' has no {missing}; add it in a catalog file or drop the choice")
    return ComponentPrices(
        name=f"catalog:{switch_id}-{radix}/{nic_id}", switch_port_usd=sw.price_usd / radix,
        switch_port_w=sw.power_w / radix, transceiver_usd=0.0, transceiver_w=0.0, nic_usd=nic.price_usd,
        nic_w=nic.power_w, source=f"designer catalog entries {switch_id}, {nic_id}; link media per layer")


# Media kinds a study must ask for by id (LinkMediaPolicy.allow): those that work only on some hosts
# (lpo) or whose price no source gives (copper_active; aoc: prices-and-layout.md §2a "LACC / DAC / AOC
# prices: not found"), so that an estimate never decides a default design.
OPT_IN_MEDIA_KINDS = ("lpo", "copper_active", "aoc")


def _media_candidates(catalog: Catalog, policy: Any, port_gbps: float, lane_gbps: float
                      ) -> tuple[tuple[MediumOption, ...], tuple[MediumOption, ...], tuple[MediumOption, ...]]:
    """(optical, copper, NIC-leaf optical) media that can carry the port (designer.network.layout.eligible),
    priced per link. A medium named in the study (choices.media.optic / .dac) is the only one of its
    side. The NIC-leaf optical links are the optical ones with the NIC's end in a single-port module
    (layout.nic_end_modules, nic_link_option)."""
    rule = getattr(catalog, "reach_rule", None)

    def ok(m: LinkMedia) -> bool:
        return eligible(m, port_gbps=port_gbps, lane_gbps=lane_gbps, reach_rule=rule)

    allowed = set(getattr(policy, "allow", ()))

    def offered(m: LinkMedia) -> bool:
        """LPO, linear active copper and active optical cables on request (choices.media.allow)."""
        return m.kind.value not in OPT_IN_MEDIA_KINDS or m.id in allowed

    out = []
    modules = []  # the optical side's catalog entries, for the NIC ends
    for named, copper, role in ((policy.optic, False, "optic"), (policy.dac, True, "DAC")):
        if named is not None:
            m = catalog.medium(named)
            chosen = [m] if ok(m) else []
            out.append(tuple(medium_option(x, role) for x in chosen))
        else:
            chosen = [m for m in catalog.media if (m.kind.value in COPPER_MEDIA_KINDS) == copper
                      and m.price_usd is not None and m.power_w is not None and ok(m) and offered(m)]
            out.append(tuple(medium_option(m) for m in chosen))
        if not copper:
            modules = chosen
    # the NIC's end: each single-port module of the catalog's that fits (the named optic names the switch
    # end); a cable, or a module with none to face it, serves both ends itself
    nic_ends = [m for m in catalog.media if m.kind.value not in COPPER_MEDIA_KINDS and ok(m) and offered(m)]
    nic_optical = tuple(nic_link_option(m, n) for m in modules
                        for n in (nic_end_modules(m, nic_ends, port_gbps) or [None]))
    return out[0], out[1], nic_optical


def _included_nics_per_domain(plat: Any, nic_id: str) -> float:
    """NICs per domain the platform's price and power include (catalog Platform.includes_nics), when
    the design's NIC is the included model; read with defaults so older catalogs load."""
    if not getattr(plat, "includes_nics", False):
        return 0.0
    included = getattr(plat, "included_nic", None)
    if included is not None and included != nic_id:
        return 0.0
    return float(getattr(plat, "included_nics_per_domain", plat.hb_domain_size))


def platform_racks(layout: FloorLayout, plat: Any) -> RackPlan:
    """How the platform fills racks on this floor; an HB domain longer than a row is refused."""
    if plat.power_w is None:
        raise SpecError(f"catalog platform '{plat.id}' has no power_w; add it in a catalog file or drop the platform")
    plan = rack_plan(layout, hb_domain_size=plat.hb_domain_size, host_gpus=plat.host_gpus,
                     domain_power_w=plat.power_w, stated_gpus_per_rack=getattr(plat, "gpus_per_rack", None),
                     platform=plat.id)
    if plan.racks_per_domain > layout.min_racks_per_row:
        raise SpecError(f"field 'choices.layout.racks_per_row' = {layout.min_racks_per_row}: an HB domain of platform "
                        f"{plat.id} fills {plan.racks_per_domain} racks, longer than the row; allowed: >= "
                        f"{plan.racks_per_domain}")
    return plan


def tier_counts(c: Combo, n_domains: int) -> tuple[list[int], list[int]]:
    """(switches per tier, links per layer), totals over the planes, by the integer relations of
    define_tiers (and so of the closed form): layer 0 is NIC-leaf, layer l tier l to l+1."""
    h, R, P = c.radix // 2, c.radix, c.planes
    E = c.endpoints_per_domain * n_domains
    if n_domains <= 0:
        return [0] * c.n_tiers, [0] * c.n_tiers
    if c.n_tiers == 1:
        return [math.ceil(P / (R // E))], [P * E]
    ratio = exact_ratio(c.oversubscription)
    per_plane = [rail_leaves_per_plane(c, n_domains) if c.family in RAIL_PURE_LEAF_FAMILIES else -(-E // h)]
    down, links = E, [E]
    for level in range(1, c.n_tiers):
        if level >= 2:
            per_plane.append(-(-down // h))
        up = math.ceil(Fraction(down) / ratio) if level == c.oversubscribed_level else down
        links.append(up)
        down = up
    per_plane.append(-(-down // R))
    return [P * s for s in per_plane], [P * x for x in links]


def layer_worst_at(c: Combo, n_domains: int, memo: dict | None = None) -> tuple[float, ...]:
    """The longest link of each layer of combination c built with n_domains (designer.network.layout).
    memo: a dict that keeps results between calls (blocks of one enumeration share floors)."""
    span = leaf_span_racks(c.rack, c.family, n_tiers=c.n_tiers, radix=c.radix, n_domains=n_domains,
                           nic_ranks=c.nic_ranks, gpus_per_nic=c.gpus_per_nic)
    switches, _ = tier_counts(c, n_domains)
    key = (c.floor, c.rack.racks(n_domains), span, c.n_tiers, sum(switches[1:]), c.nic_link_length_m)
    if memo is not None and key in memo:
        return memo[key]
    out = layer_worst_m(c.floor, n_racks=key[1], leaf_span_racks=span, n_layers=c.n_tiers,
                        upper_switches=key[4], nic_link_length_m=c.nic_link_length_m)
    if memo is not None:
        memo[key] = out
    return out


def layer_options(c: Combo) -> tuple[tuple[MediumOption, ...], ...]:
    return (c.nic_media_options, *([c.upper_media_options] * (c.n_tiers - 1)))


def media_at(c: Combo, n_domains: int, memo: dict | None = None
             ) -> tuple[tuple[MediumOption | None, ...], tuple[float, ...]]:
    """Each layer's medium at n_domains (None where no candidate reaches), and the worst lengths."""
    worst = layer_worst_at(c, n_domains, memo)
    margin = c.floor.length_margin
    return tuple(cheapest_reaching(o, w, margin) for o, w in zip(layer_options(c), worst)), worst


def media_runs(c: Combo, memo: dict | None = None
               ) -> tuple[list[tuple[int, int, tuple[MediumOption, ...]]], tuple[float, str] | None]:
    """The media of c as a step function of D over [d_min, d_max] (on c.step's grid): maximal runs of
    one media tuple, and why the range ends early (a layer no candidate reaches), if it does.

    Every layer's longest link is non-decreasing in D (more racks, more rows, a larger network area)
    and the cheapest medium covering a length changes only when it falls out of reach, never to come
    back; so each media tuple holds on one interval of D, found by bisection
    (tests/network/test_layout.py walks every D)."""
    step = c.step
    k, k_hi = c.d_min // step, c.d_max // step
    runs: list[tuple[int, int, tuple[MediumOption, ...]]] = []
    while k <= k_hi:
        media, worst = media_at(c, k * step, memo)
        if any(m is None for m in media):
            i = next(i for i, m in enumerate(media) if m is None)
            msg = no_reach_message(link_name(i), worst[i], c.floor.length_margin, layer_options(c)[i], c.port_gbps,
                                   where=f" at {k * step} domains ({c.rack.racks(k * step)} racks) of {c.label}")
            return runs, (worst[i], msg)
        a, b = k, k_hi
        while a < b:
            mid = (a + b + 1) // 2
            if media_at(c, mid * step, memo)[0] == media:
                a = mid
            else:
                b = mid - 1
        runs.append((k * step, a * step, media))  # type: ignore[arg-type]
        k = a + 1
    return runs, None


def with_media(c: Combo, media: tuple[MediumOption, ...], d_min: int, d_max: int, index: int) -> Combo:
    """Combination c on [d_min, d_max] with its layers' media fixed."""
    nic = media[0]
    optical = [m.id for m in media if not m.copper]
    return replace(c, index=index, d_min=d_min, d_max=d_max, link_media=media, dac_for_nic_links=nic.copper,
                   optic=optical[0] if optical else None, dac=nic.id if nic.copper else None)


def _round_range(lo: int, hi: int, step: int) -> tuple[int, int]:
    """The multiples of `step` in [lo, hi], as their least and greatest (lo > hi when none)."""
    return -(-lo // step) * step, (hi // step) * step


def _tier_range(e: int, d_lo: int, d_hi: int, radix: int, levels: int) -> tuple[int, int] | None:
    """Domains D in [d_lo, d_hi] whose plane size E = e*D needs exactly `levels` tiers."""
    h = radix // 2
    e_lo = 1 if levels == 1 else 2 * h ** (levels - 1) + 1
    e_hi = 2 * h**levels
    lo, hi = max(d_lo, -(-e_lo // e)), min(d_hi, e_hi // e)
    return (lo, hi) if lo <= hi else None


def enumerate_combos(study: NetworkStudy, catalog: Catalog) -> tuple[Combo, ...]:
    """Every combination of the study's open choices that can build some GPU count in its range."""
    ch, req = study.choices, study.gpus
    out: list[Combo] = []
    seen: set[Combo] = set()
    reasons: set[str] = set()
    reach_reasons: list[tuple[float, str]] = []  # (length, why) of layers no allowed medium reaches
    memo: dict = {}  # layer_worst_at results, shared by blocks on the same floor
    media_memo: dict = {}  # (port_gbps, lane_gbps) -> the candidate media
    for fam_name in ch.families:
        family = Family(fam_name)
        ratios = ch.oversubscription if family == Family.oversubscribed else (1.0,)
        for pid in ch.platforms:
            plat = catalog.platform(pid)
            gpu = catalog.gpu(plat.gpu)
            if plat.price_usd is None or plat.power_w is None:
                raise SpecError(f"catalog platform '{pid}' has no {'price_usd' if plat.price_usd is None else 'power_w'}; "
                                "add it in a catalog file or drop the platform")
            flops = gpu.perf().peak_flops.get(study.objective.precision)
            if flops is None:
                flops = 0.0
                if study.objective.base_kind == "max_flops":
                    reasons.add(f"gpu {gpu.id} has no {study.objective.precision} figure")
                    continue
            k = plat.hb_domain_size
            d_lo, d_hi = -(-req.lo // k), req.hi // k
            step = 1
            if req.multiple_of is not None:
                if req.multiple_of % k:
                    reasons.add(f"gpus.multiple_of {req.multiple_of} is not a multiple of platform {pid}'s K={k}")
                    continue
                step = req.multiple_of // k
                d_lo, d_hi = _round_range(d_lo, d_hi, step)
            if d_lo > d_hi:
                reasons.add(f"platform {pid} (K={k}) has no multiple in the GPU range")
                continue
            # Without spares the step applies to the built domains D; with spares to the job's J.
            d_step, j_step = (step, 1) if study.spares is None else (1, step)
            rack = platform_racks(ch.layout, plat)
            for nc in ch.nics:
                nic = catalog.nic(nc.id)
                for per_gpu in nc.nics_per_gpu:
                    # below 1: one NIC shared by 1 / per_gpu GPUs (NicChoice checks it is 1/2, 1/4, ...)
                    npg, gpn = (int(per_gpu), 1) if per_gpu >= 1 else (1, round(1 / per_gpu))
                    if per_gpu > plat.max_nics_per_gpu:
                        reasons.add(f"platform {pid} takes at most {plat.max_nics_per_gpu} NICs per GPU")
                        continue
                    if per_gpu < plat.min_nics_per_gpu:
                        reasons.add(f"platform {pid} takes at least {plat.min_nics_per_gpu:g} NICs per GPU")
                        continue
                    if k % gpn:
                        reasons.add(f"{per_gpu:g} NICs per GPU: {gpn} GPUs per NIC do not divide the HB domain of {pid} ({k})")
                        continue
                    if npg * nic.gbps / gpn < req.min_scaleout_gbps_per_gpu:
                        reasons.add(f"{per_gpu:g} x {nic.id} gives less than {req.min_scaleout_gbps_per_gpu:g} Gb/s per GPU")
                        continue
                    for sc in ch.switches:
                        sw = catalog.switch(sc.id)
                        for mode in sw.modes:
                            if sc.radix and mode.radix not in sc.radix:
                                continue
                            if not family_can_use_radix(family.value, mode.radix):
                                continue
                            # The closed form runs every port at the NIC speed (railonly.md §2).
                            if mode.port_gbps != nic.gbps:
                                reasons.add(f"NIC {nic.id} ({nic.gbps:g}G) matches no port speed of {sw.id} mode {mode.radix}")
                                continue
                            # an Ethernet switch meets the NIC's Ethernet ports (ConnectX-8: 2 x 400GbE,
                            # 800GbE on one port not supported; prices-and-layout.md §2c)
                            eth_ports, eth_gbps = nic.ethernet_ports
                            if sw.fabric == "ethernet" and (eth_ports, eth_gbps) != (1, nic.gbps):
                                reasons.add(f"NIC {nic.id} runs Ethernet as {eth_ports} x {eth_gbps:g}G ports, not one "
                                            f"{nic.gbps:g}G port as {sw.id} mode {mode.radix} needs")
                                continue
                            # the two ends of a link run one lane rate: 200G-PAM4 optics cannot
                            # downshift to 100G (prices-and-layout.md §2a)
                            nic_lane, sw_lane = getattr(nic, "lane_gbps", None), getattr(sw, "lane_gbps", None)
                            if nic_lane is not None and sw_lane is not None and nic_lane != sw_lane:
                                reasons.add(f"NIC {nic.id} ({nic_lane:g}G lanes) and {sw.id} ({sw_lane:g}G lanes) "
                                            "run different lane rates")
                                continue
                            lane = link_lane_gbps(mode.port_gbps, getattr(nic, "lane_gbps", None),
                                                  getattr(sw, "lane_gbps", None))
                            mkey = (mode.port_gbps, lane)
                            if mkey not in media_memo:  # the same few port speeds recur over the loops
                                media_memo[mkey] = _media_candidates(catalog, ch.media, mode.port_gbps, lane)
                            optical, copper, nic_optical = media_memo[mkey]
                            if not optical and not (copper and ch.media.nic_links != "optic"):
                                reasons.add(f"no medium of at least {mode.port_gbps:g}G per port at {lane:g}G per lane "
                                            "in the catalog")
                                continue
                            variants = {"cheapest": ((*nic_optical, *copper),), "dac": ((*nic_optical, *copper),),
                                        "optic": (nic_optical,),
                                        "choose": ((*nic_optical, *copper), nic_optical)}[ch.media.nic_links]
                            included = _included_nics_per_domain(plat, nic.id)
                            for nic_opts in variants:
                                if not nic_opts:
                                    continue
                                prices = _combo_prices(catalog, sw.id, mode.radix, nic.id)
                                e = 1 if family == Family.rail_only else k // gpn
                                d_top = d_hi
                                if study.spares is not None:
                                    try:
                                        d_top = built_domains_hi(study.spares, family, k, mode.radix, npg, d_hi)
                                    except SpecError as err:
                                        reasons.add(str(err))
                                        continue
                                l_lo, l_hi = tiers_needed(e * d_lo, mode.radix), tiers_needed(e * d_top, mode.radix)
                                for levels in range(l_lo, l_hi + 1):
                                    rng = _tier_range(e, d_lo, d_top, mode.radix, levels)
                                    if rng is None:
                                        continue
                                    if levels >= 2 and not optical:
                                        reasons.add(f"no optical medium of at least {mode.port_gbps:g}G per port at {lane:g}G "
                                                    "per lane for the switch-to-switch links")
                                        continue
                                    for r in ratios:
                                        b = None
                                        if family == Family.oversubscribed:
                                            if levels < 2:
                                                reasons.add(f"family oversubscribed needs two or more tiers; radix {mode.radix} "
                                                            "serves the whole plane with one")
                                                continue
                                            b = ch.oversubscribed_level or levels - 1
                                            if b > levels - 1:
                                                reasons.add(f"oversubscribed_level {b} needs more than {levels} tiers")
                                                continue
                                        pieces = [(rng[0], rng[1], False)]
                                        if family in RAIL_PURE_LEAF_FAMILIES and levels >= 2:
                                            h = mode.radix // 2
                                            pieces = [(lo_, hi_, packed) for lo_, hi_, packed in
                                                      ((rng[0], min(rng[1], h), True), (max(rng[0], h + 1), rng[1], False))
                                                      if lo_ <= hi_]
                                        if d_step > 1:
                                            pieces = [(*_round_range(lo_, hi_, d_step), packed) for lo_, hi_, packed in pieces]
                                            pieces = [p for p in pieces if p[0] <= p[1]]
                                        for lo_, hi_, packed in pieces:
                                            proto = Combo(
                                                index=0, family=family, platform=pid, gpu=gpu.id,
                                                hb_domain_size=k, nic=nic.id, nic_gbps=nic.gbps, nics_per_gpu=npg,
                                                switch=sw.id, radix=mode.radix, port_gbps=mode.port_gbps,
                                                oversubscription=float(r), oversubscribed_level=b, n_tiers=levels,
                                                dac_for_nic_links=False, optic="", dac=None, prices=prices,
                                                domain_usd=plat.price_usd, domain_w=plat.power_w, gpu_flops=flops,
                                                d_min=lo_, d_max=hi_, packed_leaves=packed,
                                                step=d_step, job_step=j_step, gpus_per_nic=gpn,
                                                nic_media_options=tuple(nic_opts), upper_media_options=tuple(optical),
                                                floor=ch.layout.for_racks(rack.racks(d_top)), rack=rack,
                                                nic_link_length_m=ch.media.nic_link_length_m,
                                                included_nics_per_domain=included)
                                            runs, why = media_runs(proto, memo)
                                            if why is not None:
                                                reach_reasons.append(why)
                                            for lo_m, hi_m, media in runs:
                                                combo = with_media(proto, media, lo_m, hi_m, len(out))
                                                # 'choose' offers two candidate sets; where both pick the
                                                # same media the blocks are one
                                                key = replace(combo, index=0, nic_media_options=())
                                                if key in seen:
                                                    continue
                                                if lo_m == hi_m:
                                                    # A fixed size: the closed form decides validity (e.g. an
                                                    # oversubscribed tier that leaves a switch without uplinks).
                                                    try:
                                                        combo.bom(lo_m)
                                                    except SpecError as err:
                                                        reasons.add(str(err))
                                                        continue
                                                seen.add(key)
                                                out.append(combo)
    if not out:
        if reach_reasons:
            length, msg = min(reach_reasons)
            raise SpecError(f"field 'choices.layout': no combination can build {req.lo}..{req.hi} GPUs: {msg}; allowed: "
                            "a catalog medium of that reach (catalog.extra_files), a denser floor or other placements "
                            "(choices.layout)")
        why = "; ".join(sorted(reasons)[:3]) or "no switch mode fits"
        raise SpecError(f"field 'choices': no combination can build {req.lo}..{req.hi} GPUs ({why})")
    return tuple(out)


def combo_figures(c: Combo, n_domains: int) -> dict[Metric, float]:
    """The combination's linear metrics at `n_domains`, by the same integer relations as define_tiers
    (and so as the closed form; tests/network/test_milp.py checks all three agree). Pure and fast:
    used to tighten domain bounds before the solve."""
    R = c.radix
    by_level, layers = tier_counts(c, n_domains)
    switches = sum(by_level)
    transceivers = sum(m.transceivers_per_link * x for m, x in zip(c.link_media, layers))
    dacs = sum(x for m, x in zip(c.link_media, layers) if m.copper)
    nics = c.nics_per_domain * n_domains
    priced_nics = c.priced_nics_per_domain * n_domains
    pr = c.prices
    net_usd = (switches * R * pr.switch_port_usd + sum(m.usd_per_link * x for m, x in zip(c.link_media, layers))
               + priced_nics * pr.nic_usd)
    net_w = (switches * R * pr.switch_port_w + sum(m.w_per_link * x for m, x in zip(c.link_media, layers))
             + priced_nics * pr.nic_w)
    return {
        Metric.n_gpus: c.hb_domain_size * n_domains, Metric.n_domains: n_domains, Metric.switch_count: switches,
        Metric.switch_port_count: switches * R, Metric.transceiver_count: transceivers, Metric.dac_count: dacs,
        Metric.nic_count: nics, Metric.tiers: c.n_tiers if n_domains else 0,
        Metric.compute_capex_usd: c.domain_usd * n_domains, Metric.network_capex_usd: net_usd,
        Metric.capex_usd: c.domain_usd * n_domains + net_usd, Metric.network_power_w: net_w,
        Metric.power_w: c.domain_w * n_domains + net_w,
        Metric.scaleout_gbps_per_gpu: c.scaleout_gbps_per_gpu if n_domains else 0.0,
    }


# Metrics that are non-decreasing in the domain count of a fixed combination (all of the closed
# form's relations are monotone, topology.py docstring), so a budget on them bounds D by bisection.
_MONOTONE = (Metric.n_gpus, Metric.n_domains, Metric.switch_count, Metric.switch_port_count,
             Metric.transceiver_count, Metric.dac_count, Metric.nic_count, Metric.capex_usd,
             Metric.compute_capex_usd, Metric.network_capex_usd, Metric.power_w, Metric.network_power_w)
_CONSTANT = (Metric.tiers, Metric.scaleout_gbps_per_gpu)


def tighten_combos(combos: Sequence[Combo], rows: Sequence[Any]) -> tuple[Combo, ...]:
    """Bound propagation with integrality, before the solve: for every budget row on a monotone
    metric, shrink each combination's domain range to the D that meet it (bisection on
    combo_figures), and drop combinations a budget rules out whatever their size. Hooks only add
    constraints, so these bounds stay valid. Without this, HiGHS must branch through every
    combination whose LP bound (fractional D at the budget) is close to the optimum."""
    tol = 1e-9
    out = []
    for c in combos:
        lo, hi = c.d_min, c.d_max
        for row in rows:
            m, rhs = Metric(row.metric), row.rhs
            slack = tol * max(1.0, abs(rhs))
            if m in _CONSTANT:
                v = combo_figures(c, lo)[m]
                ok = v <= rhs + slack if row.sense == "<=" else v >= rhs - slack
                if not ok:
                    lo, hi = 1, 0
            elif m in _MONOTONE and lo <= hi:
                if row.sense == "<=":
                    if combo_figures(c, lo)[m] > rhs + slack:
                        lo, hi = 1, 0
                        continue
                    a, b = lo, hi  # largest D in [a, b] with metric <= rhs
                    while a < b:
                        mid = (a + b + 1) // 2
                        if combo_figures(c, mid)[m] <= rhs + slack:
                            a = mid
                        else:
                            b = mid - 1
                    hi = a
                else:
                    if combo_figures(c, hi)[m] < rhs - slack:
                        lo, hi = 1, 0
                        continue
                    a, b = lo, hi  # smallest D in [a, b] with metric >= rhs
                    while a < b:
                        mid = (a + b) // 2
                        if combo_figures(c, mid)[m] >= rhs - slack:
                            b = mid
                        else:
                            a = mid + 1
                    lo = a
        if c.step > 1 and lo <= hi:
            lo, hi = _round_range(lo, hi, c.step)  # the budgets' D interval, on the multiple_of grid
        if lo <= hi:
            out.append(c if (lo, hi) == (c.d_min, c.d_max) else replace(c, d_min=lo, d_max=hi))
    return tuple(replace(c, index=i) for i, c in enumerate(out))


# ----------------------------------------------------------------------------------------------
# Handles: what the objective, the budgets, hooks and extraction see
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ComboExprs:
    """Linear expressions of one combination (all zero when it is not chosen)."""

    n_gpus: Any
    switches_by_level: Mapping[int, Any]  # totals over the planes
    links_by_layer: Mapping[int, Any]  # 0 = NIC-leaf, l = tier l to l+1
    switch_count: Any
    transceiver_count: Any
    dac_count: Any
    nic_count: Any
    network_capex_usd: Any
    network_power_w: Any
    compute_capex_usd: Any
    compute_power_w: Any


@dataclass(frozen=True)
class Handles:
    """Typed, read-only handles to the model's decision variables and linear expressions."""

    combos: tuple[Combo, ...]
    choose: Any  # y[c] binary: combination c is the design
    domains: Any  # D[c] integer: HB domains of combination c (0 unless chosen)
    per_combo: Mapping[int, ComboExprs]
    # indicators (linear in y): which family / platform / switch mode / NIC / ratio / media
    family: Mapping[str, Any]
    platform: Mapping[str, Any]
    switch_mode: Mapping[tuple[str, int], Any]
    nic: Mapping[tuple[str, int], Any]
    oversubscription: Mapping[float, Any]
    dac_for_nic_links: Any
    # totals
    n_gpus: Any
    n_domains: Any
    nic_count: Any
    switch_count: Any
    switch_port_count: Any
    transceiver_count: Any
    dac_count: Any
    tiers: Any
    switches_by_level: Mapping[int, Any]
    ports_by_level: Mapping[int, Any]
    links_by_layer: Mapping[int, Any]
    compute_capex_usd: Any
    network_capex_usd: Any
    capex_usd: Any
    compute_power_w: Any
    network_power_w: Any
    power_w: Any
    scaleout_gbps_per_gpu: Any
    pflops: Any  # aggregate dense PFLOP/s at the study's precision
    # The job's share when the study asks for spares (designer.analysis.failures); without spares the
    # job is the whole cluster: job_gpus is n_gpus, spare_domains 0, job_pflops pflops.
    job_gpus: Any = None
    spare_domains: Any = 0
    job_pflops: Any = None
    job_domains: Any = None  # J[c] variables when spares are asked for, else None
    # With NetworkStudy.cost_terms (the study's cost lines): total capex and facility-meter power
    capex_total_usd: Any = None
    facility_power_w: Any = None

    def metric(self, m: Metric | str) -> Any:
        m = Metric(m)
        if m == Metric.capex_per_gpu_usd:
            raise SpecError("capex_per_gpu_usd is not linear; bound capex_usd - rhs * n_gpus instead")
        return getattr(self, m.value)

    def metrics(self) -> Mapping[Metric, Any]:
        return MappingProxyType({m: getattr(self, m.value) for m in Metric if m != Metric.capex_per_gpu_usd})


def _ro(d: dict) -> Mapping:
    return MappingProxyType(dict(d))


# ----------------------------------------------------------------------------------------------
# define_* functions
# ----------------------------------------------------------------------------------------------


def define_choices(model: pyo.ConcreteModel, combos: Sequence[Combo]) -> None:
    """y[c]: exactly one combination of discrete choices is the design."""
    model.C = pyo.Set(initialize=[c.index for c in combos], ordered=True)
    model.y = pyo.Var(model.C, domain=pyo.Binary)
    model.one_design = pyo.Constraint(expr=sum(model.y[c] for c in model.C) == 1)


def define_counts(model: pyo.ConcreteModel, combos: Sequence[Combo], *, mutable_ranges: bool = False) -> None:
    """D[c]: HB domains of combination c, within its range when chosen and 0 otherwise.

    mutable_ranges: the range [d_lo[c], d_hi[c]] is a pair of mutable Params (initialized to d_min,
    d_max), so one model can answer several frontier levels, each with its own bound-tightened
    ranges, by changing numbers only (designer.network.api, persistent frontier)."""
    bounds = {c.index: (0, c.d_max) for c in combos}
    model.D = pyo.Var(model.C, domain=pyo.NonNegativeIntegers, bounds=lambda m, i: bounds[i])
    by_index = {c.index: c for c in combos}
    if mutable_ranges:
        model.d_lo = pyo.Param(model.C, mutable=True, within=pyo.NonNegativeIntegers,
                               initialize=lambda m, i: by_index[i].d_min)
        model.d_hi = pyo.Param(model.C, mutable=True, within=pyo.NonNegativeIntegers,
                               initialize=lambda m, i: by_index[i].d_max)
        model.domains_lo = pyo.Constraint(model.C, rule=lambda m, i: m.D[i] >= m.d_lo[i] * m.y[i])
        model.domains_hi = pyo.Constraint(model.C, rule=lambda m, i: m.D[i] <= m.d_hi[i] * m.y[i])
    else:
        model.domains_lo = pyo.Constraint(model.C, rule=lambda m, i: m.D[i] >= by_index[i].d_min * m.y[i])
        model.domains_hi = pyo.Constraint(model.C, rule=lambda m, i: m.D[i] <= by_index[i].d_max * m.y[i])
    # gpus.multiple_of: D = step * Dz with an integer Dz (linear; D's bounds then bound Dz).
    stepped = [c.index for c in combos if c.step > 1]
    if stepped:
        model.CS = pyo.Set(initialize=stepped, ordered=True)
        model.Dz = pyo.Var(model.CS, domain=pyo.NonNegativeIntegers,
                           bounds=lambda m, i: (0, by_index[i].d_max // by_index[i].step))
        model.domains_step = pyo.Constraint(model.CS, rule=lambda m, i: m.D[i] == by_index[i].step * m.Dz[i])


def rail_leaves_per_plane(c: Combo, n_domains: int) -> int:
    """Leaves of one plane of a rail-pure family (topology.rail_leaf_count): ceil(D/h) leaves per
    rail, or, for rails shorter than a leaf (D <= h), floor(h/D) whole rails packed per leaf."""
    h = c.radix // 2
    if n_domains <= h:
        return math.ceil(c.nic_ranks / (h // n_domains))
    return c.nic_ranks * -(-n_domains // h)


def _step_value(c: Combo, n_domains: int) -> int:
    """The step-valued quantity of a combination: total switches of a one-tier fabric
    (ceil(P / floor(R / E))), or leaves per plane of packed short rails."""
    if c.n_tiers == 1:
        return math.ceil(c.planes / (c.radix // (c.endpoints_per_domain * n_domains)))
    return rail_leaves_per_plane(c, n_domains)


def _has_steps(c: Combo) -> bool:
    return c.n_tiers == 1 or c.packed_leaves


def step_thresholds(c: Combo) -> tuple[int, list[tuple[int, int]]]:
    """The step function over D in [d_min, d_max]: its value at d_min and every (D threshold,
    increment) where it steps up. Both step functions are non-decreasing in D."""
    base = last = _step_value(c, c.d_min)
    steps = []
    for d in range(c.d_min + 1, c.d_max + 1):
        v = _step_value(c, d)
        if v != last:
            steps.append((d, v - last))
            last = v
    return base, steps


def define_tiers(model: pyo.ConcreteModel, combos: Sequence[Combo]) -> dict[int, dict[str, Any]]:
    """Port conservation and radix at every tier, per plane, as exact integer ceilings and exact
    step functions (module docstring). Returns, per combination, switches by level and links by
    layer, totals over the planes."""
    by_index = {c.index: c for c in combos}
    # Pass 1: the symbolic plan. A term is a function of the model, so rows can refer to variables
    # created in pass 2. ceil rows: (combo, var key, x(m), p, q) for v = ceil(q x / p).
    ceils: list[tuple[int, str, Any, int, int]] = []
    steps: list[tuple[int, int, int, int]] = []  # (combo, j, D threshold, increment)
    plan: dict[int, dict[str, Any]] = {}
    for c in combos:
        i, h, R, P = c.index, c.radix // 2, c.radix, c.planes
        e = c.endpoints_per_domain

        def E(m, i=i, e=e):
            return e * m.D[i]

        if _has_steps(c):
            base, st = step_thresholds(c)
            steps += [(i, j, t, inc) for j, (t, inc) in enumerate(st)]

            def step_expr(m, i=i, base=base, st=tuple(st)):
                return base * m.y[i] + sum(inc * m.z[i, j] for j, (_, inc) in enumerate(st))
        if c.n_tiers == 1:
            plan[i] = {"switches": {1: step_expr}, "links": {0: E}, "per_plane": False}
            continue
        sw: dict[int, Any] = {}
        if c.packed_leaves:
            sw[1] = step_expr
        elif c.family in RAIL_PURE_LEAF_FAMILIES:
            ceils.append((i, "g", lambda m, i=i: m.D[i], h, 1))  # g = ceil(D / h) leaves per rail
            sw[1] = lambda m, i=i, k=c.nic_ranks: k * m.v[i, "g"]
        else:
            ceils.append((i, "s1", E, h, 1))
            sw[1] = lambda m, i=i: m.v[i, "s1"]
        down = E  # d_1 = E
        ups: dict[int, Any] = {}
        ratio = exact_ratio(c.oversubscription)
        for level in range(1, c.n_tiers):
            if level >= 2:
                ceils.append((i, f"s{level}", down, h, 1))
                sw[level] = lambda m, i=i, k=f"s{level}": m.v[i, k]
            if level == c.oversubscribed_level:
                # u_b = ceil(d_b / r) with r = p/q exactly: p u >= q d.
                ceils.append((i, f"u{level}", down, ratio.numerator, ratio.denominator))
                up = (lambda m, i=i, k=f"u{level}": m.v[i, k])
            else:
                up = down  # non-blocking: as many links up as down
            ups[level] = up
            down = up
        ceils.append((i, f"s{c.n_tiers}", down, R, 1))
        sw[c.n_tiers] = lambda m, i=i, k=f"s{c.n_tiers}": m.v[i, k]
        links = {0: E, **ups}
        plan[i] = {"switches": sw, "links": links, "per_plane": True}

    # Pass 2: variables and rows.
    model.V = pyo.Set(initialize=[(i, k) for i, k, _, _, _ in ceils], dimen=2, ordered=True)
    model.v = pyo.Var(model.V, domain=pyo.NonNegativeIntegers)
    rows = {(i, k): (x, p, q) for i, k, x, p, q in ceils}
    # p v >= q x and p v <= q x + (p - 1) y: v is exactly the ceiling while chosen, 0 otherwise.
    model.ceil_lo = pyo.Constraint(model.V, rule=lambda m, i, k: rows[i, k][1] * m.v[i, k] >= rows[i, k][2] * rows[i, k][0](m))
    model.ceil_hi = pyo.Constraint(
        model.V, rule=lambda m, i, k: rows[i, k][1] * m.v[i, k] <= rows[i, k][2] * rows[i, k][0](m) + (rows[i, k][1] - 1) * m.y[i])

    # Step functions: z[c, j] = 1 iff D >= threshold t_j (while chosen).
    info = {(i, j): (t, inc) for i, j, t, inc in steps}
    model.Z = pyo.Set(initialize=[(i, j) for i, j, _, _ in steps], dimen=2, ordered=True)
    model.z = pyo.Var(model.Z, domain=pyo.Binary)
    model.step_on = pyo.Constraint(model.Z, rule=lambda m, i, j: m.D[i] >= info[i, j][0] * m.z[i, j])
    model.step_off = pyo.Constraint(
        model.Z, rule=lambda m, i, j: m.D[i] <= info[i, j][0] - 1 + (by_index[i].d_max - info[i, j][0] + 1) * m.z[i, j])
    model.step_chosen = pyo.Constraint(model.Z, rule=lambda m, i, j: m.z[i, j] <= m.y[i])

    # Tier count 2 h^(L-1) + 1 <= E <= 2 h^L is encoded in each combination's D range (d_min, d_max
    # from _tier_range), which domains_lo / domains_hi enforce.

    # Oversubscribed validity: every tier-b switch keeps an uplink (u_b >= s_b per plane).
    valid = [c.index for c in combos if c.family == Family.oversubscribed and c.n_tiers >= 2]
    model.OS = pyo.Set(initialize=valid, ordered=True)
    model.uplink_each = pyo.Constraint(
        model.OS, rule=lambda m, i: plan[i]["links"][by_index[i].oversubscribed_level](m)
        >= plan[i]["switches"][by_index[i].oversubscribed_level](m))

    out: dict[int, dict[str, Any]] = {}
    for c in combos:
        p = plan[c.index]
        k = c.planes if p["per_plane"] else 1
        out[c.index] = {
            "switches": {lvl: k * f(model) for lvl, f in p["switches"].items()},
            "links": {lvl: c.planes * f(model) for lvl, f in p["links"].items()},
        }
    return out


def define_cost(model: pyo.ConcreteModel, combos: Sequence[Combo], tiers: dict[int, dict[str, Any]]) -> dict[int, ComboExprs]:
    """Capex (compute and network) and network power per combination: each link layer's links times
    its medium's price (and power) per link, switch ports, the NICs the platform does not include."""
    per: dict[int, ComboExprs] = {}
    for c in combos:
        i, t = c.index, tiers[c.index]
        switch_count = sum(t["switches"].values())
        nic_count = c.nics_per_domain * model.D[i]
        layers = [t["links"][lvl] for lvl in sorted(t["links"])]
        media = c.link_media
        # an optic at both ends of an optical link (railonly.md §2); a copper cable has none
        transceivers = sum(m.transceivers_per_link * x for m, x in zip(media, layers) if not m.copper)
        dacs = sum(x for m, x in zip(media, layers) if m.copper)
        pr = c.prices
        priced_nics = c.priced_nics_per_domain * model.D[i]
        net_usd = (switch_count * c.radix * pr.switch_port_usd + sum(m.usd_per_link * x for m, x in zip(media, layers))
                   + priced_nics * pr.nic_usd)
        net_w = (switch_count * c.radix * pr.switch_port_w + sum(m.w_per_link * x for m, x in zip(media, layers))
                 + priced_nics * pr.nic_w)
        per[i] = ComboExprs(
            n_gpus=c.hb_domain_size * model.D[i], switches_by_level=_ro(t["switches"]), links_by_layer=_ro(t["links"]),
            switch_count=switch_count, transceiver_count=transceivers, dac_count=dacs, nic_count=nic_count,
            network_capex_usd=net_usd, network_power_w=net_w, compute_capex_usd=c.domain_usd * model.D[i],
            compute_power_w=0)
    return per


def define_power(model: pyo.ConcreteModel, combos: Sequence[Combo], per: dict[int, ComboExprs]) -> dict[int, ComboExprs]:
    """Compute power per combination (the network's is priced with its cost, per component, in
    define_cost: railonly.md §2's per-port shape)."""
    return {c.index: ComboExprs(**{**per[c.index].__dict__, "compute_power_w": c.domain_w * model.D[c.index]})
            for c in combos}


def define_totals(model: pyo.ConcreteModel, combos: Sequence[Combo], per: dict[int, ComboExprs]) -> Handles:
    """Named totals (pyo.Expression) over the combinations, and the handles that expose them."""
    ids = [c.index for c in combos]

    def total(name: str, parts) -> Any:
        expr = pyo.Expression(expr=sum(parts))
        model.add_component(name, expr)
        return expr

    def indicator(pred) -> Any:
        return sum(model.y[c.index] for c in combos if pred(c))

    levels = sorted({lvl for e in per.values() for lvl in e.switches_by_level})
    layers = sorted({lvl for e in per.values() for lvl in e.links_by_layer})
    sw_by_level = {lvl: total(f"switches_level{lvl}", [per[i].switches_by_level[lvl] for i in ids
                                                       if lvl in per[i].switches_by_level]) for lvl in levels}
    radix_of = {c.index: c.radix for c in combos}
    ports_by_level = {lvl: total(f"ports_level{lvl}", [radix_of[i] * per[i].switches_by_level[lvl] for i in ids
                                                       if lvl in per[i].switches_by_level]) for lvl in levels}
    links_by_layer = {lvl: total(f"links_layer{lvl}", [per[i].links_by_layer[lvl] for i in ids
                                                       if lvl in per[i].links_by_layer]) for lvl in layers}
    n_gpus = total("n_gpus", [per[i].n_gpus for i in ids])
    compute_capex = total("compute_capex_usd", [per[i].compute_capex_usd for i in ids])
    network_capex = total("network_capex_usd", [per[i].network_capex_usd for i in ids])
    compute_power = total("compute_power_w", [per[i].compute_power_w for i in ids])
    network_power = total("network_power_w", [per[i].network_power_w for i in ids])
    return Handles(
        combos=tuple(combos), choose=model.y, domains=model.D, per_combo=_ro(per),
        family=_ro({f: indicator(lambda c, f=f: c.family.value == f) for f in sorted({c.family.value for c in combos})}),
        platform=_ro({p: indicator(lambda c, p=p: c.platform == p) for p in sorted({c.platform for c in combos})}),
        switch_mode=_ro({k: indicator(lambda c, k=k: (c.switch, c.radix) == k)
                         for k in sorted({(c.switch, c.radix) for c in combos})}),
        nic=_ro({k: indicator(lambda c, k=k: (c.nic, c.nics_per_gpu) == k)
                 for k in sorted({(c.nic, c.nics_per_gpu) for c in combos})}),
        oversubscription=_ro({r: indicator(lambda c, r=r: c.oversubscription == r)
                              for r in sorted({c.oversubscription for c in combos})}),
        dac_for_nic_links=indicator(lambda c: c.dac_for_nic_links),
        n_gpus=n_gpus,
        n_domains=total("n_domains", [model.D[i] for i in ids]),
        nic_count=total("nic_count", [per[i].nic_count for i in ids]),
        switch_count=total("switch_count", [per[i].switch_count for i in ids]),
        switch_port_count=total("switch_port_count", [radix_of[i] * per[i].switch_count for i in ids]),
        transceiver_count=total("transceiver_count", [per[i].transceiver_count for i in ids]),
        dac_count=total("dac_count", [per[i].dac_count for i in ids]),
        tiers=total("tiers", [c.n_tiers * model.y[c.index] for c in combos]),
        switches_by_level=_ro(sw_by_level), ports_by_level=_ro(ports_by_level), links_by_layer=_ro(links_by_layer),
        compute_capex_usd=compute_capex, network_capex_usd=network_capex,
        capex_usd=total("capex_usd", [compute_capex, network_capex]),
        compute_power_w=compute_power, network_power_w=network_power,
        power_w=total("power_w", [compute_power, network_power]),
        scaleout_gbps_per_gpu=total("scaleout_gbps_per_gpu", [c.scaleout_gbps_per_gpu * model.y[c.index] for c in combos]),
        pflops=total("pflops", [c.hb_domain_size * c.gpu_flops * FLOPS_SCALE * model.D[c.index] for c in combos]),
        job_gpus=n_gpus, spare_domains=total("spare_domains", []),
    )


def define_cost_lines(model: pyo.ConcreteModel, combos: Sequence[Combo], study: NetworkStudy, h: Handles) -> Handles:
    """capex_total_usd and facility_power_w from the study's per-platform cost terms (linear in each
    combination's IT capex, IT power and GPU count); left None without them."""
    if not study.cost_terms:
        return h
    terms = {t.platform: t for t in study.cost_terms}
    missing = sorted({c.platform for c in combos} - set(terms))
    if missing:
        raise SpecError(f"cost_terms: no entry for platform(s) {missing}; give one per platform of choices.platforms")
    per = h.per_combo
    parts_capex, parts_power = [], []
    for c in combos:
        e, t = per[c.index], terms[c.platform]
        it_capex = e.compute_capex_usd + e.network_capex_usd
        it_power = e.compute_power_w + e.network_power_w
        parts_capex.append(t.capex_total_per_capex_usd * it_capex + t.capex_total_per_it_w * it_power
                           + t.capex_total_per_gpu * e.n_gpus)
        parts_power.append(t.pue * it_power)
    model.capex_total_usd = pyo.Expression(expr=sum(parts_capex))
    model.facility_power_w = pyo.Expression(expr=sum(parts_power))
    return replace(h, capex_total_usd=model.capex_total_usd, facility_power_w=model.facility_power_w)


# ----------------------------------------------------------------------------------------------
# Spares (designer.analysis.failures)
# ----------------------------------------------------------------------------------------------


def _spare_exposure(spares: SparesSpec, family: Family, k: int, radix: int, npg: int, n_domains: int):
    return exposure(family, n_domains, k, radix, nics_per_gpu=npg, unit_gpus=spares.unit_gpus,
                    gpus_per_host=spares.rates.gpus_per_host)


def spare_need(spares: SparesSpec, c: Combo, n_domains: int) -> int:
    """g_c(D): spare domains the availability model asks of combination c built with D domains.
    A NIC shared by g GPUs is counted as g NICs of one GPU each: g times the NICs, each failure taking
    one GPU instead of g, the same expected loss."""
    e = _spare_exposure(spares, c.family, c.hb_domain_size, c.radix, c.nics_per_gpu, n_domains)
    return spare_domains_needed(e, spares.rates, spares.confidence)


def built_domains_hi(spares: SparesSpec, family: Family, k: int, radix: int, npg: int, job_domains_hi: int) -> int:
    """The least built D that holds the largest job (designer.analysis.failures.required_spares)."""
    return required_spares(family, job_domains_hi, k, radix, spares.rates, confidence=spares.confidence,
                           target_fraction=spares.target_fraction, nics_per_gpu=npg,
                           unit_gpus=spares.unit_gpus).built_domains


def spare_steps(spares: SparesSpec, c: Combo) -> tuple[int, list[tuple[int, int]]]:
    """g_c over [d_min, d_max] as (value at d_min, [(D threshold, increment)]).

    Scanned D by D where g may be non-monotone (one-tier planes and short rails packed per leaf: the
    units one leaf failure cuts vary with D; those ranges are at most R/2 domains); elsewhere g is
    non-decreasing (designer.analysis.failures docstring) and each step is found by bisection."""
    lo, hi = c.d_min, c.d_max
    base = spare_need(spares, c, lo)
    steps: list[tuple[int, int]] = []
    if c.n_tiers == 1 or c.packed_leaves or hi - lo <= 64:
        last = base
        for d in range(lo + 1, hi + 1):
            v = spare_need(spares, c, d)
            if v != last:
                steps.append((d, v - last))
                last = v
        return base, steps
    top = spare_need(spares, c, hi)
    d, last = lo, base
    while last < top:
        a, b = d + 1, hi  # smallest D in (d, hi] with g(D) > last
        while a < b:
            mid = (a + b) // 2
            if spare_need(spares, c, mid) > last:
                b = mid
            else:
                a = mid + 1
        v = spare_need(spares, c, a)
        steps.append((a, v - last))
        d, last = a, v
    return base, steps


def spare_steps_over(spares: SparesSpec, c: Combo, ranges: Sequence[tuple[int, int]]) -> tuple[int, list[tuple[int, int]]]:
    """g_c on the union of the domain ranges `ranges` (within [d_min, d_max]), in spare_steps' form.

    Between two ranges no D is allowed, so the steps g takes in the gap are merged into one at the
    next range's start (its increment may be negative). The step rows pin w_j = 1 iff D >= t_j, so
    the need is exact for every D of the union; a persistent frontier over GPU levels uses this to
    keep one model for levels far apart (a step per change of g over the whole hull would be
    thousands of binaries at 1e6 GPUs)."""
    merged: list[list[int]] = []
    for lo, hi in sorted(ranges):
        if merged and lo <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    base, steps, last = 0, [], None
    for lo, hi in merged:
        b, st = spare_steps(spares, replace(c, d_min=lo, d_max=hi))
        if last is None:
            base = b
        elif b != last:
            steps.append((lo, b - last))
        steps += st
        last = b + sum(inc for _, inc in st)
    return base, steps


def define_spares(model: pyo.ConcreteModel, combos: Sequence[Combo], study: NetworkStudy, h: Handles, *,
                  spare_ranges: Mapping[int, Sequence[tuple[int, int]]] | None = None,
                  mutable_ranges: bool = False) -> Handles:
    """Job domains J[c] <= D[c] and f J[c] <= D[c] - g_c(D[c]) (module docstring), the job's GPU
    requirement, and the job handles. Without study.spares the handles are returned unchanged.

    spare_ranges: per combination index, the only domain ranges D will take (spare_steps_over);
    mutable_ranges: the job's GPU range is a pair of mutable Params (job_gpus_lo_rhs, job_gpus_hi_rhs)."""
    sp = study.spares
    if sp is None:
        return replace(h, job_pflops=h.pflops)
    by_index = {c.index: c for c in combos}
    spare_ranges = spare_ranges or {}
    plans = {c.index: spare_steps_over(sp, c, spare_ranges[c.index]) if c.index in spare_ranges
             else spare_steps(sp, c) for c in combos}
    model.J = pyo.Var(model.C, domain=pyo.NonNegativeIntegers, bounds=lambda m, i: (0, by_index[i].d_max))
    keys = [(i, j) for i, (_, st) in plans.items() for j in range(len(st))]
    model.W = pyo.Set(initialize=keys, dimen=2, ordered=True)
    model.w = pyo.Var(model.W, domain=pyo.Binary)
    thr = {(i, j): plans[i][1][j][0] for i, j in keys}
    # w[c, j] = 1 iff D >= t_j (while chosen), exactly as the other step functions.
    model.spare_step_on = pyo.Constraint(model.W, rule=lambda m, i, j: m.D[i] >= thr[i, j] * m.w[i, j])
    model.spare_step_off = pyo.Constraint(
        model.W, rule=lambda m, i, j: m.D[i] <= thr[i, j] - 1 + (by_index[i].d_max - thr[i, j] + 1) * m.w[i, j])
    model.spare_step_chosen = pyo.Constraint(model.W, rule=lambda m, i, j: m.w[i, j] <= m.y[i])

    def need(m, i):
        base, st = plans[i]
        return base * m.y[i] + sum(inc * m.w[i, j] for j, (_, inc) in enumerate(st))

    f = sp.target_fraction
    model.job_within = pyo.Constraint(model.C, rule=lambda m, i: m.J[i] <= m.D[i])
    stepped = [c.index for c in combos if c.job_step > 1]
    if stepped:  # gpus.multiple_of applies to the job: J = step * Jz
        model.CJ = pyo.Set(initialize=stepped, ordered=True)
        model.Jz = pyo.Var(model.CJ, domain=pyo.NonNegativeIntegers,
                           bounds=lambda m, i: (0, by_index[i].d_max // by_index[i].job_step))
        model.job_step = pyo.Constraint(model.CJ, rule=lambda m, i: m.J[i] == by_index[i].job_step * m.Jz[i])
    model.job_held = pyo.Constraint(model.C, rule=lambda m, i: f * m.J[i] <= m.D[i] - need(m, i))
    job_gpus = pyo.Expression(expr=sum(by_index[i].hb_domain_size * model.J[i] for i in model.C))
    model.job_gpus = job_gpus
    if mutable_ranges:
        model.job_gpus_lo_rhs = pyo.Param(initialize=study.gpus.lo, mutable=True, within=pyo.NonNegativeIntegers)
        model.job_gpus_hi_rhs = pyo.Param(initialize=study.gpus.hi, mutable=True, within=pyo.NonNegativeIntegers)
        model.job_gpus_lo = pyo.Constraint(expr=job_gpus >= model.job_gpus_lo_rhs)
        model.job_gpus_hi = pyo.Constraint(expr=job_gpus <= model.job_gpus_hi_rhs)
    else:
        model.job_gpus_lo = pyo.Constraint(expr=job_gpus >= study.gpus.lo)
        model.job_gpus_hi = pyo.Constraint(expr=job_gpus <= study.gpus.hi)
    model.spare_domains_total = pyo.Expression(expr=sum(model.D[i] - model.J[i] for i in model.C))
    job_pflops = pyo.Expression(expr=sum(c.hb_domain_size * c.gpu_flops * FLOPS_SCALE * model.J[c.index]
                                         for c in combos))
    model.job_pflops = job_pflops
    return replace(h, job_gpus=job_gpus, spare_domains=model.spare_domains_total, job_pflops=job_pflops,
                   job_domains=model.J)


def design_spares(built: "BuiltModel", combo: Combo) -> int:
    """Spare domains D - J of the chosen combination (0 without spares)."""
    if built.handles.job_domains is None:
        return 0
    m = built.model
    return int(round(pyo.value(m.D[combo.index]) - pyo.value(m.J[combo.index])))


def define_objective(model: pyo.ConcreteModel, h: Handles, kind: str) -> None:
    """min_cost: capex in M USD; max_gpus: GPUs; max_flops: aggregate dense PFLOP/s."""
    if kind == "min_cost":
        model.objective = pyo.Objective(expr=USD_SCALE * h.capex_usd, sense=pyo.minimize)
    elif kind == "max_gpus":
        model.objective = pyo.Objective(expr=h.job_gpus, sense=pyo.maximize)
    elif kind == "max_flops":
        model.objective = pyo.Objective(expr=h.job_pflops, sense=pyo.maximize)
    else:
        raise SpecError(f"objective '{kind}': allowed min_cost, max_gpus, max_flops")


def define_lexicographic_cost(model: pyo.ConcreteModel, h: Handles, kind: str, best: float) -> None:
    """Second stage of max_gpus / max_flops: keep the best value found, then spend as little as possible.
    (A weighted single objective would need a weight below 1/capex, too small for the solver's gap.)"""
    model.objective.deactivate()
    if kind == "max_gpus":
        model.keep_best = pyo.Constraint(expr=h.job_gpus >= round(best))
    else:
        model.keep_best = pyo.Constraint(expr=h.job_pflops >= best * (1 - 1e-9))
    model.objective_cost = pyo.Objective(expr=USD_SCALE * h.capex_usd, sense=pyo.minimize)


def define_lexicographic_stage(model: pyo.ConcreteModel, h: Handles, kind: str) -> None:
    """define_lexicographic_cost for a model solved again and again (a persistent frontier): the kept
    value is a mutable Param, so switching stages changes a number and the active objective, never
    the rows (set_lexicographic_stage). Starts in stage one."""
    model.keep_best_rhs = pyo.Param(initialize=0.0, mutable=True, within=pyo.Reals)
    if kind == "max_gpus":
        model.keep_best = pyo.Constraint(expr=h.job_gpus >= model.keep_best_rhs)
    else:
        model.keep_best = pyo.Constraint(expr=h.job_pflops >= model.keep_best_rhs)
    model.objective_cost = pyo.Objective(expr=USD_SCALE * h.capex_usd, sense=pyo.minimize)
    set_lexicographic_stage(model, kind, None)


def set_lexicographic_stage(model: pyo.ConcreteModel, kind: str, best: float | None) -> None:
    """best None: stage one, the model's own objective; the kept value is 0, which every design meets
    (GPUs and FLOP/s are non-negative), so the row binds nothing. Otherwise stage two: keep `best`
    (as define_lexicographic_cost: the GPU count exactly, FLOP/s within 1e-9) and minimize capex."""
    if best is None:
        model.keep_best_rhs.set_value(0.0)
        model.objective_cost.deactivate()
        model.objective.activate()
        return
    model.keep_best_rhs.set_value(round(best) if kind == "max_gpus" else best * (1 - 1e-9))
    model.objective.deactivate()
    model.objective_cost.activate()


@dataclass(frozen=True)
class BuiltModel:
    model: pyo.ConcreteModel
    handles: Handles
    budgets: BudgetHandles
    combos: tuple[Combo, ...]
    spares: SparesSpec | None = None


def build_model(study: NetworkStudy, catalog: Catalog, *, hooks: Sequence[HookRef] = (),
                combos: Sequence[Combo] | None = None, objective: str | None = None,
                mutable_ranges: bool = False,
                spare_ranges: Mapping[int, Sequence[tuple[int, int]]] | None = None) -> BuiltModel:
    """The whole model, in the order PyPSA uses: variables and structure, budgets, user hooks, objective.

    mutable_ranges and spare_ranges (define_counts, define_spares) build the one model a persistent
    frontier re-solves level after level."""
    combos = tuple(combos) if combos is not None else enumerate_combos(study, catalog)
    model = pyo.ConcreteModel(name=study.name)
    define_choices(model, combos)
    define_counts(model, combos, mutable_ranges=mutable_ranges)
    tiers = define_tiers(model, combos)
    per = define_cost(model, combos, tiers)
    per = define_power(model, combos, per)
    h = define_totals(model, combos, per)
    h = define_spares(model, combos, study, h, spare_ranges=spare_ranges, mutable_ranges=mutable_ranges)
    h = define_cost_lines(model, combos, study, h)
    bh = define_budgets(model, budget_rows(study.budgets), h.metrics(), h.n_gpus)
    apply_hooks(model, tuple(study.hooks) + tuple(hooks), HookContext(study=study, catalog=catalog, handles=h))
    define_objective(model, h, objective or study.objective.base_kind)
    return BuiltModel(model, h, bh, combos, study.spares)


def chosen(built: BuiltModel) -> tuple[Combo, int]:
    """The combination with y = 1 and its domain count, from the loaded solution."""
    m = built.model
    best = max(built.combos, key=lambda c: pyo.value(m.y[c.index]))
    return best, int(round(pyo.value(m.D[best.index])))


def milp_counts(built: BuiltModel, combo: Combo) -> dict[str, Any]:
    """The MILP's own figures for the chosen combination (for cross-checks with the closed form)."""
    e = built.handles.per_combo[combo.index]
    return {
        "switches_by_level": {lvl: int(round(pyo.value(v))) for lvl, v in e.switches_by_level.items()},
        "links_by_layer": {lvl: int(round(pyo.value(v))) for lvl, v in e.links_by_layer.items()},
        "switch_count": int(round(pyo.value(e.switch_count))),
        "transceiver_count": int(round(pyo.value(e.transceiver_count))),
        "dac_count": int(round(pyo.value(e.dac_count))),
        "nic_count": int(round(pyo.value(e.nic_count))),
        "network_capex_usd": pyo.value(e.network_capex_usd),
        "network_power_w": pyo.value(e.network_power_w),
    }
