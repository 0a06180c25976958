"""Output records of the network stage: NetworkDesign (one design) and NetworkResult (a solve).

`extract_design` reads the chosen combination out of a solved model, rebuilds its bill of materials
with the closed form (designer.network.topology, physical convention) and refuses to report a design
whose MILP counts differ from the closed form's: the two must agree exactly.
`design_to_system` turns a design into the ClusterSystem the performance model consumes.
"""

from __future__ import annotations

import re
from typing import Any, Literal

import pyomo.environ as pyo
from pydantic import Field

from designer.errors import SolverError
from designer.network.budgets import BudgetSlack
from designer.network.layout import FabricLayout, fabric_layout, leaf_span_racks
from designer.network.milp import (
    BuiltModel,
    Combo,
    bom_layer_links,
    chosen,
    design_spares,
    layer_options,
    milp_counts,
    spare_need,
    tier_counts,
)
from designer.network.topology import BillOfMaterials, Family, to_network_tiers
from designer.spec.base import Record
from designer.spec.catalog import Catalog
from designer.spec.system import ClusterSystem, HBDomain, HBTopology
from designer.units import GB_PER_S_TO_BYTES_PER_S, gbps_to_bytes_per_s


# The columns every NetworkDesign.row has, and the form of those named after its tiers and link layers
ROW_FIXED_COLUMNS = frozenset((
    "label", "family", "platform", "gpu", "n_gpus", "n_domains", "hb_domain_size", "hb_topology", "nic", "nic_gbps",
    "nics_per_gpu", "gpus_per_nic", "switch", "radix", "port_gbps", "oversubscription", "oversubscribed_level",
    "n_tiers", "dac_for_nic_links", "optic", "dac", "switch_count", "switch_port_count", "transceiver_count",
    "dac_count", "nic_count", "link_count", "compute_capex_usd", "switch_capex_usd", "optics_capex_usd",
    "nic_capex_usd", "network_capex_usd", "capex_usd", "capex_per_gpu_usd", "compute_power_w", "network_power_w",
    "power_w", "scaleout_gbps_per_gpu", "peak_pflops", "bisection_bytes_per_s", "level", "spare_domains", "job_gpus"))
_ROW_VARIABLE_COLUMN = re.compile(r"switches_\w+|medium_\w+|longest_\w+_m")


