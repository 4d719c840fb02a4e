"""SwiGLU, silu(a) * b, forward and backward as element-wise kernels.

Forward: y = a * sigmoid(a) * b, one read of a and b, one write of y.
Backward: with s = sigmoid(a), recomputed from a rather than saved,
    db = dy * a * s
    da = dy * b * s * (1 + a * (1 - s))
one read of dy, a and b, one write of da and db.  All arithmetic is fp32; outputs have the
inputs' dtype.  The tensors are walked as flat contiguous vectors, BLOCK elements a program.

A call is one lookup of the launch kept for its operands' key (launch.signature) in the family's
launch.LauncherCache, the outputs' allocation and the launch; operands that are not contiguous are
copied first (their contiguous copies have a key of their own).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from fusebench.cases import training as cases
from fusebench.kernels.launch import STATE, Launch, signature
from fusebench.kernels.registry import triton_kernel

BLOCK = 1024
# The backward at 8 warps (4 elements a thread): faster than at 4, and than 2048-4096-element
# blocks or evict_first loads (docs/kernels.md, 'Backward kernels').
FWD_WARPS, BWD_WARPS = 4, 8


@triton.jit
def _sigmoid(a):
    return 1.0 / (1.0 + tl.exp(-a))


@triton.jit
def _swiglu_fwd_kernel(a_ptr, b_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + offs, (a * _sigmoid(a) * b).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _swiglu_bwd_kernel(dy_ptr, a_ptr, b_ptr, da_ptr, db_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    dy = tl.load(dy_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    a = tl.load(a_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    s = _sigmoid(a)
    silu = a * s
    tl.store(db_ptr + offs, (dy * silu).to(db_ptr.dtype.element_ty), mask=mask)
    tl.store(da_ptr + offs, (dy * b * (s + silu * (1.0 - s))).to(da_ptr.dtype.element_ty), mask=mask)


def _check(a, b):
    if a.shape != b.shape or a.dtype != b.dtype:
        raise ValueError(f"a {tuple(a.shape)} {a.dtype} and b {tuple(b.shape)} {b.dtype} differ")


class _SwiGLULaunch:
    """A key's launch over the operands' n elements, and the outputs' shape and strides."""

    __slots__ = ("launch", "n", "shape", "stride")

    def __init__(self, kernel, a, num_warps: int):
        self.n, self.shape, self.stride = a.numel(), tuple(a.shape), a.stride()
        self.launch = (Launch(kernel, (triton.cdiv(self.n, BLOCK),), dict(BLOCK=BLOCK, num_warps=num_warps))
                       if self.n else None)


# ("fwd" or "bwd", the operands' signature) -> its _SwiGLULaunch
_CACHE = STATE.launchers("swiglu")


def swiglu_forward(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """silu(a) * b."""
    f = _CACHE.get(("fwd", signature(a, b)))
    if f is None:
        return _first_call("fwd", _swiglu_fwd_kernel, swiglu_forward, a, b)
    y = a.new_empty_strided(f.shape, f.stride)
    if f.launch is not None:
        f.launch(a, b, y, f.n)
    return y


def swiglu_backward(dy: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(da, db) of y = silu(a) * b given dy."""
    f = _CACHE.get(("bwd", signature(dy, a, b)))
    if f is None:
        return _first_call("bwd", _swiglu_bwd_kernel, swiglu_backward, dy, a, b)
    da, db = a.new_empty_strided(f.shape, f.stride), a.new_empty_strided(f.shape, f.stride)
    if f.launch is not None:
        f.launch(dy, a, b, da, db, f.n)
    return da, db


def _first_call(direction, kernel, wrapper, *operands):
    """A key's first call: check the operands, keep the launch for contiguous ones, and call
    `wrapper` again (on contiguous copies where the operands are not)."""
    _check(*operands[-2:])
    if operands[0].shape != operands[-1].shape:
        raise ValueError(f"dy {tuple(operands[0].shape)} and a {tuple(operands[-1].shape)} differ")
    if not all(t.is_contiguous() for t in operands):
        return wrapper(*(t.contiguous() for t in operands))
    _CACHE.miss((direction, signature(*operands)), _build, kernel, operands[-1],
                FWD_WARPS if direction == "fwd" else BWD_WARPS)
    return wrapper(*operands)


def _build(kernel, a, num_warps: int) -> tuple[_SwiGLULaunch, bool]:
    """(the launch of `kernel` over operands shaped as `a`, final: nothing is tuned)."""
    return _SwiGLULaunch(kernel, a, num_warps), True


class SwiGLU(torch.autograd.Function):
    """swiglu_forward with swiglu_backward; saves a and b (the inputs, no activation of its own)."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return swiglu_forward(a, b)

    @staticmethod
    def backward(ctx, dy):
        a, b = ctx.saved_tensors
        return swiglu_backward(dy, a, b)


def swiglu_autograd(a, b):
    return SwiGLU.apply(a, b)


triton_kernel(cases.SWIGLU, describe=lambda shape, dtype: "element-wise, fp32 math",
              autograd=swiglu_autograd)(swiglu_forward)
