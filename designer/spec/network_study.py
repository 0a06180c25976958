"""The network study: what the sizing MILP may choose, what it must meet, and what it optimizes.

Self-contained on purpose: the full product study embeds this record as its `network:` section.
Only `designer.spec` is imported here (the spec layer never imports `designer.network`), so the
topology family names are plain strings that `designer.network.topology.Family` accepts.

Checks that need the hardware catalog (unknown ids, HB-domain divisibility, a radix a family cannot
use) run in `check_against_catalog`, called by `designer.network.api` after the catalog is loaded;
each raises one-line SpecError naming the field, the value and what is allowed.
"""

from __future__ import annotations

import math
import re
from enum import Enum
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from designer.errors import SpecError
from designer.spec.base import Record
from designer.spec.catalog import Catalog, load_catalog
from designer.spec.load import read_yaml, validate
from designer.usercode import CODE_REF_FORMS, CODE_REF_RE, resolve_path

FamilyName = Literal["rail-optimized", "rail-only", "oversubscribed", "fat-tree"]

# Oversubscription ratios (down:up at the oversubscribed tier boundary) a study may offer: a discrete
# set. 1 is non-blocking; 3, 7 and 15 are the common 1:3, Meta's 1:7 aggregation and HPN's reported
# 15:1 tier 3 (hardware-and-libraries.md §3.3). The closed form takes the ratio as an exact rational.
MAX_OVERSUBSCRIPTION = 64.0
# The largest GPU count a study may ask for: 100x the largest clusters planned (~1M GPUs); beyond it
# counts are typos (1e30) that the MILP would turn into nonsense rather than an error.
MAX_GPUS = 100_000_000

_NAME_RE = re.compile(r"^[A-Za-z_][\w]*$")
# Catalog media kinds that are copper cables (no transceiver); the rest are optical.
COPPER_MEDIA_KINDS = ("dac", "copper_active")


class Metric(str, Enum):
    """Linear quantities of a design that a declarative budget may bound (see designer.network.milp)."""

    n_gpus = "n_gpus"
    n_domains = "n_domains"
    switch_count = "switch_count"
    switch_port_count = "switch_port_count"
    transceiver_count = "transceiver_count"
    dac_count = "dac_count"
    nic_count = "nic_count"
    tiers = "tiers"
    capex_usd = "capex_usd"
    compute_capex_usd = "compute_capex_usd"
    network_capex_usd = "network_capex_usd"
    # capex / n_gpus is not linear; capex_per_gpu <= rhs is written as capex - rhs * n_gpus <= 0.
    capex_per_gpu_usd = "capex_per_gpu_usd"
    power_w = "power_w"
    network_power_w = "network_power_w"
    scaleout_gbps_per_gpu = "scaleout_gbps_per_gpu"
    # With a `spares` section: the job's GPUs (n_gpus is the built cluster) and the spare HB domains.
    job_gpus = "job_gpus"
    spare_domains = "spare_domains"
    # With the study's `costs` section (designer run; NetworkStudy.cost_terms): IT capex plus storage,
    # front-end network and facility build, and the power at the facility meter (IT x PUE).
    capex_total_usd = "capex_total_usd"
    facility_power_w = "facility_power_w"


MAX_PRICE_MULTIPLIER = 1000.0


class CatalogSource(Record):
    """The shipped catalog plus the user's files (entries with a known id update it) and multipliers."""

    extra_files: tuple[str, ...] = ()
    price_multipliers: dict[str, float] = Field(default_factory=dict)

    @field_validator("price_multipliers")
    @classmethod
    def _nonneg(cls, v: dict[str, float]) -> dict[str, float]:
        # a multiplier scales catalog prices (a discount, a premium, a scenario): beyond 1,000x it is a
        # typo, and prices that far out of range leave the MILP numerically meaningless
        for k, f in v.items():
            if not 0 <= f <= MAX_PRICE_MULTIPLIER:
                raise ValueError(f"multiplier for '{k}' is {f:g}; allowed: 0 to {MAX_PRICE_MULTIPLIER:g}")
        return v


