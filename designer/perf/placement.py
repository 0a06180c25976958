"""Mapping of the parallel groups onto the topology: group shapes and the tier each group's traffic uses.

Rank order (Megatron-LM `initialize_model_parallel`, Narayanan et al. SC'21 §3.3): TP innermost, then
CP, then DP, PP outermost: global rank = tp_i + tp·(cp_i + cp·(dp_i + dp·pp_i)). Consecutive ranks fill
an HB domain of K GPUs; local rank = rank mod K is the rail (railonly.md §1). A group whose members are
`stride` ranks apart is therefore:
  - inside one domain when stride·(size−1) < K and the block is aligned;
  - one member per domain, all on the same rail, when stride is a multiple of K;
  - g = K/stride members per domain, repeated on the same local ranks in size/g domains, when K is a
    multiple of stride (a hierarchical collective: in-domain phase, then a same-rail phase);
  - otherwise irregular: members of different domains sit on different rails.
Groups of one kind run at once, so the worst one paces them: blocks that neither fill nor divide a
domain straddle its boundaries and are priced at the block with the fewest members in one domain
(_group_shape), and a pipeline with a pair of stages on either side of a boundary at that pair
(pipeline_pair).
EP is formed inside a pipeline stage with stride etp (Megatron-Core's expert rank generator), the
expert-data-parallel group takes the remaining stride etp·ep; the gradient group of dense weights is DP×CP (Megatron averages
gradients over CP ranks too).

Traffic climbs to the lowest scale-out tier whose span covers the group's extent in domains
(spec.system.NetworkTier). On a rail-only system no tier crosses rails; traffic between different local
ranks is forwarded through the HB domain, which the collectives module prices. Where a cross-rail tier
exists, `tier` is the nominal level (that tier); the collectives module also prices forwarding over the
HB domain (PXN) and takes the faster route, so the bytes it reports may stay off the spine. A group whose
cross-domain traffic stays on rails ("same_rail") therefore runs equally fast on rail-only and on the
rail-optimized fat-tree (railonly.md §1, §3).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import pandas as pd

from designer.spec.system import ClusterSystem

DEFAULT_ORDER = ("tp", "cp", "dp", "pp")

TIER_HB, TIER_RAIL, TIER_SPINE = 0, 1, 2
TIER_NAMES = ("hb", "rail", "spine")


@dataclass(frozen=True)
class GroupArrays:
    """Shape of one kind of parallel group, one entry per strategy (numpy arrays).

    size: ranks; ranks_per_domain: members sharing an HB domain; domain_span: domains touched;
    same_rail: cross-domain members share local ranks; extent_domains: domains between the first and
    the last member (what a tier must span); tier: TIER_HB / TIER_RAIL / TIER_SPINE, where its
    cross-domain traffic goes."""

    size: np.ndarray
    ranks_per_domain: np.ndarray
    domain_span: np.ndarray
    same_rail: np.ndarray
    extent_domains: np.ndarray
    tier: np.ndarray

    @functools.cached_property
    def shape_code(self) -> tuple[np.ndarray, int]:
        """(a code per strategy, the number of codes): strategies share a code exactly where every field a
        collective's price depends on (size, ranks per domain, extent, same rail) is equal. Computed
        once per group, as every collective on the group groups its strategies by it."""
        # one bit for same_rail, 21 for the size and the ranks per domain, 20 for the extent: exact for
        # groups of up to 2 million ranks over up to a million domains
        key = (self.same_rail.astype(np.int64) + (self.size.astype(np.int64) << 1)
               + (self.ranks_per_domain.astype(np.int64) << 22) + (self.extent_domains.astype(np.int64) << 43))
        code, distinct = pd.factorize(key.ravel())
        return code.reshape(key.shape), len(distinct)

    @functools.cached_property
    def estimate_memo(self) -> dict:
        """The collectives model's per-shape work on this group's shapes (collective_estimate_vec's
        memo), kept between the collectives priced on the group: a search prices several ops, bucket
        counts and stages on one group, each over the same few distinct shapes."""
        return {}


def group_shape(size, stride, system: ClusterSystem) -> GroupArrays:
    """Shape of groups of `size` ranks spaced `stride` apart (arrays), for the system's HB size K."""
    size = np.asarray(size, dtype=np.int64)
    stride = np.asarray(stride, dtype=np.int64)
    if size.ndim == 1 and size.shape == stride.shape and len(size) > 1:
        # A search scores its strategies layout by layout, so (size, stride) comes in long runs: shape
        # each run once and repeat the result, so the integer divisions run per run, not per strategy
        head = np.flatnonzero(np.concatenate(([True], (size[1:] != size[:-1]) | (stride[1:] != stride[:-1]))))
        if 8 * len(head) <= len(size):
            g = _group_shape(size[head], stride[head], system)
            runs = np.diff(np.append(head, len(size)))
            return GroupArrays(**{f: np.repeat(getattr(g, f), runs) for f in GroupArrays.__dataclass_fields__})
    return _group_shape(size, stride, system)


