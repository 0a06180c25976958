"""Predicted bus bandwidth against message size for every algorithm of the collective model.

For each system below, designer's collective model (designer/perf/collectives.py) is evaluated on
the whole machine (one group of all GPUs, HB domains filled, rail-aligned) for all-reduce,
all-gather and all-to-all from 1 KiB to 8 GiB, once per algorithm (each forced through
`algorithms=(name,)`, the argmin then running over protocols only) and twice as an argmin: over the
shipped NCCL-style repertoire (`calib.algorithms`) and over every algorithm the model knows
(MPI-style ones included). busbw follows nccl-tests (collectives.md §4.5): algbw = n/t with n the
per-rank vector (all-reduce) or the total buffer (all-gather, all-to-all), busbw = algbw x 2(p-1)/p
for all-reduce and (p-1)/p otherwise; GB/s are 1e9 B/s as nccl-tests prints them.

Systems (per-GPU bandwidths from the catalog; HB hop latency 0.6 us, NCCL's NVLink LL hop):
  h100_nvswitch_8   8 x H100 SXM, NVSwitch with NVLS (450 GB/s/dir)      measured: §5 B1 (NVLS), §5 E (ring)
  a100_nvswitch_8   8 x A100 SXM, NVSwitch without NVLS (300 GB/s/dir)   measured: §5 A
  gb200_4           4 x GB200 on one host, no NVLS (900 GB/s/dir)        measured: §5 D (ring)
  h100_ring_8       8 x H100 bandwidth in a bidirectional ring HB (2 links of 225 GB/s) -- hypothetical
  h100_torus_8x8    64 x H100 bandwidth in an 8x8 2-D torus HB (4 links of 112.5 GB/s) -- hypothetical
  fattree_4x8       4 nodes x 8 H100, 8 x 400G IB rails, leaf + spine    measured: §5 F-AR
  fattree_128x8     128 nodes x 8 H100 (1,024), 400G, leaves of 16 nodes + cross-rail spine
  railonly_128x8    128 nodes x 8 H100 (1,024), 400G, rails only (Rail-only, arXiv 2307.12169)
The measured curves are nccl-tests all-reduce busbw (collectives.md §5, tests/perf/data/nccl_curves.yaml);
they are overlaid on the all-reduce panels of the matching systems.

Outputs (results/collectives/): busbw_landscape.csv, busbw_landscape.png (all-reduce, a panel per
system), busbw_landscape_ag_a2a.png (all-gather and all-to-all); `--quick` writes *_quick.* on a
coarser size grid (2 KiB ... 8 GiB every 4x) and the four systems with a measured curve plus the two 1,024-GPU ones.

    .venv/bin/python studies/collectives/busbw_landscape.py [--quick]
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import numpy as np
import pandas as pd
import typer
from rich.markup import escape

sys.path.insert(0, str(Path(__file__).resolve().parent))
from collectives_common import (  # noqa: E402
    GIB,
    KIB,
    MIB,
    RESULTS,
    build_system,
    finite_or_nan,
    measured_curves,
    parse_size,
    size_label,
    wall_clock,
    write_csv,
)

from designer.perf.collectives import (  # noqa: E402
    ALGORITHMS,
    bus_bandwidth_factor,
    collective_estimate_vec,
    load_collective_calibration,
)
from designer.spec.system import ClusterSystem, HBTopology  # noqa: E402

OPS = ("all_reduce", "all_gather", "all_to_all")
# every algorithm the model prices for these collectives ("p2p" is send_recv only, "none" a group of one)
FORCED = tuple(a for a in ALGORITHMS if a not in ("p2p", "none"))
ARGMIN_NCCL = "argmin (NCCL set)"
ARGMIN_ALL = "argmin (all)"
# §5 E (NVIDIA/nccl#1455): 8 x H100 SXM ring all-reduce busbw 365-370 GB/s at 2-4 GB
H100_RING_PLATEAU_GBPS = (365.0, 370.0)
H100_RING_PLATEAU_BYTES = (2 * GIB, 4 * GIB)


def systems(quick: bool) -> dict[str, tuple[str, ClusterSystem, str | None]]:
    """id -> (label, system, id of the measured nccl-tests curve it matches or None)."""
    out = {
        "h100_nvswitch_8": ("8 x H100, NVSwitch + NVLS", build_system("h100_sxm", 8), "B1"),
        "a100_nvswitch_8": ("8 x A100, NVSwitch (no NVLS)", build_system("a100_80gb", 8), "A"),
        "gb200_4": ("4 x GB200 one host (no NVLS)", build_system("gb200", 4, hb_size=4, nvls=False), "D"),
        "h100_ring_8": ("8 x H100 bw, ring HB (hyp.)", build_system("h100_sxm", 8, topology=HBTopology.ring), None),
        "h100_torus_8x8": ("64 x H100 bw, 8x8 torus HB (hyp.)",
                           build_system("h100_sxm", 64, hb_size=64, topology=HBTopology.torus2d, torus_dims=(8, 8)), None),
        "fattree_4x8": ("4x8 H100, 400G IB fat-tree", build_system("h100_sxm", 32), "F-AR"),
        "fattree_128x8": ("128x8 H100, 400G fat-tree (leaf 16)", build_system("h100_sxm", 1024), None),
        "railonly_128x8": ("128x8 H100, 400G rail-only", build_system("h100_sxm", 1024, rail_only=True), None),
    }
    if quick:
        out = {k: v for k, v in out.items() if v[2] is not None or k.endswith("128x8")}
    return out


def sizes(quick: bool) -> np.ndarray:
    """1 KiB ... 8 GiB by powers of two; --quick: 2 KiB ... 8 GiB every 4x (keeps the 8 GiB plateau)."""
    return 2.0 ** np.arange(11, 34, 2) if quick else 2.0 ** np.arange(10, 34)


def _rows(sid: str, label: str, system: ClusterSystem, op: str, n: np.ndarray, calib) -> list[pd.DataFrame]:
    p = system.n_gpus
    g = min(system.hb.size, p)
    factor = float(bus_bandwidth_factor(op, p))
    out = []
    choices = [(a, (a,)) for a in FORCED] + [(ARGMIN_NCCL, None), (ARGMIN_ALL, FORCED)]
    for name, algos in choices:
        e = collective_estimate_vec(op, n, p, g, p // g, True, system, calib, algorithms=algos)
        t = finite_or_nan(e.time_s)
        if np.isnan(t).all():
            continue  # the algorithm does not apply to this collective / system
        algbw = n / t
        out.append(pd.DataFrame({
            "system_id": sid, "system": label, "n_gpus": p, "op": op, "algorithm": name,
            "chosen_algorithm": [e.algorithm(i) if np.isfinite(t[i]) else "" for i in range(n.size)],
            "protocol": [e.protocol(i) if np.isfinite(t[i]) else "" for i in range(n.size)],
            "size_bytes": n.astype(np.int64), "size": [size_label(x) for x in n],
            "time_s": t, "algbw_GBps": algbw / 1e9, "busbw_GBps": algbw * factor / 1e9, "source": "designer model"}))
    return out


def _measured_rows(sid: str, label: str, system: ClusterSystem, curve_id: str, n_max: float) -> pd.DataFrame:
    c = measured_curves()[curve_id]
    assert c["gpus"] == system.n_gpus, (curve_id, c["gpus"], system.n_gpus)
    s = np.array([parse_size(x) for x in c["sizes"]], dtype=float)
    keep = s <= n_max
    bus = np.array(c["busbw"], dtype=float)[keep]
    s = s[keep]
    factor = float(bus_bandwidth_factor("all_reduce", system.n_gpus))
    return pd.DataFrame({
        "system_id": sid, "system": label, "n_gpus": system.n_gpus, "op": "all_reduce", "algorithm": "measured",
        "chosen_algorithm": "", "protocol": "", "size_bytes": s.astype(np.int64), "size": [size_label(x) for x in s],
        "time_s": s / (bus / factor * 1e9), "algbw_GBps": bus / factor, "busbw_GBps": bus,
        "source": f"collectives.md §5 {curve_id}: {c['source']}"})


def compute(quick: bool = False) -> pd.DataFrame:
    calib = load_collective_calibration()
    n = sizes(quick)
    frames = []
    for sid, (label, system, curve) in systems(quick).items():
        for op in OPS:
            frames += _rows(sid, label, system, op, n, calib)
        if curve is not None:
            frames.append(_measured_rows(sid, label, system, curve, n.max()))
    return pd.concat(frames, ignore_index=True)


# ------------------------------------------------------------------------------------------------
# Plots

_STYLE = {a: dict(color=c, lw=1.2) for a, c in zip(FORCED, [
    "tab:blue", "tab:orange", "tab:green", "tab:olive", "tab:cyan", "tab:purple", "tab:brown", "tab:pink",
    "tab:red", "darkred", "gold", "teal", "slategray", "navy", "magenta"])}
_STYLE[ARGMIN_NCCL] = dict(color="black", lw=2.4, ls="--")
_STYLE[ARGMIN_ALL] = dict(color="grey", lw=3.5, alpha=0.45)


def _panel(ax, df: pd.DataFrame, title: str, legend: bool):
    for name, d in df[df.algorithm != "measured"].groupby("algorithm", sort=False):
        ax.plot(d.size_bytes, d.busbw_GBps, label=name, **_STYLE.get(name, {}))
    meas = df[df.algorithm == "measured"]
    if len(meas):
        ax.plot(meas.size_bytes, meas.busbw_GBps, "k*", ms=7, label=f"measured ({meas.source.iloc[0].split(':')[0][-4:].strip()})")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_ylim(bottom=0.01)
    ax.set_xticks([KIB, MIB, GIB])
    ax.set_xticklabels(["1K", "1M", "1G"])
    ax.grid(True, which="major", alpha=0.3)
    ax.set_title(title, fontsize=9)
    if legend:
        ax.legend(fontsize=6, loc="lower right", ncol=2)


def plot(df: pd.DataFrame, out_dir: Path, suffix: str) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sids = list(dict.fromkeys(df.system_id))
    paths = []
    # all-reduce: a panel per system
    cols = 4
    rows = -(-len(sids) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False, sharex=True)
    for i, sid in enumerate(sids):
        ax = axes[i // cols][i % cols]
        d = df[(df.system_id == sid) & (df.op == "all_reduce")]
        _panel(ax, d, d.system.iloc[0], legend=True)
        if sid == "h100_nvswitch_8":
            lo, hi = H100_RING_PLATEAU_GBPS
            ax.fill_between(H100_RING_PLATEAU_BYTES, lo, hi, color="tab:blue", alpha=0.35,
                            label="measured ring 365-370 (§5 E)")
            ax.legend(fontsize=6, loc="lower right", ncol=2)
        if i % cols == 0:
            ax.set_ylabel("all-reduce busbw (GB/s)")
    for j in range(len(sids), rows * cols):
        axes[j // cols][j % cols].axis("off")
    fig.suptitle("designer: predicted all-reduce busbw per algorithm (lines) vs nccl-tests (stars)")
    fig.tight_layout()
    p = out_dir / f"busbw_landscape{suffix}.png"
    fig.savefig(p, dpi=90)
    plt.close(fig)
    paths.append(p)
    # all-gather and all-to-all
    fig, axes = plt.subplots(2, len(sids), figsize=(3.6 * len(sids), 6.4), squeeze=False, sharex=True)
    for r, op in enumerate(("all_gather", "all_to_all")):
        for i, sid in enumerate(sids):
            d = df[(df.system_id == sid) & (df.op == op)]
            _panel(axes[r][i], d, f"{op}: {d.system.iloc[0]}", legend=True)
            if i == 0:
                axes[r][i].set_ylabel(f"{op} busbw (GB/s)")
    fig.tight_layout()
    p = out_dir / f"busbw_landscape_ag_a2a{suffix}.png"
    fig.savefig(p, dpi=80)
    plt.close(fig)
    paths.append(p)
    return paths


def summary(df: pd.DataFrame) -> pd.DataFrame:
    """Per system and op: the 8 GiB busbw of each algorithm, and for all-reduce the argmin's error
    against the measured curve for sizes >= 1 MiB."""
    top = df[(df.size_bytes == df.size_bytes.max()) & (df.algorithm != "measured")]
    table = top.pivot_table(index=["system_id", "op"], columns="algorithm", values="busbw_GBps", sort=False)
    return table


def measured_errors(df: pd.DataFrame, argmin: str = ARGMIN_NCCL, min_bytes: float = MIB) -> pd.DataFrame:
    """An argmin's all-reduce busbw against each measured curve, sizes >= min_bytes (collectives.md
    asks for 1 MiB and above)."""
    meas = df[df.algorithm == "measured"]
    pred = df[(df.algorithm == argmin) & (df.op == "all_reduce")]
    m = meas.merge(pred, on=["system_id", "size_bytes"], suffixes=("_meas", "_pred"))
    m = m[m.size_bytes >= min_bytes]
    m["error"] = m.busbw_GBps_pred / m.busbw_GBps_meas - 1.0
    return m[["system_id", "size_meas", "busbw_GBps_meas", "busbw_GBps_pred", "chosen_algorithm_pred", "error"]]


def main(quick: bool = False, out_dir: Path = RESULTS) -> pd.DataFrame:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    suffix = "_quick" if quick else ""
    with wall_clock(f"busbw_landscape{' --quick' if quick else ''}"):
        df = compute(quick)
        write_csv(df, out_dir / f"busbw_landscape{suffix}.csv")
        plot(df, out_dir, suffix)
        with pd.option_context("display.width", 250, "display.max_columns", 30, "display.precision", 1):
            print("busbw (GB/s) at 8 GiB per algorithm:")
            print(summary(df).to_string())
            for argmin in (ARGMIN_NCCL, ARGMIN_ALL):
                err = measured_errors(df, argmin)
                print(f"\n{argmin} vs measured all-reduce busbw, sizes >= 1 MiB (relative error):")
                print(err.groupby("system_id").error.agg(["min", "max", lambda e: e.abs().mean()])
                      .rename(columns={"<lambda_0>": "mean_abs"}).to_string(float_format=lambda x: f"{x:+.3f}"))
    return df


app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode="rich")


@app.command(help=escape(__doc__))
def cli(quick: Annotated[bool, typer.Option(
        "--quick", help="coarser grid, fewer systems (a few seconds)")] = False) -> None:
    main(quick=quick)


if __name__ == "__main__":
    app()
