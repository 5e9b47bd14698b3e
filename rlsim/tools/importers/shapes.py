"""The model a framework config names (a Hugging Face path) -> an rlsim model shape.

In order: an explicit `--model-config` (a HF `config.json` or the folder holding one), a local model
folder with a `config.json`, a preset whose name the path contains (`Qwen/Qwen2.5-7B-Instruct` ->
qwen2.5-7b), else an assumed preset listed under "assumed".
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from rlsim.sim.api import preset_names
from rlsim.sim.inputs import YamlInputError, read_text_bounded
from rlsim.tools.importers.common import ImportProblem, Ledger

ASSUMED_PRESET = "qwen2.5-7b"

# HF config.json names -> ModelShape fields; the first present name wins.
_HF_FIELDS: dict[str, tuple[str, ...]] = {
    "layers": ("num_hidden_layers", "n_layer", "num_layers"),
    "hidden": ("hidden_size", "n_embd", "d_model"),
    "heads": ("num_attention_heads", "n_head"),
    "ffn": ("moe_intermediate_size", "intermediate_size", "ffn_hidden_size"),
    "vocab": ("vocab_size",),
}
_HF_EXPERTS = ("num_experts", "num_local_experts", "n_routed_experts")
_DTYPE_BYTES = {"bfloat16": 2.0, "float16": 2.0, "float32": 4.0, "float8_e4m3fn": 1.0}


def shape_from_hf_config(path: Path) -> dict[str, Any]:
    """ModelShape fields from a Hugging Face `config.json` (dense or MoE decoder-only)."""
    file = path / "config.json" if path.is_dir() else path
    try:
        cfg = json.loads(read_text_bounded(file))
    except FileNotFoundError:
        raise ImportProblem(str(file), "", "file not found") from None
    except (YamlInputError, ValueError) as exc:
        raise ImportProblem(str(file), "", f"not a JSON config: {getattr(exc, 'message', exc)}") from None
    if not isinstance(cfg, dict):
        raise ImportProblem(str(file), "", "expected a JSON object (a Hugging Face config.json)")
    cfg = {**cfg.get("text_config", {}), **cfg} if isinstance(cfg.get("text_config"), dict) else cfg
    shape: dict[str, Any] = {}
    missing = []
    experts = next((cfg[k] for k in _HF_EXPERTS if isinstance(cfg.get(k), int) and cfg[k] > 0), 0)
    for target, names in _HF_FIELDS.items():
        names = names if experts or target != "ffn" else names[1:]
        value = next((cfg[n] for n in names if isinstance(cfg.get(n), int)), None)
        if value is None:
            missing.append(" / ".join(names))
        shape[target] = value
    if missing:
        raise ImportProblem.many(str(file), [("", f"missing {m} (not a decoder-only transformer config?)")
                                             for m in missing])
    shape["kv_heads"] = cfg.get("num_key_value_heads") or shape["heads"]
    if isinstance(cfg.get("head_dim"), int):
        shape["head_dim"] = cfg["head_dim"]
    shape["tied_embeddings"] = bool(cfg.get("tie_word_embeddings", False))
    # Tensors a per-tensor weight sync sends: Qwen2's q/k/v biases (its config has no flag), Qwen3's q/k norms.
    family = str(cfg.get("model_type", ""))
    shape["attention_bias"] = bool(cfg.get("attention_bias", family.startswith("qwen2")))
    shape["qk_norm"] = family.startswith("qwen3")
    if experts:
        shape["num_experts"] = experts
        shape["experts_per_token"] = cfg.get("num_experts_per_tok") or cfg.get("num_experts_per_token") or 1
    dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")
    shape["weight_bytes"] = _DTYPE_BYTES.get(dtype, 2.0)
    return shape


def preset_for(name: str) -> str | None:
    """The longest preset name found in a model path at word boundaries (`Qwen2.5-7B-Instruct` -> qwen2.5-7b)."""
    base = name.rstrip("/").split("/")[-1].lower().replace("_", "-")
    best = None
    for cand in preset_names():
        if re.search(rf"(^|-){re.escape(cand)}($|-)", base) and (best is None or len(cand) > len(best)):
            best = cand
    return best


def model_spec(ledger: Ledger, key: str, model_config: Path | None, model_name: str) -> dict[str, Any]:
    """The scenario `models.<model_name>` entry for the model at config leaf `key`."""
    path = ledger.peek(key)
    where = f"models.{model_name}"
    if model_config is not None:
        ledger.use(key, f"{where} (shape from --model-config {model_config})")
        return shape_from_hf_config(model_config)
    local = Path(str(path)).expanduser() if isinstance(path, str) and path else None
    if local is not None and (local / "config.json").is_file():
        ledger.use(key, f"{where} (shape from {local / 'config.json'})")
        return shape_from_hf_config(local)
    preset = preset_for(str(path)) if isinstance(path, str) and path else None
    if preset is not None:
        ledger.use(key, f"{where}.preset = {preset} (matched by name)")
        return {"preset": preset}
    if path is not None:
        ledger.use(key, f"{where} (no preset matches {str(path)!r}: shape assumed)")
    ledger.assume(f"model shape of {path!r}" if path else "model shape", f"preset {ASSUMED_PRESET}",
                  f"--model-config PATH/config.json, or --set {where}.preset=NAME (`rlsim presets`)")
    return {"preset": ASSUMED_PRESET}
