"""The simulation environment: a SimPy Environment that also carries the run's shared state.

SimPy keeps all time on the Environment; rlsim keeps the rest of a run's state there too (its one
random generator, the GPU ledger, the run collector, the current RL step and policy version), so that two runs never
share anything and a run is reproducible from its seed alone.
"""

from __future__ import annotations

import numpy as np
import simpy
from simpy.core import BoundClass

from rlsim.engine.collector import RunCollector
from rlsim.engine.ledger import GpuLedger


class SimEnvironment(simpy.Environment):
    def __init__(self, seed: int = 0):
        super().__init__()
        # simpy binds `env.timeout`, `env.event`, ... to the instance only for names in the instance's own
        # class dict, which for a subclass is empty: without this every `env.timeout(...)` builds a bound method.
        for name, obj in vars(simpy.Environment).items():
            if type(obj) is BoundClass:
                setattr(self, name, getattr(self, name))
        self.rng = np.random.default_rng(seed)
        self.ledger = GpuLedger()
        self.collector = RunCollector()  # what the schedule reports: step rows, samples, trajectories
        self.rl_step = 0  # RL step the schedule is working on (labels timeline rows)
        self.policy_version = 0  # version of the weights the trainer holds
        self._request_ids = 0
        self._empty_pops = 0  # steps on an empty queue (events_processed counts them, as a step does)

    def next_request_id(self) -> int:
        """Request ids: one counter per run, shared by every schedule and trajectory."""
        self._request_ids += 1
        return self._request_ids

    @property
    def events_processed(self) -> int:
        """Events processed so far (meta.json reports how many a run took), counting a step on an empty queue.

        Every event enters the queue with the next id of simpy's counter, and leaves it only to be processed.
        """
        return int(repr(self._eid)[len("count("):-1]) - len(self._queue) + self._empty_pops

    def run(self, until: float | simpy.Event | None = None):
        """simpy's run; a run that ends on an empty queue took one more (failed) step, counted here."""
        try:
            value = super().run(until)
        except RuntimeError:  # simpy's "no scheduled events left but `until` was not triggered"
            if not self._queue and isinstance(until, simpy.Event) and not until.triggered:
                self._empty_pops += 1
            raise
        if until is None:  # only an empty queue ends such a run
            self._empty_pops += 1
        return value
