"""Linear component prices (per switch port, per transceiver, per NIC) from the catalog.

Two sources: a paper price set (`railonly-v1`, `railonly-v5`: per port and per transceiver, NICs
excluded, railonly.md §2), or the catalog's own components (a switch's price and base power spread
over its ports, the optic's price per port end, the NIC's price).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from designer.errors import SpecError
from designer.network.milp import _pick_media, component_prices
from designer.network.topology import ComponentPrices, Convention, Family, bill_of_materials
from designer.spec.catalog import Catalog, MediaKind, load_catalog


def prices_from_price_set(catalog: Catalog, price_set_id: str) -> ComponentPrices:
    ps = catalog.price_set(price_set_id)
    return ComponentPrices(name=ps.id, switch_port_usd=ps.switch_port_usd, switch_port_w=ps.switch_port_w,
                           transceiver_usd=ps.transceiver_usd, transceiver_w=ps.transceiver_w,
                           source=f"{ps.source}; {ps.power_source}")


def prices_from_components(catalog: Catalog, switch_id: str, port_gbps: float, optic_id: str | None = None,
                           nic_id: str | None = None, dac_id: str | None = None,
                           radix: int | None = None) -> ComponentPrices:
    """Per-port prices of a real bill of materials, exactly as the MILP prices a design: the switch's
    price and base power over its ports in its mode of `radix` ports at `port_gbps` (the first such
    mode when no radix is given), the cheapest optic (and DAC) of at least that speed unless one is
    named, and the NIC of that speed unless one is named."""
    switch = catalog.switch(switch_id)
    modes = [m for m in switch.modes if m.port_gbps == port_gbps and (radix is None or m.radix == radix)]
    if not modes:
        allowed = ", ".join(f"{m.radix}x{m.port_gbps:g}G" for m in switch.modes)
        want = f"{radix}x{port_gbps:g}G" if radix is not None else f"{port_gbps:g}G"
        raise SpecError(f"switch '{switch_id}' has no {want} mode; allowed: {allowed}")
    optic = _pick_media(catalog, MediaKind.optic, port_gbps, optic_id)
    if optic is None:
        raise SpecError(f"no optic of at least {port_gbps:g}G per port in the catalog; add one with --catalog")
    dac = _pick_media(catalog, MediaKind.dac, port_gbps, dac_id)
    if nic_id is None:
        nics = [n.id for n in catalog.nics if n.gbps == port_gbps]
        if not nics:
            raise SpecError(f"no NIC of {port_gbps:g}G in the catalog; add one with --catalog")
        nic_id = nics[0]
    return component_prices(catalog, switch_id, modes[0].radix, port_gbps, nic_id, optic, dac)


def _enum(enum_cls: Any, value: str, field: str) -> Any:
    try:
        return enum_cls(value)
    except ValueError:
        allowed = ", ".join(e.value for e in enum_cls)
        raise SpecError(f"{field} = {value!r}: allowed: {allowed}") from None


# `designer bom`'s options by the bill_of_materials fields they set, as an error message names them
# ("n_gpus=0: ..."): the message then names what the user typed ("--gpus 0: ...").
_BOM_OPTIONS = {"n_gpus": "--gpus", "hb_domain_size": "--hb-domain", "radix": "--radix",
                "nics_per_gpu": "--nics-per-gpu", "gpus_per_nic": "--gpus-per-nic", "oversubscribed_level": "--oversubscribed-level",
                "family": "--topology", "oversubscription": "--oversubscription", "port_gbps": "--port-gbps",
                "convention": "--convention"}
_CLI_NAMES = re.compile(r"\b(" + "|".join(_BOM_OPTIONS) + r")=")


def bom_from_cli(*, topology: str, n_gpus: int, hb_domain_size: int, radix: int, prices: str,
                 port_gbps: float, nics_per_gpu: int, oversubscription: float,
                 oversubscribed_level: int | None, convention: str,
                 catalog_files: tuple[Path, ...] = (), gpus_per_nic: int = 1) -> dict[str, Any]:
    """The `designer bom` command as data: one JSON-ready dict."""
    family = _enum(Family, topology, "--topology")
    conv = _enum(Convention, convention, "--convention")
    for flag, value in (("--port-gbps", port_gbps), ("--oversubscription", oversubscription)):
        if not math.isfinite(value) or value <= 0:
            raise SpecError(f"{flag} = {value:g}: must be a finite number > 0")
    catalog = load_catalog(extra_files=catalog_files)
    if prices.startswith("catalog:"):
        component_prices = prices_from_components(catalog, prices.split(":", 1)[1], port_gbps, radix=radix)
    else:
        ids = {p.id for p in catalog.price_sets}
        if prices not in ids:
            raise SpecError(f"--prices = {prices!r}: allowed: {', '.join(sorted(ids))}, or catalog:SWITCH_ID")
        component_prices = prices_from_price_set(catalog, prices)
    try:
        bom = bill_of_materials(family, n_gpus, hb_domain_size, radix, prices=component_prices, port_gbps=port_gbps,
                                nics_per_gpu=nics_per_gpu, oversubscription=oversubscription,
                                oversubscribed_level=oversubscribed_level, convention=conv, gpus_per_nic=gpus_per_nic)
    except SpecError as e:
        # the message names the record's fields; the command's user typed its options
        raise SpecError(_CLI_NAMES.sub(lambda m: _BOM_OPTIONS[m.group(1)] + " ", str(e))) from None
    data = bom.model_dump(mode="json")
    # The short names the command documents, beside the full record.
    data["switches"] = bom.switch_count
    data["transceivers"] = bom.transceiver_count
    data["tiers"] = [t.model_dump(mode="json") for t in bom.tiers]
    data["prices_source"] = component_prices.source
    return data
