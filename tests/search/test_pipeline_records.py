"""What a study run records and continues: inner studies across a grown co-design budget, workers on a
run given --seed, designs with no valid strategy under Optuna, network splits with no design, the
reason nothing is feasible, and the files a run, an export or `designer network` may replace."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest
import yaml

from designer.errors import InfeasibleDesign, SpecError
from designer.pipeline import choose_method, run_study, run_worker, search_identity
from designer.spec.study import load_study
from tests.test_bad_input_corpus import _invoke as _cli  # the `designer` entry point in this process

ROOT = Path(__file__).resolve().parents[2]
QUICK = ROOT / "studies/quickstart/study.yaml"


def _spec(tmp_path: Path, **over):
    """The quickstart on one 256-GPU rail-optimized design (one NIC per GPU), its fields replaced."""
    data = yaml.safe_load(QUICK.read_text())
    data["network"]["gpus"] = {"min": 256, "max": 256}
    data["network"]["choices"]["nics"] = [{"id": "cx7_400g", "nics_per_gpu": [1]}]
    data["network"]["choices"]["families"] = ["rail-optimized"]
    data["candidates"] = {"mode": "cheapest", "split_by": ["family"]}
    data["output"] = {"plots": False}
    for k, v in over.items():
        data[k] = v
    p = tmp_path / "study.yaml"
    p.write_text(yaml.safe_dump(data))
    return load_study(p)


def test_the_inner_studies_continue_when_the_co_design_budget_grows(tmp_path):
    # the outer study's identity leaves its trial budget out so that a rerun with more outer trials
    # continues it; the inner studies it meets again must be continued too, not refused
    spec = _spec(tmp_path, design_search={"method": "optuna", "n_trials": 3, "sampler": "random"})
    more = spec.with_updates(design_search={**spec.design_search.model_dump(), "n_trials": 6})
    assert search_identity(spec, "d") == search_identity(more, "d")
    other_seed = spec.with_updates(search={**spec.search.model_dump(), "seed": 5})
    assert search_identity(spec, "d") != search_identity(other_seed, "d")


def test_a_design_with_no_valid_strategy_never_stops_an_optuna_study(tmp_path):
    # frontier levels 512 and 536 GPUs: 536 = 2^3 x 67 cannot split the batch of 512 sequences. Under
    # `method: optuna` that design is enumerated (nothing to search) and recorded with its reason, as
    # under exhaustive search; the 512-GPU design keeps its front
    assert choose_method(_spec(tmp_path, search={"method": "optuna", "n_trials": 4, "seed": 0}), 0) == "exhaustive"
    spec = _spec(tmp_path, search={"method": "optuna", "n_trials": 4, "seed": 0})
    net = spec.network.model_dump()
    net["objective"] = {"kind": "frontier", "frontier": {"vary": "n_gpus", "levels": [512, 536], "optimize": "min_cost"}}
    net["gpus"] = {"min": 256, "max": 1024}
    r = run_study(spec.with_updates(network=net), out_dir=tmp_path / "out")
    rows = {int(n): (bool(f), str(why)) for n, f, why in r.trials[["n_gpus", "feasible", "reason"]].itertuples(index=False)}
    assert rows[512][0] and not rows[536][0] and "no valid strategy" in rows[536][1]


def test_a_network_split_with_no_design_is_recorded(tmp_path, caplog):
    # two platforms, each its own split; 288 GB200 GPUs need more than the 460 kW budget allows, so
    # only the HGX split yields a design: the other is said and kept in meta.json
    spec = _spec(tmp_path, search={"method": "exhaustive", "seed": 0},
                 candidates={"mode": "cheapest", "split_by": ["family", "platform"]})
    net = spec.network.model_dump()
    net["gpus"] = {"min": 288, "max": 288}
    net["choices"]["platforms"] = ["hgx_h100_8", "gb200_nvl72"]
    net["budgets"] = {"power_w": 4.6e5}
    with caplog.at_level(logging.WARNING, logger="designer.pipeline"):
        run_study(spec.with_updates(network=net), out_dir=tmp_path / "out")
    meta = json.loads((tmp_path / "out/meta.json").read_text())
    (split,) = meta["milp"]["infeasible_splits"]
    assert split.startswith("rail-optimized-gb200_nvl72: ") and "power_w" in split
    assert any("rail-optimized-gb200_nvl72" in m for m in caplog.messages)


def test_nothing_feasible_names_the_commonest_reason_where_memory_is_not_it(tmp_path):
    # an MoE model at TP 2 or 4 without sequence parallelism: every strategy is refused by that rule
    # (code 27); its leanest strategy fits HBM many times over, so memory must not be blamed
    data = yaml.safe_load(QUICK.read_text())
    spec = _spec(tmp_path, model="gpt-oss-20b",
                 training={**data["training"], "global_batch_sequences": 256, "sequence_length": 4096},
                 strategy_space={"tp": [2, 4], "sequence_parallel": [False], "microbatch_sizes": [1]},
                 search={"method": "exhaustive", "seed": 0})
    net = spec.network.model_dump()
    net["gpus"] = {"min": 64, "max": 64}
    with pytest.raises(InfeasibleDesign) as err:
        run_study(spec.with_updates(network=net), out_dir=tmp_path / "out")
    assert "needs sequence parallelism" in str(err.value) and "HBM" not in str(err.value)


def test_a_worker_joins_a_run_started_with_its_own_seed(tmp_path):
    # `designer run --seed 7 --storage J` then `designer worker STUDY --storage J`: the worker takes the
    # run's seed and budget from the storage's manifest, and with them the studies' identity
    spec = _spec(tmp_path, search={"method": "optuna", "n_trials": 4, "seed": 0})
    journal = tmp_path / "shared.journal"
    run_study(spec, out_dir=tmp_path / "out", storage=str(journal), seed=7)
    assert run_worker(spec, str(journal), wait_s=5) >= 1


def test_designer_network_never_writes_into_a_run_folder(tmp_path, monkeypatch, capsys):
    # a run's designs.csv belongs to its completion record (meta.json): `designer network --out` on
    # that folder is refused, and the run's files are left as they were
    spec = _spec(tmp_path, search={"method": "exhaustive", "seed": 0})
    out = tmp_path / "out"
    run_study(spec, out_dir=out)
    before = (out / "designs.csv").read_bytes()
    code, _, err = _cli(["network", str(tmp_path / "study.yaml"), "--out", str(out)], monkeypatch, capsys)
    assert code == 2 and "holds the results of a `designer run`" in err
    assert (out / "designs.csv").read_bytes() == before
    code, _, _ = _cli(["pareto", str(out)], monkeypatch, capsys)
    assert code == 0


def test_an_export_never_replaces_a_result_sets_file_or_a_special_file(tmp_path, monkeypatch, capsys):
    spec = _spec(tmp_path, search={"method": "exhaustive", "seed": 0})
    a, b = tmp_path / "a", tmp_path / "b"
    run_study(spec, out_dir=a)
    run_study(spec.with_updates(name="other"), out_dir=b)
    before = (b / "pareto.csv").read_bytes()
    # another study's result file
    code, _, err = _cli(["pareto", str(a), "--export", str(b / "pareto.csv")], monkeypatch, capsys)
    assert code == 2 and "designer result set" in err and (b / "pareto.csv").read_bytes() == before
    # a link (the rename that writes the export would replace it) and a pipe
    (tmp_path / "target.csv").write_text("keep")
    (tmp_path / "link.csv").symlink_to(tmp_path / "target.csv")
    code, _, err = _cli(["pareto", str(a), "--export", str(tmp_path / "link.csv")], monkeypatch, capsys)
    assert code == 2 and "not a regular file" in err and (tmp_path / "link.csv").is_symlink()
    # a new file is written
    code, _, _ = _cli(["pareto", str(a), "--export", str(tmp_path / "front.csv")], monkeypatch, capsys)
    assert code == 0 and (tmp_path / "front.csv").read_text().startswith("front_rank")


def test_an_export_never_replaces_a_runs_trial_storage(tmp_path, monkeypatch, capsys):
    # an Optuna run's journal is not one of the files meta.json lists, yet it holds every finished
    # trial: replaced by an export, a killed run's trials would be gone. Refused by name inside a result
    # set (with its storage lock and the run lock) and by content anywhere (a journal is JSON lines with
    # Optuna's op_code)
    from designer.search.runner import JOURNAL_NAME

    spec = _spec(tmp_path, search={"method": "exhaustive", "seed": 0})
    a, b = tmp_path / "a", tmp_path / "b"
    run_study(spec, out_dir=a)
    run_study(spec.with_updates(name="other"), out_dir=b)
    journal = '{"op_code": 0, "worker_id": "w", "study_name": "s", "directions": [1]}\n'
    for name in (JOURNAL_NAME, f"{JOURNAL_NAME}.lock", ".designer-run.lock"):
        (b / name).write_text(journal if name == JOURNAL_NAME else "")
        code, _, err = _cli(["pareto", str(a), "--export", str(b / name)], monkeypatch, capsys)
        assert code == 2 and ("run state" in err or "Optuna journal" in err), err
        assert (b / name).read_text() == (journal if name == JOURNAL_NAME else "")
    elsewhere = tmp_path / "kept" / "trials.log"
    elsewhere.parent.mkdir()
    elsewhere.write_text(journal)
    code, _, err = _cli(["pareto", str(a), "--export", str(elsewhere)], monkeypatch, capsys)
    assert code == 2 and "is an Optuna journal" in err and elsewhere.read_text() == journal


def test_another_study_does_not_take_the_folder_of_a_stopped_run(tmp_path):
    # a run killed before writing its results leaves its lock record ("study NAME, pid N"), no
    # meta.json and its trial storage: another study is refused there unless --overwrite; the stopped
    # study itself reruns
    from designer.search.runner import JOURNAL_NAME

    spec = _spec(tmp_path, search={"method": "exhaustive", "seed": 0})
    out = tmp_path / "out"
    out.mkdir()
    (out / ".designer-run.lock").write_text("study stopped_one, pid 12345\n")
    (out / JOURNAL_NAME).write_text("")  # the trials a rerun of stopped_one would continue from
    with pytest.raises(SpecError, match="holds the unfinished run of study 'stopped_one'"):
        run_study(spec, out_dir=out)
    assert (out / ".designer-run.lock").read_text() == "study stopped_one, pid 12345\n"
    # a run refused before it stored anything (bad flags, an infeasible design) left nothing to keep
    (out / JOURNAL_NAME).unlink()
    run_study(spec, out_dir=out)
    assert (out / "meta.json").is_file()
    (out / "meta.json").unlink()
    (out / ".designer-run.lock").write_text("study stopped_one, pid 12345\n")
    (out / JOURNAL_NAME).write_text("")
    run_study(spec, out_dir=out, overwrite=True)
    assert (out / "meta.json").is_file()
    (out / ".designer-run.lock").write_text(f"study {spec.name}, pid 12345\n")
    (out / "meta.json").unlink()
    run_study(spec, out_dir=out)  # the same study continues
    assert (out / "meta.json").is_file()


def test_a_write_that_fails_leaves_no_staging_folder_and_names_the_folder(tmp_path, monkeypatch):
    # a full disk while the set is staged: the staging folder goes (it would keep the disk full), the
    # previous complete set stays, and the error names the folder being written
    import errno

    from designer import export

    spec = _spec(tmp_path, search={"method": "exhaustive", "seed": 0})
    out = tmp_path / "out"
    run_study(spec, out_dir=out)
    before = (out / "meta.json").read_bytes()
    real = export._write_files

    def full_disk(stage, **kw):
        real(stage, **kw)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(export, "_write_files", full_disk)
    with pytest.raises(OSError) as err:
        run_study(spec.with_updates(search={"method": "exhaustive", "seed": 1}), out_dir=out)
    assert err.value.errno == errno.ENOSPC and err.value.filename == str(out)
    assert not list(out.glob(".staging-*")) and (out / "meta.json").read_bytes() == before


def test_a_run_does_not_replace_files_it_did_not_write(tmp_path):
    # an --out folder holding a pareto.csv of the user's own (no meta.json: not a designer run's) is
    # refused unless --overwrite, and the file is left as it was
    spec = _spec(tmp_path, search={"method": "exhaustive", "seed": 0})
    out = tmp_path / "out"
    out.mkdir()
    (out / "pareto.csv").write_text("mine")
    from designer.errors import SpecError

    with pytest.raises(SpecError, match="holds pareto.csv but is not a designer run's folder"):
        run_study(spec, out_dir=out)
    assert (out / "pareto.csv").read_text() == "mine"
    run_study(spec, out_dir=out, overwrite=True)
    assert (out / "meta.json").is_file()


def test_an_edited_model_or_constraint_file_is_a_new_spec(tmp_path):
    # the spec's identity holds the content of the files it names: the model file and the .py trial
    # constraints; editing either changes the spec hash (its results move the earlier ones aside, and
    # an Optuna storage is not continued with trials of the old model)
    model = yaml.safe_load((ROOT / "models/llama3-8b.yaml").read_text())
    (tmp_path / "mymodel.yaml").write_text(yaml.safe_dump({**model, "name": "mymodel"}))
    (tmp_path / "rules.py").write_text("def small_pp(design, strategy, metrics):\n    return strategy.pp - 8\n")
    spec = _spec(tmp_path, model="mymodel.yaml", constraints=["rules.py:small_pp"])
    h0, id0 = spec.spec_hash(), search_identity(spec, "d")
    assert set(spec.file_digests()) == {"model:mymodel.yaml", "code:rules.py"}
    (tmp_path / "mymodel.yaml").write_text(yaml.safe_dump({**model, "name": "mymodel", "layers": 40}))
    h1 = load_study(tmp_path / "study.yaml").spec_hash()
    (tmp_path / "rules.py").write_text("def small_pp(design, strategy, metrics):\n    return strategy.pp - 4\n")
    h2 = load_study(tmp_path / "study.yaml").spec_hash()
    assert len({h0, h1, h2}) == 3
    assert id0 != search_identity(load_study(tmp_path / "study.yaml"), "d")


def test_a_misspelt_front_grouping_is_refused_before_the_search_with_the_column_it_means(tmp_path):
    from designer.errors import SpecError

    spec = _spec(tmp_path, search={"method": "exhaustive", "seed": 0}, output={"plots": False, "front_by": "platfrom"})
    with pytest.raises(SpecError, match=r"'platfrom': not a design column \(did you mean 'platform'\?\)"):
        run_study(spec, out_dir=tmp_path / "out")
    assert not (tmp_path / "out" / "trials.parquet").exists()


def test_a_study_naming_no_file_keeps_its_identity_and_a_grouping_may_be_any_design_column(tmp_path):
    # a shipped model is named, not a file of the study: no digest, so the study's identity is what
    # it was before files were digested; and front_by may name a column designs.csv adds after the
    # search (space_size), which the check before the search accepts
    spec = _spec(tmp_path, search={"method": "exhaustive", "seed": 0}, output={"plots": False, "front_by": "space_size"})
    assert spec.file_digests() == {}
    r = run_study(spec, out_dir=tmp_path / "out")
    assert len(r.pareto)


def test_an_export_never_replaces_a_file_listed_in_a_subfolder_of_a_result_set(tmp_path, monkeypatch, capsys):
    spec = _spec(tmp_path, search={"method": "exhaustive", "seed": 0})
    out = tmp_path / "out"
    run_study(spec, out_dir=out)
    listed = json.loads((out / "meta.json").read_text())["files"]
    nested = next(rel for rel in listed if "/" in rel)
    before = (out / nested).read_bytes()
    code, _, err = _cli(["pareto", str(out), "--export", str(out / nested)], monkeypatch, capsys)
    assert code == 2 and "designer result set" in err and (out / nested).read_bytes() == before


def test_a_worker_joins_a_co_design_run_started_with_its_own_seed(tmp_path):
    # the co-design run stores its seed and budgets beside its outer study; a worker draws with them
    spec = _spec(tmp_path, candidates={"mode": "codesign"},
                 design_search={"method": "optuna", "n_trials": 2, "sampler": "random"},
                 search={"method": "exhaustive", "seed": 0})
    net = spec.network.model_dump()
    net["gpus"] = {"min": 256, "max": 512}
    spec = spec.with_updates(network=net)
    journal = tmp_path / "shared.journal"
    run_study(spec, out_dir=tmp_path / "out", storage=str(journal), seed=5)
    assert run_worker(spec, str(journal), wait_s=5) >= 1


def test_a_misspelt_front_grouping_is_refused_before_a_co_design_search(tmp_path, monkeypatch):
    # under co-design the designs come out of the search, so the check before it takes the columns
    # every design has and the form of those named after its tiers and link layers
    import designer.pipeline as pipeline
    from designer.errors import SpecError

    def no_search(*a, **k):
        raise AssertionError("the co-design search ran")

    monkeypatch.setattr(pipeline, "_run_codesign", no_search)
    spec = _spec(tmp_path, candidates={"mode": "codesign"}, output={"plots": False, "front_by": "famliy"},
                 design_search={"method": "optuna", "n_trials": 2, "sampler": "random"})
    with pytest.raises(SpecError, match=r"'famliy': not a design column \(did you mean 'family'\?\)"):
        run_study(spec, out_dir=tmp_path / "out")
    # a per-tier column passes the early check (and reaches the search)
    spec = _spec(tmp_path, candidates={"mode": "codesign"}, output={"plots": False, "front_by": "switches_leaf"},
                 design_search={"method": "optuna", "n_trials": 2, "sampler": "random"})
    with pytest.raises(AssertionError, match="co-design search ran"):
        run_study(spec, out_dir=tmp_path / "out2")


@pytest.mark.parametrize("folder", sorted(p.parent.name for p in (ROOT / "results").glob("*/designs.csv")))
def test_the_early_front_grouping_check_knows_every_column_a_study_wrote(folder):
    # the committed designs.csv files were written by NetworkDesign.row and the economics sections:
    # each column is one the early check accepts, and every fixed column is there
    import pandas as pd

    from designer.network.design import ROW_FIXED_COLUMNS, NetworkDesign
    from designer.pipeline import DESIGN_RESULT_COLUMNS
    from designer.search.economics import DesignEconomics

    cols = list(pd.read_csv(ROOT / "results" / folder / "designs.csv", nrows=1).columns)
    econ = DesignEconomics.constant_names(costs_declared=True, reliability_declared=True)
    unknown = [c for c in cols if not (NetworkDesign.is_row_column(c) or c in econ or c in DESIGN_RESULT_COLUMNS
                                       or c in ("design_id", "design_source"))]
    assert unknown == []
    assert ROW_FIXED_COLUMNS <= set(cols)


def test_an_exhaustive_search_refuses_a_storage_that_is_no_journal(tmp_path):
    # the search never opens a storage, but the one the user named is still checked before it runs:
    # a folder, or a file that is not an Optuna journal (never modified), is refused
    from designer.errors import SpecError

    spec = _spec(tmp_path, search={"method": "exhaustive", "seed": 0})
    notes = tmp_path / "notes.txt"
    notes.write_text("not a journal\n")
    for bad, why in ((tmp_path, "not a file"), (notes, "not an Optuna journal")):
        with pytest.raises(SpecError, match=why):
            run_study(spec, out_dir=tmp_path / "out", storage=str(bad))
        assert not (tmp_path / "out" / "pareto.csv").exists()
    assert notes.read_text() == "not a journal\n"


def test_a_co_design_range_of_millions_of_gpu_counts_is_refused_at_once(tmp_path):
    # 8 .. 1e8 in steps of 8 is 12.5M counts, each checked for a strategy before the search (hours):
    # one line with the count and the multiple_of that brings it under the cap
    from designer.errors import SpecError
    from designer.search.outer import MAX_GPU_COUNTS

    spec = _spec(tmp_path, candidates={"mode": "codesign"},
                 design_search={"method": "optuna", "n_trials": 2, "sampler": "random"})
    net = spec.network.model_dump()
    net["gpus"] = {"min": 8, "max": 100_000_000, "multiple_of": 8}
    spec = spec.with_updates(network=net)
    with pytest.raises(SpecError, match=r"holds 12,500,000 GPU counts; a co-design search takes at most 100,000: .*"
                                        r"multiple_of of at least 1,000"):
        run_study(spec, out_dir=tmp_path / "out")
    assert MAX_GPU_COUNTS == 100_000


def test_a_rerun_with_the_same_seed_flag_is_the_same_spec(tmp_path, caplog):
    # the run records the spec with the command line's seed in place; a rerun with the same flag
    # claims the folder for that spec: no "earlier spec" warning, and nothing moves to previous/
    import logging

    spec = _spec(tmp_path, search={"method": "exhaustive", "seed": 0})
    out = tmp_path / "out"
    run_study(spec, out_dir=out, seed=5)
    with caplog.at_level(logging.WARNING):
        run_study(spec, out_dir=out, seed=5)
    assert not any("earlier spec" in r.getMessage() or "earlier results" in r.getMessage() for r in caplog.records)
    assert not (out / "previous").exists()
    # another seed is another spec: its results take the folder and the earlier ones move aside
    run_study(spec, out_dir=out, seed=6)
    assert len(list((out / "previous").iterdir())) == 1


def test_an_edited_module_of_the_study_folder_is_a_new_spec(tmp_path):
    # a constraint named as 'module:function' loads rules.py from the study's folder first: its
    # content is part of the identity like a '.py' path's; an installed module's is not digested
    (tmp_path / "myrules.py").write_text("def small_pp(design, strategy, metrics):\n    return strategy.pp - 8\n")
    spec = _spec(tmp_path, constraints=["myrules:small_pp"])
    assert set(spec.file_digests()) == {"code:myrules"}
    h0 = spec.spec_hash()
    (tmp_path / "myrules.py").write_text("def small_pp(design, strategy, metrics):\n    return strategy.pp - 4\n")
    assert load_study(tmp_path / "study.yaml").spec_hash() != h0
    (tmp_path / "other").mkdir()
    assert _spec(tmp_path / "other", constraints=["json:dumps"]).file_digests() == {}


def test_a_helper_module_the_study_code_imports_is_part_of_the_identity(tmp_path, monkeypatch):
    # rules.py imports limits.py from its folder, and the package form imports a sibling and a
    # sub-package; editing any of them changes what runs, so it is a new spec. The numpy and os
    # imports are installed modules: not digested
    (tmp_path / "limits.py").write_text("MAX_PP = 8\n")
    (tmp_path / "rules.py").write_text(
        "import os\nimport numpy\nfrom limits import MAX_PP\n\n"
        "def small_pp(design, strategy, metrics):\n    return strategy.pp - MAX_PP\n")
    spec = _spec(tmp_path, constraints=["rules.py:small_pp"])
    assert set(spec.file_digests()) == {"code:rules.py", "code:rules.py imports limits.py"}
    h0 = spec.spec_hash()
    # the file's own folder is on the import path while it loads, as for a script: it runs
    from designer.usercode import load_callable
    from types import SimpleNamespace

    monkeypatch.delitem(sys.modules, "limits", raising=False)  # the helper loads under its own name
    fn = load_callable("rules.py:small_pp", base_dir=tmp_path, what="constraint")
    assert fn(None, SimpleNamespace(pp=8), None) == 0
    monkeypatch.delitem(sys.modules, "limits")
    (tmp_path / "limits.py").write_text("MAX_PP = 4\n")
    assert load_study(tmp_path / "study.yaml").spec_hash() != h0

    pkg = tmp_path / "mine"
    (pkg / "deep").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "deep" / "__init__.py").write_text("")
    (pkg / "deep" / "table.py").write_text("LIMIT = 8\n")
    (pkg / "shared.py").write_text("from .deep.table import LIMIT\n")
    (pkg / "rules.py").write_text("from . import shared\n\ndef small_pp(design, strategy, metrics):\n"
                                  "    return strategy.pp - shared.LIMIT\n")
    spec = _spec(tmp_path, constraints=["mine.rules:small_pp"])
    assert set(spec.file_digests()) == {"code:mine.rules"} | {
        f"code:mine.rules imports {p}" for p in
        ("mine/__init__.py", "mine/shared.py", "mine/deep/__init__.py", "mine/deep/table.py")}
    h1 = spec.spec_hash()
    (pkg / "deep" / "table.py").write_text("LIMIT = 2\n")
    assert load_study(tmp_path / "study.yaml").spec_hash() != h1
    # code modulefinder cannot follow (a syntax error, which loading reports; a package without
    # __init__.py) has every .py file of the folder digested instead
    (pkg / "rules.py").write_text("def small_pp(:\n")
    every = {"code:mine.rules"} | {f"code:mine.rules imports {p}" for p in (
        "limits.py", "rules.py", "mine/__init__.py", "mine/shared.py", "mine/deep/__init__.py", "mine/deep/table.py")}
    assert set(_spec(tmp_path, constraints=["mine.rules:small_pp"]).file_digests()) == every
    space = tmp_path / "space"
    space.mkdir()
    (space / "helper.py").write_text("LIMIT = 8\n")
    (space / "rules.py").write_text("from space import helper\n\ndef small_pp(design, strategy, metrics):\n"
                                    "    return strategy.pp - helper.LIMIT\n")
    spec = _spec(tmp_path, constraints=["space.rules:small_pp"])
    assert "code:space.rules imports space/helper.py" in spec.file_digests()
    h2 = spec.spec_hash()
    (space / "helper.py").write_text("LIMIT = 2\n")
    assert load_study(tmp_path / "study.yaml").spec_hash() != h2


def test_a_worker_count_past_a_few_per_cpu_is_refused(tmp_path):
    import os

    from designer.errors import SpecError
    from designer.pipeline import MAX_WORKERS_PER_CPU

    spec = _spec(tmp_path, search={"method": "exhaustive", "seed": 0})
    limit = MAX_WORKERS_PER_CPU * (os.cpu_count() or 1)
    with pytest.raises(SpecError, match=rf"--workers {limit + 1}: at most {limit} on this machine"):
        run_study(spec, out_dir=tmp_path / "out", workers=limit + 1)
    assert not (tmp_path / "out" / "pareto.csv").exists()


def test_a_study_storage_that_is_no_journal_is_named_as_its_field(tmp_path):
    from designer.errors import SpecError

    (tmp_path / "notes.txt").write_text("mine\n")
    spec = _spec(tmp_path, search={"method": "exhaustive", "seed": 0},
                 output={"plots": False, "storage": "notes.txt"})
    with pytest.raises(SpecError, match=r"^field 'output.storage' = '.*notes.txt': not an Optuna journal"):
        run_study(spec, out_dir=tmp_path / "out")
    assert (tmp_path / "notes.txt").read_text() == "mine\n"
