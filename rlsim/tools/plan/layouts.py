"""Layouts: which GPUs each role gets, rendered into a scenario mapping (cluster pools, role pools, schedule).

Single-pool layouts carve one hardware type: HybridFlow's three shortcuts and every grouping of the
model roles into colocated sets (set partitions: 15 for PPO's actor, critic, reference and reward; the
rollout engines always sit with the actor, as in HybridFlow). Disaggregated layouts give generation a
pool of its own, possibly of another hardware type.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass

from rlsim.tools.plan.space import GpuOption, MixOption, PoolChoice, ScheduleOption

MODEL_ROLES = ("actor", "critic", "reference", "reward")  # HybridFlow's four models
# Sets get GPUs in proportion to these weights: the paper's standalone split 64/32/16/16 (docs/sources.md §5).
ROLE_WEIGHTS = {"actor": 4, "critic": 2, "reference": 1, "reward": 1}
SPLIT_SETS = (("actor", "reference"), ("critic", "reward"))


@dataclass(frozen=True)
class PoolSize:
    hardware: str
    gpus: int
    gpus_per_node: int
    price: float | None

    @classmethod
    def of(cls, choice: GpuOption | PoolChoice, gpus: int) -> PoolSize:
        return cls(choice.hardware, gpus, choice.gpus_per_node, choice.price_usd_per_gpu_hour)


@dataclass(frozen=True)
class Layout:
    """Where roles run: pools (name -> size), role -> pool, role -> GPUs it spans, and the shortcut used."""

    name: str  # colocate | split | standalone | partition | disaggregated
    sets: str  # e.g. "actor+reference|critic|reward"
    pools: dict[str, PoolSize]
    role_pool: dict[str, str]
    role_gpus: dict[str, int]
    placement_gpus: dict[str, int] | None = None  # the shortcut's set sizes, when not its default
    problem: str = ""  # why this grouping cannot be carved out of the pool (then it has no pools)

    @property
    def disaggregated(self) -> bool:
        return self.name == "disaggregated"


def partitions(items: tuple[str, ...]) -> list[list[tuple[str, ...]]]:
    """Every grouping of `items` into non-empty sets, each set in `items` order, the set holding items[0] first."""
    if not items:
        return [[]]
    first, rest = items[0], items[1:]
    out: list[list[tuple[str, ...]]] = []
    for part in partitions(rest):
        out.append([(first,), *part])
        for i in range(len(part)):
            out.append([*part[:i], (first, *part[i]), *part[i + 1:]])
    order = {r: i for i, r in enumerate(items)}
    return [sorted(p, key=lambda s: order[s[0]]) for p in out]


def _valid_sizes(total: int, gpus_per_node: int) -> list[int]:
    """Set sizes a pool can be carved into: whole nodes, or a divisor of one node; largest first."""
    sizes = {g for g in range(gpus_per_node, total + 1, gpus_per_node)}
    sizes |= {g for g in range(1, min(gpus_per_node, total + 1)) if gpus_per_node % g == 0}
    return sorted(sizes, reverse=True)


def allocate(total: int, weights: list[float], gpus_per_node: int) -> list[int] | None:
    """GPUs per set, summing to `total`, as close as possible to proportional to `weights`.

    Closest: least squared difference from the proportional shares; ties go to the earlier sets
    getting more. Each set is whole nodes or a divisor of a node. None when no such split exists.
    """
    target = [total * w / sum(weights) for w in weights]
    sizes = _valid_sizes(total, gpus_per_node)
    best: tuple[float, list[int]] | None = None

    def walk(i: int, left: int, chosen: list[int], err: float) -> None:
        nonlocal best
        if best is not None and err >= best[0]:
            return
        if i == len(weights) - 1:
            if left in sizes:
                e = err + (left - target[i]) ** 2
                if best is None or e < best[0]:
                    best = (e, [*chosen, left])
            return
        for g in sizes:
            if g < left:
                walk(i + 1, left - g, [*chosen, g], err + (g - target[i]) ** 2)

    walk(0, total, [], 0.0)
    return None if best is None else best[1]


def _model_roles(roles: dict) -> list[str]:
    """The scenario's roles without an engine of their own (the rollout follows the actor)."""
    return [r for r in MODEL_ROLES if r in roles]


def single_pool_layouts(names: list[str], roles: dict, option: GpuOption, total: int) -> Iterator[Layout]:
    """colocate / split / standalone / every partition of the model roles, on `total` GPUs of one type."""
    size = PoolSize.of(option, total)
    model_roles = _model_roles(roles)
    seen: set[str] = set()
    for name in names:
        if name == "disaggregated":
            continue
        if name == "colocate":
            groupings = [[tuple(model_roles)]]
        elif name == "split":
            groupings = [[tuple(r for r in s if r in model_roles) for s in SPLIT_SETS]]
        elif name == "standalone":
            groupings = [[(r,) for r in model_roles]]
        else:
            groupings = partitions(tuple(model_roles))
        for grouping in groupings:
            grouping = [g for g in grouping if g]
            layout = _carve(grouping, roles, size, model_roles)
            if layout.sets not in seen:
                seen.add(layout.sets)
                yield layout


