"""YAML loading and the translation of validation errors into one-line SpecErrors.

A study file is read defensively: at most MAX_FILE_BYTES, UTF-8 only, duplicate keys rejected with
both lines, and at most MAX_ALIAS_USES alias references (a few hundred bytes of nested aliases
otherwise expand to billions of nodes, the "billion laughs").
"""

from __future__ import annotations

import difflib
import re
import sys
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from designer.errors import SpecError

M = TypeVar("M", bound=BaseModel)

MAX_FILE_BYTES = 4 * 1024 * 1024  # a study or catalog file; the shipped ones are under 60 kB
MAX_ALIAS_USES = 1000
MAX_EXPANDED_NODES = 1_000_000  # YAML nodes once every alias is expanded
MAX_ERRORS = 5  # validation errors of one file reported together


def _loc(loc: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in loc) or "<root>"


def _allowed_keys(model_cls: type[BaseModel] | None, loc: tuple[Any, ...]) -> list[str]:
    """The keys of the section at `loc` (the record the unknown key sits in)."""
    cls: Any = model_cls
    for part in loc[:-1]:
        if cls is None or not hasattr(cls, "model_fields"):
            return []
        if isinstance(part, int):
            continue
        f = cls.model_fields.get(part)
        if f is None:
            return []
        cls = _record_of(f.annotation)
    return list(cls.model_fields) if cls is not None and hasattr(cls, "model_fields") else []


def _record_of(annotation: Any) -> Any:
    """The BaseModel class inside an annotation such as `X | None` or `tuple[X, ...]`."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _record_of(arg)
        if found is not None:
            return found
    return None


def _describe(e: dict[str, Any], model_cls: type[BaseModel] | None) -> str:
    field = _loc(e["loc"])
    value = e.get("input")
    msg = e["msg"].removeprefix("Value error, ")
    if e["type"] == "missing":  # the input is the whole section; naming the absent key says more
        return f"field '{field}' is missing: it is required"
    if e["type"] == "extra_forbidden":
        allowed = _allowed_keys(model_cls, tuple(e["loc"]))
        key = str(e["loc"][-1])
        close = difflib.get_close_matches(key, allowed, n=1)
        msg = "unknown key" + (f"; did you mean '{close[0]}'?" if close else "")
        if allowed:
            msg += f" allowed: {', '.join(allowed)}"
    if not e["loc"] and value is None and model_cls is not None:  # an empty file
        need = [k for k, f in model_cls.model_fields.items() if f.is_required()]
        return "the file is empty: it needs a mapping" + (f" with {', '.join(need)}" if need else "")
    if not e["loc"]:  # a cross-field rule of the whole record: its message names the fields itself
        return msg
    if e["type"] in ("model_type", "dict_type"):
        keys = _allowed_keys(model_cls, (*e["loc"], "?")) if e["type"] == "model_type" else []
        msg = "must be a mapping" + (f" with keys among: {', '.join(keys)}" if keys else "")
    if e["type"] == "union_type":
        msg = "must be " + " or ".join(dict.fromkeys(_TYPE_NOUNS.get(k, k.removesuffix("_type")) for k in e["kinds"]))
    if e["type"] == "value_error" and isinstance(value, dict):
        # a cross-field rule of a section: its message names the fields; the section's whole
        # mapping would only hide it (and a message that begins with the section names it already)
        return msg if msg.startswith(field) else f"{field}: {msg}"
    shown = repr(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return f"field '{field}' = {shown}: {msg}"


# what a value of each pydantic type error's type is, for a value that fits none of a union's types
_TYPE_NOUNS = {"string_type": "a string", "model_type": "a mapping", "dict_type": "a mapping",
               "int_type": "an integer", "float_type": "a number", "bool_type": "true or false",
               "list_type": "a list", "tuple_type": "a list", "none_type": "null"}

# pydantic names the branch of a union (`str | LLMSpec`) inside an error's location: a builtin type,
# a record class, or a validator's wrapper such as "function-after[_heads(), LLMSpec]"
_BRANCH = re.compile(r"^(function-(after|before|wrap|plain)\[.*\]|str|int|float|bool|list\[.*\]|dict\[.*\])$")


def _record_names() -> set[str]:
    names, todo = set(), [BaseModel]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub.__name__ not in names:
                names.add(sub.__name__)
                todo.append(sub)
    return names


def _is_branch(part: Any, records: set[str]) -> bool:
    return isinstance(part, str) and (part in records or _BRANCH.match(part) is not None)


def _union_errors_read_plainly(errors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A value given as one branch of a union fails the others too: where a branch went deeper into
    the value (a mapping read as a record), drop the other branches' "not a string"-style errors, and
    take the branch names out of the locations."""
    records = _record_names()

    def plain(loc):
        return tuple(p for p in loc if not _is_branch(p, records))

    deep = [plain(e["loc"]) for e in errors]
    branch = [any(_is_branch(p, records) for p in e["loc"]) for e in errors]
    out = []
    for i, (e, loc) in enumerate(zip(errors, deep)):
        # a branch whose type the value is not, where another branch took the value and found
        # something wrong in it (deeper, or a rule of the whole value): that other error is the one
        shallow = branch[i] and e["type"].endswith("_type") and any(
            j != i and len(other) >= len(loc) and other[:len(loc)] == loc
            and (len(other) > len(loc) or not errors[j]["type"].endswith("_type"))
            for j, other in enumerate(deep))
        # a list too short only because its items failed: the items' errors say why
        emptied = e["type"] == "too_short" and any(len(other) > len(loc) and other[:len(loc)] == loc for other in deep)
        if not (shallow or emptied):
            out.append({**e, "loc": loc})
    # a value of none of a union's types: one error naming them all
    merged: list[dict[str, Any]] = []
    for e in out:
        prev = merged[-1] if merged else None
        if prev is not None and prev["loc"] == e["loc"] and prev["type"].endswith("_type") and e["type"].endswith("_type"):
            kinds = prev.get("kinds", [prev["type"]])
            merged[-1] = {**prev, "type": "union_type", "kinds": [*kinds, e["type"]]}
        else:
            merged.append(e)
    return merged or errors


