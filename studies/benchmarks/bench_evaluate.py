"""Throughput of the vectorized performance model and latency of the scalar one.

Run: .venv/bin/python studies/benchmarks/bench_evaluate.py [--n 100000]
Scores a space of >= 100,000 strategies (tp, pp, dp, cp, microbatch, schedule, ZeRO, recompute, SP,
overlap) for Llama-3 70B on one 4,096-GPU H100 design with evaluate_many, and times evaluate_system.
"""

from __future__ import annotations

import itertools
import statistics
import time
from typing import Annotated

import numpy as np
import typer
from rich.markup import escape

from designer import units
from designer.perf.model import StrategyArrays, evaluate_many, evaluate_system, load_perf_calibration
from designer.spec.catalog import load_catalog
from designer.spec.llm import Recompute, Strategy, TrainingSpec
from designer.spec.models import load_model
from designer.spec.system import ClusterSystem, HBDomain, NetworkTier


def design(n_gpus: int = 4096) -> ClusterSystem:
    g = load_catalog().gpu("h100_sxm")
    nic = units.gbps_to_bytes_per_s(400)
    n_dom = n_gpus // 8
    return ClusterSystem(gpu=g.perf(), n_gpus=n_gpus, hb=HBDomain(size=8, bandwidth_per_gpu_bytes_per_s=450e9),
                         nic_bandwidth_per_gpu_bytes_per_s=nic,
                         tiers=(NetworkTier(name="leaf", span_domains=32, cross_rail=False, bandwidth_per_gpu_bytes_per_s=nic),
                                NetworkTier(name="spine", span_domains=n_dom, cross_rail=True, bandwidth_per_gpu_bytes_per_s=nic)))


def strategy_space(n_gpus: int, n_target: int) -> StrategyArrays:
    """A full factorial over the strategy knobs, with dp filling the GPUs; repeated to n_target rows."""
    rows = []
    for tp, pp, cp, mbs, sched_v, zero, rc, sp, ovl in itertools.product(
            (1, 2, 4, 8), (1, 2, 4, 8, 16), (1, 2), (1, 2, 4, 8), ((1, 1), (0, 1), (2, 2), (2, 4)),
            (0, 1, 2, 3), (0, 1, 2), (False, True), (False, True)):
        dp = n_gpus // (tp * pp * cp)
        rows.append((tp, pp, dp, 1, cp, sp, mbs, sched_v[0], sched_v[1], zero, False, False, False, rc, ovl, False))
    cols = np.array(rows, dtype=np.int64)
    reps = -(-n_target // len(cols))
    cols = np.tile(cols, (reps, 1))[:max(n_target, len(rows))]
    names = ("tp", "pp", "dp", "ep", "cp", "sp", "mbs", "schedule", "v", "zero", "qwz", "qgz", "hpz", "recompute",
             "overlap_dp", "overlap_tp")
    return StrategyArrays(**{n: cols[:, i] for i, n in enumerate(names)})


app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode="rich")


@app.command(help=escape(__doc__))
def main(n: Annotated[int, typer.Option(
             "--n", help="strategies to score with evaluate_many (at least the full factorial)")] = 100_000,
         repeats: Annotated[int, typer.Option(
             "--repeats", help="timed evaluate_many calls (the median is printed)")] = 3,
         optimizer: Annotated[str, typer.Option(
             "--optimizer", help="the training's optimizer: adam or muon (TrainingSpec.optimizer)")] = "adam",
         ) -> None:
    if optimizer not in ("adam", "muon"):
        raise typer.BadParameter(f"--optimizer {optimizer!r}: give adam or muon")
    llm = load_model("llama3-70b")
    training = TrainingSpec(sequence_length=8192, global_batch_sequences=2048, total_tokens=15e12, optimizer=optimizer)
    system = design()
    calib = load_perf_calibration()
    S = strategy_space(system.n_gpus, n)
    evaluate_many(llm, training, S.take(slice(0, 100)), system, calib=calib)  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        vm = evaluate_many(llm, training, S, system, calib=calib)
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    print(f"evaluate_many: {len(S)} strategies in {med:.3f} s (median of {repeats}; best {min(times):.3f} s) "
          f"= {len(S) / med:,.0f} evaluations/s; feasible {int(vm.feasible.sum())}")
    st = Strategy(tp=8, pp=4, dp=128, microbatch_size=1, sequence_parallel=True, recompute=Recompute.selective)
    lat = []
    for _ in range(30):
        t0 = time.perf_counter()
        evaluate_system(llm, training, st, system, calib=calib)
        lat.append(time.perf_counter() - t0)
    print(f"evaluate_system: median latency {1e3 * statistics.median(lat):.2f} ms over {len(lat)} calls")


if __name__ == "__main__":
    app()
