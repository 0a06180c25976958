"""Catalog prices against the published figures, price ranges, price multipliers, and link-media rules.

Oracles: the per-GPU figures of ../shared/reference/prices-and-layout.md ("Reading of 1a-1c": compared with the
NICs included, since an NVL72 includes 72 NICs), its reach table (§2a, §3) and hand arithmetic written out here.
"""

from __future__ import annotations

import pytest

from designer.errors import SpecError
from designer.network.prices import prices_from_components
from designer.spec.catalog import DAC_MAX_LANE_GBPS, MediaKind, PriceDistribution, PriceRange, ReachClass, load_catalog
from designer.spec.network_study import NetworkStudy, study_catalog


@pytest.fixture(scope="module")
def cat():
    return load_catalog()


def _per_gpu_with_nics_usd(cat, platform_id: str, nic_id: str) -> float:
    """Domain price per GPU with one scale-out NIC per GPU: a platform that does not include its NICs pays
    for them on top (the catalog's convention, Platform docstring)."""
    p = cat.platform(platform_id)
    nics_usd = 0.0 if p.includes_nics else p.hb_domain_size * cat.nic(nic_id).price_usd
    return (p.price_usd + nics_usd) / p.hb_domain_size


# ---- per-GPU prices: the reference's reading of §1a-1c ------------------------------------------------------


@pytest.mark.parametrize("platform_id, nic_id, low_usd, high_usd", [
    # "HGX B200 street ~$46k" (8 x $35k + $90k non-GPU = $370k / 8 = $46.25k): within +-3 %
    ("hgx_b200_8", "cx7_400g", 46_000 * 0.97, 46_000 * 1.03),
    # "GB200 NVL72 $42-47k" ($3.0-3.4M / 72), ~$44k at $3.2M
    ("gb200_nvl72", "cx7_400g", 42_000, 47_000),
    # "DGX B200 list $64k" ($515k / 8 = $64.4k): within +-2 %
    ("dgx_b200", "cx7_400g", 64_000 * 0.98, 64_000 * 1.02),
    # "GB300 NVL72 ~$49-56k" ($3.5-4.0M / 72)
    ("gb300_nvl72", "cx8_800g", 49_000, 56_000),
])
def test_per_gpu_price_with_nics_matches_the_reference(cat, platform_id, nic_id, low_usd, high_usd):
    assert low_usd <= _per_gpu_with_nics_usd(cat, platform_id, nic_id) <= high_usd


def test_nvl72_is_no_longer_dearer_than_dgx_per_gpu_and_at_parity_with_hgx(cat):
    # The first catalog had GB200 at $34.7k vs HGX B200 $62.5k per GPU; like for like they are at rough parity
    # (within 10 %) and the NVIDIA-branded DGX B200 is the upper bound.
    nvl72 = _per_gpu_with_nics_usd(cat, "gb200_nvl72", "cx7_400g")
    hgx = _per_gpu_with_nics_usd(cat, "hgx_b200_8", "cx7_400g")
    dgx = _per_gpu_with_nics_usd(cat, "dgx_b200", "cx7_400g")
    assert abs(nvl72 - hgx) / hgx < 0.10
    assert max(nvl72, hgx) < dgx


def test_hgx_h100_net_price_plus_its_nics_is_the_semianalysis_sale_price(cat):
    # hgx_h100_8 excludes its NICs: $258k + 8 x $1.5k CX-7 = $270k, SemiAnalysis' DGX H100 sale price
    # (hardware-and-libraries.md §3.2, prices-and-layout.md §1b)
    assert not cat.platform("hgx_h100_8").includes_nics
    assert _per_gpu_with_nics_usd(cat, "hgx_h100_8", "cx7_400g") * 8 == pytest.approx(270_000)


def test_rack_gpu_prices_are_the_rack_price_over_72(cat):
    # gb200: $3.2M / 72 = $44,444 (the reference rounds to $44.4k); gb300: $3.75M / 72 = $52,083 ("$52k")
    assert cat.gpu("gb200").price_usd == pytest.approx(3_200_000 / 72, rel=2e-3)
    assert cat.gpu("gb300").price_usd == pytest.approx(3_750_000 / 72, rel=2e-3)
    assert cat.platform("gb200_nvl72").price_usd == 3_200_000
    assert cat.platform("gb300_nvl72").price_usd == 3_750_000


