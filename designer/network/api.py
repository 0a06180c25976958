"""The network stage's public entry points: build, solve, read back (kept as separate steps inside).

    solve_network(study, *, hooks=()) -> NetworkResult
    frontier(study, levels=None, *, vary=None, optimize=None, hooks=()) -> list[NetworkDesign]
    load_network_study(path) -> NetworkStudy
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from designer.errors import InfeasibleDesign, SolverError, SpecError
from designer.network.budgets import budget_rows, budget_slacks, row_scale, unit
from designer.network.design import NetworkDesign, NetworkResult, extract_design
from designer.network.hooks import HookRef
from designer.network.milp import (
    BuiltModel,
    build_model,
    define_lexicographic_cost,
    enumerate_combos,
    tighten_combos,
)
from designer.network.solve import ElasticRow, SolveOutcome, explain_infeasibility, new_solver, run_highs
from designer.spec.catalog import Catalog
from designer.spec.network_study import FrontierSpec, Metric, NetworkStudy, load_network_study_file, study_catalog


def load_network_study(path: str | Path) -> NetworkStudy:
    """A validated network study from YAML (the study at the root, or under `network:`)."""
    return load_network_study_file(path)


def _explain(study: NetworkStudy, catalog: Catalog, hooks: Sequence[HookRef], combos, kind: str) -> InfeasibleDesign:
    """Which budget binds, and by how much (an elastic re-solve on a fresh copy of the model); when no
    relaxation of the budgets helps and the study has hooks, which hook rules every design out."""
    err = _explain_budgets(study, catalog, hooks, combos, kind)
    all_hooks = [*study.hooks, *hooks]
    if not all_hooks or "relax" not in str(err) and "check hooks" not in str(err):
        return err
    bare = study.with_updates(hooks=[])
    for i, ref in enumerate(all_hooks):
        rest = [h for j, h in enumerate(all_hooks) if j != i]
        out = run_highs(build_model(bare, catalog, hooks=rest, combos=combos, objective=kind).model, study.solver)
        if out.status in ("optimal", "incumbent"):
            name = ref if isinstance(ref, str) else getattr(ref, "__name__", f"hook {i}")
            return InfeasibleDesign(f"hook '{name}' rules out every design{'' if not rest else ' (with the other hooks)'}: "
                                    "without it a design meets every budget and choice")
    if len(all_hooks) > 1:
        out = run_highs(build_model(bare, catalog, combos=combos, objective=kind).model, study.solver)
        if out.status in ("optimal", "incumbent"):
            names = ", ".join(h if isinstance(h, str) else getattr(h, "__name__", "hook") for h in all_hooks)
            return InfeasibleDesign(f"the hooks together ({names}) rule out every design, though no one of them "
                                    "alone does: without them a design meets every budget and choice")
    return err


def _explain_budgets(study: NetworkStudy, catalog: Catalog, hooks: Sequence[HookRef], combos, kind: str) -> InfeasibleDesign:
    """Elastic re-solve on a fresh copy of the model: which budget binds, and by how much."""
    built = build_model(study, catalog, hooks=hooks, combos=combos, objective=kind)
    rows = []
    for r in built.budgets.rows:
        con = getattr(built.budgets.block, r.name)
        per_gpu = r.metric == Metric.capex_per_gpu_usd
        rows.append(ElasticRow(r.name, con, r.sense, r.rhs, unit(r.metric), per_gpu, row_scale(r.metric)))
    return explain_infeasibility(built.model, rows, study.solver, built.handles.n_gpus)


def _solve_one(study: NetworkStudy, catalog: Catalog, hooks: Sequence[HookRef], level: float | None = None
               ) -> tuple[NetworkDesign, tuple, SolveOutcome]:
    kind = study.objective.base_kind
    combos = enumerate_combos(study, catalog)
    tight = tighten_combos(combos, budget_rows(study.budgets))
    if not tight:
        raise _explain(study, catalog, hooks, combos, kind)
    built: BuiltModel = build_model(study, catalog, hooks=hooks, combos=tight, objective=kind)
    opt = new_solver()
    first = run_highs(built.model, study.solver, opt)
    if first.status == "infeasible":
        raise _explain(study, catalog, hooks, combos, kind)
    if first.status == "no_solution":
        raise SolverError(f"no design found within solver.time_limit_s = {study.solver.time_limit_s:g} s "
                          f"({first.termination}); raise the time limit")
    outcome = first
    if kind in ("max_gpus", "max_flops"):
        # Lexicographic: keep the best GPU count (or FLOP/s) and then minimize capex.
        define_lexicographic_cost(built.model, built.handles, kind, first.objective)
        second = run_highs(built.model, study.solver, opt)
        if second.status in ("optimal", "incumbent"):
            gap = max(g for g in (first.gap, second.gap) if g is not None) if (first.gap or second.gap) else first.gap
            status = "optimal" if first.status == second.status == "optimal" else "incumbent"
            outcome = SolveOutcome(status, second.termination, first.objective, first.bound, gap,
                                   first.solve_time_s + second.solve_time_s)
        else:
            # The cost stage found nothing in time: nothing was loaded, so the model still holds stage
            # one's incumbent; report it as such.
            outcome = SolveOutcome("incumbent", second.termination, first.objective, first.bound, first.gap,
                                   first.solve_time_s + second.solve_time_s)
    design = extract_design(built, catalog, level=level)
    slacks = budget_slacks(built.budgets, built.handles.metrics(), built.handles.n_gpus)
    return design, slacks, outcome


def _combine(parts: list[tuple[NetworkDesign, tuple, SolveOutcome]], dropped: tuple[str, ...] = ()) -> NetworkResult:
    gaps = [o.gap for _, _, o in parts if o.gap is not None]
    return NetworkResult(
        designs=tuple(d for d, _, _ in parts),
        status="optimal" if all(o.status == "optimal" for _, _, o in parts) else "incumbent",
        gap=max(gaps) if gaps else None,
        solve_time_s=sum(o.solve_time_s for _, _, o in parts),
        budget_slacks=tuple(s for _, s, _ in parts),
        dropped_levels=dropped,
    )


def solve_network(study: NetworkStudy, *, hooks: Sequence[HookRef] = (), catalog: Catalog | None = None) -> NetworkResult:
    """Solve the study. A frontier objective returns one design per feasible level.

    Raises InfeasibleDesign (one line: the binding budget and its shortfall), SpecError for bad
    input, HookError for a broken hook and SolverError when the solver finds nothing in time."""
    catalog = catalog if catalog is not None else study_catalog(study)
    if study.objective.frontier is not None:
        fr = study.objective.frontier
        return _frontier(study, catalog, fr, hooks)
    return _combine([_solve_one(study, catalog, hooks)])


def _level_study(study: NetworkStudy, fr: FrontierSpec, level: float) -> NetworkStudy:
    objective = {"kind": fr.optimize, "precision": study.objective.precision}
    if fr.vary == "n_gpus":
        gpus = {**study.gpus.model_dump(), "count": int(level), "min": None, "max": None}
        return study.with_updates(gpus=gpus, objective=objective)
    budgets = {**study.budgets.model_dump(), fr.vary: level}
    return study.with_updates(budgets=budgets, objective=objective)


def _frontier(study: NetworkStudy, catalog: Catalog, fr: FrontierSpec, hooks: Sequence[HookRef]) -> NetworkResult:
    """Epsilon-constraint: one solve per level; infeasible levels are left out of the frontier."""
    parts = []
    dropped = []
    for level in fr.levels:
        try:
            parts.append(_solve_one(_level_study(study, fr, level), catalog, hooks, level=level))
        except InfeasibleDesign as err:
            dropped.append(f"{fr.vary} {level:g}: {str(err).splitlines()[0]}")
    if not parts:
        raise InfeasibleDesign(f"no level of the frontier over {fr.vary} ({', '.join(f'{x:g}' for x in fr.levels)}) "
                               "has a feasible design: " + " | ".join(dropped[:3]))
    return _combine(parts, tuple(dropped))


def frontier(study: NetworkStudy, levels: Sequence[float] | None = None, *, vary: str | None = None,
             optimize: str | None = None, hooks: Sequence[HookRef] = ()) -> list[NetworkDesign]:
    """Designs across budget levels (epsilon-constraint): e.g. min cost for each GPU level
    (vary='n_gpus', optimize='min_cost') or max GPUs for each capex level (vary='capex_usd',
    optimize='max_gpus'). Defaults come from the study's `objective.frontier`."""
    base = study.objective.frontier
    if base is None and (vary is None or optimize is None or levels is None):
        raise SpecError("frontier: give levels, vary and optimize, or a study with objective.frontier")
    try:
        fr = FrontierSpec(vary=vary or base.vary, optimize=optimize or base.optimize,
                          levels=tuple(levels) if levels is not None else base.levels)
    except Exception as err:  # pydantic ValidationError -> one line
        raise SpecError(f"frontier: {str(err).splitlines()[-1].strip()}") from None
    catalog = study_catalog(study)
    if fr.vary == "n_gpus":
        # Validate the GPU levels against the HB domains like a study's own frontier.
        study_catalog(study.with_updates(objective={"kind": "frontier", "frontier": fr.model_dump()}))
    return list(_frontier(study, catalog, fr, hooks).designs)


__all__ = ["frontier", "load_network_study", "solve_network"]