class NicChoice(Record):
    """A NIC model and how many per GPU: whole numbers (1, 2: rails per GPU), or 1/2, 1/4, 1/8 for a
    NIC shared by 2, 4 or 8 GPUs (e.g. 0.5: 4 NICs in an 8-GPU node), where the platform allows it
    (catalog `min_nics_per_gpu`)."""

    id: str
    nics_per_gpu: tuple[float, ...] = Field(default=(1,), min_length=1)

    @field_validator("nics_per_gpu")
    @classmethod
    def _pos(cls, v: tuple[float, ...]) -> tuple[float, ...]:
        for k in v:
            whole = k >= 1 and float(k).is_integer()
            shared = 0 < k < 1 and float(1 / k).is_integer() and round(1 / k) in (2, 4, 8)
            if not (whole or shared):
                raise ValueError(f"{k}: allowed NIC counts per GPU are whole numbers >= 1, or 0.5, 0.25, 0.125 (a NIC shared by 2, 4 or 8 GPUs)")
        return tuple(sorted({int(k) if k >= 1 else float(k) for k in v}))


class SwitchChoice(Record):
    id: str
    # Port modes to consider, by radix (e.g. 64 for 64x800G, 128 for the 128x400G breakout).
    # Empty: every mode of the catalog entry whose radix the chosen families can use.
    radix: tuple[int, ...] = ()


# ------------------------------------------------------------------------------------------------
# The floor the fabric stands on (designer.network.layout turns it into cable lengths)
# ------------------------------------------------------------------------------------------------

# Defaults, prices-and-layout.md §3 and suggested change B.18:
# 2 ft (0.61 m) floor tiles, one 600 mm rack per tile (server-racks.com aisle-pitch page).
DEFAULT_RACK_WIDTH_M = 0.6
# A 42-inch-deep rack covers 1.5 tiles (server-racks.com): 1.07 m.
DEFAULT_RACK_DEPTH_M = 1.07
# A 7-tile (14 ft) pitch, row centre to row centre (server-racks.com): 4.27 m.
DEFAULT_ROW_PITCH_M = 4.27
# Up out of one rack and down into the other, with slack: 2 x 2.5 m (B.18's cable length model).
DEFAULT_VERTICAL_SLACK_M = 5.0
# Racks per row: B.18's default (its worked example: 64 racks as 4 rows of 16).
DEFAULT_RACKS_PER_ROW = 16
# A cable inside one rack [der]: a 42U rack is 1.87 m tall (42 x 44.45 mm, EIA-310); a switch mid-rack
# reaches the farthest server over ~0.9 m of height plus ~0.5 m of dressing to the ports. NVIDIA's
# in-rack DACs are 0.5-2 m (MCP7Y00 / MCP4Y10, prices-and-layout.md §2a).
DEFAULT_IN_RACK_LINK_M = 1.5
# Switches per network rack: site reports put 12 Quantum-X800 Q3400-RA in one ~8.8 kW rack
# (hardware-and-libraries.md §3.1) [S].
DEFAULT_SWITCHES_PER_NETWORK_RACK = 12
# Reach needed = 1.1 x the link's length (B.18).
DEFAULT_LENGTH_MARGIN = 1.1
# Rack power limits for deriving GPUs per rack (designer.network.layout.rack_plan):
# air [der]: the NVIDIA DGX SuperPOD H100 rack, 4 DGX H100 at 10.2 kW = 40.8 kW; "air cooling tops out
# at ~30-40 kW per rack" (STH, prices-and-layout.md §3);
AIR_RACK_POWER_W = 41_000.0
# liquid [spec]: NVIDIA GB300 NVL72 Enterprise RA, "Full rack requiring up to 142 kW" (§1a).
LIQUID_RACK_POWER_W = 142_000.0

LeafPlacement = Literal["in_rack", "middle_of_row", "end_of_row", "central"]
SpinePlacement = Literal["central", "end_of_hall"]


