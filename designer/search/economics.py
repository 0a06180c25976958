"""What a study's cost lines and reliability section add to each design: total capex, facility power,
the per-second cost of a run (amortized capex, energy, colocation) and the goodput under failures.

Pure. Per design the cost lines are linear (designer.analysis.tco.linear_terms) and Daly's goodput
fraction does not depend on the run's length (designer.analysis.goodput: the expected wall time is the
failure-free time times a factor of the design), so one DesignEconomics per design holds constants and
rates, and every strategy's metrics follow from its failure-free time to train by arithmetic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from designer.analysis.goodput import (
    CheckpointSpec,
    RecoverySpec,
    RecoveryPolicy,
    components_from_design,
    goodput,
)
from designer.analysis.tco import linear_terms
from designer.network.milp import platform_racks
from designer.spec.costs import CostLines
from designer.spec.network_study import FailureRates, FloorLayout
from designer.spec.reliability import ReliabilitySettings

DAY_S = 86_400.0


def liquid_cooled(platform, layout: FloorLayout | None = None) -> bool:  # noqa: ANN001 - a catalog Platform
    """The floor's cooling for the platform (designer.network.layout.rack_plan: the study's
    choices.layout.cooling, else liquid for rack-scale HB domains such as NVL72, air for 8-GPU hosts):
    the same rule that sizes its racks, so a design's facility premium and PUE follow its racks."""
    return platform_racks(layout or FloorLayout(), platform).cooling == "liquid"


# designs.csv's per-design figures, by the study section that brings them (DesignEconomics.constants)
RELIABILITY_CONSTANTS = ("goodput_fraction", "interruptions_per_day", "checkpoint_interval_s", "checkpoint_write_s",
                         "restart_s")
COST_CONSTANTS = ("storage_capex_usd", "frontend_capex_usd", "facility_capex_usd", "capex_total_usd", "pue",
                  "facility_power_w")


@dataclass(frozen=True)
class DesignEconomics:
    """A design's cost lines (when the study has `costs`) and goodput (when it has `reliability`)."""

    costs_declared: bool
    reliability_declared: bool
    liquid_cooled: bool
    capex_usd: float  # IT: compute + back-end fabric, as the design reports it
    storage_capex_usd: float
    frontend_capex_usd: float
    facility_capex_usd: float
    capex_total_usd: float
    it_power_w: float
    pue: float
    facility_power_w: float
    amortized_usd_per_s: float
    energy_usd_per_s: float
    colocation_usd_per_s: float
    tco_usd_per_s: float
    tokens: float
    goodput_fraction: float = 1.0
    interruptions_per_day: float = 0.0
    checkpoint_interval_s: float = math.inf
    checkpoint_write_s: float = 0.0
    restart_s: float = 0.0
    recovery_policy: str = ""

    def wall_time_s(self, time_to_train_s: float) -> float:
        """Expected wall time of the run under failures (the failure-free time without a reliability section)."""
        return time_to_train_s / self.goodput_fraction if self.goodput_fraction > 0 else math.inf

    @staticmethod
    def constant_names(*, costs_declared: bool, reliability_declared: bool) -> tuple[str, ...]:
        """The columns `constants` gives a study that declares these sections (known before any design)."""
        return ((*RELIABILITY_CONSTANTS,) if reliability_declared else ()) + ((*COST_CONSTANTS,) if costs_declared else ())

    def constants(self) -> dict[str, float]:
        """The design's figures that do not depend on a strategy's time (for designs.csv)."""
        names = self.constant_names(costs_declared=self.costs_declared, reliability_declared=self.reliability_declared)
        return {k: getattr(self, k) for k in names}

    def metrics(self, time_to_train_s: float) -> dict[str, float]:
        """Every metric these sections define, for a strategy of failure-free time `time_to_train_s`:
        the constants and what the run's wall time (with failures) multiplies."""
        wall = self.wall_time_s(time_to_train_s)
        out = self.constants()
        if self.reliability_declared:
            out.update(time_to_train_with_failures_s=wall, time_to_train_with_failures_days=wall / DAY_S)
        if self.costs_declared:
            tco = self.tco_usd_per_s * wall
            out.update(energy_cost_usd=self.energy_usd_per_s * wall, amortized_capex_usd=self.amortized_usd_per_s * wall,
                       colocation_usd=self.colocation_usd_per_s * wall, tco_usd=tco,
                       usd_per_million_tokens=tco / (self.tokens / 1e6) if self.tokens > 0 else math.inf)
        return out