def test_platform_power_and_included_nics(cat):
    gb200 = cat.platform("gb200_nvl72")
    assert (gb200.power_w, gb200.power_w_max) == (120_000, 132_000)
    assert (gb200.included_nic, gb200.included_nics_per_domain) == ("cx7_400g", 72)
    assert (gb200.dpu, gb200.dpus_per_domain, gb200.includes_dpus) == ("bf3_dpu", 36, True)  # 2 per tray x 18
    gb300 = cat.platform("gb300_nvl72")
    assert gb300.includes_nics and gb300.included_nic == "cx8_800g" and gb300.power_w_max == 142_000
    assert cat.platform("hgx_b300_8").included_nic == "cx8_800g"
    assert cat.platform("gh200_nvl256").power_w == 32 * 15_000  # 32 blocks x ~15 kW (NVIDIA forum)
    assert cat.platform("dgx_b200").power_w == 14_300
    assert cat.nic("cx8_800g").ethernet_ports == (2, 400.0)  # no single-port 800GbE
    assert cat.nic("cx7_400g").ethernet_ports == (1, 400.0)


@pytest.mark.parametrize("entry, needle", [
    ("{id: p, gpu: b200, hb_domain_size: 8, includes_nics: true, source: t}", "included_nic"),
    ("{id: p, gpu: b200, hb_domain_size: 8, includes_nics: true, included_nic: nope, source: t}", "included_nic 'nope'"),
    ("{id: p, gpu: b200, hb_domain_size: 8, power_w: 100, power_w_max: 90, source: t}", "power_w_max = 90 < power_w = 100"),
    ("{id: p, gpu: b200, hb_domain_size: 8, dpus_per_domain: 2, source: t}", "dpus_per_domain = 2"),
])
def test_bad_platform_fields_are_one_line(tmp_path, entry, needle):
    f = tmp_path / "bad.yaml"
    f.write_text(f"platforms:\n  - {entry}\n")
    with pytest.raises(SpecError) as err:
        load_catalog(extra_files=(f,))
    assert needle in str(err.value) and "\n" not in str(err.value)


# ---- price ranges --------------------------------------------------------------------------------------------


def test_price_ranges_by_id(cat):
    ranges = cat.price_ranges()
    assert ranges["gb200_nvl72"] == PriceRange(low_usd=3_000_000, mode_usd=3_200_000, high_usd=3_400_000,
                                               distribution=PriceDistribution.triangular)
    assert ranges["gb300_nvl72"] == PriceRange(low_usd=3_500_000, mode_usd=3_750_000, high_usd=4_000_000)
    assert ranges["bf3_dpu"] == PriceRange(low_usd=2_000, mode_usd=2_500, high_usd=3_000)
    assert ranges["osfp_1p6t_2xdr4"] == PriceRange(low_usd=1_200, mode_usd=1_600, high_usd=2_000)
    assert ranges["hgx_b300_8"].distribution == PriceDistribution.uniform
    assert "hgx_h100_8" not in ranges and "qm9790" not in ranges  # no range given
    # every range's mode is its entry's point price
    by_id = {e.id: e for s in ("gpus", "platforms", "nics", "dpus", "switches", "media") for e in getattr(cat, s)}
    assert all(r.mode_usd == by_id[i].price_usd for i, r in ranges.items())


def test_price_range_means():
    # triangular: (1100 + 1100 + 1400) / 3 = 1200; uniform: (370k + 400k) / 2 = 385k
    assert PriceRange(low_usd=1100, mode_usd=1100, high_usd=1400).mean_usd == pytest.approx(1200)
    assert PriceRange(low_usd=370e3, mode_usd=380e3, high_usd=400e3, distribution="uniform").mean_usd == pytest.approx(385e3)


