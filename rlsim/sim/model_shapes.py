"""Transformer shapes: presets for the models the published systems train, or explicit dimensions.

Parameter counts are derived from the shape (not typed in) so that the cost models and the memory
check can never disagree with the architecture. Preset dimensions are the models' published
`config.json` values (Hugging Face model cards of meta-llama / codellama / Qwen).
"""

from __future__ import annotations

from functools import cached_property

from pydantic import BaseModel, ConfigDict, Field, model_validator

# Sizes derived from the shape, computed once per instance: cost functions ask for them on every call.
_DERIVED = ("d_head", "params", "active_params", "weight_bytes_total", "kv_bytes_per_token", "weight_tensors")


class ModelShape(BaseModel):
    """A decoder-only transformer; MoE when `num_experts` > 0."""

    model_config = ConfigDict(extra="forbid")

    preset: str | None = Field(default=None, description="Name of a preset; explicit fields override it")
    layers: int = Field(gt=0)
    hidden: int = Field(gt=0)
    heads: int = Field(gt=0)
    kv_heads: int = Field(gt=0)
    head_dim: int | None = Field(default=None, gt=0, description="Default hidden // heads")
    ffn: int = Field(gt=0, description="Dense FFN intermediate size (per expert for MoE)")
    vocab: int = Field(gt=0)
    tied_embeddings: bool = False
    num_experts: int = Field(default=0, ge=0)
    experts_per_token: int = Field(default=0, ge=0)
    weight_bytes: float = Field(default=2.0, ge=0.125, le=8, description="Bytes per weight: 2 bf16, 1 fp8")
    kv_bytes: float = Field(default=2.0, ge=0.125, le=8, description="Bytes per KV-cache element (1 bit .. fp64)")
    attention_bias: bool = Field(
        default=False, description="q, k and v projections carry biases (Qwen2 / Qwen2.5): 3 more tensors per layer"
    )
    qk_norm: bool = Field(default=False, description="Per-head RMSNorm of q and k (Qwen3): 2 more tensors per layer")

    def model_copy(self, *, update=None, deep: bool = False):
        """As pydantic's, without the derived sizes cached on this instance (an update may change them)."""
        copy = super().model_copy(update=update, deep=deep)
        for name in _DERIVED:
            copy.__dict__.pop(name, None)
        return copy

    @model_validator(mode="after")
    def _check(self) -> ModelShape:
        if self.kv_heads > self.heads or self.heads % self.kv_heads:
            raise ValueError(f"kv_heads ({self.kv_heads}) must divide heads ({self.heads})")
        if self.num_experts and not 0 < self.experts_per_token <= self.num_experts:
            raise ValueError("experts_per_token must be in 1..num_experts for an MoE model")
        return self

    @cached_property
    def d_head(self) -> int:
        return self.head_dim or self.hidden // self.heads

    def _attention_params(self) -> int:
        q_out = self.heads * self.d_head
        kv_out = 2 * self.kv_heads * self.d_head
        return self.hidden * (q_out + kv_out) + q_out * self.hidden

    def _ffn_params(self, experts: int) -> int:
        return 3 * self.hidden * self.ffn * max(experts, 1)  # gated (SwiGLU) MLP: up, gate, down

    def _embedding_params(self) -> int:
        return self.vocab * self.hidden * (1 if self.tied_embeddings else 2)

    @cached_property
    def params(self) -> float:
        """Total parameters (all experts): what memory and weight sync pay for."""
        per_layer = self._attention_params() + self._ffn_params(self.num_experts)
        router = self.hidden * self.num_experts
        return float(self.layers * (per_layer + router) + self._embedding_params())

    @cached_property
    def active_params(self) -> float:
        """Parameters touched per token: what FLOPs pay for (= params for dense models)."""
        if not self.num_experts:
            return self.params
        per_layer = self._attention_params() + self._ffn_params(self.experts_per_token)
        return float(self.layers * per_layer + self._embedding_params())

    @cached_property
    def weight_bytes_total(self) -> float:
        return self.params * self.weight_bytes

    @cached_property
    def weight_tensors(self) -> int:
        """Named weight tensors of the checkpoint: what a sync that sends one tensor per call pays for.

        Per layer: q, k, v, o, two norms, (q/k/v biases), (q/k norms), then the MLP: gate, up and down, or for an
        MoE the router plus gate, up and down of every expert. Plus the embedding, the final norm and the LM head
        (unless tied). Biases and q/k norms are not counted in `params` (under 0.1% of the weights).
        """
        attention = 4 + 2 + (3 if self.attention_bias else 0) + (2 if self.qk_norm else 0)
        mlp = 1 + 3 * self.num_experts if self.num_experts else 3
        return self.layers * (attention + mlp) + 2 + (0 if self.tied_embeddings else 1)

    @cached_property
    def kv_bytes_per_token(self) -> float:
        """2 (K and V) x layers x kv_heads x head_dim x bytes (docs/sources.md, Design notes)."""
        return 2.0 * self.layers * self.kv_heads * self.d_head * self.kv_bytes


