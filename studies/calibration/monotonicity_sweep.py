"""A faster machine never trains slower: a sweep of random strategies over the model's monotonic properties.

For each scenario (a model on a GPU, one HB size), --n random strategies (every parallelism, schedule,
ZeRO stage, recompute, overlap, offload and dispatcher knob drawn at random, the infeasible ones
dropped) are scored on the base system and on a faster one: FP8 in place of BF16 (Hopper and
Blackwell), 1.5x every peak FLOP rate, 2x the HBM bandwidth, 2x the HB (NVLink) bandwidth, 2x the NIC
and tier bandwidth. Prints, per variant, the strategies feasible on both, how many came out slower
(beyond 1e-9 relative) and the worst ratio, with that strategy's scenario and row.

    .venv/bin/python studies/calibration/monotonicity_sweep.py [--n 6000] [--seed 100]

About 15 s on two cores at the default size.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.markup import escape

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from designer.perf.model import evaluate_many, load_perf_calibration  # noqa: E402
from designer.perf.records import StrategyArrays  # noqa: E402
from designer.spec.llm import TrainingSpec  # noqa: E402
from designer.spec.models import load_model  # noqa: E402
from designer.spec.system import ClusterSystem  # noqa: E402
from tests.perf.systems import cluster  # noqa: E402

# (model, GPU, GPUs, HB size, sequence, global batch in sequences)
SCENARIOS = (
    ("llama3-8b", "h100_sxm", 256, 8, 4096, 512),
    ("llama3-70b", "h100_sxm", 512, 8, 8192, 1024),
    ("mixtral-8x7b", "h100_sxm", 256, 8, 4096, 1024),
    ("qwen3-30b-a3b", "b200", 256, 8, 4096, 1024),
    ("deepseek-v3", "h200_sxm", 1024, 8, 4096, 2048),
    ("gpt-oss-120b", "gb200", 576, 72, 8192, 1152),
    ("llama3-70b", "gb200", 512, 64, 16384, 512),
)
RELATIVE_TOLERANCE = 1e-9


def random_strategies(rng: np.random.Generator, n: int, n_gpus: int, moe: bool, n_layers: int) -> StrategyArrays:
    """n strategies with every knob drawn at random; those whose tp·pp·cp does not divide the GPUs dropped."""
    tp = rng.choice([1, 2, 4, 8], n)
    pp = rng.choice([1, 2, 4, 8], n)
    cp = rng.choice([1, 1, 2, 4], n)
    fits = n_gpus % (tp * pp * cp) == 0
    schedule = np.where(pp == 1, 1, rng.choice([0, 1, 2, 3, 4], n))
    uneven = (rng.random(n) < 0.3) & (pp > 1)
    dedup = (rng.random(n) < 0.4) & moe
    cols = dict(
        tp=tp, pp=pp, cp=cp, dp=np.maximum(n_gpus // (tp * pp * cp), 1),
        ep=rng.choice([1, 2, 4, 8, 16, 32], n) if moe else np.ones(n, int),
        sp=rng.random(n) < 0.7, mbs=rng.choice([1, 2, 4], n), schedule=schedule,
        v=np.where(schedule == 2, rng.choice([2, 3, 4], n), 1), zero=rng.choice([0, 1, 2, 3], n),
        qwz=np.zeros(n, bool), qgz=np.zeros(n, bool), hpz=np.zeros(n, bool), recompute=rng.choice([0, 1, 2], n),
        overlap_dp=rng.random(n) < 0.7, overlap_tp=rng.random(n) < 0.5,
        etp=rng.choice([0, 1], n) if moe else np.zeros(n, int),
        pp_first=np.where(uneven, rng.integers(1, max(n_layers // 2, 2), n), -1),
        pp_last=np.where(uneven, rng.integers(1, max(n_layers // 2, 2), n), -1),
        shard_group=rng.choice([0, 0, 8, 16], n), overlap_ep=(rng.random(n) < 0.5) & moe,
        offload_opt=rng.random(n) < 0.15, dedup=dedup, ag_dispatch=~dedup & (rng.random(n) < 0.2) & moe,
        graphs=rng.random(n) < 0.3, offload_w=rng.random(n) < 0.1,
        offload_act=np.where(rng.random(n) < 0.15, rng.integers(1, 4, n), 0), cp_comm=rng.choice([0, 1, 2], n),
        prefetch=rng.choice([1, 2], n), grouped_gemm=(rng.random(n) < 0.5) & moe, reshard=rng.random(n) < 0.8,
        overlap_pp=rng.random(n) < 0.8)
    return StrategyArrays(**cols).take(fits)


def faster_systems(base: ClusterSystem) -> dict[str, ClusterSystem]:
    g = base.gpu
    tiers_x2 = tuple(t.model_copy(update={"bandwidth_per_gpu_bytes_per_s": 2 * t.bandwidth_per_gpu_bytes_per_s})
                     for t in base.tiers)
    return {
        "1.5x peak": base.model_copy(update={"gpu": g.model_copy(update={
            "peak_flops": {k: 1.5 * v for k, v in g.peak_flops.items()}})}),
        "2x HBM bandwidth": base.model_copy(update={"gpu": g.model_copy(update={
            "hbm_bandwidth_bytes_per_s": 2 * g.hbm_bandwidth_bytes_per_s})}),
        "2x HB bandwidth": base.model_copy(update={"hb": base.hb.model_copy(update={
            "bandwidth_per_gpu_bytes_per_s": 2 * base.hb.bandwidth_per_gpu_bytes_per_s})}),
        "2x NIC and tiers": base.model_copy(update={
            "nic_bandwidth_per_gpu_bytes_per_s": 2 * base.nic_bandwidth_per_gpu_bytes_per_s, "tiers": tiers_x2}),
    }


app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode="rich")


@app.command(help=escape(__doc__))
def main(n: Annotated[int, typer.Option("--n", min=1, help="random strategies drawn per scenario")] = 6000,
         seed: Annotated[int, typer.Option("--seed", help="the first scenario's seed; the next ones count up")] = 100,
         ) -> None:
    calib = load_perf_calibration()
    tally: dict[str, list] = {}  # variant -> [feasible on both, slower, worst ratio, where]
    for i, (model, gpu, n_gpus, hb, seq, batch) in enumerate(SCENARIOS):
        llm = load_model(model)
        S = random_strategies(np.random.default_rng(seed + i), n, n_gpus, llm.moe is not None, llm.layers)
        base = cluster(gpu, n_gpus, hb_size=hb, leaf_span=8 if hb == 8 else 2)

        def training(precision: str) -> TrainingSpec:
            return TrainingSpec(sequence_length=seq, global_batch_sequences=batch, total_tokens=1e12,
                                precision=precision)

        slow = evaluate_many(llm, training("bf16"), S, base, calib=calib)
        pairs = {name: evaluate_many(llm, training("bf16"), S, system, calib=calib)
                 for name, system in faster_systems(base).items()}
        if "fp8" in base.gpu.peak_flops:
            pairs["FP8 for BF16"] = evaluate_many(llm, training("fp8"), S, base, calib=calib)
        for name, fast in pairs.items():
            both = slow.feasible & fast.feasible
            ratio = np.where(both, fast.iteration_time_s / slow.iteration_time_s, 0.0)
            entry = tally.setdefault(name, [0, 0, 1.0, ""])
            entry[0] += int(both.sum())
            entry[1] += int((ratio > 1 + RELATIVE_TOLERANCE).sum())
            j = int(np.argmax(ratio))
            if ratio[j] > entry[2]:
                entry[2], entry[3] = float(ratio[j]), f"{model} on {n_gpus} {gpu}, strategy row {j}"
    print(f"{'faster':<18} {'strategies':>10} {'slower':>7} {'worst':>9}  where")
    for name, (both, slower, worst, where) in tally.items():
        print(f"{name:<18} {both:>10,} {slower:>7,} {100 * (worst - 1):>+8.3f}%  {where}")


if __name__ == "__main__":
    app()
