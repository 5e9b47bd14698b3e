""""Did you mean ...?": the closest known name to a misspelt one, for every message that names a typo.

One helper for the whole project: unknown scenario keys and choices (rlsim/sim/scenario/loader.py),
unknown keys of a framework config (rlsim/tools/importers), unknown profiles, presets and commands.
Matching is difflib's ratio on the lower-cased names (plus the separators `-` / `_` made equal), so
`tensor_model_paralel_size` finds `tensor_model_parallel_size` and `H100_SXM` finds `h100-sxm`.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

CUTOFF = 0.75  # below this ratio a "suggestion" is a guess that misleads more than it helps


def _norm(name: str) -> str:
    return str(name).lower().replace("-", "_")


def closest(word: str, choices: Iterable[str], n: int = 1, cutoff: float = CUTOFF) -> list[str]:
    """Up to `n` known names closest to `word` (best first); [] when none is close or `word` is known."""
    known = {}
    for choice in choices:
        known.setdefault(_norm(choice), str(choice))
    if not known or _norm(word) in known and known[_norm(word)] == str(word):
        return []
    matches = difflib.get_close_matches(_norm(word), list(known), n=n, cutoff=cutoff)
    return [known[m] for m in matches]


def did_you_mean(word: str, choices: Iterable[str], cutoff: float = CUTOFF) -> str:
    """': did you mean X?' for the closest known name, else '' (append it to a message)."""
    found = closest(word, choices, 1, cutoff)
    return f": did you mean {found[0]}?" if found else ""
