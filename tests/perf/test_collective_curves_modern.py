"""The collective model against the measured curves of shared/reference/collectives-modern.md
(tests/perf/data/nccl_curves_modern.yaml). Run with -s for every curve's table: size, measured,
predicted, error, and the algorithm and protocol chosen.

Targets (the collective-fidelity issue): every point >= 1 MiB within 10%, every point <= 64 KiB
within 50%. They are not met everywhere yet; the bounds below hold the model where it is and fail
when it gets worse (see the README's collective table for the current shares)."""

from __future__ import annotations

import numpy as np
import pytest

from designer.perf import collectives as coll
from tests.perf import collective_curves as cc

# share of points within the target, per (source kind, band): floors at the current figures
# (the nccl-tests points <= 1 MiB are the EFA curves', whose floors set their path latencies,
# collective_curves.EFA_PATH_LATENCY_S); curves designer does not model (collective_curves.UNMODELLED)
# count under their own kind
FLOORS = {("nccl-tests", "large"): 0.92, ("nccl-tests", "small"): 0.90, ("xla", "large"): 0.23}
# curve families the model must hold at large sizes (within 10% of every point >= 1 MiB)
HELD = ("TB-5-AR-ring-", "TB-5-AG-ring-", "TB-1-AR-ring-", "TB-2-AG-ring-", "TB-5-SR-2n",
        "TB-5-SR-4n", "SB-B2-8gpu-default", "TB-5-AR-nvls-1n", "TB-1-AR-nvls-1n", "TB-5-AR-tree-",
        "TB-1-AR-tree-", "TB-1-SR-2n", "TB-1-SR-4n", "TB-5-SR-16n", "XR-5",
        # B200 NVLSTree beyond two nodes (collectives.yaml nvls_tree_many_domains_fraction)
        *(f"TB-5-AR-nvlstree-{n}n" for n in (4, 8, 16, 32, 64)),
        *(f"TB-1-AR-nvlstree-{n}n" for n in (4, 8, 16, 32, 46)),
        # and between two (nvls_tree_two_domains_factor)
        "TB-5-AR-nvlstree-2n", "TB-5-AR-nvls-2n", "TB-1-AR-nvlstree-2n", "TB-1-AR-nvls-2n",
        # send/recv inside one B200 node (collectives.yaml p2p_hb_fraction)
        "TB-5-SR-1n", "TB-1-SR-1n",
        # CollNet (SHARP) all-gather over 2-46 B200 nodes (collectives.yaml collnet_gather_efficiency)
        "TB-2-AG-collnet-",
        # and the all-reduce, run with NVLS disabled (the script's collnet_sharp configuration)
        "TB-1-AR-collnet-",
        # 4 B200 nodes with NCCL's default queue pairs and with two per connection (nic_efficiency,
        # nic_efficiency_multi_qp), and SHARP there
        "TB-6-AR-", "TB-6-AG-", *(f"TB-6-RS-{a}-{f}" for a in ("ring", "nvls", "collnet") for f in ("hca-fix", "tuned")),
        # the same cluster with two queue pairs at 2-64 nodes, not fitted but the send/recv channels
        # adding up (p2p_net_channel_exponent_multi_qp)
        "TB-7-AR-tree-", "TB-7-AG-ring-", "TB-7-SR-", *(f"TB-7-AR-ring-{n}n" for n in (2, 4, 8, 16, 32)),
        *(f"TB-7-AR-collnet-{n}n" for n in (2, 4, 16, 64)))


@pytest.fixture(scope="module")
def results():
    calib = coll.load_collective_calibration()
    return {cid: cc.predict(c, calib) for cid, c in cc.curves().items() if cc.usable(c)}


def test_print_every_curve(results):
    for cid, pts in results.items():
        c = cc.curves()[cid]
        print(f"\n## {cid}: {c['op']} on {c['ranks']} x {c['gpu']} ({c['fabric']}), {c['quantity']}, "
              f"NCCL {c.get('nccl_version') or '?'}")
        print(f"{'size B':>14} {'measured':>10} {'designer':>10} {'error':>8}  algorithm/protocol")
        why = cc.unmodelled(cid)
        if why:
            print(f"   NOT MODELLED ({cc.source_kind(cid)}, outside the nccl-tests shares): {why}")
        named = cc.ALGORITHM_NAMES.get((c.get("algorithm") or "").lower())
        for p in pts:
            print(f"{p.size_bytes:>14} {p.measured:>10.3f} {p.predicted:>10.3f} {p.error:>+8.1%}  {p.algorithm}/{p.protocol}")
        differs = sorted({p.algorithm for p in pts if named and p.size_bytes >= cc.MIB and p.algorithm != named})
        if differs:
            print(f"   {cid}: designer chooses {', '.join(differs)} where the source names {named} (forced, enabled or logged)")
    assert results


