"""Measured collective curves of tests/perf/data/nccl_curves_modern.yaml (shared/reference/
collectives-modern.md) against the collective model: each curve's setup becomes a ClusterSystem
and a group shape, its measured quantity is compared on the source's own terms (nccl-tests busbw,
algbw or time), point by point. Nothing here is fitted per curve."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

from designer import units
from designer.perf import collectives as coll
from designer.spec.catalog import load_catalog
from designer.spec.study import NcclEnvironment
from designer.spec.system import ClusterSystem, HBDomain, NetworkTier

DATA = Path(__file__).parent / "data" / "nccl_curves_modern.yaml"
MIB = 2**20
# NICs when a source does not state them: the DGX/HGX reference design, one 400G NIC per GPU
DEFAULT_NIC_GBPS_PER_GPU = 400.0
# the source's algorithm name -> the model's
ALGORITHM_NAMES = {"ring": "ring", "tree": "tree", "nvls": "nvls", "nvlstree": "nvls_tree", "collnet": "collnet",
              "pat": "pat"}
OPS = set(coll.OPS)
# One-way latency of an AWS EFA path (SRD through the Nitro card, libfabric and the aws-ofi-nccl
# plugin), per instance generation: the small-message floor of that platform's allreduce less
# NCCL's tree LL cost over the two nodes (6.8 + 2(7 x 0.6 + L + 5.0 - 6) us, the model's own
# formula): AWS-1 (p5, 8 B - 2 KiB at 65-75 us) 30 us, AWS-3 (p4de, 161-166 us) 78 us, B300-1
# (p6-b300, "min small-msg latency" 42.9 us) 18 us. The same ranking as the latencies the
# aws-ofi-nccl plugin reports to NCCL's tuner (src/platform-aws.cpp: 75 us for p4d/p4de/p5/p5e,
# 35 us for p5en and p6), which are tuning values rather than times. Because the floors set
# these, the small sizes of those three curves are not independent checks; their mid sizes are.
EFA_PATH_LATENCY_S = {"a100_80gb": 78e-6, "h100_sxm": 30e-6, "h200_sxm": 30e-6, "b300": 18e-6}
# What the aws-ofi-nccl plugin sets in NCCL's environment on each AWS GPU platform
# (src/platform-aws.cpp, platform_data_map .env): NCCL_BUFFSIZE 8 MiB on p4d, p4de, p5, p5e, p5en and
# p6; NCCL_NVLS_CHUNKSIZE and NCCL_NVLSTREE_MAX_CHUNKSIZE 512 KiB from p5 on -- the calibration
# fields they replace, as a study's nccl_env section gives them
_P5_ENV = NcclEnvironment(buffsize_bytes=8388608, nvls_chunksize_bytes=524288,
                          nvlstree_max_chunksize_bytes=524288).calibration_update()
EFA_NCCL_ENV = {"a100_80gb": NcclEnvironment(buffsize_bytes=8388608).calibration_update(),
                "h100_sxm": _P5_ENV, "h200_sxm": _P5_ENV, "b300": _P5_ENV}
# The plugin also loads itself as NCCL's tuner (platform-aws.cpp configure_tuner sets
# NCCL_TUNER_PLUGIN; B300-1's image sets NCCL_TUNER_PLUGIN=ofi), whose per-platform regions pick the
# algorithm and protocol on p5/p5e, p5en, p6-b200 and p6-b300. It returns NCCL's own choice on two
# nodes or fewer (src/tuner/nccl_ofi_regions.cpp region_get_coll_info_internal_v2/_v3: "Skip when two
# nodes or lesser because the regions are not well defined and fallback to NCCL's internal tunings",
# v1.16.3 and 2daf7d30), and on p4d/p4de it has no regions at all. So AWS-1, AWS-3 and B300-1 (two
# nodes) ran NCCL's tuning, which the model's choice stands for; SB-H2 (four p5en nodes) ran the
# regions, whose choice at 4 GiB over 32 ranks is Ring / Simple, the Ring its source names.


@cache
def curves() -> dict:
    return yaml.safe_load(DATA.read_text())


def usable(curve: dict) -> bool:
    """Curves of collectives the model has, with byte sizes, on one group per job."""
    return (curve["op"] in OPS and curve.get("sizes") and curve.get("values")
            and (curve.get("groups") or 1) == 1 and curve.get("ranks"))


def system_for(curve: dict) -> ClusterSystem:
    gpu = load_catalog().gpu(curve["gpu"])
    k = curve["hb_domain"] if curve["fabric"] == "mnnvl" and curve["nodes"] > 1 else curve["gpus_per_node"]
    k = max(int(k), 1)
    n = int(curve["ranks"])
    if curve["nics_per_node"] and curve["nic_gbps"]:
        per_gpu_gbps = curve["nics_per_node"] * curve["nic_gbps"] / curve["gpus_per_node"]
    else:
        per_gpu_gbps = DEFAULT_NIC_GBPS_PER_GPU
    nic = units.gbps_to_bytes_per_s(per_gpu_gbps)
    n_dom = max(n // k, 1)
    text = " ".join(str(curve.get(k) or "") for k in ("notes", "description"))
    # SHARP only where the switches ran it (a COLLNET_ENABLE with no SHARP daemon falls back)
    sharp = curve.get("sharp") is True or "SHARP NOW ACTIVE" in text
    # EFA's latency is the endpoints' (SRD, libfabric): the leaf carries it, the spine adds nothing
    efa = curve["fabric"] == "efa"
    leaf_lat = {"latency_s": EFA_PATH_LATENCY_S[curve["gpu"]]} if efa else {}
    spine_lat = {"latency_s": 0.0} if efa else {}
    tiers = (NetworkTier(name="leaf", span_domains=n_dom, cross_rail=False, bandwidth_per_gpu_bytes_per_s=nic,
                         in_network_reduction=sharp, **leaf_lat),
             NetworkTier(name="spine", span_domains=n_dom, cross_rail=True, bandwidth_per_gpu_bytes_per_s=nic,
                         **spine_lat))
    hb = HBDomain(size=k, bandwidth_per_gpu_bytes_per_s=gpu.hb_gb_per_s_per_direction * 1e9,
                  in_network_reduction=k > 2 and gpu.architecture != "ampere")
    return ClusterSystem(gpu=gpu.perf(), n_gpus=n, hb=hb, nic_bandwidth_per_gpu_bytes_per_s=nic, tiers=tiers)


@dataclass(frozen=True)
class Point:
    size_bytes: int
    measured: float
    predicted: float
    algorithm: str
    protocol: str

    time_like: bool = False

    @property
    def error(self) -> float:
        """Predicted over measured speed, minus one: positive when the model is too fast (for a
        time, measured over predicted)."""
        if self.time_like:
            return self.measured / self.predicted - 1.0
        return self.predicted / self.measured - 1.0


def algorithms_for(curve: dict, calib) -> tuple[str, ...] | None:
    """What the run let NCCL choose from: an NCCL_ALGO it forced, or the default repertoire less
    NVLS where it was disabled. A curve's algorithm label alone ("nvls", "collnet") names a feature
    it enabled, with NCCL's own choice."""
    text = " ".join(str(curve.get(k) or "") for k in ("notes", "description"))
    # NCCL_ALGO=Ring or, per collective (NCCL 2.24+), NCCL_ALGO=allreduce:ring
    forced = re.search(r"NCCL_ALGO=(?:\w+:)?(\w+)", text, flags=re.IGNORECASE)
    label = (curve.get("algorithm") or "").lower()
    if forced or label in ("ring", "tree", "nvlstree", "pat"):
        # those labels are algorithms a run forced (the "nvls" / "collnet" labels enable features)
        algo = ALGORITHM_NAMES.get(forced.group(1).lower() if forced else label)
        return (algo,) if algo in coll.ALGORITHMS else None
    off = set()
    if re.search(r"NVLS_ENABLE=0|NVLS 0\b|nvls disabled|nvls off", text, flags=re.IGNORECASE):
        off |= {"nvls", "nvls_tree"}
    if label != "collnet" and not re.search(r"COLLNET_ENABLE=1", text):
        off.add("collnet")  # NCCL_COLLNET_ENABLE defaults to 0
    return tuple(a for a in calib.algorithms if a not in off)


