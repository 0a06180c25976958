"""Loading the user's code that a study names: network hooks and trial constraints, one way for both.

A reference is `module.path:function` or `path/to/file.py:function`. Both are resolved against the
study's base folder (the folder of the study file; the current folder for a study built in Python):
- a `.py` path is that file, relative to the base folder unless absolute;
- a module is looked up in the base folder first, then on the normal import path (installed packages).

Importing runs the module's top-level code before the function can be checked: a study that names
hooks runs code. The command line's `--no-hooks` refuses such a study before anything runs (refuse_code).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import importlib.util
import modulefinder
import os
import re
import sys
import threading
import types
from pathlib import Path
from typing import Any, Callable

from designer.errors import HookError

# module.path:function, or a .py file path and a function
CODE_REF_RE = re.compile(r"^([A-Za-z_]\w*(\.[A-Za-z_]\w*)*|[^:]+\.py):[A-Za-z_]\w*$")
CODE_REF_FORMS = "'package.module:function' or 'path/to/file.py:function'"


# Set on every module a load imports from a study's folder: (that folder, the SHA-256 of the module's
# file then), so a later load can tell another folder's module, or one edited since, from its own.
_ORIGIN_ATTR = "__designer_origin__"
# Set on a loaded function's module: {function name: (the function, its folder-bound wrapper)}, so an
# unchanged module gives back the same wrapper.
_BOUND_ATTR = "__designer_bound__"
# The modules _stamp stamped, by name, with their folder (the only stamps there are, so nothing scans
# sys.modules), and the folder whose code last loaded or ran. Process state, as sys.modules is.
_stamped: dict[str, str] = {}
_last_folder: list[str | None] = [None]
# Loads and calls change process state (sys.modules, sys.path, sys.dont_write_bytecode): one at a time.
# The folders of the study functions running now, innermost last (a study function may call another's).
_lock = threading.RLock()
_running: list[str] = []


def _digest(path: str) -> str | None:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def _own(module: Any, key: str) -> Any:
    # read from the module's namespace, never through getattr: a lazy module in sys.modules (Pyomo's
    # deferred imports) would import what it defers, and fail where that is not installed
    ns = module.__dict__ if isinstance(module, types.ModuleType) else {}
    return ns.get(key)


def _module_file(module: Any) -> str | None:
    """Where the import found a module: its file (a link stays a link: its folder, not its target's,
    is where it was found), or a namespace package's first folder."""
    f = _own(module, "__file__")
    if isinstance(f, str) and f:
        return os.path.abspath(f)
    path = _own(module, "__path__")
    if path is not None:
        entries = [e for e in path if isinstance(e, str)]
        return os.path.abspath(entries[0]) if entries else None
    return None


def _fingerprint(path: str) -> str | None:
    # a namespace package is its folder, which has no content of its own to digest
    return "folder" if os.path.isdir(path) else _digest(path)


def _within(path: str, folder: Path) -> bool:
    return os.path.commonpath([path, str(folder)]) == str(folder)


def _refresh(folder: Path) -> None:
    """Forget the modules earlier loads took from study folders (stamped by _stamp), unless they are
    `folder`'s own, every one unchanged on disk. Python caches modules by name alone: without this,
    a second study with its own `helpers.py` would run the first study's (or, lacking one, silently
    import it), and an edited file its old code, while the study's identity holds the files on disk.
    `folder`'s modules go together (the unique name a .py reference is loaded under among them), so
    no fresh module keeps a stale one it imported. Modules imported otherwise (the program's own,
    installed packages) carry no stamp and are never touched."""
    key = str(folder)
    _forget_foreign(key)
    own = [n for n, f in _stamped.items() if f == key and _stamp_of(n) == key]
    if all(_unchanged(sys.modules[n]) for n in own):
        return
    for n in own:
        sys.modules.pop(n, None)
        _stamped.pop(n, None)


def _stamp_of(name: str) -> str | None:
    """The study folder module `name` in sys.modules was loaded from, if _stamp stamped it."""
    module = sys.modules.get(name)
    origin = _own(module, _ORIGIN_ATTR) if module is not None else None
    return None if origin is None else origin[0]


def _forget_foreign(key: str) -> None:
    """Forget the modules other study folders' code loaded (_stamped: every stamp _stamp made), before
    `key`'s code loads or runs; nothing to do when `key`'s code ran last, as no other folder's module
    has been stamped since."""
    if _last_folder[0] == key:
        return
    for name, folder in list(_stamped.items()):
        if folder != key:
            if _stamp_of(name) == folder:
                sys.modules.pop(name, None)
            _stamped.pop(name, None)
    _last_folder[0] = key


def _unchanged(module: Any) -> bool:
    f, origin = _module_file(module), _own(module, _ORIGIN_ATTR)
    return f is not None and origin is not None and origin[1] is not None and origin[1] == _fingerprint(f)


