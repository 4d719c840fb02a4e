"""Measuring an audit: each backend of the request in a worker process of its own, then the
comparison of each compiled backend with the baseline.

A backend's worker builds the model, compiles it (cold, with empty compiler caches, then warm, then
once more with Inductor's provenance tracking to learn what each kernel computes), times steps,
profiles one, and returns its rows.  A backend that crashes, runs out of memory or hangs past the
request's timeout is recorded so, and the audit goes on with the next.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import time
import traceback
from typing import Callable

from fusebench.audit.request import AuditRequest
from fusebench.audit.result import AuditResult, KernelRow, RegionRow, StepRow
from fusebench.util import first_line


def _clear_in_memory() -> None:
    from fusebench.metrics.compile import _clear_in_memory as clear

    clear()


def _compile(module, mode: str):
    import torch

    return torch.compile(module, mode=None if mode == "default" else mode)


def _dynamo_counts() -> dict:
    from torch._dynamo.utils import counters

    return {"graphs": int(counters["stats"]["unique_graphs"]),
            "graph_breaks": int(sum(counters["graph_break"].values()))}


def _compile_times(built, request: AuditRequest, mode: str, device: str) -> tuple[float, float]:
    """(cold, warm) seconds: first step minus a steady step, with empty compiler caches and then
    with the caches the cold compile filled."""
    import torch

    from fusebench.audit.step import Step, first_step_s, wall_us
    from fusebench.metrics.compile import _fresh_cache

    with _fresh_cache():
        torch._dynamo.reset()
        _clear_in_memory()
        step = Step(built.module, _compile(built.module, mode), built.inputs, request.mode, built.loss, request.seed)
        cold = first_step_s(step, device)
        steady = wall_us(step, device, steps=3) / 1e6
        torch._dynamo.reset()
        _clear_in_memory()
        step = Step(built.module, _compile(built.module, mode), built.inputs, request.mode, built.loss, request.seed)
        warm = first_step_s(step, device)
    torch._dynamo.reset()
    _clear_in_memory()
    return max(cold - steady, 0.0), max(warm - steady, 0.0)


def measure_backend(request: AuditRequest, backend: str, ceilings: dict) -> dict:
    """One backend's step, kernels and regions (as dicts).  Raises on a failure of the model."""
    import torch

    from fusebench.audit import models
    from fusebench.audit.analysis import analyse
    from fusebench.audit.profile import profile_step
    from fusebench.audit.step import Step, device_time_us, median, peak_memory_bytes, wall_us
    from fusebench.fusion.capture import InductorCapture

    device = request.device
    for path in request.plugins:
        from fusebench.cases import load_plugin

        load_plugin(path)
    if device == "cpu":
        import torch._inductor.config as inductor_config

        inductor_config.cpp.enable_kernel_profile = True  # each C++ kernel shows in the profiler
    spec = models.get_model(request.model)
    built = models.build(spec, request.sizes, request.dtype, device, request.seed)
    row = StepRow(backend)
    notes: list[str] = []
    graphs = []
    if backend == "eager":
        fn = built.module
    else:
        mode = backend.removeprefix("inductor-") if backend != "inductor" else "default"
        if request.compile_time:
            row.compile_cold_s, row.compile_warm_s = _compile_times(built, request, mode, device)
        else:
            notes.append("compile times not measured (asked not to)")
        torch._dynamo.reset()
        before = _dynamo_counts()
        with InductorCapture(detail=True) as cap:
            fn = _compile(built.module, mode)
            Step(built.module, fn, built.inputs, request.mode, built.loss, request.seed)()
        graphs = cap.graphs
        after = _dynamo_counts()
        row.graphs = after["graphs"] - before["graphs"]
        row.graph_breaks = after["graph_breaks"] - before["graph_breaks"]
        if row.graphs == 0:
            raise RuntimeError("torch.compile produced no graph: the step ran eagerly")
    step = Step(built.module, fn, built.inputs, request.mode, built.loss, request.seed)
    times = device_time_us(step, device)
    row.gpu_time_us = median(times)
    row.wall_us = wall_us(step, device)
    row.peak_mem_bytes = peak_memory_bytes(step, device)
    if backend != "eager":
        row.recompiles = _dynamo_counts()["graphs"] - before["graphs"] - row.graphs
    kernels, row.profiled_us = profile_step(step, device)
    if kernels:
        row.kernel_time_us = sum(k.time_us for k in kernels)
    row.kernels = len(kernels)
    if not device.startswith("cuda"):
        notes.append("CPU: times are host times; a kernel is a generated C++ kernel, an ATen operator a compiled "
                     "graph calls, or a top-level ATen operator")
    analysis = analyse(backend, kernels, graphs, row.gpu_time_us, ceilings.get("copy_gbps"),
                       ceilings.get("matmul_tflops"))
    notes += analysis.notes
    if request.catalog and backend != "eager":
        _time_catalog(analysis.regions, built, device)
    return {"step": row, "kernels": analysis.kernels, "regions": analysis.regions, "notes": notes,
            "source": built.source, "source_note": built.note}


