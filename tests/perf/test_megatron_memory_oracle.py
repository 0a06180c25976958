"""Checks of the Megatron-LM theoretical-memory oracle (tests/perf/megatron_memory_oracle.py).

1. The oracle reproduces parameter counts, bytes/param and activation bytes written out by hand from the plain
   transformer formulas (dense Llama-3 70B with GQA + SwiGLU, GPT-3 175B, DeepSeek-V3 with MLA + MoE + MTP).
2. The numbers stored in tests/perf/data/megatron_memory_cases.yaml equal what the oracle computes now.
3. Megatron's own unit tests of compute_weight_and_optimizer_memory (tests/unit_tests/training/
   test_weight_and_optimizer_memory.py at the same commit) pass against the port, with their expected values.
4. Monotonicity and invariance facts the formula must have.
"""

from __future__ import annotations

import dataclasses
import math

import pytest

from tests.perf import megatron_memory_oracle as mo

CASES = mo.load_cases()["cases"]

# Llama-3 70B, TP4 PP4 VP5 CP1 DP4, distributed optimizer, SP, selective recompute.
LLAMA3_70B = mo.MegatronArgs(
    num_layers=80,
    hidden_size=8192,
    num_attention_heads=64,
    group_query_attention=True,
    num_query_groups=8,
    ffn_hidden_size=28672,
    swiglu=True,
    normalization="RMSNorm",
    add_bias_linear=False,
    untie_embeddings_and_output_weights=True,
    padded_vocab_size=mo.pad_vocab_size(128256, 4),
    seq_length=8192,
    micro_batch_size=1,
    global_batch_size=128,
    tensor_model_parallel_size=4,
    pipeline_model_parallel_size=4,
    virtual_pipeline_model_parallel_size=5,
    data_parallel_size=4,
    use_distributed_optimizer=True,
    sequence_parallel=True,
    recompute_granularity="selective",
)


def _replace(args: mo.MegatronArgs, **kw) -> mo.MegatronArgs:
    return dataclasses.replace(args, **kw)


# ----------------------------------------------------------------------------------------------------------
# 1. Hand arithmetic


def test_llama3_70b_by_hand():
    h, a, g, F, L, tp, pp, vp, dp = 8192, 64, 8, 28672, 80, 4, 4, 5, 4
    s, b = 8192, 1
    d = h // a  # head dim 128
    V = math.ceil(128256 / (128 * tp)) * 128 * tp  # Megatron pads to a multiple of 128 * TP
    assert V == 128512

    # Parameters, written out per weight matrix (GQA attention, SwiGLU MLP, RMSNorm without bias, no biases).
    q, k, v, o = h * (a * d), h * (g * d), h * (g * d), (a * d) * h
    attention = q + k + v + o
    assert attention == 2 * h * h * (1 + g / a) == 150_994_944
    mlp = h * F + h * F + F * h  # gate, up, down
    assert mlp == 704_643_072
    norms = 2 * h
    layer = attention + mlp + norms
    assert layer == 855_654_400
    block = L * layer + h  # + final RMSNorm
    embeddings = 2 * V * h  # untied input embedding and output layer
    total = block + embeddings
    assert total == 70_557_900_800
    assert total - 2 * h * (V - 128256) == 70_553_706_496  # the unpadded (HF checkpoint) count

    # Most loaded shard = PP rank 0: 1/PP of the layers + input embedding; everything but the norms is TP-sharded.
    shard = ((attention + mlp) * L / pp + V * h) / tp + (norms * L + h) / pp
    assert shard == 4_541_712_384

    # bf16 param (2) + fp32 grad (4) + fp32 master param, Adam m, Adam v (3 * 4) sharded over DP.
    bytes_per_param = 2 + 4 + (4 + 4 + 4) / dp
    assert bytes_per_param == 9

    # Activations (Korthikanti et al. Table 2, SP + selective): s*b*h*(18 + 4F/h) per layer, L layers on the
    # first stage's PP in-flight microbatches, embedding input (8 B/token) and dropout mask (1 B/elem) per
    # in-flight microbatch, interleaving penalty, all divided by TP.
    sbh = s * b * h
    act = (sbh * (18 + 4 * F / h) * L + 8 * s * b * pp + sbh * pp) * (1 + (pp - 1) / (pp * vp)) / tp
    assert act == pytest.approx(49_469_374_464, rel=1e-15)

    mem = mo.theoretical_memory(LLAMA3_70B)
    w = mem.weights
    assert w.num_total_parameters == total
    assert w.num_active_parameters == total
    assert w.num_parameters_in_transformer_block == block
    assert w.num_parameters_in_embedding_layers == embeddings
    assert w.num_parameters_on_most_loaded_model_shard == shard
    assert w.num_parameters_on_other_model_shards == ((attention + mlp) * L / pp) / tp + (norms * L + h) / pp
    assert w.bytes_per_parameter == bytes_per_param
    assert mem.weight_and_optimizer_bytes == shard * bytes_per_param == 40_875_411_456
    assert mem.activation_formula == "sp_selective"
    assert mem.activation_bytes == pytest.approx(act, rel=1e-15)
    assert mem.total_bytes == pytest.approx(40_875_411_456 + 49_469_374_464, rel=1e-15)
    assert mem.num_microbatches == 128 // (1 * dp)
    assert mem.in_flight_microbatches == math.ceil(1.15 * pp) == 5
    wo, act_mib, tot_mib = mem.as_mib()
    assert wo == pytest.approx(38_981.830078125)
    assert act_mib == pytest.approx(47_177.671875)
    assert tot_mib == pytest.approx(86_159.501953125)


