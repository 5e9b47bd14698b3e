"""Assembling the imported scenario: the values no framework config holds, validation, the YAML text.

A framework config fixes the cluster, the batch and the caps on lengths, never the lengths a run
actually produces nor the GPU model. Those are *assumed* here (and listed with the `--set` that
replaces each) so that the result runs; the assumed shapes mirror the shipped scenarios (a
long-tailed lognormal clipped at max_tokens, prompts spread below their cap).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import yaml

from rlsim.sim.api import Scenario, ScenarioError, apply_overrides, parse_scenario
from rlsim.tools.importers.common import ImportProblem, Ledger, compress, is_not_modelled, show
from rlsim.tools.importers.vocabulary import VERSIONS

DEFAULT_HARDWARE = "h100-sxm"
RESPONSE_MEAN_FRACTION = 0.25  # assumed mean / max_tokens (shipped scenarios: 0.24 - 0.3)
RESPONSE_SIGMA = 0.9  # assumed lognormal sigma (as the shipped GRPO scenarios)
PROMPT_MIN_FRACTION = 0.125  # assumed shortest prompt / max_prompt_length


def hardware(ledger: Ledger, name: str | None) -> str:
    """The pools' hardware profile: `--hardware` (`H100`, `NVIDIA H100` -> h100-sxm), else assumed (configs name
    devices, not GPU models)."""
    if name:
        from rlsim.sim.inputs import canonical_profile

        return name if name.endswith((".yaml", ".yml")) else canonical_profile(name) or name
    ledger.assume("GPU model of every pool", DEFAULT_HARDWARE, "--hardware NAME (`rlsim profiles`)")
    return DEFAULT_HARDWARE


def workload(ledger: Ledger, prompt_max: int | None, response_max: int | None) -> dict[str, Any]:
    """Prompt and response length laws from the caps; the shapes are assumed."""
    prompt_max = prompt_max or 512
    response_max = response_max or 512
    low = max(1, int(prompt_max * PROMPT_MIN_FRACTION))
    mean = max(1, round(response_max * RESPONSE_MEAN_FRACTION))
    ledger.assume("prompt lengths", f"uniform {low}..{prompt_max}",
                  "--set workload.prompt_length='{kind: uniform, min: M, max: N}'")
    ledger.assume("response-length distribution", f"lognormal mean {mean} sigma {RESPONSE_SIGMA} capped at "
                  f"{response_max}", "--set workload.response_length.mean=M --set workload.response_length.sigma=S")
    return {
        "prompt_length": {"kind": "uniform", "min": low, "max": prompt_max},
        "response_length": {"kind": "lognormal", "mean": mean, "sigma": RESPONSE_SIGMA, "max": response_max},
    }


@dataclass
class Imported:
    """An import's result: the validated scenario, its YAML and the three lists."""

    scenario: Scenario
    text: str
    ledger: Ledger


def finalize(data: dict, ledger: Ledger, sets: list[str], header: str) -> Imported:
    """Apply `--set` overrides, validate as `rlsim run` would, render the YAML with a header comment."""
    ledger.raise_problems()
    data["name"] = _plain_name(str(data.get("name", "")))
    try:
        data = apply_overrides(data, sets, source="--set")
        scenario = parse_scenario(data, source=f"{ledger.source} (imported scenario)")
    except ScenarioError as exc:
        raise ImportProblem(exc.source, problems=exc.problems) from None
    body = yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=110)
    lines = [f"# {line}" if line else "#" for line in header.splitlines()]
    if ledger.unknown:
        lines.append(f"# Unknown keys (not {VERSIONS.get(ledger.framework, 'the framework')}'s own; not used):")
        lines += [f"#   {key}{hint}" for key, hint in sorted(ledger.unknown.items())]
    if ledger.assumed:
        lines.append("# Assumed (not in the config):")
        lines += [f"#   {a.what}: {show(a.value)}  ({a.flag})" for a in ledger.assumed]
    return Imported(scenario, "\n".join(lines) + "\n" + body, ledger)


def _plain_name(stem: str) -> str:
    """The config file's stem as a scenario name (letters, digits, spaces, . _ + -; a letter or digit first)."""
    name = re.sub(r"[^A-Za-z0-9 ._+-]", "-", stem).lstrip(" ._+-")[:100].rstrip()
    return name or "imported"


def report_lines(ledger: Ledger, width: int = 80) -> list[str]:
    """The lists as printed by `rlsim import`: assumed first (what to check), one per line; keys that are
    not the framework's own (a typo?), one per line; used (-> field); ignored, grouped by reason, its keys
    wrapped to `width` columns."""
    import textwrap

    out = [f"assumed ({len(ledger.assumed)}):"]
    out += [f"  {a.what}: {show(a.value)}  [set with {a.flag}]" for a in ledger.assumed]
    if ledger.unknown:
        whose = VERSIONS.get(ledger.framework, "the framework")
        out.append(f"unknown ({len(ledger.unknown)} keys, not {whose}'s own: a typo? not used):")
        out += [f"  unknown key {key}{hint}" for key, hint in sorted(ledger.unknown.items())]
    out.append(f"used ({len(ledger.used)} keys):")
    out += [f"  {key} = {show(ledger.leaves[key])}  ->  {target}" for key, target in sorted(ledger.used.items())]
    for heading, wanted in (("ignored ({n} keys, no effect on the step time):", False),
                            ("not modelled ({n} keys, may change the real step time; not simulated):", True)):
        by_reason: dict[str, list[str]] = {}
        for key, reason in ledger.ignored.items():
            if is_not_modelled(reason) == wanted:
                by_reason.setdefault(reason, []).append(key)
        if not by_reason and wanted:
            continue
        out.append(heading.format(n=sum(len(keys) for keys in by_reason.values())))
        for reason, keys in sorted(by_reason.items(), key=lambda item: -len(item[1])):
            out += textwrap.wrap(f"{reason} ({len(keys)}):", width, initial_indent="  ", subsequent_indent="  ")
            out += textwrap.wrap(", ".join(compress(keys, ledger.leaves)), width, initial_indent="    ",
                                 subsequent_indent="    ", break_on_hyphens=False, break_long_words=False)
    return out
