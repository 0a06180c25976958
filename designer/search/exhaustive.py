"""Score every valid strategy of a design with the vectorized performance model.

Also the records both search methods share: the `Candidate` design being searched, the `Problem`
(model, training, space, objectives, trial constraints), and the columnar `ScoredTable` of results.

Within one design, capex and power are constants and energy is power x time, so every objective
prefers the fastest feasible strategy: a design contributes at most one point to the front (its
`best` row). That is why user trial constraints are checked lazily, in order of time, until the
first strategy that satisfies them all.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from designer.errors import HookError, SpecError
from designer.perf.model import evaluate_many, evaluate_system
from designer.perf.records import Metrics, StrategyArrays, VectorMetrics
from designer.search.space import CODED, COLUMNS, DesignSpace, StrategyTable, strategy_key
from designer.spec.llm import LLMSpec, Strategy, TrainingSpec
from designer.spec.study import StrategySpace
from designer.spec.system import ClusterSystem

GB = 1e9
MEMORY_CONSTRAINT = "memory_excess_gb"  # HBM needed minus HBM available, per GPU; <= 0 fits
MODEL_CONSTRAINT = "model_infeasible"  # 1 when the performance model rejects the strategy for another reason


@dataclass(frozen=True)
class Candidate:
    """One design to search: the network design record, the system the performance model sees, and
    the design's constant objective terms."""

    design_id: str
    design: Any  # designer.network.design.NetworkDesign (frozen)
    system: ClusterSystem
    capex_usd: float
    power_w: float
    source: str = "milp"  # "milp" (frontier level) or "named"
    # designer.search.economics.DesignEconomics when the study has `costs` or `reliability`, else None
    economics: Any = None

    @property
    def n_gpus(self) -> int:
        return self.system.n_gpus

    @property
    def hb_domain_size(self) -> int:
        return self.system.hb.size

    def objective_values(self, names: Sequence[str], time_to_train_s: float) -> tuple[float, ...]:
        return tuple(float(v) for v in self.metric_values(names, time_to_train_s))

    def metric_values(self, names: Sequence[str], time_to_train_s: float) -> list[float]:
        """Objective and goal metrics of this design at a strategy of (failure-free) time `time_to_train_s`."""
        t = float(time_to_train_s)
        table = {"capex_usd": self.capex_usd, "time_to_train_s": t, "power_w": self.power_w,
                 "energy_j": self.power_w * t}
        if self.economics is not None and any(n not in table for n in names):
            table.update(self.economics.metrics(t))
        missing = [n for n in names if n not in table]
        if missing:
            raise KeyError(f"metric(s) {missing} need the study's costs or reliability section")
        return [table[n] for n in names]


TrialConstraintFn = Callable[[Any, Strategy, Metrics], float]


@dataclass(frozen=True)
class TrialConstraint:
    """A user constraint `f(design, strategy, metrics) -> float`; <= 0 is feasible (Optuna's convention)."""

    name: str
    fn: TrialConstraintFn = field(compare=False)

    def __call__(self, design: Any, strategy: Strategy, metrics: Metrics) -> float:
        try:
            value = float(self.fn(design, strategy, metrics))
        except (Exception, SystemExit) as err:  # a user hook (its sys.exit() too): report which one, in one line
            raise HookError(f"trial constraint {self.name} raised {type(err).__name__}: {err}") from None
        if math.isnan(value):
            raise HookError(f"trial constraint {self.name} returned NaN; return a float, <= 0 when feasible")
        return value


def load_trial_constraint(ref: str | TrialConstraintFn, base_dir: str | None = None) -> TrialConstraint:
    """'package.module:function' or 'file.py:function' (resolved against the study's folder, as network
    hooks are: designer.usercode), or a callable, as a TrialConstraint named after its function."""
    if callable(ref):
        return TrialConstraint(getattr(ref, "__name__", "constraint"), ref)
    from designer.usercode import load_callable

    fn = load_callable(ref, base_dir=base_dir, what="trial constraint")
    return TrialConstraint(ref.rsplit(":", 1)[1], fn)


@dataclass(frozen=True)
class Problem:
    llm: LLMSpec
    training: TrainingSpec
    space: StrategySpace
    objectives: tuple[str, ...] = ("capex_usd", "time_to_train_s")
    constraints: tuple[TrialConstraint, ...] = ()
    calib: Any = None  # the perf model's calibration; None: the shipped one

    @property
    def constraint_names(self) -> tuple[str, ...]:
        return (MEMORY_CONSTRAINT, MODEL_CONSTRAINT, *(c.name for c in self.constraints))

    def design_space(self, cand: Candidate) -> DesignSpace:
        """The design's strategy space: memoized by DesignSpace.build on the model, training, strategy
        space, GPU count and HB size, so every caller for one design shares one build."""
        return DesignSpace.build(self.llm, self.training, self.space, n_gpus=cand.n_gpus,
                                 hb_domain_size=cand.hb_domain_size)


