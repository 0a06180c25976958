"""Properties of the performance model (hypothesis)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from designer.perf.model import StrategyArrays, evaluate_many, load_perf_calibration
from designer.perf.iteration import iteration_arrays
from designer.spec.llm import TrainingSpec
from designer.spec.models import load_model
from tests.perf.systems import cluster

CAL = load_perf_calibration()
LLM = load_model("llama3-8b")
MOE = load_model("mixtral-8x7b")
TR = TrainingSpec(sequence_length=4096, global_batch_sequences=512, total_tokens=1e12)
N = 256

# A random family of strategies for 256 GPUs, as columns (dp fills the machine).
strategy_cols = st.fixed_dictionaries({
    "tp": st.sampled_from([1, 2, 4, 8]), "pp": st.sampled_from([1, 2, 4]), "cp": st.sampled_from([1, 2]),
    "mbs": st.sampled_from([1, 2]), "zero": st.sampled_from([0, 1, 3]), "recompute": st.sampled_from([0, 1, 2]),
    "sp": st.booleans(), "overlap_dp": st.booleans(), "overlap_tp": st.booleans(),
    "interleaved": st.booleans(),
})


def _arrays(draws, moe=False):
    rows = []
    for d in draws:
        dp = N // (d["tp"] * d["pp"] * d["cp"])
        inter = d["interleaved"] and d["pp"] > 1
        rows.append(dict(tp=d["tp"], pp=d["pp"], dp=dp, ep=4 if moe else 1, cp=d["cp"], sp=d["sp"], mbs=d["mbs"],
                         schedule=2 if inter else 1, v=2 if inter else 1, zero=d["zero"],
                         qwz=False, qgz=False, hpz=False, recompute=d["recompute"], overlap_dp=d["overlap_dp"],
                         overlap_tp=d["overlap_tp"]))
    return StrategyArrays(**{k: [r[k] for r in rows] for k in rows[0]})


@settings(max_examples=10, deadline=None)
@given(st.lists(strategy_cols, min_size=4, max_size=12), st.sampled_from(["hb", "leaf", "spine", "nic", "nics", "hbm"]),
       st.floats(1.0, 8.0), st.booleans())
def test_more_bandwidth_is_never_slower(draws, which, factor, moe):
    # "nics": two or four 400G NICs per GPU where the base has one (more bandwidth, more channels)
    S = _arrays(draws, moe)
    llm = MOE if moe else LLM
    base = cluster("h100_sxm", N, leaf_span=8)
    if which == "hbm":
        gpu = base.gpu.model_copy(update={"hbm_bandwidth_bytes_per_s": base.gpu.hbm_bandwidth_bytes_per_s * factor})
        faster = base.model_copy(update={"gpu": gpu})
        t0 = evaluate_many(llm, TR, S, base, calib=CAL)
        t1 = evaluate_many(llm, TR, S, faster, calib=CAL)
        assert np.all(t1.iteration_time_s[t0.feasible] <= t0.iteration_time_s[t0.feasible] * (1 + 1e-12))
        return
    hb = 450.0 * factor if which == "hb" else None
    nic = 400.0 * factor if which == "nic" else 400.0
    faster = cluster("h100_sxm", N, leaf_span=8, hb_gb_per_s=hb, nic_gbps=nic)
    if which == "nics":
        k = 2 if factor < 4.0 else 4
        faster = cluster("h100_sxm", N, leaf_span=8, nic_gbps=400.0 * k).model_copy(update={"nics_per_gpu": k})
    if which in ("leaf", "spine"):
        i = 0 if which == "leaf" else 1
        tiers = list(base.tiers)
        tiers[i] = tiers[i].model_copy(update={"bandwidth_per_gpu_bytes_per_s": tiers[i].bandwidth_per_gpu_bytes_per_s * factor})
        faster = base.model_copy(update={"tiers": tuple(tiers)})
    t0 = evaluate_many(llm, TR, S, base, calib=CAL)
    t1 = evaluate_many(llm, TR, S, faster, calib=CAL)
    ok = t0.feasible
    assert np.all(t1.iteration_time_s[ok] <= t0.iteration_time_s[ok] * (1 + 1e-12))


@settings(max_examples=10, deadline=None)
@given(st.lists(strategy_cols, min_size=4, max_size=12))
def test_time_is_at_least_the_compute_bound(draws):
    S = _arrays(draws)
    r = iteration_arrays(LLM, TR, S, cluster("h100_sxm", N), CAL)
    ok = r["code"] == 0
    peak = 989e12
    bound = r["hardware_flops"] / (r["n_gpus"] * peak)  # every GPU at dense peak, nothing else
    assert np.all(r["iteration_time_s"][ok] >= bound[ok])
    assert np.all(r["iteration_time_s"][ok] >= r["compute_s"][ok] * (1 - 1e-12))


@settings(max_examples=10, deadline=None)
@given(st.lists(strategy_cols, min_size=2, max_size=8))
def test_memory_grows_with_microbatch_size(draws):
    for d in draws:
        d["mbs"] = 1
    S1 = _arrays(draws)
    S2 = _arrays([{**d, "mbs": 2} for d in draws])
    sy = cluster("h100_sxm", N)
    m1 = iteration_arrays(LLM, TR, S1, sy, CAL)["memory_per_gpu_bytes"]
    m2 = iteration_arrays(LLM, TR, S2, sy, CAL)["memory_per_gpu_bytes"]
    assert np.all(m2 > m1)


@settings(max_examples=10, deadline=None)
@given(st.lists(strategy_cols, min_size=2, max_size=8), st.floats(1e9, 1e14))
def test_time_to_train_scales_with_tokens(draws, tokens):
    S = _arrays(draws)
    sy = cluster("h100_sxm", N)
    a = evaluate_many(LLM, TR, S, sy, calib=CAL)
    b = evaluate_many(LLM, TR.model_copy(update={"total_tokens": 2 * tokens}), S, sy, calib=CAL)
    c = evaluate_many(LLM, TR.model_copy(update={"total_tokens": tokens}), S, sy, calib=CAL)
    assert np.allclose(b.time_to_train_s, 2 * c.time_to_train_s, rtol=1e-12)
    assert np.allclose(a.iteration_time_s, b.iteration_time_s, rtol=0)


@settings(max_examples=10, deadline=None)
@given(st.lists(strategy_cols, min_size=2, max_size=8), st.booleans())
def test_relabelling_symmetric_tiers_changes_nothing(draws, moe):
    """Renaming the tiers is a relabelling: the model must not depend on names."""
    S = _arrays(draws, moe)
    llm = MOE if moe else LLM
    sy = cluster("h100_sxm", N, leaf_span=8)
    renamed = sy.model_copy(update={"tiers": tuple(t.model_copy(update={"name": f"x{i}"}) for i, t in enumerate(sy.tiers))})
    a = evaluate_many(llm, TR, S, sy, calib=CAL)
    b = evaluate_many(llm, TR, S, renamed, calib=CAL)
    assert np.array_equal(a.iteration_time_s, b.iteration_time_s)
    assert np.array_equal(a.memory_per_gpu_bytes, b.memory_per_gpu_bytes)


@settings(max_examples=10, deadline=None)
@given(st.lists(strategy_cols, min_size=4, max_size=12), st.sampled_from(["fp8", "mxfp8", "nvfp4"]),
       st.sampled_from(["delayed", "current", "blockwise"]), st.booleans())
def test_low_precision_is_never_slower_than_bf16(draws, precision, recipe, moe):
    # Transformer Engine's recipes; torchao's rowwise fp8 is left out: measured slower than bf16 on
    # the same runs (torchtitan, TT-30 3,915 against TT-26 4,809 tokens/s per GPU)
    S = _arrays(draws, moe)
    llm = MOE if moe else LLM
    sy = cluster("b200" if precision != "fp8" else "h100_sxm", N)
    bf16 = iteration_arrays(llm, TR, S, sy, CAL)["iteration_time_s"]
    low_tr = TrainingSpec.model_validate({**TR.model_dump(), "precision": precision, "fp8_recipe": recipe})
    low = iteration_arrays(llm, low_tr, S, sy, CAL)
    assert np.all(low["iteration_time_s"] <= bf16 * (1 + 1e-12))


@settings(max_examples=10, deadline=None)
@given(st.lists(strategy_cols, min_size=2, max_size=8), st.sampled_from([3, 5, 6, 7]), st.integers(-2, 2))
def test_uneven_stages_are_never_faster_than_the_ideal_even_split(draws, pp, shift):
    # 32 layers on pp stages that do not divide them (or end stages moved by `shift` layers): the
    # pipeline part of the iteration is at least that of the same total work split evenly.
    rows = []
    for d in draws:
        d = {**d, "pp": pp, "interleaved": False}
        rows.append(d)
    n = pp * 8
    S0 = _arrays(rows)
    dp = np.full(len(rows), 1)
    tp = np.full(len(rows), 8)
    S = StrategyArrays(**{**{f: getattr(S0, f) for f in S0.__dataclass_fields__}, "tp": tp, "dp": dp, "cp": 1,
                          "pp_first": max(-1, 32 // pp + shift) if shift else -1})
    sy = cluster("h100_sxm", n)
    r = iteration_arrays(LLM, TR, S, sy, CAL)
    ok = r["code"] == 0
    assert np.all(r["pipeline_s"][ok] >= r["even_pipeline_s"][ok] * (1 - 1e-12))
    assert np.all(r["stage_pace_s"][ok] >= r["stage_mean_s"][ok] * (1 - 1e-12))


@settings(max_examples=10, deadline=None)
@given(st.lists(strategy_cols, min_size=2, max_size=8))
def test_memory_grows_with_microbatches_in_flight(draws):
    # pp 4, 1F1B: with 2 microbatches per iteration 2 are in flight, with 8 all 4 stages' worth;
    # DualPipe keeps one more than 1F1B, interleaving (v = 2) 1 + 3/8 more.
    rows = [{**d, "pp": 4, "interleaved": False, "zero": min(d["zero"], 1)} for d in draws]
    S = _arrays(rows)
    sy = cluster("h100_sxm", N)
    dp = S.dp
    few = TR.model_copy(update={"global_batch_sequences": int(2 * dp[0] * S.mbs[0])})
    many = TR.model_copy(update={"global_batch_sequences": int(8 * dp[0] * S.mbs[0])})
    same = (S.dp == dp[0]) & (S.mbs == S.mbs[0])
    S = S.take(np.flatnonzero(same))
    m_few = iteration_arrays(LLM, few, S, sy, CAL)["activations_bytes"]
    m_many = iteration_arrays(LLM, many, S, sy, CAL)["activations_bytes"]
    # the peak is the worst stage: the first holds more microbatches, the last the logits, so the
    # peak never shrinks and grows wherever the first stage is the worst
    assert np.all(m_many >= m_few)
    fields = {f: getattr(S, f) for f in S.__dataclass_fields__}
    dual = iteration_arrays(LLM, many, StrategyArrays(**{**fields, "schedule": 4}), sy, CAL)["activations_bytes"]
    inter = iteration_arrays(LLM, many, StrategyArrays(**{**fields, "schedule": 2, "v": 2}), sy, CAL)["activations_bytes"]
    assert np.all(dual >= m_many) and np.all(inter >= m_many)


@settings(max_examples=10, deadline=None)
@given(st.lists(strategy_cols, min_size=2, max_size=8), st.integers(16, 8192), st.sampled_from([None, 2, 4]),
       st.sampled_from(["sliding", "chunked"]))
def test_local_attention_is_never_slower_than_full_attention(draws, tokens, every, kind):
    from designer.spec.llm import AttentionWindowSpec

    S = _arrays(draws)
    local = LLM.model_copy(update={"attention_window": AttentionWindowSpec(kind=kind, tokens=tokens,
                                                                           full_attention_every=every)})
    sy = cluster("h100_sxm", N, leaf_span=8)
    t0 = evaluate_many(LLM, TR, S, sy, calib=CAL)
    t1 = evaluate_many(local, TR, S, sy, calib=CAL)
    ok = t0.feasible
    assert np.all(t1.iteration_time_s[ok] <= t0.iteration_time_s[ok] * (1 + 1e-12))
    assert np.array_equal(t1.memory_per_gpu_bytes, t0.memory_per_gpu_bytes)  # flash keeps no scores either way


@settings(max_examples=10, deadline=None)
@given(st.lists(strategy_cols, min_size=4, max_size=12), st.booleans(), st.sampled_from(["bf16", "fp8"]))
def test_eager_kernels_are_never_faster_than_fused_ones(draws, moe, precision):
    # eager mode moves the same ops' bytes through HBM again, op by op: never faster, and slower on a
    # model with RMSNorm, RoPE and a gated MLP (both of these)
    S = _arrays(draws, moe)
    llm = MOE if moe else LLM
    tr = TrainingSpec.model_validate({**TR.model_dump(), "precision": precision})
    sy = cluster("h100_sxm", N)
    fused = iteration_arrays(llm, tr, S, sy, CAL)
    eager = iteration_arrays(llm, tr, StrategyArrays(**{**S.__dict__, "eager": True}), sy, CAL)
    assert np.all(eager["iteration_time_s"] > fused["iteration_time_s"])


@settings(max_examples=10, deadline=None)
@given(st.lists(strategy_cols, min_size=4, max_size=12), st.floats(1.0, 2.0))
def test_an_uneven_router_load_is_never_faster(draws, load):
    """A learned router's busiest EP rank (TrainingSpec.moe_load_balance) never speeds a strategy up,
    whatever the load; the model FLOPs stay the balanced count."""
    import dataclasses

    S = _arrays(draws, moe=True)
    calib = dataclasses.replace(CAL, compute=dataclasses.replace(CAL.compute, learned_busiest_rank_load=load))
    sy = cluster("h100_sxm", N, leaf_span=8)
    forced = iteration_arrays(MOE, TR.model_copy(update={"moe_load_balance": "forced"}), S, sy, calib)
    learned = iteration_arrays(MOE, TR.model_copy(update={"moe_load_balance": "learned"}), S, sy, calib)
    assert np.all(learned["iteration_time_s"] >= forced["iteration_time_s"] * (1 - 1e-12))
    assert np.all(learned["memory_per_gpu_bytes"] >= forced["memory_per_gpu_bytes"] * (1 - 1e-12))
    assert np.array_equal(learned["model_flops"], forced["model_flops"])


UNEVEN = {"gpt-oss-120b": load_model("gpt-oss-120b"), "qwen3-235b-a22b": load_model("qwen3-235b-a22b")}
uneven_cols = st.fixed_dictionaries({
    "tp": st.sampled_from([1, 2, 4, 8]), "pp": st.sampled_from([3, 6, 8, 9]), "cp": st.sampled_from([1, 2]),
    "zero": st.sampled_from([0, 1, 3]), "recompute": st.sampled_from([0, 1, 2]), "interleaved": st.booleans(),
})


@settings(max_examples=10, deadline=None)
@given(st.lists(uneven_cols, min_size=4, max_size=12), st.sampled_from(sorted(UNEVEN)),
       st.sampled_from(["h100_sxm", "gb200"]), st.floats(1.1, 3.0))
def test_more_hbm_bandwidth_is_never_slower_with_uneven_stages(draws, model, gpu, factor):
    # MoE models whose layers do not split evenly (36 and 94 layers) on 576 GPUs: the stage that paces
    # the pipeline (the last, with the output layer) holds fewer parameters than a middle one, whose
    # data-parallel sync the iteration also waits for; faster memory speeds every stage up and never
    # makes the iteration slower
    rows = []
    for d in draws:
        inter = d["interleaved"]
        rows.append(dict(tp=d["tp"], pp=d["pp"], dp=576 // (d["tp"] * d["pp"] * d["cp"]), ep=8, cp=d["cp"],
                         sp=d["tp"] > 1, mbs=1, schedule=2 if inter else 1, v=2 if inter else 1, zero=d["zero"],
                         qwz=False, qgz=False, hpz=False, recompute=d["recompute"], overlap_dp=True, overlap_tp=True))
    S = StrategyArrays(**{k: [r[k] for r in rows] for k in rows[0]})
    tr = TrainingSpec(sequence_length=4096, global_batch_sequences=1152, total_tokens=1e12)
    base = cluster(gpu, 576)
    faster = base.model_copy(update={"gpu": base.gpu.model_copy(
        update={"hbm_bandwidth_bytes_per_s": base.gpu.hbm_bandwidth_bytes_per_s * factor})})
    t0 = evaluate_many(UNEVEN[model], tr, S, base, calib=CAL)
    t1 = evaluate_many(UNEVEN[model], tr, S, faster, calib=CAL)
    ok = t0.feasible & t1.feasible
    assert np.all(t1.iteration_time_s[ok] <= t0.iteration_time_s[ok] * (1 + 1e-12))
