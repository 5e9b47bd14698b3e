"""Moving actor weights into the generation layout: colocated reshard and disaggregated broadcast.

HybridFlow (EuroSys'25) Table 2 gives the per-GPU communication volume of the train->generate
transition for a model of M bytes trained with t-p-d (tensor, pipeline, data) parallelism and
generated with t_g-p_g (with micro data parallelism d_g = t*p / (t_g*p_g) inside each training
model-parallel group):

- `naive` (DeepSpeed-Chat): all-gather the whole model over all t*p*d GPUs: (tpd-1)/(tpd) * M;
- `hybridflow-v`: all-gather within the t*p group: (tp-1)/tp * M;
- `3d-hybrid-engine`: each GPU gathers only its generation shard from its micro-DP group:
  (tp - t_g*p_g) / (t_g*p_g*tp) * M, with zero redundant weight memory.

Here `tp` in the formulas is t*p, the training model-parallel size.
"""

from __future__ import annotations

import math

from rlsim.sim.costs.collectives import allgather_time, broadcast_time, ring_bandwidth_bytes_per_s
from rlsim.sim.hardware import HardwareProfile

RESHARD_METHODS = ("3d-hybrid-engine", "hybridflow-v", "naive")


def reshard_bytes_per_gpu(
    method: str, model_bytes: float, train_tp: int, train_pp: int, train_dp: int, gen_tp: int, gen_pp: int = 1
) -> float:
    """Bytes each GPU receives in the train->generate transition (HybridFlow Table 2)."""
    mp = train_tp * train_pp
    gen = gen_tp * gen_pp
    if method == "naive":
        n = mp * train_dp
        return (n - 1) / n * model_bytes
    if method == "hybridflow-v":
        return (mp - 1) / mp * model_bytes
    if method == "3d-hybrid-engine":
        # A generation shard finer than the training shard is already local: nothing to gather.
        return max(0.0, (mp - gen) / (gen * mp) * model_bytes)
    raise ValueError(f"unknown reshard method {method!r} (known: {', '.join(RESHARD_METHODS)})")


def reshard_redundant_bytes_per_gpu(
    method: str, model_bytes: float, train_tp: int, train_pp: int, gen_tp: int, gen_pp: int = 1
) -> float:
    """Extra weight memory the generation copy needs on top of the training shard (Table 2, 'redundancy')."""
    if method == "3d-hybrid-engine":
        return 0.0
    if method in ("hybridflow-v", "naive"):
        return model_bytes / (gen_tp * gen_pp)  # a separate generation copy next to the training shard
    raise ValueError(f"unknown reshard method {method!r}")


def reshard_group_size(method: str, train_tp: int, train_pp: int, train_dp: int, gen_tp: int, gen_pp: int = 1) -> int:
    """GPUs that talk to each other during the transition (decides NVLink vs NIC)."""
    mp = train_tp * train_pp
    if method == "naive":
        return mp * train_dp
    if method == "hybridflow-v":
        return mp
    return max(1, mp // (gen_tp * gen_pp))  # the micro-DP group


def reshard_time(
    method: str,
    model_bytes: float,
    hw: HardwareProfile,
    train_tp: int,
    train_pp: int,
    train_dp: int,
    gen_tp: int,
    gen_pp: int = 1,
    gpus_per_node: int = 8,
) -> float:
    """Seconds of the all-gather that moves weights into the generation layout."""
    volume = reshard_bytes_per_gpu(method, model_bytes, train_tp, train_pp, train_dp, gen_tp, gen_pp)
    group = reshard_group_size(method, train_tp, train_pp, train_dp, gen_tp, gen_pp)
    if volume <= 0 or group <= 1:
        return 0.0
    bw = ring_bandwidth_bytes_per_s(hw, group, gpus_per_node)
    # allgather_time takes the gathered size S and charges (n-1)/n of it; `volume` already is that part.
    return allgather_time(volume * group / (group - 1), group, bw, hw.collective_latency_s)


def weight_broadcast_time(
    model_bytes: float,
    bandwidth_bytes_per_s: float,
    receivers: int,
    latency_s: float,
    bucket_bytes: float = 2048e6,
) -> float:
    """Disaggregated sync: the trainer broadcasts every weight (M bytes) to each rollout GPU over the NICs.

    NCCL pipelines a broadcast along a ring/tree, so each bucket costs about one transfer time; a
    per-bucket latency is added for the bucket hand-offs (verl sends 2048 MB buckets).
    """
    if model_bytes <= 0 or receivers <= 0:
        return 0.0
    buckets = max(1, math.ceil(model_bytes / bucket_bytes))
    return broadcast_time(model_bytes, receivers + 1, bandwidth_bytes_per_s, latency_s) + buckets * latency_s
