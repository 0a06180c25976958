"""Developer cross-check, beyond tests/test_launch.py: hand the generated launch configurations of
the test cases to the real projects' own validation. Not part of the test suite (it needs torch).

Two steps, two Pythons:

  # 1. with the project's venv: the commands and TOMLs of tests/test_launch.py CASES, as JSON
  .venv/bin/python designer/data/launch/check_against_sources.py dump /tmp/launch_cases.json
  # 2. with the torch venv of generate.py: Megatron-LM's parse_args + validate_args +
  #    core_transformer_config_from_args (TransformerConfig.__post_init__) on each command, and
  #    torchtitan's ConfigManager.parse_args(["--job.config_file", TOML]) on each TOML
  /tmp/launchgen/venv/bin/python designer/data/launch/check_against_sources.py check /tmp/launch_cases.json \
      --megatron-git-dir /work/.mirror/NVIDIA+Megatron-LM/repo \
      --torchtitan-git-dir /work/.mirror/pytorch+torchtitan/repo

Without a GPU or Transformer Engine, step 2 stubs the probes of the machine: the device is taken as
Hopper (sm 9.0), Transformer Engine as new enough, and --no-rope-fusion is appended (TE's fused RoPE
kernel cannot be imported). Everything else is the projects' own checking.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import warnings
from pathlib import Path


def dump(out: Path) -> None:
    root = Path(__file__).resolve().parents[3]
    sys.path.insert(0, str(root / "tests"))
    from test_launch import CASES  # noqa: E402 - the test cases are the checked set

    from designer.launch import megatron_launch, torchtitan_launch

    rows = []
    for c in CASES:
        m = megatron_launch(c.llm, c.training, c.strategy, c.n_gpus, c.gpus_per_node)
        t = torchtitan_launch(c.llm, c.training, c.strategy, c.n_gpus, c.gpus_per_node)
        rows.append({"id": str(c), "world_size": c.n_gpus, "env": dict(m.env), "megatron_args": list(m.script_args),
                     "torchtitan_toml": t.toml})
    out.write_text(json.dumps(rows, indent=1) + "\n")


def _megatron(rows: list[dict], git_dir: str, commit: str) -> int:
    from generate import unpack

    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        unpack(git_dir, commit, ["megatron"], Path(tmp))
        sys.path.insert(0, tmp)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import packaging.version
            import torch

            torch.cuda.get_device_capability = lambda *a, **k: (9, 0)
            import megatron.core.utils as core_utils

            core_utils.is_te_min_version = lambda *a, **k: True
            core_utils.get_te_version = lambda: packaging.version.Version("2.12.0")
            import megatron.core.transformer.transformer_config as transformer_config
            import megatron.training.arguments as arguments

            arguments.is_te_min_version = transformer_config.is_te_min_version = lambda *a, **k: True
            arguments.get_device_arch_version = lambda: 9
            saved = dict(os.environ)
            for r in rows:
                os.environ.clear()
                os.environ.update({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": str(r["world_size"]), **r["env"]})
                sys.argv = ["pretrain_gpt.py", *r["megatron_args"], "--no-rope-fusion"]
                try:
                    with contextlib.redirect_stdout(io.StringIO()):
                        args = arguments.parse_args()
                        arguments.validate_args(args)
                        arguments.core_transformer_config_from_args(args)
                    print("megatron   OK  ", r["id"])
                except BaseException as e:  # noqa: BLE001 - argparse exits, asserts, ValueErrors alike
                    bad += 1
                    print("megatron   FAIL", r["id"], type(e).__name__, str(e)[:300])
            os.environ.clear()
            os.environ.update(saved)
    return bad


def _torchtitan(rows: list[dict], git_dir: str, commit: str) -> int:
    from generate import unpack

    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        unpack(git_dir, commit, ["torchtitan"], Path(tmp))
        sys.path.insert(0, tmp)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from torchtitan.config.manager import ConfigManager

            for r in rows:
                if r["torchtitan_toml"] is None:
                    continue
                path = Path(tmp) / "job.toml"
                path.write_text(r["torchtitan_toml"])
                try:
                    with contextlib.redirect_stdout(io.StringIO()):
                        ConfigManager().parse_args(["--job.config_file", str(path)])
                    print("torchtitan OK  ", r["id"])
                except BaseException as e:  # noqa: BLE001
                    bad += 1
                    print("torchtitan FAIL", r["id"], type(e).__name__, str(e)[:300])
    return bad


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="step", required=True)
    d = sub.add_parser("dump")
    d.add_argument("out", type=Path)
    c = sub.add_parser("check")
    c.add_argument("cases", type=Path)
    c.add_argument("--megatron-git-dir", required=True)
    c.add_argument("--megatron-commit", default=None, help="default: the commit of megatron_flags.json")
    c.add_argument("--torchtitan-git-dir", required=True)
    c.add_argument("--torchtitan-commit", default=None, help="default: the commit of torchtitan_schema.json")
    a = ap.parse_args()
    if a.step == "dump":
        dump(a.out)
        return
    here = Path(__file__).resolve().parent
    sys.path.insert(0, str(here))
    rows = json.loads(a.cases.read_text())
    mc = a.megatron_commit or json.loads((here / "megatron_flags.json").read_text())["header"]["commit"]
    tc = a.torchtitan_commit or json.loads((here / "torchtitan_schema.json").read_text())["header"]["commit"]
    bad = _megatron(rows, a.megatron_git_dir, mc) + _torchtitan(rows, a.torchtitan_git_dir, tc)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