@dataclass(frozen=True)
class ScoredTable:
    """Evaluated strategies of one design, as columns. `feasible` is the model's verdict (structure and
    memory) and every user constraint; `reason` says why not. Constraint columns hold NaN where a
    constraint was not evaluated (after the fastest feasible strategy, see the module docstring)."""

    design_id: str
    method: str  # "exhaustive" or "optuna"
    space_size: int
    n_evaluations: int  # distinct strategies the performance model scored
    strategies: StrategyTable
    feasible: np.ndarray
    reason: np.ndarray  # object array of str
    iteration_time_s: np.ndarray
    time_to_train_s: np.ndarray
    mfu: np.ndarray
    memory_per_gpu_bytes: np.ndarray
    constraints: dict[str, np.ndarray]
    trial_number: np.ndarray  # -1 for exhaustive rows
    wall_time_s: float = 0.0

    def __len__(self) -> int:
        return int(len(self.feasible))

    @property
    def best(self) -> int | None:
        """Index of the fastest feasible strategy (the first of equals), or None."""
        idx = np.flatnonzero(self.feasible)
        if not len(idx):
            return None
        return int(idx[np.argmin(self.time_to_train_s[idx])])

    def why_none_feasible(self) -> str:
        """The commonest reason, for the error a design with no feasible strategy reports."""
        if not len(self.reason):
            return "the design has no valid strategy in the strategy space"
        vals, counts = np.unique(self.reason.astype(str), return_counts=True)
        return str(vals[int(np.argmax(counts))])


def to_strategy_arrays(table: StrategyTable) -> StrategyArrays:
    c = table.columns
    return StrategyArrays(
        tp=c["tp"], pp=c["pp"], dp=c["dp"], ep=c["ep"], cp=c["cp"], sp=c["sequence_parallel"],
        mbs=c["microbatch_size"], schedule=c["schedule"], v=c["virtual_stages"], zero=c["zero_stage"],
        qwz=c["zeropp_quantized_weights"], qgz=c["zeropp_quantized_gradients"],
        hpz=c["zeropp_hierarchical_partition"], recompute=c["recompute"], overlap_dp=c["overlap_dp_comm"],
        overlap_tp=c["overlap_tp_comm"], offload_opt=c["offload_optimizer"], offload_w=c["offload_weights"],
        offload_act=c["offload_activation_layers"], cp_comm=c["cp_comm"], overlap_ep=c["overlap_ep_comm"],
        dedup=c["moe_dispatcher"] == CODED["moe_dispatcher"].index("deepep"),
        ag_dispatch=c["moe_dispatcher"] == CODED["moe_dispatcher"].index("allgather"), graphs=c["cuda_graphs"],
        batch=c["global_batch_sequences"], pp_first=c["pp_first_stage_layers"], pp_last=c["pp_last_stage_layers"],
        rc_modules=c["recompute_modules"])


@dataclass(frozen=True)
class RowResult:
    """The model's verdict on one strategy, with the constraint values a sampler needs."""

    feasible: bool
    reason: str
    iteration_time_s: float
    time_to_train_s: float
    mfu: float
    memory_per_gpu_bytes: float
    constraints: dict[str, float]


def evaluate_vector(problem: Problem, cand: Candidate, table: StrategyTable) -> VectorMetrics:
    return evaluate_many(problem.llm, problem.training, to_strategy_arrays(table), cand.system, calib=problem.calib)


def _per_code(values: dict[int, Any], codes: np.ndarray, dtype: Any) -> np.ndarray:
    """`values[code]` for every entry of `codes` (one table lookup, not a Python call per strategy)."""
    table = np.empty(max(values) + 1, dtype=dtype)
    for code, v in values.items():
        table[code] = v
    return table[np.asarray(codes, np.int64)]


def _reasons(vm: VectorMetrics) -> np.ndarray:
    from designer.perf.iteration import REASONS

    return _per_code({c: "" if c == 0 else vm.reason_text(c) for c in REASONS}, vm.reason_code, object)


