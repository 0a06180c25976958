"""Context parallelism (ring, all-gather, Ulysses all-to-all; causal load balancing) and offload of
weights and activations to host memory: hand-computed cases."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from designer.perf import collectives as coll
from designer.perf import compute as cmp
from designer.perf.iteration import iteration_arrays
from designer.perf.model import evaluate_system, load_perf_calibration
from designer.perf.records import Metrics, StrategyArrays
from designer.spec.llm import Strategy, TrainingSpec
from designer.spec.models import load_model
from tests.perf.systems import cluster

CAL = load_perf_calibration()
# no host overheads, no optimizer step and no slowdown of overlapped compute: a hidden transfer
# costs nothing, an exposed one its full time
BARE = dataclasses.replace(CAL, compute=dataclasses.replace(
    CAL.compute, optimizer_bytes_per_param=0.0, framework_per_iteration_s=0.0, framework_per_layer_s=0.0,
    overlap_slowdown=0.0))
LLAMA8 = load_model("llama3-8b")  # 32 layers, h 4096, 32 heads, 8 KV heads of 128


def _run(strategy: Strategy, system, training, calib=BARE) -> dict:
    out = iteration_arrays(LLAMA8, training, StrategyArrays.from_strategies([strategy]), system, calib)
    return {k: float(np.asarray(v).ravel()[0]) for k, v in out.items()}


def _fast_links(system, scale=1e4):
    return system.model_copy(update={"hb": system.hb.model_copy(update={
        "bandwidth_per_gpu_bytes_per_s": system.hb.bandwidth_per_gpu_bytes_per_s * scale})})


def test_load_balancing_of_causal_attention_by_hand():
    # s = 8192 on cp = 4: 2048 queries per rank, 128-token tiles. Balanced, every rank computes the
    # causal average (n+1)/(2n) of its 2048 x 8192 blocks, n = 64 tiles: 0.5078125. Unbalanced, the
    # last rank computes 3 full 2048 x 2048 blocks and its diagonal (16 tiles: 17/32) of 4.
    assert float(cmp.cp_causal_fraction(8192, 4, True)) == pytest.approx(65 / 128)
    assert float(cmp.cp_causal_fraction(8192, 4, False)) == pytest.approx((3 + 17 / 32) / 4)
    assert float(cmp.cp_causal_fraction(8192, 1, False)) == pytest.approx(65 / 128)  # no CP: nothing to balance
    tr = TrainingSpec(sequence_length=65536, global_batch_sequences=2, total_tokens=1e9)
    sy = cluster("h100_sxm", 8)
    st = Strategy(cp=4, dp=2, recompute="full")
    bal = _run(st, sy, tr)
    unb = _run(st.model_copy(update={"cp_load_balance": False}), sy, tr)
    assert unb["iteration_time_s"] > 1.3 * bal["iteration_time_s"]


def test_ring_attention_bytes_and_hiding_by_hand():
    # Llama-3 8B at 128K on cp = 8 inside one node: each ring step sends one K,V block of
    # s/cp·2·8·128 elements (2 B); forward 7 steps, backward 7 of K,V + their gradients (twice the
    # bytes), per layer and microbatch. At 16K queries per rank each block's attention takes far
    # longer than its transfer, so the ring hides completely. (The gradients' reduction over the CP
    # ranks is left unoverlapped, so it is exposed by exactly dp_s.)
    tr = TrainingSpec(sequence_length=131072, global_batch_sequences=1, total_tokens=1e9)
    sy = cluster("h100_sxm", 8)
    st = Strategy(cp=8, recompute="full", cp_comm="p2p", overlap_dp_comm=False)
    r = _run(st, sy, tr)
    block = 131072 / 8 * 2 * 8 * 128 * 2
    shape = coll.GroupShape(size=8, ranks_per_domain=8, domain_span=1, same_rail=True)
    ccal = CAL.collectives
    t_f = coll.collective_time_s("send_recv", block, shape, sy, ccal)
    t_b = coll.collective_time_s("send_recv", 2 * block, shape, sy, ccal)
    n_fwd = 2  # full recompute repeats the forward
    assert r["cp_s"] == pytest.approx(32 * 7 * (n_fwd * t_f + t_b), rel=1e-9)
    fast = _run(st, _fast_links(sy), tr)
    # on links 10^4 times faster each send takes the host floor of one call
    assert fast["cp_s"] == pytest.approx(32 * 7 * (n_fwd + 1) * ccal.host_floor_s["hopper"], rel=1e-9)
    assert r["iteration_time_s"] - r["dp_s"] == pytest.approx(fast["iteration_time_s"] - fast["dp_s"], rel=1e-12)
    # replayed from CUDA graphs, a call keeps the graph fraction of the host floor
    graphs = _run(st.model_copy(update={"cuda_graphs": True}), _fast_links(sy), tr)
    assert graphs["cp_s"] == pytest.approx(fast["cp_s"] * ccal.cuda_graph_host_floor_fraction, rel=1e-9)


def test_ring_attention_across_nodes_sends_at_the_nics_two_node_rate():
    # Llama-3 8B at 1M tokens on tp = 8, cp = 32: one CP rank per node of 8 x B200 (8 x 400G IB), so
    # every ring step crosses the network, each GPU sending its K,V block to one peer over its own
    # NIC. The pair is a two-rank NCCL communicator (Transformer Engine's single isend/irecv), which
    # gets the channels of nccl-tests' two-node sendrecv: measured 43.3 GB/s busbw at 2-8 GB on that
    # cluster (collectives-modern.md TB-5, 2 nodes), not the 14.8-15.7 GB/s of one channel per peer
    # that the same test shows in communicators of 128+ ranks.
    s, tp, cp = 1048576, 8, 32
    tr = TrainingSpec(sequence_length=s, global_batch_sequences=1, total_tokens=1e9)
    sy = cluster("b200", tp * cp)
    st = Strategy(tp=tp, cp=cp, sequence_parallel=True, recompute="full", cp_comm="p2p", overlap_dp_comm=False)
    r = _run(st, sy, tr)
    block = s / cp * 2 * (8 // tp) * 128 * 2  # K and V of one KV head per TP rank, 2 B
    steps, n_fwd, layers = cp - 1, 2, 32  # full recompute repeats the forward's sends
    bytes_per_iteration = layers * steps * (n_fwd * block + 2 * block)
    assert bytes_per_iteration / r["cp_s"] == pytest.approx(43.3e9, rel=0.10)


@pytest.mark.parametrize("gpus_per_node", [8, 1])
def test_hidden_ring_sends_slow_the_attention_by_their_channels(gpus_per_node):
    # Llama-3 8B at 128K on cp = 8, the blocks' attention far longer than their sends, so the ring
    # hides whole and costs only the slowdown its kernels inflict on the attention beside them:
    # overlap_slowdown for a send inside the node (2 channels per NVLink, a collective's full set),
    # and 4 / 36 of it for one to a peer in another node (a 400 Gb/s NIC: ceil(50 / 14) = 4 channels
    # in NCCL 2.29+, against 2 x 18 NVLinks of the H100).
    tr = TrainingSpec(sequence_length=131072, global_batch_sequences=1, total_tokens=1e9)
    sy = cluster("h100_sxm", 8, hb_size=gpus_per_node)
    st = Strategy(cp=8, recompute="full", cp_comm="p2p", overlap_dp_comm=False)
    sigma = 0.3
    slow = dataclasses.replace(BARE, compute=dataclasses.replace(BARE.compute, overlap_slowdown=sigma))
    r, free = _run(st, sy, tr, slow), _run(st, sy, tr)
    share = 1.0 if gpus_per_node == 8 else 4 / 36
    assert r["iteration_time_s"] - free["iteration_time_s"] == pytest.approx(sigma * share * r["cp_s"], rel=1e-9)


def test_ulysses_all_to_all_is_exposed_by_hand():
    # DeepSpeed-Ulysses on cp = 8: per layer and pass, all-to-alls of each rank's Q (s/cp·32·128),
    # K and V (s/cp·2·8·128) and output (s/cp·32·128), 2 B each; forward and backward; nothing to hide
    # behind, so the iteration grows by exactly the all-to-all time.
    tr = TrainingSpec(sequence_length=32768, global_batch_sequences=1, total_tokens=1e9)
    sy = cluster("h100_sxm", 8)
    st = Strategy(cp=8, cp_comm="a2a", overlap_dp_comm=False)
    r = _run(st, sy, tr)
    shape = coll.GroupShape(size=8, ranks_per_domain=8, domain_span=1, same_rail=True)
    tok = 32768 / 8 * 2

    def a2a(width):
        return coll.collective_time_s("all_to_all", tok * width, shape, sy, CAL.collectives)

    want = 32 * 2 * (2 * a2a(32 * 128) + a2a(2 * 8 * 128))
    assert r["cp_s"] == pytest.approx(want, rel=1e-9)
    fast = _run(st, _fast_links(sy), tr)
    assert ((r["iteration_time_s"] - r["dp_s"]) - (fast["iteration_time_s"] - fast["dp_s"])
            == pytest.approx(r["cp_s"] - fast["cp_s"], rel=1e-9))
    # heads must split over tp x cp
    bad = evaluate_system(LLAMA8, tr, Strategy(tp=8, cp=8, cp_comm="a2a", sequence_parallel=True),
                          cluster("h100_sxm", 64), calib=CAL)
    assert not isinstance(bad, Metrics) and "a2a" in bad.reason and "32 attention heads" in bad.reason


def test_all_gather_kv_matches_the_earlier_model():
    # the all-gather variant: the full sequence's K,V gathered per forward pass and for the backward,
    # with one reduce-scatter of their gradients
    tr = TrainingSpec(sequence_length=32768, global_batch_sequences=1, total_tokens=1e9)
    sy = cluster("h100_sxm", 8)
    r = _run(Strategy(cp=8, cp_comm="all_gather"), sy, tr)
    shape = coll.GroupShape(size=8, ranks_per_domain=8, domain_span=1, same_rail=True)
    kv = 32768 * 2 * 8 * 128 * 2
    want = 32 * (2 * coll.collective_time_s("all_gather", kv, shape, sy, CAL.collectives)
                 + coll.collective_time_s("reduce_scatter", kv, shape, sy, CAL.collectives))
    assert r["cp_s"] == pytest.approx(want, rel=1e-9)


def test_activation_offload_memory_by_hand():
    # DP 8, no PP (one microbatch in flight): offloading 16 of the 32 layers moves half of the
    # layers' saved activations to host memory; the fp32 logits (s·V·4 B) stay.
    tr = TrainingSpec(sequence_length=8192, global_batch_sequences=8, total_tokens=1e9)
    sy = cluster("h100_sxm", 8)
    on = _run(Strategy(dp=8), sy, tr)
    off = _run(Strategy(dp=8, offload_activation_layers=16), sy, tr)
    logits = 8192 * LLAMA8.vocab_size * 4.0
    layers = on["activations_bytes"] - logits
    assert on["activations_bytes"] - off["activations_bytes"] == pytest.approx(layers / 2, rel=1e-9)
    assert off["host_memory_bytes"] == pytest.approx(layers / 2, rel=1e-9)
    # the copies take time over PCIe; over a link 10^4 times faster they hide behind the compute
    assert off["iteration_time_s"] >= on["iteration_time_s"]
    gpu = sy.gpu.model_copy(update={"host_link_bytes_per_s": sy.gpu.host_link_bytes_per_s * 1e4})
    fast = _run(Strategy(dp=8, offload_activation_layers=16), sy.model_copy(update={"gpu": gpu}), tr)
    assert fast["iteration_time_s"] == pytest.approx(on["iteration_time_s"], rel=1e-12)


def test_weight_offload_moves_model_states_to_host():
    # FSDP with the 16-bit weights, gradients and optimizer states in host memory (FSDP2
    # CPUOffloadPolicy): HBM keeps only the gathered layers; needs ZeRO-3
    tr = TrainingSpec(sequence_length=8192, global_batch_sequences=8, total_tokens=1e9)
    sy = cluster("h100_sxm", 8)
    kw = dict(dp=8, zero_stage=3, recompute="full")
    on = _run(Strategy(**kw), sy, tr, calib=CAL)
    off = _run(Strategy(**kw, offload_weights=True), sy, tr, calib=CAL)
    assert off["weights_bytes"] == off["gradients_bytes"] == off["optimizer_bytes"] == 0.0
    assert off["host_memory_bytes"] == pytest.approx(
        on["weights_bytes"] + on["gradients_bytes"] + on["optimizer_bytes"], rel=1e-9)
    assert off["other_bytes"] == on["other_bytes"]  # the gathered layers stay in HBM
    assert off["iteration_time_s"] > on["iteration_time_s"]
    bad = evaluate_system(LLAMA8, tr, Strategy(dp=8, zero_stage=1, offload_weights=True), sy, calib=CAL)
    assert not isinstance(bad, Metrics) and "zero_stage 3" in bad.reason


def test_selective_recompute_of_the_attention_core_repeats_its_ring():
    # Megatron's selective recompute of core_attn checkpoints Transformer Engine's attention, and the
    # context-parallel ring runs inside it: the recomputed core sends the forward's K,V blocks again,
    # as a full recompute does. The ring case above, by hand: 32 layers x 7 steps x (n_fwd x forward
    # block + backward pair of blocks).
    tr = TrainingSpec(sequence_length=131072, global_batch_sequences=1, total_tokens=1e9)
    sy = cluster("h100_sxm", 8)
    block = 131072 / 8 * 2 * 8 * 128 * 2
    shape = coll.GroupShape(size=8, ranks_per_domain=8, domain_span=1, same_rail=True)
    t_f = coll.collective_time_s("send_recv", block, shape, sy, CAL.collectives)
    t_b = coll.collective_time_s("send_recv", 2 * block, shape, sy, CAL.collectives)
    for recompute, n_fwd in ((dict(recompute="none"), 1), (dict(recompute="selective", recompute_modules=("core_attn",)), 2),
                             (dict(recompute="selective", recompute_modules=("layernorm",)), 1),
                             (dict(recompute="full"), 2)):
        r = _run(Strategy(cp=8, cp_comm="p2p", overlap_dp_comm=False, **recompute), sy, tr)
        assert r["cp_s"] == pytest.approx(32 * 7 * (n_fwd * t_f + t_b), rel=1e-9), recompute


def test_ulysses_needs_cp_to_split_each_ranks_key_value_heads():
    # Transformer Engine's a2a attention asserts that cp divides a rank's query and key/value heads
    # (context_parallel.py); Llama-3 8B has 32 query and 8 key/value heads, and a TP rank holds
    # max(8 / tp, 1) of the latter: tp 2 x cp 4 splits 4 of them, tp 4 x cp 4 (2 per rank) does not,
    # tp 8 x cp 2 (1 per rank, replicated) does not, though tp x cp divides the 32 query heads in each.
    tr = TrainingSpec(sequence_length=32768, global_batch_sequences=8, total_tokens=1e9)
    sy = cluster("h100_sxm", 64)
    for tp, cp, fits in ((2, 4, True), (4, 4, False), (8, 2, False), (1, 8, True)):
        st = Strategy(tp=tp, cp=cp, dp=64 // (tp * cp), cp_comm="a2a", sequence_parallel=tp > 1)
        code = int(iteration_arrays(LLAMA8, tr, StrategyArrays.from_strategies([st]), sy, CAL)["code"][0])
        assert (code != 18) == fits, (tp, cp, code)
        if not fits:
            bad = evaluate_system(LLAMA8, tr, st, sy, calib=CAL)
            assert not isinstance(bad, Metrics) and f"a TP rank's {max(8 // tp, 1)} key/value heads" in bad.reason
