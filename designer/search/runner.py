"""The Optuna search over one design's strategies: the only module that calls Optuna.

One Optuna study per design (named `<study>/<design id>`) in one storage. Within a design, capex and
power are constants, so the study's objectives (capex, time-to-train, and power or energy if asked)
rank strategies by time; the front across designs is built by designer.pareto.

How a trial works: the sampler picks one value per searchable dimension from fixed categorical
choices (tp, pp, cp, ep, SP, microbatch, schedule with virtual stages, ZeRO stage and ZeRO++ flags,
recompute, overlap); `DesignSpace.nearest` maps the pick to the closest valid strategy, so every
trial scores a valid strategy and the sampler optimizes a well-defined function of its picks.
A strategy already scored in this study is not scored again (its result is reused), so "evaluations"
counts distinct strategies. Memory (HBM excess) and the user's trial constraints are reported with
`trial.set_constraint`; the trial's full result is one user attribute, `result`.

Resumption. Every finished trial is in the storage (the journal file is appended and fsynced per
operation). Finished trials count toward `n_trials`, so a rerun only runs the missing ones, and a
strategy already scored is reused, never scored again. Each trial's sampler is seeded from (seed,
trial number), and a trial left RUNNING by a dead process is failed and retried with the parameters it
had drawn (Optuna's RetryHeartbeatStaleTrialCallback; see StaleTrials for how a dead owner is found), so a run
killed with SIGKILL and started again loses no finished trial and repeats none. (The trials after the kill may differ from an uninterrupted
run's: a batch cut in two is sampled against a different set of running trials.) The journal uses
Optuna's lock file (one left by a killed process is released after a grace period) and a torn last
line left by a kill is cut off before the storage is opened.
"""

from __future__ import annotations

import datetime
import json
import logging
import math
import os
import socket
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import optuna
import psutil
from optuna.samplers import BaseSampler
from optuna.storages import BaseStorage, JournalStorage, RDBStorage
from optuna.storages.journal import JournalFileBackend
from optuna.storages.journal import JournalFileOpenLock
from optuna.trial import FrozenTrial, TrialState

from designer.errors import SpecError
from designer.search.exhaustive import (MODEL_CONSTRAINT, Candidate, Problem, RowResult, ScoredTable, check_space,
                                        evaluate_rows)
from designer.search.space import COLUMNS, StrategyTable, _typed, strategy_from_key, strategy_key

# Optuna logs at designer's level (the command line's -q / -v; WARNING by default)
optuna.logging.set_verbosity(logging.getLogger("designer").getEffectiveLevel())
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)

JOURNAL_NAME = "optuna.journal"
LOCK_GRACE_S = 10  # a journal lock file older than this was left by a killed process
HEARTBEAT_S = 10  # a dead worker's trials fail after 2 intervals without a beat (grace_period)
log = logging.getLogger(__name__)
SAMPLERS = ("tpe", "nsga2", "nsga3", "random")


# ---- storage ----------------------------------------------------------------------------------

def journal_lock(path: Path | str) -> JournalFileOpenLock:
    """Optuna's O_EXCL lock file `<journal>.lock` (works on NFSv3+, so on a journal shared by machines).
    It is held only while one operation is appended; one left by a process killed in that moment is
    forcibly released after LOCK_GRACE_S."""
    return JournalFileOpenLock(str(path), grace_period=LOCK_GRACE_S)


def _repair_journal(path: Path) -> None:
    """Cut a torn last line (a write interrupted by a kill): Optuna would otherwise fail on the next
    line appended after it. The torn operation never completed, so dropping it loses nothing finished."""
    if not path.is_file() or path.stat().st_size == 0:
        return
    lock = journal_lock(path)
    lock.acquire()
    try:
        with open(path, "rb+") as f:
            data = f.read()
            if data.endswith(b"\n"):
                return
            f.truncate(data.rfind(b"\n") + 1)
    finally:
        lock.release()


def redact_url(url: str | None) -> str | None:
    """A storage URL with its password masked (user:***@host), for every message and meta.json."""
    if url and "://" in url and "@" in url:
        scheme, rest = url.split("://", 1)
        creds, host = rest.rsplit("@", 1)
        return f"{scheme}://{creds.split(':')[0]}:***@{host}" if ":" in creds else url
    return url


def _redact_text(text: str) -> str:
    import re

    return re.sub(r"(://[^:/@\s]+):[^@\s]*@", r"\1:***@", text)


