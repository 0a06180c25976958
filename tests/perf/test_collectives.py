"""Hand-computed cases and properties of designer.perf.collectives."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from designer.perf.collectives import (
    ALGORITHMS,
    OPS,
    CollectiveCalibration,
    GroupShape,
    collective_estimate,
    collective_estimate_vec,
    collective_time_s,
    collective_time_s_vec,
    for_nccl_version,
    load_collective_calibration,
    p2p_net_channels_bytes_per_s,
)
from designer.spec.study import NcclEnvironment
from designer.spec.system import ClusterSystem, GpuPerf, HBDomain, HBTopology, NetworkTier

GPU = GpuPerf(name="test-gpu", architecture="hopper", peak_flops={"bf16": 1e15}, hbm_bytes=80e9,
              hbm_bandwidth_bytes_per_s=3e12)
CALIB = load_collective_calibration()  # for hypothesis tests, which cannot take function fixtures
ALPHA_HB = 1.5e-6
ALPHA_NET = 4e-6
B_HB = 400e9
B_NET = 50e9


@pytest.fixture(scope="module")
def calib() -> CollectiveCalibration:
    return load_collective_calibration()


@pytest.fixture(scope="module")
def ideal(calib) -> CollectiveCalibration:
    """Efficiencies 1, no NCCL software latencies, no host floor, no pipeline fill: pure alpha-beta,
    with alpha the system's link latencies."""
    zero3 = (0.0, 0.0, 0.0)
    return calib.model_copy(update={
        "hb_link_efficiency": 1.0, "nic_efficiency": 1.0, "pipeline_fill_factor": 0.0,
        "base_latency_s": {k: zero3 for k in calib.base_latency_s},
        "hop_latency_s": {k: v.model_copy(update={"hb": zero3, "net": zero3}) for k, v in calib.hop_latency_s.items()},
        "net_overhead_s": 0.0, "ring_simple_multidomain_latency_factor": 1.0, "host_floor_s": {},
        "ring_network_step_s": 0.0,
        "pat_base_latency_s": 0.0, "pat_per_rank_latency_s": 0.0, "algorithms": ALGORITHMS,
        # p2p channels at NCCL's assumed 14 GB/s each, linearly (no measured sharing)
        "p2p_net_one_channel_bytes_per_s": None, "p2p_net_channel_exponent": 1.0,
    })


def _system(k=8, n_gpus=8, topology=HBTopology.switched, dims=None, tiers=(), nvls=False, nic=B_NET, hb_bw=B_HB):
    return ClusterSystem(gpu=GPU, n_gpus=n_gpus,
                         hb=HBDomain(size=k, bandwidth_per_gpu_bytes_per_s=hb_bw, topology=topology, torus_dims=dims,
                                     latency_s=ALPHA_HB, in_network_reduction=nvls),
                         nic_bandwidth_per_gpu_bytes_per_s=nic, tiers=tiers)


def _one(op, n, shape, system, calib, algo, proto="Simple", **kw):
    return collective_estimate(op, n, shape, system, calib, algorithms=(algo,), protocols=(proto,), **kw)


# ---------------------------------------------------------------- hand-computed (collectives.md §2, §3)


@pytest.mark.parametrize("p", [2, 4, 8])
def test_ring_allreduce_switched(ideal, p):
    n = 64e6
    e = _one("all_reduce", n, GroupShape(size=p, ranks_per_domain=p, domain_span=1, same_rail=True), _system(), ideal, "ring")
    assert e.time_s == pytest.approx(2 * (p - 1) * ALPHA_HB + 2 * (p - 1) / p * n / B_HB, rel=1e-12)
    assert e.hb_bytes == pytest.approx(2 * (p - 1) / p * n) and e.rail_bytes == 0 and e.spine_bytes == 0


def test_recursive_doubling_allreduce(ideal):
    n, p = 1e6, 8
    e = _one("all_reduce", n, GroupShape(size=p, ranks_per_domain=p, domain_span=1, same_rail=True), _system(), ideal,
             "recursive_doubling")
    assert e.time_s == pytest.approx(3 * (ALPHA_HB + n / B_HB), rel=1e-12)  # lg p (alpha + n beta)


def test_rabenseifner_allreduce(ideal):
    n, p = 1e6, 8
    e = _one("all_reduce", n, GroupShape(size=p, ranks_per_domain=p, domain_span=1, same_rail=True), _system(), ideal,
             "rabenseifner")
    assert e.time_s == pytest.approx(2 * 3 * ALPHA_HB + 2 * 7 / 8 * n / B_HB, rel=1e-12)


def test_recursive_doubling_folds_a_non_power_of_two_onto_the_lower_one(ideal):
    # Thakur et al. 2005: 6 ranks fold onto 4 (the 2 extra send their vectors in and get the result
    # back: 2 (alpha + n beta)), which then take lg 4 = 2 steps of alpha + n beta: 4 (alpha + n beta),
    # twice the 4 ranks' time (not lg 6 rounded up, 3 steps, plus the fold)
    n = 1e6

    def t(p):
        return _one("all_reduce", n, GroupShape(size=p, ranks_per_domain=p, domain_span=1, same_rail=True), _system(),
                    ideal, "recursive_doubling").time_s
    assert t(4) == pytest.approx(2 * (ALPHA_HB + n / B_HB), rel=1e-12)
    assert t(6) == pytest.approx(4 * (ALPHA_HB + n / B_HB), rel=1e-12)


