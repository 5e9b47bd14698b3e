"""Reading a framework's Hydra config as the framework would: compose its defaults, apply overrides, resolve.

A config dumped by a run is already composed and resolved (no `defaults:`); a shipped or recipe
config (verl's `ppo_trainer.yaml`, `fully_async_ppo_trainer.yaml`) is composed from the framework's
config folder, found next to the file, through its `hydra.searchpath`, or given with `--config-dir`.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from rlsim.tools.importers.common import ImportProblem
from rlsim.tools.importers.hydra import Composer, Resolver, apply_hydra_overrides, read_config

VERL_CONFIG_DIR = "verl/trainer/config"


def search_dirs(path: Path, data: dict, extra: list[Path], default_rel: str | None) -> list[Path]:
    """Where `defaults:` entries are looked up: --config-dir, then hydra.searchpath (else `default_rel`)."""
    dirs = list(extra)
    entries = (data.get("hydra") or {}).get("searchpath") or [] if isinstance(data.get("hydra"), dict) else []
    rels = []
    for entry in entries:
        text = str(entry)
        if text.startswith("pkg://"):
            rels.append(text.removeprefix("pkg://").replace(".", "/"))
        elif text.startswith("file://"):
            rels.append(text.removeprefix("file://"))
    if not rels and default_rel:
        rels.append(default_rel)
    for rel in rels:
        for root in [*path.resolve().parents, Path.cwd()]:
            if (root / rel).is_dir():
                dirs.append(root / rel)
                break
        else:
            installed = _installed(rel)
            if installed is not None:
                dirs.append(installed)
    return dirs


def _installed(rel: str) -> Path | None:
    """`rel` inside an installed package (found without importing it)."""
    top, _, rest = rel.partition("/")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    candidate = Path(next(iter(spec.submodule_search_locations))) / rest
    return candidate if candidate.is_dir() else None


def load_hydra_config(
    path: Path, overrides: list[str], config_dirs: list[Path], default_rel: str | None = None,
    framework: str | None = None,
) -> dict:
    """The composed, overridden and resolved config, as the framework's entry point sees it."""
    source = str(path)
    data, _ = read_config(path)
    if framework is not None:
        found = wrong_framework(data)
        if found is not None and found != framework:  # say so before composing another framework's defaults
            require_framework(data, framework, source)
    if "defaults" in data:
        composer = Composer(path, search_dirs(path, data, config_dirs, default_rel))
        choices = composer.collect()
        groups, rest = {}, []
        for text in overrides:
            key, sep, value = text.partition("=")
            if sep and key in choices:
                groups[key] = value.strip()
            else:
                rest.append(text)
        data = composer.compose(groups)
        overrides = rest
    data = apply_hydra_overrides(data, overrides, source)
    return Resolver(data, source).resolve_all()


def wrong_framework(data: dict) -> str | None:
    """Which framework a config is from when it is not verl's (by keys only that framework has)."""
    if "allocation_mode" in data or "gconfig" in data:
        return "areal"
    if "actor_infer" in data or "rollout_batch_size" in data:
        return "roll"
    if "actor_rollout_ref" in data:
        return "verl"
    return None


def require_framework(data: dict, want: str, source: str) -> None:
    found = wrong_framework(data)
    if found == want:
        return
    if found is None:
        raise ImportProblem(source, "", f"not a {want} config (none of its top-level keys: "
                            f"{', '.join(_MARKERS[want])})")
    raise ImportProblem(source, "", f"this is a {found} config, not {want}: use `rlsim import {found}`")


_MARKERS = {
    "verl": ("actor_rollout_ref", "trainer", "data"),
    "roll": ("actor_infer", "rollout_batch_size"),
    "areal": ("allocation_mode", "gconfig"),
}
