"""AReaL experiment config (1.0.x layout, or the 0.x one) -> an rlsim scenario.

AReaL's decoupled allocation (`sglang:d4t2+fsdp:d8`, or per-engine `backend` fields) becomes two
pools, `gen` and `train`, and the fully-async schedule with AReaL's staleness rule; a colocated one
(`sglang:d8|fsdp:d8`) becomes a colocated hybridflow schedule. Keys have moved between releases, so
each scenario field lists the AReaL keys that may hold it, the current one first.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlsim.tools.importers.areal_alloc import Component, parse_allocation
from rlsim.tools.importers.common import Ledger, pool_shape
from rlsim.tools.importers.draft import Imported, finalize, hardware, workload
from rlsim.tools.importers.hydra import is_missing
from rlsim.tools.importers.loading import load_hydra_config, require_framework
from rlsim.tools.importers.shapes import model_spec

# scenario field -> AReaL keys (1.0.x first, then 0.x)
KEYS = {
    "nodes": ("cluster.n_nodes", "n_nodes"),
    "gpus_per_node": ("cluster.n_gpus_per_node", "n_gpus_per_node"),
    "prompts": ("train_dataset.batch_size", "dataset.train_bs_n_seqs"),
    "group": ("gconfig.n_samples", "group_size"),
    "response": ("gconfig.max_new_tokens", "ppo.gen.max_new_tokens"),
    "prompt": ("train_dataset.max_length", "dataset.max_prompt_len"),
    "mini_batches": ("actor.ppo_n_minibatches", "ppo.ppo_n_minibatches"),
    "eta": ("rollout.max_head_offpolicyness", "max_head_offpolicyness"),
    "concurrent": ("rollout.max_concurrent_rollouts", "max_concurrent_rollouts"),
    "recompute": ("actor.recompute_logprob", "ppo.recompute_logprob"),
    "tokens": ("actor.mb_spec.max_tokens_per_mb", "actor_train.mb_spec.max_tokens_per_mb"),
}
PER_ENGINE = (("rollout", "rollout"), ("actor", "actor"), ("critic", "critic"), ("ref", "reference"))
ENGINE_KINDS = {"sglang": "sglang-0.4", "vllm": "vllm-v1"}
SGLANG = (("mem_fraction_static", "gpu_memory_utilization"), ("max_running_requests", "max_num_seqs"),
          ("max_prefill_tokens", "max_num_batched_tokens"))
VLLM = (("gpu_memory_utilization", "gpu_memory_utilization"), ("max_num_seqs", "max_num_seqs"),
        ("max_num_batched_tokens", "max_num_batched_tokens"))


def _first(ledger: Ledger, field: str, target: str, default: Any = None) -> Any:
    """The first AReaL key for `field` present in the config (marked used), else `default`."""
    for key in KEYS[field]:
        if ledger.has(key):
            return _checked(ledger, key, target)
    return default


def _checked(ledger: Ledger, key: str, target: str) -> Any:
    value = ledger.use(key, target)
    if field_is_count(key) and value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                                      or value < 1):
        ledger.error(key, f"expected an integer >= 1, got {value!r}")
        return None
    return value


def field_is_count(key: str) -> bool:
    counts = ("nodes", "gpus_per_node", "prompts", "group", "response", "prompt", "mini_batches", "tokens")
    return key in {k for f in counts for k in KEYS[f]}


def import_areal(path: Path, overrides: list[str], *, model_config: Path | None = None, gpu: str | None = None,
                 sets: list[str] = (), config_dirs: list[Path] = ()) -> Imported:
    config = load_hydra_config(path, list(overrides), list(config_dirs), framework="areal")
    require_framework(config, "areal", str(path))
    ledger = Ledger.of(str(path), config, "areal")
    hw = hardware(ledger, gpu)
    engines = _allocation(ledger, config)
    ledger.raise_problems()
    per_node = _first(ledger, "gpus_per_node", "cluster.pools.*.gpus_per_node", 8) or 8
    nodes = _first(ledger, "nodes", "cluster size (the allocation must fit)", None)
    colocated = engines["rollout"].group == engines["actor"].group
    used = sum(max(c.gpus for c in engines.values() if c.group == g) for g in {c.group for c in engines.values()})
    if nodes is not None and used > nodes * per_node:
        ledger.error(KEYS["nodes"][0] if ledger.has(KEYS["nodes"][0]) else KEYS["nodes"][1],
                     f"the allocation needs {used} GPUs but the cluster has {nodes} × {per_node}")
    models = {"policy": model_spec(ledger, "actor.path", model_config, "policy")}
    for key in ("ref.path", "critic.path", "sglang.model_path", "vllm.model", "tokenizer_path"):
        if ledger.has(key) and ledger.peek(key) == ledger.peek("actor.path"):
            ledger.use(key, "models.policy (same model)")
    pools, roles = _roles(ledger, config, engines, hw, per_node, colocated)
    algorithm = _algorithm(ledger, "critic" in roles)
    lengths = (_first(ledger, "prompt", "workload.prompt_length.max"),
               _first(ledger, "response", "workload.response_length.max (max_new_tokens)"))
    if lengths[0] is None:
        ledger.assume("longest prompt (train_dataset.max_length is not set)", 1024,
                      "--set workload.prompt_length.max=N")
        lengths = (1024, lengths[1])
    schedule = {"kind": "hybridflow", "placement": "colocate"} if colocated else _async(ledger, algorithm)
    _ignore_rest(ledger, engines["rollout"].backend)
    data = {"name": path.stem, "description": f"imported from AReaL config {path.name}", "steps": 3,
            "cluster": {"pools": pools}, "models": models, "roles": roles, "algorithm": algorithm,
            "workload": workload(ledger, *lengths), "schedule": schedule}
    return finalize(data, ledger, list(sets), f"Imported by `rlsim import areal {path}`.")


def _allocation(ledger: Ledger, config: dict) -> dict[str, Component]:
    """Engines by role: from `allocation_mode`, else the per-engine `backend` fields of AReaL 1.0."""
    mode = ledger.peek("allocation_mode")
    engines: dict[str, Component] = {}
    if mode:
        try:
            components = parse_allocation(ledger.use("allocation_mode", "cluster.pools, roles.*.parallel"))
        except ValueError as exc:
            ledger.error("allocation_mode", str(exc))
            return {}
        inference = [c for c in components if c.inference]
        training = [c for c in components if not c.inference]
        if len(inference) != 1 or not training:
            ledger.error("allocation_mode", "expected one inference engine (sglang / vllm) and a training engine")
            return {}
        engines["rollout"] = inference[0]
        for comp in training:
            role = {"critic": "critic", "c": "critic", "ref": "reference"}.get(comp.name or "", "actor")
            engines.setdefault(role, comp)
        for comp in training:
            if comp.old_syntax:
                ledger.assume(f"training backend of the old allocation {mode!r}", comp.backend,
                              "--set roles.actor.train.sharding=fsdp|megatron")
    broken: set[str] = set()
    for group, (prefix, role) in enumerate(PER_ENGINE, start=100):
        key = f"{prefix}.backend"
        value = ledger.peek(key)
        if value is None or is_missing(value) or value == "":
            ledger.ignore(key, "not set (allocation_mode gives the engines)" if mode else "not set")
            continue
        if role in engines:
            ledger.ignore(key, "allocation_mode gives this engine")
            continue
        try:
            (engines[role],) = parse_allocation(ledger.use(key, f"roles.{role}.parallel and its pool"))
        except ValueError as exc:
            ledger.error(key, str(exc) if "+" not in str(value) else "one engine per backend field")
            broken.add(role)
            continue
        engines[role].group = group
    _colocations(ledger, engines)
    for role in ("rollout", "actor"):
        if role not in engines and role not in broken:
            where = "rollout.backend" if role == "rollout" else "actor.backend"
            ledger.error(where, f"no {role} engine: set allocation_mode or {where} (e.g. "
                         f"{'sglang:d4t2' if role == 'rollout' else 'fsdp:d8'})")
    if "rollout" in engines and not engines["rollout"].inference:
        ledger.error("rollout.backend", f"{engines['rollout'].backend} is a training backend, not sglang / vllm")
        engines.pop("rollout")
    return engines


def _colocations(ledger: Ledger, engines: dict[str, Component]) -> None:
    """AReaL 1.0 `<engine>.scheduling_strategy: {type: colocation, target: <engine>}` shares the target's GPUs."""
    roles = dict(PER_ENGINE)
    for prefix, role in PER_ENGINE:
        kind = ledger.use(f"{prefix}.scheduling_strategy.type", f"roles.{role}.pool (colocation: the target's GPUs)")
        target = ledger.use(f"{prefix}.scheduling_strategy.target", f"roles.{role}.pool (colocation target)")
        if kind != "colocation" or role not in engines:
            continue
        if roles.get(str(target)) not in engines:
            ledger.error(f"{prefix}.scheduling_strategy.target", f"colocation target {target!r} is not an engine "
                         f"of this config ({', '.join(p for p, r in PER_ENGINE if r in engines)})")
            continue
        engines[role].group = engines[roles[str(target)]].group


