"""Fit collectives.yaml's NVLSTree network factors for one GPU generation.

    .venv/bin/python studies/collectives/fit_nvls_tree.py [--architecture blackwell] [--domains many|two]

`--domains many` (the default) fits nvls_tree_many_domains_fraction on the runs over more than two
nodes, `--domains two` nvls_tree_two_domains_factor on the two-node runs. The points: every measured
NVLSTree AllReduce of that generation (forced, or NCCL's choice with NVLS enabled; CollNet runs left
out) at >= 1 MiB (collectives-modern.md; the setups of tests/perf/data/nccl_curves_modern.yaml). The
value is the one on a 0.01 grid that minimises the squared relative error of the predicted bus
bandwidth; the script prints it with the error statistics at 1 and at the fit, and the other
generations' curves of the same kind at their current value as a check."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Literal

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
import typer  # noqa: E402
from rich.markup import escape  # noqa: E402

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


app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode="rich")


@app.command(help=escape(__doc__))
def main(architecture: Annotated[str, typer.Option(help="the GPU generation to fit")] = "blackwell",
         domains: Annotated[Literal["many", "two"], typer.Option(help="runs over more than two nodes, or two")] = "many",
         ) -> None:
    two = domains == "two"
    field = "nvls_tree_two_domains_factor" if two else "nvls_tree_many_domains_fraction"
    base = coll.load_collective_calibration()
    curves = {cid: c for cid, c in nvls_tree_curves(two).items()
              if cc.system_for(c).gpu.architecture == architecture}

    def at(f: float):
        values = dict(getattr(base, field), **{architecture: f})
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
              if cc.system_for(c).gpu.architecture != architecture}
    for cid, c in sorted(others.items()):
        e = errors({cid: c}, base)
        if e.size:
            print(f"check {cid} ({cc.system_for(c).gpu.architecture}) at its current value: "
                  f"worst {e[np.argmax(np.abs(e))]:+.1%} over {e.size} points")


if __name__ == "__main__":
    app()
