"""Validation of the collective model against measured data (collectives.md §5, railonly.md §5).

Run with `-s` to see the per-point error table.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from designer.perf.collectives import (
    hb_link_efficiency,
    GroupShape,
    bus_bandwidth_factor,
    collective_estimate,
    collective_estimate_vec,
    load_collective_calibration,
)
from designer.spec.system import ClusterSystem, GpuPerf, HBDomain, NetworkTier

CURVES = yaml.safe_load((Path(__file__).parent / "data" / "nccl_curves.yaml").read_text())
MIB = 2**20
# Targets: every point >= 1 MiB within 15%, the large-message plateau within 10%. The plateau is the
# points >= 256 MiB whose measured busbw is at least 85% of the curve's peak: this keeps every
# point >= 256 MiB of A, B1 and D (87-100% of peak) and all of F-AR from 512 MiB, and leaves out
# F-AR's 256 MiB point, a measured dip (239.8 GB/s, below the 275.3 of 128 MiB and 72% of the peak),
# which still has to meet the 15% bound.
POINT_TOL = 0.15
PLATEAU_TOL = 0.10
PLATEAU_MIN_BYTES = 256 * 2**20
PLATEAU_FRACTION_OF_PEAK = 0.85

GPUS = {arch: GpuPerf(name=f"test-{arch}", architecture=arch, peak_flops={"bf16": 1e15}, hbm_bytes=80e9,
                      hbm_bandwidth_bytes_per_s=3e12) for arch in ("ampere", "hopper", "blackwell")}
# NVLink hop latency: NCCL's LL per-hop constant for NVLink, 0.6 us (§4.2), the smallest per-hop
# cost NCCL attributes to the link, so an upper bound on its wire latency.
NVLINK_LATENCY_S = 0.6e-6


def _size_bytes(label: str) -> int:
    mult = {"K": 2**10, "M": 2**20, "G": 2**30}
    return int(label[:-1]) * mult[label[-1]] if label[-1] in mult else int(label)


def _node_system(k: int, nvlink_bytes_per_s: float, nvls: bool, nic_bytes_per_s: float, n_gpus: int | None = None,
                 tiers: tuple[NetworkTier, ...] = (), arch: str = "hopper") -> ClusterSystem:
    return ClusterSystem(
        gpu=GPUS[arch], n_gpus=n_gpus or k,
        hb=HBDomain(size=k, bandwidth_per_gpu_bytes_per_s=nvlink_bytes_per_s, in_network_reduction=nvls,
                    latency_s=NVLINK_LATENCY_S),
        nic_bandwidth_per_gpu_bytes_per_s=nic_bytes_per_s, tiers=tiers)


# Line rates per direction per GPU: NVLink3 300 GB/s (A100), NVLink4 450 (H100), NVLink5 900
# (GB200); CX-7 400 Gb/s = 50 GB/s, 200 Gb/s = 25 GB/s (railonly.md §1, hardware-and-libraries.md).
SYSTEMS = {
    "A": (_node_system(8, 300e9, False, 25e9, arch="ampere"), 8),
    "B1": (_node_system(8, 450e9, True, 50e9), 8),
    "D": (_node_system(4, 900e9, False, 50e9, arch="blackwell"), 4),
    "F-AR": (_node_system(8, 450e9, True, 50e9, n_gpus=32,
                          tiers=(NetworkTier(name="rail", span_domains=4, cross_rail=False,
                                             bandwidth_per_gpu_bytes_per_s=50e9),)), 8),
}


def _curve_errors(name: str, calib):
    system, g = SYSTEMS[name]
    curve = CURVES[name]
    p = curve["gpus"]
    sizes = np.array([_size_bytes(s) for s in curve["sizes"]], dtype=float)
    measured = np.array(curve["busbw"]) * 1e9
    est = collective_estimate_vec("all_reduce", sizes, p, g, p // g, True, system, calib)
    predicted = sizes / est.time_s * bus_bandwidth_factor("all_reduce", p)
    return sizes, measured, predicted, predicted / measured - 1.0, est


@pytest.fixture(scope="module")
def calib():
    return load_collective_calibration()


@pytest.mark.parametrize("name", ["A", "B1", "D", "F-AR"])
def test_allreduce_busbw_matches_measured_curve(name, calib):
    sizes, measured, predicted, err, est = _curve_errors(name, calib)
    big = sizes >= MIB
    plateau = (sizes >= PLATEAU_MIN_BYTES) & (measured >= PLATEAU_FRACTION_OF_PEAK * measured.max())
    print(f"\n{name}: {CURVES[name]['description']}")
    print(f"  {'size':>6} {'measured':>9} {'model':>9} {'error':>7}  algorithm/protocol")
    for i in np.flatnonzero(big):
        label = CURVES[name]["sizes"][i]
        print(f"  {label:>6} {measured[i] / 1e9:9.2f} {predicted[i] / 1e9:9.2f} {err[i] * 100:+6.1f}%  "
              f"{est.algorithm(i)}/{est.protocol(i)}")
    print(f"  max |error| >= 1 MiB: {np.abs(err[big]).max() * 100:.1f}%   plateau "
          f"({', '.join(np.asarray(CURVES[name]['sizes'])[plateau])}): {np.abs(err[plateau]).max() * 100:.1f}%")
    assert np.all(np.abs(err[big]) <= POINT_TOL)
    assert np.all(np.abs(err[plateau]) <= PLATEAU_TOL)


def test_small_messages_degrade_gracefully(calib):
    # below 1 MiB no accuracy is promised, but the prediction stays within a factor 2.5
    for name in ("A", "B1", "D", "F-AR"):
        sizes, _, _, err, _ = _curve_errors(name, calib)
        small = (sizes >= 64 * 1024) & (sizes < MIB)
        assert np.all(np.abs(np.log(1 + err[small])) < np.log(2.5)), name


def test_h100_nvidia_statements(calib):
    """§5 E / §4.5: 8 x H100 ring busbw ~370, NVLS 480 at 8 GPUs, NVLS rising with GPU count."""
    n = 4 * 2**30
    ring = _node_system(8, 450e9, False, 50e9)
    nvls = _node_system(8, 450e9, True, 50e9)
    ring_busbw = n / collective_estimate_vec("all_reduce", n, 8, 8, 1, True, ring, calib).time_s * 2 * 7 / 8
    assert ring_busbw == pytest.approx(370e9, rel=0.10)  # model 353: eta_hb = 20.6/25 of 450, less the fill
    by_gpus = []
    for k in (5, 6, 7, 8):
        e = collective_estimate_vec("all_reduce", n, k, k, 1, True, nvls, calib)
        assert e.algorithm() == "nvls"
        by_gpus.append(n / e.time_s * 2 * (k - 1) / k)
    assert by_gpus[-1] == pytest.approx(480e9, rel=0.06)
    assert all(a < b for a, b in zip(by_gpus, by_gpus[1:]))  # 420/440/460/480 in nccl#1455
    for got, want in zip(by_gpus, (420e9, 440e9, 460e9, 480e9)):
        assert got == pytest.approx(want, rel=0.08)


# ---- Rail-only all-to-all (railonly.md §5)


def _rail_systems(n_gpus: int, nvlink_bytes_per_s: float, nic_bytes_per_s: float, arch: str = "hopper"):
    hb = HBDomain(size=8, bandwidth_per_gpu_bytes_per_s=nvlink_bytes_per_s, latency_s=NVLINK_LATENCY_S)
    n_dom = n_gpus // 8
    leaf = NetworkTier(name="rail-leaf", span_domains=min(32, n_dom), cross_rail=False,
                       bandwidth_per_gpu_bytes_per_s=nic_bytes_per_s)
    rail_only = ClusterSystem(gpu=GPUS[arch], n_gpus=n_gpus, hb=hb, nic_bandwidth_per_gpu_bytes_per_s=nic_bytes_per_s,
                              tiers=(leaf, NetworkTier(name="rail-spine", span_domains=n_dom, cross_rail=False,
                                                       bandwidth_per_gpu_bytes_per_s=nic_bytes_per_s)),
                              family="rail-only")
    fat_tree = ClusterSystem(gpu=GPUS[arch], n_gpus=n_gpus, hb=hb, nic_bandwidth_per_gpu_bytes_per_s=nic_bytes_per_s,
                             tiers=(leaf, NetworkTier(name="spine", span_domains=n_dom, cross_rail=True,
                                                      bandwidth_per_gpu_bytes_per_s=nic_bytes_per_s)))
    return rail_only, fat_tree


@pytest.mark.parametrize("gen,arch,nvlink,nic,published", [
    ("DGX A100", "ampere", 300e9, 25e9, 0.082),  # 200G NIC, NVLink3
    ("DGX H100", "hopper", 450e9, 50e9, 0.112),  # 400G NIC, NVLink4
])
@pytest.mark.parametrize("n_gpus", [1024, 2048])
def test_rail_only_all_to_all_overhead(gen, arch, nvlink, nic, published, n_gpus, calib):
    """The mechanism: forwarding over NVLink then the rail, two non-overlapped phases, each at its
    effective bandwidth (NVLink eta_hb = 20.0/25 = 0.80 on A100, 20.6/25 = 0.824 on H100; NIC eta_nic =
    0.88). Bandwidth-bound regime: a
    message large enough that the per-peer latencies are < 0.1% of the time."""
    rail_only, fat_tree = _rail_systems(n_gpus, nvlink, nic, arch)
    shape = GroupShape(size=n_gpus, ranks_per_domain=8, domain_span=n_gpus // 8, same_rail=True)
    n = 2.0**40
    ro = collective_estimate("all_to_all", n, shape, rail_only, calib)
    ft = collective_estimate("all_to_all", n, shape, fat_tree, calib)
    assert ro.algorithm == "two_phase" and ft.algorithm == "pairwise"
    assert ro.spine_bytes == 0 and ft.spine_bytes > 0.99 * (n_gpus - 8) / n_gpus * n
    overhead = ro.time_s / ft.time_s - 1
    # independently: (K-1)/K n/(eta_hb B_hb) over (N-K)/N n/(eta_nic B_nic), the extra HB phase
    # (the rail phase, (N/K-1)/(N/K) n, equals the direct remote traffic (N-K)/N n)
    expected = (7 / 8) / (hb_link_efficiency(rail_only, calib) * nvlink) / (((n_gpus - 8) / n_gpus) / (calib.nic_efficiency * nic))
    print(f"\n{gen} N={n_gpus}: rail-only all-to-all +{overhead * 100:.2f}% (published {published * 100:.1f}%)")
    assert overhead == pytest.approx(expected, abs=0.001)
    assert overhead == pytest.approx(published, abs=0.01)


def test_line_rate_two_phase_model_gives_the_lower_first_order_numbers(calib):
    """railonly.md §5: with line rates (efficiencies equal) the same mechanism gives 7.3% / 9.7%."""
    flat = calib.model_copy(update={"hb_link_efficiency": 1.0, "nic_efficiency": 1.0})
    got = []
    for nvlink, nic, arch in ((300e9, 25e9, "ampere"), (450e9, 50e9, "hopper")):
        rail_only, fat_tree = _rail_systems(4096, nvlink, nic, arch)
        shape = GroupShape(size=4096, ranks_per_domain=8, domain_span=512, same_rail=True)
        got.append(collective_estimate("all_to_all", 2.0**42, shape, rail_only, flat).time_s
                   / collective_estimate("all_to_all", 2.0**42, shape, fat_tree, flat).time_s - 1)
    assert got[0] == pytest.approx(0.073, abs=0.002)
    assert got[1] == pytest.approx(0.097, abs=0.002)
