"""The global batch as a tolerance or a list: each strategy runs the allowed batch nearest the target
that its split divides, and the model prices that batch."""

import pytest
from pydantic import ValidationError

from designer.perf.model import evaluate_system
from designer.perf.records import Metrics
from designer.search.space import design_space, invalid_reason
from designer.spec.llm import LLMSpec, Recompute, Schedule, Strategy, TrainingSpec
from designer.spec.study import StrategySpace
from tests.perf.systems import cluster

TINY = LLMSpec(name="tiny", layers=4, hidden_size=64, ffn_size=16, heads=4, kv_heads=4, vocab_size=100)
SPACE = StrategySpace(tp=(1,), pp=(1, 2), microbatch_sizes=(1,), schedules=(Schedule.one_f_one_b, Schedule.interleaved),
                      virtual_stages=(2,), recompute=(Recompute.none,), sequence_parallel=(False,))


def _batches(training, n_gpus):
    ds = design_space(TINY, training, SPACE, n_gpus=n_gpus, hb_domain_size=8)
    t = ds.table()
    out = {}
    for s in t.strategies():
        assert invalid_reason(s, TINY, training, n_gpus, 8) is None
        out[(s.pp, s.dp, s.schedule.value)] = s.global_batch_sequences or training.global_batch_sequences
    return out


def test_tolerance_picks_the_nearest_batch_the_split_divides():
    # target 16, tolerance 0.25: batches 12..20 allowed. By hand, per (pp, dp, schedule):
    # 6 GPUs, pp 1, dp 6: multiples of 6 in [12, 20] are 12 and 18 -> 18 (2 from 16, against 4);
    # pp 2, dp 3 (1F1B): multiples of 3 -> 15 (1 away; 18 is 2); interleaved: the microbatch count
    # must divide by pp 2, so multiples of 6 -> 18.
    tr = TrainingSpec(sequence_length=1024, global_batch_sequences={"target": 16, "tolerance": 0.25}, total_tokens=1e9)
    assert tr.batch_range == (12, 20)
    assert _batches(tr, 6) == {(1, 6, "1f1b"): 18, (2, 3, "1f1b"): 15, (2, 3, "interleaved"): 18}
    # 8 GPUs: dp 8 -> 16 itself (the target splits: the strategy keeps None), dp 4 -> 16
    got = _batches(tr, 8)
    assert got == {(1, 8, "1f1b"): 16, (2, 4, "1f1b"): 16, (2, 4, "interleaved"): 16}
    # a tie goes to the larger batch: target 15 on dp 2 is 14 or 16 -> 16
    tie = TrainingSpec(sequence_length=1024, global_batch_sequences={"target": 15, "tolerance": 0.1}, total_tokens=1e9)
    assert _batches(tie, 2)[(1, 2, "1f1b")] == 16


def test_without_tolerance_the_count_has_no_strategy():
    # the same 6 GPUs with the batch fixed at 16: no dp in {6, 3} divides it
    tr = TrainingSpec(sequence_length=1024, global_batch_sequences=16, total_tokens=1e9)
    assert design_space(TINY, tr, SPACE, n_gpus=6, hb_domain_size=8).size == 0


def test_list_of_batches():
    # allowed 16 (preferred), 12, 18: dp 6 -> 12 or 18, 18 is nearer 16; dp 5 (5 GPUs) -> none
    tr = TrainingSpec(sequence_length=1024, global_batch_sequences=[16, 12, 18], total_tokens=1e9)
    assert _batches(tr, 6)[(1, 6, "1f1b")] == 18
    assert design_space(TINY, tr, SPACE, n_gpus=5, hb_domain_size=8).size == 0


def test_the_model_prices_the_strategys_batch():
    # The same strategy at batch 18 under a tolerance, against a run whose batch is fixed at 18: the
    # model prices the strategy's own batch, so iteration and training times are identical.
    llm = LLMSpec(name="small", layers=8, hidden_size=1024, ffn_size=4096, heads=16, kv_heads=16, vocab_size=32000)
    flex = TrainingSpec(sequence_length=2048, global_batch_sequences={"target": 16, "tolerance": 0.25}, total_tokens=1e10)
    fixed = TrainingSpec(sequence_length=2048, global_batch_sequences=18, total_tokens=1e10)
    sysm = cluster("h100_sxm", 8)
    s = Strategy(tp=1, pp=1, dp=6, global_batch_sequences=18)
    a = evaluate_system(llm, flex, s, sysm)
    b = evaluate_system(llm, fixed, s.model_copy(update={"global_batch_sequences": None}), sysm)
    assert isinstance(a, Metrics) and isinstance(b, Metrics)
    assert a.iteration_time_s == pytest.approx(b.iteration_time_s, rel=1e-12)
    assert a.time_to_train_s == pytest.approx(b.time_to_train_s, rel=1e-12)
    # outside the tolerance: reason 20, with the range
    bad = evaluate_system(llm, flex, s.model_copy(update={"global_batch_sequences": 24}), sysm)
    assert not isinstance(bad, Metrics) and "[12, 20]" in bad.reason


@pytest.mark.parametrize("value,needle", [
    ({"target": 16, "tolerance": 1.5}, "must be a fraction >= 0 and < 1"),
    ({"target": 16, "tol": 0.1}, "keys target, tolerance"),
    ([], "at least one batch"),
    ([16, 16], "listed twice"),
    ([16, -2], ">= 1"),
])
def test_bad_batch_forms(value, needle):
    with pytest.raises(ValidationError) as err:
        TrainingSpec(sequence_length=1024, global_batch_sequences=value, total_tokens=1e9)
    assert needle in str(err.value)
