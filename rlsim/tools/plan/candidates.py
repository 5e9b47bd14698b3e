"""Candidates: every combination the space allows, rendered into a scenario mapping and checked in memory.

A candidate the scenario checks refuse (memory, parallelism, placement) is kept as a pruned row with
the checks' own message: the plan says why it was never simulated. Training configs are tried in the
space's order; with `first-fit`, a layout stops at the first config where some generation TP fits
(HybridFlow's auto-mapping: add pipeline stages, then offloading, only as memory requires).
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlsim.sim.api import Scenario, ScenarioError, load_profile, parse_scenario, resolve_preset
from rlsim.tools.plan.layouts import (
    MODEL_ROLES,
    Layout,
    PoolSize,
    disaggregated_layouts,
    pool_mapping,
    single_pool_layouts,
)
from rlsim.tools.plan.space import ScheduleOption, Space, TrainConfig
from rlsim.tools.sweep.grid import format_value
from rlsim.tools.sweep.steady_state import steady_state_warmup


@dataclass
class Candidate:
    index: int
    label: str
    knobs: dict[str, Any]
    data: dict  # the scenario mapping
    price_usd_per_hour: float | None
    scenario: Scenario | None = None  # parsed (None when the checks refused it)
    status: str = "feasible"  # feasible | infeasible | pruned | not-sampled
    reason: str = ""
    bound: dict[str, float] = field(default_factory=dict)


def _price(size: PoolSize) -> float | None:
    price = size.price if size.price is not None else load_profile(size.hardware).price_usd_per_gpu_hour
    return None if price is None else price * size.gpus


def _hardware_label(layout: Layout) -> str:
    kinds = list(dict.fromkeys(p.hardware for p in layout.pools.values()))
    if not layout.disaggregated:
        return kinds[0]
    return kinds[0] if len(kinds) == 1 else f"{layout.pools['gen'].hardware}/{layout.pools['train'].hardware}"


def _templates(base: dict) -> dict[str, dict]:
    """The base scenario's pools by hardware (the first of each): they lend network and profile overrides."""
    pools = base.get("cluster", {}).get("pools", {}) or {}
    out: dict[str, dict] = {}
    for pool in pools.values():
        if isinstance(pool, dict):
            out.setdefault(pool.get("hardware"), pool)
    return out


def render(base: dict, layout: Layout, kind: str, fields: dict, gen_tp: int | None, train: TrainConfig | None,
           micro_tokens: int | None, gen_ep: int | None = None) -> dict:
    """The scenario mapping of one candidate: base models, algorithm and workload on the layout's pools."""
    data = copy.deepcopy(base)
    templates = _templates(base)
    data["cluster"] = {"pools": {n: pool_mapping(s, templates.get(s.hardware)) for n, s in layout.pools.items()}}
    for name, role in data["roles"].items():
        role["pool"] = layout.role_pool[name]
        role.pop("gpus", None)
        role.pop("gpu_offset", None)
    schedule = {k: v for k, v in (base.get("schedule") or {}).items() if k not in ("placement", "pool",
                                                                                   "placement_gpus")}
    if schedule.get("kind") != kind:
        schedule = {}
    schedule.update(copy.deepcopy(fields), kind=kind)
    if kind == "hybridflow":
        schedule["placement"] = layout.name if layout.name in ("colocate", "split", "standalone") else "custom"
        if layout.placement_gpus:
            schedule["placement_gpus"] = dict(layout.placement_gpus)
    data["schedule"] = schedule
    data["warmup_steps"] = steady_state_warmup(schedule, int(base.get("warmup_steps") or 0))
    rollout = {"tp": gen_tp, "ep": gen_ep}
    if any(v is not None for v in rollout.values()):
        parallel = data["roles"]["rollout"].get("parallel") or {}
        data["roles"]["rollout"]["parallel"] = {**parallel, **{k: v for k, v in rollout.items() if v is not None}}
    for name in (r for r in MODEL_ROLES if r in data["roles"] and data["roles"][r].get("engine") is None):
        _model_role(data, name, layout.role_gpus[name], train, micro_tokens)
    return data


