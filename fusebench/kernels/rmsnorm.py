"""RMSNorm and residual-add + RMSNorm: forwards as rowwise.RowOps, and one backward kernel.

Forward: y = x * r * w, r = 1 / sqrt(mean(x^2) + eps), w the per-column weight.  The statistic is
one sum of squares per row, so every rowwise plan applies (tile, loop, stream, coop).

add_rmsnorm: h = x + residual (rounded to the inputs' dtype, as PyTorch's add is), then
rmsnorm(h).  Its two inputs are the op's two row inputs; h is written by the tile step, through
the op's second parameter slot (a pointer to h's contiguous rows), so one read of x and residual
writes both outputs (rowwise.RowOp.aux_out).  Only tile plans write h, so add_rmsnorm takes
tile plans alone: rows up to launch_plans.MAX_ONCHIP columns (every hidden size of today's models);
longer rows compute h with torch.add and normalize it with the rmsnorm op (two passes; the note
says so).

Backward (shared by both, and with LayerNorm's: kernels/layernorm_backward.py): with
x-hat = x * r and g = dy * w,
    dx = r * (g - x-hat * mean(g * x-hat))   (+ dh, the gradient flowing into add_rmsnorm's h)
    dw = sum over rows of dy * x-hat
r is recomputed from x, but where the backward shares a row among a team of programs: there
RMSNorm's forward saves it (save=True) and the team reads it, one sum a row instead of two
(add_rmsnorm recomputes it).  layernorm_backward.py says which kernel takes which rows.
"""
from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from fusebench.cases import training as cases
from fusebench.kernels import layernorm_backward as lnb, launch_plans, rowwise, tuning
from fusebench.kernels.exchange import column
from fusebench.kernels.layernorm_backward import norm_backward
from fusebench.kernels.norms import _x0
from fusebench.kernels.registry import triton_kernel
from fusebench.kernels.rowwise import RowOp, load_at, tile_ptrs
from fusebench.kernels.softmax import _lanes_init, lanes_total, no_shift

RMSNORM_EPS = 1e-6

# ----------------------------------------------------------------------------------------------
# steps shared by the two forwards


@triton.jit
def _weight(prm, cols, mask):
    return (load_at(prm[0] + cols, mask, 0.0, ""),)


@triton.jit
def _sq_acc(chunk, state, ok, k):
    # per-lane sums of x^2 (padding loads as 0)
    x = chunk[0].to(tl.float32)
    return (state[0] + x * x,)


@triton.jit
def _rstd(stats, N, eps, k):
    return (1.0 / tl.sqrt(stats[0] / N + eps),)


@triton.jit
def _apply(chunk, p, consts):
    return chunk[0].to(tl.float32) * consts[0] * p[0].to(tl.float32)


@triton.jit
def _normalize_rows(x, prm, c, N, eps):
    # (rows x ([BLOCK_M, BLOCK_N], fp32, padding 0) normalized and scaled by the weight, their rstd)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, 1) / N + eps)
    w = tl.load(prm[0] + c, mask=c < N, other=0.0).to(tl.float32)
    return x * rstd[:, None] * w[None, :], rstd


@triton.jit
def _rms_tile(src, prm, row0, r, c, mask, M, N, eps, PREFETCH: tl.constexpr):
    return _rms_tile_saving(src, prm, row0, r, c, mask, M, N, eps, PREFETCH)[0]


@triton.jit
def _rms_tile_saving(src, prm, row0, r, c, mask, M, N, eps, PREFETCH: tl.constexpr):
    # (the rows' output, (their rstd,))
    x = tl.load(tile_ptrs(src[0], row0, r, c, src[2], src[3]), mask=mask, other=0.0).to(tl.float32)
    y, rstd = _normalize_rows(x, prm, c, N, eps)
    return y, (rstd,)


@triton.jit
def _sq_coop_stats(chunk, ok, k):
    x = chunk[0].to(tl.float32)
    return chunk, 0.0, tl.where(tl.arange(0, 2) == 0, tl.sum(x * x, 0), 0.0)


