"""The network stage's public entry points: build, solve, read back (kept as separate steps inside).

    solve_network(study, *, hooks=()) -> NetworkResult
    frontier(study, levels=None, *, vary=None, optimize=None, hooks=()) -> list[NetworkDesign]
    load_network_study(path) -> NetworkStudy

A frontier (epsilon-constraint) builds one model for all its levels and re-solves it with one
persistent HiGHS object, changing only bounds and parameters between levels (_PersistentFrontier);
`solve_network(..., rebuild_per_level=True)` and studies with hooks solve each level afresh.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

from designer.errors import InfeasibleDesign, SolverError, SpecError
from designer.network.budgets import budget_rows, budget_slacks, row_scale, set_rhs, unit
from designer.network.design import NetworkDesign, NetworkResult, extract_design
from designer.network.hooks import HookRef
from designer.network.milp import (
    BuiltModel,
    Combo,
    build_model,
    define_lexicographic_cost,
    define_lexicographic_stage,
    enumerate_combos,
    set_lexicographic_stage,
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
    return explain_infeasibility(built.model, rows, study.solver, built.handles.n_gpus, n_gpus_lo=study.gpus.lo)


def _solve_one(study: NetworkStudy, catalog: Catalog, hooks: Sequence[HookRef], level: float | None = None
               ) -> tuple[NetworkDesign, tuple, SolveOutcome]:
    kind = study.objective.base_kind
    combos = enumerate_combos(study, catalog)
    tight = tighten_combos(combos, budget_rows(study.budgets))
    if not tight:
        raise _explain(study, catalog, hooks, combos, kind)
    built: BuiltModel = build_model(study, catalog, hooks=hooks, combos=tight, objective=kind)
    opt = new_solver()

    def cost_stage(best: float) -> None:
        define_lexicographic_cost(built.model, built.handles, kind, best)

    outcome = _run_stages(built, study, catalog, hooks, combos, kind, opt, cost_stage)
    design = extract_design(built, catalog, level=level)
    slacks = budget_slacks(built.budgets, built.handles.metrics(), built.handles.n_gpus)
    return design, slacks, outcome


def _no_solution(study: NetworkStudy, outcome: SolveOutcome) -> SolverError:
    """HiGHS stopped without a design: at the time limit (raise it), or for another reason before it
    (numerics: prices, budgets or sizes far outside the catalog's range), which a longer limit would
    not mend."""
    if "time" in outcome.termination.lower() or outcome.solve_time_s >= 0.95 * study.solver.time_limit_s:
        return SolverError(f"no design found within solver.time_limit_s = {study.solver.time_limit_s:g} s "
                           f"({outcome.termination}); raise the time limit")
    return SolverError(f"HiGHS stopped without a design after {outcome.solve_time_s:.1f} s ({outcome.termination}), "
                       "well within solver.time_limit_s: check prices, budgets and sizes for values far outside "
                       "the catalog's (catalog.price_multipliers, budgets)")


def _run_stages(built: BuiltModel, study: NetworkStudy, catalog: Catalog, hooks: Sequence[HookRef], combos,
                kind: str, opt, cost_stage) -> SolveOutcome:
    """Solve the built model with `opt`, then (max_gpus, max_flops) the lexicographic cost stage that
    `cost_stage(best)` switches on. Raises InfeasibleDesign (explained on `combos`) or SolverError."""
    first = run_highs(built.model, study.solver, opt)
    if first.status == "infeasible":
        raise _explain(study, catalog, hooks, combos, kind)
    if first.status == "no_solution":
        raise _no_solution(study, first)
    if kind not in ("max_gpus", "max_flops"):
        return first
    # Lexicographic: keep the best GPU count (or FLOP/s) and then minimize capex.
    cost_stage(first.objective)
    second = run_highs(built.model, study.solver, opt)
    if second.status in ("optimal", "incumbent"):
        gap = max(g for g in (first.gap, second.gap) if g is not None) if (first.gap or second.gap) else first.gap
        status = "optimal" if first.status == second.status == "optimal" else "incumbent"
        return SolveOutcome(status, second.termination, first.objective, first.bound, gap,
                            first.solve_time_s + second.solve_time_s)
    # The cost stage found nothing in time: nothing was loaded, so the model still holds stage
    # one's incumbent; report it as such.
    return SolveOutcome("incumbent", second.termination, first.objective, first.bound, first.gap,
                        first.solve_time_s + second.solve_time_s)


def _combine(parts: list[tuple[NetworkDesign, tuple, SolveOutcome]], dropped: tuple[str, ...] = ()) -> NetworkResult:
    gaps = [o.gap for _, _, o in parts if o.gap is not None]
    return NetworkResult(
        designs=tuple(d for d, _, _ in parts),
        status="optimal" if all(o.status == "optimal" for _, _, o in parts) else "incumbent",
        gap=max(gaps) if gaps else None,
        solve_time_s=sum(o.solve_time_s for _, _, o in parts),
        solve_times_s=tuple(o.solve_time_s for _, _, o in parts),
        budget_slacks=tuple(s for _, s, _ in parts),
        dropped_levels=dropped,
    )


def solve_network(study: NetworkStudy, *, hooks: Sequence[HookRef] = (), catalog: Catalog | None = None,
                  rebuild_per_level: bool = False) -> NetworkResult:
    """Solve the study. A frontier objective returns one design per feasible level.

    rebuild_per_level: build, tighten and translate the model afresh at every frontier level (the
    reference the persistent frontier is checked and benchmarked against) instead of re-solving one
    model. Raises InfeasibleDesign (one line: the binding budget and its shortfall), SpecError for bad
    input, HookError for a broken hook and SolverError when the solver finds nothing in time."""
    catalog = catalog if catalog is not None else study_catalog(study)
    if study.objective.frontier is not None:
        fr = study.objective.frontier
        return _frontier(study, catalog, fr, hooks, rebuild=rebuild_per_level)
    return _combine([_solve_one(study, catalog, hooks)])


def _level_study(study: NetworkStudy, fr: FrontierSpec, level: float) -> NetworkStudy:
    objective = {"kind": fr.optimize, "precision": study.objective.precision}
    if fr.vary == "n_gpus":
        gpus = {**study.gpus.model_dump(), "count": int(level), "min": None, "max": None}
        return study.with_updates(gpus=gpus, objective=objective)
    budgets = {**study.budgets.model_dump(), fr.vary: level}
    return study.with_updates(budgets=budgets, objective=objective)


def _frontier(study: NetworkStudy, catalog: Catalog, fr: FrontierSpec, hooks: Sequence[HookRef], *,
              rebuild: bool = False) -> NetworkResult:
    """Epsilon-constraint: one solve per level; infeasible levels are left out of the frontier.

    One model for every level (_PersistentFrontier) unless `rebuild` or the study has hooks: a hook
    sees the level's own study (its GPU count, its budgets) and may build constraints from it, so with
    hooks every level gets its own model, as a single solve of that level would."""
    if rebuild or study.hooks or hooks:
        return _frontier_rebuild(study, catalog, fr, hooks)
    return _PersistentFrontier(study, catalog, fr).solve()


def _frontier_rebuild(study: NetworkStudy, catalog: Catalog, fr: FrontierSpec, hooks: Sequence[HookRef]) -> NetworkResult:
    """Each level solved as its own study: enumerate, tighten, build, translate, solve."""
    parts = []
    dropped = []
    for level in fr.levels:
        try:
            parts.append(_solve_one(_level_study(study, fr, level), catalog, hooks, level=level))
        except InfeasibleDesign as err:
            dropped.append(_dropped_line(fr, level, err))
    return _frontier_result(fr, parts, dropped)


def _dropped_line(fr: FrontierSpec, level: float, err: InfeasibleDesign) -> str:
    return f"{fr.vary} {level:g}: {str(err).splitlines()[0]}"


def _frontier_result(fr: FrontierSpec, parts: list, dropped: list[str]) -> NetworkResult:
    if not parts:
        raise InfeasibleDesign(f"no level of the frontier over {fr.vary} ({', '.join(f'{x:g}' for x in fr.levels)}) "
                               "has a feasible design: " + " | ".join(dropped[:3]))
    return _combine(parts, tuple(dropped))


def _combo_key(c: Combo) -> Combo:
    """A combination's discrete choices without its position, domain range and floor: the same block
    of the model at every level (ranges and indices differ from level to level; so does the floor,
    planned for each level's cluster, but it only chose the block's media, which are in the key,
    and is put back for the level's design, _PersistentFrontier._level_built)."""
    return replace(c, index=0, d_min=0, d_max=0, floor=None)


@dataclass(frozen=True)
class _Level:
    """One frontier level as the rebuild path sees it: its own study, its enumerated combinations
    (for the explanation) and their bound-tightened ranges, by choice key."""

    level: float
    study: NetworkStudy
    combos: tuple[Combo, ...]
    ranges: dict[Combo, tuple[int, int]]  # _combo_key(c) -> (d_min, d_max) after tighten_combos; {}: none left
    floors: dict[Combo, Any] = field(default_factory=dict)  # _combo_key(c) -> the level's floor of c


class _PersistentFrontier:
    """The epsilon-constraint frontier on one model (Pyomo's persistent HiGHS interface).

    Each level is first prepared exactly as the rebuild path prepares it: its own study
    (_level_study), enumerate_combos and tighten_combos with its budgets. The model holds the union
    of every level's combinations, each block's domain range a pair of mutable Params; a level then
    only sets numbers: its tightened range for each of its blocks, y[c] <= 0 for every other block,
    the budgets' right-hand sides and (with spares) the job's GPU range. That is the level's own
    model with some blocks fixed off, so the two have the same optimum. Changes reach HiGHS
    incrementally (column bounds, coefficients, row bounds), the same solver object throughout, so
    nothing is rebuilt or re-translated between levels.

    Step functions (one-tier fabrics, packed short rails, spare needs) are written over each block's
    hull of ranges, or for spares over the union of its ranges (milp.spare_steps_over): exact on
    every D a level allows."""

    def __init__(self, study: NetworkStudy, catalog: Catalog, fr: FrontierSpec) -> None:
        self.study, self.catalog, self.fr = study, catalog, fr
        self.kind = fr.optimize
        self.levels = self._prepare()

    def _prepare(self) -> list[_Level]:
        out, shared = [], None
        for level in self.fr.levels:
            ls = _level_study(self.study, self.fr, level)
            # Over a budget the GPU range, choices and objective are those of every level, so the
            # enumeration is too; over n_gpus each level has its own count.
            if self.fr.vary == "n_gpus" or shared is None:
                shared = enumerate_combos(ls, self.catalog)
            tight = tighten_combos(shared, budget_rows(ls.budgets))
            ranges = {_combo_key(c): (c.d_min, c.d_max) for c in tight}
            if len(ranges) != len(tight):  # enumerate_combos makes every block's choices distinct
                raise SolverError(f"internal: two blocks with the same choices at {self.fr.vary} {level:g}")
            out.append(_Level(level, ls, shared, ranges, {_combo_key(c): c.floor for c in tight}))
        return out

    def _build(self) -> BuiltModel:
        hull: dict[Combo, list[int]] = {}
        spans: dict[Combo, list[tuple[int, int]]] = {}
        for lv in self.levels:
            for key, (lo, hi) in lv.ranges.items():
                h = hull.setdefault(key, [lo, hi])
                h[0], h[1] = min(h[0], lo), max(h[1], hi)
                spans.setdefault(key, []).append((lo, hi))
        combos = tuple(replace(key, index=i, d_min=lo, d_max=hi) for i, (key, (lo, hi)) in enumerate(hull.items()))
        self.keys = tuple(hull)
        spare_ranges = {i: spans[k] for i, k in enumerate(self.keys)} if self.study.spares is not None else None
        first = next(lv for lv in self.levels if lv.ranges)
        built = build_model(first.study, self.catalog, combos=combos, objective=self.kind,
                            mutable_ranges=True, spare_ranges=spare_ranges)
        if self.kind in ("max_gpus", "max_flops"):
            define_lexicographic_stage(built.model, built.handles, self.kind)
        return built

    def _level_built(self, built: BuiltModel, lv: _Level) -> BuiltModel:
        """The model with each block's floor as this level planned it (for the design's layout)."""
        return replace(built, combos=tuple(replace(c, floor=lv.floors.get(key, c.floor))
                                           for c, key in zip(built.combos, self.keys)))

    def _set_level(self, built: BuiltModel, lv: _Level) -> None:
        m = built.model
        for c, key in zip(built.combos, self.keys):
            rng = lv.ranges.get(key)
            # A block off at this level: y <= 0 (so D <= d_hi y = 0). Its range Params keep their last
            # values: a zero coefficient would leave HiGHS's matrix, and setting it again warns.
            m.y[c.index].setub(0 if rng is None else 1)
            m.D[c.index].setub(0 if rng is None else rng[1])
            if rng is not None:
                m.d_lo[c.index].set_value(rng[0])
                m.d_hi[c.index].set_value(rng[1])
        for row in budget_rows(lv.study.budgets):
            set_rhs(built.budgets, row.name, row.rhs)
        if lv.study.spares is not None:
            m.job_gpus_lo_rhs.set_value(lv.study.gpus.lo)
            m.job_gpus_hi_rhs.set_value(lv.study.gpus.hi)
        if self.kind in ("max_gpus", "max_flops"):
            set_lexicographic_stage(m, self.kind, None)

    def solve(self) -> NetworkResult:
        parts, dropped = [], []
        feasible = [lv for lv in self.levels if lv.ranges]
        built = self._build() if feasible else None
        opt = new_solver()
        # Between levels only variable bounds, mutable Params and the active objective change (never a
        # row, a variable or an expression), so the persistent interface need not scan the model for
        # those: its scan of ~40k rows per level cost more than HiGHS itself at 1e6 GPUs.
        auto = opt.config.auto_updates
        auto.check_for_new_or_removed_constraints = False
        auto.check_for_new_or_removed_vars = False
        auto.check_for_new_or_removed_params = False
        auto.update_constraints = False
        auto.update_named_expressions = False
        for lv in self.levels:
            try:
                if not lv.ranges:
                    raise _explain(lv.study, self.catalog, (), lv.combos, self.kind)
                self._set_level(built, lv)
                outcome = _run_stages(built, lv.study, self.catalog, (), lv.combos, self.kind, opt,
                                      lambda best: set_lexicographic_stage(built.model, self.kind, best))
            except InfeasibleDesign as err:
                dropped.append(_dropped_line(self.fr, lv.level, err))
                continue
            design = extract_design(self._level_built(built, lv), self.catalog, level=lv.level)
            slacks = budget_slacks(built.budgets, built.handles.metrics(), built.handles.n_gpus)
            parts.append((design, slacks, outcome))
        return _frontier_result(self.fr, parts, dropped)


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
