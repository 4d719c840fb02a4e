"""LayerNorm over the last dimension, and the norm chain (three times: x = x * sum(x, 1)), as
rowwise.RowOps.

LayerNorm statistics are taken of d = x - K, K the row's first element, so that a large mean
neither costs the sums their low bits nor cancels the variance away.  On chip: the two-pass mean
and variance of d in registers.  Over a long row: sums of d and d*d, var = mean(d^2) - mean(d)^2.
Weight and bias are the op's per-column parameters: loaded with the rows or after the
statistics (tile, RowPlan.prefetch), with each step's inputs (the long-row plans), or, by a
cooperative program whose registers allow it, once for all its rounds.

Norm chain: the chain (sum, scale, sum, scale, sum, scale) needs only the first sum s:
sum(x * s) = s * sum(x), so the second sum is s^2, the third s^4, and the result
x * s * s^2 * s^4, the same function up to rounding (the reference is float64).  So the long-row
plans read the input twice (once for coop), not four times, and the rows on chip wait for one
block-wide reduction, not three.
"""
from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from fusebench.cases import reduce as cases
from fusebench.kernels import layernorm_backward as lnb, launch_plans, rowwise, tuning
from fusebench.kernels.exchange import column
from fusebench.kernels.registry import triton_kernel
from fusebench.kernels.rowwise import RowOp, add2, load_at, tile_ptrs
from fusebench.kernels.softmax import _lanes_init, lanes_total, no_params, no_shift

LAYERNORM_EPS = 1e-5


@triton.jit
def _x0(src, row, cols, mask, POLICY: tl.constexpr, F32: tl.constexpr):
    # The input, padded with 0.
    x = load_at(src[0] + row * src[2] + cols * src[3], mask, 0.0, POLICY)
    return (x.to(tl.float32),) if F32 else (x,)


# ----------------------------------------------------------------------------------------------
# layernorm


@triton.jit
def _weight_bias(prm, cols, mask):
    return load_at(prm[0] + cols, mask, 0.0, ""), load_at(prm[1] + cols, mask, 0.0, "")


@triton.jit
def _first_element(src, row, mask):
    return load_at(src[0] + row * src[2], mask, 0.0, "").to(tl.float32)


@triton.jit
def _ln_init(BLOCK_N: tl.constexpr):
    return tl.zeros([BLOCK_N], tl.float32), tl.zeros([BLOCK_N], tl.float32)


@triton.jit
def _ln_acc(chunk, state, ok, k):
    # per-lane sums of d = x - k and d^2 (padding, where ok is false, zeroed; ok None: a whole chunk)
    s1, s2 = state
    if ok is None:
        d = chunk[0].to(tl.float32) - k
    else:
        d = tl.where(ok, chunk[0].to(tl.float32) - k, 0.0)
    return s1 + d, s2 + d * d


@triton.jit
def _ln_total(state):
    return tl.sum(state[0], 0), tl.sum(state[1], 0)


@triton.jit
def _ln_merge(stats, N, eps, k):
    # a row's sums -> (mean, 1 / sqrt(var + eps))
    mean_d = stats[0] / N
    rstd = 1.0 / tl.sqrt(tl.maximum(stats[1] / N - mean_d * mean_d, 0.0) + eps)
    return k + mean_d, rstd


@triton.jit
def _ln_apply(chunk, p, consts):
    return (chunk[0].to(tl.float32) - consts[0]) * consts[1] * p[0].to(tl.float32) + p[1].to(tl.float32)


@triton.jit
def _ln_reread_init():
    return tl.zeros([], tl.float32), tl.zeros([], tl.float32)


@triton.jit
def _ln_reread_acc(chunk, stats, ok, k):
    d = tl.where(ok, chunk[0].to(tl.float32) - k, 0.0)
    return stats[0] + tl.sum(d, 0), stats[1] + tl.sum(d * d, 0)


@triton.jit
def _ln_tile(src, prm, row0, r, c, mask, M, N, eps, PREFETCH: tl.constexpr):
    return _ln_tile_saving(src, prm, row0, r, c, mask, M, N, eps, PREFETCH)[0]


