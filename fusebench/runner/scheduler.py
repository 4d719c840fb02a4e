"""Running cells and storing them: in this process, or in worker processes that may die.

With isolation (the CLI's default) every cell runs in a worker process, one per GPU.  A worker
that dies (segfault, illegal memory access, abort) or overruns the per-cell time limit is
killed with its whole process group and every process it started, those that left the group
included (runner/proctree.py), its cell recorded as
`crashed` or `timeout`, and the sweep goes on on a fresh worker.  Out-of-memory is caught inside
the worker (status `oom`); the worker is then replaced, as one whose memory has grown past a
limit is, so that memory it leaked cannot fail the next cell.  Each finished cell is committed to
the store at once; Ctrl-C or SIGTERM stops cleanly, and `--resume` measures only the cells a run
is missing.

A worker's start-up (importing the plugins) is contained the same way: a worker that fails or
hangs while starting costs the cell it would have run (`crashed` / `timeout`, with the reason);
after START_FAILURES such failures in a row, the cells left are recorded as not attempted instead
of starting workers forever.  Workers die with this process: the kernel signals them when it
exits (PR_SET_PDEATHSIG), and a watchdog thread in each checks its parent.

Workers talk to the parent over one pipe each (not a shared queue), so a killed worker can only
break its own channel.  Cells are handed out one at a time, keeping the cells of one case on one
worker in order, so that Inductor's caches and Triton's autotuning are reused.
"""
from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
import warnings
from collections import Counter, deque
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Callable

from fusebench.cases import shape_str
from fusebench.env import git_commit
from fusebench.runner import proctree
from fusebench.runner.interpreter import spawning_under
from fusebench.runner.plan import Cell
from fusebench.runner.request import RunRequest
from fusebench.store import Store, now
from fusebench.util import first_line

FAILED = ("mismatch", "error", "crashed", "timeout")
# What --retry-failed measures again: outcomes of the process and the machine (a worker killed, a
# hang, a neighbour's fault), not of the code; error, mismatch and oom are the code's own results.
RETRIED = ("crashed", "timeout")
# Errors after which a process's CUDA context stays broken: every later cell would fail too.
STICKY_CUDA_ERRORS = ("illegal memory access", "device-side assert", "unspecified launch failure",
                      "misaligned address", "illegal instruction")
# Consecutive failed start-ups of a worker after which the cells left are given up.
START_FAILURES = 3
# Seconds a fresh worker may take to come up (Python, torch) before plugins are imported; the
# plugins' import then has --cell-timeout, like a cell.
BOOT_S = 120.0


def default_rss_limit() -> int | None:
    """Half of this machine's memory: a worker above it after a cell is replaced."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
    except (ValueError, OSError, AttributeError):
        return None


@dataclass
class WorkerSettings:
    """How the worker processes run, beyond what the request says (its timing, metrics, plugins,
    store, GPUs and time limit: runner/request.py)."""

    plugin_hashes: dict[str, str] = field(default_factory=dict)  # path -> sha256 the worker checks
    # bytes of resident memory after which a worker is replaced (None: never)
    rss_limit: int | None = field(default_factory=default_rss_limit)
    # runner/interpreter.Interpreter: workers run under that Python (fusebench run --python); None: this one
    interpreter: object | None = None


def worker_log(request: RunRequest) -> str | None:
    """Where workers' stdout and stderr go (beside the store), not over the progress bar."""
    return request.db + ".log" if request.db else None


# ---------------------------------------------------------------------------------------------
# The worker side.


def visible_device(gpu: int, inherited: str | None) -> str:
    """The CUDA_VISIBLE_DEVICES entry for worker GPU `gpu`: an index among the GPUs this process
    sees, so under an inherited CUDA_VISIBLE_DEVICES=2,3 (a scheduler's allocation) GPU 0 is "2",
    not the machine's first GPU, where something else may be running."""
    entries = [e.strip() for e in inherited.split(",")] if inherited and inherited.strip() else None
    if entries is None:
        return str(gpu)
    if not 0 <= gpu < len(entries):
        raise ValueError(f"--gpus {gpu}: only {len(entries)} GPU(s) visible (CUDA_VISIBLE_DEVICES={inherited})")
    return entries[gpu]


