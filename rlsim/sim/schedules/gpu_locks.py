"""Who may use which GPUs now: one FIFO lock per run of pool GPUs that the same roles hold.

A role holds GPUs [gpu_offset, gpu_offset + gpus) of its pool. The pool is cut at every role's
boundaries into segments; a phase takes the segments under its role(s), so roles on overlapping GPUs
take turns (verl's time-sharing of a resource pool) while roles on disjoint GPUs of one pool run
side by side (ROLL's device_mapping: training on 0-15, rollout on 0-11, a judge on 12-15). A phase
asks for all its segments at one instant, so every segment queues competing phases in the same
order and no two phases can wait on each other.
"""

from __future__ import annotations

import simpy

from rlsim.sim.scenario.schema import Scenario

Segment = tuple[str, int, int]  # (pool, first GPU, one past the last)


class GpuLocks:
    def __init__(self, env: simpy.Environment, scenario: Scenario):
        self.scenario = scenario
        self.segments: dict[str, list[Segment]] = {}
        self._locks: dict[Segment, simpy.Resource] = {}
        for pool in scenario.cluster.pools:
            self.segments[pool] = [(pool, a, b) for a, b in scenario.gpu_runs(pool)]
            for seg in self.segments[pool]:
                self._locks[seg] = simpy.Resource(env, capacity=1)

    def of(self, *roles: str) -> list[Segment]:
        """The segments under the GPUs of these roles, in a fixed order."""
        out: list[Segment] = []
        for role in roles:
            pool = self.scenario.roles[role].pool
            start, stop = self.scenario.role_gpu_range(role)
            out += [s for s in self.segments[pool] if start <= s[1] and s[2] <= stop and s not in out]
        return sorted(out)

    def request(self, segments: list[Segment]) -> list:
        """Queue for every segment at once; yield `env.all_of(...)` on the result, then `release` it."""
        return [self._locks[s].request() for s in segments]

    def release(self, requests: list) -> None:
        for req in requests:
            req.resource.release(req)