class FloorLayout(Record):
    """Rows of compute racks and where the switches stand (designer.network.layout docstring).

    gpus_per_rack None: derived from the platform (its HB domain and power) under the rack power limit
    of `cooling` (None: liquid for rack-scale HB domains such as NVL72, air for 8-GPU hosts) or
    `rack_power_w`. leaf_placement: in_rack (top of rack), middle_of_row (a leaf rack mid-row, as the
    SuperPOD H100 SU), end_of_row (NVIDIA's AI-factory practice, prices-and-layout.md §3) or central
    (all leaves mid-floor). spine_placement: the network area of spines and cores, central or at the
    end of the hall."""

    # None: rows of 16 in side-by-side blocks, about square (for_racks); a number: one hall of such rows
    racks_per_row: int | None = Field(default=None, ge=1, le=10_000)
    # leaves at the end or the middle of a row stand once per block of this many racks along it, as
    # each scalable unit keeps its leaves beside its racks (None: the whole row is one block; the
    # default floor's blocks are DEFAULT_RACKS_PER_ROW)
    racks_per_block: int | None = Field(default=None, ge=1, le=10_000)
    rack_width_m: float = Field(default=DEFAULT_RACK_WIDTH_M, gt=0, le=5)
    rack_depth_m: float = Field(default=DEFAULT_RACK_DEPTH_M, gt=0, le=5)
    row_pitch_m: float = Field(default=DEFAULT_ROW_PITCH_M, gt=0, le=100)
    vertical_slack_m: float = Field(default=DEFAULT_VERTICAL_SLACK_M, ge=0, le=100)
    in_rack_link_m: float = Field(default=DEFAULT_IN_RACK_LINK_M, gt=0, le=10)
    gpus_per_rack: int | None = Field(default=None, ge=1, le=100_000)
    cooling: Literal["air", "liquid"] | None = None
    rack_power_w: float | None = Field(default=None, gt=0, le=10_000_000)
    leaf_placement: LeafPlacement = "end_of_row"
    spine_placement: SpinePlacement = "central"
    switches_per_network_rack: int = Field(default=DEFAULT_SWITCHES_PER_NETWORK_RACK, ge=1, le=1000)
    length_margin: float = Field(default=DEFAULT_LENGTH_MARGIN, ge=1.0, le=10)

    def for_racks(self, n_racks: int) -> "FloorLayout":
        """The floor planned for `n_racks` compute racks (the MILP plans each combination's floor for
        the largest cluster the study may build, so one floor serves all its sizes and the link
        lengths only grow with the domain count). Unless the study sets racks_per_row, rows
        of DEFAULT_RACKS_PER_ROW racks stand side by side in c blocks, with c chosen so the floor is
        about square (c = round(sqrt(n_racks x row_pitch / rack_width) / 16), at least 1): a cable
        runs along the rows across the blocks as along one longer row, and end- or middle-of-row
        leaves stand once per block (racks_per_block). One hall of 16-rack rows would
        be 868 rows (3.7 km) deep at 13,888 NVL72 racks, past every optic's reach; a square floor of
        the same area is 190 m a side. Fabrics up to about 36 racks keep rows of 16."""
        if self.racks_per_row is not None:
            return self
        side = math.sqrt(n_racks * self.row_pitch_m / self.rack_width_m)
        blocks = max(1, round(side / DEFAULT_RACKS_PER_ROW))
        block = self.racks_per_block or DEFAULT_RACKS_PER_ROW
        return self.model_copy(update={"racks_per_row": blocks * DEFAULT_RACKS_PER_ROW,
                                       "racks_per_block": block if blocks > 1 or self.racks_per_block else None})

    @property
    def min_racks_per_row(self) -> int:
        """The shortest row the floor may have: the study's, else one block of DEFAULT_RACKS_PER_ROW."""
        return self.racks_per_row if self.racks_per_row is not None else DEFAULT_RACKS_PER_ROW

    @model_validator(mode="after")
    def _sensible(self) -> "FloorLayout":
        if self.racks_per_block is not None and self.racks_per_row is not None and self.racks_per_block > self.racks_per_row:
            raise ValueError(f"racks_per_block {self.racks_per_block} is more than racks_per_row {self.racks_per_row}; "
                             "allowed: racks_per_block <= racks_per_row")
        if self.rack_depth_m >= self.row_pitch_m:
            raise ValueError(f"rack_depth_m {self.rack_depth_m:g} is not less than row_pitch_m {self.row_pitch_m:g}: "
                             "a rack as deep as the row pitch leaves no aisle; allowed: rack_depth_m < row_pitch_m")
        if self.in_rack_link_m > self.vertical_slack_m + self.rack_width_m and self.vertical_slack_m > 0:
            raise ValueError(f"in_rack_link_m {self.in_rack_link_m:g} is longer than a cable to the next rack "
                             f"({self.vertical_slack_m + self.rack_width_m:g} m = vertical_slack_m + rack_width_m); "
                             "allowed: in_rack_link_m <= vertical_slack_m + rack_width_m")
        return self


