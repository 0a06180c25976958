"""Tables keep their stated column types whatever their values, in Parquet and CSV alike, and the
large tables come in the formats the study asks for."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import yaml

from designer.export import COLUMN_TYPES, typed
from designer.pipeline import run_study
from designer.spec.study import load_study

ROOT = Path(__file__).resolve().parents[1]


def test_whole_floats_stay_floats_and_missing_ints_stay_ints(tmp_path):
    df = pd.DataFrame({"oversubscription": [1, 3], "ep_s": [0, 0], "memory_other_gb": [2, 4], "tp": [8, None],
                       "feasible": [True, None], "design_id": ["a", "b"], "user_constraint": [0.0, 1.0]})
    from designer.export import _csv, _parquet

    _csv(df, tmp_path / "t.csv")
    _parquet(df, tmp_path / "t.parquet")
    for back in (pd.read_csv(tmp_path / "t.csv"), pd.read_parquet(tmp_path / "t.parquet")):
        assert back["oversubscription"].dtype == "float64" and back["ep_s"].dtype == "float64"
        assert back["memory_other_gb"].dtype == "float64"
        assert typed(back)["tp"].dtype == "Int64" and typed(back)["tp"].isna().sum() == 1
    assert pd.read_parquet(tmp_path / "t.parquet")["tp"].dtype == "Int64"  # the type travels in the file


def test_formats_and_stated_types_of_a_run(tmp_path):
    data = yaml.safe_load((ROOT / "studies/quickstart/study.yaml").read_text())
    data["network"]["gpus"] = {"min": 256, "max": 512, "multiple_of": 256}
    data["output"] = {"plots": False, "formats": ["parquet", "csv"], "strategies": "all"}
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(data))
    res = run_study(load_study(p), out_dir=tmp_path / "o")
    out = res.out_dir
    assert {"trials.parquet", "trials.csv", "pareto.csv", "pareto.parquet"} <= set(res.files)
    for stem in ("trials", "pareto"):
        pq, csv = pd.read_parquet(out / f"{stem}.parquet"), typed(pd.read_csv(out / f"{stem}.csv"))
        assert list(pq.columns) == list(csv.columns) and len(pq) == len(csv)
        for c, t in COLUMN_TYPES.items():
            if c in pq.columns:
                assert str(pq[c].dtype) == t, (stem, c, pq[c].dtype)
        text = [c for c in pq.columns if str(pq[c].dtype) == "string"]  # CSV reads an empty text as missing
        pq[text], csv[text] = pq[text].fillna(""), csv[text].fillna("")
        pd.testing.assert_frame_equal(pq, csv, check_dtype=False, rtol=1e-9)
    n_designs = len(res.designs)
    assert sum(f.startswith("strategies/") and f.endswith(".parquet") for f in res.files) == n_designs
    assert sum(f.startswith("strategies/") and f.endswith(".csv") for f in res.files) == n_designs


def test_a_tier_a_design_lacks_has_no_switches_not_a_missing_count():
    # a rail-only design (no spine) beside a rail-optimized one, and a MILP-infeasible point (no design)
    df = pd.DataFrame({"family": ["rail-only", "rail-optimized", None], "switch_count": [2, 6, None],
                       "switches_leaf": [2, 4, None], "switches_spine": [None, 2, None]})
    t = typed(df)
    assert t["switches_spine"].tolist()[:2] == [0, 2] and pd.isna(t["switches_spine"].iloc[2])
    assert t["switches_spine"].dtype == "Int64" and pd.isna(t["switches_leaf"].iloc[2])
