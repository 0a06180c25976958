"""The co-design search: the outer space of cluster designs, the MILP per design, the GPU-count
guard, goals, and the outer Optuna study (determinism and resumption after kill -9)."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from designer.network.api import solve_network
from designer.pareto import Point, pareto_front
from designer.pipeline import GoalNotMet, make_problem, run_study
from designer.search.exhaustive import Candidate, run_exhaustive
from designer.search.goal import DesignPoint, answer_goal
from designer.search.outer import build_outer_space, count_reason, factorization
from designer.spec.network_study import study_catalog
from designer.spec.study import Goal, StudySpec

REPO = Path(__file__).resolve().parents[2]

# 4 layers, batch 64: a count trains when it is tp * pp * dp with tp | 8, pp <= 4 layers, dp | 64,
# i.e. 2^a or 3 * 2^a (pp 3); by hand in [64, 320] step 64: 64, 128, 192 (= 3 * 64), 256; not 320
# (= 2^6 * 5: a factor 5 has nowhere to go).
TINY = {"name": "tiny", "layers": 4, "hidden_size": 1024, "ffn_size": 4096, "heads": 16, "kv_heads": 16,
        "vocab_size": 32000}


def _spec(**over) -> StudySpec:
    data = {
        "name": "codesign-test", "model": TINY,
        "training": {"sequence_length": 2048, "global_batch_sequences": 64, "total_tokens": 1e10},
        "network": {"choices": {"platforms": ["hgx_h100_8"], "nics": [{"id": "cx7_400g", "nics_per_gpu": [1, 2]}],
                                "switches": [{"id": "qm9790"}], "families": ["rail-optimized", "rail-only"]},
                    "gpus": {"min": 64, "max": 320, "multiple_of": 64}},
        "strategy_space": {"microbatch_sizes": [1, 2], "recompute": ["none"], "zero_stages": [1]},
        "output": {"plots": False},
    }
    for k, v in over.items():
        data[k] = v
    return StudySpec.model_validate(data)


def test_factorization_and_count_reason():
    assert factorization(7848) == "2³·3²·109"
    assert factorization(4608) == "2⁹·3²"
    p = make_problem(_spec())
    assert count_reason(p, 256, 8) is None and count_reason(p, 192, 8) is None
    why = count_reason(p, 320, 8)
    mbs = list(p.space.microbatch_sizes)
    assert why == f"320 = 2⁶·5: no tp·pp·dp·cp split with dp x microbatch (microbatch_sizes {mbs}) dividing the batch 64"
    # every microbatch larger than the batch: the list is named, not the GPU count
    big = make_problem(_spec(strategy_space={"microbatch_sizes": [128]}))
    assert count_reason(big, 256, 8) == ("strategy_space.microbatch_sizes [128]: every microbatch exceeds the global "
                                         "batch 64; allowed: microbatches <= 64")
    assert "not a multiple of the HB domain size 8" in count_reason(p, 324, 8)


def test_outer_space_by_hand():
    spec = _spec()
    p = make_problem(spec)
    space = build_outer_space(spec, study_catalog(spec.network), p)
    assert space.counts == {"hgx_h100_8": (64, 128, 192, 256)}
    assert [(d.n_gpus, d.reason.split(":")[0]) for d in space.dropped] == [(320, "320 = 2⁶·5")]
    # 2 NIC widths x 1 switch x 2 families = 4 fabrics, x 4 counts
    assert len(space.fabrics) == 4 and space.size == 16


@pytest.fixture(scope="module")
def exhaustive_run(tmp_path_factory):
    spec = _spec()
    return spec, run_study(spec, out_dir=tmp_path_factory.mktemp("cd"))


def test_outer_exhaustive_equals_brute_force(exhaustive_run):
    """Each knob tuple priced by its own min-cost MILP and searched exhaustively, by hand; the front of
    those points is the study's front, and every tuple was solved once."""
    spec, res = exhaustive_run
    p = make_problem(spec)
    catalog = study_catalog(spec.network)
    from designer.network.design import design_to_system

    pts = []
    for k in (1, 2):
        for fam in ("rail-optimized", "rail-only"):
            for n in (64, 128, 192, 256):
                sub = spec.network.with_updates(
                    choices={**spec.network.choices.model_dump(), "nics": [{"id": "cx7_400g", "nics_per_gpu": [k]}],
                             "families": [fam]},
                    gpus={"count": n}, objective={"kind": "min_cost"})
                d = solve_network(sub, catalog=catalog).designs[0]
                c = Candidate(f"{fam}-{k}-{n}", d, design_to_system(d, catalog), d.capex_usd, d.power_w)
                t = run_exhaustive(p, c)
                pts.append(Point((d.capex_usd, float(t.time_to_train_s[t.best])), (fam, k, n)))
    front = pareto_front(pts)
    got = sorted(zip(res.pareto["capex_usd"], res.pareto["time_to_train_s"]))
    want = sorted(pt.values for pt in front)
    np.testing.assert_allclose(np.array(got), np.array(want), rtol=1e-12)
    ds = res.meta["design_search"]
    assert ds["method"] == "exhaustive" and ds["n_evaluated"] == 16 and ds["milp_solves"] == 16
    assert len(res.trials) == 16 and res.trials["feasible"].all()
    # two NICs per GPU: twice the NICs of one (the closed form's nic_count = GPUs x NICs per GPU)
    t = res.trials
    for n in (64, 256):
        one = t[(t.n_gpus == n) & (t.nics_per_gpu == 1) & (t.family == "rail-optimized")].iloc[0]
        two = t[(t.n_gpus == n) & (t.nics_per_gpu == 2) & (t.family == "rail-optimized")].iloc[0]
        assert (two["nic_count"], one["nic_count"]) == (2 * n, n)


