"""Assigning a batch of samples to inference engines, as the real controllers do."""

from __future__ import annotations

import numpy as np


def assign_engines(policy: str, prompt_tokens: np.ndarray, num_engines: int) -> np.ndarray:
    """Engine index per sample.

    `chunked` is verl's split of the batch into contiguous per-DP-rank chunks; `round-robin` deals
    samples out one by one; `least-loaded` gives each sample to the engine holding the fewest prompt
    tokens so far: a router knows prompts, never the response lengths still to be generated.
    """
    n = len(prompt_tokens)
    if policy == "chunked":
        return (np.arange(n) * num_engines) // max(n, 1)
    if policy == "round-robin":
        return np.arange(n) % num_engines
    if policy == "least-loaded":
        load = np.zeros(num_engines)
        out = np.empty(n, dtype=np.int64)
        for i, c in enumerate(prompt_tokens):
            e = int(np.argmin(load))
            out[i] = e
            load[e] += c
        return out
    raise ValueError(f"unknown dispatch policy {policy!r}")
