"""Group shapes of the rank orders, checked against the ranks themselves.

Each expected shape is derived by listing the global ranks of a group from Megatron's rank formula
(rank = sum of index_d x stride_d over the order's dimensions, innermost first) and counting them per
HB domain, independently of designer's closed-form shapes."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from designer.perf.placement import ORDERS, hsdp_groups, place
from tests.perf.systems import cluster

HB = 8


def ranks_of_gradient_group(tp, cp, dp, pp, order):
    """The DP x CP ranks sharing tp index 0 and pp index 0, listed from the rank formula."""
    sizes = {"tp": tp, "cp": cp, "dp": dp, "pp": pp}
    stride, acc = {}, 1
    for name in order:
        stride[name] = acc
        acc *= sizes[name]
    return sorted(c * stride["cp"] + d * stride["dp"] for c, d in itertools.product(range(cp), range(dp)))


def shape_of(ranks):
    domains = {}
    for r in ranks:
        domains.setdefault(r // HB, []).append(r % HB)
    locals_ = [tuple(sorted(v)) for v in domains.values()]
    return dict(size=len(ranks), ranks_per_domain=max(len(v) for v in locals_), domain_span=len(domains),
                same_rail=len(set(locals_)) == 1, extent_domains=max(domains) - min(domains) + 1)


CASES = [(1, 1, 128, 8), (2, 2, 4, 2), (4, 2, 8, 4), (1, 4, 16, 2), (2, 1, 32, 4), (8, 2, 4, 2), (1, 2, 8, 8)]


@pytest.mark.parametrize("order_code", [0, 1])
@pytest.mark.parametrize("tp,cp,dp,pp", CASES)
def test_gradient_group_shape_matches_its_ranks(tp, cp, dp, pp, order_code):
    system = cluster("h100_sxm", tp * cp * dp * pp, hb_size=HB)
    got = place(np.array([tp]), np.array([cp]), np.array([dp]), np.array([pp]), np.array([1]), system,
                order_code=np.array([order_code])).grad
    want = shape_of(ranks_of_gradient_group(tp, cp, dp, pp, ORDERS[order_code]))
    assert {k: int(getattr(got, k)[0]) if k != "same_rail" else bool(got.same_rail[0]) for k in want} == want


def ranks_of_hsdp_groups(tp, cp, dp, pp, order, shard):
    """HSDP's first shard group and the replica group of rank 0: the DP×CP group in its rank order
    (CP innermost, as the DP×CP mesh flattens), cut into consecutive runs of `shard` members."""
    sizes = {"tp": tp, "cp": cp, "dp": dp, "pp": pp}
    stride, acc = {}, 1
    for name in order:
        stride[name] = acc
        acc *= sizes[name]
    members = [c * stride["cp"] + d * stride["dp"] for d in range(dp) for c in range(cp)]
    return sorted(members[:shard]), sorted(members[::shard])


HSDP_CASES = [(1, 1, 16, 2, 4), (2, 1, 8, 4, 2), (1, 2, 8, 2, 4), (2, 2, 4, 2, 2), (1, 4, 4, 2, 2), (1, 4, 4, 2, 8),
              (4, 2, 4, 2, 4), (1, 1, 32, 4, 8), (2, 4, 2, 2, 4)]


@pytest.mark.parametrize("order_code", [0, 1])
@pytest.mark.parametrize("tp,cp,dp,pp,shard", HSDP_CASES)
def test_hsdp_shard_and_replica_groups_match_their_ranks(tp, cp, dp, pp, shard, order_code):
    # the shard group is the first `shard` members of the DP×CP group in rank order, the replica group
    # one member of each; under tp-cp-pp-dp the DP members are tp·cp·pp apart, so a shard group of
    # DP members spreads over more domains than the tp-strided run the default order gives
    system = cluster("h100_sxm", tp * cp * dp * pp, hb_size=HB)
    got = hsdp_groups(np.array([shard]), np.array([tp]), np.array([cp]), np.array([dp]), np.array([pp]), system,
                      order_code=np.array([order_code]))
    for g, ranks in zip(got, ranks_of_hsdp_groups(tp, cp, dp, pp, ORDERS[order_code], shard)):
        want = shape_of(ranks)
        assert {k: int(getattr(g, k)[0]) if k != "same_rail" else bool(g.same_rail[0]) for k in want} == want


def test_pipeline_outside_data_parallel_sends_the_gradients_over_the_nics():
    """tp-cp-pp-dp with 8 stages per node: each data-parallel group has one GPU per node, so the
    gradient reduction cannot use NVLink at all (it did, under CP's stride, before)."""
    system = cluster("h100_sxm", 1024, hb_size=HB)
    g = place(np.array([1]), np.array([1]), np.array([128]), np.array([8]), np.array([1]), system,
              order_code=np.array([1])).grad
    assert (int(g.ranks_per_domain[0]), int(g.domain_span[0])) == (1, 128)


def _worst_block(size, n_ranks, k):
    """By enumeration: over the blocks of `size` consecutive ranks (ranks j·size .. j·size + size - 1)
    on domains of k, the block with the fewest members in one domain: (that count, its domains)."""
    worst = None
    for start in range(0, n_ranks - size + 1, size):
        pieces = {}
        for r in range(start, start + size):
            pieces[r // k] = pieces.get(r // k, 0) + 1
        key = (min(pieces.values()), len(pieces))
        worst = key if worst is None or key[0] < worst[0] else worst
    return worst


@pytest.mark.parametrize("size, n_ranks, k", [(12, 64, 8), (20, 64, 8), (8, 64, 8), (64, 576, 72), (32, 576, 72),
                                              (128, 576, 72), (144, 576, 72), (24, 576, 72)])
def test_a_group_that_straddles_domains_is_priced_at_its_worst_block(size, n_ranks, k):
    # blocks of consecutive ranks that neither fill nor divide a domain straddle its boundaries (64 on
    # 72-GPU racks: ranks 64-127 sit 8 + 56); the worst block's members per domain and domains touched,
    # listed rank by rank, are the group's shape
    from designer.perf.placement import group_shape

    sy = cluster("gb200" if k == 72 else "h100_sxm", n_ranks, hb_size=k)
    g = group_shape(np.array([size]), np.array([1]), sy)
    assert (int(g.ranks_per_domain[0]), int(g.domain_span[0])) == _worst_block(size, n_ranks, k)


def test_a_group_that_fills_its_domains_unevenly_crosses_the_network():
    # 12 consecutive ranks over two 8-GPU domains
    from designer.perf.collectives import collective_estimate

    sy = cluster("h100_sxm", 64)
    # the 12-rank all-to-all crosses the network: slower than the 8 ranks of one domain
    from designer.perf.collectives import GroupShape, load_collective_calibration

    cal = load_collective_calibration()
    twelve = collective_estimate("all_to_all", 2.0**28, GroupShape(size=12, ranks_per_domain=6, domain_span=2,
                                                                   same_rail=False), sy, cal)
    eight = collective_estimate("all_to_all", 2.0**28, GroupShape(size=8, ranks_per_domain=8, domain_span=1,
                                                                  same_rail=True), sy, cal)
    assert twelve.rail_bytes + twelve.spine_bytes > 0 and twelve.time_s > eight.time_s


def test_a_stride_that_does_not_divide_the_rack_spans_the_racks_its_ranks_run_over():
    # EP 64 on 576 GB200 GPUs in 8 racks of 72: the expert data-parallel group takes ranks 0, 64, ...,
    # 512, 9 of them over the 8 racks (rack r holds ranks 72r .. 72r + 71): listed by hand, racks 0-7
    # with two of them in rack 0 (0 and 64). Its shape spans those 8 racks, not 9, and the iteration
    # is priced (an extent past the system's racks left no tier to carry it).
    from designer.perf.model import evaluate_system
    from designer.perf.placement import group_shape
    from designer.perf.records import Metrics
    from designer.spec.llm import Strategy, TrainingSpec
    from designer.spec.models import load_model

    sy = cluster("gb200", 576, hb_size=72, leaf_span=8)
    racks = sorted({r // 72 for r in range(0, 576, 64)})
    g = group_shape(np.array([9]), np.array([64]), sy)
    assert int(g.domain_span[0]) == len(racks) == 8 and int(g.extent_domains[0]) == 8
    # spread evenly, one member per rack (floor(9 / 8)), and the collectives count the 8 racks
    from designer.perf.collectives import domains_crossed

    assert int(g.ranks_per_domain[0]) == 1 and float(domains_crossed(9, 1, 8)) == 8
    # 20 consecutive ranks on 8-GPU nodes: the worst block holds 4 + 8 + 8, three domains
    h = group_shape(np.array([20]), np.array([1]), cluster("h100_sxm", 64))
    assert (int(h.ranks_per_domain[0]), int(h.domain_span[0])) == (4, 3) and float(domains_crossed(20, 4, 3)) == 3
    # a pipeline pair 64 ranks apart sits in one rack (ranks 0 and 64): one domain, both members there
    pair = group_shape(np.array([2]), np.array([64]), sy)
    assert (int(pair.ranks_per_domain[0]), int(pair.domain_span[0])) == (2, 1)
    st = Strategy(tp=1, pp=1, dp=576, ep=64, expert_tp=1, zero_stage=1, microbatch_size=1, recompute="full")
    tr = TrainingSpec(sequence_length=4096, global_batch_sequences=2304, total_tokens=1e12)
    m = evaluate_system(load_model("qwen3-235b-a22b"), tr, st, sy)
    assert isinstance(m, Metrics) and np.isfinite(m.iteration_time_s)


def test_expert_data_parallel_ranks_sit_outside_the_pipeline_under_tp_cp_pp_dp():
    # tp 1, cp 2, ep 2, etp 1, pp 4, dp 64 on 8-GPU domains, order tp-cp-pp-dp: Megatron's expert
    # generator (order tp-ep-pp-dp, expert dp = 512 / (ep x pp) = 64) lists the expert data-parallel
    # group of rank 0 as ranks 0, 8, 16, ..., 504 (stride etp·ep·pp = 8): one rank per domain over 64
    # domains. Under tp-cp-dp-pp the same group is 0, 2, 4, ..., 126: 4 per domain over 16.
    from designer.perf.placement import ORDERS

    sy = cluster("h100_sxm", 512)
    one = np.ones(1, np.int64)
    for order, ranks in ((ORDERS[1], range(0, 512, 8)), (ORDERS[0], range(0, 128, 2))):
        g = place(one, 2 * one, 64 * one, 4 * one, 2 * one, sy, order, etp=one).expert_dp
        per_domain = {}
        for r in ranks:
            per_domain.setdefault(r // HB, []).append(r)
        assert (int(g.size[0]), int(g.ranks_per_domain[0]), int(g.domain_span[0])) == (
            len(ranks), max(len(v) for v in per_domain.values()), len(per_domain))


@pytest.mark.parametrize("tp, dp, pp, order, k", [
    (4, 1, 4, 0, 8), (4, 1, 2, 0, 8), (2, 2, 4, 0, 8), (2, 4, 3, 1, 8), (2, 2, 4, 1, 8), (1, 2, 2, 1, 8), (8, 2, 2, 0, 8),
    (2, 1, 8, 0, 8),
    # 72-GPU racks: one rack (stride 8, 9 stages; stride 24, 3 stages), two racks, a stride that does not
    # divide the rack (16), and pipelines repeated inside a rack
    (8, 1, 9, 0, 72), (4, 6, 3, 0, 72), (8, 1, 18, 0, 72), (4, 3, 3, 1, 72), (4, 6, 3, 1, 72), (16, 1, 9, 0, 72),
    (16, 4, 2, 1, 72), (8, 3, 6, 1, 72)])
def test_the_pipeline_is_paced_by_a_pair_of_stages_across_a_domain_boundary(tp, dp, pp, order, k):
    # stage i's rank r sends to stage i + 1's rank at the pipeline's stride; listed rank by rank on
    # 8- and 72-GPU domains (on 8, a pipeline of 4 stages of 4 ranks has its middle pair in two
    # domains: ranks 4-7 send to 8-11). Where any pair crosses, the pipeline's pair is that one: one
    # member in each of two domains; where none does, both members share a domain.
    n = tp * dp * pp
    names = ORDERS[order]
    sizes = {"tp": tp, "cp": 1, "dp": dp, "pp": pp}

    def rank(ix):
        r, acc = 0, 1
        for name in names:
            r, acc = r + ix[name] * acc, acc * sizes[name]
        return r

    crossing = any(rank(dict(tp=t, cp=0, dp=d, pp=i)) // k != rank(dict(tp=t, cp=0, dp=d, pp=i + 1)) // k
                   for t in range(tp) for d in range(dp) for i in range(pp - 1))
    one = np.ones(1, np.int64)
    sy = cluster("h100_sxm", max(n, 8)) if k == 8 else cluster("gb200", -(-n // k) * k, hb_size=k)
    g = place(tp * one, one, dp * one, pp * one, one, sy, names).pp
    assert (int(g.ranks_per_domain[0]), int(g.domain_span[0])) == ((1, 2) if crossing else (2, 1))


def test_an_hsdp_shard_group_that_cuts_cp_blocks_keeps_its_size():
    # tp-cp-pp-dp, cp 2, dp 3, shard 3: the shard group neither holds whole CP blocks nor divides one;
    # it is priced as 3 ranks (the default order's contiguous run), never as a truncated 2
    system = cluster("h100_sxm", 48, hb_size=HB)
    shard, rep = hsdp_groups(np.array([3]), np.array([1]), np.array([2]), np.array([3]), np.array([2]), system,
                             order_code=np.array([1]))
    assert (int(shard.size[0]), int(rep.size[0])) == (3, 2)


def test_a_group_that_nearly_fills_the_system_spans_no_more_domains_than_it_has():
    # 2,734 ranks 12 apart on 456 NVL72 racks (32,832 GPUs): 6 to a rack, the last rack's
    # block cut short; the worst block's straddle would reach a 457th rack, which does not exist
    from designer.perf.collectives import collective_time_s_vec, load_collective_calibration
    from designer.perf.placement import group_shape

    sy = cluster("gb200", 72 * 456, hb_size=72, hb_nvls=True)
    g = group_shape(np.array([2734]), np.array([12]), sy)
    assert int(g.domain_span[0]) <= 456 and int(g.extent_domains[0]) <= 456
    t = collective_time_s_vec("all_reduce", 2.0**20, g.size, g.ranks_per_domain, g.extent_domains, g.same_rail, sy,
                              load_collective_calibration())
    assert np.isfinite(t).all()
