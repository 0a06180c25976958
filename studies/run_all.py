"""Run every study and refresh the committed reference results under results/, printing each wall time.

    .venv/bin/python studies/run_all.py            # everything (full variants, then the --quick ones)
    .venv/bin/python studies/run_all.py --only railonly

Study specs (YAML) run through `designer run` into out/<name>/; the reference files are then copied
into results/<name>/ (the trials table, the run's metadata and the journal stay in out/, since they
hold wall times and paths). Study scripts (.py) write their own results/ files.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

REPO = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
REFERENCE_FILES = ("pareto.csv", "trials.parquet", "designs.csv", "megatron_args.txt", "pareto.png")

# (results folder, study spec) for the YAML studies.
SPECS = (
    ("quickstart", "studies/quickstart/study.yaml"),
    ("gpt1t_fabrics", "studies/gpt1t_fabrics/study.yaml"),
    ("llama405b_budget", "studies/llama405b_budget/study.yaml"),
    ("llama405b_budget/power_sweep", "studies/llama405b_budget/power_sweep.yaml"),
    ("moe_rail_only", "studies/moe_rail_only/study.yaml"),
    ("railonly/headline", "studies/railonly/headline.yaml"),
    ("deadline/llama405b_60_days", "studies/deadline/llama405b_60_days.yaml"),
    ("deadline/llama70b_fastest_300m_25mw", "studies/deadline/llama70b_fastest_300m_25mw.yaml"),
    ("deadline/deepseek_v3_60_days", "studies/deadline/deepseek_v3_60_days.yaml"),
)
# Scripts that write their own results; those with a --quick variant run it too (the tests compare it).
SCRIPTS = (
    ("studies/custom_budget/run.py", False),
    *((f"studies/railonly/{name}.py", True) for name in
      ("cost_power", "failures", "hb_sweep", "bandwidth_sweep", "batch_size", "traffic_sparsity", "moe_alltoall")),
    *((f"studies/collectives/{name}.py", True) for name in ("busbw_landscape", "algorithm_choice", "zero_stages")),
    ("studies/collectives/measured_curves.py", False),
    ("studies/reliability/goodput_vs_gpus.py", False),
    ("studies/tco/run.py", False),
)


def _run(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode="rich")


@app.command(help=escape(__doc__))
def main(only: Annotated[str, typer.Option("--only", help="run only the studies whose path contains this text")] = "",
         ) -> None:
    total = 0.0
    for folder, spec in SPECS:
        if only not in spec:
            continue
        work = REPO / "out" / folder
        shutil.rmtree(work, ignore_errors=True)
        wall = _run([PYTHON, "-m", "designer.cli", "run", spec, "--out", str(work)])
        dest = REPO / "results" / folder
        dest.mkdir(parents=True, exist_ok=True)
        for f in (*REFERENCE_FILES, *(p.name for p in work.glob("pareto_by_*.csv")), *(p.name for p in work.glob("goal.json"))):
            shutil.copy2(work / f, dest / f)
        total += wall
        print(f"{spec:45s} {wall:7.1f} s")
    for script, has_quick in SCRIPTS:
        if only not in script:
            continue
        for extra in ([], ["--quick"]) if has_quick else ([],):
            wall = _run([PYTHON, script, *extra])
            total += wall
            print(f"{script + ' ' + ' '.join(extra):45s} {wall:7.1f} s")
    print(f"{'all studies':45s} {total:7.1f} s")


if __name__ == "__main__":
    app()
