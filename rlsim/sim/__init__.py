"""The simulator: scenario, costs, engine, schedules and results.

Its public API is `load_scenario`, `simulate`, `Result` and `ScenarioError` (re-exported lazily by
`rlsim`); the tools in `rlsim.tools` build on it.
"""
