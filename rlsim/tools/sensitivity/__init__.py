"""How far to trust a number: one-at-a-time sensitivity of a scenario's headline metrics.

Each input (a calibrated hardware constant, an engine's host overhead, a workload distribution
parameter, or any numeric `--set` path) is moved down and up while everything else stays at the
scenario's value; the scenario is simulated 2 x inputs + 1 times (same seed each time), and the
inputs are ranked by how far they swing the chosen metric. `rlsim sensitivity` prints the table,
writes DIR/sensitivity.csv and draws DIR/tornado.png (rlsim/tools/report/sensitivity_plot.py).

Runs go through the sweep machinery (`rlsim.tools.sweep.runner.run_point`, serial or a local process
pool): a run is a pure function of (scenario mapping, overrides, seed), so the table is the same
whatever the number of jobs.
"""

from rlsim.tools.sensitivity.inputs import (  # noqa: F401
    CALIBRATED,
    DEFAULT_PCT,
    HOST_OVERHEAD_ABSOLUTE_US,
    METRIC_UNITS,
    METRICS,
    Input,
    SensitivityError,
    SensitivityResult,
    _yaml_number,
    default_inputs,
    format_number,
    input_unit,
    lookup,
    metric_unit,
    parse_vary,
    short_label,
)
from rlsim.tools.sensitivity.runs import (  # noqa: F401
    Prepared,
    RunFailed,
    build_table,
    prepare,
    results_table,
    run_sensitivity,
    tasks,
    write_outputs,
)