def provisioned_extra_w_per_gpu(platform) -> float:  # noqa: ANN001 - a catalog Platform
    """IT power per GPU a facility is provisioned for beyond the platform's power_w: where the catalog
    gives power_w as the typical draw beside a maximum (power_w_max), the difference over the domain's
    GPUs (designer.analysis.tco module docstring)."""
    p_max = getattr(platform, "power_w_max", None)
    if p_max is None or platform.power_w is None:
        return 0.0
    return max(0.0, p_max - platform.power_w) / platform.hb_domain_size


def design_economics(design, platform, *, costs: CostLines | None, reliability: ReliabilitySettings | None,  # noqa: ANN001
                     n_params: float, tokens: float, gpus_per_host: int, default_rates=None,  # noqa: ANN001
                     default_unit_gpus: int = 8) -> DesignEconomics | None:
    """The economics of one NetworkDesign on its catalog `platform`; None when the study declares
    neither section. `default_rates` / `default_unit_gpus`: the network section's spares settings.
    Liquid or air cooling: the design's own floor (its layout), else the platform's default racks."""
    if costs is None and reliability is None:
        return None
    liquid = design.layout.cooling == "liquid" if design.layout is not None else liquid_cooled(platform)
    lines = costs if costs is not None else CostLines()
    terms = linear_terms(lines, liquid, provisioned_extra_w_per_gpu(platform))
    args = (design.capex_usd, design.power_w, design.n_gpus)
    econ = DesignEconomics(
        costs_declared=costs is not None, reliability_declared=reliability is not None, liquid_cooled=liquid,
        capex_usd=design.capex_usd, storage_capex_usd=terms.storage_capex_usd(*args),
        frontend_capex_usd=terms.frontend_capex_usd(*args), facility_capex_usd=terms.facility_capex_usd(*args),
        capex_total_usd=terms.capex_total_usd(*args), it_power_w=design.power_w, pue=lines.pue_for(liquid),
        facility_power_w=terms.facility_power_w(*args), amortized_usd_per_s=terms.amortized_usd_per_s(*args),
        energy_usd_per_s=terms.energy_usd_per_s(*args), colocation_usd_per_s=terms.colocation_usd_per_s(*args),
        tco_usd_per_s=terms.tco_usd_per_s(*args), tokens=tokens)
    if reliability is None:
        return econ
    rates = reliability.rates or default_rates or FailureRates()
    unit = reliability.unit_gpus or default_unit_gpus
    unit = math.gcd(unit, design.hb_domain_size)  # a unit divides the HB domain (failures.exposure)
    comps = components_from_design(design, gpus_per_host=gpus_per_host, unit_gpus=unit)
    write_gb_per_s = reliability.checkpoint_write_gb_per_s
    if write_gb_per_s is None:
        # the storage the design buys, sized for its built GPUs, spares included (as it is priced)
        write_gb_per_s = lines.storage.write_bandwidth_gb_per_s(design.n_gpus)  # checked by the spec
    read = reliability.checkpoint_read_gb_per_s
    ckpt = CheckpointSpec(state_bytes=n_params * reliability.checkpoint_bytes_per_param,
                          write_bytes_per_s=write_gb_per_s * 1e9, read_bytes_per_s=None if read is None else read * 1e9)
    policy = RecoveryPolicy.spare if design.spare_domains > 0 else RecoveryPolicy(reliability.without_spares)
    rec = RecoverySpec(detect_s=reliability.detect_s, restart_s=reliability.restart_s, reload_s=reliability.reload_s,
                       policy=policy)
    g = goodput(comps, rates, ckpt, rec, failure_free_s=DAY_S, spare_gpus=design.spare_domains * design.hb_domain_size)
    return replace(econ, goodput_fraction=g.goodput_fraction, interruptions_per_day=g.interruptions_per_h * 24,
                   checkpoint_interval_s=g.interval_s, checkpoint_write_s=g.checkpoint_write_s, restart_s=g.restart_s,
                   recovery_policy=policy.value)


__all__ = ["DesignEconomics", "design_economics", "liquid_cooled", "provisioned_extra_w_per_gpu"]
