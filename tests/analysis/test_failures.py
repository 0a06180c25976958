"""designer.analysis.failures against hand calculations (binomial sums written out in the comments)."""

from __future__ import annotations

import math

import pytest

from designer.analysis.failures import (
    blocks_touched,
    expected_capacity_fraction,
    exposure,
    loss_cdf,
    loss_quantile,
    required_spares,
    upper_tier_failures,
)
from designer.errors import SpecError
from designer.spec.network_study import ComponentReliability, FailureRates, SparesSpec

NEVER = ComponentReliability(mtbf_h=1e15, mttr_h=1.0)  # unavailability 1e-15: negligible


def test_unavailability_is_mttr_over_cycle():
    # 1 h down per 99 h up: 1 / (99 + 1) = 0.01.
    assert ComponentReliability(mtbf_h=99, mttr_h=1).unavailability == pytest.approx(0.01)


def test_default_rates_are_the_sourced_derivations():
    r = FailureRates()
    # Llama 3 Table 5: 268 GPU events over 16,384 x 54 x 24 = 21,233,664 GPU-hours.
    assert r.gpu.mtbf_h == pytest.approx(21_233_664 / 268)
    assert r.nic.mtbf_h == pytest.approx(21_233_664 / 7)
    assert r.host.mtbf_h == pytest.approx(21_233_664 / 8 / 46)
    # Singh et al. 2021: 98 % of switches survive 2,190 h: MTBF = 2,190 / -ln(0.98) = 108,400 h (3 s.f.).
    assert r.switch.mtbf_h == pytest.approx(2190 / -math.log(0.98), rel=1e-3)
    assert r.scaled(2.0).gpu.mtbf_h == pytest.approx(r.gpu.mtbf_h / 2) and r.scaled(2.0).gpu.mttr_h == r.gpu.mttr_h


def test_binomial_cdf_by_hand():
    # Bin(3, 0.1): P0 = 0.9^3 = 0.729; P1 = 3 * 0.1 * 0.81 = 0.243; P2 = 3 * 0.01 * 0.9 = 0.027; P3 = 0.001.
    assert loss_cdf(3, 0.1, 0, 0.0, 1, 3) == pytest.approx([0.729, 0.972, 0.999, 1.0])


def test_groups_that_partition_units_by_hand():
    # 4 units (q = 0.1) in 2 groups of 2 (a group down with 0.2): P(G=0) = 0.64, P(G=1) = 0.32, P(G=2) = 0.04.
    # G=0: Bin(4, 0.1) = 0.6561, 0.2916, 0.0486, 0.0036, 0.0001.
    # G=1: 2 + Bin(2, 0.1): X = 2, 3, 4 with 0.81, 0.18, 0.01.   G=2: X = 4.
    # P(X<=0) = 0.64*0.6561 = 0.419904;  P(X<=1) = 0.64*0.9477 = 0.606528;
    # P(X<=2) = 0.64*0.9963 + 0.32*0.81 = 0.896832;  P(X<=3) = 0.64*0.9999 + 0.32*0.99 = 0.956736;  P(X<=4) = 1.
    assert loss_cdf(4, 0.1, 2, 0.2, 2, 4, partition=True) == pytest.approx(
        [0.419904, 0.606528, 0.896832, 0.956736, 1.0])
    # The upper bound X = Bin(4, 0.1) + 2 Bin(2, 0.2), no partition:
    # P(X<=2) = 0.64*0.9963 + 0.32*0.6561 = 0.847584;  P(X<=3) = 0.64*0.9999 + 0.32*0.9477 = 0.9432;
    # P(X<=4) = 0.64 + 0.32*0.9963 + 0.04*0.6561 = 0.98506.
    assert loss_cdf(4, 0.1, 2, 0.2, 2, 4) == pytest.approx([0.419904, 0.606528, 0.847584, 0.9432, 0.98506])
    assert loss_quantile(4, 0.1, 2, 0.2, 2, 0.95, partition=True) == 3
    assert loss_quantile(4, 0.1, 2, 0.2, 2, 0.95) == 4


