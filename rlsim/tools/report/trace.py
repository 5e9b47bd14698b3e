"""Chrome / Perfetto trace export (`trace.json`), for ui.perfetto.dev and chrome://tracing.

Layout: one process per pool, one thread per GPU group (engine or trainer), one complete slice
(ph "X") per busy interval named after its phase, counter tracks (ph "C") for each engine's running
batch and KV-cache use, and an "RL steps" process with one slice per step. Timestamps are in
microseconds. Viewers require slices on one thread to nest; intervals of one group that overlap
(a schedule may record concurrent work on a group) go to extra "overlap" threads so they never do.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

US = 1e6  # trace timestamps are microseconds
STEPS_PROCESS = "RL steps"


def _us(seconds: float) -> float:
    """Seconds to microseconds, rounded to 1 ns so equal boundaries stay equal after conversion."""
    return round(float(seconds) * US, 3)


def _lanes(starts: np.ndarray, ends: np.ndarray) -> list[int]:
    """Greedy interval partitioning (input sorted by start): lane index per interval, no overlap per lane."""
    lane_end: list[float] = []
    out = []
    for s, e in zip(starts, ends, strict=True):
        for i, end in enumerate(lane_end):
            if end <= s:
                lane_end[i] = e
                out.append(i)
                break
        else:
            lane_end.append(e)
            out.append(len(lane_end) - 1)
    return out


def _tokens_by_slice(rows: pd.DataFrame, samples: pd.DataFrame | None) -> dict[int, tuple[int, int]]:
    """For generate slices: (samples finished, response tokens of those samples) within (start, end]."""
    out: dict[int, tuple[int, int]] = {}
    if samples is None or samples.empty or "engine" not in samples:
        return out
    done = dict(tuple(samples.dropna(subset=["finished_s"]).groupby("engine")))
    for engine, gen in rows[rows["phase"] == "generate"].groupby("gpu_group"):
        if engine not in done:
            continue
        mine = done[engine].sort_values("finished_s")
        t = mine["finished_s"].to_numpy()
        cum = np.concatenate([[0], np.cumsum(mine["response_tokens"].to_numpy())])
        lo = np.searchsorted(t, gen["start_s"].to_numpy(), side="right")
        hi = np.searchsorted(t, gen["end_s"].to_numpy(), side="right")
        for idx, a, b in zip(gen.index, lo, hi, strict=True):
            out[idx] = (int(b - a), int(cum[b] - cum[a]))
    return out


def _decimate(stats: pd.DataFrame, max_events: int) -> pd.DataFrame:
    """Keep every k-th counter sample per engine (plus its last) so huge runs stay loadable."""
    if len(stats) <= max_events:
        return stats
    k = int(np.ceil(len(stats) / max_events))
    parts = []
    for _, g in stats.groupby("engine", sort=False):
        keep = np.zeros(len(g), dtype=bool)
        keep[::k] = True
        keep[-1] = True
        parts.append(g[keep])
    return pd.concat(parts)


# size: one pass writing the trace's event kinds in order (metadata, slices, counters, flows); each block is short
def chrome_trace(
    timeline: pd.DataFrame,
    steps: pd.DataFrame | None = None,
    engine_stats: pd.DataFrame | None = None,
    samples: pd.DataFrame | None = None,
    max_counter_events: int = 200_000,
) -> dict:
    """Build the trace from result tables (the same tables `rlsim plot` reads back from a run folder)."""
    events: list[dict] = []
    pools = [str(p) for p in pd.unique(timeline["pool"])] if not timeline.empty else []
    if engine_stats is not None and not engine_stats.empty:
        pools += [str(p) for p in pd.unique(engine_stats["pool"]) if p not in pools]
    pid = {p: i + 1 for i, p in enumerate(pools)}
    tids: dict[tuple[str, str], int] = {}

    def thread(pool: str, name: str) -> int:
        key = (pool, name)
        if key not in tids:
            tids[key] = len(tids) + 1
            tid = tids[key]
            events.append(
                {"ph": "M", "name": "thread_name", "pid": pid[pool], "tid": tid, "args": {"name": name}}
            )
            events.append(
                {
                    "ph": "M",
                    "name": "thread_sort_index",
                    "pid": pid[pool],
                    "tid": tid,
                    "args": {"sort_index": tid},
                }
            )
        return tids[key]

    for p, i in pid.items():
        events.append({"ph": "M", "name": "process_name", "pid": i, "tid": 0, "args": {"name": f"pool {p}"}})
        events.append(
            {"ph": "M", "name": "process_sort_index", "pid": i, "tid": 0, "args": {"sort_index": i}}
        )

    if not timeline.empty:
        ordered = timeline.sort_values(["pool", "gpu_group", "start_s", "end_s"], kind="stable")
        tokens = _tokens_by_slice(ordered, samples)
        for (pool, group), rows in ordered.groupby(["pool", "gpu_group"], sort=False):
            lanes = _lanes(rows["start_s"].to_numpy(), rows["end_s"].to_numpy())
            cols = (
                rows.index,
                rows["phase"],
                rows["role"],
                rows["step"],
                rows["policy_version"],
                rows["gpus"],
                rows["start_s"],
                rows["end_s"],
            )
            for lane_no, idx, phase, role, step, version, gpus, start, end in zip(
                lanes, *(c.tolist() for c in cols), strict=True
            ):
                name = group if lane_no == 0 else f"{group} (overlap {lane_no})"
                ts = _us(start)
                args = {"role": role, "step": int(step), "policy_version": int(version), "gpus": int(gpus)}
                if idx in tokens:
                    args["samples_finished"], args["response_tokens_finished"] = tokens[idx]
                events.append(
                    {
                        "ph": "X",
                        "name": str(phase),
                        "cat": str(phase),
                        "pid": pid[pool],
                        "tid": thread(pool, name),
                        "ts": ts,
                        "dur": round(_us(end) - ts, 3),
                        "args": args,
                    }
                )

    if engine_stats is not None and not engine_stats.empty:
        stats = _decimate(
            engine_stats.sort_values(["engine", "time_s"], kind="stable"), max_counter_events // 2
        )
        cap = stats["kv_capacity_tokens"].to_numpy(dtype=float)
        kv_pct = np.round(
            100.0
            * np.divide(stats["kv_tokens"].to_numpy(dtype=float), cap, out=np.zeros_like(cap), where=cap > 0),
            3,
        )
        ts_us = np.round(stats["time_s"].to_numpy(dtype=float) * US, 3)
        for engine, pool, ts, running, kv in zip(
            stats["engine"].tolist(),
            stats["pool"].tolist(),
            ts_us.tolist(),
            stats["running"].tolist(),
            kv_pct.tolist(),
            strict=True,
        ):
            p = pid[pool]
            events.append(
                {
                    "ph": "C",
                    "name": f"{engine} batch",
                    "pid": p,
                    "tid": 0,
                    "ts": ts,
                    "args": {"running": int(running)},
                }
            )
            events.append(
                {
                    "ph": "C",
                    "name": f"{engine} KV %",
                    "pid": p,
                    "tid": 0,
                    "ts": ts,
                    "args": {"kv_used_pct": kv},
                }
            )

    if steps is not None and not steps.empty:
        spid = len(pid) + 1
        events.append(
            {"ph": "M", "name": "process_name", "pid": spid, "tid": 0, "args": {"name": STEPS_PROCESS}}
        )
        events.append(
            {"ph": "M", "name": "process_sort_index", "pid": spid, "tid": 0, "args": {"sort_index": 0}}
        )
        ordered = steps.sort_values(["start_s", "step"], kind="stable")
        lanes = _lanes(ordered["start_s"].to_numpy(), ordered["end_s"].to_numpy())
        named: set[int] = set()
        for lane_no, r in zip(lanes, ordered.to_dict("records"), strict=True):
            tid = lane_no + 1
            if tid not in named:
                named.add(tid)
                events.append(
                    {
                        "ph": "M",
                        "name": "thread_name",
                        "pid": spid,
                        "tid": tid,
                        "args": {"name": "step" if lane_no == 0 else f"step (overlap {lane_no})"},
                    }
                )
            ts = _us(r["start_s"])
            args = {k: _plain(v) for k, v in r.items() if k not in ("start_s", "end_s")}
            label = f"step {int(r['step'])}" + (" (warm-up)" if r.get("warmup") else "")
            events.append(
                {
                    "ph": "X",
                    "name": label,
                    "cat": "step",
                    "pid": spid,
                    "tid": tid,
                    "ts": ts,
                    "dur": round(_us(r["end_s"]) - ts, 3),
                    "args": args,
                }
            )

    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"generator": "rlsim"}}


def _plain(value):
    """JSON-safe scalar (numpy types to Python, NaN to None)."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not np.isfinite(value):
        return None
    return value


def to_chrome_trace(result) -> dict:
    """The trace of a `Result` (see module docstring for the layout)."""
    return chrome_trace(result.timeline, result.steps, result.engine_stats, getattr(result, "samples", None))


def write_trace(trace: dict, path: Path) -> Path:
    """Compact JSON: traces get large and viewers do not care about indentation."""
    path = Path(path)
    path.write_text(json.dumps(trace, separators=(",", ":"), allow_nan=False))
    return path
