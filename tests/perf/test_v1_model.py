"""The reduced V1 model of the Rail-only paper (railonly.md §3, Eqs. 1-3) and its published trends.

Hardware of the paper's Fig. 7 study (an H100-class GPU): C = 1979 TFLOP/s (H100 dense fp8, catalog),
B_F = 900 GB/s HB bandwidth per GPU, B_S = 50 GB/s (400 Gb/s NIC). With these, Eq. (1) minimised over
the TP degree for each K reproduces the read-off trends within the tolerances below.
"""

from __future__ import annotations

import numpy as np
import pytest

from designer.perf.iteration import (
    V1Inputs,
    v1_best_time_s,
    v1_ideal_time_s,
    v1_inputs,
    v1_iteration_time_s,
    v1_optimal_tp,
)
from designer.spec.models import load_model

C, B_F, B_S = 1979e12, 900e9, 50e9
KS = [8, 16, 32, 64, 128, 256, 512, 1024]


def _times(model: str, n: int, tokens: float) -> dict[int, float]:
    llm = load_model(model)
    return {k: v1_best_time_s(v1_inputs(llm, n_gpus=n, hb_size=k, batch_tokens=tokens, compute_flops=C,
                                        hb_bandwidth=B_F, nic_bandwidth=B_S))[0] for k in KS}


def test_equation_1_by_hand():
    # N = 64, K = 8, N_M = 2 -> N_Ds = 4, N_Df = 8; l = 2, S_T = 1e9 B, b·d_model·2 = 1e6·1000·2 B, M_cc = 8.
    x = V1Inputs(n_gpus=64, hb_size=8, layers=2, block_bytes=1e9, d_model=1000, batch=1e6, m_cc=8,
                 flops_per_iteration=64e15, hb_bandwidth=100e9, nic_bandwidth=10e9, compute=1e15)
    # compute 64e15/(64·1e15) = 1 s; DP 2·1e9·7/(64·1e10) = 0.021875 s;
    # HB: (2·1e9·3/8 + 8·2e9·1/64)/1e11 = (7.5e8 + 2.5e8)/1e11 = 0.01 s; x l = 2.
    assert float(v1_iteration_time_s(x, 2)) == pytest.approx(1 + 2 * (0.021875 + 0.01))
    # Eq. (2) as printed: sqrt(64·1e9)/(2·sqrt(8·2e9)) = 252982/(2·126491) = 1.0
    assert v1_optimal_tp(x) == pytest.approx(1.0)
    assert v1_optimal_tp(x, as_printed=False) == pytest.approx(np.sqrt(2 * 64e9 / 16e9))


def test_iteration_time_falls_with_k_and_flattens_by_256():
    for model, tokens in (("gpt3-175b", 32e6), ("opt-175b", 2e6)):
        t = _times(model, 16384, tokens)
        seq = [t[k] for k in KS]
        assert all(a >= b for a, b in zip(seq, seq[1:])), (model, seq)
    t = _times("gpt3-175b", 16384, 32e6)
    assert 1 - t[1024] / t[256] < 0.04  # flat beyond 256


def test_gpt3_32m_tokens_savings():
    # railonly.md §3: K 32 -> 64 saves ~12%, K 512 -> 1024 ~1%  (tolerance ±3 and ±1 points)
    t = _times("gpt3-175b", 16384, 32e6)
    assert 1 - t[64] / t[32] == pytest.approx(0.12, abs=0.03)
    assert 1 - t[1024] / t[512] == pytest.approx(0.01, abs=0.01)


def test_opt_2m_tokens_savings():
    # railonly.md §3: ~37% and ~7.5%  (tolerance ±4 and ±2 points)
    t = _times("opt-175b", 16384, 2e6)
    assert 1 - t[64] / t[32] == pytest.approx(0.37, abs=0.04)
    assert 1 - t[1024] / t[512] == pytest.approx(0.075, abs=0.02)


@pytest.mark.parametrize("batch,want", [(512, 0.53), (2048, 0.74)])
def test_palm_fraction_of_ideal(batch, want):
    # PaLM-540B, N = 32768, K = 256, batch in 2048-token sequences: 53% of ideal at 512, 74% at 2048
    # (±5 points). T_ideal uses the exact minimiser of Eq. (3) (the printed Eq. (2) is off by 2·sqrt(2)).
    x = v1_inputs(load_model("palm-540b"), n_gpus=32768, hb_size=256, batch_tokens=batch * 2048, compute_flops=C,
                  hb_bandwidth=B_F, nic_bandwidth=B_S)
    frac = v1_ideal_time_s(x, as_printed=False) / v1_best_time_s(x)[0]
    assert frac == pytest.approx(want, abs=0.05)


def test_larger_batch_brings_rail_only_closer_to_ideal():
    llm = load_model("palm-540b")
    fr = []
    for batch in (256, 512, 1024, 2048, 4096):
        x = v1_inputs(llm, n_gpus=32768, hb_size=256, batch_tokens=batch * 2048, compute_flops=C, hb_bandwidth=B_F,
                      nic_bandwidth=B_S)
        fr.append(v1_ideal_time_s(x, as_printed=False) / v1_best_time_s(x)[0])
    assert all(a < b for a, b in zip(fr, fr[1:]))


def test_v1_mode_flag_of_evaluate_system():
    # mode="v1" gives Eq. (1) with N_M = tp for the strategy on the system.
    from designer.perf.model import evaluate_system
    from designer.spec.llm import Strategy, TrainingSpec
    from tests.perf.systems import cluster

    llm = load_model("gpt3-175b")
    tr = TrainingSpec(sequence_length=2048, global_batch_sequences=512, total_tokens=300e9)
    sy = cluster("h100_sxm", 512)
    st = Strategy(tp=8, dp=64, zero_stage=3)
    r = evaluate_system(llm, tr, st, sy, mode="v1")
    x = v1_inputs(llm, n_gpus=512, hb_size=8, batch_tokens=512 * 2048, compute_flops=989e12, hb_bandwidth=450e9,
                  nic_bandwidth=50e9)
    assert r.iteration_time_s == pytest.approx(float(v1_iteration_time_s(x, 8)))
    b = r.breakdown
    assert r.iteration_time_s == pytest.approx(b.compute_s + b.exposed_comm_s)
