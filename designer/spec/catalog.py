"""The hardware catalog: GPUs, HB-domain platforms, NICs, switches, link media and price sets.

The catalog is data (designer/data/catalog.yaml); every price and power figure carries its source and
date there. Users add their own catalog files (entries with a known id replace fields of that entry,
new ids are added) and may apply price multipliers.
"""

from __future__ import annotations

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


class Entry(Record):
    id: str
    name: str = ""
    price_usd: float | None = Field(default=None, ge=0)
    power_w: float | None = Field(default=None, ge=0)
    source: str
    date: str = ""
    confidence: str = Field(default="S", description="V vendor, S secondary, E estimate, der derived")


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
    hbm_gb: float = Field(gt=0)
    hbm_tb_per_s: float = Field(gt=0)
    hb_gb_per_s_per_direction: float = Field(gt=0, description="scale-up (NVLink) bandwidth per GPU, one direction")

    def perf(self) -> GpuPerf:
        peak = {"bf16": self.bf16_tflops * units.TFLOPS_TO_FLOPS,
                "fp16": (self.fp16_tflops or self.bf16_tflops) * units.TFLOPS_TO_FLOPS}
        for key, tflops in (("fp8", self.fp8_tflops), ("mxfp8", self.mxfp8_tflops), ("nvfp4", self.nvfp4_tflops)):
            if tflops is not None:
                peak[key] = tflops * units.TFLOPS_TO_FLOPS
        return GpuPerf(name=self.id, architecture=self.architecture, peak_flops=peak, hbm_bytes=self.hbm_gb * units.GB_TO_BYTES,
                       hbm_bandwidth_bytes_per_s=self.hbm_tb_per_s * units.TB_PER_S_TO_BYTES_PER_S,
                       host_memory_bytes=self.host_memory_gb * units.GB_TO_BYTES,
                       host_link_bytes_per_s=self.host_link_gb_per_s_per_direction * units.GB_PER_S_TO_BYTES_PER_S,
                       host_memory_bandwidth_bytes_per_s=self.host_memory_gb_per_s * units.GB_PER_S_TO_BYTES_PER_S)


class Platform(Entry):
    """One HB domain's hardware: GPUs, their scale-up fabric, hosts. Price and power are per HB domain,
    GPUs included, scale-out NICs and network excluded."""

    gpu: str
    hb_domain_size: int = Field(ge=1)
    hb_topology: HBTopology = HBTopology.switched
    torus_dims: tuple[int, ...] | None = None
    hb_gb_per_s_per_direction: float | None = Field(default=None, gt=0, description="None means the GPU's figure")
    in_network_reduction: bool = False
    max_nics_per_gpu: int = Field(default=2, ge=1)
    # Below 1: a NIC may serve several GPUs (0.5: 4 NICs in an 8-GPU node, two GPUs per PCIe switch).
    min_nics_per_gpu: float = Field(default=1.0, gt=0, le=1)
    # GPUs per host (one operating system, one torchrun --nproc-per-node). None: the HB domain, at most 8.
    gpus_per_host: int | None = Field(default=None, ge=1)

    @property
    def host_gpus(self) -> int:
        return self.gpus_per_host if self.gpus_per_host is not None else min(self.hb_domain_size, 8)


class Nic(Entry):
    gbps: float = Field(gt=0)


class SwitchMode(Record):
    radix: int = Field(ge=2)
    port_gbps: float = Field(gt=0)


class Switch(Entry):
    modes: tuple[SwitchMode, ...] = Field(min_length=1, description="port configurations, e.g. 64x800G or 128x400G breakout")
    in_network_reduction: bool = False
    fabric: str = "ethernet"


class MediaKind(str, Enum):
    optic = "optic"
    dac = "dac"
    aoc = "aoc"


