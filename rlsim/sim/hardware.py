"""Hardware profiles: datasheet specs plus calibrated efficiencies, one YAML file per GPU.

Field names carry their unit (llm-analysis style) so a reader never has to guess whether a number
is in TB/s or GB/s. Every numeric field must cite its source in `sources`; the loader refuses a
profile with an uncited number, because an uncited constant is an untestable one.
"""

from __future__ import annotations

import math
from functools import cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rlsim.sim.limits import MAX_BANDWIDTH_GBIT
from rlsim.sim.paths import shipped_dir
from rlsim.sim.suggest import did_you_mean

# Plausible ranges: a datasheet number outside them is a typo (1e-300 TB/s is not a memory system, and its
# reciprocal is inf). Efficiencies are fractions of a peak; below 0.1% nothing useful runs.
MIN_EFFICIENCY = 0.001
# Fallbacks for a profile without a send/recv fit (docs/operators.md, Expert parallelism): the in-node
# point-to-point latency over the all-reduce's per-hop one, and the cross-node over the in-node latency,
# rounded from the two DGX fits (A100 13.2/2.79 and 29.0/13.2, H100 7.6/2.04 and 19.1/7.6).
P2P_PER_HOP_RATIO = 4.0
P2P_INTER_NODE_RATIO = 2.5
# The largest bytes per weight of a 4-bit and of an 8-bit format with its block scales (costs/quantisation.py):
# NVFP4, 0.5 + one 1-byte scale per 16; MXFP8, 1 + one 1-byte scale per 32.
FP4_MAX_BYTES = 0.5 + 1.0 / 16
FP8_MAX_BYTES = 1.0 + 1.0 / 32

# Fields that are numbers about the hardware and therefore need a citation.
_NUMERIC_FIELDS = (
    "bf16_tflops",
    "fp8_tflops",
    "fp4_tflops",
    "hbm_gb",
    "hbm_tb_per_s",
    "nvlink_gb_per_s",
    "nvlink_domain_gpus",
    "nic_gbit_per_s",
    "pcie_gb_per_s",
    "decode_eta_mem",
    "decode_eta_compute",
    "decode_fixed_overhead_ms",
    "prefill_eta_compute",
    "train_mfu",
    "forward_mfu",
    "collective_latency_us",
    "p2p_latency_us",
    "p2p_latency_inter_node_us",
    "price_usd_per_gpu_hour",
    "gemm_fixed_us",
    "layer_small_ops_us",
    "kernel_launch_us",
    "moe_layer_fixed_us",
    "moe_gemm_eta_mem",
    "moe_gemm_eta_compute",
    "moe_routing_per_token_us",
    "attention_fixed_us",
    "small_ops_eta_mem",
)
# The GEMM share of peak between the operator fit's two points (docs/operators.md): `decode_eta_compute` at
# 512 tokens and `prefill_eta_compute` at 4,096, log-linear in tokens between them and flat outside.
GEMM_ETA_LOW_TOKENS = 512.0
GEMM_ETA_HIGH_TOKENS = 4096.0
# A profile without its own `small_ops_eta_mem` takes h100-sxm's operator-fitted value (assumed; the same fit on
# the GPU's own memory-bound operators would settle it).
DEFAULT_SMALL_OPS_ETA_MEM = 0.553


