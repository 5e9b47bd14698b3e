"""verl's quantised and speculative rollout keys -> roles.rollout.engine.quantization / speculative
(docs/rollout-quantisation.md).

`actor_rollout_ref.rollout.quantization: fp8` serves blockwise-FP8 weights in vLLM / SGLang while the actor
trains in BF16; `actor_rollout_ref.model.mtp` with `enable_rollout` drafts with the model's MTP head (vLLM
`num_speculative_tokens`, SGLang `speculative_num_steps`), co-trained when `enable_train` is set.
"""

from __future__ import annotations

from typing import Any

from rlsim.tools.importers.common import Ledger

R = "actor_rollout_ref.rollout"
MTP = "actor_rollout_ref.model.mtp"
# An MTP head is one decoder layer plus the shared LM head; its step cost and acceptance are not in verl's
# config and no measured value is in docs/sources.md §15: assumed, and listed as such on import.
MTP_DRAFT_COST = 0.05
MTP_ACCEPTANCE = 0.7


def rollout_modes(ledger: Ledger, engine_kind: str | None) -> dict[str, Any]:
    """The engine's `quantization` and `speculative` settings a verl config asks for (empty when neither)."""
    out: dict[str, Any] = {}
    if ledger.peek(f"{R}.quantization") == "fp8":
        ledger.use(f"{R}.quantization", "roles.rollout.engine.quantization.weights (fp8, blockwise)")
        out["quantization"] = {"weights": "fp8"}
    if ledger.peek(f"{MTP}.enable") is True and ledger.peek(f"{MTP}.enable_rollout") is True:
        ledger.use(f"{MTP}.enable", "roles.rollout.engine.speculative (MTP head)")
        ledger.use(f"{MTP}.enable_rollout", "roles.rollout.engine.speculative (MTP head)")
        steps = "speculative_num_steps" if (engine_kind or "").startswith("sglang") else "num_speculative_tokens"
        k = ledger.int_value(f"{MTP}.{steps}", "roles.rollout.engine.speculative.k", default=1)
        trained = ledger.flag(f"{MTP}.enable_train",
                              "roles.rollout.engine.speculative.draft_refresh_versions (true: 1, false: null)")
        ledger.assume("MTP draft step as a fraction of a target step", MTP_DRAFT_COST,
                      "--set roles.rollout.engine.speculative.draft_cost=F")
        ledger.assume("MTP acceptance per proposed token", MTP_ACCEPTANCE,
                      "--set roles.rollout.engine.speculative.acceptance=A")
        out["speculative"] = {"k": k or 1, "draft_cost": MTP_DRAFT_COST, "acceptance": MTP_ACCEPTANCE,
                              "draft_refresh_versions": 1 if trained else None}
    return out
