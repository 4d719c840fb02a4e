"""Cross-entropy over a large vocabulary: the loss and the logits' gradient in one kernel.

One program per row (token).  Its first pass walks the row in BLOCK_N-column chunks keeping the
online logsumexp: the running max m and the sum s of exp(x - m), both scalars, s rescaled by
exp(m_old - m) when a chunk raises m, so a 256K-column row is never held whole and each logit
costs one exp (per-lane maxima would cost two, and at bf16 logits that pass is as near the
exp units' rate as the memory's).  loss = lse - x[target].  When the logits need a gradient, a
second pass over the same row (just read: mostly from L2) writes
    dlogits = (softmax(x) - onehot(target)) / M = (exp(x - lse) - [col == target]) / M
which is the gradient of the mean loss for an incoming gradient of 1: the forward writes the
gradient in the same kernel that computes the loss, as Liger-Kernel does, and the logits need
not be kept for the backward.  The backward multiplies it by the incoming gradient (a scalar read
on the device: no host synchronisation), into a new tensor so that the graph can be run again.

A chunk is 4096 columns over 8 warps: 16 logits a thread, with the scalars the only state
carried across chunks, whatever the vocabulary.

The per-row losses (fp32) are averaged by torch (M values).

A call is one lookup of the launch kept for its operands' key (launch.signature), the allocations,
the launch and the mean; a new key checks the operands (logits whose columns are strided, or
targets that are not contiguous, are copied: the copies have a key of their own).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from fusebench.kernels import plans
from fusebench.kernels.launch import Launch, signature
from fusebench.kernels.registry import triton_kernel

BLOCK_N = 4096


@triton.jit
def _ce_kernel(x_ptr, t_ptr, loss_ptr, grad_ptr, N, stride_x, stride_g, inv_m, WITH_GRAD: tl.constexpr,
               BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    c = tl.arange(0, BLOCK_N)
    # pass 1: online logsumexp, one chunk's max and sum of exponentials at a time
    m = tl.full([], float("-inf"), tl.float32)
    s = tl.zeros([], tl.float32)
    for start in tl.range(0, N, BLOCK_N):
        cols = start + c
        x = tl.load(x_row + cols, mask=cols < N, other=float("-inf"), eviction_policy="evict_last").to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, 0))  # finite: every chunk holds at least one logit
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), 0)
        m = m_new
    lse = m + tl.log(s)
    target = tl.load(t_ptr + row)
    x_t = tl.load(x_row + target).to(tl.float32)
    tl.store(loss_ptr + row, lse - x_t)
    if WITH_GRAD:
        g_row = grad_ptr + row * stride_g
        for start in tl.range(0, N, BLOCK_N):
            cols = start + c
            x = tl.load(x_row + cols, mask=cols < N, other=0.0, eviction_policy="evict_first").to(tl.float32)
            g = (tl.exp(x - lse) - tl.where(cols == target, 1.0, 0.0)) * inv_m
            tl.store(g_row + cols, g.to(g_row.dtype.element_ty), mask=cols < N)


@triton.jit
def _scale_kernel(g_ptr, s_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    scale = tl.load(s_ptr).to(tl.float32)
    g = tl.load(g_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + offs, (g * scale).to(out_ptr.dtype.element_ty), mask=mask)


class _Launcher:
    """A key's launch (None: no rows), its arguments after the pointers, and the outputs' shapes."""

    __slots__ = ("launch", "rest", "rows", "shape", "stride")

    def __init__(self, x: torch.Tensor, with_grad: bool):
        M, N = x.shape
        self.rows, self.shape, self.stride = (M,), (M, N), (N, 1)
        block_n = min(BLOCK_N, triton.next_power_of_2(N))
        self.launch = Launch(_ce_kernel, (M,), dict(WITH_GRAD=with_grad, BLOCK_N=block_n, num_warps=plans.num_warps_for(
            block_n, per_thread=16, lo=1, hi=8))) if M else None
        self.rest = (N, x.stride(0), N if with_grad else 0, 1.0 / M if M else 0.0)


# (with_grad, the signature of logits and targets) -> its _Launcher
_LAUNCHERS: dict[tuple, _Launcher] = {}


def cross_entropy_forward(logits: torch.Tensor, targets: torch.Tensor, with_grad: bool = False):
    """(mean loss in the logits' dtype, the logits' gradient for an incoming gradient of 1, or None)."""
    f = _LAUNCHERS.get((with_grad, signature(logits, targets)))
    if f is None:
        return _miss(logits, targets, with_grad)
    losses = logits.new_empty_strided(f.rows, (1,), dtype=torch.float32)
    grad = logits.new_empty_strided(f.shape, f.stride) if with_grad else None
    if f.launch is not None:
        f.launch(logits, targets, losses, grad if with_grad else logits, *f.rest)
    # the mean over rows in fp32, rounded once to the logits' dtype (as F.cross_entropy returns it)
    return losses.mean().to(logits.dtype), grad


def _miss(logits, targets, with_grad):
    if logits.dim() != 2 or targets.shape != (logits.shape[0],):
        raise ValueError(f"logits must be (rows, vocab) and targets (rows,), got {tuple(logits.shape)} and "
                         f"{tuple(targets.shape)}")
    x = plans.as_2d_strided(logits)
    if x.stride(1) != 1:
        x = x.contiguous()
    t = targets.contiguous()
    if x is not logits or t is not targets:
        return cross_entropy_forward(x, t, with_grad)
    _LAUNCHERS[(with_grad, signature(logits, targets))] = _Launcher(x, with_grad)
    return cross_entropy_forward(logits, targets, with_grad)


def scale(grad: torch.Tensor, by: torch.Tensor) -> torch.Tensor:
    """grad * by (a one-element tensor), read on the device, into a new tensor."""
    out = torch.empty_like(grad)
    n = grad.numel()
    if n:
        _scale_kernel[(triton.cdiv(n, 1024),)](grad, by.reshape(1), out, n, BLOCK=1024, num_warps=4)
    return out


class CrossEntropy(torch.autograd.Function):
    """Forward: the loss and, when the logits need a gradient, that gradient (saved; the logits
    are not).  Backward: the saved gradient times the incoming one."""

    @staticmethod
    def forward(ctx, logits, targets):
        loss, grad = cross_entropy_forward(logits, targets, with_grad=ctx.needs_input_grad[0])
        ctx.save_for_backward(grad)
        return loss

    @staticmethod
    def backward(ctx, dloss):
        (grad,) = ctx.saved_tensors
        return scale(grad, dloss), None


def cross_entropy_impl(logits, targets):
    return cross_entropy_forward(logits, targets)[0]


triton_kernel("cross_entropy", describe=lambda shape, dtype: "online logsumexp; the gradient written by the "
              "forward (the backward scales it)", autograd=lambda logits, targets: CrossEntropy.apply(logits, targets)
              )(cross_entropy_impl)
