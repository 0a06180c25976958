"""Public entry points of the performance model.

`evaluate_system` scores one strategy (-> Metrics | Infeasible); `evaluate_many` scores a
`StrategyArrays` of many strategies on one design in a single numpy pass (-> VectorMetrics). Both
run the same vectorized kernel (`iteration.iteration_arrays`), so they agree by construction; the
scalar path is the kernel on one row plus the detailed record. `load_perf_calibration` is the only
I/O: it reads designer/data/compute_efficiency.yaml and designer/data/collectives.yaml.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import numpy as np
import yaml

from designer import units
from designer.perf import collectives as coll
from designer.perf.compute import ComputeCalibration
from designer.perf.iteration import (
    REASONS,
    PerfCalibration,
    binding_tier_names,
    iteration_arrays,
    reason_text,
    v1_inputs,
    v1_iteration_time_s,
)
from designer.perf.memory import MemoryCalibration
from designer.perf.records import (
    Breakdown,
    Infeasible,
    MemoryBreakdown,
    Metrics,
    StrategyArrays,
    TierBytes,
    TrafficSummary,
    TypeBytes,
    VectorMetrics,
)
from designer.spec.llm import LLMSpec, Strategy, TrainingSpec
from designer.spec.system import ClusterSystem

DATA_DIR = Path(__file__).resolve().parents[1] / "data"

__all__ = [
    "PerfCalibration", "StrategyArrays", "VectorMetrics", "Metrics", "Infeasible",
    "evaluate_system", "evaluate_many", "load_perf_calibration", "reason_text", "compute_calibration_from_dict",
    "at_nccl_release", "perf_calibration",
]


def compute_calibration_from_dict(data: dict) -> tuple[ComputeCalibration, MemoryCalibration, tuple[float, float]]:
    """Build the calibration records from the parsed compute_efficiency.yaml (pure)."""
    g = data["gemm"]
    att = data["attention"]
    fw = data.get("framework") or {}
    return (
        ComputeCalibration(
            gemm_k_half=float(g["k_half"]),
            gemm_mn_half=float(g["mn_half"]),
            gemm_ceilings=tuple((str(arch), str(p), float(e)) for arch, by in g["max_efficiency"].items()
                                for p, e in by.items()),
            gpu_gemm_ceilings=tuple((str(gpu), str(p), float(e)) for gpu, by in (g.get("max_efficiency_by_gpu") or {}).items()
                                    for p, e in by.items()),
            hbm_efficiency=float(data["elementwise"]["hbm_efficiency"]),
            attention=tuple((str(k), str(arch), float(e["forward"]), float(e["backward"]))
                            for k, by in att["kernels"].items() for arch, e in by.items()),
            default_flash=tuple((str(a), str(k)) for a, k in att["default_flash"].items()),
            attention_seq_half=tuple((str(k), float(v)) for k, v in (att.get("seq_half_tokens") or {}).items()),
            attention_head_dim_half=tuple((str(k), float(v)) for k, v in (att.get("head_dim_half") or {}).items()),
            attention_local_tile_overhead=tuple(
                (str(arch), float(e["forward"]), float(e["backward"]))
                for arch, e in (att.get("local_tile_overhead") or {}).items()),
            gpu_clock_scales=tuple((str(k), float(v)) for k, v in (g.get("clock_scale_by_gpu") or {}).items()),
            attention_clock_scales=tuple((str(k), float(e["forward"]), float(e["backward"]))
                                         for k, e in (att.get("clock_scale_by_gpu") or {}).items()),
            clock_scale_exempt=tuple(str(p) for p in (g.get("clock_scale_exempt_precisions") or ())),
            attention_low_precision_speedup=tuple(
                (str(key), str(fmt), float(e["forward"]), float(e["backward"]))
                for table in (att.get("low_precision_speedup") or {}, att.get("low_precision_speedup_by_gpu") or {})
                for key, by in table.items() for fmt, e in by.items()),
            optimizer_bytes_per_param=float(data["optimizer"]["bytes_per_param"]),
            framework_per_iteration_s=float(fw.get("per_iteration_s", 0.0)),
            framework_per_layer_s=float(fw.get("per_layer_s", 0.0)),
            framework_per_expert_s=float(fw.get("per_expert_s", 0.0)),
            learned_busiest_rank_load=float((data.get("moe") or {}).get("learned_busiest_rank_load", 1.0)),
            overlap_slowdown=float(data.get("overlap", {}).get("compute_slowdown", 0.0)),
            grouped_gemm_efficiency=float(g.get("grouped_efficiency", 1.0)),
            fp8_recipe_gemm_factors=tuple((str(k), float(v)) for k, v in (g.get("fp8_recipe_factor") or {}).items()),
            kernel_efficiency_over_bf16=tuple(
                (str(arch), str(p), float(r))
                for arch, by in ((data.get("low_precision") or {}).get("kernel_efficiency_over_bf16") or {}).items()
                for p, r in by.items()),
        ),
        MemoryCalibration(
            framework_reserved_bytes=float(data["memory"]["framework_reserved_bytes"]),
            zero3_prefetch_layers=float(data["memory"]["zero3_prefetch_layers"]),
        ),
        (float(data["data_parallel"]["bucket_elements_min"]), float(data["data_parallel"]["bucket_elements_per_rank"])),
    )


def load_perf_calibration(compute_path: str | Path | None = None,
                          collectives_path: str | Path | None = None) -> PerfCalibration:
    """Read the calibration data files (the only I/O of the perf package besides the collectives loader)."""
    with open(compute_path or DATA_DIR / "compute_efficiency.yaml", encoding="utf-8") as fh:
        data = yaml.safe_load(fh)
    compute, memory, bucket = compute_calibration_from_dict(data)
    lp = data["low_precision"]
    casts = tuple((str(k), float(v)) for k, v in lp["cast_bytes_per_element"].items())
    saved = tuple((str(k), float(v)) for k, v in (lp.get("saved_input_bytes_per_element") or {}).items())
    gathered = tuple((str(k), float(v)) for k, v in (lp.get("tp_gather_bytes_per_element") or {}).items())
    return PerfCalibration(compute=compute, memory=memory,
                           collectives=coll.load_collective_calibration(collectives_path),
                           dp_bucket_elements_min=bucket[0], dp_bucket_elements_per_rank=bucket[1],
                           cast_bytes_per_element=casts, saved_input_bytes_per_element=saved,
                           tp_gather_bytes_per_element=gathered,
                           converts_every_linear=tuple(str(r) for r in lp.get("converts_every_linear") or ()),
                           async_tp_unfused_gathers=tuple(str(r) for r in lp.get("async_tp_unfused_gathers") or ()))


@functools.lru_cache(maxsize=1)
def _shipped_calibration() -> PerfCalibration:
    """The shipped calibration, read once (the data files do not change during a run)."""
    return load_perf_calibration()


def at_nccl_release(calib: PerfCalibration, nccl_version: str | None = None,
                    nccl_env: dict[str, float | int] | None = None) -> PerfCalibration:
    """`calib` with its collective model for the NCCL release `nccl_version` (None: the calibration's
    own) and with the NCCL settings `nccl_env` (CollectiveCalibration fields: buffer_bytes,
    nvls_chunk_bytes, nvls_tree_max_chunk_bytes, ib_qps_per_connection; None: NCCL's defaults); `calib` itself if neither."""
    if nccl_version is None and not nccl_env:
        return calib
    collectives = calib.collectives if nccl_version is None else coll.for_nccl_version(calib.collectives, nccl_version)
    if nccl_env:
        collectives = collectives.model_copy(update=nccl_env)
    return dataclasses.replace(calib, collectives=collectives)


def perf_calibration(nccl_version: str | None = None, nccl_env: dict[str, float | int] | None = None) -> PerfCalibration:
    """The shipped calibration at an NCCL release and settings (at_nccl_release)."""
    return at_nccl_release(_shipped_calibration(), nccl_version, nccl_env)


def _calib(calib: PerfCalibration | None) -> PerfCalibration:
    return _shipped_calibration() if calib is None else calib


def evaluate_many(llm: LLMSpec, training: TrainingSpec, strategies: StrategyArrays | list[Strategy],
                  system: ClusterSystem, *, calib: PerfCalibration | None = None) -> VectorMetrics:
    """Score many strategies on one design in one numpy pass."""
    S = strategies if isinstance(strategies, StrategyArrays) else StrategyArrays.from_strategies(strategies)
    r = iteration_arrays(llm, training, S, system, _calib(calib), summary=True)
    return VectorMetrics(iteration_time_s=r["iteration_time_s"], time_to_train_s=r["time_to_train_s"],
                         tokens_per_s=r["tokens_per_s"], mfu=r["mfu"], memory_per_gpu_bytes=r["memory_per_gpu_bytes"],
                         feasible=r["code"] == 0, reason_code=r["code"])


def _needs_gib(need_bytes: float, have_bytes: float) -> str:
    """'needs X GiB per GPU, HBM holds Y GiB', with the digits that tell the two apart."""
    need, have = need_bytes / units.GIB_TO_BYTES, have_bytes / units.GIB_TO_BYTES
    digits = 1 if need - have >= 0.1 else 2 if need - have >= 0.01 else 3
    return f"needs {need:.{digits}f} GiB per GPU, HBM holds {have:.{digits}f} GiB"


def _reason(code: int, llm: LLMSpec, training: TrainingSpec, st: Strategy, system: ClusterSystem,
            mem_bytes: float) -> str:
    """A specific one-line reason with the numbers involved."""
    B, s = st.global_batch_sequences or training.global_batch_sequences, training.sequence_length
    lo, hi = training.batch_range
    text = {
        1: f"strategy uses {st.n_gpus} GPUs (tp {st.tp} x pp {st.pp} x dp {st.dp} x cp {st.cp}), the system has {system.n_gpus}",
        2: f"global batch {B} is not a multiple of dp {st.dp} x microbatch {st.microbatch_size}",
        3: f"tp {st.tp} does not divide " + " and ".join(
            f"{name} {size}" for name, size in (("heads", llm.heads), ("hidden", llm.hidden_size),
                                                ("ffn_size", None if llm.moe else llm.ffn_size))
            if size is not None and size % st.tp),
        4: f"tp {st.tp} and kv_heads {llm.kv_heads_effective} do not divide one another",
        5: f"cp {st.cp} does not divide the sequence length {s}",
        6: f"pp {st.pp} x virtual stages {st.virtual_stages} exceeds the {llm.layers} layers",
        7: (f"ep {st.ep} must divide the experts ({llm.moe.experts if llm.moe else 0}) and ep x expert_tp "
            f"{st.ep * (llm.expert_tp_for(st.tp, st.expert_tp))} must divide tp x cp x dp {st.tp * st.cp * st.dp}"),
        8: f"attention_kernel {st.attention_kernel.value} does not exist on {system.gpu.architecture} GPUs ({system.gpu.name})",
        9: _needs_gib(mem_bytes, system.gpu.hbm_bytes),
        10: f"ep {st.ep} needs a MoE model; {llm.name} is dense",
        11: f"interleaved schedule needs pp > 1 and virtual_stages > 1 (pp {st.pp}, v {st.virtual_stages})",
        12: f"ZeRO++ options need ZeRO stage 3 (stage {st.zero_stage})",
        13: (f"pipeline end stages of {st.pp_first_stage_layers} and {st.pp_last_stage_layers} layers do not fit "
             f"{llm.layers} layers over pp {st.pp}"),
        14: f"shard_group_size {st.shard_group_size} does not divide dp x cp {st.dp * st.cp}",
        16: f"offload needs host memory and host link figures for GPU {system.gpu.name} in the catalog",
        17: (f"offloaded states and activations need {mem_bytes / 1e9:.1f} GB of host memory per GPU, "
             f"{system.gpu.name} hosts have {system.gpu.host_memory_bytes / 1e9:.0f} GB"),
        18: (f"cp_comm a2a needs tp x cp = {st.tp * st.cp} to divide the {llm.heads} attention heads and cp {st.cp} "
             f"to divide a TP rank's {max(llm.kv_heads_effective // st.tp, 1)} key/value heads"),
        19: f"offload_weights needs zero_stage 3 (FSDP), not {st.zero_stage}",
        20: (f"global batch {B} is not allowed: the training allows "
             + (f"{list(training.global_batch_choices)}" if training.global_batch_choices else
                f"[{lo}, {hi}]" if lo < hi else
                f"only {lo} (give training.global_batch_sequences a tolerance or a list to allow others)")),
        15: (f"DualPipe needs an even pp >= 2 and an even microbatch count >= 2 x pp per schedule (pp {st.pp}, "
             f"microbatches {B // (st.dp * st.microbatch_size) // st.pipeline_flushes})"),
        22: (f"precision {training.precision.value} does not run on {system.gpu.name} ({system.gpu.architecture}): "
             f"its tensor cores take {', '.join(sorted(system.gpu.peak_flops))}"),
        23: (f"expert_tp {llm.expert_tp_for(st.tp, st.expert_tp)} does not divide the expert FFN size "
             f"{llm.moe.expert_ffn_size if llm.moe else 0}"),
        24: f"activation_input_fp8 needs a gated MLP (SwiGLU); model {llm.name} has none",
        25: (f"offload_activation_layers {st.offload_activation_layers} runs only at pp 1 and without recompute "
             f"(Megatron-Core --cpu-offloading); the strategy has pp {st.pp}, recompute {st.recompute.value}"),
        26: (f"expert_tp {st.expert_tp} on {llm.name}, an MoE model with linear biases: Megatron-Core runs its "
             "experts only at expert_tp 1"),
        27: (f"tp {st.tp} without sequence_parallel on {llm.name}, an MoE model: Megatron-Core's MoE layer "
             "trains with tensor parallelism only under sequence parallelism (set sequence_parallel: true)"),
        29: ("overlap_ep_comm: Megatron-Core runs the 1F1B all-to-all overlap only with expert parallelism, the "
             "alltoall or deepep dispatcher, the interleaved schedule when pp > 1, no full recompute and no 'moe' "
             f"recompute module, and at most one MTP layer (the strategy has ep {st.ep}, {st.moe_dispatcher}, pp "
             f"{st.pp} {st.schedule.value} v {st.virtual_stages}, recompute {st.recompute.value}"
             + (f" {[m.value for m in st.recompute_modules]}" if st.recompute_modules else "")
             + f"; the model has {llm.mtp_layers} MTP layer{'' if llm.mtp_layers == 1 else 's'})"),
        28: (f"the interleaved schedule runs microbatches in groups of pp {st.pp}: the "
             f"{B // (st.dp * st.microbatch_size) // max(st.pipeline_flushes, 1)} microbatches of a pipeline schedule "
             "must be a multiple of it (Megatron-Core raises otherwise; use 1f1b)"
             if st.activation_layout != "batch_first" else
             f"PyTorch's interleaved schedule runs the {B // (st.dp * st.microbatch_size) // max(st.pipeline_flushes, 1)} "
             f"microbatches of a pipeline schedule in max(1, m // pp {st.pp}) rounds, and they must be a multiple of "
             "the rounds (ScheduleInterleaved1F1B raises otherwise)"),
        21: (f"pipeline_flushes {st.pipeline_flushes} must divide the {B // (st.dp * st.microbatch_size)} "
             f"microbatches of an iteration (global batch {B} / dp {st.dp} / microbatch {st.microbatch_size})"),
    }
    return text.get(code, REASONS[code][1])


def evaluate_system(llm: LLMSpec, training: TrainingSpec, strategy: Strategy, system: ClusterSystem, *,
                    calib: PerfCalibration | None = None, mode: str = "full") -> Metrics | Infeasible:
    """Iteration time, time to train, utilisation, memory and traffic of one strategy on one system.

    mode="v1" replaces the time by the Rail-only paper's reduced model (railonly.md §3, Eq. (1)):
    N_M = tp, K = the HB size, no pipeline, no overlap, bandwidth terms only, compute at dense peak;
    memory, feasibility and traffic still come from the full model."""
    if mode not in ("full", "v1"):
        raise ValueError(f"mode must be 'full' or 'v1', not {mode!r}")
    full = _evaluate_full(llm, training, strategy, system, _calib(calib))
    if mode == "full" or isinstance(full, Infeasible):
        return full
    peak = system.gpu.peak_flops.get(training.precision.value, system.gpu.peak_flops["bf16"])
    x = v1_inputs(llm, n_gpus=strategy.n_gpus, hb_size=system.hb.size, batch_tokens=training.tokens_per_iteration,
                  compute_flops=peak, hb_bandwidth=system.hb.bandwidth_per_gpu_bytes_per_s,
                  nic_bandwidth=system.nic_bandwidth_per_gpu_bytes_per_s)
    t = float(v1_iteration_time_s(x, strategy.tp))
    compute = x.flops_per_iteration / (x.n_gpus * x.compute)
    tp_s = x.layers * x.m_cc * x.batch * x.d_model * x.act_bytes * (strategy.tp - 1) / (x.n_gpus * x.hb_bandwidth)
    scale = training.total_tokens / training.tokens_per_iteration
    return dataclasses.replace(
        full, iteration_time_s=t, time_to_train_s=t * scale, tokens_per_s=training.tokens_per_iteration / t,
        mfu=full.mfu * full.iteration_time_s / t, hfu=full.hfu * full.iteration_time_s / t,
        breakdown=Breakdown(compute_s=compute, tp_s=tp_s, cp_s=0.0, pp_s=0.0, dp_s=t - compute - tp_s, ep_s=0.0,
                            bubble_s=0.0, exposed_comm_s=t - compute, overlapped_comm_s=0.0, host_s=0.0))


def _memory(r: dict) -> MemoryBreakdown:
    return MemoryBreakdown(weights_bytes=float(r["weights_bytes"]), gradients_bytes=float(r["gradients_bytes"]),
                           optimizer_bytes=float(r["optimizer_bytes"]), activations_bytes=float(r["activations_bytes"]),
                           other_bytes=float(r["other_bytes"]))


def _evaluate_full(llm: LLMSpec, training: TrainingSpec, strategy: Strategy, system: ClusterSystem,
                   calib: PerfCalibration) -> Metrics | Infeasible:
    S = StrategyArrays.from_strategies([strategy])
    r = {k: v[0] for k, v in iteration_arrays(llm, training, S, system, calib).items()}
    code = int(r["code"])
    mem_total = float(r["memory_per_gpu_bytes"])
    if code:
        if code == 17:
            mem_total = float(r["host_memory_bytes"])
        over_hbm = code == 9
        return Infeasible(reason=_reason(code, llm, training, strategy, system, mem_total), kind=REASONS[code][0],
                          memory_per_gpu_bytes=mem_total if over_hbm else None,
                          memory=_memory(r) if over_hbm else None,
                          hbm_capacity_bytes=system.gpu.hbm_bytes if over_hbm else None)
    hb, rail, spine = float(r["hb_bytes"]), float(r["rail_bytes"]), float(r["spine_bytes"])
    total = hb + rail + spine
    binding = str(binding_tier_names(np.array([r["hb_time_s"]]), np.array([r["rail_time_s"]]),
                                     np.array([r["spine_time_s"]]), np.array([r["iteration_time_s"]]))[0])
    return Metrics(
        iteration_time_s=float(r["iteration_time_s"]), time_to_train_s=float(r["time_to_train_s"]),
        tokens_per_s=float(r["tokens_per_s"]), mfu=float(r["mfu"]), hfu=float(r["hfu"]),
        model_flops_per_iteration=float(r["model_flops"]), hardware_flops_per_iteration=float(r["hardware_flops"]),
        model_flops_causal_per_iteration=float(r["model_flops_causal"]),
        peak_flops_per_gpu=float(system.gpu.peak_flops.get(training.precision.value, system.gpu.peak_flops["bf16"])),
        n_gpus=int(r["n_gpus"]),
        memory=_memory(r),
        hbm_capacity_bytes=system.gpu.hbm_bytes,
        breakdown=Breakdown(**{f.name: float(r[f.name]) for f in dataclasses.fields(Breakdown)}),
        tier_bytes=TierBytes(hb_bytes=hb, rail_bytes=rail, spine_bytes=spine),
        binding_tier=binding,
        traffic=TrafficSummary(pair_fraction_algorithm=float(r["pair_fraction_algorithm"]),
                               pair_fraction_flat=float(r["pair_fraction_flat"]),
                               hb_share=hb / total if total else 0.0, rail_share=rail / total if total else 0.0,
                               spine_share=spine / total if total else 0.0),
        type_bytes=TypeBytes(**{f.name: float(r["type_" + f.name]) for f in dataclasses.fields(TypeBytes)}),
    )
