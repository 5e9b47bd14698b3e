"""Context parallelism on the long-response scenario: the actor's update and old-log-prob pass, in seconds per step,
with no CP, static ring and Ulysses CP, and dynamic CP (docs/long-context.md, "Context parallelism").

    PYTHONPATH=. python benchmarks/context_parallel_table.py
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "sync" / "long-context-dynamic-cp.yaml"
A = "roles.actor.parallel"
VARIANTS = {
    "cp 1": [f"{A}.cp=1", f"{A}.cp_dynamic=false"],
    "ring cp 2": [f"{A}.cp=2", f"{A}.cp_dynamic=false"],
    "ulysses cp 2": [f"{A}.cp=2", f"{A}.cp_dynamic=false", f"{A}.cp_kind=ulysses"],
    "ring cp 4": [f"{A}.cp=4", f"{A}.cp_dynamic=false"],
    "ulysses cp 4": [f"{A}.cp=4", f"{A}.cp_dynamic=false", f"{A}.cp_kind=ulysses"],
    "dynamic ring over the 16 GPUs (the scenario)": [],
}


def main() -> None:
    from rlsim.sim.scenario.loader import load_scenario
    from rlsim.sim.simulate import simulate

    print("| actor layout | update_actor s | old_log_prob s |")
    print("|---|---:|---:|")
    for name, overrides in VARIANTS.items():
        steps = simulate(load_scenario(SCENARIO, overrides)).steps
        print(f"| {name} | {steps['timing_s/update_actor'].mean():.2f} | {steps['timing_s/old_log_prob'].mean():.2f} |")


if __name__ == "__main__":
    main()
