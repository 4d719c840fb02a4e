"""`kernels`: GPU kernels launched by one call, their names, and `kernel_time` (sum of their durations).

On a GPU: a few warmed-up calls, each alone under `torch.profiler` (CUDA activity only, no L2 flush
in it).  Device activities are classified by the profiler's own category (`kernel`, `gpu_memset`,
`gpu_memcpy`): memsets and memcpys are counted apart and are not kernels.  `kernel_time_us` is the
sum of the kernel durations of one call, the median over the profiled calls.

On the CPU there are no device kernels.  For Inductor the kernels are counted from its generated
wrapper code (the calls of its generated C++ kernels and of extern kernels such as mm); eager runs
ATen operators one by one, with nothing to count as a kernel, so that is not available.
"""
from __future__ import annotations

import json
import os
import statistics
import tempfile
import types
from collections import Counter

import torch

from fusebench.fusion.code import wrapper_kernel_calls
from fusebench.metrics import MetricContext, metric
from fusebench.metrics._util import first_line

PROFILED_CALLS = 3


# ----------------------------------------------------------------------------------------------
# GPU: the profiler


def classify(cat: str | None, name: str) -> str | None:
    """'kernel' | 'memset' | 'memcpy' | None (not device work of the call) for one trace event."""
    cat = (cat or "").lower()
    if cat == "kernel":
        return "kernel"
    if cat == "gpu_memset":
        return "memset"
    if cat == "gpu_memcpy":
        return "memcpy"
    if cat:
        return None
    # No category (the fallback path through prof.events()): go by the name kineto gives them.
    if name.startswith("Memset"):
        return "memset"
    if name.startswith("Memcpy"):
        return "memcpy"
    if name in ("Activity Buffer Request",) or name.startswith("cuda"):
        return None
    return "kernel"


def events_from_trace(trace: dict) -> list[dict]:
    """Device activities of a Chrome trace (as torch.profiler exports it), in start order."""
    out = []
    for ev in trace.get("traceEvents", []):
        if ev.get("ph") != "X":
            continue
        kind = classify(ev.get("cat"), str(ev.get("name", "")))
        if kind is None:
            continue
        out.append({"name": str(ev.get("name", "")), "kind": kind, "ts": float(ev.get("ts", 0.0)),
                    "dur_us": float(ev.get("dur", 0.0))})
    out.sort(key=lambda e: e["ts"])
    return out


def _events_of(prof) -> list[dict]:
    fd, path = tempfile.mkstemp(suffix=".json", prefix="fusebench_trace_")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path) as f:
            return events_from_trace(json.load(f))
    except (OSError, ValueError, RuntimeError):
        # Fallback: the profiler's function events on the CUDA device, classified by name.
        from torch.autograd import DeviceType

        out = []
        for e in prof.events():
            if e.device_type != DeviceType.CUDA:
                continue
            kind = classify(None, e.name)
            if kind:
                out.append({"name": e.name, "kind": kind, "ts": float(e.time_range.start),
                            "dur_us": float(e.time_range.elapsed_us())})
        out.sort(key=lambda e: e["ts"])
        return out
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass


def summarize(events: list[dict]) -> dict:
    """Counts, names (deduplicated in launch order, with counts) and summed durations of one call."""
    kernels = [e for e in events if e["kind"] == "kernel"]
    counts = Counter(e["name"] for e in kernels)
    names: list[list] = []
    seen = set()
    for e in kernels:
        if e["name"] not in seen:
            seen.add(e["name"])
            names.append([e["name"], counts[e["name"]]])
    return {
        "kernels": len(kernels),
        "memsets": sum(e["kind"] == "memset" for e in events),
        "memcpys": sum(e["kind"] == "memcpy" for e in events),
        "kernel_names": names,
        "kernel_time_us": sum(e["dur_us"] for e in kernels),
        "other_time_us": sum(e["dur_us"] for e in events if e["kind"] != "kernel"),
    }


def profile_calls(call, calls: int = PROFILED_CALLS) -> list[list[dict]]:
    """Device activities of `calls` separately profiled calls (after one unprofiled warm-up)."""
    from torch.profiler import ProfilerActivity, profile

    out = call()
    del out
    torch.cuda.synchronize()
    runs = []
    for _ in range(calls):
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            out = call()
            torch.cuda.synchronize()
        del out
        runs.append(_events_of(prof))
    return runs


