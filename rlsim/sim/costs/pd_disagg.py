"""Prefill/decode-disaggregated rollout: what moving a prompt's KV from a prefill engine to a decode engine costs,
and what a prefill engine's batch costs (docs/sources.md §16; docs/rollout-quantisation.md). Pure functions; the
prefill pool (rlsim/sim/engine/prefill_pool.py) only calls these.

A prefill engine of `tp` GPUs holds each sequence's KV sharded over its GPUs (by KV head), and each GPU sends
its shard to the decode engine's GPUs at once (NIXL, Mooncake): the transfer is the sequence's KV bytes over `tp`
links of the kind named, plus one point-to-point latency. The links are taken at their nominal bandwidth
(assumed: no measured NIXL or Mooncake efficiency is in the references).
"""

from __future__ import annotations

from rlsim.sim.costs.generation import PrefillCost
from rlsim.sim.hardware import HardwareProfile
from rlsim.sim.model_shapes import ModelShape

LINKS = ("nvlink", "rdma", "pcie")


def kv_bytes(model: ModelShape, tokens: float) -> float:
    """KV bytes of `tokens` tokens of context (the model as the engines hold it: an FP8 KV cache halves them)."""
    return tokens * model.kv_bytes_per_token


def link_bytes_per_s(hw: HardwareProfile, link: str) -> float:
    """One GPU's bandwidth on `link`, one direction: NVLink, its NIC (RDMA), or PCIe (staged through the host)."""
    if link == "nvlink":
        return hw.nvlink_bytes_per_s
    if link == "rdma":
        return hw.nic_bytes_per_s
    if link == "pcie":
        return hw.pcie_bytes_per_s
    raise ValueError(f"unknown KV link {link!r} (one of {', '.join(LINKS)})")


def link_latency_s(hw: HardwareProfile, link: str) -> float:
    """One transfer's fixed cost: the profile's point-to-point latency, across nodes for RDMA, inside one else."""
    return hw.p2p_latency_s(inter_node=link == "rdma")


def kv_transfer_time(model: ModelShape, hw: HardwareProfile, tokens: float, link: str, tp: int) -> float:
    """Seconds to move `tokens` tokens of KV from a `tp`-GPU prefill engine over `link` (each GPU its shard)."""
    if tokens <= 0:
        return 0.0
    return kv_bytes(model, tokens) / (link_bytes_per_s(hw, link) * tp) + link_latency_s(hw, link)


def prefill_batch_time(cost: PrefillCost, prompt_lengths: list[int], max_batched_tokens: int) -> float:
    """Seconds a prefill engine takes over one batch of whole prompts, in chunks of `max_batched_tokens` (the same
    rounds an engine's admission prefill pays, `PrefillCost.rounds`)."""
    total = sum(prompt_lengths)
    if total <= 0:
        return 0.0
    sq = sum(t * t for t in prompt_lengths)
    return cost.rounds(total, float(sq), 0.0, max_batched_tokens)[1]
