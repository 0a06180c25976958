"""A learned router's uneven load (TrainingSpec.moe_load_balance): a dropless MoE layer runs at its
busiest EP rank's pace. Checked against a second path through the model (a capacity factor that
pads every rank to the busiest one's tokens), against the bounds the physics sets, and on a
measured pair of runs that differ only in their routing."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from designer.perf import compute as cmp
from designer.perf.iteration import precisions
from designer.perf.model import Metrics, evaluate_system, load_perf_calibration
from designer.spec.models import load_model
from designer.spec.llm import Recompute, TrainingSpec
from tests.perf import modern_runs

CALIB = load_perf_calibration()
LOAD = CALIB.compute.learned_busiest_rank_load
ROWS = {r["id"]: r for r in modern_runs.rows()}


def _case(row_id: str):
    """The ModelZoo's Qwen3-235B long-context configuration (MZ-9: forced balance) as the harness
    states it, with its own recompute."""
    row = ROWS[row_id]
    llm, tr, _, sy = modern_runs.case(row)
    _, st = modern_runs.evaluate_row(row, CALIB)
    return llm, tr, st, sy


def test_the_calibrated_load_is_an_excess():
    assert 1.0 < LOAD < 2.0


def test_busiest_rank_work_equals_a_capacity_factor_padding_every_rank_to_it():
    """The busiest rank's expert work under a load L is the work of every rank under a capacity
    factor of L (token-dropping MoE pads each expert to capacity): the same tokens on the same GEMMs,
    reached through the model's other input. Only the FLOPs counted differ: the mean's, not the
    padded ones."""
    llm = load_model("qwen3-235b-a22b")
    sy = _case("MZ-9")[3]
    tr = _case("MZ-9")[1]
    prec = precisions(sy, tr, CALIB)
    kw = dict(moe_layer=True, b=np.array([1.0]), s=4096, tp=np.array([2.0]), cp=np.array([1.0]),
              ep=np.array([8.0]), sp=np.array([True]), kernel=np.array([1]), prec=prec,
              hbm_bytes_per_s=sy.gpu.hbm_bandwidth_bytes_per_s, calib=CALIB.compute)
    busy = cmp.layer_forward(llm, expert_load=LOAD, **kw)
    padded_llm = llm.model_copy(update={"moe": llm.moe.model_copy(update={"capacity_factor": LOAD})})
    padded = cmp.layer_forward(padded_llm, **kw)
    mean = cmp.layer_forward(llm, **kw)
    for f in ("mlp_gemm_s", "act_fn_s", "mlp_mem_s", "cast_s", "cast_bwd_s", "attn_gemm_s", "attn_fwd_s"):
        assert float(np.ravel(getattr(busy, f))[0]) == pytest.approx(float(np.ravel(getattr(padded, f))[0]), rel=1e-12), f
    # the expert GEMMs grew, the attention did not
    assert float(busy.mlp_gemm_s[0]) > float(mean.mlp_gemm_s[0])
    assert float(busy.attn_fwd_s[0]) == float(mean.attn_fwd_s[0])
    assert float(np.ravel(busy.dense_flops)[0]) == pytest.approx(float(np.ravel(mean.dense_flops)[0]), rel=1e-12)


def test_learned_routing_is_slower_and_bounded_by_the_load():
    """Slower than forced balance, by at most the load itself (only the MoE part of a layer scales,
    and a collective's latency does not); the same model FLOPs; more activation memory on the
    busiest rank. A dense model does not notice the field."""
    llm, tr, st, sy = _case("MZ-9")
    forced = evaluate_system(llm, tr, st, sy, calib=CALIB)
    learned = evaluate_system(llm, tr.model_copy(update={"moe_load_balance": "learned"}), st, sy, calib=CALIB)
    assert isinstance(forced, Metrics) and isinstance(learned, Metrics)
    print(f"\nQwen3-235B 256 H100 s=32768: forced {forced.iteration_time_s:.2f} s, learned (load {LOAD:.3f}) "
          f"{learned.iteration_time_s:.2f} s ({learned.iteration_time_s / forced.iteration_time_s - 1:+.1%}); "
          f"EP {forced.breakdown.ep_s:.2f} -> {learned.breakdown.ep_s:.2f} s")
    assert forced.iteration_time_s < learned.iteration_time_s < LOAD * forced.iteration_time_s
    assert forced.breakdown.ep_s < learned.breakdown.ep_s <= LOAD * forced.breakdown.ep_s * (1 + 1e-9)
    assert learned.model_flops_per_iteration == forced.model_flops_per_iteration
    # MZ-9 recomputes its MoE blocks, so their routed activations are not kept: memory as forced;
    # kept (no recompute), the busiest rank holds more of them
    assert learned.memory.activations_bytes == forced.memory.activations_bytes
    keep = st.model_copy(update={"recompute": Recompute.none, "recompute_modules": ()})
    kf = evaluate_system(llm, tr, keep, sy, calib=CALIB)
    kl = evaluate_system(llm, tr.model_copy(update={"moe_load_balance": "learned"}), keep, sy, calib=CALIB)
    assert kl.memory.activations_bytes > kf.memory.activations_bytes
    dense = load_model("llama3-8b")
    a = evaluate_system(dense, tr, st.model_copy(update={"ep": 1}), sy, calib=CALIB)
    b = evaluate_system(dense, tr.model_copy(update={"moe_load_balance": "learned"}), st.model_copy(update={"ep": 1}),
                        sy, calib=CALIB)
    assert isinstance(a, Metrics) and isinstance(b, Metrics)
    assert a.iteration_time_s == b.iteration_time_s


def test_a_load_of_one_is_forced_balance():
    llm, tr, st, sy = _case("MZ-9")
    one = dataclasses.replace(CALIB, compute=dataclasses.replace(CALIB.compute, learned_busiest_rank_load=1.0))
    forced = evaluate_system(llm, tr, st, sy, calib=one)
    learned = evaluate_system(llm, tr.model_copy(update={"moe_load_balance": "learned"}), st, sy, calib=one)
    assert learned.iteration_time_s == forced.iteration_time_s


def test_measured_pair_forced_against_dropless():
    """MZ-9 and MZ-10: one configuration (Qwen3-235B, 256 H100, 32K), forced balance against a
    learned router, measured 335 and 277 TFLOP/s (training-runs-modern.md S12). The model orders
    them the same way, and closes part of the gap: it scales the expert work only."""
    errs = {e.id: e for e in modern_runs.errors(CALIB, sets=("long-ctx",), only=("MZ-9", "MZ-10"))}
    measured = errs["MZ-10"].measured / errs["MZ-9"].measured
    predicted = errs["MZ-10"].predicted / errs["MZ-9"].predicted
    print(f"\nMZ-10 / MZ-9 tokens/s: measured {measured:.3f}, designer {predicted:.3f}")
    assert measured < predicted < 1.0
    assert abs(errs["MZ-10"].error) <= 0.10


def test_a_round_robin_gate_is_balanced():
    """AutoModel's synthetic gate gives every expert the same tokens: it is forced balance whatever
    the default, and stating it learned is refused with the field, the value and what is allowed."""
    from pydantic import ValidationError

    from designer.spec.llm import TrainingSpec

    base = dict(sequence_length=4096, global_batch_sequences=64, total_tokens=1e12)
    assert TrainingSpec(**base).moe_load_balance == "learned"
    assert TrainingSpec(**base, moe_routing="round_robin").moe_load_balance == "forced"
    with pytest.raises(ValidationError, match="moe_load_balance = 'learned' with moe_routing = 'round_robin'.*allowed: forced"):
        TrainingSpec(**base, moe_routing="round_robin", moe_load_balance="learned")


def test_a_stated_busiest_rank_load_replaces_the_calibrated_one():
    """A run's own router statistics (moe_busiest_rank_load) replace the calibrated load: stating the
    calibrated value changes nothing, a larger one is slower; with forced balance it is refused."""
    from pydantic import ValidationError

    llm, tr, st, sy = _case("MZ-9")
    learned = tr.model_copy(update={"moe_load_balance": "learned"})
    t_cal = evaluate_system(llm, learned, st, sy, calib=CALIB).iteration_time_s
    same = TrainingSpec(**{**learned.model_dump(), "moe_busiest_rank_load": LOAD})
    more = TrainingSpec(**{**learned.model_dump(), "moe_busiest_rank_load": 1.5})
    assert evaluate_system(llm, same, st, sy, calib=CALIB).iteration_time_s == t_cal
    assert evaluate_system(llm, more, st, sy, calib=CALIB).iteration_time_s > t_cal
    with pytest.raises(ValidationError, match="moe_busiest_rank_load = 1.5 with moe_load_balance = 'forced'"):
        TrainingSpec(**{**learned.model_dump(), "moe_load_balance": "forced", "moe_busiest_rank_load": 1.5})
    with pytest.raises(ValidationError, match="moe_busiest_rank_load"):
        TrainingSpec(**{**learned.model_dump(), "moe_busiest_rank_load": 0.8})


@pytest.mark.parametrize("pp, schedule, first_dense, held_moe, in_flight, moe_held_at_peak", [
    (1, "1f1b", 0, 32, 1, 32), (4, "1f1b", 0, 8, 4, 8), (4, "dualpipe", 0, 16, 5, 8),
    # the first 8 layers dense: on 4 stages the first rank's 4 microbatches hold dense layers only, and
    # the peak is the second rank's 3 microbatches of 8 MoE layers; on 2 stages the first rank holds
    # 2 x (8 dense + 8 MoE) and the last one microbatch of 16 MoE layers plus the logits
    (4, "1f1b", 8, 8, 3, 8), (2, "1f1b", 8, 16, 1, 16)])
def test_the_held_activations_carry_the_busiest_rank_excess_over_root_n_layers(pp, schedule, first_dense, held_moe,
                                                                                in_flight, moe_held_at_peak):
    """The rank at the memory peak holds the routed tokens of every MoE layer of its stages. Each
    layer has its own router, so its busiest EP rank differs from layer to layer, and the highest
    sum over n such layers exceeds the mean by a 1/√n of one layer's excess. Mixtral 8x7B (32 MoE
    layers) without recomputation: on one stage (n = 32, one microbatch in flight), on the first of
    4 stages under 1F1B (8 layers, 4 microbatches) and under DualPipe, whose ranks hold two stages
    (16 layers, PP + 1 = 5 microbatches of a stage). The learned-minus-forced activation bytes are
    then in_flight · (layers of a stage) · (one layer's excess) / √n, one layer's excess taken from
    the per-layer formula at the two loads. With dense first layers, n counts the MoE layers only,
    and the rank at the peak may be a middle or the last one."""
    from designer.perf import memory as mem
    from designer.perf.iteration import iteration_arrays
    from designer.perf.records import StrategyArrays
    from designer.spec.llm import Strategy
    from tests.perf.systems import cluster

    llm = load_model("mixtral-8x7b")
    llm = llm.model_copy(update={"moe": llm.moe.model_copy(update={"first_dense_layers": first_dense})})
    sy = cluster("h100_sxm", 32)
    s = Strategy(tp=2, pp=pp, dp=32 // (2 * pp), ep=4, expert_tp=1, sequence_parallel=True, microbatch_size=1,
                 recompute="none", schedule=schedule)
    base = dict(sequence_length=4096, global_batch_sequences=64, total_tokens=1e9)
    got = {}
    for balance in ("forced", "learned"):
        tr = TrainingSpec(**base, moe_load_balance=balance)
        got[balance] = float(iteration_arrays(llm, tr, StrategyArrays.from_strategies([s]), sy, CALIB)["activations_bytes"][0])
    kw = dict(moe_layer=True, b=1.0, s=4096, tp=2.0, cp=1.0, sp=True, recompute=0, flash=True, etp=1.0)
    excess = float(mem.activation_bytes_per_layer(llm, expert_load=LOAD, **kw)
                   - mem.activation_bytes_per_layer(llm, expert_load=1.0, **kw))
    assert excess > 0
    want = in_flight * moe_held_at_peak * excess / np.sqrt(held_moe)
    assert got["learned"] - got["forced"] == pytest.approx(want, rel=1e-9)