def _shares(results):
    acc: dict = {}
    for cid, pts in results.items():
        kind = cc.source_kind(cid)
        for p in pts:
            b = cc.band(p.size_bytes)
            tol = 0.10 if b == "large" else 0.50
            acc.setdefault((kind, b), []).append(abs(p.error) <= tol)
    return {k: float(np.mean(v)) for k, v in acc.items()}


def test_share_within_targets(results):
    shares = _shares(results)
    for key, share in sorted(shares.items()):
        print(f"{key[0]:>10} {key[1]:>5}: {share:.0%} of points within target")
    for key, floor in FLOORS.items():
        assert shares[key] >= floor, (key, shares[key])


@pytest.mark.parametrize("prefix", HELD)
def test_held_families_within_ten_percent(results, prefix):
    pts = [(cid, p) for cid, ps in results.items() if cid.startswith(prefix) for p in ps if p.size_bytes >= cc.MIB]
    assert pts
    worst = max(pts, key=lambda x: abs(x[1].error))
    assert abs(worst[1].error) <= 0.10 + 1e-9, (worst[0], worst[1])


def test_one_node_ring_reduce_scatter_ramp_within_ten_percent(results):
    # TG-H2, 8 x H100 ring reduce-scatter: the mid-size ramp that sets
    # ring_gather_fill_fraction_one_domain (collectives.yaml). Its 1-2 MiB points sit on the
    # single-process launch floor of the run (~35 us), above the Hopper host floor, and stay out.
    pts = [p for p in results["TG-H2"] if p.size_bytes >= 4 * cc.MIB]
    assert len(pts) >= 5
    assert max(abs(p.error) for p in pts) <= 0.10, [(p.size_bytes, round(p.error, 3)) for p in pts]


def test_efa_nvls_tree_with_the_plugins_chunks_within_ten_percent(results):
    # AWS-1, 2 x 8 H100 (p5) over EFA: aws-ofi-nccl raises NCCL's NVLS / NVLSTree chunks to 512 KiB
    # and its buffer to 8 MiB (collective_curves.EFA_NCCL_ENV); from 32 MiB, where NCCL runs NVLSTree,
    # every point holds within 10% (with NCCL's default chunks they were 8-27% fast)
    pts = [p for p in results["AWS-1"] if p.size_bytes >= 32 * cc.MIB]
    assert len(pts) >= 8 and {p.algorithm for p in pts} == {"nvls_tree"}
    assert max(abs(p.error) for p in pts) <= 0.10, [(p.size_bytes, round(p.error, 3)) for p in pts]


def test_host_floor_is_once_per_call():
    # the smallest allreduce on one 8 x H100 node takes the Hopper host floor, with or without CUDA graphs
    from tests.perf.systems import cluster

    calib = coll.load_collective_calibration()
    sy = cluster("h100_sxm", 8)
    shape = coll.GroupShape(size=8, ranks_per_domain=8, domain_span=1, same_rail=True)
    t = coll.collective_time_s("all_reduce", 8.0, shape, sy, calib)
    assert t == pytest.approx(calib.host_floor_s["hopper"])
    g = coll.collective_estimate_vec("all_reduce", 8.0, 8, 8, 1, True, sy, calib, cuda_graphs=True).time_s
    assert float(g) < t


def test_a_ring_across_nodes_takes_at_least_its_steps():
    """Hand count: a ring all-gather of 16 ranks on two 8-GPU nodes has 15 steps, an all-reduce 30;
    with LL128 or Simple none is shorter than ring_network_step_s, whatever the bytes. LL, a ring
    inside one node, and a message whose steps carry more than the floor's worth are unchanged. The
    choice among algorithms and protocols sees the floor, so more bandwidth never makes a call
    slower (tests/perf/test_routing_and_traffic.py)."""
    from tests.perf.systems import cluster

    calib = coll.load_collective_calibration()
    step = calib.ring_network_step_s
    off = calib.model_copy(update={"ring_network_step_s": 0.0})
    two_nodes, one_node = cluster("h100_sxm", 16), cluster("h100_sxm", 8)

    def t(op, n, sy, p, cal, proto):
        return float(coll.collective_estimate_vec(op, float(n), p, 8, p // 8, True, sy, cal, algorithms=("ring",),
                                                  protocols=(proto,)).time_s)

    mib = cc.MIB
    for op, steps in (("all_gather", 15), ("reduce_scatter", 15), ("all_reduce", 30)):
        for proto in ("LL128", "Simple"):
            without = t(op, mib, two_nodes, 16, off, proto)
            assert without < steps * step  # the bytes alone: the floor binds
            assert t(op, mib, two_nodes, 16, calib, proto) == pytest.approx(steps * step, rel=1e-12)
            big = 4096 * mib
            assert t(op, big, two_nodes, 16, calib, proto) == t(op, big, two_nodes, 16, off, proto)
        assert t(op, mib, two_nodes, 16, calib, "LL") == t(op, mib, two_nodes, 16, off, "LL")
        assert t(op, mib, one_node, 8, calib, "Simple") == t(op, mib, one_node, 8, off, "Simple")


