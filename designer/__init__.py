"""designer: design GPU clusters for large-language-model training.

Stages (each consumes the records of the one before it):
spec -> network (MILP) -> perf (analytic model) -> search -> pareto -> export.

The public API, importable from the package (loaded on first use, so `import designer` stays light):

    from designer import load_study, run_study, solve_network, evaluate
    result = run_study(load_study("studies/quickstart/study.yaml"), out_dir="out/quickstart")
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# name -> module that defines it
_API = {
    "load_study": "designer.spec.study",
    "run_study": "designer.pipeline",
    "StudySpec": "designer.spec.study",
    "StudyResult": "designer.pipeline",
    "load_network_study": "designer.network.api",
    "solve_network": "designer.network.api",
    "evaluate": "designer.scenario",
    "load_scenario": "designer.scenario",
    "evaluate_scenario": "designer.scenario",
    "read_pareto": "designer.export",
    "DesignerError": "designer.errors",
}

__all__ = ["__version__", *_API]

if TYPE_CHECKING:  # for type checkers and IDEs; at run time the names load lazily
    from designer.errors import DesignerError
    from designer.export import read_pareto
    from designer.network.api import load_network_study, solve_network
    from designer.pipeline import StudyResult, run_study
    from designer.scenario import evaluate, evaluate_scenario, load_scenario
    from designer.spec.study import StudySpec, load_study


def __getattr__(name: str) -> Any:
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module 'designer' has no attribute '{name}'")
    value = getattr(import_module(module), name)
    globals()[name] = value  # cache: later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
