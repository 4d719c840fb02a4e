"""The results store: one SQLite file, a row per run and a row per measured cell.

Every finished cell is committed at once, so an interrupted run loses at most the cell in flight.
Each metric is its own column (NULL where not measured; `na` holds the reasons).  Units are in
the column names.  Opening a file that is not a fusebench store (or a corrupt one, an empty one
for reading, a read-only one for writing) is refused before anything is written to it.

The file stays in SQLite's rollback-journal mode: every commit lands in the file itself, so a copy
taken after a kill -9 holds every finished cell, and readers open it read-only without creating
-wal/-shm files beside it.  A store left in WAL mode by an older writer is converted (checkpointed)
when a writer opens it.  A writer killed mid-transaction leaves a hot `-journal` that a read-only
connection cannot roll back: every open first rolls it back through a writable connection where
the file and its directory allow it, and otherwise says how in one line.
"""
from __future__ import annotations

import json
import os
import socket
import sqlite3
import stat
import threading
import time
import uuid
from dataclasses import dataclass

import pandas as pd

SCHEMA_VERSION = 1
SQLITE_MAGIC = b"SQLite format 3\x00"
JOURNAL_MAGIC = bytes.fromhex("d9d505f920a163d7")  # the first bytes of a rollback journal with content


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
    "kernel_settings": "TEXT",  # JSON: what decides fusebench's kernels' choices (tuning.record)
    "timing": "TEXT",  # JSON: timing settings
    "request": "TEXT",  # JSON: what was asked for (cases, impls, shapes, dtype, plugins with sha256, ...)
    "precision": "TEXT",  # JSON: PyTorch's fp32 precision switches (TF32 of matmul and cuDNN)
    "reference": "TEXT",  # JSON: the reference workload timed at the start and end (measure/reference.py)
    "load": "TEXT",  # JSON: the machine's load at the start and end (measure/load.py)
    # The process measuring the run, and when it last said so (unix seconds): --resume refuses a
    # run whose owner is alive on this host or whose heartbeat is recent.
    "owner_pid": "INTEGER",
    "owner_host": "TEXT",
    "heartbeat": "REAL",
    # A random id given when the run starts: the same run in two stores (merged) has the same uid.
    "uid": "TEXT",
}

# A running run's owner refreshes its heartbeat this often (seconds) ...
HEARTBEAT_S = 10.0
# ... and a heartbeat older than this, from another host, means its owner is gone.
STALE_S = 120.0

# Cell columns: identity, outcome, then metrics.  Every column any module writes is declared here
# (name -> SQL type); an older store gains the ones it lacks when a writer opens it.
CELL_COLUMNS = {
    "id": "INTEGER PRIMARY KEY AUTOINCREMENT",
    "run_id": "INTEGER NOT NULL REFERENCES runs(id)",
    "case_name": "TEXT NOT NULL",
    "impl": "TEXT NOT NULL",
    "shape": "TEXT NOT NULL",
    "dtype": "TEXT NOT NULL",  # what ran
    "requested_dtype": "TEXT",  # what was asked for (differs from dtype e.g. fp16 -> fp32 on the CPU)
    "device": "TEXT NOT NULL",
    "mode": "TEXT",  # fwd | bwd | fwd_bwd: what the cell timed (runner/modes.py)
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
    # kernels Inductor's code launches per call of its graphs (fusebench/fusion/facts.py)
    "generated_kernels": "INTEGER",
    "extern_kernels": "INTEGER",  # extern (library) kernels and ATen fallbacks
    "fusion_kernels": "TEXT",  # JSON list: graph, kind, launches, ATen ops and name of each kernel
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
    # the tolerance policy (measure/accuracy.py): which tolerance judged the cell ("tf32", or the
    # dtype's own), and the cell's worst relative error over eager's on the same inputs
    "tolerance": "TEXT",
    "err_vs_eager": "REAL",
    # the machine's load while the cell was timed (measure/load.py)
    "threads": "INTEGER",  # torch's intra-op threads the cell ran with
    "cpu_pressure": "REAL",  # share of the timing's wall time some task waited for a CPU (0-1)
    "load_per_cpu": "REAL",  # 1-minute load average / usable CPUs, at the end of the timing
    "under_load": "INTEGER",  # 1: measured while the CPU was busy (measure/load.py, under_load)
    # every repetition of the timing (JSON list, us) and its spread, IQR / median (measure/timing.py):
    # the noise `compare` judges a change against
    "time_samples_us": "TEXT",
    "time_spread": "REAL",
    "phase_s": "TEXT",  # JSON {phase: wall-clock seconds} (measure/phases.py)
    # where a Ray actor measured the cell (runner/ray_backend.py); NULL for local workers
    "hostname": "TEXT",
    "device_name": "TEXT",  # its device (GPU model, or the CPU)
    "driver": "TEXT",  # its NVIDIA driver version
    "gpu_id": "TEXT",  # the GPU Ray gave the actor, as numbered on its host
}