def _roles(ledger: Ledger, config: dict, engines: dict[str, Component], hw: str, per_node: int, colocated: bool):
    """Pools by GPU group (gen, train, or main when colocated; a separate critic / reference: its own)."""
    present = {role: comp for role, comp in engines.items()
               if role in ("rollout", "actor") or isinstance(config.get("ref" if role == "reference" else role), dict)}
    for role in set(engines) - set(present):
        ledger.ignore(f"{'ref' if role == 'reference' else role}.backend", f"no {role} section in the config")
    names = {}
    for role, comp in present.items():
        if comp.group == present["actor"].group:
            names.setdefault(comp.group, "main" if colocated else "train")
        names.setdefault(comp.group, "gen" if role == "rollout" else role)
    sizes: dict[str, int] = {}
    for comp in present.values():
        sizes[names[comp.group]] = max(sizes.get(names[comp.group], 0), comp.gpus)
    pools = {}
    for name, gpus in sizes.items():
        nodes, per = pool_shape(gpus, per_node)
        pools[name] = {"hardware": hw, "nodes": nodes, "gpus_per_node": per}
    roles: dict[str, dict] = {}
    for role, comp in present.items():
        pool = names[comp.group]
        parallel = {"tp": comp.tp, "pp": comp.pp}
        if comp.dims.get("e", 1) > 1:  # AReaL's expert_parallel_size (expert tensor parallel 1): parallel.ep
            parallel["ep"] = comp.dims["e"]
        spec: dict[str, Any] = {"pool": pool, "model": "policy", "parallel": parallel}
        if comp.gpus != sizes[pool]:
            spec["gpus"] = comp.gpus
        if comp.inference:
            spec["engine"] = _engine(ledger, comp.backend)
        else:
            spec["train"] = _train(ledger, {"reference": "ref"}.get(role, role), comp.backend)
        roles[role] = spec
    return pools, roles


