"""Fit collectives.yaml's nvls_tree_many_domains_fraction for one GPU generation.

    .venv/bin/python studies/collectives/fit_nvls_tree.py [--architecture blackwell]

The points: every measured NVLSTree AllReduce (forced, or NCCL's choice with NVLS enabled, CollNet runs
left out) over
more than two nodes of that generation, at >= 1 MiB (collectives-modern.md; the setups of
tests/perf/data/nccl_curves_modern.yaml). The fraction is the value on a 0.01 grid that minimises
the squared relative error of the predicted bus bandwidth; the script prints it with the error
statistics at 1 (no loss) and at the fit, and the other generations' NVLSTree curves at their
current value as a check."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from designer.perf import collectives as coll  # noqa: E402
from tests.perf import collective_curves as cc  # noqa: E402


def nvls_tree_curves(two: bool) -> dict[str, dict]:
    """Measured NVLSTree-capable AllReduce curves over two nodes (`two`) or more."""
    out = {}
    for cid, c in cc.curves().items():
        if not cc.usable(c) or cc.source_kind(cid) != "nccl-tests" or c["op"] != "all_reduce":
            continue
        # NVLSTree forced, or NCCL's own choice with NVLS enabled (not CollNet runs)
        if (c.get("algorithm") or "").lower() not in ("nvlstree", "nvls"):
            continue
        system = cc.system_for(c)
        n_dom = system.n_gpus // system.hb.size
        if (n_dom != 2 if two else n_dom <= 2) or not system.hb.in_network_reduction:
            continue
        out[cid] = c
    return out


def errors(curves: dict[str, dict], calib) -> np.ndarray:
    return np.array([p.error for c in curves.values() for p in cc.predict(c, calib) if p.size_bytes >= cc.MIB])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--architecture", default="blackwell")
    ap.add_argument("--domains", choices=("many", "two"), default="many")
    args = ap.parse_args()
    two = args.domains == "two"
    field = "nvls_tree_two_domains_factor" if two else "nvls_tree_many_domains_fraction"
    base = coll.load_collective_calibration()
    curves = {cid: c for cid, c in nvls_tree_curves(two).items()
              if cc.system_for(c).gpu.architecture == args.architecture}

    def at(f: float):
        values = dict(getattr(base, field), **{args.architecture: f})
        return errors(curves, base.model_copy(update={field: values}))

    grid = np.round(np.arange(1.0, 1.3001, 0.01) if two else np.arange(0.70, 1.0001, 0.01), 2)
    best = min(grid, key=lambda f: float(np.sum(at(f) ** 2)))
    print(f"{len(curves)} curves, {at(1.0).size} points >= 1 MiB: {', '.join(sorted(curves))}")
    print(field)
    for label, f in (("at 1", 1.0), ("fitted", best)):
        e = at(f)
        print(f"{label:>8} {f:.3f}: mean {e.mean():+.1%}, MAPE {np.abs(e).mean():.1%}, worst {np.abs(e).max():.1%}, "
              f"within 10% {np.mean(np.abs(e) <= 0.10):.0%}")
    others = {cid: c for cid, c in nvls_tree_curves(two).items()
              if cc.system_for(c).gpu.architecture != args.architecture}
    for cid, c in sorted(others.items()):
        e = errors({cid: c}, base)
        if e.size:
            print(f"check {cid} ({cc.system_for(c).gpu.architecture}) at its current value: "
                  f"worst {e[np.argmax(np.abs(e))]:+.1%} over {e.size} points")


if __name__ == "__main__":
    main()
