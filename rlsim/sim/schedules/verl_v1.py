"""verl's V1 trainer: `colocate_async` and `separate_async` with GPU lending ("switch").

Built on the fully asynchronous machinery (a rollout controller, a buffer of finished prompt groups, a
trainer that pushes weights every `parameter_sync_step` steps, an off-policy bound in versions):

- `colocate_async`: the rollout engines sit on the actor's GPUs. They generate until the trainer's batch
  is sampleable; then the trainer takes the GPUs back: the engines stop at a step boundary, their
  in-flight sequences are set aside with their partial output (partial rollout), the GPUs switch to
  training, train, and switch back into generation with the new weights (the switch is the reshard),
  where the set-aside sequences continue. The first batch is generated before any training (warm-up).
- `separate_async`: standalone rollout GPUs generate all the time; the trainer's GPUs train. With
  `hybrid_rollout.enable_switch`, engines of the trainer's size are built on its GPUs and sleep. After
  each step verl's rule (schema: SwitchSpec; verl 0.9.1 trainer_separate_async.py) decides whether they
  join generation for the next one; they return when `threshold` groups are sampleable: their sequences
  move, with their partial output, to the standalone engines, and none is lost. Each switch's measured
  duration feeds the effective switch cost; each wait for samples feeds the benefit estimate.
"""

from __future__ import annotations

from collections import deque

from rlsim.sim.engine.fleet import role_hardware
from rlsim.sim.engine.inference import InferenceEngine
from rlsim.sim.scenario.schema import SwitchSpec
from rlsim.sim.schedules.fully_async import FullyAsyncSchedule
from rlsim.sim.schedules.least_loaded import LeastLoaded

ASLEEP = 1 << 40  # load pinned on a sleeping engine: the least-loaded pick never chooses it
POLL_INTERVAL_S = 2.0  # a wait longer than verl's replay-buffer poll interval counts as idle (trainer_separate_async)