def _engine(ledger: Ledger, backend: str) -> dict[str, Any]:
    engine: dict[str, Any] = {"kind": ENGINE_KINDS[backend]}
    for key, field in SGLANG if backend == "sglang" else VLLM:
        value = ledger.use(f"{backend}.{key}", f"roles.rollout.engine.{field}")
        if value is not None:
            engine[field] = value
    if backend == "sglang":
        graphs = ledger.flag("sglang.disable_cuda_graph", "roles.rollout.engine.cuda_graphs = not this")
        radix = ledger.flag("sglang.disable_radix_cache", "roles.rollout.engine.enable_prefix_caching = not this")
        chunk = ledger.use("sglang.chunked_prefill_size", "roles.rollout.engine.chunked_prefill (> 0: on)")
        if chunk is not None:
            engine["chunked_prefill"] = chunk > 0
    else:
        graphs = ledger.flag("vllm.enforce_eager", "roles.rollout.engine.cuda_graphs = not this")
        radix = ledger.flag("vllm.no_enable_prefix_caching", "roles.rollout.engine.enable_prefix_caching = not this")
        chunk = ledger.flag("vllm.no_enable_chunked_prefill", "roles.rollout.engine.chunked_prefill = not this")
        if chunk is not None:
            engine["chunked_prefill"] = not chunk
    if graphs is not None:
        engine["cuda_graphs"] = not graphs
    if radix is not None:
        engine["enable_prefix_caching"] = not radix
    return engine


