"""`rlsim profiles`, `rlsim presets`, `rlsim scenarios`: what ships with rlsim, one line each."""

from __future__ import annotations

from rlsim.tools.cli.common import console


def profiles() -> None:
    """List the shipped hardware profiles."""
    from rich.table import Table

    from rlsim.sim.api import available_profiles, load_profile

    table = Table(title="hardware profiles")
    table.add_column("name", no_wrap=True)
    for col in ("BF16\nTFLOP/s", "HBM\nGB", "HBM\nTB/s", "NVLink\nGB/s", "NIC\nGb/s", "$/GPU-h"):
        table.add_column(col, justify="right", no_wrap=True)
    for name in available_profiles():
        p = load_profile(name)
        price = "-" if p.price_usd_per_gpu_hour is None else f"{p.price_usd_per_gpu_hour:.2f}"
        table.add_row(
            name, f"{p.bf16_tflops:g}", f"{p.hbm_gb:g}", f"{p.hbm_tb_per_s:g}", f"{p.nvlink_gb_per_s:g}",
            f"{p.nic_gbit_per_s:g}", price,
        )
    console.print(table)


def presets() -> None:
    """List the model presets with their parameter counts."""
    from rich.table import Table

    from rlsim.sim.api import ModelShape, preset_names, resolve_preset

    table = Table(title="model presets")
    table.add_column("name", no_wrap=True)
    for col in ("params\n(B)", "active\n(B)", "layers", "hidden", "KV\nheads", "KV\nKB/tok"):
        table.add_column(col, justify="right", no_wrap=True)
    for name in preset_names():
        m = ModelShape(**resolve_preset(name))
        table.add_row(
            name, f"{m.params / 1e9:.2f}", f"{m.active_params / 1e9:.2f}", str(m.layers), str(m.hidden),
            str(m.kv_heads), f"{m.kv_bytes_per_token / 1024:.0f}",
        )
    console.print(table)


def engines() -> None:
    """List the engine kinds (engine.kind): host work per step and per sequence, overlap, CUDA-graph sizes."""
    from rich.table import Table

    from rlsim.sim.costs import ENGINE_KINDS

    table = Table(title="engine kinds (roles.rollout.engine.kind)")
    table.add_column("kind", no_wrap=True)
    for col in ("host/step\nus", "host/seq\nus", "host\noverlapped", "bubble\nus", "graphs\nup to"):
        table.add_column(col, justify="right", no_wrap=True)
    for k in ENGINE_KINDS.values():
        step = k.host_step_us or (k.step_overhead_ms or 0.0) * 1e3
        table.add_row(k.name, f"{step:.4g}", f"{k.host_per_seq_us:.3g}", "yes" if k.host_overlap else "no",
                      f"{k.host_bubble_us:g}", "-" if k.graph_max_batch is None else str(k.graph_max_batch))
    console.print(table)
    console.print("Sources: docs/sources.md (Engine host work per step); the model: docs/operators.md.")


def scenarios() -> None:
    """List the shipped scenarios, one line each: the name to pass to `rlsim run` and what it models."""
    from rich import box
    from rich.table import Table

    from rlsim.sim.api import shipped_dir
    from rlsim.tools.cli.common import shipped_scenarios

    root = shipped_dir("scenarios")
    rows = [(str(path.relative_to(root).with_suffix("")), *_describe(path)) for path in shipped_scenarios()]
    table = Table(box=box.SIMPLE_HEAD, title="shipped scenarios (rlsim run NAME)", pad_edge=False, expand=False)
    # Name, schedule and GPUs must read whole (the name is what `rlsim run` takes); the model is shortened.
    table.add_column("name", no_wrap=True, min_width=max((len(r[0]) for r in rows), default=4))
    table.add_column("schedule", no_wrap=True, min_width=max((len(r[1]) for r in rows), default=8))
    table.add_column("GPUs", justify="right", no_wrap=True, min_width=max((len(r[2]) for r in rows), default=4))
    table.add_column("policy model", no_wrap=True, overflow="ellipsis", min_width=10)
    for row in rows:
        table.add_row(*row)
    console.print(table)


def _describe(path) -> tuple[str, str, str]:
    """(schedule kind, GPUs x hardware, first model's preset) read from the YAML without validating it."""
    import yaml

    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return ("?", "?", "?")
    pools = ((data.get("cluster") or {}).get("pools") or {}).values()
    gpus = sum(int(p.get("gpus") or p.get("nodes", 1) * p.get("gpus_per_node", 8)) for p in pools)
    hardware = sorted({str(p.get("hardware", "?")) for p in pools})
    models = list((data.get("models") or {}).values())
    preset = str(models[0].get("preset", "custom")) if models and isinstance(models[0], dict) else "?"
    kind = str((data.get("schedule") or {}).get("kind", "?"))
    return kind, f"{gpus} {'+'.join(hardware)}", preset
