"""The GPUs and platforms of the measured modern training runs are in the catalog, with host-memory figures."""

import pytest

from designer.spec.catalog import load_catalog

NEW_GPUS = ("b300", "gb300", "h800", "h100_96gb_500w")
NEW_PLATFORMS = {"dgx_b300_8": ("b300", 8), "gb300_nvl72": ("gb300", 72),
                 "dgx_h800_8": ("h800", 8), "hgx_h100_96gb_8": ("h100_96gb_500w", 8)}


def test_new_gpus_and_platforms_exist_with_provenance():
    cat = load_catalog()
    for gid in NEW_GPUS:
        g = cat.gpu(gid)
        assert g.source.strip() and g.date and g.confidence in {"V", "S", "E", "der"}
        assert g.price_usd is not None and g.power_w is not None
    for pid, (gid, k) in NEW_PLATFORMS.items():
        p = cat.platform(pid)
        assert (p.gpu, p.hb_domain_size) == (gid, k)
        assert p.price_usd is not None and p.power_w is not None
        assert p.source.strip() and p.date and p.confidence in {"V", "S", "E", "der"}


def test_every_gpu_has_host_memory_and_link():
    for g in load_catalog().gpus:
        assert g.host_memory_gb > 0, g.id
        assert g.host_link_gb_per_s_per_direction > 0, g.id


def test_blackwell_low_precision_peaks():
    cat = load_catalog()
    for g in cat.gpus:
        if g.architecture == "blackwell":
            assert g.mxfp8_tflops == g.fp8_tflops, g.id  # MXFP8 runs at the FP8 rate
            assert g.nvfp4_tflops is not None and g.nvfp4_tflops >= 2 * g.fp8_tflops, g.id
        else:
            assert g.mxfp8_tflops is None and g.nvfp4_tflops is None, g.id
    assert cat.gpu("b200").nvfp4_tflops == 9000
    assert cat.gpu("gb300").perf().peak_flops["nvfp4"] == pytest.approx(15e15)


def test_h800_and_h100_96gb_figures():
    cat = load_catalog()
    h100, h800, h96 = cat.gpu("h100_sxm"), cat.gpu("h800"), cat.gpu("h100_96gb_500w")
    assert (h800.bf16_tflops, h800.fp8_tflops, h800.hbm_gib) == (h100.bf16_tflops, h100.fp8_tflops, h100.hbm_gib)
    assert h800.hb_gb_per_s_per_direction == 200
    assert 835 < h96.bf16_tflops < h100.bf16_tflops
    assert (h96.hbm_gib, h96.hbm_tb_per_s, h96.power_w) == (96, 2.4, 500)