CATALOG_TOP = 6  # regions, by gap, whose matching case is timed


def _time_catalog(regions: list[RegionRow], built, device: str) -> None:
    """Time fusebench's kernel and the installed peers for the matched case of the largest gaps."""
    from fusebench.audit.catalog import Match, time_case
    from fusebench.cases import DTYPE_NAMES
    from fusebench.runner.plan import peer_impls

    dtype = DTYPE_NAMES.get(getattr(built, "dtype", None), "fp32")
    impls = ["triton"] + [p.name for p in peer_impls() if p.available(device) is None]
    done: dict[tuple, dict] = {}
    ranked = sorted((r for r in regions if r.case), key=lambda r: -(r.gap_us or 0.0))
    for r in ranked[:CATALOG_TOP]:
        key = (r.case, r.case_shape, r.case_mode)
        if key not in done:
            shape = tuple(int(d) for d in r.case_shape.split("x"))
            done[key] = time_case(Match(r.case, shape, r.case_mode), dtype, device, impls)
        r.case_times = done[key]


# ----------------------------------------------------------------------------------------------
# worker processes


def _worker(conn, request: AuditRequest, backend: str, ceilings: dict) -> None:
    os.setsid()
    try:
        conn.send(("done", measure_backend(request, backend, ceilings)))
    except BaseException as exc:  # the backend's failure is the result
        from fusebench.runner.cell import is_oom

        status = "oom" if is_oom(exc) else "error"
        conn.send(("failed", (status, first_line(exc), traceback.format_exc(limit=4))))


def _run_isolated(request: AuditRequest, backend: str, ceilings: dict) -> dict:
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_worker, args=(child, request, backend, ceilings), daemon=True)
    proc.start()
    child.close()
    try:
        if not parent.poll(request.timeout_s):
            return _failed(backend, "timeout", f"no result within {request.timeout_s:g} s; worker killed")
        try:
            kind, payload = parent.recv()
        except (EOFError, OSError):
            proc.join(5)
            return _failed(backend, "crashed", f"worker process died (exit code {proc.exitcode})")
        if kind == "failed":
            return _failed(backend, payload[0], payload[1])
        return payload
    finally:
        try:
            os.killpg(proc.pid, 9)
        except (ProcessLookupError, PermissionError):
            pass
        proc.join(5)
        parent.close()


def _failed(backend: str, status: str, reason: str) -> dict:
    return {"step": StepRow(backend, status=status, reason=reason), "kernels": [], "regions": [], "notes": []}


def _run_inline(request: AuditRequest, backend: str, ceilings: dict) -> dict:
    try:
        return measure_backend(request, backend, ceilings)
    except Exception as exc:
        from fusebench.runner.cell import is_oom

        return _failed(backend, "oom" if is_oom(exc) else "error", first_line(exc))


