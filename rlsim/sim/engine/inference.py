"""InferenceEngine: a vLLM/SGLang-style continuous-batching engine as one SimPy process.

Events happen only when the running batch changes (an admission, a completion, a preemption, an
abort, a pause): between two changes every running sequence gains one token per step, so the time
to the next change is a closed-form sum over steps (`DecodeCoefficients`). The engine never steps
token by token, so simulated cost grows with sequences, not with tokens.

Bookkeeping is O(1)/O(log n) per event: a global step counter `tick`, each running request's
finish tick in a heap, and the total running context S kept as `base + B * tick`. A request that
arrives mid-segment does not interrupt the process: the segment's end is re-planned to the end of
the step in flight (one timeout, no Interrupt event, no exception), and further arrivals in that
step change nothing, exactly as an engine's scheduler looks at its queue once per step.
"""

# size: one class, whose hot path (admission, decode segments) and the public methods schedules call (hold/release,
# step and prefill times, prefix sharing, a per-step overhead) share its slots; split, every turn would pay a hop.
from __future__ import annotations

import heapq
from collections import deque
from dataclasses import replace
from typing import Literal

import simpy

from rlsim.sim.costs.generation import DecodeCoefficients, PrefillCost, decode_coefficients
from rlsim.sim.costs.speculative import SpeculativeSteps
from rlsim.sim.engine.environment import SimEnvironment
from rlsim.sim.engine.prefix_cache import PrefixCache
from rlsim.sim.engine.request import Request
from rlsim.sim.hardware import HardwareProfile
from rlsim.sim.model_shapes import ModelShape
from rlsim.sim.scenario.schema import EngineSpec

ResumeMode = Literal["keep", "recompute"]


class EngineCapacityError(RuntimeError):
    """A single request needs more KV cache than the whole engine has (caught by validation normally)."""