def predict(curve: dict, calib) -> list[Point]:
    """The curve's points as designer predicts them, for the NCCL release the run used where the
    source states it (collectives.for_nccl_version)."""
    if curve.get("nccl_version"):
        calib = coll.for_nccl_version(calib, ".".join(str(curve["nccl_version"]).split(".")[:2]))
    if curve["fabric"] == "efa":
        calib = calib.model_copy(update=EFA_NCCL_ENV[curve["gpu"]])
    if curve.get("nccl_env"):  # NCCL settings the run states, as a study's nccl_env gives them
        calib = calib.model_copy(update=NcclEnvironment(**curve["nccl_env"]).calibration_update())
    system = system_for(curve)
    op = curve["op"]
    p = int(curve["ranks"])
    g = min(system.hb.size, p)
    shape = coll.GroupShape(size=p, ranks_per_domain=g, domain_span=max(p // g, 1), same_rail=True)
    allowed = algorithms_for(curve, calib)
    out = []
    for size, value in zip(curve["sizes"], curve["values"]):
        e = coll.collective_estimate(op, float(size), shape, system, calib, algorithms=allowed)
        q = curve["quantity"]
        if q == "time_us":
            pred = e.time_s * 1e6
        else:
            algbw = size / e.time_s / 1e9
            pred = algbw * float(coll.bus_bandwidth_factor(op, p)) if q == "busbw_gbps" else algbw
        out.append(Point(int(size), float(value), pred, e.algorithm, e.protocol, time_like=q == "time_us"))
    return out


# Curves that measure something designer does not model, by id prefix, with the reason the source
# gives. They are still predicted and printed, under their own kind, never silently dropped.
UNMODELLED = {
    "X-": ("XLA's default collective perf table times a compiled XLA executable (median of 20 runs, its "
           "launch overhead included: 20-50 us floors on 8 GPUs, quantized GB200 values) running XLA's own "
           "decomposition of the op, with no NCCL version, environment or algorithm recorded "
           "(collectives-modern.md section 1 caveats); designer models one NCCL call"),
    "X-H6": ("XLA collective-permute timed as a 100-iteration loop, with an implementation switch at 128 MiB "
             "the source says a model should not be expected to reproduce"),
    "X-B6": "XLA collective-permute, with the same step at 128-512 MiB as X-H6",
    "X-G6": ("XLA collective-permute on NVL72 with a 430-450 us plateau from 9 MiB to 144 MiB, as published; "
             "the ring and swap columns are one measurement stored twice"),
    "TB-5-AR-collnet-": ("CollNet enabled without working SHARP ('SHARP coll init error: Cannot create SHARP "
                         "job'): the source calls it an unexplained non-Ring/non-Tree fallback and says not to "
                         "calibrate on it"),
    "TB-5-AG-collnet-": "CollNet without working SHARP, as TB-5-AR-collnet",
    "TB-6-RS-ring-buggy": ("only 4 of the 8 rails at 400G plus one Ethernet and three 100G ports: a node of mixed "
                           "NICs the curve's uniform NIC description does not hold"),
    "TB-6-RS-nvls-buggy": "mixed NICs, as TB-6-RS-ring-buggy",
    "TB-6-RS-collnet-buggy": "mixed NICs, as TB-6-RS-ring-buggy",
}


def unmodelled(curve_id: str) -> str | None:
    """Why designer does not model this curve (the longest matching prefix's reason), or None."""
    hits = [k for k in UNMODELLED if curve_id.startswith(k)]
    return UNMODELLED[max(hits, key=len)] if hits else None


def source_kind(curve_id: str) -> str:
    """XLA's table times an XLA executable (its launch overhead included); other curves designer does
    not model are "unmodelled"; the rest are nccl-tests."""
    if curve_id.startswith("X-"):
        return "xla"
    return "unmodelled" if unmodelled(curve_id) else "nccl-tests"


def band(size_bytes: int) -> str:
    return "large" if size_bytes >= MIB else ("small" if size_bytes <= 64 * 1024 else "mid")
