"""Which keys of a framework config are the framework's own, and the closest own key to one that is not.

A misspelt key (`tensor_model_paralel_size`) must not pass for one rlsim merely does not model: the
import lists it apart, "unknown key ...: did you mean ...?" (rlsim/sim/suggest.py), and the value
rlsim took instead is listed as assumed. The vocabularies are shipped in vocab/ (each file says where
its names come from):

- verl: every dotted path of verl 0.9.1's composed trainer and recipe configs (complete: any other
  key is unknown, whether or not a close own key exists);
- AReaL, ROLL: the names of their config fields (AReaL's dataclasses; ROLL's example configs and the
  keys the importer reads). Not complete, so a key is called unknown only when one of its names is
  close to an own name it is not (a likely typo).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

from rlsim.sim.inputs import closest

_FOLDER = Path(__file__).with_name("vocab")
VERSIONS = {"verl": "verl 0.9.1", "areal": "AReaL 1.0.4", "roll": "ROLL", "nemo-rl": "NeMo-RL"}
# Partial vocabularies meet user-named keys (environments, reward workers): only a near miss is a typo.
PARTIAL_CUTOFF = 0.85


@dataclass(frozen=True)
class Vocabulary:
    framework: str
    paths: frozenset[str]  # dotted paths, leaves and the mappings above them (complete vocabularies)
    names: frozenset[str]  # every segment name
    complete: bool

    def check(self, key: str) -> str | None:
        """None when `key` is the framework's own (or cannot be judged); else ': did you mean X?' or ''."""
        parts = key.split(".")
        if self.complete:
            return self._check_path(parts)
        for i, part in enumerate(parts):
            if part in self.names or part.isdigit():
                continue
            found = closest(part, self.names, cutoff=PARTIAL_CUTOFF)
            if found:
                return f": did you mean {'.'.join([*parts[:i], found[0], *parts[i + 1:]])}?"
            return None
        return None

    def _check_path(self, parts: list[str]) -> str | None:
        for i in range(len(parts)):
            prefix = ".".join(parts[: i + 1])
            if prefix in self.paths:
                if prefix in _leaves(self):  # a free-form leaf (a mapping the user fills, a list): known
                    return None
                continue
            parent = ".".join(parts[:i])
            siblings = [p.rpartition(".")[2] for p in self.paths if p.rpartition(".")[0] == parent]
            found = closest(parts[i], siblings)
            if not found:
                return ""
            guess = ".".join([*parts[:i], found[0], *parts[i + 1:]])
            return f": did you mean {guess}?"
        return None


@cache
def _leaves(vocab: Vocabulary) -> frozenset[str]:
    inner = {p.rpartition(".")[0] for p in vocab.paths if "." in p}
    return frozenset(vocab.paths - inner)


@cache
def vocabulary(framework: str) -> Vocabulary:
    lines = [ln.strip() for ln in (_FOLDER / f"{framework}.txt").read_text(encoding="utf-8").splitlines()]
    entries = frozenset(ln for ln in lines if ln and not ln.startswith("#"))
    complete = framework == "verl"
    names = frozenset(part for entry in entries for part in entry.split("."))
    return Vocabulary(framework, entries if complete else frozenset(), names, complete)
