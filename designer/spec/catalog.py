"""The hardware catalog: GPUs, HB-domain platforms, NICs, DPUs, switches, link media, reach rules and
price sets.

The catalog is data (designer/data/catalog.yaml); every price and power figure carries its source,
date and confidence there, and where the source says so the kind of figure (`price_kind`,
`power_kind`: list, est, der, spec, plan). Users add their own catalog files (entries with a known id
replace fields of that entry, new ids are added) and may apply price multipliers per section, for
everything, or per entry id.

Prices are point figures (`price_usd`) with an optional range (`price_low_usd`, `price_high_usd`,
`price_distribution`); `Catalog.price_ranges()` returns the ranges by entry id.

Link media carry their SerDes lane rate (`lane_gbps`) and reach class; the `reach_rules` section says,
per reach class and lane rate, whether a product exists and its longest reach. `Catalog.eligible_media`
applies them: a passive DAC is never eligible above DAC_MAX_LANE_GBPS (no passive copper is offered at
200G/lane), and PAM4 modules do not change lane rate (a 200G-PAM4 optic cannot downshift to 100G).
"""

from __future__ import annotations

import copy
import difflib
import functools
import math
from enum import Enum
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from designer import units
from designer.errors import SpecError
from designer.spec.base import Record
from designer.spec.load import read_yaml, validate
from designer.spec.system import GpuPerf, HBTopology

DEFAULT_CATALOG = Path(__file__).resolve().parents[1] / "data" / "catalog.yaml"

# No passive DAC runs at 200G/lane: NVIDIA's XDR (200G-PAM4) product list offers single-mode
# transceivers and linear active copper only, DAC being "too short at 200G-PAM4"
# (docs.nvidia.com/networking/display/800g200gpam4list, via prices-and-layout.md §2a). Broadcom claims
# long-reach passive copper for Tomahawk-6 without a length, so the rule is kept in code, not only data.
DAC_MAX_LANE_GBPS = 100.0
# Scale-up bandwidth per GPU, one direction: from a PCIe-only part (PCIe 3.0 x16, ~16 GB/s, so at
# least 1 GB/s) to well past NVLink 5 (900 GB/s): outside, a typo (a figure in bytes or Gb/s)
MIN_HB_GB_PER_S = 1.0
MAX_HB_GB_PER_S = 100_000.0


class FigureKind(str, Enum):
    """What kind of figure a price or power is (the legend of prices-and-layout.md)."""

    list = "list"  # published by a vendor or reseller, or a quote
    est = "est"  # street, analyst or press estimate
    der = "der"  # derived from other figures; the formula is beside it in the data file
    spec = "spec"  # vendor datasheet or reference-architecture figure (power, reach, counts)
    plan = "plan"  # an operator's planning document


class PriceDistribution(str, Enum):
    uniform = "uniform"  # uniform on [price_low_usd, price_high_usd]
    triangular = "triangular"  # triangular on that range with its mode at price_usd


class PriceRange(Record):
    """The uncertain price of one catalog entry."""

    low_usd: float = Field(ge=0)
    mode_usd: float = Field(ge=0, description="the catalog's point price_usd")
    high_usd: float = Field(ge=0)
    distribution: PriceDistribution = PriceDistribution.triangular

    @model_validator(mode="after")
    def _ordered(self) -> "PriceRange":
        if not self.low_usd <= self.mode_usd <= self.high_usd:
            raise ValueError(f"price range low_usd = {self.low_usd:g}, mode_usd = {self.mode_usd:g}, high_usd = "
                             f"{self.high_usd:g}: needs low_usd <= mode_usd <= high_usd")
        return self

    @property
    def mean_usd(self) -> float:
        """Mean of the distribution: (low + high) / 2 uniform, (low + mode + high) / 3 triangular."""
        if self.distribution == PriceDistribution.uniform:
            return (self.low_usd + self.high_usd) / 2
        return (self.low_usd + self.mode_usd + self.high_usd) / 3


def _usd(x: float) -> str:
    return f"{x:,.2f}".rstrip("0").rstrip(".")


