"""Semantic checks of a scenario that pydantic validated: references, parallelism, files, memory.

These catch impossible configurations before anything is simulated (docs/sources.md, Design notes: Bad input), each
as a Problem at the dotted path the user has to change, with the numbers that make it impossible.

Parallelism rule (kept simple on purpose): tensor parallelism stays inside a node, as every
verl / Megatron / vLLM deployment does, so `tp` must divide the pool's `gpus_per_node`; a replica
spans `tp * pp` GPUs, so `tp * pp` must divide the role's GPUs (pipeline stages may cross nodes);
an explicit `dp` must make `tp * pp * dp` equal to the role's GPUs. An inference engine is `tp` GPUs:
engine roles have no pipeline stages (`pp` 1). Expert parallelism follows the one layout rule of
rlsim/sim/costs/layout.py (the memory check and the reshard read the same object).
"""

from __future__ import annotations

from dataclasses import replace

from pydantic import ValidationError

from rlsim.sim.costs.layout import ParallelLayout
from rlsim.sim.csv_inputs import CsvInputError, read_length_trace
from rlsim.sim.hardware import HardwareProfile
from rlsim.sim.scenario.errors import Problem
from rlsim.sim.scenario.liveness import check_agent, check_progress
from rlsim.sim.scenario.option_checks import agent_option_problems
from rlsim.sim.scenario.schema import LengthDistribution, Scenario

TRAINING_ROLES = ("actor", "critic")
FORWARD_ROLES = ("reference", "reward")
_GB = 1e9


def check_scenario(scn: Scenario) -> list[Problem]:
    """Every semantic problem of a validated scenario (empty list: the scenario can be simulated)."""
    problems: list[Problem] = []
    profiles = _check_pools(scn, problems)
    sound_roles = _check_roles(scn, problems)
    _check_algorithm(scn, problems)
    if scn.workload.length_trace is not None:
        prompt_max, response_max, max_tokens = _check_trace(scn.workload.length_trace.path, problems)
    else:
        prompt_max = _check_length("workload.prompt_length", scn.workload.prompt_length, problems)
        response_max = _check_length("workload.response_length", scn.workload.response_length, problems)
        max_tokens = prompt_max + response_max if prompt_max and response_max else None
    _check_environments(scn, problems)
    problems += check_agent(scn, prompt_max, _check_length)
    problems += agent_option_problems(scn)
    problems += check_progress(scn)
    _check_memory(scn, profiles, sound_roles, prompt_max, response_max, max_tokens, problems)
    return problems


def max_sequence_tokens(scn: Scenario) -> int:
    """The longest prompt + response the workload can produce (0 when a bound is unknown)."""
    scratch: list[Problem] = []
    if scn.workload.length_trace is not None:
        return _check_trace(scn.workload.length_trace.path, scratch)[2] or 0
    prompt_max = _check_length("workload.prompt_length", scn.workload.prompt_length, scratch)
    response_max = _check_length("workload.response_length", scn.workload.response_length, scratch)
    return prompt_max + response_max if prompt_max and response_max else 0


# ---------------------------------------------------------------- pools and roles


def check_roles(scn: Scenario) -> list[Problem]:
    """The problems of the roles alone: references, GPU counts and each role's parallel layout."""
    problems: list[Problem] = []
    _check_roles(scn, problems)
    return problems


def _check_pools(scn: Scenario, problems: list[Problem]) -> dict[str, HardwareProfile]:
    """Load each pool's hardware profile; unknown or broken profiles become problems."""
    profiles: dict[str, HardwareProfile] = {}
    for name, pool in scn.cluster.pools.items():
        path = f"cluster.pools.{name}.hardware"
        try:
            profiles[name] = pool.profile()
        except KeyError as exc:
            problems.append(Problem(path, str(exc.args[0])))
        except ValidationError as exc:  # a profile file with a bad number: worded like any scenario field
            from rlsim.sim.scenario.messages import model_problems

            for p in model_problems(exc, None, root=HardwareProfile):
                problems.append(Problem(path, f"invalid hardware profile {pool.hardware!r}: {p.path}: {p.message}"))
        except Exception as exc:  # a broken profile file: say so, never a traceback
            problems.append(Problem(path, f"invalid hardware profile {pool.hardware!r}: {_one_line(exc)}"))
    return profiles


