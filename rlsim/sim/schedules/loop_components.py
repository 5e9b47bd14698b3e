"""Components of the asynchronous rollout loop: behaviour a schedule plugs in instead of subclassing.

The loop (schedules/async_rollout.py) runs the rollout controller, the buffer and the trainer's side of
it; what a framework adds on top of that (verl V1's GPU lending, re-splitting the trainer/rollout
split) is a `LoopComponent` the schedule attaches with `loop.plug(component)`. The loop calls each
component's hooks in plug order; a component overrides only the hooks it needs (the loop calls only
those, so a hook costs nothing where no component has it). Hooks that are generators run inside the
trainer's process and may take simulated time.

| hook | when the loop calls it | why a component needs it |
|---|---|---|
| `start` | once, before the rollout controller starts | engines that begin in generation mode (lent GPUs) |
| `admits` | each time the controller looks at the admission policy | stop new groups while no engine may take work |
| `park` | as a sample is sent to an engine | hold a sample back while no engine may take it |
| `sync_targets` | at each weight push | engines that get the weights another way (by a switch) are left out |
| `dp_size` | each time a role's data-parallel size is asked | a trainer that gave GPUs to generation trains on fewer |
| `before_batch` | as the trainer starts to wait for its batch | move GPUs back to training first (the switch back) |
| `after_batch` | once the trainer holds its batch | move GPUs after generation (colocated), measure the wait |
| `after_update` | after the loop's post-update work (the weight push) | decide and apply a move of GPUs; columns |

Components share the loop's public surface only (its engines, balancer, buffer, `submit`, `withdraw`,
`wake_rollout`, `until_buffered`, the phase costs); none reaches into another's state.
"""

from __future__ import annotations

HOOKS = ("start", "admits", "park", "sync_targets", "dp_size", "before_batch", "after_batch", "after_update")


class LoopComponent:
    """A no-op for every hook; a component overrides the ones it needs."""

    def start(self, loop):
        """Before the rollout controller starts (a generator)."""
        yield from ()

    def admits(self, loop) -> bool:
        """Whether new groups may start now (on top of the admission policy)."""
        return True

    def park(self, loop, sample) -> bool:
        """Take `sample` instead of an engine (True: the component holds it and places it later)."""
        return False

    def sync_targets(self, loop, engines: list) -> list:
        """The engines a weight push broadcasts to."""
        return engines

    def dp_size(self, loop, role: str, dp: int) -> int:
        """`role`'s data-parallel size now (`dp`: what the layout and earlier components say)."""
        return dp

    def before_batch(self, loop, step: int, timing: dict):
        """Before the trainer waits for its batch (a generator)."""
        yield from ()

    def after_batch(self, loop, step: int, timing: dict, batch):
        """Once the trainer holds its batch, before it trains (a generator)."""
        yield from ()

    def after_update(self, loop, step: int, timing: dict, batch, columns: dict):
        """After the loop's post-update work (a generator); adds its step columns to `columns`."""
        yield from ()


class Components:
    """The components plugged into one loop, and for each hook those that override it, in plug order."""

    def __init__(self):
        self.plugged: list[LoopComponent] = []
        self.hooked: dict[str, list[LoopComponent]] = {name: [] for name in HOOKS}

    def add(self, component: LoopComponent) -> None:
        self.plugged.append(component)
        for name in HOOKS:
            if getattr(type(component), name) is not getattr(LoopComponent, name):
                self.hooked[name].append(component)

    def admit(self, loop) -> bool:
        for c in self.hooked["admits"]:
            if not c.admits(loop):
                return False
        return True

    def park(self, loop, sample) -> bool:
        for c in self.hooked["park"]:
            if c.park(loop, sample):
                return True
        return False

    def sync_targets(self, loop, engines: list) -> list:
        for c in self.hooked["sync_targets"]:
            engines = c.sync_targets(loop, engines)
        return engines

    def dp_size(self, loop, role: str, dp: int) -> int:
        for c in self.hooked["dp_size"]:
            dp = c.dp_size(loop, role, dp)
        return dp
