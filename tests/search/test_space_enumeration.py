"""The factored enumeration yields exactly the strategies, in exactly the order, of a brute force over
the full product grid; one design's space is built once and shared; the bounded scored table keeps the
rows a one-shot ranking of every scored strategy picks."""

import itertools

import numpy as np
import pytest

from designer.search.exhaustive import Candidate, Problem, check_space, run_exhaustive
from designer.search.space import (COLUMNS, FREE_DIMS, DESIGN_SPACE_CACHE_SIZE, DesignSpace, _build_cached, design_space,
                                   divisors, invalid_reason, reference_chunks, strategy_key)
from designer.spec.llm import LLMSpec, MoESpec, Recompute, Schedule, Strategy, TrainingSpec
from designer.spec.models import load_model
from designer.spec.study import StrategySpace
from tests.search.split_rules import moe_values_apply, recompute_rows, split_ends

TINY = LLMSpec(name="tiny", layers=4, hidden_size=64, ffn_size=16, heads=4, kv_heads=4, vocab_size=100)
GQA = LLMSpec(name="gqa", layers=12, hidden_size=96, ffn_size=48, heads=12, kv_heads=2, vocab_size=10)
MOE = LLMSpec(name="moe", layers=8, hidden_size=64, ffn_size=32, heads=8, kv_heads=4, vocab_size=10,
              moe=MoESpec(experts=8, top_k=2, expert_ffn_size=32))


def _scalar_enumeration(llm, training, space, n_gpus, hb):
    """Every strategy in the order the space is specified to list them, found by the scalar rules
    alone: layouts by tp, pp, cp, ep (each as listed, or every candidate ascending), then the free
    dimensions as a row-major product of their listed values (interleaved expanded in place into its
    virtual stage counts). A strategy's batch is the allowed batch nearest the target (the larger on a
    tie) that `invalid_reason` accepts, tried one batch at a time."""
    tps = space.tp or divisors(hb)
    pps = space.pp or range(1, space.max_pp + 1)
    eps = (space.ep or divisors(llm.moe.experts)) if llm.moe else (1,)
    scheds = [(s, v) for s in space.schedules
              for v in (space.virtual_stages if s == Schedule.interleaved else (1,))]
    t = training.global_batch_sequences
    lo, hi = training.batch_range
    allowed = training.global_batch_choices or range(lo, hi + 1)
    batches = sorted(allowed, key=lambda b: (abs(b - t), -b))  # nearest first, the larger on a tie
    out = []
    for tp, pp, cp, ep in itertools.product(tps, pps, space.cp, eps):
        if n_gpus % (tp * pp * cp):
            continue
        dp = n_gpus // (tp * pp * cp)
        for sp, mbs, (sc, v), split, z, qw, qg, hp, (rc, mods), odp, otp, off, offw, offa, cpc, oep, disp, cg in itertools.product(
                space.sequence_parallel, space.microbatch_sizes, scheds, space.pipeline_split, space.zero_stages,
                space.zeropp_quantized_weights, space.zeropp_quantized_gradients, space.zeropp_hierarchical_partition,
                recompute_rows(llm, space), space.overlap_dp_comm, space.overlap_tp_comm, space.offload_optimizer,
                space.offload_weights, space.offload_activation_layers, space.cp_comm, space.overlap_ep_comm,
                space.moe_dispatcher, space.cuda_graphs):
            fields = dict(tp=tp, pp=pp, dp=dp, ep=ep, cp=cp, sequence_parallel=sp, microbatch_size=mbs, schedule=sc,
                          virtual_stages=v, zero_stage=z, zeropp_quantized_weights=qw, zeropp_quantized_gradients=qg,
                          zeropp_hierarchical_partition=hp, recompute=rc, recompute_modules=mods, overlap_dp_comm=odp, overlap_tp_comm=otp,
                          offload_optimizer=off, offload_weights=offw, offload_activation_layers=offa, cp_comm=cpc,
                          overlap_ep_comm=oep, moe_dispatcher=disp, cuda_graphs=cg)
            ends = split_ends(llm, training, space, pp, sc, v, split)
            if ends is None or not moe_values_apply(llm, space, oep, disp, ep):
                continue
            fields.update(pp_first_stage_layers=ends[0], pp_last_stage_layers=ends[1])
            for b in batches:
                s = Strategy(**fields, global_batch_sequences=None if b == t else b)
                if invalid_reason(s, llm, training, n_gpus, hb) is None:
                    out.append(strategy_key(s))
                    break
    return out