@triton.jit
def _ln_tile_saving(src, prm, row0, r, c, mask, M, N, eps, PREFETCH: tl.constexpr):
    # (the rows' output, their (mean, rstd))
    x = tl.load(tile_ptrs(src[0], row0, r, c, src[2], src[3]), mask=mask, other=0.0).to(tl.float32)
    if PREFETCH:  # weight and bias in flight with the rows
        w = tl.load(prm[0] + c, mask=c < N, other=0.0).to(tl.float32)
        b = tl.load(prm[1] + c, mask=c < N, other=0.0).to(tl.float32)
    # Two-pass statistics on the rows in registers, of x shifted by each row's first element;
    # padding is zeroed out.
    k = tl.load(src[0] + row0 * src[2] + r * src[2], mask=r < M - row0, other=0.0).to(tl.float32)
    d = tl.where(mask, x - k[:, None], 0.0)
    mean_d = tl.sum(d, 1) / N
    xc = tl.where(mask, d - mean_d[:, None], 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, 1) / N + eps)
    # One weight and bias vector per program, shared by its rows; by default loaded only now
    # (three row-sized values per thread at 32 values a thread spill); PREFETCH plans load them
    # first, one memory round trip fewer.
    if not PREFETCH:
        w = tl.load(prm[0] + c, mask=c < N, other=0.0).to(tl.float32)
        b = tl.load(prm[1] + c, mask=c < N, other=0.0).to(tl.float32)
    return xc * rstd[:, None] * w[None, :] + b[None, :], (k + mean_d, rstd)


@triton.jit
def _ln_coop_stats(chunk, ok, k):
    # published: (sum d, sum d^2), d = x - k, as one reduction (one exchange between warps, not two)
    d = tl.where(ok, chunk[0] - k, 0.0)
    sum_d, sum_d2 = tl.reduce((d, d * d), 0, add2)
    return chunk, 0.0, tl.where(tl.arange(0, 2) == 0, sum_d, sum_d2)


@triton.jit
def _ln_coop_merge(parts, local, N, eps, k, SPLITS, BLOCK_S: tl.constexpr):
    return _ln_merge((tl.sum(column(parts, 0), 0), tl.sum(column(parts, 1), 0)), N, eps, k)


