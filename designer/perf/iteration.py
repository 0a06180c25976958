"""One training iteration: compute, every parallel dimension's communication, pipeline bubble, overlap.

`iteration_arrays` is the single implementation: it takes a `StrategyArrays` (numpy columns, one entry
per strategy) and returns numpy arrays; the scalar `evaluate_system` runs it on one row. Formulas:

TP (Megatron, Shoeybi et al. 2019 §3; collectives.md §6.4): per layer and microbatch 2 all-reduces of
  b·s·h activations forward and 2 backward (+2 for the recomputed forward); with sequence parallelism
  each becomes a reduce-scatter + all-gather of the same bytes (Korthikanti et al. 2022 §4.2.2).
CP (ring attention as in Megatron-core context parallelism): the K,V of the full sequence are gathered
  per layer forward; backward gathers them again and reduce-scatters their gradients. It overlaps with
  the attention core.
PP (Narayanan et al. SC'21 §2.2, §4.1): b·s·h activations forward and gradients backward per
  microbatch per stage boundary, v× as many with the interleaved schedule; sent as 1/t shards
  and all-gathered over NVLink (the scatter/gather optimisation, §4.1). Bubble: (p−1)/m of the ideal
  time for GPipe and 1F1B, (p−1)/(v·m) for interleaved 1F1B.
DP (ZeRO, Rajbhandari et al. SC20 §7; collectives.md §6.1-6.2): stage 0 all-reduces 2Ψ-byte gradients;
  stages 1-2 reduce-scatter gradients and all-gather updated weights; DeepSpeed's stage 2 reduces at
  every micro-step and stage 3 also all-gathers weights forward and backward every micro-step.
  ZeRO++: qwZ halves the forward gather (int8), hpZ keeps the backward gather inside the node, qgZ
  sends int4 gradients (1/4 of the bytes).
EP (collectives.md §6.5): dispatch + combine all-to-all forward and their mirrors backward = 4 per MoE
  layer per microbatch (+2 with full recomputation), each rank sending tokens·top_k·h·2 bytes.
Overlap: DP gradient traffic overlaps the backward pass of the last microbatch except the last bucket
  (PyTorch DDP / Megatron bucketed all-reduce); TP is exposed unless overlap_tp_comm, then it hides
  behind the GEMMs; EP and PP transfers are exposed.

Also the V1 reduced model of the Rail-only paper (railonly.md §3, Eqs. 1-3).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from designer.perf import collectives as coll
from designer.perf import compute as cmp
from designer.perf import memory as mem
from designer.perf.placement import TIER_HB, TIER_NAMES, TIER_RAIL, TIER_SPINE, GroupArrays, place
from designer.perf.records import StrategyArrays
from designer.spec.llm import LLMSpec, TrainingSpec
from designer.spec.system import ClusterSystem


@dataclass(frozen=True)
class PerfCalibration:
    """Everything calibrated, as data (designer/data/*.yaml): compute curves, memory reserves, the
    collectives module's link efficiencies, and the gradient bucket size."""

    compute: cmp.ComputeCalibration
    memory: mem.MemoryCalibration
    collectives: Any
    dp_bucket_bytes: float


# Reason codes of infeasible strategies (vectorized path); 0 = feasible.
REASONS = {
    0: ("", ""),
    1: ("size", "strategy needs more GPUs than the system has"),
    2: ("divisibility", "global batch is not a multiple of dp x microbatch size"),
    3: ("divisibility", "tp does not divide heads, hidden size and FFN size"),
    4: ("divisibility", "tp and kv_heads do not divide one another"),
    5: ("divisibility", "cp does not divide the sequence length"),
    6: ("divisibility", "pipeline has more stages (x virtual chunks) than layers"),
    7: ("divisibility", "ep does not divide the experts and dp x cp"),
    8: ("compatibility", "ZeRO stage 2/3 cannot be combined with pipeline parallelism"),
    9: ("memory", "does not fit in HBM"),
    10: ("compatibility", "ep > 1 needs a MoE model"),
    11: ("compatibility", "interleaved schedule needs pp > 1 and virtual_stages > 1"),
    12: ("compatibility", "ZeRO++ options need ZeRO stage 3"),
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


def _ct(op: str, nbytes, g: GroupArrays, system: ClusterSystem, ccal, on=True) -> _Coll:
    """One collective on group shape g; zero for a group of one, no bytes, or where `on` is false.

    A search space repeats few distinct (bytes, group shape) pairs, so the collectives model runs once
    per distinct live pair and the results are scattered back (same numbers, far fewer evaluations)."""
    shape = g.size.shape
    nbytes = np.broadcast_to(np.asarray(nbytes, float), shape)
    live = (g.size > 1) & (nbytes > 0) & np.broadcast_to(np.asarray(on, bool), shape)
    out = [np.zeros(shape) for _ in range(5)]
    idx = np.flatnonzero(live)
    if idx.size == 0:
        return _Coll(*out)
    nb = nbytes.ravel()[idx]
    # one integer key per group shape (each field < 2**20), then one per (bytes, shape) pair
    skey = (g.size.ravel()[idx] + (g.ranks_per_domain.ravel()[idx] << 20) + (g.extent_domains.ravel()[idx] << 40)
            + (g.same_rail.ravel()[idx].astype(np.int64) << 60))
    ub, inv_b = np.unique(nb, return_inverse=True)
    us, inv_s = np.unique(skey, return_inverse=True)
    ukey, first, inv = np.unique(inv_b.astype(np.int64) * len(us) + inv_s, return_index=True, return_inverse=True)
    rep = idx[first]
    e = coll.collective_estimate_vec(op, nb[first], g.size.ravel()[rep], g.ranks_per_domain.ravel()[rep],
                                     g.extent_domains.ravel()[rep], g.same_rail.ravel()[rep], system, ccal)
    peers = coll.peers_per_rank(e.algorithm_index, g.size.ravel()[rep], g.ranks_per_domain.ravel()[rep], system)
    for o, x in zip(out, (e.time_s, e.hb_bytes, e.rail_bytes, e.spine_bytes, peers)):
        o.ravel()[idx] = np.asarray(x)[inv.ravel()]
    return _Coll(*out)


def feasibility_codes(llm: LLMSpec, training: TrainingSpec, S: StrategyArrays, system: ClusterSystem):
    """Reason code per strategy for structural (non-memory) infeasibility; 0 when none."""
    code = np.zeros(S.tp.shape, dtype=np.int64)

    def flag(cond, c):
        nonlocal code
        code = np.where((code == 0) & cond, c, code)

    n = S.tp * S.pp * S.dp * S.cp
    flag(n > system.n_gpus, 1)
    flag(training.global_batch_sequences % (S.dp * S.mbs) != 0, 2)
    ffn_ok = (llm.ffn_size % S.tp == 0) if llm.moe is None else (llm.moe.expert_ffn_size % S.tp == 0)
    flag((llm.heads % S.tp != 0) | (llm.hidden_size % S.tp != 0) | ~ffn_ok, 3)
    kv = llm.kv_heads_effective
    flag((kv % S.tp != 0) & (S.tp % kv != 0), 4)
    flag(training.sequence_length % S.cp != 0, 5)
    flag(S.pp * S.v > llm.layers, 6)
    if llm.moe is not None:
        flag((llm.moe.experts % S.ep != 0) | ((S.dp * S.cp) % S.ep != 0), 7)
    else:
        flag(S.ep > 1, 10)
    flag((S.zero >= 2) & (S.pp > 1), 8)
    flag((S.schedule == mem.SCHEDULE_INTERLEAVED) & ((S.pp < 2) | (S.v < 2)), 11)
    flag((S.qwz | S.qgz | S.hpz) & (S.zero < 3), 12)
    return code


def iteration_arrays(llm: LLMSpec, training: TrainingSpec, S: StrategyArrays, system: ClusterSystem,
                     calib: PerfCalibration) -> dict[str, np.ndarray]:
    """All quantities of the model for every strategy in S. Infeasible rows carry a reason code; their
    numbers are whatever the formulas give (possibly inf or nan for groups larger than the system)."""
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        return _iteration_arrays(llm, training, S, system, calib)


def _iteration_arrays(llm, training, S, system, calib):
    ccal = calib.compute
    gpu = system.gpu
    prec = training.precision.value
    peak = gpu.peak_flops.get(prec, gpu.peak_flops["bf16"])
    peak16 = gpu.peak_flops.get("bf16", peak)
    if prec == "fp8":
        # Transformer Engine runs the linear layers in fp8, attention and the rest in 16-bit.
        frac = ccal.fp8_gemm_fraction
        gemm_peak = 1.0 / (frac / peak + (1 - frac) / peak16)
        attn_peak = peak16
    else:
        gemm_peak = attn_peak = peak
    max_eff = ccal.max_efficiency(gpu.name)
    hbm_bw = gpu.hbm_bandwidth_bytes_per_s
    s = training.sequence_length
    B = training.global_batch_sequences
    shape = S.tp.shape

    code = feasibility_codes(llm, training, S, system)
    # Guard the arithmetic of infeasible rows (they keep their code).
    safe_dp_b = np.maximum(S.dp * S.mbs, 1)
    m = np.maximum(B // safe_dp_b, 1).astype(float)
    pp = S.pp.astype(float)
    v = S.v.astype(float)
    b = S.mbs.astype(float)
    tp = S.tp.astype(float)
    cp = S.cp.astype(float)
    full = S.recompute == mem.RECOMPUTE_FULL
    selective = S.recompute == mem.RECOMPUTE_SELECTIVE
    flash = ccal.attention_kernel == "flash"

    n_dense, n_moe = cmp.layer_kinds(llm)
    layers_stage = np.ceil(llm.layers / pp)  # the slowest stage's layers
    frac_moe = n_moe / llm.layers
    dense_stage = layers_stage * (1 - frac_moe)
    moe_stage = layers_stage * frac_moe

    kw = dict(b=b, s=s, tp=tp, cp=cp, ep=S.ep.astype(float), sp=S.sp, peak_flops=attn_peak,
              gemm_peak_flops=gemm_peak, max_eff=max_eff, hbm_bytes_per_s=hbm_bw, calib=ccal)
    works = [(dense_stage, cmp.layer_forward(llm, moe_layer=False, **kw))]
    if n_moe:
        works.append((moe_stage, cmp.layer_forward(llm, moe_layer=True, **kw)))
    t_logits, f_logits = cmp.logits_forward(llm, b=b, s=s, tp=tp, cp=cp, gemm_peak_flops=gemm_peak,
                                            max_eff=max_eff, hbm_bytes_per_s=hbm_bw, calib=ccal)

    # ---- compute per microbatch on the slowest stage (it holds the output layer) ----
    t_fwd = t_logits.copy()
    t_bwd = 2 * t_logits
    t_rc = np.zeros(shape)
    gemm_s = 3 * t_logits  # GEMM seconds TP traffic can hide behind
    attn_s = np.zeros(shape)
    for count, w in works:
        lf = w.dense_gemm_s + w.attn_core_s + w.memory_s
        t_fwd = t_fwd + count * lf
        t_bwd = t_bwd + count * 2 * lf  # backward: 2x the GEMMs and ~2x the element-wise traffic
        t_rc = t_rc + count * np.where(full, lf, np.where(selective, w.attn_core_s + w.attn_memory_s, 0.0))
        gemm_s = gemm_s + count * w.dense_gemm_s * np.where(full, 4, 3)
        attn_s = attn_s + count * w.attn_core_s * np.where(full | selective, 4, 3)

    pl = place(S.tp, S.cp, S.dp, S.pp, S.ep, system)
    ccol = calib.collectives
    ledger = _Ledger(shape)
    h = llm.hidden_size
    act = b * (s / cp) * h * cmp.ACT_BYTES  # one [b, s/cp, h] activation tensor

    # ---- TP ----
    n_tp_fwd = np.where(full, 4, 2) * layers_stage  # 2 per forward pass; the recomputed forward repeats them
    n_tp = n_tp_fwd + 2 * layers_stage
    sp = S.sp
    tp_ar = _ct("all_reduce", act, pl.tp, system, ccol, ~sp)
    tp_rs = _ct("reduce_scatter", act, pl.tp, system, ccol, sp)
    tp_ag = _ct("all_gather", act, pl.tp, system, ccol, sp)
    tp_mb = n_tp * (tp_ar.time_s + tp_rs.time_s + tp_ag.time_s)
    for c in (tp_ar, tp_rs, tp_ag):
        ledger.add(c, n_tp * m, "tp")
    tp_exposed_mb = np.where(S.overlap_tp, np.maximum(0.0, tp_mb - gemm_s), tp_mb)

    # ---- CP: K,V of the full sequence, per layer ----
    kv_local = np.maximum(llm.kv_heads_effective / tp, 1.0)
    kv_bytes = 2 * b * s * kv_local * llm.head_dim_effective * cmp.ACT_BYTES
    cp_ag = _ct("all_gather", kv_bytes, pl.cp, system, ccol)
    cp_rs = _ct("reduce_scatter", kv_bytes, pl.cp, system, ccol)
    n_cp_ag = layers_stage * np.where(full, 3, 2)
    cp_mb = n_cp_ag * cp_ag.time_s + layers_stage * cp_rs.time_s
    ledger.add(cp_ag, n_cp_ag * m, "cp")
    ledger.add(cp_rs, layers_stage * m, "cp")
    cp_exposed_mb = np.maximum(0.0, cp_mb - attn_s)

    # ---- EP ----
    if llm.moe is not None:
        a2a_bytes = b * (s / cp) * llm.moe.top_k * llm.moe.capacity_factor * h * cmp.ACT_BYTES
        a2a = _ct("all_to_all", a2a_bytes, pl.ep, system, ccol)
        n_a2a = moe_stage * np.where(full, 6, 4)
        ep_mb = n_a2a * a2a.time_s
        ledger.add(a2a, n_a2a * m, "ep")
        ep_peers = a2a.peers
    else:
        ep_mb = np.zeros(shape)
        ep_peers = np.zeros(shape)

    # ---- PP: one send per chunk boundary each way, 1/t shards + NVLink all-gather ----
    multi_stage = pp > 1
    p2p = _ct("send_recv", act / tp, pl.pp, system, ccol, multi_stage)
    p2p_ag = _ct("all_gather", act, pl.tp, system, ccol, multi_stage & ~sp)
    n_p2p = np.where(multi_stage, 2 * v, 0.0)
    pp_mb = n_p2p * (p2p.time_s + p2p_ag.time_s)
    ledger.add(p2p, n_p2p * m, "pp")
    ledger.add(p2p_ag, n_p2p * m, "pp")

    # ---- pipeline ----
    compute_mb = t_fwd + t_bwd + t_rc
    t_mb = compute_mb + tp_exposed_mb + cp_exposed_mb + ep_mb + pp_mb
    bubble_units = np.where(S.schedule == mem.SCHEDULE_INTERLEAVED, (pp - 1) / v, pp - 1)
    bubble_s = bubble_units * t_mb
    t_pipe = m * t_mb + bubble_s

    # ---- parameters per GPU (slowest stage) and DP ----
    dense_p, moe_ne, moe_e = cmp.dense_layer_params(llm), 0.0, 0.0
    if n_moe:
        moe_ne, moe_e = cmp.moe_layer_params(llm)
    # The input embedding sits on the first stage and the output layer on the last (Megatron); with
    # one stage an untied model holds both. A tied model with pp > 1 keeps a copy on each end stage.
    emb = llm.vocab_size * h * np.where(pp == 1, 1 if llm.tied_embeddings else 2, 1)
    stage_dense = (dense_stage * dense_p + moe_stage * moe_ne + emb) / tp
    stage_expert = moe_stage * moe_e / (tp * S.ep)
    dp_shard = (S.dp * S.cp).astype(float)
    edp_shard = np.maximum(dp_shard / S.ep, 1.0)
    dp_total = np.zeros(shape)
    dp_exposed = np.zeros(shape)
    t_f_mb = t_fwd
    t_b_mb = t_bwd + t_rc
    zero = S.zero
    ov = S.overlap_dp
    first = 1.0 / np.maximum(layers_stage, 1.0)  # ZeRO-3 prefetch cannot hide the first layer
    dp_peers = np.zeros(shape)
    for params, g in ((stage_dense, pl.grad), (stage_expert, pl.expert_dp)):
        G = params * mem.GRAD_BYTES
        bucket = np.minimum(1.0, calib.dp_bucket_bytes / np.maximum(G, 1.0))
        ar = _ct("all_reduce", G, g, system, ccol, zero == 0)
        rs = _ct("reduce_scatter", G, g, system, ccol, (zero == 1) | (zero == 2))
        ag = _ct("all_gather", G, g, system, ccol, (zero == 1) | (zero == 2))
        rs3 = _ct("reduce_scatter", np.where(S.qgz, 0.25 * G, G), g, system, ccol, zero == 3)
        ag3f = _ct("all_gather", np.where(S.qwz, 0.5 * G, G), g, system, ccol, zero == 3)
        node = GroupArrays(size=g.ranks_per_domain, ranks_per_domain=g.ranks_per_domain,
                           domain_span=np.ones_like(g.size), same_rail=np.ones(shape, bool),
                           extent_domains=np.ones_like(g.size), tier=np.full(shape, TIER_HB))
        ag3b_node = _ct("all_gather", G, node, system, ccol, (zero == 3) & S.hpz)
        ag3b_flat = _ct("all_gather", G, g, system, ccol, (zero == 3) & ~S.hpz)
        ag3b = ag3b_node.time_s + ag3b_flat.time_s
        t_ar, t_rs, t_ag, t_rs3, t_ag3f = ar.time_s, rs.time_s, ag.time_s, rs3.time_s, ag3f.time_s
        n_rs = np.where(zero == 2, m, 1.0)  # DeepSpeed stage 2 reduces every micro-step
        # Stage 0-2: gradient reduction hides behind the backward of a microbatch except the last
        # bucket; the weight all-gather (stages 1-2) behind the next forward (Megatron
        # overlap-param-gather). Stage 3: per microbatch, gathers prefetched layer by layer.
        e_grad = np.where(ov, np.maximum(bucket * (t_ar + t_rs), t_ar + t_rs - t_b_mb), t_ar + t_rs) * n_rs
        e_ag = np.where(ov, np.maximum(bucket * t_ag, t_ag - t_f_mb), t_ag)
        e3 = m * (np.where(ov, np.maximum(first * t_ag3f, t_ag3f - t_f_mb), t_ag3f)
                  + np.where(ov, np.maximum(first * (ag3b + t_rs3), ag3b + t_rs3 - t_b_mb), ag3b + t_rs3))
        dp_total = dp_total + t_ar + n_rs * t_rs + t_ag + m * (t_ag3f + ag3b + t_rs3)
        dp_exposed = dp_exposed + e_grad + e_ag + e3
        ledger.add(ar, 1.0, "dp")
        ledger.add(rs, n_rs, "dp")
        ledger.add(ag, 1.0, "dp")
        for c in (rs3, ag3f, ag3b_node, ag3b_flat):
            ledger.add(c, m, "dp")
        # dense and expert groups: separate sums (the expert group lies inside the dense one, so
        # this may count a peer twice; the cap at N - 1 below keeps the fraction a fraction)
        dp_peers = dp_peers + np.maximum.reduce([x.peers for x in (ar, rs, ag, rs3, ag3f, ag3b_node, ag3b_flat)])

    local_params = np.where(zero >= 1, stage_dense / dp_shard + stage_expert / edp_shard, stage_dense + stage_expert)
    t_opt = cmp.optimizer_step_s(local_params, hbm_bw, ccal)

    t_iter = t_pipe + dp_exposed + t_opt
    tier_bytes = ledger.bytes
    # GPUs each GPU exchanges data with under the algorithms chosen: per group, the most peers any of
    # its collectives has; summed over the groups (TP, CP, DP dense + expert, EP, pipeline neighbours)
    tp_peers = np.maximum.reduce([tp_ar.peers, tp_rs.peers, tp_ag.peers, p2p_ag.peers])
    cp_peers = np.maximum(cp_ag.peers, cp_rs.peers)
    pp_nb = np.where(S.pp > 2, 2, np.where(S.pp == 2, 1, 0))
    peers = tp_peers + cp_peers + dp_peers + ep_peers + pp_nb * p2p.peers
    compute_s = m * compute_mb + t_opt
    tp_s, cp_s, ep_s, pp_s = m * tp_mb, m * cp_mb, m * ep_mb, m * pp_mb
    exposed = t_iter - compute_s - bubble_s
    comm_total = tp_s + cp_s + ep_s + pp_s + dp_total
    overlapped = np.maximum(0.0, comm_total - exposed)

    # ---- memory (worst of first and last stage) ----
    mcal = calib.memory
    rpn_dp = np.minimum(pl.grad.ranks_per_domain, pl.grad.size).astype(float)
    act_layer = np.zeros(shape)
    act_full_layer = np.zeros(shape)
    for count, moe_layer in ((dense_stage, False), (moe_stage, True)):
        if moe_layer and not n_moe:
            continue
        a_l = mem.activation_bytes_per_layer(llm, moe_layer=moe_layer, b=b, s=s, tp=tp, cp=cp, sp=sp,
                                             recompute=S.recompute, flash=flash)
        act_layer = act_layer + count * a_l
        full_l = mem.activation_bytes_per_layer(llm, moe_layer=moe_layer, b=b, s=s, tp=tp, cp=cp, sp=sp,
                                                recompute=np.zeros(shape, int), flash=flash)
        act_full_layer = np.maximum(act_full_layer, full_l)
    inflight = mem.in_flight_factor(S.schedule, pp, m, v)
    # working set of the layer being recomputed / back-propagated (Korthikanti §5: full recompute
    # rematerialises one layer at a time)
    work = np.where(full, act_full_layer, 0.0)
    tokens = b * s / cp
    logits_act = tokens * llm.vocab_size / tp * 4.0  # fp32 logits of the vocab-parallel loss
    first_act = inflight * act_layer + work + np.where(pp < 2, logits_act, 0.0)
    last_act = act_layer + work + logits_act
    activations = np.maximum(first_act, last_act)
    w_b, g_b, o_b = mem.model_state_bytes(stage_dense, stage_expert, dp_shard=dp_shard, expert_dp_shard=edp_shard,
                                          zero_stage=zero, hpz=S.hpz, ranks_per_node_dp=rpn_dp)
    prefetch = np.where(zero == 3, mcal.zero3_prefetch_layers * dense_p / tp * mem.WEIGHT_BYTES, 0.0)
    other = mcal.framework_reserved_bytes + prefetch
    mem_total = w_b + g_b + o_b + activations + other
    code = np.where((code == 0) & (mem_total > gpu.hbm_bytes), 9, code)

    # ---- FLOPs, MFU ----
    n_gpus = (S.tp * S.pp * S.dp * S.cp).astype(float)
    flat_pairs = _pair_fraction(S, n_gpus)
    model_flops = model_flops_per_iteration(llm, training)
    hw_flops = hardware_flops_per_iteration(llm, training, S.recompute, ccal.attention_kernel == "flash", shape)
    mfu = model_flops / (t_iter * n_gpus * peak)
    hfu = hw_flops / (t_iter * n_gpus * peak)
    tokens_iter = float(B * s)

    return dict(
        code=code, iteration_time_s=t_iter, time_to_train_s=t_iter * training.total_tokens / tokens_iter,
        tokens_per_s=tokens_iter / t_iter, mfu=mfu, hfu=hfu, model_flops=np.full(shape, model_flops),
        hardware_flops=hw_flops, n_gpus=n_gpus, microbatches=m,
        compute_s=compute_s, tp_s=tp_s, cp_s=cp_s, pp_s=pp_s, dp_s=dp_total, ep_s=ep_s, bubble_s=bubble_s,
        exposed_comm_s=exposed, overlapped_comm_s=overlapped,
        weights_bytes=w_b, gradients_bytes=g_b, optimizer_bytes=o_b, activations_bytes=activations,
        other_bytes=other + np.zeros(shape), memory_per_gpu_bytes=mem_total,
        hb_bytes=tier_bytes[TIER_HB], rail_bytes=tier_bytes[TIER_RAIL], spine_bytes=tier_bytes[TIER_SPINE],
        hb_time_s=ledger.time[TIER_HB], rail_time_s=ledger.time[TIER_RAIL], spine_time_s=ledger.time[TIER_SPINE],
        pair_fraction_flat=flat_pairs,
        # the peers under the chosen algorithms are members of the groups the flat view counts
        pair_fraction_algorithm=np.minimum(peers / np.maximum(n_gpus - 1, 1), flat_pairs),
        **{f"type_{k}": v for k, v in ledger.type_bytes().items()},
    )


def _pair_fraction(S: StrategyArrays, n_gpus):
    """Flat view: fraction of the other GPUs each GPU shares a parallel group with -- every member of
    its TP, CP, DP groups, its pipeline neighbours and the EP peers not already counted -- as if every
    collective connected all of its members (an upper bound on the pairs that talk)."""
    pp_nb = np.where(S.pp > 2, 2, np.where(S.pp == 2, 1, 0))
    ep_extra = np.where(S.cp > 1, np.maximum(0, (S.ep - 1) - (np.minimum(S.ep, S.cp) - 1)
                                              - (np.maximum(S.ep // S.cp, 1) - 1)), 0)
    peers = (S.tp - 1) + (S.cp - 1) + (S.dp - 1) + pp_nb + ep_extra
    return peers / np.maximum(n_gpus - 1, 1)


def _forward_flops(llm: LLMSpec, training: TrainingSpec, flash_exec: bool) -> tuple[float, float, float]:
    """(linear-layer FLOPs, attention-core FLOPs, logits FLOPs) of one forward pass over the global
    batch. The attention core counts the full s² product unless flash_exec (causal skip)."""
    s = training.sequence_length
    B = training.global_batch_sequences
    dummy = cmp.ComputeCalibration(gemm_max_efficiency=1.0, gemm_k_half=0.0, gemm_mn_half=0.0,
                                   gpu_max_efficiency=(), hbm_efficiency=1.0,
                                   attention_kernel="flash" if flash_exec else "unfused",
                                   flash_efficiency=1.0, optimizer_bytes_per_param=0.0, fp8_gemm_fraction=0.0)
    one = np.ones(1)
    kw = dict(b=one * B, s=s, tp=one, cp=one, ep=one, sp=np.zeros(1, bool), peak_flops=1.0,
              gemm_peak_flops=1.0, max_eff=1.0, hbm_bytes_per_s=1.0, calib=dummy)
    n_dense, n_moe = cmp.layer_kinds(llm)
    lin = attn = 0.0
    for count, is_moe in ((n_dense, False), (n_moe, True)):
        if count:
            w = cmp.layer_forward(llm, moe_layer=is_moe, **kw)
            lin += count * float(w.dense_flops[0])
            attn += count * float(w.attn_flops[0])
    logits = 2.0 * B * s * llm.hidden_size * llm.vocab_size
    return lin, attn, logits


def model_flops_per_iteration(llm: LLMSpec, training: TrainingSpec) -> float:
    """3 × forward FLOPs (forward + 2× backward), attention counted non-causally, no recompute: the
    MFU numerator of Chowdhery et al. 2022 (PaLM) App. B and Narayanan et al. 2021 without the
    recomputation term."""
    lin, attn, logits = _forward_flops(llm, training, flash_exec=False)
    return 3.0 * (lin + attn + logits)


def hardware_flops_per_iteration(llm, training, recompute, flash_exec: bool, shape):
    """Executed FLOPs: 3 × forward + the recomputed forward (full) or attention core (selective)."""
    lin, attn, logits = _forward_flops(llm, training, flash_exec=flash_exec)
    base = 3.0 * (lin + attn + logits)
    extra = np.where(recompute == mem.RECOMPUTE_FULL, lin + attn,
                     np.where(recompute == mem.RECOMPUTE_SELECTIVE, attn, 0.0))
    return base + extra + np.zeros(shape)


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