TRAIN_8 = TrainingSpec(sequence_length=1024, global_batch_sequences=8, total_tokens=1e9)
TRAIN_24 = TrainingSpec(sequence_length=4096, global_batch_sequences=24, total_tokens=1e9)
TRAIN_32 = TrainingSpec(sequence_length=2048, global_batch_sequences=32, total_tokens=1e9)
EVERY_SCHEDULE = dict(schedules=tuple(Schedule), virtual_stages=(2, 3))
ZERO_PLUS = dict(zero_stages=(0, 1, 2, 3), zeropp_quantized_weights=(False, True),
                 zeropp_hierarchical_partition=(False, True), offload_weights=(False, True))

SCALAR_CASES = {
    "dense": (TINY, TRAIN_8, StrategySpace(**EVERY_SCHEDULE, **ZERO_PLUS, microbatch_sizes=(1, 2)), 16, 4),
    # Muon keeps ZeRO 0 and 1 without offload (space.MUON_RULE)
    "dense-muon": (TINY, TRAIN_8.model_copy(update={"optimizer": "muon"}), StrategySpace(
        **ZERO_PLUS, offload_optimizer=(False, True), microbatch_sizes=(1, 2)), 16, 4),
    "gqa-cp-a2a": (GQA, TRAIN_24, StrategySpace(cp=(1, 2, 4, 8), microbatch_sizes=(1, 2, 3, 4),
                                                cp_comm=("p2p", "all_gather", "a2a"), recompute=(Recompute.full,)), 24, 6),
    "moe-cp": (MOE, TRAIN_32, StrategySpace(cp=(1, 2), cp_comm=("p2p", "a2a"), zero_stages=(1, 3), recompute=("full",),
                                            offload_weights=(False, True), overlap_ep_comm=(False, True),
                                            moe_dispatcher=("alltoall", "deepep"), cuda_graphs=(False, True)), 32, 8),
    "moe-modules": (MOE, TRAIN_32, StrategySpace(recompute_modules=((), ("layernorm", "moe_act"), ("mla_up_proj",),
                                                                   ("moe_act", "layernorm"), ("moe",)),
                                                 microbatch_sizes=(1, 2), zero_stages=(1, 3)), 32, 8),
    "tolerance": (TINY, TrainingSpec(sequence_length=1024, global_batch_sequences={"target": 16, "tolerance": 0.25},
                                     total_tokens=1e9),
                  StrategySpace(**EVERY_SCHEDULE, microbatch_sizes=(1, 2, 3), recompute=(Recompute.none,)), 12, 4),
    "batch-list": (MOE, TrainingSpec(sequence_length=2048, global_batch_sequences=[32, 24, 40], total_tokens=1e9),
                   StrategySpace(**EVERY_SCHEDULE, cp=(1, 2), microbatch_sizes=(1, 2), recompute=(Recompute.none,)), 24, 8),
}


@pytest.mark.parametrize("case", sorted(SCALAR_CASES))
def test_enumeration_is_the_scalar_brute_force_in_order(case):
    llm, training, space, n_gpus, hb = SCALAR_CASES[case]
    ds = DesignSpace.build_uncached(llm, training, space, n_gpus=n_gpus, hb_domain_size=hb)
    table = ds.table()
    want = _scalar_enumeration(llm, training, space, n_gpus, hb)
    assert len(want) > 50  # each case has enough strategies to say something about the order
    assert [table.key(i) for i in range(len(table))] == want
    assert ds.size == len(want)


def _tr(seq, batch):
    return TrainingSpec(sequence_length=seq, global_batch_sequences=batch, total_tokens=1e12)


