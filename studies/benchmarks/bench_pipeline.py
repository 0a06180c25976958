"""End-to-end evaluation rate of one design's exhaustive search, through the calls `designer run` makes.

    .venv/bin/python studies/benchmarks/bench_pipeline.py [--repeats 5]

Megatron's GPT-1T (models/gpt-1t.yaml; Narayanan et al. SC'21) on 4,096 A100 (platform dgx_a100,
rail-optimized, ConnectX-6 200G, QM8700), batch 3,072 sequences of 2,048 tokens, with a broad strategy
space (SPACE: every schedule, microbatch 1-64, ZeRO 0-3 with ZeRO++ and both offloads, TP overlap).
Per design, `designer run` (designer/pipeline.py `_search_all`) asks for the space's size to choose
the search method, again for the progress total, then `run_exhaustive` builds the space, enumerates and
scores it chunk by chunk. One repeat times that sequence two ways, alternating in this process:

  factored:  the code as it is: the space built once (DesignSpace.build memoizes; the cache is cleared
             before each repeat, so the build is timed) and enumerated block by block;
  full grid: the same calls with the original enumeration: a fresh build per call and, per build, one
             pass of the rules over the full free grid per layout for the size and again for the
             chunks (designer.search.space.reference_layout_rows, the test suite's reference).

Both score with the same model, so the ratio is the enumeration's share. Printed: per way, the median
seconds and strategies per second over the repeats, and the ratio of the medians.

--current-only times the first way alone with whatever designer is importable, so the same script
times an older tree (PYTHONPATH=<a checkout of it>), which has neither the cache nor the reference.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass, fields
from functools import cached_property
from typing import Iterator

import numpy as np

from designer.search import space as space_module
from designer.search.exhaustive import Candidate, Problem, run_exhaustive
from designer.search.space import DesignSpace, StrategyTable
from designer.spec.llm import TrainingSpec
from designer.spec.models import load_model
from designer.spec.study import StrategySpace

SPACE = {"microbatch_sizes": [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64],
         "schedules": ["gpipe", "1f1b", "interleaved", "zero_bubble", "dualpipe"], "virtual_stages": [2, 3, 4, 6, 8],
         "zero_stages": [0, 1, 2, 3], "zeropp_quantized_weights": [False, True],
         "zeropp_quantized_gradients": [False, True], "zeropp_hierarchical_partition": [False, True],
         "offload_weights": [False, True], "offload_optimizer": [False, True], "overlap_tp_comm": [False, True]}


def candidate(n_gpus: int = 4096) -> Candidate:
    """The design, sized by the network MILP as tests/search/test_runner.py sizes its own."""
    from designer.network.api import solve_network
    from designer.network.design import design_to_system
    from designer.spec.network_study import NetworkStudy, study_catalog

    ns = NetworkStudy.model_validate({
        "choices": {"platforms": ["dgx_a100"], "nics": [{"id": "cx6_200g"}], "switches": [{"id": "qm8700"}],
                    "families": ["rail-optimized"]},
        "gpus": {"count": n_gpus}})
    catalog = study_catalog(ns)
    d = solve_network(ns, catalog=catalog).design
    return Candidate(f"a100-{n_gpus}", d, design_to_system(d, catalog), d.capex_usd, d.power_w)


def problem() -> Problem:
    training = TrainingSpec(sequence_length=2048, global_batch_sequences=3072, precision="bf16", total_tokens=4.5e11)
    return Problem(load_model("gpt-1t"), training, StrategySpace.model_validate(SPACE))


@dataclass(frozen=True, eq=False)
class FullGridSpace(DesignSpace):
    """A space whose size and chunks come from the original full-grid enumeration."""

    @cached_property
    def _layout_counts(self) -> np.ndarray:
        rows = space_module.reference_layout_rows(self)
        return np.array([len(part["tp"]) for _, part in rows], dtype=np.int64)

    def chunks(self, max_rows: int = 50_000) -> Iterator[StrategyTable]:
        return space_module.reference_chunks(self, max_rows)


@dataclass(frozen=True)
class FullGridProblem(Problem):
    """The problem as the pipeline saw it before memoization: every call builds the space afresh."""

    def design_space(self, cand: Candidate) -> DesignSpace:
        ds = DesignSpace.build_uncached(self.llm, self.training, self.space, n_gpus=cand.n_gpus,
                                        hb_domain_size=cand.hb_domain_size)
        return FullGridSpace(**{f.name: getattr(ds, f.name) for f in fields(ds)})


def one_design(pb: Problem, cand: Candidate) -> tuple[float, int, float]:
    """Seconds for `designer run`'s calls on one design, the strategies scored and the best time."""
    t0 = time.perf_counter()
    size = pb.design_space(cand).size  # pipeline._search_all: choose_method(spec, size)
    total = pb.design_space(cand).size  # pipeline._search_all: the progress bar's total
    table = run_exhaustive(pb, cand)
    seconds = time.perf_counter() - t0
    assert size == total == table.n_evaluations
    return seconds, table.n_evaluations, float(table.time_to_train_s[table.best])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--current-only", action="store_true", help="time the importable designer's own path alone")
    args = ap.parse_args()
    cand = candidate()
    factored = problem()
    ways: dict[str, Problem] = {"factored": factored}
    if not args.current_only:
        ways["full grid"] = FullGridProblem(factored.llm, factored.training, factored.space)
    # the build is part of what is timed: forget the memoized spaces (a tree without the cache has none)
    clear = getattr(space_module, "clear_design_space_cache", lambda: None)
    one_design(factored, cand)  # warm-up: imports, the collectives tables
    times: dict[str, list[float]] = {name: [] for name in ways}
    results = {}
    for _ in range(args.repeats):
        for name, pb in reversed(ways.items()):
            clear()
            seconds, n, best = one_design(pb, cand)
            times[name].append(seconds)
            results[name] = (n, best)
    assert len(set(results.values())) == 1, results  # same strategies, same best
    n = results["factored"][0]
    print(f"GPT-1T on {cand.n_gpus:,} A100 (dgx_a100), batch 3,072: {n:,} strategies per design, "
          f"median of {args.repeats} repeats")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"  {name:>9}: {med:6.3f} s per design = {n / med:>9,.0f} strategies/s (min {min(ts):.3f} s)")
    if "full grid" in times:
        ratio = statistics.median(times["full grid"]) / statistics.median(times["factored"])
        print(f"  ratio full grid / factored: {ratio:.2f}x")


if __name__ == "__main__":
    main()
