"""Small helpers shared by the metric families."""
from __future__ import annotations

import torch

from fusebench.util import first_line  # noqa: F401 (re-exported for the metric modules)


def na(columns, why: str) -> dict:
    return {"na": {c: why for c in columns}}


def impl_name(ctx) -> str:
    return getattr(ctx.impl, "name", "") or ""


def is_inductor(ctx) -> bool:
    return impl_name(ctx).startswith("inductor")


def tensors(obj):
    """The tensors in a (nested) output."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            yield from tensors(o)
    elif isinstance(obj, dict):
        for o in obj.values():
            yield from tensors(o)
