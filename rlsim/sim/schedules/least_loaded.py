"""The least-loaded engine in O(log n): a min segment tree over engines, refreshed only where load changed.

A schedule sends each new request (or sticky trajectory) to the engine with the fewest requests plus
whatever it pins there, ties broken by name. Scanning every engine per pick is O(n) and dominated
1,024-GPU agentic runs; here each engine tells the index when its `load` may have changed (it adds
itself to `load_watch`), and a pick re-reads only those engines, so it returns exactly what the scan
returned.
"""

from __future__ import annotations


class LeastLoaded:
    """min over engines of (engine.load + extra[engine], engine.name), kept in a segment tree."""

    def __init__(self, engines: list) -> None:
        self.engines = sorted(engines, key=lambda e: e.name)  # leaf order = the tie-break order
        self._leaf = {e: i for i, e in enumerate(self.engines)}
        self._extra = [0] * len(self.engines)
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

    def touch(self, engine) -> None:
        """`engine.load` changed from outside the engine (a schedule edited its queue)."""
        self.dirty.add(engine)

    def pick(self):
        """The engine with the smallest load plus pinned work; ties go to the smallest name."""
        if self.dirty:
            for e in self.dirty:
                self._set(self._leaf[e], e.load)
            self.dirty.clear()
        return self.engines[self._tree[1] % self._size]

    def _set(self, i: int, load: int) -> None:
        tree, size = self._tree, self._size
        node = size + i
        key = (load + self._extra[i]) * size + i
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
