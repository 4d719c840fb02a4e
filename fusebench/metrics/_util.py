"""Small helpers shared by the metric families."""
from __future__ import annotations

import torch


def first_line(exc: BaseException) -> str:
    """The exception's type and the first line of its message (what a `na` reason holds)."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


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