class NetworkDesign(Record):
    """One cluster design: the choices, its bill of materials, capex and power."""

    label: str
    family: Family
    platform: str
    gpu: str
    n_gpus: int = Field(ge=1)
    n_domains: int = Field(ge=1)
    hb_domain_size: int = Field(ge=1)
    hb_topology: HBTopology
    nic: str
    nic_gbps: float
    nics_per_gpu: int = Field(ge=1)
    gpus_per_nic: int = Field(default=1, ge=1)  # > 1: one NIC shared by that many GPUs (nics_per_gpu 1)
    switch: str
    radix: int
    port_gbps: float
    oversubscription: float = Field(ge=1.0)
    oversubscribed_level: int | None
    n_tiers: int = Field(ge=1)
    dac_for_nic_links: bool  # the NIC-leaf links are copper cables
    optic: str | None  # the optical medium of the lowest optical layer (None: every link copper)
    dac: str | None  # the NIC-leaf copper medium
    bom: BillOfMaterials
    compute_capex_usd: float
    switch_capex_usd: float
    optics_capex_usd: float  # transceivers and DACs
    nic_capex_usd: float
    network_capex_usd: float
    capex_usd: float
    compute_power_w: float
    network_power_w: float
    power_w: float
    scaleout_gbps_per_gpu: float
    peak_pflops: float  # aggregate dense PFLOP/s at the study's precision
    level: float | None = None  # the frontier level this design answers, if any
    # Spare HB domains among the n_domains built (a study's `spares` section): the job runs on
    # n_domains - spare_domains of them; capex, power and the BOM are the built cluster's, spares included.
    spare_domains: int = Field(default=0, ge=0)
    # Per link layer (nic-leaf, leaf-spine, ...): its medium (switch module+NIC module where the NIC
    # end takes another), its links and its longest link; and the floor with every link's length
    # (designer.network.layout).
    link_media: tuple[str, ...] = ()
    link_worst_m: tuple[float, ...] = ()
    layout: FabricLayout | None = None
    # Catalog quantities bought: (media id, modules) and the NICs priced (those the platform's price
    # does not include, Platform.includes_nics), so capex = sum over them of quantity x catalog price.
    media_modules: tuple[tuple[str, float], ...] = ()
    priced_nic_count: float = 0.0

    @property
    def capex_per_gpu_usd(self) -> float:
        return self.capex_usd / self.n_gpus

    @property
    def job_domains(self) -> int:
        return self.n_domains - self.spare_domains

    @property
    def job_gpus(self) -> int:
        return self.job_domains * self.hb_domain_size

    @staticmethod
    def is_row_column(name: str) -> bool:
        """Whether `name` can be a column of `row` for some design: a fixed column, or one of the
        per-tier and per-link-layer columns whose names follow the design's tiers and layers
        (switches_<tier>, medium_<layer>, longest_<layer>_m). Lets a study's column names be checked
        before any design exists."""
        return name in ROW_FIXED_COLUMNS or bool(_ROW_VARIABLE_COLUMN.fullmatch(name))

    def row(self) -> dict[str, Any]:
        """One flat CSV row; units in the column names."""
        b = self.bom
        row: dict[str, Any] = {
            "label": self.label, "family": self.family.value, "platform": self.platform, "gpu": self.gpu,
            "n_gpus": self.n_gpus, "n_domains": self.n_domains, "hb_domain_size": self.hb_domain_size,
            "hb_topology": self.hb_topology.value, "nic": self.nic, "nic_gbps": self.nic_gbps,
            # as a study states it: 0.5 when two GPUs share one NIC
            "nics_per_gpu": self.nics_per_gpu / self.gpus_per_nic, "gpus_per_nic": self.gpus_per_nic, "switch": self.switch,
            "radix": self.radix,
            "port_gbps": self.port_gbps, "oversubscription": self.oversubscription,
            "oversubscribed_level": self.oversubscribed_level, "n_tiers": self.n_tiers,
            "dac_for_nic_links": self.dac_for_nic_links, "optic": self.optic, "dac": self.dac,
            "switch_count": b.switch_count, "switch_port_count": b.switch_port_count,
            "transceiver_count": b.transceiver_count, "dac_count": b.dac_count, "nic_count": b.nic_count,
            "link_count": b.link_count,
        }
        for t in b.tiers:
            row[f"switches_{t.name}"] = t.switches
        for layer, medium, worst in zip(b.transceivers_by_link, self.link_media, self.link_worst_m):
            key = layer.replace("-", "_")
            row[f"medium_{key}"] = medium
            row[f"longest_{key}_m"] = worst
        row.update({
            "compute_capex_usd": self.compute_capex_usd, "switch_capex_usd": self.switch_capex_usd,
            "optics_capex_usd": self.optics_capex_usd, "nic_capex_usd": self.nic_capex_usd,
            "network_capex_usd": self.network_capex_usd, "capex_usd": self.capex_usd,
            "capex_per_gpu_usd": self.capex_per_gpu_usd, "compute_power_w": self.compute_power_w,
            "network_power_w": self.network_power_w, "power_w": self.power_w,
            "scaleout_gbps_per_gpu": self.scaleout_gbps_per_gpu, "peak_pflops": self.peak_pflops,
            "bisection_bytes_per_s": b.bisection_bandwidth_bytes_per_s, "level": self.level,
            "spare_domains": self.spare_domains, "job_gpus": self.job_gpus,
        })
        return row


