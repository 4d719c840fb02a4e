"""The results store: one SQLite file, a row per run and a row per measured cell.

Every finished cell is committed at once, so an interrupted run loses at most the cell in flight.
Each metric is its own column (NULL where not measured; `na` holds the reasons).  Units are in
the column names.  Opening a file that is not a fusebench store is refused before anything is
written to it.
"""
from __future__ import annotations

import json
import os
import sqlite3
import time
from dataclasses import dataclass

import pandas as pd

SCHEMA_VERSION = 1
SQLITE_MAGIC = b"SQLite format 3\x00"


class StoreError(Exception):
    """The store cannot be used (unreadable, foreign, or of a newer schema)."""


RUN_COLUMNS = {
    "id": "INTEGER PRIMARY KEY AUTOINCREMENT",
    "started": "TEXT",
    "finished": "TEXT",
    "status": "TEXT",  # running | done | interrupted | failed
    "fusebench_version": "TEXT",
    "git_commit": "TEXT",
    "torch": "TEXT",
    "triton": "TEXT",
    "cuda": "TEXT",
    "driver": "TEXT",
    "device": "TEXT",  # cpu | cuda
    "device_name": "TEXT",
    "device_count": "INTEGER",
    "hostname": "TEXT",
    "python": "TEXT",
    "platform": "TEXT",
    "clocks": "TEXT",  # JSON: SM/memory clocks read at the start
    "peers": "TEXT",  # JSON: {peer library: installed version or null}
    "timing": "TEXT",  # JSON: timing settings
    "request": "TEXT",  # JSON: what was asked for (cases, impls, shapes, dtype, ...)
}

# Cell columns: identity, outcome, then metrics.  Later metric families add columns here; an
# older store gains them on open.
CELL_COLUMNS = {
    "id": "INTEGER PRIMARY KEY AUTOINCREMENT",
    "run_id": "INTEGER NOT NULL REFERENCES runs(id)",
    "case_name": "TEXT NOT NULL",
    "impl": "TEXT NOT NULL",
    "shape": "TEXT NOT NULL",
    "dtype": "TEXT NOT NULL",  # what ran
    "requested_dtype": "TEXT",  # what was asked for (differs from dtype e.g. fp16 -> fp32 on the CPU)
    "device": "TEXT NOT NULL",
    "status": "TEXT NOT NULL",  # ok | mismatch | oom | error | unsupported | skipped | crashed | timeout
    "reason": "TEXT",  # error text, or why unsupported / skipped
    "note": "TEXT",  # how the implementation ran (precision, path chosen, dtype substitution ...)
    "na": "TEXT",  # JSON {metric: why not available}
    "started": "TEXT",
    "seconds": "REAL",  # wall-clock seconds spent on the cell
    "git_commit": "TEXT",  # fusebench's commit that measured the cell (a resumed run can span several)
    "seeds": "INTEGER",
    # accuracy
    "max_abs_err": "REAL",
    "max_rel_err": "REAL",
    "tol_ratio": "REAL",
    "atol": "REAL",
    "rtol": "REAL",
    # time, microseconds
    "time_us": "REAL",
    "time_q20_us": "REAL",
    "time_q80_us": "REAL",
    "time_min_us": "REAL",
    "time_max_us": "REAL",
    "time_reps": "INTEGER",
    "wall_time_us": "REAL",
    # analytic model and what the time makes of it
    "min_bytes": "INTEGER",
    "flops": "INTEGER",
    "gbps": "REAL",  # min_bytes / time_us
    "tflops": "REAL",  # flops / time_us
    # Inductor bookkeeping
    "graphs": "INTEGER",
    "graph_breaks": "INTEGER",
    "recompiles": "INTEGER",
    # other time views, microseconds
    "graph_time_us": "REAL",  # per call, replaying a CUDA graph of the call
    "kernel_time_us": "REAL",  # sum of the call's kernel durations (profiler)
    # kernels launched by one call (profiler)
    "kernels": "INTEGER",
    "memsets": "INTEGER",
    "memcpys": "INTEGER",
    "kernel_names": "TEXT",  # JSON list
    # memory, bytes
    "peak_mem_bytes": "INTEGER",  # max_memory_allocated during one call minus what was allocated before
    "footprint_bytes": "INTEGER",  # allocated during the call beyond inputs and outputs
    # compile time, seconds
    "compile_cold_s": "REAL",
    "compile_warm_s": "REAL",
    # FLOPs counted by torch.utils.flop_counter, beside the analytic `flops`
    "flops_counted": "INTEGER",
    # Nsight Compute, one warmed-up call
    "dram_read_bytes": "INTEGER",
    "dram_write_bytes": "INTEGER",
    "traffic_amplification": "REAL",  # (read + write) / min_bytes
    "sass_inst": "INTEGER",
    "ncu_time_us": "REAL",
    # roofline against ceilings measured on this device (fusebench ceilings)
    "pct_roofline": "REAL",
    "roofline_bound": "TEXT",  # memory | compute
}

