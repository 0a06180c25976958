"""designer's fused-attention times at the shapes of cuDNN's own SDPA training benchmark
(tests/perf/data/cudnn_sdpa_benchmark.yaml), for the tests and the attention calibration."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import yaml

from designer.perf import compute as cmp
from designer.spec.catalog import load_catalog
from designer.spec.llm import AttentionWindowSpec, LLMSpec

DATA = yaml.safe_load((Path(__file__).parent / "data" / "cudnn_sdpa_benchmark.yaml").read_text())

# the benchmark's points that no per-tile cost follows: the Blackwell 32k forward of the 128-token
# window takes 3.2x its 16k time for twice the work (GB200 2.634 / 0.822 ms, GB300 2.530 / 0.790)
OUTSIDE_THE_MODEL = {("gb200_swa128", "forward", 32768), ("gb300_swa128", "forward", 32768)}


def attention_times_ms(llm: LLMSpec, gpu_name: str, seq, ccal: cmp.ComputeCalibration) -> tuple[np.ndarray, np.ndarray]:
    """designer's cuDNN forward and backward time (ms) of one attention call of `llm`'s layer at each
    sequence length in `seq` (one evaluation over all of them): batch 2, 16-bit, on `gpu_name`."""
    gpu = load_catalog().gpu(gpu_name).perf()
    arch = gpu.architecture
    fwd, bwd = ccal.attention_table(arch, gpu.name)
    peak = gpu.peak_flops["bf16"]
    prec = cmp.Precisions(gemm_peak_flops=peak, gemm_max_eff=0.7, hi_peak_flops=peak, hi_max_eff=0.7,
                          cast_bytes_per_element=0.0, attn_fwd_eff=fwd, attn_bwd_eff=bwd,
                          attn_seq_half=ccal.attention_seq_half_table(arch),
                          attn_head_dim_half=ccal.attention_head_dim_half_table(arch),
                          attn_local_tile_overhead=ccal.attention_local_tile_overhead_for(arch))
    seq = np.asarray(seq, float)
    one = np.ones_like(seq)
    w = cmp.layer_forward(llm, moe_layer=False, b=one * 2, s=seq, tp=one, cp=one, ep=one, etp=one,
                          sp=np.zeros(len(seq), bool), kernel=np.full(len(seq), cmp.ATTENTION_KERNELS.index("cudnn")),
                          prec=prec, hbm_bytes_per_s=gpu.hbm_bandwidth_bytes_per_s, calib=ccal)
    return np.asarray(w.attn_fwd_s, float) * 1e3, np.asarray(w.attn_bwd_s, float) * 1e3


def window_times_ms(curve: str, ccal: cmp.ComputeCalibration) -> tuple[np.ndarray, np.ndarray]:
    """designer's cuDNN forward and backward time (ms) of one sliding-window attention call at each of
    the curve's sequence lengths: batch 2, the curve's heads, head dim 64, 16-bit, every layer local."""
    c = DATA["window_curves"][curve]
    return attention_times_ms(benchmark_model(curve), c["gpu"], c["seq"], ccal)


def kept_points(curve: str, pass_name: str) -> np.ndarray:
    """Mask of the curve's points a per-tile cost is held to (OUTSIDE_THE_MODEL left out)."""
    seq = DATA["window_curves"][curve]["seq"]
    return np.array([(curve, pass_name, s) not in OUTSIDE_THE_MODEL for s in seq])


def benchmark_model(curve: str) -> LLMSpec:
    """One attention layer of the curve's shape: its heads, head dim 64, every layer local."""
    c = DATA["window_curves"][curve]
    return LLMSpec(name="cudnn-benchmark", layers=1, hidden_size=c["heads"] * 64, ffn_size=64, heads=c["heads"],
                   kv_heads=c["kv_heads"], head_dim=64, vocab_size=2, norm="rmsnorm", linear_bias=False,
                   attention_window=AttentionWindowSpec(kind="sliding", tokens=c["window"]))


def banded(curve: str) -> np.ndarray:
    """Whether each of the curve's points runs as a local layer, its band narrower than the causal
    context (compute.attended_parts); at 2k tokens a 1024-token window spans it, and the call runs as
    a global layer."""
    seq = np.array(DATA["window_curves"][curve]["seq"], float)
    return np.asarray(cmp.attended_parts(benchmark_model(curve), seq, 1.0)[3], bool)
