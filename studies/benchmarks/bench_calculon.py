"""designer against Calculon on Calculon's own problem: evaluation rate and best strategy.

Calculon (github.com/calculon-ai/calculon, Apache-2.0) is the reference analytic LLM-training model
with a strategy search (`calculon llm-optimal-execution`, "loe"). The problem is its megatron-1T
(128 blocks, hidden 25,600, 160 heads, sequence 2,048) on 4,096 A100 80GB with a global batch of
3,072 sequences and fp16: Calculon's systems/a100_80g.json against designer's dgx_a100 platform with
one 200G NIC per GPU (Calculon's second network tier is 25 GB/s per GPU) on a rail-optimized
QM8700 fabric.

Printed, each with the command that produced it:

1. Calculon's evaluation rate: loe's own per-process work (`OptimalExecution.search`, which builds
   each `Llm.Execution`, compiles and runs it and keeps the best) on a systematic sample of loe's
   work items (every `--stride`-th (tp, pp, interleaving, recompute, sharding, TP comm) item of its
   3,105 for this problem), in this process, with debug logging disabled. Executions are counted as
   loe counts them: every candidate it compiles and runs, including those Calculon rejects (memory,
   network tier), which are most of them.
2. designer's rate through the functions `designer run` calls per design: `run_exhaustive` (design
   space build included: its memo is cleared before each repeat) on StrategySpace() and on a wide
   space that mirrors Calculon's knobs. Repeats alternate with Calculon's, so the ratio is measured
   under the same load.
3. Each tool's best strategy, evaluated in both models (knob mapping below, caveats printed).

Calculon is not part of designer: it is imported from `--calculon-path` (a local checkout; no network).

    git clone https://github.com/calculon-ai/calculon /tmp/calculon
    .venv/bin/python studies/benchmarks/bench_calculon.py --calculon-path /tmp/calculon [--repeats 5]
"""

from __future__ import annotations

import logging
import math
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import typer

from designer.network.api import solve_network
from designer.network.design import design_to_system
from designer.perf.model import evaluate_many, evaluate_system
from designer.perf.records import Metrics
from designer.search import space as space_mod
from designer.search.exhaustive import Candidate, Problem, run_exhaustive
from designer.spec.llm import AttentionKernel, Recompute, Schedule, Strategy, TrainingSpec
from designer.spec.models import load_model
from designer.spec.network_study import NetworkStudy, study_catalog
from designer.spec.study import StrategySpace

app = typer.Typer(add_completion=False)

N_GPUS = 4096
BATCH = 3072
SEQ = 2048
TOTAL_TOKENS = 4.5e11  # the SC'21 1T run's 450B-token budget, as studies/gpt1t_fabrics uses
GET_CALCULON = ("Calculon not found: git clone https://github.com/calculon-ai/calculon /tmp/calculon, then pass "
                "--calculon-path /tmp/calculon (figures above are designer's alone)")

# The wide designer space: Calculon's loe knobs where designer has them. pp: the depths loe tries
# (divisors of the 128 blocks; designer alone would also try uneven ones); microbatch: the divisors of
# the batch (loe tries every divisor of the local batch); virtual stages: loe's interleavings
# (divisors of blocks per stage); ZeRO 0/1 = optimizer sharding, ZeRO 3 + offload_weights = weight
# offload (designer offloads weights only under FSDP); activation offload all-but-one layer per stage;
# TP over up to 4 NVLink domains (loe's tp 16 and 32 put TP on the scale-out tier).
WIDE = dict(max_tp_hb_domains=4, pp=(1, 2, 4, 8, 16, 32, 64, 128), max_pp=128,
            microbatch_sizes=tuple(k for k in range(1, BATCH + 1) if BATCH % k == 0),
            schedules=("1f1b", "interleaved"), virtual_stages=(2, 4, 8, 16, 32, 64),
            zero_stages=(0, 1, 3), offload_weights=(False, True), recompute=("none", "selective", "full"),
            sequence_parallel=(False, True), overlap_tp_comm=(False, True), overlap_dp_comm=(False, True),
            offload_optimizer=(False, True), offload_activation_layers=(0, 128))


