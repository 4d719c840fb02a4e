"""The Python API: run a selection and get a pandas DataFrame, from a script or a notebook.

    import fusebench
    df = fusebench.run(["softmax"], impls=["eager", "inductor"], shapes="4096x4096")
    df = fusebench.run(["softmax"], shapes=[(256, 256), (1024, 4096)])

It takes what `fusebench run` takes, with the same defaults: the default implementations, the
default metrics, cells in worker processes.  Both build a RunRequest (runner/request.py); a
request is checked whole before the store is touched (_check: a new run's plan, or a resumed run's
missing cells), then measured (_execute).
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import socket
from typing import Callable, Sequence

import pandas as pd

from fusebench.cases import PluginError, load_plugin, plugin_record
from fusebench.env import best_device, collect
from fusebench.measure import load as machine_load
from fusebench.measure import reference as ref_workload
from fusebench.measure.timing import TimingSettings
from fusebench.metrics import parse_metrics
from fusebench.runner import interpreter, ray_backend
from fusebench.runner.modes import check_mode
from fusebench.runner.plan import Cell, ShapeSpec, not_planned, plan_cells, shape_spec_text
from fusebench.runner.request import (RunRequest, check_device, check_sizes, check_timeout, names, parse_gpus,
                                      run_mode, stored_request)
from fusebench.runner.scheduler import RETRIED, Scheduler, WorkerSettings
from fusebench.store import Heartbeat, Store, StoreError, check_writable, default_db_path, owner_alive
from fusebench.util import first_line, workers_skip_main


def _registered_here(cases: list[str] | None, impls: list[str] | None, plugins: list[str]) -> bool:
    """Whether the selection uses a case or an implementation registered in this process other than
    through a plugin file: a worker process could not see it."""
    from fusebench.cases import all_cases, get_case
    from fusebench.runner.plan import select_impls

    files = {os.path.abspath(p) for p in plugins}
    for case in [get_case(n) for n in cases] if cases else all_cases():
        if case.plugin is not None and case.plugin not in files:
            return True
    for impl in select_impls(impls, "cpu"):
        # a user's function (fusebench.implementation) is known by its own module, a class by its class's
        module = getattr(impl, "module", None) or type(impl).__module__
        if not module.startswith(("fusebench.", "fusebench_plugin_")):
            return True
    return False


def run(
    cases: str | Sequence[str] | None = None,
    impls: str | Sequence[str] | None = None,
    shapes: ShapeSpec = "quick",
    dtype: str | None = None,
    device: str | None = None,
    db: str | None = None,
    plugins: Sequence[str] = (),
    isolate: bool | None = None,
    timing: TimingSettings | None = None,
    cell_timeout: float = 900.0,
    gpus: str | Sequence[int] | None = None,
    resume: int | None = None,
    metrics: str | Sequence[str] | None = "default",
    on_cell: Callable[[Cell, dict | None], None] | None = None,
    on_plan: Callable[[int, int], None] | None = None,
    retry_failed: bool = False,
    ray: str | None = None,
    ray_gpu_kind: str | None = None,
    mode: str = "fwd",
    python: str | None = None,
) -> pd.DataFrame:
    """Measure cases x implementations x shapes; store every cell; return the run's rows.

    Takes what `fusebench run` takes: `impls` None for the default implementations, "all" for
    every one, or names; `shapes` "quick", "grid", "AxB,CxD" or a list of tuples such as
    [(256, 256)].  `isolate` (default: as the CLI, in worker processes) contains crashes and hangs;
    a selection with a case or implementation registered in this process (not from a plugin file)
    runs here, where it is known, unless `isolate=True` is asked for.

    `resume=N` measures the cells run N is missing, with its own selection and settings.  Its
    plugins must be given again in `plugins` (the same files: path and content hash are checked
    against what the run recorded); nothing the store names is imported.  `retry_failed` also
    measures again its `crashed` and `timeout` cells.

    `ray="local"` (a Ray instance started here), `"auto"` or a cluster address runs the cells on
    Ray actors, one per GPU (of kind `ray_gpu_kind` if given) or per CPU slot
    (fusebench.runner.ray_backend).

    `mode`: what each cell times: "fwd" (the forward), "bwd" (the backward alone, its forward run
    outside the timed call) or "fwd_bwd" (both); the training modes plan the differentiable cases
    only and check every input's gradient against float64 autograd (fusebench.runner.modes).

    `python`: run the workers under that interpreter (another PyTorch and Triton installed there),
    recording its versions (fusebench.runner.interpreter); a resume uses the one its run recorded.
    """
    request = RunRequest(cases=cases, impls=impls, shapes=shapes, dtype=dtype, device=device, mode=mode,
                         metrics=metrics, timing=timing, cell_timeout=cell_timeout, isolate=isolate, gpus=gpus,
                         plugins=tuple(plugins), db=db, resume=resume, retry_failed=retry_failed, ray=ray,
                         ray_gpu_kind=ray_gpu_kind, python=python)
    return run_request(request, on_cell, on_plan)


def run_request(request: RunRequest, on_cell: Callable[[Cell, dict | None], None] | None = None,
                on_plan: Callable[[int, int], None] | None = None) -> pd.DataFrame:
    """Measure `request` (fusebench.run builds one from its keywords, the CLI from its flags); see run().
    `on_plan(run_id, cells)` is called once the run is stored, `on_cell(cell, row)` as each cell
    starts (row None) and ends."""
    return _execute(_check(request), on_cell, on_plan)


@dataclasses.dataclass
class _Checked:
    """A request checked whole, and what measuring it needs: nothing is stored yet."""

    request: RunRequest  # every field in its resolved form
    stored: dict  # the request as the run stores it (a resume: the run's own record)
    todo: list[Cell]
    plugins: list[dict]  # the plugin files' records (path, sha256)
    store: Store  # opened for writing
    cluster: ray_backend.Cluster | None = None  # connected where the cells run on Ray actors
    interp: interpreter.Interpreter | None = None  # the workers' interpreter (--python)
    seen: dict | None = None  # a resume: the run's row as read when checking it
    skipped: dict = dataclasses.field(default_factory=dict)  # implementations a default run leaves out


def _check(request: RunRequest) -> _Checked:
    """Check the request's options, then its plan (a new run) or the run it resumes; connect to
    Ray and open the store only once everything holds.  Raises ValueError, PluginError or
    StoreError with one line; a refused request stores nothing."""
    cell_timeout = check_timeout(request.cell_timeout)
    gpu_list = parse_gpus(request.gpus)
    path = os.path.abspath(request.db or default_db_path())
    check_writable(path)  # a store that cannot take the run is refused before anything runs
    records = [plugin_record(p) for p in request.plugins]
    request = dataclasses.replace(request, cases=names(request.cases), impls=names(request.impls),
                                  cell_timeout=cell_timeout, gpus=gpu_list, db=path,
                                  plugins=tuple(r["path"] for r in records))
    cluster = None
    try:  # a Ray cluster connected while the request is checked is released on any refusal
        if request.resume is None:  # validate the whole request before the store is touched
            request, stored, todo, skipped, cluster = _check_new(request, records)
            seen = None
        else:
            request, stored, todo, seen = _check_resume(request, records)
            skipped = {}
        if request.ray is not None and cluster is None:  # a resume: the run's own device
            cluster = ray_backend.open_cluster(request.ray, request.ray_gpu_kind, stored.get("device"), request.gpus)
        isolate = request.isolate
        if isolate is None:
            isolate = not _registered_here(request.cases, request.impls, list(request.plugins))
        interp = interpreter.for_run(request.python, stored, seen, isolate=isolate, ray=request.ray)
        run_device = (cluster.device if cluster else None) or request.device or stored.get("device") or "cpu"
        request = dataclasses.replace(request, isolate=isolate, timing=_fixed_threads(request.timing, run_device))
        store = Store.open(path)
    except BaseException:
        ray_backend.disconnect(cluster)
        raise
    return _Checked(request, stored, todo, records, store, cluster, interp, seen, skipped)


def _check_new(request: RunRequest, records: list[dict]):
    """A new run's request: (the request resolved, its stored form, its cells, the implementations
    a default run leaves out, the Ray cluster where it runs on one)."""
    if request.retry_failed:
        raise ValueError("--retry-failed applies to --resume")
    mode = check_mode(request.mode)
    for r in records:
        load_plugin(r["path"], r["sha256"])
    cluster = None
    if request.ray is None:
        device = check_device(request.device or best_device())
    else:  # connect before the store is touched: a cluster that cannot serve the run stores nothing
        cluster = ray_backend.open_cluster(request.ray, request.ray_gpu_kind, request.device, request.gpus)
        device = cluster.device
    try:
        metrics = request.metrics
        metrics = parse_metrics(metrics) if isinstance(metrics, str) or metrics is None else tuple(metrics)
        shapes = shape_spec_text(request.shapes)
        if not any(s.strip() for s in shapes.split(",")):
            raise ValueError(f"--shapes {shapes!r} names no shape: give quick, grid or e.g. 4096x4096")
        request = dataclasses.replace(request, mode=mode, device=device, metrics=metrics, shapes=shapes,
                                      timing=request.timing or TimingSettings.for_shapes(shapes))
        todo = plan_cells(request.cases, request.impls, shapes, request.dtype, device, mode)
        if not todo:
            raise ValueError("the request selects no cells")
        check_sizes(todo)
    except BaseException:
        ray_backend.disconnect(cluster)
        raise
    skipped = not_planned(device, request.cases) if not request.impls else {}
    return request, request.stored(records), todo, skipped, cluster


def _check_resume(request: RunRequest, records: list[dict]):
    """A resumed run: (the request with the run's timing and metrics, the run's stored request, the
    cells it is missing, its row as read).  The store is read only."""
    with Store.open(request.db, create=False) as ro:  # read-only until every check has passed
        seen = ro.run_info(request.resume)
        stored = stored_request(seen)
        _check_plugins(request.resume, stored.get("plugins") or [], records)
        live = owner_alive(seen)
        if live:
            raise StoreError(f"{live}; not resuming")
        for r in records:  # the user's own files, checked against the record
            load_plugin(r["path"], r["sha256"])
        todo, timing, metrics = _resume_plan(ro, request.resume, request.timing,
                                             RETRIED if request.retry_failed else ())
    return dataclasses.replace(request, timing=timing, metrics=metrics), stored, todo, seen


def _execute(checked: _Checked, on_cell, on_plan) -> pd.DataFrame:
    """Store the run (or claim the resumed one), measure its cells, and return its rows."""
    request, store, cluster = checked.request, checked.store, checked.cluster
    try:
        if request.resume is None:
            device = request.device
            env = ray_backend.run_env(device) if cluster else checked.interp.env if checked.interp else collect(device)
            run_id = store.start_run(env, checked.stored, request.timing.as_dict())
        else:
            run_id = request.resume
            store.claim_run(run_id, checked.seen)
        if on_plan:
            on_plan(run_id, len(checked.todo))
        workers = WorkerSettings(plugin_hashes={r["path"]: r["sha256"] for r in checked.plugins},
                                 interpreter=checked.interp)
        status = "interrupted"
        try:
            watcher = _RunWatch(store, run_id, checked.stored.get("device") or request.device, request.timing, cluster)
            watcher.sample("start")
            with Heartbeat(store.path, run_id), workers_skip_main(), _threads_kept():
                if cluster:
                    ray_backend.RayScheduler(store, run_id, request, cluster, on_cell).run(checked.todo)
                else:
                    Scheduler(store, run_id, request, on_cell, workers).run(checked.todo)
                watcher.sample("end")
            status = "done"
        finally:
            store.finish_run(run_id, status)
        df = _with_run(store, run_id)
        df.attrs.update(not_planned=checked.skipped, mode=run_mode(checked.stored))
        return df
    finally:
        store.close()
        ray_backend.disconnect(cluster)


def _fixed_threads(timing: TimingSettings, device: str) -> TimingSettings:
    """The run's timing settings with torch's thread count fixed: as asked, else the device's
    default (measure.load.default_threads: one on the CPU, local workers and Ray actors alike)."""
    import dataclasses

    if timing.threads:
        return timing
    return dataclasses.replace(timing, threads=machine_load.default_threads(device))


class _RunWatch:
    """Samples the machine's load and times the reference workload at a run's start and end,
    appending to what the run holds already (a resumed run adds its own samples)."""

    def __init__(self, store: Store, run_id: int, device: str, timing: TimingSettings, cluster):
        self.store, self.run_id, self.device, self.timing = store, run_id, device, timing
        info = store.run_info(run_id)
        self.load = _json_dict(info.get("load")) or {"host": socket.gethostname(), "samples": []}
        self.reference = _json_dict(info.get("reference")) or ref_workload.new_record(device, timing)
        if cluster is not None:  # the actors, perhaps on other hosts, measure the cells
            self.reference["not_available"] = ("the cells ran on Ray actors: the reference workload is timed "
                                               "only where this process measures the cells")
        self.cluster = cluster

    def sample(self, at: str) -> None:
        self.load.setdefault("samples", []).append({"at": at, **machine_load.sample()})
        if self.cluster is None:
            try:
                self.reference.setdefault("samples", []).append(ref_workload.measure(self.device, self.timing, at))
            except Exception as exc:  # the run goes on; compare then says why it cannot normalise
                self.reference["not_available"] = f"timing the reference workload failed: {first_line(exc)}"
        with self.store.con:
            self.store.con.execute("UPDATE runs SET load=?, reference=? WHERE id=?",
                                   (json.dumps(self.load), json.dumps(self.reference), self.run_id))


def _json_dict(text) -> dict | None:
    try:
        value = json.loads(text) if isinstance(text, str) and text else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


@contextlib.contextmanager
def _threads_kept():
    """The caller's torch thread count as it was, after cells measured in this process set theirs."""
    import torch

    before = torch.get_num_threads()
    try:
        yield
    finally:
        machine_load.apply_threads(before)


