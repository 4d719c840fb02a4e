"""Metric families beyond time and accuracy: one module per family, each a function
`measure(ctx) -> dict` of store columns (see fusebench/store.py), marked with `@metric`, which the
catalog's loader (fusebench/catalog.py) collects.

A family that cannot measure here returns {"na": {column_or_family: "why"}} instead of numbers:
nothing is ever estimated and shown as measured.  The runner calls the selected families after
timing, only for cells whose accuracy passed, with the implementation already warmed up.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from fusebench import catalog

# Families run by default.  `compile` (a cold compile in fresh caches per cell) and `ncu` (a
# profiled child process per cell) are slow and opt-in.
DEFAULT_METRICS = ("kernels", "graph", "memory", "flops", "roofline")
ALL_METRICS = DEFAULT_METRICS + ("compile", "ncu")


def parse_metrics(spec: str | None) -> tuple[str, ...]:
    """'default' | 'all' | 'none' | comma-separated families (time and accuracy are always measured)."""
    if spec in (None, "", "default"):
        return DEFAULT_METRICS
    if spec == "all":
        return ALL_METRICS
    if spec == "none":
        return ()
    names = tuple(n.strip() for n in spec.split(",") if n.strip() and n.strip() not in ("time", "accuracy"))
    for n in names:
        if n not in ALL_METRICS:
            from fusebench.cases.base import UnknownName, suggest

            raise UnknownName(f"unknown metric {n!r}{suggest(n, list(ALL_METRICS))}; "
                              f"choose from {', '.join(ALL_METRICS)}, default, all or none")
    return names


@dataclass
class MetricContext:
    case: object  # fusebench.cases.Case
    impl: object  # fusebench.impls.Implementation
    prepared: object  # fusebench.impls.Prepared: prepared.fn(*args) is one warmed-up call
    args: tuple  # inputs of seed 0, on the device
    shape: tuple
    dtype: torch.dtype
    device: str
    row: dict  # the cell's row so far (time_us, min_bytes, flops ...); read-only for metrics
    db_path: str | None = None  # the results store (ceilings live there)
    extra: dict = field(default_factory=dict)

    def call(self):
        return self.prepared.fn(*self.args)


def metric(name: str):
    """Decorator: declare `fn(ctx) -> dict` as metric family `name`."""
    def wrap(fn):
        catalog.mark(fn, "metrics", name, fn)
        return fn
    return wrap


def get_metric(name: str) -> Callable[[MetricContext], dict]:
    metrics = catalog.load().metrics
    if name not in metrics:
        from fusebench.cases.base import UnknownName, suggest

        raise UnknownName(f"unknown metric {name!r}{suggest(name, list(ALL_METRICS))}{catalog.CATALOG.failures()}")
    return metrics[name]
