"""verl's V1 trainer: `colocate_async` and `separate_async`, with GPU lending ("switch") or re-splitting.

The asynchronous rollout loop (schedules/async_rollout.py) with fully-async's AReaL rules (admission by
`max_off_policy_threshold` in weight versions, `parameter_sync_step` trainer steps per push) and, plugged
in as loop components, verl's lending (schedules/lending.py: the trainer's GPUs generate while the
trainer would wait, or in turns with training under colocate_async) and re-splitting
(schedules/resplit.py).
"""

from __future__ import annotations

from rlsim.sim.schedules.async_rollout import AsyncRolloutSchedule
from rlsim.sim.schedules.fully_async import fully_async_policies
from rlsim.sim.schedules.replay_buffer import ReplayBufferColumns
from rlsim.sim.schedules.resplit import plug_gpu_moves


class VerlV1Schedule(AsyncRolloutSchedule):
    def __init__(self, scenario, env):
        super().__init__(scenario, env, fully_async_policies(scenario))
        spec = self.spec
        self.lending, self.resplit = plug_gpu_moves(self, spec.trainer_mode == "colocate_async",
                                                    spec.hybrid_rollout, spec.resplit)
        if spec.replay_buffer is not None:  # the expiry policy is verl's replay buffer: report its evictions
            self.plug(ReplayBufferColumns(self.expiry.book))
