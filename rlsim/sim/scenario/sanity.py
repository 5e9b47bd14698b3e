"""Plausible mistakes that pass validation: values of a legal type and range but an implausible magnitude.

Each is a warning (one line, `dotted.path: what looks wrong`), not an error: a scenario may mean it.
- a switch overhead above two minutes (verl's colocated switch costs ~0.45 s, docs/sources.md §4, and
  74 s measured on the 16-H20 DAPO job with its weight sync, §6; a minute would flag that real one):
  milliseconds typed as seconds?
- a tool latency above an hour (ASearcher's tool calls time out after 30 s, docs/sources.md §7);
- a sequence longer than the context it must fit: the agent's max_context_tokens, or 131,072 tokens,
  the longest context of the shipped model presets (Qwen2.5 and Llama 3.1: 128k).
"""

from __future__ import annotations

from rlsim.sim.scenario.checks import max_sequence_tokens
from rlsim.sim.scenario.schema import HybridSwitchOptions, Scenario

MAX_SWITCH_S = 120.0
MAX_TOOL_LATENCY_S = 3600.0
MAX_CONTEXT_TOKENS = 131_072


def sanity_warnings(scn: Scenario) -> list[str]:
    """One line per implausible magnitude in a valid scenario."""
    out = []
    switch = scn.schedule.options(HybridSwitchOptions).switch_overhead_s
    if switch > MAX_SWITCH_S:
        out.append(f"schedule.switch_overhead_s: {switch:g} s per switch is above two minutes (verl's is ~0.45 s): "
                   f"milliseconds meant? ({switch:g} ms = {switch / 1000:g} s)")
    for name, tool in scn.environments.tools.items():
        fields = getattr(tool.latency, "seconds_fields", ())
        worst = max((float(v) for f in fields if (v := getattr(tool.latency, f, None)) is not None), default=0.0)
        if worst > MAX_TOOL_LATENCY_S:
            out.append(f"environments.tools.{name}.latency: {worst:g} s is above an hour: milliseconds meant?")
    agent = scn.workload.agent
    longest = max_sequence_tokens(scn)
    if agent is None and longest > MAX_CONTEXT_TOKENS:
        out.append(f"workload.response_length: prompt + response reach {longest:,} tokens, above the "
                   f"{MAX_CONTEXT_TOKENS:,}-token context of any shipped model")
    return out
