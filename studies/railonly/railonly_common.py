"""Shared pieces of the Rail-only studies (studies/railonly/*.py): the paper's hardware, the three
network families as `ClusterSystem`s, a best-strategy search over a full strategy grid with the
vectorized model (`evaluate_many`), the V1 reduced model, and small output helpers.

Hardware of the paper's analytic study (railonly.md §1, §3; the constants tests/perf/test_v1_model.py
uses for the V1 Fig. 7 trends):
  C   = 1979 TFLOP/s per GPU: H100 SXM dense fp8 (catalog `h100_sxm`), so the full model trains in fp8
        (Transformer Engine GEMMs) and its peak equals the V1 model's C;
  B_F = 900 GB/s HB bandwidth per GPU: the paper's NVLink4 figure (the H100's 900 GB/s; the catalog
        stores 450 GB/s per direction). Both models get the same B_F so they are comparable;
  B_S = 400 Gb/s = 50 GB/s NIC per GPU (ConnectX-7 NDR, one NIC per GPU).
HBM is the H100's 80 GiB in every design (the paper's model has no memory limit; the full model has).

Strategy search. designer/search/space.py is the engine's enumerator; these studies use their own
grid (same validity rules as space.py and the model's feasibility codes, listed in `strategy_grid`)
so that they do not depend on the search stage's options. Every valid combination of TP (a divisor of K
and of the heads / hidden / FFN), PP, DP = N/(TP·PP), EP, microbatch, recomputation, ZeRO stage,
sequence parallelism and pipeline schedule is scored; the fastest feasible one (memory included) wins.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import numpy as np
import pandas as pd
import typer
from rich.markup import escape

from designer.perf.iteration import v1_best_time_s, v1_ideal_time_s, v1_inputs
from designer.perf.model import Infeasible, Metrics, StrategyArrays, VectorMetrics, evaluate_many, evaluate_system
from designer.spec.catalog import load_catalog
from designer.spec.llm import LLMSpec, Precision, Strategy, TrainingSpec
from designer.spec.system import ClusterSystem, HBDomain, NetworkTier

REPO = Path(__file__).resolve().parents[2]
OUT_DIR = REPO / "results" / "railonly"

# ---- the paper's hardware (railonly.md §1, §3; tests/perf/test_v1_model.py) ----
PAPER_GPU = "h100_sxm"
PAPER_COMPUTE_FLOPS = 1979e12  # H100 dense fp8 (catalog h100_sxm fp8_tflops)
PAPER_HB_BYTES_PER_S = 900e9  # B_F, the paper's NVLink4 figure per GPU
PAPER_NIC_BYTES_PER_S = 400e9 / 8  # B_S, 400 Gb/s CX-7 per GPU
SEQUENCE_LENGTH = 2048  # GPT-3, OPT, PaLM and Megatron GPT all train at 2,048 tokens
LEAF_SPAN_DOMAINS = 32  # rail-optimized fat-tree: a radix-64 rail leaf has 32 down ports (railonly.md §2, R = 64)
NOMINAL_TOTAL_TOKENS = 1e12  # only scales time-to-train, which these studies do not report

# Global batches in 2,048-token sequences (railonly.md §3 and the model papers):
#   gpt3-175b 32M tokens  -> 16,384 sequences (2^25 tokens; V1 Fig. 7)
#   opt-175b   2M tokens  ->  1,024 sequences (2^21 tokens; V1 Fig. 7, Zhang et al. 2022 Table 1)
#   palm-540b  2,048 sequences (4M tokens; the top of railonly.md §3's 512 -> 2,048 batch range and
#              PaLM's final batch, Chowdhery et al. 2022 §5)
#   gpt-1t     3,072 sequences (6.3M tokens; Narayanan et al. SC'21 Table 1, training-runs.md)
PAPER_BATCH_SEQUENCES = {"gpt3-175b": 16384, "opt-175b": 1024, "palm-540b": 2048, "gpt-1t": 3072}


def paper_gpu():
    return load_catalog().gpu(PAPER_GPU).perf()


def make_system(n_gpus: int, hb_size: int, family: str = "rail-only", *,
                hb_bytes_per_s: float = PAPER_HB_BYTES_PER_S, nic_bytes_per_s: float = PAPER_NIC_BYTES_PER_S,
                spine_oversubscription: float = 1.0, gpu=None, leaf_span_domains: int = LEAF_SPAN_DOMAINS) -> ClusterSystem:
    """One of the studied networks over `n_gpus` GPUs in HB domains of `hb_size`.

    rail-only: each rail is its own non-blocking Clos over all N/K domains, no spine (railonly.md §1).
    rail-optimized: rail leaves spanning `leaf_span_domains` domains + a cross-rail spine at
        `spine_oversubscription`:1 (1 = the full-bisection rail-optimized fat-tree).
    hybrid: rail-only's rails (each a non-blocking Clos over all domains) + a thin cross-rail spine at
        `spine_oversubscription`:1 on top (railonly.md §7: spine oversubscription from rail-only, no
        spine, up to 1:1); same-rail traffic never climbs to it.
    ideal: all N GPUs in one HB domain (K = N), the paper's any-to-any T_ideal network (railonly.md §3).
    """
    gpu = gpu or paper_gpu()
    if family == "ideal":
        hb_size = n_gpus
        tiers: tuple[NetworkTier, ...] = ()
    else:
        n_dom = n_gpus // hb_size
        if family == "rail-only":
            tiers = (NetworkTier(name="rail", span_domains=n_dom, cross_rail=False,
                                 bandwidth_per_gpu_bytes_per_s=nic_bytes_per_s),)
        elif family == "hybrid":
            tiers = (NetworkTier(name="rail", span_domains=n_dom, cross_rail=False,
                                 bandwidth_per_gpu_bytes_per_s=nic_bytes_per_s),
                     NetworkTier(name="thin-spine", span_domains=n_dom, cross_rail=True,
                                 bandwidth_per_gpu_bytes_per_s=nic_bytes_per_s, oversubscription=spine_oversubscription))
        elif family == "rail-optimized":
            leaf = min(leaf_span_domains, n_dom)
            tiers = (NetworkTier(name="rail-leaf", span_domains=leaf, cross_rail=False,
                                 bandwidth_per_gpu_bytes_per_s=nic_bytes_per_s),)
            # the spine joins the leaf groups and, inside one group, the different rails
            tiers += (NetworkTier(name="spine", span_domains=n_dom, cross_rail=True,
                                  bandwidth_per_gpu_bytes_per_s=nic_bytes_per_s,
                                  oversubscription=spine_oversubscription),)
        else:
            raise ValueError(f"family must be rail-only, rail-optimized, hybrid or ideal, not {family!r}")
    return ClusterSystem(gpu=gpu, n_gpus=n_gpus,
                         hb=HBDomain(size=hb_size, bandwidth_per_gpu_bytes_per_s=hb_bytes_per_s),
                         nic_bandwidth_per_gpu_bytes_per_s=nic_bytes_per_s, tiers=tiers,
                         family="rail-only" if family == "rail-only" else "rail-optimized")


def training(batch_sequences: int, precision: str = "fp8") -> TrainingSpec:
    return TrainingSpec(sequence_length=SEQUENCE_LENGTH, global_batch_sequences=batch_sequences,
                        precision=Precision(precision), total_tokens=NOMINAL_TOTAL_TOKENS)


# ---- strategy grid ----


@dataclass(frozen=True)
class GridOptions:
    """The free dimensions of the search grid (DP is derived, TP/PP/EP from the design and model)."""

    microbatch_sizes: tuple[int, ...] = (1, 2, 4)
    recompute: tuple[int, ...] = (0, 1, 2)  # none, selective, full
    zero_stages: tuple[int, ...] = (0, 1, 2, 3)
    sequence_parallel: tuple[bool, ...] = (False, True)
    schedules: tuple[tuple[int, int], ...] = ((1, 1), (2, 2), (2, 4))  # (schedule code, virtual stages)
    max_pp: int = 128
    pp_values: tuple[int, ...] | None = None  # None: every power of two up to max_pp and the layer count
    tp_values: tuple[int, ...] | None = None  # None: every valid divisor of K
    ep_values: tuple[int, ...] | None = None  # None: every power of two dividing the experts (MoE only)


QUICK_GRID = GridOptions(microbatch_sizes=(1, 2), recompute=(1, 2), zero_stages=(1, 3), schedules=((1, 1), (2, 2)))


def _pow2_upto(n: int) -> list[int]:
    return [2**i for i in range(int(np.log2(max(n, 1))) + 1)]


def strategy_grid(llm: LLMSpec, tr: TrainingSpec, n_gpus: int, hb_size: int,
                  opts: GridOptions = GridOptions()) -> StrategyArrays:
    """Every valid strategy on N GPUs in HB domains of K (rules of designer/search/space.py):
    tp | K and tp | heads, hidden, FFN (and the expert FFN), tp and kv heads divide one another;
    pp a power of two up to min(layers, max_pp) -- uneven stages allowed, the model prices the slowest
    stage's ceil(l/pp) layers; dp = N/(tp·pp); ep | experts and ep | dp; the batch a multiple of
    dp·microbatch; SP only with tp > 1; ZeRO-2/3 only without PP; interleaving needs pp ≥ 2,
    pp·v ≤ layers and a microbatch count divisible by pp (Megatron)."""
    kv = llm.kv_heads_effective
    ffns = [llm.ffn_size] + ([llm.moe.expert_ffn_size] if llm.moe else [])
    tps = opts.tp_values or [t for t in range(1, hb_size + 1) if hb_size % t == 0]
    tps = [t for t in tps if hb_size % t == 0 and llm.heads % t == 0 and llm.hidden_size % t == 0
           and all(f % t == 0 for f in ffns) and (kv % t == 0 or t % kv == 0)]
    pps = opts.pp_values or [p for p in _pow2_upto(min(llm.layers, opts.max_pp))]
    if llm.moe is None:
        eps = [1]
    else:
        eps = opts.ep_values or [e for e in _pow2_upto(llm.moe.experts) if llm.moe.experts % e == 0]
    B = tr.global_batch_sequences
    rows = []
    for tp in tps:
        for pp in pps:
            if n_gpus % (tp * pp) or pp > llm.layers:
                continue
            dp = n_gpus // (tp * pp)
            for ep in eps:
                if dp % ep or (llm.moe is not None and llm.moe.experts % ep):
                    continue
                for mbs in opts.microbatch_sizes:
                    if B % (dp * mbs):
                        continue
                    m = B // (dp * mbs)
                    for sched, v in opts.schedules:
                        if sched == 2 and (pp < 2 or pp * v > llm.layers or m % pp):
                            continue
                        if sched != 2 and v != 1:
                            continue
                        for zero in opts.zero_stages:
                            if zero >= 2 and pp > 1:
                                continue
                            for rc in opts.recompute:
                                for sp in opts.sequence_parallel:
                                    if sp and tp == 1:
                                        continue
                                    rows.append((tp, pp, dp, ep, mbs, sched, v, zero, rc, sp))
    if not rows:
        raise ValueError(f"no valid strategy for {llm.name} on N={n_gpus}, K={hb_size}, batch {B}")
    a = np.array(rows, dtype=np.int64)
    return StrategyArrays(tp=a[:, 0], pp=a[:, 1], dp=a[:, 2], ep=a[:, 3], cp=1, sp=a[:, 9].astype(bool),
                          mbs=a[:, 4], schedule=a[:, 5], v=a[:, 6], zero=a[:, 7], qwz=False, qgz=False, hpz=False,
                          recompute=a[:, 8], overlap_dp=True, overlap_tp=False)


@dataclass(frozen=True)
class Best:
    strategy: Strategy
    metrics: Metrics
    n_evaluated: int
    n_feasible: int


def score(llm: LLMSpec, tr: TrainingSpec, system: ClusterSystem, opts: GridOptions = GridOptions(),
          grid: StrategyArrays | None = None) -> tuple[StrategyArrays, VectorMetrics]:
    """Every strategy of the grid scored on `system` in one vectorized pass."""
    S = grid if grid is not None else strategy_grid(llm, tr, system.n_gpus, system.hb.size, opts)
    return S, evaluate_many(llm, tr, S, system)


def pick(llm: LLMSpec, tr: TrainingSpec, system: ClusterSystem, S: StrategyArrays, vm, mask=None) -> Best | None:
    """The fastest feasible strategy (memory included) among the scored ones, optionally restricted to
    `mask`; None when none is feasible. Its full Metrics come from evaluate_system."""
    ok = vm.feasible if mask is None else vm.feasible & np.asarray(mask, bool)
    t = np.where(ok, vm.iteration_time_s, np.inf)
    i = int(np.argmin(t))
    if not np.isfinite(t[i]):
        return None
    st = S.to_strategy(i)
    m = evaluate_system(llm, tr, st, system)
    assert not isinstance(m, Infeasible), m
    return Best(strategy=st, metrics=m, n_evaluated=len(S), n_feasible=int(ok.sum()))


def best_strategy(llm: LLMSpec, tr: TrainingSpec, system: ClusterSystem, opts: GridOptions = GridOptions(),
                  grid: StrategyArrays | None = None) -> Best | None:
    """The fastest feasible strategy of the grid on `system` (None when none fits)."""
    S, vm = score(llm, tr, system, opts, grid)
    return pick(llm, tr, system, S, vm)


IDEAL_HB_SIZES = (256, 1024)


def ideal_best(llm: LLMSpec, tr: TrainingSpec, n_gpus: int, hb_sizes=IDEAL_HB_SIZES) -> tuple[dict, str]:
    """The full model on the ideal any-to-any network at B_F (railonly.md §3: every GPU pair gets the HB
    bandwidth B_F), best strategy. The model has two representations of that network and each has a
    blind spot, so the ideal is the faster of them:
    * one HB domain of all N GPUs (K = N, the paper's literal T_ideal) -- the collectives model then
      runs flat NVLink rings over thousands of GPUs (no hierarchical algorithm inside one domain), whose
      per-hop latency makes ZeRO gathers slower than on smaller domains;
    * HB domains of K' (256, 1,024) joined by a full-bisection rail-optimized fat-tree whose NIC
      bandwidth per GPU equals B_F: every pair again gets B_F, and hierarchical algorithms apply.
    Returns (best_row of the winner, a label of which network won)."""
    cands = [(f"one HB domain (K = N)", make_system(n_gpus, n_gpus, "ideal"))]
    cands += [(f"fat-tree at B_F, K' = {k}", make_system(n_gpus, k, "rail-optimized", nic_bytes_per_s=PAPER_HB_BYTES_PER_S))
              for k in hb_sizes if k < n_gpus and n_gpus % k == 0]
    best, label = None, ""
    for lab, sy in cands:
        r = best_row(best_strategy(llm, tr, sy))
        if r.get("feasible") and (best is None or r["iteration_time_s"] < best["iteration_time_s"]):
            best, label = r, lab
    return (best or {"feasible": False}), label


def strategy_label(s: Strategy) -> str:
    sched = s.schedule.value + (f"x{s.virtual_stages}" if s.virtual_stages > 1 else "")
    return (f"tp{s.tp} pp{s.pp} dp{s.dp}" + (f" ep{s.ep}" if s.ep > 1 else "")
            + f" mbs{s.microbatch_size} z{s.zero_stage} rc:{s.recompute.value}" + (" sp" if s.sequence_parallel else "")
            + (f" {sched}" if s.pp > 1 else ""))


def best_row(b: Best | None) -> dict:
    """Flat columns (units in names) for one best strategy."""
    if b is None:
        return {"feasible": False}
    m, s = b.metrics, b.strategy
    bd = m.breakdown
    return {
        "feasible": True, "iteration_time_s": m.iteration_time_s, "mfu": m.mfu,
        "tp": s.tp, "pp": s.pp, "dp": s.dp, "ep": s.ep, "microbatch": s.microbatch_size, "zero": s.zero_stage,
        "recompute": s.recompute.value, "sequence_parallel": s.sequence_parallel,
        "schedule": s.schedule.value, "virtual_stages": s.virtual_stages, "strategy": strategy_label(s),
        "compute_s": bd.compute_s, "tp_s": bd.tp_s, "pp_s": bd.pp_s, "dp_s": bd.dp_s, "ep_s": bd.ep_s,
        "bubble_s": bd.bubble_s, "exposed_comm_s": bd.exposed_comm_s, "host_s": bd.host_s,
        "memory_per_gpu_gb": m.memory_per_gpu_bytes / 1e9,
        "n_strategies_scored": b.n_evaluated, "n_feasible": b.n_feasible,
    }


# ---- V1 reduced model (railonly.md §3) ----


def v1_times(llm: LLMSpec, n_gpus: int, hb_size: int, batch_tokens: float, *,
             hb_bytes_per_s: float = PAPER_HB_BYTES_PER_S, nic_bytes_per_s: float = PAPER_NIC_BYTES_PER_S,
             compute_flops: float = PAPER_COMPUTE_FLOPS) -> dict:
    """Eq. (1) minimised over N_M | K (rail-only time and N_M), and Eq. (3) T_ideal with the exact
    minimiser of N_M (the printed Eq. (2) is off by 2·sqrt(2); railonly.md §3)."""
    x = v1_inputs(llm, n_gpus=n_gpus, hb_size=hb_size, batch_tokens=batch_tokens, compute_flops=compute_flops,
                  hb_bandwidth=hb_bytes_per_s, nic_bandwidth=nic_bytes_per_s)
    t, nm = v1_best_time_s(x)
    return {"v1_iteration_time_s": t, "v1_tp": nm, "v1_ideal_time_s": v1_ideal_time_s(x, as_printed=False),
            "v1_compute_s": x.flops_per_iteration / (x.n_gpus * x.compute)}


# ---- output ----


def cli(doc: str) -> bool:
    """The command line of a study script (`main(quick=cli(__doc__))`): its --quick flag. `doc`, the
    script's module docstring, is its --help text; --help and usage errors exit as typer does."""
    chosen: dict[str, bool] = {}
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode="rich")

    @app.command(help=escape(doc))
    def options(quick: Annotated[bool, typer.Option(
            "--quick", help="the light variant the tests compare with")] = False) -> None:
        chosen["quick"] = quick

    try:
        app()  # exits: 0 after --help or a parse, 2 on a usage error
    except SystemExit as done:
        if done.code not in (0, None) or "quick" not in chosen:
            raise
    return chosen["quick"]


def write_csv(df: pd.DataFrame, out_dir: Path, name: str) -> Path:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / name
    df.to_csv(path, index=False, float_format="%.6g")
    return path


def suffix(quick: bool) -> str:
    return "_quick" if quick else ""


class Timer:
    def __init__(self, name: str):
        self.name = name

    def __enter__(self):
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.wall_s = time.perf_counter() - self.t0
        print(f"{self.name}: wall time {self.wall_s:.1f} s")
        return False


def save_figure(fig, path: Path) -> None:
    """Lay out, write at the resolution every study plot uses, and free the figure."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