class NetworkResult(Record):
    """What a solve returns. For a frontier, one design per feasible level, in level order;
    `budget_slacks[i]` belongs to `designs[i]`."""

    designs: tuple[NetworkDesign, ...]
    status: Literal["optimal", "incumbent"]
    gap: float | None  # largest relative MIP gap over the solves
    solve_time_s: float
    budget_slacks: tuple[tuple[BudgetSlack, ...], ...]
    # frontier levels with no feasible design, each "level: why" (the binding budget and shortfall)
    dropped_levels: tuple[str, ...] = ()
    # seconds in HiGHS (with the model's translation or update) for each design, parallel to `designs`
    solve_times_s: tuple[float, ...] = ()

    @property
    def design(self) -> NetworkDesign:
        return self.designs[0]

    def to_json(self) -> dict[str, Any]:
        """JSON-ready: each design's flat row, its budgets, and the solve's status."""
        return {
            "status": self.status, "gap": self.gap, "solve_time_s": self.solve_time_s,
            "designs": [d.row() for d in self.designs],
            "budget_slacks": [[s.model_dump(mode="json") for s in row] for row in self.budget_slacks],
        }

    @property
    def slacks(self) -> dict[str, BudgetSlack]:
        """The first design's budgets by name."""
        return {s.name: s for s in self.budget_slacks[0]} if self.budget_slacks else {}


def design_layout(combo: Combo, n_domains: int, bom: BillOfMaterials) -> FabricLayout:
    """The floor of the design and every link's length, each layer with the combination's medium."""
    links = bom_layer_links(bom)
    switches, _ = tier_counts(combo, n_domains)
    span = leaf_span_racks(combo.rack, combo.family, n_tiers=combo.n_tiers, radix=combo.radix, n_domains=n_domains,
                           nic_ranks=combo.nic_ranks, gpus_per_nic=combo.gpus_per_nic)
    return fabric_layout(combo.floor, combo.rack, n_domains=n_domains, nic_links_per_domain=links[0] // n_domains,
                         leaf_span_racks=span, upper_links=links[1:], upper_switches=sum(switches[1:]),
                         layer_options=layer_options(combo), layer_media=[m.label for m in combo.link_media],
                         nic_link_length_m=combo.nic_link_length_m)


def _media_modules(combo: Combo, bom: BillOfMaterials) -> tuple[tuple[str, float], ...]:
    """Modules bought per media id: a module serves ports_per_module link ends (a transceiver) or
    links (a cable), so a layer of n links takes 2n / ports_per_module transceivers, n / ports_per_module
    cables (whose cost is n x usd_per_link)."""
    out: dict[str, float] = {}
    for n, m in zip(bom_layer_links(bom), combo.link_media):
        if m.nic_end is not None:
            # a NIC-leaf link whose NIC end takes a single-port module (layout.nic_link_option)
            out[m.id] = out.get(m.id, 0.0) + n / m.ports_per_module
            out[m.nic_end] = out.get(m.nic_end, 0.0) + n
            continue
        ends = 2 if m.transceivers_per_link and m.kind not in ("aoc",) else 1
        out[m.id] = out.get(m.id, 0.0) + n * ends / m.ports_per_module
    return tuple(sorted(out.items()))


