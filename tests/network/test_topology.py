"""Closed-form bills of materials: the paper's Table 2, published oracle counts, hand cases, properties.

Expected values come from railonly.md §2 (V1 Table 2, baselines, 64-port oracle counts) or from
arithmetic written next to them.
"""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from designer.errors import SpecError
from designer.network.topology import (
    RAILONLY_V1_PRICES,
    RAILONLY_V5_PRICES,
    BillOfMaterials,
    ComponentPrices,
    Convention,
    Family,
    bill_of_materials,
    tiers_needed,
    to_network_tiers,
)

V1, V5 = RAILONLY_V1_PRICES, RAILONLY_V5_PRICES
GBPS_400_BYTES_PER_S = 400e9 / 8  # 50e9 bytes/s per NIC


def paper(family, n_gpus, radix, prices=V1, hb_domain_size=256, **kw) -> BillOfMaterials:
    return bill_of_materials(
        family, n_gpus, hb_domain_size, radix, prices=prices, convention=Convention.paper, **kw
    )


def physical(family, n_gpus, hb_domain_size, radix, prices=V1, **kw) -> BillOfMaterials:
    return bill_of_materials(family, n_gpus, hb_domain_size, radix, prices=prices, **kw)


def saving_pct(baseline: BillOfMaterials, other: BillOfMaterials, attr: str = "cost_usd") -> float:
    return 100.0 * (1.0 - getattr(other, attr) / getattr(baseline, attr))


# ---------------------------------------------------------------- tiers_needed (railonly.md §2)


@pytest.mark.parametrize(
    "n, radix, expected",
    [
        (128, 32, 2),  # 2*16 = 32 < 128 <= 2*16^2 = 512
        (32768, 32, 4),  # 2*16^3 = 8192 < 32768 <= 2*16^4 = 131072
        (32768, 64, 3),  # 2*32^2 = 2048 < 32768 <= 2*32^3 = 65536
        (65536, 64, 3),  # exactly 2*32^3
        (65537, 64, 4),
        (128, 128, 1),  # 128 <= 2*64
        (32768, 256, 2),  # exactly 2*128^2
        (1, 4, 1),
        (5, 4, 2),  # 2*2 = 4 < 5 <= 8
    ],
)
def test_tiers_needed_hand_values(n, radix, expected):
    assert tiers_needed(n, radix) == expected


@given(n=st.integers(1, 10**7), half=st.integers(2, 128))
def test_tiers_needed_is_the_smallest_that_fits(n, half):
    levels = tiers_needed(n, 2 * half)
    assert n <= 2 * half**levels
    assert levels == 1 or n > 2 * half ** (levels - 1)


# ---------------------------------------------------------------- paper convention: V1 Table 2

# (N, R, fat-tree switches, fat-tree transceivers, rail-only switches, rail-only transceivers,
#  saving % at V1 prices, saving % at v5 prices), K = 256. railonly.md §2, V1 Table 2.
# The table prints rows 5-7 in whole percent (37/37/75 at V1, 38.29/38/77 at v5, its rounding is not
# consistent: 37.50 -> 37 but 76.59 -> 77); the two-decimal values there are our hand arithmetic:
#   65536 R=64:  same ratios as 32768 R=64 (every count doubles) -> 37.50 / 38.29
#   65536 R=128 V1: 1 - (1536*128*748 + 262144*374) / (2560*128*748 + 393216*374)
#                 = 1 - 245,104,640 / 392,167,424 = 0.375
#               v5: 1 - (136,445,952 + 52,166,656) / (227,409,920 + 78,249,984) = 0.38293
#   65536 R=256 V1: 1 - (256*256*748 + 131072*374) / 392,167,424 = 1 - 98,041,856 / 392,167,424 = 0.75
#               v5: 1 - (45,481,984 + 26,083,328) / 305,659,904 = 0.76587
TABLE_2 = [
    (32768, 32, 7168, 262144, 3072, 131072, 54.55, 55.38, (54, 55)),
    (32768, 64, 2560, 196608, 1536, 131072, 37.50, 38.29, (37, 38)),
    (32768, 128, 1280, 196608, 256, 65536, 75.00, 76.59, (75, 77)),
    (32768, 256, 384, 131072, 128, 65536, 60.00, 62.06, (60, 62)),
    (65536, 64, 5120, 393216, 3072, 262144, 37.50, 38.29, (37, 38)),
    (65536, 128, 2560, 393216, 1536, 262144, 37.50, 38.29, (37, 38)),
    (65536, 256, 1280, 393216, 256, 131072, 75.00, 76.59, (75, 77)),
]