def layernorm_holds_wb(block_n: int, num_warps: int, register_cap: int, prefetch: bool) -> bool:
    """Whether a cooperative plan's programs keep their weight and bias chunks in registers across
    rounds (3 chunk-sized sets, 4 with the prefetch) rather than re-read them from L2 every row:
    where the sets leave 32 registers of the cap for the rest (at 65536 fp32 columns on sm_90,
    those are the plans that hold them with at most 8 bytes spilled)."""
    return (3 + prefetch) * (block_n // (32 * num_warps)) + 32 <= register_cap


def _plan_holds_wb(plan: launch_plans.RowPlan, register_cap: int) -> bool:
    return layernorm_holds_wb(plan.block_n, plan.num_warps, register_cap, plan.prefetch)


LAYERNORM = RowOp("layernorm", load=_x0, params=_weight_bias, shift=_first_element, init=_ln_init, acc=_ln_acc,
                  total=_ln_total, merge=_ln_merge, apply=_ln_apply, tile=_ln_tile, coop_stats=_ln_coop_stats,
                  coop_merge=_ln_coop_merge, coop_apply=_ln_apply, reread_init=_ln_reread_init,
                  reread_acc=_ln_reread_acc, n_params=2, eps=LAYERNORM_EPS, holds_params=_plan_holds_wb, saves=2,
                  tile_saving=_ln_tile_saving)


# ----------------------------------------------------------------------------------------------
# norm chain


@triton.jit
def _chain_scale(s):
    # s * s^2 * s^4: the product of the chain's three sums given the first one, s.
    s2 = s * s
    return s * s2 * (s2 * s2)


@triton.jit
def _chain_acc(chunk, state, ok, k):
    return (state[0] + chunk[0].to(tl.float32),)


@triton.jit
def _chain_merge(stats, N, eps, k):
    return (_chain_scale(stats[0]),)


@triton.jit
def _chain_apply(chunk, p, consts):
    return chunk[0].to(tl.float32) * consts[0]


@triton.jit
def _chain_tile(src, prm, row0, r, c, mask, M, N, eps, PREFETCH: tl.constexpr):
    x = tl.load(tile_ptrs(src[0], row0, r, c, src[2], src[3]), mask=mask, other=0.0).to(tl.float32)
    return x * _chain_scale(tl.sum(x, 1))[:, None]


@triton.jit
def _chain_coop_stats(chunk, ok, k):
    return chunk, 0.0, tl.where(tl.arange(0, 2) == 0, tl.sum(chunk[0], 0), 0.0)


@triton.jit
def _chain_coop_merge(parts, local, N, eps, k, SPLITS, BLOCK_S: tl.constexpr):
    return (_chain_scale(tl.sum(column(parts, 0), 0)),)


NORM_CHAIN = RowOp("norm_chain", load=_x0, params=no_params, shift=no_shift, init=_lanes_init, acc=_chain_acc,
                   total=lanes_total, merge=_chain_merge, apply=_chain_apply, tile=_chain_tile,
                   coop_stats=_chain_coop_stats, coop_merge=_chain_coop_merge, coop_apply=_chain_apply)


# ----------------------------------------------------------------------------------------------
# candidates and wrappers

_SOURCE = functools.partial(tuning.source_hash, __name__, "fusebench.kernels.softmax", *rowwise.SOURCE_MODULES)


def layernorm_plans(M, N, device, max_onchip=launch_plans.MAX_ONCHIP, elem_size=4):
    """The tuner's candidates for layernorm_impl, the heuristic's choice first."""
    return launch_plans.row_plans(M, N, device, max_onchip=max_onchip, elem_size=elem_size,
                           tile_prefetch=True, streams=True, rereads=True)


def norm_chain_plans(M, N, device, max_onchip=launch_plans.MAX_ONCHIP, elem_size=4):
    return launch_plans.row_plans(M, N, device, max_onchip=max_onchip, elem_size=elem_size, streams=True)


def layernorm_run(x, weight, bias, plan=None, max_onchip=launch_plans.MAX_ONCHIP, save=False):
    """(F.layer_norm(x, (N,), weight, bias, 1e-5), the plan it ran with); with `save` the output
    is (that, [M, 2] fp32: each row's mean and rstd)."""
    return rowwise.call(LAYERNORM, (x,), (weight, bias), layernorm_plans, plan, _SOURCE, max_onchip, save)


def norm_chain_run(x, plan=None, max_onchip=launch_plans.MAX_ONCHIP):
    return rowwise.call(NORM_CHAIN, (x,), (), norm_chain_plans, plan, _SOURCE, max_onchip)


def layernorm_impl(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, plan: launch_plans.RowPlan | None = None,
                   max_onchip: int = launch_plans.MAX_ONCHIP):
    return layernorm_run(x, weight, bias, plan, max_onchip)[0]


def norm_chain_impl(x: torch.Tensor, plan: launch_plans.RowPlan | None = None, max_onchip: int = launch_plans.MAX_ONCHIP):
    return norm_chain_run(x, plan, max_onchip)[0]


def describe_layernorm_plan(plan: launch_plans.RowPlan, device) -> str:
    """plan.describe(), saying for a cooperative plan whether its programs hold weight and bias
    across rounds (as the launcher decides it)."""
    text = plan.describe()
    if plan.mode == "coop":
        held = _plan_holds_wb(plan, launch_plans.coop_launch_args(plan, device)["maxnreg"])
        text = text[:-1] + (", weight and bias held)" if held else ", weight and bias re-read)")
    return text


class LayerNorm(torch.autograd.Function):
    """layernorm_run forward, layernorm_backward.layernorm_backward backward; saves x and the
    weight, and the rows' mean and rstd where the backward reads them (reads_saved_stats)."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        if lnb.reads_saved_stats(x, center=True):
            (y, stats), _ = layernorm_run(x, weight, bias, save=True)
            ctx.save_for_backward(x, weight, stats)
            return y
        ctx.save_for_backward(x, weight)
        return layernorm_run(x, weight, bias)[0]

    @staticmethod
    def backward(ctx, dy):
        x, weight, *stats = ctx.saved_tensors
        return lnb.layernorm_backward(dy, x, weight, stats=stats[0] if stats else None)


def layer_norm(x, weight, bias):
    """The layernorm case's function through LayerNorm (registered as the kernel's autograd)."""
    return LayerNorm.apply(x, weight, bias)


triton_kernel(cases.LAYERNORM, describe=rowwise.describe, describe_plan=describe_layernorm_plan,
              run=layernorm_run, autograd=layer_norm)(layernorm_impl)
triton_kernel(cases.NORM_CHAIN, describe=rowwise.describe, run=norm_chain_run)(norm_chain_impl)