@triton.jit
def _sq_coop_merge(parts, local, N, eps, k, SPLITS, BLOCK_S: tl.constexpr):
    return _rstd((tl.sum(column(parts, 0), 0),), N, eps, k)


RMSNORM = RowOp("rmsnorm", load=_x0, params=_weight, shift=no_shift, init=_lanes_init, acc=_sq_acc,
                total=lanes_total, merge=_rstd, apply=_apply, tile=_rms_tile, coop_stats=_sq_coop_stats,
                coop_merge=_sq_coop_merge, coop_apply=_apply, n_params=1, eps=RMSNORM_EPS, saves=1,
                tile_saving=_rms_tile_saving)


# ----------------------------------------------------------------------------------------------
# add_rmsnorm: inputs (x, residual), parameters (weight, h's rows)


@triton.jit
def _sum_rows(src, row, cols, mask, POLICY: tl.constexpr, F32: tl.constexpr):
    x = load_at(src[0] + row * src[2] + cols * src[3], mask, 0.0, POLICY)
    res = load_at(src[1] + row * src[4] + cols * src[5], mask, 0.0, POLICY)
    h = (x.to(tl.float32) + res.to(tl.float32)).to(x.dtype)
    return (h.to(tl.float32),) if F32 else (h,)


@triton.jit
def _add_rms_tile(src, prm, row0, r, c, mask, M, N, eps, PREFETCH: tl.constexpr):
    x = tl.load(tile_ptrs(src[0], row0, r, c, src[2], src[3]), mask=mask, other=0.0)
    res = tl.load(tile_ptrs(src[1], row0, r, c, src[4], src[5]), mask=mask, other=0.0)
    h = (x.to(tl.float32) + res.to(tl.float32)).to(x.dtype)
    # h's rows are contiguous (row stride N): written here, beside the normalized output
    tl.store(tile_ptrs(prm[1], row0, r, c, N, 1), h, mask=mask)
    return _normalize_rows(h.to(tl.float32), prm, c, N, eps)[0]


ADD_RMSNORM = RowOp("add_rmsnorm", load=_sum_rows, params=_weight, shift=no_shift, init=_lanes_init, acc=_sq_acc,
                    total=lanes_total, merge=_rstd, apply=_apply, tile=_add_rms_tile, coop_stats=_sq_coop_stats,
                    coop_merge=_sq_coop_merge, coop_apply=_apply, inputs=2, n_params=1, aux_out=True,
                    eps=RMSNORM_EPS)

_SOURCE = functools.partial(tuning.source_hash, __name__, "fusebench.kernels.norms", "fusebench.kernels.softmax",
                            *rowwise.SOURCE_MODULES)


def rmsnorm_plans(M, N, device, max_onchip=launch_plans.MAX_ONCHIP, elem_size=4):
    """The tuner's candidates for rmsnorm, the heuristic's choice first."""
    return launch_plans.row_plans(M, N, device, max_onchip=max_onchip, elem_size=elem_size, streams=True)


def add_rmsnorm_plans(M, N, device, max_onchip=launch_plans.MAX_ONCHIP, elem_size=4):
    """Tile plans only: the tile step is the one that writes h."""
    return [p for p in launch_plans.row_plans(M, N, device, max_onchip=max_onchip, elem_size=elem_size, row_inputs=2)
            if p.mode == "tile"]


def rmsnorm_run(x, weight, plan=None, max_onchip=launch_plans.MAX_ONCHIP, save=False):
    """(F.rms_norm(x, (N,), weight, 1e-6), the plan it ran with); with `save` the output is (that,
    [M, 1] fp32: each row's rstd)."""
    return rowwise.call(RMSNORM, (x,), (weight,), rmsnorm_plans, plan, _SOURCE, max_onchip, save)


