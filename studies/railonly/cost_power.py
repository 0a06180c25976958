"""Rail-only study, part 1: cost and power of rail-only vs the rail-optimized fat-tree.

    .venv/bin/python studies/railonly/cost_power.py [--quick] [--out DIR]

Three outputs (CSV + one PNG), written to results/railonly/ by default:

1. cost_power_table2.csv: Wang et al.'s Table 2 (arXiv 2307.12169 V1, HotNets 2023; K = 256, seven
   (N, R) rows), at both published price sets (V1: $748 per switch port, $374 per transceiver; v5:
   $694 / $199; railonly.md §2), with switch and transceiver counts, cost, power and savings beside the
   published numbers and their difference. The counting model is the paper's (railonly.md §2:
   L tiers, (2L-1)·E·P/R switches, 2·L·N transceivers), `Convention.paper` of designer's closed form.
   Power per port (17.6 W) and per transceiver (9.25 W) are inferred in railonly.md §2 from v5's
   stated power savings, so the power check is against the v5 abstract's 37-75 % range only.
2. cost_power_extended.csv: the same savings for HB domains K in {8, 72, 256}, radix R in
   {32, 64, 128, 256} and N from 1,024 to 1,000,000 GPUs (powers of two and 1.5x powers of two, rounded
   to a multiple of K), both price sets, under the paper's counting and designer's physical counting
   (integer switches of a buildable folded Clos, topology.py docstring). PNG: saving vs N, one panel
   per radix, one line per K.
3. cost_power_milp.csv: each rail-only design beside the sizing MILP's optimum for the same GPU count
   (solve_network, min_cost, the paper's prices as catalog entries, NICs at $0 as the paper excludes
   them, families open), in three scopes: the same radix with the full-bisection families
   (rail-optimized, rail-only, fat-tree); any radix 32..256 with those families; and any radix with
   a 3:1 oversubscribed spine allowed too (cheaper, but not bandwidth-equivalent). Compute capex is the
   same for every design at a fixed N and platform, so the network capex decides.

`--quick` runs Table 2, a small slice of the grid and two MILP rows (a few seconds); its rows are a
subset of the full run's and tests/studies/test_railonly_cost_failures.py checks them against the
committed full CSVs.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Annotated, Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import typer  # noqa: E402
from rich.markup import escape  # noqa: E402

from designer.network.api import solve_network  # noqa: E402
from designer.network.topology import (  # noqa: E402
    RAILONLY_V1_PRICES,
    RAILONLY_V5_PRICES,
    ComponentPrices,
    Convention,
    Family,
    bill_of_materials,
)
from designer.spec.network_study import NetworkStudy  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
OUT_DIR = REPO / "results" / "railonly"

PRICE_SETS: dict[str, ComponentPrices] = {"v1": RAILONLY_V1_PRICES, "v5": RAILONLY_V5_PRICES}
K_PAPER = 256

# Wang et al. V1 Table 2 (K = 256), railonly.md §2: (N, R, fat-tree switches, fat-tree transceivers,
# rail-only switches, rail-only transceivers, V1 saving as printed, v5 saving as printed, v5 decimals).
# V1 prints whole percent, truncated (54.55 -> 54: railonly.md §2 gives the exact 54.55 beside it);
# v5 prints two decimals except two rows printed as 38 % and 77 %.
PUBLISHED_TABLE2: tuple[tuple[int, int, int, int, int, int, float, float, int], ...] = (
    (32768, 32, 7168, 262144, 3072, 131072, 54.0, 55.38, 2),
    (32768, 64, 2560, 196608, 1536, 131072, 37.0, 38.29, 2),
    (32768, 128, 1280, 196608, 256, 65536, 75.0, 76.59, 2),
    (32768, 256, 384, 131072, 128, 65536, 60.0, 62.06, 2),
    (65536, 64, 5120, 393216, 3072, 262144, 37.0, 38.29, 2),
    (65536, 128, 2560, 393216, 1536, 262144, 37.0, 38.0, 0),
    (65536, 256, 1280, 393216, 256, 131072, 75.0, 77.0, 0),
)
# v5 abstract (railonly.md §2): cost savings 38-77 %, power savings 37-75 %.
PUBLISHED_COST_RANGE_V5_PCT = (38.0, 77.0)
PUBLISHED_POWER_RANGE_PCT = (37.0, 75.0)
# railonly.md §2: the fat-tree baseline at N = 32,768, R = 64 costs $152,829,952 (v5, "~$153M" in
# v5's intro) and $196,083,712 (V1); its power is ~4.7 MW (v5).
PUBLISHED_BASELINE_USD = {"v1": 196_083_712.0, "v5": 152_829_952.0}
PUBLISHED_BASELINE_POWER_W = 4.7e6

HB_SIZES = (8, 72, 256)
RADIXES = (32, 64, 128, 256)
PLATFORM_OF_K = {8: "hgx_h100_8", 72: "gb200_nvl72", 256: "gh200_nvl256"}  # designer catalog platforms
N_MIN, N_MAX = 1024, 1_000_000


def n_grid(k: int, quick: bool = False) -> list[int]:
    """Powers of two and 1.5x powers of two from 1,024 to 2^19, then 1,000,000; each the multiple of
    K nearest to the target, kept inside [1,024, 1,000,000]."""
    targets = sorted({2**e for e in range(10, 20)} | {3 * 2 ** (e - 1) for e in range(11, 20)} | {N_MAX})
    if quick:
        targets = [1024, 4096, 32768]
    out = []
    for t in targets:
        n = k * round(t / k)
        if n < N_MIN:
            n += k
        if n > N_MAX:
            n -= k
        out.append(n)
    return sorted(set(out))


def saving_pct(baseline: float, design: float) -> float:
    return 100.0 * (1.0 - design / baseline)


# ------------------------------------------------------------------------------------------------
# 1. Table 2
# ------------------------------------------------------------------------------------------------


def table2() -> pd.DataFrame:
    rows = []
    for name, prices in PRICE_SETS.items():
        for n, r, p_fsw, p_fx, p_rsw, p_rx, p_v1, p_v5, v5_dec in PUBLISHED_TABLE2:
            ft = bill_of_materials(Family.rail_optimized, n, K_PAPER, r, prices=prices, convention=Convention.paper)
            ro = bill_of_materials(Family.rail_only, n, K_PAPER, r, prices=prices, convention=Convention.paper)
            cost = saving_pct(ft.cost_usd, ro.cost_usd)
            pub = p_v1 if name == "v1" else p_v5
            # Half a unit of the printed precision, or a whole percent where V1 truncates.
            tol = 1.0 if name == "v1" else 0.5 * 10.0**-v5_dec
            rows.append({
                "price_set": name, "n_gpus": n, "hb_domain_size": K_PAPER, "radix": r,
                "fat_tree_tiers": ft.n_tiers, "rail_only_tiers": ro.n_tiers,
                "fat_tree_switches": ft.switch_count, "published_fat_tree_switches": p_fsw,
                "fat_tree_transceivers": ft.transceiver_count, "published_fat_tree_transceivers": p_fx,
                "rail_only_switches": ro.switch_count, "published_rail_only_switches": p_rsw,
                "rail_only_transceivers": ro.transceiver_count, "published_rail_only_transceivers": p_rx,
                "fat_tree_cost_usd": ft.cost_usd, "rail_only_cost_usd": ro.cost_usd,
                "cost_saving_pct": cost, "published_cost_saving_pct": pub,
                "cost_saving_diff_pct": cost - pub, "published_tolerance_pct": tol,
                "fat_tree_power_w": ft.power_w, "rail_only_power_w": ro.power_w,
                "power_saving_pct": saving_pct(ft.power_w, ro.power_w),
            })
    return pd.DataFrame(rows)


def table2_summary(t2: pd.DataFrame) -> list[dict[str, Any]]:
    """Published vs designer for the headline numbers (the README results table)."""
    v5 = t2[t2.price_set == "v5"]
    base = t2[(t2.n_gpus == 32768) & (t2.radix == 64)].set_index("price_set")
    out = [
        {"quantity": "v5 cost saving, min over Table 2 (%)", "published": PUBLISHED_COST_RANGE_V5_PCT[0],
         "designer": v5.cost_saving_pct.min()},
        {"quantity": "v5 cost saving, max over Table 2 (%)", "published": PUBLISHED_COST_RANGE_V5_PCT[1],
         "designer": v5.cost_saving_pct.max()},
        {"quantity": "power saving, min over Table 2 (%)", "published": PUBLISHED_POWER_RANGE_PCT[0],
         "designer": v5.power_saving_pct.min()},
        {"quantity": "power saving, max over Table 2 (%)", "published": PUBLISHED_POWER_RANGE_PCT[1],
         "designer": v5.power_saving_pct.max()},
        {"quantity": "fat-tree baseline N=32768 R=64, V1 (USD)", "published": PUBLISHED_BASELINE_USD["v1"],
         "designer": float(base.loc["v1", "fat_tree_cost_usd"])},
        {"quantity": "fat-tree baseline N=32768 R=64, v5 (USD)", "published": PUBLISHED_BASELINE_USD["v5"],
         "designer": float(base.loc["v5", "fat_tree_cost_usd"])},
        {"quantity": "fat-tree baseline power N=32768 R=64 (W)", "published": PUBLISHED_BASELINE_POWER_W,
         "designer": float(base.loc["v5", "fat_tree_power_w"])},
    ]
    for row in out:
        row["difference"] = row["designer"] - row["published"]
    return out


# ------------------------------------------------------------------------------------------------
# 2. Extended grid
# ------------------------------------------------------------------------------------------------


def extended(quick: bool) -> pd.DataFrame:
    rows = []
    ks = (8, 256) if quick else HB_SIZES
    radixes = (64,) if quick else RADIXES
    price_sets = ("v5",) if quick else tuple(PRICE_SETS)
    for name in price_sets:
        prices = PRICE_SETS[name]
        for conv in (Convention.paper, Convention.physical):
            for k in ks:
                for r in radixes:
                    for n in n_grid(k, quick):
                        ft = bill_of_materials(Family.rail_optimized, n, k, r, prices=prices, convention=conv)
                        ro = bill_of_materials(Family.rail_only, n, k, r, prices=prices, convention=conv)
                        rows.append({
                            "price_set": name, "convention": conv.value, "hb_domain_size": k, "radix": r,
                            "n_gpus": n, "fat_tree_tiers": ft.n_tiers, "rail_only_tiers": ro.n_tiers,
                            "fat_tree_switches": ft.switch_count, "rail_only_switches": ro.switch_count,
                            "fat_tree_transceivers": ft.transceiver_count,
                            "rail_only_transceivers": ro.transceiver_count,
                            "fat_tree_cost_usd": ft.cost_usd, "rail_only_cost_usd": ro.cost_usd,
                            "cost_saving_pct": saving_pct(ft.cost_usd, ro.cost_usd),
                            "fat_tree_power_w": ft.power_w, "rail_only_power_w": ro.power_w,
                            "power_saving_pct": saving_pct(ft.power_w, ro.power_w),
                        })
    return pd.DataFrame(rows)


def plot_extended(ext: pd.DataFrame, path: Path) -> None:
    d = ext[ext.price_set == "v5"]
    radixes = sorted(d.radix.unique())
    fig, axes = plt.subplots(2, len(radixes), figsize=(4.2 * len(radixes), 7), sharex=True, sharey="row",
                             squeeze=False)
    colors = {8: "tab:blue", 72: "tab:orange", 256: "tab:green"}
    for j, r in enumerate(radixes):
        for i, (col, what) in enumerate((("cost_saving_pct", "cost"), ("power_saving_pct", "power"))):
            ax = axes[i][j]
            for k in sorted(d.hb_domain_size.unique()):
                for conv, style in (("paper", "-"), ("physical", "--")):
                    s = d[(d.radix == r) & (d.hb_domain_size == k) & (d.convention == conv)].sort_values("n_gpus")
                    ax.plot(s.n_gpus, s[col], style, color=colors.get(int(k)), marker="." if conv == "paper" else None,
                            label=f"K={k} ({conv})")
            ax.set_xscale("log")
            ax.grid(alpha=0.3)
            if i == 0:
                ax.set_title(f"radix {r}")
            if i == 1:
                ax.set_xlabel("GPUs N")
            if j == 0:
                ax.set_ylabel(f"rail-only {what} saving vs fat-tree (%)")
    axes[0][0].legend(fontsize=7)
    fig.suptitle("Rail-only savings over the rail-optimized fat-tree (v5 prices; solid: paper counting, "
                 "dashed: physical)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ------------------------------------------------------------------------------------------------
# 3. Rail-only vs the MILP optimum
# ------------------------------------------------------------------------------------------------


def paper_catalog_yaml(prices: ComponentPrices) -> str:
    """The paper's linear prices as catalog entries: one 400G switch per radix priced R x port price,
    one optic per link end, a NIC at $0 (the paper excludes NICs, railonly.md §2)."""
    lines = ["switches:"]
    for r in RADIXES:
        lines.append(f"  - {{id: paper_r{r}, name: 'paper switch {r}x400G', modes: [{{radix: {r}, port_gbps: 400}}], "
                     f"price_usd: {prices.switch_port_usd * r}, power_w: {prices.switch_port_w * r}, "
                     f"source: '{prices.name} per-port figures x {r} (railonly.md §2)'}}")
    lines += ["media:",
              f"  - {{id: paper_optic, kind: optic, gbps: 400, reach_m: 2000, price_usd: {prices.transceiver_usd}, "
              f"power_w: {prices.transceiver_w}, source: '{prices.name} per transceiver (railonly.md §2)'}}",
              "nics:",
              "  - {id: paper_nic, gbps: 400, price_usd: 0, power_w: 0, source: 'NICs excluded by the paper (railonly.md §2)'}"]
    return "\n".join(lines) + "\n"


SCOPES = {
    "same radix, full bisection": (("rail-optimized", "rail-only", "fat-tree"), False),
    "any radix, full bisection": (("rail-optimized", "rail-only", "fat-tree"), True),
    "any radix, 3:1 spine allowed": (("rail-optimized", "rail-only", "fat-tree", "oversubscribed"), True),
}


def milp_cases(quick: bool) -> list[tuple[str, int, int, int]]:
    """(price set, N, K, rail-only radix): the Table 2 rows, plus K = 8 and 72 at R = 64."""
    if quick:
        return [("v5", 32768, 256, 64), ("v5", 32768, 8, 64)]
    cases = []
    for name in PRICE_SETS:
        cases += [(name, n, K_PAPER, r) for n, r, *_ in PUBLISHED_TABLE2]
        for k in (8, 72):
            cases += [(name, k * round(n / k), k, 64) for n in (8192, 32768, 131072)]
    return cases


def milp_compare(quick: bool) -> pd.DataFrame:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        cats = {}
        for name, prices in PRICE_SETS.items():
            cats[name] = Path(tmp) / f"paper_{name}.yaml"
            cats[name].write_text(paper_catalog_yaml(prices))
        for name, n, k, r in milp_cases(quick):
            prices = PRICE_SETS[name]
            ro = bill_of_materials(Family.rail_only, n, k, r, prices=prices)  # physical counting
            ro_paper = bill_of_materials(Family.rail_only, n, k, r, prices=prices, convention=Convention.paper)
            rop = bill_of_materials(Family.rail_optimized, n, k, r, prices=prices)
            for scope, (families, any_radix) in SCOPES.items():
                switches = [{"id": f"paper_r{x}"} for x in (RADIXES if any_radix else (r,))]
                study = NetworkStudy.model_validate({
                    "name": f"railonly-{name}-{n}-{k}-{r}",
                    "catalog": {"extra_files": [str(cats[name])]},
                    "choices": {"platforms": [PLATFORM_OF_K[k]], "nics": [{"id": "paper_nic"}],
                                "switches": switches, "families": list(families), "oversubscription": [3],
                                "media": {"nic_links": "optic", "optic": "paper_optic"}},
                    "gpus": {"count": n}, "objective": {"kind": "min_cost"},
                })
                t0 = time.perf_counter()
                res = solve_network(study)
                d = res.design
                rows.append({
                    "price_set": name, "n_gpus": n, "hb_domain_size": k, "radix": r, "scope": scope,
                    "rail_only_tiers": ro.n_tiers, "rail_only_switches": ro.switch_count,
                    "rail_only_network_usd": ro.cost_usd, "rail_only_paper_count_usd": ro_paper.cost_usd,
                    "rail_optimized_network_usd": rop.cost_usd,
                    "milp_status": res.status, "milp_family": d.family.value, "milp_radix": d.radix,
                    "milp_tiers": d.n_tiers, "milp_oversubscription": d.oversubscription,
                    "milp_label": d.label, "milp_switches": d.bom.switch_count,
                    "milp_transceivers": d.bom.transceiver_count, "milp_network_usd": d.network_capex_usd,
                    "milp_network_power_w": d.network_power_w,
                    "milp_saving_vs_rail_only_pct": saving_pct(ro.cost_usd, d.network_capex_usd),
                    "milp_solve_s": time.perf_counter() - t0,
                })
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------------------------


def main(quick: bool = False, out_dir: Path | str | None = None) -> dict[str, pd.DataFrame]:
    t0 = time.perf_counter()
    out = Path(out_dir) if out_dir is not None else OUT_DIR
    out.mkdir(parents=True, exist_ok=True)
    suffix = "_quick" if quick else ""
    t2 = table2()
    ext = extended(quick)
    mc = milp_compare(quick)
    summary = pd.DataFrame(table2_summary(t2))
    t2.to_csv(out / f"cost_power_table2{suffix}.csv", index=False)
    summary.to_csv(out / f"cost_power_summary{suffix}.csv", index=False)
    ext.to_csv(out / f"cost_power_extended{suffix}.csv", index=False)
    mc.to_csv(out / f"cost_power_milp{suffix}.csv", index=False)
    plot_extended(ext, out / f"cost_power_savings{suffix}.png")

    pd.set_option("display.width", 200)
    print("Table 2 (K=256): designer vs published cost saving (%)")
    print(t2[["price_set", "n_gpus", "radix", "fat_tree_switches", "rail_only_switches", "cost_saving_pct",
              "published_cost_saving_pct", "cost_saving_diff_pct", "power_saving_pct"]].round(2).to_string(index=False))
    print(summary.to_string(index=False))
    for name in ext.price_set.unique():
        e = ext[(ext.price_set == name) & (ext.convention == "paper")]
        print(f"extended grid ({name}, paper counting): cost saving {e.cost_saving_pct.min():.1f}..{e.cost_saving_pct.max():.1f} %,"
              f" power saving {e.power_saving_pct.min():.1f}..{e.power_saving_pct.max():.1f} %")
    cheaper = mc[mc.milp_saving_vs_rail_only_pct > 1e-6]
    print(f"MILP vs rail-only: {len(cheaper)} of {len(mc)} solves found a cheaper design")
    print(mc[["price_set", "n_gpus", "hb_domain_size", "radix", "scope", "milp_label",
              "milp_saving_vs_rail_only_pct"]].round(2).to_string(index=False))
    wall = time.perf_counter() - t0
    print(f"wall time: {wall:.1f} s")
    return {"table2": t2, "summary": summary, "extended": ext, "milp": mc}


app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode="rich")


@app.command(help=escape(__doc__))
def cli(quick: Annotated[bool, typer.Option("--quick", help="a few-second subset (the test suite runs it)")] = False,
        out: Annotated[Path | None, typer.Option("--out", help=f"output folder (default {OUT_DIR})")] = None,
        ) -> None:
    main(quick=quick, out_dir=out)


if __name__ == "__main__":
    app()