class InferenceEngine:
    # Slots: 40-odd attributes are past what an instance dict shares among instances, and a private dict
    # leaves every method lookup on the engine unspecialised (about 17 per turn).
    __slots__ = (
        "env", "name", "model", "hw", "tp", "settings", "_max_num_seqs", "_max_batched_tokens", "_prefix_caching",
        "_chunked_prefill", "overheads", "_prefill_cost", "kv_capacity", "pool", "role", "_weight_version", "waiting",
        "running", "_heap", "_seq", "_tick", "_base", "_cache", "_coeffs", "_wake", "_decoding",
        "_segment", "_segment_end", "_segment_steps", "load_watch", "_pause_requested", "_resume_evt", "_resume_mode",
        "paused", "_busy_start", "_busy_step", "tokens_generated", "tokens_prefilled", "preemptions", "completed",
        "stats_columns", "process", "_keep", "_held", "_ep_layout", "_spec", "_prefill_pool", "_in_transit"
    )

    def __init__(
        self,
        env: SimEnvironment,
        name: str,
        model: ModelShape,
        hw: HardwareProfile,
        tp: int,
        settings: EngineSpec,
        kv_capacity_tokens: float,
        pool: str,
        role: str = "rollout",
        record_stats: bool = True,
        decode_cache: dict[int, DecodeCoefficients] | None = None,
        ep: int = 1,
        gpus_per_node: int = 8,
    ):
        self.env = env
        self.name = name
        self.model = model
        self.hw = hw
        self.tp = tp
        self.settings = settings
        # Limits read per turn, off the pydantic model (its __getattr__ makes each read a generic lookup).
        self._max_num_seqs, self._max_batched_tokens = settings.max_num_seqs, settings.max_num_batched_tokens
        self._prefix_caching, self._chunked_prefill = settings.enable_prefix_caching, settings.chunked_prefill
        self.overheads = settings.overheads(hw)  # the engine kind's per-step costs on this GPU
        self._ep_layout = (ep, gpus_per_node)  # expert parallelism and the node it is placed on (costs/moe.py)
        self._prefill_cost = PrefillCost(model, hw, tp, self.overheads, ep, gpus_per_node)
        self._spec = SpeculativeSteps.of(settings.speculative, model, hw, tp, self.overheads, ep, gpus_per_node)
        self.kv_capacity = float(kv_capacity_tokens)
        self.pool = pool
        self.role = role
        self._weight_version = 0  # set only by `resume` (weights load at a pause, or into an idle engine)
        self._prefill_pool = None  # prefill/decode disaggregation: the pool that prefills for this decode engine
        self._in_transit = 0  # requests submitted here that are still in the prefill pool or on the KV link
        env.ledger.add_group(name, pool, tp)

        self.waiting: deque[Request] = deque()
        self.running: dict[Request, None] = {}  # insertion-ordered: last = most recently admitted
        self._heap: list[tuple[int, int, Request]] = []
        self._seq = 0  # heap tie-breaker, per engine
        self._tick = 0
        self._base = 0  # sum over running of (context at join - tick at join)
        self._cache = PrefixCache()  # trajectory_id -> its last context's tokens, kept in KV
        # Decode coefficients per batch size; engines of one model/hardware/tp may share the table.
        self._coeffs: dict[int, DecodeCoefficients] = {} if decode_cache is None else decode_cache
        self._wake = None  # event an idle engine waits on
        self._decoding = False  # inside a decode segment whose end may still be re-planned
        self._segment: tuple[float, float, int, int, DecodeCoefficients] | None = None  # start, dt, s0, n, c
        self._segment_end: simpy.Event | None = None  # the event the process waits on to end the segment
        self._segment_steps = 0  # steps the segment will have run when it ends
        # Where `load` moves (submit, abort, admission: a prefilling request is in neither queue, prefill end, a
        # finish) the engine adds itself here: a schedule's least-loaded index shares one set among its engines
        # and re-reads only those in it. Until a schedule hands one over, a private set nobody reads.
        self.load_watch: set = set()
        self._keep: set | None = None  # while held (`hold`): the only requests admitted; the rest wait aside
        self._held: list[Request] = []
        self._pause_requested = None  # event to fire once paused
        self._resume_evt = None
        self._resume_mode: ResumeMode = "keep"
        self.paused = False
        self._busy_start: float | None = None
        self._busy_step = 0

        # Counters and optional time series (batch size / KV use at each batch change).
        self.tokens_generated = 0
        self.tokens_prefilled = 0
        self.preemptions = 0
        self.completed = 0
        # (time, running, KV tokens) at each batch change, as columns: no tuple per row for the collector to walk
        self.stats_columns: tuple[list[float], list[int], list[int]] | None = ([], [], []) if record_stats else None
        self.process = env.process(self._run())

    # ------------------------------------------------------------------ public API

    def submit(self, req: Request):
        """Queue a request; returns its `done` event (value: the request, also when aborted)."""
        env = self.env
        req.engine = self.name
        req.arrival_s = env.now
        req.done = done = env.event()
        self.load_watch.add(self)
        if self._prefill_pool is not None and not req.prefix_tokens:  # a later turn prefills its few tokens here
            self._in_transit += 1
            self._prefill_pool.submit(req, self)
            return done
        self.waiting.append(req)
        if len(self.running) < self._max_num_seqs:
            self._wake_up()
        return done

    def prefill_remotely(self, pool) -> None:
        """Decode only: first turns go to `pool` (engine/prefill_pool.py), which prefills them and moves their KV here
        (`deliver`); a request whose context holds earlier turns prefills its new tokens here."""
        self._prefill_pool = pool

    def deliver(self, req: Request) -> None:
        """`req`'s KV has arrived from the prefill pool: it waits for a slot and KV room, and runs without a
        prefill (an aborted request is dropped)."""
        self._in_transit -= 1
        if req.aborted:
            return
        req.remote_kv = True
        self.waiting.append(req)
        if len(self.running) < self._max_num_seqs:
            self._wake_up()

    def abort(self, req: Request) -> None:
        """Drop a request wherever it is; its KV is freed and `done` fires with `aborted` set."""
        if req.finished or req.aborted:
            return
        self.load_watch.add(self)
        if req in self.running:
            self._leave(req)
            self._wake_up()
        elif req in self.waiting:
            self.waiting.remove(req)
        elif req in self._held:  # held aside by a drain: it does not come back on `release`
            self._held.remove(req)
        req.aborted = True
        if req.done is not None:
            self.env.succeed_once(req.done, req)

    def pause(self):
        """Stop at the next step boundary (e.g. for a weight update); the returned event fires when paused."""
        if self._pause_requested is None:
            self._pause_requested = self.env.event()
            self._wake_up()
        return self._pause_requested

    def resume(self, version: int | None = None, mode: ResumeMode = "keep") -> None:
        """Continue after a pause, with the weights of `version` if given. `recompute` drops every KV (new weights)
        and re-prefills in-flight work. An engine with nothing running may load weights without a pause (it is
        woken, or starts a batch)."""
        if version is not None:
            if not self.paused and self.running:
                raise RuntimeError(f"{self.name}: weights load at a pause, not under {len(self.running)} running "
                                   "sequences")
            self._weight_version = version
        self._resume_mode = mode
        if self._resume_evt is not None:
            self.env.succeed_once(self._resume_evt)

    def close(self) -> None:
        self._idle()  # end of run: record a busy interval still open

    @property
    def max_num_seqs(self) -> int:
        """The most sequences the engine runs at once (its settings' `max_num_seqs`)."""
        return self._max_num_seqs

    @property
    def weight_version(self) -> int:
        """The policy version of the weights the engine decodes with (set by `resume`)."""
        return self._weight_version

    def hold(self, keep: set) -> None:
        """Admit only the requests in `keep` (a draining weight update lets in-flight work finish); any other
        request waits aside, out of the queue and out of `load`, until `release`."""
        self._keep = keep

    @property
    def holding(self) -> bool:
        """Whether the engine is held (`hold` without `release`) or keeps requests aside."""
        return self._keep is not None or bool(self._held)

    def release(self) -> None:
        """End of `hold`: the requests held aside go back to the head of the queue, in arrival order."""
        self._keep = None
        held, self._held = self._held, []
        self.waiting.extendleft(reversed(held))
        self.load_watch.add(self)
        if held and len(self.running) < self._max_num_seqs:
            self._wake_up()  # (a paused engine admits them when it resumes)

    def _hold_the_rest(self) -> None:
        keep, waiting = self._keep, self.waiting
        if any(r not in keep for r in waiting):
            rest = [r for r in waiting if r in keep]
            self._held.extend(r for r in waiting if r not in keep)
            waiting.clear()
            waiting.extend(rest)

    def generated_by_now(self, req: Request) -> int:
        """Tokens `req` has generated so far (the engine syncs `req.generated` only when the request leaves)."""
        if req in self.running:
            return req.gen_at_join + (self._tick - req.join_tick)
        return req.generated

    def step_time(self, batch: int, context: float) -> float:
        """Seconds of one decode step of `batch` running sequences holding `context` tokens in all."""
        c = self._coefficients(max(1, batch))
        return c.intercept + c.fixed + c.slope * context

    def prefill_time(self, new_tokens: float, new_tokens_sq: float) -> float:
        """Seconds of one prefill iteration over `new_tokens` new tokens (sum of squares `new_tokens_sq`)."""
        return self._prefill_cost.time(new_tokens, new_tokens_sq)

    def share_prefix(self, key, tokens: int) -> None:
        """Hold `tokens` of KV under `key` in the prefix cache for a request that reuses them (a group's prompt, a
        migrated sequence), as prefix caching would hold them (nothing when it is off); 0 forgets the entry."""
        if tokens > 0 and self._prefix_caching:
            self._cache.put(key, tokens)
        elif tokens <= 0:
            self._cache.drop(key)

    def add_step_overhead(self, extra_s: float, decode_cache: dict[int, DecodeCoefficients] | None = None) -> None:
        """Every step (decode and prefill) costs `extra_s` more (LoRA kernels). Engines given the same
        `decode_cache` share one decode-coefficient table, as identical replicas do."""
        self.overheads = replace(self.overheads, step_s=self.overheads.step_s + extra_s)
        self._prefill_cost = PrefillCost(self.model, self.hw, self.tp, self.overheads, *self._ep_layout)
        self._spec = SpeculativeSteps.of(self.settings.speculative, self.model, self.hw, self.tp, self.overheads,
                                         *self._ep_layout)
        self._coeffs = {} if decode_cache is None else decode_cache

    @property
    def kv_used(self) -> int:
        """KV tokens in use: held by the running sequences, plus the prefix cache's entries."""
        return self._kv_held() + self._cache.tokens

    @property
    def stats(self) -> list[tuple[float, int, int]] | None:
        """(time, running, KV tokens) at each batch change (None when not recorded)."""
        return None if self.stats_columns is None else list(zip(*self.stats_columns, strict=True))

    @property
    def load(self) -> int:
        return len(self.running) + len(self.waiting) + self._in_transit

    # ------------------------------------------------------------------ internals

    def _wake_up(self) -> None:
        """Tell the engine its batch may change: wake it if idle, cut its decode segment short if decoding."""
        if self._wake is not None:
            self.env.succeed_once(self._wake)
        elif self._decoding:
            self._decoding = False
            self._replan_segment()

    def _replan_segment(self) -> None:
        """End the running decode segment after the step in flight (at once if none is in flight).

        The process keeps waiting; only the event it waits on changes: its resume callback moves from
        the segment's timeout (left to expire unheard) to a timeout at the end of the step in flight,
        or, with no step in flight, to an urgent event now (where an Interrupt would have woken it)."""
        env = self.env
        start, dt, s0, n, c = self._segment
        wait = None
        now = env.now
        if now < start + dt:
            elapsed = now - start
            k = 0
            if elapsed > 0:
                k, t_k, t_next = c.steps_split(s0, elapsed, n, dt)  # steps done by now; when the next one ends
                if t_next is not None and t_k < elapsed:  # a step is in flight: finish it
                    k += 1
                    end = start + t_next
                    if end > now:
                        wait = end - now
            self._segment_steps = k
        self._segment_end = env.redirect(self.process, self._segment_end, wait)

    def _kv_held(self) -> int:
        """KV tokens the running sequences hold: the sum of their contexts, kept as `base + B * tick`."""
        return self._base + len(self.running) * self._tick

    def _coefficients(self, batch: int) -> DecodeCoefficients:
        c = self._coeffs.get(batch)
        if c is None:
            ep, gpn = self._ep_layout
            c = self._coeffs[batch] = decode_coefficients(self.model, self.hw, self.tp, batch, overheads=self.overheads,
                                                          ep=ep, gpus_per_node=gpn)
        return c

    def _flush_versions(self, req: Request) -> None:
        """Credit the tokens decoded since the last flush to the weight version that made them."""
        made = self._tick - req.seg_tick
        if made > 0:
            req.version_tokens[req.seg_version] = req.version_tokens.get(req.seg_version, 0) + made
        req.seg_tick = self._tick
        req.seg_version = self._weight_version

    def _join(self, req: Request) -> None:
        tick = self._tick
        req.join_tick = req.seg_tick = tick
        req.gen_at_join = req.generated
        req.seg_version = self._weight_version
        self.running[req] = None
        self._base += req.context_tokens - tick
        self._seq = seq = self._seq + 1
        req.heap_seq = seq
        heapq.heappush(self._heap, (tick + req.max_new_tokens - req.generated, seq, req))  # finish tick

    def _leave(self, req: Request) -> None:
        """Take a request out of the running batch, syncing its generated count."""
        self._flush_versions(req)
        tick, join_tick, gen_at_join = self._tick, req.join_tick, req.gen_at_join
        req.generated = gen_at_join + (tick - join_tick)  # what it has generated by now
        self._base -= gen_at_join + req.prefix_tokens + req.prompt_tokens - join_tick  # its context at join - tick
        del self.running[req]

    def _finish(self, req: Request) -> None:
        self.load_watch.add(self)  # it leaves `load`
        req.finished_s = self.env.now
        self.completed += 1
        if req.trajectory_id is not None and self._prefix_caching:
            self._cache.put(req.trajectory_id, req.context_tokens)
        if req.done is not None:
            self.env.succeed_once(req.done, req)

    def _busy(self) -> None:
        """Open a busy interval (or start a new one when the schedule has moved to another RL step)."""
        if self._busy_start is not None and self._busy_step != self.env.rl_step:
            self._idle()
        if self._busy_start is None:
            self._busy_start = self.env.now
            self._busy_step = self.env.rl_step

    def _idle(self) -> None:
        if self._busy_start is not None:
            self.env.ledger.record(
                self.name, self.role, "reward" if self.role == "reward" else "generate", self._busy_start, self.env.now,
                self._busy_step, self._weight_version,
            )
            self._busy_start = None

    # ------------------------------------------------------------------ admission and prefill

    def _admit(self) -> list[tuple[Request, int, int]]:
        """FIFO admission while a slot and KV are free; returns (request, new tokens, cached prefix).
        A first admission stamps `admitted_s`: its prefill starts now."""
        if self._keep is not None:
            self._hold_the_rest()
        admitted: list[tuple[Request, int, int]] = []
        max_seqs = self._max_num_seqs
        prefix_caching = self._prefix_caching
        waiting, running, capacity = self.waiting, self.running, self.kv_capacity
        pending = 0  # KV the requests admitted so far in this round will hold
        now = self.env.now
        watermark = 0.01 * capacity
        while waiting and len(running) + len(admitted) < max_seqs:
            req = waiting[0]
            cached = 0
            key = req.trajectory_id
            if (
                prefix_caching
                and key is not None
                and req.generated == 0
                and self._cache.get(key) >= req.prefix_tokens > 0
            ):
                cached = req.prefix_tokens
            new_tokens = req.context_tokens - cached
            # Room for its KV (plus the token the prefill emits) and one more decode step for the whole
            # batch, with vLLM's 1% watermark: a just-preempted request is not readmitted at once.
            batch = len(running) + len(admitted)
            headroom = (watermark if watermark > batch + 1 else batch + 1) if batch else 1  # max(), written out
            need = new_tokens + 1 + headroom
            if capacity - self.kv_used - pending < need:
                self._cache.evict_until(capacity, self._kv_held(), need + pending,
                                        keep=req.trajectory_id if cached else None)
                if capacity - self.kv_used - pending < need:  # (unchanged KV passed the test above)
                    if not running and not admitted:
                        raise EngineCapacityError(
                            f"{self.name}: a request needs {need} KV tokens but the engine holds "
                            f"{self.kv_capacity:.0f}"
                        )
                    break
            waiting.popleft()
            if req.admitted_s is None:
                req.admitted_s = now  # scheduled: its prefill starts now
            if key is not None:  # used now, or a stale (shorter) prefix recomputed anyway
                self._cache.drop(key)
            if req.remote_kv:  # its KV came from the prefill pool: nothing to prefill here
                req.remote_kv = False
                admitted.append((req, 0, 0))
            else:
                admitted.append((req, new_tokens, cached))
            pending += new_tokens + 1
        return admitted

    def _prefill_duration(self, admitted: list[tuple[Request, int, int]]) -> tuple[int, float]:
        """(iterations, seconds) of the round's prefill: chunks of at most max_num_batched_tokens new tokens."""
        total = sq = cross = 0  # integer sums, as exact as three separate ones
        for _, t, p in admitted:
            total += t
            sq += t * t
            cross += t * p
        return self._prefill_cost.rounds(total, float(sq), float(cross), self._max_batched_tokens)

    def _complete_prefill(self, admitted: list[tuple[Request, int, int]]) -> None:
        self.load_watch.add(self)  # back in `load`: running, or finished by the prefill's token
        now, version = self.env.now, self._weight_version
        for req, new_tokens, _ in admitted:
            if req.aborted:
                continue
            self.tokens_prefilled += new_tokens
            req.prefilled_tokens += new_tokens
            # The prefill pass emits the next token.
            req.generated += 1
            req.version_tokens[version] = req.version_tokens.get(version, 0) + 1
            self.tokens_generated += 1
            if req.first_token_s is None:
                req.first_token_s = now
            if req.generated >= req.max_new_tokens:  # nothing remaining
                self._finish(req)
            else:
                self._join(req)

    # ------------------------------------------------------------------ decode

    def _pop_completions(self) -> None:
        """Finish every running request whose finish tick has come, dropping stale heap entries on the way:
        requests that left the batch (preempted, aborted) or re-joined under a newer seq."""
        heap, running, tick = self._heap, self.running, self._tick
        while heap:
            finish_tick, seq, req = heap[0]
            if req in running and seq == req.heap_seq:
                if finish_tick > tick:
                    return
                heapq.heappop(heap)
                self._leave(req)
                self._finish(req)
            else:
                heapq.heappop(heap)  # stale: it left the batch, or re-joined under a newer seq

    def _preempt_one(self) -> None:
        """Recompute-mode preemption (vLLM default): the newest request gives back its KV."""
        victim = next(reversed(self.running))
        self._leave(victim)
        victim.preemptions += 1
        self.preemptions += 1
        self.waiting.appendleft(victim)

    # ------------------------------------------------------------------ the process

    def _pause_point(self):
        """Honour a pending pause: close the busy interval, wait for resume, apply the resume mode."""
        self._idle()
        for req in self.running:
            self._flush_versions(req)
        self.paused = True
        self._resume_evt = self.env.event()
        self._pause_requested.succeed(self)
        self._pause_requested = None
        yield self._resume_evt
        self.paused = False
        self._resume_evt = None
        for req in self.running:
            self._flush_versions(req)  # new segments under the new version
        if self._resume_mode == "recompute":
            # New weights invalidate every KV entry: in-flight sequences re-prefill their context.
            for req in reversed(list(self.running)):
                self._leave(req)
                self.waiting.appendleft(req)
            self._cache.clear()

    def _run(self):
        env, running, coeffs = self.env, self.running, self._coeffs
        record = self.stats_columns is not None
        if record:
            at, batch, kv = (column.append for column in self.stats_columns)
        while True:
            if self._pause_requested is not None:
                yield from self._pause_point()
                continue
            admitted = self._admit() if self.waiting else None
            if admitted:
                self.load_watch.add(self)  # out of `waiting`, into `running` only once prefilled
                if self._busy_start is None or self._busy_step != env.rl_step:  # (else busy already: no call)
                    self._busy()
                if record:  # the batch / KV time series
                    at(env.now)
                    batch(len(running))
                    kv(self.kv_used)
                iters, dt = self._prefill_duration(admitted)
                if not dt and self._prefill_pool is not None:  # every KV arrived by transfer: decode at once
                    self._complete_prefill(admitted)
                    continue
                if self._chunked_prefill and running:
                    # Chunks ride along with decode steps: running sequences keep decoding meanwhile.
                    n = self._decode_horizon(reserved=sum(r.context_tokens + 1 for r, _, _ in admitted))
                    steps = min(iters, n)
                    c = self._coefficients(b := len(running))
                    if self._spec is not None:  # a speculative step per token, at the batch's mean position
                        c = self._spec.per_token(c, b, self._kv_held() / b + steps / 2.0, self._weight_version)
                    dt += c.steps_time(self._kv_held(), steps) - steps * c.fixed
                    yield env.timeout(dt)
                    self._tick += steps  # every running sequence decoded `steps` tokens
                    self.tokens_generated += steps * len(running)
                    self._pop_completions()
                else:
                    yield env.timeout(dt)
                self._complete_prefill(admitted)
                continue
            if not running:
                self._idle()
                self._wake = env.event()
                yield self._wake
                self._wake = None
                continue
            n = self._decode_horizon()
            if n == 0:
                self._preempt_one()
                continue
            if self._busy_start is None or self._busy_step != env.rl_step:  # (else busy already: no call)
                self._busy()
            b = len(running)
            s0 = self._kv_held()
            if record:
                at(env.now)
                batch(b)
                kv(self.kv_used)
            c = coeffs.get(b) or self._coefficients(b)
            if self._spec is not None:  # a speculative step per token, at the batch's mean position half-way
                c = self._spec.per_token(c, b, s0 / b + n / 2.0, self._weight_version)
            dt = c.steps_time(s0, n)
            self._segment = (env.now, dt, s0, n, c)
            self._segment_steps = n
            self._segment_end = env.timeout(dt)
            self._decoding = True
            yield self._segment_end  # an arrival may re-plan it to end sooner (_replan_segment)
            self._decoding = False
            steps = self._segment_steps
            self._tick += steps  # every running sequence decoded `steps` tokens
            self.tokens_generated += steps * len(running)  # (an abort may have left mid-segment)
            self._pop_completions()

    def _decode_horizon(self, reserved: float = 0.0) -> int:
        """Steps until the next batch change: the first completion or the step that would overflow KV.

        `reserved` is KV already promised to requests whose prefill is in flight (chunked prefill).
        """
        heap, running = self._heap, self.running
        while True:  # the first live heap entry (a batch is running): drop stale ones as _pop_completions does
            finish_tick, seq, req = heap[0]
            if req in running and seq == req.heap_seq:
                break
            heapq.heappop(heap)
        b = len(running)
        n_done = finish_tick - self._tick
        free = self.kv_capacity - self.kv_used - reserved
        if free < n_done * b and self._cache.tokens:
            self._cache.evict_until(self.kv_capacity, self._kv_held(), n_done * b + reserved)
            free = self.kv_capacity - self.kv_used - reserved
        n_kv = int(free // b)
        if n_kv <= 0 and b == 1 and not reserved:
            raise EngineCapacityError(
                f"{self.name}: one sequence of {self._kv_held()} tokens fills the KV cache "
                f"({self.kv_capacity:.0f} tokens)"
            )
        n = n_kv if n_kv < n_done else n_done  # max(0, min(n_done, n_kv)) without the builtins (README, sixth pass)
        return n if n > 0 else 0
