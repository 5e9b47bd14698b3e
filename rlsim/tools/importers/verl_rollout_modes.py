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


D = f"{R}.disaggregation"
# verl's KV transfer backends (and Mooncake's protocols) -> the link rlsim prices the KV over. verl's vLLM PD replica
# is single-node (vllm_pd_replica.py), so NIXL is taken to move the KV over NVLink inside the node (UCX's CUDA IPC)
# where the GPUs have it: assumed, as is TCP at the NIC's bandwidth and Mooncake's `local` as a host round trip.
MOONCAKE_LINKS = {"nvlink": "nvlink", "rdma": "rdma", "tcp": "rdma", "local": "pcie"}


def disaggregation(ledger: Ledger, tp: int, gpus: int, gpus_per_node: int, nvlink: bool) -> dict[str, Any]:
    """`actor_rollout_ref.rollout.disaggregation` -> roles.rollout.engine.disaggregation (empty when off).

    verl groups its rollout GPUs into PD replicas of `prefill_replicas` prefill and `decode_replicas` decode servers
    of `tensor_model_parallel_size` GPUs each (vllm_rollout.py: per_replica = prefill_tp x prefill_replicas +
    decode_tp x decode_replicas); rlsim pools every replica's prefill servers for all decode servers."""
    if ledger.peek(f"{D}.enabled") is not True:
        return {}
    ledger.use(f"{D}.enabled", "roles.rollout.engine.disaggregation")
    p = ledger.int_value(f"{D}.prefill_replicas", "roles.rollout.engine.disaggregation.prefill_engines", default=1)
    d = ledger.int_value(f"{D}.decode_replicas", "roles.rollout.engine.disaggregation.decode_engines", default=1)
    decode_tp = ledger.use(f"{D}.decode_tensor_model_parallel_size", "decode engines' TP (must equal the rollout TP)")
    if decode_tp is not None and decode_tp != tp:
        ledger.error(f"{D}.decode_tensor_model_parallel_size", f"{decode_tp}: rlsim's decode engines have the "
                     f"rollout TP ({tp}); asymmetric prefill/decode TP is not modelled")
    if not p or not d:
        return {}
    per_replica = tp * (p + d)
    if gpus % per_replica:
        ledger.error(f"{D}.decode_replicas", f"PD replicas of {p} prefill + {d} decode servers of TP {tp} "
                     f"({per_replica} GPUs) do not divide the {gpus} rollout GPUs")
        return {}
    replicas = gpus // per_replica
    backend = ledger.use(f"{D}.transfer_backend", "roles.rollout.engine.disaggregation.kv_link", default="nixl")
    if backend == "mooncake":
        protocol = ledger.use(f"{D}.mooncake_protocol", "roles.rollout.engine.disaggregation.kv_link",
                              default="nvlink")
        link = MOONCAKE_LINKS.get(protocol, "rdma")
        if protocol in ("tcp", "local") or protocol not in MOONCAKE_LINKS:
            ledger.assume(f"Mooncake over {protocol} priced as {link}", link,
                          "--set roles.rollout.engine.disaggregation.kv_link=nvlink|rdma|pcie")
    else:
        link = "nvlink" if nvlink and per_replica <= gpus_per_node else "rdma"
        ledger.assume(f"KV moved by {backend} over {link} (a PD replica of {per_replica} GPUs, "
                      f"{gpus_per_node} per node)", link, "--set roles.rollout.engine.disaggregation.kv_link=...")
    return {"disaggregation": {"prefill_engines": replicas * p, "decode_engines": replicas * d, "kv_link": link}}
