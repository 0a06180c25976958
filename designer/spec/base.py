"""Shared pydantic configuration: frozen records that reject unknown keys."""

import types
import typing
from functools import cache
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator


@cache
def _number_not_flag(annotation: Any) -> bool:
    """Whether a field takes a number and no boolean: pydantic's lax mode reads `true` as 1 for an int
    or float field, which in a YAML file is a slip (`tp: true`), never a count."""
    if annotation is bool:
        return False
    if annotation in (int, float):
        return True
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _number_not_flag(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(annotation)
        return bool not in args and any(_number_not_flag(a) for a in args)
    return False


@cache
def _numbers_inside(annotation: Any) -> bool:
    """Whether a field is a sequence of numbers (tuple[int, ...], list[float]) or a mapping to numbers
    (dict[str, float]), whose items are checked as _number_not_flag checks a number."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _numbers_inside(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return any(_numbers_inside(a) for a in typing.get_args(annotation))
    if origin in (tuple, list, set, frozenset):
        items = [a for a in typing.get_args(annotation) if a is not Ellipsis]
        return bool(items) and all(_number_not_flag(a) for a in items)
    if origin is dict:  # checked on its values
        args = typing.get_args(annotation)
        return len(args) == 2 and _number_not_flag(args[1])
    return False


class Record(BaseModel):
    """Base of every validated input record: immutable, unknown keys rejected, numbers finite (an
    infinite or NaN price, count or token budget is rejected where it is read, never propagated), and
    no true/false where a number belongs."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _numbers_are_not_flags(cls, value: Any, info: ValidationInfo) -> Any:
        if value is True or value is False:
            field = cls.model_fields.get(info.field_name or "")
            if field is not None and _number_not_flag(field.annotation):
                raise ValueError("a number is required, not true/false")
        elif isinstance(value, (list, tuple, dict)) and any(
                v is True or v is False for v in (value.values() if isinstance(value, dict) else value)):
            field = cls.model_fields.get(info.field_name or "")
            if field is not None and _numbers_inside(field.annotation):
                raise ValueError("numbers are required, not true/false")
        return value


class Result(BaseModel):
    """Base of computed records that may carry an infinite value by meaning (an algorithm that does
    not apply costs inf seconds): immutable, unknown keys rejected, inf and NaN kept."""

    model_config = ConfigDict(frozen=True, extra="forbid")
