"""LayerNorm over the last dimension, and the norm chain (three times: x = x * sum(x, 1)), fused.

Launch plans as in softmax.py (utils.RowPlan): `tile` keeps whole rows in registers (one read,
one write); `loop` (many long rows) makes a statistics pass and a second, backwards pass over
each row (`stream`: the same on persistent programs, as one chain of steps with the next loads
always in flight, see softmax.py); `split` (few long rows) spreads a row over several programs,
with a stats kernel and an apply kernel (the input is read twice, the second time mostly from
L2); `coop` spreads a row over several programs that keep their chunks in registers while they
exchange partial results (utils.publish, utils.collect: one read); `reread` (layernorm) is
`stream` with a first pass of big steps, each reduced at once to two scalars (a 32768-column row
in one step), and a second pass of smaller steps from L2.

LayerNorm statistics are taken of d = x - K, K the row's first element, so that a large mean
neither costs the sums their low bits nor cancels the variance away.  On chip: the two-pass
mean and variance of d in registers.  Over a long row: sums of d and d*d, var = mean(d^2) -
mean(d)^2.

Norm chain: the chain (sum, scale, sum, scale, sum, scale) needs only the first sum s:
sum(x * s) = s * sum(x), so the second sum is s^2, the third s^4, and the result
x * s * s^2 * s^4, the same function up to rounding (the reference is float64).  So the long-row
plans read the input twice (once for coop), not four times, and the rows on chip wait for one
block-wide reduction, not three (until session 18 they computed the chain as written).
"""
from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from fusebench.kernels import utils
from fusebench.kernels.registry import triton_kernel
from fusebench.kernels.utils import collect, column, coop_layout, exchange_finish, exchange_slots, publish, \
    sum_of_partials

LAYERNORM_EPS = 1e-5

# ----------------------------------------------------------------------------------------------
# layernorm


