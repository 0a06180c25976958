"""The only place HiGHS is called.

Uses Pyomo's new solver interface (`pyomo.contrib.solver`, hardware-and-libraries.md §4a) with
`load_solutions=False` and `raise_exception_on_nonoptimal_result=False`, so that a time limit returns
the incumbent and its gap instead of raising, and an infeasible model returns a status we can act on.
threads=1 and a fixed `random_seed` keep runs reproducible (same reference, "For reproducible CI").

Infeasible budgets: `explain_infeasibility` re-solves an *elastic* copy (a non-negative violation per
budget row, minimized; same reference, "Infeasibility handling" step 2) and raises one
InfeasibleDesign line naming the budget that binds and its shortfall.
"""

from __future__ import annotations

import math
import signal
import threading
import time
from dataclasses import dataclass
from typing import Literal

import pyomo.environ as pyo
from pyomo.contrib.solver.common.factory import SolverFactory
from pyomo.contrib.solver.common.results import SolutionStatus as SS
from pyomo.contrib.solver.common.results import TerminationCondition as TC

from designer.errors import InfeasibleDesign, SolverError
from designer.spec.network_study import SolverSettings

Status = Literal["optimal", "incumbent", "infeasible", "no_solution"]

# HiGHS presolve rule 15 (bit 2^15) is probing. Exactly one combination block is chosen (sum y = 1),
# so probing any y propagates through every other block: on 1,300 blocks it took 15 s of a 16 s solve
# and then proved nothing the LP did not (measured on HiGHS 1.16, max_flops over 1,024..1e6 GPUs).
# The HiGHS log itself suggests this switch ("consider not using probing by setting option
# presolve_rule_off to 2^15").
PRESOLVE_RULES_OFF = 2**15


@dataclass(frozen=True)
class SolveOutcome:
    status: Status
    termination: str
    objective: float | None
    bound: float | None
    gap: float | None  # relative |incumbent - bound| / |incumbent|; None without an incumbent
    solve_time_s: float


def new_solver():
    """A HiGHS handle. Reusing it on the same model makes later solves incremental (persistent)."""
    opt = SolverFactory("highs")
    if not opt.available():
        raise SolverError("HiGHS is not available: pip install highspy")
    return opt


class _CtrlC:
    """Ctrl-C during a solve. HiGHS runs in this thread and calls back into Python, where the
    KeyboardInterrupt is raised; the wrapper then turns it into a solver error (termination `error`,
    no incumbent) and the interrupt is lost, so it would read as "nothing found in the time limit".
    This handler records that SIGINT came (and still raises, which is what stops HiGHS at once), so
    run_highs raises KeyboardInterrupt after the solve returns. Only the main thread gets signals."""

    def __init__(self) -> None:
        self.hit = False
        self.previous = None

    def _handler(self, signum, frame) -> None:  # noqa: ANN001 - signal's signature
        self.hit = True
        raise KeyboardInterrupt

    def __enter__(self) -> "_CtrlC":
        if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            self.previous = signal.signal(signal.SIGINT, self._handler)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)


def run_highs(model: pyo.ConcreteModel, settings: SolverSettings, solver=None) -> SolveOutcome:
    """Solve; load the incumbent into the model when there is one. Ctrl-C raises KeyboardInterrupt."""
    opt = solver if solver is not None else new_solver()
    t0 = time.perf_counter()
    ctrl_c = _CtrlC()
    try:
        with ctrl_c:
            res = opt.solve(
            model,
                time_limit=settings.time_limit_s,
                rel_gap=settings.rel_gap,
                threads=settings.threads,
                load_solutions=False,
                raise_exception_on_nonoptimal_result=False,
                solver_options={"random_seed": settings.seed, "mip_abs_gap": 1e-9,
                                "presolve_rule_off": PRESOLVE_RULES_OFF},
            )
    except Exception as err:  # the wrapper raises on solver-internal errors; keep it one line
        raise SolverError(f"HiGHS failed: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}") from None
    if ctrl_c.hit:
        raise KeyboardInterrupt
    elapsed = time.perf_counter() - t0
    tc, ss = res.termination_condition, res.solution_status
    inc, bnd = res.incumbent_objective, res.objective_bound
    if ss in (SS.optimal, SS.feasible):
        res.solution_loader.load_vars()
        status: Status = "optimal" if tc == TC.convergenceCriteriaSatisfied else "incumbent"
        if status == "incumbent" and inc is not None:
            bnd = _meaningful_bound(model, settings, inc, bnd)
        gap = None
        if inc is not None and bnd is not None and math.isfinite(bnd):
            gap = abs(inc - bnd) / max(1e-9, abs(inc))
        return SolveOutcome(status, tc.name, inc, bnd, gap, elapsed)
    if tc in (TC.provenInfeasible, TC.locallyInfeasible, TC.infeasibleOrUnbounded):
        return SolveOutcome("infeasible", tc.name, None, None, None, elapsed)
    return SolveOutcome("no_solution", tc.name, None, bnd, None, elapsed)


