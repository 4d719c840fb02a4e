"""What a cell times: the forward (`fwd`), the backward alone (`bwd`), or both (`fwd_bwd`).

Here: the modes' names, how a title names them, which implementations a mode plans, and the byte
and FLOP models a mode's cells are judged by.  How a mode's call runs (autograd) is
runner/mode_call.py; the mode a stored run measured is read by runner/request.py.
"""
from __future__ import annotations

from dataclasses import replace

from fusebench.cases.base import Case

MODES = ("fwd", "bwd", "fwd_bwd")


def check_mode(mode: str | None) -> str:
    """A mode name, or ValueError with a one-line message."""
    mode = mode or "fwd"
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
    return mode


def mode_label(mode: str) -> str:
    """How a title names the mode: nothing for the forward, else e.g. " · bwd"."""
    return "" if mode == "fwd" else f" · {mode}"


def _sum_models(a, b):
    if a is None or b is None:
        return None
    return lambda shape, dtype: a(shape, dtype) + b(shape, dtype)


def case_in_mode(case: Case, mode: str) -> Case:
    """`case` with its byte and FLOP models those of `mode` (the backward's, or the forward's plus
    the backward's), so that gbps, the copy ceiling and the roofline mean the same in every mode."""
    if mode == "fwd":
        return case
    if mode == "bwd":
        return replace(case, bytes_model=case.backward_bytes_model, flops_model=case.backward_flops_model)
    return replace(case, bytes_model=_sum_models(case.bytes_model, case.backward_bytes_model),
                   flops_model=_sum_models(case.flops_model, case.backward_flops_model))


def applies_in(impl, case: Case, mode: str) -> bool:
    """Whether `impl` is planned for `case` in `mode`: where it applies, and for the training
    modes where the case is differentiable and the implementation has a backward for it."""
    if not impl.applies(case):
        return False
    return mode == "fwd" or (case.differentiable and impl.has_backward(case, mode))


__all__ = ["MODES", "applies_in", "case_in_mode", "check_mode", "mode_label"]
