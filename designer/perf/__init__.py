"""The analytic performance model: pure functions of spec records, vectorizable with numpy."""