def _model_role(data: dict, name: str, gpus: int, train: TrainConfig | None, micro_tokens: int | None) -> None:
    """A model role's training config: tp (capped at its GPUs), pp, offload, and the config's ep on the actor and
    on every other role whose model is MoE (a dense critic or reward model keeps ep 1); the role's own ep else."""
    role = data["roles"][name]
    spec = role.setdefault("train", {}) or {}
    role["train"] = spec
    if train is not None:
        run = effective_train(train, gpus)
        parallel = role.get("parallel")
        ep = parallel.get("ep") if isinstance(parallel, dict) else None
        if train.ep is not None and (name == "actor" or _is_moe(data.get("models", {}).get(role.get("model")))):
            ep = train.ep
        role["parallel"] = {"tp": run.tp, "pp": run.pp} | ({} if ep is None else {"ep": ep})
        spec.update(optimizer_offload=train.offload in ("optimizer", "all"),
                    param_offload=train.offload == "all", grad_offload=train.offload == "all")
    if micro_tokens is not None:
        spec["ppo_max_token_len_per_gpu"] = micro_tokens


def effective_train(train: TrainConfig, gpus: int) -> TrainConfig:
    """The config a role on `gpus` GPUs runs: tp capped at its GPUs, pp dropped where tp x pp does not fit."""
    tp = min(train.tp, gpus)
    return train.model_copy(update={"tp": tp, "pp": train.pp if gpus >= tp * train.pp else 1})


def _simulated_train(layout: Layout, train: TrainConfig | None) -> TrainConfig | None:
    """The training config as simulated (the actor's, else the first model role's): what labels name."""
    role = next((r for r in MODEL_ROLES if r in layout.role_gpus), None)
    return train if train is None or role is None else effective_train(train, layout.role_gpus[role])


def _is_moe(model: Any) -> bool:
    """Whether a scenario's model mapping (explicit num_experts, else its preset's) is a mixture of experts."""
    if not isinstance(model, dict):
        return False
    experts = model.get("num_experts")
    if experts is None and model.get("preset") is not None:
        try:
            experts = resolve_preset(str(model["preset"])).get("num_experts")
        except KeyError:  # an unknown preset: the scenario checks report it
            return False
    return isinstance(experts, int) and experts > 0


def _layouts(space: Space, option: ScheduleOption, roles: dict) -> Iterator[Layout]:
    names = list(option.layouts or [])
    if "split" in names and not {"critic", "reward"} & set(roles):
        # no critic or reward model to split off (GRPO): split means rollout apart from the trainer, as the
        # schedule's own `placement: split` does (rlsim/sim/scenario/placement.py), never a silent colocate
        names = [n for n in names if n != "split"] + (["disaggregated"] if "disaggregated" not in names else [])
    for gpu in space.gpus:
        for total in gpu.counts:
            yield from single_pool_layouts(names, roles, gpu, total)
    if "disaggregated" in names:
        yield from disaggregated_layouts(option, roles, space.gpus, space.generation_fraction, space.mixes)


def _label(layout: Layout, kind: str, fields: dict, gen_tp, train, micro, gen_ep=None) -> str:
    gpus = "+".join(str(p.gpus) for p in layout.pools.values()) if layout.disaggregated \
        else str(sum(p.gpus for p in layout.pools.values()))
    where = {"partition": layout.sets, "disaggregated": "disagg"}.get(layout.name, layout.name)
    parts = [f"{_hardware_label(layout)} x{gpus}", where]
    if kind != "hybridflow":
        parts.append(kind)
    parts += [f"{k}={format_value(v)}" for k, v in fields.items()]
    if gen_tp is not None:
        parts.append(f"tg{gen_tp}")
    if gen_ep is not None:
        parts.append(f"eg{gen_ep}")
    if train is not None:
        parts.append(train.label)
    if micro is not None:
        parts.append(f"mb{micro}")
    return " ".join(parts)


def _knobs(layout: Layout, kind: str, fields: dict, gen_tp, train, micro, gen_ep=None) -> dict[str, Any]:
    disagg = layout.disaggregated
    return {
        "hardware": _hardware_label(layout),
        "gpus": sum(p.gpus for p in layout.pools.values()),
        "gen_gpus": layout.pools["gen"].gpus if disagg else None,
        "train_gpus": layout.pools["train"].gpus if disagg else None,
        "schedule": kind,
        "layout": layout.name,
        "sets": layout.sets,
        "schedule_set": ", ".join(f"{k}={format_value(v)}" for k, v in fields.items()),
        "gen_tp": gen_tp,
        "gen_ep": gen_ep,
        "train": train.label if train is not None else "scenario",
        "micro_batch_tokens": micro,
    }


