"""Fully asynchronous RL (AReaL / ASearcher, verl fully_async): rollout never waits for training.

A rollout controller keeps prompt groups in flight on the inference engines, admitting a new group
only while the staleness rule allows it (AReaL's eta in versions, or verl fully_async's
staleness_threshold fraction of a sync's samples); each finished group goes to a buffer. The trainer
takes its batch of groups (AReaL: oldest first; verl: in queue order; neither drops stale samples
unless `drop_stale`), trains, and pushes the new weights: every engine pauses at its next step boundary,
the weights are broadcast, and in-flight sequences keep their KV, re-prefill with the new weights,
are aborted and resumed (or restarted), or (drain) run to completion before the weights load while
nothing new is admitted. Every token remembers the policy version that produced it.
"""

from __future__ import annotations

import math

import numpy as np
import simpy

from rlsim.sim.engine.request import Request
from rlsim.sim.results.collector import token_accounting
from rlsim.sim.schedules.affinity import GroupRouter
from rlsim.sim.schedules.groups import Group, Sample
from rlsim.sim.schedules.inflight import token_staleness
from rlsim.sim.schedules.least_loaded import LeastLoaded
from rlsim.sim.schedules.rl_base import Batch, RLSchedule
from rlsim.sim.schedules.trajectories import Trajectory, run_trajectory