def add_rmsnorm_run(x, residual, weight, plan=None, max_onchip=launch_plans.MAX_ONCHIP):
    """((h, rmsnorm(h)), the plan) with h = x + residual; one pass where the rows fit on chip."""
    if x.dim() == 2 and x.shape[1] > max_onchip:  # rows too long for one program: the sum, then the norm
        if x.shape != residual.shape or x.dtype != residual.dtype:
            raise ValueError(f"x {tuple(x.shape)} {x.dtype} and residual {tuple(residual.shape)} "
                             f"{residual.dtype} differ")
        h = torch.add(x, residual)
        y, ran = rmsnorm_run(h, weight, plan, max_onchip)
        return (h, y), ran
    if plan is not None and plan.mode != "tile":
        raise ValueError(f"add_rmsnorm runs tile plans only, not {plan.mode}")
    return rowwise.call(ADD_RMSNORM, (x, residual), (weight,), add_rmsnorm_plans, plan, _SOURCE, max_onchip)


def describe_add_rmsnorm(shape, dtype) -> str:
    if shape[1] > launch_plans.MAX_ONCHIP:
        return "rows past 16384 columns: torch.add, then the rmsnorm kernel (two passes)"
    return rowwise.describe(shape, dtype)


# ----------------------------------------------------------------------------------------------
# backward


def rmsnorm_backward(dy, x, weight, dh=None, programs: int | None = None, max_onchip: int = launch_plans.MAX_ONCHIP,
                     stats: torch.Tensor | None = None):
    """(dx, dw) of y = rmsnorm(x) * weight given dy; with dh, dx also carries it (add_rmsnorm's
    gradient of h, which flows to x and residual alike).  Rows past `max_onchip` columns take the
    long-row kernels.  `stats`: the forward's row rstds (layernorm_backward.norm_backward)."""
    dx, dw, _ = norm_backward(dy, x, weight, dh, center=False, eps=RMSNORM_EPS, max_onchip=max_onchip,
                              programs=programs, stats=stats)
    return dx, dw


class RMSNorm(torch.autograd.Function):
    """rmsnorm_run forward, rmsnorm_backward backward; saves x and the weight, and the rows' rstd
    where the backward reads it (layernorm_backward.reads_saved_stats)."""

    @staticmethod
    def forward(ctx, x, weight):
        if lnb.reads_saved_stats(x, center=False):
            (y, stats), _ = rmsnorm_run(x, weight, save=True)
            ctx.save_for_backward(x, weight, stats)
            return y
        ctx.save_for_backward(x, weight)
        return rmsnorm_run(x, weight)[0]

    @staticmethod
    def backward(ctx, dy):
        x, weight, *stats = ctx.saved_tensors
        return rmsnorm_backward(dy, x, weight, stats=stats[0] if stats else None)


class AddRMSNorm(torch.autograd.Function):
    """add_rmsnorm_run forward; the backward gives x and residual the same gradient tensor."""

    @staticmethod
    def forward(ctx, x, residual, weight):
        (h, y), _ = add_rmsnorm_run(x, residual, weight)
        ctx.save_for_backward(h, weight)
        return h, y

    @staticmethod
    def backward(ctx, dh, dy):
        h, weight = ctx.saved_tensors
        dx, dw = rmsnorm_backward(dy, h, weight, dh)
        return dx, dx, dw


def rmsnorm_impl(x, weight, plan=None, max_onchip=launch_plans.MAX_ONCHIP):
    return rmsnorm_run(x, weight, plan, max_onchip)[0]


def add_rmsnorm_impl(x, residual, weight, plan=None, max_onchip=launch_plans.MAX_ONCHIP):
    return add_rmsnorm_run(x, residual, weight, plan, max_onchip)[0]


triton_kernel(cases.RMSNORM, describe=rowwise.describe, run=rmsnorm_run,
              autograd=lambda x, weight: RMSNorm.apply(x, weight))(rmsnorm_impl)
triton_kernel(cases.ADD_RMSNORM, describe=describe_add_rmsnorm, run=add_rmsnorm_run,
              autograd=lambda x, residual, weight: AddRMSNorm.apply(x, residual, weight))(add_rmsnorm_impl)
