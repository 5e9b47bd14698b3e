"""In-flight weight updates (NeMo-RL async GRPO, PipelineRL): staleness measured per token.

With in-flight updates a sequence keeps generating across weight pushes, so its tokens come from
several policy versions. Per-sample staleness (trainer version minus the sample's oldest token version)
overstates how off-policy such a batch is; per-token staleness weighs each version by the tokens it
produced. The schedule itself is the fully asynchronous one (schedules/fully_async.py) with
`interrupt: keep`; this module computes what its steps report in addition.
"""

from __future__ import annotations


def token_staleness(samples: list, version: int) -> dict:
    """Step columns: mean and max over the batch's generated tokens of (trainer version - token's version),
    and the share of tokens in sequences that span more than one version."""
    tokens = stale = mixed = 0
    worst = 0
    for s in samples:
        n_s = sum(s.version_tokens.values())
        if len(s.version_tokens) > 1:
            mixed += n_s
        for v, n in s.version_tokens.items():
            tokens += n
            stale += n * (version - v)
            worst = max(worst, version - v)
    return {"staleness/token_mean": stale / tokens if tokens else 0.0, "staleness/token_max": worst,
            "tokens/multi_version_share": mixed / tokens if tokens else 0.0}
