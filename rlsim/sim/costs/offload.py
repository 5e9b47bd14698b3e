"""Host offload / onload of training state over PCIe, paid at each colocated train <-> generate switch
(docs/sources.md, Design notes: Cost models, hybrid engine).

Every GPU has its own PCIe link to the host, so the time is the bytes one GPU holds divided by one
link's bandwidth; all GPUs move their shards in parallel. The bytes are the training memory's own
(`costs/memory.py` `training_state_bytes`): with expert parallelism a GPU holds 1/(expert group) of the
experts of its pipeline stage (costs/layout.py), and their sharded state is split over the expert data-parallel ranks.
"""

from __future__ import annotations

from rlsim.sim.costs.memory import training_state_bytes
from rlsim.sim.hardware import HardwareProfile
from rlsim.sim.model_shapes import ModelShape

OPTIMIZER_BYTES_PER_PARAM = 12.0  # Adam fp32 master + m + v (docs/sources.md §3 "Memory")


def pcie_transfer_time(size_bytes: float, hw: HardwareProfile) -> float:
    """Seconds to move `size_bytes` between one GPU and host memory."""
    if size_bytes <= 0:
        return 0.0
    return size_bytes / hw.pcie_bytes_per_s


def offload_bytes_per_gpu(
    model: ModelShape,
    tp: int,
    pp: int,
    dp: int,
    *,
    params: bool = True,
    grads: bool = False,
    optimizer: bool = True,
    shard_optimizer: bool = True,
    shard_params: bool = False,
    shard_grads: bool = True,
    grad_bytes: float = 4.0,
    ep: int = 1,
) -> float:
    """Training-state bytes one GPU moves to (or from) the host; same layout as training memory."""
    state = training_state_bytes(model, tp, pp, dp, shard_optimizer=shard_optimizer, shard_grads=shard_grads,
                                 shard_params=shard_params, grad_bytes=grad_bytes,
                                 optimizer_bytes_per_param=OPTIMIZER_BYTES_PER_PARAM, ep=ep)
    total = 0.0
    for moved, size in zip((params, grads, optimizer), state, strict=True):
        if moved:
            total += size
    return total


def offload_time(
    model: ModelShape,
    hw: HardwareProfile,
    tp: int,
    pp: int,
    dp: int,
    *,
    params: bool = True,
    grads: bool = False,
    optimizer: bool = True,
    shard_optimizer: bool = True,
    shard_params: bool = False,
    shard_grads: bool = True,
    grad_bytes: float = 4.0,
    ep: int = 1,
) -> float:
    """Seconds to move the selected training state of each GPU to host memory over its PCIe link."""
    size = offload_bytes_per_gpu(
        model, tp, pp, dp, params=params, grads=grads, optimizer=optimizer,
        shard_optimizer=shard_optimizer, shard_params=shard_params, shard_grads=shard_grads,
        grad_bytes=grad_bytes, ep=ep,
    )
    return pcie_transfer_time(size, hw)
