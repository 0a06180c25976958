"""Optional cost lines beyond compute and the back-end fabric: storage, front-end network, facility
build or colocation, PUE, electricity and depreciation (the inputs of designer.analysis.tco).

Which values apply
------------------
* A line not declared (`storage` absent or null) costs zero; the breakdown names it in `absent_lines`.
* A line declared, even empty (`storage: {}`), is on; the fields it leaves out take the sourced
  defaults of designer/data/cost_lines.yaml.
* `pue` (None: 1.15 for liquid-cooled designs, 1.4 for air-cooled) and `depreciation_years` (5) are
  conventions of the calculation, not cost lines, and always have a value.
So `costs: {}` prices IT capex only, reports the facility power at the default PUE and amortizes the
IT capex over 5 years; it spends nothing on energy. `CostLines.shipped()` turns every line on with its
defaults (storage, front-end network, facility build, electricity; colocation is the alternative to the
facility build and stays off). When a study has no `costs` section the caller computes no breakdown.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator, model_validator

from designer.spec.base import Record
from designer.spec.load import load_yaml

DEFAULT_COST_LINES = Path(__file__).resolve().parents[1] / "data" / "cost_lines.yaml"


# ---------------------------------------------------------------------------------------------------
# The shipped defaults (data with sources)


class SourcedValue(Record):
    value: float
    low: float | None = None
    high: float | None = None
    source: str
    date: str = ""
    confidence: str = Field(description="V vendor, S secondary, E estimate, der derived")


class StorageDefaults(Record):
    usd_per_gpu: SourcedValue
    usd_per_pb: SourcedValue


class FrontendDefaults(Record):
    share_of_it_capex: SourcedValue


class FacilityDefaults(Record):
    usd_per_mw_it: SourcedValue
    liquid_cooling_premium: SourcedValue
    depreciation_years: SourcedValue


class ColocationDefaults(Record):
    usd_per_kw_month: SourcedValue


class PueDefaults(Record):
    liquid_cooled: SourcedValue
    air_cooled: SourcedValue


class ElectricityDefaults(Record):
    usd_per_kwh: SourcedValue


class CostDefaults(Record):
    meta: dict[str, Any] = Field(default_factory=dict)
    storage: StorageDefaults
    frontend_network: FrontendDefaults
    facility: FacilityDefaults
    colocation: ColocationDefaults
    pue: PueDefaults
    electricity: ElectricityDefaults
    depreciation_years: SourcedValue


@lru_cache(maxsize=1)
def cost_defaults() -> CostDefaults:
    """The shipped default values of designer/data/cost_lines.yaml (read once)."""
    return load_yaml(DEFAULT_COST_LINES, CostDefaults)


def _given(record: Record, names: tuple[str, ...]) -> list[str]:
    return [f"{n} = {getattr(record, n)}" for n in names if getattr(record, n) is not None]


# ---------------------------------------------------------------------------------------------------
# The lines


class StorageCost(Record):
    """Shared training storage (datasets, checkpoints), priced one way of three:
    `usd_per_gpu`; capacity `pb_per_1000_gpus` x `usd_per_pb`; or `share_of_it_capex`. None of them
    given: `usd_per_gpu` at its default. Optionally its write bandwidth, per PB or in total, for a
    checkpoint-time model."""

    usd_per_gpu: float | None = Field(default=None, ge=0)
    pb_per_1000_gpus: float | None = Field(default=None, gt=0, description="capacity in PB per 1,000 GPUs")
    usd_per_pb: float | None = Field(default=None, ge=0, description="with pb_per_1000_gpus; default the shipped $ per PB")
    share_of_it_capex: float | None = Field(default=None, ge=0, lt=1, description="fraction of compute + back-end capex")
    write_gb_per_s_per_pb: float | None = Field(default=None, gt=0, description="write bandwidth per PB of capacity")
    write_gb_per_s: float | None = Field(default=None, gt=0, description="total write bandwidth")

    @model_validator(mode="before")
    @classmethod
    def _defaults(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        d = cost_defaults().storage
        if all(data.get(k) is None for k in ("usd_per_gpu", "pb_per_1000_gpus", "share_of_it_capex", "usd_per_pb")):
            data["usd_per_gpu"] = d.usd_per_gpu.value
        if data.get("pb_per_1000_gpus") is not None and data.get("usd_per_pb") is None:
            data["usd_per_pb"] = d.usd_per_pb.value
        return data

    @model_validator(mode="after")
    def _one_pricing(self) -> "StorageCost":
        if self.usd_per_pb is not None and self.pb_per_1000_gpus is None:
            raise ValueError(f"storage.usd_per_pb = {self.usd_per_pb} needs storage.pb_per_1000_gpus (the capacity it prices)")
        modes = _given(self, ("usd_per_gpu", "pb_per_1000_gpus", "share_of_it_capex"))
        if len(modes) > 1:
            raise ValueError(f"storage: {' and '.join(modes)}; give one of usd_per_gpu, pb_per_1000_gpus "
                             "(with usd_per_pb), share_of_it_capex")
        bandwidths = _given(self, ("write_gb_per_s_per_pb", "write_gb_per_s"))
        if len(bandwidths) > 1:
            raise ValueError(f"storage: {' and '.join(bandwidths)}; give the write bandwidth one way")
        if self.write_gb_per_s_per_pb is not None and self.pb_per_1000_gpus is None:
            raise ValueError(f"storage.write_gb_per_s_per_pb = {self.write_gb_per_s_per_pb} needs storage.pb_per_1000_gpus "
                             "(the capacity it scales with); or give write_gb_per_s")
        return self

    @property
    def share(self) -> float:
        """Fraction of the IT capex this line adds."""
        return self.share_of_it_capex or 0.0

    @property
    def per_gpu_usd(self) -> float:
        """Dollars per GPU this line adds (capacity pricing: PB per GPU x $ per PB)."""
        if self.pb_per_1000_gpus is not None:
            return self.pb_per_1000_gpus / 1000.0 * (self.usd_per_pb or 0.0)
        return self.usd_per_gpu or 0.0

    def capacity_pb(self, n_gpus: int) -> float | None:
        """Capacity of a cluster of n_gpus; None when the line is priced without a capacity."""
        return None if self.pb_per_1000_gpus is None else self.pb_per_1000_gpus * n_gpus / 1000.0

    def write_bandwidth_gb_per_s(self, n_gpus: int) -> float | None:
        """Total write bandwidth of a cluster of n_gpus; None when not declared."""
        if self.write_gb_per_s is not None:
            return self.write_gb_per_s
        capacity = self.capacity_pb(n_gpus)
        if self.write_gb_per_s_per_pb is None or capacity is None:
            return None
        return self.write_gb_per_s_per_pb * capacity


class FrontendNetworkCost(Record):
    """Front-end (storage, in-band management) and out-of-band networks: `usd_per_gpu` or
    `share_of_it_capex`; neither given: the share at its default."""

    usd_per_gpu: float | None = Field(default=None, ge=0)
    share_of_it_capex: float | None = Field(default=None, ge=0, lt=1, description="fraction of compute + back-end capex")

    @model_validator(mode="before")
    @classmethod
    def _defaults(cls, data: Any) -> Any:
        if isinstance(data, dict) and all(data.get(k) is None for k in ("usd_per_gpu", "share_of_it_capex")):
            data = {**data, "share_of_it_capex": cost_defaults().frontend_network.share_of_it_capex.value}
        return data

    @model_validator(mode="after")
    def _one_pricing(self) -> "FrontendNetworkCost":
        modes = _given(self, ("usd_per_gpu", "share_of_it_capex"))
        if len(modes) > 1:
            raise ValueError(f"frontend_network: {' and '.join(modes)}; give one of usd_per_gpu, share_of_it_capex")
        return self

    @property
    def share(self) -> float:
        return self.share_of_it_capex or 0.0

    @property
    def per_gpu_usd(self) -> float:
        return self.usd_per_gpu or 0.0


class FacilityBuild(Record):
    """Building the data hall: dollars per MW of IT (critical) load, raised by `liquid_cooling_premium`
    for liquid-cooled designs (the caller says which), depreciated over its own years."""

    usd_per_mw_it: float = Field(default_factory=lambda: cost_defaults().facility.usd_per_mw_it.value, ge=0)
    liquid_cooling_premium: float = Field(default_factory=lambda: cost_defaults().facility.liquid_cooling_premium.value,
                                          ge=0, le=1, description="fraction added for liquid-cooled designs")
    depreciation_years: float = Field(default_factory=lambda: cost_defaults().facility.depreciation_years.value, gt=0)

    def usd_per_w_it(self, liquid_cooled: bool) -> float:
        return self.usd_per_mw_it / 1e6 * (1.0 + (self.liquid_cooling_premium if liquid_cooled else 0.0))


class Colocation(Record):
    """Leasing the hall instead of building it: dollars per kW of IT (critical) capacity per month.
    Energy is billed on top (CostLines.electricity) at the facility power."""

    usd_per_kw_month: float = Field(default_factory=lambda: cost_defaults().colocation.usd_per_kw_month.value, ge=0)


class Electricity(Record):
    usd_per_kwh: float = Field(default_factory=lambda: cost_defaults().electricity.usd_per_kwh.value, ge=0)


LINES = ("storage", "frontend_network", "facility", "colocation", "electricity")


class CostLines(Record):
    """The cost lines of a study. A line left out (None) costs zero and is reported absent."""

    storage: StorageCost | None = None
    frontend_network: FrontendNetworkCost | None = None
    facility: FacilityBuild | None = None
    colocation: Colocation | None = None
    electricity: Electricity | None = None
    pue: float | None = Field(default=None, description="facility power / IT power for every design; "
                              "None: the default for the design's cooling (liquid 1.15, air 1.4)")
    depreciation_years: float = Field(default_factory=lambda: cost_defaults().depreciation_years.value, gt=0,
                                      description="servers and network (IT capex, storage, front-end network)")

    @field_validator("pue")
    @classmethod
    def _pue_at_least_one(cls, v: float | None) -> float | None:
        if v is not None and not v >= 1.0:
            raise ValueError("must be >= 1 (facility power / IT power; "
                             "typical 1.05-1.25 liquid-cooled, 1.3-1.6 air-cooled)")
        return v

    @model_validator(mode="after")
    def _build_or_lease(self) -> "CostLines":
        if self.facility is not None and self.colocation is not None:
            raise ValueError("facility and colocation both given; a hall is built (facility) or leased "
                             "(colocation), give one")
        return self

    @classmethod
    def shipped(cls) -> "CostLines":
        """Every line on at its sourced default (facility build, not colocation)."""
        return cls(storage=StorageCost(), frontend_network=FrontendNetworkCost(), facility=FacilityBuild(),
                   electricity=Electricity())

    def pue_for(self, liquid_cooled: bool) -> float:
        if self.pue is not None:
            return self.pue
        d = cost_defaults().pue
        return (d.liquid_cooled if liquid_cooled else d.air_cooled).value

    @property
    def absent_lines(self) -> tuple[str, ...]:
        """The lines not declared: each costs zero."""
        return tuple(name for name in LINES if getattr(self, name) is None)
