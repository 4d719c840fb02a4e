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


# The count depends on the case's function and the inputs' shapes and dtypes, not on the
# implementation: the implementations of one shape share it (the last key's count is kept).
_LAST: dict = {}


def _inputs_key(args) -> tuple:
    return tuple((tuple(a.shape), a.dtype, a.device.type) if isinstance(a, torch.Tensor) else repr(a) for a in args)


def counted_flops(fn, args) -> int:
    """count_flops(fn, args), counted once for the implementations of one shape."""
    key = (fn, _inputs_key(args))
    if _LAST.get("key") != key:
        _LAST.clear()
        _LAST.update(key=key, counted=count_flops(fn, args))
    return _LAST["counted"]


@metric("flops")
def flops_metric(ctx: MetricContext) -> dict:
    try:
        counted = counted_flops(ctx.case.fn, ctx.args)
    except Exception as exc:
        return {"na": {"flops_counted": f"FlopCounterMode failed: {first_line(exc)}"}}
    if counted == 0:
        return {"na": {"flops_counted": "FlopCounterMode counts only matmul, conv and attention"}}
    row = {"flops_counted": counted}
    note = cross_check(counted, (ctx.row or {}).get("flops"))
    if note:
        row["note"] = note
    return row