def one_line(err: ValidationError, where: str = "", model_cls: type[BaseModel] | None = None) -> str:
    """The validation errors as one line: per error the field, the value and what is allowed (the
    first MAX_ERRORS of them, then how many more)."""
    # unknown keys first: a misspelled key also shows up as the required key it was meant to be
    errors = sorted(_union_errors_read_plainly(err.errors()), key=lambda e: e["type"] != "extra_forbidden")
    parts = [_describe(e, model_cls) for e in errors[:MAX_ERRORS]]
    # several unknown keys in one section: its allowed keys once, after the last of them
    allowed_tail = [p.partition(" allowed: ")[2] for p in parts]
    for i, tail in enumerate(allowed_tail):
        if tail and tail in allowed_tail[i + 1:]:
            parts[i] = parts[i].partition(" allowed: ")[0]
    more = len(errors) - MAX_ERRORS
    prefix = f"{where}: " if where else ""
    return prefix + "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")


def validate(model_cls: type[M], data: Any, where: str = "") -> M:
    try:
        return model_cls.model_validate(data)
    except ValidationError as err:
        raise SpecError(one_line(err, where, model_cls)) from None


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys and bounds alias expansion."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._alias_uses = 0

    def compose_node(self, parent: Any, index: Any) -> Any:  # noqa: ANN401 - PyYAML's signature
        if self.check_event(yaml.AliasEvent):
            self._alias_uses += 1
            if self._alias_uses > MAX_ALIAS_USES:
                mark = self.peek_event().start_mark
                raise SpecError(f"line {mark.line + 1}: more than {MAX_ALIAS_USES} YAML alias references; "
                                "write the values out (aliases are limited to keep expansion bounded)")
        return super().compose_node(parent, index)

    def construct_document(self, node: Any) -> Any:  # noqa: ANN401 - PyYAML's signature
        # aliases share nodes, so a few hundred bytes can stand for billions of them: count the nodes
        # of the expanded tree (memoized over the shared ones) before building anything
        sizes: dict[int, int] = {}

        def size(n: Any) -> int:
            k = id(n)
            if k in sizes:
                return sizes[k]
            sizes[k] = 1  # a cycle counts once (PyYAML builds recursive objects for it)
            if isinstance(n, yaml.SequenceNode):
                total = 1 + sum(size(c) for c in n.value)
            elif isinstance(n, yaml.MappingNode):
                total = 1 + sum(size(a) + size(b) for a, b in n.value)
            else:
                total = 1
            sizes[k] = min(total, MAX_EXPANDED_NODES + 1)
            return sizes[k]

        if size(node) > MAX_EXPANDED_NODES:
            raise SpecError(f"the document expands to more than {MAX_EXPANDED_NODES:,} YAML nodes through its aliases; "
                            "write the values out")
        return super().construct_document(node)

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:  # noqa: ANN401
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                hash(key)
            except TypeError:
                continue  # PyYAML reports unhashable keys itself
            line = key_node.start_mark.line + 1
            if key in seen:
                raise SpecError(f"duplicate key '{key}' at lines {seen[key]} and {line}; give each key once")
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _StrictLoader.construct_mapping)


def parse_yaml_text(text: str, where: str = "") -> Any:
    """YAML text through the strict loader; errors as one line naming `where`."""
    prefix = f"{where}: " if where else ""
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except SpecError as err:
        raise SpecError(f"{prefix}{err}") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        raise SpecError(f"{where}:{line} is not valid YAML ({getattr(err, 'problem', err)})") from None
    except RecursionError:
        raise SpecError(f"{prefix}nesting too deep to read") from None
    except ValueError as err:
        # PyYAML converts integers with int(): Python refuses one of more than 4,300 digits
        if "integer string conversion" in str(err):
            raise SpecError(f"{prefix}a number of more than {sys.get_int_max_str_digits():,} digits; a number "
                            "must have fewer (no field takes one so large)") from None
        raise SpecError(f"{prefix}{str(err).splitlines()[0]}") from None


def read_yaml(path: str | Path) -> Any:
    p = Path(path)
    if p.is_dir():
        raise SpecError(f"'{p}' is a directory; give a YAML file")
    if not p.exists():
        raise SpecError(f"file '{p}' does not exist")
    if not p.is_file():
        raise SpecError(f"'{p}' is not a regular file; give a YAML file")
    size = p.stat().st_size
    if size > MAX_FILE_BYTES:
        raise SpecError(f"{p}: {size:,} bytes; a study or catalog file may hold at most {MAX_FILE_BYTES:,}")
    raw = p.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise SpecError(f"{p}: not UTF-8 text (byte {err.start}); save it as UTF-8") from None
    if "\x00" in text:
        raise SpecError(f"{p}: holds NUL bytes; a study file is UTF-8 YAML text")
    return parse_yaml_text(text, str(p))


def load_yaml(path: str | Path, model_cls: type[M]) -> M:
    return validate(model_cls, read_yaml(path), where=str(path))
