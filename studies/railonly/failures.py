"""Rail-only study, part 2: failures, available capacity and the spare HB domains each family needs.

    .venv/bin/python studies/railonly/failures.py [--quick] [--out DIR]

The paper gives no quantitative availability model (railonly.md §6); designer.analysis.failures adds
one: GPU, host, NIC, link and switch failures at given MTBF/MTTR (defaults and their sources in
designer.spec.network_study.FailureRates: Llama 3 Table 5, Singh et al. 2021, MTTRs assumed). A
GPU-side failure removes a whole HB domain from a rail-only job (the domain moves to a spare) but only
an 8-GPU tensor-parallel group where the fabric is any-to-any; a leaf failure cuts every GPU under it in
every family; spine failures only cost ECMP bandwidth.

Outputs (results/railonly/ by default):
1. failures_capacity.csv: per family (rail-only, rail-optimized, oversubscribed 3:1, fat-tree), HB
   domain K in {8, 72, 256}, N ~ 32,768 GPUs, radix 64 and failure-rate multipliers 0.25..8: the
   expected fraction of capacity up (no spares), the expected upper-tier bandwidth fraction, failures
   per year, and the spare domains that hold the whole job with probability 0.99 and 0.999, with
   their cost (catalog platform price x spares + the network for the extra domains: QM9790 64x400G,
   the cheapest 400G optic, CX-7 NICs) as a share of the job-only capex.
2. failures_milp.csv: the sizing MILP with a `spares` section: (a) per family, at a fixed job size,
   the MILP's spare count next to the availability model's minimum; (b) max job GPUs under a capex
   budget, families open, for a sweep of budgets: the budget binds and the spare choice changes.
PNG failures.png: capacity vs failure rate, spares vs failure rate, and the budget sweep.

`--quick` runs a subset of the same rows (a few seconds); tests/studies/test_railonly_cost_failures.py
checks it against the committed full CSVs.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import typer  # noqa: E402
from rich.markup import escape  # noqa: E402

from designer.analysis.failures import (  # noqa: E402
    expected_capacity_fraction,
    exposure,
    required_spares,
    upper_tier_failures,
)
from designer.network.api import solve_network  # noqa: E402
from designer.network.prices import prices_from_components  # noqa: E402
from designer.network.topology import RAILONLY_V5_PRICES, bill_of_materials  # noqa: E402
from designer.spec.catalog import load_catalog  # noqa: E402
from designer.spec.network_study import FailureRates, NetworkStudy  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cost_power import paper_catalog_yaml  # noqa: E402  (the paper's prices as catalog entries)

REPO = Path(__file__).resolve().parents[2]
OUT_DIR = REPO / "results" / "railonly"

FAMILIES = ("rail-only", "rail-optimized", "oversubscribed", "fat-tree")
OVERSUBSCRIPTION = 3.0  # the oversubscribed family's spine ratio (network_study.py: common 1:3)
PLATFORM_OF_K = {8: "hgx_h100_8", 72: "gb200_nvl72", 256: "gh200_nvl256"}
SWITCH, PORT_GBPS, RADIX = "qm9790", 400.0, 64  # catalog switch, 64 x 400G NDR
N_TARGET = 32768
RATE_FACTORS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
CONFIDENCES = (0.99, 0.999)
UNIT_GPUS = 8  # tensor-parallel group that moves on a GPU failure in any-to-any families
# The MILP budget sweep: max job GPUs on H100 nodes, families open, for these capex caps (USD).
BUDGETS_USD = (25e6, 50e6, 100e6, 200e6)
BUDGET_GPU_RANGE = (512, 8192)


def n_for(k: int) -> int:
    return k * round(N_TARGET / k)


def _bom(family: str, n: int, k: int, prices):
    os_ = OVERSUBSCRIPTION if family == "oversubscribed" else 1.0
    return bill_of_materials(family, n, k, RADIX, prices=prices, port_gbps=PORT_GBPS, oversubscription=os_)


def capacity_rows(quick: bool) -> list[dict]:
    catalog = load_catalog()
    prices = prices_from_components(catalog, SWITCH, PORT_GBPS)
    base = FailureRates()
    rows = []
    ks = (8, 256) if quick else (8, 72, 256)
    factors = (1.0, 4.0) if quick else RATE_FACTORS
    for k in ks:
        n = n_for(k)
        job = n // k
        platform_usd = catalog.platform(PLATFORM_OF_K[k]).price_usd
        for family in FAMILIES:
            bom_job = _bom(family, n, k, prices)
            upper_sw = bom_job.switch_count - bom_job.tiers[0].switches
            upper_links = sum(t.up_links for t in bom_job.tiers[:-1])
            job_capex = job * platform_usd + bom_job.cost_usd
            for factor in factors:
                rates = base.scaled(factor)
                e = exposure(family, job, k, RADIX, unit_gpus=UNIT_GPUS, gpus_per_host=rates.gpus_per_host)
                up = upper_tier_failures(upper_sw, upper_links, bom_job.n_tiers - 1, rates)
                row = {
                    "family": family, "hb_domain_size": k, "n_gpus": n, "radix": RADIX,
                    "failure_rate_factor": factor, "unit_gpus": e.unit_gpus, "leaf_count": e.leaf_count,
                    "leaf_groups": e.leaf_groups, "units_per_leaf_group": e.units_per_group,
                    "expected_capacity_fraction": expected_capacity_fraction(e, rates),
                    "upper_bandwidth_fraction": up.bandwidth_fraction,
                    "leaf_failures_per_year": e.leaf_count * 8766.0 / rates.switch.mtbf_h,
                    "upper_switch_failures_per_year": up.switch_failures_per_year,
                    "job_capex_usd": job_capex,
                }
                for p in CONFIDENCES:
                    req = required_spares(family, job, k, RADIX, rates, confidence=p, unit_gpus=UNIT_GPUS)
                    built = _bom(family, req.built_domains * k, k, prices)
                    spare_usd = req.spare_domains * platform_usd + built.cost_usd - bom_job.cost_usd
                    tag = f"p{str(p).replace('0.', '')}"
                    row[f"spare_domains_{tag}"] = req.spare_domains
                    row[f"spare_pct_of_job_{tag}"] = 100.0 * req.spare_domains / job
                    row[f"lost_units_quantile_{tag}"] = req.lost_units_quantile
                    row[f"spare_cost_usd_{tag}"] = spare_usd
                    row[f"spare_cost_pct_of_job_capex_{tag}"] = 100.0 * spare_usd / job_capex
                rows.append(row)
    return rows


# ------------------------------------------------------------------------------------------------
# The MILP with spares
# ------------------------------------------------------------------------------------------------


def _study(cat: Path, families, platform: str, *, gpus: dict, objective: dict, budgets: dict | None = None,
           confidence: float = 0.999) -> NetworkStudy:
    return NetworkStudy.model_validate({
        "name": "railonly-spares",
        "catalog": {"extra_files": [str(cat)]},
        "choices": {"platforms": [platform], "nics": [{"id": "paper_nic"}], "switches": [{"id": f"paper_r{RADIX}"}],
                    "families": list(families), "oversubscription": [OVERSUBSCRIPTION],
                    "media": {"nic_links": "optic", "optic": "paper_optic"}},
        "gpus": gpus, "objective": objective, "budgets": budgets or {},
        "spares": {"confidence": confidence, "unit_gpus": UNIT_GPUS},
    })


def milp_rows(quick: bool) -> list[dict]:
    """Paper v5 network prices as catalog entries (cost_power.paper_catalog_yaml) plus the catalog's
    platform prices, so spares carry their platform and network cost."""
    rows = []
    rates = FailureRates()
    with tempfile.TemporaryDirectory() as tmp:
        cat = Path(tmp) / "paper_v5.yaml"
        cat.write_text(paper_catalog_yaml(RAILONLY_V5_PRICES))
        ks = (8, 256) if quick else (8, 72, 256)
        fams = ("rail-only", "fat-tree") if quick else FAMILIES
        for k in ks:
            n = n_for(k)
            for family in fams:
                t0 = time.perf_counter()
                res = solve_network(_study(cat, [family], PLATFORM_OF_K[k], gpus={"count": n},
                                           objective={"kind": "min_cost"}))
                d = res.design
                req = required_spares(family, n // k, k, RADIX, rates, confidence=0.999, unit_gpus=UNIT_GPUS)
                rows.append({
                    "case": "fixed job, one family", "family": family, "hb_domain_size": k, "job_gpus": d.job_gpus,
                    "capex_budget_usd": None, "milp_label": d.label, "milp_spare_domains": d.spare_domains,
                    "model_spare_domains": req.spare_domains, "built_domains": d.n_domains,
                    "capex_usd": d.capex_usd, "network_capex_usd": d.network_capex_usd,
                    "milp_status": res.status, "solve_s": time.perf_counter() - t0,
                })
        # Families open, same fixed job: the network alone favours rail-only (cost_power.py), spares may not.
        for k in ((8,) if quick else (8, 256)):
            n = n_for(k)
            t0 = time.perf_counter()
            res = solve_network(_study(cat, ["rail-only", "rail-optimized", "fat-tree"], PLATFORM_OF_K[k],
                                       gpus={"count": n}, objective={"kind": "min_cost"}))
            d = res.design
            req = required_spares(d.family, n // k, k, RADIX, rates, confidence=0.999, unit_gpus=UNIT_GPUS)
            rows.append({
                "case": "fixed job, families open", "family": d.family.value, "hb_domain_size": k,
                "job_gpus": d.job_gpus, "capex_budget_usd": None, "milp_label": d.label,
                "milp_spare_domains": d.spare_domains, "model_spare_domains": req.spare_domains,
                "built_domains": d.n_domains, "capex_usd": d.capex_usd, "network_capex_usd": d.network_capex_usd,
                "milp_status": res.status, "solve_s": time.perf_counter() - t0,
            })
        budgets = BUDGETS_USD[1:3] if quick else BUDGETS_USD
        for cap in budgets:
            t0 = time.perf_counter()
            res = solve_network(_study(cat, ["rail-only", "rail-optimized", "fat-tree"], PLATFORM_OF_K[8],
                                       gpus={"min": BUDGET_GPU_RANGE[0], "max": BUDGET_GPU_RANGE[1]},
                                       objective={"kind": "max_gpus"}, budgets={"capex_usd": cap}))
            d = res.design
            req = required_spares(d.family, d.job_domains, d.hb_domain_size, RADIX, rates, confidence=0.999,
                                  unit_gpus=UNIT_GPUS)
            rows.append({
                "case": "max job GPUs under a capex budget", "family": d.family.value, "hb_domain_size": 8,
                "job_gpus": d.job_gpus, "capex_budget_usd": cap, "milp_label": d.label,
                "milp_spare_domains": d.spare_domains, "model_spare_domains": req.spare_domains,
                "built_domains": d.n_domains, "capex_usd": d.capex_usd, "network_capex_usd": d.network_capex_usd,
                "milp_status": res.status, "solve_s": time.perf_counter() - t0,
            })
    return rows


def plot(cap: pd.DataFrame, milp: pd.DataFrame, path: Path) -> None:
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6))
    styles = {"rail-only": "-", "rail-optimized": "--", "oversubscribed": ":", "fat-tree": "-."}
    colors = {8: "tab:blue", 72: "tab:orange", 256: "tab:green"}
    for (fam, k), s in cap.groupby(["family", "hb_domain_size"]):
        s = s.sort_values("failure_rate_factor")
        kw = dict(linestyle=styles[fam], color=colors.get(int(k)), marker=".", label=f"{fam}, K={k}")
        axes[0].plot(s.failure_rate_factor, 100 * s.expected_capacity_fraction, **kw)
        axes[1].plot(s.failure_rate_factor, s["spare_pct_of_job_p999"], **kw)
    for ax, ylab in ((axes[0], "expected capacity up, no spares (%)"),
                     (axes[1], "spare domains for p=0.999 (% of job)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("failure-rate multiplier (1 = Llama 3 / Singh et al. rates)")
        ax.set_ylabel(ylab)
        ax.grid(alpha=0.3)
    axes[1].set_yscale("log")
    axes[0].legend(fontsize=6)
    b = milp[milp.case == "max job GPUs under a capex budget"].sort_values("capex_budget_usd")
    ax = axes[2]
    ax.plot(b.capex_budget_usd / 1e6, b.job_gpus, "o-", label="job GPUs")
    ax2 = ax.twinx()
    ax2.plot(b.capex_budget_usd / 1e6, b.milp_spare_domains, "s--", color="tab:red", label="spare domains")
    for _, r in b.iterrows():
        ax.annotate(r.family, (r.capex_budget_usd / 1e6, r.job_gpus), fontsize=7)
    ax.set_xlabel("capex budget (M USD), H100 nodes, p = 0.999")
    ax.set_ylabel("job GPUs (MILP max)")
    ax2.set_ylabel("spare HB domains", color="tab:red")
    ax.grid(alpha=0.3)
    fig.suptitle("Failures: capacity, spares and the MILP's spare choice (radix 64)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(quick: bool = False, out_dir: Path | str | None = None) -> dict[str, pd.DataFrame]:
    t0 = time.perf_counter()
    out = Path(out_dir) if out_dir is not None else OUT_DIR
    out.mkdir(parents=True, exist_ok=True)
    suffix = "_quick" if quick else ""
    cap = pd.DataFrame(capacity_rows(quick))
    milp = pd.DataFrame(milp_rows(quick))
    cap.to_csv(out / f"failures_capacity{suffix}.csv", index=False)
    milp.to_csv(out / f"failures_milp{suffix}.csv", index=False)
    plot(cap, milp, out / f"failures{suffix}.png")
    pd.set_option("display.width", 220)
    one = cap[cap.failure_rate_factor == 1.0]
    print("At the default failure rates (factor 1):")
    print(one[["family", "hb_domain_size", "expected_capacity_fraction", "upper_bandwidth_fraction",
               "spare_domains_p99", "spare_domains_p999", "spare_pct_of_job_p999",
               "spare_cost_pct_of_job_capex_p999"]].round(4).to_string(index=False))
    print(milp[["case", "family", "hb_domain_size", "job_gpus", "capex_budget_usd", "milp_spare_domains",
                "model_spare_domains", "capex_usd"]].to_string(index=False))
    print(f"wall time: {time.perf_counter() - t0:.1f} s")
    return {"capacity": cap, "milp": milp}


app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode="rich")


@app.command(help=escape(__doc__))
def cli(quick: Annotated[bool, typer.Option("--quick", help="a few-second subset (the test suite runs it)")] = False,
        out: Annotated[Path | None, typer.Option("--out", help=f"output folder (default {OUT_DIR})")] = None,
        ) -> None:
    main(quick=quick, out_dir=out)


if __name__ == "__main__":
    app()
