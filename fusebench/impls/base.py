"""What an implementation is, and the registry that holds them.

An implementation turns a case into a callable for one (shape, dtype, device): eager runs the
function as written, Inductor compiles it, `triton` looks up our own kernel, the SDPA backends
call PyTorch's fused attention, the peers call other libraries' kernels.  A built-in implementation
is a class marked with the decorator `@implementation` here, which the catalog's loader collects
(fusebench/catalog.py); a user's function registers with `fusebench.implementation` (impls/user.py).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Callable, ContextManager

import torch

from fusebench import catalog
from fusebench.cases.base import Case, Shape, UnknownName, suggest


class FellBack(Exception):
    """A compiled implementation ran (part of) the call outside its compiled code."""


@dataclass
class Prepared:
    """A ready-to-call implementation for one cell."""

    fn: Callable  # called as fn(*args) with the case's inputs
    # Entered around every call (e.g. choosing an SDPA backend), outside the timed region.
    context: Callable[[], ContextManager] = contextlib.nullcontext
    note: str = ""  # stored with the cell: how this implementation ran (precision, path chosen ...)
    # Called after warm-up and after timing; raises FellBack if the calls were not what they claim.
    check: Callable[[], dict] = lambda: {}
    timing_available: str | None = None  # reason timing is not meaningful (e.g. interpreter)
    # Reason the output is not compared with the reference: set only by ceiling implementations
    # that time part of the case on purpose (torch-mm: the GEMM without its epilogue).
    accuracy_available: str | None = None
    # Called after the first calls: a note known only then (e.g. the launch plan an autotuner
    # chose); replaces `note` when it returns one.
    note_after: Callable[[], str | None] = lambda: None
    extra: dict = field(default_factory=dict)
    # The forward differentiated in the training modes where it is not `fn` (our Triton kernels:
    # their autograd.Function, whose backward is our backward kernels).
    train_fn: Callable | None = None


class Implementation:
    name: str = ""
    description: str = ""
    # "implementation": a way to compute the case, compared by speedup over the baseline.
    # "ceiling": a bound timed beside them (a same-size copy, the GEMM alone); the others are shown
    # as a percentage of it, and it is never given a speedup or called fastest.
    kind: str = "implementation"
    # Planned by a run that names no implementations?  Slow ones (max-autotune) run only by name
    # or with `--impl all`.
    default: bool = True
    # Planned by default on the CPU (when `default` is set)?
    default_on_cpu: bool = True
    # ((case, adapter), ...): what this implementation runs for each case it computes, attached
    # to the case object (case.adapters[name]) by @implementation; such an implementation applies
    # to those cases only.
    adapters: tuple = ()

    def applies(self, case: Case) -> bool:
        """Whether this implementation computes (or bounds) `case` at all, wherever it runs.

        Structural only: SDPA computes attention and nothing else.  A cell that applies but cannot
        run here (no GPU, a library missing, a shape the kernel refuses) is `supports()`'s business
        and ends `unsupported`; a cell that does not apply is never planned."""
        return True

    def has_backward(self, case: Case, mode: str) -> bool:
        """Whether this implementation computes `case` in a training mode (bwd, fwd_bwd) of a
        differentiable case: by default through autograd of its forward (eager, Inductor, the
        libraries' autograd Functions, users' functions)."""
        return True

    def available(self, device: str) -> str | None:
        """None if this implementation can run at all on `device`, else why not."""
        return None

    def supports(self, case: Case, shape: Shape, dtype: torch.dtype, device: str) -> str | None:
        """None if this implementation can run the cell, else the reason it cannot."""
        return self.available(device)

    def prepare(self, case: Case, shape: Shape, dtype: torch.dtype, device: str) -> Prepared:
        raise NotImplementedError


# The catalog's table of implementations; kept under this name for callers that add or remove one.
_IMPLS: dict[str, Implementation] = catalog.CATALOG.impls


def implementation(cls):
    """Class decorator: declare one instance of an Implementation subclass for the catalog, and
    attach its adapters to their cases."""
    inst = cls()
    for case, adapter in cls.adapters:
        case.adapters[inst.name] = adapter
    catalog.mark(cls, "impls", inst.name, inst)
    return cls


def _load() -> None:
    catalog.load()


def get_impl(name: str) -> Implementation:
    impls = catalog.load().impls
    if name not in impls:
        raise UnknownName(f"unknown implementation {name!r}{suggest(name, list(impls))}{catalog.CATALOG.failures()}")
    return impls[name]


def all_impls() -> list[Implementation]:
    return list(catalog.load().impls.values())