@pytest.mark.parametrize("fields, needles", [
    ("price_low_usd: 3500000", ("'gb200_nvl72'", "price_low_usd = 3,500,000", "price_usd = 3,200,000")),
    ("price_high_usd: 3100000", ("'gb200_nvl72'", "price_high_usd = 3,100,000", "price_usd = 3,200,000")),
    ("price_low_usd: 3300000", ("'gb200_nvl72'", "price_low_usd = 3,300,000")),
    ("price_distribution: normal", ("price_distribution", "'normal'")),
])
def test_bad_price_range_is_one_line(tmp_path, fields, needles):
    f = tmp_path / "bad.yaml"
    f.write_text(f"platforms:\n  - {{id: gb200_nvl72, {fields}}}\n")
    with pytest.raises(SpecError) as err:
        load_catalog(extra_files=(f,))
    msg = str(err.value)
    assert "\n" not in msg
    for needle in needles:
        assert needle in msg


@pytest.mark.parametrize("entry, needles", [
    ("{id: q, gbps: 400, price_usd: 10, price_low_usd: 5, source: t}", ("'q'", "price_low_usd = 5 without price_high_usd")),
    ("{id: q, gbps: 400, price_usd: 10, price_high_usd: 15, source: t}", ("'q'", "price_high_usd = 15 without price_low_usd")),
    ("{id: q, gbps: 400, price_low_usd: 5, price_high_usd: 15, source: t}", ("'q'", "without price_usd")),
])
def test_half_a_range_is_refused(tmp_path, entry, needles):
    f = tmp_path / "bad.yaml"
    f.write_text(f"nics:\n  - {entry}\n")
    with pytest.raises(SpecError) as err:
        load_catalog(extra_files=(f,))
    for needle in needles:
        assert needle in str(err.value)