@pytest.mark.parametrize("p, g, inter", [(12, 6, 1), (24, 8, 2)])
def test_a_folded_recursive_doubling_still_crosses_its_domains(ideal, p, g, inter):
    # 12 ranks on 2 domains of 6 fold onto 8: 3 steps, one of which must cross the domains (the step
    # the fold saves is an intra-domain one); 24 on 3 domains of 8 fold onto 16: 4 steps, 2 across
    # (joining 3 domains takes ceil(lg 3) = 2). Each step moves the whole vector: n per network step.
    n = 1e6
    system = _system(k=g, n_gpus=p, tiers=(NetworkTier(name="leaf", span_domains=p // g, cross_rail=True,
                                                       bandwidth_per_gpu_bytes_per_s=B_NET, latency_s=ALPHA_NET),))
    e = _one("all_reduce", n, GroupShape(size=p, ranks_per_domain=g, domain_span=p // g, same_rail=True), system,
             ideal, "recursive_doubling")
    assert e.rail_bytes + e.spine_bytes == pytest.approx(inter * n, rel=1e-12)
    assert e.hb_bytes == pytest.approx((math.floor(math.log2(p)) - inter) * n, rel=1e-12)

@pytest.mark.parametrize("p", [6, 8])
def test_bruck_allgather(ideal, p):
    n = 3e6
    e = _one("all_gather", n, GroupShape(size=p, ranks_per_domain=p, domain_span=1, same_rail=True), _system(), ideal, "bruck")
    assert e.time_s == pytest.approx(math.ceil(math.log2(p)) * ALPHA_HB + (p - 1) / p * n / B_HB, rel=1e-12)


def test_bruck_alltoall(ideal):
    n, p = 8e6, 8
    e = _one("all_to_all", n, GroupShape(size=p, ranks_per_domain=p, domain_span=1, same_rail=True), _system(), ideal, "bruck")
    assert e.time_s == pytest.approx(3 * ALPHA_HB + n / 2 * 3 / B_HB, rel=1e-12)  # lg p alpha + n/2 lg p beta


def test_torus_2d_allreduce(ideal):
    """§3.2: T = 2[(X-1)/X n + (Y-1)/Y n/X]/(2B) + 2(X+Y-2) alpha, B the per-link bandwidth."""
    x_dim, y_dim, n = 4, 4, 32e6
    system = _system(k=16, n_gpus=16, topology=HBTopology.torus2d, dims=(x_dim, y_dim))
    b_link = B_HB / 4  # 4 links per GPU share the per-GPU bandwidth
    e = _one("all_reduce", n, GroupShape(size=16, ranks_per_domain=16, domain_span=1, same_rail=True), system, ideal, "torus")
    want = 2 * ((x_dim - 1) / x_dim * n + (y_dim - 1) / y_dim * n / x_dim) / (2 * b_link) + 2 * (x_dim + y_dim - 2) * ALPHA_HB
    assert e.time_s == pytest.approx(want, rel=1e-12)


def test_torus_bucket_allreduce_uses_every_dimension(ideal):
    """Bucket algorithm on a 4 x 4 torus: two halves of the vector run the dimension-ordered
    allreduce starting at X and at Y at once, so each phase keeps both dimensions' links busy:
    T = 2[(X-1)/X n/2 + (Y-1)/Y n/(2X)]/(2B) + 2(X-1 + Y-1) alpha, half the bandwidth term of the
    one-dimension-at-a-time schedule. On a 4 x 2 x 2 torus three thirds run at once; the slowest
    part of each phase (the one on the long dimension) sets it."""
    n = 32e6
    system = _system(k=16, n_gpus=16, topology=HBTopology.torus2d, dims=(4, 4))
    b_link = B_HB / 4
    shape = GroupShape(size=16, ranks_per_domain=16, domain_span=1, same_rail=True)
    e = _one("all_reduce", n, shape, system, ideal, "bucket")
    want = 2 * (3 / 4 * n / 2 + 3 / 4 * n / 8) / (2 * b_link) + 2 * (3 + 3) * ALPHA_HB
    assert e.time_s == pytest.approx(want, rel=1e-12)
    dim_ordered = _one("all_reduce", n, shape, system, ideal, "torus")
    assert e.time_s < dim_ordered.time_s
    s3 = _system(k=16, n_gpus=16, topology=HBTopology.torus3d, dims=(4, 2, 2))
    b3 = B_HB / 6
    e3 = _one("all_reduce", n, shape, s3, ideal, "bucket")
    # phase 0: parts on X (4), Y (2), Z (2) with n/3 each: X is the slowest, 2·3/4·n/3/(2b)
    # phase 1: X-part on Y (n/12), Y-part on Z (n/6), Z-part on X (n/6): the Z-part on X is slowest
    # phase 2: X-part on Z (n/24), Y-part on X (n/12), Z-part on Y (n/24): the Y-part on X
    bw = (2 * 3 / 4 * n / 3 + 2 * 3 / 4 * n / 6 + 2 * 3 / 4 * n / 12) / (2 * b3)
    hops = 2 * (3 + 1 + 1)
    assert e3.time_s == pytest.approx(bw + hops * ALPHA_HB, rel=1e-12)



def test_torus_algorithms_run_on_whole_blocks_only(ideal):
    # 16 GPUs of a 4 x 4 x 4 torus fill a 4 x 4 plane: the bucket and dimension-ordered algorithms
    # run on it. 24 fill no block of whole rows (4 x 4 and half of the next plane): those algorithms
    # cannot be priced on it as a smaller block, and the group falls back to a ring.
    system = _system(k=64, n_gpus=64, topology=HBTopology.torus3d, dims=(4, 4, 4))

    def shape(g):
        return GroupShape(size=g, ranks_per_domain=g, domain_span=1, same_rail=True)
    for algo in ("bucket", "torus"):
        assert math.isfinite(_one("all_reduce", 1e9, shape(16), system, ideal, algo).time_s)
        assert _one("all_reduce", 1e9, shape(24), system, ideal, algo).time_s == math.inf
    assert collective_estimate("all_reduce", 1e9, shape(24), system, ideal).algorithm == "ring"

def test_ring_topology_ring_allreduce_uses_both_directions(ideal):
    """§3.1: two counter-rotating rings, bandwidth term 2(p-1)/p n/(2 B_link) on the full ring; a
    segment of the ring without its wrap-around gets one effective ring (B_link)."""
    n = 16e6
    system = _system(k=8, n_gpus=8, topology=HBTopology.ring)
    b_link = B_HB / 2
    full = _one("all_reduce", n, GroupShape(size=8, ranks_per_domain=8, domain_span=1, same_rail=True), system, ideal, "ring")
    assert full.time_s == pytest.approx(14 * ALPHA_HB + 2 * 7 / 8 * n / (2 * b_link), rel=1e-12)
    seg = _one("all_reduce", n, GroupShape(size=4, ranks_per_domain=4, domain_span=1, same_rail=True), system, ideal, "ring")
    assert seg.time_s == pytest.approx(6 * ALPHA_HB + 2 * 3 / 4 * n / b_link, rel=1e-12)


def test_hierarchical_allreduce(ideal):
    """§2.6: 2(g-1)a_i + 2(N-1)a_e + 2(g-1)/g n b_i + 2(N-1)/N (n/g) b_e, one NIC per GPU."""
    g, n_dom, n = 8, 4, 256e6
    tiers = (NetworkTier(name="rail", span_domains=n_dom, cross_rail=False, bandwidth_per_gpu_bytes_per_s=B_NET,
                         latency_s=ALPHA_NET),)
    system = _system(n_gpus=g * n_dom, tiers=tiers)
    e = _one("all_reduce", n, GroupShape(size=g * n_dom, ranks_per_domain=g, domain_span=n_dom, same_rail=True), system,
             ideal, "hierarchical")
    want = (2 * (g - 1) * ALPHA_HB + 2 * (n_dom - 1) * ALPHA_NET + 2 * (g - 1) / g * n / B_HB
            + 2 * (n_dom - 1) / n_dom * (n / g) / B_NET)
    assert e.time_s == pytest.approx(want, rel=1e-12)
    assert e.rail_bytes == pytest.approx(2 * (n_dom - 1) / n_dom * n / g)


def test_nvls_halves_allreduce_traffic(calib):
    n = 1e9
    shape = GroupShape(size=8, ranks_per_domain=8, domain_span=1, same_rail=True)
    e = collective_estimate("all_reduce", n, shape, _system(nvls=True), calib)
    assert e.algorithm == "nvls" and e.hb_bytes == pytest.approx(n)  # vs 2(p-1)/p n for a ring
    assert collective_estimate("all_reduce", n, shape, _system(nvls=False), calib).algorithm == "ring"


@pytest.mark.parametrize("n_dom", [2, 4, 16])
def test_nvls_tree_beyond_two_domains_runs_at_its_fraction(ideal, n_dom):
    """NVLSTree across N > 2 domains pushes 2n/g bytes through each GPU's NIC (a double binary tree:
    reduce up one tree, broadcast down the other); at a fraction f of the ring's scale-out bandwidth
    that takes 2n/(g B f), so f = 0.8 adds 2n/(g B) (1/0.8 - 1) to the time, latencies unchanged.
    Two domains exchange n/g each way once, whatever f."""
    g, n, f = 8, 4e9, 0.8
    tiers = (NetworkTier(name="rail", span_domains=n_dom, cross_rail=False, bandwidth_per_gpu_bytes_per_s=B_NET,
                         latency_s=ALPHA_NET),)
    system = _system(n_gpus=g * n_dom, tiers=tiers, nvls=True)
    shape = GroupShape(size=g * n_dom, ranks_per_domain=g, domain_span=n_dom, same_rail=True)
    full = _one("all_reduce", n, shape, system, ideal, "nvls_tree")
    slow = _one("all_reduce", n, shape, system,
                ideal.model_copy(update={"nvls_tree_many_domains_fraction": {"hopper": f}}), "nvls_tree")
    extra = 0.0 if n_dom == 2 else 2 * n / (g * B_NET) * (1 / f - 1)
    assert slow.time_s - full.time_s == pytest.approx(extra, rel=1e-9, abs=1e-15)
    # another generation's fraction leaves this one alone
    other = _one("all_reduce", n, shape, system,
                 ideal.model_copy(update={"nvls_tree_many_domains_fraction": {"blackwell": f}}), "nvls_tree")
    assert other.time_s == pytest.approx(full.time_s, rel=1e-12)


def test_nvls_tree_two_domain_exchange_runs_at_its_factor(ideal):
    """Across two domains NVLSTree's exchange sends each GPU's n/g shard once each way: at a factor
    f of the ring's scale-out bandwidth it takes n/(g B f) where the network binds (f = 0.4 and 0.5
    here, below the NVLS reduction's rate inside the domain), latencies unchanged."""
    g, n = 8, 4e9
    tiers = (NetworkTier(name="rail", span_domains=2, cross_rail=False, bandwidth_per_gpu_bytes_per_s=B_NET,
                         latency_s=ALPHA_NET),)
    system = _system(n_gpus=2 * g, tiers=tiers, nvls=True)
    shape = GroupShape(size=2 * g, ranks_per_domain=g, domain_span=2, same_rail=True)
    t = {f: _one("all_reduce", n, shape, system,
                 ideal.model_copy(update={"nvls_tree_two_domains_factor": {"hopper": f}}), "nvls_tree").time_s
         for f in (0.4, 0.5)}
    assert t[0.4] - t[0.5] == pytest.approx(n / (g * B_NET) * (1 / 0.4 - 1 / 0.5), rel=1e-9)


def test_nvls_tree_two_domain_exchange_never_beats_the_nic_line_rate(ideal):
    """The fitted two-domain factor times the ring's scale-out bandwidth stays at or below the NICs'
    line rate: with a factor of 1.5 on ideal (efficiency 1) NICs the exchange takes n/(g B), not
    n/(1.5 g B)."""
    g, n = 8, 4e9
    tiers = (NetworkTier(name="rail", span_domains=2, cross_rail=False, bandwidth_per_gpu_bytes_per_s=B_NET,
                         latency_s=ALPHA_NET),)
    system = _system(n_gpus=2 * g, tiers=tiers, nvls=True, hb_bw=40 * B_HB)  # the NVLS reduction never binds
    shape = GroupShape(size=2 * g, ranks_per_domain=g, domain_span=2, same_rail=True)
    t = {f: _one("all_reduce", n, shape, system,
                 ideal.model_copy(update={"nvls_tree_two_domains_factor": {"hopper": f}}), "nvls_tree").time_s
         for f in (1.0, 1.5)}
    assert t[1.5] == pytest.approx(t[1.0], rel=1e-12)
    assert t[1.0] >= n / (g * B_NET)


def test_a_send_recv_to_another_domain_stripes_over_the_gpus_nics(calib):
    """NCCL gives a network peer at least one channel per local NIC and maps channel c to the c-th
    NIC (paths.cc ncclTopoGetNchannels, topo.cc ncclTopoGetLocalNet): 400 Gb/s per GPU as one, two
    or four NICs moves a large send/recv equally fast, and two 400G NICs at least as fast as one."""
    def system(nics, gbps):
        nic = gbps * 1e9 / 8 * nics
        tiers = (NetworkTier(name="rail", span_domains=2, cross_rail=False, bandwidth_per_gpu_bytes_per_s=nic,
                             latency_s=ALPHA_NET),)
        return ClusterSystem(gpu=GPU, n_gpus=16, hb=HBDomain(size=8, bandwidth_per_gpu_bytes_per_s=B_HB, latency_s=ALPHA_HB),
                             nic_bandwidth_per_gpu_bytes_per_s=nic, nics_per_gpu=nics, tiers=tiers)
    shape = GroupShape(size=2, ranks_per_domain=1, domain_span=2, same_rail=True)
    t = {(k, gb): collective_estimate("send_recv", 2.0**30, shape, system(k, gb), calib).time_s
         for k, gb in ((1, 400), (2, 200), (4, 100), (2, 400))}
    assert t[(2, 200)] == pytest.approx(t[(1, 400)], rel=1e-9)
    assert t[(4, 100)] == pytest.approx(t[(1, 400)], rel=1e-9)
    assert t[(2, 400)] <= t[(1, 400)]


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(OPS), st.sampled_from([(16, 8, 2), (64, 8, 8), (256, 8, 32), (32, 1, 32), (128, 4, 32)]),
       st.booleans(), st.sampled_from([100, 200, 400]), st.sampled_from(["hopper", "blackwell"]))
