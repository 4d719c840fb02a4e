"""Merging one store's runs into another (`fusebench merge`).

A source is checked whole before anything is written: a value no reader accepts (text in a numeric
column, a shape, status, dtype, device or mode fusebench never writes, a cell whose run row is
missing) is a problem, and a source with any problem is refused with one line per problem.  Runs
are then copied one transaction each (an audit run with its audit rows), so an interrupted merge
leaves whole runs only.  A run the
target already holds (the same uid, given when the run started; for a run stored without one, the
same start, host, owner process, request and cells) is not copied again.
"""
from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field

CELL_STATUSES = ("ok", "mismatch", "oom", "error", "unsupported", "skipped", "crashed", "timeout")
RUN_STATUSES = ("running", "done", "interrupted", "failed")
DTYPES = ("fp32", "fp16", "bf16")
DEVICES = ("cpu", "cuda", "cuda:N")
DEVICE = re.compile(r"cpu|cuda(:[0-9]{1,4})?")
MODES = ("fwd", "bwd", "fwd_bwd")
SHAPE = re.compile(r"[0-9]{1,19}(x[0-9]{1,19})*")
# What tells a run stored without a uid from another (with its cells): the same values in two
# stores are the same run, copied before.
IDENTITY = ("started", "hostname", "owner_host", "owner_pid", "request")
MAX_PROBLEM_LINES = 20


class MergeRefused(Exception):
    """The source holds values no reader accepts; `lines` says each (nothing was written)."""

    def __init__(self, lines: list[str]):
        super().__init__("; ".join(lines))
        self.lines = lines


@dataclass
class Merged:
    """What a merge did with each run of the source."""
    copied: dict[int, int] = field(default_factory=dict)  # source run id -> its new id
    present: dict[int, int] = field(default_factory=dict)  # source run id -> the target's run id


def _columns(con, table: str) -> dict[str, str]:
    """{column: declared type} of a table."""
    return {r[1]: (r[2] or "").upper() for r in con.execute(f"PRAGMA table_info({table})")}


def _quote(value) -> str:
    text = str(value)
    return repr(text[:40] + ("..." if len(text) > 40 else ""))


def problems(source) -> list[str]:
    """What in `source` (a Store) readers refuse or a merge cannot copy: one line per row at fault.
    A column's type is the one fusebench declares for it (store.py), else the source's own."""
    from fusebench.store import CELL_COLUMNS, RUN_COLUMNS

    con, where = source.con, source.path
    src_runs, src_cells = _columns(con, "runs"), _columns(con, "cells")
    found: list[str] = []
    for run_id, n in con.execute("SELECT c.run_id, COUNT(*) FROM cells c LEFT JOIN runs r ON r.id = c.run_id "
                                 "WHERE r.id IS NULL GROUP BY c.run_id ORDER BY c.run_id"):
        found.append(f"{where}: {n} cell(s) of run {run_id}, which has no row in the runs table")
    for table, declared, label in (("runs", {c: RUN_COLUMNS.get(c, t) for c, t in src_runs.items()}, _run_label),
                                   ("cells", {c: CELL_COLUMNS.get(c, t) for c, t in src_cells.items()}, _cell_label)):
        numeric = [c for c, t in declared.items() if c != "id" and t.split(" ")[0] in ("REAL", "INTEGER")]
        checked = [c for c in _TEXT_RULES[table] if c in declared]
        cols = list(dict.fromkeys(["id", *(["run_id"] if table == "cells" else []), *numeric, *checked]))
        cur = con.execute(f"SELECT {', '.join(cols)} FROM {table} ORDER BY id")
        for row in cur:
            values = dict(zip(cols, row))
            faults = [f"{_quote(values[c])} in {c} (a number column)" for c in numeric
                      if values[c] is not None and not isinstance(values[c], (int, float))]
            faults += _text_faults(table, values, checked)
            if faults:
                found.append(f"{where}: {label(values)} holds {', '.join(faults)}")
    return found


def _run_label(v: dict) -> str:
    return f"run {v['id']}"


def _cell_label(v: dict) -> str:
    return f"cell {v['id']} of run {v['run_id']}"


# column -> the values allowed (None: any non-empty text); shape is matched against SHAPE
_TEXT_RULES = {
    "runs": {"status": RUN_STATUSES},
    "cells": {"case_name": None, "impl": None, "shape": None, "status": CELL_STATUSES, "dtype": DTYPES,
              "requested_dtype": DTYPES, "device": None, "mode": MODES},
}
_NULLABLE = {("runs", "status"), ("cells", "requested_dtype"), ("cells", "mode")}


