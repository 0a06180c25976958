"""Validation against the measured runs of training-runs-modern.md (tests/perf/data/modern_runs.yaml).

Every usable row is run as its source states it (tests/perf/modern_runs.py: systems and framework
defaults from data/modern_systems.yaml, the same for every row of a framework; where the recompute
is not stated, the least that fits) and scored on tokens/s per GPU, the quantity every source
measured. `pytest -s` prints the per-row table per set.

The bounds below are what the shipped calibration reaches (a regression fails them); the targets
of the performance-model work are MAPE <= 5% per set and every row within 10%, not yet met.
"""

from __future__ import annotations

import functools

import pytest

from designer.perf.model import evaluate_system, load_perf_calibration
from tests.perf import modern_runs

BOUNDS = {  # set: (MAPE bound, share of rows within 10%, at least) -- reached: 4.37%/91%, 4.6%/93%, 3.5%/93%, 11.3%/66%
    # 92% until the MLPerf v5.1 Llama rows took their configs' current scaling; 4.3% until the 405B ones
    # took their configs' TP overlap off
    "dense-3d": (0.045, 0.91),
    "dense-fsdp": (0.049, 0.89),
    "long-ctx": (0.038, 0.85),
    "moe": (0.128, 0.65),
}


@functools.lru_cache(maxsize=1)
def _errors():
    return modern_runs.errors()


def test_every_published_configuration_is_accepted():
    # errors() raises if the model rejects a row for anything but memory
    assert len(_errors()) == sum(1 for r in modern_runs.rows() if r["use"])


@pytest.mark.parametrize("name", list(BOUNDS))
def test_modern_runs_per_set(name):
    modern_runs.assert_set_within(_errors(), name, *BOUNDS[name])


def test_low_precision_rows_are_faster_than_their_bf16_twins():
    # DGXC publishes the same runs in BF16 and FP8: the model keeps the measured order and stays
    # well below the 2x of the peaks (Llama 3.1 70B 1.37-1.40x measured, 1.44x predicted;
    # Nemotron-4 15B 1.36-1.38x measured, 1.36x predicted)
    by_id = {e.id: e for e in _errors()}
    for bf, fp in (("DG-11", "DG-17"), ("DG-15", "DG-21"), ("DG-36", "DG-44"), ("DG-42", "DG-50")):
        measured = by_id[fp].measured / by_id[bf].measured
        predicted = by_id[fp].predicted / by_id[bf].predicted
        assert predicted > 1.0 and abs(predicted - measured) < 0.10, (bf, fp, measured, predicted)


def test_the_per_expert_host_wait_is_what_megatron_expects_full_graphs_to_win_on_deepseek_v3():
    # Megatron-LM docs/discussions/deepseek-v3-gb200-optimization (eb0783b6), §3.1: removing the
    # device-host sync of the dropless MoE, so the whole model can be captured in CUDA graphs, is
    # estimated on a proxy model at "at least a 10% additional performance gain" over the final
    # 970 TFLOPS configuration (DSG-2). The fitted per-expert wait predicts about that.
    row = next(r for r in modern_runs.rows() if r["id"] == "DSG-2")
    calib = load_perf_calibration()
    m, st = modern_runs.evaluate_row(row, calib)
    llm, tr, _, sy = modern_runs.case(row)
    graphed = evaluate_system(llm, tr, st.model_copy(update={"cuda_graphs": True}), sy, calib=calib)
    gain = m.iteration_time_s / graphed.iteration_time_s - 1
    assert 0.10 <= gain <= 0.20, gain


def test_readme_tables_hold_the_shipped_calibrations_figures():
    # the README's per-set tables (studies/calibration/validation_tables.py) show what the model
    # computes now: every usable row once, with its designer figure and error
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    start = text.index("<!-- validation tables: written by studies/calibration/validation_tables.py -->")
    modern_runs.assert_tables_show(text[start:text.index("<!-- end of validation tables -->")], _errors())