def _train(ledger: Ledger, prefix: str, backend: str) -> dict[str, Any]:
    role = {"ref": "reference"}.get(prefix, prefix)
    train: dict[str, Any] = {"sharding": "megatron" if backend == "megatron" else "fsdp"}
    tokens = ledger.int_value(f"{prefix}.mb_spec.max_tokens_per_mb", f"roles.{role}.train.ppo_max_token_len_per_gpu")
    if prefix == "actor" and tokens is None:
        tokens = _first(ledger, "tokens", f"roles.{role}.train.ppo_max_token_len_per_gpu")
    if tokens:
        train["ppo_max_token_len_per_gpu"] = tokens
    checkpointing = ledger.flag(f"{prefix}.gradient_checkpointing", f"roles.{role}.train.activation_checkpointing")
    if checkpointing is not None and role != "reference":
        train["activation_checkpointing"] = checkpointing
    offload = ledger.flag(f"{prefix}.fsdp.offload_params", f"roles.{role}.train.param_offload")
    offload = ledger.flag(f"{prefix}.offload", f"roles.{role}.train.param_offload") or offload
    if offload is not None:
        train["param_offload"] = offload
    return train


def _algorithm(ledger: Ledger, critic: bool) -> dict[str, Any]:
    prompts = _first(ledger, "prompts", "algorithm.prompts_per_step", 1) or 1
    group = _first(ledger, "group", "algorithm.samples_per_prompt", 1) or 1
    if ledger.has("actor.group_size") and ledger.peek("actor.group_size") != group:
        ledger.error("actor.group_size", f"{ledger.peek('actor.group_size')} differs from gconfig.n_samples ({group})")
    ledger.use("actor.group_size", "algorithm.samples_per_prompt")
    mini = _first(ledger, "mini_batches", "algorithm.mini_batches", 1) or 1
    if (prompts * group) % mini:
        key = next(k for k in KEYS["mini_batches"] if ledger.has(k))
        ledger.error(key, f"{mini} mini-batches do not divide the {prompts} × {group} = {prompts * group} samples "
                     "of a step")
    return {"kind": "ppo" if critic else "grpo", "prompts_per_step": prompts, "samples_per_prompt": group,
            "mini_batches": mini, "epochs": 1}


def _async(ledger: Ledger, algorithm: dict) -> dict[str, Any]:
    schedule: dict[str, Any] = {"kind": "fully-async", "interrupt": "recompute"}
    schedule["max_head_offpolicyness"] = _first(ledger, "eta", "schedule.max_head_offpolicyness", 0)
    consumer = ledger.use("rollout.consumer_batch_size", "schedule.consumer_batch_size")
    if consumer is not None and consumer != algorithm["prompts_per_step"]:
        ledger.error("rollout.consumer_batch_size", f"{consumer} differs from the batch size "
                     f"({algorithm['prompts_per_step']}): rlsim's AReaL rule uses one number for the staleness "
                     "unit and the groups per trainer step; set them equal")
    concurrent = _first(ledger, "concurrent", "schedule.max_concurrent_rollouts")
    schedule["max_concurrent_rollouts"] = concurrent or algorithm["prompts_per_step"]
    if concurrent is None:
        ledger.assume("max_concurrent_rollouts (null: AReaL 1.0 uses consumer_batch_size)",
                      algorithm["prompts_per_step"], "--set schedule.max_concurrent_rollouts=N")
    recompute = _first(ledger, "recompute", "schedule.recompute_logprob")
    if recompute is not None:
        schedule["recompute_logprob"] = bool(recompute)
    return schedule


def _ignore_rest(ledger: Ledger, backend: str) -> None:
    from rlsim.tools.importers.areal_ignored import ignore_rest

    ignore_rest(ledger, backend)