@pytest.mark.parametrize("n, radix, ft_sw, ft_tx, ro_sw, ro_tx, v1_pct, v5_pct, printed_pct", TABLE_2)
@pytest.mark.parametrize("baseline_family", [Family.rail_optimized, Family.fat_tree])
def test_paper_table_2_rows(n, radix, ft_sw, ft_tx, ro_sw, ro_tx, v1_pct, v5_pct, printed_pct, baseline_family):
    fat, rail = paper(baseline_family, n, radix), paper(Family.rail_only, n, radix)
    assert (fat.switch_count, fat.transceiver_count) == (ft_sw, ft_tx)
    assert (rail.switch_count, rail.transceiver_count) == (ro_sw, ro_tx)
    fat5, rail5 = paper(baseline_family, n, radix, V5), paper(Family.rail_only, n, radix, V5)
    assert saving_pct(fat, rail) == pytest.approx(v1_pct, abs=0.005)
    assert saving_pct(fat5, rail5) == pytest.approx(v5_pct, abs=0.005)
    # the whole percents the paper prints are within one point (truncated or rounded)
    assert abs(saving_pct(fat, rail) - printed_pct[0]) < 1 and abs(saving_pct(fat5, rail5) - printed_pct[1]) < 1


def test_paper_fat_tree_baselines_usd():
    # 2560*64*694 + 196608*199 = 113,704,960 + 39,124,992 = 152,829,952 (v5)
    # 2560*64*748 + 196608*374 = 122,552,320 + 73,531,392 = 196,083,712 (V1)
    assert paper(Family.rail_optimized, 32768, 64, V5).cost_usd == 152_829_952
    assert paper(Family.rail_optimized, 32768, 64, V1).cost_usd == 196_083_712


def test_paper_v1_saving_is_exactly_six_elevenths_at_radix_32():
    # fat: 7168*32*748 + 262144*374 = 269,615,104; rail: 3072*32*748 + 131072*374 = 122,552,320
    # 122,552,320 / 269,615,104 = 5/11, so the saving is 6/11 = 54.5454...%
    fat, rail = paper(Family.rail_optimized, 32768, 32), paper(Family.rail_only, 32768, 32)
    assert fat.cost_usd == 269_615_104 and rail.cost_usd == 122_552_320
    assert rail.cost_usd * 11 == fat.cost_usd * 5


@pytest.mark.parametrize("radix, expected_pct", [(64, 37), (128, 75), (256, 60)])
def test_paper_power_savings_match_v5_with_inferred_constants(radix, expected_pct):
    # railonly.md §2: v5 states power savings of 37-75%; 17.6 W/port and 9.25 W/transceiver
    # reproduce 37/75/60% at N = 32,768, K = 256.
    fat, rail = paper(Family.rail_optimized, 32768, radix, V5), paper(Family.rail_only, 32768, radix, V5)
    assert round(saving_pct(fat, rail, "power_w")) == expected_pct


def test_paper_power_baseline_is_about_4_7_megawatts():
    # 2560*64*17.6 + 196608*9.25 = 2,883,584 + 1,818,624 = 4,702,208 W (railonly.md §2: ~4.7 MW)
    assert paper(Family.rail_optimized, 32768, 64, V5).power_w == pytest.approx(4_702_208)


def test_paper_packs_rails_onto_shared_switches():
    # K = 256, N = 32768, R = 256: 256 rails of 128 GPUs, two per 256-port switch -> 128 switches,
    # as (2*1 - 1) * 32768 / 256 = 128 (railonly.md §2).
    bom = paper(Family.rail_only, 32768, 256)
    assert bom.n_tiers == 1 and bom.tiers[0].switches == 128


def test_paper_allows_fractional_switches():
    # N = 8*100 = 800, K = 8, R = 64, rail-only: 100 GPUs per rail, L = 2 (64 < 100 <= 2048),
    # switches (2*2-1) * 800 / 64 = 37.5 (a partly filled top tier scaled linearly).
    bom = paper(Family.rail_only, 800, 64, hb_domain_size=8)
    assert bom.switch_count == pytest.approx(37.5)
    assert bom.transceiver_count == 2 * 2 * 800


