"""The audit from Python: measure a model eagerly and compiled, store it, return the result.

    import fusebench
    result = fusebench.audit_model("llama3-layer", mode="fwd_bwd", sizes={"tokens": 1024})
    for region in result.opportunities("inductor")[:3]:
        print(region.label, region.gap_us)

The request is checked whole before the store is touched: the model (built once, so that a model
whose function raises, or whose sizes do not fit, is refused here), its sizes, the dtype, the
mode, the compile modes, the baseline, the device and the plugin files; then the store must be
writable.  The run is recorded as running, measured, saved with its rows, and finished `done`;
`interrupted` on Ctrl-C, `failed` on an error of fusebench itself (a backend's own crash or
out-of-memory is part of the result, not a failure of the run).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Callable, Sequence

from fusebench.audit.request import AUDIT_MODES, COMPILE_MODES, AuditRequest
from fusebench.audit.result import AuditResult


@dataclass
class AuditRun:
    """A stored audit: where it is, and what it found."""

    run_id: int
    db: str
    result: AuditResult
    device_name: str | None = None


def _names(value: str | Sequence[str] | None, what: str) -> tuple[str, ...]:
    items = value.split(",") if isinstance(value, str) else list(value or ())
    names = tuple(str(n).strip() for n in items if str(n).strip())
    if len(set(names)) != len(names):
        raise ValueError(f"{what} names one twice: {', '.join(names)}")
    return names


def parse_sizes(items: str | Sequence[str] | dict | None) -> dict[str, int]:
    """{"batch": 8} from a dict, "batch=8,tokens=512" or ["batch=8", "tokens=512"]."""
    if isinstance(items, dict):
        pairs = list(items.items())
    else:
        texts = [items] if isinstance(items, str) else list(items or ())
        pairs = []
        for part in (p.strip() for t in texts for p in str(t).split(",")):
            if not part:
                continue
            key, sep, value = part.partition("=")
            if not sep or not key.strip():
                raise ValueError(f"malformed size {part!r}: expected NAME=N, e.g. batch=8")
            pairs.append((key.strip(), value.strip()))
    sizes: dict[str, int] = {}
    for key, value in pairs:
        if key in sizes:
            raise ValueError(f"size {key} given twice")
        try:
            number = int(value) if not isinstance(value, bool) else None
        except (TypeError, ValueError):
            number = None
        if number is None or (isinstance(value, float) and not float(value).is_integer()):
            raise ValueError(f"size {key}={value!r} is not an integer")
        sizes[key] = number
    return sizes


def check_request(model: str, *, mode: str = "fwd", dtype: str | None = None, sizes=None,
                  device: str | None = None, compile_modes: str | Sequence[str] = ("default",),
                  baseline: str = "eager", plugins: Sequence[str] = (),
                  catalog: bool = True, compile_time: bool = True,
                  timeout_s: float = AuditRequest.timeout_s) -> tuple[AuditRequest, list[dict]]:
    """The request, checked whole (see the module docstring), and the plugin files' records (path
    and sha256).  Raises ValueError (UnknownName, ModelError, PluginError are ValueErrors) or
    FileNotFoundError with one line; writes nothing."""
    from fusebench.audit import models
    from fusebench.cases import DTYPE_NAMES, load_plugin, parse_dtype, plugin_record
    from fusebench.env import best_device
    from fusebench.runner.request import check_device

    if not isinstance(model, str) or not model.strip():
        raise ValueError("give the model to audit (`fusebench audit --list` lists them)")
    if mode not in AUDIT_MODES:
        raise ValueError(f"unknown mode {mode!r}; choose {' or '.join(AUDIT_MODES)}")
    modes = _names(compile_modes, "--compile-mode")
    for m in modes:
        if m not in COMPILE_MODES:
            raise ValueError(f"unknown compile mode {m!r}; choose from {', '.join(COMPILE_MODES)}")
    device = check_device(device or best_device())
    if not (isinstance(timeout_s, (int, float)) and math.isfinite(timeout_s) and timeout_s > 0):
        raise ValueError(f"--timeout {timeout_s!r}: must be a positive number of seconds")
    records = [plugin_record(p) for p in ([plugins] if isinstance(plugins, str) else plugins)]
    for r in records:
        load_plugin(r["path"], r["sha256"])
    spec = models.get_model(model.strip())
    dt = parse_dtype(dtype) if dtype else spec.dtype_for(device)
    full = spec.resolve_sizes(parse_sizes(sizes), device)
    request = AuditRequest(model=spec.name, mode=mode, dtype=DTYPE_NAMES[dt], sizes=full, device=device,
                           compile_modes=modes, baseline=baseline, plugins=tuple(r["path"] for r in records),
                           catalog=bool(catalog), compile_time=bool(compile_time),
                           timeout_s=float(timeout_s))
    if baseline not in request.backends:
        raise ValueError(f"--baseline {baseline!r} is not one of this audit's backends "
                         f"({', '.join(request.backends)})")
    _try_build(spec, request)
    return request, records


def _try_build(spec, request: AuditRequest) -> None:
    """Build the model once as the audit will (a ModelError, one line, if its function raises or
    its inputs do not fit), and let it go."""
    from fusebench.audit import models

    built = models.build(spec, request.sizes, request.dtype, request.device, request.seed)
    del built
    if request.device.startswith("cuda"):
        import torch

        torch.cuda.empty_cache()


def run_audit(model: str, *, mode: str = "fwd", dtype: str | None = None, sizes=None, device: str | None = None,
              compile_modes: str | Sequence[str] = ("default",), baseline: str = "eager", plugins: Sequence[str] = (),
              catalog: bool = True, compile_time: bool = True,
              timeout_s: float = AuditRequest.timeout_s, db: str | None = None,
              on_progress: Callable[[str], None] | None = None,
              on_start: Callable[[int], None] | None = None) -> AuditRun:
    """audit_model's work, with the run's id and store: `on_start(run_id)` is called once the run
    is recorded, before anything is measured."""
    from fusebench.audit import measure
    from fusebench.audit.store import save
    from fusebench.env import collect
    from fusebench.store import Heartbeat, Store, check_writable, default_db_path
    from fusebench.util import workers_skip_main

    request, records = check_request(model, mode=mode, dtype=dtype, sizes=sizes, device=device,
                                     compile_modes=compile_modes, baseline=baseline, plugins=plugins,
                                     catalog=catalog, compile_time=compile_time, timeout_s=timeout_s)
    path = os.path.abspath(db or default_db_path())
    check_writable(path)
    env = collect(request.device)
    with Store.open(path) as store:
        run_id = store.start_run(env, {"kind": "audit", "audit": request.as_dict(), "plugins": records}, {})
        if on_start:
            on_start(run_id)
        status = "interrupted"
        try:
            with Heartbeat(store.path, run_id):
                with workers_skip_main():
                    result = measure.measure_audit(request, on_progress, db_path=store.path)
            save(store, run_id, result)
            status = "done"
        except KeyboardInterrupt:
            raise
        except BaseException:
            status = "failed"
            raise
        finally:
            store.finish_run(run_id, status)
    return AuditRun(run_id, path, result, env.get("device_name"))


def audit_model(model: str, *, mode: str = "fwd", dtype: str | None = None, sizes=None, device: str | None = None,
                compile_modes: str | Sequence[str] = ("default",), baseline: str = "eager",
                plugins: Sequence[str] = (), catalog: bool = True, compile_time: bool = True,
                timeout_s: float = AuditRequest.timeout_s, db: str | None = None,
                on_progress: Callable[[str], None] | None = None) -> AuditResult:
    """Audit `model` (a built-in, or one a file in `plugins` registers with `@fusebench.model`):
    its step eagerly and under each of `compile_modes` ("default", "max-autotune", ...), every
    kernel of a step, and the memory-bound regions ranked by the time fusion could still save.

    `mode`: "fwd" or "fwd_bwd"; `dtype`: "fp32", "fp16", "bf16" (default: the model's own on a GPU,
    fp32 on the CPU); `sizes`: {"batch": 8} or "batch=8,tokens=512" over the model's defaults;
    `baseline`: the backend speedups are over;
    `catalog`: time fusebench's matching cases at the model's shapes; `compile_time`: measure the
    cold and warm compile times (two more compiles per backend); `timeout_s`: seconds a backend may
    take before it is recorded as `timeout` and the audit goes on; `db`: the store (default
    ./fusebench.db or $FUSEBENCH_DB); `on_progress(text)`: told what is being measured.

    Returns the AuditResult, also stored as a run (`fusebench results --run N` prints it)."""
    return run_audit(model, mode=mode, dtype=dtype, sizes=sizes, device=device, compile_modes=compile_modes,
                     baseline=baseline, plugins=plugins, catalog=catalog, compile_time=compile_time,
                     timeout_s=timeout_s, db=db, on_progress=on_progress).result