def test_exposure_layouts_by_hand():
    # rail-only, K=8, D=128, R=64 (h=32): 8 rails of 128 endpoints need 2 tiers; ceil(128/32) = 4 leaves
    # per rail = 32 leaves; the 8 leaves over one block of 32 domains cut the same 32 domains.
    e = exposure("rail-only", 128, 8, 64)
    assert (e.leaf_count, e.leaf_groups, e.leaves_per_group, e.units_per_group, e.leaves_per_unit) == (32, 4, 8, 32, 8)
    # rail-optimized, K=256, D=8, R=64, TP units of 8: 2,048 endpoints, 2 tiers; short rails packed
    # floor(32/8) = 4 ranks per leaf -> 64 leaves; a unit of 8 ranks spans 2 leaves, which cut the same
    # 8 units (one per domain): 32 groups of 2 leaves.
    e = exposure("rail-optimized", 8, 256, 64, unit_gpus=8)
    assert (e.leaf_count, e.n_units, e.leaf_groups, e.leaves_per_group, e.units_per_group, e.leaves_per_unit) == (
        64, 256, 32, 2, 8, 2)
    # fat-tree, K=8, D=64: leaves of 32 consecutive GPUs = 4 whole units; 512/32 = 16 leaves.
    e = exposure("fat-tree", 64, 8, 64)
    assert (e.leaf_count, e.leaf_groups, e.units_per_group, e.leaves_per_unit) == (16, 16, 4, 1)
    # rail-only's unit is the whole domain whatever unit_gpus says.
    assert exposure("rail-only", 4, 256, 64, unit_gpus=8).unit_gpus == 256
    assert blocks_touched(8, 32) == 1 and blocks_touched(32, 8) == 4 and blocks_touched(72, 32) == 4
    with pytest.raises(SpecError):
        exposure("fat-tree", 4, 72, 64, unit_gpus=16)  # 16 does not divide 72


def test_expected_capacity_by_hand():
    # GPU down 1 %, host down 2 %, the rest never: a rail-only domain of 8 GPUs on one host is up with
    # 0.99^8 * 0.98 = 0.9227446944 * 0.98 = 0.9042898005.
    rates = FailureRates(gpu=ComponentReliability(mtbf_h=99, mttr_h=1), host=ComponentReliability(mtbf_h=49, mttr_h=1),
                         nic=NEVER, switch=NEVER, link=NEVER)
    assert expected_capacity_fraction(exposure("rail-only", 4, 8, 64), rates) == pytest.approx(0.9042898005, rel=1e-9)


def test_required_spares_by_hand():
    # Only GPUs fail (1 %): a domain of 8 is down with q = 1 - 0.99^8 = 0.0772553.
    # J = 4 at confidence 0.9: D = 4: P(X<=1) = 0.92274^4 + 4 q 0.92274^3 = 0.72489 + 0.24277 = 0.96767
    # -> 1 spare; D = 5: P(X<=1) = 0.66891 + 5 q 0.72489 = 0.94891 >= 0.9 -> still 1: built 5, spares 1.
    # At 0.95: D = 5 gives Q = 2 -> D = 6: P(X<=1) = 0.61724 + 6 q 0.66891 = 0.92730, P(X<=2) adds
    # 15 q^2 0.72489 = 0.06490 -> 0.99220 >= 0.95: Q = 2, built 6, spares 2.
    rates = FailureRates(gpu=ComponentReliability(mtbf_h=99, mttr_h=1), host=NEVER, nic=NEVER, switch=NEVER, link=NEVER)
    r = required_spares("rail-only", 4, 8, 64, rates, confidence=0.9)
    assert (r.built_domains, r.spare_domains, r.lost_units_quantile) == (5, 1, 1)
    assert required_spares("rail-only", 4, 8, 64, rates, confidence=0.95).spare_domains == 2
    # A target of 75 % of the job: ceil(0.75 * 4) = 3 <= D - g(D) already at D = 4 (g = 1): no spare.
    assert required_spares("rail-only", 4, 8, 64, rates, confidence=0.9, target_fraction=0.75).spare_domains == 0


def test_any_to_any_families_need_fewer_spares_for_big_domains():
    # railonly.md §6: a failed GPU takes the whole K=256 domain out of a rail-only job, only an 8-GPU
    # group out of a rail-optimized one.
    r = FailureRates()
    ro = required_spares("rail-only", 128, 256, 64, r, confidence=0.99)
    opt = required_spares("rail-optimized", 128, 256, 64, r, confidence=0.99)
    assert ro.spare_domains > 10 * opt.spare_domains
    # K = 8: the unit is the domain in both, and the leaves are the same rail leaves: same spares.
    assert (required_spares("rail-only", 4096, 8, 64, r, confidence=0.99).spare_domains
            == required_spares("rail-optimized", 4096, 8, 64, r, confidence=0.99).spare_domains)


def test_upper_tier_bandwidth_by_hand():
    rates = FailureRates(switch=ComponentReliability(mtbf_h=99, mttr_h=1), link=ComponentReliability(mtbf_h=199, mttr_h=1))
    # Two layers above the leaves: ((1 - 0.005) * (1 - 0.01))^2 = 0.98505^2 = 0.9703235.
    u = upper_tier_failures(10, 100, 2, rates)
    assert u.bandwidth_fraction == pytest.approx(0.98505**2)
    assert u.switch_failures_per_year == pytest.approx(10 * 8766 / 99)


def test_spares_spec_rejects_bad_values():
    with pytest.raises(ValueError):
        SparesSpec(confidence=1.0)
    with pytest.raises(ValueError):
        SparesSpec(target_fraction=0.0)
