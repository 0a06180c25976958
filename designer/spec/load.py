"""YAML loading and the translation of validation errors into one-line SpecErrors."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from designer.errors import SpecError

M = TypeVar("M", bound=BaseModel)


def _loc(loc: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in loc) or "<root>"


def one_line(err: ValidationError, where: str = "") -> str:
    """The first validation error as one line: field, value, what is allowed."""
    first = err.errors()[0]
    field = _loc(first["loc"])
    value = first.get("input")
    msg = first["msg"]
    if first["type"] == "extra_forbidden":
        msg = "unknown key"
    prefix = f"{where}: " if where else ""
    shown = repr(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return f"{prefix}field '{field}' = {shown}: {msg}"


def validate(model_cls: type[M], data: Any, where: str = "") -> M:
    try:
        return model_cls.model_validate(data)
    except ValidationError as err:
        raise SpecError(one_line(err, where)) from None


def read_yaml(path: str | Path) -> Any:
    p = Path(path)
    if not p.is_file():
        raise SpecError(f"file '{p}' does not exist")
    try:
        return yaml.safe_load(p.read_text())
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        raise SpecError(f"{p}:{line} is not valid YAML ({getattr(err, 'problem', err)})") from None


def load_yaml(path: str | Path, model_cls: type[M]) -> M:
    return validate(model_cls, read_yaml(path), where=str(path))