def is_journal(path: Path) -> bool:
    """Whether the file at `path` starts as Optuna's JournalFileBackend log does: a JSON line carrying
    an op_code."""
    try:
        with open(path, "rb") as f:
            op = json.loads(f.readline(1 << 20).decode("utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return False
    return isinstance(op, dict) and "op_code" in op


def _check_journal(path: Path, named: str = "--storage") -> None:
    """Refuse a file that is not an Optuna journal: designer never modifies a file it did not create.
    `named`: how the message names where the path came from."""
    if not path.exists():
        return
    if not path.is_file():
        raise SpecError(f"{named} '{path}': not a file; give a journal file path or a database URL")
    if path.stat().st_size == 0:
        return
    if not is_journal(path):
        raise SpecError(f"{named} '{path}': not an Optuna journal (its first line is no journal operation); "
                        "designer never modifies a file it did not create: give a new path")


STORAGE_SCHEMES = ("postgresql", "postgres", "mysql", "sqlite")


def check_storage_url(url: str, named: str = "--storage") -> None:
    """Refuse a storage URL of an unknown kind, or a path to something that is no journal file,
    before anything runs (not only when it is first opened: an exhaustive search never opens it)."""
    if "://" in url:
        scheme = url.split("://", 1)[0]
        if scheme.split("+")[0] not in STORAGE_SCHEMES:
            raise SpecError(f"storage '{redact_url(url)}': unknown scheme '{scheme}'; allowed: postgresql://, "
                            "mysql://, sqlite:///, or a journal file path")
    else:
        _check_journal(Path(url), named)


def open_storage(url: str | Path, *, create: bool = True) -> BaseStorage:
    """An Optuna storage from a URL: `postgresql://...`, `mysql://...`, `sqlite:///...` (RDB), or a
    file path (JournalStorage with a JournalFileBackend, the embedded default). A file that is not a
    journal is refused; with create=False a missing journal is an error, not a new empty file."""
    text = str(url)
    check_storage_url(text)
    if "://" in text:
        scheme = text.split("://", 1)[0]
        if scheme in ("postgres", "postgresql"):
            # SQLAlchemy 2.1 maps a bare postgresql:// to psycopg 3; use psycopg2 when that is what is installed.
            import importlib.util

            driver = "psycopg2" if importlib.util.find_spec("psycopg2") else "psycopg"
            text = f"postgresql+{driver}://" + text.split("://", 1)[1]
        try:
            # Heartbeats let a worker fail the RUNNING trials of a worker on another machine that died.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # heartbeat_interval is marked experimental
                return RDBStorage(text, engine_kwargs={"pool_pre_ping": True}, heartbeat_interval=HEARTBEAT_S,
                                  grace_period=2 * HEARTBEAT_S,
                                  heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(
                                      max_retry=3))
        except ImportError as err:
            raise SpecError(f"storage '{redact_url(str(url))}': database driver missing ({err}); for PostgreSQL: "
                            "pip install psycopg2-binary") from None
        except Exception as err:  # sqlalchemy OperationalError etc.: one line, credentials masked
            raise SpecError(f"storage '{redact_url(str(url))}': cannot connect "
                            f"({_redact_text(str(err).splitlines()[0])})") from None
    path = Path(text)
    _check_journal(path)
    if not create and not path.is_file():
        raise SpecError(f"--storage '{path}': no such journal file")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise SpecError(f"--storage '{path}': cannot create its folder ({err.strerror})") from None
    _repair_journal(path)
    return JournalStorage(JournalFileBackend(str(path), lock_obj=journal_lock(path)))


# ---- samplers ---------------------------------------------------------------------------------

def _trial_seed(seed: int, number: int) -> int:
    return int(np.random.SeedSequence([seed, number]).generate_state(1)[0])


def _base_sampler(name: str, seed: int, population_size: int) -> BaseSampler:
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(population_size=population_size, seed=seed)
    if name == "nsga3":
        return optuna.samplers.NSGAIIISampler(population_size=population_size, seed=seed)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    raise SpecError(f"sampler '{name}': allowed: {', '.join(SAMPLERS)}")


class PerTrialSeededSampler(BaseSampler):
    """Wraps a sampler and reseeds a fresh instance of it before every trial from (seed, trial number).
    A trial's draws then depend only on its number and the trials already in the storage, never on
    the process that runs it: the property resumption relies on. The wrapped samplers keep their state
    in the storage (TPE has none; NSGA-II/III store generations), so a fresh instance loses nothing."""

    def __init__(self, name: str, seed: int, population_size: int = 32) -> None:
        self._name, self._seed, self._pop = name, seed, population_size
        self._inner = _base_sampler(name, seed, population_size)
        # one instance per trial asked and not yet told: a batch asks several trials before it
        # suggests their values, and each must draw from its own seed, not the last one asked
        self._by_trial: dict[int, BaseSampler] = {}

    def _for(self, trial) -> BaseSampler:  # noqa: ANN001 - an Optuna trial
        return self._by_trial.get(trial.number, self._inner)

    def before_trial(self, study, trial) -> None:  # noqa: ANN001 - Optuna's signature
        inner = _base_sampler(self._name, _trial_seed(self._seed, trial.number), self._pop)
        self._by_trial[trial.number] = self._inner = inner
        inner.before_trial(study, trial)

    def infer_relative_search_space(self, study, trial):  # noqa: ANN001
        return self._for(trial).infer_relative_search_space(study, trial)

    def sample_relative(self, study, trial, search_space):  # noqa: ANN001
        return self._for(trial).sample_relative(study, trial, search_space)

    def sample_independent(self, study, trial, param_name, param_distribution):  # noqa: ANN001
        return self._for(trial).sample_independent(study, trial, param_name, param_distribution)

    def after_trial(self, study, trial, state, values) -> None:  # noqa: ANN001
        self._by_trial.pop(trial.number, self._inner).after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self._inner.reseed_rng()


# ---- ownership of running trials ---------------------------------------------------------------

def _proc_start(pid: int) -> str:
    """The process's start time (psutil), which tells a live owner from a reused pid."""
    try:
        return f"{psutil.Process(pid).create_time():.3f}"
    except psutil.Error:
        return ""


_HOST = socket.gethostname()
BEAT_ATTR = "heartbeat "  # + owner tag: a journal study attribute each live owner bumps while it runs trials
TAKE_OVER_AFTER_S = 2.0  # a trial is retried only once it has run this long: a retry popped a moment ago
#                          still carries its dead first owner's tag until its new owner sets its own


def owner_tag() -> str:
    pid = os.getpid()
    return f"{_HOST}:{pid}:{_proc_start(pid)}"


def _local_owner_alive(tag: str | None) -> bool | None:
    """Whether a trial's owner process is alive: True/False for an owner on this host, None for an
    owner on another machine (or none), whose liveness only its heartbeats can tell."""
    if not tag:
        return None
    host, _, rest = tag.partition(":")
    pid_s, _, start = rest.partition(":")
    if host != _HOST or not pid_s.isdigit():
        return None
    pid = int(pid_s)
    if not psutil.pid_exists(pid):
        return False
    return _proc_start(pid) == start  # a different start time: the pid was reused by another process


def _started_s_ago(t: FrozenTrial) -> float:
    return (datetime.datetime.now() - t.datetime_start).total_seconds() if t.datetime_start else math.inf


class StaleTrials:
    """Finds the RUNNING trials whose owner died and fails them; RetryHeartbeatStaleTrialCallback then queues a
    WAITING copy with the same parameters, which the next ask picks up (Optuna's own retry).

    - An owner on this host: dead when its process is gone (psutil), found at once.
    - This very process: `fail` runs between this process's batches, when it runs none of the study's
      trials, so a RUNNING trial that names it is one it is not running. That is a ticket it enqueued
      (`_ask_owned`) that another process popped and died holding before naming itself; it is failed
      like a dead owner's, once it has run TAKE_OVER_AFTER_S, and marked (user attribute `orphan`).
    - An owner on another machine: with an RDB storage, Optuna's heartbeats fail its trials
      (`fail_stale_trials`). A journal has no heartbeats, so each owner bumps a counter in the study's
      user attributes while it runs trials (`Heartbeat`); a trial whose owner's counter has not moved
      for the grace period, as timed here on this process's own clock (no clock is compared across
      machines), is stale. A trial with no owner (its owner died between taking it and naming itself,
      so before its first beat) is stale after the same period, with either storage."""

    def __init__(self, storage: BaseStorage) -> None:
        self.storage = storage
        self.rdb = _heartbeat_interval(storage) is not None
        self.seen: dict[tuple[str, int], tuple[Any, float]] = {}  # (study, trial number) -> (beat key, since)
        self.me = owner_tag()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # marked experimental
            self.retry = optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=3)

    def fail(self, study: optuna.Study) -> int:
        """Fail and requeue the stale trials of `study`; returns how many this process failed."""
        if self.rdb:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "heartbeat is supposed to be used with Study.optimize": we beat by hand
                optuna.storages.fail_stale_trials(study)
        running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        if not running:
            return 0
        beats = study.user_attrs if not self.rdb else {}
        now = time.monotonic()
        stale = []
        for t in running:
            owner = t.user_attrs.get("owner")
            if owner == self.me:
                if _started_s_ago(t) >= TAKE_OVER_AFTER_S:
                    stale.append(t)
                continue
            alive = _local_owner_alive(owner)
            if alive is False:
                if _started_s_ago(t) >= TAKE_OVER_AFTER_S:
                    stale.append(t)
                continue
            if alive or (self.rdb and owner):
                continue  # alive here, or on another machine with Optuna's heartbeats
            # No owner: its process died between taking it and naming itself, before its first beat, so
            # Optuna's heartbeats never find it (fail_stale_trials looks only at trials that have beaten);
            # timed here as in a journal.
            key = (owner, beats.get(BEAT_ATTR + owner) if owner else None)
            slot = (study.study_name, t.number)
            last = self.seen.get(slot)
            if last is None or last[0] != key:
                self.seen[slot] = (key, now)
            elif now - last[1] >= 2 * HEARTBEAT_S:
                stale.append(t)
        n = 0
        for t in stale:
            tid = trial_id_of(self.storage, study, t.number)
            try:
                if t.user_attrs.get("owner") == self.me:
                    self.storage.set_trial_user_attr(tid, "orphan", True)
                if not self.storage.set_trial_state_values(tid, TrialState.FAIL):
                    continue
            except optuna.exceptions.UpdateFinishedTrialError:
                continue  # another process failed it first (or its owner finished it after all)
            self.retry(study, self.storage.get_trial(tid))
            log.info("trial %d of %s: its owner %s is gone; failed and queued again", t.number, study.study_name,
                     t.user_attrs.get("owner"))
            n += 1
        return n


# ---- the study ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class RunnerSettings:
    n_trials: int
    seed: int = 0
    sampler: str = "tpe"
    population_size: int = 32
    batch_size: int = 8  # trials drawn before one vectorized evaluation


def study_name_for(study: str, design_id: str) -> str:
    return f"{study}/{design_id}"


def check_identity(storage: BaseStorage, name: str, identity: str) -> None:
    """Refuse, before anything is written, a study already in the storage under another identity."""
    try:
        have = optuna.load_study(study_name=name, storage=storage).user_attrs.get("identity")
    except KeyError:
        return
    if have is not None and have != identity:
        raise SpecError(
            f"storage already holds study '{name}' from a different spec or seed, or a designer release whose "
            f"defaults differ (identity {have[:12]} != {identity[:12]}); use a new --out folder or --storage, or "
            "the original spec and release")


def _open_study(storage: BaseStorage, name: str, problem: Problem, cand: Candidate, settings: RunnerSettings,
                identity: str) -> optuna.Study:
    check_identity(storage, name, identity)
    sampler = PerTrialSeededSampler(settings.sampler, settings.seed, settings.population_size)
    study = optuna.create_study(study_name=name, storage=storage, directions=["minimize"] * len(problem.objectives),
                                sampler=sampler, load_if_exists=True)
    if study.user_attrs.get("identity") is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # set_metric_names is marked experimental
            study.set_metric_names(list(problem.objectives))
        study.set_user_attr("identity", identity)
        study.set_user_attr("design_id", cand.design_id)
        study.set_user_attr("sampler", settings.sampler)
        study.set_user_attr("seed", settings.seed)
    return study


def _result_attr(key: tuple, r: RowResult, evaluated: bool) -> dict[str, Any]:
    return {"strategy": list(key), "feasible": r.feasible, "reason": r.reason, "iteration_time_s": r.iteration_time_s,
            "time_to_train_s": r.time_to_train_s, "mfu": r.mfu, "memory_per_gpu_bytes": r.memory_per_gpu_bytes,
            "constraints": {k: (None if math.isnan(v) else v) for k, v in r.constraints.items()},
            "evaluated": evaluated}


def _row_from_attr(a: dict[str, Any]) -> RowResult:
    return RowResult(bool(a["feasible"]), str(a["reason"]), float(a["iteration_time_s"]), float(a["time_to_train_s"]),
                     float(a["mfu"]), float(a["memory_per_gpu_bytes"]),
                     {k: (math.nan if v is None else float(v)) for k, v in a["constraints"].items()})


class _DesignTrials:
    """Runs trials of one design's study, a batch at a time: the batch's picks are drawn one trial after
    another (TPE's constant liar sees the earlier ones as running), then scored in one vectorized call,
    because one call of the model costs about as much for one strategy as for a thousand."""

    def __init__(self, study: optuna.Study, problem: Problem, cand: Candidate, storage: BaseStorage) -> None:
        self.study, self.problem, self.cand, self.storage = study, problem, cand, storage
        self.space = check_space(problem, cand)
        self.choices = self.space.choices
        self.cache: dict[tuple, RowResult] = {}

    def refresh(self) -> list:
        trials = self.study.get_trials(deepcopy=False)
        for t in trials:
            if t.state == TrialState.COMPLETE and "result" in t.user_attrs:
                a = t.user_attrs["result"]
                self.cache.setdefault(tuple(a["strategy"]), _row_from_attr(a))
        return trials

    def run(self, trials: list[optuna.trial.Trial]) -> None:
        with Heartbeat(self.storage, self.study, trials):
            self._run(trials)

    def _run(self, trials: list[optuna.trial.Trial]) -> None:
        picks = []
        for trial in trials:
            params = {name: trial.suggest_categorical(name, list(ch)) for name, ch in self.choices.items()}
            strategy = self.space.nearest(params)
            picks.append((trial, strategy, strategy_key(strategy)))
        todo: dict[tuple, Any] = {}
        for _, strategy, key in picks:
            if key not in self.cache and key not in todo:
                todo[key] = strategy
        fresh = dict(zip(todo, evaluate_rows(self.problem, self.cand, list(todo.values()))))
        for trial, _, key in picks:
            new = key in fresh
            result = fresh.pop(key) if new else self.cache[key]
            self.cache[key] = result
            trial.set_user_attr("result", _result_attr(key, result, new))
            for name in self.problem.constraint_names:
                v = result.constraints.get(name, math.nan)
                # A user constraint the model never reached (it rejected the strategy first) is neutral:
                # the memory or model constraint already marks the trial infeasible.
                trial.set_constraint(name, 0.0 if math.isnan(v) else float(v))
            model_ok = result.constraints.get(MODEL_CONSTRAINT, 0.0) <= 0
            ttt = result.time_to_train_s if model_ok and math.isfinite(result.time_to_train_s) else math.inf
            self.study.tell(trial, list(self.cand.objective_values(self.problem.objectives, ttt)), skip_if_finished=True)


def _ask_owned(study: optuna.Study, storage: BaseStorage) -> optuna.trial.Trial:
    """A new trial that carries its owner from the moment it exists: enqueued (one storage operation,
    with the owner attribute) and then popped. A kill between the two leaves a WAITING trial, which the
    next ask pops; a kill after leaves a RUNNING trial whose owner is known, so it can be taken over."""
    tag = owner_tag()
    while True:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # RDB heartbeats are recorded by hand (Heartbeat), not by optimize()
            study.enqueue_trial({}, user_attrs={"owner": tag})
            trial = study.ask()
        if trial.user_attrs.get("owner") == tag:
            break
        try:  # popped a retry or another worker's ticket: name the owner now
            trial.set_user_attr("owner", tag)
            break
        except optuna.exceptions.UpdateFinishedTrialError:
            continue  # its first owner's process failed it as orphaned meanwhile (StaleTrials): ask again
    if _heartbeat_interval(storage):
        # the first beat at once, as optimize() does: a trial that never beat is never found stale
        storage.record_heartbeat(trial_id_of(storage, study, trial.number))
    return trial


def _heartbeat_interval(storage: BaseStorage) -> float | None:
    """The storage's heartbeat interval (RDBStorage built with heartbeat_interval), None without."""
    get = getattr(storage, "get_heartbeat_interval", None)
    return get() if callable(get) else None


def trial_id_of(storage: BaseStorage, study: optuna.Study, number: int) -> int:
    """A trial's storage id from its study and number, through the storage's public lookups."""
    return storage.get_trial_id_from_study_id_trial_number(storage.get_study_id_from_name(study.study_name), number)


class Heartbeat:
    """Beats for some trials while the block runs (Optuna's optimize() does this for its own trials; an
    ask-and-tell loop must do it itself), so a worker that dies stops beating and the others fail its
    trials after the grace period (StaleTrials). With an RDB storage: Optuna's record_heartbeat per
    trial, every third of the interval. With a journal: this process's counter in the study's user
    attributes, bumped every third of HEARTBEAT_S (one journal line per beat)."""

    def __init__(self, storage: BaseStorage, study: optuna.Study, trials: list[optuna.trial.Trial]) -> None:
        import threading

        rdb = _heartbeat_interval(storage)
        self.interval = float(rdb or HEARTBEAT_S)
        self.storage, self.study = storage, study
        self.ids = [trial_id_of(storage, study, t.number) for t in trials] if rdb else []
        self.beat_name = None if rdb else BEAT_ATTR + owner_tag()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._beat, daemon=True) if trials else None

    def _beat(self) -> None:
        n = 0
        while not self.stop.wait(0 if self.ids and n == 0 else max(0.5, self.interval / 3)):
            n += 1
            try:
                if self.beat_name is not None:
                    self.study.set_user_attr(self.beat_name, time.time_ns() + n)
                for i in self.ids:
                    self.storage.record_heartbeat(i)
            except Exception:  # a finished trial or a lost connection: the next beat or the caller sees it
                pass

    def __enter__(self) -> "Heartbeat":
        if self.thread is not None:
            self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(timeout=5)


