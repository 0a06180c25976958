"""Shared pieces of the collective-communication studies in studies/collectives/.

Systems are built from the hardware catalog (designer/data/catalog.yaml) the same way as
tests/perf/systems.py and tests/perf/test_collectives_validation.py: HB domains of K GPUs joined by
rails, either a rail-optimized fat-tree (rail leaves spanning `leaf_span` domains + a cross-rail
spine) or rail-only (rails only). Bandwidths per GPU per direction in bytes/s.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import yaml

from designer import units
from designer.spec.catalog import load_catalog
from designer.spec.system import ClusterSystem, HBDomain, HBTopology, NetworkTier

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "results" / "collectives"
NCCL_CURVES = REPO / "tests" / "perf" / "data" / "nccl_curves.yaml"

KIB, MIB, GIB = 2**10, 2**20, 2**30
# NCCL's NVLink LL per-hop latency, 0.6 us (collectives.md §4.2): the smallest per-hop cost NCCL
# attributes to an NVLink hop, used as the HB wire latency as in tests/perf/test_collectives_validation.py.
NVLINK_LATENCY_S = 0.6e-6
# ConnectX-7 NDR: 400 Gb/s per GPU (one NIC per GPU, collectives.md §5 F, railonly.md §1)
NIC_400G_GBPS = 400.0


def size_label(nbytes: float) -> str:
    """nccl-tests style binary label: 1024 -> '1K', 2**33 -> '8G'."""
    n = int(nbytes)
    for unit, mult in (("G", GIB), ("M", MIB), ("K", KIB)):
        if n >= mult and n % mult == 0:
            return f"{n // mult}{unit}"
    return str(n)


def parse_size(label: str) -> int:
    mult = {"K": KIB, "M": MIB, "G": GIB}
    return int(label[:-1]) * mult[label[-1]] if label[-1] in mult else int(label)


def measured_curves() -> dict:
    """The nccl-tests curves of collectives.md §5, as copied into tests/perf/data/nccl_curves.yaml."""
    with open(NCCL_CURVES, encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def build_system(gpu_id: str, n_gpus: int, *, hb_size: int = 8, topology: HBTopology = HBTopology.switched,
                 torus_dims: tuple[int, ...] | None = None, nvls: bool | None = None, nic_gbps: float = NIC_400G_GBPS,
                 leaf_span: int = 16, rail_only: bool = False) -> ClusterSystem:
    """A cluster of `n_gpus` catalog GPUs in HB domains of `hb_size`.

    nvls: in-network reduction in the HB switches; None means the catalog platform's default
    (NVSwitch gen 3 on H100 has NVLS; A100's NVSwitch gen 2 has none, collectives.md §5 A)."""
    g = load_catalog().gpu(gpu_id)
    nic = units.gbps_to_bytes_per_s(nic_gbps)
    n_dom = max(n_gpus // hb_size, 1)
    if nvls is None:
        nvls = topology == HBTopology.switched and g.architecture in ("hopper", "blackwell")
    if n_dom == 1:
        tiers: tuple[NetworkTier, ...] = ()
    elif rail_only:
        tiers = (NetworkTier(name="rail", span_domains=n_dom, cross_rail=False, bandwidth_per_gpu_bytes_per_s=nic),)
    else:
        tiers = (NetworkTier(name="leaf", span_domains=min(leaf_span, n_dom), cross_rail=False,
                             bandwidth_per_gpu_bytes_per_s=nic),
                 NetworkTier(name="spine", span_domains=n_dom, cross_rail=True, bandwidth_per_gpu_bytes_per_s=nic))
    hb = HBDomain(size=hb_size, bandwidth_per_gpu_bytes_per_s=g.hb_gb_per_s_per_direction * 1e9, topology=topology,
                  torus_dims=torus_dims, in_network_reduction=nvls, latency_s=NVLINK_LATENCY_S)
    return ClusterSystem(gpu=g.perf(), n_gpus=n_gpus, hb=hb, nic_bandwidth_per_gpu_bytes_per_s=nic, tiers=tiers,
                         family="rail-only" if rail_only else "rail-optimized")


@contextmanager
def wall_clock(name: str):
    """Print the wall time of the enclosed block."""
    t0 = time.perf_counter()
    yield
    print(f"{name}: wall time {time.perf_counter() - t0:.2f} s")


def write_csv(df, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(path, index=False, float_format="%.6g")
    return path


def finite_or_nan(x) -> np.ndarray:
    x = np.asarray(x, dtype=float)
    return np.where(np.isfinite(x), x, np.nan)