def _stamp(folder: Path, before: dict[str, Any], also: str | None = None) -> None:
    """Stamp every module this load imported from `folder` (_ORIGIN_ATTR): those an import resolves
    in the folder by name, or `also`. A package the program had imported before, unstamped (its own,
    where the study's folder holds the program's checkout), keeps its new submodules unstamped."""
    if sys.modules.keys() == before.keys():  # nothing imported (most calls of a loaded function)
        return
    key = str(folder)
    for name in sys.modules.keys() - before.keys():
        m = sys.modules.get(name)
        f = _module_file(m)
        if f is None or not _within(f, folder):
            continue
        top = name.split(".")[0]
        if name != also and (not _in_study_folder(top, folder)
                             or (top in before and _own(before[top], _ORIGIN_ATTR) is None)):
            continue
        m.__dict__[_ORIGIN_ATTR] = (key, _fingerprint(f))
        _stamped[name] = key


@contextlib.contextmanager
def _importing_from(folder: Path, also: str | None = None):
    """Imports resolved in `folder` first, as when Python runs a script from it; every module they
    load from there is stamped (_stamp), a failed load's too, so a later load can refresh it. No
    bytecode is written into the study's folder: a cached .pyc is trusted on its source's mtime and
    size, which an edit within the same second can keep."""
    before = sys.modules.copy()
    no_bytecode = sys.dont_write_bytecode
    sys.dont_write_bytecode = True
    entry = str(folder)
    sys.path.insert(0, entry)
    try:
        yield
    finally:
        sys.dont_write_bytecode = no_bytecode
        _stamp(folder, before, also)
        try:
            sys.path.remove(entry)
        except ValueError:  # the user's code rebound or filtered sys.path
            pass


def _from_file(path: Path) -> Any:
    # A name unique to the file, so two studies' `hooks.py` never shadow each other in sys.modules.
    name = "designer_usercode_" + hashlib.sha256(str(path).encode()).hexdigest()[:12]
    folder = path.parent
    _refresh(folder)
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    with _importing_from(folder, also=name):
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
    return module


def _in_study_folder(name: str, base: Path) -> bool:
    """Whether module `name`'s top package is in the study file's folder (looked up there first)."""
    top = name.split(".")[0]
    return (base / top).is_dir() or (base / f"{top}.py").is_file()


def _from_module(name: str, base: Path) -> Any:
    if not _in_study_folder(name, base):
        return importlib.import_module(name)
    folder = base.resolve()
    _refresh(folder)
    with _importing_from(folder):
        return importlib.import_module(name)


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
            with _lock:
                module = _from_file(path.resolve())
        else:
            with _lock:
                module = _from_module(target, base)
    except HookError:
        raise
    except (Exception, SystemExit) as err:  # ImportError, SyntaxError, any error (or exit) in the module's top-level code
        raise HookError(f"{what} '{ref}': cannot import '{target}' ({type(err).__name__}: {err}); modules are "
                        f"looked up in the study file's folder {base}, then among installed packages") from None
    fn = getattr(module, fn_name, None)
    if fn is None or not callable(fn):
        raise HookError(f"{what} '{ref}': '{target}' has no function '{fn_name}'")
    folder = _origin_folder(module)
    return fn if folder is None else _bound(module, fn_name, fn, folder)


def _origin_folder(module: Any) -> str | None:
    """The study folder a loaded module came from (its stamp); None for an installed module's."""
    origin = _own(module, _ORIGIN_ATTR)
    return None if origin is None else origin[0]


def _bound(module: Any, fn_name: str, fn: Callable[..., Any], folder: str) -> Callable[..., Any]:
    """`fn` run as code of its study's folder: each call first forgets the modules other folders' code
    loaded, and imports inside the call are looked up in the folder and stamped, as at load. A
    function that imports a helper of its folder in its body (a lazy import) then gets its own
    folder's, where it would otherwise find none (the folder is on the import path only while
    loading) or another study's, loaded since. The same wrapper comes back while the module is
    unchanged. Calls run one at a time (a lock: they change sys.modules and sys.path), with the
    folder first on the import path for the call's duration, as for a script run from it; code the
    function leaves to run later (a callback) runs outside it. The wrapper, a closure, does not pickle:
    workers load a study's code themselves."""
    cache = module.__dict__.setdefault(_BOUND_ATTR, {})
    hit = cache.get(fn_name)
    if hit is not None and hit[0] is fn:
        return hit[1]
    path = Path(folder)

    @functools.wraps(fn)
    def run_in_study_folder(*args: Any, **kwargs: Any) -> Any:
        with _lock:
            _forget_foreign(folder)
            _running.append(folder)
            try:
                with _importing_from(path):
                    return fn(*args, **kwargs)
            finally:
                _running.pop()
                if _running and _running[-1] != folder:
                    # called from another study's function: the rest of that one imports its own again
                    _forget_foreign(_running[-1])

    cache[fn_name] = (fn, run_in_study_folder)
    return run_in_study_folder


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