def test_deadline_and_budget_goals(exhaustive_run, tmp_path):
    spec, res = exhaustive_run
    t = res.trials
    days = t["time_to_train_s"] / 86400
    # the cheapest design meeting a deadline set between the fastest and slowest designs, by hand
    # (designs equal in cost and time, as a rail-only and a rail-optimized network with no spine,
    # are told apart by their id, as answer_goal does)
    deadline = float(np.median(days))
    meets = t[days <= deadline]
    want = meets.sort_values(["capex_usd", "time_to_train_s", "design_id"]).iloc[0]
    g = spec.with_updates(goal={"minimize": "capex_usd", "subject_to": {"time_to_train_days": f"<= {deadline}"}})
    r = run_study(g, out_dir=tmp_path / "deadline")
    assert r.goal.met and r.goal.answer.design_id == want["design_id"]
    assert r.goal.binding.startswith("time_to_train_days <=")
    # the fastest under a capex budget
    cap = float(np.median(t["capex_usd"]))
    ok = t[t["capex_usd"] <= cap]
    fastest = ok.sort_values(["time_to_train_s", "capex_usd", "design_id"]).iloc[0]
    b = spec.with_updates(goal={"minimize": "time_to_train_s", "subject_to": {"capex_usd": f"<= {cap}"}})
    r2 = run_study(b, out_dir=tmp_path / "budget")
    assert r2.goal.answer.design_id == fastest["design_id"]
    assert r2.meta["goal"]["answer"]["design_id"] == fastest["design_id"]
    # runner-up of the other family, and how far behind
    other = ok[ok["family"] != fastest["family"]].sort_values("time_to_train_s").iloc[0]
    ru = {x.group: x for x in r2.goal.runners_up}
    fam_key = f"family {other['family']}"
    assert ru[fam_key].point.design_id == other["design_id"]
    assert ru[fam_key].behind == pytest.approx(other["time_to_train_s"] / fastest["time_to_train_s"] - 1, rel=1e-9)


