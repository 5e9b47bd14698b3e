"""Placements: which roles share which GPUs (verl resource pools), and whether they fit in memory.

Placement is a scenario transform, applied once when a scenario is loaded (`resolve_scenario`):
checks, schedules, results and plots all see the one resolved scenario, whose placement is
`custom` (resolving it again changes nothing).

A placement shortcut (`colocate`, `split`, `standalone`) rewrites the scenario: the hardware pool
is carved into resource pools, one per colocated set, and each role moves to its set's pool with
all of its GPUs. `custom` keeps the roles' own pools. Roles on one pool time-share it; roles on
different pools run concurrently. The memory check is HybridFlow's `get_min_alloc` in spirit: a
colocated set must fit every phase's peak on its GPUs, and the error says how many GPUs it needs.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlsim.sim.costs.resharding import reshard_redundant_bytes_per_gpu
from rlsim.sim.scenario.checks import check_scenario, max_sequence_tokens, role_forward_memory, role_training_memory
from rlsim.sim.scenario.errors import Problem
from rlsim.sim.scenario.option_checks import schedule_option_problems
from rlsim.sim.scenario.schema import HybridSwitchOptions, Scenario

COLOCATED_SETS = {
    "colocate": [["actor", "rollout", "reference", "critic", "reward"]],
    "split": [["actor", "rollout", "reference"], ["critic", "reward"]],
    "standalone": [["actor", "rollout"], ["critic"], ["reference"], ["reward"]],
    "disaggregated": [["actor", "reference", "critic", "reward"], ["rollout"]],
}
TRAINED = ("actor", "critic")
_GB = 1e9


@dataclass(frozen=True)
class Placement:
    scenario: Scenario  # pools and roles rewritten for the shortcut
    sets: dict[str, list[str]]  # resource pool -> roles that time-share it


def _base_pool(scn: Scenario) -> str:
    spec = scn.schedule
    if spec.pool is not None:
        return spec.pool
    return next(iter(scn.cluster.pools))


def resolve_scenario(scn: Scenario) -> tuple[Scenario, list[Problem]]:
    """Check a validated scenario and apply its placement: (the resolved scenario, problems).

    The one place a placement shortcut is turned into pools and role GPU ranges; with problems the
    scenario is returned unchanged.
    """
    problems = check_scenario(scn)
    if problems or not scn.schedule.trains:
        return scn, problems
    resolved = resolve_placement(scn)  # once: the checks below and the result share it
    problems = hybridflow_problems(scn, max_sequence_tokens(scn), resolved)
    if problems:
        return scn, problems
    return resolved[0].scenario, []


def resolve_placement(scn: Scenario) -> tuple[Placement | None, list[Problem]]:
    """The rewritten scenario and its colocated sets, or the problems that prevent it."""
    spec = scn.schedule
    if spec.placement == "custom":
        sets: dict[str, list[str]] = {}
        for role, r in scn.roles.items():
            sets.setdefault(r.pool, []).append(role)
        return Placement(scn, sets), []
    problems: list[Problem] = []
    base = _base_pool(scn)
    if base not in scn.cluster.pools:
        return None, [Problem("schedule.pool", f"unknown pool {base!r}")]
    if spec.pool is None and len(scn.cluster.pools) > 1:
        problems.append(Problem("schedule.pool", f"placement {spec.placement!r} on a multi-pool cluster needs `pool`"))
    pool = scn.cluster.pools[base]
    groups = [[r for r in s if r in scn.roles] for s in COLOCATED_SETS[_shortcut(scn)]]
    groups = [g for g in groups if g]
    if spec.placement != "colocate" and len(groups) < 2:
        problems.append(
            Problem("schedule.placement", f"{spec.placement!r} needs roles for at least two sets, got {groups}")
        )
    gpus = _set_gpus(spec.placement_gpus, groups, pool.gpus, problems)
    if problems:
        return None, problems
    new_pools = {name: p for name, p in scn.cluster.pools.items() if name != base}
    new_roles = dict(scn.roles)
    sets = {}
    for group, g in zip(groups, gpus, strict=True):
        name = base if len(groups) == 1 else f"{base}-{group[0]}"
        if g % pool.gpus_per_node == 0:
            sub = pool.model_copy(update={"nodes": g // pool.gpus_per_node})
        elif g < pool.gpus_per_node:
            sub = pool.model_copy(update={"nodes": 1, "gpus_per_node": g})
        else:
            problems.append(Problem(f"schedule.placement_gpus.{group[0]}",
                                    f"{g} GPUs is not a whole number of {pool.gpus_per_node}-GPU nodes"))
            continue
        new_pools[name] = sub
        sets[name] = group
        for role in group:
            new_roles[role] = scn.roles[role].model_copy(update={"pool": name, "gpus": None, "gpu_offset": 0})
    if problems:
        return None, problems
    cluster = scn.cluster.model_copy(update={"pools": new_pools})
    # The resolved scenario is an explicit (custom) placement: resolving it again changes nothing.
    schedule = spec.model_copy(update={"placement": "custom", "pool": None, "placement_gpus": None})
    resolved = scn.model_copy(update={"cluster": cluster, "roles": new_roles, "schedule": schedule})
    return Placement(resolved, sets), []


def _shortcut(scn: Scenario) -> str:
    """The placement's sets: `split` on a job without critic or reward model (GRPO, DAPO) is what verl
    users mean by it there, rollout apart from the trainer (`disaggregated`), never a silent colocate."""
    name = scn.schedule.placement
    if name == "split" and not {"critic", "reward"} & set(scn.roles):
        return "disaggregated"
    return name


def _set_gpus(
    explicit: dict[str, int] | None, groups: list[list[str]], total: int, problems: list[Problem]
) -> list[int]:
    if explicit is None:
        if total % len(groups):
            problems.append(Problem("schedule.placement_gpus", f"{total} GPUs do not split evenly into {len(groups)} "
                                    "sets; give placement_gpus"))
            return []
        return [total // len(groups)] * len(groups)
    heads = [g[0] for g in groups]
    unknown = sorted(set(explicit) - set(heads))
    if unknown:
        problems.append(Problem("schedule.placement_gpus", f"unknown set(s) {unknown}; sets are named {heads}"))
    missing = [h for h in heads if h not in explicit]
    if missing:
        problems.append(Problem("schedule.placement_gpus", f"missing GPUs for set(s) {missing}"))
        return []
    gpus = [explicit[h] for h in heads]
    if any(g <= 0 for g in gpus):
        problems.append(Problem("schedule.placement_gpus", f"GPU counts must be > 0, got {gpus}"))
    if sum(gpus) > total:
        problems.append(Problem("schedule.placement_gpus", f"sets ask {sum(gpus)} GPUs but the pool has {total}"))
    return gpus


# ---------------------------------------------------------------- memory of colocated sets


@dataclass(frozen=True)
class SetMemory:
    """Peak bytes per GPU of a colocated set, by phase, and what dominates it."""

    generation: float
    training: float
    capacity: float
    detail: str

    @property
    def peak(self) -> float:
        return max(self.generation, self.training)

    @property
    def fits(self) -> bool:
        return self.peak <= self.capacity


def colocated_memory(
    scn: Scenario, pool_name: str, roles: list[str], gpus: int | None, max_seq_tokens: int
) -> SetMemory:
    """Per-GPU memory of roles time-sharing GPUs of a pool (params/grads/optimizer stay resident unless
    offloaded; activations only in the active phase; an engine's share while it generates or judges).

    `gpus`: the set's size when every role spans it (HybridFlow's get_min_alloc varies it); None uses
    each role's own GPU count (roles on partly overlapping GPUs).
    """
    pool = scn.cluster.pools[pool_name]
    hw = pool.profile()
    resident: dict[str, float] = {}
    active: dict[str, float] = {}
    engines = [role for role in roles if scn.roles[role].engine is not None]
    for role in roles:
        if role in engines:
            continue
        r = scn.roles[role]
        model = scn.models[r.model]
        rank = scn.layout(role).rank_gpus  # tp x pp x cp GPUs per data-parallel rank
        dp = max(1, (scn.role_gpus(role) if gpus is None else gpus) // rank)
        t = r.train
        if role in TRAINED:
            m = role_training_memory(r, model, hw, dp, max_seq_tokens)
            keep = (0 if t.param_offload else m.weights) + (0 if t.grad_offload else m.grads)
            keep += 0 if t.optimizer_offload else m.optimizer
            resident[role] = keep
            active[role] = m.weights + m.grads + m.optimizer + m.activations - keep
        else:
            m = role_forward_memory(r, model, hw, dp, max_seq_tokens)
            resident[role] = 0 if t.param_offload else m.weights
            active[role] = m.weights + m.activations - resident[role]
    states = sum(resident.values())
    training = states + max(active.values(), default=0.0)
    generation = states
    detail = ", ".join(f"{r} {v / _GB:.1f}" for r, v in resident.items())
    judges = [role for role in engines if role != "rollout"]
    if judges:  # an LLM judge's engine on these GPUs (it takes turns with the rollout engine)
        judge = max(hw.hbm_bytes * scn.roles[j].engine.gpu_memory_utilization for j in judges)
        generation = states + judge
        detail += f", judge engine {judge / _GB:.1f}"
    if "rollout" in roles:
        ro = scn.roles["rollout"]
        engine = hw.hbm_bytes * ro.engine.gpu_memory_utilization
        shared = 0.0
        # Schedules whose GPUs never switch roles (rollout apart) have no reshard knob: the default method.
        reshard = scn.schedule.options(HybridSwitchOptions).reshard
        quantised = ro.engine.shape(scn.models[ro.model]) is not scn.models[ro.model]
        if "actor" in roles and reshard == "3d-hybrid-engine" and not quantised:
            # 3D-HybridEngine generates from the actor's own (regathered) weights: no second copy (a quantised
            # engine holds its own copy in its format).
            shared = min(resident.get("actor", 0.0),
                         scn.models[ro.model].weight_bytes_total / scn.layout("rollout").engine_gpus)
        elif "actor" in roles:
            actor = scn.roles["actor"]
            training += reshard_redundant_bytes_per_gpu(
                reshard, scn.models[ro.model].weight_bytes_total, actor.parallel.tp, actor.parallel.pp,
                ro.parallel.tp,
            )
        generation = max(generation, states + engine - shared)
        detail += f", rollout engine {engine / _GB:.1f}"
    return SetMemory(generation, training, hw.hbm_bytes, detail)


REQUIRED_ROLES = {
    "ppo": ("actor", "rollout", "critic"),
    "grpo": ("actor", "rollout"),
    "dapo": ("actor", "rollout"),
    "remax": ("actor", "rollout"),
    "rloo": ("actor", "rollout"),
}


def hybridflow_problems(
    scn: Scenario, max_seq_tokens: int, resolved: tuple[Placement | None, list[Problem]] | None = None
) -> list[Problem]:
    """Roles the algorithm needs, then the placement and its memory (`resolved`: resolve_placement(scn))."""
    kind = scn.algorithm.kind
    if kind not in REQUIRED_ROLES:
        return [Problem("algorithm.kind", f"the hybridflow schedule trains a policy; {kind!r} is generation only")]
    missing = [r for r in REQUIRED_ROLES[kind] if r not in scn.roles]
    if missing:
        return [Problem("roles", f"{kind} needs role(s) {', '.join(missing)}")]
    if kind != "ppo" and "critic" in scn.roles:
        return [Problem("roles.critic", f"{kind} has no critic (advantages come from the sample group)")]
    schedule = scn.schedule.kind
    if scn.schedule.overlaps_training and scn.roles_share_gpus("rollout", "actor"):
        return [Problem("roles.rollout.pool", f"{schedule} needs rollout on GPUs apart from the actor's "
                        f"(pool {scn.roles['actor'].pool!r}, GPUs {scn.role_gpu_range('actor')})")]
    if scn.schedule.overlaps_training:  # engines generate while the trainer works
        shared = [r for r in scn.roles if r not in ("rollout", "actor") and scn.roles_share_gpus("rollout", r)]
        reward = scn.roles.get("reward")
        shared = [r for r in shared if not (r == "reward" and reward.engine is not None)]  # worded below
        if shared:
            role, (first, stop) = shared[0], scn.role_gpu_range("rollout")
            return [Problem(f"roles.{role}.pool", f"{schedule} generates while it trains, so the {role} forward "
                            f"pass needs GPUs apart from the rollout engines' (pool {scn.roles['rollout'].pool!r}, "
                            f"GPUs {first}..{stop - 1}); put it on the actor's pool {scn.roles['actor'].pool!r}")]
    reward = scn.roles.get("reward")
    if schedule != "hybridflow" and reward is not None and reward.engine is not None:
        shared = [r for r in scn.roles if r != "reward" and scn.roles_share_gpus("reward", r)]
        if shared:
            return [Problem("roles.reward.pool", f"{schedule} scores samples while other roles run, so the LLM "
                            f"judge needs GPUs of its own; it shares GPUs with {', '.join(shared)}")]
    resolved = resolved if resolved is not None else resolve_placement(scn)
    if resolved[0] is not None:  # the options see the GPUs each role has once the placement is applied
        options = schedule_option_problems(resolved[0].scenario)
        if options and scn.schedule.placement != "custom":
            options = [Problem(p.path, f"with placement {scn.schedule.placement!r}: {p.message}") for p in options]
        if options:
            return options
    return placement_problems(scn, max_seq_tokens, resolved)


def placement_problems(
    scn: Scenario, max_seq_tokens: int, resolved: tuple[Placement | None, list[Problem]] | None = None
) -> list[Problem]:
    """Problems of a hybridflow placement: the shortcut itself, then the memory of each colocated set."""
    placement, problems = resolved if resolved is not None else resolve_placement(scn)
    problems = list(problems)
    if placement is None:
        return problems
    rs = placement.scenario
    if getattr(scn.schedule, "judge_scoring", "batch") == "sample":
        reward = rs.roles.get("reward")
        if reward is None or reward.engine is None:
            return [Problem("schedule.judge_scoring", "'sample' needs an LLM judge (a reward role with an engine)")]
        if rs.workload.agent is not None:
            return [Problem("schedule.judge_scoring", "'sample' scores single-turn responses; multi-turn "
                            "trajectories are judged as a batch ('batch')")]
        if rs.roles_share_gpus("reward", "rollout"):
            return [Problem("schedule.judge_scoring", f"'sample' needs the judge on GPUs apart from the rollout's "
                            f"(reward GPUs {rs.role_gpu_range('reward')} and rollout GPUs "
                            f"{rs.role_gpu_range('rollout')} of pool {reward.pool!r} overlap)")]
    if scn.schedule.placement != "custom":
        # Roles moved to carved pools: re-check parallelism and memory there, naming the shortcut.
        shortcut = scn.schedule.placement
        again = check_scenario(rs) or placement_problems(rs, max_seq_tokens)  # rs is custom: one level deep
        return [Problem(p.path, f"with placement {shortcut!r}: {p.message}") for p in again]
    for pool_name, roles in placement.sets.items():
        pool = rs.cluster.pools[pool_name]
        if all(rs.role_gpu_range(r) == (0, pool.gpus) for r in roles):
            groups = [(roles, pool.gpus, f"pool {pool_name!r} ({pool.gpus} x {pool.hardware})")]
        else:  # roles on parts of the pool: each run of GPUs the same roles hold is checked on its own
            groups = []
            for start, stop in rs.gpu_runs(pool_name):
                held = [r for r in roles if _covers(rs.role_gpu_range(r), start, stop)]
                if held:
                    groups.append((held, None, f"pool {pool_name!r} GPUs {start}..{stop - 1} ({pool.hardware})"))
        for held, gpus, where in groups:
            mem = colocated_memory(rs, pool_name, held, gpus, max_seq_tokens)
            if mem.fits:
                continue
            hint = ""
            if gpus is not None:
                need = _min_gpus(rs, pool_name, held, max_seq_tokens)
                hint = f"; needs at least {need} GPUs" if need else "; does not fit at any size (offload or shard more)"
            phase = "generation" if mem.generation >= mem.training else "training"
            problems.append(Problem(
                "schedule.placement",
                f"{where}: {'+'.join(held)} need {mem.peak / _GB:.1f} GB per GPU in {phase} "
                f"(resident: {mem.detail}) > {mem.capacity / _GB:.0f} GB{hint}",
            ))
    return problems


def _covers(span: tuple[int, int], start: int, stop: int) -> bool:
    return span[0] <= start and stop <= span[1]


def _min_gpus(scn: Scenario, pool_name: str, roles: list[str], max_seq_tokens: int, limit: int = 4096) -> int | None:
    step = 1
    for role in roles:
        par = scn.roles[role].parallel
        step = max(step, par.tp * par.pp)
    largest = limit - limit % step
    if largest < step or not colocated_memory(scn, pool_name, roles, largest, max_seq_tokens).fits:
        return None  # per-GPU memory only falls as the set grows (states shard over data parallel): none fits
    g = step
    while g <= limit:
        if colocated_memory(scn, pool_name, roles, g, max_seq_tokens).fits:
            return g
        g += step
    return None


def placement_rows(scn: Scenario) -> list[dict]:
    """Where each role runs once a placement shortcut is applied: pool, GPU range, parallelism, sharing."""
    placement, _ = resolve_placement(scn) if scn.schedule.trains else (None, [])
    rs = placement.scenario if placement is not None else scn
    rows = []
    for role, spec in rs.roles.items():
        start, stop = rs.role_gpu_range(role)
        par = spec.parallel
        if spec.engine is not None:
            layout = f"{(stop - start) // par.tp} engines x tp {par.tp}"
        else:
            cp = f" x cp {par.cp}{' (dynamic)' if par.cp_dynamic else ''}" if par.cp > 1 else ""
            layout = f"tp {par.tp} x pp {par.pp}{cp} x dp {(stop - start) // (par.tp * par.pp * par.cp)}"
        if par.ep > 1:
            layout += f", experts over ep {par.ep}"
        shares = [r for r in rs.roles if r != role and rs.roles_share_gpus(role, r)]
        rows.append({"role": role, "pool": spec.pool, "pool GPUs": f"{start}-{stop - 1}", "layout": layout,
                     "takes turns with": ", ".join(shares) or "-"})
    return rows
