"""A generated corpus of bad inputs across the commands, each checked for exit status 2, no traceback,
one line on stderr, and a message that names the field, the value and what is allowed.

The cases come from mutating valid files (a study, a co-design study with a goal, a network study, a
scenario). What each mutation must do is read from the records' schema, not from the tool's answers:
- every key of a record section renamed (a typo): an unknown key, with the original as the closest;
- every required key dropped;
- every number made a word, true, infinite or NaN; every number whose field has a lower bound put below it,
  and above its upper bound where it has one;
- every boolean made a word; every enum or literal given a value outside its choices.
Bad command-line values are listed by hand at the end.
"""

from __future__ import annotations

import copy
import enum
import math
import sys
import typing
from pathlib import Path
from typing import Any, Iterator

import annotated_types
import pytest
import yaml
from pydantic import BaseModel

from designer.scenario import Scenario
from designer.spec.network_study import NetworkStudy
from designer.spec.study import StudySpec

ROOT = Path(__file__).resolve().parents[1]
BASES = {
    # file, its record, and the commands that read it (cases rotate over them)
    "quickstart": (ROOT / "studies/quickstart/study.yaml", StudySpec, ("space", "run", "worker")),
    "deadline": (ROOT / "studies/deadline/llama405b_60_days.yaml", StudySpec, ("space", "run")),
    # the costs, reliability and robustness sections
    "tco": (ROOT / "studies/tco/study.yaml", StudySpec, ("space", "run")),
    "network": (ROOT / "studies/network_declarative_budget.yaml", NetworkStudy, ("network",)),
    "scenario": (ROOT / "studies/scenarios/gpt-145b-selene.yaml", Scenario, ("evaluate",)),
}
ALLOWED_WORDS = ("should", "must", "allowed", "expected", "valid", "required", "at most", "at least", "one of",
                 "greater", "less", "finite", "did you mean")


# ---- the schema walk -----------------------------------------------------------------------------

def _unwrap(annotation: Any) -> list[Any]:
    """The alternatives of an annotation (X | None -> [X]); Annotated is looked through."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(annotation)[0])
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        return [a for arg in typing.get_args(annotation) for a in _unwrap(arg) if a is not type(None)]
    return [annotation]


def _record(annotation: Any) -> type[BaseModel] | None:
    for a in _unwrap(annotation):
        if isinstance(a, type) and issubclass(a, BaseModel):
            return a
        if typing.get_origin(a) in (tuple, list):
            for arg in typing.get_args(a):
                found = _record(arg)
                if found is not None:
                    return found
    return None


def _kind(annotation: Any) -> tuple[str, tuple]:
    """('number' | 'bool' | 'choice' | 'other', choices) of a leaf field's annotation."""
    alts = _unwrap(annotation)
    if all(a is bool for a in alts):
        return "bool", ()
    if alts and all(a in (int, float) for a in alts):
        return "number", ()
    choices: list = []
    for a in alts:
        if typing.get_origin(a) is typing.Literal:
            choices += list(typing.get_args(a))
        elif isinstance(a, type) and issubclass(a, enum.Enum):
            choices += [m.value for m in a]
        else:
            return "other", ()
    return ("choice", tuple(choices)) if choices else ("other", ())


def _bound(field: Any, strict: type, inclusive: type) -> float | None:
    """The field's bound of one side (annotated_types.Gt/Ge or Lt/Le), as a float; None: unbounded."""
    for m in field.metadata:
        if isinstance(m, (strict, inclusive)):
            return float(next(v for v in (getattr(m, a, None) for a in ("gt", "ge", "lt", "le")) if v is not None))
    return None


def _lower_bound(field: Any) -> float | None:
    return _bound(field, annotated_types.Gt, annotated_types.Ge)


def _upper_bound(field: Any) -> float | None:
    return _bound(field, annotated_types.Lt, annotated_types.Le)


