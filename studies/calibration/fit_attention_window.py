"""Fit the fused attention kernels' fixed work per query tile on cuDNN's sliding-window benchmark.

A local (sliding-window) layer's 128-query tiles each walk the same few key tiles of their band, so
the kernel's fixed work per query tile weighs more than in a causal layer: designer prices a local
layer at ceiling x head-dim factor x n/(n + overhead), n the band's key tiles (compute.py
local_tile_efficiency). This script finds, per GPU generation and pass, the overhead (in key tiles'
worth of work) that best matches cuDNN's own benchmark runs with a sliding window
(tests/perf/data/cudnn_sdpa_benchmark.yaml window_curves: GB200 for Blackwell, H200 for Hopper), least
squares in the log of the time, and prints each point's error. GB300 is printed, not fitted: it runs
at GB200's speed there, where designer gives it Blackwell Ultra's causal-kernel gain
(attention.clock_scale_by_gpu), so designer's is the faster one.
designer/data/compute_efficiency.yaml attention.local_tile_overhead holds the values.

    python studies/calibration/fit_attention_window.py
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import typer

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from designer.perf.model import load_perf_calibration  # noqa: E402
from tests.perf import cudnn_bench  # noqa: E402

FITTED_ON = {"blackwell": "gb200_swa128", "hopper": "h200_swa1024"}
PRINTED = {"gb300_swa128": "blackwell"}


def log_errors(ccal, curve: str) -> tuple[np.ndarray, np.ndarray]:
    """log(designer / measured) per kept local point, forward and backward."""
    data = cudnn_bench.DATA["window_curves"][curve]
    fwd, bwd = cudnn_bench.window_times_ms(curve, ccal)
    local = cudnn_bench.banded(curve)
    return (np.log(fwd / np.array(data["forward_ms"]))[local & cudnn_bench.kept_points(curve, "forward")],
            np.log(bwd / np.array(data["backward_ms"]))[local & cudnn_bench.kept_points(curve, "backward")])


def fit(ccal, architecture: str, curve: str) -> tuple[float, float]:
    """The overhead per pass (key tiles, to 0.01) with the least RMS log error on the curve's local
    points (a point whose band spans the context runs as a global layer: no overhead reaches it)."""
    grid = np.round(np.arange(0.0, 12.0, 0.01), 2)
    rms = np.array([[np.sqrt(np.mean(np.square(err))) for err in log_errors(
        dataclasses.replace(ccal, attention_local_tile_overhead=((architecture, x, x),)), curve)] for x in grid])
    return float(grid[int(np.argmin(rms[:, 0]))]), float(grid[int(np.argmin(rms[:, 1]))])


def main() -> None:
    ccal = load_perf_calibration().compute
    fitted = {arch: fit(ccal, arch, curve) for arch, curve in FITTED_ON.items()}
    tuned = dataclasses.replace(ccal, attention_local_tile_overhead=tuple(
        (arch, f, b) for arch, (f, b) in fitted.items()))
    for arch, (f, b) in fitted.items():
        print(f"{arch}: forward {f:.2f}, backward {b:.2f} key tiles per query tile (fitted on {FITTED_ON[arch]})")
    for curve in [*FITTED_ON.values(), *PRINTED]:
        data = cudnn_bench.DATA["window_curves"][curve]
        fwd, bwd = cudnn_bench.window_times_ms(curve, tuned)
        print(f"\n{curve} ({data['gpu']}, window {data['window']}){'' if curve in FITTED_ON.values() else ' -- not fitted'}")
        print(f"{'seq':>6} {'fwd ms':>8} {'designer':>9} {'error':>7}   {'bwd ms':>8} {'designer':>9} {'error':>7}")
        banded = cudnn_bench.banded(curve)
        for i, s in enumerate(data["seq"]):
            note = ("" if banded[i] else "  global: the band spans the causal context") + (
                "" if cudnn_bench.kept_points(curve, "forward")[i] else "  forward outside the model")
            print(f"{s:>6} {data['forward_ms'][i]:>8.3f} {fwd[i]:>9.3f} {fwd[i] / data['forward_ms'][i] - 1:>+7.1%}"
                  f"   {data['backward_ms'][i]:>8.3f} {bwd[i]:>9.3f} {bwd[i] / data['backward_ms'][i] - 1:>+7.1%}{note}")


if __name__ == "__main__":
    typer.run(main)
