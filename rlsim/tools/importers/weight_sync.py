"""A framework's weight-sync knobs -> rlsim's `schedule.weight_sync` block (costs/weight_sync.py).

One function for every importer (verl, NeMo-RL, slime): each reads its own keys and passes the values here, so the
meaning of a transport name is written once. The table of what each framework calls its knobs is in
docs/import-calibration.md, "Weight sync".
"""

from __future__ import annotations

from typing import Any

# Transport names the frameworks use -> the sync path's fields. Unknown names raise ValueError (the importer turns
# that into a one-line problem at the key it read).
TRANSPORTS: dict[str, dict[str, Any]] = {
    # bucketed NCCL (or CUDA IPC when colocated): verl's checkpoint engine (naive, nccl, hccl), NeMo-RL's default
    # refit (IPC colocated, NCCL otherwise), slime's update_weights_from_distributed / _from_tensor with buckets
    "naive": {"path": "bucketed"},
    "nccl": {"path": "bucketed"},
    "hccl": {"path": "bucketed"},
    "ipc": {"path": "bucketed"},
    "cuda-ipc": {"path": "bucketed"},
    "nixl": {"path": "bucketed"},  # RDMA point-to-point, bucketed (NeMo-RL refit_cfg.nixl, verl's nixl backend)
    "mooncake": {"path": "bucketed"},  # verl: Mooncake TransferEngine point-to-point, bucketed
    "kimi_ckpt_engine": {"path": "bucketed"},  # verl: Kimi's checkpoint engine, bucketed collectives
    # verl's delta_sharded engine: changed (position, value) pairs over the NCCL engine's group
    "delta_sharded": {"delta": True},
    # a collective through host memory: the staged path
    "gloo": {"path": "staged"},
    # NeMo-RL's sparse refits send only the changed weights (through object storage or a ZeroMQ relay in host memory)
    "vllm_s3_sparse": {"path": "staged", "delta": True},
    "vllm_zmq_sparse": {"path": "staged", "delta": True},
    # one call per tensor
    "per-tensor-nccl": {"path": "per-tensor-nccl"},
    "per-tensor-rpc": {"path": "per-tensor-rpc"},
}


def weight_sync_from_knobs(*, transport: str | None = None, bucket_mb: float | None = None,
                           bucket_bytes: float | None = None, senders: str | None = None,
                           delta: bool | None = None, delta_fraction: float | None = None) -> dict[str, Any]:
    """The `schedule.weight_sync` entries a framework's knobs set (empty: rlsim's defaults, a bucketed sync from one
    sender in 2048 MB buckets).

    - transport: the framework's name for the path (TRANSPORTS; case-insensitive); None keeps the default path.
    - bucket_mb / bucket_bytes: the bucket size (verl update_weights_bucket_megabytes; slime
      --update-weight-buffer-size in bytes; NeMo-RL's update_weights_bucket_memory_ratio x the GPU's memory).
    - senders: "one" or "all" (every trainer GPU sends its share).
    - delta / delta_fraction: only the changed bytes move (fraction of the bytes, default 2%).
    Raises ValueError with one line per problem.
    """
    out: dict[str, Any] = {}
    problems = []
    if transport is not None:
        key = str(transport).strip().lower().replace("_ipc", "-ipc")
        if key not in TRANSPORTS:
            problems.append(f"unknown weight-sync transport {transport!r} (known: {', '.join(TRANSPORTS)})")
        else:
            out.update({k: v for k, v in TRANSPORTS[key].items() if not (k == "path" and v == "bucketed")})
    if bucket_mb is not None and bucket_bytes is not None:
        problems.append("give the bucket size once (bucket_mb or bucket_bytes)")
    size = bucket_mb if bucket_mb is not None else None if bucket_bytes is None else bucket_bytes / 1e6
    if size is not None:
        if not isinstance(size, int | float) or isinstance(size, bool) or not size > 0:
            problems.append(f"bucket size must be a positive number, got {size!r}")
        elif not str(out.get("path", "bucketed")).startswith("per-tensor"):
            out["bucket_mb"] = float(size)
    if senders is not None:
        if senders not in ("one", "all"):
            problems.append(f"senders must be one or all, got {senders!r}")
        elif senders != "one":
            out["senders"] = senders
    if delta:
        out["delta"] = True
    if delta_fraction is not None:
        out["delta"] = True
        out["delta_fraction"] = delta_fraction
    if problems:
        raise ValueError("; ".join(problems))
    return out