def _check(data: dict, source: str, base_dir: Path | None) -> tuple[Scenario | None, str]:
    try:
        return parse_scenario(data, source=source, base_dir=base_dir), ""
    except ScenarioError as exc:
        return None, "; ".join(f"{p.path}: {p.message}" if p.path else p.message for p in exc.problems)


@dataclass(frozen=True)
class _Point:
    """One layout with its schedule fields and micro-batch budget; gen TP and training config still free."""

    base: dict
    layout: Layout
    kind: str
    fields: dict
    micro: int | None
    price: float

    def make(self, index: int, tp: int | None, train: TrainConfig | None, ep: int | None = None) -> Candidate:
        args = (self.layout, self.kind, self.fields, tp, train, self.micro, ep)
        data = {} if self.layout.problem else render(self.base, *args)
        named = (self.layout, self.kind, self.fields, tp, _simulated_train(self.layout, train), self.micro, ep)
        return Candidate(index, _label(*named), _knobs(*named), data, self.price)

    def simulated(self, train: TrainConfig | None) -> tuple:
        """What a training config becomes on this layout, per model role: equal keys, the same simulation."""
        if train is None:
            return ()
        roles = [r for r in MODEL_ROLES if r in self.layout.role_gpus]
        return (train.offload, train.ep) + tuple(
            (r, (run := effective_train(train, self.layout.role_gpus[r])).tp, run.pp) for r in roles)


def enumerate_candidates(base: dict, space: Space, base_dir: Path | None = None,
                         max_gpus: int | None = None, budget: float | None = None) -> list[Candidate]:
    """Every candidate of the space, checked: feasible ones carry their parsed Scenario."""
    out: list[Candidate] = []
    roles = base.get("roles") or {}
    gen = list(itertools.product(space.parallel.generation_tp or [None], space.parallel.generation_ep or [None]))
    trains = space.parallel.training or [None]
    micros = space.parallel.micro_batch_tokens or [None]
    first_fit = space.parallel.training_search == "first-fit"
    for option in space.schedules:
        axes = option.axes
        combos = [dict(zip(axes, values, strict=True)) for values in itertools.product(*axes.values())]
        for layout in _layouts(space, option, roles):
            price = sum(p for s in layout.pools.values() if (p := _price(s)) is not None)
            gpus = sum(p.gpus for p in layout.pools.values())
            limit = layout.problem or _over_limits(gpus, price, max_gpus, budget)
            for fields, micro in itertools.product(combos, micros):
                point = _Point(base, layout, option.kind, fields, micro, price)
                if limit:
                    cand = point.make(len(out), gen[0][0], trains[0], gen[0][1])
                    cand.status, cand.reason = "pruned", limit
                    out.append(cand)
                    continue
                _first_fit(out, point, gen, trains, first_fit, base_dir)
    return out


def _first_fit(out: list[Candidate], point: _Point, gen, trains, first_fit: bool, base_dir: Path | None) -> None:
    """Append the candidates of one layout: per training config, every generation (TP, EP), checked. A config
    that this layout's GPUs cap to one already tried (tp 4 and tp 8 on 2 GPUs are both tp 2) is skipped."""
    tried = set()
    for train in trains:
        if (key := point.simulated(train)) and key in tried:
            continue
        tried.add(key)
        batch = []
        for tp, ep in gen:
            cand = point.make(len(out), tp, train, ep)
            out.append(cand)
            cand.scenario, reason = _check(cand.data, cand.label, base_dir)
            if cand.scenario is None:
                cand.status, cand.reason = "infeasible", reason
            batch.append(cand)
        if first_fit and any(c.scenario is not None for c in batch):
            return


def _over_limits(gpus: int, price: float, max_gpus: int | None, budget: float | None) -> str:
    if max_gpus is not None and gpus > max_gpus:
        return f"{gpus} GPUs > --max-gpus {max_gpus}"
    if budget is not None and price > budget:
        return f"${price:.2f}/h > budget ${budget:.2f}/h"
    return ""