def test_paper_nics_per_gpu_multiplies_everything():
    one = paper(Family.rail_optimized, 32768, 64)
    two = paper(Family.rail_optimized, 32768, 64, nics_per_gpu=2)
    assert two.switch_count == 2 * one.switch_count
    assert two.transceiver_count == 2 * one.transceiver_count


# ---------------------------------------------------------------- physical convention: published oracles


@pytest.mark.parametrize(
    "family, n, k, expected_switches, expected_per_tier",
    [
        # railonly.md §2, 64-port 400G fabrics. 512 GPUs, one tier: rail-only, 8 rails of 64 GPUs,
        # one 64-port switch each.
        (Family.rail_only, 512, 8, 8, (8,)),
        # 8 per-rail two-tier fabrics: per rail D = N/8 GPUs, leaves ceil(D/32), spines ceil(D/64).
        (Family.rail_only, 1024, 8, 48, (8 * 4, 8 * 2)),  # D = 128: 4 + 2 = 6 per rail
        (Family.rail_only, 2048, 8, 96, (8 * 8, 8 * 4)),  # D = 256: 8 + 4 = 12 per rail
        (Family.rail_only, 4096, 8, 192, (8 * 16, 8 * 8)),  # D = 512: 16 + 8 = 24 per rail
        # full three-tier k = 64 fat-trees (k^3/4 = 65,536 hosts, 5k^2/4 = 5,120 switches):
        # 32768/32 leaves, 32768/32 aggregation, 32768/64 core.
        (Family.rail_optimized, 32768, 8, 2560, (1024, 1024, 512)),
        (Family.rail_optimized, 65536, 8, 5120, (2048, 2048, 1024)),
        (Family.fat_tree, 65536, 8, 5120, (2048, 2048, 1024)),
        # "a 4,096-GPU three-tier non-blocking build uses 320 switches": 4096 > 2*32^2, so 3 tiers:
        # 128 leaves + 128 spines + 64 cores.
        (Family.rail_optimized, 4096, 8, 320, (128, 128, 64)),
        (Family.fat_tree, 4096, 8, 320, (128, 128, 64)),
    ],
)
def test_physical_reproduces_published_64_port_counts(family, n, k, expected_switches, expected_per_tier):
    bom = physical(family, n, k, 64)
    assert bom.switch_count == expected_switches
    assert tuple(t.switches for t in bom.tiers) == expected_per_tier
    assert all(isinstance(t.switches, int) for t in bom.tiers)


def test_physical_non_blocking_transceivers_equal_paper_formula():
    # L link layers of N links, an optic at each end: 2*L*N = 2*3*32768 = 196,608 (railonly.md §2)
    bom = physical(Family.rail_optimized, 32768, 8, 64)
    assert bom.transceiver_count == 196_608
    assert bom.transceivers_by_link == {"nic-leaf": 65536, "leaf-spine": 65536, "spine-core": 65536}
    assert bom.link_count == 3 * 32768


def test_physical_rail_pure_leaves_cost_extra_when_rails_do_not_fill_leaves():
    # K = 72, N = 1440 (D = 20 domains), R = 32, h = 16. L = 3 since 2*16^2 = 512 < 1440 <= 8192.
    # rail-optimized: each of the 72 rails has 20 GPUs -> 72 * ceil(20/16) = 144 leaves;
    #   spines ceil(1440/16) = 90; cores ceil(1440/32) = 45.
    # fat-tree: leaves ceil(1440/16) = 90; spines 90; cores 45.
    ro = physical(Family.rail_optimized, 1440, 72, 32)
    ft = physical(Family.fat_tree, 1440, 72, 32)
    assert [t.switches for t in ro.tiers] == [144, 90, 45]
    assert [t.switches for t in ft.tiers] == [90, 90, 45]


def test_physical_short_rails_are_packed_whole_onto_leaves():
    # K = 72, N = 576 (D = 8), R = 32, h = 16: floor(16/8) = 2 whole rails per leaf -> 36 leaves;
    # spines ceil(576/16) = 36; cores ceil(576/32) = 18. A leaf spans whole rails (8 domains).
    bom = physical(Family.rail_optimized, 576, 72, 32)
    assert [t.switches for t in bom.tiers] == [36, 36, 18]
    assert bom.tiers[0].span_gpus == 16
    assert to_network_tiers(bom)[0].span_domains == 8


