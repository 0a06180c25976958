"""HBM per GPU: weights, gradients, optimizer state, activations, other. Pure, elementwise over arrays.

Model states (Rajbhandari et al., ZeRO, SC20 §3.1, §5): mixed-precision Adam keeps a 16-bit copy of
the weights (2 B/param), 16-bit gradients (2 B/param) and fp32 master weights, momentum and
variance (4+4+4 = 12 B/param): "2+2+12 = 16 bytes per parameter". ZeRO shards the optimizer state
(stage 1), then the gradients (2), then the weights (3) over the N_d data-parallel ranks.
ZeRO++ hpZ keeps a secondary 16-bit weight shard inside each node: +2Ψ/(DP ranks per node)
(Wang et al. 2023, arXiv 2306.10209 §3.2; collectives.md §6.2).

Activations per layer per microbatch (Korthikanti et al. 2022, arXiv 2205.05198, §4, Table 2):
  no recompute, TP t, no SP:  s·b·h·(10 + 24/t + 5·a·s/(h·t))
  with SP:                   s·b·h/t·(34 + 5·a·s/h)
  selective recompute:       the 5·a·s²·b attention-core term disappears
  full recompute:            only the layer input, 2·s·b·h (/t with SP)
The code derives these sums tensor by tensor so GQA, gated MLPs, MoE and flash attention follow.

In-flight microbatches on the first pipeline stage (Narayanan et al. SC'21 §2.2; Korthikanti §4.2.3):
GPipe m, 1F1B min(m, p), interleaved p·(1 + (p−1)/(p·v)) layer-stage equivalents.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from designer.perf.compute import ACT_BYTES, MASK_BYTES
from designer.spec.llm import LLMSpec

WEIGHT_BYTES = 2.0  # 16-bit weights (ZeRO §3.1)
GRAD_BYTES = 2.0  # 16-bit gradients (ZeRO §3.1)
OPTIMIZER_BYTES = 12.0  # fp32 master weights + Adam m + v (ZeRO §3.1)

SCHEDULE_GPIPE, SCHEDULE_1F1B, SCHEDULE_INTERLEAVED = 0, 1, 2
RECOMPUTE_NONE, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL = 0, 1, 2


@dataclass(frozen=True)
class MemoryCalibration:
    framework_reserved_bytes: float  # CUDA context, NCCL buffers, allocator fragmentation
    zero3_prefetch_layers: float  # ZeRO-3: gathered full-layer weights kept in flight


def activation_bytes_per_layer(llm: LLMSpec, *, moe_layer: bool, b, s, tp, cp, sp, recompute,
                               flash: bool):
    """Stored activation bytes of one layer for one microbatch on one GPU (Korthikanti Table 2)."""
    h = llm.hidden_size
    a, kv, dh = llm.heads, llm.kv_heads_effective, llm.head_dim_effective
    tp = np.asarray(tp, float)
    tokens = np.asarray(b, float) * s / np.asarray(cp, float)
    kv_local = np.maximum(kv / tp, 1.0)
    # Tensors that are replicated over TP unless SP splits them: 2 layer-norm inputs, QKV input,
    # MLP input (2 bytes each) and the 2 dropout masks (1 byte each): 4+2+2+2 = 10·s·b·h.
    replicated = tokens * h * (4 * ACT_BYTES + 2 * MASK_BYTES)
    # Tensors always split over TP: Q, K (for QKᵀ), V, attention output (for out proj).
    attn_split = tokens * dh * (a / tp * ACT_BYTES * 2 + kv_local * ACT_BYTES * 2)
    gate = 2.0 if llm.gated_mlp else 1.0
    if moe_layer and llm.moe is not None:
        moe = llm.moe
        routed = tokens * moe.top_k * moe.capacity_factor
        fe = moe.expert_ffn_size
        # dispatched expert inputs, activation input (gate+up), fc2 input; plus shared experts
        mlp_split = routed * (h * ACT_BYTES + (gate + 1) * fe / tp * ACT_BYTES)
        mlp_split = mlp_split + tokens * moe.shared_experts * fe * (gate + 1) / tp * ACT_BYTES
    else:
        # activation input (gate+up outputs) and fc2 input: 4h + 4h = 8h each 2 B -> 16·sbh/t for GPT
        mlp_split = tokens * (gate + 1) * llm.ffn_size / tp * ACT_BYTES
    # Attention core (softmax output 2B, dropout mask 1B, dropout output 2B): 5·a·s²·b / (t·cp).
    if flash:
        core = tokens * a / tp * 4 * 2  # flash keeps only the fp32 log-sum-exp and max per row
    else:
        core = np.asarray(b, float) * a / tp * (s / np.asarray(cp, float)) * s * (2 * ACT_BYTES + MASK_BYTES)
    rep = np.where(sp, replicated / tp, replicated)
    full_layer = rep + attn_split + mlp_split + core
    selective = rep + attn_split + mlp_split
    layer_input = np.where(sp, tokens * h * ACT_BYTES / tp, tokens * h * ACT_BYTES)
    return np.where(recompute == RECOMPUTE_FULL, layer_input,
                    np.where(recompute == RECOMPUTE_SELECTIVE, selective, full_layer))


def in_flight_factor(schedule, pp, m, v):
    """Microbatches' worth of a stage's activations held by the first stage (the peak)."""
    pp = np.asarray(pp, float)
    m = np.asarray(m, float)
    v = np.asarray(v, float)
    one_f = np.minimum(m, pp)
    # Interleaved: Korthikanti §4.2.3: (1 + (p−1)/(p·v)) × the 1F1B amount.
    inter = one_f * (1.0 + (pp - 1.0) / (pp * v))
    return np.where(schedule == SCHEDULE_GPIPE, m, np.where(schedule == SCHEDULE_INTERLEAVED, inter, one_f))


def model_state_bytes(dense_params, expert_params, *, dp_shard, expert_dp_shard, zero_stage,
                      hpz, ranks_per_node_dp):
    """(weights, gradients, optimizer) bytes per GPU for local parameter counts.

    dense_params are sharded by ZeRO over dp_shard (= DP×CP ranks), expert_params over
    expert_dp_shard (the expert-data-parallel group)."""
    zero_stage = np.asarray(zero_stage)
    w = np.zeros_like(np.asarray(dense_params, float))
    g = np.zeros_like(w)
    o = np.zeros_like(w)
    for params, shard in ((dense_params, dp_shard), (expert_params, expert_dp_shard)):
        params = np.asarray(params, float)
        shard = np.asarray(shard, float)
        w = w + np.where(zero_stage >= 3, params * WEIGHT_BYTES / shard, params * WEIGHT_BYTES)
        g = g + np.where(zero_stage >= 2, params * GRAD_BYTES / shard, params * GRAD_BYTES)
        o = o + np.where(zero_stage >= 1, params * OPTIMIZER_BYTES / shard, params * OPTIMIZER_BYTES)
        # hpZ: a secondary 16-bit copy sharded inside the node
        w = w + np.where((zero_stage >= 3) & hpz, params * WEIGHT_BYTES / np.maximum(ranks_per_node_dp, 1), 0.0)
    return w, g, o
