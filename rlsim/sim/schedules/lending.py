"""verl V1's GPU lending ("switch"), a component of the asynchronous rollout loop (loop_components.py).

verl V1 (schedules/verl_v1.py) is the fully asynchronous loop (a rollout controller, a buffer of finished
prompt groups, a trainer that pushes weights every `parameter_sync_step` steps, an off-policy bound in
versions) with this component plugged in:

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
from rlsim.sim.schedules.loop_components import LoopComponent

POLL_INTERVAL_S = 2.0  # a wait longer than verl's replay-buffer poll interval counts as idle (trainer_separate_async)


def build_lendable(scn, env, memory: float | None = None) -> list:
    """Sleeping engines on the trainer's GPUs, of the rollout role's size and settings (`memory`: their own
    gpu_memory_utilization instead of the rollout engine's)."""
    actor, rollout = scn.roles["actor"], scn.roles["rollout"]
    eng = rollout.engine
    if memory is not None:
        eng = eng.model_copy(update={"gpu_memory_utilization": memory})
    hw, model, tp = role_hardware(scn, actor), eng.shape(scn.models[rollout.model]), rollout.parallel.tp
    capacity = eng.kv_capacity(model, hw, tp)
    shared: dict = {}
    gpn = scn.cluster.pools[actor.pool].gpus_per_node
    return [InferenceEngine(env, f"lent-{i}", model, hw, tp, eng, capacity, pool=actor.pool, role="rollout",
                            decode_cache=shared, ep=rollout.parallel.ep, gpus_per_node=gpn)
            for i in range(scn.role_gpus("actor") // tp)]


class Lending(LoopComponent):
    """verl V1's GPU lending as a component of the asynchronous loop.

    `colocated`: the loop's engines are the trainer's (colocate_async); otherwise they are standalone and,
    with `build`, sleeping engines are built on the trainer's GPUs (lending, or re-splitting's engines).
    `switch` (hybrid_rollout) holds verl's rule; lending decisions run only with `switch.enable_switch`.
    """

    def __init__(self, loop, colocated: bool, switch: SwitchSpec, build: bool, memory: float | None = None):
        self.loop, self.colocated, self.switch = loop, colocated, switch
        if colocated:
            self.standalone, self.lendable = [], list(loop.engines)
        else:
            self.standalone = list(loop.engines)
            self.lendable = build_lendable(loop.scenario, loop.env, memory) if build else []
            loop.engines.extend(self.lendable)
            loop.balancer.add(self.lendable, awake=False)
        for e in self.lendable:  # engines on the trainer's GPUs take work only while lent (awake)
            loop.balancer.sleep(e)
        self.lends = switch.enable_switch and not colocated  # separate_async with switch: verl's rule decides
        self.lent = False
        self.parked: list = []  # samples waiting for an engine (colocated, while the GPUs train)
        self.lend_log: list[dict] = []  # one record per decision (after each step): the rule's inputs
        self.moved = 0  # sequences taken off reclaimed engines, partial output kept
        window = switch.switch_cost_window_size
        self.to_rollout_s: deque = deque(maxlen=window)  # the last switches' durations, each way
        self.to_trainer_s: deque = deque(maxlen=window)
        self.ratio = switch.switch_threshold_ratio
        self._idle_steps = self._calm_steps = 0
        self.wait_s = 0.0  # all waits for samples so far, and the groups missing when each began
        self.wait_groups = 0
        self._version_wait_s = 0.0  # waits for samples since the last decision (verl: over its whole step)
        self._missing = 0

    # ------------------------------------------------------------------ where work may run (hooks)

    def admits(self, loop) -> bool:
        return bool(loop.balancer.awake)

    def park(self, loop, sample) -> bool:
        if loop.balancer.awake:
            return False
        self.parked.append(sample)
        return True

    def sync_targets(self, loop, engines: list) -> list:
        """Only standalone engines receive a broadcast; engines on the trainer's GPUs get the weights by
        the switch into generation (a reshard)."""
        return self.standalone

    def start(self, loop):
        """separate_async with switch: the hybrid engines start in rollout mode (verl: after initialisation)."""
        if self.lends:
            self._activate()
        yield from ()

    # ------------------------------------------------------------------ verl's switch rule

    def threshold(self) -> int:
        """Sampleable groups before the GPUs return to training: the ratio of verl's train batch (the groups of
        one weight version, `parameter_sync_step` trainer steps), at least one trainer step's batch."""
        step_batch = self.loop.batch_groups
        train_batch = step_batch * self.loop.sync_every
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
            self.ratio = max(1.0 / self.loop.sync_every, self.ratio - sw.switch_threshold_step_down)

    def decide(self, had_idle: bool) -> dict:
        """After a step: lend for the next one iff groups remain to wait for and the benefit beats the cost."""
        loop = self.loop
        if self.switch.adaptive_switch_threshold:
            self._adapt(had_idle)
        remaining = max(0, self.threshold() - len(loop.buffer))
        per_group = self.wait_s / self.wait_groups if self.wait_groups else None
        hybrid, standalone = loop.scenario.role_gpus("actor"), loop.scenario.role_gpus("rollout")
        benefit = None if per_group is None else remaining * per_group * hybrid / (hybrid + standalone)
        cost = None
        if self.to_rollout_s and self.to_trainer_s:
            cost = sum(self.to_rollout_s) / len(self.to_rollout_s) + sum(self.to_trainer_s) / len(self.to_trainer_s)
        lend = remaining > 0 and (benefit is None or cost is None or benefit > cost)
        record = {"time": loop.env.now, "threshold": self.threshold(), "remaining": remaining,
                  "benefit_seconds": benefit, "effective_switch_cost_seconds": cost, "lend": lend}
        self.lend_log.append(record)
        return record

    def _lend(self, timing: dict):
        """Switch the trainer's GPUs into generation; set-aside, queued and new sequences run there."""
        loop, env = self.loop, self.loop.env
        start = env.now
        yield env.timeout(loop.switch_to_generate_time() + self.switch.engine_start_s)
        loop.mark_busy("actor", "actor", "switch", start)
        self._activate()
        self.to_rollout_s.append(env.now - start)
        timing["timing_s/switch_to_rollout"] = env.now - start

    def _activate(self) -> None:
        loop = self.loop
        for e in self.lendable:
            e.resume(version=loop.env.policy_version)  # the trainer's own weights, resharded
            loop.balancer.wake(e)
        self.lent = True
        parked, self.parked = self.parked, []
        for e in self.standalone:  # the balancer re-dispatches the samples the standalone engines have not started
            parked += loop.withdraw(e, [r for r in e.waiting if r.admitted_s is None and loop.serves_sample(r)])
        for s in parked:
            loop.submit(s)
        loop.wake_rollout()

    def _reclaim(self, timing: dict):
        """Take the GPUs back for training: stop the lent engines at a step boundary, move their sequences
        (partial output kept) to the standalone engines or set them aside, switch back."""
        loop, env = self.loop, self.loop.env
        start = env.now
        moved = yield from self.put_to_sleep(self.lendable)
        self.lent = False
        for s in moved:
            loop.submit(s)
        back = env.now
        yield env.timeout(loop.switch_to_train_time())
        loop.mark_busy("actor", "actor", "switch", back)
        self.to_trainer_s.append(env.now - start)
        timing["timing_s/switch_to_trainer"] = env.now - start

    def put_to_sleep(self, engines: list):
        """Stop `engines` at a step boundary and take their sequences off them, partial output kept; they
        take no work until woken. Returns the samples to place elsewhere."""
        loop = self.loop
        yield loop.env.all_of([e.pause() for e in engines])
        moved = []
        for e in engines:
            loop.balancer.sleep(e)
            moved += loop.withdraw(e, [*e.running, *e.waiting])
            e.resume(mode="keep")
        self.moved += len(moved)
        return moved

    # ------------------------------------------------------------------ the step (hooks)

    def before_batch(self, loop, step: int, timing: dict):
        """colocated: generate on the trainer's GPUs; separate: lent GPUs return at the threshold."""
        env = loop.env
        self._missing = max(0, loop.batch_groups - len(loop.buffer))  # verl: counted as sampling begins
        if self.colocated:
            yield from self._lend(timing)
        elif self.lent:
            wait_from = env.now
            yield from loop.until_buffered(self.threshold())
            timing["timing_s/switch_wait"] = env.now - wait_from
            yield from self._reclaim(timing)

    def after_batch(self, loop, step: int, timing: dict, batch):
        """colocated: take the GPUs back for training; the wait for samples feeds the benefit estimate."""
        if self.lent:  # colocated
            yield from self._reclaim(timing)
        waited = timing.get("timing_s/switch_wait", 0.0) + timing["timing_s/wait_rollout"]
        if self._missing and waited > 0:
            self.wait_s += waited
            self.wait_groups += self._missing
        self._version_wait_s += waited

    def after_update(self, loop, step: int, timing: dict, batch, columns: dict):
        """verl decides in on_step_end, once per verl step: parameter_sync_step local updates (rlsim's trainer
        steps), then one weight push. Deciding after every local update would reclaim and wait for the
        threshold (a share of the whole version's batch) k times a version."""
        if not self.lends:
            return
        record = {"lend": False}  # inside a version: no decision, the GPUs stay with the trainer
        if (step + 1) % loop.sync_every == 0:
            record = self.decide(self._version_wait_s > POLL_INTERVAL_S)
            self._version_wait_s = 0.0
        if record["lend"]:
            yield from self._lend(timing)
        columns.update({"lending/lent": int(record["lend"]),
                        "lending/benefit_s": record.get("benefit_seconds") or 0.0,
                        "lending/switch_cost_s": record.get("effective_switch_cost_seconds") or 0.0})