def _with_run(store: Store, run_id: int) -> pd.DataFrame:
    """A run's rows as results() returns them: each with the run's identity, and in attrs the run,
    the store and the warnings about the machine's load while it measured."""
    from fusebench.report.export import with_run_columns

    info = store.run_info(run_id)
    df = with_run_columns(store.cells(run_id), info)
    df.attrs.update(run_id=run_id, db=store.path, warnings=machine_load.run_warnings(info.get("load"), df))
    return df


def _check_plugins(run_id: int, recorded: list, given: list[dict]) -> None:
    """The plugins given to a resume must be exactly the ones run `run_id` recorded: the same
    absolute paths with the same content (sha256).  A record without a hash (a run stored before
    hashes were recorded) is matched by its absolute path alone."""
    given_by_path = {g["path"]: g["sha256"] for g in given}
    wanted: dict[str, str | None] = {}
    for entry in recorded:
        if isinstance(entry, str):
            wanted[os.path.abspath(entry)] = None
        elif isinstance(entry, dict) and isinstance(entry.get("path"), str):
            wanted[entry["path"]] = entry.get("sha256") if isinstance(entry.get("sha256"), str) else None
        else:
            raise StoreError(f"run {run_id}'s stored plugin list is unreadable; it cannot be resumed")
    for path, sha in wanted.items():
        if path not in given_by_path:
            raise ValueError(f"run {run_id} was measured with plugin {path}; give it with --plugin to resume "
                             f"(the store's plugins are never imported on its say-so)")
        if sha is not None and given_by_path[path] != sha:
            raise PluginError(f"plugin {path} is not the file run {run_id} was measured with (sha256 "
                              f"{given_by_path[path][:12]}, recorded {sha[:12]}); not resuming")
    extra = [p for p in given_by_path if p not in wanted]
    if extra:
        raise ValueError(f"plugin {extra[0]} is not one run {run_id} was measured with; not resuming")