# ---- designer ----------------------------------------------------------------------------------
def designer_problem(space: StrategySpace) -> tuple[Problem, Candidate]:
    """The design `designer run` would search for this problem: the MILP's rail-optimized fabric for
    4,096 GPUs on DGX A100 nodes, one ConnectX-6 200G per GPU, QM8700 switches."""
    ns = NetworkStudy.model_validate({
        "choices": {"platforms": ["dgx_a100"], "nics": [{"id": "cx6_200g"}], "switches": [{"id": "qm8700"}],
                    "families": ["rail-optimized"]},
        "gpus": {"count": N_GPUS}})
    catalog = study_catalog(ns)
    d = solve_network(ns, catalog=catalog).design
    cand = Candidate(f"dgx_a100-{N_GPUS}", d, design_to_system(d, catalog), d.capex_usd, d.power_w)
    # fp16 as Calculon's datatype; on A100 fp16 and bf16 have the same peak
    training = TrainingSpec(sequence_length=SEQ, global_batch_sequences=BATCH, total_tokens=TOTAL_TOKENS,
                            precision="fp16")
    return Problem(load_model("gpt-1t"), training, space), cand


def clear_space_memo() -> None:
    """DesignSpace.build memoizes: without this every repeat after the first would skip the build
    that `designer run` pays once per design."""
    memo = getattr(space_mod, "_build_cached", None)
    if memo is not None and hasattr(memo, "cache_clear"):
        memo.cache_clear()


def time_designer(problem: Problem, cand: Candidate) -> tuple[float, Any]:
    clear_space_memo()
    t0 = time.perf_counter()
    table = run_exhaustive(problem, cand)
    dt = time.perf_counter() - t0
    return table.n_evaluations / dt, table


def designer_time(problem: Problem, cand: Candidate, s: Strategy) -> tuple[float, str]:
    """Iteration time in designer's model and a note; a strategy the model rejects for memory still has
    a time (the vectorized kernel reports it), marked with the reason."""
    m = evaluate_system(problem.llm, problem.training, s, cand.system)
    if isinstance(m, Metrics):
        b = m.breakdown
        return m.iteration_time_s, (f"MFU {m.mfu:.1%}, compute {b.compute_s:.1f} s, bubble {b.bubble_s:.1f} s, "
                                    f"exposed comm {b.exposed_comm_s:.1f} s (DP on the links {b.dp_s:.1f} s)")
    vm = evaluate_many(problem.llm, problem.training, [s], cand.system)
    return float(vm.iteration_time_s[0]), f"infeasible: {m.reason}"


def describe(s: Strategy) -> str:
    sched = f"interleaved v{s.virtual_stages}" if s.schedule == Schedule.interleaved else s.schedule.value
    bits = [f"tp{s.tp} pp{s.pp} dp{s.dp} mbs{s.microbatch_size} {sched}", f"recompute {s.recompute.value}",
            f"ZeRO-{s.zero_stage}"]
    if s.sequence_parallel:
        bits.append("SP")
    if s.overlap_tp_comm:
        bits.append("TP-overlap")
    if s.overlap_dp_comm:
        bits.append("DP-overlap")
    if s.offload_optimizer:
        bits.append("opt-offload")
    if s.offload_weights:
        bits.append("weight-offload")
    if s.offload_activation_layers:
        bits.append(f"act-offload {s.offload_activation_layers}")
    return ", ".join(bits)


# ---- knob mapping --------------------------------------------------------------------------------
RECOMPUTE_TO_DESIGNER = {"full": Recompute.full, "attn_only": Recompute.selective, "none": Recompute.none}
RECOMPUTE_TO_CALCULON = {v: k for k, v in RECOMPUTE_TO_DESIGNER.items()}