class Entry(Record):
    id: str
    name: str = ""
    price_usd: float | None = Field(default=None, ge=0)
    price_low_usd: float | None = Field(default=None, ge=0, description="with price_high_usd, or neither")
    price_high_usd: float | None = Field(default=None, ge=0, description="with price_low_usd, or neither")
    price_distribution: PriceDistribution = PriceDistribution.triangular
    price_kind: FigureKind | None = None
    power_w: float | None = Field(default=None, ge=0)
    power_kind: FigureKind | None = None
    source: str
    date: str = ""
    confidence: str = Field(default="S", description="V vendor, S secondary, E estimate, der derived")
    note: str = Field(default="", description="a caveat the figures need (e.g. why an estimate is flagged)")

    @model_validator(mode="after")
    def _price_range_ordered(self) -> "Entry":
        low, high = self.price_low_usd, self.price_high_usd
        if (low is None) != (high is None):
            given, missing = ("price_low_usd", "price_high_usd") if low is not None else ("price_high_usd", "price_low_usd")
            raise ValueError(f"entry '{self.id}': {given} = {_usd(low if low is not None else high)} without "
                             f"{missing}: give both or neither")
        if low is None or high is None:
            return self
        if self.price_usd is None:
            raise ValueError(f"entry '{self.id}': price_low_usd = {_usd(low)}, price_high_usd = {_usd(high)} without "
                             "price_usd: a range needs its point price")
        if not low <= self.price_usd <= high:
            raise ValueError(f"entry '{self.id}': price_low_usd = {_usd(low)}, price_usd = {_usd(self.price_usd)}, "
                             f"price_high_usd = {_usd(high)}: needs price_low_usd <= price_usd <= price_high_usd")
        return self

    def price_range(self) -> PriceRange | None:
        if self.price_low_usd is None or self.price_high_usd is None or self.price_usd is None:
            return None
        return PriceRange(low_usd=self.price_low_usd, mode_usd=self.price_usd, high_usd=self.price_high_usd,
                          distribution=self.price_distribution)


class Gpu(Entry):
    architecture: str = Field(pattern="^(ampere|hopper|blackwell)$", description="GPU generation")
    bf16_tflops: float = Field(gt=0, description="dense")
    fp16_tflops: float | None = Field(default=None, gt=0, description="dense; None means the bf16 figure")
    fp8_tflops: float | None = Field(default=None, gt=0, description="dense; None means no fp8 tensor cores")
    mxfp8_tflops: float | None = Field(default=None, gt=0, description="dense MXFP8 (Blackwell); None means not supported")
    nvfp4_tflops: float | None = Field(default=None, gt=0, description="dense NVFP4 (Blackwell); None means not supported")
    host_memory_gb: float = Field(default=0.0, ge=0, description="host (CPU) memory per GPU that offload may use")
    host_link_gb_per_s_per_direction: float = Field(default=0.0, ge=0, description="GPU<->host bandwidth per GPU, one direction (PCIe or NVLink-C2C)")
    host_memory_gb_per_s: float = Field(default=0.0, ge=0, description="host memory bandwidth per GPU (the CPU optimizer step of offload)")
    # NVIDIA's memory sizes are binary: an "80 GB" A100 or H100 is 80 GiB (nvidia-smi: 81920 MiB on an
    # A100 80GB, of which CUDA reports a total capacity of 79.15 GiB), as Calculon models it (80 GiB)
    hbm_gib: float = Field(gt=0, description="HBM per GPU in GiB (2^30 bytes), as the vendor's 'GB' means it")
    hbm_tb_per_s: float = Field(gt=0)
    hb_gb_per_s_per_direction: float = Field(ge=MIN_HB_GB_PER_S, le=MAX_HB_GB_PER_S,
                                             description="scale-up (NVLink) bandwidth per GPU, one direction")

    def perf(self) -> GpuPerf:
        peak = {"bf16": self.bf16_tflops * units.TFLOPS_TO_FLOPS,
                "fp16": (self.fp16_tflops or self.bf16_tflops) * units.TFLOPS_TO_FLOPS}
        for key, tflops in (("fp8", self.fp8_tflops), ("mxfp8", self.mxfp8_tflops), ("nvfp4", self.nvfp4_tflops)):
            if tflops is not None:
                peak[key] = tflops * units.TFLOPS_TO_FLOPS
        return GpuPerf(name=self.id, architecture=self.architecture, peak_flops=peak, hbm_bytes=self.hbm_gib * units.GIB_TO_BYTES,
                       hbm_bandwidth_bytes_per_s=self.hbm_tb_per_s * units.TB_PER_S_TO_BYTES_PER_S,
                       host_memory_bytes=self.host_memory_gb * units.GB_TO_BYTES,
                       host_link_bytes_per_s=self.host_link_gb_per_s_per_direction * units.GB_PER_S_TO_BYTES_PER_S,
                       host_memory_bandwidth_bytes_per_s=self.host_memory_gb_per_s * units.GB_PER_S_TO_BYTES_PER_S)