def _budget_full(study: optuna.Study, n_trials: int) -> bool:
    """Finished and running trials already fill the budget: asking now would only make a surplus
    ticket, so a worker waits instead (for a finish, or for a dead worker's trials to fail). WAITING
    trials do not count: a failed trial's retry waits there, and an ask is what picks it up."""
    live = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.RUNNING))
    return len(live) >= n_trials


def _close_surplus(study: optuna.Study, trial: optuna.trial.Trial) -> None:
    """Close a trial nobody needs as PRUNED, marked with the user attribute `surplus`."""
    trial.set_user_attr("surplus", True)
    study.tell(trial, state=TrialState.PRUNED, skip_if_finished=True)


def _within_budget(study: optuna.Study, tickets: list[optuna.trial.Trial], n_trials: int) -> list[optuna.trial.Trial]:
    """The new trials that fit in the budget. Trial numbers are handed out atomically by the storage, so
    they order the workers' asks: a trial whose number has n_trials finished, running or waiting
    trials before it is surplus and is closed as PRUNED (user attribute `surplus`) before it draws
    anything. This keeps several workers from overshooting n_trials."""
    live = sorted(t.number for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.RUNNING,
                                                                              TrialState.WAITING)))
    rank = {num: i for i, num in enumerate(live)}
    keep = []
    for t in tickets:
        if rank.get(t.number, 0) >= n_trials:
            _close_surplus(study, t)
        else:
            keep.append(t)
    return keep


