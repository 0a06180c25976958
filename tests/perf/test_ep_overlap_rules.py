"""Megatron-Core's 1F1B all-to-all overlap (Strategy.overlap_ep_comm) is priced only where Megatron-Core
runs it: TransformerConfig.__post_init__ asserts expert parallelism, the alltoall or flex dispatcher,
virtual pipeline stages when pp > 1, no full recomputation, no 'moe' recompute module and at most one MTP
layer. DualPipe overlaps its own way."""

import pytest

from designer.perf.model import Infeasible, Metrics, evaluate_system, load_perf_calibration
from designer.spec.llm import LLMSpec, MoESpec, Recompute, RecomputeModule, Schedule, Strategy, TrainingSpec
from tests.perf.systems import cluster

CAL = load_perf_calibration()
MOE = LLMSpec(name="moe-8l", layers=8, hidden_size=1024, ffn_size=4096, heads=8, vocab_size=32_000,
              moe=MoESpec(experts=8, top_k=2, expert_ffn_size=1024))
TRAIN = TrainingSpec(sequence_length=2048, global_batch_sequences=64, total_tokens=1e9)
BASE = Strategy(pp=2, dp=8, ep=8, microbatch_size=1, schedule=Schedule.interleaved, virtual_stages=2,
                overlap_ep_comm=True)


@pytest.mark.parametrize("change", [
    {},  # interleaved on pp 2
    dict(pp=1, dp=16, schedule=Schedule.one_f_one_b, virtual_stages=1),  # no pipeline
    dict(schedule=Schedule.dualpipe, virtual_stages=1),  # DualPipe's own overlap
    dict(moe_dispatcher="deepep"),
    dict(recompute=Recompute.selective, recompute_modules=(RecomputeModule.moe_act,)),
])
def test_runs_where_megatron_core_runs_it(change):
    m = evaluate_system(MOE, TRAIN, BASE.model_copy(update=change), cluster("h100_sxm", 16), calib=CAL)
    assert isinstance(m, Metrics), m


@pytest.mark.parametrize("change, says", [
    (dict(schedule=Schedule.one_f_one_b, virtual_stages=1), "pp 2 1f1b"),
    (dict(moe_dispatcher="allgather"), "allgather"),
    (dict(recompute=Recompute.full), "recompute full"),
    (dict(recompute=Recompute.selective, recompute_modules=(RecomputeModule.moe,)), "'moe'"),
    (dict(ep=1), "ep 1"),
])
def test_refused_where_megatron_core_asserts(change, says):
    m = evaluate_system(MOE, TRAIN, BASE.model_copy(update=change), cluster("h100_sxm", 16), calib=CAL)
    assert isinstance(m, Infeasible) and m.reason.startswith("overlap_ep_comm: Megatron-Core runs") and says in m.reason


def test_more_than_one_mtp_layer_is_refused():
    llm = MOE.model_copy(update=dict(mtp_layers=2))
    m = evaluate_system(llm, TRAIN, BASE, cluster("h100_sxm", 16), calib=CAL)
    assert isinstance(m, Infeasible) and "2 MTP layers" in m.reason
    assert isinstance(evaluate_system(llm, TRAIN, BASE.model_copy(update=dict(overlap_ep_comm=False)),
                                      cluster("h100_sxm", 16), calib=CAL), Metrics)


def test_the_launch_writes_the_overlap_only_where_megatron_core_runs_it():
    from designer.launch import megatron_launch

    args = megatron_launch(MOE, TRAIN, BASE, 16, 8)
    assert "--overlap-moe-expert-parallel-comm" in args.script_args
    two_mtp = megatron_launch(MOE.model_copy(update=dict(mtp_layers=2)), TRAIN, BASE, 16, 8)
    assert "--overlap-moe-expert-parallel-comm" not in two_mtp.script_args
    assert any("2 MTP layers" in n for n in two_mtp.notes)