def _p(**kw) -> dict:
    return kw


# Published config.json values. Llama "34B" in HybridFlow is CodeLlama-34B's architecture.
PRESETS: dict[str, dict] = {
    "llama-2-7b": _p(layers=32, hidden=4096, heads=32, kv_heads=32, ffn=11008, vocab=32000),
    "llama-2-13b": _p(layers=40, hidden=5120, heads=40, kv_heads=40, ffn=13824, vocab=32000),
    "llama-2-34b": _p(layers=48, hidden=8192, heads=64, kv_heads=8, ffn=22016, vocab=32000),
    "llama-2-70b": _p(layers=80, hidden=8192, heads=64, kv_heads=8, ffn=28672, vocab=32000),
    "llama-3-8b": _p(layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=128256),
    "llama-3-70b": _p(layers=80, hidden=8192, heads=64, kv_heads=8, ffn=28672, vocab=128256),
    "qwen2.5-0.5b": _p(layers=24, hidden=896, heads=14, kv_heads=2, ffn=4864, vocab=151936,
                         tied_embeddings=True, attention_bias=True),
    "qwen2.5-1.5b": _p(layers=28, hidden=1536, heads=12, kv_heads=2, ffn=8960, vocab=151936,
                         tied_embeddings=True, attention_bias=True),
    "qwen2.5-3b": _p(layers=36, hidden=2048, heads=16, kv_heads=2, ffn=11008, vocab=151936,
                         tied_embeddings=True, attention_bias=True),
    "qwen2.5-7b": _p(layers=28, hidden=3584, heads=28, kv_heads=4, ffn=18944, vocab=152064,
                        attention_bias=True),
    "qwen2.5-14b": _p(layers=48, hidden=5120, heads=40, kv_heads=8, ffn=13824, vocab=152064,
                        attention_bias=True),
    "qwen2.5-32b": _p(layers=64, hidden=5120, heads=40, kv_heads=8, ffn=27648, vocab=152064,
                        attention_bias=True),
    "qwen2.5-72b": _p(layers=80, hidden=8192, heads=64, kv_heads=8, ffn=29568, vocab=152064,
                        attention_bias=True),
    "qwen3-30b-a3b": _p(
        layers=48, hidden=2048, heads=32, kv_heads=4, head_dim=128, ffn=768, vocab=151936,
        num_experts=128, experts_per_token=8, qk_norm=True,
    ),
    "qwen3-235b-a22b": _p(
        layers=94, hidden=4096, heads=64, kv_heads=4, head_dim=128, ffn=1536, vocab=151936,
        num_experts=128, experts_per_token=8, qk_norm=True,
    ),
}
# Same architectures under the names the RL papers use.
ALIASES: dict[str, str] = {
    "llama-7b": "llama-2-7b",
    "llama-13b": "llama-2-13b",
    "llama-34b": "llama-2-34b",
    "codellama-34b": "llama-2-34b",
    "llama-70b": "llama-2-70b",
    "llama-3.1-8b": "llama-3-8b",  # Llama 3.1 keeps Llama 3's layers, widths and vocabulary (longer RoPE only)
    "llama-3.1-70b": "llama-3-70b",
    "llama-3.3-70b": "llama-3-70b",
    "qwen2.5-math-7b": "qwen2.5-7b",
    "deepseek-r1-distill-qwen-1.5b": "qwen2.5-1.5b",
    "deepseek-r1-distill-qwen-7b": "qwen2.5-7b",
    "qwq-32b": "qwen2.5-32b",
}


def preset_names() -> list[str]:
    return sorted([*PRESETS, *ALIASES])


def resolve_preset(name: str) -> dict:
    key = ALIASES.get(name.lower(), name.lower())
    if key not in PRESETS:
        raise KeyError(f"unknown model preset {name!r}")
    return dict(PRESETS[key])
