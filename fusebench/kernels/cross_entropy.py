"""Cross-entropy over a large vocabulary: the loss in one pass over the logits, the gradient in one more.

Forward: one program per row (token) walks the row in BLOCK_N-column chunks keeping the online
logsumexp: the running max m and the sum s of exp(x - m), both scalars, s rescaled by
exp(m_old - m) when a chunk raises m, so a 256K-column row is never held whole and each logit
costs one exp (per-lane maxima would cost two, and at bf16 logits that pass is as near the exp
units' rate as the memory's).  loss = lse - x[target]; when the logits need a gradient the row's
lse is stored too (M floats), and the logits are kept for the backward (a reference to the
input, not a copy).

Backward: one program per (row, block of GRAD_BLOCK_N columns) writes
    dlogits = (softmax(x) - onehot(target)) * dloss / M = (exp(x - lse) - [col == target]) * dloss / M
reading the incoming gradient dloss on the device (no host synchronisation).  Writing the gradient
in the forward instead (Liger-Kernel's way) moves the logits' size once more in forward plus
backward (the forward writes it, the backward scales it) and keeps it alive from the forward on,
which is slower than Inductor's in fwd_bwd, with twice its peak memory (docs/kernels.md,
'Cross-entropy's gradient in the backward, not the forward').  This way a training step moves 3
logits-sized tensors (read, read, write), as Inductor's does, and holds one gradient.

A forward chunk is 4096 columns over 8 warps: 16 logits a thread, with the scalars the only
state carried across chunks, whatever the vocabulary.  The per-row losses (fp32) are averaged by
torch (M values).

A call is one lookup of the launch kept for its operands' key (launch.signature) in the family's
launch.LauncherCache, the allocations, the launch and the mean; a new key checks the operands
(logits whose columns are strided, or targets that are not contiguous, are copied: the copies
have a key of their own).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from fusebench.cases import training as cases
from fusebench.kernels import launch_plans
from fusebench.kernels.launch import STATE, Launch, signature
from fusebench.kernels.registry import triton_kernel
from fusebench.kernels.rowwise import exp_ftz

BLOCK_N = 4096
# The backward's block of a row: 16 logits a thread over 8 warps, the best of the block sizes and
# warp counts measured (docs/kernels.md, 'Backward kernels').
GRAD_BLOCK_N = 4096


@triton.jit
def _ce_kernel(x_ptr, t_ptr, loss_ptr, lse_ptr, N, stride_x, WITH_LSE: tl.constexpr, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    c = tl.arange(0, BLOCK_N)
    # online logsumexp, one chunk's max and sum of exponentials at a time
    m = tl.full([], float("-inf"), tl.float32)
    s = tl.zeros([], tl.float32)
    for start in tl.range(0, N, BLOCK_N):
        cols = start + c
        x = tl.load(x_row + cols, mask=cols < N, other=float("-inf"), eviction_policy="evict_first").to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, 0))  # finite: every chunk holds at least one logit
        s = s * exp_ftz(m - m_new) + tl.sum(exp_ftz(x - m_new), 0)
        m = m_new
    lse = m + tl.log(s)
    target = tl.load(t_ptr + row)
    x_t = tl.load(x_row + target).to(tl.float32)
    tl.store(loss_ptr + row, lse - x_t)
    if WITH_LSE:
        tl.store(lse_ptr + row, lse)


@triton.jit
def _ce_grad_kernel(x_ptr, t_ptr, lse_ptr, dloss_ptr, g_ptr, N, stride_x, stride_g, inv_m, BLOCK_N: tl.constexpr):
    # program (row, column block): that block of the row's gradient
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
    lse = tl.load(lse_ptr + row)
    target = tl.load(t_ptr + row)
    scale = tl.load(dloss_ptr).to(tl.float32) * inv_m
    g = (exp_ftz(x - lse) - tl.where(cols == target, 1.0, 0.0)) * scale
    tl.store(g_ptr + row * stride_g + cols, g.to(g_ptr.dtype.element_ty), mask=mask)


class _LossLauncher:
    """A key's forward launch (None: no rows), its arguments after the pointers, and the rows."""

    __slots__ = ("launch", "rest", "rows")

    def __init__(self, x: torch.Tensor, with_lse: bool):
        M, N = x.shape
        self.rows = (M,)
        block_n = min(BLOCK_N, triton.next_power_of_2(N))
        self.launch = Launch(_ce_kernel, (M,), dict(WITH_LSE=with_lse, BLOCK_N=block_n, num_warps=launch_plans.num_warps_for(
            block_n, per_thread=16, lo=1, hi=8))) if M else None
        self.rest = (N, x.stride(0))


