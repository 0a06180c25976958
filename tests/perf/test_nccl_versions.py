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
