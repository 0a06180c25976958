"""Cost of ownership of a cluster design and of one training run on it: the declared cost lines of
designer.spec.costs.CostLines on top of the IT capex (compute + back-end fabric) and IT power that a
network design reports.

Pure functions of their arguments (no I/O). Formulas (every line linear in the design's IT capex C,
IT power P and GPU count N, so a MILP budget can bind them; `linear_terms` gives the coefficients):

    storage      = s C + s_gpu N      (share of IT capex, or $ per GPU, or PB per GPU x $ per PB)
    front-end    = f C + f_gpu N      (share of IT capex, or $ per GPU)
    facility     = P_prov / 1e6 x usd_per_mw_it x (1 + liquid_cooling_premium if liquid-cooled)
    capex_total  = C + storage + front-end + facility
    facility_power_w = PUE x P

For a run of wall time T seconds (a year is 365.25 days, a month a twelfth of it):

    energy_cost  = PUE x P / 1000 [kW] x T / 3600 [h] x usd_per_kwh
    colocation   = P_prov / 1000 [kW of IT capacity] x usd_per_kw_month x T / month
    amortized    = (capex_total - facility) x T / (depreciation_years x year)
                   + facility x T / (facility.depreciation_years x year)
    tco          = amortized + energy_cost + colocation
    usd_per_million_tokens = tco / tokens x 1e6

Amortization is straight line with no residual value and no cost of capital; the cluster is charged for
the run's wall time only, as if the rest of its life went to other work. Energy is charged at the
design's IT power P (the catalog's power_w of each platform) for the whole run. The facility is built,
and colocation billed, for the provisioned IT power P_prov = P + e N: a platform whose catalog power_w
is its typical draw beside a higher power_w_max is provisioned for the maximum, e = (power_w_max -
power_w) / GPUs per domain (prices-and-layout.md §1a: the GB200 NVL72's 120 kW typical, 132 kW power
budget), as the other platforms' power_w already is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np

from designer import units
from designer.errors import SpecError
from designer.spec.costs import CostLines

SECONDS_PER_YEAR = 365.25 * units.SECONDS_PER_DAY
SECONDS_PER_MONTH = SECONDS_PER_YEAR / 12.0
SECONDS_PER_HOUR = 3600.0
W_PER_KW = 1000.0
W_PER_MW = 1e6


@dataclass(frozen=True)
class CostBreakdown:
    """Every cost line of one design and one run, reported separately; absent lines are zero and named."""

    capex_usd: float  # IT capex as the design reports it: compute + back-end fabric
    storage_capex_usd: float
    frontend_capex_usd: float
    facility_capex_usd: float
    capex_total_usd: float
    it_power_w: float
    pue: float
    facility_power_w: float
    run_s: float
    energy_kwh: float
    energy_cost_usd: float
    colocation_usd: float
    amortized_capex_usd: float
    tco_usd: float
    tokens: float
    usd_per_million_tokens: float
    storage_capacity_pb: float | None  # None: storage not priced by capacity
    storage_write_gb_per_s: float | None  # None: no write bandwidth declared
    absent_lines: tuple[str, ...]  # lines not declared (each costs zero)


def _check(name: str, value: float, *, low: float, strict: bool = False) -> float:
    v = float(value)
    bad = not math.isfinite(v) or (v <= low if strict else v < low)
    if bad:
        raise SpecError(f"{name} = {value}: must be a finite number {'>' if strict else '>='} {low:g}")
    return v


def cost_breakdown(capex_it_usd: float, it_power_w: float, n_gpus: int, liquid_cooled: bool,
                   time_to_train_s: float, tokens: float, lines: CostLines) -> CostBreakdown:
    """The cost lines of one design (IT capex and IT power as the network design reports them) and of
    one training run of `tokens` tokens taking `time_to_train_s` of wall time."""
    capex_it = _check("capex_it_usd", capex_it_usd, low=0)
    power_it = _check("it_power_w", it_power_w, low=0)
    n = _check("n_gpus", n_gpus, low=1)
    run_s = _check("time_to_train_s", time_to_train_s, low=0)
    n_tokens = _check("tokens", tokens, low=0, strict=True)

    storage = 0.0 if lines.storage is None else lines.storage.share * capex_it + lines.storage.per_gpu_usd * n
    frontend = (0.0 if lines.frontend_network is None
                else lines.frontend_network.share * capex_it + lines.frontend_network.per_gpu_usd * n)
    facility = 0.0 if lines.facility is None else lines.facility.usd_per_w_it(liquid_cooled) * power_it
    capex_total = capex_it + storage + frontend + facility

    pue = lines.pue_for(liquid_cooled)
    facility_power = pue * power_it
    energy_kwh = facility_power / W_PER_KW * run_s / SECONDS_PER_HOUR
    energy_cost = 0.0 if lines.electricity is None else energy_kwh * lines.electricity.usd_per_kwh
    colocation = (0.0 if lines.colocation is None
                  else power_it / W_PER_KW * lines.colocation.usd_per_kw_month * run_s / SECONDS_PER_MONTH)
    run_years = run_s / SECONDS_PER_YEAR
    amortized = (capex_total - facility) / lines.depreciation_years * run_years
    if lines.facility is not None:
        amortized += facility / lines.facility.depreciation_years * run_years
    tco = amortized + energy_cost + colocation

    return CostBreakdown(
        capex_usd=capex_it, storage_capex_usd=storage, frontend_capex_usd=frontend, facility_capex_usd=facility,
        capex_total_usd=capex_total, it_power_w=power_it, pue=pue, facility_power_w=facility_power, run_s=run_s,
        energy_kwh=energy_kwh, energy_cost_usd=energy_cost, colocation_usd=colocation, amortized_capex_usd=amortized,
        tco_usd=tco, tokens=n_tokens, usd_per_million_tokens=tco / n_tokens * 1e6,
        storage_capacity_pb=None if lines.storage is None else lines.storage.capacity_pb(int(n)),
        storage_write_gb_per_s=None if lines.storage is None else lines.storage.write_bandwidth_gb_per_s(int(n)),
        absent_lines=lines.absent_lines)


# ---------------------------------------------------------------------------------------------------
# Linear terms: what a MILP budget can bind


@dataclass(frozen=True)
class LinearForm:
    """value = per_capex_it_usd x IT capex + per_it_power_w x IT power + per_gpu x GPU count."""

    per_capex_it_usd: float
    per_it_power_w: float
    per_gpu: float

    def __call__(self, capex_it_usd, it_power_w, n_gpus):  # noqa: ANN001, ANN204 - floats or numpy arrays
        return self.per_capex_it_usd * capex_it_usd + self.per_it_power_w * it_power_w + self.per_gpu * n_gpus

    def __add__(self, other: "LinearForm") -> "LinearForm":
        return LinearForm(self.per_capex_it_usd + other.per_capex_it_usd, self.per_it_power_w + other.per_it_power_w,
                          self.per_gpu + other.per_gpu)

    def scaled(self, factor: float) -> "LinearForm":
        return LinearForm(self.per_capex_it_usd * factor, self.per_it_power_w * factor, self.per_gpu * factor)


ZERO = LinearForm(0.0, 0.0, 0.0)


@dataclass(frozen=True)
class CostTerms:
    """Each line as a linear form of (IT capex, IT power, GPU count) for one cooling kind. The run-cost
    rates are per second of wall time: multiplied by a run's time they give its amortized capex,
    energy, colocation and total (tco) dollars."""

    storage_capex_usd: LinearForm
    frontend_capex_usd: LinearForm
    facility_capex_usd: LinearForm
    capex_total_usd: LinearForm
    facility_power_w: LinearForm
    amortized_usd_per_s: LinearForm
    energy_usd_per_s: LinearForm
    colocation_usd_per_s: LinearForm
    tco_usd_per_s: LinearForm


def linear_terms(lines: CostLines, liquid_cooled: bool, provisioned_extra_w_per_gpu: float = 0.0) -> CostTerms:
    """The cost lines as linear forms for designs of one cooling kind (the facility premium and the
    default PUE depend on it) and one provisioning margin: `provisioned_extra_w_per_gpu` (e in the
    module docstring) the IT power per GPU the facility and colocation are sized for beyond P."""
    e = float(provisioned_extra_w_per_gpu)
    storage = ZERO if lines.storage is None else LinearForm(lines.storage.share, 0.0, lines.storage.per_gpu_usd)
    frontend = (ZERO if lines.frontend_network is None
                else LinearForm(lines.frontend_network.share, 0.0, lines.frontend_network.per_gpu_usd))
    facility = (ZERO if lines.facility is None
                else LinearForm(0.0, lines.facility.usd_per_w_it(liquid_cooled), lines.facility.usd_per_w_it(liquid_cooled) * e))
    it_side = LinearForm(1.0, 0.0, 0.0) + storage + frontend  # depreciated over the server years
    pue = lines.pue_for(liquid_cooled)

    amortized = it_side.scaled(1.0 / (lines.depreciation_years * SECONDS_PER_YEAR))
    if lines.facility is not None:
        amortized = amortized + facility.scaled(1.0 / (lines.facility.depreciation_years * SECONDS_PER_YEAR))
    energy = (ZERO if lines.electricity is None
              else LinearForm(0.0, pue / W_PER_KW / SECONDS_PER_HOUR * lines.electricity.usd_per_kwh, 0.0))
    colo_rate = 0.0 if lines.colocation is None else lines.colocation.usd_per_kw_month / W_PER_KW / SECONDS_PER_MONTH
    colocation = ZERO if lines.colocation is None else LinearForm(0.0, colo_rate, colo_rate * e)
    return CostTerms(storage_capex_usd=storage, frontend_capex_usd=frontend, facility_capex_usd=facility,
                     capex_total_usd=it_side + facility, facility_power_w=LinearForm(0.0, pue, 0.0),
                     amortized_usd_per_s=amortized, energy_usd_per_s=energy, colocation_usd_per_s=colocation,
                     tco_usd_per_s=amortized + energy + colocation)


# ---------------------------------------------------------------------------------------------------
# Many designs at once


@dataclass(frozen=True)
class CostTable:
    """CostBreakdown's figures for many designs, one numpy array per field (storage capacity and write
    bandwidth are left to the per-design record)."""

    capex_usd: np.ndarray
    storage_capex_usd: np.ndarray
    frontend_capex_usd: np.ndarray
    facility_capex_usd: np.ndarray
    capex_total_usd: np.ndarray
    it_power_w: np.ndarray
    pue: np.ndarray
    facility_power_w: np.ndarray
    run_s: np.ndarray
    energy_kwh: np.ndarray
    energy_cost_usd: np.ndarray
    colocation_usd: np.ndarray
    amortized_capex_usd: np.ndarray
    tco_usd: np.ndarray
    tokens: np.ndarray
    usd_per_million_tokens: np.ndarray
    absent_lines: tuple[str, ...]

    def columns(self) -> dict[str, np.ndarray]:
        """The arrays by field name, for a table."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "absent_lines"}


