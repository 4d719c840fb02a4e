"""Export stored cells as CSV, JSON (a list of records) or Parquet, to a file or to stdout."""
from __future__ import annotations

import importlib.util
import io
import json
import sys
from typing import IO

import pandas as pd

FORMATS = ("csv", "json", "parquet")
# Columns that hold JSON text in the store; the JSON export nests them as objects.
JSON_COLUMNS = ("na", "kernel_names", "clocks", "timing", "request")


class ExportError(ValueError):
    """The export cannot be done (unknown format, missing optional dependency)."""


def export(df: pd.DataFrame, fmt: str, path_or_stdout: str | IO | None = None) -> None:
    """Write df as fmt to a path; to stdout when path_or_stdout is None or '-'; or to an open file."""
    fmt = fmt.lower()
    if fmt not in FORMATS:
        raise ExportError(f"unknown export format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if fmt == "parquet" and importlib.util.find_spec("pyarrow") is None:
        raise ExportError("parquet needs pyarrow: pip install pyarrow (or export csv or json)")
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
