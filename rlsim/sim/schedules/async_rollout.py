"""The asynchronous rollout loop: rollout never waits for training; the rules come from policies.

A rollout controller keeps prompt groups in flight on the inference engines, admitting a new group
while the admission policy allows it; a group complete by the completion policy goes to a buffer
(or, filtered, is dropped). The trainer takes its batch of groups (the expiry policy first discards
what is too old, the selection policy orders the buffer and trims the batch), trains, and pushes the
new weights: every engine pauses at its next step boundary, the weights are broadcast, and in-flight
sequences keep their KV, re-prefill with the new weights, are aborted and resumed (or restarted), or
(drain) run to completion before the weights load while nothing new is admitted. Every token
remembers the policy version that produced it. The policies: schedules/rollout_policies.py; the
compositions: schedules/fully_async.py (AReaL, verl fully_async) and schedules/roll.py (ROLL).
"""

from __future__ import annotations

import heapq
from bisect import bisect_right

import numpy as np

from rlsim.sim.engine.request import Request
from rlsim.sim.results.collector import token_accounting
from rlsim.sim.results.lifecycle import ABORTED, COMPLETED, DROPPED, RUNNING, TRAINED, Reason, SampleState, advance
from rlsim.sim.schedules.affinity import GroupRouter
from rlsim.sim.schedules.groups import Group, Sample
from rlsim.sim.schedules.inflight import token_staleness
from rlsim.sim.schedules.least_loaded import LoadBalancer
from rlsim.sim.schedules.loop_components import Components, LoopComponent
from rlsim.sim.schedules.rl_base import Batch, RLSchedule
from rlsim.sim.schedules.rollout_policies import RolloutPolicies
from rlsim.sim.schedules.trajectories import Trajectory, run_trajectory
from rlsim.sim.staleness import TRAINER_STEPS, Staleness, StalenessUnit


