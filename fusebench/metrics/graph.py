"""`graph`: the call captured once in a CUDA graph, then replayed: `graph_time_us` per call.

The call is warmed up on a side stream, captured in a `torch.cuda.CUDAGraph`, and each replay is
timed like `time` (fusebench.measure.timing.time_call: CUDA events around each replay, the L2
flushed before each, median) -- so the two differ by the host's launch gaps, not by cache state.
A quarter of the run's timing budget is spent on it (GRAPH_BUDGET; at least the run's minimum
count of replays): a replay has no host-side jitter to average out, so its median settles sooner
than that of `time`, and the metric costs a cell a fraction of its timing.
A call that cannot be captured (a synchronisation, a host read of device data, CPU-side work)
gives `na` with the error's first line.  On the CPU there are no CUDA graphs.
"""
from __future__ import annotations

import dataclasses

import torch

from fusebench.measure.timing import TimingSettings, time_call
from fusebench.metrics import MetricContext, metric
from fusebench.metrics._util import first_line

WARMUP_CALLS = 3
GRAPH_BUDGET = 0.25  # of the run's warm-up and repetition milliseconds


def capture(call, device: str):
    """(graph, outputs held by the graph's pool).  Raises when the call cannot be captured."""
    side = torch.cuda.Stream(device=device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(WARMUP_CALLS):
            out = call()
            del out
    torch.cuda.current_stream(device).wait_stream(side)
    torch.cuda.synchronize(device)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = call()
    return graph, out


def graph_time(call, device: str, settings: TimingSettings | None = None) -> tuple[float, int]:
    """(median us per replay, replays timed)."""
    graph, out = capture(call, device)
    try:
        graph.replay()
        torch.cuda.synchronize(device)
        st = settings or TimingSettings()
        st = dataclasses.replace(st, warmup_ms=st.warmup_ms * GRAPH_BUDGET, rep_ms=st.rep_ms * GRAPH_BUDGET)
        stats = time_call(graph.replay, device, st)
        return stats.median_us, stats.reps
    finally:
        del out, graph
        torch.cuda.synchronize(device)


@metric("graph")
def graph_metric(ctx: MetricContext) -> dict:
    if not ctx.device.startswith("cuda"):
        return {"na": {"graph_time_us": "CUDA graphs need a CUDA GPU"}}
    if getattr(ctx.prepared, "timing_available", None):
        return {"na": {"graph_time_us": f"not measured: {ctx.prepared.timing_available}"}}
    try:
        median, reps = graph_time(ctx.call, ctx.device, ctx.extra.get("timing"))
    except Exception as exc:  # capture failed: say why, leave the device usable
        try:
            torch.cuda.synchronize(ctx.device)
        except Exception:
            pass
        return {"na": {"graph_time_us": f"could not capture the call in a CUDA graph: {first_line(exc)}"}}
    return {"graph_time_us": median,
            "note": f"graph_time: median of {reps} CUDA-graph replays, L2 flushed before each (as time)"}
