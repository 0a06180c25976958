"""No result lost, torn or silently replaced; bad input is one line; storages and folders the tool did
not create are never modified."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from designer.errors import SpecError
from designer.export import check_complete, read_pareto, typed
from designer.pipeline import run_study
from designer.spec.study import load_study

ROOT = Path(__file__).resolve().parents[1]
QUICK = ROOT / "studies" / "quickstart" / "study.yaml"
SCENARIO = ROOT / "studies" / "scenarios" / "gpt-145b-selene.yaml"


def run_cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "designer.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def one_error_line(out: subprocess.CompletedProcess, code: int = 2) -> str:
    assert out.returncode == code, (out.returncode, out.stderr)
    assert "Traceback" not in out.stderr + out.stdout
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, out.stderr
    return lines[0]


def _small_study(tmp_path: Path, name: str = "rel-a", **over) -> Path:
    data = yaml.safe_load(QUICK.read_text())
    data["name"] = name
    data["network"]["gpus"] = {"min": 256, "max": 512, "multiple_of": 256}
    data["network"]["choices"]["nics"] = [{"id": "cx7_400g"}]
    data["network"]["choices"]["families"] = ["rail-optimized"]
    data["output"] = {"plots": False}
    data.update(over)
    p = tmp_path / f"{name}.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


# ---- bad input: one line naming the field, the value and what is allowed ------------------------

def _mutated(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    return p


def test_duplicate_keys_name_the_key_and_both_lines(tmp_path):
    text = QUICK.read_text().replace("name: quickstart\n", "name: quickstart\nname: again\n")
    line = one_error_line(run_cli("run", str(_mutated(tmp_path, text))))
    assert "duplicate key 'name' at lines" in line


def test_not_utf8_and_directory_and_missing(tmp_path):
    p = tmp_path / "u16.yaml"
    p.write_bytes(QUICK.read_text().encode("utf-16"))
    assert "not UTF-8 text" in one_error_line(run_cli("run", str(p)))
    assert "is a directory" in one_error_line(run_cli("run", str(tmp_path)))
    assert "does not exist" in one_error_line(run_cli("run", str(tmp_path / "nope.yaml")))


def test_alias_bomb_is_refused_quickly(tmp_path):
    rows = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, cur in zip("abcdefgh", "bcdefghi"):
        rows.append(f"{cur}: &{cur} [" + ",".join([f"*{prev}"] * 9) + "]")
    p = _mutated(tmp_path, "\n".join(rows) + "\n")
    line = one_error_line(run_cli("run", str(p), timeout=60))
    assert "expands to more than 1,000,000 YAML nodes" in line


def test_non_finite_numbers_are_rejected(tmp_path):
    text = QUICK.read_text().replace("total_tokens: 1.0e12", "total_tokens: .inf")
    line = one_error_line(run_cli("run", str(_mutated(tmp_path, text))))
    assert "training.total_tokens" in line and "finite" in line


def test_unknown_key_gets_the_closest_and_the_allowed_keys_and_every_error(tmp_path):
    text = (QUICK.read_text().replace("  sequence_length: 8192", "  sequence_lenght: 8192")
            .replace("  precision: bf16", "  precision: bf17"))
    line = one_error_line(run_cli("run", str(_mutated(tmp_path, text))))
    assert "training.sequence_lenght" in line and "did you mean 'sequence_length'?" in line
    assert "allowed: sequence_length, global_batch_sequences" in line
    assert "training.precision" in line and "'bf17'" in line  # the second error is reported too


def test_gpu_counts_beyond_the_physical_range(tmp_path):
    text = QUICK.read_text().replace("gpus: {min: 256, max: 2048, multiple_of: 128}", "gpus: {count: 1.0e30}")
    line = one_error_line(run_cli("run", str(_mutated(tmp_path, text))))
    assert "network.gpus.count" in line
    line = one_error_line(run_cli("bom", "--topology", "rail-only", "--gpus", "1000000000000"))
    assert "allowed: 1 .. 100,000,000" in line
    assert "Invalid value for '--gpus'" in one_error_line(run_cli("bom", "--topology", "rail-only", "--gpus", "1e30"))


def test_bad_flags_are_one_line():
    assert "No such option" in one_error_line(run_cli("run", str(QUICK), "--bogus"))
    assert "Missing argument" in one_error_line(run_cli("run"))
    assert "No such command 'frob'" in one_error_line(run_cli("frob"))


def test_evaluate_an_invalid_strategy_exits_2_with_its_reason(tmp_path):
    data = yaml.safe_load(SCENARIO.read_text())
    data["strategy"]["zeropp_quantized_weights"] = True  # with zero_stage 0
    p = tmp_path / "sc.yaml"
    p.write_text(yaml.safe_dump(data))
    out = run_cli("evaluate", str(p))
    line = one_error_line(out, code=2)
    assert "strategy is infeasible (compatibility): ZeRO++ options need ZeRO stage 3 (stage 0)" in line
    # one that does not fit in memory exits 3 (infeasible), with the numbers
    data["strategy"].pop("zeropp_quantized_weights")
    data["strategy"]["tp"], data["strategy"]["dp"] = 3, 64
    # (its 36 microbatches are no whole groups of pp 8 for the interleaved schedule: 1F1B's)
    data["strategy"]["schedule"], data["strategy"]["virtual_stages"] = "1f1b", 1
    p.write_text(yaml.safe_dump(data))
    line = one_error_line(run_cli("evaluate", str(p)), code=3)
    assert "(memory): needs" in line and "HBM holds 80.0 GiB" in line


# ---- storages and folders ------------------------------------------------------------------------

def test_storage_that_is_not_a_journal_is_refused_and_untouched(tmp_path):
    other = tmp_path / "notes.txt"
    other.write_text("my notes\nline two\n")
    before = hashlib.sha256(other.read_bytes()).hexdigest()
    spec = _small_study(tmp_path, search={"method": "optuna", "n_trials": 5, "seed": 0})
    line = one_error_line(run_cli("run", str(spec), "--out", str(tmp_path / "o"), "--storage", str(other)))
    assert "not an Optuna journal" in line
    assert hashlib.sha256(other.read_bytes()).hexdigest() == before


def test_worker_with_a_missing_journal_gives_up_with_one_line_and_creates_nothing(tmp_path):
    path = tmp_path / "nowhere" / "optuna.journal"
    out = run_cli("worker", str(QUICK), "--storage", str(path), "--wait-s", "1")
    line = one_error_line(out)
    assert "no journal appeared in 1 s" in line
    assert "waiting up to 1 s" in out.stdout
    assert not path.exists() and not path.parent.exists()


def test_credentials_are_masked_in_connection_errors():
    out = run_cli("worker", str(QUICK), "--storage", "postgresql://alice:s3cret@127.0.0.1:1/db", "--wait-s", "1")
    line = one_error_line(out)
    assert "s3cret" not in out.stderr + out.stdout and "alice:***@" in line


def test_another_studys_folder_is_refused_unless_overwrite(tmp_path):
    out = tmp_path / "shared"
    a = _small_study(tmp_path, "rel-a")
    b = _small_study(tmp_path, "rel-b")
    assert run_cli("run", str(a), "--out", str(out)).returncode == 0
    before = (out / "pareto.csv").read_bytes()
    line = one_error_line(run_cli("run", str(b), "--out", str(out)))
    assert "holds the results of study 'rel-a', not 'rel-b'" in line and "--overwrite" in line
    assert (out / "pareto.csv").read_bytes() == before
    ok = run_cli("run", str(b), "--out", str(out), "--overwrite")
    assert ok.returncode == 0, ok.stderr
    assert json.loads((out / "meta.json").read_text())["study"] == "rel-b"


def test_a_folder_in_use_by_another_run_is_refused(tmp_path):
    out = tmp_path / "busy"
    out.mkdir()
    with open(out / ".designer-run.lock", "a+") as fh:  # another run holds the folder
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fh.write("study other, pid 1\n")
        fh.flush()
        line = one_error_line(run_cli("run", str(_small_study(tmp_path)), "--out", str(out)))
    assert "is in use by another designer run (study other, pid 1)" in line


def test_a_refused_rerun_changes_nothing_in_the_storage(tmp_path):
    from designer.search.runner import get_study_attr, open_storage

    spec = _small_study(tmp_path, search={"method": "optuna", "n_trials": 4, "seed": 0},
                        candidates={"mode": "cheapest", "split_by": ["family"]},
                        network={**yaml.safe_load(QUICK.read_text())["network"],
                                 "gpus": {"min": 256, "max": 512},
                                 "objective": {"kind": "frontier", "frontier": {"vary": "n_gpus", "levels": [256],
                                                                               "optimize": "min_cost"}},
                                 "choices": {"platforms": ["hgx_h100_8"], "nics": [{"id": "cx7_400g"}],
                                             "switches": [{"id": "qm9790"}], "families": ["rail-optimized"]}})
    out = tmp_path / "o"
    assert run_cli("run", str(spec), "--out", str(out)).returncode == 0
    journal = out / "optuna.journal"
    before = get_study_attr(open_storage(journal), "rel-a/__manifest__", "manifest")
    size = journal.stat().st_size
    line = one_error_line(run_cli("run", str(spec), "--out", str(out), "--seed", "7"))
    assert "different spec or seed" in line
    assert journal.stat().st_size == size
    assert get_study_attr(open_storage(journal), "rel-a/__manifest__", "manifest") == before


# ---- the output set is atomic ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def complete_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("atomic")
    spec = load_study(_small_study(tmp))
    return spec, run_study(spec, out_dir=tmp / "out")


def test_meta_json_records_every_file(complete_run):
    _, res = complete_run
    meta = check_complete(res.out_dir)
    assert {"pareto.csv", "pareto.parquet", "trials.parquet", "designs.csv", "megatron_args.txt"} <= set(meta["files"])
    assert meta["files"]["pareto.csv"]["rows"] == len(res.pareto)
    for rel, info in meta["files"].items():
        assert hashlib.sha256((res.out_dir / rel).read_bytes()).hexdigest() == info["sha256"]
    assert not [p for p in res.out_dir.iterdir() if p.name.startswith(".staging")]


@pytest.mark.parametrize("damage", ["truncate", "cut_line", "drop_meta", "swap_trials"])
def test_readers_refuse_a_torn_or_mixed_folder(complete_run, tmp_path, damage):
    import shutil

    _, res = complete_run
    d = tmp_path / "copy"
    shutil.copytree(res.out_dir, d)
    if damage == "truncate":
        (d / "pareto.csv").write_bytes(b"")
    elif damage == "cut_line":
        text = (d / "pareto.csv").read_text().splitlines(keepends=True)
        (d / "pareto.csv").write_text("".join(text[:-1]))
    elif damage == "drop_meta":
        (d / "meta.json").unlink()
    else:
        (d / "trials.parquet").write_text("design_id\nsomething else\n")
    with pytest.raises(SpecError) as err:
        read_pareto(d)
    assert "rerun" in str(err.value)
    line = one_error_line(run_cli("pareto", str(d)))
    assert "rerun" in line


@pytest.mark.parametrize("after", [0, 1, 3, 6])
def test_a_kill_during_the_export_leaves_a_refused_folder_and_a_rerun_restores_it(complete_run, tmp_path, after,
                                                                                 monkeypatch):
    """The export interrupted after `after` files were moved into place (the process dies there): the
    folder is refused by every reader, and a rerun writes a complete set."""
    import shutil

    spec, res = complete_run
    d = tmp_path / "out"
    shutil.copytree(res.out_dir, d)
    real = os.replace
    moved = [0]

    class Killed(BaseException):
        pass

    def dying_replace(src, dst):
        if moved[0] >= after:
            raise Killed
        moved[0] += 1
        return real(src, dst)

    monkeypatch.setattr(os, "replace", dying_replace)
    with pytest.raises(Killed):
        run_study(spec, out_dir=d)
    monkeypatch.setattr(os, "replace", real)
    with pytest.raises(SpecError):
        read_pareto(d)
    again = run_study(spec, out_dir=d)
    front = read_pareto(d)
    assert len(front) == len(again.pareto) and list(front["design_id"]) == list(again.pareto["design_id"])


def test_a_rerun_leaves_one_runs_files_and_clears_killed_runs_staging(complete_run, tmp_path):
    """A rerun into a folder removes what the previous completion record listed and the new set does
    not have (a design's strategies that left the front), and what killed runs staged; a file
    designer never wrote stays."""
    import shutil

    spec, res = complete_run
    d = tmp_path / "out"
    shutil.copytree(res.out_dir, d)
    stale = d / "strategies" / "a-design-no-longer-on-the-front.parquet"
    stale.parent.mkdir(exist_ok=True)
    stale.write_bytes(b"old")
    meta = json.loads((d / "meta.json").read_text())
    meta["files"][stale.relative_to(d).as_posix()] = {"bytes": 3, "sha256": hashlib.sha256(b"old").hexdigest()}
    (d / "meta.json").write_text(json.dumps(meta))
    (d / ".staging-999999").mkdir()
    (d / ".staging-999999" / "pareto.csv").write_text("half written")
    (d / "notes.txt").write_text("mine")
    run_study(spec, out_dir=d)
    assert not stale.exists() and not (d / ".staging-999999").exists()
    assert (d / "notes.txt").read_text() == "mine"
    assert set(check_complete(d)["files"]) == set(check_complete(res.out_dir)["files"])


def _killed_while_moving(results: Path, d: Path, spec, moved: list[str]) -> Path:
    """A copy of `results` at `d` as a run killed while setting them aside leaves it: the files
    `moved` already in previous/.moving-<spec hash>, the rest in place."""
    import shutil

    shutil.copytree(results, d)
    moving = d / "previous" / f".moving-{spec.spec_hash()[:12]}"
    for rel in moved:
        (moving / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).replace(moving / rel)
    return d


def test_an_edited_study_takes_the_folder_and_keeps_the_earlier_results(complete_run, tmp_path, caplog):
    import logging
    import shutil

    spec, res = complete_run
    d = tmp_path / "out"
    shutil.copytree(res.out_dir, d)
    data = yaml.safe_load(QUICK.read_text())
    edited = _small_study(tmp_path, name=spec.name, training={**data["training"], "total_tokens": 2.0e12})
    with caplog.at_level(logging.WARNING):
        run_study(load_study(edited), out_dir=d)
    assert any("the earlier results of study" in r.getMessage() for r in caplog.records)
    assert check_complete(d)["spec_hash"] == load_study(edited).spec_hash() != spec.spec_hash()
    # the earlier spec's results, byte for byte, under previous/<its spec hash>
    kept = d / "previous" / spec.spec_hash()[:12]
    assert check_complete(kept)["spec_hash"] == spec.spec_hash()
    assert (kept / "pareto.csv").read_bytes() == (res.out_dir / "pareto.csv").read_bytes()
    # a run killed while moving them aside: two files gone to the staging folder, the rest and the
    # record still in place; the rerun completes the one folder
    d2 = _killed_while_moving(res.out_dir, tmp_path / "out2", spec, ["pareto.csv", "designs.csv"])
    # killed once every file and the record had gone aside: the folder is refused as interrupted
    # (not as one that never held results), and the rerun completes it too
    d3 = _killed_while_moving(res.out_dir, tmp_path / "out3", spec, [
        *sorted(json.loads((res.out_dir / "meta.json").read_text())["files"]), "meta.json"])
    with pytest.raises(SpecError, match="stopped while moving the earlier results into previous/.*rerun"):
        check_complete(d3)
    run_study(load_study(edited), out_dir=d3)
    assert check_complete(d3 / "previous" / spec.spec_hash()[:12])["spec_hash"] == spec.spec_hash()
    run_study(load_study(edited), out_dir=d2)
    assert [p.name for p in (d2 / "previous").iterdir()] == [spec.spec_hash()[:12]]
    assert check_complete(d2 / "previous" / spec.spec_hash()[:12])["spec_hash"] == spec.spec_hash()
    assert check_complete(d2)["spec_hash"] == load_study(edited).spec_hash()
    # the same kill, then a rerun of the original spec (not the edited one): the record never moved,
    # so the folder still describes that set; the two gathered files go back and the rerun replaces
    # it as any rerun does, leaving nothing half-gathered in previous/
    d4 = _killed_while_moving(res.out_dir, tmp_path / "out4", spec, ["pareto.csv", "designs.csv"])
    run_study(spec, out_dir=d4)
    assert not (d4 / "previous").exists() or not any((d4 / "previous").iterdir())
    assert check_complete(d4)["spec_hash"] == spec.spec_hash()


def test_an_unmeetable_budget_names_the_nearest_designs_first(tmp_path):
    data = yaml.safe_load(_small_study(tmp_path).read_text())
    data["network"]["budgets"] = {"capex_usd": 1.0e6}
    study = tmp_path / "poor.yaml"
    study.write_text(yaml.safe_dump(data))
    line = one_error_line(run_cli("run", str(study), "--out", str(tmp_path / "out")), code=3)
    import re

    shortfalls = [float(x) for x in re.findall(r"short by ([0-9.e+]+)", line)]
    assert shortfalls and shortfalls == sorted(shortfalls), line
    assert "for 256 GPUs" in line.split("|")[0]  # the smaller cluster misses the budget by least


def test_exporting_the_front_over_the_folders_own_files_is_refused(complete_run):
    _, res = complete_run
    before = (res.out_dir / "pareto.csv").read_bytes()
    line = one_error_line(run_cli("pareto", str(res.out_dir), "--export", str(res.out_dir / "pareto.csv")))
    assert "one of the study's own result files" in line
    assert (res.out_dir / "pareto.csv").read_bytes() == before
    check_complete(res.out_dir)


def test_frontier_levels_a_budget_rules_out_are_listed_with_the_binding_budget(tmp_path):
    # the power sweep's 13 MW level cannot power its smallest step of GB200 racks (9,216 GPUs: 128 racks
    # x 120 kW = 15.4 MW before the network) nor of HGX B200 nodes (1,152 x 14.3 kW = 16.5 MW, so the
    # 17 MW level is short too once the network is added); each such level is dropped for its platform
    # and said so, with the budget that binds and its shortfall, on the terminal and in meta.json
    spec = load_study(ROOT / "studies" / "llama405b_budget" / "power_sweep.yaml")
    res = run_study(spec.with_updates(output={"plots": False}), out_dir=tmp_path / "ps")
    dropped = res.meta["milp"]["dropped_levels"]
    assert dropped, "the study has a level some platform cannot meet"
    assert [d.split(" is short by ")[0] for d in dropped] == [
        "hgx_b200_8: power_w 1.3e+07: power_w budget <= 1.30e7", "hgx_b200_8: power_w 1.7e+07: power_w budget <= 1.70e7",
        "gb200_nvl72: power_w 1.3e+07: power_w budget <= 1.30e7"]
    short = [float(d.split(" is short by ")[1].split(" W")[0]) for d in dropped]
    # the shortfalls exceed the compute alone: 16.47 - 13, 16.47 - 17 (< 0: the network makes up the rest),
    # 15.36 - 13 MW
    assert short[0] > 3.47e6 and 0 < short[1] < 1e6 and short[2] > 2.36e6


# ---- fault tests with real processes ----------------------------------------------------------------

KILL_CHILD = """
import sys
from designer.pipeline import run_study
from designer.spec.study import load_study
run_study(load_study(sys.argv[1]), out_dir=sys.argv[2])
"""


@pytest.mark.slow
def test_kill_9_at_random_points_of_the_export_then_pareto_and_a_rerun(tmp_path):
    """SIGKILL at random moments after the export has begun (its staging folder exists), alternating two
    versions of one study whose fronts differ, so that a torn or mixed folder would show: every reader
    then sees one version's complete set, or refuses the folder with "rerun"; a rerun always restores a
    complete set."""
    import random
    import signal
    import time

    import pandas as pd

    quick = yaml.safe_load(QUICK.read_text())
    (tmp_path / "v0").mkdir()
    (tmp_path / "v1").mkdir()
    versions = [_small_study(tmp_path / "v0", "rel-kill", output={"plots": True}),
                _small_study(tmp_path / "v1", "rel-kill", output={"plots": True},
                             network={**quick["network"], "gpus": {"min": 512, "max": 1024, "multiple_of": 512},
                                      "choices": {**quick["network"]["choices"], "nics": [{"id": "cx7_400g"}],
                                                  "families": ["rail-only"]}})]
    out = tmp_path / "out"
    refs = []
    for v in versions:
        assert run_cli("run", str(v), "--out", str(out)).returncode == 0
        refs.append(typed(pd.read_csv(out / "pareto.csv")))  # read as read_pareto reads it
    assert not refs[0].equals(refs[1])

    def which(front: pd.DataFrame) -> int:
        for i, ref in enumerate(refs):
            if list(front.columns) == list(ref.columns) and front.round(6).equals(ref.round(6)):
                return i
        raise AssertionError("a front that is neither version's: torn or mixed")

    rng = random.Random(20261201)
    outcomes = []
    for i in range(8):
        spec = versions[i % 2]
        proc = subprocess.Popen([sys.executable, "-c", KILL_CHILD, str(spec), str(out)], cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        t_end = time.monotonic() + 120
        while time.monotonic() < t_end and proc.poll() is None and not list(out.glob(".staging-*")):
            time.sleep(0.0005)
        if i % 4 < 2:
            # anywhere in the export: writing the staged files (~0.6 s here), moving them (~1 ms), exiting
            time.sleep(rng.uniform(0.0, 1.0))
        else:
            # inside the moves: the old completion record is gone first, the new one comes last
            while time.monotonic() < t_end and proc.poll() is None and (out / "meta.json").exists():
                time.sleep(0.0001)
            time.sleep(rng.uniform(0.0, 0.001))
        finished = proc.poll() is not None
        if not finished:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        try:
            outcomes.append(f"version {which(read_pareto(out))}" + (" (finished)" if finished else ""))
        except SpecError as err:
            assert "rerun" in str(err)
            assert "rerun" in one_error_line(run_cli("pareto", str(out)))
            outcomes.append("refused")
        again = run_cli("run", str(spec), "--out", str(out))
        assert again.returncode == 0, again.stderr
        assert which(read_pareto(out)) == i % 2
    print("kills during the export:", outcomes)


@pytest.mark.slow
def test_two_different_studies_started_on_one_output_folder(tmp_path):
    """Started together on one --out: one run takes the folder; the other is refused with one line
    (the folder is in use, or holds the other study's results); the folder ends with one complete set."""
    out = tmp_path / "shared"
    a, b = _small_study(tmp_path, "rel-a"), _small_study(tmp_path, "rel-b")
    cmd = [sys.executable, "-m", "designer.cli", "run"]
    procs = [subprocess.Popen([*cmd, str(s), "--out", str(out)], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for s in (a, b)]
    results = [(p.wait(timeout=300), p.stdout.read(), p.stderr.read()) for p in procs]
    codes = sorted(r[0] for r in results)
    assert codes == [0, 2], results
    loser = next(r for r in results if r[0] == 2)
    line = one_error_line(subprocess.CompletedProcess([], loser[0], loser[1], loser[2]))
    assert "is in use by another designer run" in line or "holds the results of study" in line
    winner = json.loads((out / "meta.json").read_text())["study"]
    assert winner in ("rel-a", "rel-b")
    check_complete(out)
    assert len(read_pareto(out)) >= 1


def test_an_empty_strategy_space_names_the_rule_that_removed_each_value(tmp_path):
    spec = _small_study(tmp_path, strategy_space={**yaml.safe_load(QUICK.read_text())["strategy_space"], "tp": [3]})
    line = one_error_line(run_cli("run", str(spec), "--out", str(tmp_path / "o")), code=3)  # no design can train
    assert "tp 3 does not divide the HB domain size 8" in line
