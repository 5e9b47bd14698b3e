"""Problems of the schedule options that depend on the roles (tail re-sharding, lending, re-splitting, elastic replicas,
weight sync)."""

from __future__ import annotations

from rlsim.sim.scenario.errors import Problem
from rlsim.sim.scenario.schema import Scenario


def schedule_option_problems(scn: Scenario) -> list[Problem]:
    spec = scn.schedule
    problems: list[Problem] = []
    rollout = scn.roles.get("rollout")
    if rollout is None:
        return problems
    tp = rollout.parallel.tp
    tail = getattr(spec, "tail_reshard", None)
    if tail is not None:
        engines = scn.role_gpus("rollout") // tp
        per_node = scn.cluster.pools[rollout.pool].gpus_per_node
        if engines < tail.factor:
            problems.append(Problem("schedule.tail_reshard.factor", f"no wide engine can be formed: the rollout "
                                    f"has {engines} engine(s) of TP {tp}, fewer than the factor {tail.factor}"))
        elif engines % tail.factor:
            problems.append(Problem("schedule.tail_reshard.factor", f"{tail.factor} does not divide the "
                                    f"{engines} rollout engines into wide ones"))
        elif tp * tail.factor > per_node:
            problems.append(Problem("schedule.tail_reshard.factor", f"a wide engine of TP {tp * tail.factor} "
                                    f"spans more than a node ({per_node} GPUs): its KV moves inside a node"))
    colocated = getattr(spec, "trainer_mode", None) == "colocate_async"
    if colocated and not scn.roles_share_gpus("rollout", "actor"):
        problems.append(Problem("roles.rollout.pool", "colocate_async runs generation on the actor's GPUs: "
                                "put the rollout role on them (separate_async for a pool of its own)"))
    lends = getattr(getattr(spec, "hybrid_rollout", None), "enable_switch", False) and not colocated
    resplit = getattr(spec, "resplit", None) is not None
    elastic = getattr(spec, "elastic", None) is not None
    if (lends or resplit or elastic) and scn.role_gpus("actor") % tp:
        what = "schedule.resplit" if resplit else "schedule.elastic" if elastic else \
            "schedule.hybrid_rollout.enable_switch"
        problems.append(Problem(what, f"the actor's {scn.role_gpus('actor')} GPUs do not divide into rollout "
                                f"engines of TP {tp}"))
    if resplit:
        shared = [r for r in scn.roles if r not in ("actor", "rollout") and scn.roles_share_gpus(r, "actor")]
        if shared:
            problems.append(Problem("schedule.resplit", f"re-splitting moves the actor's GPUs into generation "
                                    f"while {', '.join(shared)} would run on them: give those roles GPUs of "
                                    "their own"))
    sync = getattr(spec, "weight_sync", None)
    if sync is not None and scn.roles_share_gpus("rollout", "actor"):
        # Colocated, the weights reach the engines in place (costs/transition.py): nothing crosses the network.
        for key, set_ in (("senders", sync.senders != "one"), ("delta", sync.delta)):
            if set_:
                problems.append(Problem(f"schedule.weight_sync.{key}", "the rollout shares the actor's GPUs, so the "
                                        "weights never cross the network: senders and delta apply to syncs to "
                                        "engines on other GPUs"))
    problems += disaggregation_problems(scn)
    return problems


PD_SCHEDULES = ("generation-only", "hybridflow", "one-step-off", "fully-async")


def disaggregation_problems(scn: Scenario) -> list[Problem]:
    """`engine.disaggregation`: on the rollout role only, its engines adding up to the role's, a KV link the GPUs
    have, and a schedule that keeps its engines as they were built (docs/rollout-quantisation.md)."""
    problems: list[Problem] = []
    for name, role in scn.roles.items():
        pd = role.engine.disaggregation if role.engine is not None else None
        if pd is None:
            continue
        at = f"roles.{name}.engine.disaggregation"
        if name != "rollout":
            problems.append(Problem(at, "only the rollout role's engines can be split into prefill and decode"))
            continue
        if role.pool not in scn.cluster.pools:
            continue  # (reported as an unknown pool)
        tp, gpus = scn.layout(name).engine_gpus, scn.role_gpus(name)
        if pd.prefill_engines + pd.decode_engines != gpus // tp:
            problems.append(Problem(at, f"prefill_engines {pd.prefill_engines} + decode_engines {pd.decode_engines} "
                                    f"= {pd.prefill_engines + pd.decode_engines} engines of TP {tp}, but the role's "
                                    f"{gpus} GPUs make {gpus // tp}"))
        pool = scn.cluster.pools[role.pool]
        try:
            hw = pool.profile()
        except Exception:  # noqa: BLE001 (an unknown or broken profile: the pool check reports it)
            continue
        if pd.kv_link == "nvlink" and hw.nvlink_gb_per_s <= 0:
            problems.append(Problem(f"{at}.kv_link", f"nvlink, but {hw.name} has no NVLink: use pcie or rdma"))
        elif pd.kv_link == "nvlink" and gpus > hw.nvlink_domain(pool.gpus_per_node):
            problems.append(Problem(f"{at}.kv_link", f"nvlink, but the role's {gpus} GPUs span more than one NVLink "
                                    f"domain ({hw.nvlink_domain(pool.gpus_per_node)} GPUs): use rdma"))
        spec = scn.schedule
        if spec.kind not in PD_SCHEDULES:
            problems.append(Problem(at, f"schedule {spec.kind!r} moves or rebuilds rollout engines; prefill/decode "
                                    f"disaggregation runs under {', '.join(PD_SCHEDULES)}"))
        for option in ("tail_reshard", "resplit", "lora", "routing"):
            if getattr(spec, option, None) is not None:
                problems.append(Problem(f"schedule.{option}", f"is set, and it moves or re-routes rollout engines "
                                        f"that {at} splits into prefill and decode: remove one of the two"))
    return problems


def agent_option_problems(scn: Scenario) -> list[Problem]:
    """Options that a multi-turn agent workload would otherwise switch off without a word."""
    if scn.workload.agent is None:
        return []
    if not scn.schedule.trains:
        return [Problem("workload.agent", "generation-only pushes single-turn batches through the engines and "
                        "would ignore the agent's turns and tools: use hybridflow, one-step-off, fully-async or "
                        "roll for agentic rollouts")]
    if getattr(scn.schedule, "tail_reshard", None) is not None:
        return [Problem("schedule.tail_reshard", "tail re-sharding widens engines inside a single-turn rollout; "
                        "with workload.agent the trajectories' turns would skip it: remove one of the two")]
    return []
