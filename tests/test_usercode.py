"""Loading the code a study names (designer.usercode): each study runs its own folder's files as they
are on disk, whatever another study loaded before it in the same process."""

import sys

import pytest

from designer.usercode import load_callable

@pytest.fixture
def folders(tmp_path):
    """Two study folders with a rules module of the same name, each importing its own helper of the
    same name, whose values differ."""
    out = []
    for name, limit in (("a", 8), ("b", 4)):
        d = tmp_path / name
        d.mkdir()
        (d / "uc_helper.py").write_text(f"LIMIT = {limit}\n")
        (d / "uc_rules.py").write_text("from uc_helper import LIMIT\n\ndef limit():\n    return LIMIT\n")
        out.append(d)
    yield out
    _forget(tmp_path)


@pytest.mark.parametrize("ref", ["uc_rules.py:limit", "uc_rules:limit"])
def test_a_second_study_runs_its_own_helper_not_the_first_ones(folders, ref):
    a, b = folders
    assert load_callable(ref, base_dir=a, what="constraint")() == 8
    # before, Python's module cache answered `uc_helper` (and `uc_rules`) with folder a's
    assert load_callable(ref, base_dir=b, what="constraint")() == 4
    assert load_callable(ref, base_dir=a, what="constraint")() == 8


@pytest.mark.parametrize("ref", ["uc_rules.py:limit", "uc_rules:limit"])
def test_an_edited_helper_runs_as_it_is_on_disk(folders, ref):
    a, _ = folders
    fn = load_callable(ref, base_dir=a, what="constraint")
    assert fn() == 8
    # the study's identity digests the edited file; what runs must be that file too
    (a / "uc_helper.py").write_text("LIMIT = 2\n")  # the same size, within the same second
    assert load_callable(ref, base_dir=a, what="constraint")() == 2
    # unchanged files are not run again: the same function object comes back
    again = load_callable(ref, base_dir=a, what="constraint")
    assert again is load_callable(ref, base_dir=a, what="constraint")
    # and no bytecode is left in the study's folder to be trusted over a later edit
    assert not (a / "__pycache__").exists()


def test_the_programs_own_modules_are_never_reloaded(tmp_path):
    # a study folder that holds a package named like one the program imported (here designer
    # itself) leaves that module alone: only modules loaded from a study's folder are refreshed
    import designer.perf.model as model

    (tmp_path / "designer").mkdir()
    (tmp_path / "designer" / "__init__.py").write_text("")
    (tmp_path / "own.py").write_text("def f():\n    return 1\n")
    assert load_callable("own.py:f", base_dir=tmp_path, what="hook")() == 1
    assert sys.modules["designer.perf.model"] is model


def _study(folder, limit, helper="uc_helper"):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{helper}.py").write_text(f"LIMIT = {limit}\n")
    (folder / "uc_rules.py").write_text(f"from {helper} import LIMIT\n\ndef limit():\n    return LIMIT\n")
    return folder


@pytest.mark.parametrize("ref", ["uc_rules.py:limit", "uc_rules:limit"])
def test_a_study_in_a_subfolder_and_its_parent_each_run_their_own(tmp_path, ref):
    parent = _study(tmp_path / "proj", 1)
    child = _study(tmp_path / "proj" / "variant", 2)
    try:
        assert load_callable(ref, base_dir=child, what="hook")() == 2
        assert load_callable(ref, base_dir=parent, what="hook")() == 1
    finally:
        _forget(tmp_path)


def test_a_helper_another_study_loaded_is_not_found_where_the_folder_has_none(tmp_path):
    a = _study(tmp_path / "a", 8)
    c = tmp_path / "c"
    c.mkdir()
    (c / "uc_rules.py").write_text("from uc_helper import LIMIT\n\ndef limit():\n    return LIMIT\n")
    from designer.errors import HookError

    try:
        assert load_callable("uc_rules.py:limit", base_dir=a, what="hook")() == 8
        with pytest.raises(HookError, match="No module named 'uc_helper'"):
            load_callable("uc_rules.py:limit", base_dir=c, what="hook")
    finally:
        _forget(tmp_path)