def extract_design(built: BuiltModel, catalog: Catalog, level: float | None = None) -> NetworkDesign:
    """The solved model's design, with its closed-form bill of materials (which must agree)."""
    combo, n_domains = chosen(built)
    bom = combo.bom(n_domains)
    got = milp_counts(built, combo)
    want = {
        "switches_by_level": {t.level: t.switches for t in bom.tiers},
        "switch_count": bom.switch_count, "transceiver_count": bom.transceiver_count,
        "dac_count": bom.dac_count, "nic_count": bom.nic_count,
    }
    for key, value in want.items():
        if got[key] != value:
            raise SolverError(f"internal: MILP {key} {got[key]} differs from the closed form {value} for "
                              f"{combo.label} at {n_domains} domains")
    spares = design_spares(built, combo)
    sp = built.spares
    if sp is not None:
        # The availability model must agree with the MILP's step function at the chosen size.
        need = spare_need(sp, combo, n_domains)
        if sp.target_fraction * (n_domains - spares) > n_domains - need + 1e-9 or spares < 0:
            raise SolverError(f"internal: {spares} spare domains of {n_domains} miss the availability model's "
                              f"need of {need} for {combo.label}")
    layout = design_layout(combo, n_domains, bom)
    margin = combo.floor.length_margin
    for layer, medium in zip(layout.layers, combo.link_media):
        # The block's medium must reach the layer's longest link at the chosen size (media_runs).
        if medium.reach_m < layer.worst_m * margin - 1e-9:
            raise SolverError(f"internal: {layer.name} medium {medium.id} ({medium.reach_m:g} m) does not reach "
                              f"{layer.worst_m:.1f} m x {margin:g} for {combo.label} at {n_domains} domains")
    plat = catalog.platform(combo.platform)
    compute_usd = combo.domain_usd * n_domains
    compute_w = combo.domain_w * n_domains
    n_gpus = n_domains * combo.hb_domain_size
    return NetworkDesign(
        label=combo.label, family=combo.family, platform=combo.platform, gpu=combo.gpu, n_gpus=n_gpus,
        n_domains=n_domains, hb_domain_size=combo.hb_domain_size, hb_topology=plat.hb_topology,
        nic=combo.nic, nic_gbps=combo.nic_gbps, nics_per_gpu=combo.nics_per_gpu, gpus_per_nic=combo.gpus_per_nic,
        switch=combo.switch,
        radix=combo.radix, port_gbps=combo.port_gbps, oversubscription=combo.oversubscription,
        oversubscribed_level=combo.oversubscribed_level, n_tiers=combo.n_tiers,
        dac_for_nic_links=combo.dac_for_nic_links, optic=combo.optic, dac=combo.dac, bom=bom,
        compute_capex_usd=compute_usd, switch_capex_usd=bom.switch_cost_usd,
        optics_capex_usd=bom.optics_cost_usd + bom.dac_cost_usd, nic_capex_usd=bom.nic_cost_usd,
        network_capex_usd=bom.cost_usd, capex_usd=compute_usd + bom.cost_usd,
        compute_power_w=compute_w, network_power_w=bom.power_w, power_w=compute_w + bom.power_w,
        scaleout_gbps_per_gpu=combo.scaleout_gbps_per_gpu,
        peak_pflops=n_gpus * combo.gpu_flops * 1e-15, level=level, spare_domains=spares,
        link_media=tuple(m.label for m in combo.link_media), link_worst_m=tuple(x.worst_m for x in layout.layers),
        layout=layout, media_modules=_media_modules(combo, bom),
        priced_nic_count=combo.priced_nics_per_domain * n_domains,
    )


def design_to_system(design: NetworkDesign, catalog: Catalog) -> ClusterSystem:
    """The plain cluster description for the performance model (perf never imports network). The job
    trains on the design's job GPUs: spare HB domains are built and wired, but hold no ranks."""
    plat = catalog.platform(design.platform)
    gpu = catalog.gpu(design.gpu)
    hb_gb_per_s = plat.hb_gb_per_s_per_direction or gpu.hb_gb_per_s_per_direction
    sharp = catalog.switch(design.switch).in_network_reduction
    tiers = tuple(t.model_copy(update={"in_network_reduction": sharp}) for t in to_network_tiers(design.bom))
    return ClusterSystem(
        gpu=gpu.perf(),
        n_gpus=design.job_gpus,
        hb=HBDomain(size=plat.hb_domain_size, bandwidth_per_gpu_bytes_per_s=hb_gb_per_s * GB_PER_S_TO_BYTES_PER_S,
                    topology=plat.hb_topology, torus_dims=plat.torus_dims,
                    in_network_reduction=plat.in_network_reduction),
        nic_bandwidth_per_gpu_bytes_per_s=gbps_to_bytes_per_s(design.scaleout_gbps_per_gpu),
        nics_per_gpu=design.nics_per_gpu,
        tiers=tiers,
        family=design.family.value,
    )


def model_value(expr) -> float:
    return float(pyo.value(expr))
