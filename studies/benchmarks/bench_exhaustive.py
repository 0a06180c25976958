"""One design's exhaustive strategy search at millions of strategies: wall time, rate and peak memory.

Llama-3 70B on 2,048 H100 GPUs (rail-optimized, one 400G NIC per GPU) with a wide strategy space
(every tp and pp, cp 1-8 with three CP schemes, microbatch 1-8, four schedules, ZeRO 0-3, three recompute
modes, overlap and offload options). Printed: the space size, the wall time, strategies per second,
the rows kept and the process's peak RSS (resource.getrusage).

    .venv/bin/python studies/benchmarks/bench_exhaustive.py [--space wide|10m|narrow] [--cli]

--cli runs the same study through `designer run` in a child process instead (the whole command: spec
loading, the network solve, the search, the Parquet/CSV export and the report), and prints its wall
time, the child's peak RSS and what it wrote.

wide: 8,208,000 strategies; 10m: 10,260,000 (wide, with 3 offloaded activation layers among the
choices too); narrow: about 1M. Each keeps to Megatron's own pipeline split (`pipeline_split:
[megatron]`), so its size stays comparable across versions; --balanced adds the balanced split, as the
default strategy space does (10m: 12,711,600 strategies).
"""

from __future__ import annotations

import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import typer
import yaml

from designer.network.api import solve_network
from designer.network.design import design_to_system
from designer.pipeline import make_problem
from designer.search.exhaustive import Candidate, run_exhaustive
from designer.spec.network_study import study_catalog
from designer.spec.study import StudySpec

app = typer.Typer(add_completion=False)


@app.command()
def main(space_name: str = typer.Option("wide", "--space", help="wide (8.2M strategies), 10m (10.3M) or narrow (about 1M)"),
         balanced: bool = typer.Option(False, "--balanced", help="also the balanced pipeline split (the default space's)"),
         cli: bool = typer.Option(False, "--cli", help="run the study through `designer run` in a child process")) -> None:
    if space_name not in ("wide", "10m", "narrow"):
        raise typer.BadParameter(f"--space {space_name}: give wide, 10m or narrow")
    space = {"cp": [1, 2, 4, 8], "cp_comm": ["p2p", "all_gather", "a2a"], "microbatch_sizes": [1, 2, 4, 8],
             "schedules": ["1f1b", "interleaved", "zero_bubble", "gpipe"], "virtual_stages": [2, 4],
             "zero_stages": [0, 1, 2, 3], "recompute": ["none", "selective", "full"],
             "overlap_tp_comm": [False, True], "offload_optimizer": [False, True], "max_pp": 16,
             "pipeline_split": ["megatron", "balanced"] if balanced else ["megatron"]}
    if space_name != "narrow":
        space.update(offload_activation_layers=[0, 1, 2, 4], offload_weights=[False, True], cuda_graphs=[False, True],
                     overlap_dp_comm=[False, True], virtual_stages=[2, 3, 4], microbatch_sizes=[1, 2, 4, 8, 16])
    if space_name == "10m":
        space.update(offload_activation_layers=[0, 1, 2, 3, 4])
    raw = {
        "name": "bench_exhaustive", "model": "llama3-70b",
        "training": {"sequence_length": 8192, "global_batch_sequences": {"target": 1024, "tolerance": 0.1},
                     "total_tokens": 1.5e13},
        "network": {"choices": {"platforms": ["hgx_h100_8"], "nics": [{"id": "cx7_400g"}], "switches": [{"id": "sn5600", "radix": [128]}],
                                "families": ["rail-optimized"]}, "gpus": {"count": 2048}},
        "strategy_space": space}
    if cli:
        run_cli(raw)
        return
    spec = StudySpec.model_validate(raw)
    problem = make_problem(spec)
    catalog = study_catalog(spec.network)
    d = solve_network(spec.network, catalog=catalog).designs[0]
    cand = Candidate("bench", d, design_to_system(d, catalog), d.capex_usd, d.power_w)
    t0 = time.perf_counter()
    size = problem.design_space(cand).size
    t1 = time.perf_counter()
    table = run_exhaustive(problem, cand)
    t2 = time.perf_counter()
    peak_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    print(f"space: {size:,} strategies (counted in {t1 - t0:.2f} s)")
    print(f"exhaustive: {t2 - t1:.1f} s, {table.n_evaluations / (t2 - t1):,.0f} strategies/s, {len(table):,} rows kept, "
          f"best {table.time_to_train_s[table.best] / 86400:.2f} days; peak RSS {peak_gb:.2f} GB")
    print(f"total (count + search): {t2 - t0:.1f} s = {table.n_evaluations / (t2 - t0):,.0f} strategies/s")


def run_cli(raw: dict) -> None:
    """`designer run` on the study, exhaustive search, in a child process."""
    with tempfile.TemporaryDirectory() as tmp:
        spec_path, out = Path(tmp) / "study.yaml", Path(tmp) / "out"
        spec_path.write_text(yaml.safe_dump({**raw, "search": {"method": "exhaustive"}}))
        cmd = [str(Path(sys.executable).with_name("designer")), "run", str(spec_path), "--out", str(out), "--storage",
               str(Path(tmp) / "study.log")]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        peak_gb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1e6
        if proc.returncode:
            sys.exit(f"designer run failed ({proc.returncode}): {proc.stderr.strip()[-400:]}")
        print(f"designer run (exhaustive, whole command): {wall:.1f} s wall, child peak RSS {peak_gb:.2f} GB")
        for f in sorted(p for p in out.rglob("*") if p.is_file() and p.stat().st_size > 100_000):
            print(f"  {f.relative_to(out)}: {f.stat().st_size / 1e6:,.1f} MB")
        print("\n".join(proc.stdout.strip().splitlines()[-3:]))


if __name__ == "__main__":
    app()
