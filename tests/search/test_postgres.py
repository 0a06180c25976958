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
