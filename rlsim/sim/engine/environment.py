"""The simulation environment: a SimPy kernel that also carries the run's shared state.

SimPy keeps all time on the Environment; rlsim keeps the rest of a run's state there too (its one
random generator, the GPU ledger, the run collector, the current RL step and policy version), so that two runs never
share anything and a run is reproducible from its seed alone.

Two kernels run the events, with identical results: the fast one (rlsim/sim/engine/kernel.py, SimPy's internals
used directly) and the reference one (rlsim/sim/engine/reference.py, SimPy's public API only).
`new_environment` picks one: its `kernel` argument, else the `RLSIM_KERNEL` environment variable, else fast.
"""

from __future__ import annotations

import os

import numpy as np

from rlsim.sim.engine.kernel import FastKernel
from rlsim.sim.engine.reference import ReferenceKernel
from rlsim.sim.results.collector import RunCollector
from rlsim.sim.results.ledger import GpuLedger

KERNELS = ("fast", "reference")


class RunState:
    """What a run shares besides the clock (mixed into a kernel: `SimEnvironment`, `ReferenceEnvironment`)."""

    def _init_run_state(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.ledger = GpuLedger()
        self.collector = RunCollector()  # what the schedule reports: step rows, samples, trajectories
        self.rl_step = 0  # RL step the schedule is working on (labels timeline rows)
        self.policy_version = 0  # version of the weights the trainer holds
        self.load_scale = 1  # aggregate mode: a share of the engines carries this share of the load (sim/aggregate.py)
        self._request_ids = 0

    def next_request_id(self) -> int:
        """Request ids: one counter per run, shared by every schedule and trajectory."""
        self._request_ids += 1
        return self._request_ids


class SimEnvironment(FastKernel, RunState):
    """The run's environment on the fast kernel (the default)."""

    def __init__(self, seed: int = 0):
        super().__init__()
        self._init_run_state(seed)


class ReferenceEnvironment(ReferenceKernel, RunState):
    """The run's environment on the reference kernel (SimPy's public API only)."""

    def __init__(self, seed: int = 0):
        super().__init__()
        self._init_run_state(seed)


def kernel_choice(kernel: str | None = None) -> str:
    """`kernel`, else $RLSIM_KERNEL, else "fast"; a name that is neither kernel is an error."""
    name = kernel or os.environ.get("RLSIM_KERNEL") or "fast"
    if name not in KERNELS:
        raise ValueError(f"RLSIM_KERNEL / kernel must be one of {', '.join(KERNELS)}, got {name!r}")
    return name