CELL_KEY = ("run_id", "case_name", "impl", "shape", "dtype")
# Columns every store fusebench has written holds (the first schema's); a table without one of
# them is not a fusebench store's, and readers would fail on it.
ESSENTIAL_COLUMNS = {
    "runs": ("id", "started", "finished", "status", "git_commit", "torch", "triton", "device", "device_name",
             "request"),
    "cells": ("id", "run_id", "case_name", "impl", "shape", "dtype", "device", "status", "reason", "seconds",
              "time_us"),
}


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime())


def _is_wal(path: str) -> bool:
    """Whether SQLite would read the file through a WAL: the header's write and read versions
    (bytes 18-19) are 2 for WAL, 1 for rollback, and SQLite opens a WAL on the read version alone."""
    with open(path, "rb") as f:
        head = f.read(20)
    return len(head) == 20 and 2 in (head[18], head[19])


def _connect_ro(path: str) -> sqlite3.Connection:
    """A read-only connection that creates no file beside the store.  A WAL-mode store (left by an
    older writer) with no -wal file is opened immutable, since SQLite would otherwise create
    -wal/-shm files to read it; with a -wal file present, its data is there and is read."""
    from urllib.parse import quote

    uri = f"file:{quote(path)}?mode=ro"
    if _is_wal(path) and not os.path.exists(path + "-wal"):
        uri += "&immutable=1"
    return sqlite3.connect(uri, uri=True, timeout=30)


def _journal_left(path: str) -> str | None:
    """The rollback journal beside `path` when it holds content (a transaction in progress, or one
    whose writer was killed: SQLite decides which when it next reads through a writable connection)."""
    journal = path + "-journal"
    try:
        with open(journal, "rb") as f:
            return journal if f.read(len(JOURNAL_MAGIC)) == JOURNAL_MAGIC else None
    except OSError:
        return None


def recover_journal(path: str) -> None:
    """Roll back a transaction left by a killed writer: one read through a writable connection does
    it (SQLite takes a journal for hot only when no live writer holds the file, so a transaction in
    progress elsewhere is left alone).  Only where the file and its directory are writable; else
    the read-only open that follows fails and `_journal_error` says what to do."""
    journal = _journal_left(path)
    parent = os.path.dirname(os.path.abspath(path))
    if journal is None or _is_wal(path) or not (os.access(path, os.W_OK) and os.access(parent, os.W_OK | os.X_OK)):
        return
    try:
        con = sqlite3.connect(path, timeout=30)
        try:
            con.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
        finally:
            con.close()
    except sqlite3.Error:
        pass  # the open that follows reports what is wrong


def _journal_error(path: str, exc: sqlite3.Error) -> StoreError | None:
    """The one-line refusal for a store whose killed writer's journal this process cannot roll back."""
    journal = _journal_left(path)
    if journal is None or "readonly" not in str(exc).replace("read-only", "readonly"):
        return None
    return StoreError(f"{path} holds a transaction left unfinished by a killed writer ({os.path.basename(journal)} "
                      f"beside it) and this process cannot write there to roll it back: run any fusebench command "
                      f"on it as a user who can write {path} and its directory (or `sqlite3 {path} "
                      f"'PRAGMA quick_check'`); the data committed before is intact")


