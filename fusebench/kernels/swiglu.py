"""SwiGLU, silu(a) * b, forward and backward as element-wise kernels.

Forward: y = a * sigmoid(a) * b, one read of a and b, one write of y.
Backward: with s = sigmoid(a), recomputed from a rather than saved,
    db = dy * a * s
    da = dy * b * s * (1 + a * (1 - s))
one read of dy, a and b, one write of da and db.  All arithmetic is fp32; outputs have the
inputs' dtype.  The tensors are walked as flat contiguous vectors, BLOCK elements a program.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from fusebench.kernels.registry import triton_kernel

BLOCK = 1024


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


def swiglu_forward(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """silu(a) * b."""
    _check(a, b)
    a, b = a.contiguous(), b.contiguous()
    y = torch.empty_like(a)
    n = a.numel()
    if n:
        _swiglu_fwd_kernel[(triton.cdiv(n, BLOCK),)](a, b, y, n, BLOCK=BLOCK, num_warps=4)
    return y


def swiglu_backward(dy: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(da, db) of y = silu(a) * b given dy."""
    _check(a, b)
    dy, a, b = dy.contiguous(), a.contiguous(), b.contiguous()
    da, db = torch.empty_like(a), torch.empty_like(b)
    n = a.numel()
    if n:
        _swiglu_bwd_kernel[(triton.cdiv(n, BLOCK),)](dy, a, b, da, db, n, BLOCK=BLOCK, num_warps=4)
    return da, db


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


triton_kernel("swiglu", describe=lambda shape, dtype: "element-wise, fp32 math",
              autograd=swiglu_autograd)(swiglu_forward)