class FullyAsyncSchedule(RLSchedule):
    def __init__(self, scenario, env):
        super().__init__(scenario, env)
        spec, algo = self.scenario.schedule, self.scenario.algorithm
        self.spec = spec
        self.batch_groups = spec.consumer_groups(algo)
        self.eta = spec.eta  # the staleness knob in effect (AReaL: versions; verl: a fraction)
        self.sync_every = spec.trigger_parameter_sync_step
        # Optimizer updates per epoch of a trainer step (verl: require_batches; else algorithm.mini_batches).
        self.mini_batches = max(1, spec.optimizer_updates(algo) // algo.epochs)
        # Admission counts groups per weight version the rollout sees: one version per sync.
        self.admit_unit = self.batch_groups * self.sync_every
        self.interrupt = spec.interrupt
        # verl fully_async: at most (1 + s) x trigger x require_batches x ppo_mini_batch_size groups per version.
        self.verl = spec.verl_rule
        self.max_required = int(self.admit_unit * (1 + (spec.staleness_threshold or 0.0))) if self.verl else None
        self.staleness_samples = 0  # verl: groups started this version + those in flight or queued at the sync
        self.admission_log: list[tuple[float, int, int]] = []  # (time, gid, staleness_samples after the start)
        self.sync_marks: list[tuple[float, int, int]] = []  # (time, first gid of the version, groups carried)
        self.drain_log: list[dict] = []  # drain mode: per engine and update, what was in flight and when
        self._held: dict[str, list[Request]] = {}
        self.draining = False
        self._last_drain_s: float | None = None
        self.running_groups = 0
        self.accepted_groups = 0
        self.buffer: list[Group] = []
        self._buffer_checked = (-1, 0)  # (policy version, n): the first n buffered groups were fresh at it
        self.rollout_version = 0
        self.syncs = 0  # weight pushes so far: the version index the admission rule counts in
        # Neither framework drops stale samples (both bound staleness at admission); `drop_stale` opts in.
        self.drop_stale = spec.drop_stale
        self._rollout_wake = None
        self._trainer_wake = None
        self._next_gid = 0
        self._live: dict[Request, Sample] = {}
        self.dropped_stale = 0
        self.tokens_discarded = 0
        self.trained_tokens = 0
        self.multi_version = 0
        self.stopping = False
        self._resubmit: list[Sample] = []
        self._by_load = LeastLoaded(self.engines)  # requests plus live trajectories pinned, per engine
        routing = spec.routing
        self.router = GroupRouter(self.engines, self._by_load, routing) if routing is not None else None
        self._engine_named = {e.name: e for e in self.engines}
        algo = self.scenario.algorithm
        self.reward_s = algo.rule_reward_s_per_sample if "reward" not in self.scenario.roles else 0.0
        self.reward_workers = simpy.Resource(env, capacity=algo.rule_reward_workers)
        self.samples_all: list[Sample] = []

    # ------------------------------------------------------------------ admission (AReaL's rule)

    def capacity(self) -> int:
        """How many more groups may start now (AReaL code form, or verl fully_async's rule)."""
        if self.draining:
            return 0  # a draining weight update admits nothing new
        if self.verl:
            return self._verl_capacity()
        cap = math.inf
        if self.spec.max_concurrent_rollouts is not None:
            cap = self.spec.max_concurrent_rollouts - self.running_groups
        if self.eta is not None:
            limit = math.floor((self.eta + self.syncs + 1) * self.admit_unit + 1e-9)
            cap = min(cap, limit - (self.accepted_groups + self.running_groups))
        if cap is math.inf:  # unbounded staleness and no concurrency cap: at most 4 trainer steps in flight
            cap = 4 * self.batch_groups - self.running_groups
        return max(0, int(cap))

    def _verl_capacity(self) -> int:
        """verl's rollouter: pause while staleness_samples >= max_required_samples or the queue is full.

        verl 0.9.1 verl/experimental/fully_async_policy/fully_async_rollouter.py: max_required_samples =
        int(required_samples x (staleness_threshold + 1) x trigger_parameter_sync_step), the queue holds
        max_required_samples, and max_concurrent_samples = min(replicas x 16, max_required_samples).
        """
        if len(self.buffer) >= self.max_required:
            return 0
        conc = self.spec.max_concurrent_rollouts or min(16 * len(self.engines), self.max_required)
        return max(0, min(self.max_required - self.staleness_samples, conc - self.running_groups))

    def _wake(self, attr: str) -> None:
        ev = getattr(self, attr)
        if ev is not None:
            self.env.succeed_once(ev)

    def _least_loaded(self):
        """The engine with the fewest requests plus live trajectories pinned to it (sticky multi-turn)."""
        return self._by_load.pick()

    def _launch_group(self) -> None:
        env, scn = self.env, self.scenario
        g = Group(self._next_gid, self.rollout_version, env.now)
        self._next_gid += 1
        if self.verl:
            self.staleness_samples += 1
        self.admission_log.append((env.now, g.gid, self.staleness_samples))
        agent = scn.workload.agent
        size = self.group_launch_size()
        if agent is not None:
            prompt = int(scn.workload.prompt_length.sample(env.rng, 1)[0])
            g.pending = size
            for turns in agent.turns.sample(env.rng, size):
                s = Sample(len(self.samples_all), g, prompt, 0)
                self.samples_all.append(s)
                self.collector.sample_started(s.sid, None, prompt, env.now)
                g.samples.append(s)
                s.trajectory = Trajectory(s.sid, prompt, int(turns))
                engine = self._least_loaded()
                self._by_load.add(engine, +1)
                proc = env.process(run_trajectory(env, engine, self.tools, agent, s.trajectory,
                                                  on_request=self._track_turn))
                proc.callbacks.append(lambda _ev, s=s: self._trajectory_done(s))
            self.running_groups += 1
            return
        prompts, responses = self.lengths(1, size, self.rollout_version)  # the policy version that generates
        for p, r in zip(prompts, responses, strict=True):
            s = Sample(len(self.samples_all), g, int(p), int(r))
            self.samples_all.append(s)
            self.collector.sample_started(s.sid, None, s.prompt_tokens, env.now)
            g.samples.append(s)
            self._submit(s)
        g.pending = len(g.samples)
        self.running_groups += 1

    def group_launch_size(self) -> int:
        """Samples launched per prompt group (ROLL adds redundant episodes)."""
        return self.scenario.algorithm.samples_per_prompt

    def cancel(self, s: Sample, why: str) -> None:
        """Stop a sample that is still running: abort its request; a trajectory stops at its next turn."""
        if s.finished:
            return
        s.outcome = s.fate = "aborted"
        s.reason = why
        self.collector.sample_discarded(s.sid, f"aborted: {why}")
        if s.trajectory is not None:
            s.trajectory.cancelled = True
        req = s.request
        if req is not None and not req.finished and not req.aborted:
            engine = self._engine_named[req.engine]
            self._live.pop(req, None)
            engine.abort(req)
            if s.trajectory is None:
                self._absorb(s, req)
        if s.trajectory is None:
            self.tokens_discarded += s.generated
            self._sample_finished(s)

    def _track_turn(self, req: Request, traj) -> None:
        """The request a trajectory's current turn runs as (for token accounting of in-flight turns)."""
        self.samples_all[traj.tid].request = req

    def _trajectory_done(self, s: Sample) -> None:
        t = s.trajectory
        self._by_load.add(self._engine_named[t.engine], -1)
        s.generated = t.generated
        s.observation_tokens = t.observation_tokens
        s.version_tokens = dict(t.version_tokens)
        if s.fate is None:
            s.outcome = s.fate = t.outcome
            s.reason = t.reason
        if s.outcome != "completed":
            self.tokens_discarded += t.generated  # failed or aborted: its decoding is wasted
            self.collector.sample_discarded(s.sid, f"{s.outcome}: {s.reason}")
        self._sample_finished(s)

    def _submit(self, s: Sample) -> None:
        """Send a sample's remaining work to the least-loaded engine (continuing from its partial output),
        or a fresh sample where group-affinity routing puts it."""
        if self.router is not None and s.generated == 0:
            engine, req = self.router.route(s, self.next_request_id())
        else:
            engine = self._least_loaded()
            req = Request(self.next_request_id(), s.prompt_tokens, s.response_tokens - s.generated,
                          prefix_tokens=s.generated)
        s.request = req
        self._live[req] = s
        engine.submit(req)
        req.done.callbacks.append(self._on_done)

    def _on_done(self, event) -> None:
        req = event.value
        if self.router is not None:
            self.router.finished(req)
        s = self._live.pop(req, None)
        if s is None or req.aborted:
            return  # an aborted request: the weight update resubmits or discards its sample
        self._absorb(s, req)
        self._sample_finished(s)

    def _sample_finished(self, s: Sample) -> None:
        if s.finished:
            return
        if s.fate is None and s.outcome == "completed" and not s.judged and (self.judges or self.reward_s > 0):
            s.judged = True  # sample-level scoring: rewarded as soon as it finishes, off the trainer's path
            self.env.process(self._judge_sample(s) if self.judges else self._rule_score(s))
            return
        s.finished = True
        if s.fate is None:
            s.fate = s.outcome
        if s.request is not None:
            self.collector.sample_finished(s.sid, s.request, s.generated + s.observation_tokens, s.version_tokens)
        g = s.group
        g.pending -= 1
        if not g.closed and not g.closing and self._group_ready(g):
            self._group_complete(g)

    def _rule_score(self, s: Sample):
        """A rule reward on the CPU reward-worker pool (a real queue of `rule_reward_workers`)."""
        with self.reward_workers.request() as slot:
            yield slot
            yield self.env.timeout(self.reward_s)
        self._sample_finished(s)

    def _judge_sample(self, s: Sample):
        yield from self.judge(np.array([s.prompt_tokens + s.generated + s.observation_tokens]))
        self._sample_finished(s)

    def _group_ready(self, g: Group) -> bool:
        """A group is complete when every sample has ended (ROLL: when enough have)."""
        return g.pending == 0

    def _group_complete(self, g: Group) -> None:
        """All of a group's samples are in: it joins the training buffer."""
        if not g.closed:
            g.closed = True
            g.finished_s = self.env.now
            self.running_groups -= 1
            self.accepted_groups += 1
            self.buffer.append(g)
            self._wake("_trainer_wake")
            self._wake("_rollout_wake")

    def discard_group(self, g: Group, reason: str) -> None:
        """The one group-discard routine: its finished samples are dropped, their tokens counted as waste."""
        for s in g.samples:
            if s.fate == "completed":
                s.fate, s.reason = "dropped", reason
                self.tokens_discarded += s.generated
                self.collector.sample_discarded(s.sid, reason)

    @staticmethod
    def _absorb(s: Sample, req: Request) -> None:
        s.generated += req.generated
        for v, n in req.version_tokens.items():
            s.version_tokens[v] = s.version_tokens.get(v, 0) + n

    def rollout_loop(self):
        env = self.env
        while not self.stopping:
            for _ in range(self.capacity()):
                self._launch_group()
            self._rollout_wake = env.event()
            yield self._rollout_wake
            self._rollout_wake = None

    # ------------------------------------------------------------------ weight updates

    def _gate(self, engine, keep: set) -> None:
        """Drain: the engine admits only `keep` (its in-flight requests); anything else waits, held aside."""
        held = self._held.setdefault(engine.name, [])

        def hold_the_rest():
            if any(r not in keep for r in engine.waiting):
                rest = [r for r in engine.waiting if r in keep]
                held.extend(r for r in engine.waiting if r not in keep)
                engine.waiting.clear()
                engine.waiting.extend(rest)

        engine.admission_gate = hold_the_rest

    def _ungate(self, engine) -> None:
        """End of a drain: the held requests go back to the head of the queue, in arrival order."""
        engine.admission_gate = None
        held = self._held.pop(engine.name, [])
        engine.waiting.extendleft(reversed(held))
        self._by_load.touch(engine)  # its queue changed from outside the engine

    def _drain(self):
        """AReaL's non-interruptible update: every engine finishes what it is running; nothing new starts."""
        env = self.env
        self.draining = True
        waits = []
        for e in self.engines:
            keep = set(e.running) | {r for r in e.waiting if r.admitted_s is not None}  # incl. preempted
            self._gate(e, keep)
            self.drain_log.append({"engine": e.name, "start": env.now, "in_flight": list(keep),
                                   "version": e.weight_version})
            waits.extend(r.done for r in keep)
        if waits:
            yield env.all_of(waits)

    def _update_weights(self):
        """Pause every engine, broadcast the weights, resume with the interruption mode."""
        env = self.env
        start = env.now
        mode = self.interrupt
        if mode == "drain":
            drain_from = len(self.drain_log)
            yield from self._drain()
            self._last_drain_s = env.now - start
        yield env.all_of([e.pause() for e in self.engines])
        yield from self.broadcast_weights()
        self.rollout_version = env.policy_version
        self.syncs += 1
        if mode in ("abort-resume", "abort-discard"):
            for e in self.engines:
                for req in [*e.running, *e.waiting]:
                    s = self._live.pop(req, None)
                    e.abort(req)
                    if s is None:
                        continue
                    self._absorb(s, req)
                    if mode == "abort-discard":  # the partial output is thrown away: restart from scratch
                        self.tokens_discarded += s.generated
                        s.generated = 0
                        s.version_tokens.clear()
                    self._resubmit.append(s)
        if mode == "drain":
            for e in self.engines:
                self._ungate(e)
            for rec in self.drain_log[drain_from:]:
                rec["resumed"], rec["new_version"] = env.now, self.rollout_version
            self.draining = False
        for e in self.engines:
            e.resume(version=self.rollout_version, mode="recompute" if mode == "recompute" else "keep")
        for s in self._resubmit:
            self._submit(s)
        self._resubmit.clear()
        if self.verl:  # verl's reset_staleness: what is in flight or queued counts toward the new version
            self.staleness_samples = self.running_groups + len(self.buffer)
            self.sync_marks.append((env.now, self._next_gid, self.staleness_samples))
        self._wake("_rollout_wake")
        return env.now - start

    # ------------------------------------------------------------------ trainer

    def _take_batch(self) -> list[Group] | None:
        """Oldest groups first; samples beyond the staleness bound are dropped, not trained.

        The trainer looks each time a group finishes; a group found fresh and trainable stays so until
        the policy version moves (its samples are sealed), so only groups added since are examined.
        """
        version, checked = self._buffer_checked
        start = checked if version == self.env.policy_version else 0
        new = self.buffer[start:]
        examined = len(new)
        if self.eta is not None and self.drop_stale:
            keep = []
            for g in new:
                stale = self.env.policy_version - min(s.oldest_version for s in g.samples)
                if stale > self.eta:
                    g.taken_s = self.env.now
                    self.dropped_stale += len(g.samples)
                    self.discard_group(g, "stale")
                    self.accepted_groups -= 1  # a rejected group frees its admission slot (AReaL)
                else:
                    keep.append(g)
            if len(keep) < len(new):
                self._wake("_rollout_wake")
            new = keep
        dead = [g for g in new if all(s.outcome != "completed" for s in g.samples)]
        if dead:  # a group whose every trajectory failed has nothing to train on: it frees its slot
            self.accepted_groups -= len(dead)
            new = [g for g in new if g not in dead]
            self._wake("_rollout_wake")
        if len(new) < examined:
            self.buffer = self.buffer[:start] + new
        self._buffer_checked = (self.env.policy_version, len(self.buffer))
        if len(self.buffer) < self.batch_groups:
            return None
        if not self.verl:  # AReaL: oldest first; verl's message queue is FIFO (finish order)
            self.buffer.sort(key=lambda g: (g.start_version, g.finished_s, g.gid))
        batch, self.buffer = self.buffer[: self.batch_groups], self.buffer[self.batch_groups:]
        self._buffer_checked = (self.env.policy_version, len(self.buffer))
        for g in batch:
            g.taken_s = self.env.now
        if self.verl:
            self._wake("_rollout_wake")  # a slot in verl's queue freed
        return batch

    def before_steps(self):
        for e in self.engines:
            e.weight_version = 0
        self.env.process(self.rollout_loop())
        self._preempted = 0
        yield from ()

    def rollout(self, step: int, timing: dict):
        """The trainer's side of the buffer: wait for a batch of finished groups (AReaL: within eta)."""
        env = self.env
        self._step_start = env.now
        while (groups := self._take_batch()) is None:
            self._trainer_wake = env.event()
            yield self._trainer_wake
            self._trainer_wake = None
        timing["timing_s/wait_rollout"] = env.now - self._step_start
        self._last_drain_s = None
        samples = [s for g in groups for s in g.samples if s.outcome == "completed"]
        prompt = np.array([s.prompt_tokens for s in samples])
        generated = np.array([s.generated for s in samples])
        response = generated + np.array([s.observation_tokens for s in samples])
        version = env.policy_version
        stale = np.array([version - s.oldest_version for s in samples])
        for s in samples:
            s.trained_step, s.trained_version = step, version
        multi = int(sum(len(s.version_tokens) > 1 for s in samples))
        self.multi_version += multi
        self.trained_tokens += int(generated.sum())
        # Rewards were computed per sample during rollout (rule workers or the judge engines).
        return Batch(prompt, response, [s.sid for s in samples], ("reward",), {
            "staleness/mean": float(stale.mean()), "staleness/max": int(stale.max()),
            "staleness/p50": float(np.percentile(stale, 50)), "staleness/p90": float(np.percentile(stale, 90)),
            "samples/multi_version": multi,
            "samples/dropped_stale": self.dropped_stale,  # drops happen only when a batch is taken
            "trainer/prompt_groups": len(groups),
            "trainer/optimizer_updates": self.mini_batches * self.scenario.algorithm.epochs,
            **(self.router.step_columns() if self.router is not None else {}),
            **(token_staleness(samples, version) if getattr(self.spec, "in_flight_weight_updates", False) else {}),
        })

    def after_update(self, step: int, timing: dict, batch: Batch):
        """Every `trigger_parameter_sync_step` updates: pause the engines and push the new weights."""
        env = self.env
        if (step + 1) % self.sync_every == 0:
            timing["timing_s/sync_rollout_weights"] = yield from self._update_weights()
            if self._last_drain_s is not None:
                timing["timing_s/drain_rollout"] = self._last_drain_s  # part of the sync
        preempted = sum(e.preemptions for e in self.engines)
        self._preemptions, self._preempted = preempted - self._preempted, preempted
        return {
            "trainer/idle_ratio": timing["timing_s/wait_rollout"] / max(env.now - self._step_start, 1e-12),
        }

    def after_steps(self):
        """What the run leaves unfinished is accounted for, not lost."""
        self.stopping = True
        self._wake("_rollout_wake")
        for s in self.samples_all:
            if s.fate is None:
                s.fate, s.reason = "aborted", "in flight at end of run"
            if s.trajectory is not None:
                self.collector.trajectory(s.trajectory, s.fate, s.reason)
        totals = self.token_accounting()
        self.collector.tokens(totals["tokens_generated"], totals["tokens_trained"], totals["tokens_discarded"])
        yield from ()

    def token_accounting(self) -> dict:
        """This run's token accounting so far (rlsim.sim.results.collector.token_accounting)."""
        return token_accounting(sum(e.tokens_generated for e in self.engines), self.trained_tokens,
                                self.tokens_discarded)
