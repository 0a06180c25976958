"""The exception tree. Every error a user can cause is a DesignerError whose message is one line."""


class DesignerError(Exception):
    """Base of every error designer raises on purpose."""


class SpecError(DesignerError):
    """An input file or argument is invalid: the message names the field, the value and what is allowed."""


class InfeasibleDesign(DesignerError):
    """No design satisfies the budgets; the message names the binding budget and the shortfall."""


class SolverError(DesignerError):
    """The MILP solver failed for a reason other than infeasibility."""


class HookError(DesignerError):
    """A user hook could not be imported or raised while building the model."""
