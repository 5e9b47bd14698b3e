"""How the simulator runs a scenario: every engine one by one (exact) or a sample of them (aggregate)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rlsim.sim.scenario.schema.base import Strict


class SimulationSpec(Strict):
    """`exact` simulates every rollout engine and every sample; `aggregate` simulates a share of the identical
    rollout engines with the same share of the generation load and scales the results back (docs/usage.md)."""

    mode: Literal["exact", "aggregate"] = Field(
        default="exact", description="exact: every engine; aggregate: a sample of the rollout engines (faster)"
    )
    engines: int | None = Field(
        default=None, gt=0, le=100_000,
        description="aggregate: rollout engines simulated at least (the share is the largest that divides the "
        "engine count and the batch sizes and leaves this many engines and 16 prompt groups per step); null: "
        "16 for a synchronous schedule, 8 for an asynchronous one",
    )