def _drain_waiting(study: optuna.Study) -> None:
    """Close WAITING trials left when the budget is met (`n_trials` finished): with several workers an
    enqueued trial can be overtaken (another worker's ask popped it and this worker's ask created a
    new one), or a worker killed between its enqueue and its ask leaves one. Each is popped and
    closed as PRUNED (user attribute `surplus`), whatever its number: none is needed any more."""
    for _ in range(100):
        if not study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            return
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # RDB heartbeats are recorded by hand (Heartbeat), not by optimize()
            ticket = study.ask()
        try:
            _close_surplus(study, ticket)
        except optuna.exceptions.UpdateFinishedTrialError:
            continue


def _budget_met(ostudy: optuna.Study, trials: list, n_trials: int, on_trial: Callable[[int, int], None] | None) -> bool:
    """Whether the study has its `n_trials` finished trials (then WAITING leftovers are closed)."""
    done = sum(t.state == TrialState.COMPLETE for t in trials)
    if on_trial is not None:
        on_trial(done, n_trials)
    if done >= n_trials:
        _drain_waiting(ostudy)
        return True
    return False


def run_optuna(problem: Problem, cand: Candidate, *, storage: BaseStorage, study: str, settings: RunnerSettings,
               identity: str, on_trial: Callable[[int, int], None] | None = None,
               stop: Callable[[], bool] | None = None) -> ScoredTable:
    """Run the design's study until it has `settings.n_trials` finished trials (those already in the
    storage count), then return every finished trial as a ScoredTable. With several workers on one
    storage, each asks only for trials nobody else is running, so the study ends with n_trials
    finished trials or, in a race, at most (workers - 1) more."""
    t0 = time.perf_counter()
    name = study_name_for(study, cand.design_id)
    ostudy = _open_study(storage, name, problem, cand, settings, identity)
    runner = _DesignTrials(ostudy, problem, cand, storage)
    stale = StaleTrials(storage)
    while True:
        stale.fail(ostudy)
        trials = runner.refresh()
        if _budget_met(ostudy, trials, settings.n_trials, on_trial):
            break
        done = sum(t.state == TrialState.COMPLETE for t in trials)
        running = sum(t.state == TrialState.RUNNING for t in trials)
        if stop is not None and stop():
            break
        if _budget_full(ostudy, settings.n_trials):
            # the other workers are finishing the budget, or a dead one's trials will fail and come back
            time.sleep(0.5)
            continue
        k = max(1, min(settings.batch_size, settings.n_trials - done - running))
        tickets = [_ask_owned(ostudy, storage) for _ in range(k)]
        mine = _within_budget(ostudy, tickets, settings.n_trials)
        if mine:
            runner.run(mine)
        else:
            time.sleep(0.1)  # every ticket was surplus: the other workers are finishing the budget
    return collect(ostudy, problem, cand, runner.space.size, time.perf_counter() - t0)


