"""Start-up of the command line: `designer --help` and `designer run --help` wall time (target <= 0.5 s),
and which heavy libraries a bare `import designer.cli` loads (none: Pyomo, Optuna, pandas, matplotlib
and plotly load where they are used).

    .venv/bin/python studies/benchmarks/bench_cli.py [--repeats 10]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

import typer

HEAVY = ("pyomo", "optuna", "pandas", "numpy", "matplotlib", "plotly", "highspy", "pydantic", "pyarrow")


def main(repeats: int = typer.Option(10, help="runs per command (the median is printed)")) -> None:
    exe = str(Path(sys.executable).with_name("designer"))
    for args in (["--help"], ["run", "--help"], ["--version"]):
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            subprocess.run([exe, *args], check=True, stdout=subprocess.DEVNULL)
            times.append(time.perf_counter() - t0)
        print(f"designer {' '.join(args):12s} median {statistics.median(times):.3f} s  (min {min(times):.3f}, max {max(times):.3f})")
    probe = ("import sys, designer.cli; print(','.join(sorted({m.split('.')[0] for m in sys.modules} & set(%r))))"
             % (HEAVY,))
    loaded = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True).stdout.strip()
    print(f"heavy libraries loaded by `import designer.cli`: {loaded or 'none'}")


if __name__ == "__main__":
    typer.run(main)
