"""Multi-turn agentic trajectories: generate, call a tool, append its observation, generate again.

A trajectory is sticky to one engine, so its prefix stays in that engine's prefix cache between turns
(re-prefilled only when evicted or after a weight update drops the KV). Under a schedule whose engines may
sleep (GPU lending, re-splitting), each turn asks the schedule's load balancer where it goes: its engine while
awake, else the least-loaded awake engine (which re-prefills the context), else it waits for one to wake.
Each turn is one request whose `prefix_tokens` is the context so far and whose `prompt_tokens` are the new
tokens (the prompt, then each observation). Tool calls run on CPU-side environment pools
(rlsim/sim/engine/tools.py): the GPUs do not wait on them unless the schedule makes them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache

import numpy as np

from rlsim.sim.engine.request import Request
from rlsim.sim.results.lifecycle import ABORTED, COMPLETED, FAILED, RUNNING, Reason, SampleState
from rlsim.sim.sampling import weighted_index_sampler


@dataclass(eq=False, slots=True)
class Trajectory:
    """Where one sample's multi-turn rollout stands and how it ended."""

    tid: int
    prompt_tokens: int
    turns_planned: int
    context: int = 0
    generated: int = 0
    observation_tokens: int = 0
    turns: int = 0
    tool_calls: int = 0
    state: SampleState = RUNNING  # then completed, failed or aborted (rlsim/sim/results/lifecycle.py)
    reason: str = ""  # failed: "<tool> <how> after <n> attempts"; aborted: why
    version_tokens: dict[int, int] = field(default_factory=dict)
    turn_spans: list[tuple[float, float]] = field(default_factory=list)  # generation turns in time
    engine: str | None = None
    cancelled: bool = False  # set by the schedule (redundant, expired): stop at the next await
    started_s: float = 0.0
    step: int = 0  # RL step (async: policy version) it started at: where a mean_schedule has the laws
    finished_s: float | None = None

    @property
    def sequence_tokens(self) -> int:
        """What the trainer sees: prompt, every generated token and every observation."""
        return self.prompt_tokens + self.generated + self.observation_tokens


def pick_tool(tool_mix: dict[str, float], rng: np.random.Generator) -> str:
    """A tool by weight: what `rng.choice(len(names), p=weights / weights.sum())` picks, from the same draw.

    numpy's choice draws one uniform and searches the normalised cumulative weights; doing that here
    with the table built once per mix skips choice's per-call validation (weights are checked at load).
    """
    return tool_picker(tool_mix)(rng)


def tool_picker(tool_mix: dict[str, float]) -> Callable[[np.random.Generator], str]:
    """`pick_tool(tool_mix, .)` with the mix read once: for a trajectory picking a tool after every turn."""
    names, index = _tool_table(tuple(sorted(tool_mix.items())))
    return lambda rng: names[index(rng)]


@cache
def _tool_table(mix: tuple[tuple[str, float], ...]) -> tuple[tuple[str, ...], Callable[[np.random.Generator], int]]:
    return tuple(n for n, _ in mix), weighted_index_sampler([w for _, w in mix])


