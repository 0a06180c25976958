"""`designer bom`: the JSON object, and one-line errors with a non-zero exit."""

import json
import subprocess
import sys

import pytest


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "designer.cli", *args], capture_output=True, text=True, timeout=120)


def test_bom_json_has_the_documented_keys_and_paper_counts():
    # railonly.md §2 V1 Table 2, row N=32768, R=128, K=256: rail-only 256 switches / 65,536 transceivers.
    out = run_cli("bom", "--topology", "rail-only", "--gpus", "32768", "--hb-domain", "256", "--radix", "128",
                  "--prices", "railonly-v5", "--convention", "paper", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    for key in ("tiers", "switches", "transceivers", "cost_usd", "power_w"):
        assert key in data
    assert data["switches"] == 256
    assert data["transceivers"] == 65536
    # cost = 256 switches x 128 ports x $694 + 65,536 x $199 (railonly.md §2 cost formula)
    assert data["cost_usd"] == pytest.approx(256 * 128 * 694 + 65536 * 199)


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--topology", "rail-only", "--gpus", "1000", "--hb-domain", "256", "--radix", "64"], "--gpus 1000: must be a multiple of --hb-domain 256"),
        (["--topology", "mesh", "--gpus", "1024", "--hb-domain", "8", "--radix", "64"], "allowed: rail-optimized"),
        (["--topology", "rail-only", "--gpus", "1024", "--hb-domain", "8", "--radix", "63"], "radix"),
        (["--topology", "rail-only", "--gpus", "1024", "--hb-domain", "8", "--radix", "64", "--prices", "cheap"], "allowed: railonly-v1"),
        # the SN5600 runs 400G ports only in its 128-port mode
        (["--topology", "rail-only", "--gpus", "4096", "--hb-domain", "8", "--radix", "64", "--prices", "catalog:sn5600",
          "--port-gbps", "400"], "switch 'sn5600' has no 64x400G mode; allowed: 64x800G, 128x400G"),
    ],
)
def test_bad_input_is_one_line(args, needle):
    out = run_cli("bom", *args)
    assert out.returncode != 0
    assert "Traceback" not in out.stderr
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, out.stderr
    assert needle in lines[0]


def test_catalog_prices_take_the_switch_in_the_mode_of_the_radix():
    # an SN5600 in its 128 x 400G mode: each switch costs the catalog's whole-switch price (its price
    # over its 128 ports, 128 ports to a switch)
    from designer.spec.catalog import load_catalog

    price = load_catalog().switch("sn5600").price_usd
    out = run_cli("bom", "--topology", "rail-only", "--gpus", "4096", "--hb-domain", "8", "--radix", "128",
                  "--prices", "catalog:sn5600", "--port-gbps", "400", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["switch_cost_usd"] == pytest.approx(data["switches"] * price)
