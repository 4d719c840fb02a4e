"""`flops`: the analytic FLOP model cross-checked against `torch.utils.flop_counter.FlopCounterMode`.

One eager call of the case's function runs under FlopCounterMode; `flops_counted` is its total.
FlopCounterMode counts only matmul, convolution and attention-like operators, so for a case made
of point-wise operations and reductions it counts 0: then the column is not available (the analytic
model stands alone).  Where both exist and differ by more than 1%, the note says so -- a disagreement
is flagged, never hidden (e.g. the model counts an epilogue's bias add, the counter only the GEMM).
"""
from __future__ import annotations

import torch

from fusebench.metrics import MetricContext, metric
from fusebench.metrics._util import first_line

TOLERANCE = 0.01


def count_flops(fn, args) -> int:
    from torch.utils.flop_counter import FlopCounterMode

    with torch.no_grad(), FlopCounterMode(display=False) as mode:
        out = fn(*args)
        del out
    return int(mode.get_total_flops())


def cross_check(counted: int, model: int | None) -> str | None:
    """The note for a disagreement beyond TOLERANCE, else None."""
    if not model or not counted:
        return None
    rel = abs(counted - model) / model
    if rel <= TOLERANCE:
        return None
    return (f"FLOP counter {counted:,} vs model {model:,} ({(counted - model) / model:+.1%}): "
            "FlopCounterMode counts only matmul, conv and attention")


@metric("flops")
def flops_metric(ctx: MetricContext) -> dict:
    try:
        counted = count_flops(ctx.case.fn, ctx.args)
    except Exception as exc:
        return {"na": {"flops_counted": f"FlopCounterMode failed: {first_line(exc)}"}}
    if counted == 0:
        return {"na": {"flops_counted": "FlopCounterMode counts only matmul, conv and attention"}}
    row = {"flops_counted": counted}
    note = cross_check(counted, (ctx.row or {}).get("flops"))
    if note:
        row["note"] = note
    return row
