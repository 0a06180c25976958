"""MoE all-to-all on rail-only: forwarding overhead against the rail-optimized fat-tree and thin spines.

    .venv/bin/python studies/railonly/moe_alltoall.py [--quick]

Rail-only has no path between GPUs of different local ranks in different HB domains; an all-to-all
forwards over the HB domain to the GPU that owns the destination rail, then rides the rail
(railonly.md §5, collectives.md §2.7 two-phase, §3.4 PXN). Networks compared, all with rails that are
each a non-blocking Clos:
* rail-only: no spine;
* fat-tree: the rail-optimized fat-tree (leaves of 32 domains + a 1:1 cross-rail spine) -- the baseline;
* thin spines: rail-only's rails plus a cross-rail spine oversubscribed 2:1, 4:1, 8:1 (railonly.md §7
  hybrids; `make_system(family="hybrid")`).

Part A -- raw uniform all-to-all, designer/perf/collectives.py `collective_estimate("all_to_all")` over
~1,024 GPUs (1,152 for K = 72): every GPU sends n bytes spread evenly over all members. Platforms (HB
bandwidth per direction from the catalog): DGX A100 (K = 8, NVLink3 300 GB/s), DGX H100 (K = 8,
NVLink4 450 GB/s), GB200 NVL72 (K = 72, 900 GB/s), DGX GH200 (K = 256, 450 GB/s); NICs 200 Gb/s to
1.6 Tb/s; n = 256 MiB (a realistic MoE dispatch; per-peer latency visible) and 1 TiB (the bandwidth-bound
limit, per-peer latency < 0.1%; as tests/perf/test_collectives_validation.py).
The closed form of the mechanism (collectives.py docstring) is
    overhead = [(K-1)/K / (eta_hb·B_hb)] / [(N-K)/N / (eta_nic·B_nic)],
the extra non-overlapped HB phase over the rail phase, each at its effective bandwidth (NVLink
eta_hb = NCCL's 20.0/25 = 0.80 on A100, 20.6/25 = 0.824 on H100; NIC eta_nic = 0.88). Published: 8.2%
(DGX A100, 200 Gb/s) and 11.2% (DGX H100, 400 Gb/s) (railonly.md §5). Designer gives 8.1% and 10.5%
in the bandwidth-bound limit: the assumption that reproduces the published pair is *effective* (not line-rate) bandwidths
on both phases; line rates give the first-order 7.3% / 9.7%.

Part B -- a full MoE iteration (deepseek-v3-like, 256 experts top-8; mixtral-8x22b, 8 experts top-2),
seq 4,096, fp8, 7.5 sequences per GPU (DeepSeek-V3's 15,360 on 2,048 GPUs), on N = 2,048 GPUs
(2,304 for K = 72), with the platform GPUs of part A (H100 for K = 8, GB200 for K = 72, GH200 for
K = 256):
* best: the best strategy of the grid per network, searched separately (EP may stay inside domains);
* deepseek layout: DeepSeek-V3's own layout (arXiv 2412.19437 §3.2: PP 16, EP 64 across nodes, ZeRO-1,
  TP 1; EP 16 for K = 72 where 64 does not divide DP), the same strategy on every network.
Part C -- one dispatch of DeepSeek-V3's routing (256 experts, top-8 from 4 of 8 router groups) over
EP 64 (EP 256, 64 GPUs of each of 4 domains, where a domain holds 64) on each network, as a uniform all-to-all of every (token, expert) copy and deduplicated per
node with NVLink forwarding (DeepEP's normal kernels; collectives.moe_dispatch_estimate_vec): the
deduplicated dispatch sends to the same local rank of each destination node, so it rides the rails
alone and takes the same time on rail-only, the fat-tree and thin spines (moe_dispatch_networks*.csv).
The low-latency (decode) kernels' dispatch of 128 FP8 tokens per GPU, one copy per (token, expert)
straight to the expert's GPU (collectives.moe_per_expert_dispatch_estimate_vec), leaves the rails:
rail-only cannot carry it (time inf) and a thin spine r:1 slows its RDMA phase.
Findings: the search avoids cross-domain EP wherever it can (EP inside the HB domain), so best-vs-best
overheads are ~0; with DeepSeek-V3's EP-64 layout the forwarding overhead appears in the iteration,
diluted by compute. Thin spines: for a uniform all-to-all a thin spine buys nothing over rail-only in
the model (two-phase forwarding over NVLink is cheaper than pushing the cross-rail share through a
spine r times slower). For every collective the model prices both routes of cross-rail traffic -- up
through the spine, or PXN forwarding over NVLink onto the destination's rail -- and takes the faster,
so a thin spine is never slower than no spine (with GB200 NVL72 domains the thin spines now match
rail-only, where they used to come out 4-10% slower).
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
    OUT_DIR, GridOptions, Timer, best_row, cli, make_system, pick, score, strategy_grid, strategy_label, suffix, write_csv,
)
from designer.perf import collectives as coll  # noqa: E402
from designer.perf.model import _shipped_calibration, evaluate_system  # noqa: E402
from designer.perf.model import Infeasible  # noqa: E402
from designer.spec.catalog import load_catalog  # noqa: E402
from designer.spec.llm import Precision, Recompute, Strategy, TrainingSpec  # noqa: E402
from designer.spec.models import load_model  # noqa: E402

# platform -> (K, catalog GPU, GPUs in the raw all-to-all)
PLATFORMS = {"DGX A100": (8, "a100_80gb", 1024), "DGX H100": (8, "h100_sxm", 1024),
             "GB200 NVL72": (72, "gb200", 1152), "DGX GH200": (256, "gh200", 1024)}
NIC_GBPS = (200, 400, 800, 1600)
MESSAGE_BYTES = (2.0**28, 2.0**40)  # a realistic dispatch; the bandwidth-bound limit (latency < 0.1%)
NETWORKS = (("rail-only", "rail-only", 1.0), ("fat-tree", "rail-optimized", 1.0), ("thin spine 2:1", "hybrid", 2.0),
            ("thin spine 4:1", "hybrid", 4.0), ("thin spine 8:1", "hybrid", 8.0))
PUBLISHED = {("DGX A100", 200): 0.082, ("DGX H100", 400): 0.112}  # railonly.md §5

MOE_MODELS = ("deepseek-v3-like", "mixtral-8x22b")
MOE_PLATFORMS = ("DGX H100", "GB200 NVL72", "DGX GH200")
MOE_SEQUENCE = 4096
SEQUENCES_PER_GPU = 7.5  # DeepSeek-V3: 15,360 sequences on 2,048 H800s (arXiv 2412.19437 §4.2)
MOE_GRID = GridOptions(microbatch_sizes=(1, 2), recompute=(0, 1, 2), zero_stages=(1,), max_pp=32)

QUICK = dict(platforms=("DGX A100", "DGX H100"), nic_gbps=(200, 400), message_bytes=(2.0**40,),
             networks=NETWORKS[:2], moe_models=("deepseek-v3-like",), moe_platforms=("DGX H100",), moe_nic_gbps=(400,))


def _platform(name: str):
    k, gid, n = PLATFORMS[name]
    g = load_catalog().gpu(gid)
    return k, g.perf(), g.hb_gb_per_s_per_direction * 1e9, n


def raw_alltoall(platforms, nic_gbps, message_bytes, networks) -> pd.DataFrame:
    cal = _shipped_calibration().collectives
    rows = []
    for plat in platforms:
        k, gpu, hb, n = _platform(plat)
        shape = coll.GroupShape(size=n, ranks_per_domain=k, domain_span=n // k, same_rail=True)
        for nic_g in nic_gbps:
            nic = nic_g * 1e9 / 8
            systems = {lab: make_system(n, k, fam, hb_bytes_per_s=hb, nic_bytes_per_s=nic, spine_oversubscription=r,
                                        gpu=gpu) for lab, fam, r in networks}
            eta_hb = coll.hb_link_efficiency(systems["rail-only"], cal)
            closed = ((k - 1) / k / (eta_hb * hb)) / (((n - k) / n) / (cal.nic_efficiency * nic))
            closed_line = ((k - 1) / k / hb) / (((n - k) / n) / nic)
            for nb in message_bytes:
                est = {lab: coll.collective_estimate("all_to_all", nb, shape, sy, cal) for lab, sy in systems.items()}
                base = est["fat-tree"].time_s
                for lab, e in est.items():
                    rows.append({"platform": plat, "hb_size": k, "gpu": gpu.name, "hb_gb_per_s": hb / 1e9,
                                 "nic_gbps": nic_g, "n_gpus": n, "message_bytes": nb, "network": lab,
                                 "time_s": e.time_s, "algorithm": e.algorithm,
                                 "overhead_vs_fat_tree": e.time_s / base - 1,
                                 "closed_form_overhead": closed, "line_rate_closed_form_overhead": closed_line,
                                 "published_overhead": PUBLISHED.get((plat, nic_g), np.nan) if lab == "rail-only" else np.nan,
                                 "hb_bytes": e.hb_bytes, "rail_bytes": e.rail_bytes, "spine_bytes": e.spine_bytes})
    return pd.DataFrame(rows)


def dedup_dispatch(platforms, nic_gbps, networks) -> pd.DataFrame:
    """Part C: one MoE dispatch of DeepSeek-V3 routing (256 experts, top-8 from 4 of 8 router
    groups: 4 nodes per token where a group fills a node; 4,096 tokens of 7,168 BF16 per GPU) over
    EP 64 (EP 256 on K >= 72: 64 GPUs of each of 4 domains), as a uniform all-to-all of every copy
    (Megatron's alltoall dispatcher) and deduplicated per node with NVLink forwarding (DeepEP,
    collectives.moe_dispatch_estimate_vec), on each network; and a decode step's dispatch by the
    low-latency kernels (per_expert_decode), which rail-only cannot carry."""
    cal = _shipped_calibration().collectives
    llm = load_model("deepseek-v3-like")
    moe = llm.moe
    token_bytes = 4096 * llm.hidden_size * 2.0
    # a decode step's dispatch by the low-latency kernels: 128 tokens per GPU, one FP8 copy per
    # (token, expert) with its scales and header
    decode_copies = 128 * moe.top_k
    copy_bytes = coll.low_latency_copy_bytes(llm.hidden_size, fp8=True)
    rows = []
    for plat in platforms:
        k, gpu, hb, n_sys = _platform(plat)
        # EP 64 over 8-GPU nodes; where one domain holds 64, EP over 4 domains, 64 GPUs of each: EP 256,
        # one expert per rank (Megatron-Core needs the experts to divide EP)
        g = min(k, 64)
        ep = 64 if k <= 16 else 4 * g
        n_dom = ep // g
        d, ranks = (float(x) for x in coll.routing_reach(moe.experts, moe.top_k, n_dom, g, moe.max_nodes_per_token,
                                                         groups=moe.routing_groups))
        shape = coll.GroupShape(size=ep, ranks_per_domain=g, domain_span=n_dom, same_rail=True)
        for nic_g in nic_gbps:
            nic = nic_g * 1e9 / 8
            res = {}
            for lab, fam, r in networks:
                sy = make_system(n_sys, k, fam, hb_bytes_per_s=hb, nic_bytes_per_s=nic,
                                 spine_oversubscription=r, gpu=gpu)
                a2a = coll.collective_estimate("all_to_all", token_bytes * moe.top_k, shape, sy, cal)
                dd = coll.moe_dispatch_estimate_vec(token_bytes, ranks, d, ep, g, n_dom, sy, cal)
                ll = coll.moe_per_expert_dispatch_estimate_vec(copy_bytes, decode_copies, ep, g, n_dom, sy, cal,
                                                               same_rail=shape.same_rail)
                res[lab] = {"alltoall": (a2a.time_s, a2a.spine_bytes), "dedup": (float(dd.time_s), float(dd.spine_bytes)),
                            "per_expert_decode": (float(ll.time_s), float(ll.spine_bytes))}
            for lab, v in res.items():
                for kind, (t, spine) in v.items():
                    rows.append({"platform": plat, "hb_size": k, "ep": ep, "nic_gbps": nic_g, "network": lab,
                                 "dispatcher": kind, "distinct_nodes_per_token": d, "time_s": t,
                                 "overhead_vs_fat_tree": t / res["fat-tree"][kind][0] - 1, "spine_bytes": spine})
    return pd.DataFrame(rows)


def deepseek_layout(n_gpus: int, llm) -> Strategy:
    """DeepSeek-V3's layout (arXiv 2412.19437 §3.2): PP 16, EP 64, ZeRO-1, TP 1; EP is the largest
    power of two <= 64 dividing DP and the experts."""
    pp = 16
    dp = n_gpus // pp
    ep = 64
    while ep > 1 and (dp % ep or llm.moe.experts % ep):
        ep //= 2
    return Strategy(tp=1, pp=pp, dp=dp, ep=ep, zero_stage=1, recompute=Recompute.full, microbatch_size=1)


def moe_iteration(models, platforms, nic_gbps, networks) -> pd.DataFrame:
    rows = []
    for name in models:
        llm = load_model(name)
        for plat in platforms:
            k, gpu, hb, _ = _platform(plat)
            n = 2304 if k == 72 else 2048
            tr = TrainingSpec(sequence_length=MOE_SEQUENCE, global_batch_sequences=int(SEQUENCES_PER_GPU * n),
                              precision=Precision.fp8, total_tokens=1e12)
            grid = strategy_grid(llm, tr, n, k, MOE_GRID)
            fixed = deepseek_layout(n, llm) if name == "deepseek-v3-like" else None
            for nic_g in nic_gbps:
                res = {}
                for lab, fam, r in networks:
                    sy = make_system(n, k, fam, hb_bytes_per_s=hb, nic_bytes_per_s=nic_g * 1e9 / 8,
                                     spine_oversubscription=r, gpu=gpu)
                    b = best_row(pick(llm, tr, sy, *score(llm, tr, sy, grid=grid)))
                    row = {"model": name, "platform": plat, "hb_size": k, "gpu": gpu.name, "n_gpus": n,
                           "batch_sequences": tr.global_batch_sequences, "nic_gbps": nic_g, "network": lab,
                           "best_iteration_time_s": b.get("iteration_time_s", np.nan),
                           "best_strategy": b.get("strategy", ""), "best_ep_s": b.get("ep_s", np.nan)}
                    if fixed is not None:
                        m = evaluate_system(llm, tr, fixed, sy)
                        ok = not isinstance(m, Infeasible)
                        row.update({"layout_strategy": strategy_label(fixed),
                                    "layout_iteration_time_s": m.iteration_time_s if ok else np.nan,
                                    "layout_ep_s": m.breakdown.ep_s if ok else np.nan,
                                    "layout_feasible": ok})
                    res[lab] = row
                base = res["fat-tree"]
                for lab, row in res.items():
                    row["best_overhead_vs_fat_tree"] = row["best_iteration_time_s"] / base["best_iteration_time_s"] - 1
                    if fixed is not None:
                        row["layout_overhead_vs_fat_tree"] = row["layout_iteration_time_s"] / base["layout_iteration_time_s"] - 1
                        row["layout_ep_overhead_vs_fat_tree"] = row["layout_ep_s"] / base["layout_ep_s"] - 1
                    rows.append(row)
    return pd.DataFrame(rows)


def plot(raw: pd.DataFrame, it: pd.DataFrame, path: Path) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    ax = axes[0]
    d = raw[(raw.network == "rail-only") & (raw.message_bytes == raw.message_bytes.max())]
    for i, (plat, g) in enumerate(d.groupby("platform", sort=False)):
        ax.plot(g.nic_gbps, 100 * g.overhead_vs_fat_tree, "o-", color=f"C{i}", label=f"{plat} (K={g.hb_size.iloc[0]})")
        ax.plot(g.nic_gbps, 100 * g.closed_form_overhead, ":", color=f"C{i}")
        p = g.dropna(subset=["published_overhead"])
        ax.plot(p.nic_gbps, 100 * p.published_overhead, "*", ms=13, color=f"C{i}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("NIC bandwidth per GPU (Gb/s)")
    ax.set_ylabel("rail-only all-to-all overhead vs fat-tree (%)")
    ax.set_title(f"uniform all-to-all, {raw.message_bytes.max() / 2**30:.0f} GiB per GPU; * published, : closed form",
                 fontsize=8)
    ax.legend(fontsize=7)
    ax = axes[1]
    col = "layout_overhead_vs_fat_tree" if "layout_overhead_vs_fat_tree" in it else "best_overhead_vs_fat_tree"
    d = it[it.model == "deepseek-v3-like"]
    for i, ((plat, lab), g) in enumerate(d[d.network != "fat-tree"].groupby(["platform", "network"], sort=False)):
        ax.plot(g.nic_gbps, 100 * g[col], "o-" if lab == "rail-only" else "--", color=f"C{i % 10}",
                label=f"{plat} {lab}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("NIC bandwidth per GPU (Gb/s)")
    ax.set_ylabel("iteration time overhead vs fat-tree (%)")
    ax.set_title("deepseek-v3-like iteration, DeepSeek-V3 layout (PP16 EP64)", fontsize=8)
    ax.legend(fontsize=6)
    save_figure(fig, path)


def main(quick: bool = False, out_dir: Path = OUT_DIR) -> pd.DataFrame:
    """Returns the raw all-to-all table; the iteration table is written to moe_iteration*.csv."""
    out_dir = Path(out_dir)
    with Timer(f"moe_alltoall{' --quick' if quick else ''}"):
        q = QUICK if quick else dict(platforms=tuple(PLATFORMS), nic_gbps=NIC_GBPS, message_bytes=MESSAGE_BYTES,
                                     networks=NETWORKS, moe_models=MOE_MODELS, moe_platforms=MOE_PLATFORMS,
                                     moe_nic_gbps=NIC_GBPS)
        raw = raw_alltoall(q["platforms"], q["nic_gbps"], q["message_bytes"], q["networks"])
        it = moe_iteration(q["moe_models"], q["moe_platforms"], q["moe_nic_gbps"], q["networks"])
        dd = dedup_dispatch(q["platforms"], q["nic_gbps"], q["networks"])
        sfx = suffix(quick)
        write_csv(dd, out_dir, f"moe_dispatch_networks{sfx}.csv")
        print(dd[dd.network != "fat-tree"].to_string(index=False, float_format=lambda x: f"{x:.4g}"))
        write_csv(raw, out_dir, f"moe_alltoall{sfx}.csv")
        write_csv(it, out_dir, f"moe_iteration{sfx}.csv")
        plot(raw, it, out_dir / f"moe_alltoall{sfx}.png")
        pub = raw.dropna(subset=["published_overhead"])
        print(pub[["platform", "nic_gbps", "message_bytes", "overhead_vs_fat_tree", "closed_form_overhead",
                   "line_rate_closed_form_overhead", "published_overhead"]].to_string(index=False, float_format=lambda x: f"{x:.4f}"))
        cols = ["model", "platform", "nic_gbps", "network", "best_overhead_vs_fat_tree", "best_strategy"]
        if "layout_overhead_vs_fat_tree" in it:
            cols += ["layout_overhead_vs_fat_tree", "layout_ep_overhead_vs_fat_tree"]
        print(it[it.network == "rail-only"][cols].to_string(index=False, float_format=lambda x: f"{x:.4f}"))
    return raw


if __name__ == "__main__":
    main(quick=cli(__doc__))
