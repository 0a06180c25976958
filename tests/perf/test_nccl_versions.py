"""NCCL's release-dependent rules: the shipped constants are NCCL 2.30's, version_overrides hold
what older releases used (tuning.cc of each tag), and a study can pin the release it models."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from designer.errors import SpecError
from designer.perf import collectives as coll
from designer.pipeline import make_problem
from designer.spec.load import validate
from designer.spec.study import StudySpec
from tests.perf.systems import cluster

REPO = Path(__file__).resolve().parents[2]
CAL = coll.load_collective_calibration()
SHAPE8 = coll.GroupShape(size=8, ranks_per_domain=8, domain_span=1, same_rail=True)


def test_older_releases_take_their_constants():
    old = coll.for_nccl_version(CAL, "2.20")
    # tuning.cc v2.20: ring LL x 1/4, Tree Simple base 0 and 28 us hops
    assert old.ll_bandwidth_fraction == 0.25 and old.max_channels == CAL.max_channels
    assert old.base_latency_s["tree"][2] == 0.0 and old.hop_latency_s["tree"].net[2] == pytest.approx(28e-6)
    # v2.20: 1/3 for an all-gather, reduce-scatter or broadcast on one node; Hopper's LL cap 87.7 GB/s
    # (llMaxBws {87.7, 22.5, 19.0}, 141 from v2.21); ring LL128 0.7 with one GPU per node until v2.23
    assert old.ll_bandwidth_fraction_one_domain_gather == pytest.approx(1 / 3)
    assert old.architectures["hopper"].ll_max_single_domain_bytes_per_s == 87.7e9
    assert old.ll128_bandwidth_fraction_one_per_domain == 0.7
    new = coll.for_nccl_version(CAL, "2.21")
    assert new.ll_bandwidth_fraction_one_domain_gather is None and new.ll_bandwidth_fraction == 0.5
    assert new.architectures["hopper"].ll_max_single_domain_bytes_per_s == 141.0e9
    assert coll.for_nccl_version(CAL, "2.23").ll128_bandwidth_fraction_one_per_domain is None
    assert coll.for_nccl_version(CAL, "2.27").hop_latency_s["nvls_tree"].net[2] == pytest.approx(14e-6)
    assert CAL.hop_latency_s["nvls_tree"].net[2] == pytest.approx(20.9e-6)  # 2.28 and later
    # Blackwell's LL128 cap per channel: 73.4 GB/s in 2.25-2.28, 40 from 2.29.7
    assert coll.for_nccl_version(CAL, "2.26").architectures["blackwell"].ring_ll128_per_channel_bytes_per_s == 73.4e9
    assert CAL.architectures["blackwell"].ring_ll128_per_channel_bytes_per_s == 40.0e9


def test_ll128_and_pat_follow_the_release():
    # LL128 on Blackwell only from NCCL 2.25 (tuning.cc pEnable); PAT from 2.23
    assert not coll.ll128_enabled(coll.for_nccl_version(CAL, "2.24"), "blackwell")
    assert coll.ll128_enabled(coll.for_nccl_version(CAL, "2.25"), "blackwell")
    assert coll.ll128_enabled(CAL, "hopper")
    sy = cluster("b200", 8)
    e = coll.collective_estimate("all_gather", 8e6, SHAPE8, sy, coll.for_nccl_version(CAL, "2.24"))
    assert e.protocol != "LL128"
    single_gpu_nodes = cluster("h100_sxm", 512)
    shape = coll.GroupShape(size=64, ranks_per_domain=1, domain_span=64, same_rail=True)
    pat_old = coll.collective_estimate("all_gather", 64 * 1024.0, shape, single_gpu_nodes,
                                       coll.for_nccl_version(CAL, "2.22"), algorithms=("pat",))
    assert pat_old.time_s == float("inf")  # PAT does not exist before 2.23
    # tuning.cc: PAT 8 + log2(64)·14/3.5 + 64·2.8 = 211.2 us against ring LL 6.6 + 63·5.0 = 321.6 us
    # (Tree NET latency at one GPU per node): at 1 KiB designer picks PAT, at its latency plus a
    # bandwidth term of 1 KiB at 0.75 of one NIC
    e = coll.collective_estimate("all_gather", 1024.0, shape, single_gpu_nodes, CAL)
    lat = 8e-6 + 6 * 14e-6 / 3.5 + 64 * 2.8e-6
    assert e.algorithm == "pat" and lat < e.time_s < lat + 2e-6


def test_a_study_pins_the_release():
    spec = yaml.safe_load(open(REPO / "studies" / "quickstart" / "study.yaml"))
    p = make_problem(validate(StudySpec, {**spec, "nccl_version": "2.20"}))
    assert p.calib.collectives.nccl_version == "2.20" and p.calib.collectives.ll_bandwidth_fraction == 0.25
    assert make_problem(validate(StudySpec, spec)).calib.collectives.nccl_version == CAL.nccl_version
    with pytest.raises(SpecError) as e:
        validate(StudySpec, {**spec, "nccl_version": "3.1"})
    assert "\n" not in str(e.value) and "nccl_version" in str(e.value)


def test_a_study_states_its_nccl_environment():
    # aws-ofi-nccl's p5 settings: the study's collective model takes them, the quickstart's spec
    # hash (written before the field) stays, and a bad value is one line naming the field
    spec = yaml.safe_load(open(REPO / "studies" / "quickstart" / "study.yaml"))
    env = {"buffsize_bytes": 8388608, "nvls_chunksize_bytes": 524288, "nvlstree_max_chunksize_bytes": 524288}
    c = make_problem(validate(StudySpec, {**spec, "nccl_env": env})).calib.collectives
    assert (c.buffer_bytes, c.nvls_chunk_bytes, c.nvls_tree_max_chunk_bytes) == (8388608.0, 524288.0, 524288.0)
    plain = validate(StudySpec, spec)
    assert make_problem(plain).calib.collectives.buffer_bytes == 4194304.0
    assert "nccl_env" not in plain.identity_data()
    assert validate(StudySpec, {**spec, "nccl_env": env}).spec_hash() != plain.spec_hash()
    with pytest.raises(SpecError) as e:
        validate(StudySpec, {**spec, "nccl_env": {"buffsize_bytes": 0}})
    assert "\n" not in str(e.value) and "buffsize_bytes" in str(e.value)
    # a site's InfiniBand setting: two queue pairs per connection
    c2 = make_problem(validate(StudySpec, {**spec, "nccl_env": {"ib_qps_per_connection": 2}})).calib.collectives
    assert c2.ib_qps_per_connection == 2 and coll.net_efficiency(c2) == c2.nic_efficiency_multi_qp
    assert coll.net_efficiency(make_problem(plain).calib.collectives) == CAL.nic_efficiency
    with pytest.raises(SpecError) as e:
        validate(StudySpec, {**spec, "nccl_env": {"ib_qps_per_connection": 0}})
    assert "\n" not in str(e.value) and "ib_qps_per_connection" in str(e.value)


def test_small_broadcast_and_reduce_cost_one_hop_across_nodes():
    # tuning.cc (Broadcast/Reduce, sameChannels): base + one hop whatever the rank count; LL across
    # nodes: 6.6 + 2.7 = 9.3 us on 4 nodes x 8 H100 (no host floor here), against the p-1 hops of
    # an allgather ring
    calib = CAL.model_copy(update={"host_floor_s": {}})
    sy = cluster("h100_sxm", 32)
    shape = coll.GroupShape(size=32, ranks_per_domain=8, domain_span=4, same_rail=True)
    for op in ("broadcast", "reduce"):
        e = coll.collective_estimate(op, 8.0, shape, sy, calib, algorithms=("ring",))
        assert e.protocol == "LL" and e.time_s == pytest.approx(6.6e-6 + 2.7e-6, rel=0.01)
    # allgather ring LL: base 6.6 + (31 - 3) intra steps at max(0.6, netOverhead 1.0) + 3 inter at 2.7
    ag = coll.collective_estimate("all_gather", 8.0, shape, sy, calib, algorithms=("ring",))
    assert ag.time_s == pytest.approx(6.6e-6 + 28 * 1.0e-6 + 3 * 2.7e-6, rel=0.01)



def _hopper_cluster(n_gpus, gpus_per_node=8, sharp=False, arch_sys=None):
    from designer.spec.system import ClusterSystem, GpuPerf, HBDomain, NetworkTier

    n_dom = n_gpus // gpus_per_node
    gpu = GpuPerf(name="g", architecture="hopper" if gpus_per_node <= 8 else "blackwell",
                  peak_flops={"bf16": 1e15}, hbm_bytes=80e9, hbm_bandwidth_bytes_per_s=3e12)
    tiers = (NetworkTier(name="leaf", span_domains=n_dom, cross_rail=False, bandwidth_per_gpu_bytes_per_s=50e9,
                         latency_s=1e-6, in_network_reduction=sharp),
             NetworkTier(name="spine", span_domains=n_dom, cross_rail=True, bandwidth_per_gpu_bytes_per_s=50e9,
                         latency_s=2e-6))
    return ClusterSystem(gpu=gpu, n_gpus=n_gpus,
                         hb=HBDomain(size=gpus_per_node, bandwidth_per_gpu_bytes_per_s=450e9 if gpus_per_node <= 8 else 900e9,
                                     in_network_reduction=True),
                         nic_bandwidth_per_gpu_bytes_per_s=50e9, tiers=tiers)


def test_collnet_runs_on_nodes_of_at_most_eight_gpus_from_2_23():
    # enqueue.cc v2.23.4+: CollNetDirect (the model's CollNet) is skipped when a node has more than
    # NCCL_MAX_DIRECT_ARITY + 1 = 8 local ranks; 2.22 had no such gate
    big = _hopper_cluster(144, gpus_per_node=72, sharp=True)
    small = _hopper_cluster(128, gpus_per_node=8, sharp=True)
    wide = coll.GroupShape(size=144, ranks_per_domain=72, domain_span=2, same_rail=True)
    eight = coll.GroupShape(size=128, ranks_per_domain=8, domain_span=16, same_rail=True)
    for op in ("all_reduce", "all_gather"):
        assert coll.collective_estimate(op, 2.0**28, wide, big, CAL, algorithms=("collnet",)).time_s == float("inf")
        assert coll.collective_estimate(op, 2.0**28, wide, big, CAL).algorithm != "collnet"
        old = coll.for_nccl_version(CAL, "2.22")
        assert coll.collective_estimate(op, 2.0**28, wide, big, old, algorithms=("collnet",)).time_s < float("inf")
        assert coll.collective_estimate(op, 2.0**28, eight, small, CAL, algorithms=("collnet",)).time_s < float("inf")


def test_one_gpu_per_node_rings_take_the_tree_net_latency_from_2_23():
    # tuning.cc v2.23.4+: with one GPU per node a ring's inter-node hops use hwLat[NET][TREE]; v2.18-
    # v2.22 the Ring row. A 16-node ring all-gather of 1 byte has 15 inter-node hops: flipping only
    # the release gate moves it by 15 x (tree - ring NET LL latency) = 15 x (5.0 - 2.7) us.
    sy = _hopper_cluster(128)
    shape = coll.GroupShape(size=16, ranks_per_domain=1, domain_span=16, same_rail=True)
    # (no host floor and no pipeline fill: the latency terms alone)
    old = coll.for_nccl_version(CAL, "2.22").model_copy(update={"host_floor_s": {}, "pipeline_fill_factor": 0.0})
    gated = old.model_copy(update={"nccl_version": "2.23"})

    def t(c):
        return coll.collective_estimate("all_gather", 1.0, shape, sy, c, algorithms=("ring",), protocols=("LL",)).time_s
    assert t(gated) - t(old) == pytest.approx(15 * (old.hop_latency_s["tree"].net[0] - old.hop_latency_s["ring"].net[0]),
                                              rel=1e-6)


def test_one_gpu_per_node_ring_ll128_reaches_seven_tenths_before_2_23():
    # tuning.cc v2.12-v2.22: ring LL128 busBw x (ppn < 2 ? 0.7 : 0.92); 0.92 from 2.23. One GPU per
    # node with a 50 GB/s NIC: the Simple busBw is 0.88 x 50 GB/s (nic_efficiency), LL128 0.92 of it
    # capped at one channel's 36.7 GB/s, or 0.7 of it: at a large size the times stand in that ratio.
    sy = _hopper_cluster(128)
    shape = coll.GroupShape(size=16, ranks_per_domain=1, domain_span=16, same_rail=True)
    old = coll.for_nccl_version(CAL, "2.22").model_copy(update={"host_floor_s": {}})
    n = 2.0**40

    def t(c):
        return coll.collective_estimate("all_gather", n, shape, sy, c, algorithms=("ring",), protocols=("LL128",)).time_s
    bus = old.nic_efficiency * 50e9
    assert t(old) / t(old.model_copy(update={"ll128_bandwidth_fraction_one_per_domain": None})) == pytest.approx(
        min(0.92 * bus, 36.7e9) / (0.7 * bus), rel=1e-3)


def test_nvls_needs_three_gpus_of_a_node_before_2_28():
    # transport/nvls.cc: no NVLS on a node where the communicator has gpuCount <= 2 GPUs (v2.18.6 to
    # v2.28.3), < 2 from v2.28.7; enqueue.cc then skips NVLS and NVLSTree. Two GPUs of each of 4 nodes
    # (a data-parallel group under TP 4), and two GPUs of one node
    sy = _hopper_cluster(32)
    across = coll.GroupShape(size=8, ranks_per_domain=2, domain_span=4, same_rail=True)
    inside = coll.GroupShape(size=2, ranks_per_domain=2, domain_span=1, same_rail=True)
    three = coll.GroupShape(size=12, ranks_per_domain=3, domain_span=4, same_rail=True)
    for version, g2 in (("2.18", False), ("2.27", False), ("2.28", True), ("2.30", True)):
        c = coll.for_nccl_version(CAL, version)
        assert (coll.collective_estimate("all_reduce", 2.0**26, across, sy, c, algorithms=("nvls_tree",)).time_s
                < float("inf")) == g2, version
        assert (coll.collective_estimate("all_reduce", 2.0**26, inside, sy, c, algorithms=("nvls",)).time_s
                < float("inf")) == g2, version
        assert coll.collective_estimate("all_reduce", 2.0**26, three, sy, c, algorithms=("nvls_tree",)).time_s < float("inf")


def test_blackwells_ring_ll128_cap_is_lower_on_two_nodes_in_2_28():
    # tuning.cc v2.28.7-v2.28.9 perChMaxRingLL128Bws[Blackwell] = {2*36.7, 34.6, 2*36.7} by node count
    # (N1/N2/N4): a ring of two 8-GPU B200 nodes at LL128 is capped at 34.6 GB/s a channel, one node
    # and four at 73.4 (a 256 MiB all-gather, where the cap binds on two nodes)
    sy = cluster("b200", 64)
    c = coll.for_nccl_version(CAL, "2.28")
    arch = c.architectures["blackwell"]
    flat = c.model_copy(update={"architectures": {**c.architectures, "blackwell": arch.model_copy(
        update={"ring_ll128_per_channel_bytes_per_s": 73.4e9})}})

    def t(calib, span):
        shape = coll.GroupShape(size=8 * span, ranks_per_domain=8, domain_span=span, same_rail=True)
        return coll.collective_estimate("all_gather", 2.0**28, shape, sy, calib, algorithms=("ring",),
                                        protocols=("LL128",)).time_s
    assert t(c, 2) > 1.1 * t(flat, 2)
    assert t(c, 1) == t(flat, 1) and t(c, 4) == t(flat, 4)
