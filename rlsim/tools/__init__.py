"""The tools around the simulator: cli, report, sweep, plan, sensitivity, calibration, importers, reproduce."""