def _group_shape(size: np.ndarray, stride: np.ndarray, system: ClusterSystem) -> GroupArrays:
    k = system.hb.size
    one_per_domain = stride % k == 0
    nested = (k % stride == 0) & ~one_per_domain
    per_domain_nested = np.minimum(size, np.maximum(k // np.maximum(stride, 1), 1))
    rpd = np.where(one_per_domain, 1, np.where(nested, per_domain_nested, np.maximum(np.minimum(size, k // stride), 1)))
    extent_ranks = stride * (size - 1) + 1
    # a stride that does not divide the domain puts k/stride members in a domain on average, not
    # floor(k/stride): the group touches no more domains than its ranks run over
    span = -(-size // rpd)
    span = np.where(one_per_domain | nested, span, np.minimum(span, np.maximum(-(-extent_ranks // k), 1)))
    # nested groups repeat the same local ranks in each domain; one-per-domain groups keep theirs
    same_rail = one_per_domain | (nested & (size % rpd == 0))
    # a group over several domains that does not fill them evenly (a stride that does not divide the
    # domain) is priced as its members spread evenly over the domains it spans: floor(size / span)
    # per domain, from which the collectives derive at least the domains it spans (they cap the
    # count at its extent); a group in one domain has all its members there
    rpd = np.where(span > 1, np.maximum(size // span, 1), size)
    # Blocks of `size` lane slots (a nested stride's ranks of one local-rank class, k/stride to a
    # domain) start at multiples of `size`; where neither the block nor the domain divides the other,
    # some blocks straddle a domain boundary (64 consecutive ranks on 72-GPU domains: ranks 64-127 sit
    # 8 in one domain and 56 in the next). Their start offsets run over the multiples of
    # gcd(size, k/stride), so the worst block keeps only that many members in its first domain, and
    # its collectives wait on those members' links (an all-to-all sends (size - gcd)/size of their
    # data off the domain); every group of the kind runs at once, so the worst one paces them.
    lane = np.maximum(k // np.maximum(stride, 1), 1)
    piece = np.gcd(size, lane)
    straddle = nested & (size > 1) & (lane % np.maximum(size, 1) != 0) & (size % lane != 0)
    if np.any(straddle):
        s_span = 1 + -(-(size - piece) // lane)
        rpd = np.where(straddle, piece, rpd)
        span = np.where(straddle, s_span, span)
        same_rail = same_rail & ~straddle
    # no group spans more domains than the system has (the worst straddling block of a group that
    # nearly fills it would reach one past the last)
    n_domains = max(-(-system.n_gpus // k), 1)
    span = np.minimum(span, n_domains)
    extent = np.minimum(np.maximum(-(-extent_ranks // k), span), n_domains)
    tier = tier_for(extent, same_rail, system)
    tier = np.where(span <= 1, TIER_HB, tier)
    return GroupArrays(size=size, ranks_per_domain=rpd, domain_span=span, same_rail=same_rail,
                       extent_domains=extent, tier=tier)


def tier_for(extent_domains, same_rail, system: ClusterSystem):
    """TIER_RAIL when the lowest tier spanning `extent_domains` is the first (rail/leaf) tier and the
    traffic may stay on it; TIER_SPINE when it must climb higher or cross rails through a cross-rail
    tier. On rail-only, cross-rail traffic is forwarded over HB and then rides the rail tiers, so it
    is classed by extent alone."""
    extent_domains = np.asarray(extent_domains)
    if not system.tiers:
        return np.full(extent_domains.shape, TIER_RAIL)
    first = system.tiers[0]
    fits_first = extent_domains <= first.span_domains
    if first.cross_rail or system.rail_only:
        return np.where(fits_first, TIER_RAIL, TIER_SPINE)
    return np.where(fits_first & same_rail, TIER_RAIL, TIER_SPINE)


@dataclass(frozen=True)
class Placement:
    tp: GroupArrays
    cp: GroupArrays
    cp_ring: GroupArrays  # the ring neighbours that pace ring attention's sends (ring_neighbours of cp)
    dp: GroupArrays  # pure data-parallel group (used for ZeRO-3 / hpZ shapes)
    grad: GroupArrays  # DP×CP: where dense gradients are reduced and ZeRO shards live
    pp: GroupArrays  # pipeline neighbours (a pair of consecutive stages)
    ep: GroupArrays
    expert_dp: GroupArrays
    expert_tp: GroupArrays  # the expert tensor-parallel group (innermost, consecutive ranks)


def strides(tp, cp, dp, pp, order=DEFAULT_ORDER) -> dict[str, np.ndarray]:
    """Stride of each dimension for a rank order, innermost first."""
    sizes = {"tp": np.asarray(tp, np.int64), "cp": np.asarray(cp, np.int64),
             "dp": np.asarray(dp, np.int64), "pp": np.asarray(pp, np.int64)}
    if sorted(order) != sorted(DEFAULT_ORDER):
        raise ValueError(f"rank order {order} must be a permutation of {DEFAULT_ORDER}")
    out = {}
    acc = np.ones_like(sizes["tp"])
    for name in order:
        out[name] = acc
        acc = acc * sizes[name]
    return out


ORDERS = (("tp", "cp", "dp", "pp"), ("tp", "cp", "pp", "dp"))  # StrategyArrays.order codes


def ring_neighbours(g: GroupArrays) -> GroupArrays:
    """The pair of neighbours whose send paces a ring of point-to-point sends over group g.

    Across domains that is a domain's last member sending to the next domain's first over its own
    NIC (the hops inside the domain are faster); the wrap-around hop spans the group, so the pair
    keeps the group's extent and tier. The pair is its own communicator: Transformer Engine's ring
    attention sends with single isend/irecv calls (context_parallel.py flash_attn_p2p_communicate;
    batched only for cp = 2 before Blackwell, NVTE_BATCH_MHA_P2P_COMM), and PyTorch runs a single
    send/recv on a two-rank NCCL communicator of the pair (ProcessGroupNCCL::pointToPoint: "For
    single P2P, preserve the old two-rank behavior"), so NCCL sizes the peer's channels for two
    ranks, not for the whole group."""
    multi = g.domain_span > 1
    size = np.minimum(g.size, 2)
    return GroupArrays(size=size, ranks_per_domain=np.where(multi, 1, size), domain_span=np.where(multi, 2, 1),
                       same_rail=g.same_rail, extent_domains=np.where(multi, g.extent_domains, 1),
                       tier=np.where(multi, g.tier, TIER_HB))


def pipeline_pair(pp, stride, repeated, system: ClusterSystem) -> GroupArrays:
    """The pair of consecutive stages whose sends pace the pipeline: the worst such pair. Stages
    `stride` ranks apart sit k/stride to a domain where the stride divides the domain k; a pipeline of
    more stages than that (or, where pipelines repeat inside a domain, `repeated`, one whose stages
    do not tile the domain) has a pair on either side of a domain boundary, and every microbatch
    crosses it, so that pair's send over the scale-out network paces the pipeline's hops."""
    pp = np.asarray(pp, np.int64)
    stride = np.asarray(stride, np.int64)
    g = group_shape(np.minimum(pp, 2), stride, system)
    k = system.hb.size
    nested = (k % np.maximum(stride, 1) == 0) & (stride % k != 0)
    lane = np.maximum(k // np.maximum(stride, 1), 1)
    crossing = nested & (pp > 1) & ((pp > lane) | (np.asarray(repeated, bool) & (lane % np.maximum(pp, 1) != 0)))
    # a stride below the domain that does not divide it puts some stage's ranks within a stride of a
    # boundary as soon as the job spans more than one domain
    irregular = ~nested & (stride % k != 0) & (stride < k) & (pp > 1)
    crossing = crossing | (irregular & (system.n_gpus > k))
    ones, twos = np.ones_like(pp), 2 * np.ones_like(pp)
    # otherwise every pair sits inside a domain (the pairs are consecutive stages, not blocks, so the
    # block rule of _group_shape does not apply to them)
    pair = np.minimum(pp, 2)
    inside = GroupArrays(size=pair, ranks_per_domain=pair, domain_span=ones, same_rail=np.ones(pp.shape, bool),
                         extent_domains=ones, tier=np.full(pp.shape, TIER_HB))
    g = merge_groups(g, inside, (nested | (irregular & (system.n_gpus <= k))) & ~crossing)
    if not np.any(crossing):
        return g
    crossed = GroupArrays(size=twos, ranks_per_domain=ones, domain_span=twos, same_rail=np.zeros(pp.shape, bool),
                          extent_domains=twos, tier=tier_for(twos, np.zeros(pp.shape, bool), system))
    return merge_groups(g, crossed, crossing)


def gradient_group(cp, dp, cp_stride, dp_stride, cp_group: GroupArrays, dp_group: GroupArrays,
                   system: ClusterSystem) -> GroupArrays:
    """The DP×CP group dense gradients are reduced over (Megatron averages over CP ranks too).

    Where one of the two is 1 it is the other's group. Where DP's stride is CP's block (the default
    order, tp-cp-dp-pp) it is one contiguous group of cp·dp ranks at CP's stride. Otherwise (tp-cp-pp-dp
    with both above 1) it is DP's groups of CP blocks: each block of cp ranks sits where DP puts one
    member, so a domain holding m DP members holds m CP blocks when a block fits in it, and the
    group reaches as far as DP's group does."""
    cp, dp = np.asarray(cp, np.int64), np.asarray(dp, np.int64)
    contiguous = group_shape(cp * dp, cp_stride, system)
    block_in_domain = cp_group.domain_span <= 1
    rpd = np.where(block_in_domain, cp_group.size * dp_group.ranks_per_domain, cp_group.ranks_per_domain)
    span = np.where(block_in_domain, dp_group.domain_span, cp_group.domain_span * dp_group.domain_span)
    extent_ranks = np.asarray(dp_stride) * (dp - 1) + np.asarray(cp_stride) * (cp - 1) + 1
    extent = np.maximum(-(-extent_ranks // system.hb.size), span)
    same_rail = dp_group.same_rail & (block_in_domain | cp_group.same_rail)
    tier = np.where(span <= 1, TIER_HB, np.maximum(tier_for(extent, same_rail, system), dp_group.tier))
    composed = GroupArrays(size=cp * dp, ranks_per_domain=rpd, domain_span=span, same_rail=same_rail,
                           extent_domains=extent, tier=tier)
    use_dp = cp == 1
    use_cp = (dp == 1) & ~use_dp
    use_contiguous = (np.asarray(dp_stride) == np.asarray(cp_stride) * cp) & ~use_dp & ~use_cp
    out = merge_groups(composed, contiguous, use_contiguous)
    out = merge_groups(out, cp_group, use_cp)
    return merge_groups(out, dp_group, use_dp)


def hsdp_groups(shard, tp, cp, dp, pp, system: ClusterSystem, order_code=None) -> tuple[GroupArrays, GroupArrays]:
    """HSDP's shard group (the first `shard` members of the DP×CP gradient group, in its rank order,
    CP innermost) and its replica group (one member of each shard group), per strategy.

    In the default order (tp-cp-dp-pp) the DP×CP group is contiguous at stride tp: a shard group is
    `shard` consecutive members at stride tp, its replicas tp·shard apart. Under tp-cp-pp-dp the DP
    members sit tp·cp·pp apart and each holds a block of cp ranks: a shard group of cp·k members is k
    DP members' blocks (gradient_group of cp and k), its replicas k DP members apart; a shard group
    inside one CP block is `shard` ranks at stride tp, its replicas the rest of the block's slices
    and every DP member."""
    shard = np.asarray(shard, np.int64)
    tp, cp, dp, pp = (np.asarray(x, np.int64) for x in (tp, cp, dp, pp))
    n_rep = np.maximum((cp * dp) // np.maximum(shard, 1), 1)
    default = (group_shape(shard, tp, system), group_shape(n_rep, tp * shard, system))
    if order_code is None or not np.any(np.asarray(order_code) == 1):
        return default
    st = strides(tp, cp, dp, pp, ORDERS[1])
    cp_group = group_shape(cp, st["cp"], system)
    k = np.maximum(shard // np.maximum(cp, 1), 1)
    across = gradient_group(cp, k, st["cp"], st["dp"], cp_group, group_shape(k, st["dp"], system), system)
    across_rep = group_shape(np.maximum(dp // k, 1), st["dp"] * k, system)
    slices = np.maximum(cp // np.maximum(shard, 1), 1)
    inside = group_shape(shard, st["cp"], system)
    slice_group = group_shape(slices, st["cp"] * shard, system)
    inside_rep = gradient_group(slices, dp, st["cp"] * shard, st["dp"], slice_group, group_shape(dp, st["dp"], system),
                                system)
    in_block = shard < cp
    other = (merge_groups(across, inside, in_block), merge_groups(across_rep, inside_rep, in_block))
    # a shard group that neither holds whole CP blocks nor divides one cuts blocks unevenly: priced
    # as the contiguous run of the default order (its size right, its reach approximate)
    regular = (shard % np.maximum(cp, 1) == 0) | (cp % np.maximum(shard, 1) == 0)
    use = (np.asarray(order_code) == 1) & regular
    return merge_groups(default[0], other[0], use), merge_groups(default[1], other[1], use)


def merge_groups(a: GroupArrays, b: GroupArrays, use_b) -> GroupArrays:
    """Per strategy, b's shape where use_b, else a's."""
    return GroupArrays(**{f: np.where(use_b, getattr(b, f), getattr(a, f)) for f in GroupArrays.__dataclass_fields__})


def place(tp, cp, dp, pp, ep, system: ClusterSystem, order=DEFAULT_ORDER, etp=1, order_code=None) -> Placement:
    """Group shapes for a rank order (a tuple, or per strategy `order_code` into ORDERS).

    Expert groups follow Megatron-Core's expert rank generator (tp-ep-dp inside a pipeline stage,
    expert tensor parallelism innermost): the EP group strides over etp, so with etp = 1 it packs
    into consecutive ranks -- inside the HB domain where it fits -- folding over TP and CP ranks;
    the expert-data-parallel group strides over etp·ep."""
    if order_code is not None:
        oc = np.asarray(order_code)
        a = place(tp, cp, dp, pp, ep, system, ORDERS[0], etp)
        if not np.any(oc == 1):
            return a
        b = place(tp, cp, dp, pp, ep, system, ORDERS[1], etp)
        return Placement(**{f: merge_groups(getattr(a, f), getattr(b, f), oc == 1) for f in Placement.__dataclass_fields__})
    st = strides(tp, cp, dp, pp, order)
    tp = np.asarray(tp, np.int64)
    cp = np.asarray(cp, np.int64)
    dp = np.asarray(dp, np.int64)
    pp = np.asarray(pp, np.int64)
    ep = np.asarray(ep, np.int64)
    etp = np.asarray(etp, np.int64)
    stage_ranks = tp * cp * dp
    cp_group = group_shape(cp, st["cp"], system)
    dp_group = group_shape(dp, st["dp"], system)
    return Placement(
        tp=group_shape(tp, st["tp"], system),
        cp=cp_group,
        cp_ring=ring_neighbours(cp_group),
        dp=dp_group,
        grad=gradient_group(cp, dp, st["cp"], st["dp"], cp_group, dp_group, system),
        pp=pipeline_pair(pp, st["pp"], (tuple(order).index("pp") < tuple(order).index("dp")) & (dp > 1), system),
        ep=group_shape(ep, etp, system),
        # Megatron-Core's expert generator keeps the dense order's place for pp: under tp-cp-pp-dp
        # (--use-tp-pp-dp-mapping, order tp-cp-ep-pp-dp) the expert data-parallel ranks sit outside
        # the pipeline, etp·ep·pp apart (parallel_state.py initialize_model_parallel, expert_order)
        expert_dp=group_shape(np.maximum(stage_ranks // np.maximum(ep * etp, 1), 1),
                              etp * ep * (pp if tuple(order).index("pp") < tuple(order).index("dp") else 1), system),
        expert_tp=group_shape(etp, np.ones_like(etp), system),
    )
