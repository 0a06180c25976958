"""Tensor parallelism wider than one HB domain (StrategySpace.max_tp_hb_domains).

Expected values are derived by hand from the rank order (placement.py: TP innermost, consecutive
ranks fill a domain of K GPUs; local rank = rank mod K is the rail) and from the model's heads and
hidden sizes; the rail-only equality is railonly.md §1/§3 (traffic between the same local ranks of
different domains stays on one rail, so both families carry it equally fast)."""

from __future__ import annotations

import numpy as np
import pytest

from designer.perf.model import evaluate_system
from designer.perf.placement import TIER_RAIL, place
from designer.perf.records import Metrics
from designer.search.space import DesignSpace, explain_space, invalid_reason
from designer.spec.llm import Recompute, Strategy, TrainingSpec
from designer.spec.models import load_model
from designer.spec.study import StrategySpace
from tests.perf.systems import cluster

GPT_1T = load_model("gpt-1t")  # 160 heads, hidden 25,600 (Narayanan et al. SC'21 Table 1)
TRAIN = TrainingSpec(sequence_length=2048, global_batch_sequences=3072, total_tokens=4.5e11, precision="fp16")


def test_space_adds_multiples_of_the_domain_that_divide_the_heads():
    # K = 8: within a domain 1, 2, 4, 8; up to 4 domains also 16, 24, 32, of which 24 does not divide
    # 160 heads (160 / 24 is not whole), so 16 and 32 remain.
    ds = DesignSpace.build(GPT_1T, TRAIN, StrategySpace(max_tp_hb_domains=4), n_gpus=4096, hb_domain_size=8)
    assert sorted({int(x[0]) for x in ds.layouts}) == [2, 4, 8, 16, 32] or \
        sorted({int(x[0]) for x in ds.layouts}) == [1, 2, 4, 8, 16, 32]
    narrow = DesignSpace.build(GPT_1T, TRAIN, StrategySpace(), n_gpus=4096, hb_domain_size=8)
    assert max(int(x[0]) for x in narrow.layouts) == 8


def test_listed_wide_tp_needs_the_setting_and_is_explained():
    removed = explain_space(GPT_1T, TRAIN, StrategySpace(tp=(8, 16)), hb_domain_size=8)
    assert [(r.dim, r.value, r.rule) for r in removed if r.dim == "tp"] == \
        [("tp", 16, "spans 2 HB domains of 8, more than max_tp_hb_domains 1")]
    assert not [r for r in explain_space(GPT_1T, TRAIN, StrategySpace(tp=(8, 16), max_tp_hb_domains=2),
                                         hb_domain_size=8) if r.dim == "tp"]
    removed = explain_space(GPT_1T, TRAIN, StrategySpace(tp=(12,), max_tp_hb_domains=4), hb_domain_size=8)
    assert [r.rule for r in removed if r.dim == "tp"] == ["does not divide the HB domain size 8"]


def test_a_scalar_strategy_may_span_whole_domains_only():
    wide = Strategy(tp=16, pp=16, dp=16, microbatch_size=1)
    assert invalid_reason(wide, GPT_1T, TRAIN, 4096, 8) is None
    odd = Strategy(tp=20, pp=16, dp=16, microbatch_size=1)  # 20 GPUs: 2.5 domains of 8
    assert "neither divides the HB domain size 8 nor is a multiple of it" in \
        invalid_reason(odd, GPT_1T, TRAIN, 5120, 8)


def test_wide_tp_group_shape_by_hand():
    # tp 16 on K = 8: ranks 0..15 fill domains 0 and 1 (rank // 8), local ranks 0..7 in each
    # (rank % 8): 8 ranks per domain, 2 domains, every cross-domain pair on one rail. The DP group
    # strides 16 = 2 domains: one rank per domain, its 4 members 2 domains apart (extent 7).
    sysm = cluster("a100_80gb", 4096, hb_size=8, nic_gbps=200, leaf_span=16)
    pl = place(np.array([16]), np.array([1]), np.array([4]), np.array([64]), np.array([1]), sysm)
    assert (int(pl.tp.ranks_per_domain[0]), int(pl.tp.domain_span[0]), bool(pl.tp.same_rail[0])) == (8, 2, True)
    assert int(pl.tp.tier[0]) == TIER_RAIL
    assert (int(pl.dp.ranks_per_domain[0]), int(pl.dp.domain_span[0]), int(pl.dp.extent_domains[0])) == (1, 4, 7)


@pytest.fixture(scope="module")
def wide_and_narrow():
    st = dict(pp=32, microbatch_size=1, recompute=Recompute.selective, sequence_parallel=True, zero_stage=1)
    out = {}
    for rail_only in (False, True):
        sysm = cluster("a100_80gb", 4096, hb_size=8, nic_gbps=200, leaf_span=16, rail_only=rail_only)
        out[rail_only] = {tp: evaluate_system(GPT_1T, TRAIN, Strategy(tp=tp, dp=4096 // (32 * tp), **st), sysm)
                          for tp in (8, 16)}
    return out


def test_wide_tp_traffic_leaves_the_domain_on_rails_only(wide_and_narrow):
    m8, m16 = wide_and_narrow[False][8], wide_and_narrow[False][16]
    assert isinstance(m8, Metrics) and isinstance(m16, Metrics)
    assert m8.type_bytes.tp_rail_bytes == 0 and m8.type_bytes.tp_spine_bytes == 0
    assert m16.type_bytes.tp_rail_bytes > 0 and m16.type_bytes.tp_spine_bytes == 0
    # the network phase of a hierarchical collective moves 1/8 of the message per GPU (one NIC each),
    # so TP's rail bytes are at most the HB bytes of the in-domain phases
    assert m16.type_bytes.tp_rail_bytes < m16.type_bytes.tp_hb_bytes
    assert m16.breakdown.tp_s > 0


def test_wide_tp_is_as_fast_on_rail_only(wide_and_narrow):
    fat, ro = wide_and_narrow[False][16], wide_and_narrow[True][16]
    assert ro.breakdown.tp_s == pytest.approx(fat.breakdown.tp_s, rel=1e-9)