def run_trajectory(env, engine, tools, agent, traj: Trajectory, on_request=None, balancer=None):
    """SimPy process body (use with `yield from`): the turns of one trajectory on one engine.

    With a `balancer` (schedules/least_loaded.py) the trajectory is pinned to `engine` there, and every turn
    goes where `balancer.sticky` says: no turn is ever submitted to an engine that sleeps, and a turn taken off
    an engine put to sleep goes on elsewhere with its partial output."""
    rng = env.rng
    traj.engine = engine.name
    traj.started_s = env.now
    if tools is not None and tools.cold_start_pools:  # environment start-up (sandbox boot, game reset) first
        yield from tools.cold_start(("traj", traj.tid))
    new_tokens = traj.prompt_tokens
    max_context, tokens_per_turn, last_turn = agent.max_context_tokens, agent.tokens_per_turn, traj.turns_planned - 1
    pick = tool_picker(agent.tool_mix)  # validation refuses an agent without tools
    turn_tokens, submit, key = tokens_per_turn.sampler(traj.step), engine.submit, ("traj", traj.tid)
    next_rid = env.next_request_id
    awake = None if balancer is None else balancer.is_awake
    for turn in range(traj.turns_planned):
        if traj.cancelled:
            break
        if awake is not None and not awake(engine):  # its engine sleeps: the pin moves to an awake one
            engine = yield from _awake_engine(balancer, engine, traj)
            submit = engine.submit
            if traj.cancelled:
                break
        room = max_context - traj.context - new_tokens
        if room <= 0:
            break  # the observation filled the context: the trajectory ends here
        want = turn_tokens(rng)
        want = room if room < want else want  # max(1, min(want, room)), without the builtins' argument parsing
        req = Request(next_rid(), new_tokens, want if want > 1 else 1, traj.context, key)
        start = env.now
        submit(req)
        if on_request is not None:
            on_request(req, traj)
        yield req.done
        req.done = None  # the event holds the request as its value: leave no cycle for the collector to find
        if req.aborted:
            if awake is not None and not traj.cancelled and not awake(engine):
                req, engine = yield from _moved_turn(env, balancer, engine, traj, req, new_tokens, want, on_request)
                submit = engine.submit
            if req is None or req.aborted:
                traj.state, traj.reason = ABORTED, Reason.MID_GENERATION
                break
        traj.turn_spans.append((start, env.now))
        traj.turns += 1
        traj.context += new_tokens + req.generated
        traj.generated += req.generated
        if turn > 0:
            traj.observation_tokens += new_tokens
        for v, n in req.version_tokens.items():
            traj.version_tokens[v] = traj.version_tokens.get(v, 0) + n
        if turn == last_turn or traj.context >= max_context:
            break
        tool = pick(rng)
        traj.tool_calls += 1
        result = yield from tools.call(tool)
        if traj.cancelled:
            break
        if not result.ok:
            traj.state, traj.reason = FAILED, f"{tool} {result.outcome} after {result.attempts} attempts"
            break
        new_tokens = result.observation_tokens
    if traj.state is RUNNING:
        traj.state = ABORTED if traj.cancelled else COMPLETED
    traj.finished_s = env.now
    return traj


def _awake_engine(balancer, engine, traj: Trajectory):
    """Where a trajectory pinned to the sleeping `engine` goes on: the least-loaded awake engine (the pin moves
    there), once one is awake."""
    where = balancer.sticky(engine)
    while where is None:
        yield balancer.woken()
        where = balancer.sticky(engine)
    traj.engine = where.name
    return where


def _moved_turn(env, balancer, engine, traj: Trajectory, req: Request, new_tokens: int, want: int, on_request):
    """A turn taken off an engine put to sleep (the trainer took its GPUs back) goes on where the balancer places
    it, with its partial output, as a moved sample does: its context, the turn's new tokens and what it generated
    are prefilled there (unless cached), and it decodes the rest. Returns the request that ended the turn and its
    engine; the request is None if the trajectory was cancelled meanwhile."""
    context, done = traj.context, 0
    while req.aborted and not traj.cancelled and not balancer.is_awake(engine):
        done += req.generated
        traj.context += req.generated  # the partial output is the trajectory's, and in its context
        traj.generated += req.generated
        for v, n in req.version_tokens.items():
            traj.version_tokens[v] = traj.version_tokens.get(v, 0) + n
        engine = yield from _awake_engine(balancer, engine, traj)
        if traj.cancelled:
            return None, engine
        rest = want - done
        req = Request(env.next_request_id(), new_tokens + done, rest if rest > 1 else 1, context, ("traj", traj.tid))
        engine.submit(req)
        if on_request is not None:
            on_request(req, traj)
        yield req.done
        req.done = None
    return req, engine
