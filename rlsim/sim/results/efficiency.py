"""Busy is not useful: how much of a pool's busy time decodes a thin tail, and what fraction of peak it achieves.

- tail_share_by_pool: share of a pool's busy GPU-seconds (measured window) in which one of its engines
  generates with fewer running sequences than a quarter of its batch capacity (`max_num_seqs`): the
  long tail of a batch, where GPUs count as busy but decode few sequences. 0 for pools without engines.
- mfu_by_phase["<pool>/<phase>"]: achieved FLOP/s over peak (the profile's dense BF16) of that pool's GPUs
  while they run the phase. train and forward: the FLOPs of the cost model's own counts (6N per token
  plus causal attention, `training_flops`; a forward pass a third of it) for the measured steps' trained
  tokens. generate: decode iterations estimated from each engine's batch between batch changes
  (interval length / the simulator's decode step at that batch and context, `decode_coefficients`),
  2N per decoded token plus attention over the context; prefill is left out (decode dominates long
  responses), so generation MFU is a slight underestimate.
- mbu_by_phase["<pool>/generate"]: achieved HBM bytes/s over peak while decoding: per iteration the
  weights streamed once per engine plus the KV cache of the running sequences.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from rlsim.sim.costs.generation import decode_coefficients
from rlsim.sim.costs.training import forward_flops, training_flops
from rlsim.sim.results.lifecycle import FATE, TRAINED
from rlsim.sim.scenario.schema import Scenario

TAIL_FRACTION = 0.25  # "thin": fewer running sequences than this share of the engine's max_num_seqs
_TRAIN_PHASES = {"train": training_flops, "forward": forward_flops}


def efficiency(scn: Scenario, steps: pd.DataFrame, timeline: pd.DataFrame, engine_stats: pd.DataFrame,
               samples: pd.DataFrame, t0: float, t1: float) -> dict:
    """{tail_share_by_pool, mfu_by_phase, mbu_by_phase} for the summary (see the module docstring)."""
    busy_by_pool = _clipped(timeline, t0, t1).groupby("pool")["gpu_seconds"].sum()
    tail = dict.fromkeys(scn.cluster.pools, 0.0)
    mfu: dict[str, float] = {}
    mbu: dict[str, float] = {}
    gen = _generation(scn, timeline, engine_stats, t0, t1)
    for pool, (tail_s, gpu_s, flops, bytes_) in gen.items():
        busy = float(busy_by_pool.get(pool, 0.0))
        tail[pool] = tail_s / busy if busy > 0 else 0.0
        if gpu_s > 0:
            hw = scn.cluster.pools[pool].profile()
            mfu[f"{pool}/generate"] = float(flops) / (gpu_s * hw.peak_flops)
            mbu[f"{pool}/generate"] = float(bytes_) / (gpu_s * hw.hbm_bytes_per_s)
    mfu.update(_training(scn, steps, timeline, samples))
    return {"tail_share_by_pool": tail, "mfu_by_phase": dict(sorted(mfu.items())),
            "mbu_by_phase": dict(sorted(mbu.items()))}


def _clipped(timeline: pd.DataFrame, t0: float, t1: float) -> pd.DataFrame:
    start, end = timeline["start_s"].clip(t0, t1), timeline["end_s"].clip(t0, t1)
    return timeline.assign(start_s=start, end_s=end, gpu_seconds=(end - start) * timeline["gpus"])


def _overlap(a0: np.ndarray, a1: np.ndarray, b0: np.ndarray, b1: np.ndarray) -> np.ndarray:
    """Per interval of a, its overlap with the union of the (disjoint, sorted) intervals b."""
    out = np.zeros(len(a0))
    for s, e in zip(b0, b1, strict=True):
        out += np.clip(np.minimum(a1, e) - np.maximum(a0, s), 0.0, None)
    return out


def _generation(scn: Scenario, timeline: pd.DataFrame, stats: pd.DataFrame, t0: float, t1: float) -> dict:
    """Per pool: (tail GPU-s, decode GPU-s, FLOPs, HBM bytes) of its engines inside generate phases."""
    out: dict[str, list[float]] = {}
    if stats.empty:
        return out
    gen = timeline[timeline["phase"].isin(["generate", "reward"])]
    for engine, rows in stats.groupby("engine", sort=False):
        role = str(engine).rsplit("-", 1)[0]
        spec = scn.roles.get(role)
        if spec is None or spec.engine is None:
            continue
        mine = gen[gen["gpu_group"] == engine].sort_values("start_s")
        if mine.empty:
            continue
        pool = str(rows["pool"].iloc[0])
        gpus = int(mine["gpus"].iloc[0])
        times = rows["time_s"].to_numpy()
        a0, a1 = np.clip(times, t0, t1), np.clip(np.append(times[1:], t1), t0, t1)
        inside = _overlap(a0, a1, mine["start_s"].to_numpy(), mine["end_s"].to_numpy())
        running, kv = rows["running"].to_numpy(), rows["kv_tokens"].to_numpy().astype(float)
        thin = running < TAIL_FRACTION * spec.engine.max_num_seqs
        flops, bytes_ = _decode_work(scn, role, inside, running, kv)
        copies = gpus // scn.layout(role).engine_gpus  # aggregate mode: one simulated engine stands for several
        if copies > 1:
            flops, bytes_ = flops * copies, bytes_ * copies
        acc = out.setdefault(pool, [0.0, 0.0, 0.0, 0.0])
        acc[0] += float(inside[thin].sum()) * gpus
        acc[1] += float(inside.sum()) * gpus
        acc[2] += flops
        acc[3] += bytes_
    return {p: tuple(v) for p, v in out.items()}


def _decode_work(scn: Scenario, role: str, seconds: np.ndarray, running: np.ndarray, kv: np.ndarray):
    """FLOPs and HBM bytes of the decode iterations that fit in `seconds` at each batch and context."""
    spec = scn.roles[role]
    model = spec.engine.shape(scn.models[spec.model])  # the bytes the engines read (quantised rollout)
    hw = scn.cluster.pools[spec.pool].profile()
    layout = scn.layout(role)
    tp = layout.engine_gpus
    overheads = spec.engine.overheads(hw)
    q_dim = model.heads * model.d_head
    use = (seconds > 0) & (running > 0)
    s, n, ctx = seconds[use], running[use].astype(int), kv[use]
    if not len(s):
        return 0.0, 0.0
    batches = np.unique(n)  # one set of step-time coefficients per batch size (t = a + b * context)
    ep, gpn = layout.ep, scn.cluster.pools[spec.pool].gpus_per_node
    coef = {int(b): decode_coefficients(model, hw, tp, int(b), overheads=overheads, ep=ep, gpus_per_node=gpn)
            for b in batches}
    a = np.array([coef[int(b)].intercept + coef[int(b)].fixed for b in n])
    slope = np.array([coef[int(b)].slope for b in n])
    iters = s / (a + slope * ctx)
    flops = float((iters * (2.0 * model.active_params * n + 4.0 * model.layers * q_dim * ctx)).sum())
    bytes_ = float((iters * (model.weight_bytes_total + ctx * model.kv_bytes_per_token)).sum())
    return flops, bytes_


def _training(scn: Scenario, steps: pd.DataFrame, timeline: pd.DataFrame, samples: pd.DataFrame) -> dict:
    """MFU of train and forward phases per pool over the measured steps (the cost model's FLOP counts)."""
    measured = steps.loc[~steps["warmup"], "step"].astype(int).tolist()
    if not measured or "step" not in timeline:
        return {}
    trained = samples[(samples["fate"] == FATE[TRAINED]) & samples["step"].isin(measured)]
    seq = (trained["prompt_tokens"] + trained["response_tokens"]).astype(float)
    sq_by_step = (seq ** 2).groupby(trained["step"]).sum()
    tokens_by_step = steps.set_index("step")["tokens"]
    rows = timeline[timeline["phase"].isin(list(_TRAIN_PHASES)) & timeline["step"].isin(measured)]
    flops: dict[str, float] = {}
    gpu_s: dict[str, float] = {}
    for (pool, phase, role, step), grp in rows.groupby(["pool", "phase", "role", "step"]):
        spec = scn.roles.get(role)
        if spec is None:
            continue
        key = f"{pool}/{phase}"
        passes = scn.algorithm.epochs if phase == "train" else 1
        work = _TRAIN_PHASES[phase](scn.models[spec.model], float(tokens_by_step.get(step, 0.0)),
                                    float(sq_by_step.get(step, 0.0)))
        flops[key] = flops.get(key, 0.0) + passes * work
        gpu_s[key] = gpu_s.get(key, 0.0) + float(((grp["end_s"] - grp["start_s"]) * grp["gpus"]).sum())
    return {k: flops[k] / (gpu_s[k] * scn.cluster.pools[k.split("/")[0]].profile().peak_flops)
            for k in flops if gpu_s[k] > 0}