class LinkMediaPolicy(Record):
    """Which media the links may use. Every link layer (NIC-leaf, leaf-spine, spine-core, ...) gets the
    cheapest allowed medium whose reach covers its longest link (choices.layout) times the length
    margin, at the port speed and lane rate.

    nic_links: 'cheapest' (any kind: passive or active copper, AOC, optics); 'dac' the same (its
    earlier name: copper where it reaches, else optics); 'optic' optics only (a transceiver at both
    ends, or an AOC); 'choose' both, the MILP picks. Switch-to-switch links are optical (they leave
    the rack). `optic` / `dac` name catalog media: a named optic is then the only optical medium, a
    named dac the only copper one. nic_link_length_m: every NIC-leaf link that long instead of the
    layout's lengths (None: from the layout)."""

    nic_links: Literal["cheapest", "dac", "optic", "choose"] = "cheapest"
    nic_link_length_m: float | None = Field(default=None, gt=0)
    optic: str | None = None
    dac: str | None = None
    # Media offered only on request (the catalog's options, prices-and-layout.md §2a): linear pluggable
    # optics (kind lpo: they work only where the host's SerDes can drive them), linear active
    # copper (kind copper_active: no NVIDIA part or price found) and active optical cables (kind aoc:
    # no sourced price). List their ids to let the layout choose them; a medium named as `optic` or
    # `dac` is allowed too.
    allow: tuple[str, ...] = ()


class Choices(Record):
    platforms: tuple[str, ...] = Field(min_length=1)
    nics: tuple[NicChoice, ...] = Field(min_length=1)
    switches: tuple[SwitchChoice, ...] = Field(min_length=1)
    families: tuple[FamilyName, ...] = Field(default=("rail-optimized", "rail-only"), min_length=1)
    # Ratios r (r:1) offered to the 'oversubscribed' family (ignored by the others).
    oversubscription: tuple[float, ...] = Field(default=(3.0,), min_length=1)
    # The tier boundary that is thinned (1 = leaf uplinks); None = the top boundary (L-1), as the
    # closed form's default (designer.network.topology.resolve_oversubscribed_level).
    oversubscribed_level: int | None = Field(default=None, ge=1)
    # Co-design: the tier boundaries to try, each one a design knob of the 'oversubscribed' family
    # (empty: oversubscribed_level alone). The cheapest-network mode takes one level only.
    oversubscribed_levels: tuple[int, ...] = ()
    media: LinkMediaPolicy = LinkMediaPolicy()
    layout: FloorLayout = FloorLayout()

    @field_validator("oversubscribed_levels")
    @classmethod
    def _levels(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if any(x < 1 for x in v):
            raise ValueError(f"{list(v)}: tier boundaries are >= 1 (1 = the leaf uplinks)")
        return tuple(sorted(set(v)))

    @field_validator("oversubscription")
    @classmethod
    def _ratios(cls, v: tuple[float, ...]) -> tuple[float, ...]:
        bad = [o for o in v if not 1.0 <= o <= MAX_OVERSUBSCRIPTION]
        if bad:
            raise ValueError(f"ratio {bad[0]} is out of range; allowed: 1 <= r <= {MAX_OVERSUBSCRIPTION:g}")
        return tuple(sorted(set(v)))


class GpuRequirement(Record):
    """Either an exact `count`, or a range [`min`, `max`] the MILP chooses from.

    `multiple_of`: the GPU count (the job's, with spares) must be a multiple of it, e.g. so that a
    budget-maximizing objective returns counts the model's parallel strategies divide. It must itself
    be a multiple of every chosen platform's HB-domain size (checked against the catalog)."""

    count: int | None = Field(default=None, ge=1, le=MAX_GPUS)
    min: int | None = Field(default=None, ge=1, le=MAX_GPUS)
    max: int | None = Field(default=None, ge=1, le=MAX_GPUS)
    multiple_of: int | None = Field(default=None, ge=1, le=MAX_GPUS)
    min_scaleout_gbps_per_gpu: float = Field(default=0.0, ge=0, description="NIC injection bandwidth per GPU")

    @model_validator(mode="after")
    def _one_form(self) -> "GpuRequirement":
        if self.count is None and self.max is None:
            raise ValueError("give either count or max (with optional min)")
        if self.count is not None and (self.min is not None or self.max is not None):
            raise ValueError("give either count or min/max, not both")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min {self.min} exceeds max {self.max}")
        return self

    @property
    def lo(self) -> int:
        return self.count if self.count is not None else (self.min or 1)

    @property
    def hi(self) -> int:
        return self.count if self.count is not None else int(self.max)  # type: ignore[arg-type]


class DeclaredBudget(Record):
    """A budget declared as data (PyPSA GlobalConstraint style): metric sense rhs, a named constraint."""

    name: str
    metric: Metric
    sense: Literal["<=", ">="] = "<="
    rhs: float = Field(ge=0)

    @field_validator("name")
    @classmethod
    def _ident(cls, v: str) -> str:
        if not _NAME_RE.match(v):
            raise ValueError(f"'{v}' must be an identifier (letters, digits, _)")
        return v


class Budgets(Record):
    """capex_usd and power_w: IT capex (compute + back-end fabric) and IT load. capex_total_usd and
    facility_power_w (with the study's `costs` section): capex with storage, front-end network and
    facility build, and the power at the facility meter (IT x PUE)."""

    capex_usd: float | None = Field(default=None, ge=0)
    power_w: float | None = Field(default=None, ge=0)
    capex_total_usd: float | None = Field(default=None, ge=0)
    facility_power_w: float | None = Field(default=None, ge=0)
    declared: tuple[DeclaredBudget, ...] = ()

    @model_validator(mode="after")
    def _unique(self) -> "Budgets":
        names = [b.name for b in self.declared] + ["capex_usd", "power_w", "capex_total_usd", "facility_power_w"]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"budget name(s) {sorted(dup)} used twice (capex_usd, power_w, capex_total_usd and "
                             "facility_power_w are reserved)")
        return self