def _walk(data: Any, cls: type[BaseModel], path: tuple) -> Iterator[tuple[tuple, str, Any, Any, type[BaseModel]]]:
    """(path, key, value, field, record class) for every key of every record section in `data`."""
    if not isinstance(data, dict):
        return
    for key, value in data.items():
        field = cls.model_fields.get(key)
        if field is None:
            continue
        yield path + (key,), key, value, field, cls
        sub = _record(field.annotation)
        if sub is None:
            continue
        if isinstance(value, dict):
            yield from _walk(value, sub, path + (key,))
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, dict):
                    yield from _walk(item, sub, path + (key, i))


def _set(data: dict, path: tuple, value: Any) -> dict:
    out = copy.deepcopy(data)
    node = out
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value
    return out


def _drop(data: dict, path: tuple) -> dict:
    out = copy.deepcopy(data)
    node = out
    for p in path[:-1]:
        node = node[p]
    del node[path[-1]]
    return out


def _rename(data: dict, path: tuple, new: str) -> dict:
    out = copy.deepcopy(data)
    node = out
    for p in path[:-1]:
        node = node[p]
    node[new] = node.pop(path[-1])
    return out


def _typo(key: str) -> str:
    """A plausible misspelling: the last two letters swapped, or a letter doubled."""
    return key[:-2] + key[-1] + key[-2] if len(key) > 3 and key[-1] != key[-2] else key + key[-1]


def _cases() -> list[tuple[str, str, dict, str, tuple[str, ...]]]:
    """(case id, base, mutated data, command, strings the message must contain)."""
    cases = []
    for base, (path, cls, commands) in BASES.items():
        data = yaml.safe_load(path.read_text())
        for where, key, value, field, _ in _walk(data, cls, ()):
            dotted = ".".join(map(str, where))
            typo = _typo(key)
            cases.append((f"{base}:rename:{dotted}", base, _rename(data, where, typo), "", (typo, key)))
            if field.is_required():
                cases.append((f"{base}:drop:{dotted}", base, _drop(data, where), "", (key, "required")))
            kind, choices = _kind(field.annotation)
            if isinstance(value, bool) or kind == "bool":
                if kind == "bool":
                    cases.append((f"{base}:word:{dotted}", base, _set(data, where, "maybe"), "", (key, "maybe")))
                continue
            if kind == "number" and isinstance(value, (int, float)):
                cases.append((f"{base}:word:{dotted}", base, _set(data, where, "lots"), "", (key, "lots")))
                cases.append((f"{base}:inf:{dotted}", base, _set(data, where, math.inf), "", (key, "inf")))
                cases.append((f"{base}:nan:{dotted}", base, _set(data, where, math.nan), "", (key, "nan")))
                # YAML's true where a count belongs is a slip, not 1
                cases.append((f"{base}:flag:{dotted}", base, _set(data, where, True), "", (key, "True")))
                low = _lower_bound(field)
                if low is not None:
                    bad = low - 1 if float(low).is_integer() else low - abs(low) - 1
                    bad = int(bad) if float(bad).is_integer() else bad
                    cases.append((f"{base}:below:{dotted}", base, _set(data, where, bad), "", (key, str(bad))))
                high = _upper_bound(field)
                if high is not None:
                    # past a size, seed or ratio's upper bound (a typo; beyond it the arithmetic overflows)
                    bad = int(high) + 1 if isinstance(value, int) else high * 10
                    cases.append((f"{base}:above:{dotted}", base, _set(data, where, bad), "", (key, f"{bad:g}" if
                                  isinstance(bad, float) else str(bad))))
            if kind == "choice" and isinstance(value, str):
                cases.append((f"{base}:choice:{dotted}", base, _set(data, where, "no-such-choice"), "",
                              (key, "no-such-choice", str(choices[0]))))
    # rotate each base's cases over the commands that read that file
    out = []
    count: dict[str, int] = {}
    for cid, base, mutated, _, needles in cases:
        commands = BASES[base][2]
        i = count.get(base, 0)
        count[base] = i + 1
        out.append((cid, base, mutated, commands[i % len(commands)], needles))
    return out


CASES = _cases()


def _invoke(argv: list[str], monkeypatch, capsys) -> tuple[int, str, str]:
    """The `designer` entry point in this process (fast: every case fails while reading its input)."""
    from designer import cli

    monkeypatch.setattr(sys, "argv", ["designer", *argv])
    code: Any = 0
    try:
        cli.main()
    except SystemExit as err:
        code = err.code
    cap = capsys.readouterr()
    return int(code or 0), cap.out, cap.err