@triton.jit
def _layernorm_tile_kernel(x_ptr, w_ptr, b_ptr, y_ptr, M, N, stride_xm, stride_xn, stride_ym, eps,
                           ALIGN: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                           PREFETCH: tl.constexpr):
    N = N // ALIGN * ALIGN  # ALIGN divides N and the row strides: 16-byte vectors
    stride_xm = stride_xm // ALIGN * ALIGN
    stride_ym = stride_ym // ALIGN * ALIGN
    row0 = tl.program_id(0).to(tl.int64) * BLOCK_M
    r = tl.arange(0, BLOCK_M)
    c = tl.arange(0, BLOCK_N)
    mask = (r < M - row0)[:, None] & (c < N)[None, :]
    x = tl.load(x_ptr + row0 * stride_xm + r[:, None] * stride_xm + c[None, :] * stride_xn,
                mask=mask, other=0.0).to(tl.float32)
    if PREFETCH:  # weight and bias in flight with the rows (see below for the default)
        w = tl.load(w_ptr + c, mask=c < N, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + c, mask=c < N, other=0.0).to(tl.float32)
    # Two-pass statistics on the rows in registers, of x shifted by each row's first element
    # (a large mean would otherwise cost the sum its low bits); padding is zeroed out.
    k = tl.load(x_ptr + row0 * stride_xm + r * stride_xm, mask=r < M - row0, other=0.0).to(tl.float32)
    d = tl.where(mask, x - k[:, None], 0.0)
    mean_d = tl.sum(d, 1) / N
    xc = tl.where(mask, d - mean_d[:, None], 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, 1) / N + eps)
    # One weight and bias vector per program, shared by its rows; by default loaded only now
    # (loading them with the rows measured 2x slower on an H200 at 32 values per thread: three
    # row-sized values per thread spill); PREFETCH plans load them first, one round trip fewer.
    if not PREFETCH:
        w = tl.load(w_ptr + c, mask=c < N, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + c, mask=c < N, other=0.0).to(tl.float32)
    y = xc * rstd[:, None] * w[None, :] + b[None, :]
    tl.store(y_ptr + row0 * stride_ym + r[:, None] * stride_ym + c[None, :],
             y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _layernorm_stats(x_row, stride_xn, k, lo, hi, N, BLOCK_N: tl.constexpr, STAGES: tl.constexpr):
    # (sum d, sum d^2) over x_row[lo:hi], d = x - k, per lane, then across lanes.
    c = tl.arange(0, BLOCK_N)
    s1 = tl.zeros([BLOCK_N], tl.float32)
    s2 = tl.zeros([BLOCK_N], tl.float32)
    if STAGES == 1:  # the next step's loads in flight (registers) while this step is reduced
        cols = lo + c
        x = tl.load(x_row + cols * stride_xn, mask=cols < N, other=0.0, eviction_policy="evict_last")
        for start in tl.range(lo + BLOCK_N, hi + BLOCK_N, BLOCK_N):
            cols_next = start + c
            x_next = tl.load(x_row + cols_next * stride_xn, mask=(cols_next < N) & (cols_next < hi), other=0.0,
                             eviction_policy="evict_last")
            d = tl.where(cols < N, x.to(tl.float32) - k, 0.0)
            s1 += d
            s2 += d * d
            cols = cols_next
            x = x_next
    else:
        for start in tl.range(lo, hi, BLOCK_N, num_stages=STAGES):
            cols = start + c
            x = tl.load(x_row + cols * stride_xn, mask=cols < N, other=0.0,
                        eviction_policy="evict_last").to(tl.float32)
            d = tl.where(cols < N, x - k, 0.0)
            s1 += d
            s2 += d * d
    return tl.sum(s1, 0), tl.sum(s2, 0)


@triton.jit
def _layernorm_write(x_row, w_ptr, b_ptr, y_row, stride_xn, lo, hi, N, mean, rstd, BLOCK_N: tl.constexpr,
                     STAGES: tl.constexpr):
    # y[lo:hi] = (x - mean) * rstd * w + b, last chunk first.
    c = tl.arange(0, BLOCK_N)
    n_chunks = tl.cdiv(hi - lo, BLOCK_N)
    if STAGES == 1:  # the next (lower) chunk's loads in flight while this one is written
        cols = lo + (n_chunks - 1) * BLOCK_N + c
        x = tl.load(x_row + cols * stride_xn, mask=cols < N, other=0.0, eviction_policy="evict_first")
        w = tl.load(w_ptr + cols, mask=cols < N, other=0.0)
        b = tl.load(b_ptr + cols, mask=cols < N, other=0.0)
        for j in tl.range(1, n_chunks + 1):
            cols_next = cols - BLOCK_N
            ok = (cols_next < N) & (cols_next >= lo)
            x_next = tl.load(x_row + cols_next * stride_xn, mask=ok, other=0.0, eviction_policy="evict_first")
            w_next = tl.load(w_ptr + cols_next, mask=ok, other=0.0)
            b_next = tl.load(b_ptr + cols_next, mask=ok, other=0.0)
            y = (x.to(tl.float32) - mean) * rstd * w.to(tl.float32) + b.to(tl.float32)
            tl.store(y_row + cols, y.to(y_row.dtype.element_ty), mask=cols < N, eviction_policy="evict_first")
            cols = cols_next
            x = x_next
            w = w_next
            b = b_next
    else:
        for j in tl.range(0, n_chunks, num_stages=STAGES):
            cols = lo + (n_chunks - 1 - j) * BLOCK_N + c
            x = tl.load(x_row + cols * stride_xn, mask=cols < N, other=0.0,
                        eviction_policy="evict_first").to(tl.float32)
            w = tl.load(w_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
            b = tl.load(b_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
            tl.store(y_row + cols, ((x - mean) * rstd * w + b).to(y_row.dtype.element_ty), mask=cols < N,
                     eviction_policy="evict_first")


@triton.jit
def _layernorm_loop_kernel(x_ptr, w_ptr, b_ptr, y_ptr, M, N, stride_xm, stride_xn, stride_ym, eps,
                           ALIGN: tl.constexpr, BLOCK_N: tl.constexpr, STAGES: tl.constexpr):
    N = N // ALIGN * ALIGN
    stride_xm = stride_xm // ALIGN * ALIGN
    stride_ym = stride_ym // ALIGN * ALIGN
    # Rows pid, pid + P, ... (P = the grid size).
    pid = tl.program_id(0)
    n_prog = tl.num_programs(0)
    for i in tl.range(0, tl.cdiv(M - pid, n_prog)):
        row = (pid + i * n_prog).to(tl.int64)
        x_row = x_ptr + row * stride_xm
        # Statistics of d = x - K, K the row's first element.
        k = tl.load(x_row).to(tl.float32)
        sum_d, sum_d2 = _layernorm_stats(x_row, stride_xn, k, 0, N, N, BLOCK_N, STAGES)
        mean_d = sum_d / N
        rstd = 1.0 / tl.sqrt(tl.maximum(sum_d2 / N - mean_d * mean_d, 0.0) + eps)
        _layernorm_write(x_row, w_ptr, b_ptr, y_ptr + row * stride_ym, stride_xn, 0, N, N, k + mean_d, rstd,
                         BLOCK_N, STAGES)


@triton.jit
def _layernorm_stream_kernel(x_ptr, w_ptr, b_ptr, y_ptr, M, N, stride_xm, stride_xn, stride_ym, eps,
                             ALIGN: tl.constexpr, BLOCK_N: tl.constexpr):
    # The step chain of softmax.py's _softmax_stream_kernel: sums of d = x - K (K the row's first
    # element, loaded with the row's first chunk), then y = (x - mean) * rstd * w + b, with the
    # weight and bias of the next chunk in flight with its x.
    N = N // ALIGN * ALIGN
    stride_xm = stride_xm // ALIGN * ALIGN
    stride_ym = stride_ym // ALIGN * ALIGN
    pid = tl.program_id(0)
    n_prog = tl.num_programs(0)
    c = tl.arange(0, BLOCK_N)
    n_chunks = tl.cdiv(N, BLOCK_N)
    last = (n_chunks - 1) * BLOCK_N
    row = pid.to(tl.int64)
    x = utils.first_chunk(x_ptr, row, M, N, stride_xm, stride_xn, 0.0, BLOCK_N)
    k = tl.load(x_ptr + row * stride_xm, mask=row < M, other=0.0).to(tl.float32)
    for i in tl.range(0, tl.cdiv(M - pid, n_prog)):
        x_row = x_ptr + row * stride_xm
        y_row = y_ptr + row * stride_ym
        s1 = tl.zeros([BLOCK_N], tl.float32)
        s2 = tl.zeros([BLOCK_N], tl.float32)
        for start in tl.range(BLOCK_N, last + 1, BLOCK_N):  # x: whole chunks, no padding to zero
            x_next = tl.load(x_row + (start + c) * stride_xn, mask=start + c < N, other=0.0,
                             eviction_policy="evict_last")
            d = x.to(tl.float32) - k
            s1 += d
            s2 += d * d
            x = x_next
        # The last chunk, written from registers; chunk n-2's x, w, b in flight meanwhile.
        cols = last + c
        w = tl.load(w_ptr + cols, mask=cols < N, other=0.0)
        b = tl.load(b_ptr + cols, mask=cols < N, other=0.0)
        ok = cols - BLOCK_N >= 0
        x_next = tl.load(x_row + (cols - BLOCK_N) * stride_xn, mask=ok, other=0.0, eviction_policy="evict_first")
        w_next = tl.load(w_ptr + cols - BLOCK_N, mask=ok, other=0.0)
        b_next = tl.load(b_ptr + cols - BLOCK_N, mask=ok, other=0.0)
        d = tl.where(cols < N, x.to(tl.float32) - k, 0.0)
        mean_d = tl.sum(s1 + d, 0) / N
        rstd = 1.0 / tl.sqrt(tl.maximum(tl.sum(s2 + d * d, 0) / N - mean_d * mean_d, 0.0) + eps)
        mean = k + mean_d
        y = (x.to(tl.float32) - mean) * rstd * w.to(tl.float32) + b.to(tl.float32)
        tl.store(y_row + cols, y.to(y_row.dtype.element_ty), mask=cols < N, eviction_policy="evict_first")
        x = x_next
        w = w_next
        b = b_next
        for j in tl.range(1, n_chunks - 1):
            cols = last - j * BLOCK_N + c  # whole chunks: no masks
            x_next = tl.load(x_row + (cols - BLOCK_N) * stride_xn, eviction_policy="evict_first")
            w_next = tl.load(w_ptr + cols - BLOCK_N)
            b_next = tl.load(b_ptr + cols - BLOCK_N)
            y = (x.to(tl.float32) - mean) * rstd * w.to(tl.float32) + b.to(tl.float32)
            tl.store(y_row + cols, y.to(y_row.dtype.element_ty), eviction_policy="evict_first")
            x = x_next
            w = w_next
            b = b_next
        row_next = row + n_prog
        x_next = utils.first_chunk(x_ptr, row_next, M, N, stride_xm, stride_xn, 0.0, BLOCK_N)
        k_next = tl.load(x_ptr + row_next * stride_xm, mask=row_next < M, other=0.0).to(tl.float32)
        y = (x.to(tl.float32) - mean) * rstd * w.to(tl.float32) + b.to(tl.float32)
        tl.store(y_row + c, y.to(y_row.dtype.element_ty), mask=c < tl.where(last > 0, N, 0),
                 eviction_policy="evict_first")
        x = x_next
        k = k_next
        row = row_next


@triton.jit
def _layernorm_reread_kernel(x_ptr, w_ptr, b_ptr, y_ptr, M, N, stride_xm, stride_xn, stride_ym, eps,
                             ALIGN: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_N2: tl.constexpr):
    # See utils.RowPlan ("reread").  Reducing each first-pass step to two scalars at once leaves
    # two row-sized values per thread (this step's x and the next one's), so a step can be a whole
    # 32768-column row; the second pass carries x, weight and bias of its next step.
    N = N // ALIGN * ALIGN
    stride_xm = stride_xm // ALIGN * ALIGN
    stride_ym = stride_ym // ALIGN * ALIGN
    pid = tl.program_id(0)
    n_prog = tl.num_programs(0)
    c = tl.arange(0, BLOCK_N)
    c2 = tl.arange(0, BLOCK_N2)
    for i in tl.range(0, tl.cdiv(M - pid, n_prog)):
        row = (pid + i * n_prog).to(tl.int64)
        x_row = x_ptr + row * stride_xm
        y_row = y_ptr + row * stride_ym
        # Pass 1: sums of d = x - K, K the row's first element (see the module docstring).
        k = tl.load(x_row).to(tl.float32)
        s1 = 0.0
        s2 = 0.0
        x = tl.load(x_row + c * stride_xn, mask=c < N, other=0.0, eviction_policy="evict_last")
        for start in tl.range(BLOCK_N, N + BLOCK_N, BLOCK_N):  # start: the next step's first column
            x_next = tl.load(x_row + (start + c) * stride_xn, mask=start + c < N, other=0.0,
                             eviction_policy="evict_last")
            d = tl.where(start - BLOCK_N + c < N, x.to(tl.float32) - k, 0.0)
            s1 += tl.sum(d, 0)
            s2 += tl.sum(d * d, 0)
            x = x_next
        mean_d = s1 / N
        rstd = 1.0 / tl.sqrt(tl.maximum(s2 / N - mean_d * mean_d, 0.0) + eps)
        mean = k + mean_d
        # Pass 2, last step first (read last by pass 1: most likely still in L2).
        cols = (tl.cdiv(N, BLOCK_N2) - 1) * BLOCK_N2 + c2
        x = tl.load(x_row + cols * stride_xn, mask=cols < N, other=0.0, eviction_policy="evict_first")
        w = tl.load(w_ptr + cols, mask=cols < N, other=0.0)
        b = tl.load(b_ptr + cols, mask=cols < N, other=0.0)
        for j in tl.range(0, tl.cdiv(N, BLOCK_N2)):
            nxt = cols - BLOCK_N2
            ok = nxt >= 0  # (nxt < N: the step before a row's last is whole)
            x_next = tl.load(x_row + nxt * stride_xn, mask=ok, other=0.0, eviction_policy="evict_first")
            w_next = tl.load(w_ptr + nxt, mask=ok, other=0.0)
            b_next = tl.load(b_ptr + nxt, mask=ok, other=0.0)
            y = (x.to(tl.float32) - mean) * rstd * w.to(tl.float32) + b.to(tl.float32)
            tl.store(y_row + cols, y.to(y_row.dtype.element_ty), mask=cols < N, eviction_policy="evict_first")
            cols = nxt
            x = x_next
            w = w_next
            b = b_next


@triton.jit
def _layernorm_chunk_stats(x, k, cols, N):
    # A chunk's partial results as a vector: (sum d, sum d^2), d = x - k.
    d = tl.where(cols < N, x - k, 0.0)
    sum_d, sum_d2 = tl.reduce((d, d * d), 0, _add2)  # one exchange between warps, not two
    return tl.where(tl.arange(0, 2) == 0, sum_d, sum_d2)


@triton.jit
def _add2(a1, a2, b1, b2):
    return a1 + b1, a2 + b2


@triton.jit
def _layernorm_merge(sum_d, sum_d2, k, N, eps):
    # A row's totals -> (mean, 1 / sqrt(var + eps)).
    mean_d = sum_d / N
    msq_d = sum_d2 / N
    return k + mean_d, 1.0 / tl.sqrt(tl.maximum(msq_d - mean_d * mean_d, 0.0) + eps)


@triton.jit
def _layernorm_combine(row_parts, k, N, eps, SPLITS, BLOCK_S: tl.constexpr):
    # The split kernels' partials of a row, read through L2 (.cg), where the stats kernel left them.
    sp = tl.arange(0, BLOCK_S)
    sum_d = tl.sum(tl.load(row_parts + sp * 2, mask=sp < SPLITS, other=0.0, cache_modifier=".cg"), 0)
    sum_d2 = tl.sum(tl.load(row_parts + sp * 2 + 1, mask=sp < SPLITS, other=0.0, cache_modifier=".cg"), 0)
    return _layernorm_merge(sum_d, sum_d2, k, N, eps)


@triton.jit
def _layernorm_split_stats_kernel(x_ptr, ws_ptr, N, stride_xm, stride_xn, SPLITS,
                                  ALIGN: tl.constexpr, BLOCK_N: tl.constexpr):
    N = N // ALIGN * ALIGN
    stride_xm = stride_xm // ALIGN * ALIGN
    # Chunk (pid % SPLITS) of row (pid // SPLITS), shifted by x[row, 0]; partials to ws[pid].
    pid = tl.program_id(0)
    row = (pid // SPLITS).to(tl.int64)
    cols = (pid % SPLITS) * BLOCK_N + tl.arange(0, BLOCK_N)
    k = tl.load(x_ptr + row * stride_xm).to(tl.float32)
    x = tl.load(x_ptr + row * stride_xm + cols * stride_xn, mask=cols < N, other=0.0,
                eviction_policy="evict_last").to(tl.float32)
    tl.store(ws_ptr + pid * 2 + tl.arange(0, 2), _layernorm_chunk_stats(x, k, cols, N))


@triton.jit
def _layernorm_split_apply_kernel(x_ptr, w_ptr, b_ptr, y_ptr, ws_ptr, N, stride_xm, stride_xn, stride_ym, eps,
                                  SPLITS, ALIGN: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_S: tl.constexpr):
    N = N // ALIGN * ALIGN
    stride_xm = stride_xm // ALIGN * ALIGN
    stride_ym = stride_ym // ALIGN * ALIGN
    # Reverse program order: the chunks the stats kernel read last are re-read first.
    pid = tl.num_programs(0) - 1 - tl.program_id(0)
    row = (pid // SPLITS).to(tl.int64)
    k = tl.load(x_ptr + row * stride_xm).to(tl.float32)
    mean, rstd = _layernorm_combine(ws_ptr + row * SPLITS * 2, k, N, eps, SPLITS, BLOCK_S)
    cols = (pid % SPLITS) * BLOCK_N + tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + row * stride_xm + cols * stride_xn, mask=cols < N, other=0.0,
                eviction_policy="evict_first").to(tl.float32)
    w = tl.load(w_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * stride_ym + cols, ((x - mean) * rstd * w + b).to(y_ptr.dtype.element_ty),
             mask=cols < N)


@triton.jit
def _layernorm_coop_kernel(x_ptr, w_ptr, b_ptr, y_ptr, sync_ptr, words, M, N, stride_xm, stride_xn, stride_ym,
                           eps, SPLITS, ALIGN: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_S: tl.constexpr,
                           PREFETCH: tl.constexpr, WARPS: tl.constexpr, STAGES: tl.constexpr,
                           HOLD_WB: tl.constexpr):
    N = N // ALIGN * ALIGN
    stride_xm = stride_xm // ALIGN * ALIGN
    stride_ym = stride_ym // ALIGN * ALIGN
    # Rounds, chunks, the exchange and the prefetches as in softmax.py's coop kernel.
    pid, rows_at_once, rounds, team, epoch, cols = coop_layout(sync_ptr, M, SPLITS, BLOCK_N)
    if HOLD_WB:  # a program's columns are the same in every round: weight and bias loaded once
        w = tl.load(w_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
    if PREFETCH:  # the first row's chunk; later ones are loaded a round ahead (see softmax.py)
        first = (pid // SPLITS).to(tl.int64)
        x = tl.load(x_ptr + first * stride_xm + cols * stride_xn, mask=cols < tl.where(first < M, N, 0),
                    other=0.0).to(tl.float32)
    for rnd in tl.range(0, rounds, num_stages=STAGES):
        row = (rnd * rows_at_once + pid // SPLITS).to(tl.int64)
        if not PREFETCH:
            x = tl.load(x_ptr + row * stride_xm + cols * stride_xn, mask=cols < tl.where(row < M, N, 0),
                        other=0.0).to(tl.float32)
        if row < M:
            k = tl.load(x_ptr + row * stride_xm).to(tl.float32)
            publish(exchange_slots(sync_ptr, pid, rnd), _layernorm_chunk_stats(x, k, cols, N), epoch + 1 + rnd)
            if PREFETCH:
                nxt = row + rows_at_once
                x_next = tl.load(x_ptr + nxt * stride_xm + cols * stride_xn, mask=cols < tl.where(nxt < M, N, 0),
                                 other=0.0).to(tl.float32)
            # Weight and bias (from L2) in flight during the exchange where the registers allow it:
            # no prefetch, at most 8 values a thread (16 made ptxas spill 64 bytes under the cap).
            WB_EARLY: tl.constexpr = (not PREFETCH) and BLOCK_N <= 8 * 32 * WARPS and not HOLD_WB
            if WB_EARLY:
                w = tl.load(w_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
                b = tl.load(b_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
            parts = collect(exchange_slots(sync_ptr, team, rnd), epoch + 1 + rnd, SPLITS, BLOCK_S, 2, WARPS)
            mean, rstd = _layernorm_merge(tl.sum(column(parts, 0), 0), tl.sum(column(parts, 1), 0), k, N, eps)
            if not WB_EARLY and not HOLD_WB:
                w = tl.load(w_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
                b = tl.load(b_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
            tl.store(y_ptr + row * stride_ym + cols, ((x - mean) * rstd * w + b).to(y_ptr.dtype.element_ty),
                     mask=cols < N)
            if PREFETCH:
                x = x_next
    exchange_finish(sync_ptr, words, epoch, rounds)


def _launch_layernorm(x, w, b, y, plan: utils.RowPlan):
    M, N = x.shape
    sxm, sxn = x.stride()
    align = utils.vector_align(x.element_size(), N, sxm) if sxn == 1 else 1
    meta = dict(ALIGN=align, BLOCK_N=plan.block_n, num_warps=plan.num_warps)
    if plan.mode == "tile":
        grid = (utils.cdiv(M, plan.block_m),)
        _layernorm_tile_kernel[grid](x, w, b, y, M, N, sxm, sxn, N, LAYERNORM_EPS, BLOCK_M=plan.block_m,
                                     PREFETCH=plan.prefetch, **meta)
    elif plan.mode == "loop":
        _layernorm_loop_kernel[(plan.grid or M,)](x, w, b, y, M, N, sxm, sxn, N, LAYERNORM_EPS, STAGES=plan.stages,
                                                  **meta)
    elif plan.mode == "stream":
        _layernorm_stream_kernel[(plan.grid,)](x, w, b, y, M, N, sxm, sxn, N, LAYERNORM_EPS, **meta)
    elif plan.mode == "reread":
        _layernorm_reread_kernel[(plan.grid,)](x, w, b, y, M, N, sxm, sxn, N, LAYERNORM_EPS, BLOCK_N2=plan.block_n2,
                                               **meta)
    elif plan.mode == "split":
        ws = torch.empty((M * plan.splits, 2), dtype=torch.float32, device=x.device)
        grid = (M * plan.splits,)
        _layernorm_split_stats_kernel[grid](x, ws, N, sxm, sxn, plan.splits, **meta)
        _layernorm_split_apply_kernel[grid](x, w, b, y, ws, N, sxm, sxn, N, LAYERNORM_EPS, plan.splits,
                                            BLOCK_S=utils.next_pow2(plan.splits), **meta)
    else:
        sync = utils.exchange_buffer(x.device, plan.grid)
        coop = utils.coop_launch_args(plan, x.device)
        _layernorm_coop_kernel[(plan.grid,)](x, w, b, y, sync, sync.numel(), M, N, sxm, sxn, N, LAYERNORM_EPS,
                                             plan.splits, HOLD_WB=_plan_holds_wb(plan, coop["maxnreg"]),
                                             **coop, **meta)


# ----------------------------------------------------------------------------------------------
# norm chain


@triton.jit
def _norm_chain_tile_kernel(x_ptr, y_ptr, M, N, stride_xm, stride_xn, stride_ym,
                            ALIGN: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    N = N // ALIGN * ALIGN
    stride_xm = stride_xm // ALIGN * ALIGN
    stride_ym = stride_ym // ALIGN * ALIGN
    row0 = tl.program_id(0).to(tl.int64) * BLOCK_M
    r = tl.arange(0, BLOCK_M)
    c = tl.arange(0, BLOCK_N)
    mask = (r < M - row0)[:, None] & (c < N)[None, :]
    x = tl.load(x_ptr + row0 * stride_xm + r[:, None] * stride_xm + c[None, :] * stride_xn,
                mask=mask, other=0.0).to(tl.float32)
    # One row sum and the chain's closed form, as the long-row plans do: the chain as written
    # waited for three block-wide reductions one after another (0.93x Inductor at 512x8192, H100).
    x = x * _chain_scale(tl.sum(x, 1))[:, None]
    tl.store(y_ptr + row0 * stride_ym + r[:, None] * stride_ym + c[None, :],
             x.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _chain_scale(s):
    # s * s^2 * s^4: the product of the chain's three sums given the first one, s.
    s2 = s * s
    return s * s2 * (s2 * s2)


@triton.jit
def _row_sum(x_row, stride_xn, lo, hi, N, BLOCK_N: tl.constexpr, STAGES: tl.constexpr):
    # sum of x_row[lo:hi], per lane, then across lanes.
    c = tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_N], tl.float32)
    if STAGES == 1:  # the next step's loads in flight (registers) while this step is added
        x = tl.load(x_row + (lo + c) * stride_xn, mask=lo + c < N, other=0.0, eviction_policy="evict_last")
        for start in tl.range(lo + BLOCK_N, hi + BLOCK_N, BLOCK_N):
            cols = start + c
            x_next = tl.load(x_row + cols * stride_xn, mask=(cols < N) & (cols < hi), other=0.0,
                             eviction_policy="evict_last")
            acc += x.to(tl.float32)
            x = x_next
    else:
        for start in tl.range(lo, hi, BLOCK_N, num_stages=STAGES):
            cols = start + c
            acc += tl.load(x_row + cols * stride_xn, mask=cols < N, other=0.0,
                           eviction_policy="evict_last").to(tl.float32)
    return tl.sum(acc, 0)


@triton.jit
def _scale_write(x_row, y_row, stride_xn, lo, hi, N, scale, BLOCK_N: tl.constexpr, STAGES: tl.constexpr):
    # y[lo:hi] = x * scale, last chunk first.
    c = tl.arange(0, BLOCK_N)
    n_chunks = tl.cdiv(hi - lo, BLOCK_N)
    if STAGES == 1:  # the next (lower) chunk's loads in flight while this one is written
        cols = lo + (n_chunks - 1) * BLOCK_N + c
        x = tl.load(x_row + cols * stride_xn, mask=cols < N, other=0.0, eviction_policy="evict_first")
        for j in tl.range(1, n_chunks + 1):
            cols_next = cols - BLOCK_N
            x_next = tl.load(x_row + cols_next * stride_xn, mask=(cols_next < N) & (cols_next >= lo), other=0.0,
                             eviction_policy="evict_first")
            tl.store(y_row + cols, (x.to(tl.float32) * scale).to(y_row.dtype.element_ty), mask=cols < N,
                     eviction_policy="evict_first")
            cols = cols_next
            x = x_next
    else:
        for j in tl.range(0, n_chunks, num_stages=STAGES):
            cols = lo + (n_chunks - 1 - j) * BLOCK_N + c
            x = tl.load(x_row + cols * stride_xn, mask=cols < N, other=0.0,
                        eviction_policy="evict_first").to(tl.float32)
            tl.store(y_row + cols, (x * scale).to(y_row.dtype.element_ty), mask=cols < N,
                     eviction_policy="evict_first")


@triton.jit
def _norm_chain_loop_kernel(x_ptr, y_ptr, M, N, stride_xm, stride_xn, stride_ym,
                            ALIGN: tl.constexpr, BLOCK_N: tl.constexpr, STAGES: tl.constexpr):
    N = N // ALIGN * ALIGN
    stride_xm = stride_xm // ALIGN * ALIGN
    stride_ym = stride_ym // ALIGN * ALIGN
    pid = tl.program_id(0)
    n_prog = tl.num_programs(0)
    for i in tl.range(0, tl.cdiv(M - pid, n_prog)):
        row = (pid + i * n_prog).to(tl.int64)
        scale = _chain_scale(_row_sum(x_ptr + row * stride_xm, stride_xn, 0, N, N, BLOCK_N, STAGES))
        _scale_write(x_ptr + row * stride_xm, y_ptr + row * stride_ym, stride_xn, 0, N, N, scale, BLOCK_N, STAGES)


@triton.jit
def _norm_chain_stream_kernel(x_ptr, y_ptr, M, N, stride_xm, stride_xn, stride_ym,
                              ALIGN: tl.constexpr, BLOCK_N: tl.constexpr):
    # The step chain of softmax.py's _softmax_stream_kernel: s = sum(x), then y = x * s * s^2 * s^4.
    N = N // ALIGN * ALIGN
    stride_xm = stride_xm // ALIGN * ALIGN
    stride_ym = stride_ym // ALIGN * ALIGN
    pid = tl.program_id(0)
    n_prog = tl.num_programs(0)
    c = tl.arange(0, BLOCK_N)
    n_chunks = tl.cdiv(N, BLOCK_N)
    last = (n_chunks - 1) * BLOCK_N
    row = pid.to(tl.int64)
    x = utils.first_chunk(x_ptr, row, M, N, stride_xm, stride_xn, 0.0, BLOCK_N)
    for i in tl.range(0, tl.cdiv(M - pid, n_prog)):
        x_row = x_ptr + row * stride_xm
        y_row = y_ptr + row * stride_ym
        acc = tl.zeros([BLOCK_N], tl.float32)
        for start in tl.range(BLOCK_N, last + 1, BLOCK_N):
            x_next = tl.load(x_row + (start + c) * stride_xn, mask=start + c < N, other=0.0,
                             eviction_policy="evict_last")
            acc += x.to(tl.float32)
            x = x_next
        x_next = tl.load(x_row + (last - BLOCK_N + c) * stride_xn, mask=last - BLOCK_N + c >= 0, other=0.0,
                         eviction_policy="evict_first")
        scale = _chain_scale(tl.sum(acc + x.to(tl.float32), 0))
        tl.store(y_row + last + c, (x.to(tl.float32) * scale).to(y_row.dtype.element_ty), mask=last + c < N,
                 eviction_policy="evict_first")
        x = x_next
        for j in tl.range(1, n_chunks - 1):
            start = last - j * BLOCK_N
            x_next = tl.load(x_row + (start - BLOCK_N + c) * stride_xn, eviction_policy="evict_first")
            tl.store(y_row + start + c, (x.to(tl.float32) * scale).to(y_row.dtype.element_ty),
                     eviction_policy="evict_first")
            x = x_next
        row_next = row + n_prog
        x_next = utils.first_chunk(x_ptr, row_next, M, N, stride_xm, stride_xn, 0.0, BLOCK_N)
        tl.store(y_row + c, (x.to(tl.float32) * scale).to(y_row.dtype.element_ty), mask=c < tl.where(last > 0, N, 0),
                 eviction_policy="evict_first")
        x = x_next
        row = row_next


@triton.jit
def _norm_chain_split_stats_kernel(x_ptr, ws_ptr, N, stride_xm, stride_xn, SPLITS,
                                   ALIGN: tl.constexpr, BLOCK_N: tl.constexpr):
    N = N // ALIGN * ALIGN
    stride_xm = stride_xm // ALIGN * ALIGN
    # ws[pid] = the sum of chunk (pid % SPLITS) of row (pid // SPLITS).
    pid = tl.program_id(0)
    row = (pid // SPLITS).to(tl.int64)
    cols = (pid % SPLITS) * BLOCK_N + tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + row * stride_xm + cols * stride_xn, mask=cols < N, other=0.0,
                eviction_policy="evict_last").to(tl.float32)
    tl.store(ws_ptr + pid, tl.sum(x, 0))


@triton.jit
def _norm_chain_split_apply_kernel(x_ptr, y_ptr, ws_ptr, N, stride_xm, stride_xn, stride_ym, SPLITS,
                                   ALIGN: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_S: tl.constexpr):
    N = N // ALIGN * ALIGN
    stride_xm = stride_xm // ALIGN * ALIGN
    stride_ym = stride_ym // ALIGN * ALIGN
    pid = tl.num_programs(0) - 1 - tl.program_id(0)
    row = (pid // SPLITS).to(tl.int64)
    scale = _chain_scale(sum_of_partials(ws_ptr + row * SPLITS, SPLITS, BLOCK_S))
    cols = (pid % SPLITS) * BLOCK_N + tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + row * stride_xm + cols * stride_xn, mask=cols < N, other=0.0,
                eviction_policy="evict_first").to(tl.float32)
    tl.store(y_ptr + row * stride_ym + cols, (x * scale).to(y_ptr.dtype.element_ty), mask=cols < N)


@triton.jit
def _norm_chain_coop_kernel(x_ptr, y_ptr, sync_ptr, words, M, N, stride_xm, stride_xn, stride_ym, SPLITS,
                            ALIGN: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_S: tl.constexpr,
                            PREFETCH: tl.constexpr, WARPS: tl.constexpr, STAGES: tl.constexpr):
    N = N // ALIGN * ALIGN
    stride_xm = stride_xm // ALIGN * ALIGN
    stride_ym = stride_ym // ALIGN * ALIGN
    # As _layernorm_coop_kernel; the partial is the chunk's sum.
    pid, rows_at_once, rounds, team, epoch, cols = coop_layout(sync_ptr, M, SPLITS, BLOCK_N)
    if PREFETCH:
        first = (pid // SPLITS).to(tl.int64)
        x = tl.load(x_ptr + first * stride_xm + cols * stride_xn, mask=cols < tl.where(first < M, N, 0),
                    other=0.0).to(tl.float32)
    for rnd in tl.range(0, rounds, num_stages=STAGES):
        row = (rnd * rows_at_once + pid // SPLITS).to(tl.int64)
        if not PREFETCH:
            x = tl.load(x_ptr + row * stride_xm + cols * stride_xn, mask=cols < tl.where(row < M, N, 0),
                        other=0.0).to(tl.float32)
        if row < M:
            publish(exchange_slots(sync_ptr, pid, rnd), tl.where(tl.arange(0, 2) == 0, tl.sum(x, 0), 0.0),
                    epoch + 1 + rnd)
            if PREFETCH:
                nxt = row + rows_at_once
                x_next = tl.load(x_ptr + nxt * stride_xm + cols * stride_xn, mask=cols < tl.where(nxt < M, N, 0),
                                 other=0.0).to(tl.float32)
            parts = collect(exchange_slots(sync_ptr, team, rnd), epoch + 1 + rnd, SPLITS, BLOCK_S, 2, WARPS)
            scale = _chain_scale(tl.sum(column(parts, 0), 0))
            tl.store(y_ptr + row * stride_ym + cols, (x * scale).to(y_ptr.dtype.element_ty), mask=cols < N)
            if PREFETCH:
                x = x_next
    exchange_finish(sync_ptr, words, epoch, rounds)


def _launch_norm_chain(x, y, plan: utils.RowPlan):
    M, N = x.shape
    sxm, sxn = x.stride()
    align = utils.vector_align(x.element_size(), N, sxm) if sxn == 1 else 1
    meta = dict(ALIGN=align, BLOCK_N=plan.block_n, num_warps=plan.num_warps)
    if plan.mode == "tile":
        grid = (utils.cdiv(M, plan.block_m),)
        _norm_chain_tile_kernel[grid](x, y, M, N, sxm, sxn, N, BLOCK_M=plan.block_m, **meta)
    elif plan.mode == "loop":
        _norm_chain_loop_kernel[(plan.grid or M,)](x, y, M, N, sxm, sxn, N, STAGES=plan.stages, **meta)
    elif plan.mode == "stream":
        _norm_chain_stream_kernel[(plan.grid,)](x, y, M, N, sxm, sxn, N, **meta)
    elif plan.mode == "split":
        ws = torch.empty((M * plan.splits,), dtype=torch.float32, device=x.device)
        grid = (M * plan.splits,)
        _norm_chain_split_stats_kernel[grid](x, ws, N, sxm, sxn, plan.splits, **meta)
        _norm_chain_split_apply_kernel[grid](x, y, ws, N, sxm, sxn, N, plan.splits,
                                             BLOCK_S=utils.next_pow2(plan.splits), **meta)
    else:
        sync = utils.exchange_buffer(x.device, plan.grid)
        _norm_chain_coop_kernel[(plan.grid,)](x, y, sync, sync.numel(), M, N, sxm, sxn, N, plan.splits,
                                              **utils.coop_launch_args(plan, x.device), **meta)


# ----------------------------------------------------------------------------------------------
# wrappers


def layernorm_plans(M, N, device, max_onchip=utils.MAX_ONCHIP, elem_size=4):
    """The autotuner's candidates for layernorm_impl, the heuristic's choice first.  A cooperative
    plan keeps its chunk's weight and bias in registers across rounds where its register cap
    allows (layernorm_holds_wb, decided at launch)."""
    return utils.row_plans(M, N, device, max_onchip=max_onchip, elem_size=elem_size,
                           tile_prefetch=True, streams=True, rereads=True)


def layernorm_holds_wb(block_n: int, num_warps: int, register_cap: int, prefetch: bool) -> bool:
    """Whether a cooperative plan's programs keep their weight and bias chunks in registers across
    rounds (3 chunk-sized sets, 4 with the prefetch) rather than re-read them from L2 every row:
    where the sets leave 32 registers of the cap for the rest.  At 65536 fp32 columns (sm_90,
    offline, session 18) those are the plans that hold them with at most 8 bytes spilled."""
    return (3 + prefetch) * (block_n // (32 * num_warps)) + 32 <= register_cap


def _plan_holds_wb(plan: utils.RowPlan, register_cap: int) -> bool:
    """layernorm_holds_wb for a cooperative plan, under the register cap its launch gets
    (utils.coop_launch_args(plan, device)["maxnreg"])."""
    return layernorm_holds_wb(plan.block_n, plan.num_warps, register_cap, plan.prefetch)


def norm_chain_plans(M, N, device, max_onchip=utils.MAX_ONCHIP, elem_size=4):
    return utils.row_plans(M, N, device, max_onchip=max_onchip, elem_size=elem_size, streams=True)


def layernorm_impl(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, plan: utils.RowPlan | None = None,
                   max_onchip: int = utils.MAX_ONCHIP):
    """F.layer_norm(x, (N,), weight, bias, 1e-5); `plan` / `max_onchip` as in softmax_impl."""
    x = utils.as_2d_strided(x)
    N = x.shape[1]
    if weight.shape != (N,) or bias.shape != (N,):
        raise ValueError(f"weight and bias must have shape ({N},)")
    # Kernels index weight and bias as dense vectors (a strided 1-D view is copied: N elements).
    weight, bias = weight.contiguous(), bias.contiguous()
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if x.numel() == 0:
        return y
    plans = functools.partial(layernorm_plans, *x.shape, x.device, max_onchip=max_onchip, elem_size=x.element_size())

    def launch(p, *operands):
        _launch_layernorm(*operands, p)

    operands = (x, weight, bias, y)
    if plan is None:
        plan = utils.autotune(("layernorm", *utils.key_of(x, weight)), plans, launch, x.device, operands)
    launch(plan, *operands)
    return y


def norm_chain_impl(x: torch.Tensor, plan: utils.RowPlan | None = None, max_onchip: int = utils.MAX_ONCHIP):
    x = utils.as_2d_strided(x)
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if x.numel() == 0:
        return y
    plans = functools.partial(norm_chain_plans, *x.shape, x.device, max_onchip=max_onchip, elem_size=x.element_size())

    def launch(p, *operands):
        _launch_norm_chain(*operands, p)

    if plan is None:
        plan = utils.autotune(("norm_chain", *utils.key_of(x)), plans, launch, x.device, (x, y))
    launch(plan, x, y)
    return y


def _describe(shape, dtype):
    return utils.row_plans(shape[0], shape[1], "cuda" if torch.cuda.is_available() else "cpu",
                           elem_size=torch.empty((), dtype=dtype).element_size())[0].describe()


def describe_layernorm_plan(plan: utils.RowPlan, device) -> str:
    """plan.describe(), saying for a cooperative plan whether its programs hold weight and bias
    across rounds (as _launch_layernorm decides it)."""
    text = plan.describe()
    if plan.mode == "coop":
        held = _plan_holds_wb(plan, utils.coop_launch_args(plan, device)["maxnreg"])
        text = text[:-1] + (", weight and bias held)" if held else ", weight and bias re-read)")
    return text


@triton_kernel("layernorm", interpretable=True, describe=_describe, describe_plan=describe_layernorm_plan)
def layernorm(x, weight, bias):
    return layernorm_impl(x, weight, bias)


@triton_kernel("norm_chain", interpretable=True, describe=_describe)
def norm_chain(x):
    return norm_chain_impl(x)