ObjectiveKind = Literal["min_cost", "max_gpus", "max_flops"]


class FrontierSpec(Record):
    """Epsilon-constraint frontier: optimize `optimize` once per level of `vary`.

    vary = n_gpus fixes the GPU count to each level (use with min_cost); vary = capex_usd or power_w
    caps that budget at each level (use with max_gpus or max_flops)."""

    vary: Literal["n_gpus", "capex_usd", "power_w"]
    levels: tuple[float, ...] = Field(min_length=1)
    optimize: ObjectiveKind

    @model_validator(mode="after")
    def _consistent(self) -> "FrontierSpec":
        if any(x < 0 for x in self.levels):
            raise ValueError(f"levels {self.levels}: every level must be >= 0")
        if self.vary == "n_gpus" and self.optimize != "min_cost":
            raise ValueError("vary n_gpus fixes the GPU count; optimize must be min_cost")
        if self.vary != "n_gpus" and self.optimize == "min_cost":
            raise ValueError(f"vary {self.vary} caps a budget; optimize must be max_gpus or max_flops")
        return self


class Objective(Record):
    kind: Literal["min_cost", "max_gpus", "max_flops", "frontier"] = "min_cost"
    precision: Literal["bf16", "fp16", "fp8", "mxfp8", "nvfp4"] = "bf16"  # for max_flops
    frontier: FrontierSpec | None = None

    @model_validator(mode="after")
    def _frontier(self) -> "Objective":
        if (self.kind == "frontier") != (self.frontier is not None):
            raise ValueError("kind 'frontier' needs a 'frontier' section, and only it may have one")
        return self

    @property
    def base_kind(self) -> str:
        return self.frontier.optimize if self.frontier is not None else self.kind


class SolverSettings(Record):
    time_limit_s: float = Field(default=60.0, gt=0)
    rel_gap: float = Field(default=1e-6, ge=0, le=1)
    # HiGHS aborts or hangs on thread counts in the tens of thousands: a bound well above any host
    threads: int = Field(default=1, ge=1, le=1024, description="1 keeps HiGHS deterministic")
    seed: int = Field(default=0, ge=0)


# ------------------------------------------------------------------------------------------------
# Spares: component reliability and the availability target (designer.analysis.failures models them)
# ------------------------------------------------------------------------------------------------

# Default reliability figures, per component, with their sources. The one large public breakdown is
# Meta's Llama 3 pre-training snapshot (Dubey et al., "The Llama 3 Herd of Models", arXiv 2407.21783,
# §3.3.4 Table 5; table reproduced at glennklockwood.com/garden/component-reliability): 16,384 H100
# GPUs (one 400G NIC per GPU, 8 GPUs per host) over 54 days = 21,233,664 GPU-hours, 419 unexpected
# interruptions. Repair times are not published there: every MTTR below is an assumption [E].
LLAMA3_GPU_HOURS = 16_384 * 54 * 24  # 21,233,664
# GPU: faulty GPU 148 + HBM3 72 + SRAM 19 + GPU system processor 17 + silent data corruption 6
# + thermal interface/sensor 6 = 268 events -> MTBF = 21,233,664 / 268 = 79,230 h per GPU [der].
DEFAULT_GPU_MTBF_H = LLAMA3_GPU_HOURS / 268
# Host (CPU, memory, SSD, PSU, chassis, IO board, unplanned host maintenance): 2 + 2 + 3 + 3 + 2 + 2
# + 32 = 46 events over 2,048 hosts of 8 GPUs -> MTBF = 2,048 * 1,296 h / 46 = 57,700 h per host [der].
DEFAULT_HOST_MTBF_H = (LLAMA3_GPU_HOURS / 8) / 46
DEFAULT_GPUS_PER_HOST = 8  # HGX/DGX H100 host, as in the Llama 3 cluster
# NIC: 7 events over 16,384 NICs -> MTBF = 3,033,381 h per NIC [der].
DEFAULT_NIC_MTBF_H = LLAMA3_GPU_HOURS / 7
# Switch: Singh et al., "Surviving switch failures in cloud datacenters", CCR 51(2) 2021 (180,000
# Azure switches): 98 % survive 3 months (2,190 h) -> hazard -ln(0.98)/2,190 h -> MTBF 108,400 h [der].
DEFAULT_SWITCH_MTBF_H = 108_400.0
# Link (optic or cable, either layer): Llama 3's 35 "network switch/cable" events less the ~15.3
# switch failures Singh et al.'s rate predicts for a 3-tier radix-64 fabric of 16,384 GPUs (1,280
# switches x 1,296 h / 108,400 h), i.e. ~19.7 link events over 3 x 16,384 = 49,152 links ->
# MTBF = 49,152 x 1,296 h / 19.7 = 3.2e6 h per link [der, rough: Meta's fabric is not exactly this].
DEFAULT_LINK_MTBF_H = 3.2e6