def recollect(storage: BaseStorage, study: str, problem: Problem, cand: Candidate, space_size: int,
              wall_s: float = 0.0) -> ScoredTable:
    """A design's table read again from the storage (other workers may have added trials)."""
    ostudy = optuna.load_study(study_name=study_name_for(study, cand.design_id), storage=storage)
    return collect(ostudy, problem, cand, space_size, wall_s)


def collect(ostudy: optuna.Study, problem: Problem, cand: Candidate, space_size: int, wall_s: float = 0.0) -> ScoredTable:
    """Every finished trial of a design's study, in trial-number order."""
    trials = sorted((t for t in ostudy.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
                     if "result" in t.user_attrs), key=lambda t: t.number)
    rows = [t.user_attrs["result"] for t in trials]
    keys = [tuple(r["strategy"]) for r in rows]
    if keys:
        arr = np.array(keys, dtype=np.int64).reshape(len(keys), len(COLUMNS))
        table = StrategyTable({c: _typed(c, arr[:, j])
                               for j, c in enumerate(COLUMNS)})
    else:
        table = StrategyTable.from_strategies([])
    res = [_row_from_attr(r) for r in rows]
    names = problem.constraint_names
    return ScoredTable(
        design_id=cand.design_id, method="optuna", space_size=space_size, n_evaluations=len(set(keys)),
        strategies=table, feasible=np.array([r.feasible for r in res], bool),
        reason=np.array([r.reason for r in res] or [], dtype=object),
        iteration_time_s=np.array([r.iteration_time_s for r in res], float),
        time_to_train_s=np.array([r.time_to_train_s for r in res], float),
        mfu=np.array([r.mfu for r in res], float),
        memory_per_gpu_bytes=np.array([r.memory_per_gpu_bytes for r in res], float),
        constraints={n: np.array([r.constraints.get(n, math.nan) for r in res], float) for n in names},
        trial_number=np.array([t.number for t in trials], np.int64), wall_time_s=wall_s)