class LinkMedia(Entry):
    """A transceiver or cable. Price and power are per module; a module serves `ports_per_module` ports."""

    kind: MediaKind
    gbps: float = Field(gt=0, description="per port")
    reach_m: float = Field(gt=0)
    ports_per_module: int = Field(default=1, ge=1)
    # DAC and AOC are whole cables (both ends); optics are one end.
    ends_per_module: int = Field(default=1, ge=1, le=2)


class PriceSet(Record):
    """Linear per-port pricing as used by the Rail-only paper (cost = ports*p_port + transceivers*p_xcvr)."""

    id: str
    switch_port_usd: float = Field(ge=0)
    transceiver_usd: float = Field(ge=0)
    switch_port_w: float = Field(ge=0)
    transceiver_w: float = Field(ge=0)
    source: str
    power_source: str


class Catalog(Record):
    meta: dict[str, Any] = Field(default_factory=dict)
    gpus: tuple[Gpu, ...] = ()
    platforms: tuple[Platform, ...] = ()
    nics: tuple[Nic, ...] = ()
    switches: tuple[Switch, ...] = ()
    media: tuple[LinkMedia, ...] = ()
    price_sets: tuple[PriceSet, ...] = ()

    @model_validator(mode="after")
    def _refs(self) -> "Catalog":
        gpu_ids = {g.id for g in self.gpus}
        for section in ("gpus", "platforms", "nics", "switches", "media", "price_sets"):
            ids = [e.id for e in getattr(self, section)]
            dup = {i for i in ids if ids.count(i) > 1}
            if dup:
                raise ValueError(f"duplicate id(s) in {section}: {sorted(dup)}")
        for p in self.platforms:
            if p.gpu not in gpu_ids:
                raise ValueError(f"platform {p.id} names gpu '{p.gpu}', not in the catalog ({sorted(gpu_ids)})")
        return self

    def _get(self, section: str, entry_id: str) -> Any:
        for e in getattr(self, section):
            if e.id == entry_id:
                return e
        allowed = ", ".join(e.id for e in getattr(self, section))
        raise SpecError(f"{section[:-1] if section != 'media' else 'media'} '{entry_id}' is not in the catalog; allowed: {allowed}")

    def gpu(self, entry_id: str) -> Gpu:
        return self._get("gpus", entry_id)

    def platform(self, entry_id: str) -> Platform:
        return self._get("platforms", entry_id)

    def nic(self, entry_id: str) -> Nic:
        return self._get("nics", entry_id)

    def switch(self, entry_id: str) -> Switch:
        return self._get("switches", entry_id)

    def medium(self, entry_id: str) -> LinkMedia:
        return self._get("media", entry_id)

    def price_set(self, entry_id: str) -> PriceSet:
        return self._get("price_sets", entry_id)


SECTIONS = ("gpus", "platforms", "nics", "switches", "media", "price_sets")


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


def load_catalog(extra_files: tuple[str | Path, ...] = (), price_multipliers: dict[str, float] | None = None) -> Catalog:
    """The shipped catalog, updated by the user's files, with optional price multipliers per section
    (e.g. {"switches": 0.7}) or for everything ({"all": 0.9})."""
    data = read_yaml(DEFAULT_CATALOG)
    for f in extra_files:
        extra = read_yaml(f) or {}
        if not isinstance(extra, dict):
            raise SpecError(f"{f}: a catalog file must be a mapping of sections")
        data = merge_catalog_data(data, extra)
    for section, factor in (price_multipliers or {}).items():
        if section != "all" and section not in SECTIONS[:-1]:
            raise SpecError(f"price_multipliers: unknown section '{section}'; allowed: all, {', '.join(SECTIONS[:-1])}")
        if factor < 0:
            raise SpecError(f"price_multipliers.{section} = {factor}: must be >= 0")
        for sec in (SECTIONS[:-1] if section == "all" else (section,)):
            data[sec] = [
                {**e, "price_usd": e["price_usd"] * factor} if e.get("price_usd") is not None else e
                for e in data.get(sec, [])
            ]
    return validate(Catalog, data, where="catalog")