class ComponentReliability(Record):
    """Mean time between failures and mean time to repair of one component, in hours. Its steady-state
    unavailability (alternating renewal process) is mttr / (mtbf + mttr)."""

    mtbf_h: float = Field(gt=0)
    mttr_h: float = Field(gt=0)

    @property
    def unavailability(self) -> float:
        return self.mttr_h / (self.mtbf_h + self.mttr_h)


class FailureRates(Record):
    """Per-component reliability (defaults: see the constants above; MTTRs are assumptions [E]:
    a GPU swap with burn-in 72 h, a host or NIC repair 24 h, a switch replacement 24 h, an optic or
    cable swap 6 h)."""

    gpu: ComponentReliability = ComponentReliability(mtbf_h=DEFAULT_GPU_MTBF_H, mttr_h=72.0)
    host: ComponentReliability = ComponentReliability(mtbf_h=DEFAULT_HOST_MTBF_H, mttr_h=24.0)
    nic: ComponentReliability = ComponentReliability(mtbf_h=DEFAULT_NIC_MTBF_H, mttr_h=24.0)
    switch: ComponentReliability = ComponentReliability(mtbf_h=DEFAULT_SWITCH_MTBF_H, mttr_h=24.0)
    link: ComponentReliability = ComponentReliability(mtbf_h=DEFAULT_LINK_MTBF_H, mttr_h=6.0)
    gpus_per_host: int = Field(default=DEFAULT_GPUS_PER_HOST, ge=1)

    def scaled(self, factor: float) -> "FailureRates":
        """Every failure rate multiplied by `factor` (MTBF divided by it), repair times unchanged."""
        if not factor > 0:
            raise SpecError(f"failure-rate factor {factor!r}: must be > 0")
        upd = {name: getattr(self, name).model_copy(update={"mtbf_h": getattr(self, name).mtbf_h / factor})
               for name in ("gpu", "host", "nic", "switch", "link")}
        return self.model_copy(update=upd)


class SparesSpec(Record):
    """Ask the MILP for spare HB domains (designer.analysis.failures): the built cluster holds D
    domains, the job J <= D of them, and with probability >= `confidence` at a random instant at
    least ceil(target_fraction * J) domains' worth of healthy units are left after GPU, host, NIC,
    link and leaf-switch failures. The study's GPU requirement then applies to the job's GPUs.

    `unit_gpus`: GPUs a GPU-side failure takes out of the job in families with an any-to-any fabric
    (rail-optimized, oversubscribed, fat-tree): its tensor-parallel group moves to a spare elsewhere
    (default 8, a TP group of one 8-GPU host). In rail-only the whole HB domain moves (railonly.md §6),
    so the unit is K there whatever this says."""

    confidence: float = Field(default=0.999, gt=0, lt=1)
    target_fraction: float = Field(default=1.0, gt=0, le=1)
    unit_gpus: int = Field(default=8, ge=1)
    rates: FailureRates = FailureRates()


class PlatformCostTerms(Record):
    """A platform's total capex and facility power as linear forms of its design's IT capex, IT power
    and GPU count (designer.analysis.tco.linear_terms for its cooling kind), set by `designer run`
    from the study's `costs` section so the MILP can bound them."""

    platform: str
    capex_total_per_capex_usd: float = Field(ge=0)
    capex_total_per_it_w: float = Field(ge=0)
    capex_total_per_gpu: float = Field(ge=0)
    pue: float = Field(ge=1)


