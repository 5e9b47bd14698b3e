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
the load imbalance (max / mean requests per engine, averaged over the step's routing decisions). The router
places work through the schedule's load balancer (schedules/least_loaded.py): it sees the engines awake now
(lending and re-splitting add and remove engines there), and the least-loaded one the loop would pick.
"""

from __future__ import annotations

from rlsim.sim.engine.request import Request


class GroupRouter:
    """Picks an engine for each fresh request of a prompt group; counts hits, saved prefill, imbalance."""

    def __init__(self, balancer, spec) -> None:
        self.balancer = balancer
        self.policy = spec.policy
        self.bound = spec.load_bound
        self._gid = -1  # the group being launched (its requests are routed together, at one instant)
        self._holders: set = set()  # engines that prefill its prompt
        self._reset()

    def _reset(self) -> None:
        self.hits = 0
        self.saved = 0
        self.decisions = 0
        self.imbalance = 0.0

    def _choose(self, holders: set):
        balancer = self.balancer
        least = balancer.pick()
        holders = [e for e in holders if balancer.is_awake(e)]  # a holder put to sleep serves nothing
        if not holders or self.policy == "least-loaded":
            return least
        holder = min(holders, key=lambda e: (e.load, e.name))
        if self.policy == "affinity":
            return holder
        awake = balancer.awake
        total = sum(e.load for e in awake) + 1  # the bounded-load rule counts the request being placed
        return holder if holder.load + 1 <= (1 + self.bound) * total / len(awake) else least

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
            engine.share_prefix(key, p - 1)
            self.hits += 1
        else:
            req = Request(rid, p, sample.response_tokens)
            holders.add(engine)
        self.decisions += 1
        awake = self.balancer.awake
        loads = [e.load for e in awake]
        loads[awake.index(engine)] += 1  # the request about to be submitted
        mean = sum(loads) / len(loads)
        self.imbalance += max(loads) / mean
        return engine, req

    def finished(self, req: Request) -> None:
        """A routed request ended: count the prefill it skipped; forget the KV entry it leaves behind."""
        if req.trajectory_id is not None:
            if req.admitted_s is not None:  # an abort before admission saved nothing
                self.saved += max(0, req.prefix_tokens + req.prompt_tokens - req.prefilled_tokens)
            self.balancer.engine(req.engine).share_prefix(req.trajectory_id, 0)

    def step_columns(self) -> dict:
        cols = {"routing/affinity_hits": self.hits, "routing/prefill_saved_tokens": self.saved,
                "routing/load_imbalance": self.imbalance / self.decisions if self.decisions else 1.0}
        self._reset()
        return cols

