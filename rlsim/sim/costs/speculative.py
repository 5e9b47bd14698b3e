"""Speculative decoding in rollout (MTP heads, EAGLE drafts): each engine step a draft proposes k tokens per
sequence and the target verifies them in one pass over k + 1 positions (docs/sources.md §15;
docs/rollout-quantisation.md).

With each proposed token accepted with probability a (independently, the first rejection ending the run), a
step yields 1 + a + ... + a^k = (1 - a^(k+1)) / (1 - a) tokens per sequence on average (Leviathan et al. 2023,
"Fast Inference from Transformers via Speculative Decoding", eq. 1). It costs one verification step (the
linear layers over k + 1 tokens per sequence, attention reading each sequence's KV once for its k + 1 queries)
plus k draft steps, each `draft_cost` of a plain target step. Per token the engine's step is that sum divided
by the tokens a step yields: still affine in the running context for a fixed batch, so the engine keeps one
event per batch change (the closed forms of `DecodeCoefficients`, with a per-token step).
"""

from __future__ import annotations

from dataclasses import replace

from rlsim.sim.costs.engine_kinds import EngineOverheads
from rlsim.sim.costs.generation import DecodeCoefficients, attention_seconds_per_context_token, decode_coefficients
from rlsim.sim.hardware import HardwareProfile
from rlsim.sim.model_shapes import ModelShape


def tokens_per_step(acceptance: float, k: int) -> float:
    """Expected tokens a speculative step yields per sequence: (1 - a^(k+1)) / (1 - a); k + 1 at a = 1."""
    if acceptance >= 1.0:
        return float(k + 1)
    return (1.0 - acceptance ** (k + 1)) / (1.0 - acceptance)


def acceptance_at(acceptance: float, drop_per_1k_tokens: float, drop_per_version: float, position: float,
                  drift_versions: int) -> float:
    """Per-token acceptance at sequence `position` (prompt and tokens so far) with the draft `drift_versions` policy
    versions behind the target: the base rate less a linear drop with each (assumed forms), at least 0."""
    a = acceptance - drop_per_1k_tokens * position / 1000.0 - drop_per_version * drift_versions
    return a if a > 0.0 else 0.0


def verify_coefficients(
    model: ModelShape, hw: HardwareProfile, tp: int, batch: int, k: int, overheads: EngineOverheads,
    plain: DecodeCoefficients, ep: int = 1, gpus_per_node: int = 8,
) -> DecodeCoefficients:
    """One verification step of `batch` sequences over k + 1 positions each: the linear layers, all-reduces and
    all-to-alls of batch x (k + 1) tokens, attention reading each sequence's KV once for its k + 1 queries, and
    the engine's per-step and per-sequence costs of the plain step (`plain`, batch `batch`: assumed unchanged)."""
    wide = decode_coefficients(model, hw, tp, batch * (k + 1), overheads=overheads, ep=ep, gpus_per_node=gpus_per_node)
    slope = attention_seconds_per_context_token(model, hw, tp, overheads.attention_eta_mem, queries=k + 1)
    return replace(plain, intercept=wide.intercept, slope=slope)


def per_token_coefficients(plain: DecodeCoefficients, verify: DecodeCoefficients, k: int, draft_cost: float,
                           tokens: float) -> DecodeCoefficients:
    """A speculative step (verification + k draft steps of `draft_cost` x a plain step) per token it yields:
    the engine's tick stays one token per running sequence, each tick 1 / `tokens` of a step. An engine whose
    host work overlaps the GPU keeps its floor once per step (the draft runs inside the same engine step)."""
    draft = k * draft_cost
    return replace(
        plain,
        intercept=(verify.intercept + draft * plain.intercept) / tokens,
        slope=(verify.slope + draft * plain.slope) / tokens,
        fixed=(verify.fixed + draft * plain.fixed) / tokens,
        host_floor=plain.host_floor / tokens,  # an overlapped host's floor, once per engine step
    )


class SpeculativeSteps:
    """One engine's speculative steps: its verification coefficients per batch size, and the per-token step of a
    segment. `spec` holds k, draft_cost, the acceptance and its falls, and `drift(version)` (the scenario's
    `engine.speculative`)."""

    __slots__ = ("_spec", "_model", "_hw", "_tp", "_overheads", "_ep", "_gpus_per_node", "_verify")

    def __init__(self, spec, model: ModelShape, hw: HardwareProfile, tp: int, overheads: EngineOverheads,
                 ep: int = 1, gpus_per_node: int = 8):
        self._spec, self._model, self._hw, self._tp, self._overheads = spec, model, hw, tp, overheads
        self._ep, self._gpus_per_node = ep, gpus_per_node
        self._verify: dict[int, DecodeCoefficients] = {}

    @classmethod
    def of(cls, spec, model: ModelShape, hw: HardwareProfile, tp: int, overheads: EngineOverheads, ep: int = 1,
           gpus_per_node: int = 8) -> SpeculativeSteps | None:
        """An engine's speculative steps, or None when `spec` is (speculation off)."""
        return None if spec is None else cls(spec, model, hw, tp, overheads, ep, gpus_per_node)

    def per_token(self, plain: DecodeCoefficients, batch: int, position: float, version: int) -> DecodeCoefficients:
        """The step per token of `batch` sequences at mean sequence `position` on weights of policy `version`,
        from the plain step `plain` of that batch: one closed form per segment, as without speculation."""
        spec = self._spec
        verify = self._verify.get(batch)
        if verify is None:
            verify = self._verify[batch] = verify_coefficients(
                self._model, self._hw, self._tp, batch, spec.k, self._overheads, plain, self._ep, self._gpus_per_node)
        a = acceptance_at(spec.acceptance, spec.acceptance_drop_per_1k_tokens, spec.acceptance_drop_per_version,
                          position, spec.drift(version))
        return per_token_coefficients(plain, verify, spec.k, spec.draft_cost, tokens_per_step(a, spec.k))
