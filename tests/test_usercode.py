"""Loading the code a study names (designer.usercode): each study runs its own folder's files as they
are on disk, whatever another study loaded before it in the same process."""

import sys

import pytest

from designer.usercode import load_callable

NAMES = ("uc_rules", "uc_helper")


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
    for key in [k for k in sys.modules if k in NAMES or k.startswith("designer_usercode_")]:
        mod = sys.modules[key]
        if str(getattr(mod, "__file__", "")).startswith(str(tmp_path)):
            del sys.modules[key]


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
