"""The whole scenario: the root model that ties the sections together."""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from rlsim.sim.limits import (  # sane upper bounds, shared with the file readers
    MAX_STEPS,
)
from rlsim.sim.scenario.calibration import CalibrationSpec
from rlsim.sim.scenario.schema.algorithm import AlgorithmSpec
from rlsim.sim.scenario.schema.base import Strict
from rlsim.sim.scenario.schema.cluster import ClusterSpec
from rlsim.sim.scenario.schema.environments import EnvironmentsSpec, WorkloadSpec
from rlsim.sim.scenario.schema.models import ModelSpec
from rlsim.sim.scenario.schema.roles import RoleName, RoleSpec
from rlsim.sim.scenario.schema.schedule import ScheduleSpec
from rlsim.sim.scenario.schema.simulation import SimulationSpec

# ---------------------------------------------------------------- scenario


class Scenario(Strict):
    name: str = Field(
        default="scenario",
        description="Names the results folder runs/<name>: letters, digits, space, '.', '_', '+', '-'",
    )
    description: str = ""
    seed: int = Field(default=0, ge=0, lt=2**63)
    steps: int = Field(default=3, gt=0, le=MAX_STEPS, description="Measured RL steps")
    warmup_steps: int = Field(
        default=0, ge=0, le=MAX_STEPS, description="Steps simulated but left out of the summary"
    )
    cluster: ClusterSpec
    models: dict[str, ModelSpec] = Field(min_length=1)
    roles: dict[RoleName, RoleSpec] = Field(min_length=1)
    algorithm: AlgorithmSpec = Field(default_factory=AlgorithmSpec)
    workload: WorkloadSpec
    environments: EnvironmentsSpec = Field(default_factory=EnvironmentsSpec)
    schedule: ScheduleSpec
    simulation: SimulationSpec = Field(
        default_factory=SimulationSpec, description="exact (default) or aggregate simulation of the rollout engines"
    )
    calibration: CalibrationSpec | None = Field(
        default=None, description="Factors fitted by `rlsim calibrate --from-log` (block, or an overlay file's path)"
    )

    @field_validator("name")
    @classmethod
    def _plain_name(cls, name: str) -> str:
        """The name becomes a folder under runs/: no separator or leading dot may take it elsewhere."""
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9 ._+-]{0,99}", name):
            raise ValueError(
                f"must be a plain name of 1 to 100 letters, digits, spaces, '.', '_', '+' or '-', starting with a "
                f"letter or digit (it names the folder runs/<name>), got {name[:60]!r}"
            )
        return name

    def role_gpus(self, name: str) -> int:
        """GPUs a role uses: its `gpus`, or its whole pool."""
        role = self.roles[name]
        return role.gpus if role.gpus is not None else self.cluster.pools[role.pool].gpus - role.gpu_offset

    def engine_count(self, name: str) -> int:
        """Inference engines an engine role runs: its GPUs over one engine's (`layout(name).engine_gpus`)."""
        return self.role_gpus(name) // self.layout(name).engine_gpus

    def layout(self, name: str):
        """A role's parallel layout (rlsim.sim.costs.layout.ParallelLayout): tp, pp, dp (given or derived from
        its GPUs), ep, and whether it is an engine role (GPUs per engine: tp)."""
        from rlsim.sim.costs.layout import ParallelLayout

        role = self.roles[name]
        return ParallelLayout.of(role.parallel, self.role_gpus(name), engine=role.engine is not None)

    def role_gpu_range(self, name: str) -> tuple[int, int]:
        """The pool GPUs [start, stop) a role holds."""
        start = self.roles[name].gpu_offset
        return start, start + self.role_gpus(name)

    def gpu_runs(self, pool: str) -> list[tuple[int, int]]:
        """The pool's GPUs cut at every role's first and one-past-last GPU: runs the same roles hold."""
        edges = {0, self.cluster.pools[pool].gpus}
        for role, spec in self.roles.items():
            if spec.pool == pool:
                edges.update(self.role_gpu_range(role))
        ordered = sorted(edges)
        return list(zip(ordered, ordered[1:], strict=False))

    def roles_share_gpus(self, a: str, b: str) -> bool:
        """Whether two roles hold a common GPU (then they time-share it; a hybrid engine for actor and rollout)."""
        ra, rb = self.roles[a], self.roles[b]
        if ra.pool != rb.pool:
            return False
        (a0, a1), (b0, b1) = self.role_gpu_range(a), self.role_gpu_range(b)
        return a0 < b1 and b0 < a1

    def roles_in_one_nvlink_domain(self, a: str, b: str) -> bool:
        """Whether every GPU of two roles sits in one NVLink domain of one pool (a node, or an NVL72 rack): the
        bytes between them never cross a NIC (actor on GPUs 0-3 and rollout on 4-7 of one 8-GPU node)."""
        ra, rb = self.roles[a], self.roles[b]
        if ra.pool != rb.pool:
            return False
        pool = self.cluster.pools[ra.pool]
        domain = pool.profile().nvlink_domain(pool.gpus_per_node)
        (a0, a1), (b0, b1) = self.role_gpu_range(a), self.role_gpu_range(b)
        return min(a0, b0) // domain == (max(a1, b1) - 1) // domain
