"""Time of one collective on its group's actual path through a ClusterSystem.

The model follows NCCL's own structure (collectives.md §7.1): for every (algorithm, protocol) pair
valid on the group's path, predict

    t = base + L + X + 2*sqrt(phi * L * X)

where `L` is the sum of per-hop latencies (NCCL's `lat`, §4.2), `X` = bytes / algorithm bandwidth
(§4.3, with the bandwidth taken from the links the group really uses) and the last term is the
pipeline fill of a chunked pipeline (§2.2 linear-pipeline optimum, T* = (sqrt(L) + sqrt(X))^2 at
phi = 1; `phi` = `pipeline_fill_factor` is calibrated on the mid-size ramp of the §5 curves, for a
20 GB/s channel, and scales as 1/(per-channel bandwidth) because NCCL's chunks have a fixed size).
MPI-style algorithms (recursive doubling/halving, Rabenseifner, Bruck, binomial, pairwise,
two-phase, hierarchical) use the plain alpha-beta costs of §2, step by step, without a fill term.
The chosen pair is the argmin of the predicted time, as NCCL's tuner does (§4.1). The repertoire is
the table ENTRIES: one AlgorithmEntry per algorithm (the ops it implements, its protocols, where it
exists, its vectorized cost); `_candidates` is the one generic step over it. NCCL's release-dependent
rules are data (collectives.yaml: LL128 by release and generation, version_overrides; for_nccl_version),
and every call takes at least the host floor of its GPU generation (launch and enqueue).

MoE dispatch with per-node deduplication and forwarding inside the node (DeepEP's normal kernels) is
its own estimate, `moe_dispatch_estimate_vec`: its RDMA phase stays on the rails. The low-latency
kernels' dispatch, one copy per (token, expert) straight to the expert's rank, is
`moe_per_expert_dispatch_estimate_vec`: its RDMA leaves the rails (unless the group is one rank per
domain on one rail).

GPU generation (`system.gpu.architecture`: ampere | hopper | blackwell) selects NCCL's
per-generation constants (§4.3, §4.4; `ArchitectureConstants`): the usable NVLink bandwidth per
link (hence the HB ring efficiency 0.800 / 0.824 / 0.802 of line rate), llMaxBw on one node, and the
per-channel caps of ring LL128 and tree Simple/LL128, applied as NCCL does (busBw capped at
nChannels x cap) with one channel per NVLink inside a domain and one per NIC across domains, at most
`max_channels` (32: NCCL's ring search is bounded by MAXCHANNELS/2), so that per-channel bandwidth
and with it the pipeline fill stay bounded in HB domains of 32+ GPUs.

Placement of a group (`GroupShape`): `size` = p ranks, `ranks_per_domain` = g members per HB domain
(so N = p/g domains), spread over `domain_span` consecutive domains, and `same_rail` when the
members in different domains sit on the same local ranks.

Paths (§3.3, §3.4):
* traffic between members of one HB domain uses the HB fabric, with its topology (switched
  crossbar, bidirectional ring, 2-D/3-D torus; §3.1, §3.2);
* traffic between the same local rank of different domains ("rail traffic": rings, trees,
  hierarchical phases of a same_rail group) climbs to the lowest tier spanning `domain_span`
  domains;
* traffic between different local ranks of different domains ("cross-rail") climbs to the lowest
  tier that spans the domains and is `cross_rail`, or is forwarded: first over the HB domain to the
  GPU that owns the destination rail, then over the rail (PXN). Without a cross-rail tier
  (Rail-only) forwarding is the only route; with one, both routes are candidates and the argmin
  takes the faster, as NCCL's PXN relays where that is better -- so a thin (oversubscribed) spine
  on top of rails never makes a collective slower than rail-only.

Scale-out contention (§3.3 max-load recipe). A tier's `oversubscription` r_t throttles the traffic
climbing *into* it: a subtree of the tier below (tier t-1's span, or one HB domain for t = 0) has
uplink capacity (GPUs in subtree x bandwidth_per_gpu_t) / r_t. A fraction `concurrency` of the
subtree's GPUs send across it at once (default 1: all data-parallel groups run together), each
pushing the fraction `out_t` of its scale-out bytes whose destination is outside the subtree.
The per-GPU scale-out time is max(bytes/B_nic, max_t out_t*concurrency*r_t*bytes/B_t).
* ring-like traffic (rings, trees, hierarchical rail phases): with k_t of the group's domains in the
  subtree the ring crosses its boundary once per rail, so out_t = 1/k_t and a ring barely notices
  oversubscription unless a subtree holds few of its domains;
* all-to-all-like traffic: out_t = (N - k_t)/(N - 1), the share of remote destinations outside.
The group's domains are assumed spread evenly over its span, k_t = max(1, N*S_{t-1}/span).

Rail-only all-to-all (railonly.md §5). A uniform all-to-all over N GPUs in domains of K is
(K-1)/K*n/B_hb + (N-K)/N*n/B_net with forwarding (two phases that do not overlap, §2.7) against
(N-K)/N*n/B_net direct on a rail-optimized fat-tree. With line rates this gives 7.3% (A100) and
9.7% (H100), the first-order numbers of railonly.md §5. What reproduces the published 8.2% and
11.2% is evaluating both phases at their *effective* link bandwidths: NVLink reaches
the HB link efficiency (NCCL's usable NVLink bandwidth per link: 20.0 of 25 GB/s = 0.80 on A100,
20.6 of 25 = 0.824 on H100) while a NIC reaches nic_efficiency = 0.88 (calibrated on §5 F; §3.4
quotes 48 of 50 GB/s for CX-7 all-to-all). The effective NIC-to-NVLink ratio is 1.07-1.10x the
line-rate ratio, giving 8.1% (A100) and 10.5% (H100) at N = 1024 in the bandwidth-bound limit
(§3.4's 48 vs 370 GB/s gives 11.4% the same way).

Conventions: `n` (nbytes) as collectives.md: the vector for all_reduce/broadcast, the total
(gathered output / reduce-scatter input) for all_gather/reduce_scatter, the root's whole buffer
(gathered output / scattered input) for gather/scatter, the total a rank sends for all_to_all, the
message for send_recv. Bandwidths per GPU per direction in bytes/s, times in s.

All functions except `load_collective_calibration` are pure; the core is vectorised: nbytes, size,
ranks_per_domain, domain_span, same_rail and concurrency broadcast as numpy arrays. Every
candidate's time is a + b*n + c*sqrt(n) (n divided by NCCL's tree correction for tree candidates)
with coefficients that depend on the group shape only; they are computed once per distinct shape
and broadcast over the byte counts.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import numpy as np
import yaml
from pydantic import Field, PositiveFloat, model_validator

from designer.spec.base import Record, Result
from designer.spec.system import ClusterSystem, HBTopology

OPS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast", "reduce", "gather", "scatter",
       "send_recv")
PROTOCOLS = ("LL", "LL128", "Simple")
ALGORITHMS = (
    "ring",  # NCCL ring (flat, rail-aligned across domains)
    "tree",  # NCCL double binary tree (all_reduce)
    "nvls",  # NVLink SHARP inside one NVSwitch HB domain
    "nvls_tree",  # NVLS inside domains + tree across them
    "collnet",  # SHARP on the scale-out tier (CollNetDirect)
    "hierarchical",  # two-level: intra-HB, then across domains on rails, then intra-HB (§2.6)
    "torus",  # dimension-ordered ring per torus dimension (§3.2)
    "bucket",  # all torus dimensions at once, one part of the vector per dimension (§3.2)
    "recursive_doubling",
    "rabenseifner",
    "recursive_halving",
    "bruck",
    "binomial",
    "scatter_allgather",
    "pairwise",  # direct all-to-all
    "two_phase",  # all-to-all with HB shuffle to the rail owner, then rails (PXN / rail-only)
    "p2p",
    "direct",  # gather / scatter: the root receives / sends every member's share itself (grouped send/recv)
    "pat",  # NCCL Parallel Aggregated Trees (AG / RS at one GPU per node, NCCL >= 2.23)
    "dedup_dispatch",  # MoE dispatch/combine deduplicated per domain, forwarded inside it (DeepEP)
    "per_expert_dispatch",  # MoE dispatch/combine, one copy per (token, expert) (low-latency kernels)
    "none",  # a group of one rank: nothing to do
)
_LL, _LL128, _SIMPLE = 0, 1, 2
_NCCL_ALGOS = ("ring", "tree", "nvls", "nvls_tree", "collnet")
MNNVL_MIN_DOMAIN = 8  # GPUs of one node's NVSwitch baseboard; larger HB domains span trays (MNNVL)
_DEFAULT_CALIBRATION = Path(__file__).resolve().parent.parent / "data" / "collectives.yaml"


# --------------------------------------------------------------------------------------------
# Records


class _HopLatency(Record):
    hb: tuple[float, float, float]  # (LL, LL128, Simple)
    net: tuple[float, float, float]


def nccl_version_tuple(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


class _VersionedArchitectures(Record):
    since: str = Field(pattern=r"^\d+\.\d+")
    architectures: tuple[str, ...]


class _VersionOverride(Record):
    since: str = Field(pattern=r"^\d+\.\d+")
    before: str = Field(pattern=r"^\d+\.\d+")
    values: dict = Field(description="fields of CollectiveCalibration (nested mappings merge) for releases in [since, before)")
    source: str = ""


class ArchitectureConstants(Record):
    """NCCL's per-GPU-generation tuner constants (collectives.md §4.3, §4.4), bytes/s.

    Channels: NCCL's busBw is nChannels x per-channel bandwidth, and its per-channel caps bound a
    protocol's busBw by nChannels x cap. The model counts one channel per NVLink inside a domain
    (HB bandwidth / `nvlink_line_rate_per_link`, the links NCCL's ring search packs with channels of
    one link's bandwidth each) and one channel per NIC across domains, at most
    CollectiveCalibration.max_channels."""

    nvlink_bandwidth_per_link_bytes_per_s: float = Field(gt=0, description="NCCL topo.h SMxx_NVLINK_BW")
    nvlink_line_rate_per_link_bytes_per_s: float = Field(gt=0, description="per direction")
    ll_max_single_domain_bytes_per_s: float = Field(gt=0, description="NCCL llMaxBw, one node")
    ring_ll128_per_channel_bytes_per_s: PositiveFloat | tuple[PositiveFloat, PositiveFloat, PositiveFloat] = Field(
        description="one cap, or 1 / 2 / >= 3 domains (tuning.cc perChMaxRingLL128Bws N1/N2/N4)")
    tree_per_channel_bytes_per_s: tuple[float, float, float] = Field(description="1 / 2 / >= 3 domains")
    tree_ll128_per_channel_bytes_per_s: tuple[float, float, float] = Field(description="1 / 2 / >= 3 domains")
    nvls_efficiency: float = Field(default=0.85, gt=0, le=1, description="NCCL tuning.cc nvlsEfficiency[arch]")
    collnet_scaled: bool = Field(default=True, description=(
        "NCCL's tuner scales CollNet's all-reduce busBw by net_in_network_efficiency on this generation "
        "(tuning.cc: `if (minCompCap >= 90) busBw *= .85`, Hopper and later)"))

    @property
    def nvlink_efficiency(self) -> float:
        """NCCL's usable NVLink bandwidth over the line rate (busBw = links x per-link bandwidth)."""
        return self.nvlink_bandwidth_per_link_bytes_per_s / self.nvlink_line_rate_per_link_bytes_per_s


class CollectiveCalibration(Record):
    """Calibrated and externally sourced constants; see designer/data/collectives.yaml."""

    hb_link_efficiency: float | None = Field(default=None, gt=0, le=1, description=(
        "fraction of the HB line rate a ring reaches; None: NCCL's per-link NVLink bandwidth over the "
        "line rate of the GPU's architecture (ArchitectureConstants.nvlink_efficiency)"))
    nic_efficiency: float = Field(gt=0, le=1, description=(
        "fraction of a NIC's line rate NCCL's network transfers reach with one InfiniBand queue pair "
        "per connection (NCCL's default)"))
    nic_efficiency_multi_qp: float = Field(default=0.88, gt=0, le=1, description=(
        "the same with two or more queue pairs per connection and adaptive routing for every "
        "message (NCCL_IB_QPS_PER_CONNECTION >= 2, NCCL_IB_AR_THRESHOLD=0)"))
    ib_qps_per_connection: int = Field(default=1, ge=1, description=(
        "NCCL_IB_QPS_PER_CONNECTION the jobs run with (NCCL's default 1)"))
    hb_in_network_efficiency: float = Field(gt=0, le=1)
    mnnvl_in_network_efficiency: float | None = Field(default=None, gt=0, le=1, description=(
        "NVLS algbw / HB line rate in rack-scale NVLink domains (more than MNNVL_MIN_DOMAIN GPUs); "
        "None: as in a node"))
    net_in_network_efficiency: float = Field(gt=0, le=1)
    collnet_gather_efficiency: float = Field(gt=0, le=1)
    pipeline_fill_factor: float = Field(ge=0)
    pipeline_fill_channel_bytes_per_s: float = Field(gt=0)
    buffer_bytes: float = Field(gt=0, description=(
        "NCCL_BUFFSIZE: the Simple protocol's buffer per connection; ring and tree chunks are an "
        "eighth of it, so their pipeline fill scales with it"))
    nvls_chunk_bytes: float = Field(gt=0, description="NCCL_NVLS_CHUNKSIZE")
    nvls_tree_max_chunk_bytes: float | None = Field(gt=0, description=(
        "NCCL_NVLSTREE_MAX_CHUNKSIZE; None: NCCL's own cap (64 KiB from 4 domains, else the NVLS chunk)"))
    ring_gather_fill_fraction_one_domain: float = Field(ge=0, le=1, description=(
        "share of the pipeline fill a ring all-gather / reduce-scatter pays inside one HB domain"))
    max_channels: int = Field(ge=1, description=(
        "most channels NCCL runs one collective on (ring graph search bound MAXCHANNELS/2, "
        "NCCL_MAX_NCHANNELS); caps the channel count of every algorithm"))
    nvls_max_arity: int = Field(default=32, ge=2, description=(
        "NCCL_MAX_NVLS_ARITY: the most GPUs of a domain NVLS all-gather / reduce-scatter runs on"))
    nvls_min_local_ranks: int = Field(default=2, ge=2, description=(
        "the fewest GPUs of a domain NVLS and NVLSTree run on (transport/nvls.cc: NVLS stays off on a "
        "node of gpuCount <= 2 GPUs before 2.28.7, < 2 since)"))
    nvls_fill_domain_exponent: float = Field(default=1.0, gt=0, description=(
        "growth of an NVLS all-reduce's fill factor with the GPUs of its domain: phi x (g/8)^this"))
    ll_bandwidth_fraction: float = Field(gt=0, le=1)
    ll_bandwidth_fraction_one_domain_gather: float | None = Field(default=None, gt=0, le=1, description=(
        "ring LL busBw share of an all-gather, reduce-scatter or broadcast inside one domain; None: "
        "ll_bandwidth_fraction (NCCL before 2.21 gave those 1/3 where the rest got 1/4)"))
    ll128_bandwidth_fraction: float = Field(gt=0, le=1)
    ll128_bandwidth_fraction_one_per_domain: float | None = Field(default=None, gt=0, le=1, description=(
        "ring LL128 busBw share with one GPU per domain; None: ll128_bandwidth_fraction (NCCL before "
        "2.23: ppn < 2 ? 0.7 : 0.92)"))
    ll_max_two_domains_bytes_per_s: float = Field(gt=0)
    ll_max_many_domains_bytes_per_s: float = Field(gt=0)
    ll128_over_network: bool
    tree_ll_divisor: float = Field(gt=0)
    tree_ll128_fraction_one_domain: float = Field(gt=0, le=1)
    tree_ll128_fraction_many_domains: float = Field(gt=0, le=1)
    tree_simple_fraction: float = Field(gt=0, le=1)
    ring_simple_multidomain_latency_factor: float = Field(ge=1)
    net_overhead_s: float = Field(ge=0)
    net_overhead_simple_factor: float = Field(ge=1)
    collnet_per_rank_latency_s: float = Field(ge=0)
    collnet_max_local_ranks: int = Field(default=8, ge=1, description=(
        "most GPUs per domain CollNet (SHARP) runs with: NCCL skips CollNetDirect when a node has more "
        "than NCCL_MAX_DIRECT_ARITY + 1 = 8 local ranks (enqueue.cc, from 2.23)"))
    nvls_tree_two_domains_factor: dict[str, PositiveFloat] = Field(default_factory=dict, description=(
        "per GPU generation: the bandwidth of NVLSTree's exchange between two domains against a "
        "ring's scale-out bandwidth; 1 where absent"))
    nvls_tree_many_domains_fraction: dict[str, Annotated[float, Field(gt=0, le=1)]] = Field(default_factory=dict, description=(
        "per GPU generation: the share of the scale-out bandwidth NVLSTree's inter-domain double "
        "binary tree reaches over more than two domains, against a ring's; 1 where absent"))
    nccl_version: str = Field(default="2.30", pattern=r"^\d+\.\d+", description="the NCCL release modelled")
    version_overrides: tuple[_VersionOverride, ...] = Field(default=(), description=(
        "constants of older NCCL releases; for_nccl_version applies those whose range holds the release"))
    ll128_architectures_by_version: tuple[_VersionedArchitectures, ...] = ()
    host_floor_s: dict[str, float] = Field(default_factory=dict, description="per GPU generation; 0 when absent")
    cuda_graph_host_floor_fraction: float = Field(default=1.0, ge=0, le=1)
    ring_network_step_s: float = Field(default=0.0, ge=0, description=(
        "the shortest time one step of a ring that crosses the scale-out network takes with the LL128 "
        "or Simple protocol (a floor on nsteps x this; 0: none)"))
    pat_base_latency_s: float = Field(default=8e-6, ge=0)
    pat_per_rank_latency_s: float = Field(default=2.8e-6, ge=0)
    pat_bandwidth_fraction: float = Field(default=0.75, gt=0, le=1)
    net_latency_covered_s: float = Field(default=6e-6, ge=0, description=(
        "scale-out path latency NCCL's NET-row hop constants already include; a slower path adds "
        "the excess as NCCL's latencyInter (once per hop, twice for Simple)"))
    p2p_net_channel_bytes_per_s: float = Field(default=14e9, gt=0, description=(
        "the bandwidth NCCL assumes one p2p channel drives over the network when it sizes a network "
        "peer's channels (NCCL_P2P_PER_CHANNEL_NET_BW)"))
    p2p_net_one_channel_bytes_per_s: float | None = Field(default=None, gt=0, description=(
        "what one p2p channel to a network peer moves, measured; None: NCCL's assumption "
        "p2p_net_channel_bytes_per_s"))
    p2p_net_channel_exponent: float = Field(default=1.0, gt=0, le=1, description=(
        "c channels to one network peer move one channel's rate x c**exponent (below 1: each added "
        "channel adds less, as they share the peer's NIC and proxy)"))
    p2p_net_channel_exponent_multi_qp: float = Field(default=1.0, gt=0, le=1, description=(
        "the same with two or more InfiniBand queue pairs per connection"))
    p2p_ops_per_batch: int = Field(default=8, ge=1, description="NCCL_MAX_DEV_WORK_P2P_PER_BATCH")
    p2p_hb_fraction: float = Field(default=1.0, gt=0, le=1, description=(
        "what one send/recv between two GPUs of an HB domain reaches, as a fraction of a ring's "
        "per-link bandwidth there"))
    moe_forwarder_bytes_per_s: dict[str, float] = Field(default_factory=dict, description=(
        "per GPU generation: what the SMs a deduplicated internode MoE kernel gives its NVLink "
        "forwarders move per GPU (one copy of a token per destination rank); no cap where absent"))
    moe_dispatch_hb_efficiency: float | None = Field(default=None, gt=0, le=1, description=(
        "the share of the HB line rate a deduplicated MoE kernel's copies reach inside a domain "
        "(SM-driven loads and stores, one copy per destination rank); None: a ring's (hb_link_efficiency)"))
    runtime_channels_per_search_channel: int = Field(default=2, ge=1, description=(
        "NCCL's runtime channel duplication (connect.cc ncclTopoPostset: nChannels = 2 x graph channels)"))
    base_latency_s: dict[str, tuple[float, float, float]]
    hop_latency_s: dict[str, _HopLatency]
    tree_correction: dict[str, tuple[float, ...]]
    tree_correction_sizes: int = Field(default=23, ge=1, description=(
        "tree_correction applies to log2(nBytes/64) below this; 1 above (tuning.cc logSize < 23)"))
    architectures: dict[str, ArchitectureConstants] = Field(description="keyed by GpuPerf.architecture")
    algorithms: tuple[str, ...] = Field(description="the library's repertoire the argmin chooses from")
    sources: dict[str, str] = {}

    @model_validator(mode="after")
    def _complete(self) -> "CollectiveCalibration":
        nccl_version_tuple(self.nccl_version)
        for table in (self.base_latency_s, self.hop_latency_s):
            missing = set(_NCCL_ALGOS) - set(table)
            if missing:
                raise ValueError(f"calibration lacks NCCL algorithms {sorted(missing)}")
        unknown = set(self.algorithms) - set(ALGORITHMS)
        if unknown:
            raise ValueError(f"unknown algorithms {sorted(unknown)}")
        if not self.architectures:
            raise ValueError("calibration lacks per-architecture constants")
        if set(self.tree_correction) != set(PROTOCOLS) or any(len(v) == 0 for v in self.tree_correction.values()):
            raise ValueError(f"tree_correction needs a non-empty list for each of {PROTOCOLS}")
        return self


def _at_least(calib: CollectiveCalibration, version: str) -> bool:
    return nccl_version_tuple(calib.nccl_version) >= nccl_version_tuple(version)


def ll128_enabled(calib: CollectiveCalibration, architecture: str) -> bool:
    """NCCL's LL128 auto-enable rule for the modelled release and GPU generation (on, where no rule
    is given)."""
    rules = [r for r in calib.ll128_architectures_by_version if _at_least(calib, r.since)]
    if not calib.ll128_architectures_by_version:
        return True
    return bool(rules) and architecture in max(rules, key=lambda r: nccl_version_tuple(r.since)).architectures


def host_floor_s(system: ClusterSystem, calib: CollectiveCalibration, cuda_graphs: bool = False) -> float:
    f = calib.host_floor_s.get(system.gpu.architecture, 0.0)
    return f * (calib.cuda_graph_host_floor_fraction if cuda_graphs else 1.0)


class GroupShape(Record):
    """Where the ranks of one communication group sit."""

    size: int = Field(ge=1, description="p ranks")
    ranks_per_domain: int = Field(ge=1, description="members sharing one HB domain (g)")
    domain_span: int = Field(ge=1, description="consecutive HB domains the group's domains spread over")
    same_rail: bool = Field(description="members in different domains sit on the same local ranks")

    @property
    def n_domains(self) -> int:
        return self.size // self.ranks_per_domain

    @model_validator(mode="after")
    def _consistent(self) -> "GroupShape":
        if self.size % self.ranks_per_domain:
            raise ValueError(f"size {self.size} is not a multiple of ranks_per_domain {self.ranks_per_domain}")
        if self.domain_span < self.size // self.ranks_per_domain:
            raise ValueError(f"domain_span {self.domain_span} < the group's {self.n_domains} domains")
        return self


class CollectiveEstimate(Result):
    """One collective: its time, the chosen algorithm and protocol, and bytes sent per GPU on each
    level (hb: HB fabric; rail: scale-out traffic that stays on rails / the lowest tier; spine:
    scale-out traffic that climbs to a cross-rail tier above the lowest)."""

    time_s: float
    algorithm: str
    protocol: str
    hb_bytes: float
    rail_bytes: float
    spine_bytes: float


@dataclass(frozen=True)
class CollectiveEstimates:
    """Vector form of CollectiveEstimate; algorithm/protocol are indices into ALGORITHMS/PROTOCOLS."""

    time_s: np.ndarray
    algorithm_index: np.ndarray
    protocol_index: np.ndarray
    hb_bytes: np.ndarray
    rail_bytes: np.ndarray
    spine_bytes: np.ndarray

    def algorithm(self, i: int | tuple = ()) -> str:
        return ALGORITHMS[int(self.algorithm_index[i])]

    def protocol(self, i: int | tuple = ()) -> str:
        return PROTOCOLS[int(self.protocol_index[i])]


def _multi_qp(calib: CollectiveCalibration) -> bool:
    """The jobs spread each network connection over several InfiniBand queue pairs."""
    return calib.ib_qps_per_connection >= 2


def net_efficiency(calib: CollectiveCalibration) -> float:
    """Fraction of a NIC's line rate NCCL's transfers reach on the scale-out network: a connection
    spread over several InfiniBand queue pairs, adaptively routed, keeps the links fuller than one
    (collectives.yaml, nic_efficiency_multi_qp)."""
    return calib.nic_efficiency_multi_qp if _multi_qp(calib) else calib.nic_efficiency


def load_collective_calibration(path: str | Path | None = None, nccl_version: str | None = None) -> CollectiveCalibration:
    """Read designer/data/collectives.yaml (or `path`) into a frozen record, for the NCCL release
    `nccl_version` (default: the file's). The only I/O here."""
    with open(path or _DEFAULT_CALIBRATION, encoding="utf-8") as fh:
        calib = CollectiveCalibration.model_validate(yaml.safe_load(fh))
    return calib if nccl_version is None else for_nccl_version(calib, nccl_version)


def _merge(base: dict, extra: dict) -> dict:
    out = dict(base)
    for k, v in extra.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def for_nccl_version(calib: CollectiveCalibration, version: str) -> CollectiveCalibration:
    """The calibration for another NCCL release: the shipped constants (the file's nccl_version)
    with the version_overrides whose [since, before) holds `version` merged in, in file order."""
    v = nccl_version_tuple(version)
    data = calib.model_dump()
    for o in calib.version_overrides:
        if nccl_version_tuple(o.since) <= v < nccl_version_tuple(o.before):
            data = _merge(data, o.values)
    data["nccl_version"] = version
    return CollectiveCalibration.model_validate(data)


# --------------------------------------------------------------------------------------------
# Geometry of the HB fabric


def _architecture(system: ClusterSystem, calib: CollectiveCalibration) -> ArchitectureConstants:
    arch = system.gpu.architecture
    if arch not in calib.architectures:
        raise ValueError(f"no collective constants for GPU architecture {arch!r}; have {sorted(calib.architectures)}")
    return calib.architectures[arch]


def hb_link_efficiency(system: ClusterSystem, calib: CollectiveCalibration) -> float:
    """Fraction of the HB line rate a ring reaches on `system` (calibration override, else NCCL's
    per-link NVLink bandwidth of the GPU generation over its line rate)."""
    if calib.hb_link_efficiency is not None:
        return calib.hb_link_efficiency
    return _architecture(system, calib).nvlink_efficiency


def _hb_dims(system: ClusterSystem) -> tuple[int, ...] | None:
    """Dimensions of a direct-link HB fabric; None for a switched crossbar."""
    hb = system.hb
    if hb.topology == HBTopology.switched:
        return None
    if hb.topology == HBTopology.ring:
        return (hb.size,)
    return tuple(hb.torus_dims)  # validated by HBDomain


def _extents(g: np.ndarray, dims: tuple[int, ...]) -> list[np.ndarray]:
    """Extent of a g-member sub-block along each dim, filling the first dim first."""
    out, rest = [], g
    for d in dims:
        e = np.minimum(rest, d)
        out.append(e)
        rest = np.maximum(rest // np.maximum(e, 1), 1)
    return out


def _whole_block(system: ClusterSystem, g: np.ndarray) -> np.ndarray:
    """Whether g members fill a block of whole rows of a direct-link domain (_extents keeps them
    all), the shapes the dimension-ordered and bucket algorithms run on; any g on a crossbar."""
    dims = _hb_dims(system)
    if dims is None:
        return np.ones(np.shape(g), bool)
    return np.prod(np.stack(_extents(np.asarray(g), dims)), axis=0) == np.asarray(g)


def _hb_ring_bandwidth(system: ClusterSystem, g: np.ndarray) -> np.ndarray:
    """Line bandwidth a ring among g members of one domain gets, per GPU per direction.

    Switched: the full per-GPU bandwidth. Direct links (§3.1, §3.2): each GPU has 2d links of
    B/(2d); a bidirectional ring uses two of them (2 B_link), except on a line segment of a ring
    without its wrap-around, where only one effective ring fits (B_link)."""
    b = system.hb.bandwidth_per_gpu_bytes_per_s
    dims = _hb_dims(system)
    if dims is None:
        return np.full(np.shape(g), b, dtype=float)
    b_link = b / (2 * len(dims))
    ext = _extents(g, dims)
    one_dim_line = (ext[0] < dims[0]) & (ext[0] == g)  # the group is a segment of dim 0
    return np.where(one_dim_line, b_link, 2.0 * b_link)


def _hb_torus_allreduce(system: ClusterSystem, n: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Dimension-ordered allreduce (§3.2): ring reduce-scatter along each dimension in turn on the
    shrinking shard, then allgather back. Returns (bandwidth seconds at line rate, hop count)."""
    dims = _hb_dims(system)
    b_link = system.hb.bandwidth_per_gpu_bytes_per_s / (2 * len(dims))
    x = np.zeros(np.broadcast(n, g).shape)
    hops = np.zeros_like(x)
    shard = n.astype(float)
    for e, d in zip(_extents(g, dims), dims):
        bw = np.where(e == d, 2.0 * b_link, b_link)  # wrap-around ring uses both directions
        x = x + 2.0 * (e - 1) / e * shard / bw
        hops = hops + 2.0 * (e - 1)
        shard = shard / e
    return x, hops


def _hb_bucket_allreduce(system: ClusterSystem, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Multi-dimensional bucket allreduce on a torus (Sack & Gropp; the all-dimensions-at-once
    schedule of TPU-style runtimes, collectives.md §3.2): the vector is cut into one part per active
    dimension, part j runs the dimension-ordered reduce-scatter starting at dimension j, so in every
    phase each dimension's links carry one part; allgather back the same way. Per phase the slowest
    part sets the time. Returns (bandwidth seconds per byte of n at line rate, hop count)."""
    dims = _hb_dims(system)
    b_link = system.hb.bandwidth_per_gpu_bytes_per_s / (2 * len(dims))
    ext = _extents(g, dims)
    bws = [np.where(e == d, 2.0 * b_link, b_link) for e, d in zip(ext, dims)]
    active = sum((e > 1).astype(float) for e in ext)
    parts = np.maximum(active, 1.0)
    # rank the dimensions so that the active ones come first (a part rotates over those only)
    order = np.argsort(-np.stack([(e > 1).astype(float) for e in ext]), axis=0, kind="stable")
    E = np.take_along_axis(np.stack([e.astype(float) for e in ext]), order, axis=0)
    B = np.take_along_axis(np.stack(bws), order, axis=0)
    nd = len(dims)
    x = np.zeros(np.shape(g), dtype=float)
    hops = np.zeros_like(x)
    for i in range(nd):  # phase i
        worst = np.zeros_like(x)
        for j in range(nd):  # part j, on its (j + i)-th active dimension
            live = (j < active) & (i < active)
            dim = (j + i) % parts.astype(int)
            shard = 1.0 / parts
            for k in range(i):
                prev = ((j + k) % parts.astype(int))
                shard = shard / np.take_along_axis(E, prev[None].astype(np.intp), axis=0)[0]
            e_i = np.take_along_axis(E, dim[None].astype(np.intp), axis=0)[0]
            b_i = np.take_along_axis(B, dim[None].astype(np.intp), axis=0)[0]
            cost = 2.0 * (e_i - 1) / e_i * shard / b_i
            worst = np.maximum(worst, np.where(live, cost, 0.0))
        x = x + worst
        e_first = np.take_along_axis(E, (np.full(np.shape(g), i) % parts.astype(int))[None].astype(np.intp), axis=0)[0]
        hops = hops + np.where(i < active, 2.0 * (e_first - 1), 0.0)
    return x, hops


def _hb_alltoall_inverse_bw(system: ClusterSystem, g: np.ndarray) -> np.ndarray:
    """Seconds per byte of n for an all-to-all among g members of one domain.

    Switched: (g-1)/g n at full bandwidth. Direct links: the larger of injection and the bisection
    bound (§3.1, §3.2): g/2 ranks each send n/2 across the cut of the longest extent."""
    b = system.hb.bandwidth_per_gpu_bytes_per_s
    inj = (g - 1) / g / b
    dims = _hb_dims(system)
    if dims is None:
        return inj
    b_link = b / (2 * len(dims))
    ext = _extents(g, dims)
    longest = ext[0]
    wrap = ext[0] == dims[0]
    for e, d in zip(ext[1:], dims[1:]):
        take = e > longest
        longest = np.where(take, e, longest)
        wrap = np.where(take, e == d, wrap)
    cut_links = g / longest * np.where(wrap, 2.0, 1.0)
    bisect = np.where(longest > 1, (g / 4.0) / (cut_links * b_link), 0.0)
    return np.maximum(inj, bisect)


def _hb_p2p_bandwidth(system: ClusterSystem) -> float:
    """A single flow between two GPUs of a domain: all links on a crossbar, one link otherwise."""
    dims = _hb_dims(system)
    b = system.hb.bandwidth_per_gpu_bytes_per_s
    return b if dims is None else b / (2 * len(dims))


# --------------------------------------------------------------------------------------------
# Scale-out paths


@dataclass(frozen=True)
class _Path:
    exists: np.ndarray  # bool: a tier connects the group on this kind of path
    bw: np.ndarray  # effective bytes/s per GPU (link efficiency and contention applied)
    latency_s: np.ndarray  # sum of the tiers' latencies up to the tier used
    spine_fraction: np.ndarray  # share of the bytes that climbs to a cross-rail tier above tier 0


def _scaleout_path(system: ClusterSystem, calib: CollectiveCalibration, n_dom, span, conc, *, cross: bool,
                   a2a: bool, nic_bw: float) -> _Path:
    """Per-GPU scale-out bandwidth for one traffic pattern on one path kind (§3.3 recipe)."""
    shape = np.broadcast(n_dom, span, conc).shape
    tiers = system.tiers
    if not tiers:
        z = np.zeros(shape)
        return _Path(np.zeros(shape, bool), z, z, z)
    top = np.full(shape, -1)
    for t in range(len(tiers) - 1, -1, -1):
        tier = tiers[t]
        if tier.cross_rail or not cross:
            top = np.where(tier.span_domains >= span, t, top)
    inv = np.full(shape, 1.0 / nic_bw)
    lat = np.zeros(shape)
    spine = np.zeros(shape)
    sub = 1.0  # HB domains in a subtree below tier t that this traffic can stay inside
    for t, tier in enumerate(tiers):
        active = t <= top
        k = np.maximum(1.0, n_dom * np.minimum(sub, span) / span)
        out = (n_dom - k) / np.maximum(n_dom - 1.0, 1.0) if a2a else 1.0 / k
        inv = np.where(active, np.maximum(inv, out * conc * tier.oversubscription / tier.bandwidth_per_gpu_bytes_per_s), inv)
        lat = np.where(active, lat + tier.latency_s, lat)
        if t >= 1 and tier.cross_rail:
            # first cross-rail tier above the lowest: the bytes leaving the lowest subtrees are spine bytes
            spine = np.where(active & (spine == 0), out_first, spine)
        if t == 0:
            k1 = np.maximum(1.0, n_dom * np.minimum(tier.span_domains if (tier.cross_rail or not cross) else 1.0, span) / span)
            out_first = (n_dom - k1) / np.maximum(n_dom - 1.0, 1.0) if a2a else 1.0 / k1
            out_first = np.broadcast_to(out_first, shape)
        if tier.cross_rail or not cross:
            sub = float(tier.span_domains)
    exists = top >= 0
    bw = np.where(exists, net_efficiency(calib) / inv, 0.0)
    return _Path(exists, bw, lat, np.where(exists, spine, 0.0))


# --------------------------------------------------------------------------------------------
# The core


@dataclass
class _Candidates:
    """Every (algorithm, protocol) pair, per distinct group shape, in the closed form

        t(n) = a + b*n/corr(n) + c*sqrt(n/corr(n))

    (`corr` the tree correction of §4.1 for tree candidates, 1 otherwise), with the bytes per GPU
    on the HB fabric and on the scale-out network linear in n: hb*n and net*n."""

    shape: tuple
    valid_protocols: tuple | None = None
    algo: list = None
    proto: list = None
    a: list = None
    b: list = None
    c: list = None
    corr: list = None
    hb: list = None
    net: list = None
    spine_fraction: list = None
    floor: list = None  # per pair: a shortest time per shape (None: none)

    def __post_init__(self):
        self.algo, self.proto, self.a, self.b, self.c, self.corr = [], [], [], [], [], []
        self.hb, self.net, self.spine_fraction, self.floor = [], [], [], []

    def add(self, algo: str, proto: int, a, b, c, valid, hb, net, spine_fraction, corr: int | None = None,
            floor=None):
        if self.valid_protocols is not None and proto not in self.valid_protocols:
            return
        shape = self.shape
        a, b, c = (np.broadcast_to(np.asarray(x, float), shape) for x in (a, b, c))
        # an invalid pair, or one whose coefficients are not finite, never wins
        ok = np.broadcast_to(valid, shape) & np.isfinite(a) & np.isfinite(b) & np.isfinite(c)
        self.algo.append(ALGORITHMS.index(algo))
        self.proto.append(proto)
        self.a.append(np.where(ok, a, np.inf))
        self.b.append(np.where(ok, b, 0.0))
        self.c.append(np.where(ok, c, 0.0))
        self.corr.append(corr)
        self.hb.append(np.broadcast_to(np.asarray(hb, float), shape))
        self.net.append(np.broadcast_to(np.asarray(net, float), shape))
        self.spine_fraction.append(np.broadcast_to(np.asarray(spine_fraction, float), shape))
        self.floor.append(None if floor is None else np.broadcast_to(np.asarray(floor, float), shape))


def _lg(x):
    return np.log2(np.maximum(x, 1.0))


def domains_crossed(p, g, extent):
    """HB domains a group of p ranks with g per domain crosses: p / g, and no more than the domains
    its ranks run over where that extent is stated (> 1): a group spread unevenly (placement's
    floor(size / span) per domain) would otherwise count one domain too many."""
    n = np.maximum(np.floor(np.asarray(p, float) / np.asarray(g, float) + 1e-9), 1.0)
    extent = np.asarray(extent, float)
    return np.where(extent > 1, np.minimum(n, extent), n)


def _ceil_lg(x):
    return np.ceil(_lg(x) - 1e-9)


def _is_pow2(x):
    lg = np.round(_lg(x))
    return np.abs(2.0**lg - x) < 0.5


def _pipelined(base, lat, k, phi, fabric_lat=0.0):
    """NCCL time with the pipeline fill of a chunked pipeline (§2.2 linear pipeline, §4.1):
    t = base + lat + X + 2*sqrt(phi*lat*X) with X = k*n, as (a, b, c) coefficients of
    t = a + b*n + c*sqrt(n). `fabric_lat`, the part of `lat` a slow fabric adds beyond NCCL's
    constants (net_hop_s), is paid once but stays out of the fill: NCCL keeps NCCL_STEPS = 8
    chunks in flight per connection, which hides a fabric round trip behind the chunks; the fill
    factor was fitted on IB paths, whose latency NCCL's constants already hold."""
    return base + lat, k, 2.0 * np.sqrt(phi * np.maximum(lat - fabric_lat, 0.0) * k)


def _proto_mult(proto: int) -> float:
    """How often a slow fabric's excess latency is paid per network hop (tuning.cc: latencyInter
    once, and again for Simple)."""
    return 2.0 if proto == _SIMPLE else 1.0


# NCCL's defaults, at which pipeline_fill_factor was fitted: DEFAULT_BUFFSIZE (1 << 22, src/include/
# comm.h) and NCCL_NVLS_CHUNKSIZE 128 KiB (src/transport/nvls.cc); NVLSTree caps its chunk at 64 KiB
# from 4 nodes (enqueue.cc calcCollChunking, NVLSTREE_MAX_CHUNKSIZE -2)
_NCCL_BUFFER_BYTES = 4194304.0
_NCCL_NVLS_CHUNK_BYTES = 131072.0
_NCCL_NVLS_TREE_MANY_NODES_CHUNK_BYTES = 65536.0
# GPUs of the 8-GPU HGX nodes at which pipeline_fill_factor holds NVLS's all-reduce fill
_NVLS_FIT_HEADS = 8.0


def _simple_chunk_scale(c: CollectiveCalibration, proto: int) -> float:
    """Simple-protocol chunks (ring, tree) against NCCL's default: the fill scales with the chunk."""
    return c.buffer_bytes / _NCCL_BUFFER_BYTES if proto == _SIMPLE else 1.0


def _nvls_tree_chunk_scale(c: CollectiveCalibration, n_dom):
    """NVLSTree's chunk (min of the NVLS chunk and its cap) against the one NCCL's defaults give."""
    many = n_dom >= 4
    default = np.where(many, _NCCL_NVLS_TREE_MANY_NODES_CHUNK_BYTES, _NCCL_NVLS_CHUNK_BYTES)
    cap = (np.where(many, _NCCL_NVLS_TREE_MANY_NODES_CHUNK_BYTES, c.nvls_chunk_bytes)
           if c.nvls_tree_max_chunk_bytes is None else c.nvls_tree_max_chunk_bytes)
    return np.minimum(c.nvls_chunk_bytes, cap) / default


def net_hop_s(calib: CollectiveCalibration, nccl_hop_s, lat_path_s, proto: int):
    """One network hop: NCCL's NET-row constant, or the path latency where that is larger, as long
    as the path is no slower than the fabrics NCCL's constants were set on (net_latency_covered_s:
    IB up to three tiers; NCCL adds nothing there, its IB transport reports latency 0). A slower
    path (EFA) adds the excess as NCCL adds a net plugin's reported latency (tuning.cc: interLat =
    hwLat[NET] + latencyInter, + latencyInter again for Simple, whose flag follows the data)."""
    ref = calib.net_latency_covered_s
    lat = np.asarray(lat_path_s, float)
    excess = np.maximum(lat - ref, 0.0)
    return np.maximum(np.minimum(lat, ref), nccl_hop_s) + _proto_mult(proto) * excess


def collective_estimate_vec(op: str, nbytes, size, ranks_per_domain, domain_span, same_rail,
                            system: ClusterSystem, calib: CollectiveCalibration, *, concurrency=1.0,
                            algorithms: tuple[str, ...] | None = None,
                            protocols: tuple[str, ...] | None = None, cuda_graphs=False,
                            memo: dict | None = None) -> CollectiveEstimates:
    """Vectorised estimate: every array argument broadcasts; returns arrays of the broadcast shape.

    A call takes at least the host floor of the GPU generation (launch and enqueue of one
    collective; `cuda_graphs`, a flag broadcasting like the others, replays them and keeps a
    fraction), once per call: in a stream of
    calls the next launch overlaps the running kernel, so it is a floor, not an addend.

    `concurrency` is the fraction of GPUs of a subtree sending across its uplinks at once (§3.3).
    `algorithms` replaces the calibration's repertoire (`calib.algorithms`), `protocols` restricts the
    protocols (e.g. to force one pair in a test); a point where none of the allowed pairs is valid
    gets an infinite time. `memo`, a dict kept by the caller between calls on the same groups,
    keeps the candidates' coefficients per op and distinct shapes.

    Every candidate's time is a + b*n + c*sqrt(n) with coefficients that depend on the group shape
    only, so they are computed once per distinct (size, ranks_per_domain, domain_span, same_rail,
    concurrency) -- usually a few tens among 1e5 points -- and broadcast over the byte counts."""
    if op not in OPS:
        raise ValueError(f"unknown collective {op!r}; expected one of {OPS}")
    n = np.asarray(nbytes, dtype=float)
    # integer shape arrays stay integer until their distinct values are found (no conversions of
    # the point count)
    p, g, span = (_numeric(x) for x in (size, ranks_per_domain, domain_span))
    rail = np.asarray(same_rail, dtype=bool)
    conc = np.asarray(concurrency, dtype=float)
    shape = np.broadcast_shapes(n.shape, p.shape, g.shape, span.shape, rail.shape, conc.shape)
    if np.any(n < 0) or np.any(p < 1) or np.any(g < 1) or np.any(g > system.hb.size):
        raise ValueError("need nbytes >= 0, size >= 1 and 1 <= ranks_per_domain <= HB size")
    if np.any(conc <= 0) or np.any(conc > 1):
        raise ValueError("concurrency must lie in (0, 1]")
    # a group has no more members in a domain than members (a stated g above p means all p in one)
    g = np.minimum(g, p)
    allowed = set(calib.algorithms if algorithms is None else algorithms)
    unknown = allowed - set(ALGORITHMS)
    if unknown:
        raise ValueError(f"unknown algorithms {sorted(unknown)}")
    protos = None if protocols is None else tuple(PROTOCOLS.index(pr) for pr in protocols if pr in PROTOCOLS)

    # distinct group shapes and, per point, the index of its shape
    cols = [np.broadcast_to(x, shape) for x in (p, g, span, rail, conc)]
    flat = [np.ravel(c) for c in cols] if shape else [np.reshape(c, 1) for c in cols]
    uniq, inv = _distinct_shapes(*flat)
    uniq = tuple(np.asarray(u, dtype=bool if i == 3 else float) for i, u in enumerate(uniq))
    # invalid (algorithm, shape) pairs are computed with zero or infinite bandwidths and masked
    # to an infinite time, so their divisions are expected to misbehave
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        key = (op, frozenset(allowed), protos, id(system), id(calib)) + tuple(u.tobytes() for u in uniq)
        hit = memo.get(key) if memo is not None else None
        # (the memo keeps the system and calibration it priced, so their ids cannot be reused)
        if hit is not None and hit[0] is system and hit[1] is calib:
            cand = hit[2]
        else:
            cand = _candidates(op, *uniq, system, calib, allowed, protos)
            if memo is not None:
                memo[key] = (system, calib, cand)
        est = _select(cand, np.reshape(np.broadcast_to(n, shape), -1), inv, uniq[0], shape, calib)
    floor = host_floor_s(system, calib)
    if floor > 0:
        floor = floor * np.where(np.asarray(cuda_graphs, bool), calib.cuda_graph_host_floor_fraction, 1.0)
        est = dataclasses.replace(est, time_s=np.where(est.time_s > 0, np.maximum(est.time_s, floor), est.time_s))
    return est


def _numeric(x) -> np.ndarray:
    a = np.asarray(x)
    return a if a.dtype.kind in "iu" else a.astype(float, copy=False)


def _distinct_shapes(p, g, span, rail, conc):
    """(unique columns, inverse index) of the shape columns; one entry when they are all equal.

    Each column is replaced by its dense rank among its distinct values (a lookup table over the
    integer range, no sort), the ranks are combined into one mixed-radix key, and the key's distinct
    values are found the same way; np.unique (a sort) only where the ranges are too large."""
    m = p.size
    cols = (p, g, span, rail, conc)
    if m == 1 or all((c == c[0]).all() for c in cols):
        return tuple(c[:1] for c in cols), np.zeros(m, dtype=np.intp)
    codes, radices = [], []
    for col in cols:
        if (col == col[0]).all():
            continue
        code, k = _dense_rank(col)
        if code is None:
            return cols, np.arange(m)  # non-integer or huge values: one "shape" per point
        codes.append(code)
        radices.append(k)
    key = codes[0]
    total = radices[0]
    for code, k in zip(codes[1:], radices[1:]):
        key = key * k + code
        total *= k
    if total <= max(4 * m, 1 << 16):
        present = np.zeros(total, dtype=bool)
        present[key] = True
        first_key = np.flatnonzero(present)
        lut = np.empty(total, dtype=np.intp)
        lut[first_key] = np.arange(first_key.size)
        inv = lut[key]
        first = np.empty(first_key.size, dtype=np.intp)
        first[inv] = np.arange(m)  # any representative point of each shape
    else:
        _, first, inv = np.unique(key, return_index=True, return_inverse=True)
    inv = inv.reshape(-1)
    return tuple(c[first] for c in cols), inv


def _dense_rank(col: np.ndarray):
    """(rank of each value among the column's distinct values, number of distinct values), or
    (None, 0) when the values are not small non-negative integers."""
    if col.dtype == bool:
        return col.astype(np.intp), 2
    lo, hi = col.min(), col.max()
    if lo < 0 or hi > (1 << 24):
        return None, 0
    ints = col.astype(np.intp, copy=False)
    if col.dtype.kind not in "iu" and not (ints == col).all():
        return None, 0
    present = np.zeros(int(hi) + 1, dtype=bool)
    present[ints] = True
    rank = np.cumsum(present) - 1
    return rank[ints], int(rank[-1]) + 1


def _candidates(op, p, g, span, rail, conc, system, calib, allowed, protos) -> _Candidates:
    """Coefficients of every valid (algorithm, protocol) pair for each distinct group shape: the one
    generic step over the ENTRIES table.

    Cross-rail traffic (members of different domains on different local ranks) has two routes when
    the system has a cross-rail tier: up through that tier, or PXN-style forwarding over the HB
    domain onto the destination's rail (§3.4). Both are candidates, so the argmin takes the faster
    (NCCL's PXN relays through the GPU that owns the rail when that is better): a thin
    (oversubscribed) spine added on top of rails can never make a collective slower than rail-only."""
    cand = _Candidates(p.shape, protos)
    routings = [False]
    # traffic that leaves the rail: a group's members on other rails, and for gather / scatter every
    # member beyond the root's domain unless it holds one GPU per domain (_rooted_route)
    cross = ~rail | (g > 1) if op in ("gather", "scatter") else ~rail
    if any(t.cross_rail for t in system.tiers) and np.any(cross & (p > g)):
        routings.append(True)
    views = [system]
    nics = system.nics_per_gpu
    if nics > 1 and np.any(p > g):
        # NCCL sets each call's channels apart (enqueue.cc trims them while a call's bytes per
        # thread stay under its threshold), so a GPU's further NICs, each adding channels thinner
        # than the bandwidth they add (a longer pipeline fill), never make a call slower than it runs
        # on fewer of them: the candidates on k of the NICs (k dividing their count) are candidates too
        # (k NICs reach k / nics of each tier's uplinks: an oversubscribed tier's share shrinks with them)
        views += [system.model_copy(update={
            "nics_per_gpu": k, "nic_bandwidth_per_gpu_bytes_per_s": system.nic_bandwidth_per_gpu_bytes_per_s * k / nics,
            "tiers": tuple(t.model_copy(update={"bandwidth_per_gpu_bytes_per_s": t.bandwidth_per_gpu_bytes_per_s * k / nics})
                           for t in system.tiers)})
            for k in range(1, nics) if nics % k == 0]
    for view, pxn in itertools.product(views, routings):
        env = _environment(op, p, g, span, rail, conc, view, calib, pxn=pxn)
        for entry in ENTRIES:
            if entry.algorithm not in allowed or op not in entry.ops or (pxn and not entry.forwarded_route):
                continue
            if not entry.applies(env):
                continue
            for proto in entry.protocols:
                cand.add(entry.algorithm, proto, *entry.cost(env, proto), corr=proto if entry.corrected else None,
                         floor=_ring_step_floor(env, entry.algorithm, proto))
    return cand


_RING_STEPS_PER_RANK = {"all_reduce": 2.0, "all_gather": 1.0, "reduce_scatter": 1.0}


def _ring_step_floor(e: "_Env", algorithm: str, proto: int):
    """The shortest a ring that crosses the scale-out network can take with LL128 or Simple:
    nsteps x ring_network_step_s (None where it does not apply). Each step of each channel is a
    network send that the proxy posts and the peer's proxy sees complete before the GPU goes on
    (NCCL_STEPS slots per connection), so a step takes that round however few bytes it carries; LL's
    flags travel with the data and poll no proxy. The data: nccl-tests rings of 80 H100 over
    InfiniBand and of 16 B300 over EFA spend 8.8-12.4 us a step from 1 to 64 MiB where the bytes
    alone take 1-3 us (collectives.yaml sources). Large messages, whose steps carry more than the
    round's worth of bytes, never reach it."""
    factor = _RING_STEPS_PER_RANK.get(e.op)
    step_s = e.c.ring_network_step_s
    if algorithm != "ring" or factor is None or proto == _LL or step_s <= 0 or not np.any(e.multi):
        return None
    return np.where(e.multi, factor * (e.p - 1.0) * step_s, 0.0)


@dataclass(frozen=True)
class AlgorithmEntry:
    """One algorithm of the repertoire: where it is valid and what it costs.

    `ops`: the collectives it implements; `protocols`: the protocols it runs (indices into
    PROTOCOLS); `applies(env)`: whether it exists at all on this system (a cheap structural gate;
    per-shape validity is the `valid` mask the cost returns); `cost(env, proto)`: the coefficients
    (a, b, c, valid, hb, net, spine_fraction) of t = a + b·n + c·sqrt(n), vectorized over the
    distinct group shapes of `env`, with hb·n and net·n the bytes per GPU on the HB fabric and the
    scale-out network. `forwarded_route`: the entry is also a candidate on the PXN route of
    cross-rail traffic where a cross-rail tier exists. `corrected`: NCCL's tree correction factor
    applies to its bandwidth term (see _select)."""

    algorithm: str
    ops: frozenset
    protocols: tuple
    cost: Callable
    applies: Callable = lambda env: True
    forwarded_route: bool = True
    corrected: bool = False


@dataclass(frozen=True)
class _Env:
    """What the entries' costs share for one routing of the distinct group shapes of one call."""

    op: str
    p: np.ndarray
    g: np.ndarray
    rail: np.ndarray
    system: ClusterSystem
    c: CollectiveCalibration
    pxn: bool
    shape: tuple
    n_dom: np.ndarray
    span: np.ndarray
    conc: np.ndarray
    multi: np.ndarray
    arch: ArchitectureConstants
    eta_hb: float
    b_hb: float
    bw_hb_ring: np.ndarray
    nic: float
    a2a_rail: _Path
    a2a_cross: _Path
    ring_ok: np.ndarray
    bw_net_ring: np.ndarray
    lat_net_ring: np.ndarray
    sf_ring: np.ndarray
    fwd_ring: np.ndarray
    step_ok: np.ndarray
    bw_net_step: np.ndarray
    lat_net_step: np.ndarray
    sf_step: np.ndarray
    fwd_step: np.ndarray
    net_ok_ring: np.ndarray
    net_ok_step: np.ndarray
    bus_simple: np.ndarray
    ll_max: np.ndarray
    n_ch: np.ndarray
    scale: np.ndarray
    phi: np.ndarray
    bus: dict
    proto_ok: dict
    # MPI-style steps: alpha per step from the Simple protocol, beta from the links the step uses
    ai: float
    ae_ring: np.ndarray
    ae_step: np.ndarray
    bi: np.ndarray
    be_ring: np.ndarray
    be_step: np.ndarray
    si: np.ndarray  # steps whose partner is in the same domain (ranks numbered domain-major)
    se: np.ndarray  # steps whose partner is in another domain
    pow2: np.ndarray
    excess_ring: np.ndarray  # what a slow fabric adds per network hop of ring-like traffic (net_hop_s)
    a_w: np.ndarray  # the slowest link a non-power-of-two fold uses
    b_w: np.ndarray
    memo: dict = field(default_factory=dict)  # an entry's protocol-independent work, computed once

    def once(self, key: str, fn: Callable):
        if key not in self.memo:
            self.memo[key] = fn(self)
        return self.memo[key]

    def a_hb(self, algo: str, proto: int) -> float:
        # the NCCL per-hop cost is a floor; a slower physical link raises it
        return max(self.system.hb.latency_s, self.c.hop_latency_s[algo].hb[proto])

    def a_net(self, algo: str, proto: int, lat_path, fwd):
        hop = net_hop_s(self.c, self.c.hop_latency_s[algo].net[proto], lat_path, proto)
        return hop + np.where(fwd, self.a_hb(algo, proto), 0.0)  # forwarding adds one HB hop


def _environment(op, p, g, span, rail, conc, system, calib, *, pxn: bool) -> _Env:
    """Paths, bandwidths and latencies of one routing of cross-rail traffic.

    pxn=False: cross-rail traffic climbs to the lowest cross-rail tier spanning the group, or is
    forwarded over the HB domain where there is none (Rail-only). pxn=True: the alternative where a
    cross-rail tier exists -- forwarded over the HB domain anyway; only the entries with
    forwarded_route are candidates then, valid only on the shapes that have cross-rail traffic and
    such a tier."""
    n_dom = domains_crossed(p, g, span)
    span = np.maximum(span, n_dom)
    multi = n_dom > 1
    hb = system.hb
    c = calib
    b_hb = hb.bandwidth_per_gpu_bytes_per_s
    arch = _architecture(system, c)
    eta_hb = hb_link_efficiency(system, c)
    bw_hb_ring = eta_hb * _hb_ring_bandwidth(system, g)

    nic = system.nic_bandwidth_per_gpu_bytes_per_s
    ring_rail = _scaleout_path(system, c, n_dom, span, conc, cross=False, a2a=False, nic_bw=nic)
    ring_cross = _scaleout_path(system, c, n_dom, span, conc, cross=True, a2a=False, nic_bw=nic)
    a2a_rail = _scaleout_path(system, c, n_dom, span, conc, cross=False, a2a=True, nic_bw=nic)
    a2a_cross = _scaleout_path(system, c, n_dom, span, conc, cross=True, a2a=True, nic_bw=nic)

    def rail_or_cross(r: _Path, x: _Path):
        """Path of traffic between members' own ranks: on rails if same_rail; otherwise a cross-rail
        tier, or PXN-style forwarding over the HB domain onto the rail when there is none (§3.4);
        with pxn, forwarding where a cross-rail tier exists (the alternative route)."""
        if pxn:
            forwarded = ~rail & x.exists
            ok = r.exists & forwarded
        else:
            forwarded = ~rail & ~x.exists
            ok = r.exists & (rail | x.exists | forwarded)
        use_x = ~rail & ~forwarded
        bw = np.where(use_x, x.bw, np.where(forwarded, np.minimum(r.bw, eta_hb * b_hb), r.bw))
        lat = np.where(use_x, x.latency_s, r.latency_s)
        sf = np.where(use_x, x.spine_fraction, r.spine_fraction)
        return ok, bw, lat, sf, forwarded

    ring_ok, bw_net_ring, lat_net_ring, sf_ring, fwd_ring = rail_or_cross(ring_rail, ring_cross)
    step_ok, bw_net_step, lat_net_step, sf_step, fwd_step = rail_or_cross(a2a_rail, a2a_cross)
    # a single-domain shape has no cross-rail traffic: its candidates come from the first routing only
    net_ok_ring = ring_ok if pxn else ~multi | ring_ok
    net_ok_step = step_ok if pxn else ~multi | step_ok

    # NCCL ring busBw: min of the intra-domain share (§3.5: B_hb g/(g-1)) and the domain's g NICs
    g_intra = np.where(g > 1, g / np.maximum(g - 1, 1), np.inf)
    bus_simple = np.where(multi, np.minimum(bw_hb_ring * g_intra, g * np.where(ring_ok, bw_net_ring, 1.0)), bw_hb_ring)
    ll_max = np.where(multi, np.where(n_dom <= 2, c.ll_max_two_domains_bytes_per_s, c.ll_max_many_domains_bytes_per_s),
                      arch.ll_max_single_domain_bytes_per_s)
    # NCCL's channels (§4.3): one per NVLink inside a domain, one per NIC across domains, at most
    # max_channels (NCCL's ring search stops at MAXCHANNELS/2); without the cap a domain of 128+
    # GPUs would get 128+ channels, each too thin, and the pipeline fill would grow with the domain
    n_ch = np.minimum(np.where(multi, g * system.nics_per_gpu, b_hb / arch.nvlink_line_rate_per_link_bytes_per_s),
                      c.max_channels)
    scale = np.minimum(n_dom - 1, 2).astype(np.intp)  # NCCL's tuning scale: 1 / 2 / >= 3 nodes
    # pipeline fill: NCCL's chunks have a fixed size, so a chunk's time on one channel -- and the
    # fill -- scales with 1/(per-channel bandwidth); pipeline_fill_factor holds at the reference
    phi = c.pipeline_fill_factor * c.pipeline_fill_channel_bytes_per_s / (bus_simple / n_ch)
    # ring LL and LL128 shares of the Simple busBw (tuning.cc): NCCL before 2.21 gave LL 1/3 for an
    # all-gather, reduce-scatter or broadcast inside one node and 1/4 otherwise; before 2.23 LL128
    # reached 0.7 with one GPU per node, 0.92 otherwise
    ll_frac = c.ll_bandwidth_fraction
    if c.ll_bandwidth_fraction_one_domain_gather is not None and op in ("all_gather", "reduce_scatter", "broadcast"):
        ll_frac = np.where(multi, c.ll_bandwidth_fraction, c.ll_bandwidth_fraction_one_domain_gather)
    ll128_frac = c.ll128_bandwidth_fraction
    if c.ll128_bandwidth_fraction_one_per_domain is not None:
        ll128_frac = np.where(g == 1, c.ll128_bandwidth_fraction_one_per_domain, c.ll128_bandwidth_fraction)
    bus = {
        _LL: np.minimum(ll_frac * bus_simple, ll_max),
        _LL128: np.minimum(ll128_frac * bus_simple,
                           n_ch * np.take(np.broadcast_to(arch.ring_ll128_per_channel_bytes_per_s, 3), scale)),
        _SIMPLE: bus_simple,
    }
    ll128_ok = (~multi | c.ll128_over_network) & ll128_enabled(c, system.gpu.architecture)
    env = dict(op=op, p=p, g=g, rail=rail, system=system, c=c, pxn=pxn, shape=p.shape, n_dom=n_dom, span=span,
               conc=conc, multi=multi, arch=arch, eta_hb=eta_hb, b_hb=b_hb, bw_hb_ring=bw_hb_ring, nic=nic,
               a2a_rail=a2a_rail, a2a_cross=a2a_cross, ring_ok=ring_ok, bw_net_ring=bw_net_ring,
               lat_net_ring=lat_net_ring, sf_ring=sf_ring, fwd_ring=fwd_ring, step_ok=step_ok,
               bw_net_step=bw_net_step, lat_net_step=lat_net_step, sf_step=sf_step, fwd_step=fwd_step,
               net_ok_ring=net_ok_ring, net_ok_step=net_ok_step, bus_simple=bus_simple, ll_max=ll_max, n_ch=n_ch,
               scale=scale, phi=phi, bus=bus, proto_ok={_LL: True, _LL128: ll128_ok, _SIMPLE: True})
    ai = max(hb.latency_s, c.hop_latency_s["ring"].hb[_SIMPLE])
    lat_floor = c.hop_latency_s["ring"].net[_SIMPLE]
    ae_ring = net_hop_s(c, lat_floor, lat_net_ring, _SIMPLE) + np.where(fwd_ring, ai, 0.0)
    ae_step = net_hop_s(c, lat_floor, lat_net_step, _SIMPLE) + np.where(fwd_step, ai, 0.0)
    bi = 1.0 / bw_hb_ring
    be_step = 1.0 / np.where(step_ok, bw_net_step, np.inf)
    si = _ceil_lg(g)
    return _Env(**env, ai=ai, ae_ring=ae_ring, ae_step=ae_step, bi=bi,
                be_ring=1.0 / np.where(ring_ok, bw_net_ring, np.inf), be_step=be_step, si=si,
                se=np.maximum(_ceil_lg(p) - si, 0.0) * multi, pow2=_is_pow2(p),
                excess_ring=np.maximum(lat_net_ring - c.net_latency_covered_s, 0.0),
                a_w=np.where(multi, ae_step, ai), b_w=np.where(multi, be_step, bi))


# ---- NCCL's algorithms ---------------------------------------------------------------------------


def _ring(e: _Env, proto: int):
    """NCCL ring (AR, RS, AG, broadcast, reduce): nsteps hops, the inter-domain ones on the network
    (§4.2; tuning.cc). Broadcast and reduce stream the whole vector down (up) a chain, and NCCL
    charges them one hop plus the base when the channels are identical, whatever the rank count."""
    p, g, c = e.p, e.g, e.c
    phi = e.phi * _simple_chunk_scale(c, proto)
    if e.op == "all_reduce":
        # NCCL < 2.23 counted 2·nNodes inter-node steps for AllReduce, 2·(nNodes − 1) since
        coef, nsteps = 2 * (p - 1) / p, 2 * (p - 1)
        ninter = 2 * (e.n_dom - 1) + np.where(e.multi & (not _at_least(c, "2.23")), 2.0, 0.0)
    elif e.op in ("broadcast", "reduce"):
        coef = np.ones(e.shape)
        net = coef / g * e.multi
        hop = np.where(e.multi, e.a_net("ring", proto, e.lat_net_ring, e.fwd_ring), e.a_hb("ring", proto))
        return (*_pipelined(c.base_latency_s["ring"][proto], hop, coef / e.bus[proto], phi,
                            e.multi * _proto_mult(proto) * e.excess_ring),
                e.net_ok_ring & e.proto_ok[proto], coef - net + np.where(e.fwd_ring, net, 0.0), net, e.sf_ring)
    else:
        coef, nsteps, ninter = (p - 1) / p, p - 1, e.n_dom - 1
    if e.op in ("all_gather", "reduce_scatter"):
        # calibrated: measured ring all-gather / reduce-scatter ramps inside one domain reach
        # the bandwidth with a fraction of the fill the all-reduce ramps show (collectives.yaml)
        phi = phi * np.where(e.multi, 1.0, c.ring_gather_fill_fraction_one_domain)
    net = coef / g * e.multi
    hbb = coef - net + np.where(e.fwd_ring, net, 0.0)
    overhead = c.net_overhead_s * (c.net_overhead_simple_factor if proto == _SIMPLE else 1.0)
    intra = np.where(e.multi, max(e.a_hb("ring", proto), overhead), e.a_hb("ring", proto))
    # with one GPU per domain NCCL uses the Tree NET latency for the inter hops (§4.2), from 2.23
    # (tuning.cc v2.23.4: ppn == 1 ? hwLat[NET][TREE]; v2.18-v2.22 the Ring NET row)
    if _at_least(c, "2.23"):
        inter = np.where(g == 1, e.a_net("tree", proto, e.lat_net_ring, e.fwd_ring),
                         e.a_net("ring", proto, e.lat_net_ring, e.fwd_ring))
    else:
        inter = e.a_net("ring", proto, e.lat_net_ring, e.fwd_ring)
    lat = (nsteps - ninter) * intra + ninter * inter
    slow = ninter * _proto_mult(proto) * e.excess_ring
    base = c.base_latency_s["ring"][proto]
    if proto == _SIMPLE and e.op == "all_reduce":
        # NCCL's ring "plateau" factor: Simple AllReduce across nodes only
        f = np.where(e.multi, c.ring_simple_multidomain_latency_factor, 1.0)
        lat, base, slow = lat * f, base * f, slow * f
    return (*_pipelined(base, lat, coef / e.bus[proto], phi, slow), e.net_ok_ring & e.proto_ok[proto], hbb, net, e.sf_ring)


def _pat(e: _Env, proto: int):
    """NCCL PAT (Parallel Aggregated Trees, NCCL >= 2.23): allgather / reduce-scatter with one GPU
    per node, Simple only; tuning.cc: base + log2(nNodes)·interLat/3.5 + nRanks·2.8 us (interLat the
    Tree NET latency, as at one GPU per node), busBw × 0.75."""
    p, c = e.p, e.c
    coef = (p - 1) / p
    inter = e.a_net("tree", _SIMPLE, e.lat_net_ring, e.fwd_ring)
    lat = _lg(e.n_dom) * inter / 3.5 + p * c.pat_per_rank_latency_s
    net = coef * e.multi
    slow = _lg(e.n_dom) / 3.5 * _proto_mult(_SIMPLE) * e.excess_ring
    return (*_pipelined(c.pat_base_latency_s, lat, coef / (c.pat_bandwidth_fraction * e.bus_simple), e.phi, slow),
            e.multi & (e.g == 1) & e.net_ok_ring, coef - net + np.where(e.fwd_ring, net, 0.0), net, e.sf_ring)


def _two_domain_bus(e: _Env):
    """Bus bandwidth of a tree over two domains: the reduction goes up one direction of the link
    between the two roots and the broadcast comes down the other, so each direction carries the
    vector once where a ring carries it twice; NCCL prices trees on <= 2 nodes with the
    intra-node bandwidth (tuning.cc: bw = nNodes <= 2 ? bwIntra : bwInter) and doubles NVLSTree's
    inter-node bandwidth there (v2.28+)."""
    g_intra = np.where(e.g > 1, e.g / np.maximum(e.g - 1, 1), np.inf)
    net = 2.0 * e.g * np.where(e.ring_ok, e.bw_net_ring, 1.0)
    return np.where(e.n_dom == 2, np.minimum(e.bw_hb_ring * g_intra, net), e.bus_simple)


def _tree(e: _Env, proto: int):
    """NCCL double binary tree (AR); the correction table of §4.1 multiplies its bandwidth (_select)."""
    g, c, multi = e.g, e.c, e.multi
    net = np.where(e.n_dom == 2, 1.0, 2.0) / g * multi
    hbb = 2.0 * (g - 1) / g + np.where(e.fwd_ring, net, 0.0)
    bus = e.once("two_domain_bus", _two_domain_bus)
    # NCCL's tuner (tuning.cc) applies its refinements in turn: AllReduce trees min(0.92·busBw,
    # nCh·perChMaxTreeBw), then LL min(·/3.8, llMaxBw) or LL128 min(·×(7/9 | 120/128),
    # nCh·perChMaxTreeLL128Bw). The model takes the LL and LL128 shares of the busBw itself, not of
    # the Simple tree's: measured, a 2 x 8 A100 tree LL128 all-reduce over EFA (collectives-modern.md
    # AWS-3, 128 MiB-1 GiB) runs 4-7 % above the share of busBw alone and would be 11-14 % above the
    # tuner's compounded 0.92 x 120/128, which ranks the algorithms rather than times them
    if proto == _LL:
        bw = np.minimum(bus / c.tree_ll_divisor, e.ll_max)
    elif proto == _LL128:
        bw = np.minimum(bus * np.where(multi, c.tree_ll128_fraction_many_domains, c.tree_ll128_fraction_one_domain),
                        e.n_ch * np.take(e.arch.tree_ll128_per_channel_bytes_per_s, e.scale))
    else:
        bw = np.minimum(c.tree_simple_fraction * bus, e.n_ch * np.take(e.arch.tree_per_channel_bytes_per_s, e.scale))
    # log2 of the domain count taken continuously: NCCL's tuner charges log2i(nNodes) = floor(log2)
    # hops, a double binary tree over N domains is ceil(log2 N) deep; the two agree at powers of two
    lat = 2.0 * ((g - 1) * e.a_hb("tree", proto) + _lg(e.n_dom) * e.a_net("tree", proto, e.lat_net_ring, e.fwd_ring))
    slow = 2.0 * _lg(e.n_dom) * _proto_mult(proto) * e.excess_ring
    return (*_pipelined(c.base_latency_s["tree"][proto], lat, 1.0 / (0.5 * bw), e.phi * _simple_chunk_scale(c, proto), slow),
            e.net_ok_ring & e.proto_ok[proto], hbb, net, e.sf_ring)


def _nvls_ok(e: _Env) -> bool:
    return e.system.hb.in_network_reduction and e.system.hb.topology == HBTopology.switched


def _nvls_fraction(e: _Env):
    return np.ones(e.shape) if e.op == "all_reduce" else (e.g - 1) / e.g


def _nvls_bandwidth(e: _Env):
    """NVLS algorithm bandwidth: hb_in_network_efficiency (measured on 8 x H100) scaled by NCCL's
    per-generation NVLS efficiency relative to Hopper's (tuning.cc nvlsEfficiency: 0.85 Hopper,
    0.74 Blackwell)."""
    if e.system.hb.size > MNNVL_MIN_DOMAIN and e.c.mnnvl_in_network_efficiency is not None:
        # a rack-scale domain (NVLink switch trays between compute trays, GB200/GB300 NVL72) has its own
        return e.c.mnnvl_in_network_efficiency * e.b_hb
    hopper = e.c.architectures["hopper"].nvls_efficiency if "hopper" in e.c.architectures else e.arch.nvls_efficiency
    return e.c.hb_in_network_efficiency * e.arch.nvls_efficiency / hopper * e.b_hb


def _nvls(e: _Env, proto: int):
    """NVLink SHARP inside one NVSwitch domain (§2.6, §4.3). Each step of its all-reduce reduces
    through the switch what every GPU of the domain wrote (multimem.ld_reduce over all members,
    src/device/all_reduce.h) and moves a chunk per head (one node: loopCount = nvls->nHeads *
    chunkSize), so a step waits on all g GPUs and the fill factor phi, fitted on 8-GPU HGX nodes,
    grows as (g/8)^nvls_fill_domain_exponent (collectives.yaml; fitted on the two 72-GPU NVL72
    all-reduce curves there are, XLA's X-G1 and CoreWeave's CW-G1: with the exponent 1, i.e. phi
    in proportion to the GPUs, both ramps stay 12-20% fast at 72 MiB-1 GiB; scaling by NCCL's head
    count instead, min(g, NCCL_MAX_NVLS_ARITY = 32), leaves them faster still). Below 8 GPUs the
    same rule shortens the fill (checked only at 8 GiB, where the fill is negligible: SB-B2 on 6
    and 7 B200s).
    All-gather and reduce-scatter step one chunk per channel (all_gather.h: loopSize = nChannels *
    chunkSize) and keep the 8-GPU fill."""
    c = e.c
    k_intra = _nvls_fraction(e) / (_nvls_bandwidth(e))
    heads = (e.g / _NVLS_FIT_HEADS) ** c.nvls_fill_domain_exponent if e.op == "all_reduce" else 1.0
    return (*_pipelined(c.base_latency_s["nvls"][_SIMPLE], c.hop_latency_s["nvls"].hb[_SIMPLE], k_intra,
                        e.phi * (c.nvls_chunk_bytes / _NCCL_NVLS_CHUNK_BYTES) * heads),
            # NCCL runs NVLS all-gather / reduce-scatter on at most NCCL_MAX_NVLS_ARITY GPUs of a
            # domain (enqueue.cc topoGetAlgoInfo: skipped when localRanks exceed it; 2.26 also for
            # more ranks than that), so a 72-GPU NVL72 domain rings them
            ~e.multi & (e.g >= c.nvls_min_local_ranks) & ((e.op == "all_reduce") | (e.g <= c.nvls_max_arity)),
            _nvls_fraction(e), 0.0, 0.0)


def _nvls_tree(e: _Env, proto: int):
    """NVLS reduce inside each domain, then a tree across domains on each GPU's n/g shard (AR). Its
    NVLS steps wait on the domain's g GPUs as _nvls's do, so phi grows with g as there (measured
    on 8-GPU B200 nodes, where the factor is 1, and on two NVL72 racks, CW-G2)."""
    c, g = e.c, e.g
    k_intra = _nvls_fraction(e) / (_nvls_bandwidth(e))
    # bytes per GPU over its NICs in units of n/g, each divided by the share of a ring's scale-out
    # bandwidth measured for that exchange (collectives.yaml): n/g once between two domains (each direction
    # of the root link carries the vector once, _two_domain_bus), 2n/g through the double binary tree beyond
    arch = e.system.gpu.architecture
    ring_bw = np.where(e.ring_ok, e.bw_net_ring, 1.0)
    # between two domains the exchange runs the NICs faster than a ring does, but never past their
    # line rate (the factor was fitted with one queue pair per connection, where it reaches 0.99 of it;
    # more queue pairs raise the ring's share, not the line)
    two = np.minimum(c.nvls_tree_two_domains_factor.get(arch, 1.0) * ring_bw, e.nic)
    net_bw = np.where(e.n_dom == 2, two, ring_bw * c.nvls_tree_many_domains_fraction.get(arch, 1.0) / 2.0)
    k = np.maximum(k_intra, 1.0 / (g * net_bw))
    lat = c.hop_latency_s["nvls_tree"].hb[_SIMPLE] + 2.0 * _lg(e.n_dom) * e.a_net("nvls_tree", _SIMPLE, e.lat_net_ring, e.fwd_ring)
    net = np.where(e.n_dom == 2, 1.0, 2.0) / g
    slow = 2.0 * _lg(e.n_dom) * _proto_mult(_SIMPLE) * e.excess_ring
    phi = e.phi * _nvls_tree_chunk_scale(c, e.n_dom) * (g / _NVLS_FIT_HEADS) ** c.nvls_fill_domain_exponent
    return (*_pipelined(c.base_latency_s["nvls_tree"][_SIMPLE], lat, k, phi, slow),
            e.multi & e.ring_ok & (g >= c.nvls_min_local_ranks), 1.0 + np.where(e.fwd_ring, net, 0.0), net, e.sf_ring)


def _collnet(e: _Env, proto: int):
    """CollNet / SHARP on the tier connecting the domains, same-rail groups only (CollNetDirect).

    AllReduce: each GPU reduces its 1/g of the vector through its own NIC, the switch reduces across
    domains, busBw x net_in_network_efficiency (tuning.cc, Hopper and later).
    AllGather / ReduceScatter (NCCL >= 2.20, the SHARP plugin's iallgather / ireducescatter, one NIC
    per local rank): the switch multicasts (reduces) the whole buffer, so every domain's NICs carry
    all of it, 1/g per GPU, at collnet_gather_efficiency of their line rate (tuning.cc v2.20+:
    busBw = ppn x min(bwIntra, 0.9 x bwInter), not converted by the ring's nRanks/nsteps)."""
    c, g, system = e.c, e.g, e.system
    sharp = np.zeros(e.shape, bool)
    for t_i, tier in enumerate(system.tiers):
        # lowest tier spanning the group's domains on its rail path; SHARP must be there
        below = np.zeros(e.shape, bool)
        for lt in system.tiers[:t_i]:
            below |= lt.span_domains >= e.span
        if tier.in_network_reduction:
            sharp |= (tier.span_domains >= e.span) & ~below
    net_bw = np.where(e.ring_ok, e.bw_net_ring, 1.0)
    if e.op == "all_reduce":
        hb_coef = 2.0 * (g - 1) / g
        # SHARP's offload streams as fast whatever the ring's queue pairs (net_in_network_efficiency
        # was fitted against the one-queue-pair path)
        # (from Hopper on: ArchitectureConstants.collnet_scaled)
        eff = c.net_in_network_efficiency if e.arch.collnet_scaled else 1.0
        net_s = (1.0 / g) / (eff * net_bw * (c.nic_efficiency / net_efficiency(c)))
        ok = True
    else:
        hb_coef = (g - 1) / g
        # the path's bandwidth carries the ring's nic_efficiency; CollNet streams at its own share
        net_s = (1.0 / g) / (c.collnet_gather_efficiency / net_efficiency(c) * net_bw)
        ok = _at_least(c, "2.20")
    k = np.maximum(hb_coef / e.bw_hb_ring, net_s)
    # with one GPU per domain NCCL takes the Tree NET latency for every algorithm's inter-node hop,
    # CollNet's too (tuning.cc from v2.23.4: interLat = ppn == 1 ? hwLat[NET][TREE] : hwLat[NET][a])
    inter = e.a_net("collnet", _SIMPLE, e.lat_net_ring, e.fwd_ring)
    if _at_least(c, "2.23"):
        inter = np.where(g == 1, e.a_net("tree", _SIMPLE, e.lat_net_ring, e.fwd_ring), inter)
    lat = 2.0 * (np.minimum(1.0, g - 1) * e.a_hb("collnet", _SIMPLE) + (g - 1) * c.collnet_per_rank_latency_s) + inter
    # NCCL skips CollNetDirect on nodes of more than NCCL_MAX_DIRECT_ARITY + 1 local ranks (enqueue.cc
    # from 2.23: `a == NCCL_ALGO_COLLNET_DIRECT && comm->maxLocalRanks > NCCL_MAX_DIRECT_ARITY+1`;
    # collnet_max_local_ranks, unbounded for older releases by version_overrides)
    arity = g <= c.collnet_max_local_ranks
    return (*_pipelined(c.base_latency_s["collnet"][_SIMPLE], lat, k, e.phi, _proto_mult(_SIMPLE) * e.excess_ring),
            e.multi & e.ring_ok & e.rail & sharp & ok & arity, hb_coef, 1.0 / g, e.sf_ring)


# ---- two-level and topology-specific algorithms ------------------------------------------------


def _hierarchical(e: _Env, proto: int):
    """Two-level (§2.6): RS inside the domain, rings across domains per rail, AG; the phases stream
    chunk by chunk, like NCCL's rings, so they pay the same pipeline fill."""
    g, n_dom = e.g, e.n_dom
    k = 2.0 if e.op == "all_reduce" else 1.0
    coef = _pipelined(0.0, k * ((g - 1) * e.ai + (n_dom - 1) * e.ae_ring),
                      k * ((g - 1) / g * e.bi + (n_dom - 1) / n_dom * (1.0 / g) * e.be_ring), e.phi,
                      k * (n_dom - 1) * _proto_mult(_SIMPLE) * e.excess_ring)
    net = k * (n_dom - 1) / n_dom / g
    return (*coef, e.multi & e.ring_ok & (g >= 2), k * (g - 1) / g + np.where(e.fwd_ring, net, 0.0), net, e.sf_ring)


def _torus(e: _Env, proto: int):
    """Dimension-ordered rings on a ring/torus HB domain (§3.1, §3.2)."""
    g = e.g
    x, hops = _hb_torus_allreduce(e.system, np.ones(e.shape), g)  # seconds per byte at line rate
    k = 1.0 if e.op == "all_reduce" else 0.5
    return (*_pipelined(0.0, k * hops * e.ai, k * x / e.eta_hb, e.phi), ~e.multi & (g >= 2) & e.once("block", _block),
            k * 2.0 * (g - 1) / g, 0.0, 0.0)


def _block(e: _Env):
    return _whole_block(e.system, e.g)


def _bucket(e: _Env, proto: int):
    """All dimensions of a torus HB domain at once (multi-dimensional bucket algorithm)."""
    g = e.g
    x, hops = _hb_bucket_allreduce(e.system, g)
    k = 1.0 if e.op == "all_reduce" else 0.5
    return (*_pipelined(0.0, k * hops * e.ai, k * x / e.eta_hb, e.phi), ~e.multi & (g >= 2) & e.once("block", _block),
            k * 2.0 * (g - 1) / g, 0.0, 0.0)


# ---- MPI-style algorithms (§2): alpha-beta step by step, no fill term -----------------------------


def _folded_steps(e: _Env):
    """(intra-domain, inter-domain) steps of a recursive doubling or halving after the fold of a p
    that is not a power of two onto p' = 2^floor(lg p) ranks (Thakur et al. 2005): lg p' in all, of
    which as many cross domains as without the fold (at least enough to join the domains, lg of
    their count), the step the fold saves an intra-domain one; lg p for a power of two."""
    total = np.floor(_lg(e.p) + 1e-9)
    se = np.minimum(total, np.maximum(e.se, _ceil_lg(e.n_dom) * e.multi))
    return total - se, se


def _recursive_doubling_ar(e: _Env, proto: int):
    fold_a, fold_b = np.where(e.pow2, 0.0, 2.0 * e.a_w), np.where(e.pow2, 0.0, 2.0 * e.b_w)
    si, se = _folded_steps(e)
    # lg p' steps of the whole vector
    return (si * e.ai + se * e.ae_step + fold_a, si * e.bi + se * e.be_step + fold_b, 0.0,
            e.net_ok_step, si, se, e.sf_step)


def _rabenseifner(e: _Env, proto: int):
    """Halving RS then doubling AG, the intra-domain steps first (large data on HB)."""
    g, n_dom = e.g, e.n_dom
    fold_a, fold_b = np.where(e.pow2, 0.0, 2.0 * e.a_w), np.where(e.pow2, 0.0, 2.0 * e.b_w)
    net = 2.0 * (n_dom - 1) / n_dom / g
    si, se = _folded_steps(e)
    return (2.0 * (si * e.ai + se * e.ae_step) + fold_a,
            2.0 * ((g - 1) / g * e.bi + (n_dom - 1) / n_dom / g * e.be_step) + fold_b, 0.0,
            e.net_ok_step, 2.0 * (g - 1) / g + np.where(e.fwd_step, net, 0.0), net, e.sf_step)


def _halving_doubling_terms(e: _Env):
    g, n_dom = e.g, e.n_dom
    si, se = _folded_steps(e)
    a = si * e.ai + se * e.ae_step
    b = (g - 1) / g * e.bi + (n_dom - 1) / n_dom / g * e.be_step
    net = (n_dom - 1) / n_dom / g
    return a, b, (g - 1) / g + np.where(e.fwd_step, net, 0.0), net


def _recursive_halving(e: _Env, proto: int):
    """Reduce-scatter; Thakur: p not a power of two costs (lg p' + 2) steps and ~2n of traffic."""
    a, b, hbb, net = _halving_doubling_terms(e)
    return (a + np.where(e.pow2, 0.0, 2.0 * e.a_w), b + np.where(e.pow2, 0.0, e.b_w), 0.0, e.net_ok_step, hbb, net,
            e.sf_step)


def _recursive_doubling_ag(e: _Env, proto: int):
    a, b, hbb, net = _halving_doubling_terms(e)
    return a, b, 0.0, e.net_ok_step & e.pow2, hbb, net, e.sf_step


def _bruck_ag(e: _Env, proto: int):
    """ceil(lg p) steps, (p-1)/p n in total, the first (short-distance) steps on HB."""
    p, g = e.p, e.g
    sb = _ceil_lg(p)
    sbi = np.minimum(e.si, sb)
    net = (p - g) / p
    return (sbi * e.ai + (sb - sbi) * e.ae_step, (g - 1) / p * e.bi + (p - g) / p * e.be_step, 0.0, e.net_ok_step,
            (g - 1) / p + np.where(e.fwd_step, net, 0.0), net, e.sf_step)


def _binomial(e: _Env, proto: int):
    return (e.si * e.ai + e.se * e.ae_step, e.si * e.bi + e.se * e.be_step, 0.0, e.net_ok_step, e.si, e.se, e.sf_step)


def _scatter_allgather(e: _Env, proto: int):
    p, g = e.p, e.g
    net = 2.0 * (p - g) / p
    return (2.0 * (e.si * e.ai + e.se * e.ae_step), 2.0 * ((g - 1) / p * e.bi + (p - g) / p * e.be_step), 0.0,
            e.net_ok_step & e.pow2, 2.0 * (g - 1) / p + np.where(e.fwd_step, net, 0.0), net, e.sf_step)


# ---- all-to-all ------------------------------------------------------------------------------------


def _a2a_intra_inverse_bw(e: _Env):
    return _hb_alltoall_inverse_bw(e.system, e.g) / e.eta_hb  # s per byte of n


def _pairwise(e: _Env, proto: int):
    """Direct all-to-all: intra-domain and remote peers served concurrently (§2.7); all sends are
    posted at once (NCCL grouped p2p), so peers overlap, and each extra remote peer costs one proxy
    operation, NCCL's netOverhead (§4.2), not a full hop latency."""
    p, g, multi, c = e.p, e.g, e.multi, e.c
    direct_rail = (g == 1) & e.rail  # only then is every remote peer on the own rail
    bw_d = np.where(direct_rail, e.a2a_rail.bw, e.a2a_cross.bw)
    ok_d = ~multi | np.where(direct_rail, e.a2a_rail.exists, e.a2a_cross.exists)
    sf_d = np.where(direct_rail, e.a2a_rail.spine_fraction, e.a2a_cross.spine_fraction)
    lat_d = np.where(direct_rail, e.a2a_rail.latency_s, e.a2a_cross.latency_s)
    ae_d = net_hop_s(c, c.hop_latency_s["ring"].net[_SIMPLE], lat_d, _SIMPLE)
    net = (p - g) / p
    # the intra-domain share is an all-to-all among the g members of n*g/p bytes each
    b = np.maximum(g / p * _a2a_intra_inverse_bw(e), np.where(multi, net / np.where(ok_d, bw_d, np.inf), 0.0))
    a = e.ai + np.where(multi, ae_d + np.maximum(p - g - 1, 0) * c.net_overhead_s, 0.0)
    return a, b, 0.0, ok_d, (g - 1) / p, net, sf_d


def _two_phase(e: _Env, proto: int):
    """PXN / Rail-only forwarding (§2.7, §3.4): HB shuffle to the rail owner, then rails; the phases
    do not overlap."""
    n_dom, r = e.n_dom, e.a2a_rail
    a = e.ai + e.a_net("ring", _SIMPLE, r.latency_s, False) + np.maximum(n_dom - 2, 0) * e.c.net_overhead_s
    b = _a2a_intra_inverse_bw(e) + (n_dom - 1) / n_dom / np.where(r.exists, r.bw, np.inf)
    return a, b, 0.0, e.multi & r.exists, (e.g - 1) / e.g, (n_dom - 1) / n_dom, r.spine_fraction


def _bruck_a2a(e: _Env, proto: int):
    """lg p steps of n/2."""
    return (e.si * e.ai + e.se * e.ae_step, 0.5 * (e.si * e.bi + e.se * e.be_step), 0.0, e.net_ok_step,
            0.5 * e.si + np.where(e.fwd_step, 0.5 * e.se, 0.0), 0.5 * e.se, e.sf_step)


# ---- point to point ------------------------------------------------------------------------------


def _p2p_route(e: _Env):
    """One flow: one link inside the domain; across, the GPU's NICs its channels stripe it over: NCCL
    gives a network peer at least one channel per local NIC (paths.cc ncclTopoGetNchannels, "We use
    at least 1 channel per NIC") and maps channel c to the GPU's c-th NIC (topo.cc ncclTopoGetLocalNet
    by channelId), so the flow spans min(channels, NICs) of them (p2p_net_channels: a large
    communicator halves a peer's channels, down to one NIC)."""
    system, c, rail = e.system, e.c, e.rail
    b_flow_hb = e.eta_hb * _hb_p2p_bandwidth(system)
    nics = float(system.nics_per_gpu)
    nic_flow = e.nic / nics * np.minimum(e.once("p2p_channels", p2p_net_channels), nics)
    r1 = _scaleout_path(system, c, e.n_dom, e.span, e.conc, cross=False, a2a=False, nic_bw=nic_flow)
    x1 = _scaleout_path(system, c, e.n_dom, e.span, e.conc, cross=True, a2a=False, nic_bw=nic_flow)
    forwarded = ~rail & (x1.exists if e.pxn else ~x1.exists)
    use_x = ~rail & ~forwarded
    bw_e = np.where(use_x, x1.bw, np.where(forwarded, np.minimum(r1.bw, b_flow_hb), r1.bw))
    lat_e = np.where(use_x, x1.latency_s, r1.latency_s)
    sf = np.where(use_x, x1.spine_fraction, r1.spine_fraction)
    return b_flow_hb, r1, forwarded, bw_e, lat_e, sf


def _p2p_protocol_fraction(c: CollectiveCalibration, proto: int) -> float:
    """The share of a send/recv's bandwidth its protocol reaches (LL and LL128 as a ring's)."""
    return {_LL: c.ll_bandwidth_fraction, _LL128: c.ll128_bandwidth_fraction, _SIMPLE: 1.0}[proto]


def _rooted_route(e: _Env):
    """The root's scale-out path for gather / scatter: its own NIC, at nic_efficiency. The uplinks
    into the root's subtree carry only the root's share, one GPU's worth, so an oversubscription
    below the subtree's GPU count never binds (a ratio above it is not modelled); each sender moves
    n/p. The remote members sit on the root's rail only with one GPU per domain; the others cross
    rails over a cross-rail tier or are forwarded to the root's rail over their own HB domain (PXN,
    rail-only)."""
    system, c = e.system, e.c
    same = (e.g == 1) & e.rail
    r1 = _scaleout_path(system, c, e.n_dom, e.span, e.conc, cross=False, a2a=False, nic_bw=e.nic)
    x1 = _scaleout_path(system, c, e.n_dom, e.span, e.conc, cross=True, a2a=False, nic_bw=e.nic)
    forwarded = ~same & (x1.exists if e.pxn else ~x1.exists)
    use_x = ~same & ~forwarded
    bw = np.full(np.shape(use_x), net_efficiency(c) * e.nic)
    lat = np.where(use_x, x1.latency_s, r1.latency_s)
    sf = np.where(use_x, x1.spine_fraction, r1.spine_fraction)
    ok = (forwarded & r1.exists) if e.pxn else np.where(use_x, x1.exists, r1.exists)
    return bw, lat, sf, ok, forwarded


def _direct(e: _Env, proto: int):
    """Gather / scatter as NCCL runs them (nccl-tests gather_perf / scatter_perf: one grouped
    ncclSend / ncclRecv per member at the root): the root receives (sends) the n/p share of each of
    the other p - 1 members at once, those in its domain over all its HB links at a send/recv's
    rate, those beyond through its own NIC (_rooted_route; the two concurrent), and each remote peer
    past the first costs one proxy operation (netOverhead, as the pairwise all-to-all)."""
    p, g, multi, c = e.p, e.g, e.multi, e.c
    bw_net, lat_net, sf, route_ok, forwarded = e.once("rooted", _rooted_route)
    frac = _p2p_protocol_fraction(c, proto)
    intra = (g - 1) / p / (c.p2p_hb_fraction * e.eta_hb * e.b_hb * frac)
    net = (p - g) / p
    inter = np.where(multi, net / np.where(route_ok, bw_net * frac, np.inf), 0.0)
    a = e.a_hb("ring", proto) + np.where(
        multi, net_hop_s(c, c.hop_latency_s["ring"].net[proto], lat_net, proto)
        + np.where(forwarded, e.a_hb("ring", proto), 0.0) + np.maximum(p - g - 1, 0) * c.net_overhead_s, 0.0)
    ok = np.where(multi, route_ok & e.proto_ok[proto], ~e.pxn)
    return a, np.maximum(intra, inter), 0.0, ok, (g - 1) / p + np.where(forwarded & multi, net, 0.0), net, sf


def _binomial_rooted(e: _Env, proto: int):
    """Binomial gather / scatter (MPICH, collectives.md §2: lg p·α + (p−1)/p·nβ): the steps across
    domains move the (p - g)/p of the vector that lives beyond the root's domain, the steps inside it
    the (g - 1)/p."""
    p, g = e.p, e.g
    net = (p - g) / p
    return (e.si * e.ai + e.se * e.ae_step, (g - 1) / p * e.bi + net * e.be_step, 0.0, e.net_ok_step,
            (g - 1) / p + np.where(e.fwd_step, net, 0.0), net, e.sf_step)


def _pow2_up(x):
    return 2.0 ** np.ceil(np.log2(np.maximum(x, 1.0)) - 1e-9)


def p2p_net_channels(e: _Env) -> np.ndarray:
    """Channels NCCL stripes one send/recv to a peer in another domain over (paths.cc
    ncclTopoGetNchannels / ncclTopoComputeP2pChannels, enqueue.cc addP2pToPlan).

    The communicator has p2pnChannels = pow2Up(runtime channels) -- NCCL duplicates the ring
    search's channels (one per NIC of the domain, `n_ch`, doubled when there are at most 4) at
    run time. A network peer gets
    (2.29+) max(NICs, ceil(NIC GB/s / NCCL_P2P_PER_CHANNEL_NET_BW)), rounded up to a power of two,
    halved while it times ceil(nRanks / NCCL_MAX_DEV_WORK_P2P_PER_BATCH) exceeds p2pnChannels, so
    that every peer fits in one round; before 2.29 it starts at 2, halved while it times nRanks
    exceeds 4 p2pnChannels, and is at least the NIC count. A large message uses all of them."""
    return _p2p_net_channels(e.n_ch, e.p, e.system, e.c)


def _p2p_net_channels(n_ch, p, system: ClusterSystem, c: CollectiveCalibration) -> np.ndarray:
    # graph channels: one per NIC (n_ch), doubled by ncclTopoDupChannels unless there are more
    # than 4 of them (it skips sm90+ graphs with nCh > 4 and bwIntra < 50); then the runtime copy
    graph = n_ch * np.where(n_ch <= 4, 2.0, 1.0)
    total = np.minimum(_pow2_up(c.runtime_channels_per_search_channel * graph), 64.0)
    nics = float(system.nics_per_gpu)
    if _at_least(c, "2.29"):
        ch = _pow2_up(np.maximum(nics, np.ceil(system.nic_bandwidth_per_gpu_bytes_per_s
                                                / c.p2p_net_channel_bytes_per_s - 1e-9)))
        rounds = np.ceil(p / c.p2p_ops_per_batch - 1e-9)
        for _ in range(7):  # at most 64 -> 1
            ch = np.where((ch * rounds > total) & (ch > 1), ch / 2, ch)
    else:
        ch = np.full(np.shape(p), 2.0)
        ch = np.where(2.0 * p > 4.0 * total, 1.0, ch)
        ch = _pow2_up(np.maximum(ch, nics))
    return np.minimum(ch, total)


def p2p_net_channels_bytes_per_s(channels, c: CollectiveCalibration) -> np.ndarray:
    """What `channels` p2p channels to one network peer move together: one channel's measured rate
    (p2p_net_one_channel_bytes_per_s) x channels**p2p_net_channel_exponent. The rate was measured
    on one queue pair per connection; more queue pairs raise it as they raise a ring's share of the
    line rate (net_efficiency / nic_efficiency: 17.2 GB/s a channel with two, the TB-7 curves of
    tests/perf/data/nccl_curves_modern.yaml at 8-64 nodes, against 15.3 with one, TB-5), and its channels add up
    (p2p_net_channel_exponent_multi_qp)."""
    one = c.p2p_net_one_channel_bytes_per_s or c.p2p_net_channel_bytes_per_s
    exponent = c.p2p_net_channel_exponent_multi_qp if _multi_qp(c) else c.p2p_net_channel_exponent
    return one * (net_efficiency(c) / c.nic_efficiency) * np.asarray(channels, float) ** exponent


def send_recv_channel_share(size, ranks_per_domain, system: ClusterSystem, calib: CollectiveCalibration):
    """The thread blocks (NCCL channels, one SM each) one send/recv holds while it runs, as a share
    of those a collective holds: the compute beside hidden communication loses SMs in proportion
    (iteration.hidden_cost). A peer inside the HB domain gets 2 channels per NVLink (paths.cc
    ncclTopoGetNchannels: `2*std::max(1, (int)(path->bw / nvlBw))`), a collective's full
    complement: share 1. A peer in another domain gets p2p_net_channels (NCCL 2.29: max(NICs, NIC
    GB/s / NCCL_P2P_PER_CHANNEL_NET_BW), 4 for a 400 Gb/s NIC; 2 before) against those 2 per
    NVLink: 4 of an 18-link domain's 36. Collectives keep share 1 whatever their span: the fitted
    overlap_slowdown describes them within and across domains together (a share by their channels
    across domains, one per NIC of the domain, 8 of 18 for a node of 8 single-NIC GPUs, priced the
    sharded data-parallel rows of the calibration 6.1-6.6 % MAPE against 5.9 %)."""
    p = np.asarray(size, float)
    g = np.minimum(np.asarray(ranks_per_domain, float), p)
    arch = _architecture(system, calib)
    links = system.hb.bandwidth_per_gpu_bytes_per_s / arch.nvlink_line_rate_per_link_bytes_per_s
    n_ch = np.minimum(g * system.nics_per_gpu, calib.max_channels)
    peer = _p2p_net_channels(n_ch, p, system, calib)
    return np.where(p > g, np.minimum(peer / (2.0 * max(links, 1.0)), 1.0), 1.0)


def _p2p(e: _Env, proto: int):
    """One send/recv. Across domains the flow is striped over p2p_net_channels channels, which
    together move at most p2p_net_channels_bytes_per_s (one channel's measured rate, sublinear in
    their count): in a large communicator (nccl-tests sendrecv over many nodes) NCCL gives a peer
    fewer channels than the NIC needs."""
    c, multi = e.c, e.multi
    b_flow_hb, r1, forwarded, bw_e, lat_e, sf = e.once("p2p", _p2p_route)
    bw_e = np.minimum(bw_e, p2p_net_channels_bytes_per_s(e.once("p2p_channels", p2p_net_channels), c))
    net = 1.0 * multi
    hbb = 1.0 * ~multi + np.where(forwarded, net, 0.0)
    frac = _p2p_protocol_fraction(c, proto)
    # inside the domain one send/recv reaches p2p_hb_fraction of a ring's per-link bandwidth (measured)
    bw = np.where(multi, bw_e, c.p2p_hb_fraction * b_flow_hb) * frac
    alpha = np.where(multi, net_hop_s(c, c.hop_latency_s["ring"].net[proto], lat_e, proto)
                     + np.where(forwarded, e.a_hb("ring", proto), 0.0), e.a_hb("ring", proto))
    ok = (multi & forwarded & r1.exists) if e.pxn else (~multi | r1.exists)
    return alpha, 1.0 / bw, 0.0, ok & np.where(multi, e.proto_ok[proto], True), hbb, net, sf


_ALL_PROTOCOLS = (_LL, _LL128, _SIMPLE)
_SIMPLE_ONLY = (_SIMPLE,)
_REDUCTIONS = frozenset({"all_reduce", "reduce_scatter", "all_gather"})

# The repertoire, in the order ties are broken (the earlier entry wins).
ENTRIES: tuple[AlgorithmEntry, ...] = (
    AlgorithmEntry("ring", frozenset({"all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce"}),
                   _ALL_PROTOCOLS, _ring),
    AlgorithmEntry("pat", frozenset({"reduce_scatter", "all_gather"}), _SIMPLE_ONLY, _pat,
                   applies=lambda e: _at_least(e.c, "2.23")),
    AlgorithmEntry("tree", frozenset({"all_reduce"}), _ALL_PROTOCOLS, _tree, corrected=True),
    AlgorithmEntry("nvls", _REDUCTIONS, _SIMPLE_ONLY, _nvls, applies=_nvls_ok, forwarded_route=False),
    AlgorithmEntry("nvls_tree", frozenset({"all_reduce"}), _SIMPLE_ONLY, _nvls_tree, applies=_nvls_ok),
    AlgorithmEntry("collnet", _REDUCTIONS, _SIMPLE_ONLY, _collnet,
                   applies=lambda e: bool(e.system.tiers), forwarded_route=False),
    AlgorithmEntry("hierarchical", _REDUCTIONS, _SIMPLE_ONLY, _hierarchical),
    AlgorithmEntry("torus", _REDUCTIONS, _SIMPLE_ONLY, _torus, applies=lambda e: _hb_dims(e.system) is not None,
                   forwarded_route=False),
    AlgorithmEntry("bucket", _REDUCTIONS, _SIMPLE_ONLY, _bucket, applies=lambda e: _hb_dims(e.system) is not None,
                   forwarded_route=False),
    AlgorithmEntry("recursive_doubling", frozenset({"all_reduce"}), _SIMPLE_ONLY, _recursive_doubling_ar),
    AlgorithmEntry("rabenseifner", frozenset({"all_reduce"}), _SIMPLE_ONLY, _rabenseifner),
    AlgorithmEntry("recursive_halving", frozenset({"reduce_scatter"}), _SIMPLE_ONLY, _recursive_halving),
    AlgorithmEntry("recursive_doubling", frozenset({"all_gather"}), _SIMPLE_ONLY, _recursive_doubling_ag),
    AlgorithmEntry("bruck", frozenset({"all_gather"}), _SIMPLE_ONLY, _bruck_ag),
    AlgorithmEntry("binomial", frozenset({"broadcast", "reduce"}), _SIMPLE_ONLY, _binomial),
    AlgorithmEntry("scatter_allgather", frozenset({"broadcast"}), _SIMPLE_ONLY, _scatter_allgather),
    AlgorithmEntry("pairwise", frozenset({"all_to_all"}), _SIMPLE_ONLY, _pairwise, forwarded_route=False),
    AlgorithmEntry("two_phase", frozenset({"all_to_all"}), _SIMPLE_ONLY, _two_phase, forwarded_route=False),
    AlgorithmEntry("bruck", frozenset({"all_to_all"}), _SIMPLE_ONLY, _bruck_a2a),
    AlgorithmEntry("p2p", frozenset({"send_recv"}), _ALL_PROTOCOLS, _p2p),
    AlgorithmEntry("direct", frozenset({"gather", "scatter"}), _ALL_PROTOCOLS, _direct),
    AlgorithmEntry("binomial", frozenset({"gather", "scatter"}), _SIMPLE_ONLY, _binomial_rooted),
)


def _select(cand: _Candidates, n: np.ndarray, inv: np.ndarray, p_u: np.ndarray, shape,
            calib: CollectiveCalibration) -> CollectiveEstimates:
    """Evaluate every candidate at every point (its coefficients gathered by shape index) and keep
    the fastest, as NCCL's tuner does (§4.1); ties go to the earlier candidate."""
    m = n.size
    n_shapes = len(p_u)
    single = (p_u <= 1)[inv]  # nothing to communicate
    live = [i for i, a in enumerate(cand.a) if not np.isinf(a).all()]  # valid somewhere
    if not live:
        inf = np.full(shape, np.inf)
        z = np.zeros(shape)
        return CollectiveEstimates(np.where(single.reshape(shape), 0.0, inf), np.full(shape, ALGORITHMS.index("none")),
                                   np.full(shape, _SIMPLE), z, z, z)
    one = n_shapes == 1
    gather = (lambda arr: np.full(m, arr[0])) if one else (lambda arr: arr.take(inv))
    sqrt_n = None
    corr_cache = {}
    pos = None
    t_best = None
    best = np.zeros(m, dtype=np.intp)
    t = np.empty(m)
    better = np.empty(m, dtype=bool)
    step = np.empty(m, dtype=np.intp)
    for i in live:
        b, c = cand.b[i], cand.c[i]
        corr = cand.corr[i]
        if corr is None:
            nn = n
        else:
            if corr not in corr_cache:
                if pos is None:
                    # NCCL indexes its correction table by floor(log2(n/64)); a step table would make
                    # the time drop where a factor jumps up, so interpolate linearly in log2(n/64)
                    # instead. The largest jump (x1.33 per doubling) is below 2, so n/corr(n) stays
                    # increasing.
                    pos = np.log2(np.maximum(n, 64.0) / 64.0)
                    whole = pos.astype(np.intp)
                # NCCL corrects only logSize < tree_correction_sizes (tuning.cc: 64 B to 256 MB);
                # larger trees run at the model's bandwidth (factor 1)
                table = np.append(np.asarray(calib.tree_correction[PROTOCOLS[corr]], dtype=float)
                                  [:calib.tree_correction_sizes], 1.0)
                # np.interp on the grid 0, 1, ..., len-1, clipped at both ends
                cell = np.minimum(whole, len(table) - 1)
                tab = np.append(table, table[-1])
                corr_cache[corr] = n / (tab.take(cell) + np.diff(tab).take(cell) * (pos - cell))
            nn = corr_cache[corr]
        # t = a + b*nn + c*sqrt(nn), in place (no temporaries of the point count)
        np.multiply(gather(b), nn, out=t)
        t += gather(cand.a[i])
        if (c != 0).any():
            if corr is None:
                if sqrt_n is None:
                    sqrt_n = np.sqrt(n)
                sq = sqrt_n
            else:
                sq = np.sqrt(nn)
            x = gather(c)
            x *= sq
            t += x
        if cand.floor[i] is not None:
            np.maximum(t, gather(cand.floor[i]), out=t)
        if t_best is None:
            t_best = t.copy()
            best.fill(i)
            continue
        # running argmin; a masked assignment is slow on random masks, arithmetic is not
        np.less(t, t_best, out=better)
        np.minimum(t_best, t, out=t_best)
        np.subtract(i, best, out=step)
        step *= better
        best += step
    t = t_best
    if not np.isfinite(t).all():
        best[np.isinf(t)] = 0  # no valid pair: report the first candidate, as an argmin would
    flat = best * n_shapes + inv  # index into the (candidate, shape) coefficient tables
    hbc, netc, sfc = (np.stack(x).reshape(-1).take(flat) for x in (cand.hb, cand.net, cand.spine_fraction))
    algo = np.asarray(cand.algo).take(best)
    proto = np.asarray(cand.proto).take(best)
    hbc *= n
    netc *= n
    rb, sb = netc * (1.0 - sfc), netc * sfc
    if single.any():
        t[single] = 0.0
        algo[single] = ALGORITHMS.index("none")
        proto[single] = _SIMPLE
        hbc[single] = rb[single] = sb[single] = 0.0
    r = lambda x: x.reshape(shape)
    return CollectiveEstimates(time_s=r(t), algorithm_index=r(algo), protocol_index=r(proto), hb_bytes=r(hbc),
                               rail_bytes=r(rb), spine_bytes=r(sb))


def moe_dispatch_estimate_vec(token_bytes, rank_copies, distinct_domains, size, ranks_per_domain, domain_span,
                              system: ClusterSystem, calib: CollectiveCalibration, *,
                              concurrency=1.0, cuda_graphs: bool = False) -> CollectiveEstimates:
    """MoE dispatch (or combine, the same traffic reversed) with per-domain deduplication and
    forwarding inside the domain, as DeepEP's normal kernels and HybridEP do.

    Each rank holds `token_bytes` of tokens (one copy of each; FP8 dispatch makes it smaller) and
    sends each token once to every distinct destination domain among its top-k experts
    (`distinct_domains`, D, node-limited routing included): over RDMA to the GPU of the same local
    index there, so the scale-out traffic stays on the rail; that GPU forwards the token over the HB
    fabric once to each other GPU there holding any of its experts. A token reaches R distinct
    ranks (`rank_copies`, routing_reach: fewer than top-k where a rank holds several of its experts;
    DeepEP's intranode and internode kernels send one copy per destination rank, the receiver
    permutes it to its experts). Per rank:

        RDMA bytes   = token_bytes · D · (N − 1)/N     (N domains; the own domain's share stays)
        HB bytes     = token_bytes · R · (g − 1)/g     (R copies, the one to the forwarder itself free)
        t = latency + max(RDMA bytes / B_rail, HB bytes / B_hb)

    the two phases pipelined through the kernels' channels (DeepEP's RDMA senders and NVLink
    forwarders run concurrently on their own SMs). Inside a domain the copies reach
    calib.moe_dispatch_hb_efficiency of the HB line rate. Across domains the forwarders are a share
    of a few tens of SMs (DeepEP's internode kernel gives half its SMs to forwarding, Hybrid-EP 16),
    so the HB phase moves its copies at no more than the generation's forwarder rate
    (calib.moe_forwarder_bytes_per_s): below an 18-link NVLink's rate on Hopper and Blackwell, above
    H800's 8 links. All arrays broadcast."""
    tb = np.asarray(token_bytes, float)
    r = np.asarray(rank_copies, float)
    p, g, span = (np.asarray(x, float) for x in (size, ranks_per_domain, domain_span))
    shape = np.broadcast_shapes(tb.shape, r.shape, np.shape(distinct_domains), p.shape, g.shape, span.shape)
    n_dom = domains_crossed(p, g, span)
    d = np.minimum(np.asarray(distinct_domains, float), n_dom)
    span = np.maximum(span, n_dom)
    conc = np.asarray(concurrency, float)
    c = calib
    rail = _scaleout_path(system, c, n_dom, span, conc, cross=False, a2a=True,
                          nic_bw=system.nic_bandwidth_per_gpu_bytes_per_s)
    eta_hb = c.moe_dispatch_hb_efficiency or hb_link_efficiency(system, c)
    rdma = tb * d * (n_dom - 1) / n_dom
    hb_b = tb * r * (g - 1) / g
    multi = n_dom > 1
    with np.errstate(divide="ignore", invalid="ignore"):
        t_rdma = np.where(multi, rdma / np.where(rail.exists, rail.bw, 0.0), 0.0)
        # the R copies spread over the domain as an all-to-all among its g members
        t_hb = tb * r * _hb_alltoall_inverse_bw(system, g) / eta_hb
    fwd = calib.moe_forwarder_bytes_per_s.get(system.gpu.architecture)
    if fwd:
        t_hb = np.where(multi, np.maximum(t_hb, hb_b / fwd), t_hb)
    return _dispatch_estimates(system, c, rail, multi, np.maximum(t_rdma, np.where(g > 1, t_hb, 0.0)), rdma, hb_b, p,
                               shape, "dedup_dispatch", floor_adds=False, cuda_graphs=cuda_graphs)


def _dispatch_estimates(system: ClusterSystem, c: CollectiveCalibration, path: _Path, multi, data_s, rdma, hb_b, p,
                        shape, algorithm: str, *, floor_adds: bool, cuda_graphs: bool) -> CollectiveEstimates:
    """A dispatch kernel's estimate from its data time: NCCL's NVLink hop, its NET hop where the group
    spans domains (no time where the path does not exist), the host floor as a bound or (floor_adds)
    added; bytes split between the rail and the tier above it."""
    hop_hb = max(system.hb.latency_s, c.hop_latency_s["ring"].hb[_SIMPLE])
    hop_net = net_hop_s(c, c.hop_latency_s["ring"].net[_SIMPLE], path.latency_s, _SIMPLE)
    t = hop_hb + np.where(multi, hop_net, 0.0) + data_s
    floor = host_floor_s(system, c, cuda_graphs)
    t = t + floor if floor_adds else np.maximum(t, floor)
    t = np.where(multi & ~path.exists, np.inf, t)
    single = p <= 1
    t = np.where(single, 0.0, t)
    z = np.zeros(shape)
    rb = np.where(single, 0.0, rdma * (1.0 - path.spine_fraction)) + z
    sb = np.where(single, 0.0, rdma * path.spine_fraction) + z
    return CollectiveEstimates(time_s=t + z, algorithm_index=np.full(shape, ALGORITHMS.index(algorithm)),
                               protocol_index=np.full(shape, _SIMPLE), hb_bytes=np.where(single, 0.0, hb_b) + z,
                               rail_bytes=rb, spine_bytes=sb)


# FP8 dispatch: one byte per element and an fp32 scale per 128 (DeepEP, DeepSeek-V3 §3.3.2), over BF16
FP8_DISPATCH_BYTES_PER_ELEMENT = 1.0 + 4.0 / 128


def low_latency_copy_bytes(hidden: int, fp8: bool) -> float:
    """One (token, expert) copy of the low-latency kernels, as DeepEP's tests/test_low_latency.py
    counts it: hidden + hidden/128 * 4 + 16 bytes in FP8 (values, an fp32 scale per 128, a header),
    2 * hidden in BF16."""
    return hidden * FP8_DISPATCH_BYTES_PER_ELEMENT + 16.0 if fp8 else 2.0 * hidden


def moe_per_expert_dispatch_estimate_vec(copy_bytes, copies, size, ranks_per_domain, domain_span,
                                        system: ClusterSystem, calib: CollectiveCalibration, *,
                                        concurrency=1.0, cuda_graphs: bool = False,
                                        same_rail=False) -> CollectiveEstimates:
    """MoE dispatch (or combine) with one copy per (token, expert) pair and no deduplication, as the
    low-latency kernels send it (DeepEP's low_latency_dispatch / low_latency_combine, pplx-garden's
    all-to-all, UCCL-EP's low-latency mode).

    Each rank sends `copies` copies of `copy_bytes` (a token's hidden vector with its scales and
    header, low_latency_copy_bytes), spread evenly over the p ranks' experts. The copies for the
    g - 1 other ranks of its own domain go over the HB fabric; those for the p - g ranks of other
    domains go straight over RDMA to the rank that holds the expert, whatever its local index, so
    they leave the rail (no NVLink forwarding: a rail-only network without a cross-rail tier cannot
    carry them), unless every member shares the sender's local index (`same_rail`: one rank per
    domain, all on one rail), where they stay on it. Per rank:

        HB bytes   = copy_bytes · copies · (g − 1)/p
        RDMA bytes = copy_bytes · copies · (p − g)/p
        t = host floor + latency + max(RDMA bytes / B_cross, HB bytes / B_hb)

    The two phases overlap (the NVLink copies are stored while the RDMA writes are in flight).
    Unlike the millisecond-long deduplicated kernels, whose floor only bounds
    them, a low-latency call of a few megabytes carries a fixed part of the size of one call's host
    side: it returns only when every peer's copies and arrival counts have landed (DeepEP's
    kernels count arrivals per expert), so it waits on the last peer's launch. One host floor
    (calibration host_floor_s, the fastest a call of a few bytes completes on the GPU generation)
    stands for it; it is not fitted. All arrays broadcast."""
    cb = np.asarray(copy_bytes, float)
    k = np.asarray(copies, float)
    p, g, span = (np.asarray(x, float) for x in (size, ranks_per_domain, domain_span))
    shape = np.broadcast_shapes(cb.shape, k.shape, p.shape, g.shape, span.shape)
    g = np.minimum(g, p)
    n_dom = domains_crossed(p, np.maximum(g, 1.0), span)
    span = np.maximum(span, n_dom)
    c = calib
    conc = np.asarray(concurrency, float)
    cross = _scaleout_path(system, c, n_dom, span, conc, cross=True, a2a=True,
                           nic_bw=system.nic_bandwidth_per_gpu_bytes_per_s)
    on_rail = np.broadcast_to(np.asarray(same_rail, bool), shape) & (g <= 1)
    if np.any(on_rail):
        rail = _scaleout_path(system, c, n_dom, span, conc, cross=False, a2a=True,
                              nic_bw=system.nic_bandwidth_per_gpu_bytes_per_s)
        cross = _Path(**{f: np.where(on_rail, getattr(rail, f), getattr(cross, f)) for f in _Path.__dataclass_fields__})
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(p > 0, 1.0 / p, 0.0)
    hb_b = cb * k * (g - 1) * share
    rdma = cb * k * (p - g) * share
    multi = n_dom > 1
    eta_hb = hb_link_efficiency(system, c)
    with np.errstate(divide="ignore", invalid="ignore"):
        t_rdma = np.where(multi, rdma / np.where(cross.exists, cross.bw, 1.0), 0.0)
        # the HB copies reach g - 1 peers, each at the share of the domain's all-to-all bandwidth
        t_hb = np.where(g > 1, hb_b * g / np.maximum(g - 1, 1.0) * _hb_alltoall_inverse_bw(system, g) / eta_hb, 0.0)
    return _dispatch_estimates(system, c, cross, multi, np.maximum(t_rdma, t_hb), rdma, hb_b, p, shape,
                               "per_expert_dispatch", floor_adds=True, cuda_graphs=cuda_graphs)


def none_drawn(pool: float, marked, draws: int):
    """Chance that `draws` experts drawn without replacement from `pool` miss all `marked` of them:
    Π_i (pool − marked − i)/(pool − i) (hypergeometric), elementwise over `marked`."""
    none = np.ones_like(np.asarray(marked, float))
    for i in range(draws):
        none = none * np.maximum(pool - marked - i, 0.0) / (pool - i)
    return none


def expected_distinct_domains(experts: int, top_k: int, domains, max_domains: int | None = None) -> np.ndarray:
    """Expected distinct domains among a token's top-k experts, E experts spread evenly over n
    domains, uniform routing: n·(1 − Π_i (E − E/n − i)/(E − i)); capped by node-limited routing."""
    n = np.maximum(np.asarray(domains, float), 1.0)
    E = float(experts)
    distinct = n * (1.0 - none_drawn(E, E / n, top_k))
    if max_domains:
        distinct = np.minimum(distinct, max_domains)
    return distinct


def round_robin_reach(experts: int, top_k: int, domains: int, ranks_per_domain: int) -> tuple[float, float]:
    """(distinct domains, distinct ranks) a token reaches, averaged over tokens, when the router gives
    token t the top_k consecutive experts from (t * top_k) mod E (NeMo AutoModel's FakeBalancedGate:
    indices = arange(T * k).view(-1, k) % E) and each EP rank holds a contiguous block of E / (n g)
    experts, the ranks of a domain consecutive (Megatron-Core and AutoModel place local experts so)."""
    n, g, E, k = max(int(domains), 1), max(int(ranks_per_domain), 1), int(experts), int(top_k)
    per_rank = E / (n * g)
    starts = (np.arange(E // np.gcd(E, k)) * k) % E
    idx = (starts[:, None] + np.arange(k)[None, :]) % E
    ranks = np.floor(idx / per_rank).astype(np.int64)
    doms = ranks // g
    n_ranks = np.array([len(set(r)) for r in ranks.tolist()], float)
    n_doms = np.array([len(set(d)) for d in doms.tolist()], float)
    return float(n_doms.mean()), float(n_ranks.mean())


def expected_distinct_ranks(experts: int, top_k: int, domains: int, ranks_per_domain: int,
                            max_domains: int | None = None) -> float:
    """Expected distinct ranks among a token's top-k experts, E experts spread evenly over the n·g
    ranks of n domains, uniform routing (expected_distinct_domains over the ranks). Under node-limited
    routing that would reach more than M domains (DeepSeek-V3's device-limited routing: the top M
    nodes first, then the top-k experts among theirs), the k experts are drawn from the M domains'
    E·M/n experts on their M·g ranks (M raised to the fewest domains that hold k experts, as the
    router must reach that many)."""
    n, g = max(float(domains), 1.0), max(float(ranks_per_domain), 1.0)
    if max_domains and float(expected_distinct_domains(experts, top_k, n)) > max_domains:
        m = min(n, max(float(max_domains), float(np.ceil(top_k * n / experts - 1e-9))))
        return float(expected_distinct_domains(experts * m / n, top_k, m * g))
    return float(expected_distinct_domains(experts, top_k, n * g))


def _miss_in_group(group_experts: float, overlap: float, draws: float) -> float:
    """Chance that none of `draws` experts drawn from a group of `group_experts` lands among `overlap`
    of them (none_drawn), linear between the neighbouring whole counts where the draws per group are
    not whole."""
    lo = math.floor(draws)
    below = float(none_drawn(group_experts, overlap, lo))
    return below if draws == lo else below + (draws - lo) * (float(none_drawn(group_experts, overlap, lo + 1)) - below)


@functools.lru_cache(maxsize=256)
def group_limited_units_reached(experts: int, top_k: int, groups: int, group_topk: int, units: int) -> float:
    """Expected distinct units (EP ranks, or HB domains) a token's top-k experts reach under
    group-limited routing, the E experts laid out contiguously over the units (Megatron-Core's
    expert ranks hold consecutive experts) and split into `groups` equal contiguous groups.

    Megatron-Core's group_limited_topk (moe_utils.py): each token scores every group by the sum of its
    top (k / group_topk) experts, keeps the best `group_topk` groups and takes its top-k experts
    among theirs. Priced with the groups drawn uniformly and k / group_topk experts drawn uniformly
    inside each chosen group (what the group score selects for); a unit is missed where every chosen
    group it overlaps misses it: 1 − E_S[Π_{j∈S} miss_j], the mean over the C(G, g) choices S
    being Σ_c e_c(miss of the unit's Q groups) · C(G − Q, g − c) / C(G, g), e_c the elementary
    symmetric polynomials. tests/perf/test_moe_dispatch.py checks it against a simulation of
    Megatron's routing on random scores: the real split of the k experts over the kept groups varies
    from token to token, which reaches fewer units than an even split, so this reads 0-6 % high
    (+1.5 % on DeepSeek-V3's 64 ranks of 8 nodes, +6 % on 16 nodes where a group spans two)."""
    E, G, g = float(experts), int(groups), int(group_topk)
    s, draws = E / G, top_k / g
    unit = E / units
    log_all = math.lgamma(G + 1) - math.lgamma(g + 1) - math.lgamma(G - g + 1)
    reached, memo = 0.0, {}
    for u in range(units):
        a, b = u * unit, (u + 1) * unit
        first, last = int(a // s), min(int(math.ceil(b / s)), G)
        misses = tuple(_miss_in_group(s, min(b, (j + 1) * s) - max(a, j * s), draws)
                       for j in range(first, last) if min(b, (j + 1) * s) > max(a, j * s))
        if misses not in memo:
            e = np.array([1.0])
            for m in misses:
                e = np.convolve(e, [1.0, m])
            q = len(misses)
            none = sum(e[c] * math.exp(math.lgamma(G - q + 1) - math.lgamma(g - c + 1) - math.lgamma(G - q - g + c + 1)
                                       - log_all)
                       for c in range(min(g, q) + 1) if g - c <= G - q)
            memo[misses] = 1.0 - none
        reached += memo[misses]
    return min(reached, float(top_k), float(units))


def routing_reach(experts: int, top_k: int, domains, ranks_per_domain, max_domains: int | None = None,
                  routing: str = "uniform", groups: tuple[int, int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """What a deduplicating dispatcher moves per token: (distinct destination domains D, distinct
    destination ranks R).

    DeepEP and Hybrid-EP send a token once per destination domain and forward it there once per
    destination rank (the receiving rank permutes it to its experts), so R copies cross the HB fabric
    where a plain all-to-all sends top-k. Uniform routing (a learned router, or Megatron's forced
    balance, which draws random logits): expected_distinct_domains and expected_distinct_ranks, or,
    for a model whose router is group-limited (`groups` = (groups, groups kept per token), MoESpec.
    router_groups), group_limited_units_reached. round_robin (a synthetic balanced gate giving each
    token k consecutive experts, NeMo AutoModel's FakeBalancedGate, which ignores groups):
    round_robin_reach, its consecutive experts sharing ranks."""
    n = np.maximum(np.asarray(domains, float), 1.0)
    g = np.maximum(np.asarray(ranks_per_domain, float), 1.0)
    shape = np.broadcast_shapes(n.shape, g.shape)
    n, g = np.broadcast_to(n, shape), np.broadcast_to(g, shape)
    if routing not in ("uniform", "round_robin"):
        raise ValueError(f"moe_routing = {routing!r}: allowed uniform, round_robin")
    if groups is not None and max_domains is not None:
        raise ValueError(f"max_domains {max_domains} and groups {groups}: at most one is allowed")
    d_out, c_out = np.empty(shape), np.empty(shape)
    for nn, gg in set(zip(n.ravel().tolist(), g.ravel().tolist())):
        where = (n == nn) & (g == gg)
        if routing == "uniform" and groups is not None and groups[0] > 1:
            # a token confined to its kept groups reaches no more than an unconfined one: the even split
            # of group_limited_units_reached reads high where the limit binds little (every group kept,
            # or one expert per kept group), so it is capped by the unconfined reach
            d_out[where] = min(group_limited_units_reached(experts, top_k, *groups, round(nn)),
                               float(expected_distinct_domains(experts, top_k, round(nn))))
            c_out[where] = min(group_limited_units_reached(experts, top_k, *groups, round(nn * gg)),
                               float(expected_distinct_ranks(experts, top_k, round(nn), gg)))
        elif routing == "uniform":
            d_out[where] = float(expected_distinct_domains(experts, top_k, nn, max_domains))
            c_out[where] = expected_distinct_ranks(experts, top_k, nn, gg, max_domains)
        else:
            d_out[where], c_out[where] = round_robin_reach(experts, top_k, int(nn), int(gg))
    return d_out, c_out


def collective_time_s_vec(op: str, nbytes, size, ranks_per_domain, domain_span, same_rail, system: ClusterSystem,
                          calib: CollectiveCalibration, *, concurrency=1.0, algorithms: tuple[str, ...] | None = None,
                          protocols: tuple[str, ...] | None = None) -> np.ndarray:
    """Time in seconds of `op` for every broadcast combination of the array arguments."""
    return collective_estimate_vec(op, nbytes, size, ranks_per_domain, domain_span, same_rail, system, calib,
                                   concurrency=concurrency, algorithms=algorithms, protocols=protocols).time_s


def collective_estimate(op: str, nbytes: float, shape: GroupShape, system: ClusterSystem, calib: CollectiveCalibration,
                        *, concurrency: float = 1.0, algorithms: tuple[str, ...] | None = None,
                        protocols: tuple[str, ...] | None = None) -> CollectiveEstimate:
    """Scalar estimate with the chosen algorithm/protocol and the bytes per GPU on each level."""
    if shape.domain_span > max(system.n_domains, 1) or shape.ranks_per_domain > system.hb.size:
        raise ValueError(f"group {shape} does not fit the system ({system.n_domains} domains of {system.hb.size})")
    e = collective_estimate_vec(op, nbytes, shape.size, shape.ranks_per_domain, shape.domain_span, shape.same_rail,
                                system, calib, concurrency=concurrency, algorithms=algorithms, protocols=protocols)
    return CollectiveEstimate(time_s=float(e.time_s), algorithm=e.algorithm(), protocol=e.protocol(),
                              hb_bytes=float(e.hb_bytes), rail_bytes=float(e.rail_bytes), spine_bytes=float(e.spine_bytes))


def collective_time_s(op: str, nbytes: float, shape: GroupShape, system: ClusterSystem, calib: CollectiveCalibration,
                      *, concurrency: float = 1.0) -> float:
    """Time in seconds of one collective of `nbytes` on the group `shape`."""
    return collective_estimate(op, nbytes, shape, system, calib, concurrency=concurrency).time_s


def bus_bandwidth_factor(op: str, size) -> np.ndarray:
    """nccl-tests busbw = algbw x this factor (§4.5)."""
    p = np.asarray(size, dtype=float)
    if op == "all_reduce":
        return 2.0 * (p - 1) / p
    if op in ("reduce_scatter", "all_gather", "all_to_all", "gather", "scatter"):
        return (p - 1) / p
    return np.ones_like(p)


def peers_per_rank(algorithm_index, size, ranks_per_domain, system: ClusterSystem) -> np.ndarray:
    """Other ranks of the group one rank exchanges data with (sends to or receives from) under the
    algorithm `algorithm_index` (indices into ALGORITHMS, e.g. CollectiveEstimates.algorithm_index),
    for groups of p = `size` ranks with g = `ranks_per_domain` per HB domain (N = p/g domains):

    * ring: its two ring neighbours; hierarchical: its ring neighbours inside the domain and on its
      rail (both phases are rings);
    * tree (NCCL double binary tree): its chain neighbours inside the domain and, across domains, the
      parents and children in the two trees (at most 4);
    * nvls: every member of the domain (the NVSwitch reduces and multicasts among all of them);
      nvls_tree: that plus the tree peers; collnet: the domain plus the same-rank GPUs of every other
      domain (SHARP combines their data);
    * torus: the ring neighbours along each dimension of the group's sub-block;
    * recursive doubling / halving, Rabenseifner: ceil(lg p) partners (one more to fold a non-power
      of two); Bruck: 2 ceil(lg p) (sends to +2^k, receives from -2^k); binomial: ceil(lg p);
      scatter-allgather: ceil(lg p) + 2;
    * pairwise all-to-all: every other member; two_phase (PXN / rail-only forwarding): the domain's
      members and the same-rank GPUs of the other domains (railonly.md §4's hierarchical pattern);
    * p2p: the one peer; direct (gather / scatter): every other member, the root's count; pat:
      ceil(lg p) (its aggregated trees); dedup_dispatch: the domain's members and the same-rank GPUs
      of the other domains; per_expert_dispatch: every other member; none: 0.
    Always at most p - 1."""
    a = np.asarray(algorithm_index)
    p = np.asarray(size, dtype=float)
    g = np.asarray(ranks_per_domain, dtype=float)
    a, p, g = np.broadcast_arrays(a, p, g)
    n_dom = np.maximum(np.floor(p / np.maximum(g, 1.0) + 1e-9), 1.0)
    lg = _ceil_lg(p)
    intra_ring = np.minimum(g - 1, 2.0)
    tree_x = np.where(n_dom > 1, np.minimum(n_dom - 1, 4.0), 0.0)
    out = np.zeros(p.shape)

    def put(name, value):
        mask = a == ALGORITHMS.index(name)
        if mask.any():
            out[mask] = np.broadcast_to(value, p.shape)[mask]

    put("ring", np.minimum(p - 1, 2.0))
    put("tree", intra_ring + tree_x)
    put("nvls", g - 1)
    put("nvls_tree", g - 1 + tree_x)
    put("collnet", g - 1 + n_dom - 1)
    put("hierarchical", intra_ring + np.minimum(n_dom - 1, 2.0))
    if (a == ALGORITHMS.index("torus")).any() or (a == ALGORITHMS.index("bucket")).any():
        dims = _hb_dims(system) or (system.hb.size,)
        put("torus", sum(np.minimum(e - 1, 2.0) for e in _extents(g, dims)))
        put("bucket", sum(np.minimum(e - 1, 2.0) for e in _extents(g, dims)))
    fold = np.where(_is_pow2(p), 0.0, 1.0)
    for name in ("recursive_doubling", "recursive_halving", "rabenseifner"):
        put(name, lg + fold)
    put("bruck", 2.0 * lg)
    put("binomial", lg)
    put("scatter_allgather", lg + 2.0)
    put("pairwise", p - 1)
    put("two_phase", (g - 1) + (n_dom - 1))
    put("p2p", np.ones(p.shape))
    put("direct", p - 1)
    put("pat", lg)
    put("dedup_dispatch", (g - 1) + (n_dom - 1))
    put("per_expert_dispatch", p - 1)
    return np.clip(out, 0.0, np.maximum(p - 1, 0.0))
