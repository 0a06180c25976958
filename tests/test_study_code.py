"""Study files are code: hooks and trial constraints load the same way, relative to the study file's
folder (as do catalog.extra_files and output.dir), `--no-hooks` refuses them, and Ctrl-C inside a HiGHS
solve is reported as an interruption (exit 130), not as a solver time limit."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
QUICK = ROOT / "studies" / "quickstart" / "study.yaml"

RULES = '''
import pyomo.environ as pyo

CALLS = []  # top-level code runs when the study is loaded; the tests only need the functions


def even_spines(block, ctx):
    """At most an even number of tier-2 switches (as studies/hooks/example_hooks.py)."""
    spines = ctx.handles.switches_by_level.get(2)
    if spines is not None:
        block.half = pyo.Var(domain=pyo.NonNegativeIntegers)
        block.even = pyo.Constraint(expr=spines == 2 * block.half)


def pp_at_most_1(design, strategy, metrics):
    return float(strategy.pp - 1)
'''

# Cornuejols & Dawande (1999) market split: m equality rows over 10(m-1) binaries, coefficients in
# [0, 99], right-hand sides half the row sums. Branch and bound takes far longer than this test waits.
MARKET_SPLIT = '''
import random

import pyomo.environ as pyo


def market_split(block, ctx):
    rng = random.Random(7)
    m, n = 4, 30
    a = [[rng.randint(0, 99) for _ in range(n)] for _ in range(m)]
    block.x = pyo.Var(range(n), domain=pyo.Binary)
    block.rows = pyo.ConstraintList()
    for i in range(m):
        block.rows.add(sum(a[i][j] * block.x[j] for j in range(n)) == sum(a[i]) // 2)
'''


def cli(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "designer.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


def _study_folder(tmp_path: Path) -> Path:
    """A study in its own folder with its code beside it: rules.py (a module) and lib/rules2.py (a file)."""
    folder = tmp_path / "project" / "study"
    (folder / "lib").mkdir(parents=True)
    (folder / "rules.py").write_text(RULES)
    (folder / "lib" / "rules2.py").write_text(RULES)
    data = yaml.safe_load(QUICK.read_text())
    data["name"] = "code-study"
    data["network"]["gpus"] = {"min": 256, "max": 256}
    data["network"]["choices"]["nics"] = [{"id": "cx7_400g"}]
    data["network"]["choices"]["families"] = ["rail-optimized"]
    data["network"]["hooks"] = ["rules:even_spines"]
    data["constraints"] = ["lib/rules2.py:pp_at_most_1"]
    data["output"] = {"plots": False, "dir": "results-here"}
    (folder / "study.yaml").write_text(yaml.safe_dump(data))
    return folder


def test_hooks_constraints_and_output_resolve_against_the_study_folder(tmp_path):
    folder = _study_folder(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = cli("run", str(folder / "study.yaml"), cwd=elsewhere)
    assert out.returncode == 0, out.stderr
    import pandas as pd

    front = pd.read_csv(folder / "results-here" / "pareto.csv")  # output.dir is relative to the study file
    assert len(front) >= 1 and (front["pp"] == 1).all()  # the trial constraint, loaded from lib/rules2.py
    assert not (elsewhere / "results-here").exists()


def test_no_hooks_refuses_a_study_that_names_code_before_anything_runs(tmp_path):
    folder = _study_folder(tmp_path)
    (folder / "rules.py").write_text("raise SystemExit('top-level code ran')\n")
    out = cli("run", str(folder / "study.yaml"), "--no-hooks", cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    line, = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert "--no-hooks" in line and "network.hooks: rules:even_spines" in line
    assert "constraints: lib/rules2.py:pp_at_most_1" in line and "Traceback" not in out.stderr
    assert not (folder / "results-here").exists()
    net = cli("network", str(folder / "study.yaml"), "--no-hooks", cwd=tmp_path)
    assert net.returncode == 2 and "--no-hooks" in net.stderr and "top-level code ran" not in net.stderr


def test_a_network_hook_and_a_trial_constraint_from_one_module_both_load(tmp_path):
    """Both kinds of reference go through one loader: the same module serves both."""
    folder = _study_folder(tmp_path)
    data = yaml.safe_load((folder / "study.yaml").read_text())
    data["constraints"] = ["rules:pp_at_most_1"]
    (folder / "study.yaml").write_text(yaml.safe_dump(data))
    out = cli("run", str(folder / "study.yaml"), "--out", str(tmp_path / "o"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("where", ["hook", "constraint", "import"])
def test_study_code_that_calls_sys_exit_fails_in_one_line(where, tmp_path):
    # sys.exit() in a hook, in a trial constraint or at a module's top level is that code's failure,
    # named as such: the command exits 2 with one line, never 0 with no output and no results
    folder = _study_folder(tmp_path)
    exits = "import sys\n\n\ndef even_spines(block, ctx):\n    sys.exit(0)\n"
    if where == "constraint":
        (folder / "lib" / "rules2.py").write_text("import sys\n\n\ndef pp_at_most_1(d, s, m):\n    sys.exit(0)\n")
    else:
        (folder / "rules.py").write_text(exits if where == "hook" else "import sys\nsys.exit(0)\n")
    out = cli("run", str(folder / "study.yaml"), "--out", str(tmp_path / "o"), cwd=tmp_path)
    line, = [ln for ln in out.stderr.splitlines() if ln.strip() and not ln.startswith("WARNING")]
    assert out.returncode == 2 and "SystemExit" in line and "Traceback" not in out.stderr, out.stderr
    assert not (tmp_path / "o" / "pareto.csv").exists()


def test_catalog_extra_files_resolve_against_the_study_folder(tmp_path):
    folder = tmp_path / "s"
    folder.mkdir()
    (folder / "mine.yaml").write_text(yaml.safe_dump({"nics": [{
        "id": "my_nic_400g", "gbps": 400, "price_usd": 1234.0, "power_w": 20.0,
        "source": "test fixture"}]}))
    study = {"name": "cat", "catalog": {"extra_files": ["mine.yaml"]},
             "choices": {"platforms": ["hgx_h100_8"], "nics": [{"id": "my_nic_400g"}], "switches": [{"id": "qm9790"}],
                         "families": ["rail-optimized"]},
             "gpus": {"count": 256}}
    (folder / "net.yaml").write_text(yaml.safe_dump(study))
    out = cli("network", str(folder / "net.yaml"), "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "my_nic_400g" in out.stdout


def test_ctrl_c_inside_highs_is_an_interruption_not_a_time_limit(tmp_path):
    (tmp_path / "hard.py").write_text(MARKET_SPLIT)
    study = {"name": "hard", "hooks": ["hard.py:market_split"],
             "choices": {"platforms": ["hgx_h100_8"], "nics": [{"id": "cx7_400g"}], "switches": [{"id": "qm9790"}],
                         "families": ["rail-optimized"]},
             "gpus": {"count": 1024}, "solver": {"time_limit_s": 120, "threads": 1}}
    (tmp_path / "hard.yaml").write_text(yaml.safe_dump(study))
    # as from a terminal: a shell starts background jobs with SIGINT ignored and children inherit
    # that (a CI run started with `&` would), so the child takes Python's default Ctrl-C handler back
    child = ("import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
             "sys.argv = ['designer', 'network', sys.argv[1]]; runpy.run_module('designer.cli', run_name='__main__')")
    proc = subprocess.Popen([sys.executable, "-c", child, str(tmp_path / "hard.yaml")],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(6)  # start-up, model build, and well into branch and bound
    assert proc.poll() is None, proc.communicate()
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert time.monotonic() - sent < 10  # stopped the solve, did not wait for the 120 s limit
    line, = [ln for ln in err.splitlines() if ln.strip()]
    assert "interrupted" in line and "time limit" not in line and "Traceback" not in err
