"""LLM definitions as data: `load_model("llama3-70b")` reads models/llama3-70b.yaml into an LLMSpec."""

from __future__ import annotations

import functools
from pathlib import Path

from designer.errors import SpecError
from designer.spec.llm import MODELS_DIR, LLMSpec
from designer.spec.load import load_yaml


def available_models(models_dir: Path = MODELS_DIR) -> list[str]:
    """Names of the shipped model files (without .yaml), sorted."""
    return sorted(p.stem for p in Path(models_dir).glob("*.yaml"))


def load_model(name_or_path: str | Path, models_dir: Path = MODELS_DIR) -> LLMSpec:
    """A model by name (models/<name>.yaml) or by path to a YAML file. Unknown names raise a one-line
    SpecError that lists the available names."""
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") and p.is_file():
        return _read_model(p)
    candidate = Path(models_dir) / f"{name_or_path}.yaml"
    if candidate.is_file():
        return _read_model(candidate)
    names = ", ".join(available_models(models_dir))
    raise SpecError(f"model '{name_or_path}' is not a file or a known model; available: {names}")


def _read_model(path: Path) -> LLMSpec:
    st = path.stat()
    return _parse_model(str(path), str(path.resolve()), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=64)
def _parse_model(path: str, resolved: str, mtime_ns: int, size: int) -> LLMSpec:
    """One parse per file version (the file with its modification time and size): an LLMSpec is
    immutable, so every caller of the same unchanged file shares it. `path` as given, for messages."""
    del resolved, mtime_ns, size  # part of the cache key only
    return load_yaml(Path(path), LLMSpec)
