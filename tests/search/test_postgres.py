"""Several workers on one PostgreSQL storage share a study: trials are shared, none is duplicated, and
the front equals a single-worker run with the same seed and budget (and the exhaustive front).

Needs a server: CI runs `.ci/postgres.sh` and exports DESIGNER_TEST_POSTGRES_URL."""

from __future__ import annotations

import os
import uuid

import optuna
import pytest
from optuna.trial import TrialState

from designer.pipeline import run_study
from designer.search.runner import open_storage, study_name_for
from designer.spec.study import StudySpec

URL = os.environ.get("DESIGNER_TEST_POSTGRES_URL")
pytestmark = pytest.mark.skipif(
    not URL, reason="no PostgreSQL server: set DESIGNER_TEST_POSTGRES_URL (bash .ci/postgres.sh prints one)")


def spec(name: str, method: str) -> StudySpec:
    return StudySpec.model_validate({
        "name": name,
        "model": "llama3-8b",
        "training": {"sequence_length": 8192, "global_batch_sequences": 512, "total_tokens": 1e11},
        "network": {
            "choices": {"platforms": ["hgx_h100_8"], "nics": [{"id": "cx7_400g"}], "switches": [{"id": "qm9790"}],
                        "families": ["rail-optimized"]},
            "gpus": {"min": 256, "max": 512},
            "objective": {"kind": "frontier", "frontier": {"vary": "n_gpus", "levels": [256, 512], "optimize": "min_cost"}},
        },
        "strategy_space": {"tp": [1, 2, 4], "pp": [1, 2], "microbatch_sizes": [1, 2], "schedules": ["1f1b"],
                           "recompute": ["none"],
                           "sequence_parallel": [True]},
        "search": {"method": method, "n_trials": 30, "seed": 5},
        "output": {"strategies": "all"},
    })


def test_two_workers_share_one_postgres_study(tmp_path):
    tag = uuid.uuid4().hex[:8]
    multi = run_study(spec(f"pg-multi-{tag}", "optuna"), out_dir=tmp_path / "multi", workers=3, storage=URL)
    storage = open_storage(URL)
    owners = set()
    for design_id in multi.designs["design_id"]:
        st = optuna.load_study(study_name=study_name_for(f"pg-multi-{tag}", design_id), storage=storage)
        trials = st.get_trials(deepcopy=False)
        done = [t for t in trials if t.state == TrialState.COMPLETE]
        # Trial numbers order the workers' asks: exactly the budget is finished, surplus tickets are closed
        # unevaluated, nothing is left running or failed.
        assert len(done) == 30
        assert not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.FAIL, TrialState.WAITING)]
        for t in trials:
            if t.state == TrialState.PRUNED:
                assert t.user_attrs.get("surplus") is True and not t.params
        numbers = [t.number for t in trials]
        assert len(numbers) == len(set(numbers)) == len(trials)
        owners |= {t.user_attrs["owner"].split(":")[1] for t in done}
        # The strategies table holds every finished trial of every worker.
        n_rows = int((multi.strategies["design_id"] == design_id).sum())
        assert n_rows == len(done)
    assert len(owners) >= 2, "the trials must come from more than one worker process"

    single = run_study(spec(f"pg-single-{tag}", "optuna"), out_dir=tmp_path / "single", workers=1, storage=URL)
    exact = run_study(spec(f"pg-exact-{tag}", "exhaustive"), out_dir=tmp_path / "exact")
    cols = ["n_gpus", "capex_usd", "time_to_train_s", "tp", "pp", "dp", "microbatch_size", "recompute"]
    a = multi.pareto[cols].reset_index(drop=True)
    b = single.pareto[cols].reset_index(drop=True)
    c = exact.pareto[cols].reset_index(drop=True)
    assert a.equals(b)
    assert a.equals(c)