def test_physical_packs_one_tier_rails_onto_shared_switches():
    # K = 256, N = 1024: 256 rails of 4 GPUs; a 64-port switch holds floor(64/4) = 16 whole rails,
    # so ceil(256/16) = 16 switches and 1024 NIC links.
    bom = physical(Family.rail_only, 1024, 256, 64)
    assert bom.switch_count == 16 and bom.link_count == 1024
    # 48 GPUs per rail (K = 8, N = 384): one rail per 64-port switch (floor(64/48) = 1) -> 8 switches.
    assert physical(Family.rail_only, 384, 8, 64).switch_count == 8


def test_physical_partial_two_tier_uses_ceilings():
    # fat-tree, N = 1000 (K = 8), R = 64: leaves ceil(1000/32) = 32, spines ceil(1000/64) = 16.
    bom = physical(Family.fat_tree, 1000, 8, 64)
    assert [t.switches for t in bom.tiers] == [32, 16]
    assert bom.switch_port_count == 48 * 64


def test_physical_oversubscribed_thin_top_hand_case():
    # rail-optimized 4096 GPUs, K = 8, R = 64, 4:1 above the spines (default: top boundary).
    # leaves 128, spines ceil(4096/32) = 128, spine uplinks ceil(4096/4) = 1024, cores ceil(1024/64) = 16.
    # transceivers 2*(4096 + 4096 + 1024) = 18,432. Cost at V1: 272*64*748 + 18432*374.
    bom = physical(Family.oversubscribed, 4096, 8, 64, oversubscription=4.0)
    assert bom.oversubscribed_level == 2
    assert [t.switches for t in bom.tiers] == [128, 128, 16]
    assert [t.up_links for t in bom.tiers] == [4096, 1024, 0]
    assert bom.transceiver_count == 18_432
    assert bom.cost_usd == 272 * 64 * 748 + 18_432 * 374
    assert [t.oversubscription for t in bom.tiers] == [1.0, 4.0, 1.0]
    assert [t.capacity_per_gpu_bytes_per_s for t in bom.tiers] == [50e9, 50e9, 12.5e9]
    # bisection: min(4096, 1024)/2 links of 50e9 bytes/s
    assert bom.bisection_bandwidth_bytes_per_s == 512 * 50e9


def test_physical_oversubscribed_at_the_leaves():
    # same fabric, 2:1 above the leaves: leaf uplinks ceil(4096/2) = 2048,
    # spines ceil(2048/32) = 64, cores ceil(2048/64) = 32.
    bom = physical(Family.oversubscribed, 4096, 8, 64, oversubscription=2.0, oversubscribed_level=1)
    assert [t.switches for t in bom.tiers] == [128, 64, 32]
    assert [t.capacity_per_gpu_bytes_per_s for t in bom.tiers] == [50e9, 25e9, 25e9]


def test_physical_oversubscription_rounds_up_uplinks():
    # 3:1 above 4096 spine downlinks: ceil(4096/3) = 1366 uplinks, cores ceil(1366/64) = 22.
    bom = physical(Family.oversubscribed, 4096, 8, 64, oversubscription=3.0)
    assert bom.tiers[1].up_links == 1366 and bom.tiers[2].switches == 22
    assert bom.tiers[1].oversubscription == pytest.approx(4096 / 1366)


def test_oversubscription_one_equals_rail_optimized():
    a = physical(Family.oversubscribed, 2048, 8, 32)
    b = physical(Family.rail_optimized, 2048, 8, 32)
    assert [t.switches for t in a.tiers] == [t.switches for t in b.tiers]
    assert a.cost_usd == b.cost_usd


def test_dac_replaces_nic_side_optics_and_is_priced():
    prices = ComponentPrices(
        name="t", switch_port_usd=1, switch_port_w=0, transceiver_usd=10, transceiver_w=2,
        dac_usd=3, dac_w=0.5, nic_usd=100, nic_w=20, source="test",
    )
    # rail-only 1024 GPUs K = 8 R = 64: 48 switches, links 1024 NIC + 1024 leaf-spine (128 per rail x 8).
    bom = physical(Family.rail_only, 1024, 8, 64, prices=prices, dac_for_nic_links=True)
    assert bom.dac_count == 1024
    assert bom.transceivers_by_link == {"nic-leaf": 0, "leaf-spine": 2048}
    assert bom.cost_usd == 48 * 64 * 1 + 2048 * 10 + 1024 * 3 + 1024 * 100
    assert bom.power_w == pytest.approx(2048 * 2 + 1024 * 0.5 + 1024 * 20)
    assert bom.nic_count == 1024