CELL_KEY = ("run_id", "case_name", "impl", "shape", "dtype")


def add_cell_columns(columns: dict[str, str]) -> None:
    """Metric modules declare their columns here (name -> SQL type) at import time."""
    for name, sql in columns.items():
        CELL_COLUMNS.setdefault(name, sql)


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime())


def _check_file(path: str) -> None:
    """Refuse, before any write, a file that is not an SQLite database or not fusebench's."""
    if not os.path.exists(path):
        return
    if os.path.isdir(path):
        raise StoreError(f"{path} is a directory, not a results database")
    if not os.access(path, os.R_OK):
        raise StoreError(f"cannot read results database {path}")
    size = os.path.getsize(path)
    if size == 0:
        return  # an empty file: safe to initialise
    with open(path, "rb") as f:
        if f.read(16) != SQLITE_MAGIC:
            raise StoreError(f"{path} is not an SQLite database (not a fusebench store)")
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        meta = {}
        if "fusebench_meta" in tables:
            meta = dict(con.execute("SELECT key, value FROM fusebench_meta"))
        con.close()
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"{path} is unreadable as a database: {exc}") from None
    if tables and meta.get("schema") != "fusebench":
        raise StoreError(f"{path} is an SQLite database of something else (no fusebench tables); refusing to write to it")
    if int(meta.get("schema_version", 0) or 0) > SCHEMA_VERSION:
        raise StoreError(f"{path} was written by a newer fusebench (schema {meta['schema_version']})")