def _meaningful_bound(model: pyo.ConcreteModel, settings: SolverSettings, incumbent: float,
                      bound: float | None) -> float | None:
    """The better of HiGHS's bound and the model's LP relaxation, for a solve stopped by its time limit.

    HiGHS stopped before or early in branch and bound reports the trivial bound of its search (0 for a
    cost, or the sum of variable bounds for a maximization), which made an incumbent that was in fact
    optimal read as a 27,000% gap. The LP relaxation (every integer variable made continuous) is a valid
    bound of the MILP and takes a fraction of the MILP's time; the tighter of the two is reported."""
    obj = next(model.component_data_objects(pyo.Objective, active=True), None)
    if obj is None:
        return bound
    minimize = obj.sense == pyo.minimize
    relaxed = model.clone()
    pyo.TransformationFactory("core.relax_integer_vars").apply_to(relaxed)
    try:
        res = new_solver().solve(relaxed, time_limit=max(1.0, min(30.0, settings.time_limit_s)), threads=settings.threads,
                                 load_solutions=False, raise_exception_on_nonoptimal_result=False)
    except Exception:  # no LP bound: keep the solver's own
        return bound
    lp = res.objective_bound if res.termination_condition != TC.convergenceCriteriaSatisfied else res.incumbent_objective
    if lp is None or not math.isfinite(lp):
        return bound
    lp = min(lp, incumbent) if minimize else max(lp, incumbent)  # guard against LP tolerances
    if bound is None or not math.isfinite(bound):
        return lp
    return max(bound, lp) if minimize else min(bound, lp)


@dataclass(frozen=True)
class ElasticRow:
    """One budget row as the elastic re-solve needs it: its constraint, sense, rhs, unit."""

    name: str
    constraint: pyo.Constraint
    sense: str
    rhs: float
    unit: str
    per_gpu: bool = False  # capex_per_gpu rows: the violation is in USD total; report it per GPU
    scale: float = 1.0  # the row is written in rhs units times this (budgets.ROW_SCALE)


def _fmt(x: float) -> str:
    """8600 -> '8600', 0.25 -> '0.25', 2.3e7 -> '2.30e7'."""
    if abs(x) >= 1e5:
        return f"{x:.2e}".replace("e+0", "e").replace("e+", "e")
    if abs(x - round(x)) < 1e-6 * max(1.0, abs(x)):
        return str(int(round(x)))
    return f"{x:.3g}"


def explain_infeasibility(model: pyo.ConcreteModel, rows: list[ElasticRow], settings: SolverSettings,
                          n_gpus_expr, what: str = "", n_gpus_lo: int = 1) -> InfeasibleDesign:
    """Relax every budget row by a violation variable, minimize the violations scaled by their rhs, and
    return (not raise) the one-line InfeasibleDesign that names the largest relative shortfall.

    The model is modified (budget rows deactivated, an elastic objective added); callers pass a model
    they will discard."""
    if not rows:
        return InfeasibleDesign(f"no design satisfies the choices{what} (no budget to relax: check the GPU range, "
                                "bandwidth requirement and hooks)")
    names = [r.name for r in rows]
    model.elastic_viol = pyo.Var(names, domain=pyo.NonNegativeReals)
    model.elastic_rows = pyo.ConstraintList()
    for r in rows:
        r.constraint.deactivate()
        body = r.constraint.body
        if r.sense == "<=":
            model.elastic_rows.add(body <= r.constraint.upper + model.elastic_viol[r.name])
        else:
            model.elastic_rows.add(body + model.elastic_viol[r.name] >= r.constraint.lower)
    for obj in model.component_data_objects(pyo.Objective, active=True):
        obj.deactivate()
    # Relative violation: budgets in USD, W and counts share one objective without one dominating. A
    # per-GPU row's violation is a total (its rhs times the GPUs), so it is measured against the
    # total its rhs allows, at the fewest GPUs the study admits while the count is still unknown.
    def norm(r: ElasticRow, n: int) -> float:
        return max(1.0, abs(r.rhs * r.scale) * (n if r.per_gpu else 1))

    model.elastic_obj = pyo.Objective(
        expr=sum(model.elastic_viol[r.name] / norm(r, max(1, n_gpus_lo)) for r in rows), sense=pyo.minimize)
    out = run_highs(model, settings)
    if out.status not in ("optimal", "incumbent"):
        return InfeasibleDesign(f"no design satisfies the choices{what} even with every budget relaxed: "
                                "check the GPU range, bandwidth requirement and hooks")
    n = int(round(pyo.value(n_gpus_expr)))
    short = []
    for r in rows:
        v = pyo.value(model.elastic_viol[r.name])
        r_norm = norm(r, max(1, n))
        if v > 1e-6 * r_norm:
            short.append((v / r_norm, r, v / r.scale))
    if not short:
        return InfeasibleDesign(f"no design satisfies the choices{what}: the budgets are met only by relaxing "
                                "integrality (check hooks)")
    short = [(rel, r, v / n if r.per_gpu and n else v) for rel, r, v in short]
    short.sort(key=lambda t: -t[0])
    _, r, v = short[0]
    word = "short by" if r.sense == "<=" else "missed by"
    msg = f"{r.name} budget {r.sense} {_fmt(r.rhs)} is {word} {_fmt(v)} {r.unit} for {n} GPUs{what}"
    if len(short) > 1:
        msg += " (also short: " + ", ".join(f"{o.name} by {_fmt(ov)} {o.unit}" for _, o, ov in short[1:]) + ")"
    return InfeasibleDesign(msg)