def test_gpt3_175b_by_hand():
    h, L, V, tp, pp, dp, s = 12288, 96, 51200, 8, 8, 16, 2048
    args = mo.args_from_case(CASES["gpt3-175b_tp8_pp8_dp16"])
    assert args.padded_vocab_size == V  # 51200 = 50 * (128 * 8): no padding
    # 12*l*h^2 (4h^2 attention + 8h^2 GeLU MLP); LayerNorm weight+bias: 2 * 2h per layer + 2h final; tied
    # embedding V*h. Linear biases and the learned position embedding are not counted by Megatron's report.
    total = 12 * L * h**2 + 4 * L * h + 2 * h + V * h
    assert total == 174_580_064_256
    shard = (12 * h**2 * L / pp + V * h) / tp + (4 * h * L + 2 * h) / pp
    mem = mo.theoretical_memory(args)
    assert mem.num_total_parameters == total
    assert mem.num_parameters_on_most_loaded_model_shard == shard == 2_797_145_088
    assert mem.weights.bytes_per_parameter == 6 + 12 / dp == 6.75
    assert mem.weight_and_optimizer_bytes == shard * 6.75
    sbh = s * h
    # 1F1B: min(1, m/PP) = 1 with 96 microbatches
    assert mem.activation_bytes == (34 * sbh * L + 8 * s * pp + sbh * pp) / tp == 10_292_838_400

    plain = mo.theoretical_memory(mo.args_from_case(CASES["gpt3-175b_tp8_pp8_dp16_no-distopt_no-recompute"]))
    assert plain.weights.bytes_per_parameter == 18  # 2 + 4 + 4 + 4 + 4
    assert plain.weight_and_optimizer_bytes == shard * 18
    assert plain.activation_formula == "without_sp"  # no recompute -> the other formula, even with SP on
    assert plain.activation_bytes == pytest.approx((sbh * (10 + 24 / tp) * L + 8 * s * pp + sbh * pp) * 1.05)


