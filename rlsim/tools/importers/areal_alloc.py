"""AReaL allocation strings -> the GPUs and parallelism of each engine.

Two syntaxes (AReaL 1.0.x `areal/api/alloc_mode.py` grammar, and the 0.x one before it):

- current: `sglang:d4t2+fsdp:d8`, `sglang[rollout]:d2+fsdp[actor]:d4|fsdp[critic]:d4`, per engine
  `rollout.backend: sglang:d4t2`, `actor.backend: fsdp:d8`; dims d (data), t (tensor), p (pipeline),
  c (context), e (expert); `+` puts components on different GPUs, `|` on the same ones;
- old: `sglang.d64p1m1+d32p2m1` (inference engine `.`, m = tensor parallel; the training part has no
  backend).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

INFERENCE = ("sglang", "vllm")
TRAINING = ("fsdp", "megatron", "archon")
_NEW = re.compile(r"^(?:(?P<backend>[a-z]+))?(?:\[(?P<name>[A-Za-z_]\w*)\])?:(?P<dims>[a-z0-9]+)$")
_OLD = re.compile(r"^(?:(?P<backend>sglang|vllm)\.)?(?P<dims>(?:[dpmtc]\d+)+)$")
_DIM = re.compile(r"([a-z])(\d+)")


@dataclass
class Component:
    """One engine of an allocation: its backend, optional name and parallel sizes."""

    backend: str
    name: str | None
    dims: dict[str, int] = field(default_factory=dict)
    group: int = 0  # components with the same group share GPUs (`|`)
    old_syntax: bool = False

    @property
    def tp(self) -> int:
        return self.dims.get("t", 1)

    @property
    def pp(self) -> int:
        return self.dims.get("p", 1)

    @property
    def gpus(self) -> int:
        return self.dims.get("d", 1) * self.tp * self.pp * self.dims.get("c", 1)

    @property
    def inference(self) -> bool:
        return self.backend in INFERENCE


def parse_allocation(text: str) -> list[Component]:
    """Every component of an allocation string; ValueError (one line) when it cannot be read."""
    text = str(text).replace(" ", "")
    if not text:
        raise ValueError("empty allocation")
    components = []
    for group, part in enumerate(text.split("+")):
        for piece in part.split("|"):
            components.append(_component(piece, group))
    return components


def _component(piece: str, group: int) -> Component:
    if "(" in piece or "attn:" in piece:
        raise ValueError(f"{piece!r}: the MoE attn/ffn form is not imported (give one parallel strategy)")
    match = _NEW.match(piece)
    if match:
        backend = match["backend"]
        if backend is None or backend not in (*INFERENCE, *TRAINING):
            raise ValueError(f"{piece!r}: unknown backend {backend!r} (known: {', '.join((*INFERENCE, *TRAINING))})")
        dims = _dims(piece, match["dims"], "dtpce")
        return Component(backend, match["name"], dims, group)
    match = _OLD.match(piece)
    if match:
        dims = _dims(piece, match["dims"].replace("m", "t"), "dtpc")
        backend = match["backend"] or ("megatron" if dims.get("p", 1) > 1 or dims.get("t", 1) > 1 else "fsdp")
        return Component(backend, None, dims, group, old_syntax=match["backend"] is None)
    if _DIM.fullmatch(piece) or re.fullmatch(r"(?:[dtpce]\d+)+", piece):
        raise ValueError(f"{piece!r}: name the backend (e.g. fsdp:{piece} or megatron:{piece})")
    raise ValueError(f"cannot read {piece!r} (expected e.g. sglang:d4t2, fsdp:d8 or old sglang.d4m2)")


def _dims(piece: str, text: str, allowed: str) -> dict[str, int]:
    dims: dict[str, int] = {}
    consumed = "".join(f"{k}{v}" for k, v in _DIM.findall(text))
    if consumed != text:
        raise ValueError(f"{piece!r}: cannot read the sizes {text!r}")
    for kind, size in _DIM.findall(text):
        if kind not in allowed:
            raise ValueError(f"{piece!r}: unknown dimension {kind!r} (known: {', '.join(allowed)})")
        if kind in dims:
            raise ValueError(f"{piece!r}: {kind} given twice")
        if int(size) < 1:
            raise ValueError(f"{piece!r}: sizes start at 1")
        dims[kind] = int(size)
    return dims