def test_rail_only_nics_per_gpu_doubles_planes():
    # 2 NICs: 16 planes of 128 GPUs, each 4 leaves + 2 spines -> 96 switches.
    bom = physical(Family.rail_only, 1024, 8, 64, nics_per_gpu=2)
    assert bom.n_planes == 16 and bom.switch_count == 96 and bom.nic_count == 2048


# ---------------------------------------------------------------- properties


@st.composite
def fabric(draw, families=tuple(Family)):
    family = draw(st.sampled_from(families))
    k = draw(st.sampled_from([1, 2, 8, 72, 256]))
    n = k * draw(st.integers(1, 600))
    radix = draw(st.sampled_from([8, 16, 32, 48, 64, 128, 256]))
    return family, n, k, radix


@settings(max_examples=200, deadline=None)
@given(case=fabric(families=(Family.rail_optimized, Family.rail_only, Family.fat_tree)), extra=st.integers(1, 40))
def test_physical_switch_count_is_monotone_in_domains(case, extra):
    family, n, k, radix = case
    assert physical(family, n, k, radix).switch_count <= physical(family, n + extra * k, k, radix).switch_count


@settings(max_examples=200, deadline=None)
@given(case=fabric(families=(Family.rail_optimized, Family.rail_only, Family.fat_tree)))
def test_physical_never_below_paper_and_paper_rail_only_never_above_fat_tree(case):
    family, n, k, radix = case
    assert physical(family, n, k, radix).switch_count >= paper(family, n, radix, hb_domain_size=k).switch_count - 1e-9
    assert paper(Family.rail_only, n, radix, hb_domain_size=k).cost_usd <= paper(
        Family.fat_tree, n, radix, hb_domain_size=k
    ).cost_usd


@settings(max_examples=100, deadline=None)
@given(half=st.sampled_from([4, 8, 16, 32, 64]), levels=st.integers(1, 3), k=st.sampled_from([1, 2, 4]))
def test_physical_equals_paper_when_the_tree_is_full(half, levels, k):
    # E = 2*h^L endpoints per rail fills every tier exactly, so the ceilings are exact.
    n = k * 2 * half**levels
    if n > 4_000_000:
        return
    for family in (Family.rail_only, Family.rail_optimized):
        a, b = physical(family, n, k, 2 * half), paper(family, n, 2 * half, hb_domain_size=k)
        assert a.switch_count == b.switch_count and a.transceiver_count == b.transceiver_count


@settings(max_examples=100, deadline=None)
@given(n_domains=st.integers(1, 4096), ratios=st.lists(st.sampled_from([1.0, 1.5, 2.0, 3.0, 4.0, 7.0]), min_size=2, max_size=2))
def test_oversubscribed_switches_fall_as_the_ratio_rises(n_domains, ratios):
    low, high = sorted(ratios)
    try:
        thick = physical(Family.oversubscribed, 8 * n_domains, 8, 32, oversubscription=low)
        thin = physical(Family.oversubscribed, 8 * n_domains, 8, 32, oversubscription=high)
    except SpecError:
        return  # one tier (nothing to oversubscribe) or too few uplinks: refused for both
    assert thin.switch_count <= thick.switch_count
    assert thin.bisection_bandwidth_bytes_per_s <= thick.bisection_bandwidth_bytes_per_s


# ---------------------------------------------------------------- to_network_tiers


def test_network_tiers_for_oversubscribed_rail_fabric():
    bom = physical(Family.oversubscribed, 4096, 8, 64, oversubscription=4.0)
    leaf, spine, core = to_network_tiers(bom, latency_per_tier_s=1e-6)
    # leaf: 32 GPUs of one rank = 32 domains; spine pods of 32*32 = 1024 uplinks = 1024 GPUs,
    # capped at the 512 domains of a rail; the core joins all ranks of all 512 domains.
    assert (leaf.span_domains, leaf.cross_rail) == (32, False)
    assert (spine.span_domains, spine.cross_rail) == (512, False)
    assert (core.span_domains, core.cross_rail) == (512, True)
    # the line rate and the ratio below the tier, which the perf model divides once: the core
    # carries 50 / 4 = 12.5 GB/s per GPU, the tier's capacity
    assert [t.bandwidth_per_gpu_bytes_per_s for t in (leaf, spine, core)] == [50e9, 50e9, 50e9]
    assert [t.oversubscription for t in (leaf, spine, core)] == [1.0, 1.0, 4.0]
    assert [t.bandwidth_per_gpu_bytes_per_s / t.oversubscription for t in (leaf, spine, core)] == \
        [x.capacity_per_gpu_bytes_per_s for x in bom.tiers]
    assert [t.latency_s for t in (leaf, spine, core)] == pytest.approx([1e-6, 2e-6, 3e-6])


