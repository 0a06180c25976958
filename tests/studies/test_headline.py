"""The Rail-only headline study (GPT-1T on 32,768 GPUs across families) end to end, against the
committed front in results/railonly/headline/, and the paper's qualitative claims on it."""

from pathlib import Path

import pandas as pd
import pytest

from designer.pipeline import run_study
from designer.spec.study import load_study

REPO = Path(__file__).resolve().parents[2]
REFERENCE = REPO / "results" / "railonly" / "headline"


@pytest.fixture(scope="module")
def fronts(tmp_path_factory) -> pd.DataFrame:
    out = tmp_path_factory.mktemp("headline")
    run_study(load_study(REPO / "studies" / "railonly" / "headline.yaml"), out_dir=out)
    return pd.read_csv(out / "pareto_by_family.csv")


def test_matches_committed_front(fronts):
    ref = pd.read_csv(REFERENCE / "pareto_by_family.csv")
    assert list(fronts.design_id) == list(ref.design_id)
    for col in ("capex_usd", "power_w", "time_to_train_s", "mfu"):
        assert fronts[col].to_numpy() == pytest.approx(ref[col].to_numpy(), rel=1e-6), col


def test_rail_aligned_strategies_run_as_fast_on_rail_only(fronts):
    # railonly.md §1: with TP inside the HB domain and DP/PP on rails, rail-only trains as fast as
    # the rail-optimized fat-tree; its saving is all in the network.
    by = fronts.set_index("design_id")
    for k in ("k256",):
        ro, opt = by.loc[f"{k}_rail_only"], by.loc[f"{k}_rail_optimized"]
        assert ro.time_to_train_s == pytest.approx(opt.time_to_train_s, rel=1e-9)
        assert ro.network_capex_usd < opt.network_capex_usd


def test_k8_rail_only_saves_nothing(fronts):
    # railonly.md §2: when N/K needs as many tiers as N (N = 32,768, K = 8, R = 64), rail-only saves nothing.
    ref = fronts[fronts.hb_domain_size == 8].set_index("family")
    assert ref.loc["rail-only"].network_capex_usd == pytest.approx(ref.loc["rail-optimized"].network_capex_usd, rel=1e-9)
