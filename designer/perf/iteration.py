"""One training iteration: compute, every parallel dimension's communication, pipeline bubble, overlap.

`iteration_arrays` is the single implementation: it takes a `StrategyArrays` (numpy columns, one entry
per strategy) and returns numpy arrays; the scalar `evaluate_system` runs it on one row. It is a short
composition of one function per term, each taking the shared `_Context` and returning its times and
its ledger rows (collective, count per iteration, traffic type):

compute_term  forward, backward and recomputation per layer (compute.py), per layer kind.
tp_term       Megatron TP (Shoeybi et al. 2019 §3; collectives.md §6.4): per layer and microbatch 2
              all-reduces of b·s·h activations forward and 2 backward (+2 for a recomputed forward);
              with sequence parallelism each becomes a reduce-scatter + all-gather of the same bytes
              (Korthikanti et al. 2022 §4.2.2). Exposed unless overlap_tp_comm, then hidden behind
              the layer's GEMMs.
cp_term       context parallelism by Strategy.cp_comm: ring attention (K,V blocks round the CP
              ring, each step behind one block of attention), all-gathered K,V (hidden behind the
              attention core) or Ulysses all-to-alls (exposed); causal load balancing in compute.
ep_term       MoE dispatch + combine forward and their mirrors backward (collectives.md §6.5), each
              rank sending its tokens (s/cp, and /tp under SP: Megatron-Core dispatches the SP-local
              tokens): an all-to-all of tokens·top_k·h (alltoall dispatcher), an all-gather and a
              reduce-scatter of the group's tokens (allgather), or the deduplicated dispatch of
              collectives.moe_dispatch_estimate_vec (deepep); +2 when the MoE block is recomputed. Exposed unless
              overlap_ep_comm (1F1B all-to-all overlap, DualPipe), then hidden behind another
              microbatch's compute.
pp_term       stage-boundary send/recv (Narayanan et al. SC'21 §2.2, §4.1): b·s·h per microbatch
              each way per chunk boundary, sent as 1/t shards and all-gathered over NVLink.
dp_term       data parallelism and ZeRO (Rajbhandari et al. SC20 §7; collectives.md §6.1-6.2):
              stage 0 all-reduces gradients, 1-2 reduce-scatter them and all-gather the updated
              weights (Megatron distributed optimizer; DeepSpeed's stage 2 reduces every
              micro-step), bucket by bucket behind the last microbatch's backward (the first
              one's forward), and under the interleaved schedule chunk by chunk behind the later
              chunks' passes (chunked_exposed); stage 3 / FSDP gathers each layer's weights before
              its forward (and again before its backward unless fsdp_reshard_after_forward is off)
              and reduce-scatters its gradients, one collective per layer on the real group (so
              ring latency grows with the ranks), prefetched behind the previous layer's compute. Each
              hides behind the wall time of the passes: their compute and every exposed term (TP, CP,
              EP, the pipeline's sends), so a faster GPU never exposes it more than it saves. HSDP shards inside groups of
              shard_group_size and all-reduces the shards across them. ZeRO++: qwZ halves the
              forward gather, hpZ keeps the backward gather inside the node, qgZ sends int4
              gradients. Every stage syncs its own parameters behind its own passes and the
              iteration waits for the most exposed: the pace stage's, or another's where it leaves
              more exposed (widest_dp_term: one other stage, picked by an estimate).
optimizer_term the memory-bound Adam step on the local shard (on the CPU when offloaded).
activation_offload_term  offloaded layers' activations to host memory and back, behind the stage's
              compute; weight offload streams each layer's shard up before its gathers (dp_term).

Pipeline: stages may be uneven (pp need not divide the layers; Megatron's first/last-stage layer
counts); the slowest stage paces the steady state and the fill/drain costs (p−1) mean stage times:
GPipe and 1F1B (p−1)/m of the ideal time, interleaved (p−1)/(v·m), ZB-H1 (p−1)·(F + B − W) with the
weight-gradient GEMMs W moved into the bubble (Qi et al. 2023 §3; B the input gradients), DualPipe
(p/2 − 1)·(F&B + (B + W) − 3W) (DeepSeek-V3 Table 2, whose B is the full backward). The mean stage
counts each stage's host launches as the pace does (a host-bound stage lasts them). A strategy with
pipeline_flushes > 1 runs the iteration's microbatches as that many schedules (PyTorch pipelining:
one per gradient-accumulation step), each with its own fill and drain and its own gradient sync.

Also the V1 reduced model of the Rail-only paper (railonly.md §3, Eqs. 1-3).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from designer.perf import collectives as coll
from designer.perf import compute as cmp
from designer.perf import memory as mem
from designer.perf.placement import (TIER_HB, TIER_NAMES, TIER_RAIL, TIER_SPINE, GroupArrays, Placement, group_shape,
                                     hsdp_groups, merge_groups, place)
from designer.perf.records import UNFUSED_CLAMP, StrategyArrays
from designer.spec.llm import LLMSpec, TrainingSpec, pipeline_stage_layers
from designer.spec.system import ClusterSystem


@dataclass(frozen=True)
class PerfCalibration:
    """Everything calibrated, as data (designer/data/*.yaml): compute curves, memory reserves, the
    collectives module's link efficiencies, the gradient bucket size and the low-precision recipes'
    cast traffic."""

    compute: cmp.ComputeCalibration
    memory: mem.MemoryCalibration
    collectives: Any
    # Megatron-Core's DDP bucket, in elements: max(min, per_rank x the data-parallel group's size)
    dp_bucket_elements_min: float
    dp_bucket_elements_per_rank: float
    cast_bytes_per_element: tuple[tuple[str, float], ...] = ()  # recipe or precision -> HBM bytes per element
    saved_input_bytes_per_element: tuple[tuple[str, float], ...] = ()  # recipe or precision -> saved linear input
    tp_gather_bytes_per_element: tuple[tuple[str, float], ...] = ()  # recipe or precision -> TP all-gather element
    converts_every_linear: tuple[str, ...] = ()  # recipes with no 16-bit fallback for slow layers
    async_tp_unfused_gathers: tuple[str, ...] = ()  # recipes whose SP all-gathers async TP cannot fuse

    @staticmethod
    def _by_recipe(table: tuple[tuple[str, float], ...], precision: str, recipe: str, default: float) -> float:
        """A low_precision table's entry: fp8 is keyed by its recipe, the block formats by their name."""
        return dict(table).get(recipe if precision == "fp8" else precision, default)

    def dp_bucket_elements(self, group_size):
        """Elements per data-parallel bucket for a group of `group_size` ranks."""
        return np.maximum(self.dp_bucket_elements_min, self.dp_bucket_elements_per_rank * np.asarray(group_size))

    def cast_bytes(self, precision: str, recipe: str) -> float:
        return self._by_recipe(self.cast_bytes_per_element, precision, recipe, 0.0)

    def saved_input_bytes(self, precision: str, recipe: str) -> float:
        """Bytes per element of a saved linear-layer input under a low-precision recipe (the quantised
        copy the weight-gradient GEMM reads); 16-bit where the data file has no entry."""
        return self._by_recipe(self.saved_input_bytes_per_element, precision, recipe, cmp.ACT_BYTES)

    def tp_gather_bytes(self, precision: str, recipe: str) -> float:
        """Bytes per element a sequence-parallel all-gather of a GEMM input moves under a low-precision
        recipe (quantised before the gather where the framework does so); 16-bit where the data file
        has no entry."""
        return self._by_recipe(self.tp_gather_bytes_per_element, precision, recipe, cmp.ACT_BYTES)

    def bf16_fallback(self, precision: str, recipe: str) -> bool:
        """Whether a layer slower in low precision than in 16-bit runs in 16-bit (not under a recipe
        that converts every linear layer)."""
        return (recipe if precision == "fp8" else precision) not in self.converts_every_linear

    def tp_overlap_hides_gathers(self, precision: str, recipe: str) -> bool:
        """Whether overlapped TP fuses the sequence-parallel all-gathers into their matmuls (not under
        a recipe in low_precision.async_tp_unfused_gathers)."""
        return (recipe if precision == "fp8" else precision) not in self.async_tp_unfused_gathers


# Reason codes of infeasible strategies (vectorized path); 0 = feasible.
REASONS = {
    0: ("", ""),
    1: ("size", "strategy needs more GPUs than the system has"),
    2: ("divisibility", "global batch is not a multiple of dp x microbatch size"),
    3: ("divisibility", "tp does not divide heads, hidden size and FFN size"),
    4: ("divisibility", "tp and kv_heads do not divide one another"),
    5: ("divisibility", "cp does not divide the sequence length"),
    6: ("divisibility", "pipeline has more stages (x virtual chunks) than layers"),
    7: ("divisibility", "ep does not divide the experts, or ep x expert_tp does not divide tp x cp x dp"),
    8: ("compatibility", "the attention kernel does not exist on this GPU generation"),
    9: ("memory", "does not fit in HBM"),
    10: ("compatibility", "ep > 1 needs a MoE model"),
    11: ("compatibility", "interleaved schedule needs pp > 1 and virtual_stages > 1"),
    12: ("compatibility", "ZeRO++ options need ZeRO stage 3"),
    13: ("divisibility", "first/last pipeline-stage layers exceed the model's layers"),
    14: ("divisibility", "shard_group_size does not divide dp x cp"),
    15: ("compatibility", "DualPipe needs an even pp >= 2 and an even microbatch count >= 2 x pp"),
    16: ("compatibility", "offload needs the GPU's host memory and host link figures"),
    17: ("memory", "offloaded states and activations do not fit in host memory"),
    18: ("divisibility", "cp_comm a2a needs tp x cp to divide the attention heads and cp a TP rank's key/value heads"),
    19: ("compatibility", "weight offload needs ZeRO stage 3 (FSDP)"),
    20: ("divisibility", "the strategy's global batch is outside the training's batch tolerance or list"),
    21: ("divisibility", "pipeline_flushes does not divide the microbatches of an iteration"),
    22: ("compatibility", "the GPU has no tensor cores for the run's precision"),
    23: ("divisibility", "expert_tp does not divide the expert FFN size"),
    24: ("compatibility", "activation_input_fp8 needs a gated MLP"),
    25: ("compatibility", "activation offload runs without pipeline parallelism and without recomputation"),
    26: ("compatibility", "an MoE model with linear biases needs expert_tp 1"),
    27: ("compatibility", "an MoE model with tp > 1 needs sequence parallelism"),
    28: ("divisibility", "interleaved schedule needs the microbatches of a pipeline schedule to be a multiple of pp"),
    29: ("compatibility", "Megatron-Core's EP all-to-all overlap needs EP, the alltoall or deepep dispatcher, "
                          "virtual stages when pp > 1, no full or MoE recompute and at most one MTP layer"),
    30: ("compatibility", "Muon orthogonalises whole matrices on the GPU: it needs ZeRO stage 0 or 1 over the whole "
                          "data-parallel group (Megatron's layer-wise distributed optimizer: no shard group) and no "
                          "optimizer or weight offload"),
}


def reason_text(code: int) -> str:
    return REASONS[int(code)][1]


def reason_kind(code: int) -> str:
    return REASONS[int(code)][0]


@dataclass(frozen=True)
class _Coll:
    """One collective per strategy: seconds, bytes one GPU sends on each fabric level, and the number
    of group members one GPU exchanges data with under the algorithm the collectives model chose."""

    time_s: np.ndarray
    hb_bytes: np.ndarray
    rail_bytes: np.ndarray
    spine_bytes: np.ndarray
    peers: np.ndarray
    live: bool = True  # false when no strategy runs this collective (all zeros)


def _ct_buckets(op: str, nbytes, n_calls, g: GroupArrays, system: ClusterSystem, ccal, on=True,
                graphs=False, memo: dict | None = None, key=None, time_only: bool = False) -> _Coll:
    """nbytes moved as n_calls collectives (a bucketed data-parallel sync): the buffer's collective
    plus, per further call, a call's fixed cost (the time of a 1-byte one on the group: its latency
    and host floor), so small buckets cost more than one call over the whole buffer. The bandwidth
    ramp (pipeline fill) stays the buffer's: charging it per bucket as well left the measured
    Megatron runs 1 point of dense-3d MAPE (MLPerf's Llama 3.1 8B rows 10 points) slower than measured.

    The fixed cost depends on the group and the strategy only, not on the bytes: given a memo, the
    one computed under `key` is reused (widest_dp_term prices two stages' syncs on the same groups)."""
    k = np.maximum(np.asarray(n_calls, float), 1.0)
    shape = g.size.shape
    # few strategies (a scalar evaluation): one pass over both sizes saves a call's fixed overhead;
    # many (a search): two passes, each deduplicating its (bytes, shape) pairs, are faster
    if not np.any(k > 1) or g.size.ndim != 1 or shape[0] > 64:
        c = _ct(op, nbytes, g, system, ccal, on, graphs, time_only=time_only)
        if not c.live or not np.any(k > 1):
            return c
        if memo is not None and key in memo:
            fixed_s = memo[key]
        else:
            # every strategy that runs the op, so that the result serves any bucket count
            fixed_s = _ct(op, 1.0, g, system, ccal, on, graphs, time_only=True).time_s
            if memo is not None:
                memo[key] = fixed_s
        return _Coll(c.time_s + (k - 1) * fixed_s, c.hb_bytes, c.rail_bytes, c.spine_bytes, c.peers)
    # the buffer's calls and the 1-byte ones in one pass over the group shapes
    n = shape[0]
    twice = GroupArrays(**{f: np.concatenate([getattr(g, f), getattr(g, f)]) for f in GroupArrays.__dataclass_fields__})
    both = np.concatenate([np.broadcast_to(np.asarray(nbytes, float), shape), np.where(k > 1, 1.0, 0.0) + np.zeros(shape)])
    on2 = np.concatenate([np.broadcast_to(np.asarray(on, bool), shape)] * 2)
    gr2 = np.concatenate([np.broadcast_to(np.asarray(graphs, bool), shape)] * 2)
    c = _ct(op, both, twice, system, ccal, on2, gr2, time_only=time_only)
    if not c.live:
        z = np.zeros(shape)
        return _Coll(z, z, z, z, z, live=False)
    return _Coll(c.time_s[:n] + (k - 1) * c.time_s[n:], c.hb_bytes[:n], c.rail_bytes[:n], c.spine_bytes[:n],
                 c.peers[:n])


TRAFFIC_TYPES = ("tp", "cp", "pp", "dp", "ep")


class _Ledger:
    """Accumulates per-GPU bytes per (traffic type, fabric level) and seconds per fabric level over
    the iteration. A collective's time is charged to the highest level it uses (its bottleneck in
    practice). Types: tp (TP collectives), cp (K/V gathers), pp (stage-boundary send/recv and the
    NVLink all-gather of its 1/t shards), dp (gradients, ZeRO gathers, dense and expert), ep (MoE
    all-to-all)."""

    def __init__(self, shape):
        self.by_type = {t: [np.zeros(shape) for _ in TIER_NAMES] for t in TRAFFIC_TYPES}
        self.time = [np.zeros(shape) for _ in TIER_NAMES]

    def add(self, c: _Coll, count, kind: str):
        if not c.live:
            return
        count = np.asarray(count, float)
        acc = self.by_type[kind]
        acc[TIER_HB] += c.hb_bytes * count
        acc[TIER_RAIL] += c.rail_bytes * count
        acc[TIER_SPINE] += c.spine_bytes * count
        top = np.where(c.spine_bytes > 0, TIER_SPINE, np.where(c.rail_bytes > 0, TIER_RAIL, TIER_HB))
        for tier in (TIER_HB, TIER_RAIL, TIER_SPINE):
            self.time[tier] += np.where(top == tier, c.time_s * count, 0.0)

    @property
    def bytes(self) -> list[np.ndarray]:
        """Per-GPU bytes per fabric level, all types together."""
        return [sum(self.by_type[t][tier] for t in TRAFFIC_TYPES) for tier in range(len(TIER_NAMES))]

    def type_bytes(self) -> dict[str, np.ndarray]:
        """{"<type>_<level>_bytes": per-GPU bytes} for every traffic type and fabric level."""
        return {f"{t}_{TIER_NAMES[tier]}_bytes": self.by_type[t][tier] for t in TRAFFIC_TYPES
                for tier in range(len(TIER_NAMES))}


def _ct(op: str, nbytes, g: GroupArrays, system: ClusterSystem, ccal, on=True, graphs=False,
        time_only: bool = False) -> _Coll:
    """One collective on group shape g; zero for a group of one, no bytes, or where `on` is false;
    where `graphs` (the strategy replays CUDA graphs) the host floor of the call shrinks. time_only:
    only time_s is wanted (the bytes and peers come back as zeros).

    A search space repeats few distinct (bytes, group shape) pairs, so the collectives model runs once
    per distinct live pair and each strategy reads its pair's result (same numbers, far fewer evaluations)."""
    shape = g.size.shape
    on = np.asarray(on, bool)
    if on.ndim == 0 and not on or on.ndim and not on.any():
        z = np.zeros(shape)  # one shared, never-written zero array for every field
        return _Coll(z, z, z, z, z, live=False)
    nbytes = np.broadcast_to(np.asarray(nbytes, float), shape)
    live = (g.size > 1) & (nbytes > 0) & np.broadcast_to(on, shape)
    idx = np.flatnonzero(live)
    if idx.size == 0:
        z = np.zeros(shape)
        return _Coll(z, z, z, z, z, live=False)
    nb = nbytes.ravel()[idx]
    gr = np.broadcast_to(np.asarray(graphs, bool), shape).ravel()[idx]
    # one code per (group shape, CUDA graphs), then one per (bytes, that code) pair
    shape_code, n_shapes = g.shape_code
    skey = shape_code.ravel()[idx] * 2 + gr
    inv_b, ub = pd.factorize(nb, use_na_sentinel=False)  # hash-based: linear time, where np.unique sorts
    pair = inv_b.astype(np.int64) * (2 * n_shapes) + skey
    n_pairs = len(ub) * 2 * n_shapes
    if n_pairs <= 4 * len(pair):
        # few (bytes, shape) combinations, the usual case: a table over all of them finds the distinct
        # pairs without a sort; any strategy of a pair represents it
        # (the pair fixes every input of the estimate)
        present = np.zeros(n_pairs, bool)
        present[pair] = True
        rank = np.cumsum(present) - 1
        inv = rank[pair]
        member = np.empty(n_pairs, np.int64)
        member[pair] = np.arange(len(pair))
        first = member[np.flatnonzero(present)]
    else:
        _, first, inv = np.unique(pair, return_index=True, return_inverse=True)
    rep = idx[first]
    e = coll.collective_estimate_vec(op, nb[first], g.size.ravel()[rep], g.ranks_per_domain.ravel()[rep],
                                     g.extent_domains.ravel()[rep], g.same_rail.ravel()[rep], system, ccal,
                                     cuda_graphs=gr[first], memo=g.estimate_memo)
    if time_only:
        fields = (e.time_s,)
    else:
        peers = coll.peers_per_rank(e.algorithm_index, g.size.ravel()[rep], g.ranks_per_domain.ravel()[rep], system)
        fields = (e.time_s, e.hb_bytes, e.rail_bytes, e.spine_bytes, peers)
    # the fields side by side, one row each, gathered in one take along the pairs (four times faster
    # than a gather per field at 1e5 strategies); each row of the result is contiguous
    table = np.zeros((len(fields), len(first) + 1))
    for i, x in enumerate(fields):
        table[i, :len(first)] = x
    if idx.size < live.size:
        # the strategies that do not run it read the zero column after the distinct pairs' results
        # (one scatter of the indices, then one gather, rather than a scatter per field)
        where = np.full(live.size, len(first), np.int64)
        where[idx] = inv
        inv = where
    out = [row.reshape(shape) for row in table.take(inv, axis=1)]
    if time_only:
        z = np.zeros(shape)  # one shared, never-written zero array for the fields not wanted
        return _Coll(out[0], z, z, z, z)
    return _Coll(*out)


# ---------------------------------------------------------------------------------------------
# Shared context
# ---------------------------------------------------------------------------------------------


def precisions(system: ClusterSystem, training: TrainingSpec, calib: PerfCalibration) -> cmp.Precisions:
    """Peaks and GEMM ceilings of the design's GPU at the run's precision (16-bit for the rest)."""
    gpu = system.gpu
    prec = training.precision.value
    hi = "fp16" if prec == "fp16" else "bf16"
    ccal = calib.compute
    # a precision the GPU lacks is infeasible (feasibility code 22); its rows are priced at 16-bit
    gemm_prec = prec if prec in gpu.peak_flops else hi
    low = gemm_prec in cmp.LOW_PRECISIONS
    ceiling = ccal.gemm_ceiling(gpu.name, gpu.architecture, gemm_prec)
    # a compiler that fuses the quantisation into the neighbouring kernels runs the GEMMs at the
    # low-precision kernel's own rate and moves no separate cast traffic (TrainingSpec.low_precision_casts)
    fused = low and training.low_precision_casts == "fused"
    if fused:
        ceiling = ccal.fused_gemm_ceiling(gpu.name, gpu.architecture, gemm_prec) or ceiling
    if gemm_prec == "fp8":
        # a recipe whose scaled GEMMs run other kernels than the per-tensor ones (rowwise scales)
        ceiling *= dict(ccal.fp8_recipe_gemm_factors).get(training.fp8_recipe.value, 1.0)
    # Transformer Engine's FP8 attention runs cuDNN's 8-bit kernel: MXFP8 under the MXFP8 recipe, the
    # per-tensor FP8 one under the others (its NVFP4 recipes included)
    fmt = ("mxfp8" if gemm_prec == "mxfp8" else "fp8") if (low and training.fp8_attention) else None
    fwd, bwd = ccal.attention_table(gpu.architecture, gpu.name, fmt)
    return cmp.Precisions(
        gemm_peak_flops=gpu.peak_flops[gemm_prec],
        gemm_max_eff=ceiling,
        hi_peak_flops=gpu.peak_flops.get(hi, gpu.peak_flops["bf16"]),
        hi_max_eff=ccal.gemm_ceiling(gpu.name, gpu.architecture, hi),
        cast_bytes_per_element=calib.cast_bytes(gemm_prec, training.fp8_recipe.value) if (low and not fused) else 0.0,
        saved_input_bytes_per_element=calib.saved_input_bytes(gemm_prec, training.fp8_recipe.value) if low
        else cmp.ACT_BYTES,
        tp_gather_bytes_per_element=calib.tp_gather_bytes(gemm_prec, training.fp8_recipe.value) if low
        else cmp.ACT_BYTES,
        attn_fwd_eff=fwd, attn_bwd_eff=bwd, attn_seq_half=ccal.attention_seq_half_table(gpu.architecture),
        attn_head_dim_half=ccal.attention_head_dim_half_table(gpu.architecture),
        attn_local_tile_overhead=ccal.attention_local_tile_overhead_for(gpu.architecture),
        bf16_fallback=calib.bf16_fallback(gemm_prec, training.fp8_recipe.value),
        tp_overlap_hides_gathers=calib.tp_overlap_hides_gathers(gemm_prec, training.fp8_recipe.value),
        sp_cast_on_shard=low and calib.tp_gather_bytes(gemm_prec, training.fp8_recipe.value) < cmp.ACT_BYTES,
        sp_transpose_after_gather=gemm_prec == "fp8" and training.fp8_recipe.value in cmp.PER_TENSOR_FP8_RECIPES)


@dataclass(frozen=True)
class StageLayout:
    """Layers per pipeline stage, per strategy. first/last: the end stages' layers; mid_max: the
    largest middle stage (pp > 2); mid_long: how many middle stages hold mid_max layers, the earliest
    ones (the others hold one fewer); mid_mixed: whether the middle stage paired with each long one
    (stage r with stage pp-1-r, as DualPipe pairs them) is a short one, true when at most half the
    middle stages are long and not all are; *_moe: how many of a stage's layers are MoE layers
    (mid_moe: of the long middle stage that paces; mid_min_moe: of a short middle stage;
    mid_first_moe: of the first middle stage, the middle rank with the most microbatches in flight)."""

    first: np.ndarray
    last: np.ndarray
    mid_max: np.ndarray
    first_moe: np.ndarray
    last_moe: np.ndarray
    mid_moe: np.ndarray
    valid: np.ndarray
    mid_long: np.ndarray
    mid_min_moe: np.ndarray
    mid_mixed: np.ndarray
    mid_first_moe: np.ndarray


def default_end_stages(n_layers: int, pp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The end stages' layers when the strategy does not give them, -1 where the even split serves.

    pp divides the layers: an even split. Otherwise Megatron's uneven form
    (--decoder-first/last-pipeline-num-layers; megatron/core/transformer/transformer_config.py checks
    that the middle stages split evenly): every middle stage takes m = ceil(L / pp) layers and the end
    stages share the rest, the last one the smaller half (it also holds the output layer and the loss).
    126 layers on pp 16 is 7 + 14 x 8 + 7, as Llama 3 405B's 16 stages; 61 on pp 16 is 3 + 14 x 4 + 2.
    Where that leaves an end stage empty (61 on pp 32), -1: the layers are split as evenly as
    possible instead (a --pipeline-model-parallel-layout)."""
    pp = np.asarray(pp, dtype=np.int64)
    m = -(-n_layers // np.maximum(pp, 1))
    rest = n_layers - (pp - 2) * m
    last = rest // 2
    first = rest - last
    use = (pp >= 2) & (n_layers % np.maximum(pp, 1) != 0) & (last >= 1)
    return np.where(use, first, -1), np.where(use, last, -1)


# The least share of the busiest stage's work a balanced split must save over Megatron's own split to
# be offered: the FLOP count leaves out what each stage's layers also wait on (their TP, EP and
# pipeline communication, which the output layer does not add to), a difference of this order, and each
# split offered adds a copy of its pipeline depth's strategies to the search.
BALANCED_SPLIT_MIN_GAIN = 0.02


def balanced_end_stages(llm: LLMSpec, sequence_length: int, pp: int, min_end_layers: int = 1,
                        min_gain: float = BALANCED_SPLIT_MIN_GAIN) -> tuple[int, int] | None:
    """The end stages' layers that balance the stages' work, or None where Megatron's own split
    (`default_end_stages`, the even split when pp divides the layers) leaves the busiest stage less
    than `min_gain` more work.

    What a stage holds, in forward FLOPs per token: its layers (dense or MoE by position; the causal
    attention core counted half), plus, on the last stage, the output layer with the loss and every
    MTP module (a layer, its 2h -> h projection and the shared output head; flop_counts). The input
    embedding is a lookup and counts nothing. Among the splits whose middle stages hold equal layer
    counts (Megatron's --decoder-first/last-pipeline-num-layers form, so the launch is two flags) and
    whose end stages hold at least `min_end_layers` layers, the one with the least work on its busiest
    stage, where that is less than Megatron's split leaves; among equals the lighter first stage (under
    1F1B it holds the most microbatches in flight). This is the weighting Megatron's
    --account-for-embedding/loss-in-pipeline-split makes with a layer per end, with the work measured,
    as DeepSeek-V3's published layouts do (61 layers and an MTP module on 16 stages: 4 + 14 x 4 + 1,
    Megatron-Bridge deepseek_v3.py)."""
    L = llm.layers
    if pp < 2 or pp > L:
        return None
    s = sequence_length
    a_d, mlp_d, core_d = layer_flops_per_token(llm, False, s)
    cost_dense = a_d + mlp_d + 0.5 * core_d
    cost_moe = cost_dense
    if llm.moe is not None:
        a_m, mlp_m, core_m = layer_flops_per_token(llm, True, s)
        cost_moe = a_m + mlp_m + 0.5 * core_m
    cost = np.where(llm.moe_layer_flags(), cost_moe, cost_dense)
    h = llm.hidden_size
    head = 2.0 * h * llm.vocab_size
    last_extra = head + llm.mtp_layers * (cost_moe + 2 * 2 * h * h + head)
    prefix = np.concatenate([[0.0], np.cumsum(cost)])

    def in_layers(work):
        """Work in dense layers, rounded so that equal splits tie exactly."""
        return np.round(np.asarray(work) / cost_dense, 9)

    d_first, d_last = (int(x[0]) for x in default_end_stages(L, np.array([pp])))
    megatron = pipeline_stage_layers(L, pp, None if d_first < 0 else d_first, None if d_last < 0 else d_last)
    bounds = np.concatenate([[0], np.cumsum(megatron)])
    meg_work = prefix[bounds[1:]] - prefix[bounds[:-1]]
    meg_work[-1] += last_extra
    meg_busiest = float(in_layers(meg_work.max()))
    best_key, best = (meg_busiest, 0, megatron[0]), megatron
    # a split that beats Megatron's holds no stage of more than k_max layers: the middle count m and the
    # end stages lie within it, and the ends then take the rest (L - (pp - 2) m >= 2 min_end_layers)
    k_max = int(meg_work.max() // cost.min())
    if pp == 2:
        mids = range(0, 1)
    else:
        mids = range(max(1, -(-(L - 2 * k_max) // (pp - 2))), min(k_max, (L - 2 * min_end_layers) // (pp - 2)) + 1)
    for m in mids:
        rest = L - (pp - 2) * m
        first = np.arange(max(min_end_layers, rest - k_max), min(k_max, rest - min_end_layers) + 1)
        if not len(first):
            continue
        # every candidate first-stage size of this middle count at once, from the prefix sums
        work = prefix[first] - prefix[0]
        if pp > 2:
            starts = first[:, None] + m * np.arange(pp - 2)[None, :]
            work = np.maximum(work, (prefix[starts + m] - prefix[starts]).max(axis=1))
        work = np.maximum(work, prefix[L] - prefix[first + (pp - 2) * m] + last_extra)
        busy = in_layers(work)
        j = int(np.lexsort((first, busy))[0])  # the least busy, then the lighter first stage
        key = (float(busy[j]), 1, int(first[j]))
        if key < best_key:
            best_key, best = key, (int(first[j]),) + (m,) * (pp - 2) + (rest - int(first[j]),)
    if best == megatron or best_key[0] > (1 - min_gain) * meg_busiest:
        return None
    return best[0], best[-1]


def stage_layout(llm: LLMSpec, S: StrategyArrays) -> StageLayout:
    """Uneven stages: the end stages take their given layer counts (Megatron
    --decoder-first/last-pipeline-num-layers), or `default_end_stages` when pp does not divide the
    layers; the rest are split as evenly as possible with the remainder on the non-last stages (the
    last holds the output layer and the loss). Computed once per distinct (pp, end stages) of a
    search and read back per strategy."""
    rows = _distinct_rows(S.pp, S.pp_first + 1, S.pp_last + 1)
    if rows is None:
        return _stage_layout(llm, S)
    rep, inv = rows
    return _gather_fields(_stage_layout(llm, S.take(rep)), inv)


def _stage_layout(llm: LLMSpec, S: StrategyArrays) -> StageLayout:
    L = llm.layers
    pp = S.pp
    d_first, d_last = default_end_stages(L, pp)
    unset = (S.pp_first < 0) & (S.pp_last < 0)
    p_first = np.where(unset, d_first, S.pp_first)
    p_last = np.where(unset, d_last, S.pp_last)
    f_fixed = p_first >= 0
    l_fixed = (p_last >= 0) & (pp > 1)
    f_given = np.where(f_fixed, p_first, 0)
    l_given = np.where(l_fixed, p_last, 0)
    free = pp - f_fixed.astype(np.int64) * (pp > 1) - l_fixed.astype(np.int64)
    rest = L - np.where(pp > 1, f_given, 0) - l_given
    k = np.maximum(free, 1)
    base = np.maximum(rest, 0) // k
    rem = np.maximum(rest, 0) % k
    first = np.where(pp == 1, L, np.where(f_fixed, f_given, base + (rem > 0)))
    last = np.where(pp == 1, L, np.where(l_fixed, l_given, base))
    # the remainder goes to the earliest free stages: the first (when free) takes one of it
    mid_max = np.where(pp > 2, base + (rem > (~f_fixed).astype(np.int64)), 0)
    n_mid = np.maximum(pp - 2, 0)
    mid_long = np.where(rem > (~f_fixed).astype(np.int64),
                        np.minimum(rem - (~f_fixed).astype(np.int64), n_mid), n_mid)
    mid_mixed = (mid_long > 0) & (mid_long < n_mid) & (2 * mid_long <= n_mid)
    valid = (rest >= 0) & ((free > 0) | (rest == 0))
    n_dense, n_moe = cmp.layer_kinds(llm)
    if llm.moe is None:
        z = np.zeros_like(first)
        return StageLayout(first, last, mid_max, z, z, z, valid, mid_long, z, mid_mixed, z)
    fd = llm.moe.first_dense_layers
    interval = llm.moe.moe_layer_interval

    def moe_in(n, start):
        """MoE layers among the n layers from layer `start` on: the layers fd + k * interval, k >= 0
        (LLMSpec.moe_layer_flags), counted by position."""
        upto = -(-np.maximum(start + n - fd, 0) // interval)  # MoE layers before start + n
        before = -(-np.maximum(start - fd, 0) // interval)  # and before start
        return np.maximum(upto - before, 0).astype(np.int64)

    first_moe = moe_in(first, 0)
    last_moe = np.where(pp == 1, first_moe, moe_in(last, L - last))
    # the long middle stages run from the first stage's end; the last of them holds the fewest
    # layers of a dense prefix (it reaches past the prefix soonest), so the most MoE layers: it paces
    mid_moe = moe_in(mid_max, first + np.maximum(mid_long - 1, 0) * mid_max)
    # a short middle stage follows the long ones
    mid_min_moe = moe_in(np.maximum(mid_max - 1, 0), first + mid_long * mid_max)
    return StageLayout(first, last, mid_max, first_moe, last_moe, mid_moe, valid, mid_long, mid_min_moe, mid_mixed,
                       moe_in(mid_max, first))


@dataclass(frozen=True)
class _Context:
    """What every term needs: the inputs, the derived per-strategy arrays, the placed groups and the
    compute work of one layer of each kind."""

    llm: LLMSpec
    training: TrainingSpec
    S: StrategyArrays
    system: ClusterSystem
    calib: PerfCalibration
    shape: tuple
    m: np.ndarray  # microbatches per iteration
    # microbatches per pipeline schedule: m over Strategy.pipeline_flushes (each schedule fills and
    # drains the pipeline on its own)
    m_flush: np.ndarray
    b: np.ndarray
    tp: np.ndarray
    cp: np.ndarray
    pp: np.ndarray
    v: np.ndarray
    etp: np.ndarray
    prec: cmp.Precisions
    stages: StageLayout
    pl: Any
    dense: cmp.LayerWork
    moe: cmp.LayerWork | None
    logits_s: np.ndarray
    full: np.ndarray  # share of each chunk's layers fully recomputed (1 = all; Megatron's block method less)
    rc_modules: np.ndarray
    act_bytes: np.ndarray  # one [b, s/cp, h] activation tensor
    # 1 where the host launches the kernels one by one, 0 where the strategy replays the iteration
    # from captured CUDA graphs (no launch floor per layer, no host wait per MoE expert)
    host_launched: np.ndarray
    experts_launched: np.ndarray  # 1 where the MoE layers launch their local experts one by one from the host
    # DualPipe: each rank holds two stages, r and pp-1-r (stage_times, stage_params, dp_term, memory_term)
    dualpipe: np.ndarray
    # the busiest EP rank's routed tokens over the mean (TrainingSpec.moe_load_balance): 1 when forced
    expert_load: float = 1.0
    # only the times are wanted (iteration_arrays' summary): the collectives skip their per-fabric
    # bytes and peers, which only the traffic ledger reads
    times_only: bool = False

    def ct(self, op: str, nbytes, g: GroupArrays, on=True) -> _Coll:
        """One collective per strategy on group shape g where `on` (_ct), on this context's system and
        collective calibration, with its strategies' CUDA graphs."""
        return _ct(op, nbytes, g, self.system, self.calib.collectives, on, self.S.graphs, time_only=self.times_only)

    def ct_buckets(self, op: str, nbytes, n_calls, g: GroupArrays, on=True, memo: dict | None = None,
                   key=None) -> _Coll:
        """nbytes moved as n_calls collectives (_ct_buckets), as ct prices one."""
        return _ct_buckets(op, nbytes, n_calls, g, self.system, self.calib.collectives, on, self.S.graphs,
                           memo=memo, key=key, time_only=self.times_only)

    def launch_s(self, n_layers):
        """The host's time to launch n layers' kernels per microbatch (framework_per_layer_s), 0 under
        CUDA graphs: a stage's launch floor."""
        return n_layers * self.calib.compute.framework_per_layer_s * self.host_launched


def full_recompute_share(llm: LLMSpec, S: StrategyArrays) -> np.ndarray:
    """Share of the layers fully recomputed: 1 under full recompute, N / (layers per model chunk)
    under Megatron's block method (the first N layers of each stage's chunk recompute, the rest keep
    their activations), 0 otherwise."""
    per_chunk = llm.layers / np.maximum(S.pp * S.v, 1).astype(float)
    part = np.where(S.rc_layers > 0, np.minimum(S.rc_layers, per_chunk) / per_chunk, 1.0)
    return np.where(S.recompute == mem.RECOMPUTE_FULL, part, 0.0)


def _distinct_rows(*cols) -> tuple[np.ndarray, np.ndarray] | None:
    """(a representative strategy of each distinct row of the columns, each strategy's row), for
    per-strategy columns of small non-negative integers (group sizes, codes, flags); None where
    deduplicating would not pay (few strategies, most rows distinct) or the values do not fit one key."""
    if np.ndim(cols[0]) != 1 or cols[0].size <= 64:
        return None
    n = cols[0].size
    key = np.zeros(n, np.int64)
    span = 1
    for c in cols:
        c = np.asarray(c)
        if c.ndim == 0:
            continue
        lo, hi = c.min(), c.max()
        if lo == hi:
            continue
        if lo < 0 or c.dtype.kind == "f" and not np.all(c == np.floor(c)):
            return None
        width = int(hi) + 1
        if width > 4096:  # a wide column (the data-parallel size): its distinct values, coded densely
            c, distinct = pd.factorize(c, use_na_sentinel=False)
            width = len(distinct)
        span *= width
        if span > 2 ** 62:
            return None
        key = key * width + c.astype(np.int64)
    inv, uniq = pd.factorize(key, use_na_sentinel=False)
    if 2 * len(uniq) > n:
        return None
    rep = np.empty(len(uniq), np.int64)
    rep[inv[::-1]] = np.arange(n - 1, -1, -1)  # the first strategy of each row
    return rep, inv


def _take_rows(kwargs: dict, rep, shape) -> dict:
    """The per-strategy arrays among keyword arguments cut to the rows `rep`; scalars as they are."""
    return {k: (x.take(rep) if isinstance(x, np.ndarray) and x.shape == shape else x) for k, x in kwargs.items()}


def _gather_placement(pl: Placement, inv) -> Placement:
    """Every group's shape read back per strategy, in one take over the layouts' table."""
    groups = list(Placement.__dataclass_fields__)
    names = list(GroupArrays.__dataclass_fields__)
    cols = [getattr(getattr(pl, g), f) for g in groups for f in names]
    n_rows = len(pl.tp.size)
    table = np.stack([np.broadcast_to(np.asarray(c, np.int64), (n_rows,)) for c in cols]).take(inv, axis=1)
    it = iter(zip(cols, table))
    return Placement(**{g: GroupArrays(**{f: row.astype(np.asarray(c).dtype, copy=False)
                                          for f, (c, row) in zip(names, it)}) for g in groups})


def _gather_fields(work, inv):
    """A dataclass of per-row arrays (and scalars) read back per strategy: the array fields of each
    kind (floating, integer and boolean) at once, in one take over their rows' table."""
    out = {}
    for kinds, dtype in (("f", float), ("iub", np.int64)):
        names = [f.name for f in dataclasses.fields(work)
                 if np.ndim(getattr(work, f.name)) and np.asarray(getattr(work, f.name)).dtype.kind in kinds]
        if names:
            table = np.stack([np.asarray(getattr(work, n), dtype) for n in names]).take(inv, axis=1)
            out.update({n: row.astype(np.asarray(getattr(work, n)).dtype, copy=False) for n, row in zip(names, table)})
    return dataclasses.replace(work, **out) if out else work


def _context(llm, training, S, system, calib, times_only: bool = False) -> _Context:
    prec = precisions(system, training, calib)
    s, B = training.sequence_length, training.global_batch_sequences
    expert_load = calib.compute.busiest_rank_load(training)
    m = np.maximum(B // np.maximum(S.dp * S.mbs, 1), 1).astype(float)
    b, tp, cp, pp, v = (x.astype(float) for x in (S.mbs, S.tp, S.cp, S.pp, S.v))
    etp = np.asarray(llm.expert_tp_for(S.tp, S.etp), float)
    kw = dict(b=b, s=s, tp=tp, cp=cp, ep=S.ep.astype(float), etp=etp, sp=S.sp, kernel=S.kernel, prec=prec,
              hbm_bytes_per_s=system.gpu.hbm_bandwidth_bytes_per_s, calib=calib.compute, cp_balanced=S.cp_lb,
              eager=S.eager, qkv_separate=S.qkv_separate, act_input_fp8=S.act_in_fp8, expert_load=expert_load,
              unfused=S.unfused)
    n_dense, n_moe = cmp.layer_kinds(llm)
    lkw = dict(b=b, tp=tp, cp=cp, ce_eager=S.ce_eager)
    # a search repeats few distinct layer shapes: the layers' work is computed once per distinct
    # shape and read back per strategy (the same numbers)
    rows = _distinct_rows(b, tp, cp, kw["ep"], etp, S.sp, S.kernel, S.cp_lb, S.eager, S.qkv_separate, S.act_in_fp8,
                          S.unfused, S.ce_eager)
    if rows is not None:
        rep, inv = rows
        kw, lkw = _take_rows(kw, rep, S.tp.shape), _take_rows(lkw, rep, S.tp.shape)
    dense = cmp.layer_forward(llm, moe_layer=False, **kw)
    moe = cmp.layer_forward(llm, moe_layer=True, **kw) if n_moe else None
    logits_s, _ = cmp.logits_forward(llm, s=s, prec=prec, hbm_bytes_per_s=system.gpu.hbm_bandwidth_bytes_per_s,
                                     calib=calib.compute, **lkw)
    if rows is not None:
        dense = _gather_fields(dense, inv)
        moe = _gather_fields(moe, inv) if moe is not None else None
        logits_s = np.asarray(logits_s, float).take(inv) if np.ndim(logits_s) else logits_s
    etp_i = np.broadcast_to(etp, S.tp.shape).astype(np.int64)
    # the group shapes likewise, once per distinct layout
    layouts = _distinct_rows(S.tp, S.cp, S.dp, S.pp, S.ep, etp_i, S.order)
    if layouts is None:
        pl = place(S.tp, S.cp, S.dp, S.pp, S.ep, system, etp=etp_i, order_code=S.order)
    else:
        rep, inv = layouts
        pl = _gather_placement(place(*(x.take(rep) for x in (S.tp, S.cp, S.dp, S.pp, S.ep)), system,
                                     etp=etp_i.take(rep), order_code=S.order.take(rep)), inv)
    m_flush = np.maximum(m / np.maximum(S.flushes, 1), 1.0)
    return _Context(llm=llm, training=training, S=S, system=system, calib=calib, shape=S.tp.shape, m=m,
                    m_flush=m_flush, b=b,
                    tp=tp, cp=cp, pp=pp, v=v, etp=etp, prec=prec, stages=stage_layout(llm, S), pl=pl,
                    dense=dense, moe=moe, logits_s=logits_s, full=full_recompute_share(llm, S),
                    rc_modules=np.where(S.recompute == mem.RECOMPUTE_SELECTIVE, S.rc_modules, 0),
                    act_bytes=b * (s / cp) * llm.hidden_size * cmp.ACT_BYTES,
                    host_launched=np.where(S.graphs, 0.0, 1.0),
                    experts_launched=np.where(S.graphs | S.grouped_gemm, 0.0, 1.0),
                    dualpipe=(S.schedule == mem.SCHEDULE_DUALPIPE) & (S.pp >= 2), expert_load=expert_load,
                    times_only=times_only)


# ---------------------------------------------------------------------------------------------
# Terms
# ---------------------------------------------------------------------------------------------


def hidden_cost(comm_s, budget_s, ctx: _Context, sm_share=1.0):
    """Exposed seconds of communication overlapped with `budget_s` of compute: the part that does not
    fit, plus the slowdown the hidden part inflicts on the compute it overlaps (NCCL kernels take
    SMs and HBM bandwidth from the GEMMs running beside them; collectives.yaml is about the links).
    The slowdown is overlap_slowdown for a collective and scales with the channels (SMs) the
    communication holds against a collective's: `sm_share` (collectives.send_recv_channel_share)."""
    hid = np.minimum(comm_s, np.maximum(budget_s, 0.0))
    return comm_s - hid + ctx.calib.compute.overlap_slowdown * sm_share * hid


def _send_recv_sm_share(ctx: _Context, g: GroupArrays):
    """collectives.send_recv_channel_share of a send/recv on group g, once per distinct group shape
    (GroupArrays.shape_code, which _ct's collectives on g compute anyway) and scattered back."""
    code, n_shapes = g.shape_code
    rep = np.zeros(n_shapes, np.int64)
    rep[code.ravel()] = np.arange(code.size)  # a strategy of each shape
    share = coll.send_recv_channel_share(g.size.ravel()[rep], g.ranks_per_domain.ravel()[rep], ctx.system,
                                         ctx.calib.collectives)
    return share[code]


@dataclass(frozen=True)
class LayerTimes:
    """Per layer of one kind and per microbatch: compute seconds (forward + backward + recompute) and
    the exposed communication of the per-layer terms; `w_s` is the weight-gradient share of the
    backward (what ZB-H1 and DualPipe move into the bubble); `gemm_s` / `attn_s` the GEMM and
    attention-core seconds communication can hide behind; fwd_s / bwd_s the compute split."""

    compute_s: np.ndarray
    fwd_s: np.ndarray
    bwd_s: np.ndarray
    w_s: np.ndarray
    gemm_s: np.ndarray
    attn_s: np.ndarray
    gemm_fwd_s: Any = 0.0  # the forward pass's share of gemm_s
    # the share of gemm_s (and gemm_fwd_s) in the blocks whose TP collectives fuse into them: the whole
    # layer for a dense one; an MoE layer's attention and shared experts (LayerWork.tp_mlp_gemm_s)
    tp_gemm_share: Any = 1.0
    expert_host_s: Any = 0.0  # of compute_s, the GPU's wait on the host launching an MoE layer's experts


@dataclass(frozen=True)
class Term:
    """A communication term: total seconds and exposed seconds (per layer per microbatch for the
    layer terms, per iteration for DP), and its ledger rows (collective, count per iteration, type)."""

    total_s: np.ndarray
    exposed_s: np.ndarray
    rows: tuple = field(default_factory=tuple)
    exposed_fwd_s: Any = 0.0  # the forward pass's share of exposed_s (layer terms)
    moe_total_s: Any = 0.0  # MoE layers' extra (EP)
    moe_exposed_s: Any = 0.0
    moe_exposed_fwd_s: Any = 0.0  # the forward pass's share of moe_exposed_s
    dense_total_s: Any = 0.0  # of total_s, the dense parameters' traffic (DP; the rest is the experts')


def _recompute_s(ctx: _Context, w: cmp.LayerWork, is_moe: bool, unread):
    """Forward seconds recomputed in the backward pass for one layer of this kind. `unread`: the MLP
    output GEMM a replay of only what the backward reads skips (compute_term)."""
    rc = ctx.rc_modules
    sel = (w.attn_fwd_s + w.attn_mem_s) * ((rc & mem.RC_CORE_ATTN) > 0)
    sel = sel + w.norm_s * ((rc & mem.RC_LAYERNORM) > 0)
    block_bit = mem.RC_MOE if is_moe else mem.RC_MLP
    sel = sel + (w.mlp_gemm_s - unread + w.mlp_mem_s) * ((rc & block_bit) > 0)
    if is_moe:
        sel = sel + w.act_fn_s * (((rc & mem.RC_MOE_ACT) > 0) & ((rc & mem.RC_MOE) == 0))
    sel = sel + w.mla_up_s * ((rc & mem.RC_MLA_UP) > 0)
    # the output projection and the residual add after it (one of the layer's two)
    sel = sel + (w.out_proj_s + 0.5 * w.residual_s) * ((rc & mem.RC_ATTN_OUT) > 0)
    alt = (rc & mem.RC_ALT_MM) > 0
    if np.any(alt):
        sel = sel + _alternate_matmuls_s(w) * alt
    return ctx.full * (w.forward_s - unread) + (1.0 - ctx.full) * sel


def _alternate_matmuls_s(w: cmp.LayerWork):
    """Forward seconds torchtitan's per-op checkpointing recomputes (RecomputeModule.alternate_matmuls):
    its even-numbered matmuls with their inputs' low-precision casts, and the element-wise ops it
    does not save: the norms, RoPE, the activation, the first residual add, and the attention's own
    element-wise kernels where it is unfused (a fused attention kernel's outputs are saved)."""
    cast = w.cast_s * np.divide(w.alternate_mm_s, w.gemm_s, out=np.zeros_like(np.asarray(w.gemm_s, float)),
                                where=np.asarray(w.gemm_s) > 0)
    return (w.alternate_mm_s + cast + w.norm_s + w.rope_s + w.qk_norm_s + w.act_fn_s + 0.5 * w.residual_s
            + w.attn_mem_s)


def _redone(ctx: _Context, module: int):
    """Per strategy, the share of the layers whose `module` (a memory.RC_* bit) runs again in the
    backward: the fully recomputed ones, or every layer where selective recompute names it."""
    return np.maximum(ctx.full, ((ctx.rc_modules & module) > 0).astype(float))


def compute_term(ctx: _Context, w: cmp.LayerWork, is_moe: bool) -> LayerTimes:
    # where recomputation replays only what the backward reads (Strategy.recompute_replay needed), the
    # MLP output GEMM no backward reads (LayerWork.mlp_out_gemm_s) does not run again; a reentrant
    # checkpoint reruns it with the rest of the module
    unread = w.mlp_out_gemm_s * ctx.S.replay_needed
    rc = _recompute_s(ctx, w, is_moe, unread)
    fwd, bwd = w.forward_s, w.backward_s
    # what TP communication can hide behind: the GEMMs and their low-precision casts
    linear = w.gemm_s + w.cast_s
    rc_gemm = ctx.full * (linear - unread)
    alt = (ctx.rc_modules & mem.RC_ALT_MM) > 0
    if np.any(alt):
        # torchtitan's per-op checkpointing recomputes some GEMMs, which the TP collectives hide behind too
        rc_gemm = rc_gemm + (1.0 - ctx.full) * w.alternate_mm_s * alt
    if is_moe:
        # Host time per local expert, exposed: the dropless dispatcher copies the per-expert token
        # counts to the host and synchronises (Megatron-Core token_dispatcher.py cuda_sync_point),
        # and the grouped MLP launches its per-expert kernels from those host-side split sizes
        # (experts.py: tokens_per_expert.tolist()), so the GPU waits while they are launched.
        # Split like the launches, a third forward and two thirds backward. A strategy replaying
        # captured CUDA graphs has static expert shapes and launches nothing from the host, and one
        # grouped-GEMM kernel over the local experts (Strategy.expert_gemm "grouped": torchtitan's
        # torch._grouped_mm, AutoModel's grouped_gemm gmm) launches nothing per expert either.
        host = ctx.calib.compute.framework_per_expert_s * ctx.llm.moe.experts / ctx.S.ep * ctx.experts_launched
        fwd = fwd + host / 3
        bwd = bwd + 2 * host / 3
    else:
        host = 0.0
    tp_share = (w.attn_gemm_s + w.tp_mlp_gemm_s) / np.maximum(w.gemm_s, 1e-30) if is_moe else 1.0
    return LayerTimes(compute_s=fwd + bwd + rc, fwd_s=fwd, bwd_s=bwd + rc, w_s=w.gemm_s, expert_host_s=host,
                      gemm_s=3 * w.gemm_s + w.cast_s + w.cast_bwd_s + rc_gemm, gemm_fwd_s=linear,
                      attn_s=w.attn_fwd_s + w.attn_bwd_s + _redone(ctx, mem.RC_CORE_ATTN) * w.attn_fwd_s,
                      tp_gemm_share=tp_share)


def tp_blocks(llm: LLMSpec, moe_layer: bool) -> float:
    """The blocks of a layer whose input TP gathers (or all-reduces) on the sequence: the attention
    and a dense MLP; in an MoE layer the attention, and the shared experts where the model has them.
    The routed experts take the rank's own tokens through the dispatcher, which gathers over the
    expert tensor-parallel group instead (ep_term; Megatron-Core token_dispatcher.py
    MoEAlltoAllTokenDispatcher: all_to_all over the EP group, then gather_from_sequence_parallel_region
    over expt_tp only)."""
    if not moe_layer or llm.moe is None:
        return 2.0
    return 1.0 + (1.0 if llm.moe.shared_experts else 0.0)


def tp_term(ctx: _Context, layer: LayerTimes, blocks=2.0) -> Term:
    """Per layer per microbatch; hidden behind the layer's GEMMs when overlap_tp_comm. Batch-first
    activations under sequence parallelism (Strategy.activation_layout) add a copy of the whole
    tensor to each reduce-scatter, and to each all-gather of more than one sequence, on the GPU's
    stream (not hidden). `blocks`: the TP blocks of the layer (tp_blocks), each gathering its input
    and reducing its output forward, and the mirrors backward."""
    S, pl = ctx.S, ctx.pl
    k = blocks / 2.0  # of a dense layer's collectives
    dense = layer
    n = k * (4.0 + 2.0 * ctx.full)  # forward (+ recomputed forward) and backward
    ar = ctx.ct("all_reduce", ctx.act_bytes, pl.tp, ~S.sp)
    rs = ctx.ct("reduce_scatter", ctx.act_bytes, pl.tp, S.sp)
    # the sequence-parallel all-gathers carry GEMM inputs: the layer-norm output forward, the output
    # gradient backward, quantised first under a low-precision recipe that gathers them so; the
    # reduce-scatters carry 16-bit GEMM outputs
    ag = ctx.ct("all_gather", ctx.act_bytes * (ctx.prec.tp_gather_bytes_per_element / cmp.ACT_BYTES), pl.tp, S.sp)
    one = ar.time_s + rs.time_s + ag.time_s
    # torchtitan's per-op checkpointing saves reduce-scatter outputs only, so its recomputation
    # gathers the two sequence-parallel inputs again, or repeats the all-reduce after the attention
    # output projection whose sum the second norm reads (RecomputeModule.alternate_matmuls)
    # (one all-reduce, after the attention's output projection, which every layer has; one gather per
    # TP block)
    alt = ((ctx.rc_modules & mem.RC_ALT_MM) > 0) * (1.0 - ctx.full)
    # Megatron-Core's and Transformer Engine's column-parallel linears save their sequence-parallel
    # input as the local shard and gather it again in the backward for the weight gradient
    # (tensor_parallel/layers.py LinearWithGradAccumulationAndAsyncCommunication.backward: "if
    # ctx.sequence_parallel ... dist_all_gather_func"; the activation memory, Korthikanti et al.'s
    # and memory.py's, holds only the shard): one more gather per TP block. torchtitan's DTensor
    # plan (the batch-first layout) keeps the gathered input for its backward.
    regather = S.sp & ~S.batch_first
    n_ar, n_ag = n + alt, n + 2 * k * alt + 2 * k * regather
    total = n * rs.time_s + n_ar * ar.time_s + n_ag * ag.time_s
    # each pass hides its collectives behind its own GEMMs (those of the TP blocks): 2 collectives
    # per block behind the forward's, the rest (backward, recomputed forward) behind the backward's;
    # under a recipe whose all-gathers the overlap cannot fuse into their matmuls
    # (Precisions.tp_overlap_hides_gathers) those stay exposed
    ag_unfused = 0.0 if ctx.prec.tp_overlap_hides_gathers else 1.0
    ag_f = 2 * k * ag.time_s * ag_unfused
    ag_b = (n_ag - 2 * k) * ag.time_s * ag_unfused
    gemm_f = dense.tp_gemm_share * dense.gemm_fwd_s
    gemm_b = dense.tp_gemm_share * (dense.gemm_s - dense.gemm_fwd_s)
    # Megatron-LM overlaps TP communication only under sequence parallelism (arguments.py asserts
    # --sequence-parallel with --tp-comm-overlap; Transformer Engine's userbuffers overlap gathers and
    # reduce-scatters, not all-reduces), so without it the all-reduces stay exposed
    overlap = S.overlap_tp & S.sp
    e_f = np.where(overlap, hidden_cost(2 * k * one - ag_f, gemm_f, ctx) + ag_f, 2 * k * one)
    rest = total - 2 * k * one
    e_b = np.where(overlap, hidden_cost(rest - ag_b, gemm_b, ctx) + ag_b, rest)
    if np.any(S.batch_first):
        # PyTorch's functional collectives gather and reduce-scatter along dim 0; a batch-first
        # tensor sharded along the sequence (dim 1) is re-laid out around each (_functional_collectives
        # all_gather_tensor: torch.cat(torch.chunk(res, group_size, dim=0), dim=gather_dim);
        # reduce_scatter_tensor: torch.cat(torch.chunk(self, group_size, dim=scatter_dim))): a read
        # and a write of the whole [b, s, h] tensor. A gathered single sequence is already laid out
        # [1, s, h], and current releases view it instead of copying (_maybe_view_chunk_cat). A gathered
        # GEMM input is re-laid out at the width it was gathered in (torchao's Float8ColwiseParallel
        # quantises before its gather); the two output gradients the backward gathers stay 16-bit
        # (Float8RowwiseParallel casts nothing before the gradient's gather).
        copy = (2 * ctx.act_bytes / (ctx.system.gpu.hbm_bandwidth_bytes_per_s * ctx.calib.compute.hbm_efficiency)
                * (S.batch_first & S.sp & (ctx.tp > 1)))
        grad_copy = copy * (ctx.b > 1)
        input_copy = grad_copy * (ctx.prec.tp_gather_bytes_per_element / cmp.ACT_BYTES)
        e_f = e_f + 2 * k * (copy + input_copy)
        e_b = e_b + (n - 2 * k) * copy + (n_ag - 4 * k) * input_copy + 2 * k * grad_copy
    return Term(total, e_f + e_b, rows=((ar, n_ar, "tp"), (rs, n, "tp"), (ag, n_ag, "tp")), exposed_fwd_s=e_f)


CP_P2P, CP_ALL_GATHER, CP_A2A = 0, 1, 2  # StrategyArrays.cp_comm (records.CP_COMMS)


def cp_term(ctx: _Context, dense: LayerTimes) -> Term:
    """Context parallelism per layer per microbatch, by Strategy.cp_comm (Megatron-Core's
    --cp-comm-type):

    p2p      ring attention (Liu et al. 2023; Megatron AttnFuncWithCPAndKVP2P): cp steps of block
             attention, the K,V block of the next step sent to the ring neighbour behind each of the
             first cp−1; backward the K,V and their gradients travel together (twice the bytes). Each
             step hides behind one block of the attention core, so a step whose transfer outlasts
             its block exposes the difference.
    all_gather the whole sequence's K,V gathered before the attention (and again for the backward,
             with a reduce-scatter of their gradients), hidden behind the attention core (Llama 3).
    a2a      DeepSpeed-Ulysses (Jacobs et al. 2023): all-to-alls re-shard Q, K, V from sequence to
             heads before the attention and the output back after it; backward the mirrors. They sit
             on the critical path (nothing to hide behind).
    A recomputed forward repeats the forward's traffic."""
    llm, S = ctx.llm, ctx.S
    s = ctx.training.sequence_length
    a_local = llm.heads / ctx.tp
    if llm.mla is not None:
        q_width = a_local * (llm.mla.qk_nope_head_dim + llm.mla.qk_rope_head_dim)
        kv_width = a_local * (llm.mla.qk_nope_head_dim + llm.mla.qk_rope_head_dim + llm.mla.v_head_dim)
        o_width = a_local * llm.mla.v_head_dim
    else:
        q_width = o_width = a_local * llm.head_dim_effective
        kv_width = 2 * np.maximum(llm.kv_heads_effective / ctx.tp, 1.0) * llm.head_dim_effective
    # forward passes: a recomputed forward repeats it, and so does the recomputed attention core of
    # Megatron's selective recompute (core_attn), whose checkpoint wraps Transformer Engine's
    # attention and with it the context-parallel exchange inside it (attention.py
    # _checkpointed_attention_forward)
    n_fwd = 1.0 + _redone(ctx, mem.RC_CORE_ATTN)
    # all_gather: the full sequence's K,V (all_gather's n is the gathered total)
    kv_bytes = ctx.b * s * kv_width * cmp.ACT_BYTES
    ag = ctx.ct("all_gather", kv_bytes, ctx.pl.cp, S.cp_comm == CP_ALL_GATHER)
    rs = ctx.ct("reduce_scatter", kv_bytes, ctx.pl.cp, S.cp_comm == CP_ALL_GATHER)
    t_ag = (n_fwd + 1) * ag.time_s + rs.time_s
    # p2p: one K,V block of s/cp tokens per ring step
    block = kv_bytes / ctx.cp
    p2p = S.cp_comm == CP_P2P
    ring_f = ctx.ct("send_recv", block, ctx.pl.cp_ring, p2p)
    ring_b = ctx.ct("send_recv", 2 * block, ctx.pl.cp_ring, p2p)
    steps = ctx.cp - 1
    attn_f = ctx.dense.attn_fwd_s
    attn_b = ctx.dense.attn_bwd_s
    # a ring neighbour in another domain is one network peer: few channels (send_recv_channel_share)
    ring_sm = _send_recv_sm_share(ctx, ctx.pl.cp_ring) if ring_f.live else 1.0
    e_ring_f = steps * hidden_cost(ring_f.time_s, attn_f / ctx.cp, ctx, ring_sm)
    e_ring = n_fwd * e_ring_f + steps * hidden_cost(ring_b.time_s, attn_b / ctx.cp, ctx, ring_sm)
    t_ring = steps * (n_fwd * ring_f.time_s + ring_b.time_s)
    # a2a: Q, K, V in and the output out (each rank's local tensors), per pass
    tok = ctx.b * s / ctx.cp * cmp.ACT_BYTES
    ulysses = S.cp_comm == CP_A2A
    a2a_qo = ctx.ct("all_to_all", tok * q_width, ctx.pl.cp, ulysses)
    a2a_kv = ctx.ct("all_to_all", tok * kv_width, ctx.pl.cp, ulysses)
    a2a_o = ctx.ct("all_to_all", tok * o_width, ctx.pl.cp, ulysses)
    t_a2a = (n_fwd + 1) * (a2a_qo.time_s + a2a_kv.time_s + a2a_o.time_s)
    e_ag = hidden_cost(t_ag, dense.attn_s, ctx)
    total = np.select([p2p, ulysses], [t_ring, t_a2a], t_ag)
    exposed = np.select([p2p, ulysses], [e_ring, t_a2a], e_ag)
    # the forward pass's share (the recomputed forward runs inside the backward)
    e_fwd = np.select([p2p, ulysses], [e_ring_f, t_a2a / (n_fwd + 1)], e_ag / (n_fwd + 2))
    n_pass = n_fwd + 1
    return Term(total, exposed, rows=((ag, n_pass, "cp"), (rs, 1.0, "cp"), (ring_f, steps * n_fwd, "cp"),
                                      (ring_b, steps, "cp"), (a2a_qo, n_pass, "cp"), (a2a_kv, n_pass, "cp"),
                                      (a2a_o, n_pass, "cp")),
                exposed_fwd_s=e_fwd)


def _dispatch_ct(ctx: _Context, token_bytes, on) -> _Coll:
    """A deduplicated MoE dispatch (or combine) per strategy where `on` (collectives.
    moe_dispatch_estimate_vec), on the EP group's placement."""
    shape = ctx.shape
    on = np.broadcast_to(np.asarray(on, bool), shape)
    g = ctx.pl.ep
    live = on & (g.size > 1)
    idx = np.flatnonzero(live)
    if idx.size == 0:
        z = np.zeros(shape)
        return _Coll(z, z, z, z, z, live=False)
    moe = ctx.llm.moe
    tb = np.broadcast_to(np.asarray(token_bytes, float), shape).ravel()[idx]
    size, rpd = g.size.ravel()[idx], g.ranks_per_domain.ravel()[idx]
    n_dom = coll.domains_crossed(size, np.maximum(rpd, 1), g.extent_domains.ravel()[idx]).astype(size.dtype)
    d, copies = coll.routing_reach(moe.experts, moe.top_k, n_dom, np.minimum(rpd, size), moe.max_nodes_per_token,
                                   ctx.training.moe_routing, moe.routing_groups)
    e = coll.moe_dispatch_estimate_vec(tb, copies, d, size, rpd, g.extent_domains.ravel()[idx], ctx.system,
                                       ctx.calib.collectives)
    if ctx.times_only:
        t, z = np.zeros(shape), np.zeros(shape)
        t.ravel()[idx] = e.time_s
        return _Coll(t, z, z, z, z)
    out = [np.zeros(shape) for _ in range(5)]
    peers = (rpd - 1) + (n_dom - 1)
    for o, x in zip(out, (e.time_s, e.hb_bytes, e.rail_bytes, e.spine_bytes, peers)):
        o.ravel()[idx] = x
    return _Coll(*out)


def ep_term(ctx: _Context, moe: LayerTimes | None) -> Term:
    """MoE layers only, per layer per microbatch: dispatch and combine forward, their mirrors
    backward, and the forward's again when the MoE block is recomputed. Megatron's alltoall
    dispatcher sends every (token, expert) copy as an all-to-all, its allgather dispatcher gathers
    the EP group's tokens and reduce-scatters the combine; the deduplicating dispatcher
    (DeepEP, HybridEP; moe_dispatcher "deepep") sends a token once per destination node and forwards
    it there over the HB fabric, its dispatch in FP8 under a low-precision recipe (the combine and
    the backward stay 16-bit)."""
    z = np.zeros(ctx.shape)
    llm = ctx.llm
    if llm.moe is None or moe is None:
        return Term(z, z)
    S = ctx.S
    tokens = ctx.b * (ctx.training.sequence_length / ctx.cp) / np.where(S.sp, ctx.tp, 1.0)
    token_bytes = tokens * llm.moe.capacity_factor * llm.hidden_size * cmp.ACT_BYTES
    # an all-to-all (or a deduplicated dispatch) ends when its busiest receiver has its tokens: under
    # an uneven load (TrainingSpec.moe_load_balance) that rank's share sets the time; the allgather
    # dispatcher gathers every token whatever the routing
    busiest_bytes = token_bytes * ctx.expert_load
    plain = ~S.dedup & ~S.ag_dispatch
    a2a = ctx.ct("all_to_all", busiest_bytes * llm.moe.top_k, ctx.pl.ep, plain)
    # allgather dispatcher: the EP group's tokens gathered (n = the gathered total), the combine a
    # reduce-scatter of the same; backward the mirrors
    ep_n = ctx.pl.ep.size.astype(float)
    ag = ctx.ct("all_gather", token_bytes * ep_n, ctx.pl.ep, S.ag_dispatch)
    rs = ctx.ct("reduce_scatter", token_bytes * ep_n, ctx.pl.ep, S.ag_dispatch)
    low = ctx.training.precision.value in cmp.LOW_PRECISIONS
    fp8_share = coll.FP8_DISPATCH_BYTES_PER_ELEMENT / cmp.ACT_BYTES if low else 1.0
    d16 = _dispatch_ct(ctx, busiest_bytes, S.dedup)
    d8 = _dispatch_ct(ctx, busiest_bytes * fp8_share, S.dedup) if low else d16
    redo = _redone(ctx, mem.RC_MOE)
    n = 4.0 + 2.0 * redo
    n_fwd = 1.0 + redo  # forward dispatches (FP8 under a low-precision recipe)
    # expert tensor parallelism: the tokens a rank received are gathered over its expert-TP group
    # after the dispatch and the experts' partial outputs reduce-scattered before the combine
    # (Megatron-Core token_dispatcher.py MoEAlltoAllTokenDispatcher: gather_from_sequence_parallel_region
    # / reduce_scatter_to_sequence_parallel_region over expt_tp), the backward the mirrors; the
    # allgather and flex dispatchers reach the same ranks over the TP×EP group, priced alike
    # (the rank's share of the tokens, tokens / tp, as the expert GEMMs take them, with or without SP)
    share = np.where(S.sp, 1.0, 1.0 / ctx.tp)
    received = np.where(S.ag_dispatch, token_bytes * ep_n, busiest_bytes * llm.moe.top_k) * share
    etp_on = ctx.etp > 1
    etp_ag = ctx.ct("all_gather", received * ctx.etp, ctx.pl.expert_tp, etp_on)
    etp_rs = ctx.ct("reduce_scatter", received * ctx.etp, ctx.pl.expert_tp, etp_on)
    pair = ag.time_s + rs.time_s + etp_ag.time_s + etp_rs.time_s
    total = n * a2a.time_s + n_fwd * d8.time_s + (n - n_fwd) * d16.time_s + n / 2 * pair
    # the forward pass's calls: a dispatch and a combine (the recomputed forward's run in the backward)
    fwd_total = 2 * a2a.time_s + d8.time_s + d16.time_s + pair
    budget = np.where(S.overlap_ep | (S.schedule == mem.SCHEDULE_DUALPIPE), moe.compute_s, 0.0)
    rows = ((a2a, n, "ep"), (ag, n / 2, "ep"), (rs, n / 2, "ep"), (etp_ag, n / 2, "ep"), (etp_rs, n / 2, "ep"))
    rows += ((d8, n_fwd, "ep"), (d16, n - n_fwd, "ep")) if low else ((d16, n, "ep"),)
    exposed = hidden_cost(total, budget, ctx)
    # the exposed seconds split between the passes: as the calls are where nothing hides them (the
    # forward waits on its own dispatch and combine); overlapped, a microbatch's forward runs beside
    # another's backward (1F1B all-to-all overlap, DualPipe's F&B chunks) and what the merged compute
    # leaves exposed stretches it as its passes' compute is split
    fwd_share = np.where(budget > 0, moe.fwd_s / np.maximum(moe.compute_s, 1e-30), fwd_total / np.maximum(total, 1e-30))
    exposed_fwd = exposed * fwd_share
    return Term(z, z, rows=rows, moe_total_s=total, moe_exposed_s=exposed, moe_exposed_fwd_s=exposed_fwd)


def pp_term(ctx: _Context, dense: LayerTimes, moe: LayerTimes | None) -> Term:
    """Per microbatch: one send each way per chunk boundary. Under sequence parallelism each TP rank
    sends its 1/t of the activation; without it Megatron-Core sends the whole activation from every
    TP rank (p2p_communication.py sends the full tensor_shape since 2023), and Megatron-LM's SC'21
    scatter/gather sent 1/t slices, all-gathered over NVLink after (Strategy.pipeline_scatter_gather).

    The interleaved schedule posts each chunk's sends and receives asynchronously and waits for
    them only when the next chunk needs them (Megatron-Core schedules.py, overlap_p2p_comm, on by
    default and only for the interleaved schedule, arguments.py "--no-overlap-p2p-communication"),
    so in its steady state they hide behind the stage's other chunks; the warm-up and flush steps
    are not overlapped (--overlap-p2p-communication-warmup-flush is off by default): of the m·v
    forward chunk steps, (v − 1)·pp + pp − 1 are warm-up. 1F1B sends and receives blocking, as does
    a strategy with overlap_pp_comm off (Megatron before Megatron-Core, SC'21)."""
    S = ctx.S
    multi = ctx.pp > 1
    split = S.sp | S.pp_sg
    p2p = ctx.ct("send_recv", np.where(split, ctx.act_bytes / ctx.tp, ctx.act_bytes), ctx.pl.pp, multi)
    ag = ctx.ct("all_gather", ctx.act_bytes, ctx.pl.tp, multi & ~S.sp & S.pp_sg)
    n = np.where(multi, 2 * ctx.v, 0.0)
    total = n * (p2p.time_s + ag.time_s)
    # the mean stage's compute per microbatch (its v chunks), what the steady sends hide behind
    n_dense, n_moe = cmp.layer_kinds(ctx.llm)
    stage_compute = (n_dense * dense.compute_s + (n_moe * moe.compute_s if moe is not None else 0.0)) / ctx.pp
    interleaved = (S.schedule == mem.SCHEDULE_INTERLEAVED) & multi & S.overlap_pp
    warm = np.clip(((ctx.v - 1) * ctx.pp + ctx.pp - 1) / np.maximum(ctx.m_flush * ctx.v, 1.0), 0.0, 1.0)
    steady = total * (1.0 - warm)
    # the sends to a stage in another domain hold few channels; the NVLink all-gather a full set
    if not np.any(interleaved):
        return Term(total, total, rows=((p2p, n, "pp"), (ag, n, "pp")))
    sm = np.where(total > 0, (p2p.time_s * _send_recv_sm_share(ctx, ctx.pl.pp) + ag.time_s)
                  / np.maximum(p2p.time_s + ag.time_s, 1e-30), 1.0)
    exposed = np.where(interleaved, total * warm + hidden_cost(steady, stage_compute, ctx, sm), total)
    return Term(total, exposed, rows=((p2p, n, "pp"), (ag, n, "pp")))


@dataclass(frozen=True)
class StageTimes:
    """Per microbatch, the slowest stage (what paces the pipeline; under DualPipe the slowest rank,
    the mean of its two stages) and the mean stage."""

    pace_s: np.ndarray
    mean_s: np.ndarray
    pace_stage: np.ndarray  # which stage paces: 0 the first, 1 a middle one, 2 the last
    fwd_s: np.ndarray  # forward of the pace stage
    bwd_s: np.ndarray
    w_s: np.ndarray
    dense_layers: np.ndarray  # layers of the pace stage by kind
    moe_layers: np.ndarray
    compute_s: np.ndarray  # compute of the pace stage, its MoE layers' per-expert host wait included
    logits_on_pace: np.ndarray
    # of pace_s, the GPU's wait on the host: launches past the GPU's work (a host-bound stage) and the
    # MoE layers' per-expert launches (expert_host_s, part of compute_s)
    host_s: Any = 0.0
    expert_host_s: Any = 0.0


def stage_times(ctx: _Context, dense: LayerTimes, moe: LayerTimes | None, dense_exposed, moe_exposed,
                pp_exposed) -> StageTimes:
    st = ctx.stages
    per_layer_host = ctx.launch_s(1.0)
    logits, mtp, _ = _output_work(ctx, dense, moe)
    d_t = dense.compute_s + dense_exposed
    m_t = (moe.compute_s + moe_exposed) if moe is not None else 0.0
    # Megatron-Core's 1F1B all-to-all overlap (Strategy.overlap_ep_comm) runs each layer's forward and
    # backward as sub-stages of one merged schedule and synchronises between them, so the host's
    # launches cannot run ahead of the GPU: they add to each layer's GPU time instead of bounding it
    # (Megatron-LM docs/discussions/deepseek-v3-gb200-optimization, eb0783b6, §3.2: the overlap's
    # stage synchronisation "aggravates the CPU overhead, so the overall benefit is negative on the
    # GB200"). Captured CUDA graphs launch nothing from the host (per_layer_host is then 0).
    serial_host = ctx.S.overlap_ep & (ctx.llm.moe is not None) & (ctx.S.schedule != mem.SCHEDULE_DUALPIPE)

    def gpu_time(n, n_moe, extra):
        return (n - n_moe) * d_t + n_moe * m_t + extra + pp_exposed

    def launched(gpu, n):
        return np.where(serial_host, gpu + n * per_layer_host, np.maximum(gpu, n * per_layer_host))

    def stage(n, n_moe, extra):
        return launched(gpu_time(n, n_moe, extra), n)

    g_first = gpu_time(st.first, st.first_moe, np.where(ctx.pp == 1, logits + mtp, 0.0))
    g_last = gpu_time(st.last, st.last_moe, logits + mtp)
    g_mid = gpu_time(st.mid_max, st.mid_moe, 0.0)
    t_first = launched(g_first, st.first)
    t_last = launched(g_last, st.last)
    t_mid = np.where(ctx.pp > 2, launched(g_mid, st.mid_max), 0.0)
    n_dense_all, n_moe_all = cmp.layer_kinds(ctx.llm)
    # the mean stage: the whole model's GPU time over the stages, plus what each stage's host
    # launches add to it (a host-bound stage lasts its launches), so that the fill and drain of
    # even stages cost their own stage time (bubble_s)
    total = n_dense_all * d_t + n_moe_all * m_t + logits + mtp + ctx.pp * pp_exposed
    if np.any(per_layer_host > 0):
        n_mid = np.maximum(ctx.pp - 2, 0)
        short = np.maximum(st.mid_max - 1, 0)
        total = (total + (t_first - g_first) + np.where(ctx.pp > 1, t_last - g_last, 0.0)
                 + np.where(ctx.pp > 2, st.mid_long * (t_mid - g_mid)
                            + (n_mid - st.mid_long) * (stage(short, st.mid_min_moe, 0.0)
                                                       - gpu_time(short, st.mid_min_moe, 0.0)), 0.0))
    mean = total / ctx.pp
    # DualPipe: rank r holds stage r of one direction and stage pp-1-r of the other
    # (deepseek-ai/DualPipe examples/example_dualpipe.py: `full_modules[rank], full_modules[pp_size -
    # 1 - rank]`) and runs half the microbatches in each, so a rank's pace is the mean of its two
    # stages: the first stage pairs with the last, and a long middle stage with a short one unless
    # more than half the middle stages are long (they are the earliest, rank r pairs with pp-1-r).
    dual = ctx.dualpipe
    any_dual = bool(np.any(dual))
    if any_dual:
        mid_pair = dual & st.mid_mixed
        t_short = stage(np.maximum(st.mid_max - 1, 0), st.mid_min_moe, 0.0)
        t_mid = np.where(mid_pair & (ctx.pp > 2), 0.5 * (t_mid + t_short), t_mid)
        ends = 0.5 * (t_first + t_last)
        t_first, t_last = np.where(dual, ends, t_first), np.where(dual, ends, t_last)
        g_short = gpu_time(np.maximum(st.mid_max - 1, 0), st.mid_min_moe, 0.0)
        g_mid = np.where(mid_pair & (ctx.pp > 2), 0.5 * (g_mid + g_short), g_mid)
        g_ends = 0.5 * (g_first + g_last)
        g_first, g_last = np.where(dual, g_ends, g_first), np.where(dual, g_ends, g_last)
    pace_is = np.argmax(np.stack([t_first, t_mid, t_last]), axis=0)
    pace = np.maximum.reduce([t_first, t_mid, t_last])
    # the pace stage's launches past its GPU work (0 unless it is host-bound, or its host runs serially)
    launch_wait = pace - np.choose(pace_is, np.broadcast_arrays(g_first, g_mid, g_last))
    # the pace stage's layers by kind, and its share of the output layer, loss and MTP (on the last
    # stage, and the first when pp is 1)
    n_layers = np.choose(pace_is, [st.first, st.mid_max, st.last]).astype(float)
    n_moe = np.choose(pace_is, [st.first_moe, st.mid_moe, st.last_moe]).astype(float)
    lg_w = np.where((pace_is == 2) | (ctx.pp == 1), 1.0, 0.0)
    if any_dual:
        # a DualPipe pace rank: half of each end stage, or half of a long and a short middle stage
        ends_pace = dual & (pace_is != 1)
        short_pace = mid_pair & (pace_is == 1)
        n_layers = np.where(ends_pace, 0.5 * (st.first + st.last), np.where(short_pace, st.mid_max - 0.5, n_layers))
        n_moe = np.where(ends_pace, 0.5 * (st.first_moe + st.last_moe),
                         np.where(short_pace, 0.5 * (st.mid_moe + st.mid_min_moe), n_moe))
        lg_w = np.where(ends_pace, 0.5, lg_w)
    work = _stage_work(ctx, dense, moe, n_layers, n_moe, lg_w)
    return StageTimes(pace_s=pace, mean_s=mean, pace_stage=pace_is, **work,
                      host_s=np.maximum(launch_wait, 0.0) + work["expert_host_s"])


def _output_work(ctx: _Context, dense: LayerTimes, moe: LayerTimes | None):
    """Per microbatch: the output layer and loss (forward + backward, 2x), the MTP modules (each one
    more layer of the last kind plus the shared output head, on the last stage) and those modules'
    per-expert host wait."""
    logits = 3 * ctx.logits_s
    if not ctx.llm.mtp_layers:
        return logits, 0.0, 0.0
    unit = moe if moe is not None else dense
    return logits, ctx.llm.mtp_layers * (unit.compute_s + logits), ctx.llm.mtp_layers * unit.expert_host_s


def _stage_work(ctx: _Context, dense: LayerTimes, moe: LayerTimes | None, n_layers, n_moe, lg_w) -> dict:
    """A stage's StageTimes fields from its layers by kind and its share `lg_w` of the output layer,
    loss and MTP: passes, weight-gradient and compute seconds per microbatch, and its MoE layers' (and
    MTP modules') per-expert host wait."""
    logits, mtp, mtp_host = _output_work(ctx, dense, moe)
    n_dense = n_layers - n_moe
    lg = lg_w * (logits + mtp)

    def by_kind(attr):
        x = n_dense * getattr(dense, attr)
        return x + (n_moe * getattr(moe, attr) if moe is not None else 0.0)

    return dict(fwd_s=by_kind("fwd_s") + lg / 3, bwd_s=by_kind("bwd_s") + 2 * lg / 3, w_s=by_kind("w_s"),
                dense_layers=n_dense, moe_layers=n_moe, compute_s=by_kind("compute_s") + lg,
                logits_on_pace=np.broadcast_to(np.asarray(lg_w) > 0, ctx.shape),
                expert_host_s=by_kind("expert_host_s") + lg_w * mtp_host)


def stage_of_kind(ctx: _Context, stt: StageTimes, dense: LayerTimes, moe: LayerTimes | None, kind: int) -> StageTimes:
    """`stt` with the passes and layers of the first (kind 0), the longest middle (1) or the last (2)
    stage in place of the pace stage's: what that stage's own data-parallel sync hides behind (its
    output layer and loss, and MTP, on the last stage). Only those fields (_stage_work's) are that
    stage's (dp_term reads them); pace_s, mean_s and host_s stay the pace stage's. Not for DualPipe ranks,
    which hold two."""
    st = ctx.stages
    n_layers = (st.first, st.mid_max, st.last)[kind].astype(float)
    n_moe = (st.first_moe, st.mid_moe, st.last_moe)[kind].astype(float)
    lg_w = np.where(ctx.pp == 1, 1.0, 0.0) if kind == 0 else (1.0 if kind == 2 else 0.0)
    return dataclasses.replace(stt, pace_stage=np.full(ctx.shape, kind),
                               **_stage_work(ctx, dense, moe, n_layers, n_moe, lg_w))


def bubble_s(ctx: _Context, stt: StageTimes):
    """Fill and drain of the pipeline, per schedule (module docstring)."""
    S, pp, v = ctx.S, ctx.pp, ctx.v
    # A microbatch passes every stage once: m·t_max + Σ_i t_i − t_max; the fill/drain per stage is
    # t_fill = (p·mean − t_max)/(p − 1), which is the stage time when the stages are even.
    fill = np.maximum(pp * stt.mean_s - stt.pace_s, 0.0) / np.maximum(pp - 1, 1)
    # the split of F, B, W of the pace stage. Each pass lasts at least its launches: the stage's launch
    # floor split in thirds, forward, input gradients, weight gradients (each backward GEMM launches a
    # data- and a weight-gradient kernel). In a host-bound stage the passes last their launches
    # whatever the GPU, so a faster GPU leaves ZB-H1's and DualPipe's bubbles as they were; taken at
    # the GPU's time, its shorter W filled less of them and the iteration came out longer
    share = fill / np.maximum(stt.pace_s, 1e-30)
    launch_third = ctx.launch_s(stt.dense_layers + stt.moe_layers) / 3
    f = np.minimum(np.maximum(stt.fwd_s, launch_third) * share, fill)
    w = np.minimum(np.maximum(stt.w_s, launch_third) * share, fill - f)
    b_in = fill - f - w  # backward without the weight gradients
    mean = fill
    plain = (pp - 1) * fill
    zb = (pp - 1) * np.maximum(f + b_in - w, 0.0)
    # DeepSeek-V3 Table 2: (PP/2 − 1)(F&B + B − 3W), "B denotes the execution time of a full backward
    # chunk" (weight gradients included, b_in + w), F&B the overlapped forward and backward (the fill)
    dual = np.maximum(pp / 2 - 1, 0.0) * np.maximum(mean + (b_in + w) - 3 * w, 0.0)
    # interleaved: (pp − 1)/v of a stage's time, while the schedule has m >= pp microbatches. With
    # fewer (PyTorch's Interleaved1F1B runs them; Megatron-Core refuses, code 28) a microbatch still
    # passes all v·pp chunks one after another, so the m microbatches take (pp + (m − 1)/v)·t, not
    # (m + (pp − 1)/v)·t: (pp − m)(v − 1)/v·t more
    m_sched = ctx.m / np.maximum(S.flushes, 1)
    inter = (plain + np.maximum(pp - m_sched, 0.0) * (v - 1) * fill) / v
    return np.select([S.schedule == mem.SCHEDULE_INTERLEAVED, S.schedule == mem.SCHEDULE_ZERO_BUBBLE,
                      S.schedule == mem.SCHEDULE_DUALPIPE], [inter, zb, dual], plain)


@dataclass(frozen=True)
class StageParams:
    """Parameters per GPU (after TP / EP), dense and expert apart: of the pace stage (communication),
    of the most loaded rank (the optimizer step), of each kind of rank (memory), and per layer
    (ZeRO-3 per-layer gathers)."""

    pace_dense: np.ndarray
    pace_expert: np.ndarray
    peak_dense: np.ndarray
    peak_expert: np.ndarray
    # the largest layer the model has, as one GPU holds it (its dense side over TP, its experts over
    # expert TP x EP): the unit ZeRO-3 gathers whole
    layer_largest: np.ndarray
    # per kind of rank, stacked [first, middle, last]: the parameters each holds (memory takes the
    # worst rank's total); under DualPipe [first and last pair, middle pair, first and last pair]
    rank_dense: np.ndarray
    rank_expert: np.ndarray
    # of rank_dense, the embedding, the output layer and the final norm (no low-precision copies)
    rank_plain: np.ndarray = 0.0


def stage_params(ctx: _Context, stt: StageTimes) -> StageParams:
    llm, st, tp, pp = ctx.llm, ctx.stages, ctx.tp, ctx.pp
    S = ctx.S
    dense_p = cmp.dense_layer_params(llm)
    moe_ne, moe_e = cmp.moe_layer_params(llm) if llm.moe is not None else (0.0, 0.0)
    h, V = llm.hidden_size, llm.vocab_size
    etp = ctx.etp
    ep = S.ep.astype(float)
    # input embedding on the first stage, output layer and final norm on the last (a tied model
    # keeps a copy on each end when pp > 1); MTP modules on the last stage (the whole model's at
    # pp 1), and with them a copy of the input embedding where pp > 1: Megatron-Core builds the
    # embedding on every rank that runs the MTP modules (gpt_model.py: `if self.pre_process or
    # self.mtp_process: self.embedding = LanguageModelEmbedding(...)`)
    final_norm = cmp.final_norm_params(llm)
    mtp = cmp.mtp_params(llm)
    mtp_e = llm.mtp_layers * moe_e if llm.moe is not None else 0.0
    emb_first = V * h * np.where(pp == 1, 1 if llm.tied_embeddings else 2, 1) + np.where(pp == 1, final_norm, 0.0)
    emb_last = np.where(pp == 1, 0.0, V * h * (2 if llm.mtp_layers and not llm.tied_embeddings else 1) + final_norm)

    # what every TP rank holds whole (MLA's down-projections, the router), of each kind of layer
    rep_d = cmp.tp_replicated_layer_params(llm, False)
    rep_m = cmp.tp_replicated_layer_params(llm, True)

    def dense_side(n, n_moe, extra):
        rep = (n - n_moe) * rep_d + n_moe * rep_m
        return ((n - n_moe) * dense_p + n_moe * moe_ne + extra - rep) / tp + rep

    def expert_side(n_moe, extra=0.0):
        return (n_moe * moe_e + extra) / (etp * ep)

    first_d = dense_side(st.first, st.first_moe, emb_first + np.where(pp == 1, mtp - mtp_e, 0.0))
    last_d = np.where(pp == 1, first_d, dense_side(st.last, st.last_moe, emb_last + mtp - mtp_e))
    mid_d = np.where(pp > 2, dense_side(st.mid_max, st.mid_moe, 0.0), 0.0)
    # the middle stages differ where a dense prefix reaches past the first stage: the first middle
    # one (most microbatches in flight) and the pace one (most MoE layers); a middle rank's
    # parameters are the larger of the two (memory_term takes the larger activations likewise)
    mid_first_d = np.where(pp > 2, dense_side(st.mid_max, st.mid_first_moe, 0.0), 0.0)
    first_e = expert_side(st.first_moe, np.where(pp == 1, mtp_e, 0.0))
    last_e = np.where(pp == 1, first_e, expert_side(st.last_moe, mtp_e))
    mid_e = np.where(pp > 2, expert_side(st.mid_moe), 0.0)
    mid_first_e = np.where(pp > 2, expert_side(st.mid_first_moe), 0.0)
    pace_more = mid_d + mid_e >= mid_first_d + mid_first_e
    mid_rank_d = np.where(pace_more, mid_d, mid_first_d)
    mid_rank_e = np.where(pace_more, mid_e, mid_first_e)
    rank_d = np.stack(np.broadcast_arrays(first_d, mid_rank_d, last_d))
    rank_e = np.stack(np.broadcast_arrays(first_e, mid_rank_e, last_e))
    plain_first = emb_first / tp
    plain_last = np.where(pp == 1, plain_first, emb_last / tp)
    rank_plain = np.stack(np.broadcast_arrays(plain_first, 0.0 * plain_first, plain_last))
    # the stage that paces (stage_times): the first when it is the slowest, the last when it is (its
    # output layer), else a middle one; with one stage, the first
    pace_i = np.where(pp == 1, 0, stt.pace_stage)
    pace_d = np.choose(pace_i, [first_d, mid_d, last_d])
    pace_e = np.choose(pace_i, [first_e, mid_e, last_e])
    # DualPipe: a rank holds two stages (stage_times), the first and last or two middle ones, for
    # its pace and for its memory
    if np.any(ctx.dualpipe):
        short = np.maximum(st.mid_max - 1, 0)
        mid_pair_d = mid_d + np.where(st.mid_mixed, dense_side(short, st.mid_min_moe, 0.0), mid_d)
        mid_pair_e = mid_e + np.where(st.mid_mixed, expert_side(st.mid_min_moe), mid_e)
        pace_d = np.where(ctx.dualpipe, np.where(stt.logits_on_pace, first_d + last_d, mid_pair_d), pace_d)
        pace_e = np.where(ctx.dualpipe, np.where(stt.logits_on_pace, first_e + last_e, mid_pair_e), pace_e)
        rank_d = np.where(ctx.dualpipe, np.stack(np.broadcast_arrays(first_d + last_d, mid_pair_d, first_d + last_d)), rank_d)
        rank_e = np.where(ctx.dualpipe, np.stack(np.broadcast_arrays(first_e + last_e, mid_pair_e, first_e + last_e)), rank_e)
        ends = plain_first + plain_last
        rank_plain = np.where(ctx.dualpipe, np.stack(np.broadcast_arrays(ends, 0.0 * ends, ends)), rank_plain)
    peak_i = np.argmax(rank_d + rank_e, axis=0)
    peak_d = np.take_along_axis(rank_d, peak_i[None], axis=0)[0]
    peak_e = np.take_along_axis(rank_e, peak_i[None], axis=0)[0]
    rank_plain = np.broadcast_to(rank_plain, rank_d.shape)
    # ZeRO-3's gathered unit: the largest kind of layer the model has (a model of MoE layers only has
    # no dense one; a dense prefix's layer and an MoE layer are never one unit)
    n_dense_all, n_moe_all = cmp.layer_kinds(llm)
    dense_layer = (dense_p - rep_d) / tp + rep_d if n_dense_all else 0.0 * tp
    moe_layer = (moe_ne - rep_m) / tp + rep_m + moe_e / (etp * ep) if n_moe_all else 0.0 * tp
    return StageParams(pace_dense=pace_d, pace_expert=pace_e, peak_dense=peak_d, peak_expert=peak_e,
                       layer_largest=np.maximum(dense_layer, moe_layer) + np.zeros(ctx.shape),
                       rank_dense=rank_d, rank_expert=rank_e, rank_plain=rank_plain)


def low_precision_param_gather(ctx: _Context) -> np.ndarray:
    """Per strategy, whether the weights are kept and gathered in low precision
    (TrainingSpec.low_precision_param_gather)."""
    S = ctx.S
    return np.broadcast_to(ctx.training.low_precision_param_gather(S.zero, S.offload_opt | S.offload_w), ctx.shape)


def dp_term(ctx: _Context, stt: StageTimes, sp_: StageParams, stage_exposed_fwd_s=0.0, stage_exposed_bwd_s=0.0,
            memo: dict | None = None) -> Term:
    """Per iteration: gradient reduction and weight gathers of the stage `stt` and `sp_` describe (the
    pace stage's, or another's from widest_dp_term) (module docstring).
    DP traffic (on the NICs, or its own NVLink phase) hides behind the wall time of the passes:
    compute plus every exposed term of the stage (per microbatch, forward and backward): its layers'
    TP/CP traffic, its MoE layers' EP traffic, the pipeline's sends and the activation copies. Left
    out of the window, an exposed term that grows as the compute shrinks (the EP all-to-all hidden
    behind it) took the window away twice, and a faster GPU could finish later. memo: what depends on ctx alone (the HSDP groups, a bucket call's fixed cost), kept
    between calls on the same ctx."""
    memo = {} if memo is None else memo
    S, system = ctx.S, ctx.system
    shape, m = ctx.shape, ctx.m
    zero = S.zero
    ov = S.overlap_dp
    gather_bytes = np.where(low_precision_param_gather(ctx), 1.0, mem.WEIGHT_BYTES)
    grad_b = mem.gradient_bytes(ctx.training.grad_reduce_dtype)
    n_layers = stt.dense_layers + stt.moe_layers
    # a DualPipe rank holds two stages' parameters (stage_params) and runs each microbatch through
    # one of them (stage_times): a layer's parameters are the pair's over twice its layer count
    pair = np.where(ctx.dualpipe, 2.0, 1.0) if np.any(ctx.dualpipe) else 1.0
    # wall time of the passes (a host-bound stage lasts its launches: a third forward, two backward)
    host = ctx.launch_s(n_layers)
    gpu_f = stt.fwd_s + stage_exposed_fwd_s
    gpu_b = stt.bwd_s + stage_exposed_bwd_s
    # the two passes together last as long as the stage does (stage_times takes the launch floor
    # over the whole stage, not pass by pass), so the window never outlasts the stage it hides in:
    # the forward its GPU time or its third of the launches, the backward the rest. Neither then
    # shrinks by more than the stage does when the GPU gets faster (a share in proportion would
    # shorten a GPU-bound backward inside a launch-bound stage of unchanged length)
    stage_s = np.maximum(gpu_f + gpu_b, host)
    t_f = np.minimum(np.maximum(gpu_f, host / 3), stage_s)
    t_b = stage_s - t_f
    # a stage quicker than the pace waits between its passes for its neighbours' (the pipeline runs
    # at the pace, stage_times), and its sync runs on through those waits: its passes' windows
    # stretch to the pace. Without it a faster GPU shrank a quick stage's window while a host- or
    # communication-bound pace stage kept the pipeline as long, and the iteration came out longer
    stretch = np.maximum(stt.pace_s / np.maximum(t_f + t_b, 1e-30), 1.0)
    t_f, t_b = t_f * stretch, t_b * stretch
    per_layer_f = t_f / np.maximum(n_layers, 1)
    per_layer_b = t_b / np.maximum(n_layers, 1)
    total = np.zeros(shape)
    exposed = np.zeros(shape)
    rows = []
    dpcp = (S.dp * S.cp)
    sg = np.where(S.shard_group > 0, np.minimum(S.shard_group, dpcp), dpcp)
    pl = ctx.pl
    # gradient syncs per iteration under PP: one per pipeline schedule, at its last microbatch's
    # backward. Megatron-Core runs the iteration as one schedule; PyTorch pipelining runs one per
    # gradient-accumulation step (Strategy.pipeline_flushes), and its stage turns the gradient sync and
    # the reshard after backward back on for the last backward of each schedule step
    # (torch.distributed.pipelining.stage, backward_maybe_with_nosync: last_backward runs FSDP's
    # post_backward, DDP's reducer), so each step reduces and reshards anew
    n_sync = np.where(ctx.pp > 1, np.maximum(S.flushes, 1).astype(float), 1.0)
    # ZeRO-3 rounds: resharded weights are gathered every microbatch, otherwise once per sync;
    # gradients are reduced every microbatch without PP and once per schedule under PP (the
    # pipeline schedule defers the sync to its last microbatch)
    n_fwd = np.where(S.reshard, m, n_sync)
    n_red = np.where(ctx.pp > 1, n_sync, m)
    z3_f = np.zeros(shape)
    z3_b = np.zeros(shape)
    z3_r = np.zeros(shape)
    layer_wise = np.full(shape, ctx.training.optimizer == "muon") & (zero == 1)
    for kind in ("dense", "expert"):
        if kind == "dense":
            # per-layer gathers carry the stage's embedding / output layer too (FSDP wraps them as units)
            params, g_full, n_l = sp_.pace_dense, pl.grad, n_layers
            layer_p = params / np.maximum(n_l * pair, 1)
            # HSDP: shards over the first shard_group_size members of the DP×CP group, in its rank order
            shard_n = sg
            if np.any(S.shard_group > 0):
                if "hsdp" not in memo:
                    g_hsdp, g_rep = hsdp_groups(shard_n, S.tp, S.cp, S.dp, S.pp, system, order_code=S.order)
                    memo["hsdp"] = merge_groups(g_hsdp, g_full, shard_n >= g_full.size), g_rep
                g_shard, g_rep = memo["hsdp"]
            else:  # no HSDP: one shard group, no replicas
                g_shard, g_rep = g_full, _single(shape)
        else:
            if ctx.llm.moe is None:
                continue
            # expert weights shard over their whole expert-data-parallel group
            params, g_full, n_l = sp_.pace_expert, pl.expert_dp, stt.moe_layers
            layer_p = params / np.maximum(n_l * pair, 1)
            shard_n, g_shard, g_rep = g_full.size, g_full, _single(shape)
        hsdp = shard_n < g_full.size
        G = params * grad_b
        # the buffer goes bucket by bucket, one collective per bucket, the weights' gather in the
        # same buckets; Megatron-Core sizes every bucket, the expert buffers' too, from the dense
        # data-parallel group (distributed_data_parallel.py: max(40M, 1M x dp_group.size()) elements,
        # set once) and keeps one bucket when it does not overlap the sync. Its dp_group leaves
        # context parallelism out (process_groups_config.py, with_context_parallel=False); here the
        # group is the DP x CP one the gradients reduce over: the smaller buckets the DP group gives
        # at CP > 1 each pay the ring's per-step floor at hundreds of ranks, past the floor's fit
        # (collectives.yaml, 80 ranks), and move the MLPerf CP rows 4-18 points too slow
        bucket_b = np.where(S.bucket_bytes > 0, S.bucket_bytes, ctx.calib.dp_bucket_elements(pl.grad.size) * grad_b)
        bucket = np.minimum(1.0, bucket_b / np.maximum(G, 1.0))
        n_buckets = np.where(ov, np.ceil(np.maximum(G, 1.0) / bucket_b), 1.0)
        # ZeRO 0: all-reduce; 1-2: reduce-scatter + all-gather over the shard group; HSDP all-reduces
        # the reduced shard across the replicas. Muon's layer-wise distributed optimizer (ZeRO-1 under
        # Muon) all-reduces the gradients in the buckets (it runs without the distributed optimizer's
        # buffers: arguments.py sets use_distributed_optimizer False for an emerging optimizer) and
        # all-gathers the updated weights in one call after the step (layer_wise_optimizer.py
        # allgather_params, core_v0.17.0), not hidden, as the Megatron-Bridge recipes run it
        # (overlap_param_gather False; Megatron can overlap it with the next forward)
        ar = ctx.ct_buckets("all_reduce", G, n_buckets, g_full, (zero == 0) | layer_wise, memo=memo, key=(kind, "ar"))
        rs = ctx.ct_buckets("reduce_scatter", G, n_buckets, g_shard, ((zero == 1) | (zero == 2)) & ~layer_wise,
                            memo=memo, key=(kind, "rs"))
        ag = ctx.ct_buckets("all_gather", params * gather_bytes, np.where(layer_wise, 1.0, n_buckets), g_shard,
                            (zero == 1) | (zero == 2), memo=memo, key=(kind, "ag"))
        # (under ZeRO-3 the replicas' all-reduce goes per layer with its reduce-scatter, below)
        rep = ctx.ct_buckets("all_reduce", G / np.maximum(shard_n, 1), n_buckets, g_rep,
                             (zero >= 1) & (zero <= 2) & hsdp & ~layer_wise, memo=memo, key=(kind, "rep"))
        n_rs = np.where(zero == 2, m, n_sync)  # DeepSpeed stage 2 reduces every micro-step
        # the replicas' all-reduce follows each bucket's reduce-scatter (Megatron's distributed
        # optimizer instances, param_and_grad_buffer: both per bucket, overlapped with the backward)
        t_grad = ar.time_s + rs.time_s + rep.time_s
        # (DeepSpeed stage 2 reduces after every microbatch: each reduction hides behind that
        # microbatch's backward, not the interleaved schedule's closing window of several passes,
        # which counted m times over let faster compute expose more than it saved)
        e_grad = np.where(ov, chunked_exposed(t_grad, t_b, bucket, ctx, per_microbatch=zero == 2), t_grad) * n_rs
        e_ag = np.where(ov & ~layer_wise, chunked_exposed(ag.time_s, t_f, bucket, ctx), ag.time_s)
        total = total + n_rs * (ar.time_s + rs.time_s + rep.time_s) + ag.time_s
        exposed = exposed + np.where(zero <= 2, e_grad + e_ag, 0.0)
        rows += [(ar, n_rs, "dp"), (rs, n_rs, "dp"), (ag, 1.0, "dp"), (rep, n_rs, "dp")]
        # ZeRO-3 / FSDP: per layer, a gather before its forward and (reshard) before its backward,
        # a reduce-scatter after its backward
        z3 = zero == 3
        agf = ctx.ct("all_gather", np.where(S.qwz, 0.5, 1.0) * layer_p * gather_bytes, g_shard, z3)
        node = GroupArrays(size=g_shard.ranks_per_domain, ranks_per_domain=g_shard.ranks_per_domain,
                           domain_span=np.ones_like(g_shard.size), same_rail=np.ones(shape, bool),
                           extent_domains=np.ones_like(g_shard.size), tier=np.full(shape, TIER_HB))
        agb_node = ctx.ct("all_gather", layer_p * gather_bytes, node, z3 & S.reshard & S.hpz)
        agb_flat = ctx.ct("all_gather", layer_p * gather_bytes, g_shard, z3 & S.reshard & ~S.hpz)
        rs3 = ctx.ct("reduce_scatter", np.where(S.qgz, 0.25, 1.0) * layer_p * grad_b, g_shard, z3)
        # HSDP: each layer's reduced shard is all-reduced across the replicas right after its
        # reduce-scatter, on the same post-backward stream (PyTorch FSDP HYBRID_SHARD
        # _post_backward_hook; FSDP2 foreach_reduce on a 2-D mesh), so it hides behind the backward
        # of the layers still to come like the reduce-scatter does
        rep3 = ctx.ct("all_reduce", layer_p * grad_b / np.maximum(shard_n, 1), g_rep, z3 & hsdp)
        agb = agb_node.time_s + agb_flat.time_s
        # weight offload: each gather waits for its shard to come up from host memory and each
        # reduced gradient shard goes down; the copies pipeline with the collectives layer by layer
        link = max(system.gpu.host_link_bytes_per_s, 1.0)
        up = np.where(S.offload_w, layer_p * gather_bytes / np.maximum(shard_n, 1) / link, 0.0)
        down = np.where(S.offload_w, layer_p * grad_b / np.maximum(shard_n, 1) / link, 0.0)
        # per-layer seconds summed over the stage's layers (dense and expert gathers share the layers'
        # compute as their hiding budget, so they are priced together below)
        once = np.where(S.reshard, 1.0, pair) if np.ndim(pair) else 1.0  # a kept gather takes both stages
        z3_f = z3_f + np.where(z3, n_l * once * np.maximum(agf.time_s, up), 0.0)
        z3_b = z3_b + np.where(z3, n_l * np.maximum(agb, np.where(S.reshard, up, 0.0)), 0.0)
        z3_r = z3_r + np.where(z3, n_l * pair * (np.maximum(rs3.time_s, down) + rep3.time_s), 0.0)
        if kind == "dense":  # the dense parameters' share of the traffic (widest_dp_term)
            dense_total = total + n_fwd * z3_f + m * z3_b + n_red * z3_r
        rows += [(agf, n_l * once * n_fwd, "dp"), (agb_node, n_l * m, "dp"), (agb_flat, n_l * m, "dp"),
                 (rs3, n_l * pair * n_red, "dp"), (rep3, n_l * pair * n_red, "dp")]
    hide = ov & (S.prefetch > 0)
    n = np.maximum(n_layers, 1)

    def exposed_layers(c_all, t_layer):
        """n layer collectives (c_all seconds together), each prefetched behind the previous layer's
        compute; the first layer's cannot hide."""
        hidden = np.maximum(c_all / n, hidden_cost(c_all, (n - 1) * t_layer, ctx))
        return np.where(hide, hidden, c_all)

    e3 = (n_fwd * exposed_layers(z3_f, per_layer_f) + n_red * exposed_layers(z3_b + z3_r, per_layer_b)
          + (m - n_red) * exposed_layers(z3_b, per_layer_b))
    total = total + n_fwd * z3_f + m * z3_b + n_red * z3_r
    exposed = exposed + np.where(zero == 3, e3, 0.0)
    return Term(total, exposed, rows=tuple(rows), dense_total_s=dense_total)


def widest_dp_term(ctx: _Context, stt: StageTimes, sp_: StageParams, dense: LayerTimes, moe: LayerTimes | None,
                   tp: Term, tp_moe: Term, cp: Term, ep: Term, stage_exposed_fwd_s=0.0, stage_exposed_s=0.0) -> Term:
    """dp_term of the stage whose data-parallel sync leaves the most exposed. Every stage reduces its
    own gradients and gathers its own weights at the end of the schedule, each behind its own passes,
    and the iteration waits for the last to finish: the stage that paces the pipeline (stage_times)
    need not hold the most parameters (an uneven split's last stage carries the output layer and fewer
    layers; a middle one holds more), nor hide the least (the first stage's embedding has no passes to
    hide behind). Two stages are priced in full, each with its own parameters, passes and exposed
    TP/CP/EP traffic: the pace stage, and of the others (the first, the longest middle, the last) the one whose
    sync, the pace stage's scaled by the parameters it holds, outlasts its passes the most; the ledger
    rows are the chosen stage's. The pick is an estimate (under ZeRO-3 it counts that a stage's first
    layer never hides): priced in full, the third stage left more exposed (by over 0.01 % of an
    iteration) 31 of 10,435 feasible random layouts of DeepSeek-V3, Qwen3-30B, Llama-3 70B and
    GPT-OSS-120B, even and uneven, by up to 0.6 %, and 2.4 % for one GPT-OSS-120B layout (its
    sliding-window layers make the stages' passes unlike their parameters), where pricing all three
    would cost a third dp_term per evaluation (a pick by the window, the passes with their exposed
    traffic, missed as often). A DualPipe rank holds two stages: its pace rank's, as stage_params
    gives."""

    def of_stage(view: StageTimes, params: StageParams) -> Term:
        # every exposed term of the stage's passes per microbatch: its layers' TP, CP and EP traffic,
        # and the pipeline's sends and the activation copies (stage_exposed_*)
        n_d, n_e = view.dense_layers, view.moe_layers
        exp_f = (n_d * tp.exposed_fwd_s + n_e * tp_moe.exposed_fwd_s + (n_d + n_e) * cp.exposed_fwd_s
                 + n_e * ep.moe_exposed_fwd_s + stage_exposed_fwd_s)
        exp_all = (n_d * tp.exposed_s + n_e * tp_moe.exposed_s + (n_d + n_e) * cp.exposed_s
                   + n_e * ep.moe_exposed_s + stage_exposed_s)
        return dp_term(ctx, view, params, stage_exposed_fwd_s=exp_f, stage_exposed_bwd_s=exp_all - exp_f, memo=memo)

    memo: dict = {}

    pace = of_stage(stt, sp_)
    other = (ctx.pp > 1) & ~ctx.dualpipe
    if not np.any(other):
        return pace
    views = [stage_of_kind(ctx, stt, dense, moe, kind) for kind in (0, 1, 2)]
    # the sync outlasting the passes, each stage's sync estimated from the pace stage's, its dense and
    # its expert traffic each scaled by the parameters of that kind the stage holds (they go over
    # different groups); a stage that does not exist (a middle one at pp 2) or paces never counts
    dense_s = pace.dense_total_s / np.maximum(sp_.pace_dense, 1.0)
    # (a pace stage without experts, a dense prefix's, prices another's experts at the dense rate)
    expert_s = np.where(sp_.pace_expert > 0, (pace.total_s - pace.dense_total_s) / np.maximum(sp_.pace_expert, 1.0),
                        dense_s)
    # ZeRO-3's per-layer collectives hide behind the stage's other layers only (dp_term's
    # exposed_layers: the first layer's never hides), so a stage of few layers leaves the most
    # exposed whatever its passes
    z3 = ctx.S.zero == 3

    def excess_of(k):
        sync = dense_s * sp_.rank_dense[k] + expert_s * sp_.rank_expert[k]
        passes = views[k].fwd_s + views[k].bwd_s
        n = np.maximum(views[k].dense_layers + views[k].moe_layers, 1)
        return np.where(z3, np.maximum(sync / n, sync - passes * (n - 1) / n), sync - passes)

    excess = np.stack([excess_of(k) for k in range(3)])
    absent = np.stack([np.zeros(ctx.shape, bool), ctx.pp <= 2, np.zeros(ctx.shape, bool)]) | (
        np.arange(3)[:, None] == stt.pace_stage[None, :])
    kind = np.argmax(np.where(absent, -np.inf, excess), axis=0)

    # each strategy's entry of its stage's array, read from the three laid end to end (faster than
    # np.choose over 1e5 strategies)
    at = kind * kind.size + np.arange(kind.size)

    def pick(*per_kind):
        return np.concatenate([np.broadcast_to(x, ctx.shape) for x in per_kind]).take(at)

    view = dataclasses.replace(stt, pace_stage=kind, **{f: pick(*(getattr(v, f) for v in views)) for f in (
        "fwd_s", "bwd_s", "w_s", "dense_layers", "moe_layers", "compute_s", "logits_on_pace")})
    params = dataclasses.replace(sp_, pace_dense=pick(*sp_.rank_dense), pace_expert=pick(*sp_.rank_expert))
    alt = of_stage(view, params)
    wider = other & (alt.exposed_s > pace.exposed_s)
    return _select_term(wider, alt, pace, ctx.times_only) if np.any(wider) else pace


def _select_term(where, a: Term, b: Term, times_only: bool = False) -> Term:
    """Per strategy, term a where `where`, else b (same ledger rows, as dp_term always gives); with
    `times_only`, the rows' collectives carry their times alone (_Context.times_only)."""
    def pick(x, y):
        return np.where(where, x, y)

    rows = []
    for (ca, na, kind), (cb, nb, _) in zip(a.rows, b.rows):
        if not (ca.live or cb.live):
            rows.append((cb, nb, kind))
            continue
        if times_only:  # the rows' other fields are zeros already (_Context.times_only)
            c = _Coll(pick(ca.time_s, cb.time_s), cb.hb_bytes, cb.rail_bytes, cb.spine_bytes, cb.peers)
        else:
            c = _Coll(pick(ca.time_s, cb.time_s), pick(ca.hb_bytes, cb.hb_bytes), pick(ca.rail_bytes, cb.rail_bytes),
                      pick(ca.spine_bytes, cb.spine_bytes), pick(ca.peers, cb.peers))
        rows.append((c, pick(na, nb), kind))
    return Term(rows=tuple(rows), **{f: pick(getattr(a, f), getattr(b, f)) for f in (
        "total_s", "exposed_s", "exposed_fwd_s", "moe_total_s", "moe_exposed_s", "moe_exposed_fwd_s", "dense_total_s")})


def chunked_exposed(comm_s, pass_s, bucket, ctx: _Context, per_microbatch=False):
    """Exposed seconds of a stage's once-per-iteration data-parallel sync (gradient reduce, or the
    weight gather) overlapped with one pass (`pass_s`: backward, or forward, of one microbatch
    through the stage), bucket by bucket. One bucket never hides. Where `per_microbatch` (a
    reduction after every microbatch, DeepSpeed's stage 2), each hides behind its own microbatch's
    pass only, whatever the schedule.

    Under the interleaved schedule each of the v model chunks syncs on its own (Megatron-Core: one
    DDP buffer per chunk; schedules.py launches a chunk's grad sync when its last microbatch's
    backward is done and the next chunk's param sync when a chunk's forward starts), and the last
    group of g = min(m, pp) microbatches (m of the last pipeline schedule) runs chunk by chunk:
    chunk v-1's backward for its g microbatches, then chunk v-2's, ... The first chunk to finish has
    (1 + (v-1)·g) chunk passes ahead of it to hide behind, the last one only its own pass: exposed
    is the larger of the last chunk's part and what the whole window cannot hold. With v = 1 this is
    one pass."""
    v = np.where(per_microbatch, 1.0, ctx.v)
    g = np.minimum(ctx.m_flush, ctx.pp)
    window = pass_s * (1.0 + (v - 1.0) * g) / v
    last = hidden_cost(comm_s / v, pass_s / v, ctx)
    return np.maximum(bucket * comm_s, np.maximum(last, hidden_cost(comm_s, window, ctx)))


def _single(shape) -> GroupArrays:
    """A group of one rank (no traffic)."""
    one = np.ones(shape, np.int64)
    return GroupArrays(size=one, ranks_per_domain=one, domain_span=one, same_rail=np.ones(shape, bool),
                       extent_domains=one, tier=np.full(shape, TIER_HB))


def optimizer_term(ctx: _Context, sp_: StageParams):
    """The Adam step on the local shard of the most loaded stage (ZeRO >= 1 shards it). Offloaded
    (ZeRO-Offload, Ren et al. 2021 §4): the 16-bit gradients go to host memory and the updated
    16-bit weights come back over the GPU-host link, and the CPU runs the same memory-bound step on
    host memory bandwidth; the step does not overlap the next iteration (its weights are needed)."""
    S = ctx.S
    gpu = ctx.system.gpu
    dpcp = (S.dp * S.cp).astype(float)
    sg = np.where(S.shard_group > 0, np.minimum(S.shard_group, dpcp), dpcp)
    # expert weights shard over their whole expert data-parallel group (placement.expert_dp), as
    # their optimizer states in memory_term
    esg = np.maximum(ctx.pl.expert_dp.size.astype(float), 1.0)
    local = np.where(S.zero >= 1, sp_.peak_dense / sg + sp_.peak_expert / esg, sp_.peak_dense + sp_.peak_expert)
    on_gpu = cmp.optimizer_step_s(local, gpu.hbm_bandwidth_bytes_per_s, ctx.calib.compute)
    if ctx.training.optimizer == "muon":
        on_gpu = on_gpu + newton_schulz_term(ctx, sp_, sg, esg)
    if not np.any(S.offload_opt | S.offload_w):
        return on_gpu
    link = max(gpu.host_link_bytes_per_s, 1.0)
    host = max(gpu.host_memory_bandwidth_bytes_per_s, 1.0)
    # under weight offload the gradients went down and the weights come up layer by layer (dp_term)
    transfer = np.where(S.offload_w, 0.0, local * (mem.GRAD_BYTES + mem.WEIGHT_BYTES) / link)
    offloaded = transfer + local * ctx.calib.compute.optimizer_bytes_per_param / host
    return np.where(S.offload_opt | S.offload_w, offloaded, on_gpu)


def muon_layer_matrices(ctx: _Context) -> tuple[list, list, list]:
    """The matrices Muon orthogonalises per layer kind the model has (cmp.muon_matrices): a dense
    layer's, an MoE layer's dense side, one routed expert's; empty for a kind the model lacks."""
    n_dense, n_moe = cmp.layer_kinds(ctx.llm)
    dense = cmp.muon_matrices(ctx.llm, False, ctx.tp)[0] if n_dense else []
    moe, expert = cmp.muon_matrices(ctx.llm, True, ctx.tp, ctx.etp) if n_moe else ([], [])
    return dense, moe, expert


def newton_schulz_term(ctx: _Context, sp_: StageParams, dp_shard, expert_dp_shard):
    """Muon's orthogonalisation on the busiest rank: every hidden weight matrix it owns, priced per
    parameter at the model's mix of matrix shapes (cmp.muon_matrices, cmp.newton_schulz_cost). The
    embedding and output layer stay on AdamW. Under ZeRO-1 (Megatron's layer-wise distributed
    optimizer, layer_wise_optimizer.py shard_params) whole matrices are dealt out over the
    data-parallel ranks, the experts' over the expert data-parallel group: a rank orthogonalises its
    share, and no less than the largest single matrix, which one rank takes whole (with fewer matrices
    than ranks, the busiest rank is the one holding it). Without it every replica orthogonalises all of
    its matrices."""
    llm, S, prec = ctx.llm, ctx.S, ctx.prec
    steps = ctx.training.muon_ns_steps

    def cost(matrices):
        return cmp.newton_schulz_cost(matrices, steps, prec.hi_peak_flops, prec.hi_max_eff, ctx.calib.compute)

    n_dense, n_moe = cmp.layer_kinds(llm)
    dense_mats, moe_mats, expert_mats = muon_layer_matrices(ctx)
    t_d, p_d = cost(dense_mats)
    moe_t, moe_p = cost(moe_mats)
    t_d, p_d = n_dense * t_d + n_moe * moe_t, n_dense * p_d + n_moe * moe_p
    t_e, p_e = cost(expert_mats)
    per_d = t_d / np.maximum(p_d, 1.0)
    per_e = t_e / np.maximum(p_e, 1.0)
    # per kind of rank (first, middle, last): its Muon-managed parameters, the dense side less the
    # embedding and output layer, and its experts
    hidden = np.maximum(sp_.rank_dense - sp_.rank_plain, 0.0)
    own_d = np.where(S.zero >= 1, hidden / dp_shard, hidden)
    own_e = np.where(S.zero >= 1, sp_.rank_expert / expert_dp_shard, sp_.rank_expert)
    share = np.max(own_d * per_d + own_e * per_e, axis=0)
    largest = np.maximum.reduce([cost([mat])[0] + np.zeros(ctx.shape) for mat in dense_mats + moe_mats + expert_mats])
    return np.where(S.zero >= 1, np.maximum(share, largest), share)


def attention_output_saved_once(training: TrainingSpec) -> bool:
    """Whether the attention output projection keeps the 16-bit attention output it reads (the
    tensor the fused kernel saves for its own backward) instead of a quantised copy beside it.
    Megatron-Core sets Transformer Engine's save_original_input on linear_proj under every FP8
    recipe but delayed scaling and under FP4 (megatron/core/transformer/attention.py and
    multi_latent_attention.py: "the output of the fused core_attn is saved by itself, and
    linear_proj also saves the quantized tensor of this output ... set the linear_proj to save the
    original input tensors to avoid the extra memory usage", Megatron-LM 781e765818, core_v0.15.0,
    2025-08-19); torchao's float8 linear saves its high-precision input (float8_linear.py
    matmul_with_hp_or_float8_args: save_for_backward(input_hp, ...)). An 8-bit attention kernel's
    output is what the projection takes, with no 16-bit tensor: not this case."""
    if training.precision.value not in cmp.LOW_PRECISIONS or training.fp8_attention:
        return False
    if training.attention_output_saved is not None:  # the run states it
        return training.attention_output_saved == "original"
    return not (training.precision.value == "fp8" and training.fp8_recipe.value == "delayed")


class LayerActivations(NamedTuple):
    """Saved activation bytes of one layer per microbatch (layer_activation_bytes)."""
    dense: np.ndarray  # a dense layer's, as the strategy recomputes
    moe: np.ndarray  # an MoE layer's on the busiest EP rank (TrainingSpec.moe_load_balance)
    dense_full: np.ndarray  # a dense layer's without recompute: the working set rematerialised
    moe_full: np.ndarray  # an MoE layer's without recompute, on the busiest EP rank
    moe_mean: np.ndarray  # an MoE layer's at the mean routed load (the busiest rank's under forced balance)


def layer_activation_bytes(ctx: _Context) -> LayerActivations:
    """Saved activations of one layer per microbatch, dense and MoE, as recomputed and without
    recompute (the working set of a layer being rematerialised)."""
    llm, S, shape = ctx.llm, ctx.S, ctx.shape
    flash = S.kernel != cmp.KERNEL_UNFUSED
    saved_once = attention_output_saved_once(ctx.training)
    kw = dict(b=ctx.b, s=ctx.training.sequence_length, tp=ctx.tp, cp=ctx.cp, sp=S.sp, flash=flash,
              rc_modules=ctx.rc_modules, etp=ctx.etp,
              linear_input_bytes=ctx.prec.saved_input_bytes_per_element,
              act_input_bytes=np.where(S.act_in_fp8, cmp.FP8_BYTES, mem.ACT_BYTES), expert_load=ctx.expert_load,
              # a quantised output-projection input beside the 16-bit kernel's own output, or the
              # projection keeping that output itself (attention_output_saved_once)
              attn_out_copy_bytes=mem.ACT_BYTES if (ctx.prec.saved_input_bytes_per_element != mem.ACT_BYTES
                                                    and not ctx.training.fp8_attention and not saved_once) else 0.0,
              attn_out_input_bytes=mem.ACT_BYTES if saved_once else None,
              # a clamp run op by op keeps the 16-bit gate and up outputs it clamped
              clamp_input_bytes=np.where(((S.unfused & UNFUSED_CLAMP) > 0) | S.eager, mem.ACT_BYTES, 0.0))
    # Megatron's block method: the recomputed share of the layers keeps its input, the rest all of it
    f = np.where(S.recompute == mem.RECOMPUTE_FULL, ctx.full, 1.0)
    recompute = S.recompute
    # once per distinct layer shape and recompute setting of a search, read back per strategy
    rows = _distinct_rows(ctx.b, ctx.tp, ctx.cp, S.sp, S.kernel, ctx.rc_modules, np.broadcast_to(ctx.etp, shape),
                          S.act_in_fp8, S.unfused, S.eager, S.recompute)
    if rows is not None:
        rep, inv = rows
        kw = _take_rows(kw, rep, shape)
        recompute = recompute.take(rep)

    def kept(moe_layer: bool, **over):
        args = {**kw, **over}
        as_set = mem.activation_bytes_per_layer(llm, moe_layer=moe_layer, recompute=recompute, **args)
        none = mem.activation_bytes_per_layer(llm, moe_layer=moe_layer, recompute=np.zeros(recompute.shape, int),
                                              **args)
        if rows is not None:
            as_set, none = np.stack(np.broadcast_arrays(as_set, none)).astype(float).take(inv, axis=1)
        return f * as_set + (1.0 - f) * none, none

    act_d, full_d = kept(False)
    if llm.moe is None:
        zero = np.zeros(shape)
        return LayerActivations(act_d, zero, full_d, zero, zero)
    act_m, full_m = kept(True)
    act_m_mean = kept(True, expert_load=1.0)[0] if ctx.expert_load != 1.0 else act_m
    return LayerActivations(act_d, act_m, full_d, full_m, act_m_mean)


def activation_offload_term(ctx: _Context, dense: LayerTimes, moe: LayerTimes | None, acts):
    """Per microbatch per stage, exposed seconds in the forward and in the backward: the offloaded
    layers' activations go to host memory during the forward and come back during the backward over
    the GPU's host link (one direction each), overlapped with the stage's compute in that pass
    (Megatron's CPU offloading runs the copies on their own streams, a layer ahead). Zeros without
    activation offload."""
    S = ctx.S
    if not np.any(S.offload_act > 0):
        z = np.zeros(ctx.shape)
        return z, z
    n_dense, n_moe = cmp.layer_kinds(ctx.llm)
    n = n_dense + n_moe
    per_stage = n / ctx.pp
    act_d, act_m = acts.dense, acts.moe
    act = (n_dense * act_d + n_moe * act_m) / n
    fwd = (n_dense * dense.fwd_s + (n_moe * moe.fwd_s if moe is not None else 0.0)) / n
    bwd = (n_dense * dense.bwd_s + (n_moe * moe.bwd_s if moe is not None else 0.0)) / n
    layers = np.minimum(S.offload_act, np.maximum(np.floor(per_stage) - 1, 0))
    t = layers * act / max(ctx.system.gpu.host_link_bytes_per_s, 1.0)
    return hidden_cost(t, per_stage * fwd, ctx), hidden_cost(t, per_stage * bwd, ctx)


def memory_term(ctx: _Context, stt: StageTimes, sp_: StageParams, acts) -> dict[str, np.ndarray]:
    """HBM per GPU on the worst rank: each kind of rank (first stage, most microbatches in flight;
    middle; last, the logits) holds its own model states and activations, and the breakdown is
    that rank's. Under DualPipe a rank holds two stages (StageParams.rank_dense)."""
    llm, S, shape = ctx.llm, ctx.S, ctx.shape
    st = ctx.stages
    s = ctx.training.sequence_length
    mcal = ctx.calib.memory
    act_d, act_m, full_d, full_m = acts.dense, acts.moe, acts.dense_full, acts.moe_full

    def moe_layer_act(held_moe):
        # A learned router's busiest EP rank (ctx.expert_load) is a per-layer, per-microbatch maximum:
        # it paces each layer, but the rank holding the peak holds the sum over the MoE layers in its
        # stages, and the ranks that are busiest differ from layer to layer (each has its own router).
        # Over n independent layers the highest sum exceeds the mean by 1/√n of one layer's excess (the
        # same quantile of a sum of n like spreads over the EP ranks); the microbatches in flight are
        # taken as fully correlated (one router state per step), the conservative side.
        return acts.moe_mean + (act_m - acts.moe_mean) / np.sqrt(np.maximum(held_moe, 1.0))

    def stage_act(n, n_moe, held_moe=None):
        # activation offload: the offloaded layers' saved tensors leave HBM once written (the last
        # layer's stay: the backward starts on them)
        kept = 1.0 - np.minimum(S.offload_act, np.maximum(n - 1, 0)) / np.maximum(n, 1)
        per_moe = moe_layer_act(n_moe if held_moe is None else held_moe)
        return ((n - n_moe) * act_d + n_moe * per_moe) * kept

    def offloaded_act(n, n_moe):
        return (n - n_moe) * act_d + n_moe * moe_layer_act(n_moe) - stage_act(n, n_moe)

    inflight = mem.in_flight_factor(S.schedule, ctx.pp, ctx.m_flush, ctx.v)
    # working set of the layer being recomputed / back-propagated (Korthikanti §5: full recompute
    # rematerialises one layer at a time)
    work = np.where(ctx.full > 0, np.maximum(full_d, full_m), 0.0)
    tokens = ctx.b * s / ctx.cp
    # the loss's peak over the logits (memory.LOGIT_BYTES_AT_PEAK, Strategy.cross_entropy)
    logit_bytes = np.where(S.ce_eager, mem.LOGIT_BYTES_AT_PEAK["eager"], mem.LOGIT_BYTES_AT_PEAK["fused"])
    logits_act = tokens * llm.vocab_size / ctx.tp * logit_bytes
    # the MTP modules run on the last stage's last chunk (Megatron-Core multi_token_prediction.py:
    # mtp_on_this_rank = is_pipeline_last_stage; the first when pp is 1), each a layer with its own
    # output logits and loss, held like the main logits: from its forward to its backward, one
    # microbatch but under GPipe. An MTP module is one more MoE layer its rank holds (its 1/√n).
    mtp = llm.mtp_layers
    mtp_stage_moe = np.where(ctx.pp < 2, st.first_moe, st.last_moe) + mtp

    def mtp_act(held_moe):
        return mtp * ((moe_layer_act(held_moe) if llm.moe is not None else act_d)
                      + tokens * llm.vocab_size / ctx.tp * mem.LOGIT_BYTES_SAVED)

    first_held = st.first_moe + np.where(ctx.pp < 2, mtp, 0)
    first_act = (inflight * stage_act(st.first, st.first_moe, first_held) + work
                 + np.where(ctx.pp < 2, logits_act, 0.0))
    # the loss's saved tensors stay until their microbatch's backward: one microbatch's but under
    # GPipe, which runs every forward first and keeps each one's saved fp32 buffer (the peak's other
    # bytes exist during one backward; the interleaved schedule's warm-up chunks on the last rank are
    # earlier model chunks, without the output layer)
    logits_held = logits_act + (np.where(S.schedule == mem.SCHEDULE_GPIPE, ctx.m_flush, 1.0) - 1.0) * (
        tokens * llm.vocab_size / ctx.tp * mem.LOGIT_BYTES_SAVED)
    held = np.where(S.schedule == mem.SCHEDULE_GPIPE, ctx.m_flush, 1.0)
    last_act = (mem.last_stage_in_flight(S.schedule, ctx.pp, ctx.m_flush, ctx.v)
                * stage_act(st.last, st.last_moe, st.last_moe + mtp)
                + work + logits_held + held * mtp_act(mtp_stage_moe))
    first_act = first_act + np.where(ctx.pp < 2, held * mtp_act(mtp_stage_moe), 0.0)
    # the first middle stage holds the most microbatches, the pace one (the last long one, rank
    # mid_long) may hold more MoE layers: the larger of the two
    mid_act = np.where(ctx.pp > 2, np.maximum(
        mem.in_flight_factor(S.schedule, ctx.pp, ctx.m_flush, ctx.v, rank=1) * stage_act(st.mid_max, st.mid_first_moe),
        mem.in_flight_factor(S.schedule, ctx.pp, ctx.m_flush, ctx.v, rank=np.maximum(st.mid_long, 1))
        * stage_act(st.mid_max, st.mid_moe)) + work, 0.0)
    if np.any(ctx.dualpipe):
        # DualPipe: every rank holds PP + 1 microbatches' worth of a stage's activations (DeepSeek-V3
        # Table 2) over its two stages, the first and the last (with the logits) or two middle ones
        ends_moe = st.first_moe + st.last_moe + mtp
        pair_ends = (inflight * np.maximum(stage_act(st.first, st.first_moe, ends_moe),
                                           stage_act(st.last, st.last_moe, ends_moe))
                     + work + logits_act + mtp_act(ends_moe))
        # a middle pair: two long stages, or a long and a short one (StageLayout.mid_mixed)
        mid_held = st.mid_moe + np.where(st.mid_mixed, st.mid_min_moe, st.mid_moe)
        pair_mid = np.where(ctx.pp > 2, inflight * stage_act(st.mid_max, st.mid_moe, mid_held) + work, 0.0)
        first_act = np.where(ctx.dualpipe, pair_ends, first_act)
        last_act = np.where(ctx.dualpipe, pair_ends, last_act)
        mid_act = np.where(ctx.dualpipe, pair_mid, mid_act)
    rank_act = np.stack(np.broadcast_arrays(first_act, mid_act, last_act))
    tr = ctx.training
    dpcp = (S.dp * S.cp).astype(float)
    sg = np.where(S.shard_group > 0, np.minimum(S.shard_group, dpcp), dpcp)
    edp = np.maximum(ctx.pl.expert_dp.size.astype(float), 1.0)
    low = tr.precision.value in cmp.LOW_PRECISIONS
    # the cached low-precision weight and its transpose (Transformer Engine keeps a row-wise and a
    # column-wise copy), each at the recipe's bytes per element with its scales
    fp8_copy = 2.0 * ctx.prec.saved_input_bytes_per_element if low else 0.0
    low_gather = low_precision_param_gather(ctx)
    # weights kept in low precision only (--fp8-param-gather): that pair instead of the 16-bit weight
    weight_bytes = np.where(low_gather, fp8_copy, mem.WEIGHT_BYTES)
    # PyTorch FSDP / FSDP2 mixed precision keeps the sharded parameters in fp32 and they are the
    # optimizer's master weights: no 16-bit copy at rest (the gathered 16-bit layers are z3_extra)
    weight_bytes = np.where((S.zero >= 3) & tr.fp32_sharded_params, 0.0, weight_bytes)
    plain_weight_bytes = np.where((S.zero >= 3) & tr.fp32_sharded_params, 0.0, mem.WEIGHT_BYTES)
    rpn_dp = np.minimum(ctx.pl.grad.ranks_per_domain, ctx.pl.grad.size).astype(float)
    moment_bytes = 4.0 if tr.optimizer_state_dtype == "fp32" else 2.0
    states = dict(dp_shard=sg, expert_dp_shard=edp, zero_stage=S.zero, hpz=S.hpz, ranks_per_node_dp=rpn_dp,
                  grad_bytes=mem.gradient_bytes(tr.grad_accumulation_dtype))
    # the fp32 master (none in pure 16-bit training, TrainingSpec.fp32_master_weights) and Adam's two
    # moments; Muon keeps one fp32 momentum on the hidden matrices (TrainingSpec refuses 16-bit state
    # with it; the norms' and biases' few parameters among them are priced so too) and the embedding
    # and output layer stay on AdamW
    master_bytes = 4.0 if tr.fp32_master_weights else 0.0  # pure 16-bit training keeps no master copy
    adam_bytes = master_bytes + 2 * moment_bytes
    hidden_bytes = master_bytes + 4.0 if tr.optimizer == "muon" else adam_bytes
    # the embedding (a lookup) and the output layer (not a Transformer Engine module in Megatron;
    # torchao's float8 filter skips it too) keep no low-precision copy
    w_q, g_q, o_q = mem.model_state_bytes(sp_.rank_dense - sp_.rank_plain, sp_.rank_expert,
                                          extra_weight_bytes=np.where(low_gather, 0.0, fp8_copy),
                                          weight_bytes=weight_bytes, optimizer_bytes=hidden_bytes, **states)
    w_p, g_p, o_p = mem.model_state_bytes(sp_.rank_plain, 0.0, weight_bytes=plain_weight_bytes,
                                          optimizer_bytes=adam_bytes, **states)
    w_b, g_b, o_b = w_q + w_p, g_q + g_p, o_q + o_p
    if tr.optimizer == "muon":
        # Muon's layer-wise ZeRO-1 deals whole parameters out (layer_wise_optimizer.py shard_params,
        # core_v0.17.0, the Megatron-Bridge 26.02.01-26.04.01 containers'): the rank dealt a stage's
        # largest parameter (its embedding or output layer, with AdamW's state) holds all of its state,
        # not a 1/dp share of it. From Megatron-Core 0.18 the embedding and output layer go through the
        # distributed optimizer instead (0044db1f, #4771): this is then that rank's upper bound
        h = ctx.llm.hidden_size
        dense_mats, moe_mats, _ = muon_layer_matrices(ctx)
        largest_hidden = np.maximum.reduce([np.asarray(r * c, float) + np.zeros(ctx.shape) for r, c in dense_mats + moe_mats])
        largest = np.maximum(np.where(sp_.rank_plain > 0, ctx.llm.vocab_size * h / ctx.tp * adam_bytes, 0.0),
                             largest_hidden * hidden_bytes)
        o_b = o_b + np.where(S.zero == 1, largest * (1.0 - 1.0 / sg), 0.0)
    # ZeRO-3: the gathered weights of the layer in use and of the prefetched ones (16-bit with their
    # low-precision copies, or the low-precision pair alone where that is what is gathered); without
    # resharding the whole stage stays gathered
    gathered_bytes = np.where(low_gather, fp8_copy, mem.WEIGHT_BYTES + fp8_copy)
    gathered_layer = sp_.layer_largest * gathered_bytes
    # the layer in use and the prefetched ones, never more than the rank holds
    layers_held = np.stack(np.broadcast_arrays(st.first, st.mid_max, st.last)).astype(float)
    if np.any(ctx.dualpipe):  # a DualPipe rank holds two stages (stage_params)
        layers_held = np.where(ctx.dualpipe, np.stack(np.broadcast_arrays(
            st.first + st.last, 2 * st.mid_max, st.first + st.last)), layers_held)
    z3_extra = np.where(S.reshard, np.minimum(S.prefetch + 1, np.maximum(layers_held, 1.0)) * gathered_layer,
                        (sp_.rank_dense - sp_.rank_plain + sp_.rank_expert) * gathered_bytes
                        + sp_.rank_plain * mem.WEIGHT_BYTES)
    # ZeRO-3 / FSDP under a pipeline: the schedule defers the reduce-scatter to its last microbatch
    # (dp_term, n_red), so the stage's unsharded gradients accumulate until then beside their shards
    # (torch.distributed.pipelining stage.backward_maybe_with_nosync: FSDP2's
    # set_requires_gradient_sync(False) before the last backward). ZeRO-2 reduce-scatters every
    # microbatch (dp_term), so it holds no such buffer. A parameter its group does not shard (a shard
    # group of one rank: experts whose expert data-parallel group is EP itself) has one gradient, its
    # sharded gradient, and no unsharded copy beside it.
    unsharded_grads = np.where((S.zero >= 3) & (ctx.pp > 1),
                               (sp_.rank_dense * (sg > 1) + sp_.rank_expert * (edp > 1))
                               * mem.gradient_bytes(tr.grad_accumulation_dtype), 0.0)
    other = mcal.framework_reserved_bytes + np.where(S.zero == 3, z3_extra, 0.0) + unsharded_grads
    # offload: master weights and moments live in host memory (with the weights and gradients too
    # under weight offload), and the offloaded activations of the first stage's microbatches in flight
    opt_off = S.offload_opt | S.offload_w
    host_b = (np.where(opt_off, o_b, 0.0) + np.where(S.offload_w, w_b + g_b, 0.0)
              + inflight * offloaded_act(st.first, st.first_moe))
    o_b = np.where(opt_off, 0.0, o_b)
    w_b = np.where(S.offload_w, 0.0, w_b)
    g_b = np.where(S.offload_w, 0.0, g_b)
    rank_total = w_b + g_b + o_b + rank_act + other
    worst = np.argmax(rank_total, axis=0)[None]

    def on_worst(a):
        return np.take_along_axis(np.broadcast_to(a, rank_total.shape), worst, axis=0)[0]

    return dict(weights_bytes=on_worst(w_b), gradients_bytes=on_worst(g_b), optimizer_bytes=on_worst(o_b),
                activations_bytes=on_worst(rank_act), other_bytes=on_worst(other),
                memory_per_gpu_bytes=on_worst(rank_total), host_memory_bytes=on_worst(host_b))


def feasibility_codes(llm: LLMSpec, training: TrainingSpec, S: StrategyArrays, system: ClusterSystem,
                      calib: PerfCalibration | None = None, layout: StageLayout | None = None):
    """Reason code per strategy for structural (non-memory) infeasibility; 0 when none."""
    code = np.zeros(S.tp.shape, dtype=np.int64)

    def flag(cond, c):
        nonlocal code
        code = np.where((code == 0) & cond, c, code)

    n = S.tp * S.pp * S.dp * S.cp
    flag(n > system.n_gpus, 1)
    flag(training.global_batch_sequences % (S.dp * S.mbs) != 0, 2)
    # Transformer Engine and Megatron-Core refuse a precision the GPU has no tensor cores for
    # (FP8 before Hopper, MXFP8 and NVFP4 before Blackwell): no strategy of the run exists there
    flag(np.full(S.tp.shape, training.precision.value not in system.gpu.peak_flops), 22)
    etp = llm.expert_tp_for(S.tp, S.etp)
    # a dense FFN splits over tp; a MoE model's experts over expert_tp (code 23)
    ffn_bad = (llm.ffn_size % S.tp != 0) if llm.moe is None else (llm.moe.expert_ffn_size % etp != 0)
    flag((llm.heads % S.tp != 0) | (llm.hidden_size % S.tp != 0) | ((llm.moe is None) & ffn_bad), 3)
    flag((llm.moe is not None) & ffn_bad, 23)
    # Megatron stores the fp8 copy in its fused gated activations only (transformer_config.py:
    # "Storing activation input in FP8 is supported only for SwiGLU")
    flag(S.act_in_fp8 & (not llm.gated_mlp), 24)
    kv = llm.kv_heads_effective
    if llm.mla is None:
        flag((kv % S.tp != 0) & (S.tp % kv != 0), 4)
    flag(training.sequence_length % S.cp != 0, 5)
    flag(S.pp > llm.layers, 6)
    # chunks of at least one layer; the embedding and the loss may count as a layer each (Megatron
    # --account-for-embedding/loss-in-pipeline-split), as Llama-3.1 405B's 128 chunks on 126 layers
    flag((S.v > 1) & (S.pp * S.v > llm.layers + 2), 6)
    flag(~(layout or stage_layout(llm, S)).valid, 13)
    if llm.moe is not None:
        flag((llm.moe.experts % S.ep != 0) | ((S.tp * S.cp * S.dp) % (S.ep * etp) != 0), 7)
    else:
        flag(S.ep > 1, 10)
    if calib is not None:
        fwd, _ = calib.compute.attention_table(system.gpu.architecture)
        flag(np.isnan(fwd[S.kernel]), 8)
    no_host = system.gpu.host_link_bytes_per_s <= 0 or system.gpu.host_memory_bandwidth_bytes_per_s <= 0
    flag((S.offload_opt | S.offload_w | (S.offload_act > 0)) & no_host, 16)
    flag((S.cp_comm == CP_A2A) & (S.cp > 1) & ~llm.ulysses_fits(S.tp, S.cp), 18)
    flag(S.offload_w & (S.zero < 3), 19)
    # Megatron-Core's activation offload (--cpu-offloading-num-layers; transformer_config.py: "no support
    # for Pipeline parallelism with CPU offloading", "CPU offloading does not work when activation
    # recomputation is enabled"), as the recipes that use it run (pp 1, no recompute)
    flag((S.offload_act > 0) & ((S.pp > 1) | (S.recompute != 0)), 25)
    # transformer_config.py: "Bias in Moe is only supported when ETP==1"
    if llm.moe is not None and llm.linear_bias:
        flag(etp != 1, 26)
    # Megatron-Core's MoE layer refuses to train with tensor parallelism but without sequence
    # parallelism (moe_layer.py: "performance may degrade if MoE and tensor parallelism are enabled
    # without also enabling sequence parallelism", a ValueError), and torchtitan's TP plan always
    # shards the norms on the sequence; the dispatcher's per-rank tokens assume the split
    if llm.moe is not None:
        flag((S.tp > 1) & ~S.sp, 27)
    flag((S.schedule == mem.SCHEDULE_INTERLEAVED) & ((S.pp < 2) | (S.v < 2)), 11)
    flag((S.qwz | S.qgz | S.hpz) & (S.zero < 3), 12)
    # Megatron's layer-wise optimizer runs without the distributed optimizer, so it ignores
    # num_distributed_optimizer_instances and shards over the whole DP x CP group
    partial_group = (S.shard_group > 0) & (S.shard_group < S.dp * S.cp)
    flag(np.full(S.tp.shape, training.optimizer == "muon") & ((S.zero >= 2) | S.offload_opt | S.offload_w
                                                              | partial_group), 30)
    flag((S.shard_group > 0) & (((S.dp * S.cp) % np.maximum(S.shard_group, 1)) != 0), 14)
    m = training.global_batch_sequences // np.maximum(S.dp * S.mbs, 1)
    flushes = np.maximum(S.flushes, 1)
    flag(m % flushes != 0, 21)
    m = m // flushes  # per pipeline schedule
    # DualPipe's step takes an even chunk count of at least twice its ranks (deepseek-ai/DualPipe
    # dualpipe.py DualPipe.step: `num_chunks % 2 == 0 and num_chunks >= num_ranks * 2`)
    flag((S.schedule == mem.SCHEDULE_DUALPIPE) & ((S.pp < 2) | (S.pp % 2 != 0) | (m % 2 != 0) | (m < 2 * S.pp)), 15)
    # Megatron-Core's interleaved schedule runs the microbatches in groups of pp per virtual stage
    # (microbatch_group_size_per_vp_stage, default pp) and raises when m < pp or m is not a multiple
    # of the group (schedules.py forward_backward_pipelining_with_interleaving: "should range in
    # [PP, M]", "should be 0, or larger than or equal to the pipeline-parallel size"). PyTorch's
    # ScheduleInterleaved1F1B (torchtitan's; the batch-first layout here) runs max(1, m // pp) rounds
    # and needs m to be a multiple of them, so it also runs m < pp (bubble_s prices that case)
    inter = (S.schedule == mem.SCHEDULE_INTERLEAVED) & (S.pp >= 2)
    rounds = np.maximum(m // np.maximum(S.pp, 1), 1)
    group = np.where(S.batch_first, rounds, np.maximum(S.pp, 1))
    flag(inter & (m % group != 0), 28)
    if llm.moe is not None:
        # Megatron-Core's 1F1B all-to-all overlap (overlap_moe_expert_parallel_comm) runs only where
        # TransformerConfig.__post_init__ lets it: expert parallelism, the alltoall or flex (DeepEP)
        # dispatcher, virtual stages when pp > 1, no full recomputation, no 'moe' recompute module
        # (M3573, 45b8eac95) and at most one MTP layer. DualPipe overlaps its own way.
        megatron_overlap = S.overlap_ep & (S.schedule != mem.SCHEDULE_DUALPIPE)
        refused = ((S.ep < 2) | S.ag_dispatch | ((S.pp > 1) & ((S.schedule != mem.SCHEDULE_INTERLEAVED) | (S.v < 2)))
                   | (S.recompute == mem.RECOMPUTE_FULL)
                   | ((S.recompute == mem.RECOMPUTE_SELECTIVE) & ((S.rc_modules & mem.RC_MOE) != 0))
                   | (llm.mtp_layers > 1))
        flag(megatron_overlap & refused, 29)
    return code


# The quantities a search ranks and filters by (evaluate_many's VectorMetrics): with `summary`,
# iteration_arrays returns only these and skips the per-fabric traffic ledger and the time breakdown,
# which none of them reads.
SUMMARY_KEYS = ("code", "iteration_time_s", "time_to_train_s", "tokens_per_s", "mfu", "memory_per_gpu_bytes")


def iteration_arrays(llm: LLMSpec, training: TrainingSpec, S: StrategyArrays, system: ClusterSystem,
                     calib: PerfCalibration, *, summary: bool = False) -> dict[str, np.ndarray]:
    """All quantities of the model for every strategy in S (with `summary`, those of SUMMARY_KEYS).
    Infeasible rows carry a reason code; their numbers are whatever the formulas give (possibly inf
    or nan for groups larger than the system)."""
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        batches = np.unique(S.batch)
        if len(batches) == 1:
            out = _iteration_arrays(llm, training.with_batch(int(batches[0]) or training.global_batch_sequences),
                                    S, system, calib, summary)
            return _flag_batch(training, S, out)
        # Strategies that run different batches (a batch tolerance): one pass per batch, the rows put
        # back in their order.
        n = len(S)
        out: dict[str, np.ndarray] = {}
        for b in batches:
            idx = np.flatnonzero(S.batch == b)
            part = _iteration_arrays(llm, training.with_batch(int(b) or training.global_batch_sequences),
                                     S.take(idx), system, calib, summary)
            for k, v in part.items():
                v = np.asarray(v)
                if v.ndim == 0:
                    v = np.full(len(idx), v)
                if k not in out:
                    out[k] = np.empty((n,) + v.shape[1:], dtype=v.dtype)
                elif out[k].dtype != v.dtype:
                    out[k] = out[k].astype(np.result_type(out[k].dtype, v.dtype))
                out[k][idx] = v
        return _flag_batch(training, S, out)


def _flag_batch(training: TrainingSpec, S: StrategyArrays, out: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Reason 20 where a strategy's own batch is outside the training's batch form."""
    if not S.batch.any():
        return out
    # per distinct batch, not per strategy: a chunk runs few batches
    batches, inverse = np.unique(S.batch, return_inverse=True)
    allowed = np.array([b == 0 or training.batch_allowed(int(b)) for b in batches], bool)[inverse.reshape(-1)]
    out["code"] = np.where((out["code"] == 0) & ~allowed, 20, out["code"])
    return out


def _iteration_arrays(llm, training, S, system, calib, summary=False):
    ctx = _context(llm, training, S, system, calib, times_only=summary)
    code = feasibility_codes(llm, training, S, system, calib, layout=ctx.stages)
    shape, m = ctx.shape, ctx.m
    dense = compute_term(ctx, ctx.dense, False)
    moe = compute_term(ctx, ctx.moe, True) if ctx.moe is not None else None
    tp, cp, pp, ep = tp_term(ctx, dense), cp_term(ctx, dense), pp_term(ctx, dense, moe), ep_term(ctx, moe)
    tp_moe = tp_term(ctx, moe, tp_blocks(llm, True)) if moe is not None else tp
    layer_exposed = tp.exposed_s + cp.exposed_s
    moe_layer_exposed = tp_moe.exposed_s + cp.exposed_s + ep.moe_exposed_s
    acts = layer_activation_bytes(ctx)
    offload_fwd_s, offload_bwd_s = activation_offload_term(ctx, dense, moe, acts)
    stage_exposed = pp.exposed_s + offload_fwd_s + offload_bwd_s
    # the pipeline's sends go half each way (activations forward, their gradients backward)
    stage_exposed_fwd = 0.5 * pp.exposed_s + offload_fwd_s
    stt = stage_times(ctx, dense, moe, layer_exposed, moe_layer_exposed, stage_exposed)
    # every pipeline schedule of the iteration fills and drains the pipeline
    flushes = S.flushes.astype(float)
    bubble = flushes * bubble_s(ctx, stt)
    t_pipe = m * stt.pace_s + bubble
    # the same work split evenly over the stages (every stage at the mean): the ideal of uneven stages
    even = dataclasses.replace(stt, pace_s=stt.mean_s)
    even_pipe = m * stt.mean_s + flushes * bubble_s(ctx, even)
    sp_ = stage_params(ctx, stt)
    dp = widest_dp_term(ctx, stt, sp_, dense, moe, tp, tp_moe, cp, ep, stage_exposed_fwd, stage_exposed)
    t_opt = optimizer_term(ctx, sp_)
    t_iter = t_pipe + dp.exposed_s + t_opt + calib.compute.framework_per_iteration_s

    mem_out = memory_term(ctx, stt, sp_, acts)
    code = np.where((code == 0) & (mem_out["memory_per_gpu_bytes"] > system.gpu.hbm_bytes), 9, code)
    code = np.where((code == 0) & (mem_out["host_memory_bytes"] > system.gpu.host_memory_bytes), 17, code)

    # ---- FLOPs, MFU, traffic ----
    n_gpus = (S.tp * S.pp * S.dp * S.cp).astype(float)
    peak = system.gpu.peak_flops.get(training.precision.value, system.gpu.peak_flops["bf16"])
    flops = flop_counts(llm, training, S.recompute, ctx.rc_modules, S.kernel != cmp.KERNEL_UNFUSED, shape,
                        full_share=ctx.full, replay_needed=S.replay_needed)
    tokens_iter = float(training.global_batch_sequences * training.sequence_length)
    if summary:
        return dict(code=code, iteration_time_s=t_iter, time_to_train_s=t_iter * training.total_tokens / tokens_iter,
                    tokens_per_s=tokens_iter / t_iter, mfu=flops["model"] / (t_iter * n_gpus * peak),
                    memory_per_gpu_bytes=mem_out["memory_per_gpu_bytes"])

    ledger = _Ledger(shape)
    n_dense_pace, n_moe_pace = stt.dense_layers, stt.moe_layers
    n_layers_pace = n_dense_pace + n_moe_pace
    tp_terms = ((tp, n_dense_pace * m), (tp_moe, n_moe_pace * m)) if moe is not None else ((tp, n_layers_pace * m),)
    for term, per in tp_terms + ((cp, n_layers_pace * m), (ep, n_moe_pace * m), (pp, m), (dp, 1.0)):
        for c, count, kind in term.rows:
            ledger.add(c, count * per, kind)
    # the GPU's wait on the host: the per-iteration work, a host-bound pace stage's launches and the
    # MoE layers' per-expert launches (those sit in the layers' compute, and leave compute_s here)
    host_s = calib.compute.framework_per_iteration_s + m * stt.host_s
    compute_s = m * (stt.compute_s - stt.expert_host_s) + t_opt
    tp_s = m * (n_dense_pace * tp.total_s + n_moe_pace * tp_moe.total_s)
    cp_s = m * n_layers_pace * cp.total_s
    ep_s = m * n_moe_pace * ep.moe_total_s
    pp_s = m * pp.total_s
    exposed = t_iter - compute_s - bubble - host_s
    comm_total = tp_s + cp_s + ep_s + pp_s + dp.total_s
    tier_bytes = ledger.bytes
    return dict(
        code=code, iteration_time_s=t_iter, time_to_train_s=t_iter * training.total_tokens / tokens_iter,
        tokens_per_s=tokens_iter / t_iter, mfu=flops["model"] / (t_iter * n_gpus * peak),
        mfu_causal=flops["model_causal"] / (t_iter * n_gpus * peak),
        hfu=flops["hardware"] / (t_iter * n_gpus * peak),
        model_flops=flops["model"] + np.zeros(shape), model_flops_causal=flops["model_causal"] + np.zeros(shape),
        hardware_flops=flops["hardware"], n_gpus=n_gpus, microbatches=m,
        compute_s=compute_s, tp_s=tp_s, cp_s=cp_s, pp_s=pp_s, dp_s=dp.total_s, ep_s=ep_s, bubble_s=bubble,
        host_s=host_s,
        pipeline_s=t_pipe, even_pipeline_s=even_pipe, stage_pace_s=stt.pace_s, stage_mean_s=stt.mean_s,
        exposed_comm_s=exposed, overlapped_comm_s=np.maximum(0.0, comm_total - exposed),
        **mem_out,
        hb_bytes=tier_bytes[TIER_HB], rail_bytes=tier_bytes[TIER_RAIL], spine_bytes=tier_bytes[TIER_SPINE],
        hb_time_s=ledger.time[TIER_HB], rail_time_s=ledger.time[TIER_RAIL], spine_time_s=ledger.time[TIER_SPINE],
        **_traffic(ctx, ledger, tp, cp, pp, ep, dp, n_gpus),
        **{f"type_{k}": v for k, v in ledger.type_bytes().items()},
    )


def _traffic(ctx, ledger, tp, cp, pp, ep, dp, n_gpus):
    """Pair fractions: flat (shared groups) and under the algorithms chosen (per group, the most peers
    any of its collectives has; summed over the groups)."""
    S = ctx.S
    flat = _pair_fraction(S, n_gpus)

    def peers(term):
        return np.maximum.reduce([c.peers for c, _, _ in term.rows]) if term.rows else np.zeros(ctx.shape)

    p2p_peers = pp.rows[0][0].peers
    pp_nb = np.where(S.pp > 2, 2, np.where(S.pp == 2, 1, 0))
    tp_peers = np.maximum(peers(tp), pp.rows[1][0].peers)
    total = tp_peers + peers(cp) + peers(dp) + peers(ep) + pp_nb * p2p_peers
    return dict(pair_fraction_flat=flat,
                # the peers under the chosen algorithms are members of the groups the flat view counts
                pair_fraction_algorithm=np.minimum(total / np.maximum(n_gpus - 1, 1), flat))


def _pair_fraction(S: StrategyArrays, n_gpus):
    """Flat view: fraction of the other GPUs each GPU shares a parallel group with -- every member of
    its TP, CP, DP groups, its pipeline neighbours and the EP peers not already counted -- as if every
    collective connected all of its members (an upper bound on the pairs that talk)."""
    pp_nb = np.where(S.pp > 2, 2, np.where(S.pp == 2, 1, 0))
    ep_extra = np.where(S.cp > 1, np.maximum(0, (S.ep - 1) - (np.minimum(S.ep, S.cp) - 1)
                                              - (np.maximum(S.ep // S.cp, 1) - 1)), 0)
    peers = (S.tp - 1) + (S.cp - 1) + (S.dp - 1) + pp_nb + ep_extra
    return peers / np.maximum(n_gpus - 1, 1)


# ---------------------------------------------------------------------------------------------
# FLOP conventions
# ---------------------------------------------------------------------------------------------


def layer_flops_per_token(llm: LLMSpec, moe_layer: bool, s: int) -> tuple[float, float, float]:
    """(attention linear-layer FLOPs, MLP FLOPs, non-causal attention-core FLOPs) of one layer's
    forward, per token; the MoE MLP counts the top-k experts, the shared experts and the router."""
    h = llm.hidden_size
    f_qkv, _, f_out, dqk, dv = cmp.attention_projection_flops_per_token(llm, np.ones(1))
    attn_lin = float(np.ravel(f_qkv)[0] + np.ravel(f_out)[0])
    gate = 2.0 if llm.gated_mlp else 1.0
    if moe_layer and llm.moe is not None:
        moe = llm.moe
        mlp = (2 * moe.top_k * moe.capacity_factor * (gate + 1) * moe.expert_ffn_size * h + 2 * moe.experts * h
               + 2 * (gate + 1) * moe.shared_experts * moe.shared_ffn_size * h)
    else:
        mlp = 2 * (gate + 1) * llm.ffn_size * h
    return attn_lin, mlp, 2.0 * s * llm.heads * (dqk + dv)


def flop_counts(llm: LLMSpec, training: TrainingSpec, recompute, rc_modules, fused, shape, full_share=1.0,
                replay_needed=False) -> dict:
    """FLOPs per iteration under three conventions (what each source's TFLOP/s means,
    training-runs-modern.md): "model" counts 3 forward passes with non-causal attention and no
    recompute (Megatron ≤ 2024, NeMo ≤ 25.07, PaLM/MPT/torchtitan); "model_causal" halves the attention
    core (Megatron-Core since 2025-03, Megatron-Bridge, AutoModel); "hardware" counts what executes:
    causal skipping in fused kernels (the lower triangle plus the diagonal tiles), and the recomputed
    forward (all of it under full recompute, the selected modules under selective; without the MLP's
    down projections where recomputation replays only what the backward reads)."""
    s, B = training.sequence_length, training.global_batch_sequences
    tokens = float(B * s)
    h = llm.hidden_size
    n_dense, n_moe = cmp.layer_kinds(llm)
    a_d, mlp_d, core_d = layer_flops_per_token(llm, False, s)
    a_m, mlp_m, core_m = layer_flops_per_token(llm, True, s) if n_moe else (0.0, 0.0, 0.0)
    mlp_dense, mlp_moe = n_dense * mlp_d, n_moe * mlp_m
    out_proj = (n_dense + n_moe) * float(np.ravel(cmp.attention_projection_flops_per_token(llm, np.ones(1))[2])[0])
    lin = n_dense * a_d + n_moe * a_m + mlp_dense + mlp_moe
    core = n_dense * core_d + n_moe * core_m
    # DeepSeek-V3 MTP modules (§2.2): a layer of the last kind, the 2h -> h projection and the
    # shared output head each
    if llm.mtp_layers:
        last = (a_m, mlp_m, core_m) if n_moe else (a_d, mlp_d, core_d)
        lin += llm.mtp_layers * (last[0] + last[1] + 2 * 2 * h * h + 2 * h * llm.vocab_size)
        core += llm.mtp_layers * last[2]
    logits = 2.0 * h * llm.vocab_size
    model = 3.0 * tokens * (lin + core + logits)
    model_causal = 3.0 * tokens * (lin + 0.5 * core + logits)
    exec_core = np.where(fused, float(cmp.attended_fraction(llm, s, 1)) * core, core)
    base = 3.0 * tokens * (lin + logits + exec_core)
    rc = np.asarray(rc_modules)
    alternate = 0.0
    if np.any(rc & mem.RC_ALT_MM):
        alt_d = cmp.alternate_matmul_flops_per_token(llm, False)
        alt_m = cmp.alternate_matmul_flops_per_token(llm, True) if n_moe else (0.0, 0.0, 0.0, 0.0)
        alternate = n_dense * (alt_d[0] + alt_d[2]) + n_moe * (alt_m[0] + alt_m[2])
    sel = tokens * (exec_core * ((rc & mem.RC_CORE_ATTN) > 0) + mlp_dense * ((rc & mem.RC_MLP) > 0)
                    + mlp_moe * ((rc & mem.RC_MOE) > 0) + out_proj * ((rc & mem.RC_ATTN_OUT) > 0)
                    + alternate * ((rc & mem.RC_ALT_MM) > 0))
    # the dense layers' down projections a replay of only what the backward reads skips
    # (LayerWork.mlp_out_gemm_s: none in MoE layers, none where dropout follows the MLP)
    unread = np.asarray(replay_needed, float) * tokens * (
        0.0 if llm.dropout else n_dense * 2.0 * llm.ffn_size * h)
    sel = sel - unread * ((rc & mem.RC_MLP) > 0)
    extra = np.where(np.asarray(recompute) == mem.RECOMPUTE_FULL, full_share * (tokens * (lin + exec_core) - unread),
                     np.where(np.asarray(recompute) == mem.RECOMPUTE_SELECTIVE, sel, 0.0))
    return dict(model=model, model_causal=model_causal, hardware=base + extra + np.zeros(shape))


def model_flops_per_iteration(llm: LLMSpec, training: TrainingSpec) -> float:
    """3 × forward FLOPs (forward + 2× backward), attention counted non-causally, no recompute: the
    MFU numerator of Chowdhery et al. 2022 (PaLM) App. B and Narayanan et al. 2021 without the
    recomputation term."""
    return float(flop_counts(llm, training, np.zeros(1, int), np.zeros(1, int), np.zeros(1, bool), (1,))["model"])


def hardware_flops_per_iteration(llm, training, recompute, flash_exec: bool, shape, rc_modules=None):
    """Executed FLOPs: 3 × forward + the recomputed forward (full) or the selected modules."""
    rc = np.full(shape, mem.RC_CORE_ATTN) if rc_modules is None else rc_modules
    rc = np.where(np.asarray(recompute) == mem.RECOMPUTE_SELECTIVE, rc, 0)
    return flop_counts(llm, training, recompute, rc, np.full(shape, flash_exec), shape)["hardware"]


def megatron_paper_flops(llm: LLMSpec, training: TrainingSpec) -> float:
    """F = 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)) (Narayanan et al. SC'21 eq. (3); training-runs.md)."""
    B, s = training.global_batch_sequences, training.sequence_length
    l, h, V = llm.layers, llm.hidden_size, llm.vocab_size
    return 96.0 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))


def binding_tier_names(hb_time, rail_time, spine_time, iteration_time, compute_floor=0.01):
    """The fabric level with the most communication time, or "compute" when every level's time is
    below `compute_floor` of the iteration."""
    stack = np.stack([hb_time, rail_time, spine_time])
    idx = np.argmax(stack, axis=0)
    names = np.array(TIER_NAMES)[idx]
    return np.where(stack.max(axis=0) < compute_floor * iteration_time, "compute", names)


# ---------------------------------------------------------------------------------------------
# V1 reduced model (railonly.md §3; Wang et al., arXiv 2307.12169v1, Eqs. 1-3)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class V1Inputs:
    """Symbols of railonly.md §3. Bandwidths in bytes/s per GPU, compute in FLOP/s per GPU."""

    n_gpus: int  # N
    hb_size: int  # K
    layers: int  # l
    block_bytes: float  # S_T: bytes of one transformer block (parameters x bytes per parameter)
    d_model: int
    batch: float  # b: the batch, in tokens (b·d_model·bytes is a TP message)
    m_cc: int  # TP collectives per block: 8 for GPT/OPT, 12 for PaLM
    flops_per_iteration: float  # M_flop
    hb_bandwidth: float  # B_F
    nic_bandwidth: float  # B_S
    compute: float  # C
    act_bytes: float = 2.0  # bytes per activation element in the TP messages


def v1_iteration_time_s(x: V1Inputs, n_m) -> np.ndarray:
    """Eq. (1): T_iter = M_flop/(N·C) + l·[2·S_T·(N_Df−1)/(N·B_S)
    + (1/B_F)·(2·S_T·(N_Ds−1)/K + M_cc·b·d_model·(N_M−1)/N)], with N_Ds = K/N_M, N_Df = N/K."""
    n_m = np.asarray(n_m, float)
    N, K = float(x.n_gpus), float(x.hb_size)
    n_ds = K / n_m
    n_df = N / K
    tp_bytes = x.m_cc * x.batch * x.d_model * x.act_bytes
    return (x.flops_per_iteration / (N * x.compute)
            + x.layers * (2 * x.block_bytes * (n_df - 1) / (N * x.nic_bandwidth)
                          + (2 * x.block_bytes * (n_ds - 1) / K + tp_bytes * (n_m - 1) / N) / x.hb_bandwidth))


def v1_optimal_tp(x: V1Inputs, *, as_printed: bool = True) -> float:
    """Eq. (2): N_M* = sqrt(N·S_T)/(2·sqrt(b·M_cc·d_model)) as printed in the paper; the exact minimiser
    of Eq. (3)'s bracket is sqrt(2·N·S_T/(b·M_cc·d_model)) (railonly.md §3 note). Message sizes in
    bytes on both sides, so the ratio is unit-free."""
    tp_bytes = x.m_cc * x.batch * x.d_model * x.act_bytes
    if as_printed:
        return float(np.sqrt(x.n_gpus * x.block_bytes) / (2 * np.sqrt(tp_bytes)))
    return float(np.sqrt(2 * x.n_gpus * x.block_bytes / tp_bytes))


def v1_ideal_time_s(x: V1Inputs, *, as_printed: bool = True) -> float:
    """Eq. (3): the any-to-any HB network of all N GPUs (K = N) at the optimal TP degree:
    T_ideal = M_flop/(N·C) + (l/(B_F·N))·(2·S_T·(N/N_M* − 1) + M_cc·b·d_model·(N_M* − 1))."""
    nm = v1_optimal_tp(x, as_printed=as_printed)
    tp_bytes = x.m_cc * x.batch * x.d_model * x.act_bytes
    N = float(x.n_gpus)
    return (x.flops_per_iteration / (N * x.compute)
            + x.layers / (x.hb_bandwidth * N) * (2 * x.block_bytes * (N / nm - 1) + tp_bytes * (nm - 1)))


def v1_best_time_s(x: V1Inputs) -> tuple[float, int]:
    """Eq. (1) minimised over the TP degrees N_M that divide K (powers of two up to K): the
    rail-only iteration time for HB domain size K, and the N_M that achieves it."""
    cands = [2 ** i for i in range(int(np.log2(x.hb_size)) + 1) if x.hb_size % (2 ** i) == 0]
    times = v1_iteration_time_s(x, np.array(cands, float))
    i = int(np.argmin(times))
    return float(times[i]), cands[i]


def v1_inputs(llm: LLMSpec, *, n_gpus: int, hb_size: int, batch_tokens: float, compute_flops: float,
              hb_bandwidth: float, nic_bandwidth: float, m_cc: int | None = None,
              param_bytes: float = 2.0) -> V1Inputs:
    """V1 symbols for an LLMSpec: S_T = block parameters × 2 bytes (16-bit gradients),
    M_flop = 6 × block parameters × layers × tokens (forward + backward, Kaplan et al. 2020 §2.1),
    M_cc = 8 (GPT/OPT) or 12 (gated MLP, as the paper counts PaLM) unless given."""
    block = cmp.dense_layer_params(llm)
    if m_cc is None:
        m_cc = 12 if llm.gated_mlp else 8
    return V1Inputs(n_gpus=n_gpus, hb_size=hb_size, layers=llm.layers, block_bytes=block * param_bytes,
                    d_model=llm.hidden_size, batch=batch_tokens, m_cc=m_cc,
                    flops_per_iteration=6.0 * block * llm.layers * batch_tokens,
                    hb_bandwidth=hb_bandwidth, nic_bandwidth=nic_bandwidth, compute=compute_flops)
