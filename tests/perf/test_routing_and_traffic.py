"""Channel cap, PXN routing with a cross-rail tier, algorithm-aware pair counts and per-type bytes."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from designer.perf.collectives import (
    ALGORITHMS,
    collective_estimate_vec,
    load_collective_calibration,
    peers_per_rank,
)
from designer.perf.model import evaluate_system
from designer.perf.records import TypeBytes
from designer.spec.catalog import load_catalog
from designer.spec.llm import Recompute, Strategy, TrainingSpec
from designer.spec.models import load_model
from designer.spec.system import ClusterSystem, HBDomain, NetworkTier

from tests.perf.systems import cluster

NIC = 50e9  # 400 Gb/s per GPU
HB = 900e9


@pytest.fixture(scope="module")
def calib():
    return load_collective_calibration()


@pytest.fixture(scope="module")
def gpu():
    return load_catalog().gpu("h100_sxm").perf()


def _rails(gpu, n_gpus, k, spine_ratio=None, hb_bw=HB):
    """Rails spanning every domain (rail-only); with spine_ratio, plus a cross-rail spine at r:1 on top
    (r = 1: full bisection)."""
    n_dom = n_gpus // k
    tiers = (NetworkTier(name="rail", span_domains=n_dom, cross_rail=False, bandwidth_per_gpu_bytes_per_s=NIC),)
    if spine_ratio is not None:
        tiers += (NetworkTier(name="spine", span_domains=n_dom, cross_rail=True, bandwidth_per_gpu_bytes_per_s=NIC,
                              oversubscription=spine_ratio),)
    return ClusterSystem(gpu=gpu, n_gpus=n_gpus, hb=HBDomain(size=k, bandwidth_per_gpu_bytes_per_s=hb_bw),
                         nic_bandwidth_per_gpu_bytes_per_s=NIC, tiers=tiers,
                         family="rail-optimized" if spine_ratio is not None else "rail-only")


# ---- 1. channel cap


def test_channel_cap_in_calibration(calib):
    assert calib.max_channels == 32 and "MAXCHANNELS" in calib.sources["max_channels"]


@pytest.mark.parametrize("op", ["all_gather", "all_reduce"])
def test_cross_domain_ring_does_not_slow_down_in_large_domains(calib, gpu, op):
    """A ring over p GPUs spread over domains of g: at most max_channels channels, so per-channel
    bandwidth and the pipeline fill stay bounded as g grows (before the cap, g channels made the ring
    up to 1.9x slower at g = 512 than at g = 32)."""
    p, sizes = 4096, 2.0 ** np.arange(20, 34, 2)

    def times(cal):
        return np.array([collective_estimate_vec(op, sizes, p, g, p // g, True, _rails(gpu, p, g), cal,
                                                 algorithms=("ring",)).time_s for g in (32, 64, 128, 256, 512)])

    t = times(calib)
    assert np.all(t / t[0] <= 1.01)
    uncapped = times(calib.model_copy(update={"max_channels": 10**6}))
    assert np.max(uncapped / uncapped[0]) > 1.5  # what the cap removes


# ---- 2. PXN: forwarding over the HB domain as an alternative to a cross-rail tier

SIZES = 2.0 ** np.arange(10, 36, 2)  # 1 KiB .. 16 GiB


@pytest.mark.parametrize("n_gpus,k", [(1024, 8), (4096, 64), (32768, 256)])
def test_thin_spine_never_slower_than_rail_only_all_to_all(calib, gpu, n_gpus, k):
    """Uniform all-to-all (every GPU to every GPU, and EP-like groups across domains, same rail or
    not): rail-only + a thin spine at r:1 (r = 2, 4, 8) is never slower than rail-only, and the
    full-bisection spine (1:1) never slower than the thin one."""
    n_dom = n_gpus // k
    shapes = [(n_gpus, k, True), (2 * n_dom, 2, False), (n_dom, 1, False), (8 * n_dom, 8, True), (64, 8, False)]
    for p, g, same_rail in shapes:
        span = n_dom
        ro = collective_estimate_vec("all_to_all", SIZES, p, g, span, same_rail, _rails(gpu, n_gpus, k), calib).time_s
        prev = ro
        for r in (8.0, 4.0, 2.0, 1.0):
            t = collective_estimate_vec("all_to_all", SIZES, p, g, span, same_rail, _rails(gpu, n_gpus, k, r),
                                        calib).time_s
            assert np.all(t <= ro * (1 + 1e-12)), (p, g, same_rail, r)
            assert np.all(t <= prev * (1 + 1e-12)), (p, g, same_rail, r)
            prev = t


@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "reduce_scatter", "send_recv", "broadcast"])
def test_thin_spine_never_slower_than_rail_only_cross_rail_groups(calib, gpu, op):
    """Groups whose members in different domains sit on different rails: the spine is used only
    when it beats forwarding over NVLink onto the destination's rail (PXN)."""
    n_gpus, k = 4096, 64
    n_dom = n_gpus // k
    for p, g in ((128, 2), (64, 1), (64, 8)):
        ro = collective_estimate_vec(op, SIZES, p, g, n_dom, False, _rails(gpu, n_gpus, k), calib).time_s
        prev = ro
        for r in (8.0, 4.0, 2.0, 1.0):
            t = collective_estimate_vec(op, SIZES, p, g, n_dom, False, _rails(gpu, n_gpus, k, r), calib).time_s
            assert np.all(t <= ro * (1 + 1e-12)) and np.all(t <= prev * (1 + 1e-12)), (op, p, g, r)
            prev = t