def test_ring_step_floor_holds_the_mid_sizes_of_multi_node_rings(results):
    # 80 H100 over InfiniBand (XR-2, XR-3) at 32 MiB were 78-87% fast before the floor, and XR-3 at
    # 64 MiB 32% fast; the rest of those curves is unchanged by it
    for cid, size in (("XR-2", 33553920), ("XR-3", 33553920), ("XR-3", 67107840)):
        p = next(p for p in results[cid] if p.size_bytes == size)
        assert (p.algorithm, p.protocol) == ("ring", "LL128") and abs(p.error) <= 0.10, (cid, round(p.error, 3))


def test_nvl72_nvls_allreduce_ramp_follows_its_72_heads(results):
    # each NVLS all-reduce step waits on every GPU of the domain: on a 72-GPU NVL72 domain its ramp
    # is slower than on the 8-GPU nodes the fill was fitted on. XLA's NVL72 table holds within 10% from
    # 576 MiB (without the heads it was 9-28% fast up to 4.5 GiB)
    pts = [p for p in results["X-G1"] if p.size_bytes >= 576 * cc.MIB]
    assert len(pts) == 6 and {p.algorithm for p in pts} == {"nvls"}
    assert max(abs(p.error) for p in pts) <= 0.10, [(p.size_bytes, round(p.error, 3)) for p in pts]


def test_nvls_fill_grows_with_heads_for_all_reduce_only():
    # the same NVLink5 GPUs in domains of 8 and 72. With t(n) = a + b n + c sqrt(n), the fill c sqrt(n)
    # is (4 (t(4n) - t(n)) - (t(16n) - t(4n))) / 2 whatever a and b; the all-reduce's (each step
    # waits on all g GPUs) is sqrt((72/8)^x) = 3^x times the 8-GPU one, x the calibrated exponent of
    # its fill factor's growth with the GPUs (1.35, from the NVL72 curves), while the all-gather's (a chunk
    # per channel; NCCL runs it on at most 32 GPUs) moves only with its bytes per GPU, the square
    # root of (31/32) / (7/8)
    from tests.perf.systems import cluster

    calib = coll.load_collective_calibration()

    def fill_s(op, g, size=2.0**30):
        sy = cluster("gb200", g, hb_size=g, hb_nvls=True)
        shape = coll.GroupShape(size=g, ranks_per_domain=g, domain_span=1, same_rail=True)
        t = [coll.collective_estimate(op, size * k, shape, sy, calib, algorithms=("nvls",)).time_s for k in (1, 4, 16)]
        return (4.0 * (t[1] - t[0]) - (t[2] - t[1])) / 2.0

    assert calib.nvls_fill_domain_exponent == 1.35
    assert fill_s("all_reduce", 72) / fill_s("all_reduce", 8) == pytest.approx(3.0 ** 1.35, rel=1e-6)
    assert fill_s("all_gather", 32) / fill_s("all_gather", 8) == pytest.approx(((31 / 32) / (7 / 8)) ** 0.5, rel=1e-6)


def test_nvls_gathers_stop_at_nccls_arity():
    # NCCL leaves NVLS out of all-gather and reduce-scatter on a domain of more than
    # NCCL_MAX_NVLS_ARITY = 32 GPUs (enqueue.cc), all-reduce keeps it: on a 72-GPU NVL72 rack a 4 MiB
    # all-gather rings, on 16 GPUs of it NVLS may run it, and XLA's NVL72 all-gather and
    # reduce-scatter tables hold within 10% from 288 MiB and 2 GiB, as rings
    from tests.perf.systems import cluster

    calib = coll.load_collective_calibration()
    size = 4.0 * 2**20

    def choice(op, g, algorithms=None):
        sy = cluster("gb200", g, hb_size=g, hb_nvls=True)
        shape = coll.GroupShape(size=g, ranks_per_domain=g, domain_span=1, same_rail=True)
        return coll.collective_estimate(op, size, shape, sy, calib, algorithms=algorithms)

    assert calib.nvls_max_arity == 32
    assert choice("all_gather", 72).algorithm == "ring"
    assert choice("reduce_scatter", 72).algorithm == "ring"
    assert choice("all_reduce", 72).algorithm == "nvls"
    assert choice("all_gather", 16, algorithms=("nvls",)).algorithm == "nvls"


def test_nvl72_gathers_ring_within_ten_percent(results):
    pts = [p for p in results["X-G2"] if p.size_bytes >= 288 * cc.MIB]
    pts += [p for p in results["X-G3"] if p.size_bytes >= 2048 * cc.MIB]
    assert len(pts) == 11 and {p.algorithm for p in pts} == {"ring"}
    assert max(abs(p.error) for p in pts) <= 0.10, [(p.size_bytes, round(p.error, 3)) for p in pts]
