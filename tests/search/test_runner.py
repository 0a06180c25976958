"""The Optuna runner against the real MILP design and performance model: seeded runs are deterministic,
constraints are recorded, and a run killed with SIGKILL resumes without losing or repeating a trial."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import warnings
from functools import lru_cache
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from designer.search.exhaustive import Candidate, Problem, load_trial_constraint, run_exhaustive
from designer.search.runner import RunnerSettings, open_storage, run_optuna, study_name_for
from designer.search.space import invalid_reason, strategy_from_key
from designer.spec.llm import TrainingSpec
from designer.spec.study import StrategySpace

REPO = Path(__file__).resolve().parents[2]


@lru_cache(maxsize=None)
def candidate(n_gpus: int = 256) -> Candidate:
    from designer.network.api import solve_network
    from designer.network.design import design_to_system
    from designer.spec.network_study import NetworkStudy, study_catalog

    ns = NetworkStudy.model_validate({
        "choices": {"platforms": ["hgx_h100_8"], "nics": [{"id": "cx7_400g"}], "switches": [{"id": "qm9790"}],
                    "families": ["rail-optimized"]},
        "gpus": {"count": n_gpus}})
    catalog = study_catalog(ns)
    d = solve_network(ns, catalog=catalog).design
    return Candidate(f"h100-{n_gpus}", d, design_to_system(d, catalog), d.capex_usd, d.power_w)


def problem(constraints=(), space: StrategySpace = StrategySpace()) -> Problem:
    from designer.spec.models import load_model

    return Problem(load_model("llama3-70b"),
                   TrainingSpec(sequence_length=8192, global_batch_sequences=512, total_tokens=1e12),
                   space, ("capex_usd", "time_to_train_s"), tuple(constraints))


def max_pp_2(design, strategy, metrics) -> float:
    """At most 2 pipeline stages (a user trial constraint): <= 0 feasible."""
    return float(strategy.pp - 2)


def _trials(path: Path, name: str):
    st = optuna.load_study(study_name=name, storage=open_storage(path))
    return st.get_trials(deepcopy=False)


def test_seeded_runs_are_deterministic(tmp_path):
    pb, cand = problem(), candidate()
    settings = RunnerSettings(n_trials=24, seed=3)
    runs = []
    for k in range(2):
        path = tmp_path / f"run{k}.journal"
        table = run_optuna(pb, cand, storage=open_storage(path), study="det", settings=settings, identity="i")
        trials = _trials(path, study_name_for("det", cand.design_id))
        runs.append(([(t.number, t.params, t.values) for t in trials], table))
    assert runs[0][0] == runs[1][0]
    assert len(runs[0][0]) == 24
    t0, t1 = runs[0][1], runs[1][1]
    assert t0.trial_number.tolist() == t1.trial_number.tolist()
    assert t0.time_to_train_s.tolist() == t1.time_to_train_s.tolist()
    # A different seed draws a different sequence.
    other = tmp_path / "other.journal"
    run_optuna(pb, cand, storage=open_storage(other), study="det", settings=RunnerSettings(n_trials=24, seed=4),
               identity="i")
    assert [t.params for t in _trials(other, study_name_for("det", cand.design_id))] != [p for _, p, _ in runs[0][0]]


def test_constraints_are_recorded(tmp_path):
    pb, cand = problem([load_trial_constraint(max_pp_2)]), candidate()
    path = tmp_path / "c.journal"
    table = run_optuna(pb, cand, storage=open_storage(path), study="con", settings=RunnerSettings(n_trials=80, seed=0),
                       identity="i")
    trials = _trials(path, study_name_for("con", cand.design_id))
    assert len(trials) == 80 and all(t.state == TrialState.COMPLETE for t in trials)
    hbm = cand.system.gpu.hbm_bytes
    saw_memory = saw_user = False
    for t in trials:
        assert set(t.constraints) == {"memory_excess_gb", "model_infeasible", "max_pp_2"}
        r = t.user_attrs["result"]
        s = strategy_from_key(tuple(r["strategy"]))
        assert invalid_reason(s, pb.llm, pb.training, cand.n_gpus, cand.hb_domain_size) is None
        # The memory constraint is the HBM excess in GB, positive exactly when the model says it does not fit.
        if "does not fit" in r["reason"]:
            saw_memory = True
            assert t.constraints["memory_excess_gb"] > 0 and not r["feasible"]
            assert r["memory_per_gpu_bytes"] > hbm * 0.0  # the model still reports its memory
        elif t.constraints["model_infeasible"] == 0:
            # Reached the user constraint: its value is the hand formula pp - 2.
            assert t.constraints["max_pp_2"] == pytest.approx(s.pp - 2)
            if s.pp > 2:
                saw_user = True
                assert not r["feasible"] and r["reason"].startswith("constraint max_pp_2")
    assert saw_memory and saw_user
    for t in optuna.load_study(study_name=study_name_for("con", cand.design_id), storage=open_storage(path)).best_trials:
        assert all(v <= 0 for v in t.constraints.values())
    b = table.best
    assert b is not None and table.strategies.strategy(b).pp <= 2


def test_exhaustive_best_is_the_fastest_feasible():
    space = StrategySpace(microbatch_sizes=(1,), schedules=("1f1b",), recompute=("selective", "full"))
    pb, cand = problem([load_trial_constraint(max_pp_2)], space), candidate()
    t = run_exhaustive(pb, cand)
    assert len(t) == t.space_size > 0
    b = t.best
    s = t.strategies.strategy(b)
    assert s.pp <= 2
    # Independently: every strategy with pp <= 2 that the model finds feasible is no faster.
    from designer.perf.model import evaluate_system
    from designer.perf.records import Metrics

    best = min(m.time_to_train_s for s2 in t.strategies.strategies() if s2.pp <= 2
               for m in [evaluate_system(pb.llm, pb.training, s2, cand.system)] if isinstance(m, Metrics))
    assert t.time_to_train_s[b] == pytest.approx(best, rel=1e-9)


CHILD = """
import sys, importlib.util
spec = importlib.util.spec_from_file_location("trunner", sys.argv[1]); m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
from designer.search.runner import RunnerSettings, open_storage, run_optuna
run_optuna(m.problem(), m.candidate(), storage=open_storage(sys.argv[2]), study="kill",
           settings=RunnerSettings(n_trials=int(sys.argv[3]), seed=11), identity="i")
