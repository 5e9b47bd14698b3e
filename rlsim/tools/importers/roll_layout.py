"""ROLL's `device_mapping` strings -> GPU ranges, and the pools and placements rlsim needs for them.

ROLL writes a worker's GPUs as Python source (`list(range(0,16))`), evaluated by ROLL itself. rlsim
never evaluates config text: the few forms ROLL's examples use are parsed here — `list(range(a, b[, s]))`,
`[0, 1, 2]`, a YAML list, and `+` between them.
"""

from __future__ import annotations

import re
from typing import Any

from rlsim.tools.importers.common import pool_shape

_RANGE = re.compile(r"^list\(\s*range\(\s*(-?\d+)\s*(?:,\s*(-?\d+)\s*)?(?:,\s*(-?\d+)\s*)?\)\s*\)$")
_LIST = re.compile(r"^\[\s*(\d+(?:\s*,\s*\d+)*)?\s*,?\s*\]$")


def parse_device_mapping(value: Any) -> list[int]:
    """GPU indices of a device_mapping; ValueError with what is wrong."""
    if isinstance(value, list):
        if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value):
            raise ValueError(f"expected GPU indices (integers >= 0), got {value!r}")
        if not value:
            raise ValueError("[] names no GPU")
        return list(value)
    if not isinstance(value, str):
        raise ValueError(f"expected a list of GPU indices or 'list(range(a, b))', got {value!r}")
    gpus: list[int] = []
    for part in value.split("+"):
        part = part.strip()
        match = _RANGE.match(part)
        if match:
            start, stop, step = (int(g) if g is not None else None for g in match.groups())
            if stop is None:
                start, stop = 0, start
            if (step or 1) <= 0 or start < 0:
                raise ValueError(f"range in {value!r} must count up from 0 or more")
            gpus += list(range(start, stop, step or 1))
        elif _LIST.match(part):
            gpus += [int(i) for i in re.findall(r"\d+", part)]
        else:
            raise ValueError(f"cannot read {part!r}: rlsim reads list(range(a, b[, step])), [i, j, ...] and '+'")
    if not gpus:
        raise ValueError(f"{value!r} names no GPU")
    return gpus


def contiguous(gpus: list[int]) -> tuple[int, int] | None:
    """(first, count) when the GPUs are one run first..first+count-1 (what rlsim's gpu_offset + gpus express)."""
    ordered = sorted(set(gpus))
    if len(ordered) != len(gpus) or ordered != list(range(ordered[0], ordered[0] + len(ordered))):
        return None
    return ordered[0], len(ordered)


def overlaps(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[0] + b[1] and b[0] < a[0] + a[1]


def layout(ranges: dict[str, tuple[int, int]], gpus_per_node: int, hw: str, separate_rollout: bool):
    """(pools, placement per role) for roles on GPU ranges; the rollout on a pool of its own if asked.

    Returns pools {name: PoolSpec dict} and {role: {pool, gpu_offset, gpus}}.
    """
    if not separate_rollout:
        span = max(start + count for start, count in ranges.values())
        nodes, per = pool_shape(span, gpus_per_node)
        pools = {"main": {"hardware": hw, "nodes": nodes, "gpus_per_node": per}}
        return pools, {role: _place("main", start, count, span) for role, (start, count) in ranges.items()}
    gen = ranges["rollout"]
    others = {role: r for role, r in ranges.items() if role != "rollout"}
    low = min(start for start, _ in others.values())
    high = max(start + count for start, count in others.values())
    nodes, per = pool_shape(gen[1], gpus_per_node)
    pools = {"gen": {"hardware": hw, "nodes": nodes, "gpus_per_node": per}}
    nodes, per = pool_shape(high - low, gpus_per_node)
    pools["train"] = {"hardware": hw, "nodes": nodes, "gpus_per_node": per}
    placed = {"rollout": _place("gen", 0, gen[1], gen[1])}
    placed.update({role: _place("train", start - low, count, high - low) for role, (start, count) in others.items()})
    return pools, placed


def _place(pool: str, offset: int, count: int, pool_gpus: int) -> dict[str, Any]:
    spec: dict[str, Any] = {"pool": pool}
    if offset:
        spec["gpu_offset"] = offset
    if count != pool_gpus - offset:
        spec["gpus"] = count
    return spec
