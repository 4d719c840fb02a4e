"""What `fusebench run` shows around the measurement: its progress (a bar on a terminal, plain lines
in a log), the plan of a dry run with an estimated duration, and how to resume an interrupted run."""
from __future__ import annotations

import math
import os
import statistics
import time

from rich.table import Table

from fusebench.util import as_text, plain

# A dry run's estimate for a cell with no earlier cell of its case and implementation on this
# device, in seconds: about what a quick cell takes with warm caches.
DEFAULT_CELL_S = 1.0
# Plain progress lines: about this many over a run, and one at least this often (seconds).
PLAIN_LINES = 20
PLAIN_EVERY_S = 60.0


def _hms(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


class RunProgress:
    """The run's progress on `console` (stderr): rich's bar on a terminal; where the output is not a
    terminal (a CI log), one plain line every few cells with the counts and the elapsed time."""

    def __init__(self, console, resume: bool):
        self.console, self.resume = console, resume
        self.run_id: int | None = None
        self.total = self.done = 0
        self.counts: dict[str, int] = {}
        self.started = self.last_line = time.time()
        self.bar = None
        self.task = None
        self.step = 1

    def plan(self, run_id: int, n: int) -> None:
        self.run_id, self.total = run_id, n
        self.started = self.last_line = time.time()
        self.console.print(f"run {run_id}: {n} cells{' to resume' if self.resume else ''}", highlight=False)
        if self.console.is_terminal:
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                                       TimeRemainingColumn)

            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                TextColumn("{task.fields[counts]}"), TimeElapsedColumn(), TextColumn("eta"),
                                TimeRemainingColumn(), console=self.console, transient=False)
            self.task = self.bar.add_task("starting", total=n, counts="")
            self.bar.start()  # only now: a request refused before this prints its one line alone
        else:
            self.step = max(1, math.ceil(n / PLAIN_LINES))

    def _counts(self) -> str:
        return " ".join(f"{k}:{v}" for k, v in sorted(self.counts.items()))

    def cell(self, cell, row) -> None:
        from fusebench.cases import shape_str
        from fusebench.runner.cell import dtype_that_runs

        what = f"{cell.case} {cell.impl} {shape_str(cell.shape)} {dtype_that_runs(cell)}"
        if row is None:
            if self.bar is not None:
                self.bar.update(self.task, description=as_text(what))
            return
        self.done += 1
        self.counts[row["status"]] = self.counts.get(row["status"], 0) + 1
        if self.bar is not None:
            self.bar.update(self.task, advance=1, counts=as_text(self._counts()))
            return
        now = time.time()
        if self.done % self.step == 0 or self.done == self.total or now - self.last_line >= PLAIN_EVERY_S:
            self.last_line = now
            self.console.print(f"run {self.run_id}: {self.done}/{self.total} cells ({self._counts()}), "
                               f"{_hms(now - self.started)} elapsed; last: {plain(what)}",
                               highlight=False, markup=False, soft_wrap=True)

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def resume_hint(run_id: int, request) -> str:
    """The command that completes run `run_id` of `request` (a RunRequest, as the CLI built it)."""
    words = ["fusebench", "run", "--resume", str(run_id)]
    if request.db:
        words += ["--db", request.db]
    for p in request.plugins:
        words += ["--plugin", p]
    if request.ray is not None:
        words += ["--ray", request.ray] if request.ray != "local" else ["--ray"]
    return " ".join(words)


# ---------------------------------------------------------------------------------------------
# --dry-run


def device_name(device: str) -> str:
    """The name a run stores for this device (env.collect's device_name)."""
    import platform

    if device.startswith("cuda"):
        import torch

        return torch.cuda.get_device_name(device)
    return platform.processor() or platform.machine()