def test_thin_spine_is_bypassed_and_a_fast_one_used(calib, gpu):
    """At 8:1 a cross-rail ring forwards over NVLink (no spine bytes, the forwarded bytes on HB); with
    a spine at full bisection and slow NVLink, the spine carries it."""
    n_gpus, k, n = 4096, 64, 2.0**30
    thin = collective_estimate_vec("all_gather", n, 64, 1, 64, False, _rails(gpu, n_gpus, k, 8.0), calib)
    assert thin.spine_bytes == 0 and thin.hb_bytes > 0
    slow_hb = _rails(gpu, n_gpus, k, 1.0, hb_bw=20e9)
    fat = collective_estimate_vec("all_gather", n, 64, 1, 64, False, slow_hb, calib)
    assert fat.spine_bytes > 0 and fat.hb_bytes == 0


def test_iteration_on_thin_spine_never_slower_than_rail_only(gpu):
    """End to end: an EP layout whose all-to-all crosses rails, and a DP layout on rails."""
    llm = load_model("deepseek-v3-like")
    tr = TrainingSpec(sequence_length=4096, global_batch_sequences=1024, total_tokens=1e12)
    st = Strategy(tp=1, pp=8, dp=64, ep=64, microbatch_size=1, recompute=Recompute.full, zero_stage=1)
    ro = evaluate_system(llm, tr, st, _rails(gpu, 512, 8))
    times = [evaluate_system(llm, tr, st, _rails(gpu, 512, 8, r)).iteration_time_s for r in (8.0, 4.0, 2.0, 1.0)]
    assert all(t <= ro.iteration_time_s * (1 + 1e-12) for t in times)
    assert all(b <= a * (1 + 1e-12) for a, b in zip(times, times[1:]))


# ---- 3. pair counts


def test_peers_per_rank(gpu):
    sy = _rails(gpu, 4096, 64)
    p, g = 1024, 16  # 64 domains
    a = lambda name: ALGORITHMS.index(name)  # noqa: E731
    got = {name: float(peers_per_rank(a(name), p, g, sy)) for name in
           ("ring", "tree", "nvls_tree", "hierarchical", "pairwise", "two_phase", "p2p", "none", "bruck",
            "recursive_doubling")}
    assert got == {"ring": 2, "tree": 2 + 4, "nvls_tree": 15 + 4, "hierarchical": 2 + 2, "pairwise": 1023,
                   "two_phase": 15 + 63, "p2p": 1, "none": 0, "bruck": 20, "recursive_doubling": 10}
    assert float(peers_per_rank(a("ring"), 2, 2, sy)) == 1  # never more than p - 1
    np.testing.assert_array_equal(peers_per_rank(np.array([a("ring"), a("pairwise")]), np.array([8, 8]), 8, sy), [2, 7])


def test_algorithm_pair_fraction_below_flat():
    llm = load_model("gpt3-175b")
    tr = TrainingSpec(sequence_length=2048, global_batch_sequences=1536, total_tokens=300e9)
    st = Strategy(tp=8, pp=8, dp=16, microbatch_size=1, sequence_parallel=True, recompute=Recompute.selective)
    m = evaluate_system(llm, tr, st, cluster("h100_sxm", 1024, rail_only=True))
    flat, alg = m.traffic.pair_fraction_flat, m.traffic.pair_fraction_algorithm
    # flat: 7 TP + 15 DP + 2 pipeline neighbours of 1023
    assert flat == pytest.approx((7 + 15 + 2) / 1023)
    assert 0 < alg <= flat and 1 - alg > 0.99
    row = m.row()
    assert row["traffic_pair_fraction_flat"] == flat and row["traffic_pair_fraction_algorithm"] == alg


# ---- 4. bytes by traffic type


@pytest.mark.parametrize("rail_only", [False, True])
def test_type_bytes_add_up_to_tier_bytes(rail_only):
    llm = load_model("deepseek-v3-like")
    tr = TrainingSpec(sequence_length=4096, global_batch_sequences=1024, total_tokens=1e12)
    st = Strategy(tp=2, pp=4, dp=64, ep=32, microbatch_size=1, recompute=Recompute.full, zero_stage=1,
                  sequence_parallel=True)
    m = evaluate_system(llm, tr, st, cluster("h100_sxm", 512, rail_only=rail_only))
    tb, ty = m.tier_bytes, m.type_bytes
    for level in TypeBytes.LEVELS:
        total = sum(getattr(ty, f"{t}_{level}_bytes") for t in TypeBytes.TYPES)
        assert total == pytest.approx(getattr(tb, f"{level}_bytes"), rel=1e-12, abs=1e-6)
    for t in ("tp", "pp", "dp", "ep"):
        assert ty.total_bytes(t) > 0, t
    assert ty.cp_hb_bytes == ty.cp_rail_bytes == ty.cp_spine_bytes == 0  # cp = 1
    assert ty.tp_rail_bytes == ty.tp_spine_bytes == 0  # TP inside the domain
    if rail_only:
        assert ty.ep_spine_bytes == 0
    row = m.row()
    for f in dataclasses.fields(TypeBytes):
        assert row["type_" + f.name] == getattr(ty, f.name)
