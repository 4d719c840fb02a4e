"""How a kernel module attaches fusebench's own Triton kernel to its case.

A kernel module registers a *wrapper*: a Python function with the same signature as the case's
eager function (see fusebench/cases/) that returns the same outputs (shapes, dtypes, values).
`@triton_kernel(CASE)` attaches it to the case object as `CASE.kernel`, where the `triton`
implementation (fusebench/impls/triton_impl.py) finds it.  Kernels import cases; cases never
import kernels.
"""
from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Callable, Iterator

import torch

from fusebench import catalog


@dataclass
class TritonKernel:
    case: str  # the name of the case it computes
    fn: Callable  # same signature and outputs as the case's eager function
    # (shape, dtype, device) -> None if supported, else the reason it is not
    supports: Callable[[tuple, torch.dtype, str], str | None] | None = None
    # (shape, dtype) -> a short note stored with the cell, e.g. "tf32", "fused b2b (on chip)"
    describe: Callable[[tuple, torch.dtype], str] | None = None
    # False where the kernel uses what TRITON_INTERPRET=1 cannot run (libdevice calls, bf16 math)
    interpretable: bool = True
    # (plan, device) -> the note for the launch plan the autotuner chose, where the plan's own
    # describe() leaves out what the kernel decides at launch (layernorm's weight held or not)
    describe_plan: Callable[[object, str], str] | None = None
    # (*inputs) -> (outputs, the launch plan they ran with): kernels that choose a plan per shape
    run: Callable[..., tuple] | None = None
    # The same function through a torch.autograd.Function whose backward runs our backward
    # kernels, or "module:name" of it (imported at first use, so that a forward's module need not
    # import its backward's, which imports the forward); None: the kernel is measured forward only
    # (no bwd or fwd_bwd cells are planned).
    autograd_ref: Callable | str | None = None

    @property
    def autograd(self) -> Callable | None:
        if isinstance(self.autograd_ref, str):
            module, _, name = self.autograd_ref.partition(":")
            self.autograd_ref = getattr(importlib.import_module(module), name)
        return self.autograd_ref

    @autograd.setter
    def autograd(self, fn: Callable | str | None) -> None:
        self.autograd_ref = fn


def triton_kernel(case, *, supports=None, describe=None, interpretable: bool = True, describe_plan=None,
                  run=None, autograd=None):
    """Decorator: attach `fn` to `case` (a Case object) as fusebench's Triton implementation of it.

    `case` may also be a case's name, for a module that cannot import the case object (a user's
    file): the catalog's loader attaches the kernel to the case of that name when it collects the
    module (fusebench/catalog.py)."""

    def wrap(fn: Callable) -> Callable:
        name = case if isinstance(case, str) else case.name
        kernel = TritonKernel(name, fn, supports, describe, interpretable, describe_plan, run, autograd)
        if isinstance(case, str):
            catalog.mark(fn, "kernels", name, kernel)
        else:
            case.kernel = kernel
        return fn

    return wrap


class KernelView(Mapping):
    """Case name -> its TritonKernel, for every case of the catalog that has one: a read-only view,
    for callers that look a kernel up by name (tests, scripts)."""

    def _table(self) -> dict[str, TritonKernel]:
        return {name: c.kernel for name, c in catalog.load().cases.items() if c.kernel is not None}

    def __getitem__(self, name: str) -> TritonKernel:
        return self._table()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._table())

    def __len__(self) -> int:
        return len(self._table())


KERNELS = KernelView()