def test_deepseek_v3_by_hand():
    """MLA + MoE (3 dense, 58 MoE layers) + 1 MTP layer, counted per weight matrix."""
    h, n, L, V = 7168, 128, 61, 129280
    q_lora, kv_lora, qk, pe, vd = 1536, 512, 128, 64, 128
    attention = (
        h * q_lora + q_lora  # q down-projection + q RMSNorm
        + q_lora * n * (qk + pe)  # q up-projection (nope + rope parts)
        + h * (kv_lora + pe)  # kv down-projection + shared rope key
        + kv_lora  # kv RMSNorm
        + kv_lora * n * (qk + vd)  # k_nope and v up-projection
        + n * vd * h  # output projection
    )
    dense_layer = attention + 3 * h * 18432 + 2 * h
    moe_layer = attention + 3 * h * 2048 * 256 + 3 * h * 2048 + h * 256 + 2 * h  # routed + shared + router
    main = 3 * dense_layer + 58 * moe_layer + h + 2 * V * h
    mtp = moe_layer  # the MTP layer follows the last layer's type (MoE); eh_proj and its norms are not counted
    mem = mo.theoretical_memory(mo.args_from_case(CASES["deepseek-v3_tp1_pp16_vp2_ep64_dp128"]))
    w = mem.weights
    assert w.num_parameters_in_mtp_block == mtp
    assert w.num_total_parameters == main + mtp
    assert main / 1e9 == pytest.approx(671.0, abs=0.1)  # DeepSeek-V3's published 671 B
    # first stage: 1/16 of the non-expert block + the MTP layer + the input embedding (TP1), experts over EP64
    expert = 3 * h * 2048 * 256
    assert w.expert_sharded_params_on_most_loaded_shard == (58 * expert / 16 + expert) / 64
    assert w.expert_data_parallel_size == 2048 // (1 * 64 * 16) == 2
    assert w.bytes_per_expert_parameter == 6 + 12 / 2
    assert w.bytes_per_parameter == 6 + 12 / 128
    # the report's "active" count includes the whole MTP block (all 256 experts) and both embeddings
    active_layer = moe_layer - 3 * h * 2048 * (256 - 8)
    assert w.num_active_parameters == 3 * dense_layer + 58 * active_layer + h + 2 * V * h + mtp
    assert mem.activation_formula == "without_sp"  # TP = 1 switches SP off


def test_mixtral_counts():
    mem = mo.theoretical_memory(mo.args_from_case(CASES["mixtral-8x7b_tp1_pp4_ep8_dp8"]))
    h, F = 4096, 14336
    attention = 2 * h * h * (1 + 8 / 32)
    layer = attention + 8 * 3 * h * F + 8 * h + 2 * h  # 8 SwiGLU experts + router (no bias) + 2 RMSNorms
    assert mem.num_total_parameters == 32 * layer + h + 2 * 32000 * h
    assert mem.num_total_parameters / 1e9 == pytest.approx(46.70, abs=0.01)
    assert mem.weights.num_active_parameters / 1e9 == pytest.approx(12.88, abs=0.01)
    assert mem.weights.expert_data_parallel_size == 1
    assert mem.weights.bytes_per_expert_parameter == 18  # EDP = 1: the distributed optimizer shards nothing


# ----------------------------------------------------------------------------------------------------------
# 2. Stored YAML numbers


@pytest.mark.parametrize("name", sorted(CASES))
def test_yaml_case_matches_oracle(name):
    stored = CASES[name]["oracle"]
    now = mo.case_outputs(CASES[name])
    assert set(stored) == set(now)
    for key, value in now.items():
        if isinstance(value, float) and stored[key] is not None:
            assert stored[key] == pytest.approx(value, rel=1e-12, abs=0), key
        else:
            assert stored[key] == value, key


def test_yaml_has_required_cases():
    assert {
        "llama3-70b_tp4_pp4_vp5_cp1_dp4",
        "llama3-70b_tp4_pp4_vp5_cp2_dp4",
        "gpt3-175b_tp8_pp8_dp16",
        "mixtral-8x7b_tp1_pp4_ep8_dp8",
        "deepseek-v3_tp1_pp16_vp2_ep64_dp128",
    } <= set(CASES)
    assert mo.args_from_case(CASES["llama3-70b_tp4_pp4_vp5_cp1_dp4"]) == LLAMA3_70B


