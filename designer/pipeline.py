"""`run_study(spec)`: the one orchestrator.

    MILP candidate designs (per family and platform, across the frontier's levels, plus named designs)
      -> per design, the strategy search (exhaustive, Optuna, or auto by the size of its space)
      -> the Pareto front over (capex, time-to-train[, power, energy])
      -> export (designer.export)

Records stay frozen between stages; pandas appears only in the StudyResult and the export.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import re
import multiprocessing as mp
import os
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from designer import units
from designer.errors import DesignerError, InfeasibleDesign, SpecError
from designer.export import (PREVIOUS_RESULTS, STRATEGY_COLUMNS, J_PER_MWH, metrics_columns, read_pareto,
                             strategy_columns, write_outputs)
from designer.pareto import Point, epsilon_front, pareto_front
from designer.perf.collectives import net_efficiency
from designer.perf.records import recompute_module_label
from designer.search.exhaustive import Candidate, Problem, ScoredTable, load_trial_constraint, run_exhaustive
from designer.search.space import CODED, RECOMPUTES, SCHEDULES
from designer.spec.llm import LLMSpec, Recompute
from designer.spec.study import StudySpec, load_study


log = logging.getLogger(__name__)

@dataclass(frozen=True)
class ProgressEvent:
    """What the CLI's progress bar shows. stage: "milp", "search" or "done"."""

    stage: str
    design_index: int = 0
    n_designs: int = 0
    design_id: str = ""
    method: str = ""
    done: int = 0
    total: int = 0
    front_size: int = 0
    message: str = ""


ProgressFn = Callable[[ProgressEvent], None]


@dataclass(frozen=True)
class StudyResult:
    spec: StudySpec
    out_dir: Path
    pareto: pd.DataFrame = field(repr=False)
    trials: pd.DataFrame = field(repr=False)
    designs: pd.DataFrame = field(repr=False)
    meta: dict[str, Any] = field(repr=False)
    fronts_by: pd.DataFrame | None = field(default=None, repr=False)
    strategies: pd.DataFrame | None = field(default=None, repr=False)  # the inner strategies (output.strategies)
    goal: Any = None  # designer.search.goal.GoalAnswer, None for the `front` goal
    files: tuple[str, ...] = ()  # the files written, relative to out_dir, meta.json last


class GoalNotMet(InfeasibleDesign):
    """No design meets the study's goal; the outputs (the front that was found) are written."""

    exit_code = 3

    def __init__(self, message: str, result: "StudyResult") -> None:
        super().__init__(message)
        self.result = result


# ---- candidates --------------------------------------------------------------------------------

@dataclass(frozen=True)
class MilpInfo:
    status: str
    gap: float | None
    solve_time_s: float


def _design_id(design: Any, prefix: str) -> str:
    body = design.model_dump(mode="json", exclude={"level"})
    digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:8]
    return f"{prefix}-{design.n_gpus}g-{digest}"


def economics_for(spec: StudySpec) -> Callable[[Any, Any], Any] | None:
    """(design, catalog) -> DesignEconomics for the study's `costs` and `reliability` sections; None
    when it has neither (designs then carry IT capex and IT power only, and no failures)."""
    if spec.costs is None and spec.reliability is None:
        return None
    from designer.perf.compute import total_params
    from designer.search.economics import design_economics

    n_params = total_params(_resolve_model(spec))
    spares = spec.network.spares if spec.network is not None else None

    def econ(design: Any, catalog: Any) -> Any:
        platform = catalog.platform(design.platform)
        return design_economics(design, platform, costs=spec.costs, reliability=spec.reliability, n_params=n_params,
                                tokens=spec.training.total_tokens,
                                gpus_per_host=platform.gpus_per_host or min(design.hb_domain_size, 8),
                                default_rates=spares.rates if spares is not None else None,
                                default_unit_gpus=spares.unit_gpus if spares is not None else 8)
    return econ


def design_field_prefix(nd: Any) -> str:
    """Where a named design's catalog choices are stated: its own `choices`, or the study's network's."""
    return f"designs.{nd.name}." if nd.choices is not None else "network."


def with_cost_terms(spec: StudySpec, net: Any, prefix: str = "network.") -> Any:
    """The network study with the study's cost lines per platform (NetworkStudy.cost_terms), so its
    budgets may bound capex_total_usd and facility_power_w; unchanged without a `costs` section.
    `prefix`: where its fields are in the study file, for error messages."""
    if spec.costs is None or net is None:
        return net
    from designer.analysis.tco import linear_terms
    from designer.search.economics import liquid_cooled, provisioned_extra_w_per_gpu
    from designer.spec.network_study import study_catalog

    catalog = study_catalog(net, prefix)
    terms = []
    for pid in net.choices.platforms:
        plat = catalog.platform(pid)
        t = linear_terms(spec.costs, liquid_cooled(plat, net.choices.layout), provisioned_extra_w_per_gpu(plat))
        terms.append({"platform": pid, "capex_total_per_capex_usd": t.capex_total_usd.per_capex_it_usd,
                      "capex_total_per_it_w": t.capex_total_usd.per_it_power_w,
                      "capex_total_per_gpu": t.capex_total_usd.per_gpu, "pue": t.facility_power_w.per_it_power_w})
    return net.with_updates(cost_terms=terms)


def generate_candidates(spec: StudySpec, progress: ProgressFn | None = None, *, problem: Problem | None = None,
                        notes: list[str] | None = None, dropped: list[str] | None = None,
                        infeasible: list[str] | None = None
                        ) -> tuple[list[Candidate], dict[str, MilpInfo]]:
    """Solve the network MILP once per (family, platform) split of `network` (each across the frontier
    levels) and once per named design. Identical designs found twice are kept once."""
    from designer.network.api import solve_network
    from designer.network.design import design_to_system
    from designer.spec.network_study import study_catalog

    econ = economics_for(spec)
    jobs: list[tuple[str, str, Any]] = []  # (source, prefix, network study)
    if spec.network is not None and spec.network.choices.oversubscribed_levels:
        raise SpecError(f"field 'network.choices.oversubscribed_levels' = {list(spec.network.choices.oversubscribed_levels)}: "
                        "several tier boundaries are design knobs of the co-design mode only; allowed here: "
                        "one boundary as oversubscribed_level")
    if spec.network is not None:
        net = with_cost_terms(spec, spec.network)
        fams = list(net.choices.families) if "family" in spec.candidates.split_by else [None]
        plats = list(net.choices.platforms) if "platform" in spec.candidates.split_by else [None]
        for fam in fams:
            for plat in plats:
                choices = net.choices.model_dump()
                if fam is not None:
                    choices["families"] = [fam]
                if plat is not None:
                    choices["platforms"] = [plat]
                try:
                    sub = net.with_updates(choices=choices)
                except Exception as err:  # the split is invalid on its own (e.g. a radix its family cannot use)
                    raise SpecError(f"network split {fam}/{plat}: {str(err).splitlines()[0]}") from None
                jobs.append(("milp", "-".join(x for x in (fam, plat) if x) or "net", sub, "network."))
    for nd in spec.designs:
        where = design_field_prefix(nd)
        jobs.append(("named", nd.name, with_cost_terms(spec, nd.resolve(spec.network, spec.base_dir), where), where))
    cands: list[Candidate] = []
    info: dict[str, MilpInfo] = {}
    seen: set[str] = set()
    failures: list[str] = []
    for i, (source, prefix, sub, where) in enumerate(jobs):
        if progress is not None:
            progress(ProgressEvent("milp", i, len(jobs), prefix, message=f"sizing {prefix}"))
        try:
            catalog = study_catalog(sub, where)
            result = solve_network(sub, catalog=catalog)
            log.info("sized %s: %d design(s), MILP %s in %.2f s", prefix, len(result.designs), result.status,
                     result.solve_time_s)
        except InfeasibleDesign as err:
            if source == "named":
                raise InfeasibleDesign(f"design {prefix}: {err}") from None
            # the split yields no design: said, and kept in meta.json (milp.infeasible_splits)
            log.warning("network split %s has no design: %s", prefix, err)
            failures.append(f"{prefix}: {err}")
            if infeasible is not None:
                infeasible.append(f"{prefix}: {err}")
            continue
        designs = list(result.designs)
        if problem is not None and sub.objective.base_kind in ("max_gpus", "max_flops"):
            guard: list[str] = []
            designs = [g for g in (_guard_count(sub, d, problem, catalog, guard, prefix) for d in designs) if g is not None]
            failures += guard
            if notes is not None:
                notes += guard
        if dropped is not None:
            dropped += [f"{prefix}: {x}" for x in result.dropped_levels]
        for d in designs:
            did = prefix if source == "named" else _design_id(d, prefix)
            key = _design_id(d, "")
            if key in seen and source != "named":
                continue
            seen.add(key)
            cands.append(Candidate(did, d, design_to_system(d, catalog), float(d.capex_usd), float(d.power_w), source,
                                   economics=econ(d, catalog) if econ is not None else None))
            info[did] = MilpInfo(result.status, result.gap, result.solve_time_s / max(1, len(result.designs)))
    if not cands:
        raise InfeasibleDesign("no candidate design: " + " | ".join(failures) if failures else "no candidate design")
    return cands, info


