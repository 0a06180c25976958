"""Cluster systems shared by the perf tests (built from the catalog; no network design needed)."""

from __future__ import annotations

from designer import units
from designer.spec.catalog import load_catalog
from designer.spec.system import ClusterSystem, HBDomain, NetworkTier


def cluster(gpu_id: str, n_gpus: int, *, hb_size: int = 8, hb_gb_per_s: float | None = None,
            nic_gbps: float = 400.0, leaf_span: int = 16, rail_only: bool = False, spine_bw_scale: float = 1.0,
            hb_nvls: bool = False) -> ClusterSystem:
    """HB domains of `hb_size` GPUs joined by rails: a rail-optimized fat-tree (rail leaves spanning
    `leaf_span` domains + a cross-rail spine) or rail-only (rails only, each a Clos over all domains)."""
    g = load_catalog().gpu(gpu_id)
    nic = units.gbps_to_bytes_per_s(nic_gbps)
    n_dom = n_gpus // hb_size
    if rail_only:
        tiers = (NetworkTier(name="rail", span_domains=n_dom, cross_rail=False, bandwidth_per_gpu_bytes_per_s=nic),)
    else:
        tiers = (NetworkTier(name="leaf", span_domains=min(leaf_span, n_dom), cross_rail=False,
                             bandwidth_per_gpu_bytes_per_s=nic),
                 NetworkTier(name="spine", span_domains=n_dom, cross_rail=True,
                             bandwidth_per_gpu_bytes_per_s=nic * spine_bw_scale))
    hb_bw = (hb_gb_per_s or g.hb_gb_per_s_per_direction) * 1e9
    return ClusterSystem(gpu=g.perf(), n_gpus=n_gpus,
                         hb=HBDomain(size=hb_size, bandwidth_per_gpu_bytes_per_s=hb_bw, in_network_reduction=hb_nvls),
                         nic_bandwidth_per_gpu_bytes_per_s=nic, tiers=tiers,
                         family="rail-only" if rail_only else "rail-optimized")