def _text_faults(table: str, values: dict, checked: list[str]) -> list[str]:
    faults = []
    for c in checked:
        v, allowed = values[c], _TEXT_RULES[table][c]
        if v is None and (table, c) in _NULLABLE:
            continue
        if not isinstance(v, str) or not v.strip():
            faults.append(f"no {c}" if v is None or isinstance(v, str) else f"{_quote(v)} in {c} (a text column)")
        elif c == "shape" and not SHAPE.fullmatch(v):
            faults.append(f"shape {_quote(v)} (not integers joined by x)")
        elif c == "device" and not DEVICE.fullmatch(v):
            faults.append(f"device {_quote(v)} (not one of {', '.join(DEVICES)})")
        elif allowed is not None and v not in allowed:
            faults.append(f"{c} {_quote(v)} (not one of {', '.join(allowed)})")
    return faults


def problem_lines(found: list[str]) -> list[str]:
    """At most MAX_PROBLEM_LINES of them, then a count of the rest."""
    lines = found[:MAX_PROBLEM_LINES]
    if len(found) > MAX_PROBLEM_LINES:
        lines.append(f"... and {len(found) - MAX_PROBLEM_LINES} more problem(s) like these")
    return lines


def _identities(con, have: set, run_id: int | None = None) -> dict[int, tuple]:
    """{run id: identity} of a store's runs (or of one run): ("uid", uid), or for a run without a
    uid its IDENTITY values and a hash of its cells' keys and start times."""
    cols = ", ".join(c if c in have else "NULL" for c in ("uid", *IDENTITY))
    query = f"SELECT id, {cols} FROM runs" + (" WHERE id=?" if run_id is not None else "")
    out = {}
    for rid, uid, *rest in con.execute(query, () if run_id is None else (run_id,)).fetchall():
        if uid is not None:
            out[rid] = ("uid", uid)
            continue
        digest = hashlib.sha256()
        for cell in con.execute("SELECT case_name, impl, shape, dtype, started FROM cells WHERE run_id=? "
                                "ORDER BY case_name, impl, shape, dtype, started", (rid,)):
            digest.update(repr(cell).encode())
        out[rid] = ("run", *rest, digest.hexdigest())
    return out


def merge(target, source) -> Merged:
    """Copy `source`'s runs into `target`, one transaction per run, after checking it whole
    (MergeRefused, nothing written, where `problems` finds any).  Runs already in `target` are left
    out.  The two stores must be different files (StoreError)."""
    from fusebench.audit.store import copy_audit_rows
    from fusebench.store import StoreError

    if os.path.samefile(target.path, source.path):
        raise StoreError(f"cannot merge {source.path} into itself")
    found = problems(source)
    if found:
        raise MergeRefused(problem_lines(found))
    src_runs, dst_runs = set(_columns(source.con, "runs")), set(_columns(target.con, "runs"))
    src_cells, dst_cells = _columns(source.con, "cells"), set(_columns(target.con, "cells"))
    run_cols = [c for c in _columns(source.con, "runs") if c in dst_runs and c != "id"]
    cell_cols = [c for c in src_cells if c in dst_cells and c not in ("id", "run_id")]
    here = {key: rid for rid, key in _identities(target.con, dst_runs).items()}
    done = Merged()
    for run_id in [r[0] for r in source.con.execute("SELECT id FROM runs ORDER BY id")]:
        key = _identities(source.con, src_runs, run_id)[run_id]
        if key in here:
            done.present[run_id] = here[key]
            continue
        row = source.con.execute(f"SELECT {', '.join(run_cols)} FROM runs WHERE id=?", (run_id,)).fetchone()
        with target.con:  # one transaction per run: a kill leaves this run whole or absent
            cur = target.con.execute(
                f"INSERT INTO runs ({', '.join(run_cols)}) VALUES ({', '.join('?' * len(run_cols))})", row)
            new_id = int(cur.lastrowid)
            cells = source.con.execute(f"SELECT {', '.join(cell_cols)} FROM cells WHERE run_id=? ORDER BY id",
                                       (run_id,))
            target.con.executemany(
                f"INSERT INTO cells (run_id, {', '.join(cell_cols)}) VALUES (?, {', '.join('?' * len(cell_cols))})",
                ((new_id, *cell) for cell in cells))
            copy_audit_rows(source.con, run_id, target.con, new_id)  # an audit run's rows (none for cells)
        here[key] = new_id
        done.copied[run_id] = new_id
    return done
