"""The vectorized model's shortcuts give the numbers of the long way, bit for bit: the summary that
evaluate_many asks for (no traffic ledger, and collectives that carry their times alone, without their
bytes per fabric and peers), group shapes computed once per run of equal groups, and collectives priced
once per distinct (bytes, group) pair."""

from __future__ import annotations

import numpy as np
import pytest

from designer.perf import collectives as coll
from designer.perf.iteration import SUMMARY_KEYS, _ct, iteration_arrays
from designer.perf.model import evaluate_many, load_perf_calibration
from designer.perf.placement import GroupArrays, _group_shape, group_shape
from designer.search.exhaustive import to_strategy_arrays
from designer.search.space import design_space
from designer.spec.llm import TrainingSpec
from designer.spec.models import load_model
from designer.spec.study import StrategySpace
from tests.perf.systems import cluster

CAL = load_perf_calibration()
FIELDS = tuple(GroupArrays.__dataclass_fields__)


def _table(model: str, n_gpus: int, training: TrainingSpec, **space):
    llm = load_model(model)
    return llm, design_space(llm, training, StrategySpace(**space), n_gpus=n_gpus, hb_domain_size=8).table()


CASES = {
    # MoE with EP, CP (Ulysses too), ZeRO-3 with ZeRO++, weight offload, every dispatcher, CUDA graphs
    "moe": ("mixtral-8x7b", 128, TrainingSpec(sequence_length=4096, global_batch_sequences=256, total_tokens=1e12),
            dict(cp=(1, 2), cp_comm=("p2p", "a2a"), zero_stages=(1, 3), zeropp_hierarchical_partition=(False, True),
                 offload_weights=(False, True), moe_dispatcher=("alltoall", "allgather", "deepep"),
                 cuda_graphs=(False, True), recompute=("full",), max_pp=4)),
    # a batch tolerance on 96 GPUs: the strategies run several batches (one model pass per batch)
    "tolerance": ("llama3-8b", 96, TrainingSpec(sequence_length=8192, total_tokens=1e12,
                                                global_batch_sequences={"target": 512, "tolerance": 0.1}),
                  dict(cp=(1, 2, 4), zero_stages=(0, 1, 2, 3), offload_optimizer=(False, True),
                       schedules=("1f1b", "interleaved", "zero_bubble", "dualpipe"), max_pp=8)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_summary_is_the_full_models_figures(case):
    model, n, training, space = CASES[case]
    llm, table = _table(model, n, training, **space)
    S = to_strategy_arrays(table)
    if case == "tolerance":
        assert len(np.unique(S.batch)) > 2
    system = cluster("h100_sxm", n)
    full = iteration_arrays(llm, training, S, system, CAL)
    short = iteration_arrays(llm, training, S, system, CAL, summary=True)
    assert tuple(short) == SUMMARY_KEYS and len(full) > 3 * len(short)
    for k in SUMMARY_KEYS:
        np.testing.assert_array_equal(short[k], full[k], err_msg=k)
    vm = evaluate_many(llm, training, S, system, calib=CAL)
    np.testing.assert_array_equal(vm.iteration_time_s, full["iteration_time_s"])
    np.testing.assert_array_equal(vm.reason_code, full["code"])
    assert 0 < int(vm.feasible.sum()) < len(vm)


def _groups(rng, n_runs: int, run: int):
    size = np.repeat(rng.choice([1, 2, 3, 4, 8, 16, 24, 64, 256], n_runs), run)
    stride = np.repeat(rng.choice([1, 2, 4, 6, 8, 16, 32, 128], n_runs), run)
    return size, stride


@pytest.mark.parametrize("run", [1, 3, 40])  # no runs, runs too short to pay, long runs
def test_group_shape_is_each_groups_own_shape(run):
    rng = np.random.default_rng(run)
    system = cluster("h100_sxm", 4096)
    size, stride = _groups(rng, 500, run)
    got = group_shape(size, stride, system)
    for i in range(0, len(size), 7):
        one = _group_shape(size[i:i + 1], stride[i:i + 1], system)  # the formula on this group alone
        for f in FIELDS:
            assert getattr(got, f)[i] == getattr(one, f)[0], (f, i)
    for f in FIELDS:
        assert getattr(got, f).shape == size.shape


@pytest.mark.parametrize("everyone", [False, True])  # some strategies run no collective, or all run one
@pytest.mark.parametrize("distinct_bytes", [3, 5000])  # few pairs (the pair table), many (a sort)
def test_collectives_priced_once_per_pair_are_priced_per_strategy(distinct_bytes, everyone):
    rng = np.random.default_rng(distinct_bytes)
    system = cluster("h100_sxm", 1024)
    size, stride = _groups(rng, 200, 30)
    if everyone:
        size = np.maximum(size, 2)
    g = group_shape(size, stride, system)
    nbytes = rng.choice(np.geomspace(1e3, 1e10, distinct_bytes), len(size))
    on = np.ones(len(size), bool)
    if not everyone:
        nbytes[::11] = 0.0  # no bytes: no collective
        on = rng.random(len(size)) < 0.8
    graphs = rng.random(len(size)) < 0.5
    c = _ct("all_reduce", nbytes, g, system, CAL.collectives, on, graphs=graphs)
    live = np.flatnonzero((size > 1) & (nbytes > 0) & on)
    assert 0 < len(live) <= len(size) and (len(live) == len(size)) == everyone
    # the collectives model on every live strategy, none shared
    e = coll.collective_estimate_vec("all_reduce", nbytes[live], size[live], g.ranks_per_domain[live],
                                     g.extent_domains[live], g.same_rail[live], system, CAL.collectives,
                                     cuda_graphs=graphs[live])
    peers = coll.peers_per_rank(e.algorithm_index, size[live], g.ranks_per_domain[live], system)
    for got, want in ((c.time_s, e.time_s), (c.hb_bytes, e.hb_bytes), (c.rail_bytes, e.rail_bytes),
                      (c.spine_bytes, e.spine_bytes), (c.peers, peers)):
        np.testing.assert_array_equal(got[live], np.asarray(want))
        dead = np.setdiff1d(np.arange(len(size)), live)
        assert not np.any(got[dead])