def test_more_nics_per_gpu_never_slow_a_collective(op, shape, same_rail, gbps, arch):
    """Each further NIC of a GPU adds NCCL channels thinner than the bandwidth it adds; NCCL sets a
    call's channels apart (enqueue.cc trims them for small calls), so one, two or four NICs at the
    same rate each never make any call slower than fewer: found slower by up to 7.7 % (two 400G NICs
    against one, a 2 MiB ring all-gather over 64 GPUs) where the candidates counted every NIC's channel."""
    p, g, span = shape
    gpu = GPU.model_copy(update={"architecture": arch})

    def system(nics):
        nic = gbps * 1e9 / 8 * nics
        tiers = (NetworkTier(name="leaf", span_domains=8, cross_rail=False, bandwidth_per_gpu_bytes_per_s=nic),
                 NetworkTier(name="spine", span_domains=32, cross_rail=True, bandwidth_per_gpu_bytes_per_s=nic))
        return ClusterSystem(gpu=gpu, n_gpus=256, hb=HBDomain(size=8, bandwidth_per_gpu_bytes_per_s=B_HB),
                             nic_bandwidth_per_gpu_bytes_per_s=nic, nics_per_gpu=nics, tiers=tiers)
    sizes = 2.0 ** np.arange(10, 33)
    t = [collective_estimate_vec(op, sizes, p, g, span, same_rail, system(k), CALIB).time_s for k in (1, 2, 4)]
    assert np.all(t[1] <= t[0] * (1 + 1e-12)) and np.all(t[2] <= t[1] * (1 + 1e-12)), (op, shape)


def test_sharp_used_when_the_tier_has_it(calib):
    n = 1e9
    shape = GroupShape(size=64, ranks_per_domain=8, domain_span=8, same_rail=True)
    plain = (NetworkTier(name="rail", span_domains=8, cross_rail=False, bandwidth_per_gpu_bytes_per_s=B_NET),)
    sharp = (plain[0].model_copy(update={"in_network_reduction": True}),)
    with_sharp = collective_estimate("all_reduce", n, shape, _system(n_gpus=64, tiers=sharp), calib)
    without = collective_estimate("all_reduce", n, shape, _system(n_gpus=64, tiers=plain), calib)
    assert with_sharp.algorithm == "collnet" and with_sharp.time_s < without.time_s
    assert with_sharp.rail_bytes == pytest.approx(n / 8)



def test_sharp_all_reduce_takes_nccls_hopper_factor_from_hopper_on(ideal):
    # tuning.cc: CollNetDirect all-reduce busBw x 0.85 `if (minCompCap >= 90)`. Eight 8-GPU domains on
    # a SHARP rail of 10 GB/s per GPU (slow enough that the NICs, not NVLink, bind): each GPU's NIC
    # carries n/8, at 0.85 of its rate on Hopper and at all of it on Ampere (the same links
    # otherwise): at 1 GB the NIC-bound times stand at 0.85.
    n, nic = 1e9, 10e9
    shape = GroupShape(size=64, ranks_per_domain=8, domain_span=8, same_rail=True)
    sharp = (NetworkTier(name="rail", span_domains=8, cross_rail=False, bandwidth_per_gpu_bytes_per_s=nic,
                         in_network_reduction=True),)
    hopper = _system(n_gpus=64, tiers=sharp, nic=nic)
    ampere = hopper.model_copy(update={"gpu": GPU.model_copy(update={"architecture": "ampere"})})
    cal = ideal.model_copy(update={"hb_link_efficiency": 1.0})
    t_h = _one("all_reduce", n, shape, hopper, cal, "collnet").time_s
    t_a = _one("all_reduce", n, shape, ampere, cal, "collnet").time_s
    assert t_h == pytest.approx(n / 8 / (0.85 * nic), rel=1e-3)  # (+ its latency, 11 us)
    assert t_a / t_h == pytest.approx(0.85, rel=1e-3)