def test_user_range_is_read(tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text("switches:\n  - {id: qm9790, price_low_usd: 30000, price_high_usd: 50000, price_distribution: uniform}\n")
    r = load_catalog(extra_files=(f,)).price_ranges()["qm9790"]
    assert (r.low_usd, r.mode_usd, r.high_usd, r.distribution) == (30_000, 36_000, 50_000, PriceDistribution.uniform)


# ---- price multipliers ---------------------------------------------------------------------------------------


def test_per_id_multiplier_scales_that_entry_and_its_range(cat):
    up = load_catalog(price_multipliers={"gb200_nvl72": 1.2})
    assert up.platform("gb200_nvl72").price_usd == pytest.approx(3_840_000)  # 3.2M x 1.2
    r = up.price_ranges()["gb200_nvl72"]
    assert (r.low_usd, r.high_usd) == (pytest.approx(3_600_000), pytest.approx(4_080_000))  # 3.0M, 3.4M x 1.2
    assert up.platform("hgx_b200_8").price_usd == cat.platform("hgx_b200_8").price_usd
    assert up.gpu("gb200").price_usd == cat.gpu("gb200").price_usd


def test_multipliers_compose(cat):
    # all x section x id: gb200_nvl72 0.5 x 2 x 1.5 = 1.5; hgx_b200_8 0.5 x 2 = 1; sn5600 0.5
    m = load_catalog(price_multipliers={"all": 0.5, "platforms": 2.0, "gb200_nvl72": 1.5})
    assert m.platform("gb200_nvl72").price_usd == pytest.approx(4_800_000)
    assert m.platform("hgx_b200_8").price_usd == pytest.approx(370_000)
    assert m.switch("sn5600").price_usd == pytest.approx(100_000)
    assert m.price_ranges()["sn5600"].high_usd == pytest.approx(125_000)  # 250k x 0.5


@pytest.mark.parametrize("mult, needles", [
    ({"gb200_nvl7": 1.2}, ("'gb200_nvl7'", "did you mean 'gb200_nvl72'")),
    ({"railonly-v1": 2.0}, ("'railonly-v1'", "priced")),  # a price set is not a priced entry
    ({"gb200_nvl72": -1.0}, ("price_multipliers.gb200_nvl72 = -1.0", ">= 0")),
])
def test_bad_multiplier_is_one_line(mult, needles):
    with pytest.raises(SpecError) as err:
        load_catalog(price_multipliers=mult)
    assert "\n" not in str(err.value)
    for needle in needles:
        assert needle in str(err.value)


def test_study_file_takes_a_per_id_multiplier():
    study = NetworkStudy.model_validate({
        "catalog": {"price_multipliers": {"gb200_nvl72": 1.2, "switches": 0.5}},
        "choices": {"platforms": ["gb200_nvl72"], "nics": [{"id": "cx7_400g"}], "switches": [{"id": "qm9790"}]},
        "gpus": {"count": 72 * 4}, "objective": {"kind": "min_cost"}})
    cat = study_catalog(study)
    assert cat.platform("gb200_nvl72").price_usd == pytest.approx(3_840_000)
    assert cat.switch("qm9790").price_usd == pytest.approx(18_000)


# ---- link media: lane rates, reach, DACs -----------------------------------------------------------------------


def test_reach_rules_are_the_reference_table(cat):
    # prices-and-layout.md §3 media-selection rule (from the §2a reach rows): passive DAC <= 3 m (splitters) and
    # none at 200G/lane; LACC <= 5 m; multimode <= 50 m and none at 200G/lane; DR <= 500 m; FR <= 2 km; no AOC at
    # 200G/lane
    want = {("passive_copper", 100): 3, ("passive_copper", 200): None, ("active_copper", 100): 5,
            ("active_copper", 200): 5, ("multimode", 100): 50, ("multimode", 200): None,
            ("single_mode_dr", 100): 500, ("single_mode_dr", 200): 500, ("single_mode_fr", 100): 2000,
            ("single_mode_fr", 200): 2000, ("active_optical", 200): None}
    for (cls, lane), reach in want.items():
        rule = cat.reach_rule(ReachClass(cls), lane)
        assert rule is not None, (cls, lane)
        assert (rule.offered, rule.reach_m) == (reach is not None, reach), (cls, lane)


def test_dac_reach_and_lane(cat):
    dac = cat.medium("dac_2x400g")
    assert (dac.lane_gbps, dac.reach_m, dac.reach_flat_top_m) == (100, 3, 2)  # MCP7Y00: to 3 m, flat-top to 2 m
    assert all(m.lane_gbps is not None and m.lane_gbps <= DAC_MAX_LANE_GBPS for m in cat.media if m.kind == MediaKind.dac)


def test_no_dac_is_eligible_at_200g_per_lane(cat, tmp_path):
    assert [m.id for m in cat.eligible_media(MediaKind.dac, 400, lane_gbps=100)] == ["dac_2x400g"]
    for port_gbps in (200, 400, 800):
        assert cat.eligible_media(MediaKind.dac, port_gbps, lane_gbps=200) == ()
    # a user DAC that does not state its lane rate is still refused at 200G/lane, even with the reach rule
    # overridden to "offered"
    f = tmp_path / "mine.yaml"
    f.write_text("media:\n  - {id: my_dac, kind: dac, gbps: 800, reach_m: 1, price_usd: 10, power_w: 0.1, source: t}\n"
                 "reach_rules:\n  - {id: passive_copper_200g, offered: true, reach_m: 1}\n")
    mine = load_catalog(extra_files=(f,))
    assert [m.id for m in mine.eligible_media(MediaKind.dac, 800)] == ["my_dac"]  # lane rate unknown: allowed
    assert mine.eligible_media(MediaKind.dac, 800, lane_gbps=200) == ()


@pytest.mark.parametrize("entry, needles", [
    ("{id: my_dac, kind: dac, gbps: 800, lane_gbps: 200, reach_m: 1, source: t}",
     ("'my_dac'", "lane_gbps = 200", "no passive DAC")),
    ("{id: my_aoc, kind: aoc, gbps: 800, lane_gbps: 200, reach_m: 10, source: t}",
     ("'my_aoc'", "active_optical at lane_gbps = 200 is not offered")),
    ("{id: my_mm, kind: optic, reach_class: multimode, gbps: 400, lane_gbps: 100, reach_m: 100, source: t}",
     ("'my_mm'", "reach_m = 100 exceeds 50 m")),
    ("{id: my_cu, kind: dac, reach_class: multimode, gbps: 400, reach_m: 1, source: t}",
     ("'my_cu'", "allowed: passive_copper")),
])
def test_media_against_the_reach_rules_is_one_line(tmp_path, entry, needles):
    f = tmp_path / "bad.yaml"
    f.write_text(f"media:\n  - {entry}\n")
    with pytest.raises(SpecError) as err:
        load_catalog(extra_files=(f,))
    assert "\n" not in str(err.value)
    for needle in needles:
        assert needle in str(err.value)


def test_200g_per_lane_optics_are_single_mode_only(cat):
    fits = cat.eligible_media(MediaKind.optic, 400, lane_gbps=200)
    assert fits and {m.effective_reach_class for m in fits} <= {ReachClass.single_mode_dr, ReachClass.single_mode_fr}


def test_length_picks_copper_then_active_copper_then_optics(cat):
    # 2.5 m: the DAC splitter on a finned-top switch (3 m) but not on a flat-top one (2 m); 4 m: LACC (5 m) only
    assert [m.id for m in cat.eligible_media(MediaKind.dac, 400, 100, length_m=2.5)] == ["dac_2x400g"]
    assert cat.eligible_media(MediaKind.dac, 400, 100, length_m=2.5, flat_top=True) == ()
    assert cat.eligible_media(MediaKind.dac, 400, 100, length_m=4) == ()
    assert [m.id for m in cat.eligible_media(MediaKind.copper_active, 400, 100, length_m=4)] == ["lacc_800g"]
    # 27 m (a rail switch across 128 racks, prices-and-layout.md §3): no multimode at 200G/lane, DR4 at both
    at_200 = {m.id for m in cat.eligible_media(MediaKind.optic, 800, 200, length_m=27)}
    assert at_200 == {"osfp_1p6t_2xdr4", "osfp_800g_dr4_nic"}
    # at 100G/lane and 400G ports the cheapest is multimode 2xSR4 ($1,100 / 2 ports = $550 per port)
    assert cat.eligible_media(MediaKind.optic, 400, 100, length_m=27)[0].id == "osfp_800g_2xsr4"


@pytest.mark.parametrize("component, port_gbps, lane_gbps", [
    ("cx8_800g", 800, 200),      # NIC side, XDR
    ("q3400", 800, 200),         # 144 x 800G XDR
    ("sn5600", 800, 100),        # 64 x 800G at 100G-PAM4
])
def test_an_800g_optic_exists_at_the_component_lane_rate(cat, component, port_gbps, lane_gbps):
    stated = cat.nic(component).lane_gbps if component.startswith("cx") else cat.switch(component).lane_gbps
    assert stated == lane_gbps
    fits = cat.eligible_media(MediaKind.optic, port_gbps, lane_gbps=lane_gbps)
    assert fits and all(m.gbps >= 800 and m.lane_gbps == lane_gbps for m in fits)


def test_800g_component_prices_find_an_optic(cat):
    # Cheapest optic of >= 800G per port: osfp_1p6t_2xdr4 $1,600 / 2 = $800 and 27 W / 2 = 13.5 W per port
    # (osfp_800g_dr4_nic $900, osfp_800g_dr8 $1,250); Q3400 $162,000 / 144 ports = $1,125 per port.
    p = prices_from_components(cat, "q3400", 800)
    assert (p.transceiver_usd, p.transceiver_w) == (800.0, 13.5)
    assert p.switch_port_usd == pytest.approx(1_125.0)
    assert p.nic_usd == 2_500.0  # cx8_800g, the catalog's 800G NIC
    # an LPO is its own kind: it is not picked as the DSP optic (400G: 2xSR4 $550 per port, not the LPO's $500)
    assert prices_from_components(cat, "qm9790", 400).transceiver_usd == 550.0


def test_cross_section_duplicate_id_is_refused(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("nics:\n  - {id: qm9790, gbps: 400, source: t}\n")
    with pytest.raises(SpecError, match="id 'qm9790' is in both nics and switches"):
        load_catalog(extra_files=(f,))