def test_eager_kernels_explain_most_of_torchtitans_torch_compile_gain():
    # torchtitan benchmarks/llama3_h100_202412_torchtitan.md (820504e), tables 1 and 3: Llama 3.1 8B,
    # FSDP, selective AC, 5,762 -> 6,667 TPS/GPU with torch.compile on 8 GPUs (+15.7%), 5,605 -> 6,514 on
    # 128 (+16.2%). Fusing the eager element-wise ops (Strategy.elementwise_kernels) accounts for
    # it: the forward's and, under torchtitan's per-op checkpointing, their recomputation's (the
    # policy saves no element-wise output). Compile fuses more than the kernels designer counts as
    # fused (the residual add into the norm): the model's gain is held within a tenth of the
    # measured one's excess over 1.
    calib = load_perf_calibration()
    for rid, measured in (("TT-1", 6667 / 5762), ("TT-8", 6514 / 5605)):
        row = next(r for r in modern_runs.rows() if r["id"] == rid)
        m, st = modern_runs.evaluate_row(row, calib)
        assert st.elementwise_kernels == "eager"
        llm, tr, _, sy = modern_runs.case(row)
        fused = evaluate_system(llm, tr, st.model_copy(update={"elementwise_kernels": "fused"}), sy, calib=calib)
        gain = m.iteration_time_s / fused.iteration_time_s
        assert abs(gain - measured) <= 0.1 * (measured - 1), (rid, gain, measured)


def test_async_tp_gains_follow_torchtitans_table_per_fp8_recipe():
    # torchtitan benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md (text table of commit 2887250):
    # async TP over vanilla TP, Llama 3.1 70B on 256 H100s (FSDP 32, TP 8, full AC) 1.09 bf16,
    # 1.16 float8 tensorwise, 1.04 rowwise; Llama 3.1 8B on 64 (FSDP 8, TP 8, per-op SAC) 1.10, 1.10,
    # 1.06. With rowwise scales only the matmul-reduce-scatters fuse (pytorch/pytorch#149990), so its
    # gain is the smallest of the three on both models. Each gain is held within 0.07 of the table's
    # (the model gives 1.12, 1.12, 1.06 on 70B and 1.17, 1.14, 1.06 on 8B).
    calib = load_perf_calibration()
    rows = {r["id"]: r for r in modern_runs.rows()}
    vanilla, asynchronous = "vanilla TP (no AsyncTP); torch.compile", "AsyncTP; torch.compile"
    for model, published in (("TT-20", {"TT-20": 1.09, "TT-21": 1.16, "TT-23": 1.04}),
                             ("TT-26", {"TT-26": 1.10, "TT-27": 1.10, "TT-29": 1.06})):
        gains = {}
        for rid, measured in published.items():
            tps = [modern_runs.evaluate_row({**rows[rid], "overlap": o}, calib)[0].tokens_per_s
                   for o in (vanilla, asynchronous)]
            gains[rid] = tps[1] / tps[0]
            assert abs(gains[rid] - measured) <= 0.07, (rid, gains[rid], measured)
        rowwise = min(gains, key=lambda k: published[k])
        assert gains[rowwise] == min(gains.values()), (model, gains)


def test_memory_against_torchtitans_logged_peaks():
    # torchtitan logs each run's peak reserved memory (the caching allocator's, which holds more than
    # is ever allocated at once); its benchmark tables publish it. designer's memory per GPU is what
    # is allocated at the peak: never above the reserved peak, and, now that the loss holds what it
    # holds (Strategy.cross_entropy; the end-2024 code ran it op by op on upcast logits), within 35 % of
    # it on every row and 20 % on the median. Not calibrated: no memory figure is fitted.
    calib = load_perf_calibration()
    lines, ratios = [], []
    for row in modern_runs.rows():
        gib = row["measured"].get("memory_gib")
        if not gib or not row["use"]:
            continue
        m, st = modern_runs.evaluate_row(row, calib)
        got = m.memory_per_gpu_bytes / 2**30
        ratios.append(got / gib)
        lines.append(f"{row['id']:8s} {gib:6.1f} GiB  designer {got:6.1f} GiB  {got / gib:5.2f}  "
                     f"cross entropy {st.cross_entropy}")
    print("\nrow      measured peak reserved / designer", *lines, sep="\n")
    assert len(ratios) >= 10
    assert all(0.65 <= r <= 1.0 for r in ratios), ratios
    assert sorted(ratios)[len(ratios) // 2] >= 0.8


def test_every_published_run_fits_in_memory():
    # every calibration and held-out row ran on its GPUs, so the memory model must keep each within
    # HBM (before the rule that an unsharded parameter has no second, unsharded gradient under ZeRO-3
    # with PP, AutoModel's DeepSeek-V3 on 256 H100 (AM-2: experts on EP 64 = their whole expert
    # data-parallel group) was priced at 94 GB)
    held = modern_runs.errors(source=modern_runs.heldout_rows)
    assert [(e.id, round(e.memory_gb, 1)) for e in _errors() + held if not e.fits] == []
