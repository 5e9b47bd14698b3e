"""The colocated train <-> generate transition, built from parts that scale with the model (docs/sources.md §12).

Train -> generate, per GPU, in verl's order (sharding manager `__enter__`):

1. `wake`: the engine wakes (vLLM sleep mode / SGLang resume). At sleep level 1 the engine's weights
   were backed up to pinned host memory at sleep and come back over PCIe; the KV-cache pool is
   re-mapped (`KV_MAP_BYTES_PER_S`, assumed).
2. `gather`: the training shards are gathered into full tensors. FSDP: every rank all-gathers each
   parameter from its data-parallel peers (DTensor `full_tensor()`), (dp-1)/dp of the model, plus one
   collective latency per tensor. Megatron: the 3D-HybridEngine gather (`resharding.py`, HybridFlow Table 2);
   with expert parallelism on either side an MoE model's experts move from the training expert layout to the
   engine's on their own (`expert_reshard_time`: nothing when both hold the same ep over the same GPUs).
3. `load`: the engine's `load_weights` copies its TP shard into its own parameters (read + write in
   HBM) with a per-tensor host cost; from Megatron a layout conversion to the engine's names and fused
   QKV/gate-up layout adds one more copy.
4. `graphs`: CUDA-graph capture, only where the engine must re-capture after its memory was freed:
   verl's vLLM 0.3-0.6 integrations rebuild the cache engine (with graphs on they re-capture);
   vLLM v1 / SGLang keep virtual addresses across sleep, so their graphs survive (captured once at start).
5. `host`: fixed host work (Python gc + CUDA cache emptying), the schedule's `switch_overhead_s`.
6. `offload`: training state the scenario keeps in host memory (costs/offload.py).

Generate -> train: the engine sleeps (sleep level 1: its weights go to host memory over PCIe; the KV
cache is simply freed) and offloaded training state comes back.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from rlsim.sim.costs.collectives import ring_bandwidth_bytes_per_s
from rlsim.sim.costs.long_context import ELEMENTWISE_HBM_ETA
from rlsim.sim.costs.moe import expert_params
from rlsim.sim.costs.offload import pcie_transfer_time
from rlsim.sim.costs.quantisation import quantise_time
from rlsim.sim.costs.resharding import expert_reshard_time, reshard_time
from rlsim.sim.costs.weight_sync import colocated_extra_time
from rlsim.sim.hardware import HardwareProfile
from rlsim.sim.model_shapes import ModelShape

# Host time per weight tensor in the engine's load_weights loop (name mapping, narrow to the TP shard,
# stacked-parameter dispatch, copy_ launch). Assumed 50 us; settle by timing `model.load_weights` on a
# warm engine for two model sizes.
LOAD_PER_TENSOR_S = 50e-6
# CUDA virtual-memory mapping rate of the KV pool on wake-up (cuMemCreate + cuMemMap + cuMemSetAccess).
# Assumed 100 GB/s; settle by timing vLLM's `wake_up(tags=["kv_cache"])` at two pool sizes.
KV_MAP_BYTES_PER_S = 100e9
# vLLM's default CUDA-graph batch sizes: 1, 2, 4, then 8..512 in steps of 8 (67), capped by max_num_seqs.
CAPTURE_SIZES = (1, 2, 4, *range(8, 513, 8))
# Capture time per graph per decoder layer. Assumed 4 ms (vLLM logs "Graph capturing finished in N secs"
# of a few seconds to ~20 s for 7-8B models with 35-67 sizes); settle with that log line at 2 model sizes.
CAPTURE_S_PER_LAYER = 4e-3
# Engine kinds whose verl integration re-captures graphs after freeing the cache (vLLM < 0.7, no sleep mode).
RECAPTURE_KINDS = ("vllm-0.3", "vllm-0.6")


@dataclass(frozen=True)
class TransitionParts:
    """Seconds of one transition by part (docs/long-context.md)."""

    sleep: float = 0.0
    wake: float = 0.0
    gather: float = 0.0
    load: float = 0.0
    graphs: float = 0.0
    host: float = 0.0
    offload: float = 0.0

    @property
    def total(self) -> float:
        return self.sleep + self.wake + self.gather + self.load + self.graphs + self.host + self.offload

    def items(self):
        return asdict(self).items()


def fsdp_gather_time(model: ModelShape, hw: HardwareProfile, dp: int, gpus_per_node: int) -> float:
    """FSDP: each rank all-gathers every parameter from its dp peers, one collective per tensor."""
    if dp <= 1:
        return 0.0
    volume = (dp - 1) / dp * model.weight_bytes_total
    bw = ring_bandwidth_bytes_per_s(hw, dp, gpus_per_node)
    return volume / bw + model.weight_tensors * hw.collective_latency_s * (dp - 1)


def engine_load_time(model: ModelShape, hw: HardwareProfile, gen_tp: int, convert_layout: bool) -> float:
    """Copy the engine's TP shard into its parameters (read + write), per-tensor host cost on top."""
    shard = model.weight_bytes_total / gen_tp
    copies = 2 if convert_layout else 1
    return copies * 2.0 * shard / (hw.hbm_bytes_per_s * ELEMENTWISE_HBM_ETA) + model.weight_tensors * LOAD_PER_TENSOR_S