def device_ceilings(request: AuditRequest, db_path: str | None) -> tuple[dict, str]:
    """The copy and matmul ceilings regions and kernels are held against: the store's (`fusebench
    ceilings`) where it has them for this device, else measured now."""
    import torch

    from fusebench.cases import DTYPES
    from fusebench.device_peaks import MATMUL_CEILING, device_name, load_ceilings, measure_copy_bw, measure_matmul

    dtype = DTYPES.get(request.dtype or "", torch.float32)
    stored = load_ceilings(db_path, device_name(request.device)) if db_path else {}
    name = MATMUL_CEILING.get(dtype, "matmul_fp32") if request.device.startswith("cuda") else "matmul_fp32"
    if stored.get("copy_bw", {}).get("value") and stored.get(name, {}).get("value"):
        return ({"copy_gbps": float(stored["copy_bw"]["value"]), "matmul_tflops": float(stored[name]["value"])},
                f"ceilings from the store (measured {stored['copy_bw'].get('measured')})")
    cuda = request.device.startswith("cuda")
    copy = measure_copy_bw(request.device, None if cuda else 256 << 20)
    mm = measure_matmul(request.device, dtype if cuda else torch.float32, n=8192 if cuda else 1024,
                        reps=10 if cuda else 3, warmup=3 if cuda else 1)
    return ({"copy_gbps": copy["value"], "matmul_tflops": mm["value"]},
            "ceilings measured at the audit's start (a copy and a matmul; `fusebench ceilings` stores them)")


def measure_audit(request: AuditRequest, on_progress: Callable[[str], None] | None = None, *,
                  isolate: bool | None = None, db_path: str | None = None) -> AuditResult:
    """Measure every backend of `request` and put the result together.  `isolate` (default: where
    a worker can rebuild the model) measures each backend in a worker process of its own; a model
    registered in the caller's own script is measured here, where it is known."""
    import dataclasses

    from fusebench.audit import models
    from fusebench.cases import DTYPE_NAMES

    say = on_progress or (lambda text: None)
    spec = models.get_model(request.model)
    request = dataclasses.replace(
        request, sizes=spec.resolve_sizes(request.sizes, request.device),
        dtype=request.dtype or DTYPE_NAMES[spec.dtype_for(request.device)])
    say("ceilings")
    ceilings, how = device_ceilings(request, db_path)
    result = AuditResult(model=request.model, mode=request.mode, dtype=request.dtype, sizes=dict(request.sizes),
                         device=request.device, backends=request.backends, copy_gbps=ceilings["copy_gbps"],
                         matmul_tflops=ceilings["matmul_tflops"], notes=[how])
    if isolate is None:
        isolate = spec.plugin is None or os.path.isfile(spec.plugin)
    run = _run_isolated if isolate else _run_inline
    for backend in request.backends:
        say(backend)
        t0 = time.perf_counter()
        part = run(request, backend, ceilings)
        step: StepRow = part["step"]
        if step.note is None and step.status == "ok":
            step.note = f"measured in {time.perf_counter() - t0:.1f} s"
        result.steps.append(step)
        result.kernels += [k if isinstance(k, KernelRow) else KernelRow(**k) for k in part["kernels"]]
        result.regions += [r if isinstance(r, RegionRow) else RegionRow(**r) for r in part["regions"]]
        result.notes += [f"{backend}: {n}" for n in part["notes"]]
        if part.get("source"):
            result.source = part["source"]
        if part.get("source_note") and part["source_note"] not in result.notes:
            result.notes.append(part["source_note"])
    _break_even(result, request.baseline)
    return result


def _break_even(result: AuditResult, baseline: str) -> None:
    """Steps after which a compiled backend's cold compile has paid for itself against the baseline."""
    base = result.step(baseline)
    for s in result.steps:
        if s.backend == baseline or s.compile_cold_s is None or base is None or s.status != "ok":
            continue
        if base.wall_us is None or s.wall_us is None:
            continue
        saved_us = base.wall_us - s.wall_us
        if saved_us > 0:
            s.break_even_steps = s.compile_cold_s * 1e6 / saved_us
        else:
            extra = f"never: a step is not faster than {baseline}'s"
            s.note = f"{s.note}; {extra}" if s.note else extra
