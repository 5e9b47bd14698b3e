"""Calibration: fit what the cost models cannot know from datasheets to what a real system measured.

- `measurements`, `profile_fit`, `profile_report`: `rlsim calibrate MEASUREMENTS.csv --profile NAME`
  fits a hardware profile's efficiencies to timed rows (decode steps, serving ITL, prefills, training).
- `logs`, `log_fit`, `log_report`: `rlsim calibrate --from-log LOG --scenario S` reads what verl, ROLL or
  AReaL logged for a run, fits a few named factors of that scenario by simulating it, and writes a
  calibration overlay (rlsim/sim/scenario/calibration.py) that any other scenario can be run with.
"""

from rlsim.tools.calibration.measurements import (
    COLUMNS,
    KINDS,
    Measurement,
    MeasurementError,
    predict,
    read_measurements,
)
from rlsim.tools.calibration.profile_fit import DEFAULT_PARAMS, FITTABLE, CalibrationResult, fit
from rlsim.tools.calibration.profile_report import format_report, write_profile

__all__ = [
    "COLUMNS",
    "DEFAULT_PARAMS",
    "FITTABLE",
    "KINDS",
    "CalibrationResult",
    "Measurement",
    "MeasurementError",
    "fit",
    "format_report",
    "predict",
    "read_measurements",
    "write_profile",
]