def _guard_count(sub: Any, d: Any, problem: Problem, catalog: Any, notes: list[str], prefix: str) -> Any:
    """A design whose GPU count (chosen by a max_gpus / max_flops MILP) no strategy can split is
    replaced by the cheapest design at the largest smaller count that one can, under the same budgets;
    the swap is noted. None when no count down to the range's minimum works."""
    from designer.network.api import solve_network
    from designer.search.outer import count_reason

    hb = d.hb_domain_size
    why = count_reason(problem, d.job_gpus, hb)
    if why is None:
        return d
    step = math.lcm(hb, sub.gpus.multiple_of or 1)
    budgets = sub.budgets.model_dump()
    fr = sub.objective.frontier
    if fr is not None and d.level is not None:
        budgets[fr.vary] = d.level
    for n in range((d.job_gpus // step) * step - (step if d.job_gpus % step == 0 else 0), sub.gpus.lo - 1, -step):
        if n < 1 or count_reason(problem, n, hb) is not None:
            continue
        try:
            fixed = sub.with_updates(gpus={**sub.gpus.model_dump(), "count": n, "min": None, "max": None, "multiple_of": None},
                                     objective={"kind": "min_cost"}, budgets=budgets)
            res = solve_network(fixed, catalog=catalog)
        except (InfeasibleDesign, SpecError):
            continue
        notes.append(f"{prefix}: the MILP's {d.job_gpus:,} GPUs ({why}); took {n:,}, the largest count below that trains")
        return res.designs[0].model_copy(update={"level": d.level})
    notes.append(f"{prefix}: the MILP's {d.job_gpus:,} GPUs ({why}); no smaller count in the range trains")
    return None


# ---- search ------------------------------------------------------------------------------------

def _resolve_model(spec: StudySpec) -> LLMSpec:
    if isinstance(spec.model, LLMSpec):
        return spec.model
    from designer.spec.models import load_model
    from designer.usercode import resolve_path

    if spec.model.endswith((".yaml", ".yml")):  # a model file, relative to the study file's folder
        return load_model(resolve_path(spec.model, spec.base_dir))
    return load_model(spec.model)


def make_problem(spec: StudySpec) -> Problem:
    from designer.perf.model import perf_calibration

    return Problem(_resolve_model(spec), spec.training, spec.strategy_space, tuple(spec.objectives),
                   tuple(load_trial_constraint(c, spec.base_dir) for c in spec.constraints), calib=perf_calibration(
                       spec.nccl_version, spec.nccl_env.calibration_update() if spec.nccl_env else None))


def choose_method(spec: StudySpec, space_size: int) -> str:
    """The search a design gets: the study's method, or under auto exhaustive up to
    auto_max_exhaustive strategies. A design with no valid strategy is always enumerated (it has
    nothing to search, and the exhaustive path records why) so that it never stops the study."""
    if space_size == 0:
        return "exhaustive"
    m = spec.search.method
    if m == "auto":
        return "exhaustive" if space_size <= spec.search.auto_max_exhaustive else "optuna"
    return m


def search_identity(spec: StudySpec, design_id: str) -> str:
    """What must match for a rerun to continue a design's Optuna study: the spec without the trial
    budget and the output settings (a rerun with more trials continues the same study)."""
    data = spec.identity_data()
    data["search"].pop("n_trials", None)
    # the co-design budget is the outer study's (outer_identity leaves it out): a rerun with more
    # outer trials meets the inner studies it had and continues them
    if isinstance(data.get("design_search"), dict):
        data["design_search"].pop("n_trials", None)
    data.pop("output", None)
    data["design_id"] = design_id
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def _gpus_per_host(spec: StudySpec) -> dict[str, int]:
    """Per platform, its GPUs per host (torchrun's --nproc-per-node), from the study's catalog."""
    from designer.spec.network_study import study_catalog

    catalog = study_catalog(spec.network, "network.") if spec.network is not None else None
    if catalog is None:
        from designer.spec.catalog import load_catalog

        catalog = load_catalog()
    return {p.id: p.host_gpus for p in catalog.platforms}


def _plot_limits(spec: StudySpec) -> list[Any]:
    """The budget and deadline lines of the plots: the capex budget and every goal limit on an axis."""
    from designer.report_page import limit_for

    limits = []
    if spec.network is not None and spec.network.budgets.capex_usd is not None:
        limits.append(limit_for("capex_usd", "<=", spec.network.budgets.capex_usd, "capex budget"))
    for lim in spec.goal.subject_to:
        limits.append(limit_for(lim.metric, lim.sense, lim.rhs, f"goal: {lim.metric} {lim.sense} {lim.rhs:g}"))
    return [x for x in limits if x is not None]


def _time_limit(spec: StudySpec) -> float | None:
    return spec.network.solver.time_limit_s if spec.network is not None else None


def _storage_url(spec: StudySpec, out_dir: Path, storage: str | None) -> str:
    from designer.search.runner import JOURNAL_NAME
    from designer.usercode import resolve_path

    if storage:
        return storage
    if spec.output.storage:  # a journal path in the study is relative to the study file's folder
        st = spec.output.storage
        return st if "://" in st else str(resolve_path(st, spec.base_dir))
    return str(out_dir / JOURNAL_NAME)


def _manifest_name(spec: StudySpec) -> str:
    return f"{spec.name}/__manifest__"


def _spawn_workers(spec: StudySpec, url: str | None, n: int) -> list[Any]:
    """`n` worker processes on this machine (spawned, so no state is shared but the storage)."""
    procs: list[Any] = []
    ctx = mp.get_context("spawn")
    for _ in range(max(0, n)):
        p = ctx.Process(target=_worker_main, args=(spec.model_dump_json(), url, os.getpid()), daemon=True)
        p.start()
        procs.append(p)
    return procs


def _exit_with_parent(parent_pid: int) -> None:
    """A child worker ends when the run that spawned it dies (even by SIGKILL): a daemon thread polls
    the parent's pid; once the child is re-parented, it exits (its trials are taken over or failed by
    the survivors)."""
    import threading

    def watch() -> None:
        while True:
            if os.getppid() != parent_pid:
                os._exit(0)
            time.sleep(0.5)

    threading.Thread(target=watch, daemon=True).start()


def _worker_main(spec_json: str, storage: str, parent_pid: int | None = None) -> None:
    if parent_pid is not None:
        _exit_with_parent(parent_pid)
    try:
        run_worker(StudySpec.model_validate_json(spec_json), storage)
    except KeyboardInterrupt:  # Ctrl-C reaches the whole process group: the main run reports it, once
        sys.exit(130)


def run_worker(spec: StudySpec, storage: str, *, wait_s: float = 600.0, n_trials: int | None = None) -> int:
    """An extra worker on a shared storage: waits for the main run's manifest (the designs the main run
    searches with Optuna), then runs trials on each of them until every study has its n_trials (the
    main run's, or `n_trials` where given). It draws with the main run's seed, which the studies'
    identity holds. Returns the number of design studies it worked on."""
    import optuna

    from designer.search.runner import (RunnerSettings, get_study_attr, open_storage, outer_study_name,
                                        run_optuna)

    t0 = time.monotonic()
    if "://" not in str(storage):
        # a journal path: wait for the main run to create it, never create an empty one here
        announced = False
        while not Path(storage).is_file():
            if not announced:
                print(f"worker: waiting up to {wait_s:g} s for the journal '{storage}' of study '{spec.name}' "
                      "(start `designer run` with the same --storage)", flush=True)
                announced = True
            if time.monotonic() - t0 > wait_s:
                raise SpecError(f"--storage '{storage}': no journal appeared in {wait_s:g} s; start `designer run "
                                "STUDY.yaml --storage` with this path first, or check the path")
            time.sleep(0.5)
    st = open_storage(storage, create=False) if "://" not in str(storage) else open_storage(storage)
    manifest = None
    announced = False
    while manifest is None:
        manifest = get_study_attr(st, _manifest_name(spec), "manifest")
        if manifest is None and spec.codesign and outer_study_name(spec.name) in optuna.get_all_study_names(storage=st):
            # a co-design run whose outer level is an Optuna study: work on its trials
            return _codesign_worker(spec, storage, wait_s=wait_s, n_trials=n_trials)
        if manifest is None:
            if not announced:
                print(f"worker: waiting up to {wait_s:g} s for study '{spec.name}' in '{_redact(str(storage))}'", flush=True)
                announced = True
            if time.monotonic() - t0 > wait_s:
                raise SpecError(f"storage '{_redact(str(storage))}' holds no designs of study '{spec.name}' after "
                                f"{wait_s:g} s; start `designer run` against the same storage first")
            time.sleep(0.5)
    problem = make_problem(spec)
    from designer.network.design import NetworkDesign
    from designer.search.economics import DesignEconomics
    from designer.spec.system import ClusterSystem

    # the main run's seed and budget (its --seed / --n-trials), which the studies' identity holds
    budget = int(n_trials) if n_trials is not None else int(manifest["n_trials"])
    spec = _with_search_overrides(spec, budget, int(manifest["seed"]))
    settings = RunnerSettings(budget, manifest["seed"], spec.search.sampler, spec.search.population_size)
    n = 0
    for entry in manifest["designs"]:
        econ = entry.get("economics")
        cand = Candidate(entry["design_id"], NetworkDesign.model_validate(entry["design"]), ClusterSystem.model_validate(entry["system"]),
                         float(entry["capex_usd"]), float(entry["power_w"]), entry["source"],
                         economics=None if econ is None else DesignEconomics(**econ))
        run_optuna(problem, cand, storage=st, study=spec.name, settings=settings,
                   identity=search_identity(spec, cand.design_id))
        n += 1
    return n


def _inner_searcher(spec: StudySpec, problem: Problem, storage: Callable[[], Any]) -> Callable[[Candidate], ScoredTable]:
    """How a co-design run, and each of its extra workers alike, finds one design's best strategy:
    the study's method for the design's space (choose_method), Optuna on `storage()`."""

    def inner_search(c: Candidate) -> ScoredTable:
        size = problem.design_space(c).size
        if choose_method(spec, size) == "exhaustive":
            return run_exhaustive(problem, c)
        from designer.search.runner import RunnerSettings, run_optuna

        settings = RunnerSettings(spec.search.n_trials, spec.search.seed, spec.search.sampler, spec.search.population_size)
        return run_optuna(problem, c, storage=storage(), study=spec.name, settings=settings,
                          identity=search_identity(spec, c.design_id))

    return inner_search


def _codesign_worker(spec: StudySpec, storage: str, *, wait_s: float, n_trials: int | None = None) -> int:
    """An extra worker of a co-design study's outer Optuna study: waits for the main run to create
    it, then runs trials until it has its n_trials, drawing with the main run's seed and budgets
    (which the studies' identity holds; `n_trials`, where given, the inner budget). Returns the
    number of trials this worker saw."""
    import optuna

    from designer.search.outer import Evaluator, InnerCache, Pricer, build_outer_space
    from designer.search.runner import OuterSettings, get_study_attr, open_storage, outer_study_name, run_outer_optuna
    from designer.spec.network_study import study_catalog

    st = open_storage(storage)
    t0 = time.monotonic()
    name = outer_study_name(spec.name)
    while name not in optuna.get_all_study_names(storage=st):
        if time.monotonic() - t0 > wait_s:
            raise SpecError(f"storage '{storage}' holds no design study of '{spec.name}' after {wait_s:g} s; "
                            "start `designer run` against the same storage first")
        time.sleep(0.5)
    run = get_study_attr(st, _manifest_name(spec), "codesign")
    if run is not None:
        spec = _with_search_overrides(spec, int(n_trials) if n_trials is not None else int(run["n_trials"]),
                                      int(run["seed"]))
        spec = spec.with_updates(design_search={**spec.design_search.model_dump(), "n_trials": int(run["design_trials"])})
    elif n_trials is not None:
        spec = _with_search_overrides(spec, int(n_trials), None)
    problem = make_problem(spec)
    catalog = study_catalog(spec.network, "network.")
    space = build_outer_space(spec, catalog, problem)
    evaluate = Evaluator(problem, Pricer(with_cost_terms(spec, spec.network), catalog, economics_for(spec)),
                         InnerCache(_inner_searcher(spec, problem, lambda: st)))
    ds = spec.design_search
    done = run_outer_optuna(space, outer_scorer(spec, problem, evaluate), storage=st, study=spec.name,
                            objectives=tuple(problem.objectives),
                            settings=OuterSettings(ds.n_trials, spec.search.seed, ds.sampler, spec.search.population_size),
                            identity=outer_identity(spec))
    return len(done)


def _search_all(spec: StudySpec, problem: Problem, cands: list[Candidate], out_dir: Path, *, workers: int,
                storage: str | None, progress: ProgressFn | None) -> tuple[list[ScoredTable], str | None]:
    from designer.search.runner import RunnerSettings, open_storage, run_optuna, set_study_attr

    methods = {}
    for c in cands:
        size = problem.design_space(c).size
        methods[c.design_id] = choose_method(spec, size)
        log.debug("design %s: %d strategies, searched by %s", c.design_id, size, methods[c.design_id])
    log.info("searching %d design(s): %d exhaustively, %d with Optuna", len(cands),
             sum(m != "optuna" for m in methods.values()), sum(m == "optuna" for m in methods.values()))
    optuna_cands = [c for c in cands if methods[c.design_id] == "optuna"]
    url = _storage_url(spec, out_dir, storage) if optuna_cands else None
    st = open_storage(url) if url else None
    procs: list[Any] = []
    if st is not None:
        # Identity first: a run refused for another spec or seed must change nothing in the storage
        from designer.search.runner import check_identity, study_name_for

        for c in optuna_cands:
            check_identity(st, study_name_for(spec.name, c.design_id), search_identity(spec, c.design_id))
        manifest = {"n_trials": spec.search.n_trials, "seed": spec.search.seed,
                    "designs": [{"design_id": c.design_id, "design": c.design.model_dump(mode="json"),
                                 "system": c.system.model_dump(mode="json"), "capex_usd": c.capex_usd,
                                 "power_w": c.power_w, "source": c.source,
                                 "economics": None if c.economics is None else dataclasses.asdict(c.economics)}
                                for c in optuna_cands]}
        set_study_attr(st, _manifest_name(spec), "manifest", manifest)
        procs = _spawn_workers(spec, url, workers - 1)
    settings = RunnerSettings(spec.search.n_trials, spec.search.seed, spec.search.sampler, spec.search.population_size)
    tables: list[ScoredTable] = []
    front: list[Point] = []
    try:
        for i, c in enumerate(cands):
            method = methods[c.design_id]

            def tick(done: int, total: int, _i=i, _c=c, _m=method) -> None:
                if progress is not None:
                    progress(ProgressEvent("search", _i, len(cands), _c.design_id, _m, done, total, len(front)))

            if method == "exhaustive":
                size = problem.design_space(c).size
                seen = [0]

                def chunk(n: int, _size=size) -> None:
                    seen[0] += n
                    tick(seen[0], _size)

                table = run_exhaustive(problem, c, progress=chunk)
            else:
                table = run_optuna(problem, c, storage=st, study=spec.name, settings=settings,
                                   identity=search_identity(spec, c.design_id), on_trial=tick)
            tables.append(table)
            b = table.best
            if b is not None:
                front = pareto_front(front + [Point(c.objective_values(problem.objectives, table.time_to_train_s[b]), c.design_id)])
            tick(len(table), len(table))
        for p in procs:
            p.join()
        if procs:
            # Workers may have finished trials after this process collected a design: collect again.
            from designer.search.runner import recollect

            for j, c in enumerate(cands):
                if methods[c.design_id] == "optuna":
                    tables[j] = recollect(st, spec.name, problem, c, tables[j].space_size, tables[j].wall_time_s)
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
    return tables, url


# ---- co-design: the outer space of cluster designs -------------------------------------------

@dataclass(frozen=True)
class CodesignRun:
    cands: list[Candidate]
    tables: list[ScoredTable]
    milp: dict[str, MilpInfo]
    outcomes: list[Any]  # designer.search.outer.Outcome, one per evaluated outer point
    meta: dict[str, Any]
    storage_url: str | None


def outer_identity(spec: StudySpec) -> str:
    """What must match for a rerun to continue the outer study: the spec without the trial budgets and
    the output settings."""
    data = spec.identity_data()
    data["search"].pop("n_trials", None)
    data["design_search"].pop("n_trials", None)
    data.pop("output", None)
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def design_point(c: Candidate | None, t: ScoredTable | None) -> Any:
    """A design at its best strategy as the goal's DesignPoint (None when it has no feasible strategy)."""
    from designer.search.goal import DesignPoint

    if c is None or t is None or t.best is None:
        return None
    s = t.strategies.strategy(t.best)
    ttt = float(t.time_to_train_s[t.best])
    extra = tuple(c.economics.metrics(ttt).items()) if c.economics is not None else ()
    return DesignPoint(c.design_id, c.design.label, c.design.family.value, c.design.platform, c.design.n_gpus,
                       c.capex_usd, c.power_w, ttt,
                       f"tp{s.tp} pp{s.pp} dp{s.dp} ep{s.ep} cp{s.cp} mbs{s.microbatch_size} {s.schedule.value}", extra,
                       job_gpus=c.n_gpus)


def outer_scorer(spec: StudySpec, problem: Problem, evaluate: Any) -> Callable[[Any], tuple]:
    """Objective values, constraints and the stored record of one outer point (for the Optuna loop).
    Constraints (<= 0 feasible): the MILP found a design under the budgets and hooks; the design has a
    feasible strategy; each goal limit, relative to its value."""
    def score(knobs: Any) -> tuple:
        if knobs is None:
            return ([LARGE_OBJ] * len(problem.objectives), {"no_such_design": 1.0, "network_infeasible": 0.0,
                                                             "no_feasible_strategy": 0.0},
                    {"knobs": None, "reason": "the picks name no design of the space"})
        o = evaluate(knobs)
        cons = {"no_such_design": 0.0, "network_infeasible": 0.0 if o.candidate is not None else 1.0,
                "no_feasible_strategy": 0.0}
        rec = {"knobs": list(knobs.key()), "label": knobs.label, "reason": o.reason}
        if o.candidate is None:
            vals = [LARGE_OBJ] * len(problem.objectives)
        else:
            ttt = o.best_time_to_train_s
            cons["no_feasible_strategy"] = 0.0 if math.isfinite(ttt) else 1.0
            vals = list(o.candidate.objective_values(problem.objectives, ttt if math.isfinite(ttt) else LARGE_OBJ))
            rec.update(design_id=o.candidate.design_id, capex_usd=o.candidate.capex_usd,
                       time_to_train_s=ttt if math.isfinite(ttt) else None)
            p = design_point(o.candidate, o.table)
            for lim in spec.goal.subject_to:
                cons[f"goal_{lim.metric}"] = p.excess(lim) if p is not None else 1.0
        for lim in spec.goal.subject_to:
            cons.setdefault(f"goal_{lim.metric}", 1.0)
        return vals, cons, rec

    return score


LARGE_OBJ = 1e30


def _run_codesign(spec: StudySpec, problem: Problem, out_dir: Path, *, workers: int, storage: str | None,
                  progress: ProgressFn | None) -> CodesignRun:
    from designer.search.outer import Evaluator, InnerCache, Pricer, build_outer_space
    from designer.spec.network_study import study_catalog

    t0 = time.perf_counter()
    catalog = study_catalog(spec.network, "network.")
    space = build_outer_space(spec, catalog, problem)
    from designer.search.space import explain_space

    removed = {}
    for plat in spec.network.choices.platforms:
        hb = catalog.platform(plat).hb_domain_size
        removed[plat] = [{"dim": r.dim, "value": r.value, "rule": r.rule}
                         for r in explain_space(problem.llm, problem.training, problem.space, hb_domain_size=hb)]
    meta: dict[str, Any] = {"space_size": space.size, "n_fabrics": len(space.fabrics),
                            "strategy_values_removed": removed,
                            "gpu_counts": {p: list(c) for p, c in space.counts.items()},
                            "dropped_gpu_counts": [{"platform": d.platform, "n_gpus": d.n_gpus, "reason": d.reason}
                                                   for d in space.dropped],
                            "space_build_s": time.perf_counter() - t0}
    if space.size == 0:
        why = "; ".join(f"{d.platform}: {d.reason}" for d in space.dropped[:3])
        raise InfeasibleDesign(f"no GPU count of the study has a valid strategy ({why})")
    ds = spec.design_search
    method = ds.method if ds.method != "auto" else ("exhaustive" if space.size <= ds.auto_max_exhaustive else "optuna")
    st = None
    url = None

    def open_inner_storage() -> Any:
        nonlocal st, url
        if st is None:
            from designer.search.runner import open_storage

            url = _storage_url(spec, out_dir, storage)
            st = open_storage(url)
        return st

    inner_search = _inner_searcher(spec, problem, open_inner_storage)

    econ = economics_for(spec)
    pricer = Pricer(with_cost_terms(spec, spec.network), catalog, econ)
    inner = InnerCache(inner_search)
    evaluate = Evaluator(problem, pricer, inner)

    def tick(done: int, total: int, o: Any = None) -> None:
        if progress is not None:
            progress(ProgressEvent("search", done, total, o.candidate.design_id if o is not None and o.candidate else "",
                                   method, done, total, 0, message=f"design {done}/{total}"))

    t1 = time.perf_counter()
    if method == "exhaustive":
        # Price every design first; then search the strategies of one design per distinct performance
        # system through the same loop as the cheapest mode (inner Optuna studies for large spaces, with
        # --workers sharing them through the manifest).
        from designer.search.outer import Outcome

        priced = []
        for i, k in enumerate(space.points()):
            priced.append(pricer.price(k))
            if progress is not None:
                progress(ProgressEvent("milp", i, space.size, message=f"pricing design {i + 1}/{space.size}"))
        log.info("priced %d cluster designs: %d feasible", len(priced), sum(p.candidate is not None for p in priced))
        first: dict[str, Candidate] = {}
        for p in priced:
            if p.candidate is not None:
                first.setdefault(InnerCache.system_key(p.candidate), p.candidate)
        unique = list(first.values())
        tables_u, url = _search_all(spec, problem, unique, out_dir, workers=workers, storage=storage, progress=progress)
        by_key = {InnerCache.system_key(c): t for c, t in zip(unique, tables_u)}
        inner.runs, inner.hits = len(unique), sum(p.candidate is not None for p in priced) - len(unique)
        outcomes = []
        for p in priced:
            t = None
            if p.candidate is not None:
                t = by_key[InnerCache.system_key(p.candidate)]
                if t.design_id != p.candidate.design_id:
                    t = dataclasses.replace(t, design_id=p.candidate.design_id)
            outcomes.append(Outcome(p.knobs, p, t))
    else:
        from designer.search.runner import OuterSettings, open_storage, run_outer_optuna

        if st is None:
            url = _storage_url(spec, out_dir, storage)
            st = open_storage(url)
        settings = OuterSettings(ds.n_trials, spec.search.seed, ds.sampler, spec.search.population_size)
        # what `designer worker` must draw with: this run's seed and budgets (its --seed / --n-trials)
        from designer.search.runner import set_study_attr

        set_study_attr(st, _manifest_name(spec), "codesign", {"seed": spec.search.seed, "n_trials": spec.search.n_trials,
                                                               "design_trials": ds.n_trials})
        procs = _spawn_workers(spec, url, workers - 1)
        try:
            done = run_outer_optuna(space, outer_scorer(spec, problem, evaluate), storage=st, study=spec.name,
                                    objectives=tuple(problem.objectives), settings=settings,
                                    identity=outer_identity(spec), on_trial=lambda d, n: tick(d, n))
            for p in procs:
                p.join()
            if procs:  # the workers' trials count too: read the study again
                done = run_outer_optuna(space, outer_scorer(spec, problem, evaluate), storage=st, study=spec.name,
                                        objectives=tuple(problem.objectives), settings=settings,
                                        identity=outer_identity(spec))
        finally:
            for p in procs:
                if p.is_alive():
                    p.terminate()
        from designer.search.outer import Knobs

        outcomes = []
        seen: set[tuple] = set()
        for number, key in done:
            if key is None or key in seen:
                continue
            seen.add(key)
            k = Knobs.from_key(key)
            o = evaluate(k, number)
            outcomes.append(o)
        meta.update(n_trials=len(done), sampler=ds.sampler)
    cands: list[Candidate] = []
    tables: list[ScoredTable] = []
    milp: dict[str, MilpInfo] = {}
    for o in outcomes:
        c = o.candidate
        if c is None or c.design_id in milp:
            continue
        cands.append(c)
        tables.append(o.table)
        milp[c.design_id] = MilpInfo(o.priced.milp_status, o.priced.milp_gap, o.priced.milp_solve_time_s)
    for nd in spec.designs:  # named designs are evaluated beside the outer space
        from designer.network.api import solve_network
        from designer.network.design import design_to_system

        where = design_field_prefix(nd)
        sub = with_cost_terms(spec, nd.resolve(spec.network, spec.base_dir), where)
        cat = study_catalog(sub, where)
        try:
            res = solve_network(sub, catalog=cat)
        except InfeasibleDesign as err:
            raise InfeasibleDesign(f"design {nd.name}: {err}") from None
        d = res.designs[0]
        c = Candidate(nd.name, d, design_to_system(d, cat), float(d.capex_usd), float(d.power_w), "named",
                      economics=econ(d, cat) if econ is not None else None)
        cands.append(c)
        tables.append(inner.table(c))
        milp[c.design_id] = MilpInfo(res.status, res.gap, res.solve_time_s)
    meta.update(method_requested=ds.method, method=method, n_evaluated=len(outcomes),
                milp_solves=pricer.solves, milp_cache_hits=pricer.hits, inner_searches=inner.runs,
                inner_cache_hits=inner.hits, search_wall_time_s=time.perf_counter() - t1,
                n_network_infeasible=sum(o.candidate is None for o in outcomes),
                n_without_strategy=sum(o.candidate is not None and not math.isfinite(o.best_time_to_train_s)
                                       for o in outcomes))
    if not cands:
        # the designs nearest to feasible first: the smallest shortfall of a budget
        def shortfall(reason: str) -> float:
            m = re.search(r"short by ([0-9.eE+-]+)", reason)
            try:
                return float(m.group(1)) if m else math.inf
            except ValueError:
                return math.inf

        reasons = sorted({o.reason for o in outcomes}, key=lambda r: (shortfall(r), r))
        raise InfeasibleDesign("no cluster design is feasible: " + " | ".join(reasons[:3]))
    return CodesignRun(cands, tables, milp, outcomes, meta, url)


# ---- results -----------------------------------------------------------------------------------

def _strategies_frame(problem: Problem, cands: list[Candidate], tables: list[ScoredTable],
                      only: set[str] | None = None) -> pd.DataFrame:
    """Every evaluated strategy of the designs (of those in `only`, when given)."""
    frames = []
    for c, t in zip(cands, tables):
        if not len(t) or (only is not None and c.design_id not in only):
            continue
        cols = dict(t.strategies.columns)
        df = pd.DataFrame({k: cols[k] for k in STRATEGY_COLUMNS})
        df["schedule"] = [SCHEDULES[int(x)].value for x in cols["schedule"]]
        df["recompute"] = [RECOMPUTES[int(x)].value for x in cols["recompute"]]
        selective = cols["recompute"] == RECOMPUTES.index(Recompute.selective)
        df["recompute_modules"] = pd.Series([recompute_module_label(int(m)) for m in cols["recompute_modules"]],
                                            dtype="string").mask(~selective)
        for name, options in CODED.items():
            df[name] = [options[int(x)] for x in cols[name]]
        df["global_batch_sequences"] = np.where(cols["global_batch_sequences"] > 0, cols["global_batch_sequences"],
                                                problem.training.global_batch_sequences)
        for name in ("pp_first_stage_layers", "pp_last_stage_layers"):
            df[name] = pd.Series(cols[name], dtype="Int64").mask(cols[name] < 0)
        df.insert(0, "trial_number", t.trial_number)
        df.insert(0, "search_method", t.method)
        df.insert(0, "design_id", c.design_id)
        df["feasible"] = t.feasible
        df["reason"] = t.reason.astype(str)
        df["iteration_time_s"] = t.iteration_time_s
        df["time_to_train_s"] = t.time_to_train_s
        df["mfu"] = t.mfu
        df["memory_per_gpu_gb"] = t.memory_per_gpu_bytes / 1e9
        df["capex_usd"] = c.capex_usd
        df["power_w"] = c.power_w
        df["energy_mwh"] = c.power_w * t.time_to_train_s / J_PER_MWH
        e = c.economics
        if e is not None:
            wall = t.time_to_train_s / e.goodput_fraction if e.goodput_fraction > 0 else np.full(len(df), np.inf)
            if e.reliability_declared:
                df["goodput_fraction"] = e.goodput_fraction
                df["time_to_train_with_failures_s"] = wall
            if e.costs_declared:
                df["capex_total_usd"] = e.capex_total_usd
                df["facility_power_w"] = e.facility_power_w
                df["tco_usd"] = e.tco_usd_per_s * wall
        for name, v in t.constraints.items():
            df[f"constraint_{name}"] = v
        frames.append(df)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _design_trials_frame(problem: Problem, cands: list[Candidate], tables: list[ScoredTable],
                         codesign: CodesignRun | None) -> pd.DataFrame:
    """One row per evaluated design with its best strategy (or why it has none); in co-design also the
    outer points the MILP found infeasible."""
    rows = []
    number = {}
    if codesign is not None:
        for o in codesign.outcomes:
            if o.candidate is not None:
                number.setdefault(o.candidate.design_id, o.trial_number)
    for c, t in zip(cands, tables):
        b = t.best
        row: dict[str, Any] = {"design_id": c.design_id, "design_source": c.source,
                               "trial_number": number.get(c.design_id, -1), **c.design.row(),
                               "search_method": t.method, "space_size": t.space_size, "n_evaluations": t.n_evaluations}
        if b is not None:
            s = t.strategies.strategy(b)
            row.update(strategy_columns(s, problem.training))
            row.update(feasible=True, reason="", iteration_time_s=float(t.iteration_time_s[b]),
                       time_to_train_s=float(t.time_to_train_s[b]), time_to_train_days=float(t.time_to_train_s[b]) / 86400,
                       mfu=float(t.mfu[b]), memory_per_gpu_gb=float(t.memory_per_gpu_bytes[b]) / 1e9,
                       energy_mwh=c.power_w * float(t.time_to_train_s[b]) / J_PER_MWH)
            if c.economics is not None:
                row.update(c.economics.metrics(float(t.time_to_train_s[b])))
        else:
            row.update(feasible=False, reason=t.why_none_feasible() if len(t) else "no valid strategy")
        rows.append(row)
    if codesign is not None:
        for o in codesign.outcomes:
            if o.candidate is None:
                f = o.knobs.fabric
                rows.append({"design_id": "", "design_source": "codesign", "trial_number": o.trial_number,
                             "label": o.knobs.label, "family": f.family, "platform": f.platform, "n_gpus": o.knobs.n_gpus,
                             "nic": f.nic, "nics_per_gpu": f.nics_per_gpu, "switch": f.switch,
                             "radix": f.radix or None, "oversubscription": f.oversubscription or None,
                             "feasible": False, "reason": o.reason})
    return pd.DataFrame(rows)


def _goal_answer(spec: StudySpec, cands: list[Candidate], tables: list[ScoredTable], codesign: CodesignRun | None) -> Any:
    from designer.search.goal import answer_goal

    if spec.goal.is_front:
        return None
    points = [p for p in (design_point(c, t) for c, t in zip(cands, tables)) if p is not None]
    return answer_goal(spec.goal, points)


# the columns designs.csv adds to each design's row: its MILP and its search
DESIGN_RESULT_COLUMNS = ("milp_status", "milp_gap", "milp_solve_time_s", "search_method", "space_size", "n_evaluations",
                         "best_time_to_train_s", "search_wall_time_s")


def _check_front_by(key: str, columns: Sequence[str]) -> None:
    """output.front_by names a column of designs.csv."""
    if key in columns:
        return
    import difflib

    near = difflib.get_close_matches(key, columns, n=1)
    hint = f" (did you mean '{near[0]}'?)" if near else ""
    raise SpecError(f"field 'output.front_by' = '{key}': not a design column{hint}; allowed: {', '.join(columns)}")


def _check_front_by_early(spec: StudySpec, key: str) -> None:
    """output.front_by can name a column of designs.csv, checked before any design exists."""
    from designer.network.design import ROW_FIXED_COLUMNS, NetworkDesign
    from designer.search.economics import DesignEconomics

    econ = DesignEconomics.constant_names(costs_declared=spec.costs is not None,
                                          reliability_declared=spec.reliability is not None)
    if NetworkDesign.is_row_column(key) or key in econ:
        return
    _check_front_by(key, ["design_id", "design_source", *sorted(ROW_FIXED_COLUMNS), *econ, *DESIGN_RESULT_COLUMNS])


def _design_row(c: Candidate) -> dict[str, Any]:
    r = c.design.row()
    return {"design_id": c.design_id, "design_source": c.source, **r}


def _front_frame(problem: Problem, cands: list[Candidate], tables: list[ScoredTable],
                 subset: list[int] | None = None, gpus_per_host: Mapping[str, int] | None = None,
                 tolerances: Sequence[float] = ()) -> pd.DataFrame:
    """The non-dominated (design, best strategy) points, re-scored by the scalar model for the full
    time and memory breakdown, each with its Megatron-LM launch and (dense models) torchtitan config."""
    import shlex

    from designer.launch import megatron_launch, torchtitan_launch
    from designer.perf.model import evaluate_system

    idx = range(len(cands)) if subset is None else subset
    pts = []
    for i in idx:
        b = tables[i].best
        if b is not None:
            pts.append(Point(cands[i].objective_values(problem.objectives, tables[i].time_to_train_s[b]), i))
    rows = []
    front = epsilon_front(pts, tolerances) if any(tolerances) else pareto_front(pts)
    for rank, p in enumerate(front):
        c, t = cands[p.item], tables[p.item]
        s = t.strategies.strategy(t.best)
        m = evaluate_system(problem.llm, problem.training, s, c.system, calib=problem.calib)
        if not hasattr(m, "row") or not m.row().get("feasible", False):
            raise DesignerError(f"internal: front point {c.design_id} {s} is infeasible when re-scored: {m}")
        per_host = (gpus_per_host or {}).get(c.design.platform) or min(c.design.hb_domain_size, 8)
        launch = megatron_launch(problem.llm, problem.training, s, c.n_gpus, per_host)
        row = {"front_rank": rank, **_design_row(c), **strategy_columns(s, problem.training), **metrics_columns(m.row(), c.power_w),
               **(c.economics.metrics(m.time_to_train_s) if c.economics is not None else {}),
               "search_method": t.method, "megatron_args": " ".join(shlex.quote(a) for a in launch.script_args),
               "megatron_command": launch.command(),
               "torchtitan_toml": torchtitan_launch(problem.llm, problem.training, s, c.n_gpus, per_host).toml}
        rows.append(row)
    return pd.DataFrame(rows)


def _robustness(spec: StudySpec, cands: list[Candidate], tables: list[ScoredTable]) -> tuple[pd.DataFrame, dict]:
    """Price robustness of the designs with a feasible strategy (designer.analysis.robustness): each
    design's capex as quantities over catalog prices, the catalog's price ranges drawn jointly, and per
    design the chance to stay on the (capex, time) front and to be the goal's answer. Candidates: every
    design the study priced and timed, less those another beats at every price of the ranges' box
    (candidate_mask; leaving them out changes no probability)."""
    from designer.analysis.robustness import GOAL_METRICS, goal_candidate_mask, price_exposure, robustness
    from designer.robustness_plot import robustness_frame
    from designer.spec.network_study import study_catalog

    catalogs: dict[str, Any] = {}
    net_catalog = study_catalog(spec.network, "network.") if spec.network is not None else None
    for nd in spec.designs:
        catalogs[nd.name] = study_catalog(nd.resolve(spec.network, spec.base_dir), design_field_prefix(nd))
    time_key = "time_to_train_with_failures_s" if "time_to_train_with_failures_s" in spec.objectives else "time_to_train_s"
    picked = [(c, t) for c, t in zip(cands, tables) if t.best is not None]
    exposures, times, powers, nds = [], [], [], []
    for c, t in picked:
        cat = catalogs.get(c.design_id, net_catalog)
        exposures.append(price_exposure(c.design, cat, c.design_id))
        times.append(c.metric_values((time_key,), float(t.time_to_train_s[t.best]))[0])
        powers.append(c.power_w)
        nds.append(c.design)
    ranges = (net_catalog or next(iter(catalogs.values()))).price_ranges()
    # the goal metrics the draws reprice (capex) or leave fixed; cost-line and failure metrics are not among them
    goal_ok = spec.goal.is_front or all(m in GOAL_METRICS
                                        for m in [spec.goal.minimize, *(lim.metric for lim in spec.goal.subject_to)])
    # the candidate rule is about capex and time: a goal on power or energy keeps every design
    keep = goal_candidate_mask(spec.goal, exposures, times, ranges)
    idx = [i for i in range(len(exposures)) if keep[i]]
    res = robustness([exposures[i] for i in idx], [times[i] for i in idx], ranges, spec.robustness.samples,
                     spec.robustness.seed, goal=spec.goal if goal_ok and time_key == "time_to_train_s" else None,
                     power_w=[powers[i] for i in idx])
    frame = robustness_frame(res, [nds[i] for i in idx])
    # the draws reprice the IT capex only: the front they test is (capex_usd, time) whatever the
    # study's cost objective (its cost lines are not redrawn)
    summary = {"samples": res.samples, "seed": res.seed, "goal": res.goal, "time": time_key,
               "front": f"capex_usd vs {time_key}",
               "n_candidates": len(idx), "n_left_out_dominated_everywhere": len(exposures) - len(idx),
               "p_same_front": res.p_same_front, "p_goal_unmet": res.p_goal_unmet,
               "price_ids": list(res.price_ids), "fixed_price_ids": list(res.fixed_price_ids)}
    notes = []
    cost_objective = next((o for o in spec.objectives if o != time_key), "capex_usd")
    if cost_objective != "capex_usd":
        notes.append(f"p_on_front is for the (capex_usd, {time_key}) front, not the study's ({cost_objective}, "
                     f"{time_key}) one: the price draws reprice the IT capex, not the cost lines")
    if not goal_ok or time_key != "time_to_train_s":
        notes.append("p_optimum is for the front goal: the study's goal names metrics the price draws do not "
                     "reprice (cost lines, failures)")
    if notes:
        summary["note"] = "; ".join(notes)
    return frame, summary


def _versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {"python": platform.python_version()}
    for pkg in ("designer", "optuna", "pyomo", "highspy", "numpy", "pandas", "pydantic", "matplotlib"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = "not installed"
    try:
        import highspy

        h = highspy.Highs()
        out["highs"] = f"{h.versionMajor()}.{h.versionMinor()}.{h.versionPatch()}"
    except Exception:  # the version is informative only
        pass
    return out


def _redact(url: str | None) -> str | None:
    from designer.search.runner import redact_url  # Optuna is imported only where a storage is used

    return redact_url(url)


def _no_front_error(problem: Problem, cands: list[Candidate], tables: list[ScoredTable]) -> DesignerError:
    """Why nothing is feasible: a trial constraint, or memory even at the leanest strategy."""
    reasons: dict[str, int] = {}
    for t in tables:
        for r in t.reason.astype(str):
            if r:
                key = r.split(" = ")[0] if r.startswith("constraint ") else r
                reasons[key] = reasons.get(key, 0) + 1
    user = {k: v for k, v in reasons.items() if k.startswith("constraint ")}
    if user:
        k = max(user, key=user.get)
        return InfeasibleDesign(f"no design has a strategy that satisfies {k.removeprefix('constraint ')} "
                                f"({user[k]} strategies rejected by it across {len(cands)} designs)")
    # Memory: the leanest strategy of every design's whole space, by the vectorized model.
    from designer.search.exhaustive import evaluate_vector

    best = None
    for c in cands:
        ds = problem.design_space(c)
        for chunk in ds.chunks():
            vm = evaluate_vector(problem, c, chunk)
            j = int(np.argmin(vm.memory_per_gpu_bytes))
            need = float(vm.memory_per_gpu_bytes[j])
            if best is None or need - c.system.gpu.hbm_bytes < best[0] - best[2]:
                best = (need, c, c.system.gpu.hbm_bytes, chunk.strategy(j))
    if best is None:
        from designer.search.outer import count_reason

        whys = sorted({count_reason(problem, c.n_gpus, c.hb_domain_size) or "the strategy_space lists leave no strategy"
                       for c in cands})
        return SpecError("no design has a valid strategy: " + " | ".join(whys[:3]))
    need, c, cap, s = best
    if need <= cap and reasons:
        # the leanest strategy fits: memory is not what rules the strategies out
        k = max(reasons, key=reasons.get)
        return InfeasibleDesign(f"no design has a feasible strategy: the commonest reason is '{k}' "
                                f"({reasons[k]} strategies across {len(cands)} designs)")
    return InfeasibleDesign(
        f"model {problem.llm.name} fits no design: its leanest strategy (tp {s.tp}, pp {s.pp}, ZeRO-{s.zero_stage}, "
        f"recompute {s.recompute.value}, microbatch {s.microbatch_size}) on {c.design_id} needs {need / units.GIB_TO_BYTES:.1f} "
        f"GiB per GPU, HBM holds {cap / units.GIB_TO_BYTES:.1f} GiB; allow zero_stages [3], recompute [full] or more GPUs")


# the top-level files of a result set, which a run writes beside its meta.json
FOREIGN_GUARDED = ("pareto.csv", "pareto.parquet", "trials.parquet", "designs.csv", "report.html", "pareto.png",
                   "megatron_args.txt", "goal.json")


def _claim_output(out: Path, spec: StudySpec, overwrite: bool, named: str = "--out") -> Any:
    """Take the output folder for this run: an exclusive lock (released by the kernel if the process
    dies) so that two runs never write one folder at once, and a refusal to replace another study's
    results unless `overwrite`. Returns the open lock file, to keep until the run ends."""
    import fcntl

    if out.exists() and not out.is_dir():
        raise SpecError(f"{named} '{out}': is a file, not a folder: it must be a folder for the study's results")
    # a folder a designer run has written (its lock file stays) may hold a set stopped while writing,
    # which a rerun restores; result files in any other folder are not designer's to replace
    designer_folder = (out / ".designer-run.lock").exists() or (out / "meta.json").is_file()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise SpecError(f"{named} '{out}': cannot create the folder ({err.strerror})") from None
    if not out.is_dir():
        raise SpecError(f"{named} '{out}': not a folder")
    try:
        fh = open(out / ".designer-run.lock", "a+")
    except OSError as err:
        raise SpecError(f"{named} '{out}': cannot write there ({err.strerror})") from None
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.seek(0)
        holder = fh.read().strip() or "another process"
        fh.close()
        raise SpecError(f"{named} '{out}' is in use by another designer run ({holder}); wait for it, or give "
                        "another --out (extra workers of one study share a --storage, not an output folder)") from None
    fh.seek(0)
    # the study of a run that stopped here before writing its results (killed: the kernel released its
    # lock, its record stays) with state a rerun continues from (its trial storage, a set it was
    # writing): not another study's to take without --overwrite. A run refused before any of that
    # (bad flags, an infeasible design) left nothing to keep.
    from designer.search.runner import JOURNAL_NAME

    stopped = re.match(r"study (.+), pid \d+$", fh.read().strip())
    prev = out / "meta.json"
    state = (out / JOURNAL_NAME).exists() or any(out.glob(".staging-*"))
    if stopped and stopped.group(1) != spec.name and state and not prev.is_file() and not overwrite:
        fh.close()
        raise SpecError(f"{named} '{out}' holds the unfinished run of study '{stopped.group(1)}', not "
                        f"'{spec.name}' (it stopped before writing its results; rerun it to continue); give another "
                        "--out, or --overwrite to take the folder")
    fh.seek(0)
    fh.truncate()
    fh.write(f"study {spec.name}, pid {os.getpid()}\n")
    fh.flush()
    if not designer_folder and not overwrite:
        foreign = sorted(n for n in FOREIGN_GUARDED if (out / n).exists())
        if foreign:
            fh.close()
            (out / ".designer-run.lock").unlink(missing_ok=True)
            raise SpecError(f"{named} '{out}' holds {', '.join(foreign)} but is not a designer run's folder (no "
                            "meta.json): files no study run wrote (`designer network --out`'s, or your own); give "
                            "another --out, or --overwrite to replace them")
    if prev.is_file() and not overwrite:
        try:
            record = json.loads(prev.read_text())
            other, other_hash = record.get("study"), record.get("spec_hash")
        except (ValueError, UnicodeDecodeError, AttributeError):
            other, other_hash = "unknown", None
        if other != spec.name:
            fh.close()
            raise SpecError(f"{named} '{out}' holds the results of study '{other}', not '{spec.name}'; give another "
                            "--out, or --overwrite to replace them")
        if other_hash and other_hash != spec.spec_hash():
            # the same study, edited: its new results take the folder when they are written, and the
            # earlier ones move aside then (export.write_outputs warns when they do). Said at info
            # level here: a run refused later (a storage holding another spec's trials) moves nothing
            log.info("%s '%s' holds study '%s' from an earlier spec (spec hash %s); this run's results take "
                     "the folder and the earlier ones move to '%s/'", named, out, spec.name, str(other_hash)[:12],
                     out / PREVIOUS_RESULTS)
    return fh


def _with_search_overrides(spec: StudySpec, n_trials: int | None, seed: int | None) -> StudySpec:
    """The spec with the command line's trial budget and seed in place of its own."""
    if n_trials is None and seed is None:
        return spec
    search = spec.search.model_dump()
    if n_trials is not None:
        search["n_trials"] = n_trials
    if seed is not None:
        search["seed"] = seed
    return spec.with_updates(search=search)


def run_study(spec: StudySpec, *, out_dir: str | Path | None = None, n_trials: int | None = None, workers: int = 1,
              storage: str | None = None, seed: int | None = None, progress: ProgressFn | None = None,
              overwrite: bool = False) -> StudyResult:
    """Run a study end to end and write its output folder. Arguments override the spec's settings.
    The folder is locked for the run; another study's results in it are refused unless `overwrite`."""
    out = Path(out_dir) if out_dir is not None else spec.out_dir
    # the run is the spec with the command line's seed and budget in place: it claims the folder and
    # is recorded so, and a rerun with the same flags is the same spec, not "an earlier one" to move aside
    spec = _with_search_overrides(spec, n_trials, seed)
    lock = _claim_output(out, spec, overwrite, "--out" if out_dir is not None else "field 'output.dir' =")
    try:
        return _run_study(spec, out, workers=workers, storage=storage, progress=progress)
    finally:
        lock.close()


MAX_WORKERS_PER_CPU = 4  # --workers: processes on this machine per CPU


def _run_study(spec: StudySpec, out: Path, *, workers: int, storage: str | None,
               progress: ProgressFn | None) -> StudyResult:
    t0 = time.perf_counter()
    if workers < 1:
        raise SpecError(f"--workers {workers}: must be >= 1")
    cpus = os.cpu_count() or 1
    if workers > MAX_WORKERS_PER_CPU * cpus:
        # each is a process of its own: past a few per CPU they only contend (and a typo forks thousands)
        raise SpecError(f"--workers {workers}: at most {MAX_WORKERS_PER_CPU * cpus} on this machine "
                        f"({MAX_WORKERS_PER_CPU} per CPU, {cpus} CPUs); workers on other machines join with "
                        "`designer worker`")
    from designer.search.runner import check_storage_url

    url = _storage_url(spec, out, storage)
    check_storage_url(url, "--storage" if storage else "field 'output.storage' =")
    if "://" in url:
        # a database the study or the command line names is reached now, so that one that cannot be
        # is reported before the search, and also where the search turns out exhaustive and never opens it
        from designer.search.runner import open_storage

        open_storage(url)
    problem = make_problem(spec)
    codesign: CodesignRun | None = None
    count_notes: list[str] = []
    dropped_levels: list[str] = []  # frontier levels no design meets, with the binding budget
    infeasible_splits: list[str] = []  # network splits (family, platform) with no design, and why
    if spec.codesign:
        if spec.output.front_by:
            # before the search, so that a misspelt grouping costs nothing; the designs do not exist
            # yet, so the per-tier and per-link-layer columns are checked by their form (again after)
            _check_front_by_early(spec, spec.output.front_by)
        codesign = _run_codesign(spec, problem, out, workers=workers, storage=storage, progress=progress)
        cands, tables, milp, url = codesign.cands, codesign.tables, codesign.milp, codesign.storage_url
    else:
        cands, milp = generate_candidates(spec, progress, problem=problem, notes=count_notes, dropped=dropped_levels,
                                          infeasible=infeasible_splits)
        if spec.output.front_by and cands:
            # before the search, so that a misspelt grouping costs nothing: every column designs.csv will have
            cols = dict.fromkeys(k for c in cands for k in (*_design_row(c), *(
                c.economics.constants() if c.economics is not None else {})))
            _check_front_by(spec.output.front_by, [*cols, *DESIGN_RESULT_COLUMNS])
        tables, url = _search_all(spec, problem, cands, out, workers=workers, storage=storage, progress=progress)
    hosts = _gpus_per_host(spec)
    tol = [spec.output.front_tolerance.get(o, 0.0) for o in problem.objectives]
    pareto = _front_frame(problem, cands, tables, gpus_per_host=hosts, tolerances=tol)
    if not len(pareto):
        raise _no_front_error(problem, cands, tables)
    fronts_by = None
    key = spec.output.front_by
    designs = pd.DataFrame([{**_design_row(c), **(c.economics.constants() if c.economics is not None else {}),
                             "milp_status": milp[c.design_id].status, "milp_gap": milp[c.design_id].gap,
                             "milp_solve_time_s": milp[c.design_id].solve_time_s, "search_method": t.method,
                             "space_size": t.space_size, "n_evaluations": t.n_evaluations,
                             "best_time_to_train_s": (t.time_to_train_s[t.best] if t.best is not None else np.nan),
                             "search_wall_time_s": t.wall_time_s}
                            for c, t in zip(cands, tables)])
    if key:
        _check_front_by(key, list(designs.columns))
        parts = []
        for g in sorted(designs[key].astype(str).unique()):
            sub = [i for i in range(len(cands)) if str(designs[key].iloc[i]) == g]
            f = _front_frame(problem, cands, tables, sub, gpus_per_host=hosts, tolerances=tol)
            if len(f):
                f.insert(0, "front_group", g)
                parts.append(f)
        fronts_by = pd.concat(parts, ignore_index=True) if parts else None
    strategies = _strategies_frame(problem, cands, tables, set(pareto["design_id"]) if spec.output.strategies == "front" else None)
    trials = _design_trials_frame(problem, cands, tables, codesign)
    answer = _goal_answer(spec, cands, tables, codesign)
    gaps = [m.gap for m in milp.values() if m.gap is not None]
    methods = designs["search_method"].value_counts().to_dict()
    meta = {
        "study": spec.name, "spec_hash": spec.spec_hash(), "versions": _versions(), "seed": spec.search.seed,
        "search": {"method_requested": spec.search.method, "methods_run": methods, "n_trials_per_design": spec.search.n_trials,
                   "sampler": spec.search.sampler, "auto_max_exhaustive": spec.search.auto_max_exhaustive,
                   "evaluations": int(designs["n_evaluations"].sum()), "workers": workers, "storage": _redact(url)},
        "milp": {"status": "optimal" if all(m.status == "optimal" for m in milp.values()) else "incumbent",
                 "max_gap": max(gaps) if gaps else None, "solve_time_s": sum(m.solve_time_s for m in milp.values()),
                 "n_incumbent": sum(m.status != "optimal" for m in milp.values()),
                 "time_limit_s": _time_limit(spec), "n_designs": len(cands), "gpu_count_guard": count_notes, "dropped_levels": dropped_levels,
                 "infeasible_splits": infeasible_splits},
        "model": problem.llm.name, "objectives": list(spec.objectives), "n_front_points": len(pareto),
        # the run the time axis prices, every field with the value it took (defaults included), and
        # the busiest EP rank's load a learned router was priced with
        "training": {**problem.training.model_dump(mode="json"), "moe_busiest_rank_load": (
            problem.calib.compute.busiest_rank_load(problem.training) if problem.llm.moe is not None else None)},
        # the NCCL release and settings the collective model priced the front with
        "collectives": {"nccl_version": problem.calib.collectives.nccl_version,
                        "nccl_env": spec.nccl_env.model_dump(exclude_none=True) if spec.nccl_env else None,
                        "nic_efficiency": net_efficiency(problem.calib.collectives)},
        "mode": "codesign" if codesign is not None else "cheapest",
        "design_search": codesign.meta if codesign is not None else None,
        "goal": answer.as_dict() if answer is not None else {"goal": "front"},
        "wall_time_s": time.perf_counter() - t0,
    }
    robust = None
    if spec.robustness is not None:
        t_rb = time.perf_counter()
        robust, meta["robustness"] = _robustness(spec, cands, tables)
        meta["robustness"]["wall_time_s"] = time.perf_counter() - t_rb
        log.info("price robustness: %d draws of %d designs in %.2f s", spec.robustness.samples, len(robust),
                 meta["robustness"]["wall_time_s"])
    written = write_outputs(out, pareto=pareto, trials=trials, designs=designs, meta=meta, fronts_by=fronts_by,
                            front_by=key, plots=spec.output.plots, title=f"{spec.name}: {problem.llm.name}",
                            strategies=strategies, formats=tuple(dict.fromkeys(spec.output.formats)),
                            limits=_plot_limits(spec), robustness=robust)
    log.info("wrote %d files to %s", len(written), out)
    if progress is not None:
        progress(ProgressEvent("done", len(cands), len(cands), done=len(cands), total=len(cands), front_size=len(pareto)))
    result = StudyResult(spec, out, pareto, trials, designs, meta, fronts_by, strategies, answer,
                         tuple(p.relative_to(out).as_posix() for p in written))
    if answer is not None and not answer.met:
        raise GoalNotMet(answer.message, result)
    return result


def explain_study(spec: StudySpec, *, gpus: int | None = None) -> dict[str, Any]:
    """What `designer space` prints: per platform, the GPU counts of the outer space and those left
    out with their arithmetic, the strategy values the rules remove, and (with `gpus`) that count."""
    from designer.search.outer import build_outer_space, count_reason
    from designer.search.space import DesignSpace, explain_space
    from designer.spec.network_study import MAX_GPUS, study_catalog

    if gpus is not None and not 1 <= gpus <= MAX_GPUS:
        raise SpecError(f"--gpus {gpus}: allowed: 1 to {MAX_GPUS:,}")

    if spec.network is None:
        raise SpecError("field 'network': `designer space` needs the study's network section")
    problem = make_problem(spec)
    catalog = study_catalog(spec.network, "network.")
    out: dict[str, Any] = {"study": spec.name, "mode": "codesign" if spec.codesign else "cheapest", "platforms": {}}
    if spec.codesign:
        space = build_outer_space(spec, catalog, problem)
        out["n_designs"] = space.size
        out["fabrics"] = [f.label for f in space.fabrics]
    for plat in spec.network.choices.platforms:
        hb = catalog.platform(plat).hb_domain_size
        entry: dict[str, Any] = {"hb_domain_size": hb, "strategy_values_removed": [
            {"dim": r.dim, "value": r.value, "rule": r.rule}
            for r in explain_space(problem.llm, problem.training, problem.space, hb_domain_size=hb, n_gpus=gpus)]}
        if spec.codesign:
            entry["gpu_counts"] = list(space.counts.get(plat, ()))
            entry["gpu_counts_removed"] = [{"n_gpus": d.n_gpus, "reason": d.reason} for d in space.dropped if d.platform == plat]
        if gpus is not None:
            why = count_reason(problem, gpus, hb)
            entry["count"] = {"n_gpus": gpus, "reason": why,
                              "strategies": 0 if why else DesignSpace.build(problem.llm, problem.training, problem.space,
                                                                            n_gpus=gpus, hb_domain_size=hb).size}
        out["platforms"][plat] = entry
    return out


def run_study_file(path: str | Path, **kwargs: Any) -> StudyResult:
    return run_study(load_study(path), **kwargs)


def summary_table(result: StudyResult) -> list[dict[str, Any]]:
    """The closing table of `designer run`: one row per front point, human units."""
    rows = []
    for _, r in result.pareto.iterrows():
        rows.append({
            "design": r["design_id"], "family": r["family"], "gpus": int(r["n_gpus"]),
            "NICs/GPU": f"{float(r['nics_per_gpu']):g} x {r['nic']}",
            "capex ($M)": round(float(r["capex_usd"]) / 1e6, 2), "power (MW)": round(float(r["power_w"]) / 1e6, 3),
            "time to train (days)": round(float(r["time_to_train_days"]), 2), "MFU": round(float(r["mfu"]), 3),
            "strategy": (f"tp{r['tp']} pp{r['pp']} dp{r['dp']}" + (f" ep{r['ep']}" if r["ep"] > 1 else "")
                         + (f" cp{r['cp']}" if r["cp"] > 1 else "") + f" mbs{r['microbatch_size']} {r['schedule']}"
                         + f" zero{r['zero_stage']} rc:{r['recompute']}"
                         + (f"[{r['recompute_modules']}]" if isinstance(r.get("recompute_modules"), str) else "")),
            "search": r["search_method"],
        })
    return rows


__all__ = ["GoalNotMet", "explain_study", "ProgressEvent", "StudyResult", "choose_method", "generate_candidates", "make_problem", "read_pareto",
           "run_study", "run_study_file", "run_worker", "summary_table"]