class _GradLauncher:
    """A key's backward launch (None: nothing to write), its arguments after the pointers, and the
    gradient's shape and strides."""

    __slots__ = ("launch", "rest", "shape", "stride")

    def __init__(self, x: torch.Tensor):
        M, N = x.shape
        self.shape, self.stride = (M, N), (N, 1)
        block_n = min(GRAD_BLOCK_N, triton.next_power_of_2(N))
        self.launch = Launch(_ce_grad_kernel, (M, triton.cdiv(N, block_n)), dict(
            BLOCK_N=block_n, num_warps=launch_plans.num_warps_for(block_n, per_thread=16, lo=1, hi=8))) if M * N else None
        self.rest = (N, x.stride(0), N, 1.0 / M if M else 0.0)


# ("fwd", with_lse, the signature of logits and targets) -> its _LossLauncher;
# ("bwd", the signature of logits, targets and lse) -> its _GradLauncher
_CACHE = STATE.launchers("cross_entropy")


def cross_entropy_forward(logits: torch.Tensor, targets: torch.Tensor, with_lse: bool = False):
    """(mean loss in the logits' dtype, each row's logsumexp in fp32 or None), and the logits and
    targets the kernel read (contiguous copies where the given ones are not: the backward reads
    those)."""
    f = _CACHE.get(("fwd", with_lse, signature(logits, targets)))
    if f is None:
        return _first_call(logits, targets, with_lse)
    losses = logits.new_empty_strided(f.rows, (1,), dtype=torch.float32)
    lse = logits.new_empty_strided(f.rows, (1,), dtype=torch.float32) if with_lse else None
    if f.launch is not None:
        f.launch(logits, targets, losses, lse if with_lse else losses, *f.rest)
    # the mean over rows in fp32, rounded once to the logits' dtype (as F.cross_entropy returns it)
    return losses.mean().to(logits.dtype), lse, logits, targets


def _first_call(logits, targets, with_lse):
    """A key's first forward: check the operands, keep the launch for laid-out ones, and call
    cross_entropy_forward again (on copies where they are not)."""
    if logits.dim() != 2 or targets.shape != (logits.shape[0],):
        raise ValueError(f"logits must be (rows, vocab) and targets (rows,), got {tuple(logits.shape)} and "
                         f"{tuple(targets.shape)}")
    x = launch_plans.as_2d_strided(logits)
    if x.stride(1) != 1:
        x = x.contiguous()
    t = targets.contiguous()
    if x is not logits or t is not targets:
        return cross_entropy_forward(x, t, with_lse)
    _CACHE.miss(("fwd", with_lse, signature(logits, targets)), _build, _LossLauncher, x, with_lse)
    return cross_entropy_forward(logits, targets, with_lse)


def _build(kind, *args) -> tuple:
    """(the key's launcher, kind(*args); final: nothing here is tuned)."""
    return kind(*args), True


def cross_entropy_backward(logits: torch.Tensor, targets: torch.Tensor, lse: torch.Tensor,
                           dloss: torch.Tensor) -> torch.Tensor:
    """The logits' gradient of the mean loss for an incoming gradient dloss (a one-element tensor,
    read on the device), from the forward's logits, targets and lse (cross_entropy_forward's)."""
    key = ("bwd", signature(logits, targets, lse))
    f = _CACHE.get(key)
    if f is None:
        f = _CACHE.miss(key, _build, _GradLauncher, logits)
    grad = logits.new_empty_strided(f.shape, f.stride)
    if f.launch is not None:
        f.launch(logits, targets, lse, dloss.reshape(1), grad, *f.rest)
    return grad


class CrossEntropy(torch.autograd.Function):
    """Forward: the loss, and when the logits need a gradient each row's lse (saved with the
    logits and targets).  Backward: the gradient from those and the incoming one."""

    @staticmethod
    def forward(ctx, logits, targets):
        loss, lse, x, t = cross_entropy_forward(logits, targets, with_lse=ctx.needs_input_grad[0])
        ctx.save_for_backward(x, t, lse)
        return loss

    @staticmethod
    def backward(ctx, dloss):
        x, t, lse = ctx.saved_tensors
        return cross_entropy_backward(x, t, lse, dloss), None


def cross_entropy_impl(logits, targets):
    return cross_entropy_forward(logits, targets)[0]


triton_kernel(cases.CROSS_ENTROPY,
              describe=lambda shape, dtype: "online logsumexp; the backward recomputes the softmax from the saved lse",
              autograd=lambda logits, targets: CrossEntropy.apply(logits, targets))(cross_entropy_impl)