def _check_roles(scn: Scenario, problems: list[Problem]) -> set[str]:
    """References, GPU counts and parallelism; return the roles sound enough for the memory check."""
    sound: set[str] = set()
    if "rollout" not in scn.roles:
        problems.append(Problem("roles.rollout", "required (every schedule generates with the rollout role)"))
    pools = ", ".join(scn.cluster.pools)
    models = ", ".join(scn.models)
    for name, role in scn.roles.items():
        at = f"roles.{name}"
        ok = True
        if role.pool not in scn.cluster.pools:
            problems.append(Problem(f"{at}.pool", f"unknown pool {role.pool!r} (pools: {pools})"))
            ok = False
        if role.model not in scn.models:
            problems.append(Problem(f"{at}.model", f"unknown model {role.model!r} (models: {models})"))
            ok = False
        if name == "rollout" and role.engine is None:
            problems.append(Problem(f"{at}.engine", "required for the rollout role"))
            ok = False
        if role.pool not in scn.cluster.pools:
            continue
        pool = scn.cluster.pools[role.pool]
        gpus = role.gpus if role.gpus is not None else pool.gpus - role.gpu_offset
        tp, pp, dp = role.parallel.tp, role.parallel.pp, role.parallel.dp
        cp = role.parallel.cp
        if role.gpu_offset >= pool.gpus:
            problems.append(Problem(f"{at}.gpu_offset", f"{role.gpu_offset} is past pool {role.pool!r}'s "
                                    f"{pool.gpus} GPUs"))
            ok = False
            continue
        if role.gpu_offset + gpus > pool.gpus:
            asks = f"GPUs {role.gpu_offset}..{role.gpu_offset + gpus - 1}" if role.gpu_offset else f"{gpus} GPUs"
            problems.append(Problem(f"{at}.gpus", f"asks {asks} but pool {role.pool!r} has {pool.gpus}"))
            ok = False
        if role.gpu_offset % tp:
            problems.append(Problem(f"{at}.gpu_offset", f"must be a multiple of tp ({tp}) so no tensor-parallel "
                                    f"group straddles a node, got {role.gpu_offset}"))
            ok = False
        if pool.gpus_per_node % tp:
            problems.append(
                Problem(f"{at}.parallel.tp", f"must divide gpus_per_node ({pool.gpus_per_node}), got {tp}")
            )
            ok = False
        elif gpus % (tp * pp * cp):
            what = f"tp × pp × cp = {tp} × {pp} × {cp}" if cp > 1 else f"tp × pp = {tp * pp}"
            problems.append(
                Problem(f"{at}.parallel", f"{what} must divide the role's {gpus} GPUs")
            )
            ok = False
        elif dp is not None and tp * pp * cp * dp != gpus:
            cps = f" × {cp}" if cp > 1 else ""
            problems.append(
                Problem(
                    f"{at}.parallel.dp",
                    f"tp × pp{' × cp' if cp > 1 else ''} × dp = {tp} × {pp}{cps} × {dp} = {tp * pp * cp * dp} must "
                    f"equal the role's {gpus} GPUs",
                )
            )
            ok = False
        if cp_problems := _context_parallel_problems(scn, name):
            problems += cp_problems
            ok = False
        if role.engine is not None and pp > 1:
            problems.append(Problem(f"{at}.parallel.pp", f"must be 1 for an engine role, got {pp}: rlsim models an "
                                    f"inference engine as tp GPUs without pipeline stages (use tp, or more engines)"))
            ok = False
        if ok and role.parallel.ep > 1:
            ep_problems = _expert_parallel_problems(scn, name)
            problems += ep_problems
            ok = not ep_problems
        if ok:
            sound.add(name)
    return sound


def _context_parallel_problems(scn: Scenario, name: str) -> list[Problem]:
    """`parallel.cp` > 1 or `cp_dynamic`: a training or forward role whose sequences can be split that way
    (costs/layout.ParallelLayout.context_problem), an even group for dynamic CP (verl's rule), no online re-split."""
    role = scn.roles[name]
    cp, at = role.parallel.cp, f"roles.{name}.parallel"
    problems = []
    if role.model in scn.models and (why := scn.layout(name).context_problem(scn.models[role.model].heads)):
        problems.append(Problem(f"{at}.cp", f"{why}, got {cp}"))
    if role.parallel.cp_dynamic and (cp < 2 or cp % 2):
        problems.append(Problem(f"{at}.cp_dynamic", f"needs an even parallel.cp of at least 2 (the GPUs a "
                                f"micro-batch's group is drawn from; verl requires an even data x context parallel "
                                f"size), got {cp}"))
    if cp > 1 and role.train.packing == "padded":
        problems.append(Problem(f"{at}.cp", f"context parallelism ({cp}) splits packed, unpadded sequences "
                                "(verl requires use_remove_padding for Ulysses and dynamic CP): set train.packing "
                                "to dynamic"))
    if cp > 1 and name == "actor" and getattr(scn.schedule, "resplit", None) is not None:
        problems.append(Problem(f"{at}.cp", f"online re-splitting moves trainer GPUs a model replica at a time; with "
                                f"context parallelism ({cp}) it is not modelled: set cp to 1"))
    return problems