def test_goal_not_met_exits_3_and_keeps_the_front(exhaustive_run, tmp_path):
    spec, res = exhaustive_run
    fastest_days = float(res.trials["time_to_train_s"].min()) / 86400
    bad = spec.with_updates(goal={"minimize": "capex_usd", "subject_to": {"time_to_train_days": f"<= {fastest_days / 2}"}})
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(json.loads(bad.model_dump_json())))
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "designer.cli", "run", str(path), "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 3, proc.stderr
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in proc.stderr
    assert err[0].startswith("error: no design meets time_to_train_days <=") and "closest is" in err[0]
    assert f"{fastest_days:,.2f} days" in err[0]
    assert (out / "pareto.csv").is_file() and (out / "meta.json").is_file()


def test_a_goal_answer_with_spares_names_the_built_and_the_job_gpus():
    # 97 nodes bought (776 GPUs), 64 of them (512 GPUs) in the job: the capex pays for all 776
    p = DesignPoint("s", "s", "rail-optimized", "hgx_h100_8", 776, 29.2e6, 1.0e6, 22 * 86400.0, job_gpus=512)
    a = answer_goal(Goal.model_validate({"minimize": "capex_usd"}), [p])
    assert "776 (512 in the job, 264 spare) x hgx_h100_8" in a.message
    assert a.as_dict()["answer"]["n_gpus"] == 776 and a.as_dict()["answer"]["job_gpus"] == 512


def test_goal_by_hand():
    pts = [DesignPoint("a", "a", "rail-only", "h100", 1024, 100e6, 5e6, 40 * 86400.0),
           DesignPoint("b", "b", "rail-optimized", "h100", 2048, 180e6, 9e6, 22 * 86400.0),
           DesignPoint("c", "c", "rail-only", "b200", 2048, 250e6, 12e6, 12 * 86400.0)]
    g = Goal.model_validate({"minimize": "capex_usd", "subject_to": {"time_to_train_days": "<= 30"}})
    a = answer_goal(g, pts)
    assert a.answer.design_id == "b" and a.n_meeting == 2
    # (30 - 22) / 30 slack at the answer; the time limit binds: it rules out a, cheaper and 40 / 30 - 1 late
    assert a.binding == ("time_to_train_days <= 30 (slack 26.7% at the answer; the next better design, $100.0M, "
                         "misses it by 33.3%)")
    # a limit the cheapest design meets does not bind
    loose = Goal.model_validate({"minimize": "capex_usd", "subject_to": {"time_to_train_days": "<= 45"}})
    assert answer_goal(loose, pts).answer.design_id == "a" and answer_goal(loose, pts).binding == ""
    assert [(r.group, r.point.design_id) for r in a.runners_up] == [("family rail-only", "c"), ("platform b200", "c")]
    assert a.runners_up[0].behind == pytest.approx(250 / 180 - 1)
    g2 = Goal.model_validate({"minimize": "capex_usd", "subject_to": {"time_to_train_days": "<= 10",
                                                                      "power_w": "<= 1e7"}})
    miss = answer_goal(g2, pts)
    assert not miss.met and miss.closest.design_id == "c"  # c is 20 % late (and 20 % over power)
    # both limits it misses are named; within the power limit the nearest to 10 days is b, 22 days (+120 %)
    assert miss.message == ("no design meets time_to_train_days <= 10 and power_w <= 1e+07; closest is 2,048 x b200 "
                            "(rail-only, c): 12.00 days (+20.0% past time_to_train_days <= 10), 12.00 MW (+20.0% past "
                            "power_w <= 1e+07); $250.0M, 12.00 days; within power_w <= 1e+07 the nearest is 2,048 x h100 "
                            "(rail-optimized, b) at 22.00 days (+120.0% past time_to_train_days <= 10)")


@pytest.mark.parametrize("goal,needle", [
    ("fastest", "allowed: front"),
    ({"minimize": "capex_usd", "subject_to": {"time_to_train_days": "60"}}, "'<= VALUE'"),
    ({"subject_to": {"capex_usd": "<= 1e8"}}, "needs goal.minimize"),
    ({"minimize": "speed"}, "capex_usd"),
])
def test_bad_goals(goal, needle):
    with pytest.raises(Exception) as err:
        Goal.model_validate(goal)
    assert needle in str(err.value)