def test_network_tiers_rail_only_never_cross_rail():
    bom = physical(Family.rail_only, 4096, 8, 64, nics_per_gpu=2)
    tiers = to_network_tiers(bom)
    assert [t.cross_rail for t in tiers] == [False, False]
    assert [t.span_domains for t in tiers] == [32, 512]  # leaf h = 32 domains; top the whole rail
    assert all(t.bandwidth_per_gpu_bytes_per_s == 2 * GBPS_400_BYTES_PER_S for t in tiers)


def test_network_tiers_fat_tree_leaf_holds_whole_domains():
    bom = physical(Family.fat_tree, 4096, 8, 64)
    tiers = to_network_tiers(bom)
    # leaf 32 consecutive GPUs = 4 domains; spine pod 1024 GPUs = 128 domains; core 512 domains.
    assert [t.span_domains for t in tiers] == [4, 128, 512]
    assert all(t.cross_rail for t in tiers)


def test_network_tiers_build_a_cluster_system():
    from designer.spec.system import ClusterSystem, GpuPerf, HBDomain

    bom = physical(Family.rail_optimized, 2048, 8, 32)
    system = ClusterSystem(
        gpu=GpuPerf(name="g", peak_flops={"bf16": 1e15}, hbm_bytes=80e9, hbm_bandwidth_bytes_per_s=3e12),
        n_gpus=2048,
        hb=HBDomain(size=8, bandwidth_per_gpu_bytes_per_s=450e9),
        nic_bandwidth_per_gpu_bytes_per_s=GBPS_400_BYTES_PER_S,
        tiers=to_network_tiers(bom),
        family=bom.family.value,
    )
    assert not system.rail_only and system.tiers[-1].span_domains == 256


# ---------------------------------------------------------------- invalid input


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(radix=63), "radix"),
        (dict(radix=2), "radix"),
        (dict(n_gpus=1000, hb_domain_size=72), "n_gpus"),
        (dict(n_gpus=0), "n_gpus"),
        (dict(hb_domain_size=0), "hb_domain_size"),
        (dict(nics_per_gpu=0), "nics_per_gpu"),
        (dict(port_gbps=0.0), "port_gbps"),
        (dict(family="torus"), "family"),
        (dict(family=Family.oversubscribed, oversubscription=0.5), "oversubscription"),
        (dict(family=Family.rail_optimized, oversubscription=2.0), "oversubscription"),
        (dict(family=Family.rail_only, oversubscribed_level=1), "oversubscribed_level"),
        (dict(family=Family.oversubscribed, oversubscription=2.0, oversubscribed_level=3), "oversubscribed_level"),
        # 512 GPUs fit one 512-port switch: no tier boundary to oversubscribe
        (dict(family=Family.oversubscribed, n_gpus=512, radix=512, oversubscription=2.0), "family=oversubscribed"),
        # h = 32 downlinks per leaf, r = 64 leaves 4096/64 = 64 uplinks for 128 leaves
        (dict(family=Family.oversubscribed, oversubscription=64.0, oversubscribed_level=1), "oversubscription"),
        (dict(family=Family.oversubscribed, oversubscription=2.0, convention="paper"), "family=oversubscribed"),
        (dict(convention="paper", dac_for_nic_links=True), "dac_for_nic_links"),
        (dict(convention="exact"), "convention"),
    ],
)
def test_invalid_inputs_raise_one_line_spec_error(kwargs, field):
    args = dict(family=Family.rail_optimized, n_gpus=4096, hb_domain_size=8, radix=64) | kwargs
    family, n, k, radix = (args.pop(x) for x in ("family", "n_gpus", "hb_domain_size", "radix"))
    with pytest.raises(SpecError) as info:
        bill_of_materials(family, n, k, radix, prices=V1, **args)
    message = str(info.value)
    assert message.startswith(field) and "\n" not in message


def test_price_constants_are_the_papers():
    assert (V1.switch_port_usd, V1.transceiver_usd) == (748, 374)
    assert (V5.switch_port_usd, V5.transceiver_usd) == (694, 199)
    for prices in (V1, V5):
        assert (prices.switch_port_w, prices.transceiver_w, prices.nic_usd) == (17.6, 9.25, 0.0)
        assert "inferred" in prices.source