class AsyncRolloutSchedule(RLSchedule):
    """The loop; a framework's schedule passes the policies it is composed of."""

    def __init__(self, scenario, env, policies: RolloutPolicies):
        super().__init__(scenario, env)
        spec, algo = self.scenario.schedule, self.scenario.algorithm
        self.spec = spec
        self.admission, self.completion = policies.admission, policies.completion
        self.expiry, self.selection = policies.expiry, policies.selection
        self.batch_groups = spec.consumer_groups(algo)
        self.sync_every = spec.trigger_parameter_sync_step
        # Admission counts groups per weight version the rollout sees: one version per sync.
        self.admit_unit = self.batch_groups * self.sync_every
        self.interrupt = spec.interrupt
        self.admission_log: list[tuple[float, int, int]] = []  # (time, gid, staleness_samples after the start)
        self.sync_marks: list[tuple[float, int, int]] = []  # (time, first gid of the version, groups carried)
        self.drain_log: list[dict] = []  # drain mode: per engine and update, what was in flight and when
        self.draining = False
        self._last_drain_s: float | None = None
        self.running_groups = 0
        self.accepted_groups = 0
        self.buffer: list[Group] = []
        self._buffer_checked = (-1, 0)  # (policy version, n): the first n buffered groups were fresh at it
        self.rollout_version = 0
        self.syncs = 0  # weight pushes so far: the version index the admission rule counts in
        self.sync_steps = [0]  # the trainer step (policy version) of the weights of each weight version
        # Neither framework drops stale samples (both bound staleness at admission); `drop_stale` opts in
        # (the expiry policy then drops them).
        self.drop_stale = spec.drop_stale
        self._rollout_wake = None
        self._trainer_wake = None
        self.groups_started = 0
        self._live: dict[Request, Sample] = {}
        self.dropped_stale = 0  # samples the expiry policy dropped for age (drop_stale)
        self.filtered_groups = 0  # complete groups the completion policy filtered out
        self.tokens_discarded = 0
        self.trained_tokens = 0
        self.multi_version = 0
        self.stopping = False
        self._resubmit: list[Sample] = []
        self.step_start_s = 0.0  # when the trainer began waiting for its current batch
        # Where new work goes (requests plus live trajectories pinned, per awake engine): one balancer for the loop
        # and the router; lending and re-splitting add their engines to it.
        self.balancer = LoadBalancer(env, self.engines)
        routing = spec.routing
        self.router = GroupRouter(self.balancer, routing) if routing is not None else None
        algo = self.scenario.algorithm
        self.reward_s = algo.rule_reward_s_per_sample if "reward" not in self.scenario.roles else 0.0
        self.reward_free_at = [0.0] * algo.rule_reward_workers  # a heap: when each CPU reward worker frees
        self.samples_all: list[Sample] = []
        self.components = Components()  # what the schedule plugs in (schedules/loop_components.py)

    def plug(self, component: LoopComponent) -> LoopComponent:
        """Attach a component: the loop calls its hooks from now on, after those plugged before it."""
        self.components.add(component)
        return component

    # ------------------------------------------------------------------ rollout

    def capacity(self) -> int:
        """How many more groups may start now (the admission policy, unless a component stops admission)."""
        return self.admission.capacity(self) if self.components.admit(self) else 0

    def _wake(self, attr: str) -> None:
        ev = getattr(self, attr)
        if ev is not None:
            self.env.succeed_once(ev)

    def wake_rollout(self) -> None:
        """Let the rollout controller look at the admission policy again."""
        self._wake("_rollout_wake")

    def wake_trainer(self) -> None:
        """Let the trainer look at the buffer again."""
        self._wake("_trainer_wake")

    def until_buffered(self, groups: int):
        """Wait (a generator) until the buffer holds `groups` finished groups."""
        while len(self.buffer) < groups:
            self._trainer_wake = self.env.event()
            yield self._trainer_wake
            self._trainer_wake = None

    def _launch_group(self) -> None:
        env, scn = self.env, self.scenario
        g = Group(self.groups_started, self.rollout_version, env.now)
        self.groups_started += 1
        self.admission.launched(self)
        self.admission_log.append((env.now, g.gid, self.admission.staleness_samples))
        agent = scn.workload.agent
        size = self.completion.launch_size(self)
        if agent is not None:
            prompt = int(scn.workload.prompt_length.sample(env.rng, 1)[0])
            g.pending = size
            for turns in self.turns(size, self.rollout_version):
                s = Sample(len(self.samples_all), g, prompt, 0)
                self.samples_all.append(s)
                self.collector.sample_started(s.sid, None, prompt, env.now)
                g.samples.append(s)
                s.trajectory = Trajectory(s.sid, prompt, int(turns), step=self.rollout_version)
                engine = self.balancer.pick()
                self.balancer.pin(engine)
                proc = env.process(run_trajectory(env, engine, self.tools, agent, s.trajectory,
                                                  on_request=self._track_turn, balancer=self.balancer))
                proc.callbacks.append(lambda _ev, s=s: self._trajectory_done(s))
            self.running_groups += 1
            return
        prompts, responses = self.lengths(1, size, self.rollout_version)  # the policy version that generates
        for p, r in zip(prompts, responses, strict=True):
            s = Sample(len(self.samples_all), g, int(p), int(r))
            self.samples_all.append(s)
            self.collector.sample_started(s.sid, None, s.prompt_tokens, env.now)
            g.samples.append(s)
            self.submit(s)
        g.pending = len(g.samples)
        self.running_groups += 1

    def cancel(self, s: Sample, why: str) -> None:
        """Stop a sample that is still running: abort its request; a trajectory stops at its next turn."""
        if s.finished:
            return
        if s.state is ABORTED:  # a trajectory cancelled before, not yet at its next turn: the latest reason stands
            s.reason = why
        else:
            advance(s, ABORTED, why)
        self.collector.sample_discarded(s.sid, ABORTED, why)
        if s.trajectory is not None:
            s.trajectory.cancelled = True
        req = s.request
        if req is not None and not req.finished and not req.aborted:
            engine = self.balancer.engine(req.engine)
            self._live.pop(req, None)
            engine.abort(req)
            if s.trajectory is None:
                self.absorb(s, req)
        if s.trajectory is None:
            self.tokens_discarded += s.generated
            self._sample_finished(s)

    def _track_turn(self, req: Request, traj) -> None:
        """The request a trajectory's current turn runs as (for token accounting of in-flight turns)."""
        self.samples_all[traj.tid].request = req

    def _trajectory_done(self, s: Sample) -> None:
        t = s.trajectory
        self.balancer.pin(self.balancer.engine(t.engine), -1)
        s.generated = t.generated
        s.observation_tokens = t.observation_tokens
        s.version_tokens = dict(t.version_tokens)
        if s.state is RUNNING and t.state is not COMPLETED:
            advance(s, t.state, t.reason)  # a finished trajectory stays running until it is scored
        if s.state is not RUNNING:
            self.tokens_discarded += t.generated  # failed or aborted: its decoding is wasted
            self.collector.sample_discarded(s.sid, s.state, s.reason)
        self._sample_finished(s)

    def submit(self, s: Sample) -> None:
        """Send a sample's remaining work to the least-loaded engine (continuing from its partial output),
        or a fresh sample where group-affinity routing puts it (unless a component parks it)."""
        if self.components.park(self, s):
            return
        if self.router is not None and s.generated == 0:
            engine, req = self.router.route(s, self.next_request_id())
        else:
            engine = self.balancer.pick()
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
        self.absorb(s, req)
        self._sample_finished(s)

    def _sample_finished(self, s: Sample) -> None:
        if s.finished:
            return
        if s.state is RUNNING and not s.judged and (self.judges or self.reward_s > 0):
            s.judged = True  # sample-level scoring: rewarded as soon as it finishes, off the trainer's path
            if self.judges:
                self.env.process(self._judge_sample(s))
            else:
                self._rule_score(s)
            return
        s.finished = True
        if s.state is RUNNING:
            advance(s, COMPLETED)
        if s.request is not None:
            self.collector.sample_finished(s.sid, s.request, s.generated + s.observation_tokens, s.version_tokens)
        g = s.group
        g.pending -= 1
        if not g.closed and not g.closing and self.completion.ready(self, g):
            self._group_complete(g)

    def _rule_score(self, s: Sample) -> None:
        """A rule reward on the CPU reward-worker pool, a first-come first-served queue of `rule_reward_workers`
        with a fixed service time: the sample takes the worker that frees first, so its score is known now
        (one event per sample, where a SimPy resource would take four)."""
        start = max(self.env.now, self.reward_free_at[0])
        heapq.heapreplace(self.reward_free_at, start + self.reward_s)
        done = self.env.timeout(start + self.reward_s - self.env.now)
        done.callbacks.append(lambda _event: self._sample_finished(s))

    def _judge_sample(self, s: Sample):
        yield from self.judge(np.array([s.prompt_tokens + s.generated + s.observation_tokens]))
        self._sample_finished(s)

    def _group_complete(self, g: Group) -> None:
        """Enough of a group's samples are in: it joins the training buffer, or is filtered out."""
        if g.closed:
            return
        g.closed = True
        g.finished_s = self.env.now
        self.running_groups -= 1
        if self.completion.filtered(self, g):
            self.filtered_groups += 1
            self.discard_group(g, Reason.FILTERED)
            self.wake_rollout()  # a replacement group may start
            return
        self.accepted_groups += 1
        self.buffer.append(g)
        self.wake_trainer()
        self.wake_rollout()

    def discard(self, s: Sample, state: SampleState, reason: str) -> None:
        """A completed sample is not trained: its tokens are counted as waste."""
        advance(s, state, reason)
        self.tokens_discarded += s.generated
        self.collector.sample_discarded(s.sid, state, reason)

    def discard_group(self, g: Group, reason: str) -> None:
        """The one group-discard routine: its completed samples are dropped."""
        for s in g.samples:
            if s.state is COMPLETED:
                self.discard(s, DROPPED, reason)

    @staticmethod
    def absorb(s: Sample, req: Request) -> None:
        """What an aborted or finished request generated joins its sample's token history."""
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

    def serves_sample(self, req: Request) -> bool:
        """Whether `req` is a sample's own request (not an agent's turn)."""
        return req in self._live

    def withdraw(self, engine, requests: list[Request]) -> list[Sample]:
        """Abort `requests` on `engine`; the samples they served keep their partial output and are returned, to be
        placed again. An agent's turn ends its trajectory, unless its engine was put to sleep first: then the
        trajectory takes the turn elsewhere itself (schedules/trajectories.py)."""
        out = []
        for req in requests:
            s = self._live.pop(req, None)
            engine.abort(req)
            if s is not None:
                self.absorb(s, req)
                out.append(s)
        return out

    def _drain(self):
        """AReaL's non-interruptible update: every engine finishes what it is running; nothing new starts."""
        env = self.env
        self.draining = True
        waits = []
        for e in self.engines:
            keep = set(e.running) | {r for r in e.waiting if r.admitted_s is not None}  # incl. preempted
            e.hold(keep)
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
        self.sync_steps.append(env.policy_version)
        if mode in ("abort-resume", "abort-discard"):
            for e in self.engines:
                for s in self.withdraw(e, [*e.running, *e.waiting]):
                    if mode == "abort-discard":  # the partial output is thrown away: restart from scratch
                        self.tokens_discarded += s.generated
                        s.generated = 0
                        s.version_tokens.clear()
                    self._resubmit.append(s)
        if mode == "drain":
            for e in self.engines:
                e.release()
            for rec in self.drain_log[drain_from:]:
                rec["resumed"], rec["new_version"] = env.now, self.rollout_version
            self.draining = False
        for e in self.engines:
            e.resume(version=self.rollout_version, mode="recompute" if mode == "recompute" else "keep")
        for s in self._resubmit:
            self.submit(s)
        self._resubmit.clear()
        self.admission.synced(self)
        self.wake_rollout()
        return env.now - start

    def broadcast_weights(self, engines: list | None = None):
        """The push to `engines` (all), less those the components leave out; nothing to push to costs nothing."""
        targets = self.components.sync_targets(self, self.engines if engines is None else engines)
        return (yield from super().broadcast_weights(targets)) if targets else 0.0

    def dp_size(self, name) -> int:
        return self.components.dp_size(self, name, super().dp_size(name))

    # ------------------------------------------------------------------ trainer

    def take_batch(self) -> list[Group] | None:
        """The trainer's look at the buffer: what is too old goes, then a batch in the selection's order.

        The trainer looks each time a group finishes; a group found fresh and trainable stays so until
        the policy version moves (its samples are sealed), so only groups added since are examined.
        """
        self.expiry.expire(self)
        version, checked = self._buffer_checked
        start = checked if version == self.env.policy_version else 0
        new = self.buffer[start:]
        examined = len(new)
        new = self.expiry.screen(self, new)
        dead = [g for g in new if all(s.state is not COMPLETED for s in g.samples)]
        if dead:  # a group whose every trajectory failed has nothing to train on: it frees its slot
            self.accepted_groups -= len(dead)
            new = [g for g in new if g not in dead]
            self.wake_rollout()
        if len(new) < examined:
            self.buffer = self.buffer[:start] + new
        self._buffer_checked = (self.env.policy_version, len(self.buffer))
        if len(self.buffer) < self.batch_groups:
            return None
        self.selection.order(self.buffer)
        batch, self.buffer = self.buffer[: self.batch_groups], self.buffer[self.batch_groups:]
        self._buffer_checked = (self.env.policy_version, len(self.buffer))
        for g in batch:
            g.taken_s = self.env.now
        self.admission.taken(self)
        self.selection.trim(self, batch)
        return batch

    def age(self, policy_version: int, unit: StalenessUnit) -> Staleness:
        """How old weights of trainer step `policy_version` are now: in trainer steps, or in weight versions
        (pushes since the push that carried them; weights given to engines between pushes, e.g. lent ones,
        count as the last push before them)."""
        if unit is TRAINER_STEPS:
            return Staleness(self.env.policy_version - policy_version, unit)
        return Staleness(self.syncs - (bisect_right(self.sync_steps, policy_version) - 1), unit)

    def buffer_changed(self) -> None:
        """The buffer changed other than by groups joining it: the trainer examines all of it again."""
        self._buffer_checked = (-1, 0)

    def before_steps(self):
        for c in self.components.hooked["start"]:
            yield from c.start(self)
        self.env.process(self.rollout_loop())
        self._preempted = 0

    def rollout(self, step: int, timing: dict):
        """The trainer's side of the buffer, between the components' before- and after-batch hooks."""
        for c in self.components.hooked["before_batch"]:
            yield from c.before_batch(self, step, timing)
        batch = yield from self._take_batch_when_ready(step, timing)
        for c in self.components.hooked["after_batch"]:
            yield from c.after_batch(self, step, timing, batch)
        return batch

    def _take_batch_when_ready(self, step: int, timing: dict):
        """Wait for a batch of finished groups (AReaL: within eta); it becomes the trainer's batch."""
        env = self.env
        self.step_start_s = env.now
        while (groups := self.take_batch()) is None:
            self._trainer_wake = env.event()
            yield self._trainer_wake
            self._trainer_wake = None
        timing["timing_s/wait_rollout"] = env.now - self.step_start_s
        self._last_drain_s = None
        samples = [s for g in groups for s in g.samples if s.state is COMPLETED]
        prompt = np.array([s.prompt_tokens for s in samples])
        generated = np.array([s.generated for s in samples])
        response = generated + np.array([s.observation_tokens for s in samples])
        version = env.policy_version
        stale = np.array([version - s.oldest_version for s in samples])
        for s in samples:
            s.trained_step, s.trained_version = step, version
            advance(s, TRAINED)
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
            **(token_staleness(samples, version) if self.spec.token_staleness else {}),
        })

    def after_update(self, step: int, timing: dict, batch: Batch):
        """Every `trigger_parameter_sync_step` updates: pause the engines and push the new weights."""
        env = self.env
        if (step + 1) % self.sync_every == 0:
            timing["timing_s/sync_rollout_weights"] = yield from self._update_weights()
            if self._last_drain_s is not None:
                timing["timing_s/drain_rollout"] = self._last_drain_s  # part of the sync
        preempted = sum(e.preemptions for e in self.engines)
        self.step_preemptions, self._preempted = preempted - self._preempted, preempted
        columns = {"trainer/idle_ratio": timing["timing_s/wait_rollout"] / max(env.now - self.step_start_s, 1e-12)}
        for c in self.components.hooked["after_update"]:
            yield from c.after_update(self, step, timing, batch, columns)
        return columns

    def after_steps(self):
        """What the run leaves unfinished is accounted for, not lost."""
        self.stopping = True
        self.wake_rollout()
        for s in self.samples_all:
            if s.state is RUNNING:
                advance(s, ABORTED, Reason.END_OF_RUN)
            if s.trajectory is not None:
                self.collector.trajectory(s.trajectory, s.state, s.reason)
        totals = self.token_accounting()
        self.collector.tokens(totals["tokens_generated"], totals["tokens_trained"], totals["tokens_discarded"])
        yield from ()

    def token_accounting(self) -> dict:
        """This run's token accounting so far (rlsim.sim.results.collector.token_accounting)."""
        return token_accounting(sum(e.tokens_generated for e in self.engines), self.trained_tokens,
                                self.tokens_discarded)
