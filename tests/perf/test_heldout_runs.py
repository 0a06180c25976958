"""Held-out check: Megatron-Bridge performance-summary rows that no fit reads
(tests/perf/data/megatron_bridge_heldout.yaml: the 26.02 to 26.04.01 containers' pre-training rows
that training-runs-modern.md does not copy, each run with the recipe its release's code states).

They are scored exactly as the calibration rows are (tests/perf/modern_runs.py: the same systems,
framework defaults and harness rules) and print per set with `pytest -s`. The bounds are what the
shipped calibration reaches on them (a regression fails them), not targets: the calibration never
saw these rows, so they measure how the model carries to releases, systems and shapes it was not
fitted on.
"""

from __future__ import annotations

import functools

import pytest

from tests.perf import modern_runs

BOUNDS = {  # set: (MAPE bound, share of rows within 10%, at least) -- reached: 4.8%/91%, 3.0%/100%, 14.4%/55%
    "dense-3d": (0.049, 0.90),
    "dense-fsdp": (0.031, 1.00),
    "moe": (0.145, 0.55),
}


@functools.lru_cache(maxsize=1)
def _errors():
    return modern_runs.errors(source=modern_runs.heldout_rows)


def test_every_heldout_configuration_is_accepted():
    # errors() raises if the model rejects a row for anything but memory
    assert len(_errors()) == sum(1 for r in modern_runs.heldout_rows() if r["use"])


@pytest.mark.parametrize("name", list(BOUNDS))
def test_heldout_rows_per_set(name):
    errs = [e for e in _errors() if e.set == name]
    print("\n" + modern_runs.table(errs))
    mape_bound, within_bound = BOUNDS[name]
    mape = sum(abs(e.error) for e in errs) / len(errs)
    within = sum(abs(e.error) <= 0.10 for e in errs) / len(errs)
    assert mape <= mape_bound, f"{name}: MAPE {100 * mape:.1f}% > {100 * mape_bound:.0f}%"
    assert within >= within_bound, f"{name}: {100 * within:.0f}% of rows within 10%"


def test_heldout_rows_are_no_calibration_rows():
    # a held-out row is neither a calibration row's id nor the same published run under another id
    # (the same release, model, system, precision and shape)
    def key(r):
        return (r["model"], r["gpu"], r["gpus"], r["precision"], r["seq"], r["gbs"], r["mbs"], r["tp"], r["pp"],
                r["cp"], r["vp"], r["ep"], r["measured"]["tokens_per_s_per_gpu"])

    held = modern_runs.heldout_rows()
    assert len({r["id"] for r in held}) == len(held)
    assert not {r["id"] for r in held} & {r["id"] for r in modern_runs.rows()}
    assert not {key(r) for r in held} & {key(r) for r in modern_runs.rows()}


def test_heldout_rows_are_whole_layouts_with_their_releases_recipe():
    recipes = modern_runs.heldout()["recipes"]
    refs = {"26.02": "v0.3.0", "26.02.01": "v0.3.1", "26.04": "26.04-alpha", "26.04.01": "v0.4.2"}
    for r in modern_runs.heldout_rows():
        assert r["tp"] * r["pp"] * r["cp"] * r["dp"] == r["gpus"], r["id"]
        assert r["id"].startswith("MB" + r["release"].replace(".", "") + "-"), r["id"]
        assert r["ref"] == refs[r["release"]] and r["nccl_version"] == "2.29", r["id"]
        rec = recipes[r["id"]]
        assert rec["source"].startswith(r["ref"]) and rec["recompute"] is not None, r["id"]
        if r["set"] == "moe":
            assert rec["moe_dispatcher"] in ("alltoall", "allgather", "hybridep", "deepep"), r["id"]