GRID_CASES = {
    # the space studies/benchmarks/bench_pipeline.py times, and a wider CP one
    "gpt-1t-4096": ("gpt-1t", _tr(2048, 3072), dict(microbatch_sizes=(1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64),
                                                     schedules=tuple(Schedule), virtual_stages=(2, 3, 4, 6, 8),
                                                     zero_stages=(0, 1, 2, 3), zeropp_quantized_weights=(False, True),
                                                     zeropp_quantized_gradients=(False, True),
                                                     zeropp_hierarchical_partition=(False, True),
                                                     offload_weights=(False, True), offload_optimizer=(False, True),
                                                     overlap_tp_comm=(False, True)), 4096, 8),
    "gpt-1t-4096-cp": ("gpt-1t", _tr(2048, 3072), dict(microbatch_sizes=(1, 2, 4, 8, 16), schedules=tuple(Schedule),
                                                        virtual_stages=(2, 3, 4), zero_stages=(0, 1, 2, 3),
                                                        zeropp_quantized_weights=(False, True),
                                                        offload_weights=(False, True), cp=(1, 2, 4),
                                                        cp_comm=("p2p", "a2a")), 4096, 8),
    "gpt-1t-1536": ("gpt-1t", _tr(2048, 3072), dict(microbatch_sizes=(1, 2, 3, 4), schedules=tuple(Schedule),
                                                     zero_stages=(1, 3), offload_optimizer=(False, True)), 1536, 8),
    "llama3-70b-tolerance": ("llama3-70b", TrainingSpec(sequence_length=8192, total_tokens=1e12,
                                                        global_batch_sequences={"target": 1024, "tolerance": 0.1}),
                             dict(cp=(1, 2, 4, 8), cp_comm=("p2p", "all_gather", "a2a"), microbatch_sizes=(1, 2, 4),
                                  zero_stages=(0, 1, 3), max_pp=16), 2048, 8),
    "deepseek-v3-ep-cp": ("deepseek-v3", _tr(4096, 4096), dict(cp=(1, 2), microbatch_sizes=(1, 2), ep=(8, 16, 32, 64),
                                                               schedules=(Schedule.one_f_one_b, Schedule.dualpipe),
                                                               moe_dispatcher=("alltoall", "deepep"),
                                                               overlap_ep_comm=(False, True), max_pp=16), 2048, 8),
    # the balanced pipeline split under every schedule, beside Megatron's and alone
    "deepseek-v3-splits": ("deepseek-v3", _tr(4096, 4096), dict(ep=(8, 32), schedules=tuple(Schedule),
                                                                virtual_stages=(2, 3), microbatch_sizes=(1, 2),
                                                                max_pp=32), 2048, 8),
    "deepseek-v3-balanced-only": ("deepseek-v3", _tr(4096, 4096), dict(ep=(8, 32), schedules=tuple(Schedule),
                                                                       virtual_stages=(2, 3), microbatch_sizes=(1, 2),
                                                                       pipeline_split=("balanced",), max_pp=32), 2048, 8),
    "mixtral-list": ("mixtral-8x7b", TrainingSpec(sequence_length=4096, global_batch_sequences=[512, 480, 544],
                                                  total_tokens=1e12),
                     dict(cp=(1, 2), microbatch_sizes=(1, 2, 3), recompute=(Recompute.full,), max_pp=8), 960, 8),
}


@pytest.mark.parametrize("case", sorted(GRID_CASES))
def test_chunks_are_the_full_grid_masked_per_layout(case):
    model, training, space_kw, n_gpus, hb = GRID_CASES[case]
    ds = DesignSpace.build_uncached(load_model(model), training, StrategySpace(**space_kw), n_gpus=n_gpus,
                                    hb_domain_size=hb)
    new, ref = list(ds.chunks(max_rows=20_000)), list(reference_chunks(ds, max_rows=20_000))
    assert ds.size == sum(len(t) for t in ref) > 1000
    assert [len(t) for t in new] == [len(t) for t in ref]
    for a, b in zip(new, ref):
        for c in COLUMNS:
            assert a.columns[c].dtype == b.columns[c].dtype, c
            np.testing.assert_array_equal(a.columns[c], b.columns[c], err_msg=c)