@dataclass
class Store:
    path: str
    con: sqlite3.Connection

    # -- opening ---------------------------------------------------------------------------------
    @classmethod
    def open(cls, path: str, *, create: bool = True) -> "Store":
        path = os.path.abspath(path)
        _check_file(path)
        if not os.path.exists(path) and not create:
            raise StoreError(f"no results database at {path}")
        parent = os.path.dirname(path)
        if create and not os.path.isdir(parent):
            raise StoreError(f"directory {parent} does not exist")
        try:
            con = sqlite3.connect(path, timeout=30)
            con.execute("PRAGMA journal_mode=WAL")
            con.execute("PRAGMA foreign_keys=ON")
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot open results database {path}: {exc}") from None
        store = cls(path, con)
        if create:
            store._init_schema()
        return store

    def _init_schema(self) -> None:
        with self.con:
            self.con.execute("CREATE TABLE IF NOT EXISTS fusebench_meta (key TEXT PRIMARY KEY, value TEXT)")
            self.con.execute("INSERT OR IGNORE INTO fusebench_meta VALUES ('schema', 'fusebench')")
            self.con.execute("INSERT OR REPLACE INTO fusebench_meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            self.con.execute(f"CREATE TABLE IF NOT EXISTS runs ({', '.join(f'{k} {v}' for k, v in RUN_COLUMNS.items())})")
            self.con.execute(f"CREATE TABLE IF NOT EXISTS cells ({', '.join(f'{k} {v}' for k, v in CELL_COLUMNS.items())})")
            self.con.execute(f"CREATE UNIQUE INDEX IF NOT EXISTS cells_key ON cells ({', '.join(CELL_KEY)})")
            for table, columns in (("runs", RUN_COLUMNS), ("cells", CELL_COLUMNS)):
                have = {r[1] for r in self.con.execute(f"PRAGMA table_info({table})")}
                for name, sql in columns.items():
                    if name not in have:
                        self.con.execute(f"ALTER TABLE {table} ADD COLUMN {name} {sql.split(' REFERENCES')[0]}")

    def close(self) -> None:
        self.con.close()

    # -- runs ------------------------------------------------------------------------------------
    def start_run(self, env: dict, request: dict, timing: dict) -> int:
        row = {k: v for k, v in env.items() if k in RUN_COLUMNS}
        row.update(started=now(), status="running", request=json.dumps(request), timing=json.dumps(timing))
        if isinstance(row.get("clocks"), dict):
            row["clocks"] = json.dumps(row["clocks"])
        with self.con:
            cur = self.con.execute(
                f"INSERT INTO runs ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})", list(row.values()))
        return int(cur.lastrowid)

    def finish_run(self, run_id: int, status: str = "done") -> None:
        with self.con:
            self.con.execute("UPDATE runs SET finished=?, status=? WHERE id=?", (now(), status, run_id))

    def run_info(self, run_id: int) -> dict:
        cur = self.con.execute("SELECT * FROM runs WHERE id=?", (run_id,))
        row = cur.fetchone()
        if row is None:
            raise StoreError(f"no run {run_id} in {self.path}")
        return dict(zip([d[0] for d in cur.description], row))

    def latest_run(self) -> int:
        row = self.con.execute("SELECT MAX(id) FROM runs").fetchone()
        if row is None or row[0] is None:
            raise StoreError(f"no runs in {self.path}")
        return int(row[0])

    def runs(self) -> pd.DataFrame:
        return pd.read_sql_query(
            "SELECT r.id, r.started, r.finished, r.status, r.device_name, r.torch, r.triton, "
            "COUNT(c.id) AS cells FROM runs r LEFT JOIN cells c ON c.run_id = r.id GROUP BY r.id ORDER BY r.id",
            self.con)

    # -- cells -----------------------------------------------------------------------------------
    def add_cell(self, run_id: int, cell: dict) -> None:
        """Insert (or replace, on re-measurement) one cell and commit at once."""
        row = {"run_id": run_id}
        for k, v in cell.items():
            if k not in CELL_COLUMNS:
                raise KeyError(f"cell field {k!r} has no column in the store")
            row[k] = json.dumps(v) if isinstance(v, (dict, list)) else v
        with self.con:
            self.con.execute(
                f"INSERT OR REPLACE INTO cells ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                list(row.values()))

    def done_keys(self, run_id: int) -> set[tuple]:
        return set(self.con.execute(
            "SELECT case_name, impl, shape, requested_dtype FROM cells WHERE run_id=?", (run_id,)).fetchall())

    def cells(self, run_id: int | None = None) -> pd.DataFrame:
        if run_id is None:
            run_id = self.latest_run()
        self.run_info(run_id)  # raises if absent
        return pd.read_sql_query("SELECT * FROM cells WHERE run_id=? ORDER BY id", self.con, params=(run_id,))

    # -- merging -----------------------------------------------------------------------------------
    def merge_from(self, other: "Store") -> dict[int, int]:
        """Copy every run of `other` (its cells included) into this store under new run ids, in one
        transaction: all of them or, on any error, none.  Returns {old run id: new run id}.

        For runs measured by separate processes into separate files (several machines, or GPUs
        with their own stores), so that one report or comparison can see them all.  Columns this
        store has and `other` lacks (an older schema) are left NULL."""
        if os.path.samefile(self.path, other.path):
            raise StoreError(f"cannot merge {other.path} into itself")
        columns = {t: [r[1] for r in other.con.execute(f"PRAGMA table_info({t})")] for t in ("runs", "cells")}
        mine = {t: {r[1] for r in self.con.execute(f"PRAGMA table_info({t})")} for t in ("runs", "cells")}
        run_cols = [c for c in columns["runs"] if c in mine["runs"] and c != "id"]
        cell_cols = [c for c in columns["cells"] if c in mine["cells"] and c not in ("id", "run_id")]
        mapping: dict[int, int] = {}
        with self.con:  # one transaction
            for row in other.con.execute(f"SELECT id, {', '.join(run_cols)} FROM runs ORDER BY id").fetchall():
                cur = self.con.execute(f"INSERT INTO runs ({', '.join(run_cols)}) VALUES ({', '.join('?' * len(run_cols))})",
                                       row[1:])
                mapping[row[0]] = int(cur.lastrowid)
                cells = other.con.execute(f"SELECT {', '.join(cell_cols)} FROM cells WHERE run_id=? ORDER BY id", (row[0],))
                self.con.executemany(
                    f"INSERT INTO cells (run_id, {', '.join(cell_cols)}) VALUES (?, {', '.join('?' * len(cell_cols))})",
                    ((mapping[row[0]], *cell) for cell in cells))
        return mapping


def default_db_path() -> str:
    return os.environ.get("FUSEBENCH_DB", "fusebench.db")