class NetworkStudy(Record):
    name: str = "network"
    catalog: CatalogSource = CatalogSource()
    choices: Choices
    gpus: GpuRequirement
    objective: Objective = Objective()
    budgets: Budgets = Budgets()
    hooks: tuple[str, ...] = ()
    solver: SolverSettings = SolverSettings()
    spares: SparesSpec | None = None  # None: no spares, the job is the whole cluster
    # Per platform, the cost lines of the enclosing study (set by designer run; needed by budgets on
    # capex_total_usd or facility_power_w). Empty: the MILP knows IT capex and IT power only.
    cost_terms: tuple[PlatformCostTerms, ...] = ()
    # The folder relative paths and hook modules of this study are resolved against: the study file's
    # folder, set by the loader (None: the current folder). Not part of the study's identity.
    base_dir: str | None = None

    @field_validator("hooks")
    @classmethod
    def _hooks(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for h in v:
            if not CODE_REF_RE.match(h):
                raise ValueError(f"hook '{h}' must look like {CODE_REF_FORMS}")
        return v

    @model_validator(mode="after")
    def _objective_needs(self) -> "NetworkStudy":
        kind = self.objective.base_kind
        if kind in ("max_gpus", "max_flops") and self.gpus.count is not None:
            raise ValueError(f"objective {kind} needs a GPU range (gpus.min/max), not gpus.count")
        return self

    def with_updates(self, **changes: object) -> "NetworkStudy":
        """A validated copy with top-level fields replaced (records stay frozen)."""
        data = self.model_dump()
        for k, v in changes.items():
            data[k] = v.model_dump() if isinstance(v, Record) else v
        return validate(NetworkStudy, data, where=f"network study '{self.name}'")


def load_network_study_file(path: str | Path) -> NetworkStudy:
    """Validate a YAML file: a network study at its root, or a full study whose `network:` section is
    one (the full study's name is kept when the section has none)."""
    data = read_yaml(path)
    base = str(Path(path).resolve().parent)
    if isinstance(data, dict) and isinstance(data.get("network"), dict):
        section = dict(data["network"])
        if "name" in data and "name" not in section:
            section["name"] = data["name"]
        return validate(NetworkStudy, {**section, "base_dir": base}, where=f"{path}: network")
    if isinstance(data, dict):
        data = {**data, "base_dir": base}
    return validate(NetworkStudy, data, where=str(path))


def study_catalog(study: NetworkStudy, prefix: str = "") -> Catalog:
    """The catalog the study names, checked against the study's choices; errors name fields under
    `prefix` ("network." for a study's network section)."""
    files = tuple(resolve_path(f, study.base_dir) for f in study.catalog.extra_files)
    catalog = load_catalog(files, dict(study.catalog.price_multipliers) or None)
    check_against_catalog(study, catalog, prefix)
    return catalog


def family_can_use_radix(family: str, radix: int) -> bool:
    """Every family is a folded Clos whose lower tiers split a switch into R/2 down and R/2 up ports,
    so the radix must be even and >= 4 (designer.network.topology.check_radix, railonly.md §2)."""
    return radix >= 4 and radix % 2 == 0


def check_against_catalog(study: NetworkStudy, catalog: Catalog, prefix: str = "") -> None:
    """Cross-field checks that need the catalog; one-line SpecError naming field, value, allowed.
    `prefix` is the study's path in its file ("network." when it is a section of a study)."""
    ch = study.choices
    for i, pid in enumerate(ch.platforms):
        catalog.platform(pid, f"{prefix}choices.platforms.{i}")
    for i, n in enumerate(ch.nics):
        catalog.nic(n.id, f"{prefix}choices.nics.{i}.id")
        for k in n.nics_per_gpu:
            limits = {p: catalog.platform(p).max_nics_per_gpu for p in ch.platforms}
            if all(k > lim for lim in limits.values()):
                raise SpecError(
                    f"field '{prefix}choices.nics.{i}.nics_per_gpu' = {k}: no chosen platform takes that many NICs per GPU; "
                    f"allowed: <= {max(limits.values())}")
            lows = {p: catalog.platform(p).min_nics_per_gpu for p in ch.platforms}
            if all(k < lo for lo in lows.values()):
                raise SpecError(
                    f"field '{prefix}choices.nics.{i}.nics_per_gpu' = {k:g}: no chosen platform shares a NIC between GPUs; "
                    f"allowed: >= {min(lows.values()):g}")
    for i, s in enumerate(ch.switches):
        radices = [m.radix for m in catalog.switch(s.id, f"{prefix}choices.switches.{i}.id").modes]
        for r in s.radix:
            if r not in radices:
                raise SpecError(f"field '{prefix}choices.switches.{i}.radix' = {r}: switch {s.id} has no such mode; allowed: {radices}")
            for fam in ch.families:
                if not family_can_use_radix(fam, r):
                    raise SpecError(f"field '{prefix}choices.switches.{i}.radix' = {r}: family {fam} cannot use it; "
                                    "allowed: an even radix >= 4 (half the ports face down, half up)")
    if not any(family_can_use_radix(f, m.radix)
               for s in ch.switches for m in catalog.switch(s.id).modes if not s.radix or m.radix in s.radix
               for f in ch.families):
        raise SpecError(f"field '{prefix}choices.switches': no switch mode has a radix the chosen families can use; "
                        "allowed: an even radix >= 4")
    for key, copper in (("optic", False), ("dac", True)):
        mid = getattr(ch.media, key)
        if mid is not None:
            ids = [m.id for m in catalog.media if (m.kind.value in COPPER_MEDIA_KINDS) == copper]
            if mid not in ids:
                what = "copper cable (dac, copper_active)" if copper else "optical medium (optic, aoc, lpo)"
                raise SpecError(f"field '{prefix}choices.media.{key}' = '{mid}': not a {what} in the catalog; allowed: {', '.join(ids)}")
    all_media = [m.id for m in catalog.media]
    for i, mid in enumerate(ch.media.allow):
        if mid not in all_media:
            raise SpecError(f"field '{prefix}choices.media.allow.{i}' = '{mid}': not a medium in the catalog; allowed: "
                            + ", ".join(all_media))
    sizes = {p: catalog.platform(p).hb_domain_size for p in ch.platforms}
    mult = study.gpus.multiple_of
    if mult is not None:
        lcm = math.lcm(*sizes.values())
        if mult % lcm:
            raise SpecError(f"field '{prefix}gpus.multiple_of' = {mult}: not a multiple of every chosen HB domain size "
                            f"{sorted(set(sizes.values()))}; allowed: multiples of {lcm}")
        if study.gpus.count is not None and study.gpus.count % mult:
            raise SpecError(f"field '{prefix}gpus.count' = {study.gpus.count}: not a multiple of gpus.multiple_of ({mult}); "
                            f"allowed: multiples of {mult}")
        if study.gpus.count is None and (study.gpus.hi // mult) * mult < study.gpus.lo:
            raise SpecError(f"field '{prefix}gpus.multiple_of' = {mult}: the range [{study.gpus.lo}, {study.gpus.hi}] "
                            f"holds no multiple of it; allowed: a value with a multiple in the range")
    if study.gpus.count is not None:
        bad = {p: k for p, k in sizes.items() if study.gpus.count % k}
        if bad:
            p, k = next(iter(bad.items()))
            raise SpecError(
                f"field '{prefix}gpus.count' = {study.gpus.count}: not a multiple of the HB domain of platform {p} ({k}); "
                f"allowed: multiples of {k}, or a gpus.min/max range, or drop the platform")
    else:
        lo, hi = study.gpus.lo, study.gpus.hi
        if not any((hi // k) * k >= lo for k in sizes.values()):
            raise SpecError(
                f"field '{prefix}gpus' = [{lo}, {hi}]: holds no multiple of any chosen HB domain size {sorted(set(sizes.values()))}")
    fr = study.objective.frontier
    if fr is not None and fr.vary == "n_gpus":
        for lvl in fr.levels:
            if lvl != int(lvl) or any(int(lvl) % k for k in sizes.values()):
                raise SpecError(f"field '{prefix}objective.frontier.levels' = {lvl}: GPU levels must be multiples of every HB domain size {sorted(set(sizes.values()))}")
            if mult is not None and int(lvl) % mult:
                raise SpecError(f"field '{prefix}objective.frontier.levels' = {lvl}: not a multiple of gpus.multiple_of ({mult}); "
                                f"allowed: multiples of {mult}")


__all__ = [
    "Budgets", "CatalogSource", "Choices", "FloorLayout", "ComponentReliability", "FailureRates", "SparesSpec", "DeclaredBudget", "FrontierSpec", "GpuRequirement",
    "LinkMediaPolicy", "MAX_OVERSUBSCRIPTION", "Metric", "NetworkStudy", "NicChoice", "Objective", "PlatformCostTerms",
    "SolverSettings", "SwitchChoice", "check_against_catalog", "family_can_use_radix",
    "load_network_study_file", "study_catalog",
]
