"""HB-domain sweep: iteration time against the HB domain size K on rail-only (Rail-only V1 Fig. 7).

    .venv/bin/python studies/railonly/hb_sweep.py [--quick]

For GPT-1T, GPT-3 (gpt3-175b), OPT-175B and PaLM-540B at N = 16,384, 32,768 and 65,536 GPUs and
K = 8 ... 1,024, on a rail-only network (railonly.md §1) with the paper's hardware (H100 fp8 1,979
TFLOP/s, B_F = 900 GB/s, B_S = 400 Gb/s; railonly_common.py), at the paper's batches (railonly.md §3:
GPT-3 32M tokens, OPT-175B 2M tokens; PaLM-540B 2,048 and GPT-1T 3,072 sequences, see
PAPER_BATCH_SEQUENCES). At every point:

* full: designer's full model at the best strategy of the whole grid (TP | K, PP, DP, microbatch,
  recomputation, ZeRO 0-3, sequence parallelism, 1F1B / interleaved), scored with evaluate_many;
* full_pp1: the best strategy without a pipeline (the V1 paper's TP x DP layout) in the full model;
* fat_tree: the best strategy on the rail-optimized fat-tree with the same K (the paper's claim:
  rail-only is as fast for dense LLMs, railonly.md §1);
* v1: the paper's reduced model, Eq. (1) minimised over N_M | K (v1_best_time_s), and T_ideal, Eq. (3);
* ideal: the any-to-any network of railonly.md §3 (every GPU pair at B_F): in V1 Eq. (3) with the
  exact minimiser; in the full model the faster of one HB domain of all N GPUs (K = N) and HB domains
  of 256 / 1,024 on a full-bisection fat-tree with NICs at B_F (railonly_common.ideal_best explains
  why both), at the best strategy.

Where and why the two models differ (numbers in results/railonly/hb_sweep.md, written by this script):
1. Compute. V1 charges M_flop/(N·C) = 6·P·tokens at the dense peak; the full model prices every GEMM
   on its efficiency curve (fp8 only in the linear layers), the attention core, the logits, memory-bound
   kernels and the optimizer step -- about 1.5-1.8x V1's compute. This is most of the gap at large K
   and the whole gap between the two ideals.
2. Pipeline. V1 has no pipeline: at small K it must put all non-TP parallelism into DP, whose gradient
   all-reduce over N/K domains at B_S dominates (worst for OPT-175B's 2M-token batch). The full model
   pipelines (PP 8-32 at K = 8) and pays a bubble instead, so it is far below V1 at K = 8-32 and the
   published K-savings (V1 Fig. 7) shrink or move; full_pp1 shows the full model without that option.
3. Overlap. The full model hides the DP reduction behind the backward pass except the last bucket;
   V1 adds every byte to the critical path.
4. Memory. V1 has no HBM limit; the full model's best strategy must fit 80 GiB (ZeRO stage, recomputation,
   microbatch), which rules out some of V1's TP x DP layouts and costs recomputation FLOPs.
5. Latency and efficiencies. The full model prices NCCL's algorithms (ring, tree, hierarchical),
   protocols, per-hop latencies, pipeline fill and the effective NVLink (0.82 of line rate) and NIC
   (0.88) bandwidths; V1 has bandwidth terms at line rate only. NCCL runs a collective on at most 32
   channels (collectives.yaml max_channels), so per-channel bandwidth and the pipeline fill stay
   bounded in large domains. What can still rise slightly beyond K = 256 is a flat ring's NVLink
   share: with g ring members per domain, (g-1)/g of each GPU's ring traffic crosses NVLink
   (busBw <= B_hb g/(g-1), collectives.md §3.5), so the same DP ring in larger domains offloads less
   to the NICs (reported in hb_sweep.md).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from railonly_common import (  # noqa: E402
    save_figure,
    OUT_DIR, PAPER_BATCH_SEQUENCES, Timer, best_row, cli, ideal_best, make_system, pick, score, strategy_grid, suffix,
    training, v1_times, write_csv,
)
from designer.spec.models import load_model  # noqa: E402

MODELS = ("gpt-1t", "gpt3-175b", "opt-175b", "palm-540b")
N_GPUS = (16384, 32768, 65536)
HB_SIZES = (8, 16, 32, 64, 128, 256, 512, 1024)
QUICK = dict(models=("gpt3-175b", "opt-175b"), n_gpus=(16384,), hb_sizes=(8, 32, 64, 256, 512, 1024))

# V1 Fig. 7 read-offs (railonly.md §3), N = 16,384: saving of K 32 -> 64 and K 512 -> 1024
PUBLISHED_SAVINGS = {("gpt3-175b", 32, 64): 0.12, ("gpt3-175b", 512, 1024): 0.01,
                     ("opt-175b", 32, 64): 0.37, ("opt-175b", 512, 1024): 0.075}


def _prefixed(prefix: str, row: dict, keys=("iteration_time_s", "strategy", "tp", "pp", "dp", "zero", "recompute",
                                             "microbatch", "compute_s", "bubble_s", "exposed_comm_s",
                                             "host_s", "memory_per_gpu_gb")) -> dict:
    if not row.get("feasible"):
        return {f"{prefix}iteration_time_s": np.nan}
    return {f"{prefix}{k}": row[k] for k in keys}


def sweep(models, n_gpus, hb_sizes) -> pd.DataFrame:
    rows = []
    for name in models:
        llm = load_model(name)
        tr = training(PAPER_BATCH_SEQUENCES[name])
        for n in n_gpus:
            ideal, ideal_network = ideal_best(llm, tr, n)
            for k in hb_sizes:
                grid = strategy_grid(llm, tr, n, k)
                ro = make_system(n, k, "rail-only")
                S, vm = score(llm, tr, ro, grid=grid)
                full = best_row(pick(llm, tr, ro, S, vm))
                pp1 = best_row(pick(llm, tr, ro, S, vm, mask=S.pp == 1))
                ft_sys = make_system(n, k, "rail-optimized")
                S2, vm2 = score(llm, tr, ft_sys, grid=grid)
                fat = best_row(pick(llm, tr, ft_sys, S2, vm2))
                v1 = v1_times(llm, n, k, tr.tokens_per_iteration)
                rows.append({
                    "model": name, "n_gpus": n, "hb_size": k, "batch_sequences": tr.global_batch_sequences,
                    "batch_tokens": tr.tokens_per_iteration,
                    **_prefixed("full_", full), "full_n_strategies_scored": full.get("n_strategies_scored", 0),
                    **_prefixed("full_pp1_", pp1, ("iteration_time_s", "strategy")),
                    **_prefixed("fat_tree_", fat, ("iteration_time_s", "strategy")),
                    "full_ideal_iteration_time_s": ideal.get("iteration_time_s", np.nan),
                    "full_ideal_strategy": ideal.get("strategy", ""), "full_ideal_network": ideal_network,
                    **v1,
                })
    df = pd.DataFrame(rows)
    df["full_fraction_of_ideal"] = df["full_ideal_iteration_time_s"] / df["full_iteration_time_s"]
    df["v1_fraction_of_ideal"] = df["v1_ideal_time_s"] / df["v1_iteration_time_s"]
    df["fat_tree_over_rail_only"] = df["fat_tree_iteration_time_s"] / df["full_iteration_time_s"]
    return df


def savings(df: pd.DataFrame) -> pd.DataFrame:
    """1 - T(K2)/T(K1) for the published K steps at N = 16,384, both models, with the published value."""
    out = []
    for (model, k1, k2), pub in PUBLISHED_SAVINGS.items():
        sub = df[(df.model == model) & (df.n_gpus == 16384)].set_index("hb_size")
        if k1 not in sub.index or k2 not in sub.index:
            continue
        full = 1 - sub.loc[k2, "full_iteration_time_s"] / sub.loc[k1, "full_iteration_time_s"]
        v1 = 1 - sub.loc[k2, "v1_iteration_time_s"] / sub.loc[k1, "v1_iteration_time_s"]
        out.append({"model": model, "n_gpus": 16384, "k_from": k1, "k_to": k2, "published_saving": pub,
                    "v1_saving": v1, "full_saving": full, "v1_minus_published": v1 - pub,
                    "full_minus_published": full - pub})
    return pd.DataFrame(out)


def plot(df: pd.DataFrame, path: Path) -> None:
    models = list(dict.fromkeys(df.model))
    ns = sorted(df.n_gpus.unique())
    fig, axes = plt.subplots(len(models), len(ns), figsize=(4.2 * len(ns), 3.2 * len(models)), squeeze=False)
    for i, m in enumerate(models):
        for j, n in enumerate(ns):
            ax = axes[i][j]
            d = df[(df.model == m) & (df.n_gpus == n)].sort_values("hb_size")
            ax.plot(d.hb_size, d.full_iteration_time_s, "o-", label="full model, best strategy")
            ax.plot(d.hb_size, d.full_pp1_iteration_time_s, "s:", label="full model, no pipeline")
            ax.plot(d.hb_size, d.v1_iteration_time_s, "^--", label="V1 Eq. (1)")
            ax.axhline(d.full_ideal_iteration_time_s.iloc[0], color="C0", lw=0.8, ls="-.", label="full ideal (any-to-any at B_F)")
            ax.axhline(d.v1_ideal_time_s.iloc[0], color="C2", lw=0.8, ls="-.", label="V1 T_ideal")
            ax.set_xscale("log", base=2)
            ax.set_title(f"{m}, N = {n:,}", fontsize=9)
            ax.set_xlabel("HB domain size K")
            ax.set_ylabel("iteration time (s)")
            ax.set_ylim(bottom=0)
    axes[0][0].legend(fontsize=7)
    save_figure(fig, path)


def write_markdown(df: pd.DataFrame, sv: pd.DataFrame, path: Path) -> None:
    big = df[df.hb_size >= 256]
    comp_ratio = (big.full_compute_s / big.v1_compute_s)
    k8 = df[df.hb_size == 8]
    rising = df.sort_values("hb_size").groupby(["model", "n_gpus"]).full_iteration_time_s.apply(
        lambda s: float(np.max(np.diff(s.values) / s.values[:-1], initial=0.0)))
    gap_ft = float(np.nanmax(np.abs(df.fat_tree_over_rail_only - 1)))
    lines = [
        "# HB-domain sweep: designer's full model against the Rail-only V1 model",
        "",
        "Generated by `studies/railonly/hb_sweep.py` (data: `hb_sweep.csv`, plot: `hb_sweep.png`).",
        "Rail-only network, H100 fp8 1,979 TFLOP/s, B_F = 900 GB/s, B_S = 400 Gb/s, best strategy per point.",
        "",
        "## Published K-step savings (V1 Fig. 7, N = 16,384)",
        "",
        "| model | K step | published | V1 model | full model |",
        "|---|---|---|---|---|",
    ]
    for r in sv.itertuples():
        lines.append(f"| {r.model} | {r.k_from} → {r.k_to} | {r.published_saving:.1%} | {r.v1_saving:.1%} | "
                     f"{r.full_saving:.1%} |")
    lines += [
        "",
        "## Where and why the models differ",
        "",
        f"- **Compute** (largest term at K ≥ 256): the full model's compute time is "
        f"{comp_ratio.min():.2f}–{comp_ratio.max():.2f}× V1's M_flop/(N·C). V1 runs every FLOP at the fp8 "
        "peak; the full model uses GEMM efficiency curves, fp8 only in the linear layers, the attention "
        "core, logits, memory-bound kernels and the optimizer step. The two ideals differ by the same factor.",
        f"- **Pipeline** (small K): V1 has none, so at K = 8 all non-TP parallelism is DP over N/K domains at "
        f"B_S. At K = 8 V1 is {float((k8.v1_iteration_time_s / k8.full_iteration_time_s).min()):.1f}–"
        f"{float((k8.v1_iteration_time_s / k8.full_iteration_time_s).max()):.1f}× the full model, whose best "
        "strategies pipeline (see `full_pp` in the CSV) and pay a bubble instead. Without a pipeline "
        "(`full_pp1_*`) the full model behaves like V1 at small K. This is why the full model's K-step "
        "savings differ from the published ones: its curve is flatter at small K.",
        "- **Overlap**: the full model hides the DP reduction behind the backward pass (all but the last "
        "bucket); V1 puts every byte on the critical path.",
        "- **Memory**: the full model's strategy must fit 80 GiB of HBM (ZeRO stage, recomputation, "
        "microbatch); V1 has no memory limit.",
        "- **Latency and efficiencies**: NCCL algorithms and protocols, per-hop latency, pipeline fill, "
        "NVLink at ≈0.82 and NICs at 0.88 of line rate in the full model; line-rate bandwidth terms in V1.",
        f"- **Monotonicity in K**: V1 never rises with K. The full model's largest rise from one K to the "
        f"next is {rising.max():.1%} ({rising.idxmax()[0]}, N = {rising.idxmax()[1]:,}). Channels are "
        "capped at NCCL's 32 (collectives.yaml `max_channels`), so per-channel bandwidth and the "
        "pipeline fill no longer degrade with the domain size. A remaining rise comes from a flat DP "
        "ring's NVLink share: with g ring members per domain, (g−1)/g of each GPU's ring traffic "
        "crosses NVLink (busBw ≤ B_hb·g/(g−1), collectives.md §3.5), so the same ring in a larger "
        "domain offloads less to the NICs.",
        f"- **Rail-only vs rail-optimized fat-tree**: the best strategies' times differ by at most "
        f"{gap_ft:.2%} across every point, as the paper states for dense LLMs (TP in the HB domain, DP "
        "and PP on rails).",
        "- **Ideal**: V1's T_ideal is Eq. (3). The full model's ideal is the faster of one HB domain of all N "
        "GPUs and HB domains of 256 / 1,024 on a fat-tree with NICs at B_F (`railonly_common.ideal_best`): "
        "the literal K = N domain runs flat NVLink rings over thousands of GPUs in the collectives model.",
        "",
        "## Rail-only at K = 256 as a fraction of the ideal (T_ideal / T_rail-only)",
        "",
        "| model | N | full model | V1 model |",
        "|---|---|---|---|",
    ]
    for r in df[df.hb_size == 256].itertuples():
        lines.append(f"| {r.model} | {r.n_gpus:,} | {r.full_fraction_of_ideal:.1%} | {r.v1_fraction_of_ideal:.1%} |")
    lines.append("")
    Path(path).write_text("\n".join(lines), encoding="utf-8")


def main(quick: bool = False, out_dir: Path = OUT_DIR) -> pd.DataFrame:
    out_dir = Path(out_dir)
    with Timer(f"hb_sweep{' --quick' if quick else ''}"):
        kw = QUICK if quick else dict(models=MODELS, n_gpus=N_GPUS, hb_sizes=HB_SIZES)
        df = sweep(**kw)
        sv = savings(df)
        sfx = suffix(quick)
        write_csv(df, out_dir, f"hb_sweep{sfx}.csv")
        write_csv(sv, out_dir, f"hb_sweep_savings{sfx}.csv")
        plot(df, out_dir / f"hb_sweep{sfx}.png")
        if not quick:
            write_markdown(df, sv, out_dir / "hb_sweep.md")
        print(sv.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    return df


if __name__ == "__main__":
    main(quick=cli(__doc__))
