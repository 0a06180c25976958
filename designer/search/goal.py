"""A study's goal over evaluated designs: the answer, the limit that binds, and the runners-up.

Pure: takes the designs' metrics (one record per design with a best strategy) and the goal record.
Each design is taken at its fastest feasible strategy: within a design capex and power are constant
and energy is power x time, so the fastest strategy is the best for every goal metric.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from designer.spec.study import Goal, GoalLimit

DAY_S = 86_400.0
J_PER_MWH = 3.6e9


@dataclass(frozen=True)
class DesignPoint:
    """One design at its best strategy, with what a goal can name."""

    design_id: str
    label: str
    family: str
    platform: str
    n_gpus: int  # built, spares included: what capex_usd and power_w pay for
    capex_usd: float
    power_w: float
    time_to_train_s: float
    strategy: str = ""
    # the study's cost and reliability metrics at this point (designer.search.economics), if any
    extra: tuple[tuple[str, float], ...] = ()
    # GPUs the job runs on (n_gpus less the spare domains' GPUs); 0: all of them
    job_gpus: int = 0

    def metric(self, name: str) -> float:
        t = self.time_to_train_s
        base = {"capex_usd": self.capex_usd, "time_to_train_s": t, "time_to_train_days": t / DAY_S,
                "power_w": self.power_w, "energy_j": self.power_w * t,
                "energy_mwh": self.power_w * t / J_PER_MWH}
        if name in base:
            return base[name]
        return dict(self.extra)[name]

    def excess(self, lim: GoalLimit) -> float:
        """How far past the limit, relative to it (<= 0: met)."""
        v = self.metric(lim.metric)
        scale = abs(lim.rhs) if lim.rhs else 1.0
        return (v - lim.rhs) / scale if lim.sense == "<=" else (lim.rhs - v) / scale


@dataclass(frozen=True)
class RunnerUp:
    group: str  # "family rail-only" or "platform gb200_nvl72"
    point: DesignPoint
    behind: float  # the goal metric relative to the answer's, minus one (0.05: 5 % worse)


@dataclass(frozen=True)
class GoalAnswer:
    met: bool
    goal_text: str
    answer: DesignPoint | None
    binding: str = ""  # the limit that rules out the next better design, with the answer's slack to it; "" if none
    runners_up: tuple[RunnerUp, ...] = ()
    message: str = ""  # one line for the terminal
    n_meeting: int = 0
    closest: DesignPoint | None = None

    def as_dict(self) -> dict:
        def pt(p: DesignPoint | None):
            if p is None:
                return None
            fields = {k: v for k, v in p.__dict__.items() if k != "extra"}
            return {**fields, "time_to_train_days": p.time_to_train_s / DAY_S, **dict(p.extra)}

        return {"met": self.met, "goal": self.goal_text, "answer": pt(self.answer), "binding": self.binding,
                "n_designs_meeting": self.n_meeting, "closest": pt(self.closest), "message": self.message,
                "runners_up": [{"group": r.group, "behind": r.behind, **pt(r.point)} for r in self.runners_up]}


def goal_text(goal: Goal) -> str:
    if goal.is_front:
        return "front"
    lims = " and ".join(lim.text for lim in goal.subject_to)
    return f"minimize {goal.minimize}" + (f" subject to {lims}" if lims else "")


def _fmt(name: str, v: float) -> str:
    if name in ("capex_usd", "capex_total_usd", "tco_usd", "energy_cost_usd"):
        return f"${v / 1e6:,.1f}M"
    if name == "usd_per_million_tokens":
        return f"${v:,.2f} per million tokens"
    if name in ("power_w", "facility_power_w"):
        return f"{v / 1e6:,.2f} MW"
    if name in ("time_to_train_s", "time_to_train_with_failures_s"):
        return f"{v / DAY_S:,.2f} days"
    if name in ("time_to_train_days", "time_to_train_with_failures_days"):
        return f"{v:,.2f} days"
    return f"{v:.4g}"


def _describe(p: DesignPoint) -> str:
    spare = p.n_gpus - p.job_gpus if 0 < p.job_gpus < p.n_gpus else 0
    built = f"{p.n_gpus:,} ({p.job_gpus:,} in the job, {spare:,} spare)" if spare else f"{p.n_gpus:,}"
    return f"{built} x {p.platform} ({p.family}, {p.label})"


def answer_goal(goal: Goal, points: Sequence[DesignPoint]) -> GoalAnswer | None:
    """The goal's answer among `points`; None for the `front` goal."""
    if goal.is_front:
        return None
    text = goal_text(goal)
    target = goal.minimize
    assert target is not None
    ok = [p for p in points if all(p.excess(lim) <= 0 for lim in goal.subject_to)]
    if not ok:
        if not points:
            return GoalAnswer(False, text, None, message=f"no design meets {text}: no design has a feasible strategy")
        closest = min(points, key=lambda p: (max(p.excess(lim) for lim in goal.subject_to), p.metric(target)))
        # every limit the closest design misses, worst first (it may miss more than one)
        missed = sorted((lim for lim in goal.subject_to if closest.excess(lim) > 0), key=lambda lim: -closest.excess(lim))
        misses = ", ".join(f"{_fmt(lim.metric, closest.metric(lim.metric))} ({closest.excess(lim):+.1%} past {lim.text})"
                           for lim in missed)
        msg = (f"no design meets {' and '.join(lim.text for lim in goal.subject_to)}; closest is {_describe(closest)}: "
               f"{misses}; {_fmt('capex_usd', closest.capex_usd)}, {closest.time_to_train_s / DAY_S:,.2f} days")
        # with several limits, the design nearest the worst-missed one among those meeting all the others
        worst = missed[0]
        others = [lim for lim in goal.subject_to if lim is not worst]
        within = [p for p in points if others and all(p.excess(lim) <= 0 for lim in others)]
        if len(missed) > 1 and within:
            near = min(within, key=lambda p: (p.excess(worst), p.metric(target)))
            msg += (f"; within {' and '.join(lim.text for lim in others)} the nearest is {_describe(near)} at "
                    f"{_fmt(worst.metric, near.metric(worst.metric))} ({near.excess(worst):+.1%} past {worst.text})")
        return GoalAnswer(False, text, None, message=msg, closest=closest)
    best = min(ok, key=lambda p: (p.metric(target), p.capex_usd, p.time_to_train_s, p.design_id))
    binding = ""
    # a limit binds when it rules out a design the goal would prefer: the nearest such design names
    # the limit it misses most (none binds when the answer is the best design unconstrained)
    better = [p for p in points if p.metric(target) < best.metric(target)]
    if goal.subject_to and better:
        nxt = max(better, key=lambda p: (p.metric(target), -p.capex_usd, p.design_id))
        lim = max(goal.subject_to, key=lambda x: nxt.excess(x))
        binding = (f"{lim.text} (slack {-best.excess(lim):.1%} at the answer; the next better design, "
                   f"{_fmt(target, nxt.metric(target))}, misses it by {nxt.excess(lim):.1%})")
    runners: list[RunnerUp] = []
    for attr in ("family", "platform"):
        for value in sorted({getattr(p, attr) for p in ok} - {getattr(best, attr)}):
            group = [p for p in ok if getattr(p, attr) == value]
            r = min(group, key=lambda p: (p.metric(target), p.capex_usd, p.design_id))
            base = best.metric(target)
            runners.append(RunnerUp(f"{attr} {value}", r, r.metric(target) / base - 1 if base else math.inf))
    msg = (f"{text}: {_describe(best)}, {_fmt('capex_usd', best.capex_usd)}, {best.time_to_train_s / DAY_S:,.2f} days, "
           f"{best.power_w / 1e6:,.2f} MW" + (f"; binding: {binding}" if binding else ""))
    return GoalAnswer(True, text, best, binding, tuple(runners), msg, len(ok))


__all__ = ["DesignPoint", "GoalAnswer", "RunnerUp", "answer_goal", "goal_text"]