class Platform(Entry):
    """One HB domain's hardware: GPUs, their scale-up fabric, hosts. Price and power are per HB domain,
    GPUs included. Scale-out NICs are excluded unless `includes_nics`: then price_usd and power_w
    already pay for `included_nics_per_gpu` NICs `included_nic` per GPU, built into the domain (an
    NVL72's compute trays, CX-8 on an HGX B300 board), and a bill of materials must not count them
    again. DPUs (`dpus_per_domain` x `dpu`, front-end and storage network) likewise with `includes_dpus`."""

    gpu: str
    hb_domain_size: int = Field(ge=1)
    hb_topology: HBTopology = HBTopology.switched
    torus_dims: tuple[int, ...] | None = None
    hb_gb_per_s_per_direction: float | None = Field(default=None, ge=MIN_HB_GB_PER_S, le=MAX_HB_GB_PER_S,
                                                    description="None means the GPU's figure")
    in_network_reduction: bool = False
    max_nics_per_gpu: int = Field(default=2, ge=1)
    # Below 1: a NIC may serve several GPUs (0.5: 4 NICs in an 8-GPU node, two GPUs per PCIe switch).
    min_nics_per_gpu: float = Field(default=1.0, gt=0, le=1)
    # GPUs per host (one operating system, one torchrun --nproc-per-node). None: the HB domain, at most 8.
    gpus_per_host: int | None = Field(default=None, ge=1)
    power_w_max: float | None = Field(default=None, ge=0, description="maximum draw beside the typical power_w")
    includes_nics: bool = False
    included_nic: str | None = Field(default=None, description="nic id the price includes; required with includes_nics")
    included_nics_per_gpu: float = Field(default=1.0, gt=0)
    dpu: str | None = Field(default=None, description="dpu id; with dpus_per_domain > 0")
    dpus_per_domain: int = Field(default=0, ge=0)
    includes_dpus: bool = False

    @property
    def host_gpus(self) -> int:
        return self.gpus_per_host if self.gpus_per_host is not None else min(self.hb_domain_size, 8)

    @property
    def included_nics_per_domain(self) -> float:
        """Scale-out NICs the domain's price already pays for (0 unless includes_nics)."""
        return self.included_nics_per_gpu * self.hb_domain_size if self.includes_nics else 0.0

    @model_validator(mode="after")
    def _nics_dpus_power(self) -> "Platform":
        if self.includes_nics != (self.included_nic is not None):
            raise ValueError(f"platform '{self.id}': includes_nics = {self.includes_nics} with included_nic = "
                             f"{self.included_nic!r}: name the included NIC exactly when includes_nics is true")
        if (self.dpu is not None) != (self.dpus_per_domain > 0):
            raise ValueError(f"platform '{self.id}': dpu = {self.dpu!r} with dpus_per_domain = {self.dpus_per_domain}: "
                             "name a dpu exactly when dpus_per_domain > 0")
        if self.includes_dpus and self.dpu is None:
            raise ValueError(f"platform '{self.id}': includes_dpus = true needs dpu and dpus_per_domain")
        if self.power_w_max is not None and self.power_w is not None and self.power_w_max < self.power_w:
            raise ValueError(f"platform '{self.id}': power_w_max = {self.power_w_max:g} < power_w = {self.power_w:g}: "
                             "the maximum must be at least the typical power")
        return self


class Nic(Entry):
    gbps: float = Field(gt=0)
    lane_gbps: float | None = Field(default=None, gt=0, description="SerDes lane rate of its ports; None: not stated")
    # Ethernet port configuration where it differs from one port of `gbps` (CX-8: 2x400, no 800GbE).
    ethernet_mode: str | None = Field(default=None, pattern=r"^[1-9][0-9]*x[1-9][0-9]*$", description="PORTSxGBPS")

    @property
    def ethernet_ports(self) -> tuple[int, float]:
        """(ports, Gb/s per port) in Ethernet mode."""
        if self.ethernet_mode is None:
            return 1, self.gbps
        ports, gbps = self.ethernet_mode.split("x")
        return int(ports), float(gbps)


