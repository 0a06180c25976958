"""The Rail-only study scripts studies/railonly/cost_power.py and failures.py: their --quick variants run
in-process and their CSVs match the committed reference results in results/railonly/*_quick.csv
(regenerate with `.venv/bin/python studies/railonly/<script>.py --quick` after a deliberate model
change); Table 2 is checked against the paper's published numbers (railonly.md §2)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "studies" / "railonly"
REFERENCE = REPO / "results" / "railonly"
# Every figure is deterministic (closed forms, binomial sums, HiGHS single-threaded with a fixed seed);
# the tolerance absorbs float formatting in the CSV only.
REL = 1e-9
VOLATILE = {"milp_solve_s", "solve_s"}  # wall times


def load(name: str):
    sys.path.insert(0, str(SCRIPTS))  # failures.py imports cost_power's catalog helper
    spec = importlib.util.spec_from_file_location(f"railonly_{name}", SCRIPTS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def same_frame(got: pd.DataFrame, want: pd.DataFrame) -> None:
    assert list(got.columns) == list(want.columns)
    assert len(got) == len(want)
    for col in got.columns:
        if col in VOLATILE:
            continue
        g, w = got[col], want[col]
        if pd.api.types.is_numeric_dtype(w) and pd.api.types.is_numeric_dtype(g):
            pd.testing.assert_series_equal(g.astype(float), w.astype(float), rtol=REL, atol=1e-9, check_names=False)
        else:
            assert g.fillna("").astype(str).tolist() == w.fillna("").astype(str).tolist(), col


@pytest.fixture(scope="module")
def cost_power(tmp_path_factory):
    out = tmp_path_factory.mktemp("cost_power")
    load("cost_power").main(quick=True, out_dir=out)
    return out


@pytest.fixture(scope="module")
def failures(tmp_path_factory):
    out = tmp_path_factory.mktemp("failures")
    load("failures").main(quick=True, out_dir=out)
    return out


@pytest.mark.parametrize("name", ["cost_power_table2", "cost_power_summary", "cost_power_extended", "cost_power_milp"])
def test_cost_power_quick_matches_reference(cost_power, name):
    same_frame(pd.read_csv(cost_power / f"{name}_quick.csv"), pd.read_csv(REFERENCE / f"{name}_quick.csv"))
    assert (cost_power / "cost_power_savings_quick.png").stat().st_size > 0


@pytest.mark.parametrize("name", ["failures_capacity", "failures_milp"])
def test_failures_quick_matches_reference(failures, name):
    same_frame(pd.read_csv(failures / f"{name}_quick.csv"), pd.read_csv(REFERENCE / f"{name}_quick.csv"))
    assert (failures / "failures_quick.png").stat().st_size > 0


def test_quick_rows_are_rows_of_the_full_results(cost_power, failures):
    """The committed full CSVs hold the quick rows with the same figures."""
    keys = {"cost_power_extended": ["price_set", "convention", "hb_domain_size", "radix", "n_gpus"],
            "cost_power_milp": ["price_set", "n_gpus", "hb_domain_size", "radix", "scope"],
            "failures_capacity": ["family", "hb_domain_size", "failure_rate_factor"]}
    for name, key in keys.items():
        folder = failures if name.startswith("failures") else cost_power
        quick = pd.read_csv(folder / f"{name}_quick.csv")
        full = pd.read_csv(REFERENCE / f"{name}.csv")
        merged = quick.merge(full, on=key, suffixes=("", "_full"), how="left", validate="one_to_one")
        for col in quick.columns:
            if col in key or col in VOLATILE or not pd.api.types.is_numeric_dtype(quick[col]):
                continue
            pd.testing.assert_series_equal(merged[col].astype(float), merged[f"{col}_full"].astype(float),
                                           rtol=REL, atol=1e-9, check_names=False)


# Wang et al. Table 2 (railonly.md §2), independently published: (N, R) -> fat-tree switches and
# transceivers, rail-only switches and transceivers, V1 saving (printed whole, truncated), v5 saving.
PAPER = {
    (32768, 32): (7168, 262144, 3072, 131072, 54, 55.38),
    (32768, 64): (2560, 196608, 1536, 131072, 37, 38.29),
    (32768, 128): (1280, 196608, 256, 65536, 75, 76.59),
    (32768, 256): (384, 131072, 128, 65536, 60, 62.06),
    (65536, 64): (5120, 393216, 3072, 262144, 37, 38.29),
    (65536, 128): (2560, 393216, 1536, 262144, 37, 38.0),
    (65536, 256): (1280, 393216, 256, 131072, 75, 77.0),
}


def test_table2_reproduces_the_paper(cost_power):
    t = pd.read_csv(cost_power / "cost_power_table2_quick.csv")
    assert len(t) == 14
    for _, r in t.iterrows():
        fsw, fx, rsw, rx, v1, v5 = PAPER[(r.n_gpus, r.radix)]
        assert (r.fat_tree_switches, r.fat_tree_transceivers, r.rail_only_switches, r.rail_only_transceivers) == (
            fsw, fx, rsw, rx)
        if r.price_set == "v1":
            assert v1 <= r.cost_saving_pct < v1 + 1  # V1 prints whole percent, truncated (54.55 -> 54)
        else:
            # v5 prints two decimals (or a whole percent for two rows): within half its last digit.
            tol = 0.005 if v5 != round(v5) else 0.5
            assert abs(r.cost_saving_pct - v5) <= tol
    v5 = t[t.price_set == "v5"]
    # v5 abstract: 38-77 % cost and 37-75 % power savings.
    assert round(v5.cost_saving_pct.min()) == 38 and round(v5.cost_saving_pct.max()) == 77
    assert round(v5.power_saving_pct.min()) == 37 and round(v5.power_saving_pct.max()) == 75
    base = t[(t.n_gpus == 32768) & (t.radix == 64)].set_index("price_set")
    assert base.loc["v5", "fat_tree_cost_usd"] == 152_829_952 and base.loc["v1", "fat_tree_cost_usd"] == 196_083_712
    assert base.loc["v5", "fat_tree_power_w"] == pytest.approx(4.7e6, rel=0.01)  # "about 4.7 MW"


def test_failures_milp_agrees_with_the_model(failures):
    m = pd.read_csv(failures / "failures_milp_quick.csv")
    fixed = m[m.case != "max job GPUs under a capex budget"]
    assert (fixed.milp_spare_domains == fixed.model_spare_domains).all()
    b = m[m.case == "max job GPUs under a capex budget"].sort_values("capex_budget_usd")
    assert (b.capex_usd <= b.capex_budget_usd).all()
    assert b.milp_spare_domains.is_monotonic_increasing and b.milp_spare_domains.nunique() > 1
