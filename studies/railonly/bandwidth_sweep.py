"""Bandwidth sweep: best-strategy iteration time against NIC and HB bandwidth per GPU on rail-only.

    .venv/bin/python studies/railonly/bandwidth_sweep.py [--quick]

GPT-1T (3,072 sequences) and PaLM-540B (2,048 sequences) at N = 32,768 GPUs, HB domains of K = 256
(DGX GH200-like) and K = 8 (DGX H100-like), rail-only, the paper's GPU (H100 fp8; railonly_common.py).
Two one-dimensional sweeps around the paper's point (B_F = 900 GB/s, B_S = 400 Gb/s):

* NIC bandwidth per GPU 100, 200, 400, 800, 1,600 Gb/s at B_F = 900 GB/s;
* HB bandwidth per GPU 150, 300, 450, 900, 1,800 GB/s at B_S = 400 Gb/s
  (NVLink3 = 300, NVLink4 = 450 per direction / 900 in the paper's figure, NVLink5 = 900 / 1,800).

Each point is the full model at the best strategy of the whole grid (TP | K, PP, DP, microbatch,
recomputation, ZeRO, SP, schedule), next to the V1 reduced model (railonly.md §3 Eq. (1), best N_M | K).
Expected from the paper's reasoning: at K = 256 TP and the in-domain DP stage ride the HB domain, so
the time is insensitive to B_S and falls with B_F until compute dominates; at K = 8 more of the traffic
(DP across N/K domains, or pipeline stages) rides the NICs, so B_S matters more.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from railonly_common import (  # noqa: E402
    save_figure,
    OUT_DIR, PAPER_BATCH_SEQUENCES, PAPER_HB_BYTES_PER_S, PAPER_NIC_BYTES_PER_S, Timer, best_row, cli, make_system,
    pick, score, strategy_grid, suffix, training, v1_times, write_csv,
)
from designer.spec.models import load_model  # noqa: E402

MODELS = ("gpt-1t", "palm-540b")
N_GPUS = 32768
HB_SIZES = (256, 8)
NIC_GBPS = (100, 200, 400, 800, 1600)
HB_GB_PER_S = (150, 300, 450, 900, 1800)
QUICK = dict(models=("gpt-1t",), hb_sizes=(256,), nic_gbps=(100, 400, 1600), hb_gb_per_s=(150, 900, 1800))


def sweep(models, hb_sizes, nic_gbps, hb_gb_per_s) -> pd.DataFrame:
    rows = []
    for name in models:
        llm = load_model(name)
        tr = training(PAPER_BATCH_SEQUENCES[name])
        for k in hb_sizes:
            grid = strategy_grid(llm, tr, N_GPUS, k)
            points = [("nic", g * 1e9 / 8, PAPER_HB_BYTES_PER_S) for g in nic_gbps]
            points += [("hb", PAPER_NIC_BYTES_PER_S, b * 1e9) for b in hb_gb_per_s]
            for swept, nic, hb in points:
                sy = make_system(N_GPUS, k, "rail-only", hb_bytes_per_s=hb, nic_bytes_per_s=nic)
                S, vm = score(llm, tr, sy, grid=grid)
                r = best_row(pick(llm, tr, sy, S, vm))
                v1 = v1_times(llm, N_GPUS, k, tr.tokens_per_iteration, hb_bytes_per_s=hb, nic_bytes_per_s=nic)
                rows.append({"model": name, "n_gpus": N_GPUS, "hb_size": k, "swept": swept,
                             "nic_gbps": nic * 8 / 1e9, "hb_gb_per_s": hb / 1e9,
                             "batch_sequences": tr.global_batch_sequences,
                             "full_iteration_time_s": r.get("iteration_time_s"), "full_strategy": r.get("strategy"),
                             "full_compute_s": r.get("compute_s"), "full_exposed_comm_s": r.get("exposed_comm_s"),
                             "full_bubble_s": r.get("bubble_s"), "full_host_s": r.get("host_s"), "full_mfu": r.get("mfu"),
                             "v1_iteration_time_s": v1["v1_iteration_time_s"], "v1_tp": v1["v1_tp"]})
    return pd.DataFrame(rows)


def plot(df: pd.DataFrame, path: Path) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, swept, xcol, xlabel in ((axes[0], "nic", "nic_gbps", "NIC bandwidth per GPU (Gb/s), B_F = 900 GB/s"),
                                    (axes[1], "hb", "hb_gb_per_s", "HB bandwidth per GPU (GB/s), B_S = 400 Gb/s")):
        d = df[df.swept == swept]
        for i, ((model, k), g) in enumerate(d.groupby(["model", "hb_size"], sort=False)):
            ax.plot(g[xcol], g.full_iteration_time_s, "o-", color=f"C{i}", label=f"{model} K={k} full")
            ax.plot(g[xcol], g.v1_iteration_time_s, "^--", color=f"C{i}", alpha=0.6, label=f"{model} K={k} V1")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("iteration time (s)")
        ax.set_title(f"rail-only, N = {N_GPUS:,}", fontsize=9)
    axes[0].legend(fontsize=7)
    save_figure(fig, path)


def main(quick: bool = False, out_dir: Path = OUT_DIR) -> pd.DataFrame:
    out_dir = Path(out_dir)
    with Timer(f"bandwidth_sweep{' --quick' if quick else ''}"):
        kw = QUICK if quick else dict(models=MODELS, hb_sizes=HB_SIZES, nic_gbps=NIC_GBPS, hb_gb_per_s=HB_GB_PER_S)
        df = sweep(**kw)
        write_csv(df, out_dir, f"bandwidth_sweep{suffix(quick)}.csv")
        plot(df, out_dir / f"bandwidth_sweep{suffix(quick)}.png")
        print(df[["model", "hb_size", "swept", "nic_gbps", "hb_gb_per_s", "full_iteration_time_s",
                  "v1_iteration_time_s", "full_strategy"]].to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    return df


if __name__ == "__main__":
    main(quick=cli(__doc__))
