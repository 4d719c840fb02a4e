"""`memory`: peak memory of one call and its footprint (temporaries beyond inputs and outputs).

On a GPU, from PyTorch's CUDA caching allocator: after a synchronise and `reset_peak_memory_stats`,
`peak_mem_bytes` = max_memory_allocated during one call minus memory_allocated before it;
`footprint_bytes` = that peak minus the bytes of the outputs the call returns (each output storage
once, rounded up to the allocator's 512-byte blocks as the allocator counts them; outputs that alias
an input are not new).  Memory the call allocates outside PyTorch's allocator (a library's own
workspace) is not seen.

On the CPU, from the profiler's record of the CPU allocator's allocations and frees during one call
(`torch.profiler` with profile_memory): the peak of their running sum, and the same footprint.
Memory that bypasses PyTorch's CPU allocator (e.g. oneDNN or OpenMP scratch) is not seen either.
"""
from __future__ import annotations

import torch

from fusebench.metrics import MetricContext, metric
from fusebench.metrics._util import first_line, na, tensors

COLUMNS = ("peak_mem_bytes", "footprint_bytes")
CUDA_BLOCK = 512  # the CUDA caching allocator rounds every block up to a multiple of 512 bytes


def output_bytes(out, inputs: tuple, block: int = 1) -> int:
    """Bytes of the distinct storages of `out` that are not an input's, each rounded up to `block`."""
    taken = {t.untyped_storage().data_ptr() for t in tensors(inputs)}
    seen, total = set(), 0
    for t in tensors(out):
        st = t.untyped_storage()
        ptr = st.data_ptr()
        if ptr in taken or ptr in seen:
            continue
        seen.add(ptr)
        total += -(-st.nbytes() // block) * block if st.nbytes() else 0
    return total


def cuda_memory(call, inputs: tuple, device: str) -> dict:
    out = call()  # one more warm-up: lazily created workspaces are made here, not counted below
    del out
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    out = call()
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device) - before
    held = torch.cuda.memory_allocated(device) - before
    outs = output_bytes(out, inputs, CUDA_BLOCK)
    del out
    row = {"peak_mem_bytes": int(peak), "footprint_bytes": int(peak - outs)}
    notes = []
    if held != outs:
        notes.append(f"memory held after the call ({held} B) differs from its outputs' bytes ({outs} B)")
    if notes:
        row["note"] = "; ".join(notes)
    return row


def allocation_trace(call) -> tuple[list[tuple[int, int]], object]:
    """(trace, outputs): (time ns, bytes: + allocated, - freed) of the CPU allocator during one call,
    in time order.  The outputs are returned alive, so their frees are not in the trace."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = call()
    events = []
    for e in prof.profiler.kineto_results.events():
        if e.name() != "[memory]" or e.device_type() != DeviceType.CPU:
            continue
        events.append((e.start_ns(), int(e.nbytes())))
    events.sort()
    return events, out


def peak_of(trace: list[tuple[int, int]]) -> tuple[int, int]:
    """(peak of the running sum, final sum) of an allocation trace."""
    level = peak = 0
    for _, nbytes in trace:
        level += nbytes
        peak = max(peak, level)
    return peak, level


def cpu_memory(call, inputs: tuple) -> dict:
    out = call()
    del out
    trace, out = allocation_trace(call)
    outs = output_bytes(out, inputs)
    del out
    if not trace:
        return na(COLUMNS, "the profiler recorded no CPU allocations for the call")
    peak, held = peak_of(trace)
    row = {"peak_mem_bytes": int(peak), "footprint_bytes": int(peak - outs)}
    notes = ["CPU memory: the CPU allocator's allocations during one call, from the profiler"]
    if held != outs:
        notes.append(f"memory held after the call ({held} B) differs from its outputs' bytes ({outs} B)")
    row["note"] = "; ".join(notes)
    return row


@metric("memory")
def memory_metric(ctx: MetricContext) -> dict:
    if getattr(ctx.prepared, "timing_available", None):
        return na(COLUMNS, f"not measured: {ctx.prepared.timing_available}")
    try:
        if ctx.device.startswith("cuda"):
            return cuda_memory(ctx.call, ctx.args, ctx.device)
        return cpu_memory(ctx.call, ctx.args)
    except Exception as exc:
        return na(COLUMNS, first_line(exc))