def _check_array(name: str, values: np.ndarray, *, low: float, strict: bool = False) -> None:
    bad = ~np.isfinite(values) | ((values <= low) if strict else (values < low))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise SpecError(f"{name}[{i}] = {values.flat[i]}: must be a finite number {'>' if strict else '>='} {low:g}")


def cost_breakdown_many(capex_it_usd, it_power_w, n_gpus, liquid_cooled, time_to_train_s, tokens,  # noqa: ANN001
                        lines: CostLines) -> CostTable:
    """cost_breakdown over arrays of designs (inputs broadcast together; 1-d results), through the
    linear terms of each cooling kind."""
    arrays = np.broadcast_arrays(*(np.atleast_1d(np.asarray(a, dtype=float)) for a in
                                   (capex_it_usd, it_power_w, n_gpus, time_to_train_s, tokens)),
                                 np.atleast_1d(np.asarray(liquid_cooled, dtype=bool)))
    capex_it, power_it, n, run_s, n_tokens = (a.ravel() for a in arrays[:5])
    liquid = arrays[5].ravel()
    for name, a, low, strict in (("capex_it_usd", capex_it, 0, False), ("it_power_w", power_it, 0, False),
                                 ("n_gpus", n, 1, False), ("time_to_train_s", run_s, 0, False),
                                 ("tokens", n_tokens, 0, True)):
        _check_array(name, a, low=low, strict=strict)

    by_cooling = (linear_terms(lines, True), linear_terms(lines, False))

    def value(term: str) -> np.ndarray:
        wet, dry = (getattr(t, term)(capex_it, power_it, n) for t in by_cooling)
        return np.where(liquid, wet, dry)

    facility_power = value("facility_power_w")
    tco = value("tco_usd_per_s") * run_s
    return CostTable(
        capex_usd=capex_it, storage_capex_usd=value("storage_capex_usd"), frontend_capex_usd=value("frontend_capex_usd"),
        facility_capex_usd=value("facility_capex_usd"), capex_total_usd=value("capex_total_usd"), it_power_w=power_it,
        pue=np.where(liquid, lines.pue_for(True), lines.pue_for(False)), facility_power_w=facility_power, run_s=run_s,
        energy_kwh=facility_power / W_PER_KW * run_s / SECONDS_PER_HOUR, energy_cost_usd=value("energy_usd_per_s") * run_s,
        colocation_usd=value("colocation_usd_per_s") * run_s, amortized_capex_usd=value("amortized_usd_per_s") * run_s,
        tco_usd=tco, tokens=n_tokens, usd_per_million_tokens=tco / n_tokens * 1e6, absent_lines=lines.absent_lines)
