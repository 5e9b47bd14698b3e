"""Weight-sync paths: how the trainer's new weights reach rollout engines (docs/schedules.md, "Weight sync paths").

Published syncs fall into regimes (docs/sources.md §4, "Weight-sync paths"); `path` picks one:

- `per-tensor-nccl`, `per-tensor-rpc`: one call per weight tensor. A fixed cost per call dominates, so the time
  grows with the tensor count (`ModelShape.weight_tensors`), which an MoE model multiplies by its experts:
  tensors x per-call cost, plus the bytes through one sender's stream.
- `bucketed`: tensors flattened into buckets (verl: 2048 MB); bytes-bound. One sender streams every byte at
  `ONE_SENDER_NIC_SHARE` of its NIC; with `senders: all` the GPUs of the sending node relay it, each at
  `ALL_SENDERS_NIC_SHARE` of its own NIC (verl 0.9.1's NCCL checkpoint engine with multi_sender: rank 0 plus its
  NVLink peers; trainer GPUs on other nodes do not send). Each bucket is packed on the sender and its shard
  copied into the engine's parameters on the receiver (HBM passes), plus one collective latency per bucket and
  per receiver.
- `staged`: bucketed, but bounced through host memory: device -> host on the sender and host -> device on
  every receiver, over PCIe (or `host_gb_per_s`).

Across the paths:

- gather: when the trainer spans nodes, the weights held on the other trainer nodes cross the fabric into the
  sending node (one NIC) before the broadcast (verl PR #7291's ≈0.8 s on two GH200 nodes);
- delta: only the elements that changed since the last sync move (`delta_fraction`, 2% by default), each with an
  int32 position (verl's delta_sharded engine); every trainer GPU first compares its shard with a pinned host
  snapshot over PCIe, and the gather moves the sparse delta too. Per-call and per-bucket costs do not shrink.

Inside one NVLink domain (`same_node`: trainer and engines on disjoint GPUs of one node, or of an NVL72 rack) the
gather and the stream run at the intra-node link (NVLink, or PCIe without it), each sender at its full link.

Colocated (the hybrid engine's switch, costs/transition.py) the bytes never leave the node: a per-tensor path adds
its per-call cost to the engine's load, and `staged` the host bounce of each GPU's engine shard.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from rlsim.sim.costs.long_context import ELEMENTWISE_HBM_ETA
from rlsim.sim.hardware import HardwareProfile

SYNC_PATHS = ("bucketed", "per-tensor-nccl", "per-tensor-rpc", "staged")
SENDERS = ("one", "all")
# Cost per call of the per-tensor paths (docs/sources.md §4, "Weight-sync paths"):
# - per-tensor-rpc: an RPC with serialisation per tensor, ≈200 s for a 16B MoE of ≈5.3k tensors (verl + SGLang with
#   Megatron; zhaochenyang20/Awesome-ML-SYS-Tutorial #169): 38 ms. Derived from that one publication.
# - per-tensor-nccl: SGLang's update_weights_from_distributed one tensor at a time, Qwen3-Next-80B (≈74.5k
#   tensors) in 130 s, 7 s once flattened into buckets (sgl-project/sglang #13824): (130 - 7) s / 74.5k tensors,
#   1.65 ms (the bucketed 7 s is the same bytes' transfer, taken out). Derived from that one publication.
PER_TENSOR_S = {"per-tensor-rpc": 38e-3, "per-tensor-nccl": 1.65e-3}
# Share of its NIC one sender's bucketed NCCL broadcast reaches: verl's NCCL checkpoint engine on GH200 (one
# 200 Gb/s = 25 GB/s NIC per GPU), 2 GB buckets, one trainer node -> one rollout node, 10.7-11 GB/s from one
# sender: 11 / 25 (verl PR #7291, commit 8de5fb446). Fitted to that publication (provenance.FITTED).
ONE_SENDER_NIC_SHARE = 0.44
# The same runs with the 4 GPUs of the trainer node sending (multi_sender): 30-32 GB/s from 4 x 25 GB/s: 31 / 100.
ALL_SENDERS_NIC_SHARE = 0.31
# Changed bytes per sync under delta sync: the sources report 1-3% per sync in bf16 RL runs (verl sharded delta
# sync, slime); 2% assumed. Settle with the changed-byte count of one sync in the run in question.
DEFAULT_DELTA_FRACTION = 0.02
# verl's delta_sharded engine sends each changed element as an int32 position and its value (verl 0.9.1,
# verl/checkpoint_engine/delta_checkpoint_engine.py, the `indices` wire encoding).
DELTA_INDEX_BYTES = 4


@dataclass(frozen=True)
class SyncSetup:
    """What decides one disaggregated weight sync (resolved from the scenario by the schedule)."""

    weight_bytes: float  # what a full sync moves (the whole model, or a LoRA adapter)
    tensors: int  # named weight tensors of what is synced
    sender: HardwareProfile  # the trainer's GPU
    receiver: HardwareProfile  # the rollout engines' GPU
    receivers: int  # rollout GPUs that take the weights
    receiver_tp: int  # each engine's GPUs (a receiver keeps 1/tp of what it receives)
    trainer_gpus: int
    trainer_nodes: int
    path: str = "bucketed"
    senders: str = "one"
    bucket_bytes: float = 2048e6
    delta_fraction: float | None = None  # None: every byte moves
    per_tensor_s: float | None = None  # None: PER_TENSOR_S[path]
    host_bytes_per_s: float | None = None  # staged: host-memory bounce rate (None: each side's PCIe)
    same_node: bool = False  # both sides in one node: the link is NVLink (or PCIe without it), not the NICs
    element_bytes: float = 2.0  # bytes per weight (delta: an int32 position travels with each changed value)
    sender_node_gpus: int | None = None  # senders: all: the trainer GPUs on the sending node (None: trainer_gpus)


def _link(hw: HardwareProfile, same_node: bool) -> float:
    return hw.intra_node_bytes_per_s() if same_node else hw.nic_bytes_per_s


@dataclass(frozen=True)
class SyncParts:
    """Seconds of one sync by part."""

    gather: float = 0.0  # trainer weights on other nodes into the sending node
    diff: float = 0.0  # delta: compare with the last synced copy
    pack: float = 0.0  # flatten tensors into buckets (sender HBM)
    calls: float = 0.0  # per-tensor calls, or per-bucket and per-receiver latencies
    transfer: float = 0.0  # bytes through the senders' streams
    stage: float = 0.0  # staged: device -> host -> device
    load: float = 0.0  # receivers copy their shard into the engine's parameters

    @property
    def total(self) -> float:
        return sum(asdict(self).values())


def per_tensor_cost(path: str, override_s: float | None = None) -> float:
    """Seconds per call of a per-tensor path (0 for the bucketed paths)."""
    if path not in PER_TENSOR_S:
        return 0.0
    return override_s if override_s is not None else PER_TENSOR_S[path]


def stream_bytes_per_s(s: SyncSetup) -> float:
    """Rate the senders push weights at: one sender's stream, or every trainer GPU's, each a share of its NIC
    (a path that sends one tensor per call has one sender). Never faster than the receivers' links together.
    Inside one node the link (NVLink, or PCIe without it) is taken at its rate: the NIC shares were measured
    between nodes."""
    link = min(_link(s.sender, s.same_node), _link(s.receiver, s.same_node))
    many = s.senders == "all" and s.path not in PER_TENSOR_S
    share = 1.0 if s.same_node else ALL_SENDERS_NIC_SHARE if many else ONE_SENDER_NIC_SHARE
    senders = min(s.trainer_gpus, s.sender_node_gpus or s.trainer_gpus)
    rate = share * link * (max(1, senders) if many else 1)
    return min(rate, _link(s.receiver, s.same_node) * max(1, s.receivers))


def delta_bytes(weight_bytes: float, fraction: float, element_bytes: float = 2.0) -> float:
    """Bytes a delta sync sends: each changed element as an int32 position plus its value (verl's delta_sharded
    `indices` wire encoding)."""
    return weight_bytes * fraction * (1.0 + DELTA_INDEX_BYTES / element_bytes)


def _hbm_pass(size_bytes: float, hw: HardwareProfile) -> float:
    """One read + one write of `size_bytes` in HBM."""
    return 2.0 * size_bytes / (hw.hbm_bytes_per_s * ELEMENTWISE_HBM_ETA)


def sync_parts(s: SyncSetup) -> SyncParts:
    """One disaggregated sync by part (module docstring)."""
    if s.weight_bytes <= 0 or s.receivers <= 0:
        return SyncParts()
    if s.path not in SYNC_PATHS or s.senders not in SENDERS:
        raise ValueError(f"unknown weight-sync path {s.path!r} or senders {s.senders!r}")
    moved = s.weight_bytes
    if s.delta_fraction is not None:
        moved = delta_bytes(s.weight_bytes, s.delta_fraction, s.element_bytes)
    nodes = max(1, s.trainer_nodes)
    # the fabric between trainer nodes (NVLink when the whole sync sits in one NVLink domain, e.g. an NVL72 rack)
    gather = moved * (nodes - 1) / nodes / _link(s.sender, s.same_node)
    # delta: each trainer GPU compares its shard with its pinned host snapshot of the last sync, over PCIe
    diff = s.weight_bytes / max(1, s.trainer_gpus) / s.sender.pcie_bytes_per_s if s.delta_fraction is not None else 0.0
    latency = max(s.sender.collective_latency_s, s.receiver.collective_latency_s)
    per_call = per_tensor_cost(s.path, s.per_tensor_s)
    if per_call:
        calls, pack = s.tensors * per_call, 0.0
    else:
        buckets = max(1, math.ceil(moved / s.bucket_bytes))
        calls, pack = (buckets + s.receivers) * latency, _hbm_pass(moved, s.sender)
    stage = 0.0
    if s.path == "staged":
        out = s.host_bytes_per_s or s.sender.pcie_bytes_per_s
        back = s.host_bytes_per_s or s.receiver.pcie_bytes_per_s
        stage = moved / out + moved / back
    load = _hbm_pass(moved / max(1, s.receiver_tp), s.receiver)
    return SyncParts(gather=gather, diff=diff, pack=pack, calls=calls, transfer=moved / stream_bytes_per_s(s),
                     stage=stage, load=load)


def sync_time(s: SyncSetup) -> float:
    """Seconds of one disaggregated weight sync."""
    return sync_parts(s).total


def colocated_extra_time(path: str, tensors: int, shard_bytes: float, hw: HardwareProfile,
                         per_tensor_s: float | None = None, host_bytes_per_s: float | None = None) -> float:
    """What a colocated switch adds on top of its gather and load: the per-tensor calls of a per-tensor path, or the
    host bounce (device -> host -> device) of each GPU's engine shard when staged. 0 for bucketed."""
    if path == "staged":
        rate = host_bytes_per_s or hw.pcie_bytes_per_s
        return 2.0 * shard_bytes / rate
    return tensors * per_tensor_cost(path, per_tensor_s)
