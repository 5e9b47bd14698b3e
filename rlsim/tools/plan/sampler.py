"""Large spaces: Optuna's NSGA-II (seeded) picks which candidates rung 0 simulates.

Each knob that varies is a categorical parameter; a combination the space does not contain (a
disaggregated split on a colocated layout) maps to the candidate that matches the most knobs (ties:
the first). Objectives: throughput (max) and $ per million tokens (min). Trials are asked and told
in batches of fixed size, so the sampler sees the same history on every backend.
"""

from __future__ import annotations

from collections.abc import Callable

from rlsim.tools.plan.candidates import Candidate
from rlsim.tools.plan.space import SearchOptions


def _nearest(cands: list[Candidate], dims: list[str], key: tuple[str, ...]) -> Candidate:
    return max(cands, key=lambda c: (sum(str(c.knobs[d]) == v for d, v in zip(dims, key, strict=True)), -c.index))


def nsga2_rung_zero(cands: list[Candidate], runner, opts: SearchOptions, seed: int, score, progress,
                    prune: Callable[[list[Candidate], list], list[Candidate]]):
    """Rung 0 of a large space: up to `opts.trials` distinct candidates, chosen by NSGA-II."""
    import optuna
    from optuna.trial import TrialState

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    dims = [d for d in cands[0].knobs if len({str(c.knobs[d]) for c in cands}) > 1]
    values = {d: sorted({str(c.knobs[d]) for c in cands}) for d in dims}
    sampler = optuna.samplers.NSGAIISampler(seed=seed, population_size=max(4, opts.batch))
    study = optuna.create_study(directions=["maximize", "minimize"], sampler=sampler)
    done: dict[int, object] = {}
    evals: list = []
    progress.add(opts.trials)
    for _ in range(4 * opts.trials // opts.batch + 1):  # duplicates are told again, not re-run
        if len(done) >= opts.trials:
            break
        trials = [study.ask() for _ in range(opts.batch)]
        picks = [_nearest(cands, dims, tuple(t.suggest_categorical(d, values[d]) for d in dims)) for t in trials]
        fresh = list({c.index: c for c in picks if c.index not in done}.values())[: opts.trials - len(done)]
        kept = prune(fresh, evals)
        for c in fresh:
            done.setdefault(c.index, None)
        new = score(runner.run(kept, opts.rungs[0], 0)) if kept else []
        evals += new
        for e in new:
            done[e.candidate] = e
        progress.add(len(kept) - len(fresh))
        for t, c in zip(trials, picks, strict=True):
            e = done.get(c.index)
            if e is None or e.summary is None or "cost_per_million_tokens_usd" not in e.summary:
                study.tell(t, state=TrialState.FAIL)
            else:
                study.tell(t, [e.summary["throughput_tokens_per_s"], e.summary["cost_per_million_tokens_usd"]])
    progress.add(len(done) - opts.trials)
    return evals, "optuna NSGA-II"
