"""Row-wise softmax, softmax of a softmax, and the softmax backward, as rowwise.RowOps.

softmax keeps a running max m and the per-lane sum of exp(x - m), rescaled whenever m grows;
a cooperative program turns its chunk into e = exp(x - m_c) (m_c the chunk's max) and publishes
(m_c, sum e), so that its output is e times one scalar once the row's partials are in.  Rows on
chip take max and sum in two block-wide reductions, or (the one-reduction tiles, where the tuner
finds them faster) as per-group (max, sum) pairs combined in one.

double_softmax reads its input once per pass even over long rows: the normalizer of the second
softmax, S2 = sum_j exp(y_j) with y_j = exp(x_j - m) / S1, comes from the power sums
T_k = sum_j exp(k (x_j - m)) gathered with the first softmax's statistics, as
S2 = sum_k T_k / (S1^k k!).  Since 0 <= y_j <= 1 and sum_j y_j = 1, sum_j y_j^k <= 1 for every
k >= 1 and S2 >= N, so stopping after k = 4 leaves a relative error in S2 below e / 5! / N: under
1.4e-6 for the long rows (N > 16384) that take these plans, against fp32's tolerance of 1e-4.
Four sums (rather than more) keep the streamed plans' registers low.  Rows on chip take the
second softmax without its max: exp(y) <= e.

softmax_backward: dx = y * (dy - sum(dy * y)); its plain looped and tile plans drop their column
masks where the steps cover the row exactly (RowOp.even: with masks, ptxas spills the one-step
32768-column loop that is this case's fastest plan there).

All arithmetic is fp32; outputs have the input's dtype and are contiguous.
"""
from __future__ import annotations

import dataclasses
import functools

import torch
import triton
import triton.language as tl

from fusebench.cases import reduce as cases
from fusebench.kernels import launch_plans, rowwise, tuning
from fusebench.kernels.device import num_sms
from fusebench.kernels.exchange import column
from fusebench.kernels.registry import triton_kernel
from fusebench.kernels.rowwise import RowOp, add4, exp_ftz, load_at, tile_ptrs

# ----------------------------------------------------------------------------------------------
# steps shared by the three ops


@triton.jit
def _x(src, row, cols, mask, POLICY: tl.constexpr, F32: tl.constexpr):
    # The input, padded with -inf (which exp() turns into 0 in the sums).  tl.load here rather than
    # through load_at: one inlined scope less, and ptxas (CUDA 12.8, Triton 3.6) schedules around
    # the debug labels of inlined scopes -- through load_at it put the cooperative double_softmax's
    # stores after the whole apply instead of interleaving them (docs/kernels.md, 'Row-wise reductions').
    ptr = src[0] + row * src[2] + cols * src[3]
    if mask is None:
        x = tl.load(ptr, eviction_policy=POLICY)
    else:
        x = tl.load(ptr, mask=mask, other=float("-inf"), eviction_policy=POLICY)
    return (x.to(tl.float32),) if F32 else (x,)


@triton.jit
def no_params(prm, cols, mask):
    return ()


@triton.jit
def no_shift(src, row, mask):
    return 0.0


# ----------------------------------------------------------------------------------------------
# softmax


@triton.jit
def _softmax_init(BLOCK_N: tl.constexpr):
    return tl.full([], float("-inf"), tl.float32), tl.zeros([BLOCK_N], tl.float32)


@triton.jit
def _softmax_acc(chunk, state, ok, k):
    # m the max so far, s (per lane) the sum of exp(x - m)
    xf = chunk[0].to(tl.float32)
    m, s = state
    m_new = tl.maximum(m, tl.max(xf, 0))
    return m_new, s * exp_ftz(m - m_new) + exp_ftz(xf - m_new)


@triton.jit
def _softmax_total(state):
    return state[0], tl.sum(state[1], 0)


@triton.jit
def _softmax_merge(stats, N, eps, k):
    return stats[0], 1.0 / stats[1]


@triton.jit
def _softmax_apply(chunk, p, consts):
    return exp_ftz(chunk[0].to(tl.float32) - consts[0]) * consts[1]


