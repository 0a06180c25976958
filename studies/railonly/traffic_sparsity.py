"""Traffic sparsity: which GPU pairs talk, and where the bytes go, for 146B-1T models on rail-only.

    .venv/bin/python studies/railonly/traffic_sparsity.py [--quick]

N = 32,768 GPUs, K = 256, the paper's hardware (railonly_common.py). Models: the Megatron GPT family of
railonly.md §4 v5 (gpt-145b, gpt-310b, gpt-530b, gpt-1t) plus GPT-3, OPT-175B and PaLM-540B (V1 Fig. 3-4).
Batches: GPT-3 16,384, OPT-175B 1,024, PaLM-540B 2,048 and GPT-1T 3,072 sequences (as hb_sweep.py);
gpt-145b/310b/530b 2,048 sequences (4M tokens) -- their Megatron batches (2,304 / 2,160 / 2,520) allow
only DP degrees of 256 / 16 / 8 on a power-of-two 32,768-GPU cluster.

For each model the best strategy of the full grid on rail-only (full model) -- and, for the Megatron GPT
family, also the Megatron-LM layout of SC'21 Table 1 (TP 8, deep PP; `megatron_strategy`) -- then for
one iteration:
* the share of ordered GPU pairs that exchange data, three ways (idle = 1 - share):
  `pair_fraction_algorithm` (Metrics.traffic): the pairs that exchange data under the algorithms the
  collectives model chose (a ring: its two neighbours; a tree: parent and children; a pairwise
  all-to-all: every member; see designer/perf/collectives.peers_per_rank);
  `pair_fraction_flat` (Metrics.traffic): every member of every parallel group, as if each collective
  connected all its members;
  `hierarchical_pair_fraction`: the paper's count (railonly.md §4), every DP collective taken as the
  two-stage one -- in-domain peers plus the same-rank GPUs of the other domains;
* bytes by tier -- HB (NVLink), rail, spine -- per GPU, from Metrics.tier_bytes, on rail-only and on the
  rail-optimized fat-tree (leaves of 32 domains + spine) with the same strategy;
* bytes by parallelism type -- TP, CP, PP (activations plus their NVLink gather), DP (gradients /
  ZeRO), EP -- and by tier, from Metrics.type_bytes.

Published (railonly.md §4): > 99% of GPU pairs idle; > 90% of bytes inside HB domains (V1: TP plus the
in-domain DP stage); > 75% of bytes inside TP groups (v5, 146B-1T GPT).

Findings (results/railonly/traffic_sparsity.csv): > 95% of bytes stay inside HB domains for every model
and strategy (V1's > 90% holds); no byte needs a cross-rail tier. With Megatron's TP-8 / deep-PP
layouts TP groups carry 60-88% of the bytes, rising with model size (> 75% for 530B and 1T, so v5's
claim holds for the larger half of its range). Designer's best strategies trade pipeline depth for wide
ZeRO data parallelism, whose in-domain reduce-scatter / all-gather stage moves more bytes than TP, so
their TP share is 18-70%. Idle pairs: > 99% under the hierarchical count (as the paper counts) and
> 99.9% under the algorithm-aware count (rings and trees pair a GPU with a handful of peers); the flat
group count gives 94-98% idle for DP groups of 1,024-8,192 GPUs.
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
    OUT_DIR, PAPER_BATCH_SEQUENCES, Timer, best_strategy, cli, make_system, strategy_label, suffix, training, write_csv,
)
from designer.perf.model import evaluate_system  # noqa: E402
from designer.perf.placement import place  # noqa: E402
from designer.spec.llm import Recompute, Strategy  # noqa: E402
from designer.spec.models import load_model  # noqa: E402

N_GPUS = 32768
HB_SIZE = 256
MODELS = ("gpt-145b", "gpt3-175b", "opt-175b", "gpt-310b", "gpt-530b", "palm-540b", "gpt-1t")
QUICK_MODELS = ("gpt-145b", "gpt-1t")
BATCH_SEQUENCES = {**PAPER_BATCH_SEQUENCES, "gpt-145b": 2048, "gpt-310b": 2048, "gpt-530b": 2048}
TYPES = ("tp", "pp", "dp", "ep", "cp")
MEGATRON_PP = {"gpt-145b": 8, "gpt-310b": 16, "gpt-530b": 32, "gpt-1t": 64}  # SC'21 Table 1 (530b: 35 -> 32)

LEVELS = ("hb", "rail", "spine")


def traffic_by_type(llm, tr, strategy, system) -> tuple[dict, object]:
    """Per-GPU bytes per iteration by (type, level) from Metrics.type_bytes, and the Metrics."""
    m = evaluate_system(llm, tr, strategy, system)
    out = {f"{t}_{lv}_bytes": getattr(m.type_bytes, f"{t}_{lv}_bytes") for t in TYPES for lv in LEVELS}
    tb = m.tier_bytes
    for lv, total in (("hb", tb.hb_bytes), ("rail", tb.rail_bytes), ("spine", tb.spine_bytes)):
        s = sum(out[f"{t}_{lv}_bytes"] for t in TYPES)
        assert abs(s - total) <= 1e-9 * max(total, 1.0), (lv, s, total)
    return out, m


def hierarchical_pair_fraction(st: Strategy, system) -> float:
    """Share of ordered GPU pairs that talk when every DP collective is hierarchical (in-domain stage,
    then same-rail stage across domains; railonly.md §1, the paper's count): TP peers, the DP members
    in the own domain, the same-rank DP members of the other domains, and the pipeline neighbours.
    (Metrics.traffic has the flat count -- every member of every group -- and the algorithm-aware one.)"""
    pl = place(st.tp, st.cp, st.dp, st.pp, st.ep, system)
    g = int(pl.grad.ranks_per_domain)
    n_dom = int(pl.grad.size) // g
    pp_nb = 2 if st.pp > 2 else (1 if st.pp == 2 else 0)
    return ((st.tp - 1) + (g - 1) + (n_dom - 1) + pp_nb) / (st.n_gpus - 1)


def megatron_strategy(name: str) -> Strategy | None:
    """The Megatron-LM layout of Narayanan et al. SC'21 Table 1 (training-runs.md) for the GPT family:
    TP 8 and that row's PP (rounded down to a power of two, so it divides N: 35 -> 32), DP = the rest,
    ZeRO-1 (distributed optimizer), selective recomputation and SP (Korthikanti et al. 2022)."""
    pp = MEGATRON_PP.get(name)
    if pp is None:
        return None
    return Strategy(tp=8, pp=pp, dp=N_GPUS // (8 * pp), zero_stage=1, recompute=Recompute.selective,
                    sequence_parallel=True)


def analyse(models) -> pd.DataFrame:
    rows = []
    for name in models:
        llm = load_model(name)
        tr = training(BATCH_SEQUENCES[name])
        ro = make_system(N_GPUS, HB_SIZE, "rail-only")
        runs = [("best", ro, best_strategy(llm, tr, ro).strategy),
                ("best", make_system(N_GPUS, HB_SIZE, "rail-optimized"), None)]
        runs[1] = ("best", runs[1][1], runs[0][2])  # the rail-only best strategy on the fat-tree too
        meg = megatron_strategy(name)
        if meg is not None:
            runs.append(("megatron-table1", ro, meg))
        for source, sy, st in runs:
            family = sy.family
            by_type, m = traffic_by_type(llm, tr, st, sy)
            total = m.tier_bytes.hb_bytes + m.tier_bytes.rail_bytes + m.tier_bytes.spine_bytes
            typ_total = {t: m.type_bytes.total_bytes(t) for t in TYPES}
            rows.append({
                "model": name, "network": family, "strategy_source": source, "n_gpus": N_GPUS, "hb_size": HB_SIZE,
                "batch_sequences": tr.global_batch_sequences, "strategy": strategy_label(st),
                "iteration_time_s": m.iteration_time_s, "fits_in_memory": m.fits_in_memory,
                "pair_fraction_algorithm": m.traffic.pair_fraction_algorithm,
                "idle_pair_fraction_algorithm": 1 - m.traffic.pair_fraction_algorithm,
                "pair_fraction_flat": m.traffic.pair_fraction_flat,
                "idle_pair_fraction_flat": 1 - m.traffic.pair_fraction_flat,
                "hierarchical_pair_fraction": hierarchical_pair_fraction(st, sy),
                "idle_pair_fraction_hierarchical": 1 - hierarchical_pair_fraction(st, sy),
                "total_bytes_per_gpu": total,
                "hb_share": m.traffic.hb_share, "rail_share": m.traffic.rail_share, "spine_share": m.traffic.spine_share,
                **{f"{t}_share": typ_total[t] / total for t in ("tp", "cp", "pp", "dp", "ep")},
                **by_type,
            })
    df = pd.DataFrame(rows)
    df["published_idle_pairs_min"] = 0.99
    df["published_hb_share_min"] = 0.90
    df["published_tp_share_min"] = 0.75
    return df


def plot(df: pd.DataFrame, path: Path) -> None:
    d = df[(df.network == "rail-only") & (df.strategy_source == "best")]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4))
    x = np.arange(len(d))
    bottom = np.zeros(len(d))
    for t in ("tp", "pp", "dp", "ep"):
        axes[0].bar(x, 100 * d[f"{t}_share"], bottom=bottom, label=t.upper())
        bottom += 100 * d[f"{t}_share"].values
    axes[0].axhline(75, color="k", ls="--", lw=0.8, label="v5: > 75% in TP groups")
    axes[0].set_ylabel("% of bytes, by parallelism")
    bottom = np.zeros(len(d))
    for tier in ("hb", "rail", "spine"):
        axes[1].bar(x, 100 * d[f"{tier}_share"], bottom=bottom, label=tier)
        bottom += 100 * d[f"{tier}_share"].values
    axes[1].axhline(90, color="k", ls="--", lw=0.8, label="V1: > 90% inside HB domains")
    axes[1].set_ylabel("% of bytes, by tier (rail-only)")
    for ax in axes:
        ax.set_xticks(x, [f"{m}\n{100 * p:.3f}% pairs" for m, p in zip(d.model, d.pair_fraction_algorithm)], fontsize=7)
        ax.legend(fontsize=7)
        ax.set_ylim(0, 105)
    fig.suptitle(f"N = {N_GPUS:,}, K = {HB_SIZE}, best strategy per model", fontsize=9)
    save_figure(fig, path)


def main(quick: bool = False, out_dir: Path = OUT_DIR) -> pd.DataFrame:
    out_dir = Path(out_dir)
    with Timer(f"traffic_sparsity{' --quick' if quick else ''}"):
        df = analyse(QUICK_MODELS if quick else MODELS)
        write_csv(df, out_dir, f"traffic_sparsity{suffix(quick)}.csv")
        plot(df, out_dir / f"traffic_sparsity{suffix(quick)}.png")
        print(df[["model", "network", "strategy", "pair_fraction_algorithm", "pair_fraction_flat",
                  "hierarchical_pair_fraction", "hb_share", "rail_share", "spine_share", "tp_share", "pp_share",
                  "dp_share"]].to_string(index=False, float_format=lambda x: f"{x:.5f}"))
    return df


if __name__ == "__main__":
    main(quick=cli(__doc__))