def test_helpers_linked_from_elsewhere_and_namespace_packages_stay_per_study(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    for name, limit in (("a", 8), ("b", 4)):
        (shared / f"{name}.py").write_text(f"LIMIT = {limit}\n")
        d = tmp_path / name
        (d / "uc_ns").mkdir(parents=True)  # a package without __init__.py
        (d / "uc_ns" / "mod.py").write_text(f"def limit():\n    return {limit}\n")
        (d / "uc_helper.py").symlink_to(shared / f"{name}.py")
        (d / "uc_rules.py").write_text("from uc_helper import LIMIT\n\ndef limit():\n    return LIMIT\n")
    try:
        for name, limit in (("a", 8), ("b", 4), ("a", 8)):
            assert load_callable("uc_rules.py:limit", base_dir=tmp_path / name, what="hook")() == limit
            assert load_callable("uc_ns.mod:limit", base_dir=tmp_path / name, what="hook")() == limit
    finally:
        _forget(tmp_path)


def test_a_package_the_program_imported_keeps_its_modules(tmp_path, monkeypatch):
    # the study's folder holds the program's own package (designer run from its checkout): a
    # submodule a hook imports for the first time is the program's, not the study's, and an edit of
    # the hook does not make it be imported again as a second copy
    (tmp_path / "uc_lib").mkdir()
    (tmp_path / "uc_lib" / "__init__.py").write_text("")
    (tmp_path / "uc_lib" / "sub.py").write_text("class Thing:\n    pass\n")
    (tmp_path / "hook.py").write_text("from uc_lib.sub import Thing\n\ndef f():\n    return Thing\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import uc_lib  # noqa: F401  (the program's import)

    try:
        thing = load_callable("hook.py:f", base_dir=tmp_path, what="hook")()
        (tmp_path / "hook.py").write_text("from uc_lib.sub import Thing\n\ndef f():\n    return Thing\n# edited\n")
        assert load_callable("hook.py:f", base_dir=tmp_path, what="hook")() is thing
        assert sys.modules["uc_lib.sub"].Thing is thing
    finally:
        for key in ("uc_lib", "uc_lib.sub"):
            sys.modules.pop(key, None)
        _forget(tmp_path)


@pytest.mark.parametrize("ref", ["uc_lazy.py:limit", "uc_lazy:limit"])
def test_a_helper_imported_inside_the_function_is_its_own_folders(tmp_path, ref):
    # the import runs at call time, after the load: before, the folder was on the import path only
    # while loading, so the call found no helper, or the helper another study had loaded since
    folders = []
    for name, limit in (("a", 8), ("b", 4)):
        d = _study(tmp_path / name, limit)
        (d / "uc_lazy.py").write_text("def limit():\n    from uc_helper import LIMIT\n    return LIMIT\n")
        folders.append(d)
    a, b = folders
    try:
        f_a = load_callable(ref, base_dir=a, what="constraint")
        f_b = load_callable(ref, base_dir=b, what="constraint")  # b loaded last, a's helper not yet imported
        assert f_a() == 8
        assert f_b() == 4
        assert f_a() == 8
        # a helper imported in a call is refreshed like one imported at load: edited, it runs as on disk
        (a / "uc_helper.py").write_text("LIMIT = 2\n")
        assert load_callable(ref, base_dir=a, what="constraint")() == 2
        # the program's modules see no study folder on the import path after a call
        assert str(a) not in sys.path and str(b) not in sys.path
    finally:
        _forget(tmp_path)


def test_a_study_function_calling_anothers_keeps_its_own_helpers(tmp_path):
    # a's function calls b's, then imports its helper: a's, not the one b's call loaded
    a = _study(tmp_path / "a", 8)
    b = _study(tmp_path / "b", 4)
    (b / "uc_lazy.py").write_text("def limit():\n    from uc_helper import LIMIT\n    return LIMIT\n")
    (a / "uc_outer.py").write_text("def both(inner):\n    got = inner()\n    from uc_helper import LIMIT\n"
                                   "    return got, LIMIT\n")
    try:
        inner = load_callable("uc_lazy.py:limit", base_dir=b, what="hook")
        outer = load_callable("uc_outer.py:both", base_dir=a, what="hook")
        assert outer(inner) == (4, 8)
    finally:
        _forget(tmp_path)


def test_calls_from_threads_leave_the_interpreters_settings_as_they_were(folders):
    import threading

    a, b = folders
    for d in folders:  # a call that lets other threads run in its middle, and imports its helper there
        (d / "uc_slow.py").write_text("import time\n\ndef limit():\n    time.sleep(0.001)\n"
                                      "    from uc_helper import LIMIT\n    return LIMIT\n")
    f_a = load_callable("uc_slow.py:limit", base_dir=a, what="hook")
    f_b = load_callable("uc_slow.py:limit", base_dir=b, what="hook")
    before = (sys.dont_write_bytecode, list(sys.path))
    results = []

    def work(f, want):
        results.extend(f() == want for _ in range(25))

    threads = [threading.Thread(target=work, args=(f, want)) for f, want in ((f_a, 8), (f_b, 4)) * 4]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(results) and len(results) == 200
    assert (sys.dont_write_bytecode, list(sys.path)) == before


def test_an_unchanged_module_gives_back_the_same_function(folders):
    a, _ = folders
    first = load_callable("uc_rules.py:limit", base_dir=a, what="hook")
    assert load_callable("uc_rules.py:limit", base_dir=a, what="hook") is first
    assert first.__name__ == "limit" and first() == 8


def test_an_installed_modules_function_comes_back_as_it_is():
    import math

    assert load_callable("math:sqrt", base_dir=None, what="hook") is math.sqrt


def _forget(root):
    """Drop the modules a test loaded from `root`."""
    for key in list(sys.modules):
        f = sys.modules[key].__dict__.get("__file__") if isinstance(sys.modules[key], type(sys)) else None
        path = sys.modules[key].__dict__.get("__path__") if isinstance(sys.modules[key], type(sys)) else None
        where = f or (next(iter(path), None) if path is not None else None)
        if where and str(where).startswith(str(root)):
            del sys.modules[key]