class Dpu(Entry):
    """A DPU for the front-end (storage, management) network, not a scale-out NIC."""

    gbps: float = Field(gt=0, description="total port bandwidth")


class SwitchMode(Record):
    radix: int = Field(ge=2)
    port_gbps: float = Field(gt=0)


class Switch(Entry):
    modes: tuple[SwitchMode, ...] = Field(min_length=1, description="port configurations, e.g. 64x800G or 128x400G breakout")
    in_network_reduction: bool = False
    fabric: str = "ethernet"
    lane_gbps: float | None = Field(default=None, gt=0, description="SerDes lane rate of the ASIC; None: not stated")


class MediaKind(str, Enum):
    optic = "optic"  # a DSP transceiver, one link end
    dac = "dac"  # passive direct-attach copper, a whole cable
    aoc = "aoc"  # active optical cable, a whole cable
    copper_active = "copper_active"  # linear active copper (LACC), a whole cable
    lpo = "lpo"  # linear pluggable optic (no DSP), one link end; depends on the host's SerDes


class ReachClass(str, Enum):
    """The media families of the reach rules (prices-and-layout.md §2a and §3, media-selection rule)."""

    passive_copper = "passive_copper"
    active_copper = "active_copper"
    active_optical = "active_optical"
    multimode = "multimode"
    single_mode_dr = "single_mode_dr"
    single_mode_fr = "single_mode_fr"


# The reach class a cable kind always has; transceivers (optic, lpo) name theirs.
CABLE_REACH_CLASS = {MediaKind.dac: ReachClass.passive_copper, MediaKind.copper_active: ReachClass.active_copper,
                     MediaKind.aoc: ReachClass.active_optical}
FIBRE_REACH_CLASSES = (ReachClass.multimode, ReachClass.single_mode_dr, ReachClass.single_mode_fr)


class LinkMedia(Entry):
    """A transceiver or cable. Price and power are per module; a module serves `ports_per_module` ports."""

    kind: MediaKind
    gbps: float = Field(gt=0, description="per port")
    reach_m: float = Field(gt=0)
    ports_per_module: int = Field(default=1, ge=1)
    # DAC, AOC and active copper are whole cables (both ends); optics are one end.
    ends_per_module: int = Field(default=1, ge=1, le=2)
    lane_gbps: float | None = Field(default=None, gt=0, description="SerDes lane rate; None: not stated")
    reach_class: ReachClass | None = Field(default=None, description="None: the kind's class for cables, unstated for optics")
    # Reach where a cable end sits in a flat-top (RHS) cage: liquid-cooled switches, CX-8 / B300 / GB300.
    reach_flat_top_m: float | None = Field(default=None, gt=0)
    third_party: bool = Field(default=False, description="no NVIDIA-branded equivalent; price from third parties")

    @model_validator(mode="after")
    def _kind_rules(self) -> "LinkMedia":
        if self.kind == MediaKind.dac and self.lane_gbps is not None and self.lane_gbps > DAC_MAX_LANE_GBPS:
            raise ValueError(f"media '{self.id}': kind dac with lane_gbps = {self.lane_gbps:g}: no passive DAC is "
                             f"offered above {DAC_MAX_LANE_GBPS:g}G per lane; use copper_active or an optic")
        cable = CABLE_REACH_CLASS.get(self.kind)
        if cable is not None and self.reach_class not in (None, cable):
            raise ValueError(f"media '{self.id}': kind {self.kind.value} with reach_class = {self.reach_class.value}: "
                             f"allowed: {cable.value}")
        if cable is None and self.reach_class not in (None, *FIBRE_REACH_CLASSES):
            raise ValueError(f"media '{self.id}': kind {self.kind.value} with reach_class = {self.reach_class.value}: "
                             f"allowed: {', '.join(c.value for c in FIBRE_REACH_CLASSES)}")
        if self.reach_flat_top_m is not None and self.reach_flat_top_m > self.reach_m:
            raise ValueError(f"media '{self.id}': reach_flat_top_m = {self.reach_flat_top_m:g} > reach_m = "
                             f"{self.reach_m:g}: the flat-top reach is at most reach_m")
        return self

    @property
    def effective_reach_class(self) -> ReachClass | None:
        return self.reach_class if self.reach_class is not None else CABLE_REACH_CLASS.get(self.kind)

    @property
    def price_per_port_usd(self) -> float | None:
        return None if self.price_usd is None else self.price_usd / self.ports_per_module