def _argv(command: str, path: Path, tmp_path: Path) -> list[str]:
    if command == "run":
        return ["run", str(path), "--out", str(tmp_path / "out")]
    if command == "worker":
        return ["worker", str(path), "--storage", str(tmp_path / "none.journal"), "--wait-s", "0"]
    return [command, str(path)]


def _check_one_line(code: int, out: str, err: str, needles: tuple[str, ...]) -> str:
    assert "Traceback" not in out + err
    assert code == 2, (code, err)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    line = lines[0]
    for n in needles:
        assert n in line, (n, line)
    assert any(w in line.lower() for w in ALLOWED_WORDS), line
    return line


def test_the_corpus_is_large_and_covers_every_command():
    assert len(CASES) >= 100, len(CASES)
    assert {c[3] for c in CASES} >= {"space", "run", "worker", "network", "evaluate"}


@pytest.mark.parametrize("cid,base,mutated,command,needles", CASES, ids=[c[0] for c in CASES])
def test_a_mutated_file_is_one_clear_line(cid, base, mutated, command, needles, tmp_path, monkeypatch, capsys):
    src = BASES[base][0]
    path = tmp_path / src.name
    path.write_text(yaml.safe_dump(mutated, sort_keys=False))
    code, out, err = _invoke(_argv(command, path, tmp_path), monkeypatch, capsys)
    _check_one_line(code, out, err, needles)
    assert not (tmp_path / "out" / "meta.json").exists()  # nothing was run or written


FLAG_CASES = [
    # (argv, strings the message must contain)
    (["bom", "--topology", "ring", "--gpus", "1024"], ("ring", "rail-only")),
    (["bom", "--topology", "rail-only", "--gpus", "lots"], ("--gpus", "lots")),
    (["bom", "--topology", "rail-only", "--gpus", "-8"], ("--gpus -8",)),
    (["bom", "--topology", "rail-only", "--gpus", "0"], ("--gpus 0",)),
    (["bom", "--topology", "rail-only", "--gpus", "100"], ("--gpus 100", "--hb-domain 8")),
    (["bom", "--topology", "rail-only", "--gpus", "1024", "--hb-domain", "0"], ("--hb-domain 0",)),
    (["bom", "--topology", "rail-only", "--gpus", "1024", "--radix", "1"], ("--radix 1",)),
    (["bom", "--topology", "rail-only", "--gpus", "1024", "--nics-per-gpu", "0"], ("--nics-per-gpu 0",)),
    (["bom", "--topology", "oversubscribed", "--gpus", "1024", "--radix", "16", "--oversubscription", "0.5"],
     ("--oversubscription 0.5",)),
    (["bom", "--topology", "rail-only", "--gpus", "1024", "--prices", "cheap"], ("cheap", "railonly-v5")),
    (["bom", "--topology", "rail-only", "--gpus", "1024", "--convention", "metric"], ("metric", "physical")),
    (["bom", "--topology", "rail-only", "--gpus", "1024", "--port-gbps", "-400"], ("-400",)),
    (["bom", "--topology", "rail-only", "--gpus", "1024", "--oversubscription", "0.5"], ("oversubscription", "0.5")),
    (["bom", "--topology", "rail-only", "--gpus", "100000000000"], ("100000000000",)),
    (["run", "{missing}"], ("no-such-study.yaml", "exist")),
    (["run", "{dir}"], ("is a directory", "YAML file")),
    (["run", "{study}", "--out", "{out}", "--workers", "0"], ("workers", "0")),
    (["run", "{study}", "--out", "{out}", "--n-trials", "many"], ("--n-trials", "many")),
    (["run", "{study}", "--out", "{out}", "--seed", "x"], ("--seed", "x")),
    (["run", "{study}", "--out", "{out}", "--storage", "redis://host/db"], ("redis", "postgresql")),
    (["run", "{study}", "--out", "{file}"], ("--out", "not a folder")),
    (["run", "{study}", "--out", "{out}", "--bogus"], ("--bogus",)),
    (["space", "{study}", "--gpus", "-5"], ("gpus", "-5")),
    (["worker", "{study}"], ("--storage",)),
    (["worker", "{study}", "--storage", "{missing}", "--wait-s", "0"], ("no-such-study.yaml", "journal")),
    (["network", "{missing}"], ("no-such-study.yaml", "exist")),
    (["evaluate", "{study}"], ("unknown key", "strategy")),
    (["pareto", "{dir}"], ("holds no study results", "designer run")),
    (["pareto", "{missing}"], ("no-such-study.yaml", "no such folder")),
    (["pareto", "{missing}", "--export", "{dir}"], ("--export", "is a folder")),
    (["network", "{study}", "--out", "{file}"], ("--out", "is a file")),
    (["worker", "{study}", "--storage", "{missing}", "--wait-s", "nan"], ("--wait-s", "nan", "finite")),
    (["worker", "{study}", "--storage", "{missing}", "--wait-s", "-5"], ("--wait-s", "-5", ">= 0")),
    (["bom", "--topology", "rail-only", "--gpus", "1024", "--port-gbps", "inf"], ("--port-gbps", "inf", "finite")),
]


