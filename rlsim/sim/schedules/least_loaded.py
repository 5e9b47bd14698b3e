"""Where a schedule's new work goes: the least-loaded awake engine, and the trajectories pinned to engines.

`LoadBalancer` is the one object that decides it. The rollout loop and the group router are handed the same
balancer, and lending and re-splitting add engines to it, put them to sleep and wake them through it, so every
placement (a fresh sample, a group's request, an agent's first or later turn) sees the same engines, loads and
pins. Only awake engines are offered: an engine asleep on the trainer's GPUs takes no work, by construction.

The pick is O(log n): `LeastLoaded`, a min segment tree over engines, refreshed only where load changed.
Scanning every engine per pick is O(n) and dominated 1,024-GPU agentic runs; here each engine tells the index
when its `load` may have changed (it adds itself to `load_watch`), and a pick re-reads only those engines, so
it returns exactly what the scan returned.
"""

from __future__ import annotations


class LeastLoaded:
    """min over awake engines of (engine.load + extra[engine], engine.name), kept in a segment tree."""

    def __init__(self, engines: list) -> None:
        self.engines = sorted(engines, key=lambda e: e.name)  # leaf order = the tie-break order
        self._leaf = {e: i for i, e in enumerate(self.engines)}
        self._extra = [0] * len(self.engines)
        self._asleep = [False] * len(self.engines)
        self._n = len(self.engines)
        self._size = 1
        while self._size < max(1, self._n):
            self._size *= 2
        self._tree = [_EMPTY] * (2 * self._size)  # node: load * _size + leaf index (the tie-break in one int)
        self.dirty: set = set(self.engines)
        for e in self.engines:
            e.load_watch = self.dirty

    def add(self, engine, delta: int) -> None:
        """Change what the schedule pins on `engine` (live sticky trajectories) by `delta`."""
        self._extra[self._leaf[engine]] += delta
        self.dirty.add(engine)

    def extra(self, engine) -> int:
        return self._extra[self._leaf[engine]]

    def set_asleep(self, engine, asleep: bool) -> None:
        """An asleep engine is never picked (its leaf holds no key)."""
        self._asleep[self._leaf[engine]] = asleep
        self.dirty.add(engine)

    def pick(self):
        """The awake engine with the smallest load plus pinned work, ties to the smallest name; None if none."""
        if self.dirty:
            for e in self.dirty:
                self._set(self._leaf[e], e.load)
            self.dirty.clear()
        best = self._tree[1]
        return None if best is _EMPTY else self.engines[best % self._size]

    def consistent(self, engine) -> bool:
        """Whether the tree holds what `engine` shows now (tests: an engine that changed load and said nothing)."""
        i = self._leaf[engine]
        want = _EMPTY if self._asleep[i] else (engine.load + self._extra[i]) * self._size + i
        return engine in self.dirty or self._tree[self._size + i] == want

    def _set(self, i: int, load: int) -> None:
        tree, size = self._tree, self._size
        node = size + i
        key = _EMPTY if self._asleep[i] else (load + self._extra[i]) * size + i
        if tree[node] == key:
            return  # most refreshes find the load unchanged
        tree[node] = key
        node //= 2
        while node:
            left, right = tree[2 * node], tree[2 * node + 1]
            best = left if left < right else right
            if tree[node] == best:
                return  # the minimum above is unchanged from here up
            tree[node] = best
            node //= 2


_EMPTY = float("inf")


class LoadBalancer:
    """The engines a schedule may place work on: awake or asleep, their loads, and the trajectories pinned there.

    `pick()` is the least-loaded awake engine (requests plus pinned trajectories; ties by name), or None when
    every engine sleeps. A live trajectory is pinned to its engine (`pin`) so that its prefix stays cached;
    `sticky(engine)` is where its next turn goes: its engine while awake, else (the pin moves) the least-loaded
    awake one. `woken()` is an event for work that found no engine awake.
    """

    def __init__(self, env, engines: list) -> None:
        self.env = env
        self.engines: list = []
        self._named: dict = {}
        self._asleep: set = set()
        self._awake: list = []  # in the order engines were added (the router's view)
        self._index = LeastLoaded([])
        self._woken = None
        self.add(engines)

    # ------------------------------------------------------------------ the fleet

    def add(self, engines: list, awake: bool = True) -> None:
        """More engines to place work on (lending, re-splitting: built asleep on the trainer's GPUs)."""
        old = self._index
        pins = {e: old.extra(e) for e in self.engines}
        self.engines = [*self.engines, *engines]
        self._named.update((e.name, e) for e in engines)
        if not awake:
            self._asleep.update(engines)
        self._index = index = LeastLoaded(self.engines)
        for e in self.engines:
            if pins.get(e):
                index.add(e, pins[e])
            if e in self._asleep:
                index.set_asleep(e, True)
        self._awake = [e for e in self.engines if e not in self._asleep]

    def engine(self, name: str):
        """The engine called `name` (a request names the engine that served it)."""
        return self._named[name]

    def is_awake(self, engine) -> bool:
        return engine not in self._asleep

    @property
    def awake(self) -> list:
        """The engines taking work now."""
        return self._awake

    def sleep(self, engine) -> None:
        """`engine` takes no new work from now on (its GPUs go back to training). The caller empties it."""
        if engine not in self._asleep:
            self._asleep.add(engine)
            self._index.set_asleep(engine, True)
            self._awake = [e for e in self._awake if e is not engine]

    def wake(self, engine) -> None:
        """`engine` takes work again; whatever waited for an awake engine may go on."""
        if engine in self._asleep:
            self._asleep.discard(engine)
            self._index.set_asleep(engine, False)
            self._awake = [e for e in self.engines if e not in self._asleep]
        if self._woken is not None:
            woken, self._woken = self._woken, None
            woken.succeed()

    def woken(self):
        """An event that fires when an engine next wakes."""
        if self._woken is None:
            self._woken = self.env.event()
        return self._woken

    # ------------------------------------------------------------------ placing work

    def pick(self):
        """The least-loaded awake engine (requests plus pinned trajectories, ties by name), or None."""
        return self._index.pick()

    def pin(self, engine, delta: int = 1) -> None:
        """A live trajectory sticks to `engine` (+1) or ends there (-1): it counts in the engine's load."""
        self._index.add(engine, delta)

    def sticky(self, engine):
        """Where the next turn of a trajectory pinned to `engine` goes: `engine` while it is awake, else the
        least-loaded awake engine (the pin moves there), else None (nothing awake: wait for `woken()`)."""
        if engine not in self._asleep:
            return engine
        other = self._index.pick()
        if other is not None:
            self._index.add(engine, -1)
            self._index.add(other, +1)
        return other

    def consistent(self) -> bool:
        """Whether the index holds every engine's load and pins as they are (tests)."""
        return all(self._index.consistent(e) for e in self.engines)