def test_report_prints_mib_triple():
    triple = mo.report_theoretical_memory(LLAMA3_70B, num_microbatches=32)
    assert triple == mo.theoretical_memory(LLAMA3_70B).as_mib()
    assert mo.report_theoretical_memory(_replace(LLAMA3_70B, hybrid_layer_pattern="M*M*")) is None


# ----------------------------------------------------------------------------------------------------------
# 3. Megatron's own unit tests (tests/unit_tests/training/test_weight_and_optimizer_memory.py), ported


def _upstream_args(**overrides):
    base = dict(
        add_bias_linear=False,
        data_parallel_size=16,
        expert_model_parallel_size=2,
        expert_tensor_parallel_size=4,
        ffn_hidden_size=16,
        group_query_attention=False,
        hidden_size=8,
        kv_channels=4,
        moe_ffn_hidden_size=16,
        moe_latent_size=None,
        moe_layer_freq=(0, 1),
        moe_router_topk=1,
        moe_shared_expert_gate=False,
        moe_shared_expert_intermediate_size=8,
        mtp_num_layers=None,
        multi_latent_attention=False,
        normalization="RMSNorm",
        num_attention_heads=2,
        num_experts=4,
        num_layers=2,
        padded_vocab_size=32,
        pipeline_model_parallel_size=1,
        swiglu=False,
        tensor_model_parallel_size=2,
        untie_embeddings_and_output_weights=False,
        use_distributed_optimizer=True,
        world_size=32,
        seq_length=16,
    )
    base.update(overrides)
    return mo.MegatronArgs(**base)


def test_upstream_accounts_for_expert_parallelism():
    args = _upstream_args(pipeline_model_parallel_size=2, world_size=64)
    tp_sharded = ((256 + 256 + 256 + 128) / 2 + 256) / 2
    replicated = (16 + 16 + 32 + 8) / 2
    expert_sharded = 1024 / 2 / (4 * 2)
    expected = (tp_sharded + replicated) * (6 + 12 / 16) + expert_sharded * (6 + 12 / 4)
    assert math.isclose(mo.compute_weight_and_optimizer_memory(args), expected)


def test_upstream_decreases_with_tensor_parallelism():
    memories = [
        mo.compute_weight_and_optimizer_memory(
            _upstream_args(
                data_parallel_size=16,
                expert_model_parallel_size=1,
                expert_tensor_parallel_size=1,
                tensor_model_parallel_size=tp,
                use_distributed_optimizer=False,
                world_size=16 * tp,
            )
        )
        for tp in (1, 2, 4)
    ]
    assert memories[0] > memories[1] > memories[2]


def test_upstream_decreases_with_expert_parallelism():
    memories = [
        mo.compute_weight_and_optimizer_memory(
            _upstream_args(expert_model_parallel_size=ep, expert_tensor_parallel_size=etp)
        )
        for ep, etp in ((1, 1), (2, 1), (2, 2), (4, 2))
    ]
    assert memories[0] > memories[1] > memories[2] > memories[3]


def test_upstream_accounts_for_latent_moe_experts():
    args = _upstream_args(moe_latent_size=4)
    tp_sharded = ((256 + 256) + (256 + 128) + 256) / 2
    replicated = 16 + (16 + 64 + 32) + 8
    expert_sharded = 512 / (4 * 2)
    expected = (tp_sharded + replicated) * (6 + 12 / 16) + expert_sharded * (6 + 12 / 4)
    assert math.isclose(mo.compute_weight_and_optimizer_memory(args), expected)


# ----------------------------------------------------------------------------------------------------------
# 4. Monotonicity / invariance


def _dense(**kw):
    """Llama-3 70B at a given layout; world size follows from DP."""
    tp = kw.get("tensor_model_parallel_size", LLAMA3_70B.tensor_model_parallel_size)
    kw.setdefault("padded_vocab_size", mo.pad_vocab_size(128256, tp))
    return _replace(LLAMA3_70B, **kw)


def _mem(args, m=None):
    return mo.theoretical_memory(args, num_microbatches=m)


