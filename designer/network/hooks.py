"""User constraint hooks: `hook(block, ctx)` adds variables and constraints to its own sub-block.

Hooks are named in the study as "package.module:function" or passed as callables to the Python API;
there is no global registry (PyPSA's `extra_functionality` is the model). A hook runs after the model
is built and before the solve. It receives
  - `block`: its own Pyomo sub-block, `model.hooks[<hook name>]`; everything it adds goes there;
  - `ctx`: a frozen HookContext with the validated study, the catalog, and typed handles to the
    decision variables and linear expressions (designer.network.milp.Handles).
A hook that adds an objective, or adds or deletes anything outside its block, is rejected with a
one-line HookError.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence, Union

import pyomo.environ as pyo

from designer.errors import DesignerError, HookError
from designer.spec.catalog import Catalog
from designer.spec.network_study import NetworkStudy

if TYPE_CHECKING:  # imported for typing only: milp imports this module
    from designer.network.milp import Handles


@dataclass(frozen=True)
class HookContext:
    """Read-only view a hook gets. `handles` holds the variables and expressions (see milp.Handles)."""

    study: NetworkStudy
    catalog: Catalog
    handles: "Handles"


HookFn = Callable[[pyo.Block, HookContext], None]
HookRef = Union[str, HookFn]


def load_hook(ref: str, base_dir: str | None = None) -> HookFn:
    """A hook named 'package.module:function' or 'file.py:function', resolved against the study file's
    folder (designer.usercode, the same loader as trial constraints); any failure is one HookError line."""
    from designer.usercode import load_callable

    return load_callable(ref, base_dir=base_dir, what="hook")


def hook_name(ref: HookRef, i: int) -> str:
    base = ref.split(":")[-1] if isinstance(ref, str) else getattr(ref, "__name__", "hook")
    safe = "".join(c if c.isalnum() or c == "_" else "_" for c in base)
    return f"h{i}_{safe}"


def _outside(model: pyo.ConcreteModel, hooks_block: pyo.Block) -> set[int]:
    """ids of every component outside the hooks block, to detect a hook that touches them."""
    out = set()
    for c in model.component_objects(descend_into=True):
        if c is hooks_block or c.parent_block() is not None and _inside(c, hooks_block):
            continue
        out.add(id(c))
    return out


def _inside(c, block) -> bool:
    b = c.parent_block()
    while b is not None:
        if b is block:
            return True
        b = b.parent_block()
    return False


def apply_hooks(model: pyo.ConcreteModel, hooks: Sequence[HookRef], ctx: HookContext) -> None:
    """Run each hook on its own sub-block of `model.hooks`."""
    model.hooks = pyo.Block()
    if not hooks:
        return
    n_obj = sum(1 for _ in model.component_data_objects(pyo.Objective))
    before = _outside(model, model.hooks)
    for i, ref in enumerate(hooks):
        fn = load_hook(ref, ctx.study.base_dir) if isinstance(ref, str) else ref
        if not callable(fn):
            raise HookError(f"hook {i}: {ref!r} is not callable")
        name = hook_name(ref, i)
        block = pyo.Block()
        model.hooks.add_component(name, block)
        try:
            fn(block, ctx)
        except DesignerError:
            raise
        except (Exception, SystemExit) as err:  # a hook's sys.exit() is its failure, not the command's exit
            raise HookError(f"hook '{ref if isinstance(ref, str) else name}' raised {type(err).__name__}: {err}") from None
        for obj in block.component_objects(pyo.Objective, descend_into=True):
            raise HookError(f"hook '{name}' added objective '{obj.name}'; hooks may add variables and constraints only")
        if sum(1 for _ in model.component_data_objects(pyo.Objective)) != n_obj:
            raise HookError(f"hook '{name}' changed the objective; hooks may add variables and constraints only")
        if _outside(model, model.hooks) != before:
            raise HookError(f"hook '{name}' added or removed components outside its own block; "
                            "hooks may add variables and constraints to their block only")
