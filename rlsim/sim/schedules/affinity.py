"""Group-affinity routing for asynchronous GRPO: the answers of one prompt share its prefix.

A rollout controller that spreads each request to the least-loaded engine prefills a group's prompt
once per engine it lands on; routing the group to the engine that already holds the prompt's KV (the
prefix cache) prefills it once. vLLM recomputes at least the prompt's last token to get logits, so a hit
prefills 1 token instead of the whole prompt. Three policies:

- `least-loaded`: each request to the engine with the fewest requests (hits only by chance);
- `affinity`: a group's first request to the least-loaded engine, the rest to that engine;
- `affinity-bounded`: as affinity, unless the holder would carry more than (1 + load_bound) x the mean
  load (consistent hashing with bounded loads), when the request goes to the least-loaded engine.

Each step reports the affinity hits, the prefill tokens they saved (as the engines counted them) and
the load imbalance (max / mean requests per engine, averaged over the step's routing decisions).
"""

from __future__ import annotations

from rlsim.sim.engine.request import Request


class GroupRouter:
    """Picks an engine for each fresh request of a prompt group; counts hits, saved prefill, imbalance."""

    def __init__(self, engines: list, by_load, spec) -> None:
        self.engines = engines
        self.by_load = by_load
        self.policy = spec.policy
        self.bound = spec.load_bound
        self._named = {e.name: e for e in engines}
        self._gid = -1  # the group being launched (its requests are routed together, at one instant)
        self._holders: set = set()  # engines that prefill its prompt
        self._reset()

    def _reset(self) -> None:
        self.hits = 0
        self.saved = 0
        self.decisions = 0
        self.imbalance = 0.0

    def _choose(self, holders: set):
        least = self.by_load.pick()
        if not holders or self.policy == "least-loaded":
            return least
        holder = min(holders, key=lambda e: (e.load, e.name))
        if self.policy == "affinity":
            return holder
        total = sum(e.load for e in self.engines) + 1  # the bounded-load rule counts the request being placed
        return holder if holder.load + 1 <= (1 + self.bound) * total / len(self.engines) else least

    def route(self, sample, rid: int):
        """(engine, request) for a sample's first request; a hit reuses the prompt's KV on the engine."""
        if sample.group.gid != self._gid:
            self._gid, self._holders = sample.group.gid, set()
        holders = self._holders
        engine = self._choose(holders)
        p = sample.prompt_tokens
        if engine in holders and p > 1:
            key = ("group-prefix", sample.sid)
            req = Request(rid, 1, sample.response_tokens, prefix_tokens=p - 1, trajectory_id=key)
            share_prefix(engine, key, p - 1)
            self.hits += 1
        else:
            req = Request(rid, p, sample.response_tokens)
            holders.add(engine)
        self.decisions += 1
        loads = [e.load for e in self.engines]
        loads[self.engines.index(engine)] += 1  # the request about to be submitted
        mean = sum(loads) / len(loads)
        self.imbalance += max(loads) / mean
        return engine, req

    def finished(self, req: Request) -> None:
        """A routed request ended: count the prefill it skipped; forget the KV entry it leaves behind."""
        if req.trajectory_id is not None:
            if req.admitted_s is not None:  # an abort before admission saved nothing
                self.saved += max(0, req.prefix_tokens + req.prompt_tokens - req.prefilled_tokens)
            share_prefix(self._named[req.engine], req.trajectory_id, 0)

    def step_columns(self) -> dict:
        cols = {"routing/affinity_hits": self.hits, "routing/prefill_saved_tokens": self.saved,
                "routing/load_imbalance": self.imbalance / self.decisions if self.decisions else 1.0}
        self._reset()
        return cols


def share_prefix(engine, key, tokens: int) -> None:
    """Hold `tokens` of KV under `key` in the engine's prefix cache for a request that reuses them (a group's
    prompt, as the engine's own prefix caching would hold it); 0 forgets the entry. (The engine's cache is
    reached from here so that the engine module stays as it is.)"""
    if tokens > 0 and engine.settings.enable_prefix_caching:
        engine._cache.put(key, tokens)
    elif tokens <= 0:
        engine._cache.drop(key)
