"""Checks that a run can finish at all, and the agent's file-backed distributions.

Some plausible scenarios can never train a batch: an agent whose context is no longer than its
prompt never generates (its trajectories end at once and are relaunched forever); dynamic
sampling with `filter_prob: 1` drops every group; a tool that fails every call, under a schedule
that replaces failed trajectories instead of training on them, fails every trajectory. Each is
refused here, at validation, with the knob to change, instead of hanging the simulation.
"""

from __future__ import annotations

from rlsim.sim.csv_inputs import CsvInputError
from rlsim.sim.limits import MAX_TURNS
from rlsim.sim.scenario.errors import Problem
from rlsim.sim.scenario.schema import LengthDistribution, Scenario, ToolSpec

MIN_TRAJECTORY_SUCCESS = 1e-6  # below one success in a million launches a run is practically endless


def check_agent(scn: Scenario, prompt_max: int | None, max_length) -> list[Problem]:
    """Tool and agent CSVs, the 128-turn limit, and the agent's context against the longest prompt.

    `max_length(at, dist, problems)` is checks._check_length: the largest value of a distribution,
    reading (and checking) its CSV once.
    """
    problems: list[Problem] = []
    for name, tool in scn.environments.tools.items():
        at = f"environments.tools.{name}"
        try:
            tool.latency.minimum()  # an empirical law reads (and so checks) its file here
        except CsvInputError as exc:
            problems.append(Problem(f"{at}.latency.{exc.field}", exc.message))
        max_length(f"{at}.observation_tokens", tool.observation_tokens, problems)
    agent = scn.workload.agent
    if agent is None:
        return problems
    turns = max_length("workload.agent.turns", agent.turns, problems)
    if turns is not None and turns > MAX_TURNS:
        problems.append(Problem("workload.agent.turns", f"up to {turns} turns per trajectory; at most {MAX_TURNS} "
                                "are supported"))
    max_length("workload.agent.tokens_per_turn", agent.tokens_per_turn, problems)
    if prompt_max is not None and agent.max_context_tokens <= prompt_max:
        problems.append(Problem(
            "workload.agent.max_context_tokens",
            f"must be > the longest prompt ({prompt_max} tokens), got {agent.max_context_tokens}: a trajectory "
            "whose prompt fills its context never generates, and the run could never finish",
        ))
    return problems


def check_progress(scn: Scenario) -> list[Problem]:
    """Configurations under which no batch can ever be trained (the simulation would never end)."""
    problems: list[Problem] = []
    schedule = scn.schedule
    if schedule.kind == "roll" and schedule.dynamic_sampling and schedule.filter_prob >= 1:
        problems.append(Problem(
            "schedule.filter_prob",
            f"must be < 1 with dynamic_sampling, got {schedule.filter_prob:g}: every finished group would be "
            "dropped as all-equal-reward, so no batch could ever be trained",
        ))
    agent = scn.workload.agent
    # Only where failed trajectories are dropped and relaunched, never trained, can failures starve a run.
    if agent is None or not schedule.replaces_failed or _min_turns(agent.turns) < 2:
        return problems
    tools = scn.environments.tools
    mix = {name: w for name, w in agent.tool_mix.items() if w > 0 and name in tools}
    if not mix:
        return problems  # reported by the environment checks
    calls = _min_turns(agent.turns) - 1
    why = {name: _never_succeeds(tools[name]) for name in mix}
    if all(why.values()):
        for name in mix:
            key, reason = why[name]
            problems.append(Problem(
                f"environments.tools.{name}.{key}",
                f"{reason}, and every trajectory calls a tool (at least 2 turns): {schedule.kind} drops failed "
                "trajectories instead of training on them, so no batch could ever be trained",
            ))
        return problems
    total = sum(mix.values())
    p_call = sum(w / total * (1.0 - _attempt_failure(tools[n]) ** tools[n].max_attempts) for n, w in mix.items())
    p_trajectory = p_call**calls
    if p_trajectory < MIN_TRAJECTORY_SUCCESS:
        problems.append(Problem(
            "workload.agent.turns",
            f"every trajectory makes at least {calls} tool calls, each succeeding with probability {p_call:.3g}: "
            f"only {p_trajectory:.1e} of trajectories can finish, and {schedule.kind} trains only those, so the "
            "run would relaunch trajectories practically forever (raise the tools' success odds or lower the turns)",
        ))
    return problems


def _never_succeeds(tool: ToolSpec) -> tuple[str, str] | None:
    """(key to change, why) when no attempt of the tool can ever succeed; None when one can."""
    if tool.failure_prob >= 1:
        return "failure_prob", f"failure_prob {tool.failure_prob:g} fails every call"
    fastest = _min_latency(tool)
    if tool.timeout_s is not None and fastest is not None and fastest > tool.timeout_s:
        return "timeout_s", (f"timeout_s {tool.timeout_s:g} cuts off every attempt (the fastest takes "
                             f"{fastest:g} s)")
    return None


def _attempt_failure(tool: ToolSpec) -> float:
    """Probability that one attempt fails: it times out, or fails outright (rlsim/sim/costs/environment.py)."""
    timeout = 0.0 if tool.timeout_s is None else _p_slower(tool, tool.timeout_s)
    return timeout + (1.0 - timeout) * tool.failure_prob


def _p_slower(tool: ToolSpec, t: float) -> float:
    """P(latency > t) for the tool's latency law (0 when its file is unreadable: reported elsewhere)."""
    try:
        return tool.latency.p_above(t)
    except CsvInputError:
        return 0.0


def _min_latency(tool: ToolSpec) -> float | None:
    """The shortest latency an attempt can draw (None: unreadable file, reported elsewhere)."""
    try:
        return tool.latency.minimum()
    except CsvInputError:
        return None


def _min_turns(dist: LengthDistribution) -> int:
    """The fewest turns a trajectory can plan (1 when unknown: nothing is refused on a guess)."""
    try:
        return dist.minimum()
    except CsvInputError:
        return 1
