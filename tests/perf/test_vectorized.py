"""evaluate_many (one numpy pass) agrees with evaluate_system strategy by strategy."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from designer.perf.model import StrategyArrays, evaluate_many, evaluate_system, load_perf_calibration
from designer.perf.records import Infeasible, Metrics
from designer.spec.llm import Recompute, Schedule, Strategy, TrainingSpec
from designer.spec.models import load_model
from tests.perf.systems import cluster

CAL = load_perf_calibration()


def _strategies(n_gpus: int, moe: bool):
    out = []
    for tp, pp, cp, mbs, (sched, v), zero, rc, sp in itertools.product(
            (1, 2, 8), (1, 2, 4), (1, 2), (1, 2), ((Schedule.one_f_one_b, 1), (Schedule.interleaved, 2)),
            (0, 1, 3), (Recompute.none, Recompute.selective, Recompute.full), (False, True)):
        dp = max(n_gpus // (tp * pp * cp), 1)
        ep = 4 if moe and dp * cp % 4 == 0 else 1
        out.append(Strategy(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, microbatch_size=mbs, schedule=sched, virtual_stages=v,
                            zero_stage=zero, recompute=rc, sequence_parallel=sp, overlap_tp_comm=sp,
                            zeropp_hierarchical_partition=zero == 3 and sp,
                            activation_layout="batch_first" if sp and cp == 1 else "sequence_first",
                            activation_input_fp8=mbs == 2,
                            cross_entropy="eager" if zero == 1 else "fused",
                            recompute_replay="needed" if pp == 2 else "module"))
    return out


@pytest.mark.parametrize("model,n", [("llama3-8b", 64), ("mixtral-8x7b", 128)])
def test_vector_and_scalar_paths_agree(model, n):
    llm = load_model(model)
    tr = TrainingSpec(sequence_length=4096, global_batch_sequences=256, total_tokens=1e12)
    sy = cluster("h100_sxm", n)
    strategies = _strategies(n, llm.moe is not None)
    vm = evaluate_many(llm, tr, strategies, sy, calib=CAL)
    assert len(vm) == len(strategies)
    n_feasible = 0
    for i in range(0, len(strategies), 13):  # a spread sample keeps the test fast
        r = evaluate_system(llm, tr, strategies[i], sy, calib=CAL)
        if isinstance(r, Metrics):
            n_feasible += 1
            assert vm.feasible[i]
            assert vm.iteration_time_s[i] == pytest.approx(r.iteration_time_s, rel=1e-12)
            assert vm.mfu[i] == pytest.approx(r.mfu, rel=1e-12)
            assert vm.memory_per_gpu_bytes[i] == pytest.approx(r.memory_per_gpu_bytes, rel=1e-12)
            assert vm.time_to_train_s[i] == pytest.approx(r.time_to_train_s, rel=1e-12)
        else:
            assert isinstance(r, Infeasible)
            assert not vm.feasible[i]
            assert vm.reason_text(vm.reason_code[i])
    assert n_feasible > 3


def test_strategy_arrays_round_trip():
    ss = _strategies(64, False)[:40]
    S = StrategyArrays.from_strategies(ss)
    assert len(S) == 40
    assert [S.to_strategy(i) for i in range(40)] == ss
    assert len(S.take(np.arange(5))) == 5
    with pytest.raises(ValueError):
        S.tp[0] = 3  # frozen columns


def test_feasibility_is_consistent_with_memory():
    llm = load_model("llama3-70b")
    tr = TrainingSpec(sequence_length=8192, global_batch_sequences=64, total_tokens=1e12)
    sy = cluster("h100_sxm", 64)
    ss = [Strategy(tp=t, pp=p, dp=64 // (t * p), zero_stage=1, recompute=Recompute.full)
          for t in (1, 2, 4, 8) for p in (1, 2, 4, 8)]
    vm = evaluate_many(llm, tr, ss, sy, calib=CAL)
    over = vm.memory_per_gpu_bytes > sy.gpu.hbm_bytes
    assert np.all(~vm.feasible[over])
    assert np.all(vm.reason_code[over & (vm.reason_code != 0)] > 0)
    assert vm.feasible.any() and (~vm.feasible).any()


def test_distinct_rows_give_every_strategy_a_row_equal_to_its_own():
    # the evaluator computes the layers' work, the group shapes, the stage split and the saved
    # activations once per distinct row of their inputs and reads each strategy's back: the row a
    # strategy reads must hold its own values, the data-parallel size past the direct key included
    from designer.perf.iteration import _distinct_rows

    rng = np.random.default_rng(3)
    n = 5000
    cols = [rng.choice([1, 2, 4, 8], n), rng.choice([1, 2], n).astype(float), rng.random(n) < 0.5,
            rng.choice([1, 5000, 65536, 1_000_000], n), np.full(n, 7)]
    rep, inv = _distinct_rows(*cols)
    assert len(rep) == 4 * 2 * 2 * 4
    for c in cols:
        assert np.array_equal(np.asarray(c)[rep][inv], c)
    assert np.array_equal(rep[inv[rep]], rep)  # each representative stands for its own row
    # too few strategies, or rows mostly distinct, or values no key holds: no deduplication
    assert _distinct_rows(*(c[:64] for c in cols)) is None
    assert _distinct_rows(np.arange(n)) is None
    assert _distinct_rows(rng.random(n)) is None
    assert _distinct_rows(np.where(cols[2], -1, 1)) is None
