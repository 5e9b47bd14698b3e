"""The CSV files a scenario names (empirical lengths and latencies, length traces): read once, one parser.

Validation (rlsim/sim/scenario/checks.py, liveness.py) and sampling (rlsim/sim/workload.py,
rlsim/sim/costs/environment.py) call the same readers, so a file that validated is exactly the file that
is sampled, and it is
parsed once per run (cached by path, column, size and modification time). Every way a file can be
wrong (missing, not a regular file, empty, no header, wrong column, ragged row, bad value) is one
`CsvInputError` naming the line; a UTF-8 byte-order mark and CRLF line ends are accepted.
"""

from __future__ import annotations

import csv
import io
import math
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from rlsim.sim.limits import MAX_CSV_BYTES, MAX_TOKENS

TRACE_COLUMNS = (("prompt_len", "response_len"), ("num_prefill_tokens", "num_decode_tokens"))  # ours, Vidur's


@dataclass
class CsvInputError(Exception):
    field: str  # "path" or "column": the key of the distribution to fix
    message: str


def read_lengths_csv(path: str | Path, column: str = "length") -> tuple[int, ...]:
    """Positive integer lengths (at most MAX_TOKENS) from one column; CsvInputError says what and where."""
    return _cached(path, column, "length")


def read_seconds_csv(path: str | Path, column: str = "seconds") -> tuple[float, ...]:
    """Finite non-negative latencies (seconds) from one column; CsvInputError says what and where."""
    return _cached(path, column, "seconds")


def read_length_trace(path: str | Path) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(prompt, response) lengths of a trace, row by row: `prompt_len,response_len` or Vidur's columns."""
    return _cached(path, "", "trace")


def _cached(path: str | Path, column: str, kind: str):
    p = Path(path)
    if "\0" in str(path):
        raise CsvInputError("path", f"{str(path)!r} holds a NUL byte: not a file name")
    try:
        info = os.stat(p)
    except FileNotFoundError:
        raise CsvInputError("path", f"file not found: {p}") from None
    except OSError as exc:
        raise CsvInputError("path", f"cannot read {p}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(info.st_mode):
        raise CsvInputError("path", f"{p}: not a regular file, expected a CSV file")
    if info.st_size > MAX_CSV_BYTES:
        raise CsvInputError("path", f"{p}: {info.st_size:,} bytes, more than the limit of {MAX_CSV_BYTES:,}")
    return _read(str(p.resolve()), column, kind, info.st_mtime_ns, info.st_size, str(p))


@lru_cache(maxsize=64)
def _read(resolved: str, column: str, kind: str, _mtime_ns: int, _size: int, shown: str):
    """Parse one file (the stat fields only key the cache: an edited file is read again)."""
    try:
        with open(resolved, "rb") as fh:
            text = fh.read(MAX_CSV_BYTES + 1).decode("utf-8-sig")
    except OSError as exc:
        raise CsvInputError("path", f"cannot read {shown}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise CsvInputError("path", f"cannot read {shown}: not UTF-8 text (byte {exc.start})") from None
    try:
        rows = _open_csv(text)
        header = next(rows, (0, []))[1]
        if kind == "trace":
            return _trace(rows, header, shown)
        parse = _positive_length if kind == "length" else _seconds
        what = "a positive integer" if kind == "length" else "a finite number >= 0"
        (values,) = _columns(rows, header, (column,), (parse,), what, shown, "column")
        return values
    except csv.Error as exc:
        raise CsvInputError("path", f"cannot read {shown}: {exc}") from None


def _open_csv(text: str) -> Iterator[tuple[int, list[str]]]:
    """(line number, stripped cells) of every non-blank row; the first one is the header."""
    reader = csv.reader(io.StringIO(text, newline=""))
    for row in reader:
        if any(cell.strip() for cell in row):
            yield reader.line_num, [cell.strip() for cell in row]


def _columns(rows, header: list[str], names, parsers, what: str, shown: str, field: str) -> list[tuple]:
    """The named columns parsed row by row; a missing column, ragged row or bad value is a CsvInputError."""
    missing = [n for n in names if n not in header]
    if missing:
        has = ", ".join(header) or "none"
        raise CsvInputError("column", f"no column {missing[0]!r} in {shown} (columns: {has})")
    at = [header.index(n) for n in names]
    out: list[list] = [[] for _ in names]
    bad: list[tuple[int, str, str]] = []
    for line, row in rows:
        if len(row) != len(header):
            raise CsvInputError("path", f"{shown} line {line}: {len(row)} fields, the header has {len(header)}")
        for k, (name, i, parse) in enumerate(zip(names, at, parsers, strict=True)):
            value = parse(row[i])
            if value is None:
                bad.append((line, name, row[i]))
            else:
                out[k].append(value)
    if bad:
        line, name, raw = bad[0]
        more = f" ({len(bad)} bad values)" if len(bad) > 1 else ""
        raise CsvInputError(field, f"{shown} line {line}: expected {what} in column {name!r}, got {raw!r}{more}")
    if not out[0]:
        raise CsvInputError("path", f"no rows in {shown}")
    return [tuple(values) for values in out]


def _trace(rows, header: list[str], shown: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    names = next((pair for pair in TRACE_COLUMNS if set(pair) <= set(header)), None)
    if names is None:
        raise CsvInputError(
            "path", f"{shown}: needs columns prompt_len,response_len (or Vidur's num_prefill_tokens,"
            f"num_decode_tokens), has: {', '.join(header) or 'none'}"
        )
    try:
        prompts, responses = _columns(rows, header, names, (_positive_length,) * 2, "a positive integer", shown,
                                      "path")
    except CsvInputError as exc:
        raise CsvInputError("path", exc.message) from None  # a trace has only `path` to fix
    return prompts, responses


def _positive_length(raw: str) -> int | None:
    """`12` or `12.0` -> 12; anything else (0, negative, fractional, > MAX_TOKENS, text) -> None."""
    try:
        value = float(raw)
    except ValueError:
        return None
    return int(value) if value.is_integer() and 0 < value <= MAX_TOKENS else None


def _seconds(raw: str) -> float | None:
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None