@pytest.mark.parametrize("argv,needles", FLAG_CASES, ids=[" ".join(a) for a, _ in FLAG_CASES])
def test_a_bad_flag_or_path_is_one_clear_line(argv, needles, tmp_path, monkeypatch, capsys):
    study = yaml.safe_load((ROOT / "studies/quickstart/study.yaml").read_text())
    study_path = tmp_path / "study.yaml"
    study_path.write_text(yaml.safe_dump(study))
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "a-dir").mkdir()
    subst = {"{study}": str(study_path), "{missing}": str(tmp_path / "no-such-study.yaml"),
             "{dir}": str(tmp_path / "a-dir"), "{file}": str(tmp_path / "a-file"), "{out}": str(tmp_path / "out")}
    code, out, err = _invoke([subst.get(a, a) for a in argv], monkeypatch, capsys)
    assert "Traceback" not in out + err
    assert code == 2, (code, err)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    for n in needles:
        assert n in lines[0], (n, lines[0])
    assert not (tmp_path / "out" / "meta.json").exists()


@pytest.mark.parametrize("path,value,needles", [
    (("attention_window", "full_attention_every"), 1, ("model.attention_window.full_attention_every", "= 1", "2")),
    (("attention_window", "kind"), "slidng", ("model.attention_window.kind", "'slidng'", "'sliding' or 'chunked'")),
    (("moe", "top_k"), 0, ("model.moe.top_k", "= 0", "1")),
    (("moe", "router_groups"), 4, ("router_groups 4 and router_group_topk None", "required")),
    (("nope_layer_interval",), 1, ("model.nope_layer_interval", "= 1", "2")),
    (("moe", "shared_expert_gate"), True, ("shared_expert_gate true", "shared_experts 0")),
    (("qk_norm",), "l3", ("model.qk_norm", "'l3'", "'l2'")),
    # GPT-OSS-20B has 24 layers: an interval of 25 leaves every layer with RoPE
    (("nope_layer_interval",), 25, ("nope_layer_interval 25", "none of the 24", "2 to 24")),
    # sizes past any model's (designer.spec.llm MAX_*): typos, whose arithmetic would overflow
    (("vocab_size",), 10**19, ("model.vocab_size", "10000000000000000000", "16777216")),
    (("layers",), 10**12, ("model.layers", "1000000000000", "10000")),
    (("moe", "capacity_factor"), 1e300, ("model.moe.capacity_factor", "1e+300", "16")),
    # GPT-OSS-20B has 24 layers: 24 dense ones leave no MoE layer
    (("moe", "first_dense_layers"), 24, ("first_dense_layers 24", "none of the 24", "0 to 23")),
])
def test_an_inline_model_names_its_own_field(path, value, needles, tmp_path, monkeypatch, capsys):
    # the scenario's model is a name or a record (`str | LLMSpec`): a bad record is reported at its
    # field, not as "not a string" plus the union's branch names
    scenario = yaml.safe_load(BASES["scenario"][0].read_text())
    model = yaml.safe_load((ROOT / "models/gpt-oss-20b.yaml").read_text())
    section = model
    for key in path[:-1]:
        section = section[key]
    section[path[-1]] = value
    scenario["model"] = model
    f = tmp_path / "scenario.yaml"
    f.write_text(yaml.safe_dump(scenario, sort_keys=False))
    code, out, err = _invoke(["evaluate", str(f)], monkeypatch, capsys)
    line = _check_one_line(code, out, err, needles)
    assert "function-after" not in line and "model.str" not in line and "valid string" not in line, line


