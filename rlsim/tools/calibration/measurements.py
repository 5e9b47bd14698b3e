"""Measured timings for `rlsim calibrate MEASUREMENTS.csv --profile ...`: reading rows and pricing them.

A measurement CSV (format: hardware_profiles/measurements/README.md) holds rows of four kinds:

- ``decode_step``: one decode step of `batch` sequences with `context` tokens of total context;
- ``serving_itl``: the steady-state inter-token latency of a serving benchmark at concurrency
  `batch` with `prompt_tokens` in / `output_tokens` out (rlsim.sim.costs.generation.serving_itl);
- ``prefill``: one prefill iteration over `tokens` prompt tokens;
- ``train``: one optimizer pass over `tokens` tokens on `gpus` GPUs (`batch` sequences, optional).

`predict` prices a row with the same cost functions the simulator uses (for `train` rows, the
simulator's `train_pass_time`), so a profile fitted here means the same thing in a simulation.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rlsim.sim.api import HardwareProfile, ModelShape, resolve_preset
from rlsim.sim.costs import decode_step_time, prefill_time, serving_itl, train_pass_time
from rlsim.sim.inputs import YamlInputError, read_text_bounded

KINDS = ("decode_step", "serving_itl", "prefill", "train")
COLUMNS = (
    "kind",
    "model",
    "hardware",
    "tp",
    "batch",
    "context",
    "tokens",
    "prompt_tokens",
    "output_tokens",
    "weight_bytes",
    "kv_bytes",
    "gpus",
    "seconds",
    "source",
)
_REQUIRED_HEADER = ("kind", "model", "seconds")
# Cells that must be filled for a row of each kind.
_REQUIRED_CELLS: dict[str, tuple[str, ...]] = {
    "decode_step": ("tp", "batch", "context"),
    "serving_itl": ("tp", "batch", "prompt_tokens", "output_tokens"),
    "prefill": ("tp", "tokens"),
    "train": ("gpus", "tokens"),
}
_INT_COLUMNS = ("tp", "batch", "context", "tokens", "prompt_tokens", "output_tokens", "gpus")
_FLOAT_COLUMNS = ("weight_bytes", "kv_bytes", "seconds")

class MeasurementError(ValueError):
    """A measurement file or row that cannot be used; the message names the file and line."""


@dataclass(frozen=True)
class Measurement:
    """One measured timing. Integer fields are None where the row's kind does not use them."""

    kind: str
    model: str
    seconds: float
    hardware: str = ""
    tp: int = 1
    batch: int | None = None
    context: int | None = None
    tokens: int | None = None
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    weight_bytes: float | None = None
    kv_bytes: float | None = None
    gpus: int | None = None
    source: str = ""
    file: str = ""
    line: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise MeasurementError(
                f"{self.where()}: kind must be one of {', '.join(KINDS)}, got {self.kind!r}"
            )
        if not self.seconds > 0:
            raise MeasurementError(f"{self.where()}: seconds must be > 0, got {self.seconds}")
        for name in _REQUIRED_CELLS[self.kind]:
            if getattr(self, name) is None:
                raise MeasurementError(f"{self.where()}: a {self.kind} row needs column {name!r}")
        if self.kind == "train" and self.gpus % self.tp:
            raise MeasurementError(f"{self.where()}: gpus ({self.gpus}) must be a multiple of tp ({self.tp})")
        try:
            self.shape()
        except (KeyError, ValueError) as exc:
            msg = exc.args[0] if exc.args else str(exc)
            raise MeasurementError(f"{self.where()}: model: {msg}") from None

    def where(self) -> str:
        return f"{self.file or '<measurement>'}" + (f": line {self.line}" if self.line else "")

    def shape(self) -> ModelShape:
        """The model preset with this row's weight/KV dtypes (preset defaults where empty)."""
        dims = resolve_preset(self.model)
        if self.weight_bytes is not None:
            dims["weight_bytes"] = self.weight_bytes
        if self.kv_bytes is not None:
            dims["kv_bytes"] = self.kv_bytes
        return ModelShape(preset=self.model, **dims)

    def describe(self) -> str:
        """Short label of the row's shape for reports."""
        if self.kind == "decode_step":
            return f"B={self.batch} ctx={self.context}"
        if self.kind == "serving_itl":
            return f"conc={self.batch} in={self.prompt_tokens} out={self.output_tokens}"
        if self.kind == "prefill":
            return f"T={self.tokens}"
        return f"tokens={self.tokens} gpus={self.gpus}"


