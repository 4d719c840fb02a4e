"""The Python API: run a selection and get a pandas DataFrame, from a script or a notebook.

    import fusebench
    df = fusebench.run(["softmax"], impls=["eager", "inductor"], shapes="4096x4096")
    df = fusebench.run(["softmax"], shapes=[(256, 256), (1024, 4096)])

It takes what `fusebench run` takes, with the same defaults: the default implementations, the
default metrics, cells in worker processes.
"""
from __future__ import annotations

import json
import os
from typing import Callable, Sequence

import pandas as pd

from fusebench.cases import load_plugin
from fusebench.env import best_device, collect
from fusebench.measure.timing import TimingSettings
from fusebench.metrics import parse_metrics
from fusebench.runner.plan import Cell, ShapeSpec, not_planned, plan_cells, shape_spec_text
from fusebench.runner.scheduler import RunOptions, Scheduler, visible_device
from fusebench.store import Store, StoreError, default_db_path


def _parse_gpus(gpus: str | Sequence[int] | None) -> list[int] | None:
    if gpus is None or gpus == "":
        return None
    if isinstance(gpus, str):
        if gpus == "all":
            import torch

            n = torch.cuda.device_count()
            if n == 0:
                raise ValueError("--gpus all: no CUDA GPU is visible")
            return list(range(n))
        try:
            gpus = [int(g) for g in gpus.split(",")]
        except ValueError:
            raise ValueError(f"malformed --gpus {gpus!r}: expected 'all' or indices like 0,1") from None
    for g in gpus:  # indices among the visible GPUs: fail here, not in every worker
        visible_device(g, os.environ.get("CUDA_VISIBLE_DEVICES"))
    return list(gpus)


def _names(value: str | Sequence[str] | None) -> list[str] | None:
    """'a,b' or ['a', 'b'] -> ['a', 'b']; None or empty -> None."""
    if value is None:
        return None
    items = value.split(",") if isinstance(value, str) else list(value)
    names = [n.strip() for n in items if n and n.strip()]
    return names or None


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
        module = type(impl).__module__
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
) -> pd.DataFrame:
    """Measure cases x implementations x shapes; store every cell; return the run's rows.

    Takes what `fusebench run` takes: `impls` None for the default implementations, "all" for
    every one, or names; `shapes` "quick", "grid", "AxB,CxD" or a list of tuples such as
    [(256, 256)].  `isolate` (default: as the CLI, in worker processes) contains crashes and hangs;
    a selection with a case or implementation registered in this process (not from a plugin file)
    runs here, where it is known, unless `isolate=True` is asked for.
    """
    plugins = list(plugins)
    for path in plugins:
        load_plugin(path)
    cases, impls = _names(cases), _names(impls)
    gpu_list = _parse_gpus(gpus)
    skipped: dict[str, str] = {}
    if resume is None:  # validate the whole request before the store is touched
        device = _check_device(device or best_device())
        timing = timing or TimingSettings()
        metric_names = parse_metrics(metrics) if isinstance(metrics, str) or metrics is None else tuple(metrics)
        shapes = shape_spec_text(shapes)
        todo = plan_cells(cases, impls, shapes, dtype, device)
        skipped = not_planned(device, cases) if not impls else {}
        request = dict(cases=cases, impls=impls, shapes=shapes, dtype=dtype, device=device, plugins=plugins,
                       metrics=list(metric_names))
    if isolate is None:
        isolate = not _registered_here(cases, impls, plugins)
    store = Store.open(db or default_db_path())
    try:
        if resume is None:
            run_id = store.start_run(collect(device), request, timing.as_dict())
        else:
            run_id = resume
            todo, timing, metric_names = _resume_plan(store, resume, timing, plugins)
        if on_plan:
            on_plan(run_id, len(todo))
        opts = RunOptions(timing=timing, isolate=isolate, cell_timeout=cell_timeout, gpus=gpu_list,
                          plugins=plugins, metrics=metric_names, db_path=store.path,
                          worker_log=store.path + ".log" if isolate else None)
        status = "interrupted"
        try:
            Scheduler(store, run_id, opts, on_cell).run(todo)
            status = "done"
        finally:
            store.finish_run(run_id, status)
        df = store.cells(run_id)
        df.attrs.update(run_id=run_id, db=store.path, not_planned=skipped)
        return df
    finally:
        store.close()


def _check_device(device: str) -> str:
    if device not in ("cpu", "cuda") and not device.startswith("cuda:"):
        raise ValueError(f"unknown device {device!r}; choose cpu or cuda")
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise ValueError("--device cuda: no CUDA GPU is visible")
    return device


def _resume_plan(store: Store, run_id: int, timing: TimingSettings | None, plugins: list[str]):
    """The cells a stored run is missing, with the run's own timing settings and metrics.
    Loads the run's plugin files (appending them to `plugins`, for the workers)."""
    info = store.run_info(run_id)
    request = json.loads(info["request"] or "{}")
    for path in request.get("plugins", []):
        if path not in plugins:
            load_plugin(path)
            plugins.append(path)
    cells = plan_cells(request.get("cases"), request.get("impls"), request.get("shapes", "quick"),
                       request.get("dtype"), request["device"])
    done = store.done_keys(run_id)
    with store.con:
        store.con.execute("UPDATE runs SET status='running', finished=NULL WHERE id=?", (run_id,))
    # A run stored before flush_mode existed flushed with ordinary stores, one stored before
    # warm_call_max_bytes had no warm call, one before warm_call_discards kept the warm call's
    # outputs in L2: resume each the same way.
    timing = timing or TimingSettings(**{"flush_mode": "zero", "warm_call_max_bytes": 0, "warm_call_discards": False,
                                         **json.loads(info["timing"] or "{}")})
    return [c for c in cells if c.key() not in done], timing, tuple(request.get("metrics") or ())


def results(run_id: int | None = None, db: str | None = None, raw: bool = False) -> pd.DataFrame:
    """The rows of one run (default: the latest) as a DataFrame, each with the run's identity (run
    id, device, torch, Triton, commit) and a numeric column per shape axis (docs/columns.md).
    `raw=True`: the stored rows alone."""
    from fusebench.report.export import with_run_columns

    store = Store.open(db or default_db_path(), create=False)
    try:
        rows = store.cells(run_id)
        if raw:
            return rows
        return with_run_columns(rows, store.run_info(int(rows["run_id"].iloc[0]) if len(rows) else
                                                     (run_id or store.latest_run())))
    finally:
        store.close()


__all__ = ["run", "results", "StoreError"]