@pytest.mark.parametrize("section,needle", [
    ("network", "field 'network.choices.platforms.0' = 'no_such_platform'"),
    ("design", "field 'designs.k8_rail_only.choices.platforms.0' = 'no_such_platform'"),
])
def test_a_choice_the_catalog_lacks_names_the_section_that_states_it(section, needle, tmp_path, monkeypatch, capsys):
    # catalog checks run on the resolved network study: the message names the field where the study
    # file states it, the network section or a named design's own choices
    study = yaml.safe_load((ROOT / "studies/railonly/headline.yaml").read_text())
    where = study["network"] if section == "network" else study["designs"][0]
    where["choices"]["platforms"] = ["no_such_platform"]
    f = tmp_path / "study.yaml"
    f.write_text(yaml.safe_dump(study, sort_keys=False))
    code, out, err = _invoke(["run", str(f), "--out", str(tmp_path / "out")], monkeypatch, capsys)
    _check_one_line(code, out, err, (needle, "allowed"))


@pytest.mark.parametrize("key,value", [("platform", "dgx_z"), ("nic", "cx9_1600g"), ("switch", "qm9700")])
def test_a_scenario_system_the_catalog_lacks_names_its_field(key, value, tmp_path, monkeypatch, capsys):
    scenario = yaml.safe_load(BASES["scenario"][0].read_text())
    scenario["system"][key] = value
    f = tmp_path / "scenario.yaml"
    f.write_text(yaml.safe_dump(scenario, sort_keys=False))
    code, out, err = _invoke(["evaluate", str(f)], monkeypatch, capsys)
    _check_one_line(code, out, err, (f"field 'system.{key}' = '{value}': not in the catalog; allowed: ",))


def test_true_in_a_list_of_numbers_is_one_clear_line(tmp_path, monkeypatch, capsys):
    # YAML's `true` in a list of counts is a slip, not 1
    study = yaml.safe_load((ROOT / "studies/quickstart/study.yaml").read_text())
    study["strategy_space"]["microbatch_sizes"] = [True, 2]
    f = tmp_path / "study.yaml"
    f.write_text(yaml.safe_dump(study, sort_keys=False))
    code, out, err = _invoke(["space", str(f)], monkeypatch, capsys)
    _check_one_line(code, out, err, ("strategy_space.microbatch_sizes", "True", "required"))


def test_true_as_a_price_multiplier_is_one_clear_line(tmp_path, monkeypatch, capsys):
    study = yaml.safe_load((ROOT / "studies/quickstart/study.yaml").read_text())
    study["network"].setdefault("catalog", {})["price_multipliers"] = {"h100_sxm": True}
    f = tmp_path / "study.yaml"
    f.write_text(yaml.safe_dump(study, sort_keys=False))
    code, out, err = _invoke(["space", str(f)], monkeypatch, capsys)
    _check_one_line(code, out, err, ("network.catalog.price_multipliers", "required"))


def test_a_number_of_thousands_of_digits_is_one_clear_line(tmp_path, monkeypatch, capsys):
    # Python refuses to convert an integer of more than 4,300 digits (the YAML loader's int()): the
    # study gets one line naming its file, not the conversion's traceback
    study = (ROOT / "studies/quickstart/study.yaml").read_text().replace("seed: 0", "seed: " + "9" * 5000)
    assert "9" * 5000 in study
    path = tmp_path / "study.yaml"
    path.write_text(study)
    code, out, err = _invoke(["space", str(path)], monkeypatch, capsys)
    _check_one_line(code, out, err, (str(path), "more than 4,300 digits"))