def _parse_cell(value: str, column: str, where: str) -> int | float | None:
    text = value.strip()
    if text == "":
        return None
    if column in _INT_COLUMNS:
        try:
            number = float(text)
        except ValueError:
            number = math.nan
        if not (math.isfinite(number) and number == int(number) and number > 0):
            raise MeasurementError(f"{where}: column {column!r}: expected a positive integer, got {text!r}")
        return int(number)
    try:
        number = float(text)
    except ValueError:
        raise MeasurementError(f"{where}: column {column!r}: expected a number, got {text!r}") from None
    if not (math.isfinite(number) and number > 0):
        raise MeasurementError(f"{where}: column {column!r}: expected a positive number, got {text!r}")
    return number


def read_measurements(path: str | Path) -> list[Measurement]:
    """Read and validate a measurement CSV (columns: see `COLUMNS`; lines starting with # are comments).

    Unknown columns are errors (a typo must not silently drop a value); columns a file does not use
    may be omitted; cells that a row's kind does not need may be empty.
    """
    path = Path(path)
    try:  # bounded, regular files only (a FIFO or /dev/zero is refused from its metadata), as every input
        text = read_text_bounded(path, what="a measurements CSV")
    except YamlInputError as exc:
        raise MeasurementError(f"{path}: {exc.message}") from None
    except OSError as exc:
        raise MeasurementError(f"{path}: cannot read measurements: {exc.strerror or exc}") from None
    lines = [
        (i, ln) for i, ln in enumerate(text.splitlines(), start=1) if ln.strip() and not ln.startswith("#")
    ]
    if not lines:
        raise MeasurementError(f"{path}: no header line (expected columns {', '.join(COLUMNS)})")
    header_line, header_text = lines[0]
    header = [h.strip() for h in next(csv.reader([header_text]))]
    unknown = [h for h in header if h not in COLUMNS]
    if unknown:
        raise MeasurementError(
            f"{path}: line {header_line}: unknown column(s) {', '.join(map(repr, unknown))} "
            f"(known: {', '.join(COLUMNS)})"
        )
    missing = [h for h in _REQUIRED_HEADER if h not in header]
    if missing:
        raise MeasurementError(f"{path}: line {header_line}: missing column(s) {', '.join(missing)}")
    duplicated = sorted({h for h in header if header.count(h) > 1})
    if duplicated:
        raise MeasurementError(f"{path}: line {header_line}: duplicated column(s) {', '.join(duplicated)}")

    rows: list[Measurement] = []
    for line_no, row_text in lines[1:]:
        where = f"{path.name}: line {line_no}"
        cells = next(csv.reader([row_text]))
        if len(cells) != len(header):
            raise MeasurementError(f"{where}: expected {len(header)} cells, got {len(cells)}")
        raw = dict(zip(header, cells, strict=True))
        values: dict = {}
        for column, cell in raw.items():
            if column in _INT_COLUMNS or column in _FLOAT_COLUMNS:
                values[column] = _parse_cell(cell, column, where)
            else:
                values[column] = cell.strip()
        if values.get("seconds") is None:
            raise MeasurementError(f"{where}: column 'seconds' is empty")
        if not values.get("model"):
            raise MeasurementError(f"{where}: column 'model' is empty")
        if values.get("tp") is None:
            values.pop("tp", None)  # default 1
        rows.append(Measurement(**values, file=path.name, line=line_no))
    if not rows:
        raise MeasurementError(f"{path}: no measurement rows")
    return rows


# ----------------------------------------------------------------------------------------- predict

# A `train` row is one optimizer pass over the whole batch: no dynamic-batching split (one micro-batch
# per rank), one mini-batch, one epoch: only the pipeline-free compute, the exposed gradient all-reduce
# and the optimizer step remain, as the simulator prices them.
_ONE_MICRO_BATCH = 2**62
_MAX_UNSPLIT_SEQUENCES = 1_000_000


def _train_seconds(m: Measurement, shape: ModelShape, hw: HardwareProfile) -> float:
    """The simulator's `train_pass_time` on `batch` equal sequences.

    Without `batch` the attention term is unknown and left out, as sequences of (about) one token.
    """
    n_seqs = m.batch or min(m.tokens, _MAX_UNSPLIT_SEQUENCES)
    seq_lens = np.full(n_seqs, float(m.tokens) / n_seqs)
    # Equal lengths: balancing deals the same counts as contiguous chunks, without the per-sequence loop.
    return float(train_pass_time(shape, hw, seq_lens, m.tp, 1, m.gpus // m.tp, _ONE_MICRO_BATCH, 1, 1,
                                 balance=False))


def predict(measurement: Measurement, profile: HardwareProfile) -> float:
    """Seconds the cost models predict for a measured row on `profile`."""
    m = measurement
    shape = m.shape()
    if m.kind == "decode_step":
        return decode_step_time(shape, profile, m.tp, m.batch, float(m.context))
    if m.kind == "serving_itl":
        return serving_itl(shape, profile, m.tp, m.batch, m.prompt_tokens, m.output_tokens)
    if m.kind == "prefill":
        return prefill_time(shape, profile, m.tp, float(m.tokens))
    return _train_seconds(m, shape, profile)