def test_max_gpus_count_guard(tmp_path):
    """A budget-maximizing MILP whose count no strategy splits is moved to the largest count below it
    that trains: with 4 layers and batch 64, counts are 2^a or 3 * 2^a, so below a budget that buys
    328 GPUs (= 8 * 41) the answer is 256."""
    base = _spec()
    net = base.network.model_dump()
    probe = solve_network(base.network.with_updates(gpus={"count": 328}, objective={"kind": "min_cost"},
                                                    choices={**net["choices"], "nics": [{"id": "cx7_400g"}],
                                                             "families": ["rail-optimized"]}))
    cap = probe.designs[0].capex_usd * 1.0001
    spec = base.with_updates(network={**net, "choices": {**net["choices"], "nics": [{"id": "cx7_400g"}],
                                                          "families": ["rail-optimized"]},
                                      "gpus": {"min": 8, "max": 400}, "budgets": {"capex_usd": cap},
                                      "objective": {"kind": "max_gpus"}})
    assert not spec.codesign
    r = run_study(spec, out_dir=tmp_path / "guard")
    assert list(r.pareto["n_gpus"]) == [256]
    note = r.meta["milp"]["gpu_count_guard"][0]
    assert "328 GPUs (328 = 2³·41: no tp·pp·dp·cp split" in note and "took 256" in note


def _optuna_spec(n_trials: int, **over) -> StudySpec:
    return _spec(network={"choices": {"platforms": ["hgx_h100_8"], "nics": [{"id": "cx7_400g", "nics_per_gpu": [1, 2]}],
                                      "switches": [{"id": "qm9790"}], "families": ["rail-optimized", "rail-only"]},
                          "gpus": {"min": 64, "max": 2048, "multiple_of": 64}},
                 design_search={"method": "optuna", "n_trials": n_trials}, **over)


def test_outer_optuna_is_deterministic(tmp_path):
    a = run_study(_optuna_spec(8), out_dir=tmp_path / "a")
    b = run_study(_optuna_spec(8), out_dir=tmp_path / "b")
    assert a.meta["design_search"]["method"] == "optuna" and a.meta["design_search"]["n_trials"] == 8
    cols = ["trial_number", "design_id", "time_to_train_s"]
    assert a.trials[cols].equals(b.trials[cols])
    # one Optuna study per run, whose trials are cluster designs with capex and time as objectives
    import optuna

    names = optuna.get_all_study_names(storage=optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(tmp_path / "a" / "optuna.journal"))))
    # (beside it, the bookkeeping study holding the run's seed and budgets for extra workers: no trials)
    assert sorted(names) == ["codesign-test/__manifest__", "codesign-test/designs"]


