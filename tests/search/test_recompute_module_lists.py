"""Selective recompute's module lists as a search dimension (StrategySpace.recompute_modules): each
list is a selective row of its own, modules a model lacks leave a list, and the rows the search
scores carry their modules to the model, the tables and the launch."""

from __future__ import annotations

import numpy as np
import pytest

from designer.export import strategy_columns
from designer.launch import megatron_launch
from designer.perf.iteration import iteration_arrays
from designer.perf.model import load_perf_calibration
from designer.perf.records import StrategyArrays
from designer.search.exhaustive import to_strategy_arrays
from designer.search.space import DesignSpace, StrategyTable
from designer.spec.llm import Recompute, RecomputeModule, TrainingSpec
from designer.spec.models import load_model
from designer.spec.study import StrategySpace
from tests.perf.systems import cluster

CALIB = load_perf_calibration()
DSV3 = load_model("deepseek-v3")
TRAIN = TrainingSpec(sequence_length=4096, global_batch_sequences=15360, total_tokens=1e12, precision="fp8",
                     fp8_recipe="blockwise")
# DeepSeek-V3's own recompute: the RMSNorms, MLA's up projections, the experts' SwiGLU output (its
# report §3.2.3 and §3.3.3)
RECIPE = ("layernorm", "mla_up_proj", "moe_act")


def _space(**kw) -> DesignSpace:
    return DesignSpace.build_uncached(DSV3, TRAIN, StrategySpace(max_pp=16, **kw), n_gpus=2048, hb_domain_size=8)


def test_each_list_adds_one_selective_row_per_row_of_the_rest():
    """With none, selective and full listed, one module list gives a third of the rows to selective;
    k lists give each of those rows k forms and leave none and full as they were: k + 2 thirds."""
    one = _space()
    three = _space(recompute_modules=((), RECIPE, ("layernorm", "moe_act")))
    assert one.size % 3 == 0 and three.size == one.size // 3 * 5
    t = three.table()
    rc, masks = t.columns["recompute"], t.columns["recompute_modules"]
    selective = rc == 1
    assert len(np.unique(masks[selective])) == 3 and len(np.unique(masks[~selective])) == 1
    forms = {s.recompute_modules for s in t.take(np.flatnonzero(selective)[::997]).strategies()}
    assert forms == {(), (RecomputeModule.layernorm, RecomputeModule.moe_act, RecomputeModule.mla_up_proj),
                     (RecomputeModule.layernorm, RecomputeModule.moe_act)}
    assert all(s.recompute_modules == () for s in t.take(np.flatnonzero(~selective)[::997]).strategies())
    assert three.choices["recompute_modules"] == ("core_attn", "layernorm+moe_act+mla_up_proj", "layernorm+moe_act")


def test_a_model_without_experts_or_mla_keeps_what_it_has():
    """Llama-3 8B has neither experts nor MLA: [moe_act] leaves nothing and goes; [layernorm, moe_act]
    and [mla_up_proj, layernorm] both become [layernorm], one row with the listed [layernorm]."""
    llm = load_model("llama3-8b")
    tr = TrainingSpec(sequence_length=8192, global_batch_sequences=512, total_tokens=1e12)
    lists = ((), ("moe_act",), ("layernorm", "moe_act"), ("mla_up_proj", "layernorm"), ("layernorm",))
    ds = DesignSpace.build_uncached(llm, tr, StrategySpace(recompute_modules=lists), n_gpus=64, hb_domain_size=8)
    assert ds.choices["recompute_modules"] == ("core_attn", "layernorm")
    only_moe = DesignSpace.build_uncached(llm, tr, StrategySpace(recompute_modules=(("moe_act",),)), n_gpus=64,
                                          hb_domain_size=8)
    assert "recompute_modules" not in only_moe.choices  # Megatron's default remains
    assert only_moe.size == DesignSpace.build_uncached(llm, tr, StrategySpace(), n_gpus=64, hb_domain_size=8).size


