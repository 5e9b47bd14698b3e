"""Building the SimPy entities a scenario asks for: pools in the ledger, inference engines per role."""

from __future__ import annotations

from dataclasses import replace

from rlsim.sim.engine.environment import SimEnvironment
from rlsim.sim.engine.inference import InferenceEngine
from rlsim.sim.engine.prefill_pool import PrefillPool
from rlsim.sim.hardware import HardwareProfile
from rlsim.sim.scenario.schema import RoleSpec, Scenario


def role_hardware(scn: Scenario, role: RoleSpec) -> HardwareProfile:
    return scn.cluster.pools[role.pool].profile()


def register_pools(scn: Scenario, env: SimEnvironment) -> None:
    for name, pool in scn.cluster.pools.items():
        env.ledger.add_pool(name, pool.gpus)


def build_engines(scn: Scenario, env: SimEnvironment, role_name: str = "rollout") -> list[InferenceEngine]:
    """One engine per `tp` GPUs of the role (vLLM/SGLang replicas; generation DP = gpus / tp: the layout's
    engine_gpus, the same the memory check sizes an engine by)."""
    role = scn.roles[role_name]
    if role.engine is None:
        raise ValueError(f"roles.{role_name}.engine is required to build inference engines")
    hw = role_hardware(scn, role)
    model = role.engine.shape(scn.models[role.model])  # quantised weights / KV, as the engines hold them
    layout = scn.layout(role_name)
    tp = layout.engine_gpus
    capacity = role.engine.kv_capacity(model, hw, tp)
    count = scn.engine_count(role_name)
    # Aggregate mode (rlsim/sim/aggregate.py): 1/scale of the rollout engines, each counting scale x tp GPUs.
    scale = env.load_scale if role_name == "rollout" else 1
    count //= scale
    if role.engine.disaggregation is not None:
        count = role.engine.disaggregation.decode_engines
    shared: dict = {}  # identical replicas share one decode-coefficient table
    engines = [
        InferenceEngine(
            env, f"{role_name}-{i}", model, hw, tp, role.engine, capacity,
            pool=role.pool, role=role_name, decode_cache=shared, ep=layout.ep,
            gpus_per_node=scn.cluster.pools[role.pool].gpus_per_node,
        )
        for i in range(count)
    ]
    pd = role.engine.disaggregation
    if pd is not None:  # prefill/decode disaggregation: the engines above decode, a prefill pool feeds them
        pool = PrefillPool(env, [f"{role_name}-prefill-{j}" for j in range(pd.prefill_engines)], model, hw, tp,
                           role.engine, pd.kv_link, role.pool, role_name, layout.ep,
                           scn.cluster.pools[role.pool].gpus_per_node)
        for e in engines:
            e.prefill_remotely(pool)
    if scale > 1:
        groups = env.ledger.groups
        for e in engines:
            groups[e.name] = replace(groups[e.name], gpus=tp * scale)
    return engines