"""


def _complete_trials(path: Path, name: str) -> dict[int, tuple]:
    out = {}
    for t in _trials(path, name):
        if t.state == TrialState.COMPLETE:
            out[t.number] = (t.params, t.values, t.user_attrs["result"]["strategy"])
    return out


def test_resume_after_sigkill(tmp_path):
    n_trials = 300  # enough that the kill lands mid-run even on a fast machine
    path = tmp_path / "kill.journal"
    name = study_name_for("kill", candidate().design_id)
    proc = subprocess.Popen([sys.executable, "-c", CHILD, __file__, str(path), str(n_trials)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            time.sleep(0.02)
            if proc.poll() is not None:
                pytest.fail(f"child ended before it was killed: {proc.stdout.read().decode()[-2000:]}")
            if path.exists():
                try:
                    if len(_complete_trials(path, name)) >= 12:
                        break
                except (KeyError, ValueError):
                    continue  # the study is being created
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    before = _complete_trials(path, name)
    assert 12 <= len(before) < n_trials, "the kill must land mid-run"
    # Rerun: continues the same study.
    subprocess.run([sys.executable, "-c", CHILD, __file__, str(path), str(n_trials)], cwd=REPO, check=True, timeout=120)
    trials = _trials(path, name)
    after = _complete_trials(path, name)
    assert len(after) == n_trials  # finished trials counted toward n_trials: nothing missing, nothing extra
    assert not [t for t in trials if t.state == TrialState.RUNNING]  # the killed run's trial was taken over
    for number, rec in before.items():  # no finished trial lost or changed
        assert after[number] == rec
    numbers = [t.number for t in trials]
    assert len(numbers) == len(set(numbers))
    # No strategy was scored twice: reruns reuse what the storage already holds.
    evaluated = [tuple(t.user_attrs["result"]["strategy"]) for t in trials
                 if t.state == TrialState.COMPLETE and t.user_attrs["result"]["evaluated"]]
    assert len(evaluated) == len(set(evaluated))
    assert set(evaluated) == {tuple(v[2]) for v in after.values()}


def _foreign_running_trial(storage, name: str, owner: str) -> int:
    """A RUNNING trial that a worker on another machine (host `elsewhere`) took: its number."""
    st = optuna.load_study(study_name=name, storage=storage)
    st.enqueue_trial({}, user_attrs={"owner": owner})
    return st.ask().number


def test_a_dead_worker_on_another_machine_is_retried_through_the_journal(tmp_path, monkeypatch):
    """A journal has no Optuna heartbeats; a RUNNING trial whose owner (on another host, so no pid can be
    checked) stops beating is failed after 2 heartbeat intervals and retried with its parameters."""
    import designer.search.runner as runner

    monkeypatch.setattr(runner, "HEARTBEAT_S", 1)
    storage = open_storage(tmp_path / "j.journal")
    pb, cand = problem(), candidate()
    name = study_name_for("remote", cand.design_id)
    run_optuna(pb, cand, storage=storage, study="remote", settings=RunnerSettings(n_trials=8, seed=3), identity="i")
    dead = _foreign_running_trial(storage, name, "elsewhere:4242:1.0")
    t0 = time.monotonic()
    run_optuna(pb, cand, storage=storage, study="remote", settings=RunnerSettings(n_trials=12, seed=3), identity="i")
    waited = time.monotonic() - t0
    trials = {t.number: t for t in _trials(tmp_path / "j.journal", name)}
    assert trials[dead].state == TrialState.FAIL
    retries = [t for t in trials.values() if t.system_attrs.get("failed_trial") == dead]
    assert len(retries) == 1 and retries[0].state == TrialState.COMPLETE
    assert sum(t.state == TrialState.COMPLETE for t in trials.values()) == 12
    assert 2.0 <= waited < 30, waited  # not before the grace period (2 x 1 s), and not stuck


def test_a_trial_whose_taker_died_before_naming_itself_or_beating_is_retried_on_a_database(tmp_path, monkeypatch):
    """On a database storage Optuna's heartbeats fail a dead worker's trials, but only trials that have
    beaten. A worker killed between its ask (a fresh RUNNING trial, when another worker had popped its
    ticket) and naming itself leaves a RUNNING trial with no owner and no beat: it is failed after 2
    heartbeat intervals, as in a journal, and its retry completes, so the study ends with its budget
    instead of every worker waiting for that trial for ever."""
    import designer.search.runner as runner

    monkeypatch.setattr(runner, "HEARTBEAT_S", 1)
    storage = open_storage(f"sqlite:///{tmp_path / 'db.sqlite'}")
    pb, cand = problem(), candidate()
    name = study_name_for("ownerless", cand.design_id)
    run_optuna(pb, cand, storage=storage, study="ownerless", settings=RunnerSettings(n_trials=8, seed=3), identity="i")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "heartbeat is supposed to be used with Study.optimize": this ask never beats
        lost = optuna.load_study(study_name=name, storage=storage).ask().number  # no owner, no heartbeat
    t0 = time.monotonic()
    run_optuna(pb, cand, storage=storage, study="ownerless", settings=RunnerSettings(n_trials=12, seed=3),
               identity="i", stop=lambda: time.monotonic() - t0 > 60)
    waited = time.monotonic() - t0
    trials = {t.number: t for t in optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False)}
    assert trials[lost].state == TrialState.FAIL
    retries = [t for t in trials.values() if t.system_attrs.get("failed_trial") == lost]
    assert len(retries) == 1 and retries[0].state == TrialState.COMPLETE
    assert sum(t.state == TrialState.COMPLETE for t in trials.values()) == 12
    assert 2.0 <= waited < 30, waited  # not before the grace period (2 x 1 s), and not stuck


def test_a_live_worker_on_another_machine_that_beats_is_left_alone(tmp_path, monkeypatch):
    import threading

    import designer.search.runner as runner

    monkeypatch.setattr(runner, "HEARTBEAT_S", 1)
    storage = open_storage(tmp_path / "j.journal")
    pb, cand = problem(), candidate()
    name = study_name_for("remote", cand.design_id)
    run_optuna(pb, cand, storage=storage, study="remote", settings=RunnerSettings(n_trials=4, seed=3), identity="i")
    owner = "elsewhere:4243:1.0"
    live = _foreign_running_trial(storage, name, owner)
    st = optuna.load_study(study_name=name, storage=storage)

    def remote_worker() -> None:  # beats as runner.Heartbeat does for 5 s (> the 2 s grace), then ends its trial
        t_end = time.monotonic() + 5
        while time.monotonic() < t_end:
            st.set_user_attr(runner.BEAT_ATTR + owner, time.time_ns())
            time.sleep(0.3)
        st.tell(live, state=TrialState.PRUNED)

    th = threading.Thread(target=remote_worker)
    th.start()
    run_optuna(pb, cand, storage=storage, study="remote", settings=RunnerSettings(n_trials=6, seed=3), identity="i")
    th.join()
    trials = {t.number: t for t in _trials(tmp_path / "j.journal", name)}
    assert trials[live].state == TrialState.PRUNED  # never failed while its owner beat
    assert not [t for t in trials.values() if t.state == TrialState.FAIL]


@pytest.mark.parametrize("kind", ["journal", "database"])
def test_a_ticket_popped_by_a_worker_that_died_before_naming_itself_is_retried(tmp_path, kind):
    """_ask_owned enqueues a ticket named after this process; another worker can pop it and die before
    it renames it. The trial then stays RUNNING under the name of a live process that is not running
    it: between its batches this process fails such a trial and its retry completes, so the study
    ends with its budget instead of waiting for it for ever. On a database storage too, where no
    heartbeat ever names it: a PostgreSQL killed-worker run (three processes, 400 trials) was left at
    399 by exactly such a trial before this process failed its own orphans."""
    import designer.search.runner as runner

    url = tmp_path / "j.journal" if kind == "journal" else f"sqlite:///{tmp_path / 'db.sqlite'}"
    storage = open_storage(url)
    pb, cand = problem(), candidate()
    name = study_name_for("orphan", cand.design_id)
    run_optuna(pb, cand, storage=storage, study="orphan", settings=RunnerSettings(n_trials=4, seed=3), identity="i")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "heartbeat is supposed to be used with Study.optimize": this ask never beats
        orphan = _foreign_running_trial(storage, name, runner.owner_tag())  # popped, its popper gone
    time.sleep(runner.TAKE_OVER_AFTER_S)
    t0 = time.monotonic()
    run_optuna(pb, cand, storage=storage, study="orphan", settings=RunnerSettings(n_trials=6, seed=3), identity="i",
               stop=lambda: time.monotonic() - t0 > 60)
    assert time.monotonic() - t0 < 60
    trials = {t.number: t for t in optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False)}
    assert trials[orphan].state == TrialState.FAIL and trials[orphan].user_attrs["orphan"] is True
    retries = [t for t in trials.values() if t.system_attrs.get("failed_trial") == orphan]
    assert len(retries) == 1 and retries[0].state == TrialState.COMPLETE
    assert sum(t.state == TrialState.COMPLETE for t in trials.values()) == 6
    assert not [t for t in trials.values() if t.state == TrialState.RUNNING]


def test_waiting_leftovers_are_closed_once_the_budget_is_met():
    """A WAITING ticket left behind (a worker killed between its enqueue and its ask) is closed as a
    surplus once the study has its finished trials, whatever its number, not popped and left RUNNING."""
    from optuna.distributions import FloatDistribution
    from optuna.trial import create_trial

    import designer.search.runner as runner

    st = optuna.create_study(storage=optuna.storages.InMemoryStorage())
    st.enqueue_trial({}, user_attrs={"owner": "elsewhere:1:1.0"})  # trial 0, never popped
    for k in range(4):
        st.add_trial(create_trial(params={"x": float(k)}, distributions={"x": FloatDistribution(0, 9)}, value=float(k)))
    runner._drain_waiting(st)
    t0 = st.get_trials(deepcopy=False)[0]
    assert t0.state == TrialState.PRUNED and t0.user_attrs["surplus"] is True
    assert not st.get_trials(deepcopy=False, states=(TrialState.RUNNING, TrialState.WAITING))


@pytest.mark.parametrize("name", ["tpe", "random"])
def test_a_trial_draws_the_same_values_whether_asked_alone_or_in_a_batch(name):
    # PerTrialSeededSampler seeds each trial from (seed, its number): asking three trials before
    # suggesting any (a batch) must give each the values it gets when asked and told one at a time
    import optuna

    from designer.search.runner import PerTrialSeededSampler

    dist = optuna.distributions.CategoricalDistribution(list(range(1000)))

    def draw(batch: bool) -> list[int]:
        study = optuna.create_study(sampler=PerTrialSeededSampler(name, 7))
        if batch:
            trials = [study.ask() for _ in range(3)]
            vals = [t.suggest_categorical("x", dist.choices) for t in trials]
            for t in trials:
                study.tell(t, 0.0)
            return vals
        vals = []
        for _ in range(3):
            t = study.ask()
            vals.append(t.suggest_categorical("x", dist.choices))
            study.tell(t, 0.0)
        return vals

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    one, many = draw(False), draw(True)
    assert one == many and len(set(one)) > 1