class ReachRule(Record):
    """Whether a reach class is offered at a lane rate, and its longest reach there."""

    id: str
    reach_class: ReachClass
    lane_gbps: float = Field(gt=0)
    offered: bool
    reach_m: float | None = Field(default=None, gt=0, description="longest reach; None when not offered")
    reach_kind: FigureKind | None = None
    source: str
    date: str = ""
    confidence: str = Field(default="V", description="V vendor, S secondary, E estimate, der derived")
    note: str = ""

    @model_validator(mode="after")
    def _reach_iff_offered(self) -> "ReachRule":
        if self.offered != (self.reach_m is not None):
            raise ValueError(f"reach rule '{self.id}': offered = {self.offered} with reach_m = {self.reach_m}: "
                             "give reach_m exactly when offered is true")
        return self


class PriceSet(Record):
    """Linear per-port pricing as used by the Rail-only paper (cost = ports*p_port + transceivers*p_xcvr)."""

    id: str
    switch_port_usd: float = Field(ge=0)
    transceiver_usd: float = Field(ge=0)
    switch_port_w: float = Field(ge=0)
    transceiver_w: float = Field(ge=0)
    source: str
    power_source: str


# Sections whose entries have prices (and so price ranges and price multipliers).
PRICED_SECTIONS = ("gpus", "platforms", "nics", "dpus", "switches", "media")
SECTIONS = (*PRICED_SECTIONS, "price_sets", "reach_rules")