def _check_file(path: str, *, reading: bool, recover: bool = True) -> None:
    """Refuse, before any write, a file that is not a sound fusebench store.  An empty (0-byte)
    regular file is refused for reading; a writer may initialise it, as it holds nothing.  A
    journal left by a killed writer is rolled back first where the file can be written."""
    if not os.path.exists(path):
        return
    if os.path.isdir(path):
        raise StoreError(f"{path} is a directory, not a results database")
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise StoreError(f"{path} is not a regular file, not a results database")
    if not os.access(path, os.R_OK):
        raise StoreError(f"cannot read results database {path}")
    size = os.path.getsize(path)
    if size == 0:
        if reading:
            raise StoreError(f"{path} is empty (0 bytes): not a fusebench store")
        return
    with open(path, "rb") as f:
        if f.read(16) != SQLITE_MAGIC:
            raise StoreError(f"{path} is not an SQLite database (not a fusebench store)")
    if recover:
        recover_journal(path)
    try:
        con = _connect_ro(path)
        try:
            tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            meta = {}
            if "fusebench_meta" in tables:
                meta = dict(con.execute("SELECT key, value FROM fusebench_meta"))
            columns = {t: {r[1] for r in con.execute(f"PRAGMA table_info({t})")} for t in ESSENTIAL_COLUMNS
                       if t in tables}
            check = con.execute("PRAGMA quick_check(1)").fetchone()
        finally:
            con.close()
    except sqlite3.Error as exc:
        raise (_journal_error(path, exc) or StoreError(f"{path} is unreadable as a database: {exc}")) from None
    if check is None or check[0] != "ok":
        raise StoreError(f"{path} is corrupt ({check[0] if check else 'no integrity result'})")
    if tables and meta.get("schema") != "fusebench":
        raise StoreError(f"{path} is an SQLite database of something else (no fusebench tables); refusing to use it")
    try:
        version = int(meta.get("schema_version", 0) or 0)
    except ValueError:
        raise StoreError(f"{path} has an unreadable schema version") from None
    if version > SCHEMA_VERSION:
        raise StoreError(f"{path} was written by a newer fusebench (schema {version}; this one reads up to "
                         f"{SCHEMA_VERSION}): upgrade fusebench to read it")
    _check_tables(path, columns, reading)


def _check_tables(path: str, columns: dict[str, set], reading: bool) -> None:
    """A fusebench store's tables hold the columns every fusebench wrote; a reader also needs them
    to exist (a writer creates missing ones)."""
    for table, need in ESSENTIAL_COLUMNS.items():
        if table not in columns:
            if reading:
                raise StoreError(f"{path} holds no {table} table: not a complete fusebench store")
            continue
        missing = [c for c in need if c not in columns[table]]
        if missing:
            raise StoreError(f"{path}'s {table} table lacks column(s) {', '.join(missing)}: not a table "
                             f"fusebench wrote")


def check_writable(path: str) -> None:
    """Refuse, before anything is measured or written, a store that cannot take a run: not a sound
    store, read-only (permissions, an immutable file, a read-only mount), or in a directory that
    is missing or read-only (SQLite writes its journal beside the file)."""
    path = os.path.abspath(path)
    _check_file(path, reading=False)
    parent = os.path.dirname(path)
    if not os.path.isdir(parent):
        raise StoreError(f"directory {parent} does not exist")
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise StoreError(f"{path} is read-only: cannot write results to it")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise StoreError(f"directory {parent} is read-only: cannot write results to {os.path.basename(path)}")


def owner_alive(info: dict) -> str | None:
    """Why the run `info` (a runs row) is still being measured by another process, or None."""
    if info.get("status") != "running":
        return None
    pid, host, beat = info.get("owner_pid"), info.get("owner_host"), info.get("heartbeat")
    if pid and host == socket.gethostname():
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return None
        except (PermissionError, OverflowError, ValueError):
            pass  # another user's process, alive
        return f"run {info['id']} is still being measured by process {pid} on this host"
    if beat is not None:
        try:
            age = time.time() - float(beat)
        except (TypeError, ValueError):
            return None
        if age < STALE_S:
            return (f"run {info['id']} is still being measured on {host} (heartbeat {max(age, 0):.0f} s ago; "
                    f"a run is taken for abandoned {STALE_S:.0f} s after its last heartbeat)")
    return None


class Heartbeat:
    """Refreshes a run's heartbeat every HEARTBEAT_S seconds from a thread, on its own connection,
    while the run is measured (a long cell completes no row for minutes)."""

    def __init__(self, path: str, run_id: int, every: float = HEARTBEAT_S):
        self.path, self.run_id, self.every = path, run_id, every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="fusebench-heartbeat", daemon=True)

    def __enter__(self) -> "Heartbeat":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(5)

    def _loop(self) -> None:
        con = sqlite3.connect(self.path, timeout=30)
        try:
            while not self._stop.wait(self.every):
                try:
                    with con:
                        con.execute("UPDATE runs SET heartbeat=? WHERE id=?", (time.time(), self.run_id))
                except sqlite3.Error:
                    pass  # busy or gone: the next beat tries again
        finally:
            con.close()