def _memory_excess_gb(vm: VectorMetrics, cand: Candidate) -> np.ndarray:
    """HBM needed minus the GPU's HBM, in GB, signed so that it is > 0 exactly when the model says the
    strategy does not fit (the model may keep a reserve, so the raw difference alone could disagree)."""
    from designer.perf.iteration import REASONS, reason_kind

    raw = (np.asarray(vm.memory_per_gpu_bytes, float) - cand.system.gpu.hbm_bytes) / GB
    is_mem = _per_code({c: reason_kind(c) == "memory" for c in REASONS}, vm.reason_code, bool)
    return np.where(is_mem, np.maximum(raw, 1e-3), np.minimum(raw, 0.0))


def _model_infeasible(vm: VectorMetrics) -> np.ndarray:
    from designer.perf.iteration import REASONS, reason_kind

    return _per_code({c: 1.0 if c != 0 and reason_kind(c) != "memory" else 0.0 for c in REASONS},
                     vm.reason_code, float)


def evaluate_rows(problem: Problem, cand: Candidate, strategies: Sequence[Strategy]) -> list[RowResult]:
    """Strategies scored in one vectorized pass (the model reports time and memory even for a strategy
    that does not fit), then the user constraints on those the model finds feasible."""
    if not strategies:
        return []
    table = StrategyTable.from_strategies(list(strategies))
    vm = evaluate_vector(problem, cand, table)
    reasons = _reasons(vm)
    mem_excess = _memory_excess_gb(vm, cand)
    model_inf = _model_infeasible(vm)
    out = []
    for i, strategy in enumerate(strategies):
        feasible = bool(vm.feasible[i])
        reason = str(reasons[i])
        cons = {MEMORY_CONSTRAINT: float(mem_excess[i]), MODEL_CONSTRAINT: float(model_inf[i])}
        for c in problem.constraints:
            cons[c.name] = math.nan
        if problem.constraints and feasible:
            metrics = evaluate_system(problem.llm, problem.training, strategy, cand.system, calib=problem.calib)
            if not isinstance(metrics, Metrics):  # the scalar path disagrees: trust its reason
                feasible, reason = False, metrics.reason
            else:
                for c in problem.constraints:
                    cons[c.name] = c(cand.design, strategy, metrics)
                    if feasible and cons[c.name] > 0:
                        feasible, reason = False, f"constraint {c.name} = {cons[c.name]:.6g} > 0"
        out.append(RowResult(feasible, reason, float(vm.iteration_time_s[i]), float(vm.time_to_train_s[i]),
                             float(vm.mfu[i]), float(vm.memory_per_gpu_bytes[i]), cons))
    return out


def evaluate_row(problem: Problem, cand: Candidate, strategy: Strategy) -> RowResult:
    return evaluate_rows(problem, cand, [strategy])[0]


KEEP_ROWS = 1_000_000  # rows of a design's scored table kept in memory (the fastest, see run_exhaustive)


def _chunk_rows(cand: Candidate, chunk: StrategyTable, vm: VectorMetrics) -> dict[str, np.ndarray]:
    rows = {f"s:{c}": v for c, v in chunk.columns.items()}
    rows.update(feasible=np.asarray(vm.feasible).astype(bool), reason=_reasons(vm),
                mem_excess=_memory_excess_gb(vm, cand), model_inf=_model_infeasible(vm),
                it=np.asarray(vm.iteration_time_s, float), ttt=np.asarray(vm.time_to_train_s, float),
                mfu=np.asarray(vm.mfu, float), mem=np.asarray(vm.memory_per_gpu_bytes, float))
    return rows


