"""Export stored cells as CSV, JSON (a list of records) or Parquet, to a file or to stdout.

Exported rows carry their run's identity (device, torch, Triton, commit) and a numeric column per
shape axis (`with_run_columns`), so that files from two machines can be told apart and filtered by
size, and the version of their layout (`export_schema`, first), so that a reader can tell which
layout a file has.  What each column means: report/columns.py, docs/columns.md, `fusebench results
--describe`.
"""
from __future__ import annotations

import importlib.util
import io
import json
import sys
from typing import IO

import pandas as pd

from fusebench.report.columns import AXIS_PREFIX, RUN_FIELDS

FORMATS = ("csv", "json", "parquet")
# The layout of exported rows: raised when a column is renamed or removed or changes its meaning
# (a column added keeps it).  Every exported row carries it in SCHEMA_COLUMN.
EXPORT_SCHEMA = 1
SCHEMA_COLUMN = "export_schema"
# Columns that hold JSON text in the store; the JSON export nests them as objects.
JSON_COLUMNS = ("na", "kernel_names", "clocks", "timing", "request", "time_samples_us")


def with_run_columns(rows: pd.DataFrame, info: dict | None) -> pd.DataFrame:
    """The rows with their run's identity (run_started, device_name, torch, triton, cuda,
    run_commit) first after run_id, and shape_<axis> columns after `shape`."""
    from fusebench.report.grid import case_axes

    out = rows.copy()
    info = info or {}
    for col, key in RUN_FIELDS.items():
        # a cell measured on a Ray actor keeps its own device name; the run's fills the rest
        out[col] = out[col].fillna(info.get(key)) if col in out and info.get(key) is not None else \
            out[col] if col in out else info.get(key)
    dims: dict[str, list] = {}
    for i, (case, shape) in enumerate(zip(out["case_name"], out["shape"])):
        try:
            values = [int(p) for p in str(shape).lower().split("x")]
        except ValueError:
            continue  # not a shape of integers: its axes stay empty
        for axis, v in zip(case_axes(case, len(values)), values):
            dims.setdefault(AXIS_PREFIX + axis, [None] * len(out))[i] = v
    for col, values in dims.items():
        out[col] = pd.array(values, dtype="Int64")
    out[SCHEMA_COLUMN] = EXPORT_SCHEMA
    first = [SCHEMA_COLUMN, "run_id", *RUN_FIELDS]
    after_shape = list(dims)
    rest = [c for c in out.columns if c not in first and c not in after_shape]
    at = rest.index("shape") + 1 if "shape" in rest else len(rest)
    order = [c for c in first if c in out.columns] + rest[:at] + after_shape + rest[at:]
    return out[order]


class ExportError(ValueError):
    """The export cannot be done (unknown format, missing optional dependency)."""


def export(df: pd.DataFrame, fmt: str, path_or_stdout: str | IO | None = None) -> None:
    """Write df as fmt to a path; to stdout when path_or_stdout is None or '-'; or to an open file."""
    fmt = fmt.lower()
    if fmt not in FORMATS:
        raise ExportError(f"unknown export format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if fmt == "parquet" and importlib.util.find_spec("pyarrow") is None:
        raise ExportError("parquet needs pyarrow: pip install pyarrow (or export csv or json)")
    if SCHEMA_COLUMN not in df.columns:
        df = df.copy()
        df.insert(0, SCHEMA_COLUMN, EXPORT_SCHEMA)
    data = _encode(df, fmt)
    target = sys.stdout if path_or_stdout in (None, "-") else path_or_stdout
    if isinstance(target, str):
        with open(target, "wb") as f:
            f.write(data if isinstance(data, bytes) else data.encode("utf-8"))
    elif isinstance(data, bytes):
        getattr(target, "buffer", target).write(data)  # text streams such as stdout take bytes via .buffer
    else:
        target.write(data)


def _encode(df: pd.DataFrame, fmt: str) -> str | bytes:
    if fmt == "csv":
        return df.to_csv(index=False)
    if fmt == "json":
        nested = df.assign(**{c: df[c].map(_loads) for c in JSON_COLUMNS if c in df})
        return nested.to_json(orient="records", indent=1, force_ascii=False) + "\n"
    buf = io.BytesIO()
    df.to_parquet(buf, index=False)
    return buf.getvalue()


def _loads(text):
    if not isinstance(text, str):
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text