def _rss_bytes() -> int | None:
    """This process's resident memory (Linux /proc; None elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def _kill_own_group(*_):
    os.killpg(os.getpgrp(), signal.SIGKILL)


def _die_with_parent(parent_pid: int) -> None:
    """Make this worker (and its process group: anything a cell started) die with the parent.

    On Linux the kernel sends SIGTERM when the parent exits; its handler kills the group.  A
    watchdog thread covers the rest (other systems, a main thread stuck in a system call): it
    kills the group when the parent pid changes."""
    signal.signal(signal.SIGTERM, _kill_own_group)
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass

    def watch():
        while os.getppid() == parent_pid:
            time.sleep(0.5)
        _kill_own_group()

    threading.Thread(target=watch, name="fusebench-watchdog", daemon=True).start()
    if os.getppid() != parent_pid:  # the parent died before the above was in place
        _kill_own_group()


def _worker_main(conn: Connection, gpu: int | None, request: RunRequest, workers: WorkerSettings,
                 parent_pid: int, token: str = "") -> None:
    os.setsid()  # its own process group, killed whole on timeout, crash or replacement
    if token:  # inherited by everything it starts: found and killed with it (proctree)
        os.environ[proctree.TOKEN_VAR] = token
    _die_with_parent(parent_pid)
    conn.send(("alive", os.getpid()))
    if gpu is not None:  # before CUDA is initialised
        os.environ["CUDA_VISIBLE_DEVICES"] = visible_device(gpu, os.environ.get("CUDA_VISIBLE_DEVICES"))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    log_path = worker_log(request)
    if log_path:
        log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
    # Compiler advice (e.g. "online softmax disabled") would scroll the progress bar away.
    warnings.filterwarnings("ignore", category=UserWarning, module=r"torch\..*")
    try:
        from fusebench.cases import load_plugin
        from fusebench.runner.cell import measure_cell
        from fusebench.runner.worker_state import WorkerState

        state = WorkerState(freeze=True)  # the process is fusebench's own: survivors of a cell are frozen
        for path in request.plugins:
            load_plugin(path, workers.plugin_hashes.get(path))
    except (Exception, SystemExit) as exc:
        conn.send(("failed", first_line(exc)))
        return
    conn.send(("ready", None))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return  # the parent is gone
        if msg is None:
            return
        row = measure_cell(Cell(**msg), request.timing, metrics=request.metrics, db_path=request.db, state=state)
        conn.send(("done", (row, _rss_bytes())))
        if _sticky(row):
            os._exit(3)  # the CUDA context is unusable: let the parent start a fresh worker


def _sticky(row: dict) -> bool:
    """Whether the cell failed with an error that leaves the worker's CUDA context broken."""
    return row["status"] == "error" and any(m in (row.get("reason") or "") for m in STICKY_CUDA_ERRORS)


@dataclass
class _Worker:
    gpu: int | None
    proc: mp.process.BaseProcess
    conn: Connection
    token: str = ""  # in the environment of everything it starts (proctree)
    group: deque = field(default_factory=deque)  # cells of the case this worker is on
    cell: Cell | None = None
    since: float = 0.0
    spawned: float = 0.0
    alive_at: float | None = None  # when it reported in (before importing plugins)
    ready: bool = False
    failures: int = 0  # failed start-ups in a row on this worker's slot


def _kill(w: _Worker, grace: float = 0.0) -> None:
    """Stop a worker, everything in its process group and every process it started (those that left
    the group too); reap it."""
    if grace:
        w.proc.join(grace)
    # its descendants while the tree still hangs from it (a pid already reaped may be reused: then
    # only the token finds them)
    proctree.kill_tree(w.proc.pid if w.proc.exitcode is None else None, w.token)
    try:
        os.killpg(w.proc.pid, signal.SIGKILL)  # its group id is its pid (setsid)
    except (ProcessLookupError, PermissionError, TypeError):
        pass
    if w.proc.is_alive():  # before setsid the group is not its own yet
        w.proc.kill()
    w.proc.join(5)
    proctree.kill_tree(None, w.token)  # any re-parented when the worker died
    w.conn.close()


