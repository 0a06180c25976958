"""The shipped catalog loads, carries provenance, and user files and multipliers apply."""

import pytest

from designer.errors import SpecError
from designer.spec.catalog import load_catalog


def test_every_priced_entry_has_a_source_date_and_confidence():
    cat = load_catalog()
    for section in ("gpus", "platforms", "nics", "dpus", "switches", "media"):
        for entry in getattr(cat, section):
            assert entry.source.strip(), f"{section}.{entry.id} has no source"
            assert entry.date.strip(), f"{section}.{entry.id} has no date"
            assert entry.confidence in {"V", "S", "E", "der"}, f"{section}.{entry.id}: {entry.confidence}"
    for rule in cat.reach_rules:
        assert rule.source.strip() and rule.date.strip() and rule.confidence in {"V", "S", "E", "der"}, rule.id


def test_catalog_covers_the_required_hardware():
    cat = load_catalog()
    gpus = {g.id for g in cat.gpus}
    assert {"a100_80gb", "h100_sxm", "h200_sxm", "b200", "gb200"} <= gpus
    sizes = {p.hb_domain_size for p in cat.platforms}
    assert {8, 72, 256} <= sizes
    assert {n.gbps for n in cat.nics} >= {200, 400, 800}
    radices = {(m.radix, m.port_gbps) for s in cat.switches for m in s.modes}
    # 64x400G, 64x800G with breakout to 128x400G, 144x800G
    assert {(64, 400), (64, 800), (128, 400), (144, 800)} <= radices
    assert {m.kind.value for m in cat.media} == {"optic", "dac", "aoc", "copper_active", "lpo"}
    v1, v5 = cat.price_set("railonly-v1"), cat.price_set("railonly-v5")
    assert (v1.switch_port_usd, v1.transceiver_usd) == (748, 374)
    assert (v5.switch_port_usd, v5.transceiver_usd) == (694, 199)


def test_h100_perf_record_in_si_units():
    perf = load_catalog().gpu("h100_sxm").perf()
    assert perf.peak_flops["bf16"] == pytest.approx(989e12)
    assert perf.hbm_bytes == 80 * 2**30  # an "80 GB" H100 holds 80 GiB


def test_user_file_overrides_and_adds(tmp_path):
    extra = tmp_path / "mine.yaml"
    extra.write_text(
        "switches:\n"
        "  - {id: qm9790, price_usd: 20000}\n"
        "nics:\n"
        "  - {id: my_nic, gbps: 1600, power_w: 30, price_usd: 4000, source: quote 2026-11}\n"
    )
    shipped_price = load_catalog().switch("qm9790").price_usd
    cat = load_catalog(extra_files=(extra,))
    assert cat.switch("qm9790").price_usd == 20000
    assert cat.switch("qm9790").modes[0].radix == 64  # untouched fields stay
    assert cat.nic("my_nic").gbps == 1600
    # the shipped catalog is parsed once and shared: a user's file never changes what others load
    assert shipped_price != 20000
    assert load_catalog().switch("qm9790").price_usd == shipped_price
    with pytest.raises(SpecError):
        load_catalog().nic("my_nic")


def test_price_multiplier():
    base = load_catalog()
    half = load_catalog(price_multipliers={"switches": 0.5})
    assert half.switch("sn5600").price_usd == pytest.approx(base.switch("sn5600").price_usd * 0.5)
    assert half.gpu("h100_sxm").price_usd == base.gpu("h100_sxm").price_usd


@pytest.mark.parametrize(
    "content, needle",
    [
        ("switches:\n  - {id: qm9790, price_usd: -5}\n", "price_usd"),
        ("switches:\n  - {id: qm9790, colour: red}\n", "unknown key"),
        ("gadgets: []\n", "unknown section 'gadgets'"),
    ],
)
def test_bad_user_catalog_is_one_line(tmp_path, content, needle):
    f = tmp_path / "bad.yaml"
    f.write_text(content)
    with pytest.raises(SpecError) as err:
        load_catalog(extra_files=(f,))
    assert needle in str(err.value)
    assert "\n" not in str(err.value)


def test_unknown_id_lists_allowed():
    with pytest.raises(SpecError, match="allowed: .*qm9790"):
        load_catalog().switch("nope")


def test_paper_price_constants_match_the_catalog_price_sets():
    """topology.RAILONLY_V*_PRICES (used by the pure closed forms) are the catalog's price sets."""
    from designer.network.prices import prices_from_price_set
    from designer.network.topology import RAILONLY_V1_PRICES, RAILONLY_V5_PRICES

    cat = load_catalog()
    for const in (RAILONLY_V1_PRICES, RAILONLY_V5_PRICES):
        from_catalog = prices_from_price_set(cat, const.name)
        for field in ("switch_port_usd", "transceiver_usd", "switch_port_w", "transceiver_w", "nic_usd"):
            assert getattr(const, field) == getattr(from_catalog, field), (const.name, field)