def test_sharp_at_one_gpu_per_domain_pays_the_tree_network_latency(calib):
    # tuning.cc (v2.23.4 on): "With ppn=1 latencies are fully exposed, use the Tree network latency":
    # interLat = hwLat[NET][TREE] for every algorithm; CollNetDirect's own NET row (31 us Simple)
    # holds from two GPUs per domain. At 8 bytes (bandwidth and fill negligible) a CollNet all-reduce
    # over 64 one-GPU domains is then 31 - 14 = 17 us faster than with the CollNet row, and the same
    # with 8 GPUs per domain; NCCL 2.22 keeps the CollNet row everywhere. (No host floor, which would
    # hide the difference under its own.)
    calib = calib.model_copy(update={"host_floor_s": {}})
    rows = calib.hop_latency_s
    assert (rows["collnet"].net[2], rows["tree"].net[2]) == (31.0e-6, 14.0e-6)
    as_tree = calib.model_copy(update={"hop_latency_s": {**rows, "collnet": rows["collnet"].model_copy(
        update={"net": rows["tree"].net})}})

    def t(g, cal):
        shape = GroupShape(size=64, ranks_per_domain=g, domain_span=64 // g, same_rail=True)
        # a path of no latency of its own, so that each hop is NCCL's row (net_hop_s)
        tier = (NetworkTier(name="rail", span_domains=64 // g, cross_rail=False, bandwidth_per_gpu_bytes_per_s=B_NET,
                            in_network_reduction=True, latency_s=0.0),)
        return _one("all_reduce", 8.0, shape, _system(k=g, n_gpus=64, tiers=tier), cal, "collnet").time_s

    assert t(1, calib) == pytest.approx(t(1, as_tree), rel=1e-9)
    assert t(8, calib) - t(8, as_tree) == pytest.approx(17e-6, rel=1e-3)
    old = for_nccl_version(calib, "2.22").model_copy(update={"host_floor_s": {}})
    old_as_tree = old.model_copy(update={"hop_latency_s": {**old.hop_latency_s, "collnet": old.hop_latency_s[
        "collnet"].model_copy(update={"net": old.hop_latency_s["tree"].net})}})
    assert t(1, old) - t(1, old_as_tree) == pytest.approx(
        old.hop_latency_s["collnet"].net[2] - old.hop_latency_s["tree"].net[2], rel=1e-3)


@pytest.mark.parametrize("op", ["all_gather", "reduce_scatter"])
def test_sharp_all_gather_and_reduce_scatter_stream_the_whole_buffer_through_each_domains_nics(calib, ideal, op):
    """CollNet all-gather (reduce-scatter) on a SHARP tier: the switch multicasts (reduces) the whole
    n-byte buffer, so each of the g GPUs' NICs carries n/g at collnet_gather_efficiency of its line
    rate, whatever the number of domains: n / (g B eta) with no latencies (ideal), against the ring's
    (p-1)/p n / (g B) on the same NICs. NCCL before 2.20 has no CollNet all-gather (tuning.cc)."""
    g, n_dom, n = 8, 4, 16 * 2.0**30
    p = g * n_dom
    sharp = (NetworkTier(name="rail", span_domains=n_dom, cross_rail=False, bandwidth_per_gpu_bytes_per_s=B_NET,
                         latency_s=0.0, in_network_reduction=True),)
    shape = GroupShape(size=p, ranks_per_domain=g, domain_span=n_dom, same_rail=True)
    system = _system(n_gpus=p, tiers=sharp, hb_bw=900e9)
    t = _one(op, n, shape, system, ideal, "collnet").time_s
    half = _one(op, n / 2, shape, system, ideal, "collnet").time_s
    eta = ideal.collnet_gather_efficiency
    # the per-byte term (the latencies, the system's link latency and NCCL's per-rank arity term, cancel)
    assert t - half == pytest.approx(n / 2 / (g * B_NET * eta), rel=1e-9)
    # the same on twice the domains: the NICs' share does not shrink with the node count
    shape8 = GroupShape(size=2 * p, ranks_per_domain=g, domain_span=2 * n_dom, same_rail=True)
    system8 = _system(n_gpus=2 * p, tiers=(sharp[0].model_copy(update={"span_domains": 2 * n_dom}),), hb_bw=900e9)
    assert _one(op, n, shape8, system8, ideal, "collnet").time_s == pytest.approx(t, rel=1e-9)
    # NCCL's own choice on the shipped calibration: CollNet beats the ring there
    e = collective_estimate(op, n, shape, system, calib)
    assert e.algorithm == "collnet" and e.rail_bytes == pytest.approx(n / g)
    old = for_nccl_version(calib, "2.19")
    assert collective_estimate(op, n, shape, system, old).algorithm != "collnet"
    plain = (sharp[0].model_copy(update={"in_network_reduction": False}),)
    assert collective_estimate(op, n, shape, _system(n_gpus=p, tiers=plain, hb_bw=900e9), calib).algorithm != "collnet"


def _clos(n_dom, leaf_span, oversub, cross_leaf=True):
    return (NetworkTier(name="leaf", span_domains=leaf_span, cross_rail=cross_leaf, bandwidth_per_gpu_bytes_per_s=B_NET,
                        latency_s=0.0),
            NetworkTier(name="spine", span_domains=n_dom, cross_rail=True, bandwidth_per_gpu_bytes_per_s=B_NET,
                        latency_s=0.0, oversubscription=oversub))


@pytest.mark.parametrize("ratio", [2.0, 4.0, 7.0])
def test_oversubscribed_alltoall_slowed_by_the_ratio(ideal, ratio):
    """§3.3: per leaf the cross-leaf volume is h n (1 - h/p); with r:1 uplinks the remote phase
    takes r (N - k)/(N - 1) times longer (k domains per leaf out of N)."""
    n_dom, leaf, n = 16, 4, 1e9
    shape = GroupShape(size=8 * n_dom, ranks_per_domain=8, domain_span=n_dom, same_rail=True)
    full = _one("all_to_all", n, shape, _system(n_gpus=8 * n_dom, tiers=_clos(n_dom, leaf, 1.0)), ideal, "pairwise")
    over = _one("all_to_all", n, shape, _system(n_gpus=8 * n_dom, tiers=_clos(n_dom, leaf, ratio)), ideal, "pairwise")
    remote = (8 * n_dom - 8) / (8 * n_dom) * n
    assert full.time_s == pytest.approx(ALPHA_HB + remote / B_NET, rel=1e-12)
    assert over.time_s == pytest.approx(ALPHA_HB + remote / B_NET * max(1.0, ratio * (n_dom - leaf) / (n_dom - 1)), rel=1e-12)
    assert over.spine_bytes == pytest.approx(remote * (n_dom - leaf) / (n_dom - 1))


def test_a_designed_oversubscribed_fabric_slows_the_alltoall_by_its_ratio_once(ideal):
    """The tiers the network layer hands the perf model (to_network_tiers): 128 domains of 8 on
    radix-64 switches at 4:1, one GPU per domain. Leaves join 32 domains; of each rank's (p-1)/p
    bytes to the others, (128 - 32)/127 go over the 4:1 uplinks: 1 GB x 96/128 x 4 / 50 GB/s."""
    from designer.network.topology import RAILONLY_V5_PRICES, bill_of_materials, to_network_tiers

    n_dom, n, r = 128, 1e9, 4.0
    bom = bill_of_materials("oversubscribed", 8 * n_dom, 8, 64, prices=RAILONLY_V5_PRICES, oversubscription=r)
    tiers = tuple(t.model_copy(update={"latency_s": 0.0}) for t in to_network_tiers(bom))
    shape = GroupShape(size=n_dom, ranks_per_domain=1, domain_span=n_dom, same_rail=True)
    e = _one("all_to_all", n, shape, _system(n_gpus=8 * n_dom, tiers=tiers), ideal, "pairwise")
    assert e.time_s == pytest.approx(ALPHA_HB + n * 96 / 128 * r / B_NET, rel=1e-9)


def test_ring_allreduce_barely_notices_oversubscription(calib):
    n_dom, n = 16, 1e9
    shape = GroupShape(size=8 * n_dom, ranks_per_domain=8, domain_span=n_dom, same_rail=True)
    full = collective_time_s("all_reduce", n, shape, _system(n_gpus=8 * n_dom, tiers=_clos(n_dom, 4, 1.0)), calib)
    over = collective_time_s("all_reduce", n, shape, _system(n_gpus=8 * n_dom, tiers=_clos(n_dom, 4, 4.0)), calib)
    a2a_full = collective_time_s("all_to_all", n, shape, _system(n_gpus=8 * n_dom, tiers=_clos(n_dom, 4, 1.0)), calib)
    a2a_over = collective_time_s("all_to_all", n, shape, _system(n_gpus=8 * n_dom, tiers=_clos(n_dom, 4, 4.0)), calib)
    assert over / full < 1.05
    assert a2a_over / a2a_full > 2.5


def test_concurrency_fraction_relieves_contention(ideal):
    """Only a quarter of the GPUs sending across the oversubscribed uplinks: no slowdown at 4:1."""
    n_dom, n = 16, 1e9
    shape = GroupShape(size=8 * n_dom, ranks_per_domain=8, domain_span=n_dom, same_rail=True)
    system = _system(n_gpus=8 * n_dom, tiers=_clos(n_dom, 4, 4.0))
    quarter = _one("all_to_all", n, shape, system, ideal, "pairwise", concurrency=0.25)
    assert quarter.time_s == pytest.approx(ALPHA_HB + (8 * n_dom - 8) / (8 * n_dom) * n / B_NET, rel=1e-12)


def test_dp_group_one_member_per_pod_pays_oversubscription(ideal):
    """Rings notice oversubscription when every subtree holds one member of each group (Meta's 7:1)."""
    n, n_dom = 1e9, 16
    tiers = (NetworkTier(name="pod", span_domains=4, cross_rail=True, bandwidth_per_gpu_bytes_per_s=B_NET, latency_s=0.0),
             NetworkTier(name="cluster", span_domains=n_dom, cross_rail=True, bandwidth_per_gpu_bytes_per_s=B_NET,
                         latency_s=0.0, oversubscription=7.0))
    system = _system(n_gpus=8 * n_dom, tiers=tiers)
    spread = GroupShape(size=4, ranks_per_domain=1, domain_span=16, same_rail=True)  # one domain per pod
    e = _one("all_reduce", n, spread, system, ideal, "ring")
    assert e.time_s == pytest.approx(2 * 3 / 4 * n / (B_NET / 7), rel=1e-12)  # tiers without latency


def test_send_recv_stripes_over_both_nics(ideal):
    # two NICs of B_NET per GPU: NCCL 2.29 gives the network peer max(2 NICs, ceil(100 / 14)) -> 8
    # channels (8 x 14 GB/s here, above the NICs), which map to both NICs
    n = 1e8
    tiers = (NetworkTier(name="rail", span_domains=2, cross_rail=False, bandwidth_per_gpu_bytes_per_s=2 * B_NET,
                         latency_s=ALPHA_NET),)
    system = ClusterSystem(gpu=GPU, n_gpus=16, hb=HBDomain(size=8, bandwidth_per_gpu_bytes_per_s=B_HB, latency_s=ALPHA_HB),
                           nic_bandwidth_per_gpu_bytes_per_s=2 * B_NET, nics_per_gpu=2, tiers=tiers)
    e = _one("send_recv", n, GroupShape(size=2, ranks_per_domain=1, domain_span=2, same_rail=True), system, ideal, "p2p")
    assert e.time_s == pytest.approx(ALPHA_NET + n / (2 * B_NET), rel=1e-12)


def test_send_recv_inside_a_domain_at_its_fraction_of_the_link(ideal):
    """Two GPUs on one NVSwitch crossbar: the whole per-GPU bandwidth B_HB (efficiency 1 here) at
    p2p_hb_fraction f, after one HB hop: alpha_hb + n/(f B_HB)."""
    n, f = 1e9, 0.9
    shape = GroupShape(size=2, ranks_per_domain=2, domain_span=1, same_rail=True)
    e = _one("send_recv", n, shape, _system(), ideal.model_copy(update={"p2p_hb_fraction": f}), "p2p")
    assert e.time_s == pytest.approx(ALPHA_HB + n / (f * B_HB), rel=1e-12)


def test_rail_only_cross_rail_p2p_forwards_over_hb(ideal):
    n = 1e8
    tiers = (NetworkTier(name="rail", span_domains=2, cross_rail=False, bandwidth_per_gpu_bytes_per_s=B_NET,
                         latency_s=ALPHA_NET),)
    system = _system(n_gpus=16, tiers=tiers)
    e = _one("send_recv", n, GroupShape(size=2, ranks_per_domain=1, domain_span=2, same_rail=False), system, ideal, "p2p")
    assert e.time_s == pytest.approx(ALPHA_NET + ALPHA_HB + n / B_NET, rel=1e-12)
    assert e.hb_bytes == pytest.approx(n) and e.rail_bytes == pytest.approx(n) and e.spine_bytes == 0


@pytest.mark.parametrize("p,version,channels", [
    # NCCL 2.29+: 4 channels per network peer (max(1 NIC, ceil(50 / 14))), halved while
    # channels x ceil(p / 8) > p2pnChannels = 16 (8 NIC channels, x2 at run time)
    (16, "2.30", 4), (32, "2.30", 4), (64, "2.30", 2), (128, "2.30", 1), (512, "2.30", 1),
    # before 2.29: 2, halved while 2 p > 4 x 16
    (16, "2.28", 2), (32, "2.28", 2), (64, "2.28", 1),
])
def test_sendrecv_across_domains_is_striped_over_few_channels(calib, p, version, channels):
    """nccl-tests sendrecv over p ranks, 8 per domain: the pair crossing domains is the slowest, and
    NCCL stripes it over `channels` channels (sized by NCCL_P2P_PER_CHANNEL_NET_BW = 14 GB/s), which
    together move one channel's measured rate x channels**exponent, at most the NIC's 0.88 x 50 GB/s.
    The rate and exponent are derived here from the measured sendrecv busbw (collectives-modern.md):
    one channel per peer at TB-5 16/32/64 nodes, TB-1 16/32/46 nodes and XR-5; two at 8 nodes."""
    from designer.perf.collectives import for_nccl_version

    one_channel = np.mean([14.8, 15.3, 15.7, 15.1, 15.6, 15.6, 15.24]) * 1e9
    exponent = np.log2(np.mean([25.5, 25.4]) * 1e9 / one_channel)
    c = for_nccl_version(calib, version)
    assert c.p2p_net_one_channel_bytes_per_s == pytest.approx(one_channel, rel=1e-3)
    assert c.p2p_net_channel_exponent == pytest.approx(exponent, abs=1e-3)
    tiers = (NetworkTier(name="leaf", span_domains=p // 8, cross_rail=False, bandwidth_per_gpu_bytes_per_s=B_NET),)
    system = _system(n_gpus=p, tiers=tiers)
    n = 8 * 2**30
    e = _one("send_recv", n, GroupShape(size=p, ranks_per_domain=8, domain_span=p // 8, same_rail=True), system, c, "p2p")
    want_bw = min(0.88 * 50e9, c.p2p_net_one_channel_bytes_per_s * channels ** c.p2p_net_channel_exponent)
    assert n / e.time_s == pytest.approx(want_bw, rel=1e-3)


@pytest.mark.parametrize("p,per_domain,version,share", [
    # a pair across domains: NCCL 2.29+ stripes it over max(1 NIC, ceil(50 / 14)) = 4 channels, 2
    # before; a peer inside the domain gets 2 per NVLink (400 GB/s over Hopper's 25 GB/s links: 16),
    # 32, the share's denominator and a pair inside the domain's own count
    (2, 1, "2.30", 4 / 32), (2, 1, "2.28", 2 / 32), (2, 2, "2.30", 1.0),
    # 64 ranks, 8 per domain: the 4 halve to 2 (see the striping test above)
    (64, 8, "2.30", 2 / 32),
])
def test_send_recv_holds_its_channels_share_of_the_sms(calib, p, per_domain, version, share):
    from designer.perf.collectives import for_nccl_version, send_recv_channel_share

    tiers = (NetworkTier(name="leaf", span_domains=max(p // 8, 1), cross_rail=False, bandwidth_per_gpu_bytes_per_s=B_NET),)
    got = send_recv_channel_share(np.array([p]), np.array([per_domain]), _system(n_gpus=max(p, 8), tiers=tiers),
                                  for_nccl_version(calib, version))
    assert float(got[0]) == pytest.approx(share)


def test_slow_fabric_adds_its_excess_latency_per_hop(calib):
    """A 30 us path (EFA) is 24 us slower than the 6 us NCCL's NET constants cover: a Simple hop
    pays it twice (NCCL adds latencyInter again for Simple), max(6, 14) + 2 x 24 = 62 us; LL once,
    max(6, 2.7) + 24 = 30 us; a 3 us path stays at NCCL's 14 us (Simple) and max(3, 2.7) us (LL)."""
    from designer.perf.collectives import net_hop_s

    assert float(net_hop_s(calib, 14e-6, 30e-6, 2)) == pytest.approx(62e-6)
    assert float(net_hop_s(calib, 2.7e-6, 30e-6, 0)) == pytest.approx(30e-6)
    assert float(net_hop_s(calib, 14e-6, 3e-6, 2)) == pytest.approx(14e-6)
    assert float(net_hop_s(calib, 2.7e-6, 3e-6, 0)) == pytest.approx(3e-6)
    tiers = (NetworkTier(name="efa", span_domains=2, cross_rail=False, bandwidth_per_gpu_bytes_per_s=B_NET,
                         latency_s=30e-6),)
    e = _one("send_recv", 8.0, GroupShape(size=2, ranks_per_domain=1, domain_span=2, same_rail=True),
             _system(n_gpus=16, tiers=tiers), calib, "p2p")
    assert e.time_s == pytest.approx(62e-6 + 8.0 / (0.88 * B_NET), rel=1e-6)


def test_tree_correction_stops_at_256_mib(ideal):
    """tuning.cc applies treeCorrectionFactor only while log2(n/64) < 23: a 1 GiB tree allreduce runs
    at the uncorrected bandwidth, a 32 MiB one (log2 = 19, Simple factor 0.7) at 0.7 of it."""
    flat = ideal.model_copy(update={"tree_correction": {k: (1.0,) * 24 for k in ideal.tree_correction}})
    tiers = (NetworkTier(name="leaf", span_domains=4, cross_rail=False, bandwidth_per_gpu_bytes_per_s=B_NET),)
    system = _system(n_gpus=32, tiers=tiers)
    shape = GroupShape(size=32, ranks_per_domain=8, domain_span=4, same_rail=True)
    big, mid = 2.0**30, 2.0**25
    assert _one("all_reduce", big, shape, system, ideal, "tree").time_s == pytest.approx(
        _one("all_reduce", big, shape, system, flat, "tree").time_s, rel=1e-12)
    a = _one("all_reduce", 0.0, shape, system, flat, "tree").time_s  # the links' latencies
    assert _one("all_reduce", mid, shape, system, ideal, "tree").time_s - a == pytest.approx(
        (_one("all_reduce", mid, shape, system, flat, "tree").time_s - a) / 0.7, rel=1e-9)


def test_single_rank_group_costs_nothing(calib):
    e = collective_estimate("all_reduce", 1e9, GroupShape(size=1, ranks_per_domain=1, domain_span=1, same_rail=True),
                            _system(), calib)
    assert e.time_s == 0 and e.algorithm == "none"


def test_group_shape_validation():
    with pytest.raises(ValueError):
        GroupShape(size=12, ranks_per_domain=8, domain_span=2, same_rail=True)
    with pytest.raises(ValueError):
        GroupShape(size=32, ranks_per_domain=8, domain_span=2, same_rail=True)


def test_calibration_file_lists_a_source_for_every_constant(calib):
    fields = set(CollectiveCalibration.model_fields) - {"sources"}
    assert fields <= set(calib.sources)


# ---------------------------------------------------------------- dense mapping: rail-only == rail-optimized


def _rail_pair(n_dom=64):
    leaf = NetworkTier(name="rail-leaf", span_domains=16, cross_rail=False, bandwidth_per_gpu_bytes_per_s=B_NET)
    ro = _system(n_gpus=8 * n_dom, tiers=(leaf, NetworkTier(name="rail-spine", span_domains=n_dom, cross_rail=False,
                                                           bandwidth_per_gpu_bytes_per_s=B_NET)))
    opt = _system(n_gpus=8 * n_dom, tiers=(leaf, NetworkTier(name="spine", span_domains=n_dom, cross_rail=True,
                                                            bandwidth_per_gpu_bytes_per_s=B_NET)))
    return ro, opt


@pytest.mark.parametrize("op", ["all_reduce", "reduce_scatter", "all_gather", "broadcast", "send_recv", "all_to_all"])
@pytest.mark.parametrize("g,n_dom,span", [(1, 2, 2), (1, 8, 64), (1, 64, 64), (8, 8, 8), (8, 64, 64), (4, 16, 32)])
def test_same_rail_group_same_time_on_rail_only(calib, op, g, n_dom, span):
    if op == "send_recv" and g * n_dom != 2:
        pytest.skip("point-to-point between two ranks")
    if op == "all_to_all" and g > 1:
        pytest.skip("an all-to-all with several ranks per domain is cross-rail by nature")
    ro, opt = _rail_pair()
    shape = GroupShape(size=g * n_dom, ranks_per_domain=g, domain_span=span, same_rail=True)
    for n in (1e3, 1e6, 1e9):
        a = collective_estimate(op, n, shape, ro, calib)
        b = collective_estimate(op, n, shape, opt, calib)
        assert a.time_s == pytest.approx(b.time_s, rel=1e-12)
        assert (a.algorithm, a.protocol) == (b.algorithm, b.protocol)


def test_cross_rail_alltoall_slower_on_rail_only(calib):
    ro, opt = _rail_pair()
    shape = GroupShape(size=512, ranks_per_domain=8, domain_span=64, same_rail=True)
    assert collective_time_s("all_to_all", 1e9, shape, ro, calib) > collective_time_s("all_to_all", 1e9, shape, opt, calib)


# ---------------------------------------------------------------- vectorisation


def test_vector_matches_scalar_on_a_grid(calib):
    system = _system(n_gpus=512, tiers=_clos(64, 8, 3.0, cross_leaf=False))
    sizes = np.array([1, 2, 8, 16, 64, 128, 512])
    gs = np.array([1, 1, 8, 8, 8, 4, 8])
    spans = np.array([1, 2, 1, 2, 8, 32, 64])
    n = np.logspace(2, 10, 9)[:, None]
    for op in OPS:
        if op == "send_recv":
            continue
        vec = collective_time_s_vec(op, n, sizes[None, :], gs[None, :], spans[None, :], True, system, calib)
        assert vec.shape == (9, 7)
        for i in range(9):
            for j in range(7):
                shape = GroupShape(size=int(sizes[j]), ranks_per_domain=int(gs[j]),
                                   domain_span=int(max(spans[j], sizes[j] // gs[j])), same_rail=True)
                assert vec[i, j] == pytest.approx(collective_time_s(op, float(n[i, 0]), shape, system, calib), rel=1e-12)


def test_vector_call_on_many_mixed_shapes(calib):
    """100k points with mixed shapes: finite everywhere, zero only for one-rank groups.
    (Speed is measured in studies/benchmarks/bench_evaluate.py, not here.)"""
    system = _system(n_gpus=4096, tiers=_clos(512, 32, 2.0, cross_leaf=False))
    rng = np.random.default_rng(0)
    m = 100_000
    g = rng.choice([1, 2, 4, 8], m)
    n_dom = rng.choice([1, 2, 4, 8, 16, 64], m)
    t = collective_time_s_vec("all_reduce", rng.uniform(1e3, 1e9, m), g * n_dom, g, n_dom, True, system, calib)
    assert np.all(np.isfinite(t)) and np.all((t > 0) == (g * n_dom > 1))


@pytest.mark.parametrize("op", OPS)
def test_many_shapes_match_one_point_at_a_time(calib, op):
    """The per-distinct-shape evaluation gives what each point gives on its own."""
    system = _system(n_gpus=512, tiers=_clos(64, 8, 3.0, cross_leaf=True))
    rng = np.random.default_rng(1)
    m = 400
    g = rng.choice([1, 2, 4, 8], m)
    n_dom = rng.choice([1, 2, 4, 8, 16, 64], m)
    if op == "send_recv":
        g, n_dom = np.where(rng.random(m) < 0.5, 2, 1), np.ones(m, int)
        n_dom = np.where(g == 1, 2, 1)
    span = np.minimum(n_dom * rng.choice([1, 2, 4], m), 64)
    rail = rng.random(m) < 0.5
    conc = rng.choice([0.25, 1.0], m)
    n = rng.uniform(0, 2e9, m)
    vec = collective_estimate_vec(op, n, g * n_dom, g, span, rail, system, calib, concurrency=conc)
    for i in range(0, m, 7):
        one = collective_estimate_vec(op, n[i], g[i] * n_dom[i], g[i], span[i], rail[i], system, calib, concurrency=conc[i])
        assert vec.time_s[i] == pytest.approx(float(one.time_s), rel=1e-12)
        assert vec.algorithm(i) == one.algorithm() and vec.protocol(i) == one.protocol()
        for a, b in ((vec.hb_bytes[i], one.hb_bytes), (vec.rail_bytes[i], one.rail_bytes), (vec.spine_bytes[i], one.spine_bytes)):
            assert a == pytest.approx(float(b), rel=1e-12, abs=1e-6)


def test_a_shared_memo_changes_no_estimate(calib, ideal):
    """collective_estimate_vec's memo (a group's GroupArrays.estimate_memo in the evaluator) keeps the
    candidates per op, repertoire, system, calibration and distinct shapes: one dict shared by calls
    on two systems, two calibrations, several ops and byte counts gives what each call gives alone."""
    systems = (_system(n_gpus=512, tiers=_clos(64, 8, 3.0, cross_leaf=True)),
               _system(n_gpus=512, tiers=_clos(64, 8, 1.0, cross_leaf=False), nic=2 * B_NET))
    rng = np.random.default_rng(2)
    m = 200
    g = rng.choice([1, 2, 4, 8], m)
    n_dom = rng.choice([1, 2, 4, 8, 16], m)
    span, rail = n_dom * 2, rng.random(m) < 0.5
    memo: dict = {}
    for _ in range(2):  # the second round reads every entry from the memo
        for op in ("all_reduce", "all_gather", "all_to_all"):
            for system in systems:
                for cal in (calib, ideal):
                    for n in (rng.uniform(1e3, 1e9, m), np.full(m, 1.0)):
                        args = (op, n, g * n_dom, g, span, rail, system, cal)
                        shared, alone = collective_estimate_vec(*args, memo=memo), collective_estimate_vec(*args)
                        assert np.array_equal(shared.time_s, alone.time_s)
                        assert np.array_equal(shared.algorithm_index, alone.algorithm_index)
                        assert np.array_equal(shared.rail_bytes, alone.rail_bytes)
    assert memo  # the memo was used


# ---------------------------------------------------------------- GPU generation (NCCL per-architecture constants)


def _gen_system(arch: str, hb_bw: float, k: int = 8) -> ClusterSystem:
    gpu = GPU.model_copy(update={"architecture": arch})
    return ClusterSystem(gpu=gpu, n_gpus=k, hb=HBDomain(size=k, bandwidth_per_gpu_bytes_per_s=hb_bw),
                         nic_bandwidth_per_gpu_bytes_per_s=B_NET)


def test_unknown_architecture_is_rejected(calib):
    system = _gen_system("hopper", 450e9).model_copy(update={"gpu": GPU.model_copy(update={"architecture": "volta"})})
    with pytest.raises(ValueError, match="architecture"):
        collective_time_s("all_reduce", 1e6, GroupShape(size=8, ranks_per_domain=8, domain_span=1, same_rail=True),
                          system, calib)


def test_ampere_ll128_capped_per_channel(calib):
    """§4.3/§4.4: busBw(LL128) = min(0.92 busBw, nChannels x cap); on A100 (12 NVLinks, 16.7 GB/s per
    channel) the cap, 200.4 GB/s, binds below 0.92 x 240; on Hopper (36.7 per 20.6 GB/s channel) not."""
    shape = GroupShape(size=8, ranks_per_domain=8, domain_span=1, same_rail=True)
    n = 1e9
    flat = calib.model_copy(update={"pipeline_fill_factor": 0.0})
    a100 = _gen_system("ampere", 300e9)
    t = collective_estimate("all_reduce", n, shape, a100, flat, algorithms=("ring",), protocols=("LL128",)).time_s
    lat = calib.base_latency_s["ring"][1] + 14 * calib.hop_latency_s["ring"].hb[1]
    assert t == pytest.approx(lat + 2 * 7 / 8 * n / (12 * 16.7e9), rel=1e-9)
    h100 = _gen_system("hopper", 450e9)
    t = collective_estimate("all_reduce", n, shape, h100, flat, algorithms=("ring",), protocols=("LL128",)).time_s
    assert t == pytest.approx(lat + 2 * 7 / 8 * n / (0.92 * 20.6 / 25 * 450e9), rel=1e-9)


@pytest.mark.parametrize("arch,eff", [("ampere", 0.800), ("hopper", 0.824), ("blackwell", 0.802)])
def test_hb_efficiency_follows_nccl_nvlink_bandwidth(calib, arch, eff):
    """Ring Simple plateau: NCCL's per-link NVLink bandwidth (20.0/20.6/40.1 GB/s) over its line rate."""
    system = _gen_system(arch, 900e9 if arch == "blackwell" else 450e9)
    shape = GroupShape(size=8, ranks_per_domain=8, domain_span=1, same_rail=True)
    flat = calib.model_copy(update={"pipeline_fill_factor": 0.0})
    n = 1e12
    t = collective_estimate("all_reduce", n, shape, system, flat, algorithms=("ring",), protocols=("Simple",)).time_s
    assert 2 * 7 / 8 * n / t == pytest.approx(eff * system.hb.bandwidth_per_gpu_bytes_per_s, rel=1e-4)  # + latency


# ---------------------------------------------------------------- properties


@st.composite
def scenario(draw):
    k = draw(st.sampled_from([4, 8]))
    n_dom_sys = draw(st.sampled_from([1, 4, 16]))
    topology = draw(st.sampled_from([HBTopology.switched, HBTopology.ring, HBTopology.torus2d]))
    dims = ((2, 2) if k == 4 else (2, 4)) if topology == HBTopology.torus2d else None
    tiers = ()
    if n_dom_sys > 1:
        leaf_span = draw(st.sampled_from([1, 2, 4]))
        tiers = (NetworkTier(name="leaf", span_domains=leaf_span, cross_rail=draw(st.booleans()),
                             bandwidth_per_gpu_bytes_per_s=draw(st.floats(10e9, 100e9)),
                             in_network_reduction=draw(st.booleans()),
                             oversubscription=draw(st.floats(1.0, 4.0))),
                 NetworkTier(name="top", span_domains=n_dom_sys, cross_rail=draw(st.booleans()),
                             bandwidth_per_gpu_bytes_per_s=draw(st.floats(10e9, 100e9)),
                             oversubscription=draw(st.floats(1.0, 8.0))))
    system = ClusterSystem(gpu=GPU, n_gpus=k * n_dom_sys,
                           hb=HBDomain(size=k, bandwidth_per_gpu_bytes_per_s=draw(st.floats(50e9, 1000e9)),
                                       topology=topology, torus_dims=dims, in_network_reduction=draw(st.booleans())),
                           nic_bandwidth_per_gpu_bytes_per_s=draw(st.floats(10e9, 100e9)), tiers=tiers)
    g = draw(st.sampled_from([d for d in (1, 2, 4, 8) if d <= k]))
    n_dom = draw(st.sampled_from([d for d in (1, 2, 4, 16) if d <= n_dom_sys]))
    span = draw(st.integers(n_dom, n_dom_sys))
    shape = GroupShape(size=g * n_dom, ranks_per_domain=g, domain_span=span, same_rail=draw(st.booleans()))
    op = draw(st.sampled_from([o for o in OPS if o != "send_recv" or g * n_dom == 2]))
    return system, shape, op


SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(scenario(), st.floats(1.0, 1e10), st.floats(1.0, 4.0), st.sampled_from(["hb", "nic", "tier0", "tier1"]))
def test_more_bandwidth_is_never_slower(sc, n, factor, which):
    system, shape, op = sc
    calib = CALIB
    before = collective_time_s(op, n, shape, system, calib)
    if which == "hb":
        faster = system.model_copy(update={"hb": system.hb.model_copy(
            update={"bandwidth_per_gpu_bytes_per_s": system.hb.bandwidth_per_gpu_bytes_per_s * factor})})
    elif which == "nic":
        faster = system.model_copy(update={"nic_bandwidth_per_gpu_bytes_per_s": system.nic_bandwidth_per_gpu_bytes_per_s * factor})
    else:
        i = int(which[-1])
        if i >= len(system.tiers):
            return
        tiers = list(system.tiers)
        tiers[i] = tiers[i].model_copy(update={"bandwidth_per_gpu_bytes_per_s": tiers[i].bandwidth_per_gpu_bytes_per_s * factor})
        faster = system.model_copy(update={"tiers": tuple(tiers)})
    assert collective_time_s(op, n, shape, faster, calib) <= before * (1 + 1e-12)


@SETTINGS
@given(scenario(), st.lists(st.floats(0.0, 1e11), min_size=2, max_size=6))
def test_time_non_negative_and_monotone_in_bytes(sc, sizes):
    system, shape, op = sc
    n = np.sort(np.asarray(sizes))
    t = collective_time_s_vec(op, n, shape.size, shape.ranks_per_domain, shape.domain_span, shape.same_rail, system,
                              CALIB)
    assert np.all(t >= 0) and np.all(np.isfinite(t))
    assert np.all(np.diff(t) >= -1e-12 * t[1:])


@SETTINGS
@given(scenario(), st.floats(0.0, 1e10))
def test_vector_and_scalar_agree(sc, n):
    system, shape, op = sc
    calib = CALIB
    e = collective_estimate(op, n, shape, system, calib)
    v = collective_estimate_vec(op, np.array([n, n]), shape.size, shape.ranks_per_domain, shape.domain_span,
                                shape.same_rail, system, calib)
    assert v.time_s[1] == pytest.approx(e.time_s, rel=1e-12, abs=0)
    assert v.algorithm(1) == e.algorithm and v.protocol(1) == e.protocol
    assert (v.hb_bytes[1], v.rail_bytes[1], v.spine_bytes[1]) == pytest.approx((e.hb_bytes, e.rail_bytes, e.spine_bytes))


@SETTINGS
@given(scenario(), st.floats(1.0, 1e10), st.integers(1, 8), st.floats(1.0, 4.0))
def test_deduplicated_dispatch_properties(sc, token_bytes, top_k, factor):
    """The deduplicated MoE dispatch: non-negative and finite where a rail path exists, monotone in
    the bytes and the distinct destination domains, never faster than the links allow, never slower
    with more NIC or HB bandwidth."""
    from designer.perf.collectives import moe_dispatch_estimate_vec

    system, shape, _ = sc
    n_dom = shape.size // shape.ranks_per_domain
    args = (top_k, shape.size, shape.ranks_per_domain, shape.domain_span, system, CALIB)
    d = np.array([1.0, max(n_dom / 2, 1.0), float(n_dom)])
    e = moe_dispatch_estimate_vec(np.full(3, token_bytes), top_k, d, *args[1:])
    t = np.asarray(e.time_s)
    if not np.all(np.isfinite(t)):
        return  # no rail path between the group's domains
    assert np.all(t >= 0) and np.all(np.diff(t) >= -1e-12 * t[1:])
    more = moe_dispatch_estimate_vec(token_bytes * factor, top_k, d[-1], *args[1:])
    assert float(more.time_s) >= t[-1] * (1 - 1e-12)
    if shape.size > 1:
        assert float(e.rail_bytes[-1] + e.spine_bytes[-1]) / t[-1] <= system.nic_bandwidth_per_gpu_bytes_per_s * (1 + 1e-9)
        assert float(e.hb_bytes[-1]) / t[-1] <= system.hb.bandwidth_per_gpu_bytes_per_s * (1 + 1e-9)
    faster = system.model_copy(update={"nic_bandwidth_per_gpu_bytes_per_s": system.nic_bandwidth_per_gpu_bytes_per_s * factor,
                                       "hb": system.hb.model_copy(update={
                                           "bandwidth_per_gpu_bytes_per_s": system.hb.bandwidth_per_gpu_bytes_per_s * factor})})
    tiers = tuple(tr.model_copy(update={"bandwidth_per_gpu_bytes_per_s": tr.bandwidth_per_gpu_bytes_per_s * factor})
                  for tr in system.tiers)
    faster = faster.model_copy(update={"tiers": tiers})
    f = moe_dispatch_estimate_vec(token_bytes, top_k, d[-1], shape.size, shape.ranks_per_domain, shape.domain_span,
                                  faster, CALIB)
    assert float(f.time_s) <= t[-1] * (1 + 1e-12)


@SETTINGS
@given(st.sampled_from([(4, 4), (2, 8), (4, 2, 2), (2, 2, 4)]), st.floats(1e3, 1e10))
def test_bucket_never_slower_than_dimension_ordered(dims, n):
    """Using every torus dimension at once never loses to one at a time (bandwidth and latency
    terms, full-domain groups)."""
    k = int(np.prod(dims))
    topo = HBTopology.torus2d if len(dims) == 2 else HBTopology.torus3d
    system = ClusterSystem(gpu=GPU, n_gpus=k, hb=HBDomain(size=k, bandwidth_per_gpu_bytes_per_s=400e9, topology=topo,
                                                          torus_dims=dims), nic_bandwidth_per_gpu_bytes_per_s=50e9)
    shape = GroupShape(size=k, ranks_per_domain=k, domain_span=1, same_rail=True)
    for op in ("all_reduce", "reduce_scatter", "all_gather"):
        b = collective_estimate(op, n, shape, system, CALIB, algorithms=("bucket",)).time_s
        t = collective_estimate(op, n, shape, system, CALIB, algorithms=("torus",)).time_s
        assert b <= t * (1 + 1e-12)


@pytest.mark.parametrize("field, value", [("nvls_tree_many_domains_fraction", 1.2), ("nvls_tree_many_domains_fraction", 0.0),
                                          ("nvls_tree_two_domains_factor", -1.0), ("p2p_hb_fraction", 1.5)])
def test_network_factors_out_of_range_are_rejected(calib, field, value):
    from pydantic import ValidationError

    data = calib.model_dump()
    data[field] = value if field == "p2p_hb_fraction" else {"blackwell": value}
    with pytest.raises(ValidationError, match=field):
        CollectiveCalibration.model_validate(data)


def _fill_ratio(update, algorithm, n_gpus=16, nbytes=4 * 2**30):
    """How much a collective's pipeline fill grows under changed NCCL settings: fill = time less the
    time with no fill (pipeline_fill_factor 0), on 8-GPU H100 domains, the algorithm forced."""
    from tests.perf.systems import cluster

    base = load_collective_calibration()
    sy = cluster("h100_sxm", n_gpus, hb_nvls=True)
    shape = GroupShape(size=n_gpus, ranks_per_domain=8, domain_span=n_gpus // 8, same_rail=True)

    def t(c):
        e = collective_estimate("all_reduce", float(nbytes), shape, sy, c, algorithms=(algorithm,))
        assert e.protocol == "Simple"
        return e.time_s

    t0 = t(base.model_copy(update={"pipeline_fill_factor": 0.0}))
    return (t(base.model_copy(update=update)) - t0) / (t(base) - t0)


def test_simple_fill_grows_with_the_square_root_of_the_buffer():
    # NCCL's Simple chunk is an eighth of NCCL_BUFFSIZE; the fill 2*sqrt(phi*L*X) has phi
    # proportional to the chunk, so doubling the buffer multiplies the fill by sqrt(2)
    assert _fill_ratio({"buffer_bytes": 8 * 2**20}, "ring") == pytest.approx(2 ** 0.5, rel=1e-9)
    assert _fill_ratio({"buffer_bytes": 8 * 2**20}, "tree") == pytest.approx(2 ** 0.5, rel=1e-9)


def test_nvls_tree_chunk_follows_nccls_cap():
    # two nodes: the chunk is the NVLS chunk (128 KiB); aws-ofi-nccl's 512 KiB for both is 4x -> fill x2
    env = {"nvls_chunk_bytes": 524288.0, "nvls_tree_max_chunk_bytes": 524288.0}
    assert _fill_ratio(env, "nvls_tree", n_gpus=16) == pytest.approx(2.0, rel=1e-9)
    # from four nodes NCCL caps it at 64 KiB: a larger NVLS chunk alone changes nothing, the cap
    # raised to 512 KiB makes it 8x -> fill x sqrt(8)
    assert _fill_ratio({"nvls_chunk_bytes": 524288.0}, "nvls_tree", n_gpus=32) == pytest.approx(1.0, rel=1e-9)
    assert _fill_ratio(env, "nvls_tree", n_gpus=32) == pytest.approx(8 ** 0.5, rel=1e-9)


# ---------------------------------------------------------------- gather / scatter


@pytest.mark.parametrize("op", ["gather", "scatter"])
def test_direct_gather_scatter_inside_one_domain_by_hand(ideal, op):
    """NCCL's gather / scatter (grouped send/recv at the root): the root moves the 7/8 of the vector
    its 7 peers hold over its HB links at a send/recv's 0.90 of the per-link rate; no network."""
    sy = _system()
    shape = GroupShape(size=8, ranks_per_domain=8, domain_span=1, same_rail=True)
    n = 2.0**30
    one = collective_estimate(op, n, shape, sy, ideal, algorithms=("direct",))
    two = collective_estimate(op, 2 * n, shape, sy, ideal, algorithms=("direct",))
    assert one.algorithm == "direct"
    assert two.time_s - one.time_s == pytest.approx(7 / 8 * n / (0.90 * B_HB), rel=1e-9)
    assert one.rail_bytes == 0.0 and one.spine_bytes == 0.0


def test_direct_gather_across_domains_waits_on_the_roots_nic(ideal):
    """32 ranks on 4 domains: the 24/32 of the vector held beyond the root's domain all enter
    through the root's NIC (50 GB/s), which outlasts its HB share (7/32 at 0.9 x 400 GB/s)."""
    sy = _system(n_gpus=32, tiers=_clos(4, 4, 1.0))
    shape = GroupShape(size=32, ranks_per_domain=8, domain_span=4, same_rail=True)
    n = 2.0**30
    one = collective_estimate("gather", n, shape, sy, ideal, algorithms=("direct",))
    two = collective_estimate("gather", 2 * n, shape, sy, ideal, algorithms=("direct",))
    assert two.time_s - one.time_s == pytest.approx(24 / 32 * n / B_NET, rel=1e-9)
    assert one.rail_bytes + one.spine_bytes == pytest.approx(24 / 32 * n, rel=1e-9)


def test_binomial_gather_by_hand(ideal):
    """MPICH's binomial gather (collectives.md §2): lg p steps of alpha, (p-1)/p of the vector."""
    sy = _system()
    shape = GroupShape(size=8, ranks_per_domain=8, domain_span=1, same_rail=True)
    n = 1e9
    est = collective_estimate("gather", n, shape, sy, ideal, algorithms=("binomial",))
    assert est.algorithm == "binomial"
    assert est.time_s == pytest.approx(3 * ALPHA_HB + 7 / 8 * n / B_HB, rel=1e-9)


def test_gather_and_scatter_bus_bandwidth_as_nccl_tests():
    # nccl-tests gather.cu / scatter.cu: busBw = algBw * (nranks - 1) / nranks
    from designer.perf.collectives import bus_bandwidth_factor

    assert float(bus_bandwidth_factor("gather", 8)) == pytest.approx(7 / 8)
    assert float(bus_bandwidth_factor("scatter", 16)) == pytest.approx(15 / 16)


def test_nccls_gather_and_scatter_are_grouped_send_recv(calib):
    # NCCL has no gather / scatter kernel of its own (nccl-tests gather_perf / scatter_perf post one
    # grouped send/recv per member at the root): its repertoire holds `direct`, not MPI's binomial
    # tree, and a root exchanges data with every other member
    from designer.perf.collectives import peers_per_rank

    assert "direct" in calib.algorithms and "binomial" not in calib.algorithms
    sy = _system()
    shape = GroupShape(size=8, ranks_per_domain=8, domain_span=1, same_rail=True)
    for op in ("gather", "scatter"):
        assert collective_estimate(op, 2.0**26, shape, sy, calib).algorithm == "direct"
    assert float(peers_per_rank(ALGORITHMS.index("direct"), 8, 8, sy)) == 7


def test_direct_gather_on_rail_only_forwards_to_the_roots_rail(ideal):
    """Rail-only (no cross-rail tier): the 24/32 held in other domains reach the root's rail over
    their senders' HB domains, then its NIC; the forwarding is HB traffic and one more HB hop."""
    rail = (NetworkTier(name="rail", span_domains=4, cross_rail=False, bandwidth_per_gpu_bytes_per_s=B_NET,
                        latency_s=ALPHA_NET),)
    sy = _system(n_gpus=32, tiers=rail)
    shape = GroupShape(size=32, ranks_per_domain=8, domain_span=4, same_rail=True)
    n = 2.0**30
    one = collective_estimate("gather", n, shape, sy, ideal, algorithms=("direct",))
    two = collective_estimate("gather", 2 * n, shape, sy, ideal, algorithms=("direct",))
    assert np.isfinite(one.time_s)
    assert two.time_s - one.time_s == pytest.approx(24 / 32 * n / B_NET, rel=1e-9)
    assert one.hb_bytes == pytest.approx((7 / 32 + 24 / 32) * n, rel=1e-9)
    assert one.rail_bytes == pytest.approx(24 / 32 * n, rel=1e-9) and one.spine_bytes == 0.0


def test_direct_gather_is_bound_by_the_roots_nic_not_an_oversubscribed_spine(ideal):
    """One root receives: the spine's 4:1 uplinks carry the 24 remote members' shares into the
    root's leaf far below their capacity, so the time is the 1:1 fabric's (the root's NIC)."""
    shape = GroupShape(size=32, ranks_per_domain=8, domain_span=4, same_rail=True)
    n = 2.0**30
    t = [collective_estimate("gather", n, shape, _system(n_gpus=32, tiers=_clos(4, 1, r)), ideal,
                             algorithms=("direct",)).time_s for r in (1.0, 4.0)]
    assert t[1] == pytest.approx(t[0], rel=1e-9)


def test_binomial_gather_across_domains_by_hand(ideal):
    """32 ranks on 4 domains: ceil(lg 8) = 3 steps inside the domain, 2 across (zero-latency
    fabric here); 7/32 of the vector over HB, 24/32 over the NIC."""
    sy = _system(n_gpus=32, tiers=_clos(4, 4, 1.0))
    shape = GroupShape(size=32, ranks_per_domain=8, domain_span=4, same_rail=True)
    n = 1e9
    est = collective_estimate("gather", n, shape, sy, ideal, algorithms=("binomial",))
    assert est.time_s == pytest.approx(3 * ALPHA_HB + 7 / 32 * n / B_HB + 24 / 32 * n / B_NET, rel=1e-9)


def test_queue_pairs_per_connection_set_the_nics_share_of_line_rate(ideal):
    """The binomial gather above with the NICs at half their line rate on one InfiniBand queue pair
    per connection and 0.8 on two (NCCL_IB_QPS_PER_CONNECTION, as a study's nccl_env gives it): the
    24/32 of the vector that crosses the network takes 1/0.5 and 1/0.8 of its ideal time."""
    sy = _system(n_gpus=32, tiers=_clos(4, 4, 1.0))
    shape = GroupShape(size=32, ranks_per_domain=8, domain_span=4, same_rail=True)
    n = 1e9
    one_qp = ideal.model_copy(update={"nic_efficiency": 0.5, "nic_efficiency_multi_qp": 0.8})
    two_qp = one_qp.model_copy(update=NcclEnvironment(ib_qps_per_connection=2).calibration_update())
    for c, eta in ((one_qp, 0.5), (two_qp, 0.8)):
        est = collective_estimate("gather", n, shape, sy, c, algorithms=("binomial",))
        assert est.time_s == pytest.approx(3 * ALPHA_HB + 7 / 32 * n / B_HB + 24 / 32 * n / (eta * B_NET), rel=1e-9)


def test_send_recv_channels_with_two_queue_pairs(calib):
    """One p2p channel to a network peer moves p2p_net_one_channel_bytes_per_s on one queue pair and
    that times nic_efficiency_multi_qp / nic_efficiency on two; c channels add up as c**0.731 on one
    and as c on two (collectives.yaml, measured)."""
    one = calib.p2p_net_one_channel_bytes_per_s
    two_qp = calib.model_copy(update={"ib_qps_per_connection": 2})
    assert p2p_net_channels_bytes_per_s(2, calib) == pytest.approx(one * 2**0.731, rel=1e-12)
    assert p2p_net_channels_bytes_per_s(2, two_qp) == pytest.approx(2 * one * 0.98 / 0.88, rel=1e-12)


@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "reduce_scatter"])
def test_sharp_offload_is_the_same_whatever_the_queue_pairs(calib, op):
    """SHARP's CollNet path streams through the switches' offload, which the IB queue-pair setting
    does not touch (TB-6: 546 -> 554 GB/s all-reduce where rings went 307 -> 384); the ring on the
    same NICs speeds up by nic_efficiency_multi_qp / nic_efficiency at large sizes. (The pipeline fill,
    set here to zero, follows the channels' bandwidth, which the queue pairs do move.)"""
    calib = calib.model_copy(update={"pipeline_fill_factor": 0.0})
    g, n_dom, n = 8, 4, 2.0**34
    p = g * n_dom
    sharp = (NetworkTier(name="rail", span_domains=n_dom, cross_rail=False, bandwidth_per_gpu_bytes_per_s=B_NET,
                         in_network_reduction=True),)
    shape = GroupShape(size=p, ranks_per_domain=g, domain_span=n_dom, same_rail=True)
    system = _system(n_gpus=p, tiers=sharp, hb_bw=900e9)
    two_qp = calib.model_copy(update={"ib_qps_per_connection": 2})
    assert _one(op, n, shape, system, two_qp, "collnet").time_s == pytest.approx(
        _one(op, n, shape, system, calib, "collnet").time_s, rel=1e-12)
    speedup = _one(op, n, shape, system, calib, "ring").time_s / _one(op, n, shape, system, two_qp, "ring").time_s
    assert calib.nic_efficiency_multi_qp > calib.nic_efficiency
    assert 1.0 < speedup <= calib.nic_efficiency_multi_qp / calib.nic_efficiency + 1e-9


def test_nvls_gathers_stop_at_nccls_arity(calib):
    # NCCL_MAX_NVLS_ARITY = 32 (device.h): NVLS all-gather runs on a domain of 32 GPUs, not of 33
    # (enqueue.cc from v2.25); all-reduce keeps NVLS; NCCL 2.24 had no such gate
    def one(op, k, c):
        sy = _system(k=k, n_gpus=k, nvls=True)
        shape = GroupShape(size=k, ranks_per_domain=k, domain_span=1, same_rail=True)
        return collective_estimate(op, 2.0**26, shape, sy, c, algorithms=("nvls",))

    assert one("all_gather", 32, calib).algorithm == "nvls"
    assert not np.isfinite(one("all_gather", 33, calib).time_s)
    assert one("all_reduce", 33, calib).algorithm == "nvls"
    assert one("all_gather", 33, for_nccl_version(calib, "2.24")).algorithm == "nvls"


def test_a_gather_is_priced_alike_alone_and_beside_other_groups():
    # A vectorized call prices each point as its own call would: a rooted gather of 16 ranks, two per
    # domain on one rail, alone and in one call with a cross-rail group (which adds PXN routes to the
    # candidates); its members beyond the root's domain sit on other rails either way
    from designer.perf import collectives as coll
    from tests.perf.systems import cluster

    sy = cluster("h100_sxm", 128)
    calib = coll.load_collective_calibration()
    for op in ("gather", "scatter"):
        alone = coll.collective_estimate_vec(op, 65536.0, 16, 2, 8, True, sy, calib)
        both = coll.collective_estimate_vec(op, 65536.0, [16, 16], [2, 2], [8, 8], [True, False], sy, calib)
        for f in ("time_s", "hb_bytes", "rail_bytes", "spine_bytes"):
            assert float(getattr(both, f)[0]) == float(getattr(alone, f)), (op, f)
