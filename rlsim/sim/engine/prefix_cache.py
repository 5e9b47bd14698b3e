"""An engine's prefix cache: the contexts of finished turns, kept in KV for the trajectory's next turn.

vLLM's automatic prefix caching and SGLang's radix cache keep a finished request's KV blocks until
the room is needed; a multi-turn agent's next turn then prefills only its new tokens. Here one entry
per trajectory holds the tokens of its last context, least recently used first. The entries count
against the engine's KV (`tokens`) and are evicted, oldest first, when an admission or a decode step
needs the room.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable


class PrefixCache:
    __slots__ = ("_tokens_of", "tokens")

    def __init__(self) -> None:
        self._tokens_of: OrderedDict[Hashable, int] = OrderedDict()  # key -> cached tokens, LRU first
        self.tokens = 0  # KV the entries hold

    def get(self, key: Hashable, default: int = -1) -> int:
        """Tokens cached under `key` (`default` if none)."""
        return self._tokens_of.get(key, default)

    def put(self, key: Hashable, tokens: int) -> None:
        """Cache `tokens` under `key` as the most recently used entry (replacing what it held)."""
        self.drop(key)
        self._tokens_of[key] = tokens
        self.tokens += tokens

    def drop(self, key: Hashable) -> int:
        """Forget `key`'s entry; returns the tokens it held (0 if none)."""
        tokens = self._tokens_of.pop(key, 0)
        self.tokens -= tokens
        return tokens

    def evict_until(self, capacity: float, held: int, needed_free: float, keep: Hashable | None = None) -> None:
        """Evict least-recently-used entries (never `keep`) until `capacity - (held + tokens) >= needed_free`,
        where `held` is the KV the running sequences hold."""
        for key in list(self._tokens_of):
            if capacity - (held + self.tokens) >= needed_free:
                return
            if key != keep:
                self.drop(key)

    def clear(self) -> None:
        self._tokens_of.clear()
        self.tokens = 0

    def __len__(self) -> int:
        return len(self._tokens_of)