class VerlV1Schedule(FullyAsyncSchedule):
    def __init__(self, scenario, env):
        super().__init__(scenario, env)
        spec = self.spec
        self.colocated = getattr(spec, "trainer_mode", "separate_async") == "colocate_async"
        self.switch = getattr(spec, "hybrid_rollout", None) or SwitchSpec()
        if self.colocated:
            self.standalone, self.lendable = [], list(self.engines)
        else:
            self.standalone = list(self.engines)
            self.lendable = self._build_lendable() if self.lends() else []
            self.engines.extend(self.lendable)
            self._by_load = LeastLoaded(self.engines)
            self._engine_named = {e.name: e for e in self.engines}
        for e in self.lendable:
            self._by_load.add(e, ASLEEP)
        self.lent = False
        self.parked: list = []  # samples waiting for an engine (colocated, while the GPUs train)
        self.lend_log: list[dict] = []  # one record per decision (after each step): the rule's inputs
        self.moved = 0  # sequences taken off reclaimed engines, partial output kept
        window = self.switch.switch_cost_window_size
        self._to_rollout: deque = deque(maxlen=window)
        self._to_trainer: deque = deque(maxlen=window)
        self.ratio = self.switch.switch_threshold_ratio
        self._idle_steps = self._calm_steps = 0
        self._wait_s = 0.0  # all waits for samples so far, and the groups missing when each began
        self._wait_groups = 0
        self._had_idle = False

    def lends(self) -> bool:
        """Whether engines are built on the trainer's GPUs (lending; re-splitting overrides)."""
        return self.switch.enable_switch

    def _build_lendable(self) -> list:
        """Sleeping engines on the trainer's GPUs, of the rollout role's size and settings."""
        scn, env = self.scenario, self.env
        actor, rollout = scn.roles["actor"], scn.roles["rollout"]
        eng = rollout.engine
        hw, model, tp = role_hardware(scn, actor), eng.shape(scn.models[rollout.model]), rollout.parallel.tp
        capacity = eng.kv_capacity(model, hw, tp)
        shared: dict = {}
        gpn = scn.cluster.pools[actor.pool].gpus_per_node
        return [InferenceEngine(env, f"lent-{i}", model, hw, tp, eng, capacity, pool=actor.pool, role="rollout",
                                decode_cache=shared, ep=rollout.parallel.ep, gpus_per_node=gpn)
                for i in range(scn.role_gpus("actor") // tp)]

    # ------------------------------------------------------------------ where work may run

    def _accepting(self) -> bool:
        return bool(self.standalone) or self.lent

    def capacity(self) -> int:
        return super().capacity() if self._accepting() else 0

    def submit(self, s) -> None:
        if self._accepting():
            super().submit(s)
        else:
            self.parked.append(s)

    def broadcast_weights(self, engines: list | None = None):
        """Only standalone engines receive a broadcast; engines on the trainer's GPUs get the weights by
        the switch into generation (a reshard)."""
        if self.standalone:
            return (yield from super().broadcast_weights(self.standalone))
        return 0.0

    # ------------------------------------------------------------------ verl's switch rule

    def threshold(self) -> int:
        """Sampleable groups before the GPUs return to training: the ratio of verl's train batch (the groups of
        one weight version, `parameter_sync_step` trainer steps), at least one trainer step's batch."""
        step_batch = self.batch_groups
        train_batch = step_batch * self.sync_every
        return min(max(round(self.ratio * train_batch), step_batch), train_batch)

    def _adapt(self, had_idle: bool) -> None:
        sw = self.switch
        if had_idle:
            self._calm_steps = 0
            self._idle_steps = min(self._idle_steps + 1, sw.switch_threshold_release_steps)
            if self._idle_steps >= sw.switch_threshold_release_steps:
                self.ratio = min(1.0, self.ratio + sw.switch_threshold_step_up)
            return
        self._idle_steps = 0
        self._calm_steps = min(self._calm_steps + 1, sw.switch_threshold_release_steps)
        if self._calm_steps >= sw.switch_threshold_release_steps:
            self.ratio = max(1.0 / self.sync_every, self.ratio - sw.switch_threshold_step_down)

    def decide(self, had_idle: bool) -> dict:
        """After a step: lend for the next one iff groups remain to wait for and the benefit beats the cost."""
        if self.switch.adaptive_switch_threshold:
            self._adapt(had_idle)
        remaining = max(0, self.threshold() - len(self.buffer))
        per_group = self._wait_s / self._wait_groups if self._wait_groups else None
        hybrid, standalone = self.scenario.role_gpus("actor"), self.scenario.role_gpus("rollout")
        benefit = None if per_group is None else remaining * per_group * hybrid / (hybrid + standalone)
        cost = None
        if self._to_rollout and self._to_trainer:
            cost = sum(self._to_rollout) / len(self._to_rollout) + sum(self._to_trainer) / len(self._to_trainer)
        lend = remaining > 0 and (benefit is None or cost is None or benefit > cost)
        record = {"time": self.env.now, "threshold": self.threshold(), "remaining": remaining,
                  "benefit_seconds": benefit, "effective_switch_cost_seconds": cost, "lend": lend}
        self.lend_log.append(record)
        return record

    def _lend(self, timing: dict):
        """Switch the trainer's GPUs into generation; set-aside, queued and new sequences run there."""
        env = self.env
        start = env.now
        yield env.timeout(self.switch_to_generate_time() + self.switch.engine_start_s)
        self.mark_busy("actor", "actor", "switch", start)
        self._activate()
        self._to_rollout.append(env.now - start)
        timing["timing_s/switch_to_rollout"] = env.now - start

    def _activate(self) -> None:
        for e in self.lendable:
            e.weight_version = self.env.policy_version  # the trainer's own weights, resharded
            self._by_load.add(e, -ASLEEP)
        self.lent = True
        parked, self.parked = self.parked, []
        for e in self.standalone:  # the balancer re-dispatches what the standalone engines have not started
            for req in [r for r in e.waiting if r.admitted_s is None]:
                s = self._live.pop(req, None)
                e.abort(req)
                if s is not None:
                    self.absorb(s, req)
                    parked.append(s)
        for s in parked:
            super().submit(s)
        self._wake("_rollout_wake")

    def _reclaim(self, timing: dict):
        """Take the GPUs back for training: stop the lent engines at a step boundary, move their sequences
        (partial output kept) to the standalone engines or set them aside, switch back."""
        env = self.env
        start = env.now
        moved = yield from self.put_to_sleep(self.lendable)
        self.lent = False
        for s in moved:
            self.submit(s)
        back = env.now
        yield env.timeout(self.switch_to_train_time())
        self.mark_busy("actor", "actor", "switch", back)
        self._to_trainer.append(env.now - start)
        timing["timing_s/switch_to_trainer"] = env.now - start

    def put_to_sleep(self, engines: list):
        """Stop `engines` at a step boundary and take their sequences off them, partial output kept; they
        take no work until woken. Returns the samples to place elsewhere."""
        yield self.env.all_of([e.pause() for e in engines])
        moved = []
        for e in engines:
            self._by_load.add(e, ASLEEP)
            for req in [*e.running, *e.waiting]:
                s = self._live.pop(req, None)
                e.abort(req)
                if s is not None:
                    self.absorb(s, req)
                    moved.append(s)
            e.resume(mode="keep")
        self.moved += len(moved)
        return moved

    # ------------------------------------------------------------------ the step

    def before_steps(self):
        """separate_async with switch: the hybrid engines start in rollout mode (verl: after initialisation)."""
        if self.switch.enable_switch and not self.colocated:
            self._activate()
        yield from super().before_steps()

    def _until_sampleable(self, groups: int):
        while len(self.buffer) < groups:
            self._trainer_wake = self.env.event()
            yield self._trainer_wake
            self._trainer_wake = None

    def rollout(self, step: int, timing: dict):
        """colocated: generate, then take the GPUs back; separate: lent GPUs return at the threshold."""
        env = self.env
        missing = max(0, self.batch_groups - len(self.buffer))  # verl: counted as sampling begins
        if self.colocated:
            yield from self._lend(timing)
        elif self.lent:
            wait_from = env.now
            yield from self._until_sampleable(self.threshold())
            timing["timing_s/switch_wait"] = env.now - wait_from
            yield from self._reclaim(timing)
        batch = yield from super().rollout(step, timing)
        if self.lent:  # colocated
            yield from self._reclaim(timing)
        waited = timing.get("timing_s/switch_wait", 0.0) + timing["timing_s/wait_rollout"]
        if missing and waited > 0:
            self._wait_s += waited
            self._wait_groups += missing
        self._had_idle = waited > POLL_INTERVAL_S
        return batch

    def after_update(self, step: int, timing: dict, batch):
        columns = yield from super().after_update(step, timing, batch)
        if self.switch.enable_switch and not self.colocated:
            record = self.decide(self._had_idle)
            if record["lend"]:
                yield from self._lend(timing)
            columns.update({"lending/lent": int(record["lend"]),
                            "lending/benefit_s": record["benefit_seconds"] or 0.0,
                            "lending/switch_cost_s": record["effective_switch_cost_seconds"] or 0.0})
        return columns