def earlier_seconds(db: str, name: str, device: str) -> tuple[dict, dict, str | None]:
    """Median `seconds` of the store's earlier cells on device `name`: by (case, impl, shape, dtype,
    mode) and by (case, impl).  The store is read, never written (a store that cannot be read so
    gives no estimates, and the reason)."""
    from fusebench.store import Store, StoreError

    if not os.path.exists(db):
        return {}, {}, None
    try:
        with Store.open(db, create=False, recover=False) as store:
            have = {r[1] for r in store.con.execute("PRAGMA table_info(cells)")}
            where = "COALESCE(c.device_name, r.device_name)" if "device_name" in have else "r.device_name"
            mode = "COALESCE(c.mode, 'fwd')" if "mode" in have else "'fwd'"
            dtype = "COALESCE(c.requested_dtype, c.dtype)" if "requested_dtype" in have else "c.dtype"
            rows = store.con.execute(
                f"SELECT c.case_name, c.impl, c.shape, {dtype}, {mode}, c.seconds FROM cells c "
                f"JOIN runs r ON r.id = c.run_id WHERE {where} = ? AND c.device = ? "
                f"AND typeof(c.seconds) IN ('integer', 'real')", (name, "cuda" if device.startswith("cuda") else "cpu")
            ).fetchall()
    except (StoreError, OSError) as exc:
        return {}, {}, str(exc)
    exact: dict[tuple, list] = {}
    by_impl: dict[tuple, list] = {}
    for case, impl, shape, dt, md, seconds in rows:
        exact.setdefault((case, impl, shape, dt, md), []).append(seconds)
        by_impl.setdefault((case, impl), []).append(seconds)
    median = lambda d: {k: statistics.median(v) for k, v in d.items()}  # noqa: E731
    return median(exact), median(by_impl), None


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def dry_run(console, todo, device: str, db: str, ray: str | None) -> None:
    """Print the plan of `todo` (cells per case and implementation, the total) and an estimated
    duration, labelled as one."""
    from fusebench.cases import shape_str

    name = device_name(device)
    exact, by_impl, unreadable = earlier_seconds(db, name, device)
    per_case: dict[str, dict[str, int]] = {}
    estimate, from_exact, from_impl, defaulted = 0.0, 0, 0, 0
    for c in todo:
        per_case.setdefault(c.case, {})
        per_case[c.case][c.impl] = per_case[c.case].get(c.impl, 0) + 1
        key = (c.case, c.impl, shape_str(c.shape), c.dtype, c.mode)
        if key in exact:
            estimate, from_exact = estimate + exact[key], from_exact + 1
        elif (c.case, c.impl) in by_impl:
            estimate, from_impl = estimate + by_impl[(c.case, c.impl)], from_impl + 1
        else:
            estimate, defaulted = estimate + DEFAULT_CELL_S, defaulted + 1
    where = f"{device} ({name})" + (", or the Ray cluster's device" if ray is not None else "")
    console.print(f"dry run: nothing is measured and no store is written; the plan on {plain(where)}, "
                  f"mode {todo[0].mode}:", highlight=False, markup=False, soft_wrap=True)
    t = Table(title_justify="left")
    for col, just in (("case", "left"), ("cells", "right"), ("implementations (cells)", "left")):
        t.add_column(col, justify=just, overflow="fold")
    for case, impls in per_case.items():
        t.add_row(as_text(case), str(sum(impls.values())), as_text(", ".join(f"{i} {n}" for i, n in impls.items())))
    console.print(t)
    sources = []
    if from_exact:
        sources.append(f"{from_exact} cell(s) at the median seconds of the same cell in earlier runs")
    if from_impl:
        sources.append(f"{from_impl} at the median seconds of earlier cells of their case and implementation")
    if defaulted:
        sources.append(f"{defaulted} at a default of {DEFAULT_CELL_S:g} s a cell, for want of earlier cells of their "
                       f"case and implementation")
    if unreadable:
        where = f"the store could not be read for estimates: {unreadable}"
    elif not os.path.exists(db):
        where = f"no store at {db} yet"
    else:
        where = f"earlier runs on {name} in {db}"
    console.print(f"total: {len(todo)} cells; estimated duration ~{_duration(estimate)} (an estimate, not a "
                  f"measurement: {'; '.join(sources)}; {where})", highlight=False, markup=False, soft_wrap=True)
