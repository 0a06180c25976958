"""Example constraint hooks for the network MILP (designer.network.hooks).

A hook is `hook(block, ctx)`: it adds variables and constraints to its own Pyomo `block`, using the
linear expressions in `ctx.handles` (designer.network.milp.Handles). Name one in a study by its path
relative to the study file, e.g. "hooks/example_hooks.py:even_spines" from studies/.
"""

from __future__ import annotations

import pyomo.environ as pyo

# An HB domain is the unit we call a rack here (a GB200 NVL72 is one rack; an HGX node is a quarter
# to a half of one). 40 optics per domain is 5 per GPU on an 8-GPU node: a two-tier fabric with
# optics on the NIC links (2 link layers x 2 ends = 4 per GPU) fits, a three-tier one (6 per GPU)
# does not.
MAX_OPTICS_PER_RACK = 40


def limit_optics_per_rack(block: pyo.Block, ctx) -> None:
    """At most MAX_OPTICS_PER_RACK optical transceivers per HB domain, e.g. the heat a rack's optics
    may add. Linear: transceivers <= limit * domains."""
    h = ctx.handles
    block.optics_per_rack = pyo.Constraint(expr=h.transceiver_count <= MAX_OPTICS_PER_RACK * h.n_domains)


def even_spines(block: pyo.Block, ctx) -> None:
    """An even number of tier-2 (spine) switches, e.g. so the spine splits evenly over two power
    feeds or two rows. Designs without a tier 2 (0 spines) satisfy it."""
    spines = ctx.handles.switches_by_level.get(2)
    if spines is None:
        return
    block.pairs = pyo.Var(domain=pyo.NonNegativeIntegers)
    block.even = pyo.Constraint(expr=spines == 2 * block.pairs)
