"""Read what RL frameworks log per step into rlsim's phase names (`rlsim calibrate --from-log`).

Accepted files (the syntax is told from the content; docs/import-calibration.md):

- verl console lines, as verl's console logger prints them: `step:3 - timing_s/gen:321.0 - ...`
  (anything before `step:` on the line, such as a Ray actor prefix, is skipped);
- JSON lines: one object per step, flat (`{"step": 3, "timing_s/gen": 321.0}`) or as verl's file
  logger writes it (`{"step": 3, "data": {...}}`);
- CSV tables (a metrics export: one row per step, a `step` or `_step` column, one column per key).

Keys understood, in seconds (every other key is ignored, as logs hold hundreds of metrics):

- verl: `timing_s/{step,gen,generate_sequences,gen_seq,wait_prev_gen,old_log_prob,ref,values,reward,adv,
  update_actor,update_critic,update_weights,sync_rollout_weights}`, `response_length/{mean,max,clip_ratio}`;
- ROLL: `time/{step_total,step_generate,old_log_probs,ref_log_probs,step_train,actor_train,critic_train,
  step_model_update,reward}`;
- AReaL: `timeperf/{rollout,recompute_logp,ref_logp,compute_advantage,train_step,update_weights}`.
- `csv` format: a CSV table (e.g. a W&B export) with any one framework's keys above.

Bad logs raise LogError with one line: empty files, no timing keys, timings in milliseconds,
non-numeric or non-positive values, a phase longer than its step, or another framework's keys / a
framework config instead of a log.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from rlsim.sim.inputs import MAX_CSV_BYTES, YamlInputError, read_text_bounded

FORMATS = ("verl", "roll", "areal", "csv")

VERL_KEYS = {
    "timing_s/step": "step", "timing_s/gen": "gen", "timing_s/generate_sequences": "generate",
    "timing_s/gen_seq": "generate", "timing_s/wait_prev_gen": "wait_prev_gen",
    "timing_s/old_log_prob": "old_log_prob", "timing_s/ref": "ref", "timing_s/values": "values",
    "timing_s/reward": "reward", "timing_s/adv": "adv", "timing_s/update_actor": "update_actor",
    "timing_s/update_critic": "update_critic", "timing_s/update_weights": "weight_sync",
    "timing_s/sync_rollout_weights": "weight_sync",
}
ROLL_KEYS = {
    "time/step_total": "step", "time/step_generate": "generate", "time/old_log_probs": "old_log_prob",
    "time/ref_log_probs": "ref", "time/step_train": "update_actor", "time/actor_train": "update_actor",
    "time/critic_train": "update_critic", "time/step_model_update": "weight_sync", "time/reward": "reward",
}
AREAL_KEYS = {
    "timeperf/rollout": "generate", "timeperf/recompute_logp": "old_log_prob", "timeperf/ref_logp": "ref",
    "timeperf/compute_advantage": "adv", "timeperf/train_step": "update_actor",
    "timeperf/update_weights": "weight_sync",
}
LENGTH_KEYS = {"response_length/mean": "length_mean", "response_length/max": "length_max",
               "response_length/clip_ratio": "length_clip_ratio"}
PHASES = ("step", "gen", "generate", "wait_prev_gen", "old_log_prob", "ref", "values", "reward", "adv",
          "update_actor", "update_critic", "weight_sync")
_BY_FRAMEWORK = {"verl": VERL_KEYS, "roll": ROLL_KEYS, "areal": AREAL_KEYS}
_PREFIX = {"verl": "timing_s/", "roll": "time/", "areal": "timeperf/"}
# Framework config files, told by their top-level keys (a config handed over instead of a log).
_CONFIG_KEYS = {"verl": {"actor_rollout_ref", "trainer", "algorithm"},
                "roll": {"actor_train", "actor_infer", "rollout_batch_size"},
                "areal": {"allocation_mode", "actor", "gconfig"}}
_INSIDE_STEP = ("old_log_prob", "ref", "values", "reward", "adv", "update_actor", "update_critic")
_MAX_STEP_S = 7 * 86400.0  # a week per step: beyond this the numbers are not seconds


class LogError(ValueError):
    """A log that cannot be used; the message is one line naming the file."""


@dataclass
class LoggedRun:
    """Per-step values of one run, keyed by rlsim's phase names (seconds) and length_* statistics."""

    path: Path
    framework: str
    syntax: str
    steps: list[dict[str, float]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # one line each, for stderr (skipped rows)

    def means(self) -> dict[str, float]:
        """Mean of every key over the steps that logged it."""
        keys = sorted({k for row in self.steps for k in row})
        return {k: sum(r[k] for r in self.steps if k in r) / sum(k in r for r in self.steps) for k in keys}

    def phase_means(self) -> dict[str, float]:
        return {k: v for k, v in self.means().items() if k in PHASES}

    def length_stats(self) -> dict[str, float]:
        """Logged response-length mean, max (over steps) and clip ratio (mean), where present."""
        out = {k: v for k, v in self.means().items() if k in ("length_mean", "length_clip_ratio")}
        maxima = [r["length_max"] for r in self.steps if "length_max" in r]
        if maxima:
            out["length_max"] = max(maxima)
        return out


def read_log(path: str | Path, fmt: str | None = None) -> LoggedRun:
    """Read a metrics log; `fmt` (verl, roll, areal, csv) is checked against the keys, or told from them."""
    path = Path(path)
    if fmt is not None and fmt not in FORMATS:
        raise LogError(f"{path}: unknown --format {fmt!r} (known: {', '.join(FORMATS)})")
    try:  # bounded, and never a FIFO or a device (as the scenario reader): /dev/zero would never end
        text = read_text_bounded(path, MAX_CSV_BYTES, "a metrics log")
    except FileNotFoundError:
        raise LogError(f"{path}: file not found") from None
    except YamlInputError as exc:
        raise LogError(f"{path}: {exc.message}") from None
    if not text.strip():
        raise LogError(f"{path}: empty file, expected a metrics log")
    if "\0" in text:
        raise LogError(f"{path}: line {text.count(chr(10), 0, text.index(chr(0))) + 1}: a NUL byte: a binary file, "
                       "not a metrics log")
    skipped: list[int] = []
    syntax, rows = _parse(path, text, skipped)
    if fmt == "csv" and syntax != "csv":
        raise LogError(f"{path}: --format csv expects a CSV table, this file holds {syntax} lines")
    framework = _framework(path, rows, None if fmt == "csv" else fmt)
    run = LoggedRun(path, framework, syntax, [_canonical(path, i, row, framework) for i, row in enumerate(rows)])
    if skipped:
        run.warnings.append(f"{path}: skipped {len(skipped)} row(s) with more fields than the header (line "
                            f"{', '.join(map(str, skipped[:5]))}{', ...' if len(skipped) > 5 else ''}): garbage lines?")
    run.steps = [s for s in run.steps if s]
    if not any(k in PHASES for s in run.steps for k in s):
        prefix = _PREFIX.get(framework, "timing_s/")
        raise LogError(f"{path}: no timing keys found (expected {prefix}* columns in seconds, e.g. {prefix}step)")
    _check_units(path, run)
    return run


def _parse(path: Path, text: str, skipped: list[int]) -> tuple[str, list[dict[str, str]]]:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    first = lines[0].lstrip()
    if first.startswith("{"):
        return "jsonl", [_json_row(path, i, ln) for i, ln in enumerate(lines, start=1)]
    console = [ln for ln in lines if re.search(r"(^|\s)step:\s*\d+\s+-\s", ln)]
    if console:
        return "console", [_console_row(ln) for ln in console]
    if "," in first:
        return "csv", _csv_rows(path, text, skipped)
    _refuse_config(path, text)
    raise LogError(f"{path}: not a metrics log (expected verl console lines `step:N - key:value - ...`, "
                   "JSON lines or a CSV table)")


def _csv_rows(path: Path, text: str, skipped: list[int]) -> list[dict[str, str]]:
    """The rows of a CSV table; a row longer than the header (a garbage line) is skipped, its line noted.

    A field over csv's limit (128 KiB: a pasted stack trace, a binary blob) is one error line."""
    reader = csv.DictReader(io.StringIO(text))
    rows = []
    try:
        for row in reader:
            if None in row:  # DictReader's key for the fields beyond the header
                skipped.append(reader.line_num)
            elif any(v is not None and str(v).strip() for v in row.values()):
                rows.append(row)
    except csv.Error as exc:
        raise LogError(f"{path}: line {reader.line_num + 1}: not a CSV table a log would write ({exc})") from None
    return rows


def _refuse_config(path: Path, text: str) -> None:
    """A YAML config handed over instead of a log: say which framework's, in one line."""
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return
    if isinstance(data, dict):
        for framework, keys in _CONFIG_KEYS.items():
            if len(keys & set(data)) >= 2:
                raise LogError(f"{path}: this is a {framework} config, not a metrics log (use `rlsim import "
                               f"{framework}` for configs; calibrate reads the run's logged metrics)")
        raise LogError(f"{path}: a YAML mapping, not a metrics log")


def _json_row(path: Path, line: int, text: str) -> dict[str, str]:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise LogError(f"{path}: line {line}: not valid JSON ({exc.msg})") from None
    if not isinstance(obj, dict):
        raise LogError(f"{path}: line {line}: expected a JSON object per line")
    data = obj.get("data") if isinstance(obj.get("data"), dict) else obj
    return {str(k): v for k, v in data.items()} | ({"step": obj["step"]} if "step" in obj else {})


def _console_row(line: str) -> dict[str, str]:
    body = line[re.search(r"(^|\s)step:\s*\d+\s+-\s", line).start():].strip()
    row: dict[str, str] = {}
    for part in body.split(" - "):
        key, sep, value = part.partition(":")
        if sep:
            value = re.sub(r"^np\.\w+\((.*)\)$", r"\1", value.strip())  # np.float64(1.5) -> 1.5
            row[key.strip()] = value
    return row


def _framework(path: Path, rows: list[dict], fmt: str | None) -> str:
    """The framework whose keys the log holds; a mismatch with `fmt` is one error line."""
    keys = {k for row in rows for k in row}
    found = [fw for fw, prefix in _PREFIX.items() if any(k.startswith(prefix) for k in keys)]
    in_ms = sorted(k for k in keys if re.match(r"^(timing|time|timeperf)_?ms/", k))
    if in_ms:
        raise LogError(f"{path}: {in_ms[0]}: timings in milliseconds; rlsim reads seconds (divide by 1000)")
    if fmt is not None and fmt != "csv":
        if fmt not in found and found:
            raise LogError(f"{path}: holds {found[0]} keys ({_PREFIX[found[0]]}*), not {fmt}'s ({_PREFIX[fmt]}*): "
                           f"use --format {found[0]}")
        return fmt
    if len(found) > 1:
        raise LogError(f"{path}: mixes keys of {' and '.join(found)}: one framework's log per file")
    return found[0] if found else "verl"


# No logged seconds, tokens or rates come near this; a larger value is a corrupt field, not a measurement.
LOGGED_NUMBER_LIMIT = 1e15


def _number(path: Path, where: str, key: str, value) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise LogError(f"{path}: {where}: {key}: expected a number, got {value!r}") from None
    if not math.isfinite(number):
        raise LogError(f"{path}: {where}: {key}: expected a finite number, got {value!r}")
    if abs(number) > LOGGED_NUMBER_LIMIT:  # sums and means of such values overflow to inf
        raise LogError(f"{path}: {where}: {key}: {value!r} is not a plausible logged value (above "
                       f"{LOGGED_NUMBER_LIMIT:g})")
    return number


def _canonical(path: Path, index: int, row: dict, framework: str) -> dict[str, float]:
    """One step's values under rlsim's names; empty cells (a metric not logged this step) are skipped."""
    keys = {**_BY_FRAMEWORK.get(framework, {}), **LENGTH_KEYS}
    where = f"step {row.get('step', row.get('_step', index))}"
    out: dict[str, float] = {}
    for key, value in row.items():
        name = keys.get(key)
        if name is None or value is None or (isinstance(value, str) and not value.strip()):
            continue
        number = _number(path, where, key, value)
        if name in PHASES and number <= 0 and name != "wait_prev_gen":
            raise LogError(f"{path}: {where}: {key}: a phase time must be > 0 s, got {number}")
        out[name] = out.get(name, 0.0) + number if name == "weight_sync" else number
    return out


def _check_units(path: Path, run: LoggedRun) -> None:
    for row in run.steps:
        step = row.get("step")
        if step is None:
            continue
        if step > _MAX_STEP_S:
            raise LogError(f"{path}: step time {step:g} s is over a week: are these milliseconds? rlsim reads seconds")
        longer = [p for p in _INSIDE_STEP if row.get(p, 0.0) > 1.01 * step]
        if longer:
            raise LogError(f"{path}: {longer[0]} ({row[longer[0]]:g}) is longer than its step ({step:g}): "
                           "mixed units, or columns of different steps in one row")
