"""`roofline`: % of the roofline against ceilings measured on this device (`fusebench ceilings`).

The floor time of a cell is max(min_bytes / copy bandwidth, flops / matmul peak of its dtype), both
ceilings read from the store's `ceilings` table for this device name -- never a datasheet constant.
`roofline_bound` is `memory` when the byte term is the larger, else `compute`;
`pct_roofline` = 100 x floor time / measured `time`.  fp32 cells are held against the TF32 peak
where the cell ran TF32 (its note says tf32, or PyTorch's TF32 switch for its operator is on), else
against the IEEE fp32 peak.
"""
from __future__ import annotations

import torch

from fusebench.device_peaks import MATMUL_CEILING, device_name, load_ceilings
from fusebench.metrics import MetricContext, metric
from fusebench.metrics._util import first_line, na

COLUMNS = ("pct_roofline", "roofline_bound")


def uses_tf32(ctx: MetricContext) -> bool:
    note = " ".join(str(n or "") for n in ((ctx.row or {}).get("note"), getattr(ctx.prepared, "note", ""))).lower()
    if "tf32" in note:
        return True
    family = getattr(ctx.case, "family", "")
    if family == "conv":
        return bool(torch.backends.cudnn.allow_tf32)
    if family in ("matmul", "mix"):
        return bool(torch.backends.cuda.matmul.allow_tf32)
    return False


def matmul_ceiling_name(ctx: MetricContext) -> str | None:
    if ctx.dtype == torch.float32 and ctx.device.startswith("cuda") and uses_tf32(ctx):
        return "matmul_tf32"
    return MATMUL_CEILING.get(ctx.dtype)


def roofline(min_bytes: int, flops: int | None, time_us: float, copy_gbps: float,
             peak_tflops: float | None) -> dict:
    """The arithmetic: floor time, bound and % of roofline."""
    mem_us = min_bytes / (copy_gbps * 1e9) * 1e6
    comp_us = (flops or 0) / (peak_tflops * 1e12) * 1e6 if peak_tflops else 0.0
    floor_us = max(mem_us, comp_us)
    return {"pct_roofline": 100.0 * floor_us / time_us, "roofline_bound": "memory" if mem_us >= comp_us else "compute",
            "floor_us": floor_us, "memory_us": mem_us, "compute_us": comp_us}


def measure(ctx: MetricContext) -> dict:
    row = ctx.row or {}
    time_us, min_bytes, flops = row.get("time_us"), row.get("min_bytes"), row.get("flops")
    if not time_us:
        return na(COLUMNS, "no time measured for this cell")
    if not min_bytes:
        return na(COLUMNS, "the case has no byte model")
    name = device_name(ctx.device)
    ceilings = load_ceilings(ctx.db_path, name)
    if not ceilings or not (ceilings.get("copy_bw") or {}).get("value"):
        return na(COLUMNS, f"no ceilings stored for {name}: run `fusebench ceilings` first")
    copy = ceilings["copy_bw"]["value"]
    peak, peak_name = None, None
    if flops:
        peak_name = matmul_ceiling_name(ctx)
        peak = (ceilings.get(peak_name) or {}).get("value") if peak_name else None
        if not peak:
            return na(COLUMNS, f"no {peak_name or 'matmul'} ceiling stored for {name}: run `fusebench ceilings`")
    r = roofline(min_bytes, flops, time_us, copy, peak)
    note = (f"roofline floor {r['floor_us']:.1f} us: bytes at {copy:,.0f} GB/s copy"
            + (f", FLOPs at {peak:,.1f} TFLOP/s {peak_name}" if peak else "") + " (measured ceilings)")
    return {"pct_roofline": r["pct_roofline"], "roofline_bound": r["roofline_bound"], "note": note}


@metric("roofline")
def roofline_metric(ctx: MetricContext) -> dict:
    try:
        return measure(ctx)
    except Exception as exc:
        return na(COLUMNS, first_line(exc))
