"""The quickstart study end to end (MILP -> search -> Pareto -> export), checked against the committed
reference result in results/quickstart/. Regenerate that after a deliberate model change with
`designer run studies/quickstart/study.yaml --out out/quickstart` and copying pareto.csv, designs.csv,
megatron_args.txt and pareto.png into results/quickstart/."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from designer.export import PARETO_COLUMNS
from designer.pareto import nondominated_mask
from designer.perf.collectives import load_collective_calibration
from designer.pipeline import read_pareto, run_study, summary_table
from designer.spec.study import load_study

REPO = Path(__file__).resolve().parents[2]
REFERENCE = REPO / "results" / "quickstart"
REL = 1e-6  # the model is deterministic; this only absorbs float formatting in the CSV


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    out = tmp_path_factory.mktemp("quickstart")
    return run_study(load_study(REPO / "studies" / "quickstart" / "study.yaml"), out_dir=out)


def test_outputs_written(result):
    for name in ("pareto.csv", "pareto.parquet", "trials.parquet", "designs.csv", "meta.json", "pareto.png",
                 "report.html", "megatron_args.txt"):
        assert (result.out_dir / name).is_file(), name
    meta = json.loads((result.out_dir / "meta.json").read_text())
    assert meta["seed"] == 0 and meta["milp"]["status"] == "optimal"
    assert set(meta["search"]["methods_run"]) <= {"exhaustive", "optuna"}
    assert meta["spec_hash"] == result.spec.spec_hash()
    # the run the time axis prices, defaults included, as the study file states it
    study = yaml.safe_load((REPO / "studies" / "quickstart" / "study.yaml").read_text())
    assert meta["training"]["sequence_length"] == study["training"]["sequence_length"]
    assert meta["training"]["grad_reduce_dtype"] == "bf16" and meta["training"]["moe_busiest_rank_load"] is None
    # the NCCL release and settings the collective model priced it with: the shipped release, NCCL's
    # defaults (one InfiniBand queue pair per connection, the NICs at nic_efficiency)
    assert meta["collectives"] == {"nccl_version": load_collective_calibration().nccl_version, "nccl_env": None,
                                   "nic_efficiency": load_collective_calibration().nic_efficiency}
    front = read_pareto(result.out_dir)
    assert list(front.columns) == list(PARETO_COLUMNS)
    assert len(summary_table(result)) == len(front)


def test_front_is_nondominated_and_consistent(result):
    p = result.pareto
    assert nondominated_mask(p[["capex_usd", "time_to_train_s"]].to_numpy()).all()
    # Every design's fastest feasible strategy is dominated by (or on) the front.
    d = result.designs.dropna(subset=["best_time_to_train_s"])
    for _, r in d.iterrows():
        assert ((p["capex_usd"] <= r["capex_usd"]) & (p["time_to_train_s"] <= r["best_time_to_train_s"] * (1 + 1e-12))).any()
    # tp * pp * dp * cp uses every GPU of the design; time = iteration time * iterations.
    assert (p["tp"] * p["pp"] * p["dp"] * p["cp"] == p["n_gpus"]).all()
    tr = result.spec.training
    iters = tr.total_tokens / (tr.sequence_length * tr.global_batch_sequences)
    np.testing.assert_allclose(p["time_to_train_s"], p["iteration_time_s"] * iters, rtol=1e-9)
    # trials: one row per cluster design, its best strategy the fastest of its strategies;
    # strategies: every strategy of every front design searched exhaustively
    t = result.trials
    assert len(t) == len(result.designs) and set(t["design_id"]) == set(result.designs["design_id"])
    st = result.strategies
    for _, r in result.designs[result.designs["search_method"] == "exhaustive"].iterrows():
        mine = st[st["design_id"] == r["design_id"]]
        if r["design_id"] in set(p["design_id"]):
            assert len(mine) == int(r["space_size"])
            on_disk = pd.read_parquet(result.out_dir / "strategies" / f"{r['design_id']}.parquet")
            assert len(on_disk) == len(mine) and set(on_disk["design_id"]) == {r["design_id"]}
            row = t[t["design_id"] == r["design_id"]].iloc[0]
            assert row["time_to_train_s"] == pytest.approx(mine.loc[mine["feasible"], "time_to_train_s"].min(), rel=1e-12)
        else:
            assert not len(mine)


def test_matches_committed_reference(result):
    ref = pd.read_csv(REFERENCE / "pareto.csv")
    got = pd.read_csv(result.out_dir / "pareto.csv")
    assert list(got.columns) == list(ref.columns)
    assert len(got) == len(ref)
    exact = ["design_id", "family", "platform", "n_gpus", "tp", "pp", "dp", "ep", "cp", "sequence_parallel",
             "microbatch_size", "schedule", "virtual_stages", "zero_stage", "recompute", "megatron_args"]
    pd.testing.assert_frame_equal(got[exact], ref[exact])
    for col in ("capex_usd", "power_w", "iteration_time_s", "time_to_train_s", "mfu", "memory_per_gpu_gb"):
        np.testing.assert_allclose(got[col], ref[col], rtol=REL, err_msg=col)
