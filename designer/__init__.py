"""designer: design GPU clusters for large-language-model training.

Stages (each consumes the records of the one before it):
spec -> network (MILP) -> perf (analytic model) -> search -> pareto -> export.
"""

__version__ = "0.1.0"
