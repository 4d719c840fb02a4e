"""Running cells and storing them: in this process, or in worker processes that may die.

With isolation (the CLI's default) every cell runs in a worker process, one per GPU.  A worker
that dies (segfault, illegal memory access, abort) or overruns the per-cell time limit is
replaced, its cell recorded as `crashed` or `timeout`, and the sweep goes on.  Out-of-memory is
caught inside the worker (status `oom`), which frees memory and carries on.  Each finished cell is
committed to the store at once; Ctrl-C or SIGTERM stops cleanly, and `--resume` measures only
the cells a run is missing.

Workers talk to the parent over one pipe each (not a shared queue), so a killed worker can only
break its own channel.  Cells are handed out one at a time, keeping the cells of one case on one
worker in order, so that Inductor's caches and Triton's autotuning are reused.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
import warnings
from collections import Counter, deque
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Callable

from fusebench.cases import shape_str
from fusebench.env import git_commit
from fusebench.measure.timing import TimingSettings
from fusebench.runner.plan import Cell
from fusebench.store import Store, now

FAILED = ("mismatch", "error", "crashed", "timeout")
# Errors after which a process's CUDA context stays broken: every later cell would fail too.
STICKY_CUDA_ERRORS = ("illegal memory access", "device-side assert", "unspecified launch failure",
                      "misaligned address", "illegal instruction")


@dataclass
class RunOptions:
    timing: TimingSettings = field(default_factory=TimingSettings)
    isolate: bool = True
    cell_timeout: float = 900.0  # seconds; compiling with max-autotune can take minutes
    gpus: list[int] | None = None  # None: one worker on the default device
    plugins: list[str] = field(default_factory=list)
    seeds: tuple[int, ...] = (0, 1, 2)
    metrics: tuple[str, ...] = ()  # metric families beyond time and accuracy (fusebench/metrics/)
    db_path: str | None = None
    worker_log: str | None = None  # workers' stdout and stderr go here, not over the progress bar


# ---------------------------------------------------------------------------------------------
# The worker side.


def visible_device(gpu: int, inherited: str | None) -> str:
    """The CUDA_VISIBLE_DEVICES entry for worker GPU `gpu`: an index among the GPUs this process
    sees, so under an inherited CUDA_VISIBLE_DEVICES=2,3 (a scheduler's allocation) GPU 0 is "2",
    not the machine's first GPU (before session 8 it was: `CUDA_VISIBLE_DEVICES=3 fusebench run
    --gpus 0` measured on GPU 0, alongside whatever else ran there)."""
    entries = [e.strip() for e in inherited.split(",")] if inherited and inherited.strip() else None
    if entries is None:
        return str(gpu)
    if not 0 <= gpu < len(entries):
        raise ValueError(f"--gpus {gpu}: only {len(entries)} GPU(s) visible (CUDA_VISIBLE_DEVICES={inherited})")
    return entries[gpu]


def _worker_main(conn: Connection, gpu: int | None, opts: RunOptions) -> None:
    if gpu is not None:  # before CUDA is initialised
        os.environ["CUDA_VISIBLE_DEVICES"] = visible_device(gpu, os.environ.get("CUDA_VISIBLE_DEVICES"))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    if opts.worker_log:
        log = os.open(opts.worker_log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
    # Compiler advice (e.g. "online softmax disabled") would scroll the progress bar away.
    warnings.filterwarnings("ignore", category=UserWarning, module=r"torch\..*")
    from fusebench.cases import load_plugin
    from fusebench.runner.cell import measure_cell

    for path in opts.plugins:
        load_plugin(path)
    conn.send(("ready", None))
    while True:
        msg = conn.recv()
        if msg is None:
            return
        row = measure_cell(Cell(**msg), opts.timing, opts.seeds, opts.metrics, opts.db_path)
        conn.send(("done", row))
        if row["status"] == "error" and any(m in (row.get("reason") or "") for m in STICKY_CUDA_ERRORS):
            os._exit(3)  # the CUDA context is unusable: let the parent start a fresh worker


@dataclass
class _Worker:
    gpu: int | None
    proc: mp.process.BaseProcess
    conn: Connection
    group: deque = field(default_factory=deque)  # cells of the case this worker is on
    cell: Cell | None = None
    since: float = 0.0
    ready: bool = False


class Scheduler:
    def __init__(self, store: Store, run_id: int, opts: RunOptions,
                 on_cell: Callable[[Cell, dict | None], None] | None = None):
        self.store, self.run_id, self.opts = store, run_id, opts
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
        if not self.opts.isolate:
            return self._run_inline(cells)
        return self._run_isolated(cells)

    def _run_inline(self, cells: list[Cell]) -> None:
        from fusebench.runner.cell import measure_cell

        for cell in cells:
            self.on_cell(cell, None)
            self._record(cell, measure_cell(cell, self.opts.timing, self.opts.seeds, self.opts.metrics,
                                            self.opts.db_path))

    def _spawn(self, gpu: int | None) -> _Worker:
        ctx = mp.get_context("spawn")  # CUDA cannot be used in a forked child
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_worker_main, args=(child, gpu, self.opts), daemon=True)
        proc.start()
        child.close()
        return _Worker(gpu, proc, parent)

    def _replace(self, workers: list[_Worker], w: _Worker) -> _Worker:
        if w.proc.is_alive():
            w.proc.kill()
        w.proc.join(5)
        w.conn.close()
        fresh = self._spawn(w.gpu)
        fresh.group = w.group
        workers[workers.index(w)] = fresh
        return fresh

    def _run_isolated(self, cells: list[Cell]) -> None:
        # One group per case (and dtype), in the requested order.
        groups: deque = deque()
        for cell in cells:
            if not groups or (groups[-1][0].case, groups[-1][0].dtype) != (cell.case, cell.dtype):
                groups.append(deque())
            groups[-1].append(cell)
        gpus = self.opts.gpus if self.opts.gpus else [None]
        workers = [self._spawn(g) for g in gpus]
        try:
            while True:
                for w in workers:
                    if w.ready and w.cell is None:
                        self._dispatch(w, groups)
                if not groups and all(not w.group and w.cell is None for w in workers):
                    break  # nothing queued, nothing in flight
                self._wait(workers)
        finally:
            for w in workers:
                try:
                    w.conn.send(None)
                except (OSError, ValueError):
                    pass
            deadline = time.time() + 5
            for w in workers:
                w.proc.join(max(0.0, deadline - time.time()))
                if w.proc.is_alive():
                    w.proc.kill()

    def _dispatch(self, w: _Worker, groups: deque) -> None:
        if not w.group and groups:
            w.group = groups.popleft()
        if not w.group:
            return
        cell = w.group.popleft()
        w.cell, w.since = cell, time.time()
        self.on_cell(cell, None)
        w.conn.send(cell.as_dict())

    def _wait(self, workers: list[_Worker]) -> None:
        timeout = self.opts.cell_timeout
        ready = wait([w.conn for w in workers] + [w.proc.sentinel for w in workers], timeout=1.0)
        for w in list(workers):
            if w.conn in ready:
                try:
                    kind, payload = w.conn.recv()
                except (EOFError, OSError):
                    kind, payload = "dead", None
                if kind == "ready":
                    w.ready = True
                    continue
                if kind == "done":
                    cell, w.cell = w.cell, None
                    self._record(cell, payload)
                    continue
            if not w.proc.is_alive():
                code = w.proc.exitcode
                how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"
                if w.cell is not None:
                    cell, elapsed = w.cell, time.time() - w.since
                    self._record(cell, self._lost_row(cell, "crashed", f"worker process died ({how})", elapsed))
                    w.cell = None
                elif not w.ready:
                    raise RuntimeError(f"worker process failed to start ({how})")
                self._replace(workers, w)
            elif w.cell is not None and time.time() - w.since > timeout:
                cell = w.cell
                self._record(cell, self._lost_row(cell, "timeout", f"no result within {timeout:g} s; worker killed",
                                                  time.time() - w.since))
                w.cell = None
                self._replace(workers, w)