@pytest.mark.parametrize("recompute,sp", [("selective", True), (None, True), ("selective", False)])
def test_more_tp_less_memory(recompute, sp):
    mems = [_mem(_dense(tensor_model_parallel_size=t, recompute_granularity=recompute, sequence_parallel=sp))
            for t in (2, 4, 8)]
    for a, b in zip(mems, mems[1:]):
        assert b.weight_and_optimizer_bytes < a.weight_and_optimizer_bytes
        assert b.activation_bytes < a.activation_bytes


def test_more_pp_less_weight_memory_same_layer_activations():
    mems = [_mem(_dense(pipeline_model_parallel_size=p, virtual_pipeline_model_parallel_size=None), m=64)
            for p in (2, 4, 8)]
    for a, b in zip(mems, mems[1:]):
        assert b.weight_and_optimizer_bytes < a.weight_and_optimizer_bytes
        # 1F1B: the first stage holds L/PP layers for PP microbatches, so only the embedding terms grow with PP
        assert b.activation_bytes > a.activation_bytes
        assert b.activation_bytes == pytest.approx(a.activation_bytes, rel=0.02)


def test_distributed_optimizer_bytes_per_param():
    for dp in (1, 2, 8, 64):
        on = _mem(_dense(data_parallel_size=dp)).weights
        off = _mem(_dense(data_parallel_size=dp, use_distributed_optimizer=False)).weights
        assert on.bytes_per_parameter == 6 + 12 / dp
        assert off.bytes_per_parameter == 18
        assert on.num_parameters_on_most_loaded_model_shard == off.num_parameters_on_most_loaded_model_shard
    assert _mem(_dense(data_parallel_size=1)).weight_and_optimizer_bytes == _mem(
        _dense(data_parallel_size=1, use_distributed_optimizer=False)).weight_and_optimizer_bytes
    seq = [_mem(_dense(data_parallel_size=dp)).weight_and_optimizer_bytes for dp in (1, 2, 8, 64)]
    assert seq == sorted(seq, reverse=True) and len(set(seq)) == 4
    plain = {_mem(_dense(data_parallel_size=dp, use_distributed_optimizer=False)).weight_and_optimizer_bytes
             for dp in (1, 2, 8, 64)}
    assert len(plain) == 1  # without the distributed optimizer DP changes nothing


def test_interleaving_penalty():
    base = _mem(_dense(virtual_pipeline_model_parallel_size=None), m=64).activation_bytes
    vps = [_mem(_dense(virtual_pipeline_model_parallel_size=v), m=64).activation_bytes for v in (2, 4, 5, 10)]
    assert all(v > base for v in vps)  # interleaving keeps more activations in flight
    assert vps == sorted(vps, reverse=True)  # ... less so with more virtual stages
    assert vps[-1] == pytest.approx(base * (1 + 3 / 40))
    # VP = 1 means no interleaving (validate_args sets it to None)
    assert _mem(_dense(virtual_pipeline_model_parallel_size=1), m=64).activation_bytes == base


def test_fewer_microbatches_than_stages_discount():
    args = _dense(virtual_pipeline_model_parallel_size=None)
    full = _mem(args, m=4).activation_bytes
    assert _mem(args, m=100).activation_bytes == full
    assert _mem(args, m=None).activation_bytes == full
    assert _mem(args, m=2).activation_bytes == pytest.approx(full / 2)
    assert _mem(args, m=1).in_flight_microbatches == 1


def test_activations_grow_with_sequence_and_micro_batch():
    a = _mem(_dense(seq_length=4096)).activation_bytes
    b = _mem(_dense(seq_length=8192)).activation_bytes
    c = _mem(_dense(seq_length=8192, micro_batch_size=2)).activation_bytes
    assert a < b < c
    assert b == pytest.approx(2 * a) and c == pytest.approx(2 * b)