@pytest.mark.slow
def test_outer_optuna_resumes_after_kill_9(tmp_path):
    n = 40
    spec = _optuna_spec(n)
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(json.loads(spec.model_dump_json())))
    out = tmp_path / "out"
    journal = out / "optuna.journal"
    proc = subprocess.Popen([sys.executable, "-m", "designer.cli", "run", str(path), "--out", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 120:
        if journal.is_file() and journal.read_text().count('"state":1') >= 5:  # a few trials finished
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    import optuna

    from designer.search.runner import open_storage

    before = optuna.load_study(study_name="codesign-test/designs", storage=open_storage(journal))
    done_before = {t.number: t.params for t in before.get_trials(states=(optuna.trial.TrialState.COMPLETE,))}
    assert 0 < len(done_before) < n, len(done_before)
    again = subprocess.run([sys.executable, "-m", "designer.cli", "run", str(path), "--out", str(out)],
                           capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    after = optuna.load_study(study_name="codesign-test/designs", storage=open_storage(journal))
    done = [t for t in after.get_trials() if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(done) == n and len({t.number for t in done}) == n
    # nothing finished before the kill was repeated or changed
    assert all(done_before[t.number] == t.params for t in done if t.number in done_before)
    meta = json.loads((out / "meta.json").read_text())
    assert meta["design_search"]["n_trials"] == n


def test_designer_space_explains_removed_counts_and_values(tmp_path):
    spec = _spec(strategy_space={"tp": [1, 2, 3, 8], "microbatch_sizes": [1], "recompute": ["none"]})
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(json.loads(spec.model_dump_json())))
    proc = subprocess.run([sys.executable, "-m", "designer.cli", "space", str(path), "--gpus", "320", "--json"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    e = data["platforms"]["hgx_h100_8"]
    assert e["gpu_counts"] == [64, 128, 192, 256]
    assert e["gpu_counts_removed"] == [{"n_gpus": 320, "reason": "320 = 2⁶·5: no tp·pp·dp·cp split with dp x microbatch "
                                                                  "(microbatch_sizes [1]) dividing the batch 64"}]
    rules = {(r["dim"], str(r["value"])): r["rule"] for r in e["strategy_values_removed"]}
    assert rules[("tp", "3")] == "does not divide the HB domain size 8"
    assert rules[("pp", "5..64")] == "exceeds the 4 layers"
    assert e["count"]["strategies"] == 0 and e["count"]["reason"].startswith("320 = 2⁶·5")


def test_oversubscription_ratio_and_level_are_knobs(tmp_path):
    # 2 ratios x 2 tier boundaries of the oversubscribed family, plus rail-optimized: 5 fabrics. 1,024
    # GPUs on 64-port switches fit in two tiers (a rail of 1,024 ports: 32 leaves of 32 down ports and
    # a spine tier), so boundary 2 needs a third tier and those designs are infeasible with that
    # reason; boundary 1 thins the leaf uplinks.
    spec = _spec(network={"choices": {"platforms": ["hgx_h100_8"], "nics": [{"id": "cx7_400g"}],
                                      "switches": [{"id": "qm9790"}], "families": ["rail-optimized", "oversubscribed"],
                                      "oversubscription": [2, 4], "oversubscribed_levels": [1, 2]},
                          "gpus": {"count": 1024}})
    res = run_study(spec, out_dir=tmp_path / "os")
    t = res.trials
    assert len(t) == 5
    os_rows = t[t["family"] == "oversubscribed"]
    assert len(os_rows) == 4
    bad = os_rows[~os_rows["feasible"]]
    assert len(bad) == 2 and bad["reason"].str.contains("oversubscribed_level 2 needs more than 2 tiers").all()
    good = os_rows[os_rows["feasible"]].sort_values("oversubscription")
    ro = t[t["family"] == "rail-optimized"].iloc[0]
    # thinner uplinks, cheaper network: capex falls with the ratio
    assert ro["capex_usd"] > good["capex_usd"].iloc[0] > good["capex_usd"].iloc[1]
    with pytest.raises(Exception) as err:
        run_study(spec.with_updates(candidates={"mode": "cheapest"}), out_dir=tmp_path / "cheap")
    assert "co-design mode only" in str(err.value)


def test_fewer_nics_than_gpus_is_a_knob(tmp_path):
    """0.5 NICs per GPU (4 per 8-GPU node): the MILP's design has N/2 NICs, the closed form's switches
    for N/2 endpoints, and each GPU half a port; the search times it with that bandwidth."""
    from designer.network.design import design_to_system
    from designer.network.topology import RAILONLY_V1_PRICES, bill_of_materials

    spec = _spec(network={"choices": {"platforms": ["hgx_h100_8"], "nics": [{"id": "cx7_400g", "nics_per_gpu": [0.5, 1]}],
                                      "switches": [{"id": "qm9790"}], "families": ["rail-optimized"]},
                          "gpus": {"count": 256}})
    res = run_study(spec, out_dir=tmp_path / "half")
    t = res.trials.set_index("gpus_per_nic")
    assert set(t.index) == {1, 2}
    half, full = t.loc[2], t.loc[1]
    assert half["nic_count"] == 128 and full["nic_count"] == 256
    # exported as the study states the rail width: 128 NICs for 256 GPUs
    assert half["nics_per_gpu"] == 0.5 and full["nics_per_gpu"] == 1
    assert half["scaleout_gbps_per_gpu"] == 200 and full["scaleout_gbps_per_gpu"] == 400
    catalog = study_catalog(spec.network)
    bom = bill_of_materials("rail-optimized", 128, 4, 64, prices=RAILONLY_V1_PRICES, port_gbps=400)
    assert half["switch_count"] == bom.switch_count
    assert half["capex_usd"] < full["capex_usd"]
    assert half["time_to_train_s"] >= full["time_to_train_s"]
    sub = spec.network.with_updates(choices={**spec.network.choices.model_dump(),
                                             "nics": [{"id": "cx7_400g", "nics_per_gpu": [0.5]}]})
    d = solve_network(sub, catalog=catalog).designs[0]
    assert design_to_system(d, catalog).nic_bandwidth_per_gpu_bytes_per_s == pytest.approx(200e9 / 8)
    # a platform that does not share NICs says so
    bad = spec.network.with_updates(choices={**spec.network.choices.model_dump(), "platforms": ["gb200_nvl72"],
                                             "nics": [{"id": "cx7_400g", "nics_per_gpu": [0.5]}]},
                                    gpus={"count": 288})
    with pytest.raises(Exception) as err:
        study_catalog(bad)
    assert "no chosen platform shares a NIC between GPUs; allowed: >= 1" in str(err.value)


def _one_design_problem():
    """The co-design test study's problem and its 256-GPU rail-optimized design (one NIC per GPU),
    with a small strategy space."""
    from designer.network.design import design_to_system

    spec = _spec(strategy_space={"microbatch_sizes": [1, 2, 4], "recompute": ["none", "full"], "zero_stages": [0, 1, 3]})
    p = make_problem(spec)
    catalog = study_catalog(spec.network)
    sub = spec.network.with_updates(gpus={"count": 256}, objective={"kind": "min_cost"},
                                    choices={**spec.network.choices.model_dump(), "nics": [{"id": "cx7_400g"}],
                                             "families": ["rail-optimized"]})
    d = solve_network(sub, catalog=catalog).designs[0]
    return p, Candidate("k", d, design_to_system(d, catalog), d.capex_usd, d.power_w)


def test_exhaustive_keeps_the_fastest_rows_within_its_bound():
    p, c = _one_design_problem()
    full = run_exhaustive(p, c)
    small = run_exhaustive(p, c, keep=7)
    assert full.n_evaluations == small.n_evaluations == full.space_size > 7 == len(small)
    fast = np.sort(full.time_to_train_s[full.feasible])[:7]
    np.testing.assert_allclose(np.sort(small.time_to_train_s), fast, rtol=0)
    assert small.time_to_train_s[small.best] == full.time_to_train_s[full.best]


def test_outer_optuna_with_two_workers_on_one_journal(tmp_path):
    import optuna

    from designer.search.runner import open_storage

    res = run_study(_optuna_spec(16), out_dir=tmp_path / "w2", workers=2)
    st = optuna.load_study(study_name="codesign-test/designs", storage=open_storage(tmp_path / "w2" / "optuna.journal"))
    trials = st.get_trials()
    done = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(done) == 16 and len({t.number for t in done}) == 16
    assert not [t for t in trials if t.state in (optuna.trial.TrialState.RUNNING, optuna.trial.TrialState.WAITING)]
    assert res.meta["design_search"]["n_trials"] == 16
    assert set(res.trials["trial_number"]) <= {t.number for t in done}


@pytest.mark.slow
def test_children_exit_when_the_run_is_killed(tmp_path):
    """kill -9 of the main process of `designer run --workers 2`: its child worker exits too (alone it
    would run the 3,000 trials for about a minute)."""
    n = 3000
    spec = _optuna_spec(n)
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(json.loads(spec.model_dump_json())))
    proc = subprocess.Popen([sys.executable, "-m", "designer.cli", "run", str(path), "--out", str(tmp_path / "o"),
                             "--workers", "2"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def children() -> list[int]:
        out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(proc.pid)], capture_output=True, text=True).stdout
        return [int(x) for x in out.split()]

    t0 = time.monotonic()
    kids: list[int] = []
    while time.monotonic() - t0 < 60 and not kids:
        kids = [k for k in children() if Path(f"/proc/{k}/cmdline").read_bytes().find(b"multiprocessing") >= 0]
        time.sleep(0.1)
    assert kids, "no child worker started"
    time.sleep(1.0)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    t1 = time.monotonic()
    while time.monotonic() - t1 < 15 and any(Path(f"/proc/{k}").exists() and
                                             "Z" not in Path(f"/proc/{k}/stat").read_text().split()[2] for k in kids):
        time.sleep(0.2)
    alive = [k for k in kids if Path(f"/proc/{k}").exists() and "Z" not in Path(f"/proc/{k}/stat").read_text().split()[2]]
    for k in alive:
        os.kill(k, signal.SIGKILL)
    assert not alive, f"child workers {alive} outlived the killed run"


def test_a_bounded_table_still_finds_the_fastest_strategy_that_meets_the_constraints(caplog):
    # the table keeps the 7 fastest feasible strategies; a user constraint that every one of them
    # fails (only strategies at least as slow as the 12th fastest pass) must still yield the fastest
    # passing strategy, the one an unbounded table finds; the further checks stop after as many again
    # (each re-evaluates a strategy and runs the user's functions), and say so
    from designer.search.exhaustive import TrialConstraint

    p, c = _one_design_problem()
    unbounded = run_exhaustive(p, c)
    times = np.sort(unbounded.time_to_train_s[unbounded.feasible])
    assert len(times) > 30
    median = float(times[11])
    slow = TrialConstraint("slow_enough", lambda design, strategy, metrics: median - metrics.time_to_train_s)
    pc = dataclasses.replace(p, constraints=(slow,))
    full, small = run_exhaustive(pc, c), run_exhaustive(pc, c, keep=7)
    assert full.best is not None and small.best is not None
    assert small.time_to_train_s[small.best] == full.time_to_train_s[full.best] >= median
    assert small.strategies.strategy(small.best) == full.strategies.strategy(full.best)
    assert small.constraints["slow_enough"][small.best] <= 0
    # nothing passes: none is found, and the table says so
    never = TrialConstraint("never", lambda design, strategy, metrics: 1.0)
    assert run_exhaustive(dataclasses.replace(p, constraints=(never,)), c, keep=7).best is None
    # only the slowest passes: past the 14 checks the rest are not checked, and a warning says so
    slowest = float(times[-1])
    last = TrialConstraint("last", lambda design, strategy, metrics: slowest - metrics.time_to_train_s)
    import logging

    with caplog.at_level(logging.WARNING):
        assert run_exhaustive(dataclasses.replace(p, constraints=(last,)), c, keep=7).best is None
    assert any("its 14 fastest feasible strategies each fail a trial constraint" in r.getMessage()
               for r in caplog.records)
    assert run_exhaustive(dataclasses.replace(p, constraints=(last,)), c).best is not None


def test_the_further_passes_end_when_the_scalar_model_refuses_what_the_vector_one_scored(monkeypatch):
    # every strategy the table checks is refused by the scalar re-evaluation: each is still passed
    # over, so the passes end (with no strategy) instead of rebuilding the same batch forever
    import designer.search.exhaustive as ex
    from designer.perf.records import Infeasible
    from designer.search.exhaustive import TrialConstraint

    p, c = _one_design_problem()
    n = run_exhaustive(p, c).space_size
    calls = []

    def refuse(*a, **k):
        calls.append(1)
        if len(calls) > 2 * n:
            raise AssertionError("the passes do not end")
        return Infeasible(kind="memory", reason="refused")

    monkeypatch.setattr(ex, "evaluate_system", refuse)
    never = TrialConstraint("never", lambda design, strategy, metrics: 1.0)
    assert run_exhaustive(dataclasses.replace(p, constraints=(never,)), c, keep=7).best is None
