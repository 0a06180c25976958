"""The grouped cross-validation of the compute model (studies/calibration/cross_validate.py): how the
sources are dealt into folds, what the refit reports about parameters no training row moves, and the
committed per-row results (results/validation/cross_validation.csv) against the shipped calibration."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from designer.perf.model import load_perf_calibration

REPO = Path(__file__).resolve().parents[2]
STUDY = REPO / "studies" / "calibration"
COMMITTED = REPO / "results" / "validation" / "cross_validation.csv"


@pytest.fixture(scope="module")
def cv():
    sys.path.insert(0, str(STUDY))
    spec = importlib.util.spec_from_file_location("cross_validate_study", STUDY / "cross_validate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def cases(cv):
    return cv.compiled_cases(load_perf_calibration())


def test_every_source_is_held_out_once_in_folds_of_about_equal_size(cv, cases):
    counts = pd.Series([cv.source_of(c) for c in cases]).value_counts()
    for folds in (2, 4, 6):
        groups = cv.deal(cases, folds)
        dealt = [s for g in groups for s in g]
        assert sorted(dealt) == sorted(counts.index)  # each source in exactly one group
        sizes = [int(counts[g].sum()) for g in groups]
        # greedy to the smallest group: no group exceeds another by more than the largest source
        assert max(sizes) - min(sizes) <= counts.max()
        assert groups == cv.deal(cases, folds)  # deterministic


def test_a_parameter_no_training_row_depends_on_is_reported_and_kept(cv, cases):
    """Table 1 is A100 fp16 with the unfused softmax: no NVFP4 GEMM ceiling and no MoE host time can
    change its predictions, so fitted on Table 1 alone both keep their shipped values and are named;
    the Ampere element-wise bandwidth share does move Table 1 and is not named."""
    shipped = load_perf_calibration()
    table1 = [c for c in cases if c[0] == "table1"]
    assert len(table1) == 10
    params = [p for p in cv.PARAMS if p[0][0] in ("gemm.blackwell.nvfp4", "framework_per_expert_s", "hbm_efficiency")]
    assert len(params) == 3
    calib, unmoved = cv.fit(table1, shipped, params, 1)
    assert unmoved == {"gemm.blackwell.nvfp4", "framework_per_expert_s"}
    for (name, get, _, _), _ in params:
        if name in unmoved:
            assert get(calib) == get(shipped)


def test_the_committed_results_hold_every_row_once_with_the_shipped_errors(cv, cases):
    """The committed CSV covers every calibration row once, in the fold deal() gives its source, and
    its in-sample column is the shipped calibration's error (a refit that is not re-run shows here)."""
    frame = pd.read_csv(COMMITTED)
    assert sorted(frame.row) == sorted(c[1] for c in cases)
    folds = int(frame.fold.max()) + 1
    groups = cv.deal(cases, folds)
    for _, r in frame.iterrows():
        assert r.source in groups[r.fold]
    shipped = dict(zip((c[1] for c in cases), cv.case_errors(cases, load_perf_calibration())))
    # the CSV holds 5 significant digits (%.5g): half a unit of the fifth, relative
    np.testing.assert_allclose(frame.error_shipped, [shipped[r] for r in frame.row], rtol=5e-5, atol=1e-9)
    assert frame.error_held_out.notna().all()
    # the numbers a fold could not refit are named once per fold, and are fit_compute's parameters
    names = {p[0][0] for p in cv.PARAMS}
    for _, fold in frame.groupby("fold"):
        kept = set(fold.fold_kept_shipped.fillna(""))
        assert len(kept) == 1
        assert set(filter(None, kept.pop().split("; "))) <= names


def test_the_readme_shows_the_committed_results(cv):
    text = (REPO / "README.md").read_text()
    start, end = text.find(cv.README_START), text.find(cv.README_END)
    assert 0 <= start < end
    assert text[start:end + len(cv.README_END)] == cv.readme_block(pd.read_csv(COMMITTED))