class Catalog(Record):
    meta: dict[str, Any] = Field(default_factory=dict)
    gpus: tuple[Gpu, ...] = ()
    platforms: tuple[Platform, ...] = ()
    nics: tuple[Nic, ...] = ()
    dpus: tuple[Dpu, ...] = ()
    switches: tuple[Switch, ...] = ()
    media: tuple[LinkMedia, ...] = ()
    price_sets: tuple[PriceSet, ...] = ()
    reach_rules: tuple[ReachRule, ...] = ()

    @model_validator(mode="after")
    def _refs(self) -> "Catalog":
        for section in SECTIONS:
            ids = [e.id for e in getattr(self, section)]
            dup = {i for i in ids if ids.count(i) > 1}
            if dup:
                raise ValueError(f"duplicate id(s) in {section}: {sorted(dup)}")
        # price ranges and per-id multipliers are keyed by id alone
        seen: dict[str, str] = {}
        for section in PRICED_SECTIONS:
            for e in getattr(self, section):
                if e.id in seen:
                    raise ValueError(f"id '{e.id}' is in both {seen[e.id]} and {section}: priced entries need distinct ids")
                seen[e.id] = section
        gpu_ids, nic_ids, dpu_ids = ({e.id for e in getattr(self, s)} for s in ("gpus", "nics", "dpus"))
        for p in self.platforms:
            if p.gpu not in gpu_ids:
                raise ValueError(f"platform {p.id} names gpu '{p.gpu}', not in the catalog ({sorted(gpu_ids)})")
            if p.included_nic is not None and p.included_nic not in nic_ids:
                raise ValueError(f"platform {p.id} names included_nic '{p.included_nic}', not in the catalog ({sorted(nic_ids)})")
            if p.dpu is not None and p.dpu not in dpu_ids:
                raise ValueError(f"platform {p.id} names dpu '{p.dpu}', not in the catalog ({sorted(dpu_ids)})")
        keys = [(r.reach_class, r.lane_gbps) for r in self.reach_rules]
        for r in self.reach_rules:
            if keys.count((r.reach_class, r.lane_gbps)) > 1:
                raise ValueError(f"reach rules: more than one rule for {r.reach_class.value} at {r.lane_gbps:g}G per lane")
        for m in self.media:
            cls = m.effective_reach_class
            rule = self.reach_rule(cls, m.lane_gbps) if cls is not None and m.lane_gbps is not None else None
            if rule is None:
                continue
            if not rule.offered:
                raise ValueError(f"media '{m.id}': {cls.value} at lane_gbps = {m.lane_gbps:g} is not offered "
                                 f"(reach rule '{rule.id}')")
            if m.reach_m > rule.reach_m:
                raise ValueError(f"media '{m.id}': reach_m = {m.reach_m:g} exceeds {rule.reach_m:g} m, the longest "
                                 f"{cls.value} reach at {m.lane_gbps:g}G per lane (reach rule '{rule.id}')")
        return self

    def _get(self, section: str, entry_id: str, field: str | None = None) -> Any:
        """The entry, or one line naming what was asked for (the input `field` that states it, where
        the caller knows it) and the ids allowed."""
        for e in getattr(self, section):
            if e.id == entry_id:
                return e
        allowed = ", ".join(e.id for e in getattr(self, section))
        if field is not None:
            raise SpecError(f"field '{field}' = '{entry_id}': not in the catalog; allowed: {allowed}")
        kind = {"switches": "switch", "media": "media"}.get(section, section[:-1])  # the singular
        raise SpecError(f"{kind} '{entry_id}' is not in the catalog; allowed: {allowed}")

    def gpu(self, entry_id: str) -> Gpu:
        return self._get("gpus", entry_id)

    def platform(self, entry_id: str, field: str | None = None) -> Platform:
        return self._get("platforms", entry_id, field)

    def nic(self, entry_id: str, field: str | None = None) -> Nic:
        return self._get("nics", entry_id, field)

    def dpu(self, entry_id: str) -> Dpu:
        return self._get("dpus", entry_id)

    def switch(self, entry_id: str, field: str | None = None) -> Switch:
        return self._get("switches", entry_id, field)

    def medium(self, entry_id: str) -> LinkMedia:
        return self._get("media", entry_id)

    def price_set(self, entry_id: str) -> PriceSet:
        return self._get("price_sets", entry_id)

    def reach_rule(self, reach_class: ReachClass, lane_gbps: float) -> ReachRule | None:
        for r in self.reach_rules:
            if r.reach_class == reach_class and r.lane_gbps == lane_gbps:
                return r
        return None

    def price_ranges(self) -> dict[str, PriceRange]:
        """The price range of every priced entry that has one, by entry id."""
        return {e.id: r for section in PRICED_SECTIONS for e in getattr(self, section)
                if (r := e.price_range()) is not None}

    def eligible_media(self, kind: MediaKind, port_gbps: float, lane_gbps: float | None = None,
                       length_m: float | None = None, flat_top: bool = False) -> tuple[LinkMedia, ...]:
        """The media of `kind` that can carry a port of `port_gbps` (medium gbps >= port_gbps), cheapest per
        port first (then by id; unpriced last). With the link's `lane_gbps`: no DAC above
        DAC_MAX_LANE_GBPS; a medium stating its lane rate must match it (PAM4 modules do not change lane
        rate: NVIDIA 200G-PAM4 list, "cannot downshift to 100G"); a medium not stating it is refused where
        the reach rule of its class at that lane rate says the class is not offered. With `length_m`: its
        reach (the flat-top reach where `flat_top` and the medium has one) covers the length."""
        out = []
        for m in self.media:
            if m.kind != kind or m.gbps < port_gbps:
                continue
            if lane_gbps is not None:
                if kind == MediaKind.dac and lane_gbps > DAC_MAX_LANE_GBPS:
                    continue
                if m.lane_gbps is not None and m.lane_gbps != lane_gbps:
                    continue
                cls = m.effective_reach_class
                rule = self.reach_rule(cls, lane_gbps) if cls is not None else None
                if rule is not None and not rule.offered:
                    continue
            if length_m is not None:
                reach = m.reach_flat_top_m if flat_top and m.reach_flat_top_m is not None else m.reach_m
                if reach < length_m:
                    continue
            out.append(m)
        per_port = [(m.price_per_port_usd if m.price_per_port_usd is not None else math.inf, m.id, m) for m in out]
        return tuple(m for _, _, m in sorted(per_port, key=lambda t: (t[0], t[1])))