@pytest.mark.parametrize("case", ["dense", "gqa-cp-a2a", "moe-cp"])
def test_free_rows_choices_and_contains_agree_with_the_table(case):
    llm, training, space, n_gpus, hb = SCALAR_CASES[case]
    ds = DesignSpace.build_uncached(llm, training, space, n_gpus=n_gpus, hb_domain_size=hb)
    table = ds.table()
    # free_rows: the flat free-grid indices whose decoded values are the layout's strategies
    start = 0
    for i in range(len(ds.layouts)):
        rows = ds.free_rows(i)
        assert np.all(np.diff(rows) > 0) and ds.free_mask(i).sum() == len(rows)
        idx = np.unravel_index(rows, ds.free_shape)
        for name in ("microbatch_size", "zero_stage", "cp_comm"):
            j = FREE_DIMS.index(name)
            values = np.array(ds.free_values[name])[idx[j]]
            np.testing.assert_array_equal(values, table.columns[name][start:start + len(rows)])
        start += len(rows)
    assert start == len(table)
    # choices: the values that occur in the table, where a dimension has two or more
    for name, vals in ds.choices.items():
        if name in ("tp", "pp", "cp", "ep", "microbatch_size", "zero_stage", "offload_activation_layers"):
            assert set(vals) == set(np.unique(table.columns[name]).tolist())
    assert ds.contains(table.strategy(len(table) // 2))
    assert not ds.contains(Strategy(tp=1, pp=1, dp=n_gpus, sequence_parallel=True))


def test_one_build_per_design_shared_by_every_caller():
    from tests.search.test_runner import candidate

    cand = candidate()
    space = StrategySpace(microbatch_sizes=(1, 2), recompute=(Recompute.full,), zero_stages=(1,))
    pb = Problem(load_model("llama3-70b"), TrainingSpec(sequence_length=8192, global_batch_sequences=512,
                                                        total_tokens=1e12), space)
    before = _build_cached.cache_info()
    ds = pb.design_space(cand)
    # the callers of `designer run` for one design: the method choice and the progress total
    # (pipeline._search_all), the search itself, the check before Optuna, the module function
    assert pb.design_space(cand).size == ds.size
    table = run_exhaustive(pb, cand)
    assert check_space(pb, cand) is ds
    equal_inputs = (load_model("llama3-70b"), pb.training.model_copy(), StrategySpace(**space.model_dump()))
    assert design_space(*equal_inputs, n_gpus=cand.n_gpus, hb_domain_size=cand.hb_domain_size) is ds
    after = _build_cached.cache_info()
    assert after.misses - before.misses <= 1  # built at most once (a hit if an earlier test built it)
    assert table.space_size == ds.size
    with pytest.raises(ValueError):
        ds.layouts[0, 0] = 3  # shared, hence read-only


def test_the_cache_is_bounded():
    training = TrainingSpec(sequence_length=1024, global_batch_sequences=8, total_tokens=1e9)
    first = design_space(TINY, training, StrategySpace(), n_gpus=8, hb_domain_size=4)
    for n in range(1, DESIGN_SPACE_CACHE_SIZE + 2):
        design_space(TINY, training, StrategySpace(max_pp=2), n_gpus=n, hb_domain_size=4)
    assert _build_cached.cache_info().currsize <= DESIGN_SPACE_CACHE_SIZE
    again = design_space(TINY, training, StrategySpace(), n_gpus=8, hb_domain_size=4)
    assert again is not first and again.size == first.size  # evicted, then built afresh


def _wide_problem():
    from tests.search.test_runner import candidate

    space = StrategySpace(cp=(1, 2, 4), microbatch_sizes=(1, 2, 4, 8), schedules=tuple(Schedule)[:4],
                          virtual_stages=(2, 4), zero_stages=(0, 1, 2, 3), offload_optimizer=(False, True),
                          overlap_tp_comm=(False, True), overlap_dp_comm=(False, True), max_pp=8)
    return Problem(load_model("llama3-70b"), TrainingSpec(sequence_length=8192, global_batch_sequences=512,
                                                          total_tokens=1e12), space), candidate()


@pytest.fixture(scope="module")
def wide():
    pb, cand = _wide_problem()
    return pb, cand, run_exhaustive(pb, cand, keep=10 ** 9)


@pytest.mark.parametrize("keep", [1, 7, 30_000, 90_000])
def test_kept_rows_are_a_one_shot_ranking_of_every_scored_row(wide, keep):
    pb, cand, full = wide
    n = len(full)
    assert n > 100_000 and full.space_size == n  # several chunks, and more rows than kept
    assert int(full.feasible.sum()) < 90_000  # the largest bound also keeps infeasible rows
    small = run_exhaustive(pb, cand, keep=keep)
    # the ranking: feasible first, by time to train (NaN last), ties by enumeration order
    ttt = np.where(np.isnan(full.time_to_train_s), np.inf, full.time_to_train_s)
    want = np.sort(np.lexsort((np.arange(n), ttt, ~full.feasible))[:keep])
    assert small.n_evaluations == n and len(small) == keep
    for c in COLUMNS:
        np.testing.assert_array_equal(small.strategies.columns[c], full.strategies.columns[c][want], err_msg=c)
    np.testing.assert_array_equal(small.time_to_train_s, full.time_to_train_s[want])
    np.testing.assert_array_equal(small.feasible, full.feasible[want])
    assert small.time_to_train_s[small.best] == full.time_to_train_s[full.best]


def test_muon_keeps_zero_0_and_1_without_offload():
    # the same space less the rows Muon cannot run: exactly those with ZeRO 2/3 or an offload
    llm, training, space, n_gpus, hb = SCALAR_CASES["dense-muon"]
    adam = DesignSpace.build_uncached(llm, training.model_copy(update={"optimizer": "adam"}), space, n_gpus=n_gpus,
                                      hb_domain_size=hb).table()
    muon = DesignSpace.build_uncached(llm, training, space, n_gpus=n_gpus, hb_domain_size=hb).table()
    keep = (adam.columns["zero_stage"] <= 1) & ~adam.columns["offload_optimizer"] & ~adam.columns["offload_weights"]
    assert 0 < len(muon) == int(keep.sum()) < len(adam)
    assert set(np.unique(muon.columns["zero_stage"])) == {0, 1}