@pytest.mark.slow
def test_a_killed_worker_is_recovered_by_heartbeats_and_nobody_spins(tmp_path):
    """Three processes on one PostgreSQL study (the run and two workers); one worker is killed with
    SIGKILL while it holds running trials. Its trials stop beating, the others fail them after the
    grace period (2 heartbeat intervals) and retry them (RetryHeartbeatStaleTrialCallback), and the study
    ends with exactly its budget; waiting workers sleep instead of making surplus trials."""
    import json as _json
    import signal
    import subprocess
    import sys
    import time

    import yaml

    from designer.search.runner import HEARTBEAT_S

    tag = uuid.uuid4().hex[:8]
    name = f"pg-kill-{tag}"
    s = spec(name, "optuna").model_dump(mode="json")
    s["search"]["n_trials"] = 400
    s["output"] = {"plots": False}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(_json.loads(_json.dumps(s))))
    cmd = [sys.executable, "-m", "designer.cli"]
    main = subprocess.Popen([*cmd, "run", str(path), "--out", str(tmp_path / "out"), "--storage", URL],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    workers = [subprocess.Popen([*cmd, "worker", str(path), "--storage", URL], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True) for _ in range(2)]
    storage = open_storage(URL)
    victim = workers[0]
    t0 = time.monotonic()
    killed_at = None
    while time.monotonic() - t0 < 120:
        names = [n for n in optuna.get_all_study_names(storage) if n.startswith(name + "/") and "__manifest__" not in n]
        running = []
        for n in names:
            st = optuna.load_study(study_name=n, storage=storage)
            running += [(n, t.number) for t in st.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
                        if t.user_attrs.get("owner", "").split(":")[1:2] == [str(victim.pid)]]
        if running:
            os.killpg(victim.pid, signal.SIGKILL)
            killed_at = time.monotonic()
            held = set(running)
            break
        time.sleep(0.02)
    assert killed_at is not None, "the worker never held a running trial"
    victim.wait()

    def state(n: str, number: int) -> TrialState:
        st = optuna.load_study(study_name=n, storage=storage)
        return next(t.state for t in st.get_trials(deepcopy=False) if t.number == number)

    # recovery: every trial the dead worker held stops being RUNNING (failed, to be retried)
    recovered_s = None
    while time.monotonic() - killed_at < 120:
        if all(state(n, k) != TrialState.RUNNING for n, k in held):
            recovered_s = time.monotonic() - killed_at
            break
        time.sleep(0.1)
    assert recovered_s is not None, "the dead worker's trials stayed RUNNING"
    rc = main.wait(timeout=600)
    for w in workers[1:]:
        w.wait(timeout=120)
    assert rc == 0, main.stderr.read()
    failed = retried = surplus = 0
    victims = 0
    for n in [n for n in optuna.get_all_study_names(storage) if n.startswith(name + "/") and "__manifest__" not in n]:
        trials = optuna.load_study(study_name=n, storage=storage).get_trials(deepcopy=False)
        done = [t for t in trials if t.state == TrialState.COMPLETE]
        assert len(done) == 400, (n, len(done))
        assert not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
        failed += sum(t.state == TrialState.FAIL for t in trials)
        retried += sum("failed_trial" in t.system_attrs for t in done)
        surplus += sum(t.user_attrs.get("surplus") is True for t in trials)
        for t in trials:
            if t.state != TrialState.FAIL:
                continue
            # only the dead worker's trials were failed (it may have taken one more between the
            # snapshot and the kill), or a live process's ticket it popped and died holding before
            # naming itself, which that process failed as an orphan: never a trial a live worker ran
            assert (t.user_attrs.get("owner", "").split(":")[1:2] == [str(victim.pid)]
                    or t.user_attrs.get("orphan") is True), t.user_attrs
            victims += 1
            # each came back as one finished retry, with the parameters it had drawn (a trial
            # killed before drawing any draws them in its retry)
            again = [r for r in done if r.system_attrs.get("failed_trial") == t.number]
            assert len(again) == 1
            assert all(again[0].params[k] == v for k, v in t.params.items())
        for k in [k for m, k in held if m == n]:  # what it held at the kill: failed, or finished just before
            assert next(t.state for t in trials if t.number == k) in (TrialState.FAIL, TrialState.COMPLETE,
                                                                      TrialState.PRUNED)
    assert retried == failed == victims
    assert surplus < 100, surplus  # nobody spun making empty trials while waiting
    # a worker that died on this host is found at once (its process is gone); on another machine
    # Optuna's heartbeats find it after the grace period: either way within two heartbeat intervals
    assert recovered_s < 2 * HEARTBEAT_S + 5, recovered_s
    print(f"killed worker: held {len(held)} running trials at the kill; {failed} of its trials failed and retried; "
          f"recovered in {recovered_s:.1f} s, {surplus} surplus tickets")