@dataclass
class Store:
    path: str
    con: sqlite3.Connection

    # -- opening ---------------------------------------------------------------------------------
    readonly: bool = False

    @classmethod
    def open(cls, path: str, *, create: bool = True, readonly: bool | None = None, recover: bool = True) -> "Store":
        """Open (and with `create`, initialise) the store at `path`.  Without `create` the store
        must exist and is opened read-only unless `readonly=False` is passed: read-only opens
        write nothing and create no -wal/-shm files, except that a journal left by a killed writer
        is rolled back first (unless `recover=False`: then such a store is refused)."""
        path = os.path.abspath(path)
        readonly = (not create) if readonly is None else readonly
        if not os.path.exists(path) and not create:
            raise StoreError(f"no results database at {path}")
        if readonly:
            _check_file(path, reading=True, recover=recover)
            try:
                con = _connect_ro(path)
            except sqlite3.Error as exc:
                raise (_journal_error(path, exc) or StoreError(f"cannot open results database {path}: {exc}")) from None
            return cls(path, con, readonly=True)
        check_writable(path)
        try:
            con = sqlite3.connect(path, timeout=30)
            try:  # rollback journal: see the module docstring; another open connection may keep WAL
                con.execute("PRAGMA journal_mode=DELETE")
            except sqlite3.OperationalError:
                pass
            con.execute("PRAGMA foreign_keys=ON")
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open results database {path}: {exc}") from None
        store = cls(path, con)
        if create:
            try:
                store._init_schema()
            except sqlite3.Error as exc:
                con.close()
                raise StoreError(f"cannot write to results database {path}: {exc}") from None
        return store

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _init_schema(self) -> None:
        """Create what is missing, and only that: a store already up to date is not written to."""
        tables = {r[0] for r in self.con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        meta = dict(self.con.execute("SELECT key, value FROM fusebench_meta")) if "fusebench_meta" in tables else {}
        have = {t: {r[1] for r in self.con.execute(f"PRAGMA table_info({t})")} for t in ("runs", "cells")}
        indexes = {r[0] for r in self.con.execute("SELECT name FROM sqlite_master WHERE type='index'")}
        if (meta.get("schema") == "fusebench" and meta.get("schema_version") == str(SCHEMA_VERSION)
                and set(RUN_COLUMNS) <= have["runs"] and set(CELL_COLUMNS) <= have["cells"] and "cells_key" in indexes):
            return
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
        """Close, leaving a writer's file checkpointed in rollback-journal mode where no other
        connection holds it (then nothing is left only in a -wal file)."""
        if not self.readonly:
            try:
                if self.con.execute("PRAGMA journal_mode").fetchone()[0] == "wal":
                    self.con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                    self.con.execute("PRAGMA journal_mode=DELETE")
            except sqlite3.Error:
                pass  # another connection still holds it; the last one to close checkpoints
        self.con.close()

    # -- runs ------------------------------------------------------------------------------------
    def start_run(self, env: dict, request: dict, timing: dict) -> int:
        row = {k: v for k, v in env.items() if k in RUN_COLUMNS}
        row.update(started=now(), status="running", request=json.dumps(request), timing=json.dumps(timing),
                   owner_pid=os.getpid(), owner_host=socket.gethostname(), heartbeat=time.time(),
                   uid=uuid.uuid4().hex)
        if isinstance(row.get("clocks"), dict):
            row["clocks"] = json.dumps(row["clocks"])
        with self.con:
            cur = self.con.execute(
                f"INSERT INTO runs ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})", list(row.values()))
        return int(cur.lastrowid)

    def finish_run(self, run_id: int, status: str = "done") -> None:
        with self.con:
            self.con.execute("UPDATE runs SET finished=?, status=? WHERE id=?", (now(), status, run_id))

    def claim_run(self, run_id: int, seen: dict) -> None:
        """Make this process the owner of run `run_id` (to resume it), provided its owner is still
        the one in `seen` (its runs row as read when checking it was not live): two resumes of one
        run cannot both win."""
        with self.con:
            cur = self.con.execute(
                "UPDATE runs SET status='running', finished=NULL, owner_pid=?, owner_host=?, heartbeat=? "
                "WHERE id=? AND owner_pid IS ? AND owner_host IS ? AND heartbeat IS ?",
                (os.getpid(), socket.gethostname(), time.time(), run_id, seen.get("owner_pid"),
                 seen.get("owner_host"), seen.get("heartbeat")))
        if cur.rowcount != 1:
            raise StoreError(f"run {run_id} was taken by another process while checking it; not resuming")

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

    RUNS_LISTED = ("id", "started", "finished", "status", "device_name", "git_commit", "torch", "triton", "request")

    def runs(self) -> pd.DataFrame:
        """One row per run (the columns RUNS_LISTED, NULL where an older store lacks one) with its
        number of cells."""
        have = {r[1] for r in self.con.execute("PRAGMA table_info(runs)")}
        cols = ", ".join(f"r.{c}" if c in have else f"NULL AS {c}" for c in self.RUNS_LISTED)
        return pd.read_sql_query(
            f"SELECT {cols}, COUNT(c.id) AS cells FROM runs r LEFT JOIN cells c ON c.run_id = r.id "
            "GROUP BY r.id ORDER BY r.id", self.con)

    # -- cells -----------------------------------------------------------------------------------
    def add_cell(self, run_id: int, cell: dict) -> None:
        """Insert (or replace, on re-measurement) one cell, refresh the run's heartbeat, and
        commit at once.  A re-measured cell replaces the row of the same requested cell even
        where the dtype it ran in differs (a crashed fp16 cell on the CPU, re-measured in fp32)."""
        row = {"run_id": run_id}
        for k, v in cell.items():
            if k not in CELL_COLUMNS:
                raise KeyError(f"cell field {k!r} has no column in the store")
            row[k] = json.dumps(v) if isinstance(v, (dict, list)) else v
        with self.con:
            if row.get("requested_dtype"):
                self.con.execute(
                    "DELETE FROM cells WHERE run_id=? AND case_name=? AND impl=? AND shape=? AND requested_dtype=?",
                    (run_id, row["case_name"], row["impl"], row["shape"], row["requested_dtype"]))
            self.con.execute(
                f"INSERT OR REPLACE INTO cells ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                list(row.values()))
            self.con.execute("UPDATE runs SET heartbeat=? WHERE id=?", (time.time(), run_id))

    def done_keys(self, run_id: int, redo: tuple[str, ...] = ()) -> set[tuple]:
        """The cells of `run_id` already stored, less those whose status is in `redo`."""
        rows = self.con.execute(
            "SELECT case_name, impl, shape, requested_dtype, status FROM cells WHERE run_id=?", (run_id,)).fetchall()
        return {r[:4] for r in rows if r[4] not in redo}

    def cells(self, run_id: int | None = None) -> pd.DataFrame:
        if run_id is None:
            run_id = self.latest_run()
        self.run_info(run_id)  # raises if absent
        self._check_numbers(run_id)
        return pd.read_sql_query("SELECT * FROM cells WHERE run_id=? ORDER BY id", self.con, params=(run_id,))

    def _check_numbers(self, run_id: int) -> None:
        """Raise StoreError where a numeric column of the run's cells holds anything but a number or
        NULL (SQLite keeps text in a REAL column): fusebench never writes one, and every reader
        would otherwise compute with it."""
        numeric = [c for c, sql in CELL_COLUMNS.items() if sql.split()[0] in ("REAL", "INTEGER") and c != "id"]
        have = {r[1] for r in self.con.execute("PRAGMA table_info(cells)")}
        numeric = [c for c in numeric if c in have]
        if not numeric:
            return
        wrong = " OR ".join(f"typeof({c}) NOT IN ('integer', 'real', 'null')" for c in numeric)
        row = self.con.execute(f"SELECT id, {', '.join(numeric)} FROM cells WHERE run_id=? AND ({wrong}) LIMIT 1",
                               (run_id,)).fetchone()
        if row is None:
            return
        col, value = next((c, v) for c, v in zip(numeric, row[1:]) if v is not None and
                          (isinstance(v, (str, bytes)) or not isinstance(v, (int, float))))
        raise StoreError(f"cell {row[0]} of run {run_id} in {self.path} holds {str(value)[:40]!r} in {col}, "
                         f"a numeric column: not a value fusebench writes")


def default_db_path() -> str:
    return os.environ.get("FUSEBENCH_DB", "fusebench.db")
