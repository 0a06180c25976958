"""Loading the user's code that a study names: network hooks and trial constraints, one way for both.

A reference is `module.path:function` or `path/to/file.py:function`. Both are resolved against the
study's base folder (the folder of the study file; the current folder for a study built in Python):
- a `.py` path is that file, relative to the base folder unless absolute;
- a module is looked up in the base folder first, then on the normal import path (installed packages).

Importing runs the module's top-level code before the function can be checked: a study that names
hooks runs code. The command line's `--no-hooks` refuses such a study before anything runs (refuse_code).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import modulefinder
import re
import sys
from pathlib import Path
from typing import Any, Callable

from designer.errors import HookError

# module.path:function, or a .py file path and a function
CODE_REF_RE = re.compile(r"^([A-Za-z_]\w*(\.[A-Za-z_]\w*)*|[^:]+\.py):[A-Za-z_]\w*$")
CODE_REF_FORMS = "'package.module:function' or 'path/to/file.py:function'"


def _from_file(path: Path) -> Any:
    # A name unique to the file, so two studies' `hooks.py` never shadow each other in sys.modules.
    name = "designer_usercode_" + hashlib.sha256(str(path).encode()).hexdigest()[:12]
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    # its imports are looked up in its own folder first, as when Python runs a file as a script
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    finally:
        sys.path.remove(str(path.parent))
    return module


def _in_study_folder(name: str, base: Path) -> bool:
    """Whether module `name`'s top package is in the study file's folder (looked up there first)."""
    top = name.split(".")[0]
    return (base / top).is_dir() or (base / f"{top}.py").is_file()


def _from_module(name: str, base: Path) -> Any:
    if not _in_study_folder(name, base):
        return importlib.import_module(name)
    sys.path.insert(0, str(base))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(base))


def load_callable(ref: str, *, base_dir: str | Path | None, what: str) -> Callable[..., Any]:
    """The function a reference names; every failure is one HookError line naming `what` and `ref`."""
    if not CODE_REF_RE.match(ref):
        raise HookError(f"{what} '{ref}': expected {CODE_REF_FORMS}")
    target, fn_name = ref.rsplit(":", 1)
    base = Path(base_dir) if base_dir is not None else Path.cwd()
    try:
        if target.endswith(".py"):
            path = Path(target) if Path(target).is_absolute() else base / target
            if not path.is_file():
                raise HookError(f"{what} '{ref}': no file {path} (a path is relative to the study file's folder)")
            module = _from_file(path.resolve())
        else:
            module = _from_module(target, base)
    except HookError:
        raise
    except (Exception, SystemExit) as err:  # ImportError, SyntaxError, any error (or exit) in the module's top-level code
        raise HookError(f"{what} '{ref}': cannot import '{target}' ({type(err).__name__}: {err}); modules are "
                        f"looked up in the study file's folder {base}, then among installed packages") from None
    fn = getattr(module, fn_name, None)
    if fn is None or not callable(fn):
        raise HookError(f"{what} '{ref}': '{target}' has no function '{fn_name}'")
    return fn


def study_module_file(name: str, base_dir: str | Path | None) -> Path | None:
    """The file a 'package.module' reference loads from the study file's folder (as load_callable
    looks it up there first): base/package/module.py or base/package/module/__init__.py; None for a
    module of an installed package."""
    base = Path(base_dir) if base_dir is not None else Path.cwd()
    if not _in_study_folder(name, base):
        return None
    stem = base.joinpath(*name.split("."))
    for p in (stem.with_suffix(".py"), stem / "__init__.py"):
        if p.is_file():
            return p
    return None


def local_imports(target: str, base_dir: str | Path | None) -> dict[str, Path]:
    """The other files of the study's folder that a code reference runs when it is imported: the
    modules it imports from there, directly or through each other (a package's `__init__.py`
    included), keyed by their path relative to the folder where they were found. Found by reading
    the code (the standard library's modulefinder, which runs nothing) on the folder where
    load_callable looks them up: the study's folder for a module, the file's own folder for a
    `.py` path. Installed and standard modules are not listed. Where the code cannot be read that
    way (a syntax error, which loading reports, or a package without `__init__.py`, which
    modulefinder cannot follow), every `.py` file under the folder is listed instead, so that no
    edit goes unseen."""
    base = Path(base_dir) if base_dir is not None else Path.cwd()
    if target.endswith(".py"):
        own = Path(target) if Path(target).is_absolute() else base / target
        folder = own.parent
    else:
        own, folder = study_module_file(target, base), base
        if own is None:
            return {}
    finder = modulefinder.ModuleFinder(path=[str(folder)])
    try:
        if target.endswith(".py"):
            finder.run_script(str(own))
        else:
            finder.import_hook(target)
        found = [Path(m.__file__) for m in finder.modules.values() if m.__file__]
    except Exception:  # modulefinder raises AttributeError on a namespace package, SyntaxError on bad code
        found = [p for p in folder.rglob("*.py")
                 if not any(part.startswith(".") or part == "__pycache__" for part in p.relative_to(folder).parts)]
    root, own_file = folder.resolve(), own.resolve()
    out = {}
    for f in (p.resolve() for p in found):
        if f != own_file and f.is_relative_to(root) and f.is_file():
            out[f.relative_to(root).as_posix()] = f
    return dict(sorted(out.items()))


def resolve_path(path: str, base_dir: str | Path | None) -> Path:
    """A path written in a study: relative to the study file's folder (the current folder without one)."""
    p = Path(path).expanduser()
    return p if p.is_absolute() or base_dir is None else Path(base_dir) / p


def refuse_code(refs: dict[str, tuple[str, ...]]) -> None:
    """--no-hooks: refuse a study that names code, listing every reference by its field."""
    named = [f"{field}: {', '.join(v)}" for field, v in refs.items() if v]
    if named:
        raise HookError("--no-hooks: the study names code, which would run (" + "; ".join(named) +
                        "); remove it from the study, or run without --no-hooks")


def study_code_refs(spec: Any) -> dict[str, tuple[str, ...]]:
    """Every code reference in a StudySpec or NetworkStudy, by field."""
    out: dict[str, tuple[str, ...]] = {}
    if hasattr(spec, "constraints"):
        out["constraints"] = tuple(spec.constraints)
        if spec.network is not None:
            out["network.hooks"] = tuple(spec.network.hooks)
        for d in spec.designs:
            out[f"designs.{d.name}.hooks"] = tuple(d.hooks or ())
    else:
        out["hooks"] = tuple(spec.hooks)
    return out
__all__ = ["CODE_REF_FORMS", "CODE_REF_RE", "load_callable", "local_imports", "refuse_code", "resolve_path", "study_code_refs"]