def _expert_parallel_problems(scn: Scenario, name: str) -> list[Problem]:
    """`parallel.ep` > 1: an MoE model whose experts split evenly over ep GPUs of one engine (SGLang's
    --ep-size divides its tp) or of a training role's tp x dp ranks (Megatron's expert_model_parallel_size)."""
    role = scn.roles[name]
    ep = role.parallel.ep
    at = f"roles.{name}.parallel.ep"
    model = scn.models[role.model]
    if not model.num_experts:
        return [Problem(at, f"{ep} needs an MoE model, but model {role.model!r} is dense (num_experts 0)")]
    problems = []
    if why := scn.layout(name).expert_problem():
        problems.append(Problem(at, f"{why}, got {ep}"))
    if model.num_experts % ep:
        problems.append(Problem(at, f"must divide the model's num_experts ({model.num_experts}), got {ep}"))
    return problems


def _check_algorithm(scn: Scenario, problems: list[Problem]) -> None:
    alg = scn.algorithm
    if alg.samples_per_step % alg.mini_batches:
        problems.append(
            Problem(
                "algorithm.mini_batches",
                f"must divide prompts_per_step × samples_per_prompt "
                f"({alg.prompts_per_step} × {alg.samples_per_prompt} = {alg.samples_per_step}), "
                f"got {alg.mini_batches}",
            )
        )


# ---------------------------------------------------------------- length distributions


def _check_length(at: str, dist: LengthDistribution | None, problems: list[Problem]) -> int | None:
    """The largest length `dist` can produce (None when unknown); empirical CSVs are read and checked."""
    if dist is None:
        return None
    try:
        return dist.maximum()
    except CsvInputError as exc:
        problems.append(Problem(f"{at}.{exc.field}", exc.message))
        return None


def _check_trace(path: str, problems: list[Problem]) -> tuple[int | None, int | None, int | None]:
    """Largest prompt, response and prompt + response of a length trace (None each when it is unreadable)."""
    try:
        prompts, responses = read_length_trace(path)
    except CsvInputError as exc:
        problems.append(Problem("workload.length_trace.path", exc.message))
        return None, None, None
    return max(prompts), max(responses), max(p + r for p, r in zip(prompts, responses, strict=True))


# ---------------------------------------------------------------- memory


def _check_memory(
    scn: Scenario,
    profiles: dict[str, HardwareProfile],
    sound_roles: set[str],
    prompt_max: int | None,
    response_max: int | None,
    max_tokens: int | None,
    problems: list[Problem],
) -> None:
    """Does each role fit on its GPUs at its parallelism? Roles with other problems are skipped."""
    for name in [r for r in scn.roles if r in sound_roles]:  # file order, deterministic output
        role = scn.roles[name]  # type: ignore[index]
        hw = profiles.get(role.pool)
        if hw is None:
            continue
        model = scn.models[role.model]
        layout = scn.layout(name)
        if role.engine is not None and name in ("rollout", "reward"):
            engine = role.engine
            model = engine.shape(model)  # the engines' weight and KV formats (quantised rollout)
            n = layout.engine_gpus  # GPUs of one engine: the memory its weights and KV cache share
            reserve = engine.activation_reserve_gb * _GB
            kv = engine.kv_capacity(model, hw, n)
            usable = hw.hbm_bytes * engine.gpu_memory_utilization * n
            share = f"{engine.gpu_memory_utilization:g} × {hw.hbm_gb:g} GB × {n} GPU{'s' if n > 1 else ''}"
            if kv <= 0:
                problems.append(
                    Problem(
                        f"roles.{name}.parallel.tp",
                        f"model does not fit: weights {model.weight_bytes_total / _GB:.1f} GB per engine "
                        f"+ reserve {reserve * n / _GB:.1f} GB > usable {usable / _GB:.1f} GB ({share})",
                    )
                )
            elif name == "rollout" and (context := _agent_context_tokens(scn, prompt_max)) and kv < context:
                problems.append(Problem(
                    f"roles.{name}.parallel.tp",
                    f"KV cache holds {kv:,.0f} tokens per engine, less than one trajectory's context of {context:,} "
                    f"tokens (workload.agent.max_context_tokens, or the most its turns can add to the longest "
                    f"prompt); usable {usable / _GB:.1f} GB ({share})",
                ))
            elif max_tokens is not None and kv < max_tokens + (judged := _judge_tokens(scn, name)):
                verdict = f" + judge output {judged}" if judged else ""
                problems.append(
                    Problem(
                        f"roles.{name}.parallel.tp",
                        f"KV cache holds {kv:,.0f} tokens per engine, less than one sequence of "
                        f"{max_tokens + judged} tokens (max prompt {prompt_max} + max response {response_max}"
                        f"{verdict}); "
                        f"usable {usable / _GB:.1f} GB ({share}), weights "
                        f"{model.weight_bytes_total / _GB:.1f} GB",
                    )
                )
        elif name in TRAINING_ROLES and max_tokens is not None:
            dp = layout.dp
            mem = role_training_memory(role, model, hw, dp, max_tokens)
            if not mem.fits:
                fix = memory_fix(role, model, hw, dp, max_tokens)
                problems.append(Problem(f"roles.{name}", f"does not fit: {mem.describe()}{fix}"))
        elif name in FORWARD_ROLES and max_tokens is not None:
            dp = layout.dp
            mem = role_forward_memory(role, model, hw, dp, max_tokens)
            if not mem.fits:
                fix = memory_fix(role, model, hw, dp, max_tokens, forward=True)
                problems.append(Problem(f"roles.{name}", f"does not fit: {mem.describe()}{fix}"))