class Scheduler:
    """Measures a checked request's cells (fusebench.api) and stores each as it finishes."""

    def __init__(self, store: Store, run_id: int, request: RunRequest,
                 on_cell: Callable[[Cell, dict | None], None] | None = None,
                 workers: WorkerSettings | None = None):
        self.store, self.run_id, self.request = store, run_id, request
        self.workers = workers or WorkerSettings()
        self.commit = git_commit()  # the code this scheduler's workers run, stored with every cell
        self.on_cell = on_cell or (lambda cell, row: None)
        self.counts: Counter = Counter()
        self.unfinished: list[dict] = []  # rows that did not finish: crashed, timeout, error

    # -- recording -------------------------------------------------------------------------------
    def _record(self, cell: Cell, row: dict) -> None:
        row.setdefault("git_commit", self.commit)
        self.store.add_cell(self.run_id, row)
        self.counts[row["status"]] += 1
        if row["status"] in FAILED:
            self.unfinished.append(row)
        self.on_cell(cell, row)

    @staticmethod
    def _lost_row(cell: Cell, status: str, reason: str, seconds: float) -> dict:
        return dict(case_name=cell.case, impl=cell.impl, shape=shape_str(cell.shape), dtype=cell.dtype,
                    requested_dtype=cell.dtype, device=cell.device, status=status, reason=reason,
                    started=now(), seconds=round(seconds, 3))

    # -- running ---------------------------------------------------------------------------------
    def run(self, cells: list[Cell]) -> None:
        if not self.request.isolate:
            return self._run_inline(cells)
        return self._run_isolated(cells)

    def _run_inline(self, cells: list[Cell]) -> None:
        from fusebench.runner.cell import measure_cell
        from fusebench.runner.worker_state import WorkerState

        state = WorkerState()  # the caller's process: nothing is frozen
        try:
            for cell in cells:
                self.on_cell(cell, None)
                self._record(cell, measure_cell(cell, self.request.timing, metrics=self.request.metrics,
                                                db_path=self.request.db, state=state))
        finally:  # the caller's process keeps no inputs or references of the run
            state.data.clear()

    def _spawn(self, gpu: int | None, failures: int = 0) -> _Worker:
        ctx = mp.get_context("spawn")  # CUDA cannot be used in a forked child
        parent, child = ctx.Pipe()
        token = proctree.new_token()
        proc = ctx.Process(target=_worker_main, args=(child, gpu, self.request, self.workers, os.getpid(), token),
                           daemon=True)
        with spawning_under(self.workers.interpreter):
            proc.start()
        child.close()
        return _Worker(gpu, proc, parent, token=token, spawned=time.time(), failures=failures)

    def _replace(self, workers: list[_Worker], w: _Worker, grace: float = 0.0) -> _Worker:
        if grace:
            try:
                w.conn.send(None)  # idle: let it exit on its own first
            except (OSError, ValueError):
                grace = 0.0
        _kill(w, grace)
        fresh = self._spawn(w.gpu, w.failures)
        fresh.group = w.group
        workers[workers.index(w)] = fresh
        return fresh

    @staticmethod
    def _groups(cells: list[Cell]) -> deque:
        """One group per case (and dtype), in the requested order: a worker takes a whole group, so
        that Inductor's caches and the autotuner's choices are reused."""
        groups: deque = deque()
        for cell in cells:
            if not groups or (groups[-1][0].case, groups[-1][0].dtype) != (cell.case, cell.dtype):
                groups.append(deque())
            groups[-1].append(cell)
        return groups

    def _take(self, w, groups: deque) -> Cell | None:
        """The next cell for worker `w` (from its group, or a new group), marked as in flight."""
        if not w.group and groups:
            w.group = groups.popleft()
        if not w.group:
            return None
        cell = w.group.popleft()
        w.cell, w.since = cell, time.time()
        self.on_cell(cell, None)
        return cell

    def _run_isolated(self, cells: list[Cell]) -> None:
        groups = self._groups(cells)
        if not groups:
            return
        gpus = self.request.gpus if self.request.gpus else [None]
        workers = [self._spawn(g) for g in gpus[:len(groups)] or gpus[:1]]
        try:
            while True:
                for w in workers:
                    if w.ready and w.cell is None:
                        self._dispatch(w, groups)
                if not groups and all(not w.group and w.cell is None for w in workers):
                    break  # nothing queued, nothing in flight
                if not workers:  # every worker slot gave up starting
                    break
                self._wait(workers, groups)
        finally:
            for w in workers:
                try:
                    w.conn.send(None)
                except (OSError, ValueError):
                    pass
            deadline = time.time() + 5
            for w in workers:
                _kill(w, max(0.0, deadline - time.time()))

    def _dispatch(self, w: _Worker, groups: deque) -> None:
        cell = self._take(w, groups)
        if cell is not None:
            w.conn.send(cell.as_dict())

    def _dispatch_early(self, w: _Worker, groups: deque) -> None:
        """Send `w` its next cell before the last one is recorded.  If the worker is gone, the cell
        goes back to the front of its group, for the worker that replaces it."""
        if not w.group and not groups:
            return
        try:
            self._dispatch(w, groups)
        except (OSError, ValueError):
            w.group.appendleft(w.cell)
            w.cell = None

    def _wait(self, workers: list[_Worker], groups: deque) -> None:
        timeout = self.request.cell_timeout
        ready = wait([w.conn for w in workers] + [w.proc.sentinel for w in workers], timeout=1.0)
        for w in list(workers):
            if w not in workers:
                continue
            if w.conn in ready:
                try:
                    kind, payload = w.conn.recv()
                except (EOFError, OSError):
                    kind, payload = "dead", None
                if kind == "alive":
                    w.alive_at = time.time()
                    continue
                if kind == "ready":
                    w.ready, w.failures = True, 0
                    continue
                if kind == "failed":
                    self._start_failed(workers, w, groups, "crashed", f"worker start-up failed: {payload}")
                    continue
                if kind == "done":
                    (row, rss), cell = payload, w.cell
                    w.cell = None
                    # Sending the cell, the worker picking it up, pickling the row both ways.
                    phases = row.setdefault("phase_s", {})
                    phases["handoff"] = round(max(0.0, time.time() - w.since - row.get("seconds", 0.0)), 4)
                    limit = self.workers.rss_limit
                    if row["status"] == "oom" or (limit and rss and rss > limit):
                        self._record(cell, row)
                        self._replace(workers, w, grace=2.0)  # whatever it leaked goes with it
                        continue
                    try:  # the next cell first: the store's commit (~15 ms) overlaps it
                        if not _sticky(row):  # a worker about to exit gets no cell
                            self._dispatch_early(w, groups)
                    finally:  # recorded whatever happens to the send (Ctrl-C)
                        self._record(cell, row)
                    continue
            if not w.proc.is_alive():
                code = w.proc.exitcode
                how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"
                if w.cell is not None:
                    cell, elapsed = w.cell, time.time() - w.since
                    self._record(cell, self._lost_row(cell, "crashed", f"worker process died ({how})", elapsed))
                    w.cell = None
                    self._replace(workers, w)
                elif not w.ready:
                    self._start_failed(workers, w, groups, "crashed", f"worker died during start-up ({how})")
                else:
                    self._replace(workers, w)
            elif w.cell is not None and time.time() - w.since > timeout:
                cell = w.cell
                self._record(cell, self._lost_row(cell, "timeout", f"no result within {timeout:g} s; worker killed",
                                                  time.time() - w.since))
                w.cell = None
                self._replace(workers, w)
            elif not w.ready and w.alive_at is not None and time.time() - w.alive_at > timeout:
                self._start_failed(workers, w, groups, "timeout",
                                   f"worker start-up (importing plugins) took more than {timeout:g} s; worker killed")
            elif not w.ready and w.alive_at is None and time.time() - w.spawned > max(timeout, BOOT_S):
                self._start_failed(workers, w, groups, "timeout",
                                   f"worker did not start within {max(timeout, BOOT_S):g} s; worker killed")

    def _start_failed(self, workers: list[_Worker], w: _Worker, groups: deque, status: str, reason: str) -> None:
        """A worker that could not start: charge the cell it would have run, then start a fresh one,
        or, after START_FAILURES in a row, retire its slot (others take its cells; with none left,
        the cells left are recorded as not attempted)."""
        started = w.alive_at or w.spawned
        if not w.group and groups:
            w.group = groups.popleft()
        if w.group:
            cell = w.group.popleft()
            self.on_cell(cell, None)
            self._record(cell, self._lost_row(cell, status, reason, time.time() - started))
        w.failures += 1
        if w.failures < START_FAILURES and (w.group or groups):
            self._replace(workers, w)
            return
        _kill(w)
        workers.remove(w)
        if w.group:
            groups.appendleft(w.group)
        if workers:
            return
        why = f"not attempted: workers failed to start {w.failures} times in a row (last: {reason})"
        while groups:
            for cell in groups.popleft():
                self.on_cell(cell, None)
                self._record(cell, self._lost_row(cell, "crashed", why, 0.0))
