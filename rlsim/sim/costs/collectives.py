"""NCCL ring collectives: bandwidth term plus a per-hop latency term alpha (docs/sources.md, Design notes: Cost models).

A group that fits inside one NVLink domain talks over NVLink (PCIe inside a node where a GPU has none); a
group that spans domains is limited by the per-GPU NIC bandwidth, the slowest link of the ring. The domain is
a node unless the profile says more (`nvlink_domain_gpus`: GB200/GB300 NVL72 join 72 GPUs of 18 hosts).
"""

from __future__ import annotations

from rlsim.sim.hardware import HardwareProfile


def ring_bandwidth_bytes_per_s(hw: HardwareProfile, group_size: int, gpus_per_node: int) -> float:
    """Per-GPU bandwidth of the slowest link in a ring of `group_size` GPUs packed onto nodes (and NVLink domains)."""
    if group_size <= hw.nvlink_domain(gpus_per_node):
        return hw.intra_node_bytes_per_s()
    return hw.nic_bytes_per_s


def allreduce_time(size_bytes: float, n: int, bandwidth: float, latency_s: float) -> float:
    """Ring all-reduce: each GPU sends and receives 2(n-1)/n of the buffer in 2(n-1) hops."""
    if n <= 1 or size_bytes <= 0:
        return 0.0
    return size_bytes / bandwidth * 2 * (n - 1) / n + 2 * (n - 1) * latency_s


def allgather_time(size_bytes: float, n: int, bandwidth: float, latency_s: float) -> float:
    """Ring all-gather (or reduce-scatter) of a `size_bytes` result: (n-1)/n of it crosses each link."""
    if n <= 1 or size_bytes <= 0:
        return 0.0
    return size_bytes / bandwidth * (n - 1) / n + (n - 1) * latency_s


def alltoall_time(size_bytes: float, n: int, bandwidth: float, latency_s: float) -> float:
    """All-to-all of `size_bytes` per rank over n ranks: each keeps 1/n and sends the other (n-1)/n, one
    message to every peer at once, so one point-to-point latency and (n-1)/n of the buffer per link."""
    if n <= 1 or size_bytes <= 0:
        return 0.0
    return latency_s + size_bytes * (n - 1) / n / bandwidth
