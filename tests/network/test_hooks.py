"""User constraint hooks: loading, the context they get, what they may not do, and their effect.

Oracles are brute force over the domain count with the closed form (designer.network.topology) and
prices read from the catalog entries by hand, never the MILP's own numbers.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pyomo.environ as pyo
import pytest

from designer.errors import HookError, InfeasibleDesign
from designer.network.api import load_network_study, solve_network
from designer.network.hooks import HookContext, load_hook
from designer.network.topology import ComponentPrices, bill_of_materials
from designer.spec.catalog import Catalog, load_catalog
from designer.spec.network_study import NetworkStudy

REPO = Path(__file__).resolve().parents[2]
HOOK_STUDY = REPO / "studies" / "network_hook_budget.yaml"
DECL_STUDY = REPO / "studies" / "network_declarative_budget.yaml"


def small_study(**extra) -> NetworkStudy:
    return NetworkStudy.model_validate({
        "choices": {"platforms": ["hgx_h100_8"], "nics": [{"id": "cx7_400g"}], "switches": [{"id": "qm9790"}],
                    "families": ["rail-optimized"]},
        "gpus": {"count": 1024}, **extra})


def test_hook_study_changes_the_answer(monkeypatch):
    monkeypatch.chdir("/")  # the study names its hook relative to its own folder, whatever the cwd
    st = load_network_study(HOOK_STUDY)
    # The oracle below prices DAC NIC links and twin-port SR4 optics on every other link: pin the
    # study's media to that (the layout would choose them by length), with in-rack NIC links.
    st = st.with_updates(choices={**st.choices.model_dump(), "media": {
        "nic_links": "dac", "nic_link_length_m": 1.5, "optic": "osfp_800g_2xsr4", "dac": "dac_2x400g"}})
    with_hook = solve_network(st).design
    without = solve_network(st.with_updates(hooks=[])).design

    # Oracle: rail-optimized on QM9790 (64 x 400G), 8-GPU H100 nodes, DAC NIC links (the default
    # policy), prices per port from the catalog entries; max D with capex <= the study's budget, then also with an
    # even spine count.
    cat = load_catalog()
    qm, optic, dac, nic = cat.switch("qm9790"), cat.medium("osfp_800g_2xsr4"), cat.medium("dac_2x400g"), cat.nic("cx7_400g")
    prices = ComponentPrices(name="hand", switch_port_usd=qm.price_usd / 64, switch_port_w=qm.power_w / 64,
                             transceiver_usd=optic.price_usd / 2, transceiver_w=optic.power_w / 2,
                             dac_usd=dac.price_usd / 2, dac_w=dac.power_w / 2, nic_usd=nic.price_usd, nic_w=nic.power_w,
                             source="catalog by hand")
    node = cat.platform("hgx_h100_8").price_usd

    def fits(d):
        b = bill_of_materials("rail-optimized", 8 * d, 8, 64, prices=prices, dac_for_nic_links=True)
        return node * d + b.cost_usd <= st.budgets.capex_usd, b

    best = max(d for d in range(128, 1025) if fits(d)[0])
    best_even = max(d for d in range(128, 1025) if fits(d)[0] and fits(d)[1].tiers[1].switches % 2 == 0)
    assert without.n_domains == best and with_hook.n_domains == best_even
    assert best_even < best  # the hook binds here
    assert with_hook.bom.tiers[1].switches % 2 == 0


def test_optics_per_rack_hook_changes_the_answer():
    st = load_network_study(DECL_STUDY).with_updates(budgets={"declared": []})
    plain = solve_network(st).design
    hooked = solve_network(st, hooks=["studies.hooks.example_hooks:limit_optics_per_rack"]).design
    # A 3-tier fabric with optics on every link uses 3 x 2 = 6 optics per GPU = 48 per 8-GPU node,
    # over the hook's 40; a 2-tier one uses 4 per GPU = 32 (railonly.md §2: transceivers = 2 L N).
    assert plain.n_tiers == 3 and plain.bom.transceiver_count == 6 * 32768
    assert hooked.n_tiers == 2 and hooked.bom.transceiver_count / hooked.n_domains == 32


def test_callable_hook_gets_a_frozen_context_and_its_own_block():
    seen = {}

    def at_most_20_switches(block, ctx):
        seen["ctx"], seen["block_name"] = ctx, block.name
        assert isinstance(ctx, HookContext) and isinstance(ctx.catalog, Catalog)
        assert ctx.study.gpus.count == 1024
        with pytest.raises(dataclasses.FrozenInstanceError):
            ctx.study = None  # type: ignore[misc]
        with pytest.raises(TypeError):
            ctx.handles.switches_by_level[9] = 0  # read-only mapping
        block.extra = pyo.Var(domain=pyo.NonNegativeIntegers)
        block.cap = pyo.Constraint(expr=ctx.handles.switch_count + block.extra <= 20)

    # 1024 GPUs rail-optimized on 64 ports: 32 leaves + 16 spines = 48 switches (railonly.md §2 counts
    # for 1,024 GPUs), so a 20-switch cap makes the study infeasible, and the message names the hook.
    with pytest.raises(InfeasibleDesign) as err:
        solve_network(small_study(), hooks=[at_most_20_switches])
    assert "\n" not in str(err.value) and "hook 'at_most_20_switches' rules out every design" in str(err.value)
    assert seen["block_name"].startswith("hooks.h0_at_most_20_switches")

    def at_most_60(block, ctx):
        block.cap = pyo.Constraint(expr=ctx.handles.switch_count <= 60)

    assert solve_network(small_study(), hooks=[at_most_60]).design.bom.switch_count == 48


def test_study_and_api_hooks_both_apply(monkeypatch):
    monkeypatch.chdir(REPO)
    calls = []

    def record(block, ctx):
        calls.append("api")

    st = small_study(hooks=["studies.hooks.example_hooks:even_spines"])
    res = solve_network(st, hooks=[record])
    assert calls == ["api"]
    assert res.design.bom.tiers[1].switches % 2 == 0


@pytest.mark.parametrize("ref,needle", [
    ("studies.hooks.no_such_module:f", "cannot import 'studies.hooks.no_such_module'"),
    ("studies.hooks.example_hooks:no_such_fn", "'studies.hooks.example_hooks' has no function 'no_such_fn'"),
    ("studies/hooks/missing.py:f", "no file"),
    ("no-colon", "expected 'package.module:function'"),
])
def test_load_hook_errors_are_one_line(monkeypatch, ref, needle):
    monkeypatch.chdir(REPO)
    with pytest.raises(HookError) as err:
        load_hook(ref)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_study_hook_string_is_validated():
    with pytest.raises(Exception) as err:
        small_study(hooks=["not a hook"])
    assert "package.module:function" in str(err.value)


def test_hook_that_raises_becomes_hook_error():
    def broken(block, ctx):
        raise KeyError("rack")

    with pytest.raises(HookError, match=r"^hook 'h0_broken' raised KeyError: 'rack'$"):
        solve_network(small_study(), hooks=[broken])


def test_hook_may_not_add_an_objective():
    def greedy(block, ctx):
        block.obj = pyo.Objective(expr=ctx.handles.n_gpus, sense=pyo.maximize)

    with pytest.raises(HookError, match="added objective"):
        solve_network(small_study(), hooks=[greedy])


def test_hook_may_not_touch_the_model_outside_its_block():
    def sneaky(block, ctx):
        block.model().one_design.deactivate()
        block.model().extra = pyo.Var()

    with pytest.raises(HookError, match="outside its own block"):
        solve_network(small_study(), hooks=[sneaky])


def test_hooks_without_a_registry():
    # Two different callables with the same name do not collide: nothing is registered globally.
    def cap(block, ctx):
        block.c = pyo.Constraint(expr=ctx.handles.switch_count <= 100)

    first = cap

    def cap(block, ctx):  # noqa: F811
        block.c = pyo.Constraint(expr=ctx.handles.n_domains >= 1)

    res = solve_network(small_study(), hooks=[first, cap])
    assert res.design.bom.switch_count == 48


def at_most_ten_gpus(block, ctx):
    """A hook no 1,024-GPU design can meet."""
    block.cap = pyo.Constraint(expr=ctx.handles.n_gpus <= 10)


def nothing(block, ctx):
    block.free = pyo.Var(domain=pyo.NonNegativeReals)


def test_a_hook_that_rules_out_every_design_is_named():
    st = small_study()
    with pytest.raises(InfeasibleDesign) as err:
        solve_network(st, hooks=[nothing, at_most_ten_gpus])
    msg = str(err.value)
    assert "hook 'at_most_ten_gpus' rules out every design" in msg and "\n" not in msg
    # a budget that binds is still named as the budget (the hook is innocent there)
    tight = st.with_updates(budgets={"capex_usd": 1.0e6})
    with pytest.raises(InfeasibleDesign) as err:
        solve_network(tight, hooks=[nothing])
    assert "capex_usd budget" in str(err.value) and "hook" not in str(err.value)
