"""Registry of fusebench's own Triton kernels, one entry per case.

A kernel module registers a *wrapper*: a Python function with the same signature as the case's
eager function (see fusebench/cases/) that returns the same outputs (shapes, dtypes, values).
The `triton` implementation (fusebench/impls/) looks kernels up here.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

import torch


@dataclass
class TritonKernel:
    case: str
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


KERNELS: dict[str, TritonKernel] = {}


def triton_kernel(case: str, *, supports=None, describe=None, interpretable: bool = True, describe_plan=None,
                  run=None, autograd=None):
    """Decorator: register `fn` as fusebench's Triton implementation of `case`."""

    def wrap(fn: Callable) -> Callable:
        KERNELS[case] = TritonKernel(case, fn, supports, describe, interpretable, describe_plan, run, autograd)
        return fn

    return wrap
