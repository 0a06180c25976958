"""The conventions of a Python command-line tool: --version, -q / -v through `logging`, --help on every
option, --json on run and pareto, whole design ids in tables, the files written named exactly, and the
public API importable from the package."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
QUICK = ROOT / "studies" / "quickstart" / "study.yaml"


def cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "designer.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env={"COLUMNS": "250", "PATH": "/usr/bin:/bin"})


@pytest.fixture(scope="module")
def small_study(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("conv")
    data = yaml.safe_load(QUICK.read_text())
    data["network"]["gpus"] = {"min": 256, "max": 512, "multiple_of": 256}
    data["network"]["choices"]["nics"] = [{"id": "cx7_400g"}]
    data["output"] = {"plots": False}
    p = tmp / "study.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def test_version():
    from designer import __version__

    out = cli("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"designer {__version__}"


def test_every_option_of_every_command_has_help():
    from designer.cli import app
    import typer

    command = typer.main.get_command(app)
    missing = []
    for name, sub in command.commands.items():
        for param in sub.params:
            if getattr(param, "param_type_name", "") == "option" and not getattr(param, "help", None):
                missing.append(f"{name} {param.opts}")
    assert not missing, missing


def test_run_json_quiet_and_the_files_written(small_study, tmp_path):
    out_dir = tmp_path / "o"
    res = cli("run", str(small_study), "--out", str(out_dir), "--json")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)  # stdout is one JSON object, nothing else
    meta = json.loads((out_dir / "meta.json").read_text())
    # the files listed are exactly those on disk and in the completion record, meta.json last
    assert data["files"][-1] == "meta.json"
    assert set(data["files"]) == set(meta["files"]) | {"meta.json"}
    on_disk = {p.relative_to(out_dir).as_posix() for p in out_dir.rglob("*") if p.is_file() and not p.name.startswith(".")
               and p.name != "optuna.journal"}
    assert set(data["files"]) == on_disk
    assert not any(f.endswith((".png", ".html")) for f in data["files"])  # plots are off in this study
    front = pd.read_csv(out_dir / "pareto.csv")
    assert data["n_front_points"] == len(front) == len(data["front"])
    assert [p["design_id"] for p in data["front"]] == list(front["design_id"])
    quiet = cli("-q", "run", str(small_study), "--out", str(out_dir))
    assert quiet.returncode == 0 and quiet.stdout == "" and quiet.stderr == ""
    table = cli("run", str(small_study), "--out", str(out_dir))
    # whole design ids in the table: each front id appears unbroken, and the summary names every file
    for did in front["design_id"]:
        assert did in table.stdout
    assert "written to" in table.stdout and "designs.csv" in table.stdout and "pareto.png" not in table.stdout
    pj = cli("pareto", str(out_dir), "--json")
    assert pj.returncode == 0
    assert [p["design_id"] for p in json.loads(pj.stdout)["front"]] == list(front["design_id"])


def test_verbose_logs_through_logging(small_study, tmp_path):
    res = cli("-v", "run", str(small_study), "--out", str(tmp_path / "o"), "--json")
    assert res.returncode == 0, res.stderr
    assert "INFO designer.pipeline: searching" in res.stderr
    json.loads(res.stdout)  # the logs go to stderr, the JSON stays alone on stdout
    assert "INFO" not in cli("run", str(small_study), "--out", str(tmp_path / "o"), "--json").stderr


def test_the_public_api_is_importable_from_the_package():
    import designer

    for name in ("load_study", "run_study", "solve_network", "evaluate", "load_scenario", "read_pareto"):
        assert callable(getattr(designer, name)), name
        assert name in designer.__all__
    assert (Path(designer.__file__).parent / "py.typed").is_file()
    res = subprocess.run([sys.executable, "-c", "import designer, sys; print('pyomo' in sys.modules, 'optuna' in sys.modules)"],
                         capture_output=True, text=True)
    assert res.stdout.split() == ["False", "False"]  # importing the package loads nothing heavy