def trials_summary(storage: BaseStorage, study: str) -> dict[str, dict[str, int]]:
    """Per design study in `storage` belonging to `study`: finished, running and failed trial counts."""
    out: dict[str, dict[str, int]] = {}
    for s in optuna.get_all_study_summaries(storage, include_best_trial=False):
        if s.study_name.startswith(study + "/"):
            st = optuna.load_study(study_name=s.study_name, storage=storage)
            states = [t.state for t in st.get_trials(deepcopy=False)]
            out[s.study_name] = {k.name.lower(): states.count(k) for k in (TrialState.COMPLETE, TrialState.RUNNING, TrialState.FAIL)}
    return out


# ---- the outer study: trials are cluster designs ------------------------------------------------

OUTER_STUDY_SUFFIX = "designs"
OUTER_SAMPLERS = ("tpe", "nsga2", "random")
LARGE = 1e30  # the objective value of a point with no result (Optuna needs a finite number)


# The outer study's settings are a RunnerSettings (its batch_size is unused: one design per ask).
OuterSettings = RunnerSettings


def outer_study_name(study: str) -> str:
    return f"{study}/{OUTER_STUDY_SUFFIX}"


def _outer_pick(trial: optuna.trial.Trial, space: Any) -> Any:
    """The sampler's picks for one trial, as a point of the outer space (None: not a fabric of it)."""
    dims = space.dims()
    params = {name: trial.suggest_categorical(name, list(values)) for name, values in dims.items()}
    counts = space.counts.get(params["platform"], ())
    name = f"gpus_index@{params['platform']}"
    params[name] = trial.suggest_int(name, 0, max(len(counts) - 1, 0))
    return space.from_params(params)