class HardwareProfile(BaseModel):
    """One accelerator type. Bandwidths are per GPU and per direction."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # a NaN bandwidth poisons all

    name: str
    description: str = ""
    # Datasheet specs (docs/sources.md §1), dense (not sparse) peaks.
    bf16_tflops: float = Field(ge=0.1, le=100_000, description="Peak dense BF16 tensor throughput, TFLOP/s")
    fp8_tflops: float | None = Field(
        default=None, ge=0.1, le=100_000, description="Peak dense FP8 tensor throughput, TFLOP/s (None: no FP8)"
    )
    fp4_tflops: float | None = Field(
        default=None, ge=0.1, le=100_000,
        description="Peak dense FP4 (NVFP4 / MXFP4) tensor throughput, TFLOP/s (None: no FP4 tensor cores)",
    )
    hbm_gb: float = Field(ge=1, le=100_000, description="HBM capacity, GB (1e9 bytes)")
    hbm_tb_per_s: float = Field(ge=0.01, le=1000, description="HBM bandwidth, TB/s")
    nvlink_gb_per_s: float = Field(
        ge=0, le=100_000, description="Intra-node GPU-GPU bandwidth per direction, GB/s (0: PCIe only)"
    )
    nvlink_domain_gpus: int | None = Field(
        default=None, ge=1, le=100_000,
        description="GPUs one NVLink domain joins (GB200/GB300 NVL72: 72 GPUs over 18 hosts of 4); None: one node. "
        "Collectives inside a domain use NVLink, across domains the NIC")
    nic_gbit_per_s: float = Field(ge=0.1, le=MAX_BANDWIDTH_GBIT, description="Inter-node NIC bandwidth per GPU, Gbit/s")
    pcie_gb_per_s: float = Field(ge=0.1, le=10_000, description="Host<->device bandwidth achieved, GB/s")
    # Calibrated efficiencies / overheads.
    decode_eta_mem: float = Field(ge=MIN_EFFICIENCY, le=1, description="Achieved fraction of HBM bandwidth in decode")
    decode_eta_compute: float = Field(ge=MIN_EFFICIENCY, le=1, description="Achieved fraction of peak FLOP/s in decode")
    decode_fixed_overhead_ms: float = Field(
        ge=0, le=10_000, description="Per engine step fixed cost (scheduler, sampling, launch), ms"
    )
    prefill_eta_compute: float = Field(
        ge=MIN_EFFICIENCY, le=1, description="Achieved fraction of peak FLOP/s in prefill"
    )
    # Explicit overrides (a user's, or `rlsim calibrate`'s fit): every training / forward FLOP at this MFU instead of
    # pricing the pass from the operator fit (costs/training_ops.py). Shipped profiles set neither: MFU is a result.
    train_mfu: float | None = Field(default=None, ge=MIN_EFFICIENCY, le=1, description=(
        "Override: model FLOPs utilisation of training (None: training priced from the operator fit)"))
    forward_mfu: float | None = Field(default=None, ge=MIN_EFFICIENCY, le=1, description=(
        "Override: model FLOPs utilisation of forward-only passes (None: priced from the operator fit)"))
    collective_latency_us: float = Field(
        ge=0, le=1_000_000, description="Per-collective latency term alpha, microseconds"
    )
    p2p_latency_us: float | None = Field(
        default=None, ge=0, le=1_000_000,
        description="Latency of one point-to-point send/recv inside a node, us (None: 4 x collective_latency_us)")
    p2p_latency_inter_node_us: float | None = Field(
        default=None, ge=0, le=1_000_000,
        description="Latency of one point-to-point send/recv between nodes, us (None: 2.5 x the in-node one)")
    price_usd_per_gpu_hour: float | None = Field(default=None, ge=0, le=10_000, description="Indicative rental price")
    # Per-operator structure from `rlsim calibrate ops` (docs/operators.md); None: the older closed form.
    gemm_fixed_us: float | None = Field(
        default=None, ge=0, description="GPU time of one linear-layer GEMM kernel beyond its roofline, us")
    layer_small_ops_us: float | None = Field(
        default=None, ge=0, description="Norms, rope, activation and adds of one layer at decode sizes, us")
    moe_layer_fixed_us: float | None = Field(
        default=None, ge=0, description="An MoE layer's gating, routing, shuffle and grouped-GEMM fixed time, us")
    # The grouped expert GEMM per device (docs/operators.md, "MoE layers"); both or neither (None: experts
    # priced with the dense roofline).
    moe_gemm_eta_mem: float | None = Field(
        default=None, ge=MIN_EFFICIENCY, le=1, description="Grouped GEMM's share of HBM bandwidth reading experts")
    moe_gemm_eta_compute: float | None = Field(
        default=None, ge=MIN_EFFICIENCY, le=1, description="Grouped GEMM's share of peak FLOP/s")
    moe_routing_per_token_us: float | None = Field(
        default=None, ge=0, le=1_000, description="Gating, top-k and shuffle time per token of a device, us")
    attention_fixed_us: float | None = Field(
        default=None, ge=0, le=1_000_000,
        description="One layer's decode-attention and KV-write kernel time beyond the KV read, us")
    kernel_launch_us: float | None = Field(
        default=None, ge=0, description="Host launch cost per kernel when an engine runs without CUDA graphs, us")
    small_ops_eta_mem: float | None = Field(
        default=None, ge=MIN_EFFICIENCY, le=1,
        description="Share of HBM bandwidth of a layer's norms, rope, activation and adds above the L2 knee")
    sources: dict[str, str] = Field(description="Citation for every numeric field")

    @model_validator(mode="after")
    def _every_number_is_cited(self) -> HardwareProfile:
        missing = [f for f in _NUMERIC_FIELDS if getattr(self, f) is not None and f not in self.sources]
        if missing:
            raise ValueError(f"numbers without a source in `sources`: {', '.join(missing)}")
        unknown = sorted(set(self.sources) - set(_NUMERIC_FIELDS))
        if unknown:
            raise ValueError(f"`sources` names unknown fields: {', '.join(unknown)}")
        if (self.moe_gemm_eta_mem is None) != (self.moe_gemm_eta_compute is None):
            raise ValueError("moe_gemm_eta_mem and moe_gemm_eta_compute: give both or neither")
        return self

    @property
    def moe_gemm_fitted(self) -> bool:
        """Whether the grouped expert GEMM has its own fitted form (docs/operators.md, "MoE layers")."""
        return self.moe_gemm_eta_mem is not None

    # Derived SI quantities used by the cost models.
    @property
    def peak_flops(self) -> float:
        return self.bf16_tflops * 1e12

    def peak_flops_for(self, weight_bytes: float) -> float:
        """Peak FLOP/s for the weights' bytes per element, block scales included: 4-bit weights (NVFP4's 0.5625 at
        most) use FP4 tensor cores, 8-bit ones (MXFP8's 1.03125 at most) FP8 tensor cores, where the GPU has them.
        Without them the weights are dequantised into BF16 GEMMs (weight-only, as vLLM's Marlin kernels run FP8
        on Ampere and FP4 before Blackwell): the BF16 peak, the bytes read still the format's."""
        if weight_bytes <= FP4_MAX_BYTES:
            return self.peak_flops if self.fp4_tflops is None else self.fp4_tflops * 1e12
        if weight_bytes <= FP8_MAX_BYTES and self.fp8_tflops is not None:
            return self.fp8_tflops * 1e12
        return self.peak_flops

    @property
    def hbm_bytes(self) -> float:
        return self.hbm_gb * 1e9

    @property
    def hbm_bytes_per_s(self) -> float:
        return self.hbm_tb_per_s * 1e12

    @property
    def nvlink_bytes_per_s(self) -> float:
        return self.nvlink_gb_per_s * 1e9

    @property
    def nic_bytes_per_s(self) -> float:
        return self.nic_gbit_per_s * 1e9 / 8

    @property
    def pcie_bytes_per_s(self) -> float:
        return self.pcie_gb_per_s * 1e9

    @property
    def decode_fixed_overhead_s(self) -> float:
        return self.decode_fixed_overhead_ms * 1e-3

    @property
    def collective_latency_s(self) -> float:
        return self.collective_latency_us * 1e-6

    def p2p_latency_s(self, inter_node: bool = False) -> float:
        """One point-to-point message's latency (an all-to-all's fixed cost), inside a node or across nodes.

        A profile without the send/recv fit falls back to the ratios of the two fitted ones (Vidur's DGX
        send_recv.csv: in-node 3.7-4.7 x the all-reduce's per-hop latency, across nodes 2.2-2.5 x in-node).
        """
        intra = self.p2p_latency_us
        if intra is None:
            intra = P2P_PER_HOP_RATIO * self.collective_latency_us
        if not inter_node:
            return intra * 1e-6
        if self.p2p_latency_inter_node_us is not None:
            return self.p2p_latency_inter_node_us * 1e-6
        return P2P_INTER_NODE_RATIO * intra * 1e-6

    def gemm_eta_compute(self, tokens: float) -> float:
        """The linear layers' GEMM share of peak at `tokens` tokens: the operator fit's `decode_eta_compute` (512
        tokens) and `prefill_eta_compute` (4,096 tokens), log-linear in tokens between them, flat outside (below
        512 tokens a GEMM's weight read, not its compute, sets its time in the roofline)."""
        lo, hi = self.decode_eta_compute, self.prefill_eta_compute
        if tokens <= GEMM_ETA_LOW_TOKENS:
            return lo
        if tokens >= GEMM_ETA_HIGH_TOKENS:
            return hi
        f = math.log(tokens / GEMM_ETA_LOW_TOKENS) / math.log(GEMM_ETA_HIGH_TOKENS / GEMM_ETA_LOW_TOKENS)
        return lo + f * (hi - lo)

    @property
    def small_ops_eta(self) -> float:
        """HBM share of the memory-bound operators at training sizes (the profile's, else h100-sxm's, assumed)."""
        return DEFAULT_SMALL_OPS_ETA_MEM if self.small_ops_eta_mem is None else self.small_ops_eta_mem

    @property
    def layer_fixed_s(self) -> float:
        """GPU time per layer that does not scale with weights or tokens: 4 GEMM kernels' fixed cost plus the
        small memory-bound operators (0 for a profile without the operator fit)."""
        if self.gemm_fixed_us is None:
            return 0.0
        return (4.0 * self.gemm_fixed_us + (self.layer_small_ops_us or 0.0)) * 1e-6

    @property
    def attention_fixed_s(self) -> float:
        """Per layer and decode step: the paged-attention kernel's fixed time plus the KV-cache write (0 unfitted)."""
        return (self.attention_fixed_us or 0.0) * 1e-6

    def nvlink_domain(self, gpus_per_node: int) -> int:
        """GPUs that reach each other without the NIC: the NVLink domain (NVL72: 72 GPUs of 18 hosts), else a node
        (PCIe cards too: their in-node traffic goes over PCIe, `intra_node_bytes_per_s`)."""
        if self.nvlink_domain_gpus is None or self.nvlink_gb_per_s <= 0:
            return gpus_per_node
        return max(self.nvlink_domain_gpus, gpus_per_node)

    def intra_node_bytes_per_s(self) -> float:
        """GPU-GPU bandwidth inside a node: NVLink, or PCIe where there is none (L40S)."""
        return self.nvlink_bytes_per_s if self.nvlink_gb_per_s > 0 else self.pcie_bytes_per_s


def profiles_dir() -> Path:
    """The shipped hardware_profiles/ folder (top level in the repo, rlsim.hardware_profiles when installed)."""
    return shipped_dir("hardware_profiles")


def available_profiles(extra_dirs: tuple[Path, ...] = ()) -> list[str]:
    names = {p.stem for p in profiles_dir().glob("*.yaml")}
    for d in extra_dirs:
        names |= {p.stem for p in Path(d).glob("*.yaml")}
    return sorted(names)


def load_profile_file(path: Path) -> HardwareProfile:
    """A profile YAML, read with the scenario's limits (no FIFO, device or huge file; rlsim/sim/yaml_input.py)."""
    from rlsim.sim.yaml_input import load_yaml_file

    return HardwareProfile.model_validate(load_yaml_file(path))


# Words in a GPU's name that say nothing about which profile it is: the vendor and the memory technology.
_NAME_NOISE = ("nvidia", "amd", "tesla", "instinct", "geforce", "hbm", "hbm2", "hbm2e", "hbm3", "hbm3e")


def _name_parts(name: str) -> list[str]:
    """A GPU name's words, lower case, vendor and memory-technology words dropped (`sxm5` is `sxm`)."""
    text = str(name).lower().strip()
    for sep in (" ", "_", "/"):
        text = text.replace(sep, "-")
    parts = [p for p in text.split("-") if p and p not in _NAME_NOISE]
    return ["sxm" if p.startswith("sxm") and p[3:].isdigit() else p for p in parts]


def canonical_profile(name: str, known: list[str] | None = None) -> str | None:
    """The shipped profile a GPU name means, matched case- and vendor-insensitively: `H100`, `h100`,
    `H100-SXM`, `NVIDIA H100`, `NVIDIA H100 80GB HBM3` -> h100-sxm. The first word picks the family
    (h100 never matches h800); every other word must be one of the profile's, or a memory size or `sxm` where
    the profile names none (`NVIDIA A100-SXM4-80GB` -> a100-80gb; a PCIe card never matches an SXM profile).
    None when no profile, or more than one, fits."""
    known = available_profiles() if known is None else known
    parts = _name_parts(name)
    if not parts:
        return None
    exact = [k for k in known if _name_parts(k) == parts]
    if exact:
        return exact[0]

    def fits(profile: str) -> bool:
        words = _name_parts(profile)
        memory = any(w.endswith("gb") for w in words[1:])
        form = any(w in ("sxm", "pcie") for w in words[1:])
        return words[0] == parts[0] and all(p in words[1:] or (p.endswith("gb") and not memory)
                                            or (p == "sxm" and not form) for p in parts[1:])

    found = [k for k in known if fits(k)]
    return found[0] if len(found) == 1 else None


def unknown_profile_message(name: str, known: list[str]) -> str:
    """`unknown hardware profile 'X': did you mean Y? (known: ...)`. The guess stays in the GPU's family (an
    H100 PCIe is offered h100-sxm); else the closest name that is not another number of the same series
    (an H100 is never offered an h800, an A100 never an a800)."""
    parts = _name_parts(name) or [""]
    family = [k for k in known if _name_parts(k)[0] == parts[0]]
    if family:
        guess = f": did you mean {' or '.join(family)}?"
    else:
        guess = did_you_mean(name, [k for k in known if not _other_number(_name_parts(k)[0], parts[0])])
    return f"unknown hardware profile {name!r}{guess} (known: {', '.join(known)})"


def _other_number(a: str, b: str) -> bool:
    """h100 / h800, a100 / a800: one letter, then numbers of one length that differ: another GPU."""
    return a != b and len(a) == len(b) and a[:1] == b[:1] and a[1:].isdigit() and b[1:].isdigit()


@cache
def load_profile(name: str) -> HardwareProfile:
    """Load a shipped profile by name (e.g. `h100-sxm`, or `H100` / `NVIDIA H100`: see `canonical_profile`) or by
    path to a YAML file."""
    if "\0" in name:
        raise KeyError(f"hardware profile {name!r} holds a NUL byte: not a profile name or file")
    candidate = Path(name)
    if candidate.suffix in (".yaml", ".yml") and candidate.exists():
        return load_profile_file(candidate)
    path = profiles_dir() / f"{name}.yaml"
    if not path.exists():
        known = available_profiles()
        canonical = canonical_profile(name, known)
        if canonical is None:
            raise KeyError(unknown_profile_message(name, known))
        path = profiles_dir() / f"{canonical}.yaml"
    return load_profile_file(path)


def profile_numeric_fields() -> tuple[str, ...]:
    """The profile's numeric fields in declaration order: each one needs a source (for writers of profiles)."""
    return _NUMERIC_FIELDS
