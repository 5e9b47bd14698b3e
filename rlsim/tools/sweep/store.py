"""The result store of a sweep: one JSON file per finished point, a manifest and consolidated tables.

Layout of DIR:
    sweep.json          the plan: scenario, axes, seeds and every point (index, id, overrides, seed)
    points/<id>.json    one record per finished point: flat summary (or an error), step table, overrides
    results.csv         one row per recorded point of the plan, sorted by point index
    results.parquet     the same, when pyarrow is importable

Only the driver writes, one whole file at a time (temporary file + os.replace), so a sweep killed at
any instant leaves every record either complete or absent: the next run of the same sweep skips the
successful points, retries the failed ones and runs the rest. Ids hash the scenario, the overrides
and the seed, so growing a grid (or K) reuses every point already computed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

if TYPE_CHECKING:
    from rlsim.tools.sweep.grid import SweepPlan

META_COLUMNS = ("point", "point_id", "replicate", "seed")
ERROR_COLUMN = "error"


def point_id(scenario_hash: str, overrides: Sequence[str], seed: int) -> str:
    """A stable 16-hex-digit id of (scenario, overrides in order, seed)."""
    text = json.dumps({"scenario": scenario_hash, "overrides": list(overrides), "seed": int(seed)})
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def atomic_write_text(path: Path, text: str) -> None:
    """Write next to the target then os.replace: readers (and a later run) never see half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class ResultStore:
    """Point records and tables under one folder; safe to reopen after any interruption.

    A damaged record (unparsable, the wrong shape, a folder where the file should be) counts as
    absent: its point runs again and the record is rewritten.
    """

    def __init__(self, root: str | Path):
        from rlsim.tools.report.output import prepare_out_dir
        from rlsim.tools.sweep.errors import SweepError

        self.root = Path(root)
        self.points_dir = self.root / "points"
        for folder in (self.root, self.points_dir):
            problem = prepare_out_dir(folder)
            if problem is not None:
                raise SweepError([f"{folder}: {problem}"])
        self._remove_stale_tmp()

    def _remove_stale_tmp(self) -> None:
        """Temporary files of a killed driver (its pid is gone) are garbage; a live driver's are not."""
        for folder in (self.root, self.points_dir):
            for tmp in folder.glob(".*.tmp"):
                try:
                    pid = int(tmp.name.rsplit(".", 2)[-2])
                except ValueError:
                    continue
                if not pid_alive(pid):
                    tmp.unlink(missing_ok=True)

    def point_path(self, pid: str) -> Path:
        return self.points_dir / f"{pid}.json"

    def read_point(self, pid: str) -> dict | None:
        """The record of a point, or None when absent, unreadable or malformed (then it simply runs again)."""
        try:
            record = json.loads(self.point_path(pid).read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            return None
        return record if valid_record(record, pid) else None

    def steps(self, pid: str) -> pd.DataFrame:
        """The step table (steps.csv columns) of a finished point; empty for a failed or missing one."""
        record = self.read_point(pid) or {}
        return pd.DataFrame(record.get("steps") or {})

    def completed(self, ids: Iterable[str]) -> set[str]:
        """The ids among `ids` with a successful record; failed points are retried."""
        done = set()
        for pid in ids:
            record = self.read_point(pid)
            if record is not None and not record.get(ERROR_COLUMN):
                done.add(pid)
        return done

    def write_point(self, record: dict) -> None:
        path = self.point_path(record["point_id"])
        if path.is_dir() and not path.is_symlink():  # a damaged store: the record's place is taken
            shutil.rmtree(path)
        atomic_write_text(path, json.dumps(record, indent=1, sort_keys=False))

    def check_same_sweep(self, plan: SweepPlan) -> None:
        """Refuse a folder that holds another sweep: its points would mix with this one's.

        The same sweep grown (more values, more seeds) is welcome; another scenario, other `set`
        overrides or other swept keys are not. A damaged manifest is simply rewritten.
        """
        from rlsim.tools.sweep.errors import SweepError

        try:
            old = json.loads((self.root / "sweep.json").read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            return
        if not isinstance(old, dict):
            return
        spec = plan.spec
        differs = [
            what
            for what, before, now in (
                ("scenario", old.get("scenario_hash"), plan.scenario_hash),
                ("--set overrides", old.get("set"), list(spec.set)),
                ("swept keys", sorted(old.get("params") or []), sorted(spec.params)),
            )
            if before != now
        ]
        if differs:
            raise SweepError([
                f"{self.root}: holds a different sweep (other {', '.join(differs)}: {old.get('scenario')}); "
                "give another --out or remove the folder"
            ])

    def write_manifest(self, plan: SweepPlan) -> None:
        self.check_same_sweep(plan)
        spec = plan.spec
        manifest = {
            "scenario": str(spec.scenario),
            "sweep_file": spec.source or None,
            "scenario_hash": plan.scenario_hash,
            "params": spec.params,
            "grid": spec.grid,
            "zip": spec.zip,
            "seeds": spec.seeds,
            "set": spec.set,
            "points": [
                {
                    "point": p.index,
                    "point_id": p.point_id,
                    "replicate": p.replicate,
                    "seed": p.seed,
                    "overrides": list(p.overrides),
                    "params": p.params,
                }
                for p in plan.points
            ],
        }
        atomic_write_text(self.root / "sweep.json", json.dumps(manifest, indent=1))

    def table(self, plan: SweepPlan) -> pd.DataFrame:
        """Rows for the plan's recorded points in index order: meta, swept keys, summary keys, error."""
        return build_table(
            [
                (p.index, p.point_id, p.replicate, p.seed, p.params, self.read_point(p.point_id))
                for p in plan.points
            ],
            plan.spec.params,
        )

    def write_tables(self, plan: SweepPlan) -> pd.DataFrame:
        """Rewrite results.csv (and results.parquet) from the point records; return the table."""
        df = self.table(plan)
        atomic_write_text(self.root / "results.csv", df.to_csv(index=False))
        write_parquet(df, self.root / "results.parquet")
        return df


def valid_record(record: Any, pid: str) -> bool:
    """A point record as `run_point` writes it: this id, a flat summary of scalars or an error message,
    and (when present) a columnar step table of equal-length lists."""
    if not isinstance(record, dict) or record.get("point_id") != pid:
        return False
    summary, error, steps = record.get("summary"), record.get("error"), record.get("steps")
    if error is not None and not isinstance(error, str):
        return False
    if summary is None:
        return bool(error)
    if not isinstance(summary, dict) or not all(isinstance(v, _SCALARS) for v in summary.values()):
        return False
    if steps is None:
        return True
    return (
        isinstance(steps, dict)
        and all(isinstance(v, list) for v in steps.values())
        and len({len(v) for v in steps.values()}) <= 1
    )


_SCALARS = (type(None), bool, int, float, str)


def param_columns(params: Sequence[str], taken: Iterable[str]) -> dict[str, str]:
    """Swept key -> column name: the key itself, or `set.<key>` where a meta or summary column has it."""
    taken = {*META_COLUMNS, ERROR_COLUMN, *taken}
    return {key: (f"set.{key}" if key in taken else key) for key in params}


def param_column(key: str, columns: Iterable[str]) -> str:
    """The column of swept `key` in a finished table (`set.<key>` where a summary key took the name)."""
    return f"set.{key}" if f"set.{key}" in columns else key


def build_table(
    rows: Iterable[tuple[int, str, int, int, dict[str, Any], dict | None]], params: Sequence[str]
) -> pd.DataFrame:
    """(index, id, replicate, seed, params, record or None) rows -> the results table; no record, no row."""
    recorded = sorted((r for r in rows if r[5] is not None), key=lambda r: r[0])
    summary_keys: dict[str, None] = {}
    for *_, record in recorded:
        summary_keys.update(dict.fromkeys(record.get("summary") or {}))
    columns = param_columns(params, summary_keys)
    out = []
    for index, pid, replicate, seed, values, record in recorded:
        row: dict[str, Any] = {"point": index, "point_id": pid, "replicate": replicate, "seed": seed}
        row.update({columns[key]: values.get(key) for key in params})
        summary = record.get("summary") or {}
        row.update({key: summary.get(key) for key in summary_keys})
        row[ERROR_COLUMN] = record.get(ERROR_COLUMN) or None
        out.append(row)
    header = [*META_COLUMNS, *columns.values(), *summary_keys, ERROR_COLUMN]
    df = pd.DataFrame(out, columns=header)
    df.attrs["params"] = list(columns.values())
    return df


def write_parquet(df: pd.DataFrame, path: Path) -> bool:
    """Best effort: Parquet needs pyarrow (an optional extra); the CSV is the table of record."""
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    frame = df.copy()
    for col in frame.columns:  # a swept key can mix ints and strings: Parquet wants one type
        if frame[col].dtype == object:
            frame[col] = frame[col].map(lambda v: None if v is None else str(v))
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    frame.to_parquet(tmp, index=False)
    os.replace(tmp, path)
    return True


def load_results(root: str | Path) -> pd.DataFrame:
    """results.csv of a sweep folder; `df.attrs["params"]` lists the swept columns (from sweep.json)."""
    root = Path(root)
    df = pd.read_csv(root / "results.csv")
    try:
        params = json.loads((root / "sweep.json").read_text(encoding="utf-8")).get("params", [])
    except (OSError, ValueError):
        params = []
    df.attrs["params"] = [param_column(p, df.columns) for p in params]
    return df