def test_the_scored_rows_carry_their_modules_to_the_model_the_tables_and_the_launch():
    """DeepSeek-V3's layout (pp 16, ep 64, DualPipe) with its own recompute and with Megatron's default:
    the columns the search scores give the model the same numbers as the records they stand for, the
    two lists are priced apart (the recipe keeps less), and the table and the launch name the modules."""
    ds = _space(recompute_modules=((), RECIPE), pp=(16,), ep=(64,), schedules=("dualpipe",))
    pick = {"pp": 16, "ep": 64, "recompute": "selective", "microbatch_size": 1, "sequence_parallel": False}
    recipe = ds.nearest({**pick, "recompute_modules": "layernorm+moe_act+mla_up_proj"})
    default = ds.nearest({**pick, "recompute_modules": "core_attn"})
    assert recipe.recompute == default.recompute == Recompute.selective
    assert set(recipe.recompute_modules) == {RecomputeModule(m) for m in RECIPE} and default.recompute_modules == ()
    sy = cluster("h800", 2048)
    table = StrategyTable.from_strategies([recipe, default])
    searched = iteration_arrays(DSV3, TRAIN, to_strategy_arrays(table), sy, CALIB)
    stated = iteration_arrays(DSV3, TRAIN, StrategyArrays.from_strategies([recipe, default]), sy, CALIB)
    for key in ("activations_bytes", "memory_per_gpu_bytes", "iteration_time_s"):
        assert np.array_equal(searched[key], stated[key]), key
    assert searched["activations_bytes"][0] < searched["activations_bytes"][1]
    assert strategy_columns(recipe, TRAIN)["recompute_modules"] == "layernorm+moe_act+mla_up_proj"
    assert strategy_columns(default, TRAIN)["recompute_modules"] == "core_attn"
    assert strategy_columns(recipe.model_copy(update={"recompute": Recompute.full, "recompute_modules": ()}),
                            TRAIN)["recompute_modules"] is None
    args = megatron_launch(DSV3, TRAIN, recipe, 2048, 8).script_args
    i = args.index("--recompute-modules")
    assert set(args[i + 1:i + 4]) == set(RECIPE)


@pytest.mark.parametrize("lists", [((), RECIPE), (RECIPE, ())])
def test_a_module_list_is_found_whatever_its_place(lists):
    ds = _space(recompute_modules=lists, pp=(16,), ep=(64,))
    labels = set(ds.choices["recompute_modules"])
    assert labels == {"core_attn", "layernorm+moe_act+mla_up_proj"}


def test_designer_space_names_the_modules_a_model_lacks():
    from designer.search.space import explain_space

    llm = load_model("llama3-8b")
    tr = TrainingSpec(sequence_length=8192, global_batch_sequences=512, total_tokens=1e12)
    removed = explain_space(llm, tr, StrategySpace(recompute_modules=((), ("layernorm", "moe_act"), ("moe",))),
                            hb_domain_size=8)
    got = {(r.dim, tuple(r.value), r.rule.split(": ", 1)[1]) for r in removed if r.dim == "recompute_modules"}
    assert got == {("recompute_modules", ("moe_act",), "the list ['layernorm', 'moe_act'] runs as ['layernorm']"),
                   ("recompute_modules", ("moe",), "the list ['moe'] is dropped")}
    assert not [r for r in explain_space(DSV3, TRAIN, StrategySpace(recompute_modules=((), RECIPE)), hb_domain_size=8)
                if r.dim == "recompute_modules"]


@pytest.mark.parametrize("lists", [((), RECIPE), (("moe_act",), RECIPE)])
def test_a_pick_of_none_or_full_is_not_turned_selective_by_its_module_list(lists):
    """A sampler suggests a module list with every recompute choice; only a selective row holds one,
    so a pick of none or full comes back as that row whichever list came with it, also where the
    study lists no default."""
    ds = _space(recompute_modules=lists, pp=(16,), ep=(64,))
    pick = {"pp": 16, "ep": 64, "microbatch_size": 1}
    for rc in ("none", "full"):
        for label in ds.choices["recompute_modules"]:
            got = ds.nearest({**pick, "recompute": rc, "recompute_modules": label})
            assert got.recompute == Recompute(rc) and got.recompute_modules == (), (rc, label)
    for label in ds.choices["recompute_modules"]:
        got = ds.nearest({**pick, "recompute": "selective", "recompute_modules": label})
        assert got.recompute == Recompute.selective
        assert set(m.value for m in got.recompute_modules) == set(label.split("+")) - ({"core_attn"} if label == "core_attn" else set())


def test_designer_space_names_tp_1_when_sequence_parallelism_is_required():
    from designer.search.space import explain_space

    removed = explain_space(DSV3, TRAIN, StrategySpace(tp=(1, 2), sequence_parallel=(True,)), hb_domain_size=8)
    assert [(r.dim, r.value) for r in removed if "sequence_parallel" in r.rule] == [("tp", 1)]
    both = explain_space(DSV3, TRAIN, StrategySpace(tp=(1, 2), sequence_parallel=(False, True)), hb_domain_size=8)
    assert not [r for r in both if "sequence_parallel" in r.rule]
    # and no such tp 1 strategy exists
    ds = DesignSpace.build_uncached(DSV3, TRAIN, StrategySpace(tp=(1, 2), sequence_parallel=(True,), pp=(16,), ep=(64,)),
                                    n_gpus=2048, hb_domain_size=8)
    assert "tp" not in ds.choices and all(s.tp == 2 for s in ds.table().take(np.arange(0, ds.size, 97)).strategies())