def _rank_key(rows: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The order the kept rows are chosen in: feasible first, then by time to train (NaN last); rows
    tie by enumeration order."""
    ttt = rows["ttt"]
    return ~rows["feasible"], np.where(np.isnan(ttt), np.inf, ttt)


def _first_k(value: np.ndarray, k: int) -> np.ndarray:
    """Which entries are the `k` smallest of `value`, equal values taken in index order (a mask)."""
    if k >= len(value):
        return np.ones(len(value), bool)
    if k <= 0:
        return np.zeros(len(value), bool)
    cut = np.partition(value, k - 1)[k - 1]
    take = value < cut
    ties = np.flatnonzero(value == cut)[:k - int(take.sum())]
    take[ties] = True
    return take


def _fastest(rows: dict[str, np.ndarray], keep: int) -> dict[str, np.ndarray]:
    """The `keep` rows that come first by (feasible, time to train, enumeration order), in their
    enumeration order. The order is total, so choosing from the rows in several rounds keeps the same
    rows as choosing once."""
    n = len(rows["ttt"])
    if n <= keep:
        return rows
    infeasible, value = _rank_key(rows)
    feasible = np.flatnonzero(~infeasible)
    take = ~infeasible
    if len(feasible) > keep:
        take[feasible] = _first_k(value[feasible], keep)
    else:
        rest = np.flatnonzero(infeasible)
        take[rest] = _first_k(value[rest], keep - len(feasible))
    return {k: v[take] for k, v in rows.items()}


def _beats(rows: dict[str, np.ndarray], worst: tuple[bool, float]) -> np.ndarray:
    """Which rows come before a kept row ranked (infeasible, value) = `worst`; a later row that only
    ties it comes after it (enumeration order breaks ties)."""
    infeasible, value = _rank_key(rows)
    return (infeasible < worst[0]) | ((infeasible == worst[0]) & (value < worst[1]))


def _worst(rows: dict[str, np.ndarray]) -> tuple[bool, float]:
    infeasible, value = _rank_key(rows)
    last_class = bool(infeasible.any())
    return last_class, float(value[infeasible == last_class].max())


def run_exhaustive(problem: Problem, cand: Candidate, *, progress: Callable[[int], None] | None = None,
                   keep: int = KEEP_ROWS) -> ScoredTable:
    """Every valid strategy of `cand`, scored; user constraints in time order up to the first pass.

    Memory stays bounded past millions of strategies: the scored table keeps the `keep` fastest
    feasible strategies (then the fastest infeasible ones), in enumeration order; every strategy is
    still scored (`n_evaluations` counts them all), and the best one is always kept. Once `keep` rows
    are held, a scored row that does not beat the slowest of them is dropped on arrival, and the
    survivors are merged in batches of about `keep` / 4 rows (merging per chunk would copy the kept
    rows once per chunk)."""
    import time

    t0 = time.perf_counter()
    ds = problem.design_space(cand)
    kept: dict[str, np.ndarray] | None = None
    worst: tuple[bool, float] | None = None  # the slowest kept row, once `keep` rows are kept
    pending: list[dict[str, np.ndarray]] = []
    n_pending = 0
    n_scored = 0

    def merge() -> None:
        nonlocal kept, worst, pending, n_pending
        parts = ([kept] if kept is not None else []) + pending
        kept = _fastest({k: np.concatenate([p[k] for p in parts]) for k in parts[0]}, keep)
        worst = _worst(kept) if len(kept["ttt"]) >= keep else None
        pending, n_pending = [], 0

    n_feasible = 0
    for chunk in ds.chunks():
        rows = _chunk_rows(cand, chunk, evaluate_vector(problem, cand, chunk))
        rows["idx"] = np.arange(n_scored, n_scored + len(chunk))  # the enumeration order
        n_scored += len(chunk)
        n_feasible += int(rows["feasible"].sum())
        if worst is not None:
            beats = _beats(rows, worst)
            rows = {k: v[beats] for k, v in rows.items()}
        pending.append(rows)
        n_pending += len(rows["ttt"])
        if n_pending >= max(keep // 4, 1):
            merge()
        if progress is not None:
            progress(len(chunk))
    if pending:
        merge()
    if kept is not None:
        table = StrategyTable({c: kept[f"s:{c}"] for c in COLUMNS})
        feasible, reason, mem_excess, model_inf = kept["feasible"], kept["reason"], kept["mem_excess"], kept["model_inf"]
        it, ttt, mfu, mem = kept["it"], kept["ttt"], kept["mfu"], kept["mem"]
    else:
        table = ds.table()
        feasible = np.zeros(0, bool)
        reason = np.zeros(0, object)
        mem_excess = model_inf = it = ttt = mfu = mem = np.zeros(0)
    constraints = {"memory_excess_gb": mem_excess, "model_infeasible": model_inf}
    if problem.constraints:
        user = {c.name: np.full(len(table), np.nan) for c in problem.constraints}
        order = np.flatnonzero(feasible)
        order = order[np.argsort(ttt[order], kind="stable")]
        for i in order:
            s = table.strategy(int(i))
            metrics = evaluate_system(problem.llm, problem.training, s, cand.system, calib=problem.calib)
            if not isinstance(metrics, Metrics):
                feasible[i], reason[i] = False, metrics.reason
                continue
            ok = True
            for c in problem.constraints:
                user[c.name][i] = c(cand.design, s, metrics)
                if ok and user[c.name][i] > 0:
                    ok = False
                    reason[i] = f"constraint {c.name} = {user[c.name][i]:.6g} > 0"
            if ok:
                break  # the fastest strategy that satisfies everything: nothing slower can be on the front
            feasible[i] = False
        else:
            # every kept feasible strategy fails a constraint; where the table dropped slower feasible
            # ones (more than `keep`), the fastest of those that passes is found in further passes
            if n_feasible > len(order) and len(order):
                last = max(zip(np.where(np.isnan(ttt[order]), np.inf, ttt[order]), kept["idx"][order]))
                found = _first_passing_after(problem, cand, ds, (float(last[0]), int(last[1])), keep)
                if isinstance(found, str):  # "unchecked": the checks' bound reached
                    import logging

                    logging.getLogger(__name__).warning(
                        "design %s: its %d fastest feasible strategies each fail a trial constraint, and the "
                        "other %d were not checked (each is re-evaluated in turn): the design has no strategy "
                        "in the results; loosen the constraints or narrow strategy_space", cand.design_id,
                        len(order) + keep, n_feasible - len(order) - keep)
                    found = None
                if found is not None:
                    extra, values = found
                    kept = {k: np.concatenate([kept[k], extra[k]]) for k in kept}
                    table = StrategyTable({c: kept[f"s:{c}"] for c in COLUMNS})
                    feasible = np.concatenate([feasible, extra["feasible"]])
                    reason = np.concatenate([reason, extra["reason"]])
                    it, ttt, mfu, mem = (np.concatenate([a, extra[k]]) for a, k in
                                         ((it, "it"), (ttt, "ttt"), (mfu, "mfu"), (mem, "mem")))
                    for k, a in (("memory_excess_gb", "mem_excess"), ("model_infeasible", "model_inf")):
                        constraints[k] = np.concatenate([constraints[k], extra[a]])
                    user = {name: np.concatenate([v, [values[name]]]) for name, v in user.items()}
        constraints.update(user)
    return ScoredTable(cand.design_id, "exhaustive", ds.size, n_scored, table, feasible, reason, it, ttt, mfu,
                       mem, constraints, np.full(len(table), -1, np.int64), time.perf_counter() - t0)


def _first_passing_after(problem: Problem, cand: Candidate, ds: DesignSpace, after: tuple[float, int],
                         keep: int) -> tuple[dict[str, np.ndarray], dict[str, float]] | str | None:
    """The fastest feasible strategy ranked after `after` = (time to train, enumeration index) that
    meets every user constraint, as a one-row table with its constraint values; None when none does.
    One more pass scores the space and checks the next `keep` feasible strategies in time order (each
    a scalar evaluation and the user's functions), memory bounded as the first pass's; "unchecked"
    when all of them fail and more are left."""
    batch: dict[str, np.ndarray] | None = None
    n_later = 0
    offset = 0
    for chunk in ds.chunks():
        rows = _chunk_rows(cand, chunk, evaluate_vector(problem, cand, chunk))
        rows["idx"] = np.arange(offset, offset + len(chunk))
        offset += len(chunk)
        t = np.where(np.isnan(rows["ttt"]), np.inf, rows["ttt"])
        later = rows["feasible"] & ((t > after[0]) | ((t == after[0]) & (rows["idx"] > after[1])))
        n_later += int(later.sum())
        if later.any():
            rows = {k: v[later] for k, v in rows.items()}
            batch = _fastest(rows if batch is None else {k: np.concatenate([batch[k], rows[k]]) for k in rows}, keep)
    if batch is None:
        return None
    t = np.where(np.isnan(batch["ttt"]), np.inf, batch["ttt"])
    for i in np.lexsort((batch["idx"], t)):
        s = StrategyTable({c: batch[f"s:{c}"][i:i + 1] for c in COLUMNS}).strategy(0)
        metrics = evaluate_system(problem.llm, problem.training, s, cand.system, calib=problem.calib)
        if not isinstance(metrics, Metrics):
            continue
        values = {c.name: c(cand.design, s, metrics) for c in problem.constraints}
        if all(v <= 0 for v in values.values()):
            return {k: v[i:i + 1] for k, v in batch.items()}, values
    return "unchecked" if n_later > len(t) else None


def check_space(problem: Problem, cand: Candidate) -> DesignSpace:
    ds = problem.design_space(cand)
    if ds.size == 0:
        from designer.search.outer import count_reason  # the arithmetic that rules the count out

        why = count_reason(problem, cand.n_gpus, cand.hb_domain_size) or "the strategy_space lists leave no strategy"
        raise SpecError(f"design {cand.design_id}: no valid strategy (model {problem.llm.name}): {why}")
    return ds


__all__ = ["Candidate", "MEMORY_CONSTRAINT", "MODEL_CONSTRAINT", "Problem", "RowResult", "ScoredTable",
           "TrialConstraint", "evaluate_row", "evaluate_rows", "evaluate_vector", "load_trial_constraint", "run_exhaustive",
           "strategy_key", "to_strategy_arrays"]
