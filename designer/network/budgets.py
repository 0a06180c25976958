"""Declarative budgets: each becomes one named constraint, and its slack is read back after the solve.

PyPSA's GlobalConstraint is the model: a budget is data (name, metric, sense, rhs), never code. The
capex and power caps of the study are budgets like any other, named `capex_usd` and `power_w`.
Right-hand sides are mutable Params so a frontier re-solves without rebuilding the model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import pyomo.environ as pyo

from designer.spec.base import Record, Result
from designer.spec.network_study import Budgets, DeclaredBudget, Metric

UNITS: dict[Metric, str] = {
    Metric.capex_usd: "USD", Metric.compute_capex_usd: "USD", Metric.network_capex_usd: "USD",
    Metric.capex_per_gpu_usd: "USD per GPU", Metric.power_w: "W", Metric.network_power_w: "W",
    Metric.scaleout_gbps_per_gpu: "Gb/s per GPU", Metric.n_gpus: "GPUs", Metric.n_domains: "HB domains",
    Metric.switch_count: "switches", Metric.switch_port_count: "switch ports",
    Metric.transceiver_count: "transceivers", Metric.dac_count: "copper-cabled links", Metric.nic_count: "NICs",
    Metric.tiers: "tiers", Metric.job_gpus: "job GPUs", Metric.spare_domains: "spare HB domains",
    Metric.capex_total_usd: "USD", Metric.facility_power_w: "W",
}


# Budget rows are written in M USD and kW: with raw USD and W, rows mix coefficients of 1e7 (an NVL72
# rack) with a right-hand side of 1e10, which HiGHS flags as badly scaled and presolves slowly.
ROW_SCALE: dict[Metric, float] = {
    Metric.capex_usd: 1e-6, Metric.compute_capex_usd: 1e-6, Metric.network_capex_usd: 1e-6,
    Metric.capex_per_gpu_usd: 1e-6, Metric.power_w: 1e-3, Metric.network_power_w: 1e-3,
    Metric.capex_total_usd: 1e-6, Metric.facility_power_w: 1e-3,
}


def row_scale(metric: Metric) -> float:
    return ROW_SCALE.get(metric, 1.0)


class BudgetSlack(Result):
    """A budget after the solve. slack >= 0 means met; binding means (almost) no slack left."""

    name: str
    metric: Metric
    sense: str
    rhs: float
    value: float
    slack: float
    binding: bool


def budget_rows(budgets: Budgets) -> tuple[DeclaredBudget, ...]:
    """The study's capex and power caps plus its declared budgets, as one list of rows."""
    rows = []
    if budgets.capex_usd is not None:
        rows.append(DeclaredBudget(name="capex_usd", metric=Metric.capex_usd, sense="<=", rhs=budgets.capex_usd))
    if budgets.power_w is not None:
        rows.append(DeclaredBudget(name="power_w", metric=Metric.power_w, sense="<=", rhs=budgets.power_w))
    for m in (Metric.capex_total_usd, Metric.facility_power_w):
        v = getattr(budgets, m.value)
        if v is not None:
            rows.append(DeclaredBudget(name=m.value, metric=m, sense="<=", rhs=v))
    return tuple(rows) + tuple(budgets.declared)


@dataclass(frozen=True)
class BudgetHandles:
    rows: tuple[DeclaredBudget, ...]
    block: pyo.Block  # model.budgets: one Constraint and one mutable Param `<name>_rhs` per row


def _row_expr(row: DeclaredBudget, metrics: Mapping[Metric, object], n_gpus, rhs_param):
    k = row_scale(row.metric)
    if row.metric in (Metric.capex_total_usd, Metric.facility_power_w) and metrics.get(row.metric) is None:
        from designer.errors import SpecError

        raise SpecError(f"budget '{row.name}': metric {row.metric.value} needs the study's 'costs' section "
                        "(designer run STUDY with costs: ...); allowed here: capex_usd, power_w and the other metrics")
    if row.metric == Metric.capex_per_gpu_usd:
        # capex / n <= rhs is not linear; n > 0 in every design, so it equals capex - rhs * n <= 0.
        lhs = k * (metrics[Metric.capex_usd] - rhs_param * n_gpus)
        return lhs <= 0 if row.sense == "<=" else lhs >= 0
    lhs = k * metrics[row.metric]
    return lhs <= k * rhs_param if row.sense == "<=" else lhs >= k * rhs_param


def define_budgets(model: pyo.ConcreteModel, rows: tuple[DeclaredBudget, ...],
                   metrics: Mapping[Metric, object], n_gpus) -> BudgetHandles:
    """One named constraint per budget row on `model.budgets`."""
    model.budgets = pyo.Block()
    for row in rows:
        p = pyo.Param(initialize=row.rhs, mutable=True, within=pyo.Reals)
        model.budgets.add_component(f"{row.name}_rhs", p)
        model.budgets.add_component(row.name, pyo.Constraint(expr=_row_expr(row, metrics, n_gpus, p)))
    return BudgetHandles(rows, model.budgets)


def set_rhs(handles: BudgetHandles, name: str, rhs: float) -> None:
    getattr(handles.block, f"{name}_rhs").set_value(rhs)


def budget_slacks(handles: BudgetHandles, metrics: Mapping[Metric, object], n_gpus) -> tuple[BudgetSlack, ...]:
    """Each budget's value and slack in its own units, read from the loaded solution."""
    out = []
    for row in handles.rows:
        rhs = pyo.value(getattr(handles.block, f"{row.name}_rhs"))
        if row.metric == Metric.capex_per_gpu_usd:
            n = pyo.value(n_gpus)
            value = pyo.value(metrics[Metric.capex_usd]) / n if n > 0 else 0.0
        else:
            value = pyo.value(metrics[row.metric])
        slack = rhs - value if row.sense == "<=" else value - rhs
        binding = abs(slack) <= 1e-6 * max(1.0, abs(rhs))
        out.append(BudgetSlack(name=row.name, metric=row.metric, sense=row.sense, rhs=rhs,
                               value=value, slack=slack, binding=binding))
    return tuple(out)


def unit(metric: Metric) -> str:
    return UNITS[metric]