def _space_with(field: tuple[str, ...], value: Any, tmp_path: Path, monkeypatch, capsys) -> tuple[int, str, str]:
    """`designer space` on the quickstart study with `field` (a path of keys) set to `value`."""
    study = yaml.safe_load((ROOT / "studies/quickstart/study.yaml").read_text())
    section = study
    for k in field[:-1]:
        section = section.setdefault(k, {})
    section[field[-1]] = value
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(study))
    return _invoke(["space", str(path)], monkeypatch, capsys)


@pytest.mark.parametrize("field,value,needles", [
    (("network", "solver", "threads"), 100000, ("threads", "1024")),
    (("training", "total_tokens"), 1.7e308, ("total_tokens", "less than or equal to 1000000000000000000")),
])
def test_a_value_past_what_the_solver_or_the_outputs_hold_is_refused(field, value, needles, tmp_path, monkeypatch,
                                                                      capsys):
    # HiGHS aborts (SIGABRT) or hangs on tens of thousands of threads; a token count past 1e18 makes the
    # time to train infinite and the launch's iteration count absurd
    code, out, err = _space_with(field, value, tmp_path, monkeypatch, capsys)
    _check_one_line(code, out, err, needles)


@pytest.mark.parametrize("limit", ["<= 0", "<= -5", ">= 0", ">= -1"])
def test_a_goal_limit_no_design_can_meet_is_refused(limit, tmp_path, monkeypatch, capsys):
    # every metric a goal limits is positive: '<= 0' (or below) cannot be met, and is bad input rather
    # than a goal missed "by +25 %" (a relative margin on a zero limit means nothing); '>= 0' (or below)
    # holds for every design, a slip rather than a limit
    code, out, err = _space_with(("goal",), {"minimize": "capex_usd", "subject_to": {"time_to_train_days": limit}},
                                 tmp_path, monkeypatch, capsys)
    _check_one_line(code, out, err, ("goal.subject_to.time_to_train_days", "must be > 0"))


@pytest.mark.parametrize("field,value,needles,absent", [
    # a section of the wrong type: the keys it takes, not the record class behind it
    (("training",), [], ("field 'training' = []", "must be a mapping", "sequence_length", "total_tokens"),
     ("TrainingSpec", "instance of")),
    (("network", "gpus"), [256, 512], ("field 'network.gpus'", "must be a mapping", "count, min, max"),
     ("GpuRequirement",)),
    # a value of neither type of a union: one error naming both
    (("model",), 42, ("field 'model' = 42: must be a string or a mapping",), ("LLMSpec", ";")),
    # a list whose items fail is not also "too short"
    (("output", "formats"), ["xlsx"], ("output.formats.0", "'xlsx'", "'parquet' or 'csv'"), ("Tuple should",)),
    # the batch's written forms are checked as written, not as the fields they become
    (("training", "global_batch_sequences"), {"target": 512, "tolerance": 2},
     ("global_batch_sequences.tolerance = 2", "must be a fraction"), ("global_batch_tolerance",)),
    (("training", "global_batch_sequences"), [0, 512],
     ("global_batch_sequences = [0, 512]", "every batch must be an integer >= 1"), ("global_batch_choices", ";")),
    # selective recompute's module lists: a module Megatron-LM lacks, no list, a whole-layer policy mixed
    (("strategy_space", "recompute_modules"), [["layernorm", "attn_core"]],
     ("strategy_space.recompute_modules.0.1", "'attn_core'", "'core_attn'"), ()),
    (("strategy_space", "recompute_modules"), [], ("strategy_space.recompute_modules", "at least one list"), ()),
    (("strategy_space", "recompute_modules"), ["layernorm", "moe_act"],
     ("strategy_space.recompute_modules", "must be a list of module lists", "[['layernorm', 'moe_act']]"),
     ("valid tuple",)),
    (("strategy_space", "recompute_modules"), [["alternate_matmuls", "layernorm"]],
     ("strategy_space.recompute_modules", "alternate_matmuls", "must be listed alone"), ()),
    # a goal limit on no metric, in its mapping form: the key written, with the metrics allowed
    (("goal",), {"minimize": "capex_usd", "subject_to": {"colour": "<= 5"}},
     ("goal.subject_to.colour", "allowed: capex_usd"), ("subject_to.0", "goal: goal")),
])
def test_a_section_of_the_wrong_form_names_what_the_study_wrote(field, value, needles, absent, tmp_path, monkeypatch,
                                                                 capsys):
    code, out, err = _space_with(field, value, tmp_path, monkeypatch, capsys)
    line = _check_one_line(code, out, err, needles)
    for a in absent:
        assert a not in line.partition(": ")[2], line