def gpu_kernels(call) -> tuple[dict, list[dict]]:
    """Store columns and the per-kernel details of the median call."""
    runs = profile_calls(call)
    sums = [summarize(r) for r in runs]
    if all(s["kernels"] + s["memsets"] + s["memcpys"] == 0 for s in sums):
        return {"na": {"kernels": "the profiler recorded no GPU activity for the call",
                       "kernel_time_us": "the profiler recorded no GPU activity for the call"}}, []
    order = sorted(range(len(sums)), key=lambda i: sums[i]["kernel_time_us"])
    mid = order[len(order) // 2]
    s = sums[mid]
    row = {k: s[k] for k in ("kernels", "memsets", "memcpys", "kernel_names")}
    row["kernel_time_us"] = statistics.median(x["kernel_time_us"] for x in sums)
    notes = [f"kernel_time: median over {len(sums)} profiled calls, kernels only"]
    if s["other_time_us"]:
        notes.append(f"memset/memcpy time {s['other_time_us']:.1f} us not in kernel_time")
    counts = {(x["kernels"], x["memsets"], x["memcpys"]) for x in sums}
    if len(counts) > 1:
        notes.append(f"kernel counts differed between profiled calls: {sorted(counts)}")
    row["note"] = "; ".join(notes)
    return row, runs[mid]


# ----------------------------------------------------------------------------------------------
# CPU: Inductor's generated code


def fresh_function(fn):
    """`fn` behind a code object Dynamo has never seen, so torch.compile of it compiles anew (an
    Inductor FX-graph-cache hit, usually) without touching the compiled function the runner holds."""
    if isinstance(fn, types.FunctionType):
        return types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__,
                                  fn.__closure__)

    def call(*args, **kwargs):
        return fn(*args, **kwargs)

    return types.FunctionType(call.__code__.replace(), call.__globals__, getattr(fn, "__name__", "call"), None,
                              call.__closure__)


class keep_dynamo_counters:
    """Compiles done by a metric are not the runner's recompiles: restore Dynamo's counters after."""

    def __enter__(self):
        from torch._dynamo.utils import counters

        self.saved = {k: Counter(v) for k, v in counters.items()}
        return self

    def __exit__(self, *exc):
        from torch._dynamo.utils import counters

        counters.clear()
        for k, v in self.saved.items():
            counters[k].update(v)
        return False


def inductor_output_code(fn, mode, args) -> list[str]:
    """Inductor's output code for `fn` on `args`: a fresh compile of it (see fresh_function)."""
    from unittest import mock

    from torch._inductor.graph import GraphLowering

    codes: list[str] = []
    with keep_dynamo_counters(), mock.patch.object(GraphLowering, "save_output_code",
                                                   staticmethod(lambda code: codes.append(code))):
        out = torch.compile(fresh_function(fn), mode=mode)(*args)
        del out
    return codes


def cpu_inductor_kernels(ctx: MetricContext) -> tuple[dict, list[str]]:
    codes = inductor_output_code(ctx.case.fn, getattr(ctx.impl, "mode", None), ctx.args)
    if not codes:
        return {"na": {"kernels": "Inductor produced no output code to count kernels from"}}, codes
    calls = [c for code in codes for c in wrapper_kernel_calls(code)]
    counts = Counter(calls)
    names, seen = [], set()
    for c in calls:
        if c not in seen:
            seen.add(c)
            names.append([c, counts[c]])
    row = {"kernels": len(calls), "kernel_names": names,
           "na": {"memsets": "no device memsets on the CPU", "memcpys": "no device memcpys on the CPU",
                  "kernel_time_us": "no device kernels on the CPU (see time)"},
           "note": f"CPU: kernels counted from Inductor's generated code ({len(codes)} graph(s)): calls of its "
                   "generated C++ kernels and of extern/ATen kernels, not from a profiler"}
    return row, codes


# ----------------------------------------------------------------------------------------------


def measure(ctx: MetricContext) -> tuple[dict, list]:
    """(store columns, details): details are the median call's device activities on a GPU, the
    output code on the CPU."""
    name = getattr(ctx.impl, "name", "")
    if getattr(ctx.prepared, "timing_available", None):
        why = f"not measured: {ctx.prepared.timing_available}"
        return {"na": {"kernels": why, "kernel_time_us": why}}, []
    if ctx.device.startswith("cuda"):
        return gpu_kernels(ctx.call)
    if name.startswith("inductor"):
        return cpu_inductor_kernels(ctx)
    why = ("eager on the CPU runs ATen operators one by one: there are no device kernels to count"
           if name == "eager" else f"{name} on the CPU: no device kernels and no generated code to count")
    return {"na": {"kernels": why, "kernel_time_us": "no device kernels on the CPU (see time)"}}, []


@metric("kernels")
def kernels_metric(ctx: MetricContext) -> dict:
    try:
        return measure(ctx)[0]
    except Exception as exc:  # a metric never fails the cell
        why = first_line(exc)
        return {"na": {"kernels": why, "kernel_time_us": why}}
