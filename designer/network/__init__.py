"""Network design: topology families (closed-form bills of materials and networkx cross-checks),
the MILP formulation, budgets, hooks and the solve step."""