def test_an_output_folder_from_the_study_is_named_as_its_field(tmp_path, monkeypatch, capsys):
    study = yaml.safe_load((ROOT / "studies/quickstart/study.yaml").read_text())
    (tmp_path / "a_file").write_text("x")
    study["output"] = {**study.get("output", {}), "dir": str(tmp_path / "a_file")}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(study))
    code, out, err = _invoke(["run", str(path)], monkeypatch, capsys)
    line = _check_one_line(code, out, err, ("field 'output.dir'", "is a file, not a folder"))
    assert "--out" not in line


def test_a_path_that_is_no_file_says_what_it_is(tmp_path, monkeypatch, capsys):
    for argv, needle in ((["evaluate", "/dev/null"], "'/dev/null' is not a regular file"),
                         (["evaluate", str(tmp_path / "none.yaml")], "does not exist")):
        code, out, err = _invoke(argv, monkeypatch, capsys)
        assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1 and needle in err, err
    scenario = yaml.safe_load(BASES["scenario"][0].read_text())
    scenario["catalog"] = {"extra_files": [str(tmp_path)]}
    f = tmp_path / "scenario.yaml"
    f.write_text(yaml.safe_dump(scenario, sort_keys=False))
    code, out, err = _invoke(["evaluate", str(f)], monkeypatch, capsys)
    assert code == 2 and f"field 'catalog.extra_files' = '{tmp_path}': a folder, not a file" in err, err


def test_a_price_multiplier_past_a_thousand_is_refused(tmp_path, monkeypatch, capsys):
    # a multiplier scales catalog prices; 1e300 left the MILP numerically meaningless ("raise the
    # time limit" after 2 s of a 60 s limit), so it is refused where it is written
    study = yaml.safe_load(BASES["network"][0].read_text())
    study.setdefault("catalog", {})["price_multipliers"] = {"all": 1e300}
    f = tmp_path / "network.yaml"
    f.write_text(yaml.safe_dump(study, sort_keys=False))
    code, out, err = _invoke(["network", str(f)], monkeypatch, capsys)
    _check_one_line(code, out, err, ("price_multipliers", "'all'", "1e+300", "0 to 1000"))


def test_json_output_is_strict_json_and_tables_print_infinities():
    # RFC 8259 has no Infinity or NaN: they are written as null; the terminal tables print them as is
    import json as _json

    from designer.cli import _finite
    from designer.report import _fmt

    text = _json.dumps(_finite({"a": math.inf, "b": [1.5, -math.inf, math.nan], "c": "x"}), allow_nan=False)
    assert _json.loads(text) == {"a": None, "b": [1.5, None, None], "c": "x"}
    assert (_fmt(math.inf), _fmt(-math.inf), _fmt(2.0)) == ("inf", "-inf", "2")


def test_a_solver_stop_before_the_time_limit_is_not_blamed_on_it():
    from designer.network.api import _no_solution
    from designer.network.solve import SolveOutcome

    study = NetworkStudy.model_validate(yaml.safe_load(BASES["network"][0].read_text()))
    limit = study.solver.time_limit_s
    early = _no_solution(study, SolveOutcome("no_solution", "unknown", None, None, None, 1.9))
    assert "stopped without a design after 1.9 s (unknown)" in str(early) and "raise the time limit" not in str(early)
    late = _no_solution(study, SolveOutcome("no_solution", "maxTimeLimit", None, None, None, limit))
    assert f"within solver.time_limit_s = {limit:g} s" in str(late) and "raise the time limit" in str(late)