def calculon_to_strategy(exe: dict, n_blocks: int) -> tuple[Strategy, list[str]]:
    """Calculon execution -> the nearest designer Strategy, with the knobs that had no exact match."""
    notes = []
    ppint = exe["pipeline_interleaving"]
    if exe["tensor_par_comm_type"] == "p2p_rs_ag":
        notes.append("tensor_par_comm_type p2p_rs_ag (all-reduce TP, scattered PP p2p) -> sequence_parallel off")
    if exe["seq_par_ag_redo"]:
        notes.append("seq_par_ag_redo (redo the SP all-gather in backward) has no designer knob: ignored")
    if exe["tensor_par_overlap"] != "none":
        notes.append(f"tensor_par_overlap {exe['tensor_par_overlap']} -> overlap_tp_comm (designer has one TP overlap)")
    weight_offload = bool(exe["weight_offload"])
    if weight_offload:
        notes.append("weight_offload -> offload_weights with ZeRO-3 (designer streams weights only under FSDP)")
    if exe["optimizer_offload"]:
        notes.append("optimizer_offload (states streamed per block, step on the GPU) -> offload_optimizer "
                     "(ZeRO-Offload: step on the CPU)")
    stage = -(-n_blocks // exe["pipeline_par"])
    if exe["activations_offload"]:
        notes.append(f"activations_offload -> offload_activation_layers {stage} (all of the stage's; designer keeps the last)")
    if exe["tensor_par"] > 8:
        notes.append(f"tp {exe['tensor_par']} spans NVLink domains: designer's hierarchical TP over rails "
                     "(max_tp_hb_domains)")
    s = Strategy(
        tp=exe["tensor_par"], pp=exe["pipeline_par"], dp=exe["data_par"], microbatch_size=exe["microbatch_size"],
        global_batch_sequences=exe["batch_size"] if exe["batch_size"] != BATCH else None,
        schedule=Schedule.interleaved if ppint > 1 else Schedule.one_f_one_b, virtual_stages=ppint,
        recompute=RECOMPUTE_TO_DESIGNER[exe["activation_recompute"]],
        sequence_parallel=exe["tensor_par_comm_type"] == "rs_ag",
        zero_stage=3 if weight_offload else int(bool(exe["optimizer_sharding"])),
        overlap_tp_comm=exe["tensor_par_overlap"] != "none", overlap_dp_comm=bool(exe["data_par_overlap"]),
        offload_optimizer=bool(exe["optimizer_offload"]) or weight_offload, offload_weights=weight_offload,
        offload_activation_layers=stage if exe["activations_offload"] else 0)
    return s, notes


def strategy_to_calculon(s: Strategy) -> tuple[dict, list[str]]:
    """designer Strategy -> the nearest Calculon execution, with the knobs that had no exact match."""
    notes = []
    if s.schedule not in (Schedule.one_f_one_b, Schedule.interleaved):
        notes.append(f"schedule {s.schedule.value} has no Calculon form: modelled as 1F1B")
    if s.zero_stage > 1 and not s.offload_weights:
        notes.append(f"ZeRO-{s.zero_stage} -> optimizer_sharding (Calculon shards only optimizer state)")
    if s.overlap_tp_comm:
        notes.append("overlap_tp_comm -> tensor_par_overlap 'ring'")
    if s.offload_optimizer and not s.offload_weights:
        notes.append("offload_optimizer (ZeRO-Offload, step on the CPU) -> optimizer_offload (Calculon streams the "
                     "states per block and steps on the GPU)")
    if s.offload_activation_layers:
        notes.append(f"offload_activation_layers {s.offload_activation_layers} -> activations_offload (Calculon "
                     "offloads every block's activations)")
    if s.tp < 8:
        notes.append("tp < 8: Calculon puts a whole dimension on one network tier; dp/pp put on the scale-out tier")
    exe = {
        "num_procs": s.n_gpus, "tensor_par": s.tp, "pipeline_par": s.pp, "data_par": s.dp,
        # TP on NVLink (tier 0), PP and DP across nodes (tier 1), as designer's tp-cp-dp-pp order with
        # tp 8; a TP group wider than the 8-GPU node goes on tier 1 with them
        "tensor_par_net": 0 if s.tp <= 8 else 1, "pipeline_par_net": 1, "data_par_net": 1,
        "batch_size": s.global_batch_sequences or BATCH, "microbatch_size": s.microbatch_size,
        "datatype": "float16", "fused_activation": True, "attention_type": "multihead",
        "activation_recompute": RECOMPUTE_TO_CALCULON[s.recompute],
        "pipeline_interleaving": s.virtual_stages if s.schedule == Schedule.interleaved else 1,
        "optimizer_sharding": s.zero_stage >= 1 and s.dp > 1,
        "tensor_par_comm_type": "rs_ag" if s.sequence_parallel else "ar",
        "tensor_par_overlap": "ring" if s.overlap_tp_comm and s.tp > 1 else "none",
        "seq_par_ag_redo": False, "data_par_overlap": s.overlap_dp_comm and s.dp > 1,
        "weight_offload": s.offload_weights, "activations_offload": s.offload_activation_layers > 0,
        "optimizer_offload": s.offload_optimizer or s.offload_weights, "training": True}
    return exe, notes


# ---- Calculon ------------------------------------------------------------------------------------
class CalculonRef:
    """Calculon imported from a local checkout, with this problem's application and system."""

    def __init__(self, path: Path):
        sys.path.insert(0, str(path))
        import calculon
        from calculon.llm import Llm
        from calculon.llm.optimal_execution import OptimalExecution

        self.calculon, self.Llm, self.OE = calculon, Llm, OptimalExecution
        self.path = path
        self.app = Llm.Application(calculon.io.read_json_file(str(path / "models" / "megatron-1T.json")))
        self.system_file = path / "systems" / "a100_80g.json"
        self.syst = calculon.System(calculon.io.read_json_file(str(self.system_file)))

    def commit(self) -> str:
        try:
            out = subprocess.run(["git", "-C", str(self.path), "rev-parse", "HEAD"], capture_output=True, text=True,
                                 check=True)
            return out.stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return "unknown (not a git checkout)"

    def work_items(self, mbs_break: bool) -> list[tuple]:
        """loe's parallel work items for this problem, built as its run_command builds them (its
        public enumeration helpers), in its order: one per (tp, pp, interleaving, recompute,
        optimizer sharding, TP comm type)."""
        Llm, app, pick = self.Llm, self.app, self.calculon.util.pick
        items = []
        for tp in Llm.get_all_tensor_parallelisms(N_GPUS, app.hidden, app.attn_heads):
            for pp in Llm.get_all_pipeline_parallelisms(N_GPUS, tp, app.num_blocks):
                dp = Llm.get_data_parallelism(N_GPUS, tp, pp)
                for ppint in Llm.get_valid_pipeline_interleavings(app.num_blocks, pp):
                    batch = self.OE.get_batch_size(dp, BATCH)
                    if batch is None:
                        continue
                    for rc in ("full", "attn_only", "none"):
                        for sharding in pick(dp > 1, [True, False], [False]):
                            for tpc in ("ar", "p2p_rs_ag", "rs_ag"):
                                # loe's defaults: top-1, no layer stats, fused activation only, overlaps allowed
                                items.append((False, 1, False, N_GPUS, BATCH, "float16", app, self.syst, tp, pp, dp,
                                              ppint, batch, rc, sharding, tpc, [True], mbs_break, True, True))
        return items

    def search(self, items: list[tuple], workers: int = 1) -> tuple[int, int, list, float]:
        """loe's search over `items`: (executions, good executions, best, seconds)."""
        t0 = time.perf_counter()
        if workers > 1:
            import multiprocessing as mp

            with mp.Pool(workers) as pool:  # as loe does; forked workers inherit logging.disable
                results = pool.starmap(self.OE.search, items)
        else:
            results = [self.OE.search(*it) for it in items]
        dt = time.perf_counter() - t0
        best: list = []
        n = good = 0
        for cbest, ec, gec, _bec, _tp, _pp in results:
            best = self.OE.update_list(best, cbest, 1)
            n += ec
            good += gec
        return n, good, best, dt

    def iteration_time(self, exe: dict) -> tuple[float, str]:
        """Calculon's batch time of one execution; one it rejects for memory still has its time (the
        check comes after the model has run), marked with the error."""
        model = self.Llm(self.app, logging.Logger("bench"))
        try:
            model.compile(self.syst, self.Llm.Execution.from_json(exe))
        except self.Llm.Error as err:
            return math.nan, f"rejected at compile: {err}"
        try:
            model.run(self.syst)
        except self.Llm.Error as err:
            return model.get_total_time(), f"infeasible: {err}"
        m = model
        compute = m.get_fw_time() + m.get_bw_time() + m.get_optim_step_time() + m.get_recompute_time()
        exposed = (m.get_tp_comm_exposed_time() + m.get_pp_comm_exposed_time() + m.get_dp_comm_exposed_time()
                   + m.get_recomm_exposed_time())
        return m.get_total_time(), (f"{m.get_sample_rate():.2f} samples/s, compute {compute:.1f} s, bubble "
                                    f"{m.get_bubble_time():.1f} s, exposed comm {exposed:.1f} s (DP on the links "
                                    f"{m.get_dp_comm_link_time():.1f} s), offload overhead "
                                    f"{m.get_fw_offload_overhead() + m.get_bw_offload_overhead():.1f} s")


# ---- report --------------------------------------------------------------------------------------
def med(xs: list[float]) -> float:
    return statistics.median(xs)


@app.command()
def main(
    calculon_path: Path = typer.Option(Path("/tmp/calculon"), help="a local Calculon checkout (github.com/calculon-ai/calculon); without it only designer's figures are printed"),
    repeats: int = typer.Option(5, min=1, help="timed repeats of each rate (medians are printed)"),
    stride: int = typer.Option(300, min=1, help="time every STRIDE-th of loe's work items for Calculon's rate (300: 11 items, about 28k executions)"),
    search: str = typer.Option("mbs-break", help="Calculon's best: 'mbs-break' (loe -m over its whole space: 2.9M executions, about 40 min on one process here), 'full' (loe without -m, 10.3M executions, hours) or 'sample' (the timed items only)"),
    workers: int = typer.Option(1, min=1, help="processes for Calculon's best-strategy search (loe's -c); rates always use one"),
    as_shipped: bool = typer.Option(False, help="also time Calculon once with its logging as loe leaves it, and with only the root logger at WARNING"),
) -> None:
    cmd = ".venv/bin/python studies/benchmarks/bench_calculon.py " + shlex.join(sys.argv[1:])
    print(f"command: {cmd}")
    if search not in ("mbs-break", "full", "sample"):
        raise typer.BadParameter(f"--search {search!r}: give mbs-break, full or sample")
    default_pb, cand = designer_problem(StrategySpace())
    wide_pb, _ = designer_problem(StrategySpace(**WIDE))

    ref = None
    if (calculon_path / "calculon" / "llm" / "llm.py").is_file():
        ref = CalculonRef(calculon_path)
        # loe gives every execution a fresh parentless Logger('sub') whose level is NOTSET, so
        # setting the root logger's level does not silence its ~100 debug calls per execution; the
        # process-wide switch does
        logging.disable(logging.DEBUG)
        items = ref.work_items(mbs_break=False)
        sample = items[::stride]
        print(f"Calculon {ref.commit()} at {calculon_path}: megatron-1T.json, {ref.system_file.name}, "
              f"{N_GPUS} procs, max batch {BATCH}, float16")
        print(f"Calculon loe space: {len(items):,} work items; timed sample: every {stride}th, {len(sample)} items")

    c_rates, c_good, d_rates, w_rates = [], [], [], []
    d_table = w_table = None
    n_sample = 0
    for _ in range(repeats):  # alternated, so a load change hits both tools alike
        if ref is not None:
            n, good, _best, dt = ref.search(sample)
            c_rates.append(n / dt)
            c_good.append(good / dt)
            n_sample = n
        r, d_table = time_designer(default_pb, cand)
        d_rates.append(r)
        r, w_table = time_designer(wide_pb, cand)
        w_rates.append(r)

    print(f"\n== evaluation rate, median of {repeats} ==  [{cmd}]")
    print(f"designer run_exhaustive, StrategySpace():  {d_table.n_evaluations:>9,} strategies, "
          f"{med(d_rates):>11,.0f} strategies/s (range {min(d_rates):,.0f}-{max(d_rates):,.0f})")
    print(f"designer run_exhaustive, wide space:       {w_table.n_evaluations:>9,} strategies, "
          f"{med(w_rates):>11,.0f} strategies/s (range {min(w_rates):,.0f}-{max(w_rates):,.0f})")
    if ref is not None:
        print(f"Calculon loe search, logging disabled:     {n_sample:>9,} executions, {med(c_rates):>11,.0f} executions/s "
              f"(range {min(c_rates):,.0f}-{max(c_rates):,.0f}; {med(c_good):,.0f}/s of them accepted)")
        print(f"ratio designer/Calculon: StrategySpace() {med(d_rates) / med(c_rates):,.1f}x, "
              f"wide space {med(w_rates) / med(c_rates):,.1f}x (target >= 200x)")
        if as_shipped:
            logging.disable(logging.NOTSET)
            root = logging.getLogger()
            level = root.level
            root.setLevel(logging.INFO)  # as the calculon command sets it (-v INFO)
            n, _g, _b, dt = ref.search(sample)
            print(f"Calculon as loe runs (root at INFO):          {n / dt:,.0f} executions/s (one repeat)")
            root.setLevel(logging.WARNING)
            n, _g, _b, dt = ref.search(sample)
            print(f"Calculon with only the root logger at WARNING: {n / dt:,.0f} executions/s (one repeat)")
            root.setLevel(level)
            logging.disable(logging.DEBUG)

    # ---- best strategies, each in both models ----
    rows: list[tuple[str, str, float, str, float, str]] = []
    notes: list[str] = []
    best_exe = None
    if ref is not None:
        if search == "sample":
            todo, what = sample, f"loe over the timed sample ({len(sample)} items)"
        else:
            todo = ref.work_items(mbs_break=search == "mbs-break")
            what = f"loe{' -m' if search == 'mbs-break' else ''} over its whole space ({len(todo):,} items)"
        n, good, best, dt = ref.search(todo, workers)
        print(f"\nCalculon best: {what}: {n:,} executions ({good:,} accepted) in {dt:.0f} s "
              f"({n / dt:,.0f}/s on {workers} process{'es' if workers > 1 else ''})")
        if best:
            best_exe = best[0][1]
            print(f"  execution: {best_exe}")
    for label, table, pb in (("designer best, StrategySpace()", d_table, default_pb),
                             ("designer best, wide space", w_table, wide_pb)):
        b = table.best
        if b is None:
            print(f"{label}: no feasible strategy ({table.why_none_feasible()})")
            continue
        s = table.strategies.strategy(b)
        dt_, dn = designer_time(pb, cand, s)
        # the same strategy read with Calculon's materialized attention: separates a memory or time
        # difference due to the kernel from one in the rest of the models
        ut, un = designer_time(pb, cand, s.model_copy(update={"attention_kernel": AttentionKernel.unfused}))
        dn += f"; with unfused attention {ut:.2f} s, {un}"
        ct, cn = (math.nan, "no Calculon")
        if ref is not None:
            exe, nn = strategy_to_calculon(s)
            notes += [f"{label} -> Calculon: {x}" for x in nn]
            ct, cn = ref.iteration_time(exe)
        rows.append((label, describe(s), ct, cn, dt_, dn))
    if best_exe is not None:
        s, nn = calculon_to_strategy(best_exe, ref.app.num_blocks)
        notes += [f"Calculon best -> designer: {x}" for x in nn]
        ct, cn = ref.iteration_time(best_exe)
        dt_, dn = designer_time(wide_pb, cand, s)
        rows.insert(0, ("Calculon best", describe(s), ct, cn, dt_, dn))
        # Calculon materializes the attention scores (2023 Megatron, no FlashAttention); designer's
        # searches assume the generation's flash kernel, so show the nearer designer reading too
        su = s.model_copy(update={"attention_kernel": AttentionKernel.unfused})
        dt_, dn = designer_time(wide_pb, cand, su)
        rows.insert(1, ("Calculon best, unfused attention", describe(su), ct, cn, dt_, dn))

    print(f"\n== best strategies, seconds per iteration of {BATCH} x {SEQ} tokens ==  [{cmd}]")
    w = max(len(r[1]) for r in rows) if rows else 10
    print(f"{'strategy':34s} {'as designer Strategy':{w}s} {'Calculon s':>11s} {'designer s':>11s}")
    for label, desc, ct, cn, dt_, dn in rows:
        print(f"{label:34s} {desc:{w}s} {ct:11.2f} {dt_:11.2f}")
        print(f"{'':34s}   Calculon: {cn}; designer: {dn}")
    if ref is None:
        print(GET_CALCULON)
        return
    print("mapping caveats:")
    for x in dict.fromkeys(notes):
        print(f"  - {x}")
    print("  - always: fused_activation, attention_type multihead and the network tier of each dimension are "
          "Calculon knobs designer sets itself (fused element-wise kernels, flash attention unless said, "
          "tp-cp-dp-pp rank order); both models' A100 HBM is 80 GiB (85.9 GB), designer's less a framework reserve")


if __name__ == "__main__":
    app()
