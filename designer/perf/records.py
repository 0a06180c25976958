"""Result records of the performance model: `Metrics` for a feasible evaluation, `Infeasible` otherwise.

Both are frozen dataclasses (plain data, no validation needed: the model builds them) with a flat
`row()` whose keys carry their units, ready for CSV/Parquet export.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields

import numpy as np

from designer.spec.llm import UNFUSED_OP_ORDER

Scalar = float | int | str | bool


@dataclass(frozen=True)
class Breakdown:
    """Where one iteration's time goes, in seconds on the critical path of the slowest pipeline stage.

    compute_s is pure computation (GEMMs, attention, memory-bound kernels, optimizer step). The
    *_s communication entries are the full duration of each parallel dimension's traffic; the
    exposed part of all of them together is exposed_comm_s, the hidden part overlapped_comm_s.
    bubble_s is pipeline idle time. host_s is the GPU's wait on the host: the framework's work per
    iteration, kernel launches a host-bound stage cannot keep ahead of, and an MoE layer's
    per-expert launches after its token counts reach the host (a host-bound stage's wait during the
    pipeline's fill and drain stays in bubble_s). iteration = compute + exposed_comm + bubble + host.
    """

    compute_s: float
    tp_s: float
    cp_s: float
    pp_s: float
    dp_s: float
    ep_s: float
    bubble_s: float
    exposed_comm_s: float
    overlapped_comm_s: float
    host_s: float


@dataclass(frozen=True)
class TierBytes:
    """Bytes per GPU per iteration that each level of the fabric carries (sent, one direction).

    hb: inside HB domains (NVLink). rail: scale-out traffic that stays on one rail / leaf.
    spine: scale-out traffic that climbs above the rails (cross-rail tiers)."""

    hb_bytes: float
    rail_bytes: float
    spine_bytes: float


@dataclass(frozen=True)
class TypeBytes:
    """Bytes per GPU per iteration (sent, one direction) by traffic type and fabric level; summed over
    the types they equal TierBytes.

    tp: tensor-parallel collectives. cp: context-parallel K/V all-gathers and gradient
    reduce-scatters. pp: pipeline stage-boundary send/recv plus the NVLink all-gather of the 1/t
    shards (Megatron's scatter/gather). dp: data-parallel gradient reduction and ZeRO parameter
    gathers, dense and expert parameters. ep: MoE dispatch/combine all-to-all. Levels as TierBytes."""

    tp_hb_bytes: float
    tp_rail_bytes: float
    tp_spine_bytes: float
    cp_hb_bytes: float
    cp_rail_bytes: float
    cp_spine_bytes: float
    pp_hb_bytes: float
    pp_rail_bytes: float
    pp_spine_bytes: float
    dp_hb_bytes: float
    dp_rail_bytes: float
    dp_spine_bytes: float
    ep_hb_bytes: float
    ep_rail_bytes: float
    ep_spine_bytes: float

    TYPES = ("tp", "cp", "pp", "dp", "ep")
    LEVELS = ("hb", "rail", "spine")

    def total_bytes(self, kind: str) -> float:
        """All levels together for one type ("tp", "cp", "pp", "dp" or "ep")."""
        return sum(getattr(self, f"{kind}_{lv}_bytes") for lv in self.LEVELS)


@dataclass(frozen=True)
class TrafficSummary:
    """Sparsity of the job's traffic matrix (Rail-only paper §4, railonly.md §4).

    Two pair counts, each a fraction of the N(N-1) ordered GPU pairs (idle pairs = 1 - fraction):
    * pair_fraction_algorithm: pairs that exchange data under the algorithms the collectives model
      chose -- a ring pairs a GPU with its two ring neighbours, a tree with its parent and children,
      a pairwise all-to-all with every member, a two-phase (PXN / rail-only) all-to-all with its
      domain and its same-rank GPUs elsewhere (see collectives.peers_per_rank); per-GPU peers are
      summed over the parallel groups;
    * pair_fraction_flat: pairs that share any parallel group (every member of the TP, CP, DP and EP
      groups, and the pipeline neighbours) -- as if each collective connected all its members."""

    pair_fraction_algorithm: float
    pair_fraction_flat: float
    hb_share: float  # share of all bytes that stay inside HB domains
    rail_share: float  # share on rails (same local rank across domains)
    spine_share: float  # share that needs a cross-rail tier (or HB forwarding on rail-only)


@dataclass(frozen=True)
class MemoryBreakdown:
    """HBM per GPU in bytes, on the rank that holds the most (a pipeline stage, or under DualPipe
    the pair of stages a rank runs)."""

    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    other_bytes: float

    @property
    def total_bytes(self) -> float:
        return self.weights_bytes + self.gradients_bytes + self.optimizer_bytes + self.activations_bytes + self.other_bytes


@dataclass(frozen=True)
class Metrics:
    iteration_time_s: float
    time_to_train_s: float
    tokens_per_s: float
    mfu: float  # model FLOPs, non-causal attention, no recompute / (time x GPUs x peak)
    hfu: float  # hardware FLOPs (executed: causal skipping, recompute) / (time x GPUs x peak)
    model_flops_per_iteration: float  # non-causal convention (Megatron <= 2024, NeMo <= 25.07, PaLM, MPT)
    hardware_flops_per_iteration: float
    n_gpus: int
    memory: MemoryBreakdown
    hbm_capacity_bytes: float
    breakdown: Breakdown
    tier_bytes: TierBytes
    binding_tier: str  # "compute", "hb", "rail", "spine" or "bubble": the largest non-compute term
    traffic: TrafficSummary
    type_bytes: TypeBytes
    model_flops_causal_per_iteration: float = 0.0  # causal convention (Megatron-Core 2025+, Megatron-Bridge)
    peak_flops_per_gpu: float = 0.0  # the dense peak MFU and HFU are relative to

    @property
    def memory_per_gpu_bytes(self) -> float:
        return self.memory.total_bytes

    @property
    def mfu_causal(self) -> float:
        return self.mfu * self.model_flops_causal_per_iteration / self.model_flops_per_iteration

    def tflops_per_gpu(self, convention: str = "noncausal") -> float:
        """Achieved TFLOP/s per GPU by a named convention: "noncausal" (full s² attention, no
        recompute), "causal" (half the s² term, no recompute) or "hardware" (what executed)."""
        flops = {"noncausal": self.model_flops_per_iteration, "causal": self.model_flops_causal_per_iteration,
                 "hardware": self.hardware_flops_per_iteration}[convention]
        return flops / (self.iteration_time_s * self.n_gpus) / 1e12

    @property
    def fits_in_memory(self) -> bool:
        return self.memory.total_bytes <= self.hbm_capacity_bytes

    def row(self) -> dict[str, Scalar]:
        out: dict[str, Scalar] = {
            "feasible": True,
            "kind": "",
            "reason": "",
            "iteration_time_s": self.iteration_time_s,
            "time_to_train_s": self.time_to_train_s,
            "time_to_train_days": self.time_to_train_s / 86400.0,
            "tokens_per_s": self.tokens_per_s,
            "mfu": self.mfu,
            "mfu_causal": self.mfu_causal,
            "hfu": self.hfu,
            "model_tflops_per_gpu_noncausal": self.tflops_per_gpu("noncausal"),
            "model_tflops_per_gpu_causal": self.tflops_per_gpu("causal"),
            "hardware_tflops_per_gpu": self.tflops_per_gpu("hardware"),
            "model_flops_per_iteration": self.model_flops_per_iteration,
            "hardware_flops_per_iteration": self.hardware_flops_per_iteration,
            "n_gpus": self.n_gpus,
            "memory_per_gpu_bytes": self.memory_per_gpu_bytes,
            "hbm_capacity_bytes": self.hbm_capacity_bytes,
            "fits_in_memory": self.fits_in_memory,
            "binding_tier": self.binding_tier,
        }
        for rec, prefix in ((self.memory, "memory_"), (self.breakdown, ""), (self.tier_bytes, "tier_"),
                            (self.traffic, "traffic_"), (self.type_bytes, "type_")):
            for f in fields(rec):
                out[prefix + f.name] = getattr(rec, f.name)
        return out


@dataclass(frozen=True)
class Infeasible:
    """A strategy that cannot run on the system. `reason` is one line; `kind` groups reasons:
    "divisibility", "memory", "size", "compatibility"."""

    reason: str
    kind: str
    memory_per_gpu_bytes: float | None = None
    # where the HBM goes, for a strategy that does not fit (None for the other kinds)
    memory: MemoryBreakdown | None = None
    hbm_capacity_bytes: float | None = None

    @property
    def fits_in_memory(self) -> bool:
        return self.kind != "memory"

    def row(self) -> dict[str, Scalar]:
        out: dict[str, Scalar] = {
            "feasible": False,
            "kind": self.kind,
            "reason": self.reason,
            "memory_per_gpu_bytes": float("nan") if self.memory_per_gpu_bytes is None else self.memory_per_gpu_bytes,
        }
        if self.memory is not None:
            out.update({f"memory_{f.name}": getattr(self.memory, f.name) for f in dataclasses.fields(self.memory)})
        if self.hbm_capacity_bytes is not None:
            out["hbm_capacity_bytes"] = self.hbm_capacity_bytes
        return out


_SCHEDULES = ("gpipe", "1f1b", "interleaved", "zero_bubble", "dualpipe")  # codes 0-4 (perf.memory.SCHEDULE_*)
_RECOMPUTES = ("none", "selective", "full")  # codes 0, 1, 2 (perf.memory.RECOMPUTE_*)
# bit of each selective-recompute module in StrategyArrays.rc_modules (perf.memory.RC_*)
RECOMPUTE_MODULE_BITS = ("core_attn", "layernorm", "mlp", "moe", "moe_act", "mla_up_proj", "attn_out_proj",
                      "alternate_matmuls")
_ATTENTION_KERNELS = ("flash", "flash2", "flash3", "cudnn", "unfused", "triton")  # codes 0-5
_RANK_ORDERS = ("tp-cp-dp-pp", "tp-cp-pp-dp")  # codes 0, 1
CP_COMMS = ("p2p", "all_gather", "a2a")  # codes 0-2 (Strategy.cp_comm)
# bit of each element-wise step run op by op in StrategyArrays.unfused (Strategy.unfused_ops)
UNFUSED_OPS = UNFUSED_OP_ORDER
UNFUSED_CLAMP, UNFUSED_EXPERT_BIAS, UNFUSED_ROPE = 1, 2, 4


def unfused_mask(ops) -> int:
    """Bitmask over UNFUSED_OPS of the element-wise steps a strategy runs op by op."""
    return sum(1 << UNFUSED_OPS.index(n) for n in set(ops))


def recompute_module_mask(modules) -> int:
    """Bitmask of selective-recompute modules; no modules means Megatron's default, core_attn."""
    names = [m.value if hasattr(m, "value") else str(m) for m in modules] or ["core_attn"]
    return sum(1 << RECOMPUTE_MODULE_BITS.index(n) for n in set(names))


def recompute_module_label(mask: int) -> str:
    """A selective-recompute bitmask as its modules joined by '+', in bit order (the tables' column and
    a sampler's categorical value): Megatron's default reads core_attn."""
    return "+".join(n for j, n in enumerate(RECOMPUTE_MODULE_BITS) if mask >> j & 1)


@dataclass(frozen=True)
class StrategyArrays:
    """Many `Strategy` records as numpy columns (one entry per strategy) for the vectorized model.

    schedule: 0 gpipe, 1 1f1b, 2 interleaved, 3 zero_bubble, 4 dualpipe; recompute: 0 none,
    1 selective, 2 full; rc_modules: bitmask of RECOMPUTE_MODULE_BITS (used when selective);
    etp: expert tensor parallelism, 0 = tp; kernel: index into _ATTENTION_KERNELS; order: index into _RANK_ORDERS; pp_first / pp_last: layers
    of the end stages, -1 for the even split; shard_group: HSDP shard group, 0 = the whole DP x CP
    group; bucket_bytes: 0 = the calibration default; offload_w / offload_act: weight offload and the
    activation-offloaded layers per stage; cp_comm: index into CP_COMMS; cp_lb: causal load balancing.
    Columns not given take the Strategy defaults."""

    tp: np.ndarray
    pp: np.ndarray
    dp: np.ndarray
    ep: np.ndarray
    cp: np.ndarray
    sp: np.ndarray
    mbs: np.ndarray
    schedule: np.ndarray
    v: np.ndarray
    zero: np.ndarray
    qwz: np.ndarray
    qgz: np.ndarray
    hpz: np.ndarray
    recompute: np.ndarray
    overlap_dp: np.ndarray
    overlap_tp: np.ndarray
    etp: np.ndarray = 0
    rc_modules: np.ndarray = 1
    kernel: np.ndarray = 0
    order: np.ndarray = 0
    pp_first: np.ndarray = -1
    pp_last: np.ndarray = -1
    reshard: np.ndarray = True
    shard_group: np.ndarray = 0
    bucket_bytes: np.ndarray = 0.0
    prefetch: np.ndarray = 1
    overlap_ep: np.ndarray = False
    offload_opt: np.ndarray = False
    dedup: np.ndarray = False
    ag_dispatch: np.ndarray = False
    graphs: np.ndarray = False
    offload_w: np.ndarray = False
    offload_act: np.ndarray = 0
    rc_layers: np.ndarray = 0  # full recompute of the first N layers of each chunk only; 0 = every layer
    cp_comm: np.ndarray = 0
    cp_lb: np.ndarray = True
    overlap_pp: np.ndarray = True  # interleaved schedule: p2p sends posted ahead, waited when needed
    pp_sg: np.ndarray = False  # pipeline sends of 1/tp slices all-gathered after (Strategy.pipeline_scatter_gather)
    batch: np.ndarray = 0  # the global batch in sequences; 0 = the training's target
    flushes: np.ndarray = 1  # pipeline schedules per iteration (Strategy.pipeline_flushes)
    grouped_gemm: np.ndarray = False  # the local experts' GEMMs in one grouped kernel (Strategy.expert_gemm)
    eager: np.ndarray = False  # element-wise ops run one PyTorch eager kernel each (Strategy.elementwise_kernels)
    qkv_separate: np.ndarray = False  # Q, K and V from three GEMMs (Strategy.qkv_projection)
    act_in_fp8: np.ndarray = False  # the MLP activation's saved input kept in fp8 (Strategy.activation_input_fp8)
    batch_first: np.ndarray = False  # activations laid out [b, s, h] (Strategy.activation_layout)
    ce_eager: np.ndarray = False  # the loss run op by op on upcast logits (Strategy.cross_entropy)
    replay_needed: np.ndarray = False  # recomputation reruns only what the backward reads (Strategy.recompute_replay)
    unfused: np.ndarray = 0  # bitmask over UNFUSED_OPS of the element-wise steps run op by op (Strategy.unfused_ops)

    _INT = ("tp", "pp", "dp", "ep", "cp", "mbs", "schedule", "v", "zero", "recompute", "etp", "rc_modules",
            "kernel", "order", "pp_first", "pp_last", "shard_group", "prefetch", "offload_act", "rc_layers", "cp_comm",
            "batch", "flushes", "unfused")
    _BOOL = ("sp", "qwz", "qgz", "hpz", "overlap_dp", "overlap_tp", "reshard", "overlap_ep", "offload_opt", "dedup",
             "ag_dispatch", "graphs", "offload_w", "cp_lb", "overlap_pp", "pp_sg", "grouped_gemm", "eager", "qkv_separate",
             "act_in_fp8", "batch_first", "ce_eager", "replay_needed")
    _FLOAT = ("bucket_bytes",)

    def __post_init__(self) -> None:
        def dtype(name):
            return np.int64 if name in self._INT else (float if name in self._FLOAT else bool)

        cols = {f.name: np.atleast_1d(np.asarray(getattr(self, f.name), dtype=dtype(f.name))) for f in fields(self)}
        shape = np.broadcast_shapes(*(c.shape for c in cols.values()))
        for name, col in cols.items():
            arr = np.array(np.broadcast_to(col, shape))
            arr.setflags(write=False)
            object.__setattr__(self, name, arr)

    def __len__(self) -> int:
        return int(self.tp.shape[0])

    def take(self, idx: np.ndarray) -> "StrategyArrays":
        """The rows `idx` (an index or boolean array) as a new StrategyArrays."""
        return type(self)(**{f.name: getattr(self, f.name)[idx] for f in fields(self)})

    @classmethod
    def from_strategies(cls, strategies) -> "StrategyArrays":
        ss = list(strategies)
        return cls(
            tp=[s.tp for s in ss], pp=[s.pp for s in ss], dp=[s.dp for s in ss], ep=[s.ep for s in ss],
            cp=[s.cp for s in ss], sp=[s.sequence_parallel for s in ss], mbs=[s.microbatch_size for s in ss],
            schedule=[_SCHEDULES.index(s.schedule.value) for s in ss], v=[s.virtual_stages for s in ss],
            zero=[s.zero_stage for s in ss], qwz=[s.zeropp_quantized_weights for s in ss],
            qgz=[s.zeropp_quantized_gradients for s in ss], hpz=[s.zeropp_hierarchical_partition for s in ss],
            recompute=[_RECOMPUTES.index(s.recompute.value) for s in ss],
            overlap_dp=[s.overlap_dp_comm for s in ss], overlap_tp=[s.overlap_tp_comm for s in ss],
            etp=[s.expert_tp or 0 for s in ss], rc_modules=[recompute_module_mask(s.recompute_modules) for s in ss],
            kernel=[_ATTENTION_KERNELS.index(s.attention_kernel.value) for s in ss],
            order=[_RANK_ORDERS.index(s.rank_order.value) for s in ss],
            pp_first=[-1 if s.pp_first_stage_layers is None else s.pp_first_stage_layers for s in ss],
            pp_last=[-1 if s.pp_last_stage_layers is None else s.pp_last_stage_layers for s in ss],
            reshard=[s.fsdp_reshard_after_forward for s in ss],
            shard_group=[s.shard_group_size or 0 for s in ss],
            bucket_bytes=[s.dp_bucket_bytes or 0.0 for s in ss], prefetch=[s.prefetch_layers for s in ss],
            overlap_ep=[s.overlap_ep_comm for s in ss], offload_opt=[s.offload_optimizer for s in ss],
            dedup=[s.moe_dispatcher == "deepep" for s in ss], ag_dispatch=[s.moe_dispatcher == "allgather" for s in ss],
            offload_w=[s.offload_weights for s in ss], graphs=[s.cuda_graphs for s in ss],
            offload_act=[s.offload_activation_layers for s in ss], rc_layers=[s.recompute_num_layers for s in ss],
            cp_comm=[CP_COMMS.index(s.cp_comm) for s in ss],
            cp_lb=[s.cp_load_balance for s in ss], overlap_pp=[s.overlap_pp_comm for s in ss],
            pp_sg=[s.pipeline_scatter_gather for s in ss],
            batch=[s.global_batch_sequences or 0 for s in ss], flushes=[s.pipeline_flushes for s in ss],
            grouped_gemm=[s.expert_gemm == "grouped" for s in ss],
            eager=[s.elementwise_kernels == "eager" for s in ss],
            qkv_separate=[s.qkv_projection == "separate" for s in ss],
            act_in_fp8=[s.activation_input_fp8 for s in ss],
            batch_first=[s.activation_layout == "batch_first" for s in ss],
            ce_eager=[s.cross_entropy == "eager" for s in ss],
            replay_needed=[s.recompute_replay == "needed" for s in ss],
            unfused=[unfused_mask(s.unfused_ops) for s in ss])

    def to_strategy(self, i: int):
        from designer.spec.llm import AttentionKernel, RankOrder, Recompute, RecomputeModule, Schedule, Strategy

        rc = Recompute(_RECOMPUTES[int(self.recompute[i])])
        mask = int(self.rc_modules[i])
        modules = tuple(RecomputeModule(n) for j, n in enumerate(RECOMPUTE_MODULE_BITS) if mask >> j & 1)
        if rc != Recompute.selective or modules == (RecomputeModule.core_attn,):
            modules = ()
        return Strategy(
            tp=int(self.tp[i]), pp=int(self.pp[i]), dp=int(self.dp[i]), ep=int(self.ep[i]), cp=int(self.cp[i]),
            expert_tp=int(self.etp[i]) or None,
            sequence_parallel=bool(self.sp[i]), microbatch_size=int(self.mbs[i]),
            schedule=Schedule(_SCHEDULES[int(self.schedule[i])]), virtual_stages=int(self.v[i]),
            pp_first_stage_layers=None if self.pp_first[i] < 0 else int(self.pp_first[i]),
            pp_last_stage_layers=None if self.pp_last[i] < 0 else int(self.pp_last[i]),
            zero_stage=int(self.zero[i]), fsdp_reshard_after_forward=bool(self.reshard[i]),
            shard_group_size=int(self.shard_group[i]) or None,
            dp_bucket_bytes=float(self.bucket_bytes[i]) or None, prefetch_layers=int(self.prefetch[i]),
            zeropp_quantized_weights=bool(self.qwz[i]),
            zeropp_quantized_gradients=bool(self.qgz[i]), zeropp_hierarchical_partition=bool(self.hpz[i]),
            recompute=rc, recompute_modules=modules,
            recompute_num_layers=int(self.rc_layers[i]) if rc == Recompute.full else 0,
            attention_kernel=AttentionKernel(_ATTENTION_KERNELS[int(self.kernel[i])]),
            rank_order=RankOrder(_RANK_ORDERS[int(self.order[i])]),
            overlap_dp_comm=bool(self.overlap_dp[i]), overlap_tp_comm=bool(self.overlap_tp[i]),
            overlap_ep_comm=bool(self.overlap_ep[i]), offload_optimizer=bool(self.offload_opt[i]),
            moe_dispatcher="deepep" if bool(self.dedup[i]) else ("allgather" if bool(self.ag_dispatch[i]) else "alltoall"),
            offload_weights=bool(self.offload_w[i]), cuda_graphs=bool(self.graphs[i]), offload_activation_layers=int(self.offload_act[i]),
            cp_comm=CP_COMMS[int(self.cp_comm[i])], cp_load_balance=bool(self.cp_lb[i]),
            overlap_pp_comm=bool(self.overlap_pp[i]), pipeline_scatter_gather=bool(self.pp_sg[i]),
            global_batch_sequences=int(self.batch[i]) or None,
            pipeline_flushes=int(self.flushes[i]), expert_gemm="grouped" if bool(self.grouped_gemm[i]) else "per_expert",
            elementwise_kernels="eager" if bool(self.eager[i]) else "fused",
            qkv_projection="separate" if bool(self.qkv_separate[i]) else "fused",
            activation_input_fp8=bool(self.act_in_fp8[i]),
            activation_layout="batch_first" if bool(self.batch_first[i]) else "sequence_first",
            cross_entropy="eager" if bool(self.ce_eager[i]) else "fused",
            recompute_replay="needed" if bool(self.replay_needed[i]) else "module",
            unfused_ops=tuple(n for j, n in enumerate(UNFUSED_OPS) if int(self.unfused[i]) >> j & 1))


@dataclass(frozen=True)
class VectorMetrics:
    """The vectorized model's results, one entry per strategy. Infeasible entries have feasible False,
    a reason code (see `reason_text`) and the times/memory the model computed anyway."""

    iteration_time_s: np.ndarray
    time_to_train_s: np.ndarray
    tokens_per_s: np.ndarray
    mfu: np.ndarray
    memory_per_gpu_bytes: np.ndarray
    feasible: np.ndarray
    reason_code: np.ndarray

    @staticmethod
    def reason_text(code: int) -> str:
        from designer.perf.iteration import reason_text

        return reason_text(code)

    def __len__(self) -> int:
        return int(self.iteration_time_s.shape[0])
