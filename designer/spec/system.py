"""The plain description of a cluster that the performance model consumes.

`perf` never imports `network`: `evaluate` turns a NetworkDesign into a ClusterSystem.
All bandwidths are per GPU, per direction, in bytes per second; latencies in seconds.
"""

from __future__ import annotations

from enum import Enum

from pydantic import Field, model_validator

from designer.spec.base import Record


class HBTopology(str, Enum):
    """How the GPUs of one HB (scale-up) domain are joined."""

    switched = "switched"  # NVSwitch crossbar: any-to-any at full per-GPU bandwidth
    ring = "ring"  # bidirectional ring
    torus2d = "torus2d"  # TPU-style 2-D torus, dims in torus_dims
    torus3d = "torus3d"


class HBDomain(Record):
    size: int = Field(ge=1, description="GPUs in one HB domain (K)")
    bandwidth_per_gpu_bytes_per_s: float = Field(gt=0, description="per direction, per GPU")
    topology: HBTopology = HBTopology.switched
    torus_dims: tuple[int, ...] | None = None
    latency_s: float = Field(default=1e-6, ge=0)
    in_network_reduction: bool = False  # NVLS-capable switches

    @model_validator(mode="after")
    def _dims_match(self) -> "HBDomain":
        if self.topology in (HBTopology.torus2d, HBTopology.torus3d):
            want = 2 if self.topology == HBTopology.torus2d else 3
            if self.torus_dims is None or len(self.torus_dims) != want:
                raise ValueError(f"torus_dims must have {want} entries for topology {self.topology.value}")
            prod = 1
            for d in self.torus_dims:
                prod *= d
            if prod != self.size:
                raise ValueError(f"torus_dims {self.torus_dims} multiply to {prod}, not the HB size {self.size}")
        return self


class NetworkTier(Record):
    """One tier of the scale-out network, lowest first.

    Traffic between two GPUs climbs to the lowest tier that connects them. A tier connects the
    GPUs of `span_domains` HB domains; if `cross_rail` is false it connects only GPUs of the same
    local rank (a rail), so GPUs of different ranks must forward through the HB domain.
    """

    name: str
    span_domains: int = Field(ge=1)
    cross_rail: bool
    bandwidth_per_gpu_bytes_per_s: float = Field(gt=0, description="capacity per GPU for traffic reaching this tier")
    latency_s: float = Field(default=2e-6, ge=0)
    oversubscription: float = Field(default=1.0, ge=1.0)
    in_network_reduction: bool = False  # SHARP-capable switches at this tier


class GpuPerf(Record):
    """What the performance model needs of a GPU."""

    name: str
    architecture: str = Field(default="hopper", description="ampere | hopper | blackwell: selects NCCL's per-generation tuning constants")
    peak_flops: dict[str, float]  # by precision: "bf16", "fp16", "fp8", "mxfp8", "nvfp4" -> dense FLOP/s
    hbm_bytes: float = Field(gt=0)
    hbm_bandwidth_bytes_per_s: float = Field(gt=0)
    host_memory_bytes: float = Field(default=0.0, ge=0, description="host memory per GPU available to offload")
    host_link_bytes_per_s: float = Field(default=0.0, ge=0, description="GPU<->host, per direction")
    host_memory_bandwidth_bytes_per_s: float = Field(default=0.0, ge=0, description="host memory bandwidth per GPU")


class ClusterSystem(Record):
    gpu: GpuPerf
    n_gpus: int = Field(ge=1)
    hb: HBDomain
    nic_bandwidth_per_gpu_bytes_per_s: float = Field(gt=0, description="sum over the GPU's NICs, per direction")
    nics_per_gpu: int = Field(default=1, ge=1)
    tiers: tuple[NetworkTier, ...] = ()
    family: str = "rail-optimized"

    @property
    def n_domains(self) -> int:
        return self.n_gpus // self.hb.size

    @property
    def rail_only(self) -> bool:
        return not any(t.cross_rail for t in self.tiers)

    @model_validator(mode="after")
    def _check(self) -> "ClusterSystem":
        if self.n_gpus % self.hb.size:
            raise ValueError(f"n_gpus {self.n_gpus} is not a multiple of the HB domain size {self.hb.size}")
        if self.tiers and self.tiers[-1].span_domains < self.n_domains:
            raise ValueError(
                f"top tier {self.tiers[-1].name} spans {self.tiers[-1].span_domains} domains, fewer than {self.n_domains}"
            )
        return self
