"""PrefillPool: the prefill engines of a prefill/decode-disaggregated rollout, as SimPy processes feeding the decode
engines (docs/rollout-quantisation.md, Prefill/decode disaggregation).

A decode engine hands each first turn it is given to the pool (`InferenceEngine.submit`). Every prefill engine of the
pool takes the oldest waiting prompts, as many as one engine step admits (`max_num_seqs`, and
`max_num_batched_tokens` of prompt, at least one prompt), prefills them in one batch (`pd_disagg.prefill_batch_time`,
the rounds an engine's own admission pays) and starts moving their KV to their decode engines
(`pd_disagg.kv_transfer_time`) while it takes its next batch. The engine's links carry one batch after another; when
a batch's KV has arrived, each decode engine queues its requests (`InferenceEngine.deliver`) and admits them without
a prefill. Events: one per prefill batch and one per transfer, never one per token or per request.

Not modelled: the prefill engines' KV held for prefilled prompts not yet pulled by a decode engine (the pool never
waits for it), a pause of the prefill engines for a weight update (their weights follow the decode engines'), and
prefix caching on the prefill side (later agentic turns prefill on their decode engine).
"""

from __future__ import annotations

from collections import deque

from rlsim.sim.costs.generation import PrefillCost
from rlsim.sim.costs.pd_disagg import kv_bytes, kv_transfer_time, prefill_batch_time
from rlsim.sim.engine.environment import SimEnvironment
from rlsim.sim.engine.request import Request
from rlsim.sim.hardware import HardwareProfile
from rlsim.sim.model_shapes import ModelShape
from rlsim.sim.scenario.schema import EngineSpec


class PrefillPool:
    """`count` prefill engines of `tp` GPUs sharing one queue of prompts; their KV goes out over `link`."""

    def __init__(self, env: SimEnvironment, names: list[str], model: ModelShape, hw: HardwareProfile, tp: int,
                 settings: EngineSpec, link: str, pool: str, role: str = "rollout", ep: int = 1,
                 gpus_per_node: int = 8):
        self.env = env
        self.role = role
        self._model, self._hw, self._tp, self._link = model, hw, tp, link
        self._cost = PrefillCost(model, hw, tp, settings.overheads(hw), ep, gpus_per_node)
        self._max_seqs, self._max_tokens = settings.max_num_seqs, settings.max_num_batched_tokens
        self.queue: deque[tuple[Request, object]] = deque()
        self._idle: list = []  # wake events of the prefill engines waiting for prompts
        self.tokens_prefilled = 0
        self.kv_bytes_moved = 0.0
        self.batches = 0
        self.transfer_s = 0.0  # link time, summed over batches
        for name in names:
            env.ledger.add_group(name, pool, tp)
            env.process(self._run(name))

    def submit(self, req: Request, engine) -> None:
        """Queue `req`'s prompt for prefill; its KV goes to `engine` (a decode engine) once done."""
        self.queue.append((req, engine))
        if self._idle:
            self.env.succeed_once(self._idle.pop())

    def _take(self) -> list[tuple[Request, object]]:
        """The oldest prompts one engine step admits (aborted ones dropped): `max_num_seqs` of them and at most
        `max_num_batched_tokens` of prompt, but at least one prompt."""
        queue, batch, tokens = self.queue, [], 0
        while queue and len(batch) < self._max_seqs:
            req, engine = queue[0]
            if req.aborted:
                queue.popleft()
                engine.deliver(req)  # (dropped there; its in-transit count goes)
                continue
            if batch and tokens + req.prompt_tokens > self._max_tokens:
                break
            queue.popleft()
            batch.append((req, engine))
            tokens += req.prompt_tokens
        return batch

    def _run(self, name: str):
        env, link_free = self.env, 0.0
        while True:
            batch = self._take() if self.queue else None
            if not batch:
                wake = env.event()
                self._idle.append(wake)
                yield wake
                continue
            start, step = env.now, env.rl_step
            lengths = [req.prompt_tokens for req, _ in batch]
            for req, _ in batch:
                if req.admitted_s is None:
                    req.admitted_s = start  # scheduled: its prefill starts now
            yield env.timeout(prefill_batch_time(self._cost, lengths, self._max_tokens))
            env.ledger.record(name, self.role, "generate", start, env.now, step, batch[0][1].weight_version)
            tokens = sum(lengths)
            self.tokens_prefilled += tokens
            for req, _ in batch:
                req.prefilled_tokens += req.prompt_tokens
            self.batches += 1
            # The KV leaves on this engine's links after any batch still on them, while the engine prefills on.
            move = kv_transfer_time(self._model, self._hw, tokens, self._link, self._tp)
            self.kv_bytes_moved += kv_bytes(self._model, tokens)
            self.transfer_s += move
            link_free = (link_free if link_free > env.now else env.now) + move
            arrived = env.timeout(link_free - env.now)
            arrived.callbacks.append(lambda _event, batch=batch: self._deliver(batch))

    @staticmethod
    def _deliver(batch: list[tuple[Request, object]]) -> None:
        for req, engine in batch:
            engine.deliver(req)
