"""Benchmark the network sizing MILP at 1,024, 32,768 and 1,000,000 GPUs.

    .venv/bin/python studies/benchmarks/bench_milp.py [--repeats 3] [--sizes 1024 --sizes 32768]  (list options: repeat the flag)

Open choice set (realistic, from the shipped catalog): 6 HB platforms (A100, H100, H200, B200 nodes,
GB200 NVL72, GH200 NVL256), 3 NICs (200/400/800G) at 1 or 2 per GPU, 4 switches with all their port
modes (QM9790, SN5600, Q3400, TH5 whitebox: radix 64..256), all 4 families with oversubscription 3:1
and 7:1, and NIC-link media chosen by the MILP (DAC or optics). At least 400 Gb/s per GPU.

Two questions per scale:
  * min_cost: the cheapest cluster of at least N GPUs (N..N+255, so every HB size can round up);
  * max_flops: the most dense BF16 FLOP/s for a capex and power budget sized to about N H100s,
    with the GPU count free in [N/2, 2N] (a harder MILP: budgets bind, the count is open).
Wall time of `solve_network` (enumeration, bound tightening, model build, HiGHS, extraction), median
of the repeats. Target: < 10 s at 1,000,000 GPUs on a 2-core machine.
"""

from __future__ import annotations

import statistics
import time
from typing import Annotated

import typer
from rich.markup import escape

from designer.network.api import solve_network
from designer.network.milp import enumerate_combos
from designer.spec.network_study import NetworkStudy, study_catalog

CHOICES = {
    "platforms": ["dgx_a100", "hgx_h100_8", "hgx_h200_8", "hgx_b200_8", "gb200_nvl72", "gh200_nvl256"],
    "nics": [{"id": "cx6_200g", "nics_per_gpu": [1, 2]}, {"id": "cx7_400g", "nics_per_gpu": [1, 2]},
             {"id": "cx8_800g", "nics_per_gpu": [1]}],
    "switches": [{"id": "qm9790"}, {"id": "sn5600"}, {"id": "q3400"}, {"id": "th5_whitebox"}],
    "families": ["rail-optimized", "rail-only", "fat-tree", "oversubscribed"],
    "oversubscription": [3, 7],
    "media": {"nic_links": "choose"},
}

# About $40k and 1.4 kW per GPU all in (H100 node plus network, railonly.md §2 and the catalog).
USD_PER_GPU, W_PER_GPU = 40_000.0, 1_400.0


def studies(n: int) -> dict[str, NetworkStudy]:
    solver = {"time_limit_s": 120, "rel_gap": 1e-6, "threads": 1, "seed": 0}
    return {
        "min_cost": NetworkStudy.model_validate({
            "name": f"bench-min-cost-{n}", "choices": CHOICES, "solver": solver,
            "gpus": {"min": n, "max": n + 255, "min_scaleout_gbps_per_gpu": 400}}),
        "max_flops": NetworkStudy.model_validate({
            "name": f"bench-max-flops-{n}", "choices": CHOICES, "solver": solver,
            "gpus": {"min": n // 2, "max": 2 * n, "min_scaleout_gbps_per_gpu": 400},
            "objective": {"kind": "max_flops"},
            "budgets": {"capex_usd": USD_PER_GPU * n, "power_w": W_PER_GPU * n}}),
    }


app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode="rich")


@app.command(help=escape(__doc__))
def main(repeats: Annotated[int, typer.Option(
             "--repeats", help="solves per size and objective (their median and min are printed)")] = 3,
         sizes: Annotated[list[int], typer.Option(
             "--sizes", help="GPU counts N to benchmark (repeat the flag for several)")] = [1024, 32768, 1_000_000],
         ) -> None:
    print(f"{'GPUs':>9} {'objective':>9} {'blocks':>6} {'median_s':>8} {'min_s':>6} {'status':>9}  design")
    for n in sizes:
        for kind, st in studies(n).items():
            catalog = study_catalog(st)
            blocks = len(enumerate_combos(st, catalog))
            times, res = [], None
            for _ in range(repeats):
                t0 = time.perf_counter()
                res = solve_network(st, catalog=catalog)
                times.append(time.perf_counter() - t0)
            d = res.design
            print(f"{n:>9} {kind:>9} {blocks:>6} {statistics.median(times):>8.2f} {min(times):>6.2f} {res.status:>9}  "
                  f"{d.n_gpus} GPUs {d.label}: ${d.capex_usd / 1e6:,.1f}M, {d.power_w / 1e6:,.2f} MW, "
                  f"{d.peak_pflops:,.0f} PFLOP/s")


if __name__ == "__main__":
    app()
