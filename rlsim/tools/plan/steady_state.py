"""Steady-state warm-up of asynchronous schedules: lives in rlsim/tools/sweep/steady_state.py (run, sweep,
compare and plan share it); re-exported here for the plan's modules."""

from rlsim.tools.sweep.steady_state import head_start_batches, steady_state_warmup  # noqa: F401
