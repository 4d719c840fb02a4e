"""The Python API: run a selection and get a pandas DataFrame, from a script or a notebook.

    import fusebench
    df = fusebench.run(["softmax"], impls=["eager", "inductor"], shapes="4096x4096")
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
from fusebench.runner import ray_backend
from fusebench.runner.plan import Cell, plan_cells
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


def run(
    cases: Sequence[str] | None = None,
    impls: Sequence[str] | None = None,
    shapes: str = "quick",
    dtype: str | None = None,
    device: str | None = None,
    db: str | None = None,
    plugins: Sequence[str] = (),
    isolate: bool = False,
    timing: TimingSettings | None = None,
    cell_timeout: float = 900.0,
    gpus: str | Sequence[int] | None = None,
    resume: int | None = None,
    metrics: str | Sequence[str] | None = "none",
    on_cell: Callable[[Cell, dict | None], None] | None = None,
    on_plan: Callable[[int, int], None] | None = None,
    ray: str | None = None,
    ray_gpu_kind: str | None = None,
) -> pd.DataFrame:
    """Measure cases x implementations x shapes; store every cell; return the run's rows.

    `isolate=True` runs each cell in a worker process (crash and hang containment, several GPUs);
    the default runs in this process, which also sees cases registered interactively.
    `ray="local"` (a Ray instance started here), `"auto"` or a cluster address runs the cells on
    Ray actors, one per GPU (of kind `ray_gpu_kind` if given) or per CPU slot
    (fusebench.runner.ray_backend).
    """
    plugins = list(plugins)
    for path in plugins:
        load_plugin(path)
    gpu_list = _parse_gpus(gpus)
    cluster = None
    if ray is not None and resume is None:  # before the store is touched
        cluster = ray_backend.open_cluster(ray, ray_gpu_kind, device, gpus)
        device = cluster.device
    if resume is None:  # validate the whole request before the store is touched
        device = device if cluster else _check_device(device or best_device())
        timing = timing or TimingSettings()
        metric_names = parse_metrics(metrics) if isinstance(metrics, str) or metrics is None else tuple(metrics)
        todo = plan_cells(list(cases) if cases else None, list(impls) if impls else None, shapes, dtype, device)
        request = dict(cases=list(cases) if cases else None, impls=list(impls) if impls else None,
                       shapes=shapes, dtype=dtype, device=device, plugins=plugins, metrics=list(metric_names))
    try:
        store = Store.open(db or default_db_path())
    except BaseException:
        ray_backend.disconnect(cluster)
        raise
    try:
        if ray is not None and resume is not None:
            resumed_device = json.loads(store.run_info(resume)["request"] or "{}").get("device")
            cluster = ray_backend.open_cluster(ray, ray_gpu_kind, resumed_device, gpus)
        if resume is None:
            run_id = store.start_run(ray_backend.run_env(device) if cluster else collect(device), request, timing.as_dict())
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
            if cluster:
                ray_backend.RayScheduler(store, run_id, opts, cluster, on_cell).run(todo)
            else:
                Scheduler(store, run_id, opts, on_cell).run(todo)
            status = "done"
        finally:
            store.finish_run(run_id, status)
        df = store.cells(run_id)
        df.attrs.update(run_id=run_id, db=store.path)
        return df
    finally:
        store.close()
        ray_backend.disconnect(cluster)


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


def results(run_id: int | None = None, db: str | None = None) -> pd.DataFrame:
    """The rows of one run (default: the latest) as a DataFrame."""
    store = Store.open(db or default_db_path(), create=False)
    try:
        return store.cells(run_id)
    finally:
        store.close()


__all__ = ["run", "results", "StoreError"]
