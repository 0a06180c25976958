"""A study's `costs` and `reliability` sections in a run: every design carries its cost lines and its
goodput, the front and the goal may use them, and bad sections get one line.

Expected values are hand calculations from the declared lines (written out below) and Daly's
expected wall time (Daly 2006, FGCS 22(3): T_w = M e^{R/M} (e^{(tau+delta)/M} - 1) T_s / tau)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from pydantic import ValidationError

from designer.pipeline import run_study
from designer.spec.study import StudySpec

TINY = {"name": "tiny", "layers": 4, "hidden_size": 1024, "ffn_size": 4096, "heads": 16, "kv_heads": 16,
        "vocab_size": 32000}
COSTS = {"storage": {"usd_per_gpu": 1000.0, "write_gb_per_s": 100.0}, "frontend_network": {"usd_per_gpu": 500.0},
         "facility": {"usd_per_mw_it": 10e6, "liquid_cooling_premium": 0.1, "depreciation_years": 15},
         "electricity": {"usd_per_kwh": 0.10}, "pue": 1.25, "depreciation_years": 5}
YEAR_S = 365.25 * 86400


def _spec(**over) -> StudySpec:
    data = {
        "name": "economics-test", "model": TINY,
        "training": {"sequence_length": 2048, "global_batch_sequences": 64, "total_tokens": 1e10},
        "network": {"choices": {"platforms": ["hgx_h100_8"], "nics": [{"id": "cx7_400g", "nics_per_gpu": [1]}],
                                "switches": [{"id": "qm9790"}], "families": ["rail-optimized", "rail-only"]},
                    "gpus": {"min": 64, "max": 256, "multiple_of": 64}},
        "strategy_space": {"microbatch_sizes": [1, 2], "recompute": ["none"], "zero_stages": [1]},
        "output": {"plots": False},
        "costs": COSTS, "reliability": {"detect_s": 60, "restart_s": 240},
    }
    data.update(over)
    return StudySpec.model_validate(data)


@pytest.fixture(scope="module")
def front(tmp_path_factory):
    spec = _spec(objectives=["tco_usd", "time_to_train_with_failures_s"])
    out = tmp_path_factory.mktemp("econ")
    run_study(spec, out_dir=out)
    return pd.read_parquet(out / "pareto.parquet"), pd.read_parquet(out / "trials.parquet")


def test_cost_lines_by_hand(front):
    pareto, _ = front
    for _, r in pareto.iterrows():
        n, capex, it_w = r["n_gpus"], r["capex_usd"], r["power_w"]
        # 8-GPU HGX nodes count as air-cooled: no liquid premium; the declared PUE 1.25
        storage, frontend, facility = 1000.0 * n, 500.0 * n, 10e6 * it_w / 1e6
        assert r["capex_total_usd"] == pytest.approx(capex + storage + frontend + facility, rel=1e-12)
        assert r["facility_power_w"] == pytest.approx(1.25 * it_w, rel=1e-12)
        wall = r["time_to_train_with_failures_s"]
        energy = 1.25 * it_w / 1000 * wall / 3600 * 0.10  # kW x h x $/kWh
        amortized = (capex + storage + frontend) / (5 * YEAR_S) * wall + facility / (15 * YEAR_S) * wall
        assert r["energy_cost_usd"] == pytest.approx(energy, rel=1e-9)
        assert r["tco_usd"] == pytest.approx(amortized + energy, rel=1e-9)
        assert r["usd_per_million_tokens"] == pytest.approx(r["tco_usd"] / 1e4, rel=1e-12)  # 1e10 tokens


def test_goodput_follows_daly(front):
    pareto, _ = front
    for _, r in pareto.iterrows():
        m = 86400 / r["interruptions_per_day"]
        # checkpoint: 14 bytes per parameter at 100 GB/s; R = detect + restart + reload (the read time)
        n_params = r["checkpoint_write_s"] * 100e9 / 14
        assert n_params > 0
        delta, tau = r["checkpoint_write_s"], r["checkpoint_interval_s"]
        restart = 60 + 240 + delta
        assert r["restart_s"] == pytest.approx(restart, rel=1e-12)
        t_s = r["time_to_train_s"]
        want = m * math.exp(restart / m) * (math.exp((tau + delta) / m) - 1) * t_s / tau
        # no spares: the job restarts at once on what is left, short of the failed units (degraded)
        # for their repair time, so the wall time is at least Daly's
        assert r["time_to_train_with_failures_s"] >= want * (1 - 1e-9)
        assert r["time_to_train_with_failures_s"] == pytest.approx(t_s / r["goodput_fraction"], rel=1e-12)


def test_front_is_nondominated_in_the_declared_objectives(front):
    pareto, trials = front
    ok = trials[trials["feasible"]]
    pts = ok[["tco_usd", "time_to_train_with_failures_s"]].to_numpy()
    # brute force: a design is on the front when no other is at least as good in both and better in one
    keep = [not np.any(np.all(pts <= p, axis=1) & np.any(pts < p, axis=1)) for p in pts]
    # designs of equal cost and time (a 64-GPU cluster is one leaf in both families) count once
    want = sorted({tuple(x) for x in pts[keep]})
    assert sorted(map(tuple, pareto[["tco_usd", "time_to_train_with_failures_s"]].to_numpy())) == want


def test_goal_on_facility_power(tmp_path):
    spec = _spec(goal={"minimize": "time_to_train_with_failures_s",
                       "subject_to": [{"metric": "facility_power_w", "sense": "<=", "rhs": 150e3}]})
    res = run_study(spec, out_dir=tmp_path)
    ans = res.goal
    assert ans is not None and ans.met
    trials = pd.read_parquet(tmp_path / "trials.parquet")
    ok = trials[trials["feasible"] & (trials["facility_power_w"] <= 150e3)]
    best = ok["time_to_train_with_failures_s"].min()
    assert ans.answer.metric("time_to_train_with_failures_s") == pytest.approx(best, rel=1e-12)
    assert ans.answer.metric("facility_power_w") <= 150e3
    # the facility limit binds: the fastest design overall draws more than it at the meter
    assert trials.loc[trials["time_to_train_with_failures_s"].idxmin(), "facility_power_w"] > 150e3


@pytest.mark.parametrize("over, field", [
    ({"costs": None, "objectives": ["tco_usd", "time_to_train_s"]}, "tco_usd needs a 'costs' section"),
    ({"reliability": None, "goal": {"minimize": "time_to_train_with_failures_s"}},
     "time_to_train_with_failures_s needs a 'reliability' section"),
    ({"costs": {"pue": 0.9}}, "pue"),
    ({"costs": None, "reliability": {}}, "reliability.checkpoint_write_gb_per_s"),
])
def test_bad_sections_get_one_line(over, field):
    with pytest.raises((ValidationError, ValueError)) as err:
        _spec(**over)
    assert field in str(err.value)


def test_robustness_section_writes_each_candidates_chances(tmp_path):
    net = {"choices": {"platforms": ["hgx_h100_8", "hgx_b200_8"], "nics": [{"id": "cx7_400g", "nics_per_gpu": [1]}],
                       "switches": [{"id": "qm9790"}], "families": ["rail-optimized"]},
           "gpus": {"min": 64, "max": 128, "multiple_of": 64}}
    spec = _spec(network=net, costs=None, reliability=None, robustness={"samples": 2000, "seed": 3})
    run_study(spec, out_dir=tmp_path)
    rb = pd.read_csv(tmp_path / "robustness.csv")
    trials = pd.read_parquet(tmp_path / "trials.parquet")
    import json
    meta = json.loads((tmp_path / "meta.json").read_text())["robustness"]
    assert meta["n_candidates"] + meta["n_left_out_dominated_everywhere"] == int(trials["feasible"].sum())
    assert "hgx_b200_8" in meta["price_ids"]  # the catalog's range on the HGX B200 price is drawn
    assert rb["p_on_front"].between(0, 1).all()
    # the fastest design is on every draw's front (nothing is faster), whatever the prices
    assert rb.loc[rb["time_to_train_s"].idxmin(), "p_on_front"] == 1.0
    # H100 nodes carry no price range here: the cheapest design, an H100 one, is never undercut
    cheapest = rb.loc[rb["capex_usd"].idxmin()]
    assert cheapest["platform"] == "hgx_h100_8" and cheapest["p_on_front"] == 1.0
    assert (tmp_path / "robustness.png").exists() is False  # plots are off in these studies
    # the draws reprice the IT capex: the front they test is named, and no note is needed for it here
    assert meta["front"] == "capex_usd vs time_to_train_s" and "note" not in meta


def test_robustness_says_which_front_it_tests_under_a_tco_objective(tmp_path):
    net = {"choices": {"platforms": ["hgx_h100_8", "hgx_b200_8"], "nics": [{"id": "cx7_400g", "nics_per_gpu": [1]}],
                       "switches": [{"id": "qm9790"}], "families": ["rail-optimized"]},
           "gpus": {"min": 64, "max": 128, "multiple_of": 64}}
    spec = _spec(network=net, reliability=None, robustness={"samples": 200, "seed": 3},
                 objectives=["tco_usd", "time_to_train_s"])
    run_study(spec, out_dir=tmp_path)
    import json
    meta = json.loads((tmp_path / "meta.json").read_text())["robustness"]
    assert meta["front"] == "capex_usd vs time_to_train_s"
    assert "not the study's (tco_usd, time_to_train_s) one" in meta["note"]


def test_spares_are_a_design_knob_that_trades_capex_for_goodput(tmp_path):
    spec = _spec(reliability={"detect_s": 60, "restart_s": 240, "try_spares": [False, True],
                              "checkpoint_write_gb_per_s": 100},
                 objectives=["capex_usd", "time_to_train_with_failures_s"])
    run_study(spec, out_dir=tmp_path)
    trials = pd.read_parquet(tmp_path / "trials.parquet")
    ok = trials[trials["feasible"]]
    # 2 families x 4 counts, each without and with spares
    assert len(ok) == 16
    for (fam, n), g in ok.groupby(["family", "job_gpus"]):
        none, spare = g[g["spare_domains"] == 0], g[g["spare_domains"] > 0]
        assert len(none) == 1 and len(spare) == 1, (fam, n)
        none, spare = none.iloc[0], spare.iloc[0]
        # the same job on more domains: dearer, and the spares' instant restart beats the degraded one
        assert spare["n_gpus"] == n + spare["spare_domains"] * 8
        assert spare["capex_usd"] > none["capex_usd"]
        assert spare["goodput_fraction"] > none["goodput_fraction"]
        assert spare["time_to_train_s"] == pytest.approx(none["time_to_train_s"], rel=1e-12)


def test_report_hover_shows_the_declared_lines(front):
    from designer.report_page import hover_text

    pareto, _ = front
    r = pareto.iloc[0]
    text = hover_text(r)
    assert f"total capex ${r['capex_total_usd'] / 1e6:,.2f}M" in text
    assert f"{r['facility_power_w'] / 1e6:,.2f} MW at the facility meter (PUE 1.25)" in text
    assert f"goodput {r['goodput_fraction']:.3f}" in text and "TCO of the run" in text


def test_milp_budgets_at_the_facility_meter_and_on_total_capex():
    from designer.network.api import solve_network
    from designer.spec.network_study import NetworkStudy

    def net(budgets, terms=()):
        return NetworkStudy.model_validate({
            "choices": {"platforms": ["hgx_h100_8"], "nics": [{"id": "cx7_400g"}], "switches": [{"id": "qm9790"}],
                        "families": ["rail-optimized"]},
            "gpus": {"min": 64, "max": 4096}, "objective": {"kind": "max_gpus"}, "budgets": budgets,
            "cost_terms": list(terms)})

    # by hand: facility power = PUE x IT power, so a 1.25 MW facility budget at PUE 1.25 is a 1 MW IT
    # budget; capex_total = 1.05 x capex (a 5 % front-end share) makes a $63M total budget a $60M one
    terms = [{"platform": "hgx_h100_8", "capex_total_per_capex_usd": 1.05, "capex_total_per_it_w": 0.0,
              "capex_total_per_gpu": 0.0, "pue": 1.25}]
    it = solve_network(net({"power_w": 1.0e6})).design
    meter = solve_network(net({"facility_power_w": 1.25e6}, terms)).design
    assert (meter.n_gpus, meter.capex_usd) == (it.n_gpus, it.capex_usd)
    it = solve_network(net({"capex_usd": 60e6})).design
    total = solve_network(net({"capex_total_usd": 63e6}, terms)).design
    assert (total.n_gpus, total.capex_usd) == (it.n_gpus, it.capex_usd)
    with pytest.raises(Exception, match="capex_total_usd needs the study's 'costs' section"):
        solve_network(net({"capex_total_usd": 63e6}))


def test_a_facility_budget_without_costs_is_one_line():
    net = {"choices": {"platforms": ["hgx_h100_8"], "nics": [{"id": "cx7_400g", "nics_per_gpu": [1]}],
                       "switches": [{"id": "qm9790"}], "families": ["rail-optimized"]},
           "gpus": {"min": 64, "max": 256, "multiple_of": 64}, "budgets": {"facility_power_w": 1e6}}
    with pytest.raises(ValidationError, match="network.budgets.facility_power_w: needs a 'costs' section"):
        _spec(network=net, costs=None, reliability=None)


def test_designs_csv_carries_each_designs_cost_lines(tmp_path):
    run_study(_spec(), out_dir=tmp_path)
    designs = pd.read_csv(tmp_path / "designs.csv")
    for _, r in designs.iterrows():
        # as test_cost_lines_by_hand: $1,000 + $500 per GPU, $10M per MW of IT load, PUE 1.25
        want = r["capex_usd"] + 1500.0 * r["n_gpus"] + 10.0 * r["power_w"]
        assert r["capex_total_usd"] == pytest.approx(want, rel=1e-9)
        assert r["facility_power_w"] == pytest.approx(1.25 * r["power_w"], rel=1e-9)
        assert 0 < r["goodput_fraction"] < 1


def test_report_table_has_the_declared_columns(front):
    from designer.report_page import FrontSeries, front_table

    pareto, _ = front
    html_text = front_table([FrontSeries("Pareto front", pareto)])
    for header in ("total capex (M USD)", "facility power (MW)", "TCO of the run (M USD)", "goodput"):
        assert f">{header}</th>" in html_text
    plain = front_table([FrontSeries("Pareto front", pareto.drop(columns=["capex_total_usd"]))])
    assert "total capex (M USD)" not in plain


@pytest.mark.parametrize("cooling, pue", [(None, 1.4), ("liquid", 1.15)])
def test_pue_follows_the_floors_cooling(tmp_path, cooling, pue):
    # no PUE declared: the shipped defaults, 1.4 for air-cooled halls and 1.15 for liquid-cooled ones
    # (designer/data/cost_lines.yaml: Uptime 2024, SemiAnalysis); HGX H100 nodes are air-cooled unless the
    # study's floor says liquid
    net = {"choices": {"platforms": ["hgx_h100_8"], "nics": [{"id": "cx7_400g", "nics_per_gpu": [1]}],
                       "switches": [{"id": "qm9790"}], "families": ["rail-optimized"],
                       **({"layout": {"cooling": cooling}} if cooling else {})},
           "gpus": {"min": 64, "max": 128, "multiple_of": 64}}
    spec = _spec(network=net, costs={"facility": {}}, reliability=None)
    run_study(spec, out_dir=tmp_path)
    for _, r in pd.read_csv(tmp_path / "designs.csv").iterrows():
        assert r["facility_power_w"] == pytest.approx(pue * r["power_w"], rel=1e-9)


def test_a_checkpoint_writes_at_the_bandwidth_of_the_storage_the_design_buys(tmp_path):
    # storage sized per GPU built (spares included) writes at 2 GB/s per PB of it: 14 bytes per
    # parameter over (4 PB per 1,000 GPUs x built GPUs x 2 GB/s per PB)
    costs = {**COSTS, "storage": {"pb_per_1000_gpus": 4.0, "write_gb_per_s_per_pb": 2.0}}
    spec = _spec(costs=costs, reliability={"detect_s": 60, "restart_s": 240, "try_spares": [True]},
                 objectives=["capex_usd", "time_to_train_with_failures_s"])
    run_study(spec, out_dir=tmp_path)
    trials = pd.read_parquet(tmp_path / "trials.parquet")
    ok = trials[trials["feasible"] & (trials["spare_domains"] > 0)]
    assert len(ok) > 0
    from designer.perf.compute import total_params
    from designer.spec.llm import LLMSpec

    n_params = total_params(LLMSpec.model_validate(TINY))
    for _, r in ok.iterrows():
        assert r["n_gpus"] > r["job_gpus"]
        bw = 2.0 * 4.0 * r["n_gpus"] / 1000.0 * 1e9
        assert r["checkpoint_write_s"] == pytest.approx(14 * n_params / bw, rel=1e-9)