@triton.jit
def _softmax_tile(src, prm, row0, r, c, mask, M, N, eps, PREFETCH: tl.constexpr):
    x = tl.load(tile_ptrs(src[0], row0, r, c, src[2], src[3]), mask=mask, other=float("-inf")).to(tl.float32)
    e = exp_ftz(x - tl.max(x, 1)[:, None])
    return e * (1.0 / tl.sum(e, 1))[:, None]


@triton.jit
def _max_and_sum(m1, s1, m2, s2):
    # Two groups' (max, sum of exp(x - max)) as one: the smaller max's sum rescaled, one exponential.
    # Equal maxima (-inf ones included) need no rescale.
    m = tl.maximum(m1, m2)
    lo = tl.minimum(m1, m2)
    d = exp_ftz(tl.where(lo == m, 0.0, lo - m))
    return m, tl.where(m1 >= m2, s1 + s2 * d, s2 + s1 * d)


@triton.jit
def _softmax_tile_one_reduction(src, prm, row0, r, c, mask, M, N, eps, PREFETCH: tl.constexpr):
    # The row's max m and sum s in one block-wide reduction: each group of G columns (one 16-byte
    # vector of the input, which one thread holds, so its max needs no exchange) takes its max m_g
    # and e = exp(x - m_g); the groups' (m_g, sum e) pairs reduce to (m, s), and y = e exp(m_g - m) / s.
    G: tl.constexpr = 128 // src[0].dtype.element_ty.primitive_bitwidth
    BM: tl.constexpr = r.shape[0]
    BN: tl.constexpr = c.shape[0]
    x = tl.load(tile_ptrs(src[0], row0, r, c, src[2], src[3]), mask=mask, other=float("-inf")).to(tl.float32)
    x = tl.reshape(x, [BM, BN // G, G])
    m_g = tl.max(x, 2)
    e = exp_ftz(x - tl.where(m_g == float("-inf"), 0.0, m_g)[:, :, None])  # a group of -inf: e = 0
    m, s = tl.reduce((m_g, tl.sum(e, 2)), 1, _max_and_sum)
    return tl.reshape(e * (exp_ftz(m_g - m[:, None]) / s[:, None])[:, :, None], [BM, BN])


@triton.jit
def _softmax_coop_stats(chunk, ok, k):
    # the chunk becomes e = exp(x - m_c); published: (m_c, sum e)
    m_c = tl.max(chunk[0], 0)
    e = exp_ftz(chunk[0] - m_c)
    return (e,), m_c, tl.where(tl.arange(0, 2) == 0, m_c, tl.sum(e, 0))


@triton.jit
def _softmax_coop_merge(parts, m_c, N, eps, k, SPLITS, BLOCK_S: tl.constexpr):
    # m = max m_c, s = sum s_c exp(m_c - m); the chunk's scale exp(m_c - m) / s
    m_cs = tl.where(tl.arange(0, BLOCK_S) < SPLITS, column(parts, 0), float("-inf"))
    m = tl.max(m_cs, 0)
    inv = 1.0 / tl.sum(column(parts, 1) * exp_ftz(m_cs - m), 0)
    return (exp_ftz(m_c - m) * inv,)


@triton.jit
def _scaled(chunk, p, consts):
    return chunk[0] * consts[0]


SOFTMAX = RowOp("softmax", load=_x, params=no_params, shift=no_shift, init=_softmax_init, acc=_softmax_acc,
                total=_softmax_total, merge=_softmax_merge, apply=_softmax_apply, tile=_softmax_tile,
                tile_one_reduction=_softmax_tile_one_reduction, coop_stats=_softmax_coop_stats,
                coop_merge=_softmax_coop_merge, coop_apply=_scaled)


# ----------------------------------------------------------------------------------------------
# double softmax


@triton.jit
def _second_normalizer(T1, T2, T3, T4, N):
    # (1 / S1, 1 / S2) from the power sums T_k = sum_j e_j^k, e_j = exp(x_j - m), S1 = T1:
    # S2 = sum_j exp(e_j / S1) = sum_k T_k / (S1^k k!), the k = 0 term being N.
    inv = 1.0 / T1
    s2 = N + T1 * inv
    q = inv * inv
    s2 += T2 * q * 0.5
    q *= inv
    s2 += T3 * q * (1.0 / 6.0)
    q *= inv
    s2 += T4 * q * (1.0 / 24.0)
    return inv, 1.0 / s2


@triton.jit
def _powers(v):
    # (v, v^2, v^3, v^4), each power the one before times v
    v2 = v * v
    v3 = v2 * v
    return v, v2, v3, v3 * v


@triton.jit
def _ds_step(chunk, m):
    # a chunk's step: the new running max, the powers of r = exp(m - m_new) that rescale the sums
    # taken so far, and those of the chunk's e = exp(x - m_new)
    xf = chunk[0].to(tl.float32)
    m_new = tl.maximum(m, tl.max(xf, 0))
    return m_new, _powers(exp_ftz(m - m_new)), _powers(exp_ftz(xf - m_new))


@triton.jit
def _ds_init(BLOCK_N: tl.constexpr):
    z = tl.zeros([BLOCK_N], tl.float32)
    return tl.full([], float("-inf"), tl.float32), z, z, z, z


@triton.jit
def _ds_acc(chunk, state, ok, k):
    # the running max m and the per-lane power sums P_k of e = exp(x - m), k = 1..4; when m grows
    # by d, P_k is rescaled by exp(-k d) = r^k
    m, P1, P2, P3, P4 = state
    m_new, r, e = _ds_step(chunk, m)
    return m_new, P1 * r[0] + e[0], P2 * r[1] + e[1], P3 * r[2] + e[2], P4 * r[3] + e[3]


@triton.jit
def _ds_total(state):
    return state[0], tl.sum(state[1], 0), tl.sum(state[2], 0), tl.sum(state[3], 0), tl.sum(state[4], 0)


@triton.jit
def _ds_merge(stats, N, eps, k):
    m, T1, T2, T3, T4 = stats
    inv1, inv2 = _second_normalizer(T1, T2, T3, T4, N)
    return m, inv1, inv2


@triton.jit
def _ds_apply(chunk, p, consts):
    return exp_ftz(exp_ftz(chunk[0].to(tl.float32) - consts[0]) * consts[1]) * consts[2]


@triton.jit
def _ds_reread_init():
    z = tl.zeros([], tl.float32)
    return tl.full([], float("-inf"), tl.float32), z, z, z, z


@triton.jit
def _ds_reread_acc(chunk, stats, ok, k):
    # the power sums as scalars, each big step reduced at once
    m, T1, T2, T3, T4 = stats
    m_new, r, e = _ds_step(chunk, m)
    return (m_new, T1 * r[0] + tl.sum(e[0], 0), T2 * r[1] + tl.sum(e[1], 0), T3 * r[2] + tl.sum(e[2], 0),
            T4 * r[3] + tl.sum(e[3], 0))


@triton.jit
def _softmax_of_probabilities(y, mask):
    # softmax of y in [0, 1] needs no max: exp(y) <= e.  Padding has y = 0, not -inf: its exp is
    # zeroed explicitly.
    e = tl.where(mask, exp_ftz(y), 0.0)
    return e * (1.0 / tl.sum(e, 1))[:, None]


@triton.jit
def _ds_tile(src, prm, row0, r, c, mask, M, N, eps, PREFETCH: tl.constexpr):
    x = tl.load(tile_ptrs(src[0], row0, r, c, src[2], src[3]), mask=mask, other=float("-inf")).to(tl.float32)
    e = exp_ftz(x - tl.max(x, 1)[:, None])
    return _softmax_of_probabilities(e * (1.0 / tl.sum(e, 1))[:, None], mask)


@triton.jit
def _ds_tile_one_reduction(src, prm, row0, r, c, mask, M, N, eps, PREFETCH: tl.constexpr):
    return _softmax_of_probabilities(_softmax_tile_one_reduction(src, prm, row0, r, c, mask, M, N, eps, PREFETCH),
                                     mask)


@triton.jit
def _ds_coop_stats(chunk, ok, k):
    # published: (m_c, P_1 .. P_4, 0, 0, 0) of e = exp(x - m_c), P_k = sum e^k; the four sums as
    # one reduction (one exchange between warps instead of four)
    m_c = tl.max(chunk[0], 0)
    e = exp_ftz(chunk[0] - m_c)
    P1, P2, P3, P4 = tl.reduce(_powers(e), 0, add4)
    i = tl.arange(0, 8)
    stats = tl.where(i == 0, m_c, tl.where(i == 1, P1, tl.where(i == 2, P2, 0.0)))
    return (e,), m_c, tl.where(i == 3, P3, tl.where(i == 4, P4, stats))


@triton.jit
def _ds_coop_merge(parts, m_c, N, eps, k, SPLITS, BLOCK_S: tl.constexpr):
    # the power sums at the row max m: T_k = sum_c exp(k (m_c - m)) P_k,c
    m_cs = tl.where(tl.arange(0, BLOCK_S) < SPLITS, column(parts, 0), float("-inf"))
    m = tl.max(m_cs, 0)
    r1, r2, r3, r4 = _powers(exp_ftz(m_cs - m))
    T1 = tl.sum(column(parts, 1) * r1, 0)
    T2 = tl.sum(column(parts, 2) * r2, 0)
    T3 = tl.sum(column(parts, 3) * r3, 0)
    T4 = tl.sum(column(parts, 4) * r4, 0)
    inv1, inv2 = _second_normalizer(T1, T2, T3, T4, N)
    return exp_ftz(m_c - m) * inv1, inv2


@triton.jit
def _ds_coop_apply(chunk, p, consts):
    return exp_ftz(chunk[0] * consts[0]) * consts[1]


DOUBLE_SOFTMAX = RowOp("double_softmax", load=_x, params=no_params, shift=no_shift, init=_ds_init, acc=_ds_acc,
                       total=_ds_total, merge=_ds_merge, apply=_ds_apply, tile=_ds_tile,
                       tile_one_reduction=_ds_tile_one_reduction, coop_stats=_ds_coop_stats,
                       coop_merge=_ds_coop_merge, coop_apply=_ds_coop_apply, stats_k=8, reread_init=_ds_reread_init,
                       reread_acc=_ds_reread_acc, prefetch_loop=False)


# ----------------------------------------------------------------------------------------------
# softmax backward


@triton.jit
def _dy_y(src, row, cols, mask, POLICY: tl.constexpr, F32: tl.constexpr):
    dy = load_at(src[0] + row * src[2] + cols * src[3], mask, 0.0, POLICY)
    y = load_at(src[1] + row * src[4] + cols * src[5], mask, 0.0, POLICY)
    return (dy.to(tl.float32), y.to(tl.float32)) if F32 else (dy, y)


@triton.jit
def _lanes_init(BLOCK_N: tl.constexpr):
    return (tl.zeros([BLOCK_N], tl.float32),)


@triton.jit
def _bwd_acc(chunk, state, ok, k):
    return (state[0] + chunk[0].to(tl.float32) * chunk[1].to(tl.float32),)


@triton.jit
def lanes_total(state):
    return (tl.sum(state[0], 0),)


@triton.jit
def _bwd_merge(stats, N, eps, k):
    return stats


@triton.jit
def _bwd_apply(chunk, p, consts):
    return chunk[1].to(tl.float32) * (chunk[0].to(tl.float32) - consts[0])


@triton.jit
def _bwd_tile(src, prm, row0, r, c, mask, M, N, eps, PREFETCH: tl.constexpr):
    dy = tl.load(tile_ptrs(src[0], row0, r, c, src[2], src[3]), mask=mask, other=0.0).to(tl.float32)
    y = tl.load(tile_ptrs(src[1], row0, r, c, src[4], src[5]), mask=mask, other=0.0).to(tl.float32)
    dot = tl.sum(dy * y, 1)
    return y * (dy - dot[:, None])


@triton.jit
def _bwd_coop_stats(chunk, ok, k):
    return chunk, 0.0, tl.where(tl.arange(0, 2) == 0, tl.sum(chunk[0] * chunk[1], 0), 0.0)


@triton.jit
def coop_total(parts, local, N, eps, k, SPLITS, BLOCK_S: tl.constexpr):
    return (tl.sum(column(parts, 0), 0),)


SOFTMAX_BACKWARD = RowOp("softmax_backward", load=_dy_y, params=no_params, shift=no_shift, init=_lanes_init,
                         acc=_bwd_acc, total=lanes_total, merge=_bwd_merge, apply=_bwd_apply, tile=_bwd_tile,
                         coop_stats=_bwd_coop_stats, coop_merge=coop_total, coop_apply=_bwd_apply, inputs=2,
                         even=True)


# ----------------------------------------------------------------------------------------------
# candidates and wrappers: same signature and outputs as the cases' eager functions.  A wrapper's
# call is rowwise.call's launcher lookup: the candidates (the plan list's function) and the source
# hash (a function) are evaluated only when the key is new.

_SOURCE = functools.partial(tuning.source_hash, __name__, *rowwise.SOURCE_MODULES)


def softmax_plans(M, N, device, max_onchip=launch_plans.MAX_ONCHIP, elem_size=4):
    """The tuner's candidates for softmax_impl, the heuristic's choice first."""
    return launch_plans.row_plans(M, N, device, max_onchip=max_onchip, elem_size=elem_size, streams=True,
                           one_reduction=True)


def softmax_backward_plans(M, N, device, max_onchip=launch_plans.MAX_ONCHIP, elem_size=4):
    """softmax_plans for two inputs, and at long rows Inductor's plan for this case: one 32-warp
    program per row whose passes are one 32768-column step each (unmasked where the step covers
    the row: see RowOp.even), also on one program per SM, and at half the step."""
    cands = launch_plans.row_plans(M, N, device, max_onchip=max_onchip, elem_size=elem_size, streams=True,
                            row_inputs=2)  # dy and y
    if N > max_onchip:
        sms = num_sms(device)
        cands += [launch_plans.loop_plan(32768, 32), launch_plans.loop_plan(32768, 32, grid=sms), launch_plans.loop_plan(16384, 16),
                  launch_plans.loop_plan(16384, 32, grid=sms)]
    return launch_plans.unique(cands)


def double_softmax_plans(M, N, device, max_onchip=launch_plans.MAX_ONCHIP, elem_size=4):
    """Its looped kernel carries four per-lane accumulators: half the step of the other loops; the
    streamed plans keep their 8192-column steps (16384 spills)."""
    return [dataclasses.replace(p, block_n=p.block_n // 2) if p.mode == "loop" else p
            for p in launch_plans.row_plans(M, N, device, max_onchip=max_onchip, elem_size=elem_size, streams=True,
                                     rereads=True, one_reduction=True)
            if not (p.mode == "stream" and p.block_n > 8192)]


def softmax_run(x, plan=None, max_onchip=launch_plans.MAX_ONCHIP):
    """(softmax(x, 1), the plan it ran with); `plan` forces one, `max_onchip` the longest row kept on chip."""
    return rowwise.call(SOFTMAX, (x,), (), softmax_plans, plan, _SOURCE, max_onchip)


def double_softmax_run(x, plan=None, max_onchip=launch_plans.MAX_ONCHIP):
    return rowwise.call(DOUBLE_SOFTMAX, (x,), (), double_softmax_plans, plan, _SOURCE, max_onchip)


def softmax_backward_run(dy, y, plan=None, max_onchip=launch_plans.MAX_ONCHIP):
    return rowwise.call(SOFTMAX_BACKWARD, (dy, y), (), softmax_backward_plans, plan, _SOURCE, max_onchip)


def softmax_impl(x: torch.Tensor, plan: launch_plans.RowPlan | None = None, max_onchip: int = launch_plans.MAX_ONCHIP):
    return softmax_run(x, plan, max_onchip)[0]


def double_softmax_impl(x: torch.Tensor, plan: launch_plans.RowPlan | None = None, max_onchip: int = launch_plans.MAX_ONCHIP):
    return double_softmax_run(x, plan, max_onchip)[0]


def softmax_backward_impl(dy: torch.Tensor, y: torch.Tensor, plan: launch_plans.RowPlan | None = None,
                          max_onchip: int = launch_plans.MAX_ONCHIP):
    return softmax_backward_run(dy, y, plan, max_onchip)[0]


triton_kernel(cases.SOFTMAX, describe=rowwise.describe, run=softmax_run,
              autograd="fusebench.kernels.softmax_autograd:softmax")(softmax_impl)
triton_kernel(cases.DOUBLE_SOFTMAX, describe=rowwise.describe, run=double_softmax_run)(double_softmax_impl)
triton_kernel(cases.SOFTMAX_BACKWARD, describe=rowwise.describe, run=softmax_backward_run)(softmax_backward_impl)
