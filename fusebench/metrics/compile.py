"""`compile`: compile time, cold and warm.  Compile time = first call - one steady-state call.

Inductor (`inductor*` implementations), in this process:
- cold: fresh on-disk caches (temporary TORCHINDUCTOR_CACHE_DIR and TRITON_CACHE_DIR, through
  `torch._inductor.utils.fresh_cache`), Inductor's in-memory caches cleared, and a function Dynamo
  has never seen (the case's function behind a new code object), compiled with torch.compile(mode=
  the implementation's mode); compile time = the first call (synchronised) - a steady call;
- warm: in-memory caches cleared again, the same on-disk caches (FX graph, Inductor autotune and
  Triton caches now hit), another new code object; same arithmetic.
The runner's own compiled function is never touched (no Dynamo reset), the environment is restored
afterwards, and Dynamo's counters are restored so these compiles are not taken for recompiles.

`triton` (fusebench's kernels): in fresh child processes (JIT compile and autotune state are
per-process): cold with an empty temporary TRITON_CACHE_DIR, warm with the same directory after the
cold run filled it; in each, CUDA and Triton are initialised first with a trivial kernel, then the
first call (JIT compile + autotune) minus a steady call is timed.

Other implementations compile nothing: not available.
"""
from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import tempfile
import time

import torch

from fusebench.metrics import MetricContext, metric
from fusebench.metrics._util import first_line, impl_name, na

COLUMNS = ("compile_cold_s", "compile_warm_s")
CHILD_TIMEOUT_S = 900


def _fresh_cache():
    try:
        from torch._inductor.utils import fresh_cache
    except ImportError:  # older PyTorch
        from torch._inductor.utils import fresh_inductor_cache as fresh_cache
    return fresh_cache()


def _clear_in_memory() -> None:
    try:
        from torch._inductor.utils import clear_caches
    except ImportError:
        from torch._inductor.utils import clear_inductor_caches as clear_caches
    clear_caches()


def first_minus_steady(fn, args, sync, steady_calls: int = 3) -> dict:
    t = time.perf_counter()
    out = fn(*args)
    sync()
    first = time.perf_counter() - t
    del out
    out = fn(*args)  # one more call, untimed: lazy work after the first call is not steady state
    sync()
    del out
    steady = []
    for _ in range(steady_calls):
        t = time.perf_counter()
        out = fn(*args)
        sync()
        steady.append(time.perf_counter() - t)
        del out
    s = statistics.median(steady)
    return {"first_s": first, "steady_s": s, "compile_s": first - s}


def inductor_compile(case, mode, args, device: str) -> dict:
    from fusebench.metrics.kernels import fresh_function, keep_dynamo_counters

    sync = (lambda: torch.cuda.synchronize(device)) if device.startswith("cuda") else (lambda: None)
    with keep_dynamo_counters():
        try:
            with _fresh_cache():
                _clear_in_memory()
                cold = first_minus_steady(torch.compile(fresh_function(case.fn), mode=mode), args, sync)
                _clear_in_memory()
                warm = first_minus_steady(torch.compile(fresh_function(case.fn), mode=mode), args, sync)
        finally:
            _clear_in_memory()  # nothing in memory may point at the deleted temporary caches
    return {"compile_cold_s": cold["compile_s"], "compile_warm_s": warm["compile_s"],
            "note": (f"compile time = first call - steady call ({mode or 'default'} mode): cold with empty "
                     f"Inductor/Triton caches (first {cold['first_s']:.3f} s), warm on those caches after "
                     f"clearing in-memory caches (first {warm['first_s']:.3f} s); steady "
                     f"{cold['steady_s'] * 1e3:.3f} ms")}


def _child_first_steady(case, shape, dtype_name: str, env_extra: dict) -> dict:
    from fusebench.metrics.ncu import child_command, child_env

    cmd, why = child_command(case, "triton", shape, dtype_name, mode="compile")
    if why:
        raise RuntimeError(why)
    proc = subprocess.run(cmd, env=child_env(env_extra), capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    for line in reversed(proc.stdout.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    tail = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    raise RuntimeError(f"child exited {proc.returncode}: {tail[-1] if tail else 'no output'}")


def triton_compile(case, shape, dtype_name: str) -> dict:
    cache = tempfile.mkdtemp(prefix="fusebench_triton_cache_")
    try:
        env = {"TRITON_CACHE_DIR": cache}
        cold = _child_first_steady(case, shape, dtype_name, env)
        warm = _child_first_steady(case, shape, dtype_name, env)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return {"compile_cold_s": cold["first_s"] - cold["steady_s"], "compile_warm_s": warm["first_s"] - warm["steady_s"],
            "note": ("triton compile time = first call - steady call in a fresh process (JIT compile + autotune): "
                     "cold with an empty Triton cache, warm with the cache the cold run filled (autotuning runs "
                     "again: its results are not cached)")}


@metric("compile")
def compile_metric(ctx: MetricContext) -> dict:
    name = impl_name(ctx)
    try:
        if name.startswith("inductor"):
            return inductor_compile(ctx.case, getattr(ctx.impl, "mode", None), ctx.args, ctx.device)
        if name == "triton":
            if not ctx.device.startswith("cuda"):
                return na(COLUMNS, "Triton kernels run under the interpreter on the CPU: nothing is compiled")
            from fusebench.cases import DTYPE_NAMES

            return triton_compile(ctx.case, ctx.shape, DTYPE_NAMES[ctx.dtype])
    except Exception as exc:
        return na(COLUMNS, f"compile time not measured: {first_line(exc)}")
    return na(COLUMNS, f"{name} compiles nothing" if name else "nothing is compiled")