def _agent_context_tokens(scn: Scenario, prompt_max: int | None) -> int:
    """The longest context a trajectory can reach on its engine (0: no agent, or a bound is unknown).

    Its prefix stays in the engine's KV cache between turns, so one engine must hold all of it.
    """
    agent = scn.workload.agent
    if agent is None or prompt_max is None:
        return 0
    scratch: list[Problem] = []  # unreadable files are reported by liveness.check_agent
    turns = _check_length("", agent.turns, scratch)
    per_turn = _check_length("", agent.tokens_per_turn, scratch)
    tools = [scn.environments.tools[t] for t in agent.tool_mix if t in scn.environments.tools]
    observation = max((_check_length("", t.observation_tokens, scratch) or 0 for t in tools), default=0)
    if turns is None or per_turn is None:
        return 0
    return min(agent.max_context_tokens, prompt_max + turns * per_turn + (turns - 1) * observation)


def _judge_tokens(scn: Scenario, role: str) -> int:
    """Tokens an LLM judge appends to a scored sequence (its verdict); 0 for the rollout engines."""
    return scn.algorithm.judge_output_tokens if role == "reward" else 0


def _check_environments(scn: Scenario, problems: list[Problem]) -> None:
    """Tools must name defined pools; an agent's tools must be defined (its files and limits: liveness.py)."""
    envs = scn.environments
    for name, tool in envs.tools.items():
        if tool.pool not in envs.pools:
            problems.append(Problem(f"environments.tools.{name}.pool",
                                    f"unknown pool {tool.pool!r} (known: {', '.join(sorted(envs.pools)) or 'none'})"))
    agent = scn.workload.agent
    if agent is None:
        return
    for tool, weight in agent.tool_mix.items():
        if tool not in envs.tools:
            problems.append(Problem(f"workload.agent.tool_mix.{tool}",
                                    f"unknown tool (known: {', '.join(sorted(envs.tools)) or 'none'})"))
        elif weight < 0:
            problems.append(Problem(f"workload.agent.tool_mix.{tool}", f"must be >= 0, got {weight}"))
    if agent.tool_mix and sum(agent.tool_mix.values()) <= 0:
        problems.append(Problem("workload.agent.tool_mix", "weights must add up to more than 0"))
    if not agent.tool_mix:
        problems.append(Problem("workload.agent.tool_mix", "an agent needs at least one tool"))
    interrupt = getattr(scn.schedule, "interrupt", None)
    if interrupt in ("abort-resume", "abort-discard"):
        problems.append(Problem("schedule.interrupt", f"{interrupt!r} is for single-turn samples; multi-turn "
                                "trajectories keep or recompute their KV"))