def test_sp_selective_formula_below_the_other_for_tp_gt_1():
    for tp in (2, 4, 8):
        sp = _mem(_dense(tensor_model_parallel_size=tp))
        no = _mem(_dense(tensor_model_parallel_size=tp, sequence_parallel=False))
        assert sp.activation_formula == "sp_selective" and no.activation_formula == "without_sp"
        assert sp.activation_bytes < no.activation_bytes
        assert sp.weight_and_optimizer_bytes == no.weight_and_optimizer_bytes


def test_tp1_switches_sequence_parallel_off():
    args = _dense(tensor_model_parallel_size=1, sequence_parallel=True)
    assert mo.validate_args(args).sequence_parallel is False
    assert _mem(args).activation_formula == "without_sp"


def test_report_ignores_context_parallelism():
    cp1, cp2 = (_mem(mo.args_from_case(CASES[f"llama3-70b_tp4_pp4_vp5_cp{c}_dp4"])) for c in (1, 2))
    assert cp1.weight_and_optimizer_bytes == cp2.weight_and_optimizer_bytes
    assert cp1.activation_bytes == cp2.activation_bytes
    # ... except the expert data-parallel size, which is world // (ETP*EP*PP) and so includes CP
    assert cp1.weights.expert_data_parallel_size == 4 and cp2.weights.expert_data_parallel_size == 8


def test_more_ep_less_expert_memory():
    base = mo.args_from_case(CASES["mixtral-8x7b_tp1_pp4_ep8_dp8"])
    mems = [_mem(_replace(base, expert_model_parallel_size=ep)) for ep in (1, 2, 4, 8)]
    for a, b in zip(mems, mems[1:]):
        assert b.weights.expert_sharded_params_on_most_loaded_shard < a.weights.expert_sharded_params_on_most_loaded_shard
        assert b.weights.expert_data_parallel_size < a.weights.expert_data_parallel_size
        assert b.activation_bytes == a.activation_bytes  # MoE does not enter the activation formulas
    assert mems[0].weights.expert_data_parallel_size == 8
    # with EDP shrinking the optimizer is sharded less, but the 1/EP weight split still wins
    assert [m.weight_and_optimizer_bytes for m in mems] == sorted((m.weight_and_optimizer_bytes for m in mems),
                                                                   reverse=True)


def test_untied_pp1_counts_both_embeddings_on_the_shard():
    tied = _mem(_dense(pipeline_model_parallel_size=1, virtual_pipeline_model_parallel_size=None,
                       untie_embeddings_and_output_weights=False)).weights
    untied = _mem(_dense(pipeline_model_parallel_size=1, virtual_pipeline_model_parallel_size=None)).weights
    V, h, tp = LLAMA3_70B.padded_vocab_size, 8192, 4
    assert untied.num_parameters_on_most_loaded_model_shard - tied.num_parameters_on_most_loaded_model_shard == V * h / tp
    assert untied.num_total_parameters - tied.num_total_parameters == V * h


def test_validate_args_defaults():
    v = mo.validate_args(mo.MegatronArgs(num_layers=2, hidden_size=4096, num_attention_heads=32,
                                         padded_vocab_size=32000, seq_length=128, swiglu=True,
                                         data_parallel_size=2, num_experts=4))
    assert v.ffn_hidden_size == int((4 * 4096 * 2 / 3) / 64) * 64 == 10880
    assert v.kv_channels == 128
    assert v.moe_ffn_hidden_size == v.ffn_hidden_size
    assert v.expert_tensor_parallel_size == v.tensor_model_parallel_size
    assert v.world_size == 2
    assert mo.validate_args(v) == v  # idempotent
    assert mo.validate_args(_replace(v, swiglu=False, ffn_hidden_size=None)).ffn_hidden_size == 4 * 4096
    assert mo.pad_vocab_size(128256, 8) == 129024
    assert mo.pad_vocab_size(32000, 1) == 32000
    with pytest.raises(AssertionError):  # world size not divisible by TP * PP * CP
        mo.validate_args(_replace(v, tensor_model_parallel_size=2, world_size=3, data_parallel_size=None))
