"""Moving actor weights into the generation layout on the same GPUs: the colocated reshard.

A sync to engines on other GPUs is costs/weight_sync.py.

HybridFlow (EuroSys'25) Table 2 gives the per-GPU communication volume of the train->generate
transition for a model of M bytes trained with t-p-d (tensor, pipeline, data) parallelism and
generated with t_g-p_g (with micro data parallelism d_g = t*p / (t_g*p_g) inside each training
model-parallel group):

- `naive` (DeepSpeed-Chat): all-gather the whole model over all t*p*d GPUs: (tpd-1)/(tpd) * M;
- `hybridflow-v`: all-gather within the t*p group: (tp-1)/tp * M;
- `3d-hybrid-engine`: each GPU gathers only its generation shard from its micro-DP group:
  (tp - t_g*p_g) / (t_g*p_g*tp) * M, with zero redundant weight memory.

Here `tp` in the formulas is t*p, the training model-parallel size.

With expert parallelism the experts of an MoE model are not laid out like the rest of it: training holds
whole experts of 1/ep of them, tensor-split over what is left of tp (`expert_reshard_bytes_per_gpu`), and the
engine 1/ep_g of them split over tp_g / ep_g GPUs. Those bytes follow their own layouts; the rest of the
model keeps Table 2.
"""

from __future__ import annotations

from rlsim.sim.costs.collectives import allgather_time, ring_bandwidth_bytes_per_s
from rlsim.sim.costs.layout import ParallelLayout
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


def _expert_layouts(train_tp: int, train_pp: int, train_dp: int, train_ep: int, gen_tp: int,
                    gen_ep: int) -> tuple[ParallelLayout, ParallelLayout]:
    """The training and engine layouts whose expert rules (costs/layout.py) the reshard reads."""
    return (ParallelLayout(tp=train_tp, pp=train_pp, dp=train_dp, ep=train_ep),
            ParallelLayout(tp=gen_tp, ep=gen_ep, engine=True))


def expert_reshard_bytes_per_gpu(
    method: str, expert_bytes: float, train_tp: int, train_pp: int, train_dp: int, train_ep: int, gen_tp: int,
    gen_ep: int,
) -> float:
    """Expert bytes each GPU receives in the train->generate transition when either side uses expert parallelism.

    A GPU's expert shard is a block of experts (1/ep of them) times a slice of each (1/split of it; training's
    pipeline stage holds 1/pp of the layers, folded into the slice as Table 2 folds it into t*p). The engine
    needs 1/tp_g of the experts; what it already holds is the overlap of its training shard with that engine
    shard, the blocks and slices taken as nested and aligned (the 3D-HybridEngine's grouping, as for the rest
    of the model): min(1/ep_t, 1/ep_g) x min(1/(split_t x pp_t), 1/split_g). Same ep and split on both sides:
    nothing moves. hybridflow-v gathers the experts over the expert group x pp GPUs that share them; naive
    gathers everything over every GPU, whatever the layout.
    """
    train, gen = _expert_layouts(train_tp, train_pp, train_dp, train_ep, gen_tp, gen_ep)
    train_split, gen_split = train.expert_tensor_split, gen.expert_tensor_split
    if method == "naive":
        return reshard_bytes_per_gpu(method, expert_bytes, train_tp, train_pp, train_dp, gen_tp)
    if method == "hybridflow-v":
        share = train.expert_group_gpus
        return (share - 1) / share * expert_bytes
    if method == "3d-hybrid-engine":
        held = min(1.0 / train_ep, 1.0 / gen_ep) * min(1.0 / (train_split * train_pp), 1.0 / gen_split)
        return max(0.0, 1.0 / gen_tp - held) * expert_bytes
    raise ValueError(f"unknown reshard method {method!r} (known: {', '.join(RESHARD_METHODS)})")


def expert_reshard_time(
    method: str, expert_bytes: float, hw: HardwareProfile, train_tp: int, train_pp: int, train_dp: int,
    train_ep: int, gen_tp: int, gen_ep: int, gpus_per_node: int = 8,
) -> float:
    """Seconds to move the experts into the engine's layout: a gather among the GPUs holding any piece of a
    GPU's engine shard (3D-HybridEngine: its training expert group x pp GPUs and its engine's
    tp_g GPUs; hybridflow-v: the expert group; naive: every GPU)."""
    if method == "naive":
        return reshard_time(method, expert_bytes, hw, train_tp, train_pp, train_dp, gen_tp, 1, gpus_per_node)
    volume = expert_reshard_bytes_per_gpu(method, expert_bytes, train_tp, train_pp, train_dp, train_ep, gen_tp,
                                          gen_ep)
    group = _expert_layouts(train_tp, train_pp, train_dp, train_ep, gen_tp, gen_ep)[0].expert_group_gpus
    if method == "3d-hybrid-engine":
        group = max(group, gen_tp)
    if volume <= 0 or group <= 1:
        return 0.0
    bw = ring_bandwidth_bytes_per_s(hw, group, gpus_per_node)
    return allgather_time(volume * group / (group - 1), group, bw, hw.collective_latency_s)