def capture_sizes(max_num_seqs: int) -> int:
    """Batch sizes vLLM captures a decode graph for (its defaults up to max_num_seqs)."""
    return sum(1 for s in CAPTURE_SIZES if s <= max_num_seqs) or 1


def graph_capture_time(model: ModelShape, max_num_seqs: int) -> float:
    """Seconds to capture every decode graph once."""
    return capture_sizes(max_num_seqs) * model.layers * CAPTURE_S_PER_LAYER


def engine_weight_swap_time(model: ModelShape, hw: HardwareProfile, gen_tp: int, sleep_level: int) -> float:
    """Sleep level 1 moves the engine's weight shard over PCIe (to host at sleep, back at wake); 2 drops it."""
    return pcie_transfer_time(model.weight_bytes_total / gen_tp, hw) if sleep_level == 1 else 0.0


@dataclass(frozen=True)
class TransitionSetup:
    """What decides a colocated transition (resolved from the scenario by the schedule)."""

    model: ModelShape
    hw: HardwareProfile
    sharding: str  # "fsdp" or "megatron"
    train_tp: int
    train_pp: int
    train_dp: int
    gen_tp: int
    gpus_per_node: int
    reshard: str  # the 3D-HybridEngine method (Megatron)
    engine_kind: str
    cuda_graphs: bool
    max_num_seqs: int
    kv_pool_bytes_per_gpu: float
    sleep_level: int
    host_s: float
    synced: ModelShape | None = None  # what gather and load move, if not the whole model (a LoRA adapter)
    train_ep: int = 1  # expert parallelism of the actor and of the engines (costs/moe.py)
    gen_ep: int = 1
    engine: ModelShape | None = None  # the engines' copy when it differs from the trained model (quantised)
    sync_path: str = "bucketed"  # costs/weight_sync.py: a per-tensor path or host staging adds to `load`
    tensors: int | None = None  # weight tensors moved (None: the model's)
    per_tensor_s: float | None = None
    host_bytes_per_s: float | None = None


def megatron_gather_time(s: TransitionSetup) -> float:
    """The 3D-HybridEngine gather (or the schedule's reshard method); an MoE model with expert parallelism on
    either side moves its non-expert weights that way and its experts between the two expert layouts."""
    moved = s.synced or s.model
    if s.synced is not None or not s.model.num_experts or (s.train_ep <= 1 and s.gen_ep <= 1):
        return reshard_time(s.reshard, moved.weight_bytes_total, s.hw, s.train_tp, s.train_pp, s.train_dp,
                            s.gen_tp, 1, s.gpus_per_node)
    experts = expert_params(s.model) * s.model.weight_bytes
    dense = reshard_time(s.reshard, s.model.weight_bytes_total - experts, s.hw, s.train_tp, s.train_pp, s.train_dp,
                         s.gen_tp, 1, s.gpus_per_node)
    return dense + expert_reshard_time(s.reshard, experts, s.hw, s.train_tp, s.train_pp, s.train_dp, s.train_ep,
                                       s.gen_tp, s.gen_ep, s.gpus_per_node)


def to_generate(s: TransitionSetup, offload_s: float = 0.0) -> TransitionParts:
    """Train -> generate parts (module docstring)."""
    wake = engine_weight_swap_time(s.engine or s.model, s.hw, s.gen_tp, s.sleep_level) + max(
        0.0, s.kv_pool_bytes_per_gpu) / KV_MAP_BYTES_PER_S
    moved = s.synced or s.model
    if s.sharding == "fsdp":
        gather = fsdp_gather_time(moved, s.hw, s.train_dp, s.gpus_per_node)
    else:
        gather = megatron_gather_time(s)
    load = engine_load_time(moved, s.hw, s.gen_tp, convert_layout=s.sharding != "fsdp") + colocated_extra_time(
        s.sync_path, s.tensors if s.tensors is not None else moved.weight_tensors, moved.weight_bytes_total / s.gen_tp,
        s.hw, s.per_tensor_s, s.host_bytes_per_s)
    if s.engine is not None and s.synced is None:  # a quantising load: each GPU quantises its engine shard
        load += quantise_time(s.model, s.engine.weight_bytes, s.hw, s.gen_tp)
    graphs = graph_capture_time(s.model, s.max_num_seqs) if (
        s.cuda_graphs and s.engine_kind in RECAPTURE_KINDS) else 0.0
    return TransitionParts(wake=wake, gather=gather, load=load, graphs=graphs, host=s.host_s, offload=offload_s)


def to_train(s: TransitionSetup, onload_s: float = 0.0) -> TransitionParts:
    """Generate -> train: the engine sleeps (weights to host at level 1), training state comes back."""
    return TransitionParts(sleep=engine_weight_swap_time(s.engine or s.model, s.hw, s.gen_tp, s.sleep_level),
                           offload=onload_s)