def _outer_tell(study: optuna.Study, trial: optuna.trial.Trial, knobs: Any, score: Callable[[Any], tuple]) -> None:
    values, constraints, attrs = score(knobs)
    trial.set_user_attr("result", attrs)
    for name, v in constraints.items():
        trial.set_constraint(name, float(v))
    study.tell(trial, [min(float(v), LARGE) for v in values], skip_if_finished=True)


def run_outer_optuna(space: Any, score: Callable[[Any], tuple], *, storage: BaseStorage, study: str,
                     objectives: tuple[str, ...], settings: OuterSettings, identity: str,
                     on_trial: Callable[[int, int], None] | None = None) -> list[tuple[int, tuple]]:
    """One multi-objective Optuna study whose trials are cluster designs, run until it has
    `settings.n_trials` finished trials (those already in the storage count: a rerun after a kill
    continues; a RUNNING trial left by a dead process is failed and retried with its parameters).

    `score(knobs)` returns (objective values, constraint values (<= 0 feasible), a JSON-able record)
    for a point, or for None (the picks named no fabric of the space). Returns (trial number, knob
    key) for every finished trial, in number order."""
    name = outer_study_name(study)
    check_identity(storage, name, identity)
    sampler = PerTrialSeededSampler(settings.sampler, settings.seed, settings.population_size)
    ostudy = optuna.create_study(study_name=name, storage=storage, directions=["minimize"] * len(objectives),
                                 sampler=sampler, load_if_exists=True)
    if ostudy.user_attrs.get("identity") is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # set_metric_names is marked experimental
            ostudy.set_metric_names(list(objectives))
        ostudy.set_user_attr("identity", identity)
        ostudy.set_user_attr("sampler", settings.sampler)
        ostudy.set_user_attr("seed", settings.seed)
    stale = StaleTrials(storage)
    while True:
        stale.fail(ostudy)
        if _budget_met(ostudy, ostudy.get_trials(deepcopy=False), settings.n_trials, on_trial):
            break
        if _budget_full(ostudy, settings.n_trials):
            time.sleep(0.5)  # the others are finishing the budget, or a dead worker's trials will come back
            continue
        mine = _within_budget(ostudy, [_ask_owned(ostudy, storage)], settings.n_trials)
        if not mine:
            time.sleep(0.1)
            continue
        trial = mine[0]
        with Heartbeat(storage, ostudy, [trial]):
            _outer_tell(ostudy, trial, _outer_pick(trial, space), score)
    out = []
    for t in ostudy.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        key = t.user_attrs.get("result", {}).get("knobs")
        out.append((t.number, tuple(key) if key is not None else None))
    return sorted(out, key=lambda x: x[0])


def get_strategy(key: tuple):
    return strategy_from_key(key)


def set_study_attr(storage: BaseStorage, name: str, key: str, value: Any) -> None:
    """A JSON value on a bookkeeping study (e.g. the design manifest workers read)."""
    st = optuna.create_study(study_name=name, storage=storage, load_if_exists=True)
    st.set_user_attr(key, json.loads(json.dumps(value, default=str)))


def get_study_attr(storage: BaseStorage, name: str, key: str) -> Any:
    try:
        st = optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        return None
    return st.user_attrs.get(key)


__all__ = ["journal_lock", "JOURNAL_NAME", "is_journal", "check_identity", "redact_url", "OUTER_SAMPLERS", "OuterSettings", "PerTrialSeededSampler", "RunnerSettings",
           "collect", "get_study_attr", "open_storage", "outer_study_name", "owner_tag", "StaleTrials",
           "run_optuna", "run_outer_optuna", "set_study_attr", "study_name_for", "trials_summary"]