def _shortcut(grouping: list[tuple[str, ...]], model_roles: list[str]) -> str:
    if len(grouping) == 1:
        return "colocate"
    if grouping == [tuple(r for r in s if r in model_roles) for s in SPLIT_SETS]:
        return "split"
    if all(len(g) == 1 for g in grouping):
        return "standalone"
    return "partition"


def _carve(grouping: list[tuple[str, ...]], roles: dict, size: PoolSize, model_roles: list[str]) -> Layout:
    """A grouping as a layout: a shortcut where one names it (split keeps verl's even sets), else custom pools."""
    name = _shortcut(grouping, model_roles)
    label = "|".join("+".join(g) for g in grouping)
    extra = [r for r in roles if r not in model_roles]  # the rollout (and an LLM judge) sit with the actor
    if name == "colocate" or (name == "split" and size.gpus % 2 == 0):
        gpus = [size.gpus] if name == "colocate" else [size.gpus // 2] * 2
        role_gpus = {r: gpus[i] for i, g in enumerate(grouping) for r in g} | dict.fromkeys(extra, gpus[0])
        return Layout(name, label, {"main": size}, dict.fromkeys(roles, "main"), role_gpus)
    gpus = allocate(size.gpus, [sum(ROLE_WEIGHTS[r] for r in g) for g in grouping], size.gpus_per_node)
    if gpus is None:
        return Layout(name, label, {"main": size}, {}, {}, problem=f"{size.gpus} GPUs cannot be carved into "
                      f"{len(grouping)} sets of whole nodes or parts of a node")
    role_gpus = {r: gpus[i] for i, g in enumerate(grouping) for r in g} | dict.fromkeys(extra, gpus[0])
    if name == "standalone":
        return Layout(name, label, {"main": size}, dict.fromkeys(roles, "main"), role_gpus,
                      {g[0]: n for g, n in zip(grouping, gpus, strict=True)})
    pools = {f"main-{g[0]}": PoolSize(size.hardware, n, size.gpus_per_node, size.price)
             for g, n in zip(grouping, gpus, strict=True)}
    role_pool = {r: f"main-{g[0]}" for g in grouping for r in g} | dict.fromkeys(extra, f"main-{grouping[0][0]}")
    return Layout("partition", label, pools, role_pool, role_gpus)


def generation_split(total: int, fraction: float, gpus_per_node: int) -> int | None:
    """Generation GPUs for a share of `total`: whole nodes when the cluster has two or more, else GPUs."""
    unit = gpus_per_node if total % gpus_per_node == 0 and total >= 2 * gpus_per_node else 1
    gen = int(total * fraction / unit + 0.5) * unit  # half up, not to even
    return gen if 0 < gen < total else None


def disaggregated_layouts(
    option: ScheduleOption, roles: dict, gpus: list[GpuOption], fractions: list[float], mixes: list[MixOption]
) -> Iterator[Layout]:
    """Generation pool + training pool: shares of each `gpus` option, then each mix's sizes."""
    sides: list[tuple[PoolSize, PoolSize]] = []
    for opt in gpus:
        for total in opt.counts:
            gens = dict.fromkeys(g for f in fractions if (g := generation_split(total, f, opt.gpus_per_node)))
            sides += [(PoolSize.of(opt, g), PoolSize.of(opt, total - g)) for g in gens]
    for mix in mixes:
        sides += [(PoolSize.of(mix.generation, g), PoolSize.of(mix.training, t))
                  for g in mix.generation.gpus for t in mix.training.gpus]
    place = option.role_pools or {}
    role_pool = {r: place.get(r, "generation" if r == "rollout" else "training") for r in roles}
    role_pool = {r: "gen" if p == "generation" else "train" for r, p in role_pool.items()}
    label = "gen: " + "+".join(r for r, p in role_pool.items() if p == "gen")
    for gen, train in sides:
        pools = {"gen": gen, "train": train}
        yield Layout("disaggregated", label, pools, role_pool, {r: pools[p].gpus for r, p in role_pool.items()})


def pool_mapping(size: PoolSize, template: dict | None) -> dict:
    """A cluster pool; a base pool of the same hardware lends its network and profile overrides."""
    nodes, per_node = (size.gpus // size.gpus_per_node, size.gpus_per_node) if size.gpus >= size.gpus_per_node \
        else (1, size.gpus)
    pool = {"hardware": size.hardware, "nodes": nodes, "gpus_per_node": per_node}
    if template and template.get("hardware") == size.hardware:
        pool.update({k: copy.deepcopy(v) for k, v in template.items() if k in ("nic_gbit_per_s", "profile_overrides")})
    if size.price is not None:
        pool["price_usd_per_gpu_hour"] = size.price
    return pool