def _resume_plan(store: Store, run_id: int, timing: TimingSettings | None, redo: tuple[str, ...] = ()):
    """The cells a stored run is missing (and those whose status is in `redo`), with the run's own
    timing settings and metrics.  Writes nothing; the run's cases must be registered (built-in,
    or from the plugins the caller checked and loaded)."""
    info = store.run_info(run_id)
    request = stored_request(info)
    try:
        cells = plan_cells(request.get("cases"), request.get("impls"), request.get("shapes", "quick"),
                           request.get("dtype"), request["device"], run_mode(request))
        stored_timing = json.loads(info["timing"] or "{}")
        # A run stored before flush_mode existed flushed with ordinary stores, one stored before
        # warm_call_max_bytes had no warm call, one before warm_call_discards kept the warm call's
        # outputs in L2: resume each the same way.
        timing = timing or TimingSettings(**{"flush_mode": "zero", "warm_call_max_bytes": 0,
                                             "warm_call_discards": False, **stored_timing})
        metrics = tuple(str(m) for m in request.get("metrics") or ())
    except (KeyError, TypeError, ValueError) as exc:
        raise StoreError(f"run {run_id}'s stored request cannot be resumed: {first_line(exc)}") from None
    done = store.done_keys(run_id, redo)
    return [c for c in cells if c.key() not in done], timing, metrics


