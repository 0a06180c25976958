"""Regenerate the committed flag lists and schemas of designer/data/launch/ (offline data for
designer.launch and tests/test_launch.py; nothing here runs at designer run time).

It reads the real projects, not copies of their docs:
  megatron_flags.json     every option of Megatron-LM's argument parser: megatron.training.arguments.
                          add_megatron_arguments(argparse.ArgumentParser()) is called and each action
                          of the parser is written out (flags, arity, type, choices). Most options are
                          made from dataclasses (TransformerConfig, TrainingConfig...) by
                          megatron/training/argument_utils.py:ArgumentGroupFactory, so reading
                          arguments.py's text alone would miss them. value_constraints: the values
                          Megatron checks after parsing for options without argparse choices
                          (--recompute-modules, --cp-comm-type), read from transformer_config.py.
  torchrun_flags.json     torch.distributed.run.get_args_parser() of the torch that runs this script.
  torchtitan_schema.json  torchtitan's TOML schema: the JobConfig dataclass tree of
                          torchtitan/config/job_config.py, section -> field -> type (choices when
                          Literal). torchtitan read TOML files (--job.config_file) until commit
                          9810191 ("[BC Breaking] Config System Refactor: TOML to Python Dataclass
                          Registry", 2026-02-23); use that commit's parent, the last one with TOML.
                          value_constraints: pipeline schedule names (torch's get_schedule_class) and
                          model converter names (torchtitan's converter registry).
  torchtitan_flavors.json the llama3 flavors of that commit (torchtitan/models/llama3/__init__.py:
                          llama3_args), with the layer shapes a meta-device Transformer of each
                          flavor really has.

Needs a Python with torch and torchtitan's dependencies (torchdata datasets tokenizers tyro
tensorboard einops pillow tomli); Megatron-LM itself needs only torch, numpy and packaging to build
its parser. Neither project is installed: each is unpacked from its git directory with `git archive`
into a temporary folder and put on sys.path. Exact commands used for the committed files:

  python3.12 -m venv /tmp/launchgen/venv
  /tmp/launchgen/venv/bin/pip install torch numpy packaging torchdata datasets tokenizers tyro \
      tensorboard einops pillow tomli
  /tmp/launchgen/venv/bin/python designer/data/launch/generate.py \
      --megatron-git-dir /work/.mirror/NVIDIA+Megatron-LM/repo --megatron-commit HEAD \
      --torchtitan-git-dir /work/.mirror/pytorch+torchtitan/repo \
      --torchtitan-commit 238fa9953e4aec2a62582121564273d7cbb1e9f1 --out designer/data/launch

check_against_sources.py, beside this file, hands the test cases' commands and TOMLs to the real
projects' own validation (Megatron-LM validate_args, torchtitan ConfigManager).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import enum
import io
import inspect
import json
import re
import subprocess
import sys
import tarfile
import tempfile
import types
import typing
import warnings
from pathlib import Path

MEGATRON_REPOSITORY = "https://github.com/NVIDIA/Megatron-LM"
TORCHTITAN_REPOSITORY = "https://github.com/pytorch/torchtitan"


def git(git_dir: str, *args: str) -> str:
    return subprocess.run(["git", f"--git-dir={git_dir}", *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def commit_record(git_dir: str, rev: str, repository: str, path: str) -> dict[str, str]:
    commit, date = git(git_dir, "log", "-1", "--format=%H %cI", rev, "--").split()
    return {"repository": repository, "path": path, "commit": commit, "commit_date": date}


def unpack(git_dir: str, commit: str, paths: list[str], into: Path) -> None:
    """`git archive COMMIT PATHS | tar x`, skipping blobs the snapshot lacks (large test assets)."""
    data = subprocess.run(["git", f"--git-dir={git_dir}", "archive", commit, *paths], capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(into, filter="data")


# ---------------------------------------------------------------- argparse parsers
def _type_name(t: object) -> str | None:
    if t is None:
        return None
    if t in (int, float, str):
        return t.__name__
    return "callable"  # enum handlers and converters: the choices (or the code) decide


def _choice_text(c: object) -> str:
    # ArgumentGroupFactory._get_enum_kwargs: an enum option is typed by the member *name*
    return c.name if isinstance(c, enum.Enum) else str(c)


def parser_record(parser: argparse.ArgumentParser) -> list[dict]:
    out = []
    for a in parser._actions:
        if isinstance(a, argparse._HelpAction) or not a.option_strings:
            continue
        if isinstance(a, argparse.BooleanOptionalAction):
            kind, nargs = "boolean_optional", 0
        elif isinstance(a, (argparse._StoreTrueAction, argparse._StoreFalseAction, argparse._StoreConstAction,
                            argparse._CountAction, argparse._AppendConstAction)):
            kind, nargs = type(a).__name__.strip("_").replace("Action", "").lower(), 0
        else:
            kind, nargs = type(a).__name__.strip("_").replace("Action", "").lower(), a.nargs
        out.append({
            "flags": list(a.option_strings), "dest": a.dest, "action": kind, "nargs": nargs,
            "type": _type_name(a.type),
            "choices": None if a.choices is None else [_choice_text(c) for c in a.choices],
        })
    return sorted(out, key=lambda r: r["flags"][0])


def _set_literal_assigned(source: str, name: str, under_if: str) -> list[str]:
    """The string elements of the `NAME = {...}` literal inside an `if` whose test mentions `under_if`
    (transformer_config.py has more than one `allowed_modules`: recompute's and offload's)."""
    for branch in ast.walk(ast.parse(source)):
        if not (isinstance(branch, ast.If) and under_if in ast.unparse(branch.test)):
            continue
        for node in ast.walk(branch):
            if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
                    and isinstance(node.value, (ast.Set, ast.List, ast.Tuple))):
                return [e.value for e in node.value.elts if isinstance(e, ast.Constant)]
    raise LookupError(f"no {name} = {{...}} literal under an if on {under_if}")


def megatron_value_constraints(root: Path) -> dict:
    """Values Megatron-LM checks after parsing, for options whose argparse definition has no choices."""
    tc_path = "megatron/core/transformer/transformer_config.py"
    tc = (root / tc_path).read_text()
    # TransformerConfig.__post_init__: `allowed_modules = {...}`, asserted for --recompute-modules
    modules = _set_literal_assigned(tc, "allowed_modules", "recompute_granularity == 'selective'")
    # TransformerConfig.cp_comm_type docstring: 'cp_comm_type of each layer can be "p2p" or ...'; the
    # values are handed to Transformer Engine's DotProductAttention(cp_comm_type=...)
    m = re.search(r'cp_comm_type of each layer can be (.*?)\.\n', tc)
    cp_types = re.findall(r'"([^"]+)"', m.group(1))
    return {
        "--recompute-modules": {"values": sorted(modules), "source": f"{tc_path}: TransformerConfig.__post_init__ allowed_modules"},
        "--cp-comm-type": {"values": cp_types, "source": f"{tc_path}: TransformerConfig.cp_comm_type docstring"},
    }


def megatron_flags(git_dir: str, rev: str) -> dict:
    src = commit_record(git_dir, rev, MEGATRON_REPOSITORY, "megatron/training/arguments.py")
    with tempfile.TemporaryDirectory() as tmp:
        unpack(git_dir, src["commit"], ["megatron"], Path(tmp))
        sys.path.insert(0, tmp)
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            from megatron.training.arguments import add_megatron_arguments

            # parse_args builds its parser the same way (allow_abbrev=False); pretrain_gpt.py adds
            # only ModelOpt's options, and only when nvidia-modelopt is installed
            parser = argparse.ArgumentParser(allow_abbrev=False)
            add_megatron_arguments(parser)
        constraints = megatron_value_constraints(Path(tmp))
        sys.path.remove(tmp)
    return {"header": {**src, "what": "every option of add_megatron_arguments(ArgumentParser(allow_abbrev=False)); "
                       "options added only when optional packages are installed (Kitchen, ModelOpt) are absent",
                       "generated_by": "designer/data/launch/generate.py"},
            "arguments": parser_record(parser), "value_constraints": constraints}


def torchrun_flags() -> dict:
    import torch
    from torch.distributed.run import get_args_parser

    return {"header": {"repository": "https://github.com/pytorch/pytorch", "path": "torch/distributed/run.py",
                       "torch_version": torch.__version__, "commit": torch.version.git_version,
                       "what": "get_args_parser(): torchrun's own options (before the training script)",
                       "generated_by": "designer/data/launch/generate.py"},
            "arguments": parser_record(get_args_parser())}


# ---------------------------------------------------------------- torchtitan
def _toml_types(t: object) -> tuple[list[str], list | None]:
    """The TOML value forms a field annotation accepts, and its Literal choices."""
    origin, args = typing.get_origin(t), typing.get_args(t)
    if t is type(None):
        return [], None  # TOML has no null: an Optional field is either set to a value or left out
    if t in (bool, int, float, str):
        return [t.__name__], None
    if origin is typing.Literal:
        vals = [a for a in args if a is not None]
        return sorted({type(v).__name__ for v in vals}), vals
    if origin in (typing.Union, types.UnionType):
        forms, choices = [], None
        for a in args:
            f, c = _toml_types(a)
            forms += [x for x in f if x not in forms]
            if c is not None:
                choices = (choices or []) + c
        return forms, choices
    if origin is list:
        inner, _ = _toml_types(args[0])
        return [f"list[{i}]" for i in inner], None
    if origin is dict:
        return ["table"], None
    raise TypeError(f"unmapped annotation {t!r}")


def _sections(cls: type, prefix: str, out: dict) -> None:
    hints = typing.get_type_hints(cls)
    fields = {}
    for f in dataclasses.fields(cls):
        t = hints[f.name]
        if dataclasses.is_dataclass(t):
            _sections(t, f"{prefix}.{f.name}" if prefix else f.name, out)
            continue
        forms, choices = _toml_types(t)
        fields[f.name] = {"types": forms, "choices": choices, "annotation": str(t).replace("typing.", "")}
    if prefix:
        out[prefix] = fields


def torchtitan_schema_and_flavors(git_dir: str, rev: str) -> tuple[dict, dict]:
    schema_src = commit_record(git_dir, rev, TORCHTITAN_REPOSITORY, "torchtitan/config/job_config.py")
    flavor_src = commit_record(git_dir, rev, TORCHTITAN_REPOSITORY, "torchtitan/models/llama3/__init__.py")
    with tempfile.TemporaryDirectory() as tmp:
        unpack(git_dir, schema_src["commit"], ["torchtitan"], Path(tmp))
        sys.path.insert(0, tmp)
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            import torch
            from torchtitan.config.job_config import JobConfig
            from torchtitan.models import _supported_models
            from torchtitan.models.llama3 import Transformer, llama3_args

            import torchtitan.components.quantization.float8  # noqa: F401 - registers the converters
            import torchtitan.components.quantization.mx  # noqa: F401
            from torch.distributed.pipelining import schedules
            from torchtitan.protocols.model_converter import _registry_model_converter_cls

            sections: dict = {}
            _sections(JobConfig, "", sections)
            # pipeline_parallel_schedule is a plain str: torchtitan hands it to
            # torch.distributed.pipelining.schedules.get_schedule_class, whose schedule_map names them
            schedule_names = [k.value for k in next(
                n for n in ast.walk(ast.parse(inspect.getsource(schedules.get_schedule_class)))
                if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "schedule_map").value.keys]
            constraints = {
                "parallelism.pipeline_parallel_schedule": {
                    "values": schedule_names,
                    "source": f"torch {torch.__version__} torch/distributed/pipelining/schedules.py: get_schedule_class schedule_map"},
                "model.converters": {
                    "values": sorted(_registry_model_converter_cls),
                    "source": "torchtitan/protocols/model_converter.py: _registry_model_converter_cls after importing "
                              "torchtitan/components/quantization/float8.py and mx.py"},
            }
            flavors = {}
            for name, margs in llama3_args.items():
                with torch.device("meta"):
                    model = Transformer(margs)
                block = model.layers["0"]
                head_dim = margs.dim // margs.n_heads
                flavors[name] = {
                    "layers": len(model.layers), "hidden_size": margs.dim, "heads": margs.n_heads,
                    "kv_heads": margs.n_kv_heads or margs.n_heads, "head_dim": head_dim,
                    "ffn_size": block.feed_forward.w1.weight.shape[0],
                    "vocab_size": model.tok_embeddings.weight.shape[0],
                    "gated_mlp": hasattr(block.feed_forward, "w3"),
                    "tied_embeddings": model.output.weight is model.tok_embeddings.weight,
                    "linear_bias": block.attention.wq.bias is not None,
                    "norm": type(block.attention_norm).__name__,
                    "attn_type": margs.attn_type, "rope_theta": margs.rope_theta,
                }
        sys.path.remove(tmp)
    schema = {"header": {**schema_src, "what": "TOML section (dotted for nested tables) -> field -> accepted TOML "
                         "value forms and Literal choices, from the JobConfig dataclass tree; TOML has no null, "
                         "so an Optional field is set or left out",
                         "generated_by": "designer/data/launch/generate.py"},
              "sections": sections, "value_constraints": constraints}
    registry = {"header": {**flavor_src, "what": "model names torchtitan.models._supported_models accepts, and the "
                           "llama3 flavors (llama3_args) with the shapes of a meta-device Transformer built from each",
                           "generated_by": "designer/data/launch/generate.py"},
                "supported_models": sorted(_supported_models), "llama3": flavors}
    return schema, registry


def write(path: Path, record: dict) -> None:
    path.write_text(json.dumps(record, indent=1, sort_keys=False) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--megatron-git-dir", required=True)
    ap.add_argument("--megatron-commit", default="HEAD")
    ap.add_argument("--torchtitan-git-dir", required=True)
    ap.add_argument("--torchtitan-commit", required=True)
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    a = ap.parse_args()
    write(a.out / "megatron_flags.json", megatron_flags(a.megatron_git_dir, a.megatron_commit))
    write(a.out / "torchrun_flags.json", torchrun_flags())
    schema, flavors = torchtitan_schema_and_flavors(a.torchtitan_git_dir, a.torchtitan_commit)
    write(a.out / "torchtitan_schema.json", schema)
    write(a.out / "torchtitan_flavors.json", flavors)


if __name__ == "__main__":
    main()