def merge_catalog_data(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """Entries of `extra` with an id already in `base` update that entry's fields; new ids are appended."""
    out = {k: (list(v) if isinstance(v, list) else v) for k, v in base.items()}
    for key, value in extra.items():
        if key == "meta":
            out["meta"] = {**out.get("meta", {}), **(value or {})}
            continue
        if key not in SECTIONS:
            raise SpecError(f"catalog: unknown section '{key}'; allowed: meta, {', '.join(SECTIONS)}")
        merged = list(out.get(key, []))
        index = {e["id"]: i for i, e in enumerate(merged)}
        for entry in value or []:
            if not isinstance(entry, dict) or "id" not in entry:
                raise SpecError(f"catalog: every entry of '{key}' needs an 'id'")
            if entry["id"] in index:
                merged[index[entry["id"]]] = {**merged[index[entry["id"]]], **entry}
            else:
                index[entry["id"]] = len(merged)
                merged.append(entry)
        out[key] = merged
    return out


PRICE_FIELDS = ("price_usd", "price_low_usd", "price_high_usd")


def apply_price_multipliers(data: dict[str, Any], price_multipliers: dict[str, float]) -> dict[str, Any]:
    """Catalog data with its prices scaled. A key is 'all', a priced section (gpus, platforms, nics, dpus,
    switches, media) or the id of a priced entry; the factors that apply to an entry multiply (all x
    section x id). A price range scales with its point price, so it stays ordered."""
    ids = {e["id"] for sec in PRICED_SECTIONS for e in data.get(sec, []) or [] if isinstance(e, dict) and "id" in e}
    for key, factor in price_multipliers.items():
        if key != "all" and key not in PRICED_SECTIONS and key not in ids:
            close = difflib.get_close_matches(str(key), sorted(ids), n=1)
            raise SpecError(f"price_multipliers: '{key}' is not 'all', a priced section ({', '.join(PRICED_SECTIONS)}) "
                            "or the id of a priced catalog entry" + (f"; did you mean '{close[0]}'?" if close else ""))
        if not isinstance(factor, (int, float)) or isinstance(factor, bool) or not math.isfinite(factor) or factor < 0:
            raise SpecError(f"price_multipliers.{key} = {factor!r}: must be a finite number >= 0")
    out = dict(data)
    for sec in PRICED_SECTIONS:
        scaled = []
        for e in data.get(sec, []) or []:
            f = (price_multipliers.get("all", 1.0) * price_multipliers.get(sec, 1.0)
                 * (price_multipliers.get(e.get("id"), 1.0) if isinstance(e, dict) else 1.0))
            if isinstance(e, dict) and f != 1.0:
                e = {**e, **{k: e[k] * f for k in PRICE_FIELDS if isinstance(e.get(k), (int, float))}}
            scaled.append(e)
        if sec in data:
            out[sec] = scaled
    return out


@functools.lru_cache(maxsize=1)
def _shipped_catalog_data() -> dict[str, Any]:
    """The shipped catalog file, parsed once per process (it is package data; parsing it with line
    numbers is the slow part of loading a catalog). Callers copy it before changing it."""
    return read_yaml(DEFAULT_CATALOG)


@functools.lru_cache(maxsize=1)
def _shipped_catalog() -> Catalog:
    return validate(Catalog, copy.deepcopy(_shipped_catalog_data()), where="catalog")


def load_catalog(extra_files: tuple[str | Path, ...] = (), price_multipliers: dict[str, float] | None = None) -> Catalog:
    """The shipped catalog, updated by the user's files, with optional price multipliers for everything
    ({"all": 0.9}), per section ({"switches": 0.7}) or per entry id ({"gb200_nvl72": 1.2})."""
    if not extra_files and not price_multipliers:
        return _shipped_catalog()  # an immutable record: one instance serves every caller
    data = copy.deepcopy(_shipped_catalog_data())
    for f in extra_files:
        if not Path(f).is_file():
            why = "a folder, not a file" if Path(f).is_dir() else "no such file"
            raise SpecError(f"field 'catalog.extra_files' = '{f}': {why}")
        extra = read_yaml(f) or {}
        if not isinstance(extra, dict):
            raise SpecError(f"{f}: a catalog file must be a mapping of sections")
        data = merge_catalog_data(data, extra)
    if price_multipliers:
        data = apply_price_multipliers(data, price_multipliers)
    return validate(Catalog, data, where="catalog")