def results(run_id: int | None = None, db: str | None = None, raw: bool = False,
            table: str | None = None) -> pd.DataFrame:
    """The rows of one run (default: the latest) as a DataFrame, each with the run's identity (run
    id, device, torch, Triton, commit) and a numeric column per shape axis (docs/columns.md).
    `raw=True`: the stored rows alone.

    An audit's rows are those of one of its tables (`table`): "regions" (the default: the memory-bound
    regions, largest gap first), "kernels" or "steps" (one row per compile mode), each with the run
    id, model, mode and dtype; `attrs["audit"]` holds the whole AuditResult."""
    store = Store.open(db or default_db_path(), create=False)
    try:
        if raw:
            return store.cells(run_id)
        rid = store.latest_run() if run_id is None else run_id
        from fusebench.audit.store import is_audit

        if is_audit(store, rid):
            return _audit_rows(store, rid, table or "regions")
        if table not in (None, "cells"):
            raise ValueError(f"run {rid} is a run of cells: its table is 'cells', not {table!r}")
        return _with_run(store, rid)
    finally:
        store.close()


AUDIT_TABLES = ("regions", "kernels", "steps")


def _audit_rows(store: Store, run_id: int, table: str) -> pd.DataFrame:
    from fusebench.audit.store import load

    if table not in AUDIT_TABLES:
        raise ValueError(f"run {run_id} is an audit: table is one of {', '.join(AUDIT_TABLES)}, not {table!r}")
    result = load(store, run_id)
    rows = result.opportunities() if table == "regions" else getattr(result, table)
    df = pd.DataFrame([dataclasses.asdict(r) for r in rows])
    for i, (name, value) in enumerate((("run_id", run_id), ("model", result.model), ("mode", result.mode),
                                       ("dtype", result.dtype))):
        df.insert(i, name, value)
    df.attrs.update(run_id=run_id, db=store.path, audit=result)
    return df


__all__ = ["run", "run_request", "RunRequest", "results", "StoreError"]
