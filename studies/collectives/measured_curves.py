"""The collective model against every measured curve of shared/reference/collectives-modern.md.

    .venv/bin/python studies/collectives/measured_curves.py

Writes results/collectives/measured_curves.csv (every point: size, measured, designer, error, the
algorithm and protocol designer chose, the one the run forced or NCCL logged where the source
states it) and measured_curves.md (per curve: worst error at >= 1 MiB and at <= 64 KiB, the share
of points within the targets, 10% and 50%). Multi-node curves (InfiniBand, EFA, multi-rack NVL72)
and single-node ones alike; the setups come from tests/perf/data/nccl_curves_modern.yaml and are
turned into systems by tests/perf/collective_curves.py, the same code the validation test runs.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from designer.perf import collectives as coll  # noqa: E402
from tests.perf import collective_curves as cc  # noqa: E402

OUT = REPO / "results" / "collectives"


def table() -> pd.DataFrame:
    calib = coll.load_collective_calibration()
    rows = []
    for cid, c in cc.curves().items():
        if not cc.usable(c):
            continue
        forced = cc.algorithms_for(c, calib)
        stated = forced[0] if forced and len(forced) == 1 else (c.get("algorithm") or "")
        for p in cc.predict(c, calib):
            rows.append({"curve": cid, "source_kind": cc.source_kind(cid), "op": c["op"], "gpu": c["gpu"],
                         "ranks": c["ranks"], "nodes": c["nodes"], "fabric": c["fabric"],
                         "nccl_version": c.get("nccl_version") or "", "quantity": c["quantity"],
                         "size_bytes": p.size_bytes, "measured": p.measured, "designer": p.predicted,
                         "error": p.error, "band": cc.band(p.size_bytes), "algorithm": p.algorithm,
                         "protocol": p.protocol, "source_algorithm": stated})
    return pd.DataFrame(rows)


def summary(df: pd.DataFrame) -> pd.DataFrame:
    out = []
    for cid, g in df.groupby("curve", sort=False):
        large, small = g[g.band == "large"], g[g.band == "small"]
        worst = lambda x: x.loc[x.error.abs().idxmax()] if len(x) else None  # noqa: E731
        wl, ws = worst(large), worst(small)
        out.append({"curve": cid, "op": g.op.iloc[0], "ranks": g.ranks.iloc[0], "fabric": g.fabric.iloc[0],
                    "worst >= 1 MiB": "" if wl is None else f"{wl.error:+.0%} at {wl.size_bytes / 2**20:.0f} MiB ({wl.algorithm}/{wl.protocol})",
                    "worst <= 64 KiB": "" if ws is None else f"{ws.error:+.0%} at {ws.size_bytes} B",
                    "within target": f"{((g.band == 'large') & (g.error.abs() <= 0.10) | (g.band == 'small') & (g.error.abs() <= 0.5)).sum()}"
                                     f"/{(g.band != 'mid').sum()}",
                    "source algorithm": g.source_algorithm.iloc[0]})
    return pd.DataFrame(out)


# multi-node curves drawn against designer (measured: dots; designer: line)
PLOTTED = ("XR-1", "XR-2", "XR-3", "XR-4", "AWS-1", "AWS-3", "B300-1-AG", "CW-G2", "TB-5-AR-ring-8n")


def plot(df: pd.DataFrame, path: Path) -> None:
    ids = [c for c in PLOTTED if c in set(df.curve)]
    fig, axes = plt.subplots(3, 3, figsize=(13, 10))
    for ax, cid in zip(axes.ravel(), ids):
        g = df[df.curve == cid]
        ax.plot(g.size_bytes, g.measured, "o", label="measured")
        ax.plot(g.size_bytes, g.designer, "-", label="designer")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        r = g.iloc[0]
        ax.set_title(f"{cid}: {r.op}, {r.ranks} x {r.gpu} ({r.fabric})", fontsize=8)
        ax.set_ylabel(r.quantity, fontsize=7)
        ax.tick_params(labelsize=7)
    for ax in axes.ravel()[len(ids):]:
        ax.axis("off")
    axes.ravel()[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    df = table()
    OUT.mkdir(parents=True, exist_ok=True)
    df.to_csv(OUT / "measured_curves.csv", index=False, float_format="%.6g")
    plot(df, OUT / "measured_curves_multinode.png")
    s = summary(df)
    lines = ["# Collective model against measured curves (collectives-modern.md)", "",
             "Error: designer's speed over the measured one, minus one (positive: designer too fast).",
             "Targets: >= 1 MiB within 10%, <= 64 KiB within 50%. XLA's table (X-*) times an XLA",
             "executable, its launch overhead included.", "",
             "| " + " | ".join(s.columns) + " |", "|" + "---|" * len(s.columns)]
    lines += ["| " + " | ".join(str(v) for v in r) + " |" for r in s.itertuples(index=False)]
    shares = df[df.band != "mid"].assign(ok=lambda d: d.error.abs() <= d.band.map({"large": 0.10, "small": 0.50}))
    lines += ["", "| source | band | points | within target |", "|---|---|---|---|"]
    for (kind, band), g in shares.groupby(["source_kind", "band"]):
        lines.append(f"| {kind} | {band} | {len(g)} | {g.ok.mean():.0%} |")
    (OUT / "measured_curves.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[-6:]))


if __name__ == "__main__":
    main()