def role_training_memory(role, model, hw: HardwareProfile, dp: int, max_seq_tokens: int):
    """Per-GPU training memory of a role as its `train` settings shard it.

    megatron: distributed optimizer (optimizer states sharded over DP, params and grads replicated);
    fsdp: params, grads and optimizer states all sharded. A micro-batch holds up to
    `ppo_max_token_len_per_gpu` tokens (dynamic batching), or one sequence if longer.
    """
    from rlsim.sim.costs.memory import training_memory_per_gpu

    t = role.train
    fsdp = t.sharding == "fsdp"
    cp = role.parallel.cp  # sequences split over cp GPUs; the state sharded over dp x cp (costs/layout.py)
    return training_memory_per_gpu(
        model, hw, role.parallel.tp, role.parallel.pp, dp * cp,
        max(t.ppo_max_token_len_per_gpu, -(-max_seq_tokens // cp)),
        shard_optimizer=True, shard_grads=fsdp, shard_params=fsdp,
        grad_bytes=4.0 if t.grad_reduce_dtype == "fp32" else 2.0,
        activation_checkpointing=t.activation_checkpointing, ep=role.parallel.ep,
    )


def role_forward_memory(role, model, hw: HardwareProfile, dp: int, max_seq_tokens: int):
    """Per-GPU memory of a forward-only role; FSDP keeps 1/dp of the weights (gathered layer by layer)."""
    from rlsim.sim.costs.memory import forward_memory_per_gpu

    t = role.train
    fsdp = t.sharding == "fsdp"  # fully sharded over every GPU of the role, experts or not: EP changes nothing
    cp = role.parallel.cp
    mem = forward_memory_per_gpu(
        model, hw, role.parallel.tp, role.parallel.pp, max(t.ppo_max_token_len_per_gpu, -(-max_seq_tokens // cp)),
        ep=1 if fsdp else role.parallel.ep,
    )
    return replace(mem, weights=mem.weights / (dp * cp)) if fsdp else mem


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 200 else text[:197] + "..."


def memory_fix(role, model, hw: HardwareProfile, dp: int, max_seq_tokens: int, forward: bool = False) -> str:
    """What would make a role fit, each on its own: more GPUs (data parallel), a larger TP inside a node, or
    (training roles) offloading. A forward-only role is sized by its forward memory and has no offload."""
    tp, pp = role.parallel.tp, role.parallel.pp
    memory = role_forward_memory if forward else role_training_memory

    def fits(r, d: int) -> bool:
        return memory(r, model, hw, d, max_seq_tokens).fits

    options = []
    more = next((d for d in (2 ** k for k in range(1, 11)) if d > dp and fits(role, d)), None)
    if more is not None:
        options.append(f"{more * tp * pp * role.parallel.cp} GPUs for this role (data parallel {more})")
    gpus = dp * tp * pp * role.parallel.cp
    for t in (2, 4, 8):
        if t > tp and gpus % (t * pp * role.parallel.cp) == 0 and fits(role.model_copy(update={
                "parallel": role.parallel.model_copy(update={"tp": t})}), gpus // (t * pp * role.parallel.cp)):
            options.append(f"parallel.tp={t}")
            break
    for c in (2, 4, 8):  # a long sequence's activations split over cp GPUs (costs/context_parallel.py)
        if c > role.parallel.cp and gpus % (tp * pp * c) == 0 and fits(role.model_copy(update={
                "parallel": role.parallel.model_copy(update={"cp": c})}), gpus // (tp * pp * c)):
            options.append(f"parallel.cp={c}")
            break
    ep = _fitting_ep(role, model, ParallelLayout(tp=tp, pp=pp, dp=dp), fits, dp)
    if ep:
        options.append(f"parallel.ep={ep}")
    offloads = () if forward else (
        ({"optimizer_offload": True}, "train.optimizer_offload=true"),
        ({"optimizer_offload": True, "param_offload": True, "grad_offload": True},
         "train.param_offload, grad_offload and optimizer_offload=true"))
    for update, text in offloads:
        if fits(role.model_copy(update={"train": role.train.model_copy(update=update)}), dp):
            options.append(text)
            break
    if options:
        return f"; fits with {' or '.join(options)}"
    return "; no GPU count up to 1,024 or TP fits" if forward else "; no GPU count up to 1,024, TP or offload fits"


def _fitting_ep(role, model, layout: ParallelLayout, fits, dp: int) -> int:
    """The smallest larger expert-parallel degree that fits an MoE role (one its layout can shard the experts
    over, dividing the experts, as validation requires); 0 when the model is dense or none does."""
    if not model.num_experts:
        return 0
    for ep in (2 ** k for k in range(1, 11)):
        if ep <= role.parallel.ep or replace(layout, ep=ep).expert_problem() or model.num_experts % ep:
            continue
        if fits(role.model_copy(update={"parallel": role.parallel.model_copy(update={"ep": ep})}), dp):
            return ep
    return 0
