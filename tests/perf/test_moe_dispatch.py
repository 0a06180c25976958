"""The deduplicated MoE dispatch (DeepEP-style) against DeepEP's published normal-kernel bandwidths,
the per-expert dispatch against its published low-latency kernels, and the traffic on rail-only,
rail-optimized and thin-spine fabrics. Run with -s for the table."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from designer import units
from designer.perf import collectives as coll
from designer.spec.catalog import load_catalog
from designer.spec.system import ClusterSystem, HBDomain, NetworkTier
from tests.perf.systems import cluster

DATA = yaml.safe_load((Path(__file__).parent / "data" / "deepep_normal_kernels.yaml").read_text())
CAL = coll.load_collective_calibration()
FP8 = 1.0 + 4.0 / 128
TOL = 0.20  # the collective-fidelity target for dispatch/combine bandwidths


def _h800(n_gpus: int) -> ClusterSystem:
    s = DATA["setup"]
    gpu = load_catalog().gpu(s["gpu"])
    nic = units.gbps_to_bytes_per_s(s["nic_gbps_per_gpu"])
    n_dom = max(n_gpus // s["gpus_per_node"], 1)
    tiers = (NetworkTier(name="leaf", span_domains=n_dom, cross_rail=False, bandwidth_per_gpu_bytes_per_s=nic),
             NetworkTier(name="spine", span_domains=n_dom, cross_rail=True, bandwidth_per_gpu_bytes_per_s=nic))
    return ClusterSystem(gpu=gpu.perf(), n_gpus=max(n_gpus, 8),
                         hb=HBDomain(size=s["gpus_per_node"], bandwidth_per_gpu_bytes_per_s=gpu.hb_gb_per_s_per_direction * 1e9),
                         nic_bandwidth_per_gpu_bytes_per_s=nic, tiers=tiers)


def _reported(ep: int, bytes_per_element: float) -> float:
    """DeepEP's bandwidth figure for one kernel, as its test counts it (the data file's header)."""
    s = DATA["setup"]
    g = s["gpus_per_node"]
    n_dom = max(ep // g, 1)
    d = float(coll.expected_distinct_domains(s["experts"], s["top_k"], n_dom, s["max_nodes_per_token"]))
    ranks = coll.expected_distinct_ranks(s["experts"], s["top_k"], n_dom, min(g, ep), s["max_nodes_per_token"])
    token_bytes = s["tokens"] * s["hidden"] * bytes_per_element
    e = coll.moe_dispatch_estimate_vec(token_bytes, ranks, d, ep, min(g, ep), n_dom, _h800(ep), CAL)
    # test_internode.py counts the tokens sent to distinct nodes; test_intranode.py the tokens a rank
    # receives, one per destination rank, its own included
    counted = token_bytes * d if n_dom > 1 else token_bytes * ranks
    return counted / float(e.time_s) / 1e9


@pytest.mark.parametrize("row", DATA["rows"], ids=lambda r: f"ep{r['ep']}")
def test_deepep_normal_kernels_within_twenty_percent(row):
    disp = _reported(row["ep"], FP8)
    comb = _reported(row["ep"], 2.0)
    print(f"\nEP {row['ep']:>2} ({row['link']}): dispatch {row['dispatch_gb_per_s']} measured, {disp:.1f} designer "
          f"({disp / row['dispatch_gb_per_s'] - 1:+.0%}); combine {row['combine_gb_per_s']} measured, {comb:.1f} "
          f"designer ({comb / row['combine_gb_per_s'] - 1:+.0%})")
    assert disp == pytest.approx(row["dispatch_gb_per_s"], rel=TOL)
    assert comb == pytest.approx(row["combine_gb_per_s"], rel=TOL)


def test_expected_distinct_nodes_by_hand():
    # 256 experts over 2 nodes, top-8: a token misses a node with probability C(128, 8)/C(256, 8)
    from math import comb

    want = 2 * (1 - comb(128, 8) / comb(256, 8))
    assert float(coll.expected_distinct_domains(256, 8, 2)) == pytest.approx(want, rel=1e-12)
    assert float(coll.expected_distinct_domains(256, 8, 8, 4)) == 4.0  # node-limited routing
    # distinct ranks: 16 ranks of 16 experts each miss a token with probability C(240, 8)/C(256, 8);
    # limited to 4 of 8 nodes, the 8 experts come from those nodes' 128 on 32 ranks (4 each)
    assert coll.expected_distinct_ranks(256, 8, 2, 8) == pytest.approx(16 * (1 - comb(240, 8) / comb(256, 8)), rel=1e-12)
    assert coll.expected_distinct_ranks(256, 8, 8, 8, 4) == pytest.approx(32 * (1 - comb(124, 8) / comb(128, 8)),
                                                                         rel=1e-12)
    # limited to one node that holds one of Mixtral's 8 experts (EP 8, one GPU per node), a top-2
    # token must reach two: both ranks
    assert coll.expected_distinct_ranks(8, 2, 8, 1, 1) == pytest.approx(2.0)
    # a rank holding all of a domain's experts: ranks are domains
    assert coll.expected_distinct_ranks(256, 8, 8, 1) == pytest.approx(float(coll.expected_distinct_domains(256, 8, 8)))


def _megatron_group_limited_reach(experts, top_k, groups, group_topk, domains, ranks_per_domain, tokens=20_000):
    """Megatron-Core's group_limited_topk (moe_utils.py) run on random router scores: each group
    scored by the sum of its top (k // group_topk) scores, the best group_topk groups kept, the top-k
    experts taken among theirs; returns the mean distinct domains and ranks the tokens reach, the
    experts laid out contiguously over the ranks."""
    rng = np.random.default_rng(7)
    scores = rng.random((tokens, experts))
    per_group = np.sort(scores.reshape(tokens, groups, -1), axis=-1)[:, :, -(top_k // group_topk):].sum(-1)
    kept = np.argsort(-per_group, axis=1)[:, :group_topk]
    mask = np.zeros((tokens, groups), bool)
    np.put_along_axis(mask, kept, True, axis=1)
    masked = np.where(np.repeat(mask, experts // groups, axis=1), scores, -1.0)
    chosen = np.argsort(-masked, axis=1)[:, :top_k]
    rank = chosen // (experts // (domains * ranks_per_domain))
    distinct = lambda a: np.mean([len(set(row)) for row in a.tolist()])  # noqa: E731
    return distinct(rank // ranks_per_domain), distinct(rank)


@pytest.mark.parametrize("experts,top_k,groups,group_topk,domains,ranks_per_domain", [
    (256, 8, 8, 4, 8, 8),    # DeepSeek-V3 at EP 64 over 8 HGX nodes: a group per node
    (256, 8, 8, 4, 4, 8),    # EP 32 over 4 nodes: two groups per node
    (256, 8, 8, 4, 1, 8),    # EP 8 in one node: a group per GPU
    (256, 8, 8, 4, 1, 64),   # EP 64 in one NVL72 domain: 8 GPUs per group
    (256, 8, 8, 4, 16, 8),   # EP 128 over 16 nodes: a group across two nodes
    (160, 6, 8, 3, 1, 8),    # DeepSeek-V2 at EP 8
    (160, 6, 8, 3, 4, 8),    # DeepSeek-V2 at EP 32 over 4 nodes
    (256, 8, 8, 8, 8, 8),    # every group kept: no limit at all
    (256, 8, 16, 8, 8, 8),   # one expert from each of 8 kept groups of 16: a limit that binds little
])
def test_group_limited_reach_follows_megatron_routing(experts, top_k, groups, group_topk, domains, ranks_per_domain):
    sim_d, sim_r = _megatron_group_limited_reach(experts, top_k, groups, group_topk, domains, ranks_per_domain)
    d, r = (float(x) for x in coll.routing_reach(experts, top_k, domains, ranks_per_domain,
                                                 groups=(groups, group_topk)))
    print(f"\n{experts} experts top-{top_k}, {group_topk} of {groups} groups, {domains} x {ranks_per_domain}: "
          f"domains {d:.3f} (Megatron's routing {sim_d:.3f}), ranks {r:.3f} ({sim_r:.3f})")
    assert d == pytest.approx(sim_d, rel=0.07)
    assert r == pytest.approx(sim_r, rel=0.07)


def test_group_limited_reach_by_hand():
    from math import comb

    # a group per node (DeepSeek-V3 at EP 64 on 8 nodes): the 4 kept groups are 4 nodes; in each, 2
    # experts of 32 on 8 GPUs of 4 experts miss a GPU with probability C(28, 2)/C(32, 2)
    d, r = coll.routing_reach(256, 8, 8, 8, groups=(8, 4))
    assert float(d) == pytest.approx(4.0)
    assert float(r) == pytest.approx(32 * (1 - comb(28, 2) / comb(32, 2)), rel=1e-12)
    # two groups per node (EP 32 on 4 nodes): a node is missed when neither of its groups is kept
    d, _ = coll.routing_reach(256, 8, 4, 8, groups=(8, 4))
    assert float(d) == pytest.approx(4 * (1 - comb(6, 4) / comb(8, 4)), rel=1e-12)
    # a group per GPU (EP 8): every kept group's GPU is reached, so 4 GPUs, where an ungrouped router
    # reaches 8 (1 - C(224, 8)/C(256, 8))
    _, r = coll.routing_reach(256, 8, 1, 8, groups=(8, 4))
    assert float(r) == pytest.approx(4.0)
    assert float(coll.routing_reach(256, 8, 1, 8)[1]) == pytest.approx(8 * (1 - comb(224, 8) / comb(256, 8)))
    # one expert per rank (EP 256): the 8 experts are 8 ranks, however they are grouped
    assert float(coll.routing_reach(256, 8, 4, 64, groups=(8, 4))[1]) == pytest.approx(8.0)
    with pytest.raises(ValueError, match="at most one"):
        coll.routing_reach(256, 8, 8, 8, 4, groups=(8, 4))


def test_a_model_states_its_router_groups():
    from pydantic import ValidationError

    from designer.spec.llm import MoESpec
    from designer.spec.models import load_model

    for name, want in (("deepseek-v3", (8, 4)), ("deepseek-v2", (8, 3)), ("kimi-k2", None), ("qwen3-235b-a22b", None)):
        assert load_model(name).moe.routing_groups == want
    base = dict(experts=256, top_k=8, expert_ffn_size=2048)
    # one group, or every group kept: the ungrouped top-k
    assert MoESpec(**base, router_groups=1, router_group_topk=1).routing_groups is None
    assert MoESpec(**base, router_groups=8, router_group_topk=8).routing_groups is None
    for bad, needle in ((dict(router_groups=8), "both are required"), (dict(router_groups=6, router_group_topk=2), "divide"),
                        (dict(router_groups=8, router_group_topk=9), "at most router_groups 8"),
                        (dict(router_groups=64, router_group_topk=1), "at most router_group_topk 1 x 4"),
                        (dict(router_groups=32, router_group_topk=16), "at least router_group_topk 16"),
                        (dict(router_groups=8, router_group_topk=4, max_nodes_per_token=4), "at most one")):
        with pytest.raises(ValidationError, match=needle):
            MoESpec(**base, **bad)


def test_dispatch_stays_on_the_rails():
    # the RDMA phase goes to the GPU of the same local index: rail-only, a full fat-tree and one with
    # a thin spine give the same time and no spine bytes, where a uniform all-to-all needs the
    # spine (or HB forwarding on rail-only)
    kw = dict(token_bytes=4096 * 7168 * 2.0, rank_copies=coll.expected_distinct_ranks(256, 8, 8, 8, 4),
              distinct_domains=4.0, size=64, ranks_per_domain=8,
              domain_span=8, calib=CAL)
    times = []
    for sy in (cluster("h100_sxm", 64, rail_only=True), cluster("h100_sxm", 64),
               cluster("h100_sxm", 64, spine_bw_scale=0.25)):
        e = coll.moe_dispatch_estimate_vec(system=sy, **kw)
        assert float(e.spine_bytes) == 0.0 and float(e.rail_bytes) > 0
        times.append(float(e.time_s))
    assert times[0] == pytest.approx(times[1], rel=1e-12) == pytest.approx(times[2], rel=1e-12)
    thin = cluster("h100_sxm", 64, spine_bw_scale=0.25)
    a2a = coll.collective_estimate_vec("all_to_all", 4096 * 7168 * 2.0 * 8, 64, 8, 8, False, thin, CAL)
    assert float(a2a.time_s) > times[2]


def test_allgather_dispatcher_by_hand():
    # Mixtral 8x7B on 8 H100s, EP 8 x DP 8: per MoE layer and microbatch the allgather dispatcher
    # gathers the group's 8 x 4096 tokens of 4096 BF16 and reduce-scatters the combine, forward, and
    # the mirrors backward: 2 all-gathers + 2 reduce-scatters of n = 8 · 4096 · 4096 · 2 B
    import numpy as np

    from designer.perf.iteration import iteration_arrays
    from designer.perf.model import load_perf_calibration
    from designer.perf.records import StrategyArrays
    from designer.spec.llm import Strategy, TrainingSpec
    from designer.spec.models import load_model

    llm = load_model("mixtral-8x7b")
    tr = TrainingSpec(sequence_length=4096, global_batch_sequences=16, total_tokens=1e9)
    sy = cluster("h100_sxm", 8)
    calib = load_perf_calibration()
    st = Strategy(dp=8, ep=8, zero_stage=1, moe_dispatcher="allgather")
    out = iteration_arrays(llm, tr, StrategyArrays.from_strategies([st]), sy, calib)
    shape = coll.GroupShape(size=8, ranks_per_domain=8, domain_span=1, same_rail=True)
    n = 8 * 4096 * llm.hidden_size * 2.0 * llm.moe.capacity_factor
    per_layer = 2 * (coll.collective_time_s("all_gather", n, shape, sy, calib.collectives)
                     + coll.collective_time_s("reduce_scatter", n, shape, sy, calib.collectives))
    m = 16 // 8
    assert float(np.asarray(out["ep_s"]).ravel()[0]) == pytest.approx(m * llm.layers * per_layer, rel=1e-9)


LOW_LATENCY = yaml.safe_load((Path(__file__).parent / "data" / "deepep_low_latency_kernels.yaml").read_text())


@pytest.mark.parametrize("row", LOW_LATENCY["rows"], ids=lambda r: f"ep{r['ep']}")
def test_deepep_low_latency_kernels_within_twenty_percent(row):
    # one copy per (token, expert): the per-expert estimate, nothing fitted to this table
    s = LOW_LATENCY["setup"]
    ep, g = row["ep"], s["gpus_per_node"]
    copies = s["tokens"] * s["top_k"]
    sy = _h800(ep)
    out = []
    for kind, copy_bytes in (("dispatch", coll.low_latency_copy_bytes(s["hidden"], fp8=True)),
                             ("combine", coll.low_latency_copy_bytes(s["hidden"], fp8=False))):
        t = float(coll.moe_per_expert_dispatch_estimate_vec(copy_bytes, copies, ep, min(g, ep), max(ep // g, 1), sy,
                                                             CAL).time_s)
        # the published bandwidth is the same bytes over the published time
        assert copies * copy_bytes / (row[f"{kind}_us"] * 1e-6) / 1e9 == pytest.approx(row[f"{kind}_gb_per_s"], rel=0.03)
        out.append((kind, row[f"{kind}_us"], t * 1e6))
    print(f"\nEP {ep:>3}: " + "; ".join(f"{k} {m} us measured, {d:.0f} designer ({d / m - 1:+.0%})" for k, m, d in out))
    for kind, measured, designer in out:
        assert designer == pytest.approx(measured, rel=TOL), kind


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 6), st.integers(0, 6), st.integers(0, 3), st.integers(1, 16), st.one_of(st.none(), st.integers(1, 8)))
def test_distinct_ranks_are_finite_and_bounded(log_domains, log_ranks, log_experts_per_rank, top_k, max_domains):
    """Whatever the placement and the node limit, a token reaches at least one rank, at most top-k,
    and no more ranks than there are: finite, and no fewer distinct ranks on wider domains."""
    n, g = 2 ** log_domains, 2 ** log_ranks
    experts = n * g * 2 ** log_experts_per_rank
    k = min(top_k, experts)
    r = coll.expected_distinct_ranks(experts, k, n, g, max_domains)
    assert np.isfinite(r) and 1.0 - 1e-9 <= r <= min(k, n * g) + 1e-9
    if max_domains is None:
        wider = coll.expected_distinct_ranks(experts * 2, k, n, g * 2)
        assert wider >= r - 1e-9
    d, copies = coll.routing_reach(experts, k, n, g, max_domains)
    assert float(copies) == pytest.approx(r) and 1.0 - 1e-9 <= float(d) <= min(n, k) + 1e-9


def test_per_expert_copies_within_one_rail_stay_on_it():
    # EP 16 with one GPU in each of 16 HGX nodes, all at the same local index: every copy goes to a
    # GPU on the sender's rail, under its leaf. A rail-only network carries them, as fast as the
    # rail-optimized fat-tree does (the same leaf), and an oversubscribed spine does not slow them;
    # spread over the local indices (not one rail) they cross rails, which rail-only cannot carry
    from designer.perf import collectives as coll

    cb = coll.low_latency_copy_bytes(7168, True)
    fat = cluster("h100_sxm", 1024)
    rail_only = cluster("h100_sxm", 1024, rail_only=True)
    thin = cluster("h100_sxm", 1024, spine_bw_scale=0.25)
    t = {name: float(coll.moe_per_expert_dispatch_estimate_vec(cb, 1024, 16, 1, 16, sy, CAL, same_rail=True).time_s)
         for name, sy in (("fat", fat), ("rail_only", rail_only), ("thin", thin))}
    assert np.isfinite(t["rail_only"])
    assert t["rail_only"] == pytest.approx(t["fat"], rel=1e-12)
    assert t["thin"] == pytest.approx(t["fat"], rel=1e-12)
    assert np.isinf(float(coll.moe_per_expert_dispatch_estimate_vec(cb, 1024, 16, 1, 16, rail_only, CAL).time_s))
