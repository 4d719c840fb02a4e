"""Row-wise softmax, softmax of a softmax, and the softmax backward, fused.

Each case has five launch plans, double_softmax six (see utils.RowPlan):

* tile:  a program holds whole rows in registers: one read, one write, one launch.
* loop:  rows too long for one program, many rows: a program makes two passes over a row (the
         second walks it backwards, so that the chunks read last, most likely still in L2, are
         read first), then takes the next row.
* stream: as loop, on persistent programs, with both passes of all of a program's rows one chain
         of steps whose next loads are always in flight (the loop's passes drain at every pass and
         row boundary), and a row's last chunk written from registers instead of re-read.
* split: rows too long for one program, few rows: `splits` programs per row hold a chunk each;
         a stats kernel writes each chunk's partial results, an apply kernel combines a row's
         partials and re-reads its chunk (in reverse program order, for the same L2 reason).
         Two launches; the input is read twice.
* coop:  as split, but the programs of a row keep their chunks in registers and exchange their
         partial results through tagged words (utils.publish, utils.collect) instead of a second
         launch: one read, one launch.  GPU only (cooperative launch).
* reread (double_softmax): persistent programs whose first pass takes big steps, each reduced
         at once to scalars, and whose second pass re-reads the row from L2 in smaller steps.

The chunk-level pieces (a chunk's partial results, a row's combination of them) are helpers
shared by the split and coop kernels.

double_softmax in the loop, split and coop plans still reads its input once per pass over the
data it needs: the normalizer of the second softmax, S2 = sum_j exp(y_j) with
y_j = exp(x_j - m) / S1, comes from power sums T_k = sum_j exp(k (x_j - m)) gathered with the
first softmax's statistics, as S2 = sum_k T_k / (S1^k k!).  Since 0 <= y_j <= 1 and
sum_j y_j = 1, sum_j y_j^k <= 1 for every k >= 1 and S2 >= N, so stopping after k = 4 leaves a
relative error in S2 below e / 5! / N: under 1.4e-6 for the long rows (N > 16384) that take these
plans, against fp32's tolerance of 1e-4.  (Six sums until session 8; four take fewer registers
and made the streamed plans 15-20% faster on an H200.)

All arithmetic is fp32; outputs have the input's dtype and are contiguous.  ALIGN (see
utils.vector_align) divides N and the row strides; rewriting them as multiples of it lets the
compiler use 16-byte vectors for rows whose length is not a multiple of 16.
"""
from __future__ import annotations

import dataclasses
import functools

import torch
import triton
import triton.language as tl

from fusebench.kernels import utils
from fusebench.kernels.registry import triton_kernel
from fusebench.kernels.utils import collect, column, coop_layout, exchange_finish, exchange_slots, publish, \
    sum_of_partials, within

# ----------------------------------------------------------------------------------------------
# softmax


@triton.jit
def _softmax_tile_kernel(x_ptr, y_ptr, M, N, stride_xm, stride_xn, stride_ym,
                         ALIGN: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    N = N // ALIGN * ALIGN  # ALIGN divides N and the row strides: 16-byte vectors
    stride_xm = stride_xm // ALIGN * ALIGN
    stride_ym = stride_ym // ALIGN * ALIGN
    # This program's BLOCK_M rows; row offsets in 64 bits (a tensor may exceed 2**31 elements).
    row0 = tl.program_id(0).to(tl.int64) * BLOCK_M
    r = tl.arange(0, BLOCK_M)
    c = tl.arange(0, BLOCK_N)
    mask = (r < M - row0)[:, None] & (c < N)[None, :]
    # Padding is -inf, which exp() turns into 0 in the sum.
    x = tl.load(x_ptr + row0 * stride_xm + r[:, None] * stride_xm + c[None, :] * stride_xn,
                mask=mask, other=float("-inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, 1)[:, None])
    y = e * (1.0 / tl.sum(e, 1))[:, None]
    tl.store(y_ptr + row0 * stride_ym + r[:, None] * stride_ym + c[None, :],
             y.to(y_ptr.dtype.element_ty), mask=mask)


# The looped kernels' passes, here and in norms.py, are helpers over a column range [lo, hi) of
# one row (the looped kernels pass the whole row; session 7's row-team kernels, measured slower and
# removed, passed a part of it).  STAGES: None, plain loads; 1, the next step's loads issued before
# this step is used (registers); >= 2, tl.range's shared-memory pipeline (see utils.RowPlan).


@triton.jit
def _softmax_accumulate(x, m, s):
    # One step of the running statistics: m the max so far, s (per lane) the sum of exp(x - m).
    xf = x.to(tl.float32)
    m_new = tl.maximum(m, tl.max(xf, 0))
    return m_new, s * tl.exp(m - m_new) + tl.exp(xf - m_new)


@triton.jit
def _softmax_stats(x_row, stride_xn, lo, hi, N, BLOCK_N: tl.constexpr, STAGES: tl.constexpr):
    # (m, s) of x_row[lo:hi] (columns >= N padded): the running max m and the sum of exp(x - m),
    # kept per lane and rescaled whenever m grows.  Loads evict_last: the second pass re-reads them.
    c = tl.arange(0, BLOCK_N)
    m = tl.full([], float("-inf"), tl.float32)
    s = tl.zeros([BLOCK_N], tl.float32)
    if STAGES == 1:  # the next step's loads in flight (registers) while this step is reduced
        x = tl.load(x_row + (lo + c) * stride_xn, mask=lo + c < N, other=float("-inf"), eviction_policy="evict_last")
        for start in tl.range(lo + BLOCK_N, hi + BLOCK_N, BLOCK_N):
            cols = start + c
            x_next = tl.load(x_row + cols * stride_xn, mask=(cols < N) & (cols < hi), other=float("-inf"),
                             eviction_policy="evict_last")
            m, s = _softmax_accumulate(x, m, s)
            x = x_next
    else:
        for start in tl.range(lo, hi, BLOCK_N, num_stages=STAGES):
            cols = start + c
            x = tl.load(x_row + cols * stride_xn, mask=cols < N, other=float("-inf"), eviction_policy="evict_last")
            m, s = _softmax_accumulate(x, m, s)
    return m, tl.sum(s, 0)


@triton.jit
def _softmax_write(x_row, y_row, stride_xn, lo, hi, N, m, inv, BLOCK_N: tl.constexpr, STAGES: tl.constexpr):
    # y[lo:hi] = exp(x - m) * inv, last chunk first (those were read last, most likely still in L2).
    c = tl.arange(0, BLOCK_N)
    n_chunks = tl.cdiv(hi - lo, BLOCK_N)
    if STAGES == 1:  # the next (lower) chunk's loads in flight while this one is written
        cols = lo + (n_chunks - 1) * BLOCK_N + c
        x = tl.load(x_row + cols * stride_xn, mask=cols < N, other=float("-inf"), eviction_policy="evict_first")
        for j in tl.range(1, n_chunks + 1):
            cols_next = cols - BLOCK_N
            x_next = tl.load(x_row + cols_next * stride_xn, mask=(cols_next < N) & (cols_next >= lo),
                             other=float("-inf"), eviction_policy="evict_first")
            tl.store(y_row + cols, (tl.exp(x.to(tl.float32) - m) * inv).to(y_row.dtype.element_ty), mask=cols < N,
                     eviction_policy="evict_first")
            cols = cols_next
            x = x_next
    else:
        for j in tl.range(0, n_chunks, num_stages=STAGES):
            cols = lo + (n_chunks - 1 - j) * BLOCK_N + c
            x = tl.load(x_row + cols * stride_xn, mask=cols < N, other=float("-inf"),
                        eviction_policy="evict_first").to(tl.float32)
            tl.store(y_row + cols, (tl.exp(x - m) * inv).to(y_row.dtype.element_ty), mask=cols < N,
                     eviction_policy="evict_first")


@triton.jit
def _softmax_loop_kernel(x_ptr, y_ptr, M, N, stride_xm, stride_xn, stride_ym,
                         ALIGN: tl.constexpr, BLOCK_N: tl.constexpr, STAGES: tl.constexpr):
    N = N // ALIGN * ALIGN
    stride_xm = stride_xm // ALIGN * ALIGN
    stride_ym = stride_ym // ALIGN * ALIGN
    # Rows pid, pid + P, ... (P = the grid size): a statistics pass, then a writing pass.
    pid = tl.program_id(0)
    n_prog = tl.num_programs(0)
    for i in tl.range(0, tl.cdiv(M - pid, n_prog)):
        row = (pid + i * n_prog).to(tl.int64)
        m, s = _softmax_stats(x_ptr + row * stride_xm, stride_xn, 0, N, N, BLOCK_N, STAGES)
        _softmax_write(x_ptr + row * stride_xm, y_ptr + row * stride_ym, stride_xn, 0, N, N, m, 1.0 / s,
                       BLOCK_N, STAGES)


@triton.jit
def _softmax_stream_kernel(x_ptr, y_ptr, M, N, stride_xm, stride_xn, stride_ym,
                           ALIGN: tl.constexpr, BLOCK_N: tl.constexpr):
    # Persistent programs (rows pid, pid + P, ...), each making both passes over its rows as one
    # chain of steps in which the next step's loads are always in flight, across the pass and row
    # boundaries too; the row's last chunk, read last by the first pass, is written first by the
    # second straight from registers.  See utils.RowPlan ("stream").
    N = N // ALIGN * ALIGN
    stride_xm = stride_xm // ALIGN * ALIGN
    stride_ym = stride_ym // ALIGN * ALIGN
    pid = tl.program_id(0)
    n_prog = tl.num_programs(0)
    c = tl.arange(0, BLOCK_N)
    n_chunks = tl.cdiv(N, BLOCK_N)
    last = (n_chunks - 1) * BLOCK_N  # first column of a row's last chunk
    row = pid.to(tl.int64)
    x = utils.first_chunk(x_ptr, row, M, N, stride_xm, stride_xn, float("-inf"), BLOCK_N)  # (a program may have no row)
    for i in tl.range(0, tl.cdiv(M - pid, n_prog)):
        x_row = x_ptr + row * stride_xm
        y_row = y_ptr + row * stride_ym
        # Pass 1, chunks 0 .. n-2 (x holds the current one); loads evict_last: pass 2 re-reads them.
        m = tl.full([], float("-inf"), tl.float32)
        s = tl.zeros([BLOCK_N], tl.float32)
        for start in tl.range(BLOCK_N, last + 1, BLOCK_N):  # start: the next chunk's first column
            x_next = tl.load(x_row + (start + c) * stride_xn, mask=start + c < N, other=float("-inf"),
                             eviction_policy="evict_last")
            m, s = _softmax_accumulate(x, m, s)
            x = x_next
        # The last chunk: pass 2's next one (n-2, if any) in flight while the row's sum is taken.
        x_next = tl.load(x_row + (last - BLOCK_N + c) * stride_xn, mask=last - BLOCK_N + c >= 0,
                         other=float("-inf"), eviction_policy="evict_first")
        m, s = _softmax_accumulate(x, m, s)
        inv = 1.0 / tl.sum(s, 0)
        tl.store(y_row + last + c, (tl.exp(x.to(tl.float32) - m) * inv).to(y_row.dtype.element_ty),
                 mask=last + c < N, eviction_policy="evict_first")
        x = x_next
        # Pass 2, chunks n-2 .. 1, whole chunks: no masks.
        for j in tl.range(1, n_chunks - 1):
            start = last - j * BLOCK_N  # the current chunk's first column
            x_next = tl.load(x_row + (start - BLOCK_N + c) * stride_xn, eviction_policy="evict_first")
            tl.store(y_row + start + c, (tl.exp(x.to(tl.float32) - m) * inv).to(y_row.dtype.element_ty),
                     eviction_policy="evict_first")
            x = x_next
        # Chunk 0 (if the row has more than one), with the next row's chunk 0 in flight.
        row_next = row + n_prog
        x_next = utils.first_chunk(x_ptr, row_next, M, N, stride_xm, stride_xn, float("-inf"), BLOCK_N)
        tl.store(y_row + c, (tl.exp(x.to(tl.float32) - m) * inv).to(y_row.dtype.element_ty),
                 mask=c < tl.where(last > 0, N, 0), eviction_policy="evict_first")
        x = x_next
        row = row_next


@triton.jit
def _softmax_chunk_stats(x):
    # A chunk's partial results as a vector: (max m_c, sum of exp(x - m_c)).
    m = tl.max(x, 0)
    return tl.where(tl.arange(0, 2) == 0, m, tl.sum(tl.exp(x - m), 0))


@triton.jit
def _softmax_merge(m_c, s_c, SPLITS, BLOCK_S: tl.constexpr):
    # A row's SPLITS partials (vectors of BLOCK_S) -> (m, 1 / s): m = max m_c, s = sum s_c exp(m_c - m).
    m_c = tl.where(tl.arange(0, BLOCK_S) < SPLITS, m_c, float("-inf"))
    m = tl.max(m_c, 0)
    return m, 1.0 / tl.sum(s_c * tl.exp(m_c - m), 0)


@triton.jit
def _softmax_combine(row_parts, SPLITS, BLOCK_S: tl.constexpr):
    # The split kernels' partials of a row, read through L2 (.cg), where the stats kernel left them.
    sp = tl.arange(0, BLOCK_S)
    m_c = tl.load(row_parts + sp * 2, mask=sp < SPLITS, other=float("-inf"), cache_modifier=".cg")
    s_c = tl.load(row_parts + sp * 2 + 1, mask=sp < SPLITS, other=0.0, cache_modifier=".cg")
    return _softmax_merge(m_c, s_c, SPLITS, BLOCK_S)


@triton.jit
def _softmax_split_stats_kernel(x_ptr, ws_ptr, N, stride_xm, stride_xn, SPLITS,
                                ALIGN: tl.constexpr, BLOCK_N: tl.constexpr):
    N = N // ALIGN * ALIGN
    stride_xm = stride_xm // ALIGN * ALIGN
    # Program pid holds chunk (pid % SPLITS) of row (pid // SPLITS); its partials go to ws[pid].
    pid = tl.program_id(0)
    row = (pid // SPLITS).to(tl.int64)
    cols = (pid % SPLITS) * BLOCK_N + tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + row * stride_xm + cols * stride_xn, mask=cols < N, other=float("-inf"),
                eviction_policy="evict_last").to(tl.float32)
    tl.store(ws_ptr + pid * 2 + tl.arange(0, 2), _softmax_chunk_stats(x))


@triton.jit
def _softmax_split_apply_kernel(x_ptr, y_ptr, ws_ptr, N, stride_xm, stride_xn, stride_ym, SPLITS,
                                ALIGN: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_S: tl.constexpr):
    N = N // ALIGN * ALIGN
    stride_xm = stride_xm // ALIGN * ALIGN
    stride_ym = stride_ym // ALIGN * ALIGN
    # Reverse program order: the chunks the stats kernel read last are re-read first.
    pid = tl.num_programs(0) - 1 - tl.program_id(0)
    row = (pid // SPLITS).to(tl.int64)
    m, inv = _softmax_combine(ws_ptr + row * SPLITS * 2, SPLITS, BLOCK_S)
    cols = (pid % SPLITS) * BLOCK_N + tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + row * stride_xm + cols * stride_xn, mask=cols < N, other=float("-inf"),
                eviction_policy="evict_first").to(tl.float32)
    tl.store(y_ptr + row * stride_ym + cols, (tl.exp(x - m) * inv).to(y_ptr.dtype.element_ty),
             mask=cols < N)


@triton.jit
def _softmax_coop_kernel(x_ptr, y_ptr, sync_ptr, words, M, N, stride_xm, stride_xn, stride_ym, SPLITS,
                         ALIGN: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_S: tl.constexpr,
                         PREFETCH: tl.constexpr, WARPS: tl.constexpr, STAGES: tl.constexpr):
    N = N // ALIGN * ALIGN
    stride_xm = stride_xm // ALIGN * ALIGN
    stride_ym = stride_ym // ALIGN * ALIGN
    # Program pid holds chunk (pid % SPLITS) of a row, in rounds of P / SPLITS rows (coop_layout).
    pid, rows_at_once, rounds, team, epoch, cols = coop_layout(sync_ptr, M, SPLITS, BLOCK_N)
    if PREFETCH:  # the first row's chunk; later ones are loaded a round ahead
        first = (pid // SPLITS).to(tl.int64)
        x = tl.load(x_ptr + first * stride_xm + cols * stride_xn, mask=cols < tl.where(first < M, N, 0),
                    other=float("-inf")).to(tl.float32)
    # STAGES 2: the compiler's pipeliner copies the next round's chunk into shared memory while
    # this round's programs exchange partials (the prefetch without its registers); it pipelines
    # only a load outside the `if`, hence the mask on rows past M.
    for rnd in tl.range(0, rounds, num_stages=STAGES):
        row = (rnd * rows_at_once + pid // SPLITS).to(tl.int64)
        if not PREFETCH:
            x = tl.load(x_ptr + row * stride_xm + cols * stride_xn, mask=cols < tl.where(row < M, N, 0),
                        other=float("-inf")).to(tl.float32)
        if row < M:
            # The chunk becomes e = exp(x - m_c), m_c its max: the output is e times one scalar.
            m_c = tl.max(x, 0)
            x = tl.exp(x - m_c)
            publish(exchange_slots(sync_ptr, pid, rnd), tl.where(tl.arange(0, 2) == 0, m_c, tl.sum(x, 0)),
                    epoch + 1 + rnd)
            if PREFETCH:  # the next row's chunk is in flight while this row's partials arrive
                nxt = row + rows_at_once
                x_next = tl.load(x_ptr + nxt * stride_xm + cols * stride_xn, mask=cols < tl.where(nxt < M, N, 0),
                                 other=float("-inf")).to(tl.float32)
            # The chunk stays in registers while the row's programs exchange partials.
            parts = collect(exchange_slots(sync_ptr, team, rnd), epoch + 1 + rnd, SPLITS, BLOCK_S, 2, WARPS)
            m, inv = _softmax_merge(column(parts, 0), column(parts, 1), SPLITS, BLOCK_S)
            tl.store(y_ptr + row * stride_ym + cols, (x * (tl.exp(m_c - m) * inv)).to(y_ptr.dtype.element_ty),
                     mask=cols < N)
            if PREFETCH:
                x = x_next
    exchange_finish(sync_ptr, words, epoch, rounds)


def _launch_softmax(x, y, plan: utils.RowPlan):
    M, N = x.shape
    sxm, sxn = x.stride()
    align = utils.vector_align(x.element_size(), N, sxm) if sxn == 1 else 1
    meta = dict(ALIGN=align, BLOCK_N=plan.block_n, num_warps=plan.num_warps)
    if plan.mode == "tile":
        grid = (utils.cdiv(M, plan.block_m),)
        _softmax_tile_kernel[grid](x, y, M, N, sxm, sxn, N, BLOCK_M=plan.block_m, **meta)
    elif plan.mode == "loop":
        _softmax_loop_kernel[(plan.grid or M,)](x, y, M, N, sxm, sxn, N, STAGES=plan.stages, **meta)
    elif plan.mode == "stream":
        _softmax_stream_kernel[(plan.grid,)](x, y, M, N, sxm, sxn, N, **meta)
    elif plan.mode == "split":
        ws = torch.empty((M * plan.splits, 2), dtype=torch.float32, device=x.device)
        grid = (M * plan.splits,)
        _softmax_split_stats_kernel[grid](x, ws, N, sxm, sxn, plan.splits, **meta)
        _softmax_split_apply_kernel[grid](x, y, ws, N, sxm, sxn, N, plan.splits,
                                          BLOCK_S=utils.next_pow2(plan.splits), **meta)
    else:
        sync = utils.exchange_buffer(x.device, plan.grid)
        _softmax_coop_kernel[(plan.grid,)](x, y, sync, sync.numel(), M, N, sxm, sxn, N, plan.splits,
                                           **utils.coop_launch_args(plan, x.device), **meta)


# ----------------------------------------------------------------------------------------------
# double softmax


@triton.jit
def _double_softmax_tile_kernel(x_ptr, z_ptr, M, N, stride_xm, stride_xn, stride_zm,
                                ALIGN: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    N = N // ALIGN * ALIGN
    stride_xm = stride_xm // ALIGN * ALIGN
    stride_zm = stride_zm // ALIGN * ALIGN
    # Both softmaxes on the rows held in registers: one read, one write.
    row0 = tl.program_id(0).to(tl.int64) * BLOCK_M
    r = tl.arange(0, BLOCK_M)
    c = tl.arange(0, BLOCK_N)
    mask = (r < M - row0)[:, None] & (c < N)[None, :]
    x = tl.load(x_ptr + row0 * stride_xm + r[:, None] * stride_xm + c[None, :] * stride_xn,
                mask=mask, other=float("-inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, 1)[:, None])
    y = e * (1.0 / tl.sum(e, 1))[:, None]
    # Padding has y = 0, which is not -inf: zero its exp explicitly.
    e2 = tl.where(mask, tl.exp(y - tl.max(y, 1)[:, None]), 0.0)
    z = e2 * (1.0 / tl.sum(e2, 1))[:, None]
    tl.store(z_ptr + row0 * stride_zm + r[:, None] * stride_zm + c[None, :],
             z.to(z_ptr.dtype.element_ty), mask=mask)


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
def _power_sums_accumulate(x, m, P1, P2, P3, P4):
    # One step of the running max m and the per-lane power sums P_k of e = exp(x - m), k = 1..4;
    # when m grows by d, P_k is rescaled by exp(-k d) = r^k.
    xf = x.to(tl.float32)
    m_new = tl.maximum(m, tl.max(xf, 0))
    r = tl.exp(m - m_new)
    e = tl.exp(xf - m_new)
    rk = r
    ek = e
    P1 = P1 * rk + ek
    rk *= r
    ek *= e
    P2 = P2 * rk + ek
    rk *= r
    ek *= e
    P3 = P3 * rk + ek
    rk *= r
    ek *= e
    P4 = P4 * rk + ek
    return m_new, P1, P2, P3, P4


@triton.jit
def _double_softmax_stats(x_row, stride_xn, lo, hi, N, BLOCK_N: tl.constexpr, STAGES: tl.constexpr):
    # (m, T_1 .. T_6) of x_row[lo:hi]: the running max and the power sums, lanes added up.
    c = tl.arange(0, BLOCK_N)
    m = tl.full([], float("-inf"), tl.float32)
    P1 = tl.zeros([BLOCK_N], tl.float32)
    P2 = tl.zeros([BLOCK_N], tl.float32)
    P3 = tl.zeros([BLOCK_N], tl.float32)
    P4 = tl.zeros([BLOCK_N], tl.float32)
    for start in tl.range(lo, hi, BLOCK_N, num_stages=STAGES):
        cols = start + c
        x = tl.load(x_row + cols * stride_xn, mask=cols < N, other=float("-inf"), eviction_policy="evict_last")
        m, P1, P2, P3, P4 = _power_sums_accumulate(x, m, P1, P2, P3, P4)
    return m, tl.sum(P1, 0), tl.sum(P2, 0), tl.sum(P3, 0), tl.sum(P4, 0)


@triton.jit
def _double_softmax_write(x_row, z_row, stride_xn, lo, hi, N, m, inv1, inv2, BLOCK_N: tl.constexpr,
                          STAGES: tl.constexpr):
    # z[lo:hi] = exp(y) / S2 with y = exp(x - m) / S1, last chunk first.
    c = tl.arange(0, BLOCK_N)
    n_chunks = tl.cdiv(hi - lo, BLOCK_N)
    for j in tl.range(0, n_chunks, num_stages=STAGES):
        cols = lo + (n_chunks - 1 - j) * BLOCK_N + c
        x = tl.load(x_row + cols * stride_xn, mask=cols < N, other=float("-inf"),
                    eviction_policy="evict_first").to(tl.float32)
        z = tl.exp(tl.exp(x - m) * inv1) * inv2
        tl.store(z_row + cols, z.to(z_row.dtype.element_ty), mask=cols < N, eviction_policy="evict_first")


@triton.jit
def _double_softmax_loop_kernel(x_ptr, z_ptr, M, N, stride_xm, stride_xn, stride_zm,
                                ALIGN: tl.constexpr, BLOCK_N: tl.constexpr, STAGES: tl.constexpr):
    N = N // ALIGN * ALIGN
    stride_xm = stride_xm // ALIGN * ALIGN
    stride_zm = stride_zm // ALIGN * ALIGN
    pid = tl.program_id(0)
    n_prog = tl.num_programs(0)
    for i in tl.range(0, tl.cdiv(M - pid, n_prog)):
        row = (pid + i * n_prog).to(tl.int64)
        m, T1, T2, T3, T4 = _double_softmax_stats(x_ptr + row * stride_xm, stride_xn, 0, N, N,
                                                          BLOCK_N, STAGES)
        inv1, inv2 = _second_normalizer(T1, T2, T3, T4, N)
        _double_softmax_write(x_ptr + row * stride_xm, z_ptr + row * stride_zm, stride_xn, 0, N, N, m, inv1, inv2,
                              BLOCK_N, STAGES)


@triton.jit
def _double_softmax_stream_kernel(x_ptr, z_ptr, M, N, stride_xm, stride_xn, stride_zm,
                                  ALIGN: tl.constexpr, BLOCK_N: tl.constexpr):
    # The step chain of _softmax_stream_kernel, with the power sums of _double_softmax_stats.
    N = N // ALIGN * ALIGN
    stride_xm = stride_xm // ALIGN * ALIGN
    stride_zm = stride_zm // ALIGN * ALIGN
    pid = tl.program_id(0)
    n_prog = tl.num_programs(0)
    c = tl.arange(0, BLOCK_N)
    n_chunks = tl.cdiv(N, BLOCK_N)
    last = (n_chunks - 1) * BLOCK_N
    row = pid.to(tl.int64)
    x = utils.first_chunk(x_ptr, row, M, N, stride_xm, stride_xn, float("-inf"), BLOCK_N)
    for i in tl.range(0, tl.cdiv(M - pid, n_prog)):
        x_row = x_ptr + row * stride_xm
        z_row = z_ptr + row * stride_zm
        m = tl.full([], float("-inf"), tl.float32)
        P1 = tl.zeros([BLOCK_N], tl.float32)
        P2 = tl.zeros([BLOCK_N], tl.float32)
        P3 = tl.zeros([BLOCK_N], tl.float32)
        P4 = tl.zeros([BLOCK_N], tl.float32)
        for start in tl.range(BLOCK_N, last + 1, BLOCK_N):
            x_next = tl.load(x_row + (start + c) * stride_xn, mask=start + c < N, other=float("-inf"),
                             eviction_policy="evict_last")
            m, P1, P2, P3, P4 = _power_sums_accumulate(x, m, P1, P2, P3, P4)
            x = x_next
        x_next = tl.load(x_row + (last - BLOCK_N + c) * stride_xn, mask=last - BLOCK_N + c >= 0,
                         other=float("-inf"), eviction_policy="evict_first")
        m, P1, P2, P3, P4 = _power_sums_accumulate(x, m, P1, P2, P3, P4)
        inv1, inv2 = _second_normalizer(tl.sum(P1, 0), tl.sum(P2, 0), tl.sum(P3, 0), tl.sum(P4, 0), N)
        tl.store(z_row + last + c, (tl.exp(tl.exp(x.to(tl.float32) - m) * inv1) * inv2).to(z_row.dtype.element_ty),
                 mask=last + c < N, eviction_policy="evict_first")
        x = x_next
        for j in tl.range(1, n_chunks - 1):
            start = last - j * BLOCK_N
            x_next = tl.load(x_row + (start - BLOCK_N + c) * stride_xn, eviction_policy="evict_first")
            tl.store(z_row + start + c, (tl.exp(tl.exp(x.to(tl.float32) - m) * inv1) * inv2).to(z_row.dtype.element_ty),
                     eviction_policy="evict_first")
            x = x_next
        row_next = row + n_prog
        x_next = utils.first_chunk(x_ptr, row_next, M, N, stride_xm, stride_xn, float("-inf"), BLOCK_N)
        tl.store(z_row + c, (tl.exp(tl.exp(x.to(tl.float32) - m) * inv1) * inv2).to(z_row.dtype.element_ty),
                 mask=c < tl.where(last > 0, N, 0), eviction_policy="evict_first")
        x = x_next
        row = row_next


@triton.jit
def _double_softmax_reread_kernel(x_ptr, z_ptr, M, N, stride_xm, stride_xn, stride_zm,
                                  ALIGN: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_N2: tl.constexpr):
    # See utils.RowPlan ("reread") and norms._layernorm_reread_kernel: the first pass's running max
    # and power sums are scalars, each big step reduced at once (rescaled by r^k = exp(k (m - m_new))
    # when the max grows).
    N = N // ALIGN * ALIGN
    stride_xm = stride_xm // ALIGN * ALIGN
    stride_zm = stride_zm // ALIGN * ALIGN
    pid = tl.program_id(0)
    n_prog = tl.num_programs(0)
    c = tl.arange(0, BLOCK_N)
    c2 = tl.arange(0, BLOCK_N2)
    for i in tl.range(0, tl.cdiv(M - pid, n_prog)):
        row = (pid + i * n_prog).to(tl.int64)
        x_row = x_ptr + row * stride_xm
        z_row = z_ptr + row * stride_zm
        m = tl.full([], float("-inf"), tl.float32)
        T1 = 0.0
        T2 = 0.0
        T3 = 0.0
        T4 = 0.0
        x = tl.load(x_row + c * stride_xn, mask=c < N, other=float("-inf"), eviction_policy="evict_last")
        for start in tl.range(BLOCK_N, N + BLOCK_N, BLOCK_N):  # start: the next step's first column
            x_next = tl.load(x_row + (start + c) * stride_xn, mask=start + c < N, other=float("-inf"),
                             eviction_policy="evict_last")
            xf = x.to(tl.float32)
            m_new = tl.maximum(m, tl.max(xf, 0))
            r = tl.exp(m - m_new)
            r2 = r * r
            e = tl.exp(xf - m_new)
            e2 = e * e
            T1 = T1 * r + tl.sum(e, 0)
            T2 = T2 * r2 + tl.sum(e2, 0)
            T3 = T3 * r2 * r + tl.sum(e2 * e, 0)
            T4 = T4 * r2 * r2 + tl.sum(e2 * e2, 0)
            m = m_new
            x = x_next
        inv1, inv2 = _second_normalizer(T1, T2, T3, T4, N)
        # Pass 2, last step first (read last by pass 1: most likely still in L2).
        cols = (tl.cdiv(N, BLOCK_N2) - 1) * BLOCK_N2 + c2
        x = tl.load(x_row + cols * stride_xn, mask=cols < N, other=float("-inf"), eviction_policy="evict_first")
        for j in tl.range(0, tl.cdiv(N, BLOCK_N2)):
            nxt = cols - BLOCK_N2
            x_next = tl.load(x_row + nxt * stride_xn, mask=nxt >= 0, other=float("-inf"), eviction_policy="evict_first")
            z = tl.exp(tl.exp(x.to(tl.float32) - m) * inv1) * inv2
            tl.store(z_row + cols, z.to(z_row.dtype.element_ty), mask=cols < N, eviction_policy="evict_first")
            cols = nxt
            x = x_next


@triton.jit
def _double_softmax_chunk_stats(e, m):
    # A chunk's partial results as a vector of 8: (max m_c, P_1 .. P_4, 0, 0, 0), given m = m_c
    # and e = exp(x - m_c): P_k = sum of e^k.  The four sums as one reduction: one exchange
    # between warps instead of four.
    e2 = e * e
    P1, P2, P3, P4 = tl.reduce((e, e2, e2 * e, e2 * e2), 0, _add4)
    k = tl.arange(0, 8)
    stats = tl.where(k == 0, m, tl.where(k == 1, P1, tl.where(k == 2, P2, 0.0)))
    return tl.where(k == 3, P3, tl.where(k == 4, P4, stats))


@triton.jit
def _add4(a1, a2, a3, a4, b1, b2, b3, b4):
    return a1 + b1, a2 + b2, a3 + b3, a4 + b4


@triton.jit
def _double_softmax_merge(parts, N, SPLITS, BLOCK_S: tl.constexpr):
    # A row's partials ([BLOCK_S, 8], rows from SPLITS on unused) -> (m, 1 / S1, 1 / S2), the
    # power sums taken at the row max m: T_k = sum_c exp(k (m_c - m)) P_k,c.
    m_c = tl.where(tl.arange(0, BLOCK_S) < SPLITS, column(parts, 0), float("-inf"))
    m = tl.max(m_c, 0)
    r = tl.exp(m_c - m)
    rk = r
    T1 = tl.sum(column(parts, 1) * rk, 0)
    rk *= r
    T2 = tl.sum(column(parts, 2) * rk, 0)
    rk *= r
    T3 = tl.sum(column(parts, 3) * rk, 0)
    rk *= r
    T4 = tl.sum(column(parts, 4) * rk, 0)
    inv1, inv2 = _second_normalizer(T1, T2, T3, T4, N)
    return m, inv1, inv2


@triton.jit
def _double_softmax_combine(row_parts, N, SPLITS, BLOCK_S: tl.constexpr):
    # The split kernels' partials of a row (8 floats each), read through L2 (.cg).
    sp = tl.arange(0, BLOCK_S)[:, None]
    k = tl.arange(0, 8)[None, :]
    parts = tl.load(row_parts + sp * 8 + k, mask=(sp < SPLITS) & (k < 8), other=0.0, cache_modifier=".cg")
    return _double_softmax_merge(parts, N, SPLITS, BLOCK_S)


@triton.jit
def _double_softmax_split_stats_kernel(x_ptr, ws_ptr, N, stride_xm, stride_xn, SPLITS,
                                       ALIGN: tl.constexpr, BLOCK_N: tl.constexpr):
    N = N // ALIGN * ALIGN
    stride_xm = stride_xm // ALIGN * ALIGN
    pid = tl.program_id(0)
    row = (pid // SPLITS).to(tl.int64)
    cols = (pid % SPLITS) * BLOCK_N + tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + row * stride_xm + cols * stride_xn, mask=cols < N, other=float("-inf"),
                eviction_policy="evict_last").to(tl.float32)
    m = tl.max(x, 0)
    tl.store(ws_ptr + pid * 8 + tl.arange(0, 8), _double_softmax_chunk_stats(tl.exp(x - m), m))


@triton.jit
def _double_softmax_split_apply_kernel(x_ptr, z_ptr, ws_ptr, N, stride_xm, stride_xn, stride_zm, SPLITS,
                                       ALIGN: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_S: tl.constexpr):
    N = N // ALIGN * ALIGN
    stride_xm = stride_xm // ALIGN * ALIGN
    stride_zm = stride_zm // ALIGN * ALIGN
    pid = tl.num_programs(0) - 1 - tl.program_id(0)
    row = (pid // SPLITS).to(tl.int64)
    m, inv1, inv2 = _double_softmax_combine(ws_ptr + row * SPLITS * 8, N, SPLITS, BLOCK_S)
    cols = (pid % SPLITS) * BLOCK_N + tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + row * stride_xm + cols * stride_xn, mask=cols < N, other=float("-inf"),
                eviction_policy="evict_first").to(tl.float32)
    z = tl.exp(tl.exp(x - m) * inv1) * inv2
    tl.store(z_ptr + row * stride_zm + cols, z.to(z_ptr.dtype.element_ty), mask=cols < N)


@triton.jit
def _double_softmax_coop_kernel(x_ptr, z_ptr, sync_ptr, words, M, N, stride_xm, stride_xn, stride_zm, SPLITS,
                                ALIGN: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_S: tl.constexpr,
                                PREFETCH: tl.constexpr, WARPS: tl.constexpr, STAGES: tl.constexpr):
    N = N // ALIGN * ALIGN
    stride_xm = stride_xm // ALIGN * ALIGN
    stride_zm = stride_zm // ALIGN * ALIGN
    # Rounds, chunks, the exchange and the prefetches as in _softmax_coop_kernel.
    pid, rows_at_once, rounds, team, epoch, cols = coop_layout(sync_ptr, M, SPLITS, BLOCK_N)
    if PREFETCH:
        first = (pid // SPLITS).to(tl.int64)
        x = tl.load(x_ptr + first * stride_xm + cols * stride_xn, mask=cols < tl.where(first < M, N, 0),
                    other=float("-inf")).to(tl.float32)
    for rnd in tl.range(0, rounds, num_stages=STAGES):
        row = (rnd * rows_at_once + pid // SPLITS).to(tl.int64)
        if not PREFETCH:
            x = tl.load(x_ptr + row * stride_xm + cols * stride_xn, mask=cols < tl.where(row < M, N, 0),
                        other=float("-inf")).to(tl.float32)
        if row < M:
            # The chunk becomes e = exp(x - m_c), m_c its max (see _softmax_coop_kernel).
            m_c = tl.max(x, 0)
            x = tl.exp(x - m_c)
            publish(exchange_slots(sync_ptr, pid, rnd), _double_softmax_chunk_stats(x, m_c), epoch + 1 + rnd)
            if PREFETCH:
                nxt = row + rows_at_once
                x_next = tl.load(x_ptr + nxt * stride_xm + cols * stride_xn, mask=cols < tl.where(nxt < M, N, 0),
                                 other=float("-inf")).to(tl.float32)
            parts = collect(exchange_slots(sync_ptr, team, rnd), epoch + 1 + rnd, SPLITS, BLOCK_S, 8, WARPS)
            m, inv1, inv2 = _double_softmax_merge(parts, N, SPLITS, BLOCK_S)
            z = tl.exp(x * (tl.exp(m_c - m) * inv1)) * inv2
            tl.store(z_ptr + row * stride_zm + cols, z.to(z_ptr.dtype.element_ty), mask=cols < N)
            if PREFETCH:
                x = x_next
    exchange_finish(sync_ptr, words, epoch, rounds)


def _launch_double_softmax(x, z, plan: utils.RowPlan):
    M, N = x.shape
    sxm, sxn = x.stride()
    align = utils.vector_align(x.element_size(), N, sxm) if sxn == 1 else 1
    meta = dict(ALIGN=align, BLOCK_N=plan.block_n, num_warps=plan.num_warps)
    if plan.mode == "tile":
        grid = (utils.cdiv(M, plan.block_m),)
        _double_softmax_tile_kernel[grid](x, z, M, N, sxm, sxn, N, BLOCK_M=plan.block_m, **meta)
    elif plan.mode == "loop":
        _double_softmax_loop_kernel[(plan.grid or M,)](x, z, M, N, sxm, sxn, N, STAGES=plan.stages, **meta)
    elif plan.mode == "stream":
        _double_softmax_stream_kernel[(plan.grid,)](x, z, M, N, sxm, sxn, N, **meta)
    elif plan.mode == "reread":
        _double_softmax_reread_kernel[(plan.grid,)](x, z, M, N, sxm, sxn, N, BLOCK_N2=plan.block_n2, **meta)
    elif plan.mode == "split":
        ws = torch.empty((M * plan.splits, 8), dtype=torch.float32, device=x.device)
        grid = (M * plan.splits,)
        _double_softmax_split_stats_kernel[grid](x, ws, N, sxm, sxn, plan.splits, **meta)
        _double_softmax_split_apply_kernel[grid](x, z, ws, N, sxm, sxn, N, plan.splits,
                                                 BLOCK_S=utils.next_pow2(plan.splits), **meta)
    else:
        sync = utils.exchange_buffer(x.device, plan.grid)
        _double_softmax_coop_kernel[(plan.grid,)](x, z, sync, sync.numel(), M, N, sxm, sxn, N, plan.splits,
                                                  **utils.coop_launch_args(plan, x.device), **meta)


def softmax_plans(M, N, device, max_onchip=utils.MAX_ONCHIP, elem_size=4):
    """The autotuner's candidates for softmax_impl, the heuristic's choice first."""
    return utils.row_plans(M, N, device, max_onchip=max_onchip, elem_size=elem_size,
                           streams=True)


def softmax_backward_plans(M, N, device, max_onchip=utils.MAX_ONCHIP, elem_size=4):
    plans = utils.row_plans(M, N, device, max_onchip=max_onchip, elem_size=elem_size, streams=True,
                            row_inputs=2)  # dy and y
    if N > max_onchip:
        # Inductor's kernel for 32768-column rows (session 11: 98.8 us at 1024x32768 on an H200,
        # ours 103-106): one 32-warp program per row whose passes are one 32768-column step each.
        # It holds 64 registers a thread; with column masks ptxas spilled it (190 us), without
        # them (rows a whole number of steps: utils.within) it does not, and it is our fastest
        # plan at 1024-32768 rows of 32768 columns (session 16, H100).  Also on one program per
        # SM (fewer rows between a row's two passes), and at half the step.
        sms = utils.num_sms(device)
        plans += [utils.loop_plan(32768, 32), utils.loop_plan(32768, 32, grid=sms), utils.loop_plan(16384, 16),
                  utils.loop_plan(16384, 32, grid=sms)]
    return utils.unique(plans)


def double_softmax_plans(M, N, device, max_onchip=utils.MAX_ONCHIP, elem_size=4):
    # The looped kernel carries four per-lane accumulators: half the step of the other loops.  The
    # streamed plans keep their steps (8192 columns measured fastest, session 8).  Split plans first:
    # before the streamed plans, they were the fastest for long rows at every row count measured.
    plans = [dataclasses.replace(p, block_n=p.block_n // 2) if p.mode == "loop" else p
             for p in utils.row_plans(M, N, device, max_onchip=max_onchip, elem_size=elem_size, streams=True,
                                      rereads=True)
             if not (p.mode == "stream" and p.block_n > 8192)]  # 16384-column steps spill
    return sorted(plans, key=lambda p: p.mode != "split")


# ----------------------------------------------------------------------------------------------
# softmax backward: dx = y * (dy - sum(dy * y, 1))


@triton.jit
def _softmax_bwd_tile_kernel(dy_ptr, y_ptr, dx_ptr, M, N, stride_dym, stride_dyn, stride_ym, stride_yn,
                             stride_dxm, ALIGN: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                             EVEN: tl.constexpr):
    N = N // ALIGN * ALIGN
    stride_dym = stride_dym // ALIGN * ALIGN
    stride_ym = stride_ym // ALIGN * ALIGN
    stride_dxm = stride_dxm // ALIGN * ALIGN
    row0 = tl.program_id(0).to(tl.int64) * BLOCK_M
    r = tl.arange(0, BLOCK_M)
    c = tl.arange(0, BLOCK_N)
    # No masks where none are needed (one row per program, N == BLOCK_N): see utils.within.
    mask = ((r < M - row0) | (BLOCK_M == 1))[:, None] & within(c, N, EVEN)[None, :]
    dy = tl.load(dy_ptr + row0 * stride_dym + r[:, None] * stride_dym + c[None, :] * stride_dyn,
                 mask=mask, other=0.0).to(tl.float32)
    y = tl.load(y_ptr + row0 * stride_ym + r[:, None] * stride_ym + c[None, :] * stride_yn,
                mask=mask, other=0.0).to(tl.float32)
    dot = tl.sum(dy * y, 1)
    dx = y * (dy - dot[:, None])
    tl.store(dx_ptr + row0 * stride_dxm + r[:, None] * stride_dxm + c[None, :],
             dx.to(dx_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_bwd_stats(dy_row, y_row, stride_dyn, stride_yn, lo, hi, N, BLOCK_N: tl.constexpr,
                       STAGES: tl.constexpr, EVEN: tl.constexpr):
    # sum(dy * y) over [lo, hi), per lane, then across lanes.
    c = tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_N], tl.float32)
    if STAGES == 1:  # the next step's loads in flight while this step is reduced
        dy = tl.load(dy_row + (lo + c) * stride_dyn, mask=lo + c < N, other=0.0, eviction_policy="evict_last")
        y = tl.load(y_row + (lo + c) * stride_yn, mask=lo + c < N, other=0.0, eviction_policy="evict_last")
        for start in tl.range(lo + BLOCK_N, hi + BLOCK_N, BLOCK_N):
            cols = start + c
            dy_next = tl.load(dy_row + cols * stride_dyn, mask=(cols < N) & (cols < hi), other=0.0,
                              eviction_policy="evict_last")
            y_next = tl.load(y_row + cols * stride_yn, mask=(cols < N) & (cols < hi), other=0.0,
                             eviction_policy="evict_last")
            acc += dy.to(tl.float32) * y.to(tl.float32)
            dy = dy_next
            y = y_next
    else:
        for start in tl.range(lo, hi, BLOCK_N, num_stages=STAGES):
            cols = start + c
            ok = within(cols, N, EVEN)
            dy = tl.load(dy_row + cols * stride_dyn, mask=ok, other=0.0, eviction_policy="evict_last")
            y = tl.load(y_row + cols * stride_yn, mask=ok, other=0.0, eviction_policy="evict_last")
            acc += dy.to(tl.float32) * y.to(tl.float32)
    return tl.sum(acc, 0)


@triton.jit
def _softmax_bwd_write(dy_row, y_row, dx_row, stride_dyn, stride_yn, lo, hi, N, dot, BLOCK_N: tl.constexpr,
                       STAGES: tl.constexpr, EVEN: tl.constexpr):
    # dx[lo:hi] = y * (dy - dot), last chunk first.
    c = tl.arange(0, BLOCK_N)
    n_chunks = tl.cdiv(hi - lo, BLOCK_N)
    if STAGES == 1:  # the next (lower) chunk's loads in flight while this one is written
        cols = lo + (n_chunks - 1) * BLOCK_N + c
        dy = tl.load(dy_row + cols * stride_dyn, mask=cols < N, other=0.0, eviction_policy="evict_first")
        y = tl.load(y_row + cols * stride_yn, mask=cols < N, other=0.0, eviction_policy="evict_first")
        for j in tl.range(1, n_chunks + 1):
            cols_next = cols - BLOCK_N
            ok = (cols_next < N) & (cols_next >= lo)
            dy_next = tl.load(dy_row + cols_next * stride_dyn, mask=ok, other=0.0, eviction_policy="evict_first")
            y_next = tl.load(y_row + cols_next * stride_yn, mask=ok, other=0.0, eviction_policy="evict_first")
            yf = y.to(tl.float32)
            tl.store(dx_row + cols, (yf * (dy.to(tl.float32) - dot)).to(dx_row.dtype.element_ty), mask=cols < N,
                     eviction_policy="evict_first")
            cols = cols_next
            dy = dy_next
            y = y_next
    else:
        for j in tl.range(0, n_chunks, num_stages=STAGES):
            cols = lo + (n_chunks - 1 - j) * BLOCK_N + c
            ok = within(cols, N, EVEN)
            dy = tl.load(dy_row + cols * stride_dyn, mask=ok, other=0.0, eviction_policy="evict_first").to(tl.float32)
            y = tl.load(y_row + cols * stride_yn, mask=ok, other=0.0, eviction_policy="evict_first").to(tl.float32)
            tl.store(dx_row + cols, (y * (dy - dot)).to(dx_row.dtype.element_ty), mask=ok,
                     eviction_policy="evict_first")


@triton.jit
def _softmax_bwd_loop_kernel(dy_ptr, y_ptr, dx_ptr, M, N, stride_dym, stride_dyn, stride_ym, stride_yn,
                             stride_dxm, ALIGN: tl.constexpr, BLOCK_N: tl.constexpr, STAGES: tl.constexpr,
                             EVEN: tl.constexpr):
    N = N // ALIGN * ALIGN
    stride_dym = stride_dym // ALIGN * ALIGN
    stride_ym = stride_ym // ALIGN * ALIGN
    stride_dxm = stride_dxm // ALIGN * ALIGN
    pid = tl.program_id(0)
    n_prog = tl.num_programs(0)
    for i in tl.range(0, tl.cdiv(M - pid, n_prog)):
        row = (pid + i * n_prog).to(tl.int64)
        dy_row = dy_ptr + row * stride_dym
        y_row = y_ptr + row * stride_ym
        dot = _softmax_bwd_stats(dy_row, y_row, stride_dyn, stride_yn, 0, N, N, BLOCK_N, STAGES, EVEN)
        _softmax_bwd_write(dy_row, y_row, dx_ptr + row * stride_dxm, stride_dyn, stride_yn, 0, N, N, dot,
                           BLOCK_N, STAGES, EVEN)


@triton.jit
def _softmax_bwd_stream_kernel(dy_ptr, y_ptr, dx_ptr, M, N, stride_dym, stride_dyn, stride_ym, stride_yn,
                               stride_dxm, ALIGN: tl.constexpr, BLOCK_N: tl.constexpr):
    # The step chain of _softmax_stream_kernel over two inputs: sum(dy * y), then dx = y * (dy - dot).
    N = N // ALIGN * ALIGN
    stride_dym = stride_dym // ALIGN * ALIGN
    stride_ym = stride_ym // ALIGN * ALIGN
    stride_dxm = stride_dxm // ALIGN * ALIGN
    pid = tl.program_id(0)
    n_prog = tl.num_programs(0)
    c = tl.arange(0, BLOCK_N)
    n_chunks = tl.cdiv(N, BLOCK_N)
    last = (n_chunks - 1) * BLOCK_N
    row = pid.to(tl.int64)
    # chunk 0 of both inputs under one mask (utils.first_chunk's, written out: shared by the two loads)
    ok = c < tl.where(row < M, N, 0)
    dy = tl.load(dy_ptr + row * stride_dym + c * stride_dyn, mask=ok, other=0.0, eviction_policy="evict_last")
    y = tl.load(y_ptr + row * stride_ym + c * stride_yn, mask=ok, other=0.0, eviction_policy="evict_last")
    for i in tl.range(0, tl.cdiv(M - pid, n_prog)):
        dy_row = dy_ptr + row * stride_dym
        y_row = y_ptr + row * stride_ym
        dx_row = dx_ptr + row * stride_dxm
        acc = tl.zeros([BLOCK_N], tl.float32)
        for start in tl.range(BLOCK_N, last + 1, BLOCK_N):
            ok = start + c < N
            dy_next = tl.load(dy_row + (start + c) * stride_dyn, mask=ok, other=0.0, eviction_policy="evict_last")
            y_next = tl.load(y_row + (start + c) * stride_yn, mask=ok, other=0.0, eviction_policy="evict_last")
            acc += dy.to(tl.float32) * y.to(tl.float32)
            dy = dy_next
            y = y_next
        ok = last - BLOCK_N + c >= 0
        dy_next = tl.load(dy_row + (last - BLOCK_N + c) * stride_dyn, mask=ok, other=0.0, eviction_policy="evict_first")
        y_next = tl.load(y_row + (last - BLOCK_N + c) * stride_yn, mask=ok, other=0.0, eviction_policy="evict_first")
        dot = tl.sum(acc + dy.to(tl.float32) * y.to(tl.float32), 0)
        tl.store(dx_row + last + c, (y.to(tl.float32) * (dy.to(tl.float32) - dot)).to(dx_row.dtype.element_ty),
                 mask=last + c < N, eviction_policy="evict_first")
        dy = dy_next
        y = y_next
        for j in tl.range(1, n_chunks - 1):
            start = last - j * BLOCK_N
            dy_next = tl.load(dy_row + (start - BLOCK_N + c) * stride_dyn, eviction_policy="evict_first")
            y_next = tl.load(y_row + (start - BLOCK_N + c) * stride_yn, eviction_policy="evict_first")
            tl.store(dx_row + start + c, (y.to(tl.float32) * (dy.to(tl.float32) - dot)).to(dx_row.dtype.element_ty),
                     eviction_policy="evict_first")
            dy = dy_next
            y = y_next
        row_next = row + n_prog
        ok = c < tl.where(row_next < M, N, 0)
        dy_next = tl.load(dy_ptr + row_next * stride_dym + c * stride_dyn, mask=ok, other=0.0,
                          eviction_policy="evict_last")
        y_next = tl.load(y_ptr + row_next * stride_ym + c * stride_yn, mask=ok, other=0.0, eviction_policy="evict_last")
        tl.store(dx_row + c, (y.to(tl.float32) * (dy.to(tl.float32) - dot)).to(dx_row.dtype.element_ty),
                 mask=c < tl.where(last > 0, N, 0), eviction_policy="evict_first")
        dy = dy_next
        y = y_next
        row = row_next


@triton.jit
def _softmax_bwd_split_stats_kernel(dy_ptr, y_ptr, ws_ptr, N, stride_dym, stride_dyn, stride_ym, stride_yn,
                                    SPLITS, ALIGN: tl.constexpr, BLOCK_N: tl.constexpr):
    N = N // ALIGN * ALIGN
    stride_dym = stride_dym // ALIGN * ALIGN
    stride_ym = stride_ym // ALIGN * ALIGN
    # ws[pid] = sum of dy * y over chunk (pid % SPLITS) of row (pid // SPLITS).
    pid = tl.program_id(0)
    row = (pid // SPLITS).to(tl.int64)
    cols = (pid % SPLITS) * BLOCK_N + tl.arange(0, BLOCK_N)
    dy = tl.load(dy_ptr + row * stride_dym + cols * stride_dyn, mask=cols < N, other=0.0,
                 eviction_policy="evict_last").to(tl.float32)
    y = tl.load(y_ptr + row * stride_ym + cols * stride_yn, mask=cols < N, other=0.0,
                eviction_policy="evict_last").to(tl.float32)
    tl.store(ws_ptr + pid, tl.sum(dy * y, 0))


@triton.jit
def _softmax_bwd_split_apply_kernel(dy_ptr, y_ptr, dx_ptr, ws_ptr, N, stride_dym, stride_dyn, stride_ym,
                                    stride_yn, stride_dxm, SPLITS, ALIGN: tl.constexpr, BLOCK_N: tl.constexpr,
                                    BLOCK_S: tl.constexpr):
    N = N // ALIGN * ALIGN
    stride_dym = stride_dym // ALIGN * ALIGN
    stride_ym = stride_ym // ALIGN * ALIGN
    stride_dxm = stride_dxm // ALIGN * ALIGN
    pid = tl.num_programs(0) - 1 - tl.program_id(0)
    row = (pid // SPLITS).to(tl.int64)
    dot = sum_of_partials(ws_ptr + row * SPLITS, SPLITS, BLOCK_S)
    cols = (pid % SPLITS) * BLOCK_N + tl.arange(0, BLOCK_N)
    dy = tl.load(dy_ptr + row * stride_dym + cols * stride_dyn, mask=cols < N, other=0.0,
                 eviction_policy="evict_first").to(tl.float32)
    y = tl.load(y_ptr + row * stride_ym + cols * stride_yn, mask=cols < N, other=0.0,
                eviction_policy="evict_first").to(tl.float32)
    tl.store(dx_ptr + row * stride_dxm + cols, (y * (dy - dot)).to(dx_ptr.dtype.element_ty), mask=cols < N)


@triton.jit
def _softmax_bwd_coop_kernel(dy_ptr, y_ptr, dx_ptr, sync_ptr, words, M, N, stride_dym, stride_dyn, stride_ym,
                             stride_yn, stride_dxm, SPLITS, ALIGN: tl.constexpr, BLOCK_N: tl.constexpr,
                             BLOCK_S: tl.constexpr, PREFETCH: tl.constexpr, WARPS: tl.constexpr,
                             STAGES: tl.constexpr):
    N = N // ALIGN * ALIGN
    stride_dym = stride_dym // ALIGN * ALIGN
    stride_ym = stride_ym // ALIGN * ALIGN
    stride_dxm = stride_dxm // ALIGN * ALIGN
    # Rounds, chunks, the exchange and the prefetches as in _softmax_coop_kernel; the partial is
    # the chunk's dot.
    pid, rows_at_once, rounds, team, epoch, cols = coop_layout(sync_ptr, M, SPLITS, BLOCK_N)
    if PREFETCH:
        first = (pid // SPLITS).to(tl.int64)
        bound = tl.where(first < M, N, 0)
        dy = tl.load(dy_ptr + first * stride_dym + cols * stride_dyn, mask=cols < bound, other=0.0).to(tl.float32)
        y = tl.load(y_ptr + first * stride_ym + cols * stride_yn, mask=cols < bound, other=0.0).to(tl.float32)
    for rnd in tl.range(0, rounds, num_stages=STAGES):
        row = (rnd * rows_at_once + pid // SPLITS).to(tl.int64)
        if not PREFETCH:
            bound = tl.where(row < M, N, 0)
            dy = tl.load(dy_ptr + row * stride_dym + cols * stride_dyn, mask=cols < bound, other=0.0).to(tl.float32)
            y = tl.load(y_ptr + row * stride_ym + cols * stride_yn, mask=cols < bound, other=0.0).to(tl.float32)
        if row < M:
            publish(exchange_slots(sync_ptr, pid, rnd), tl.where(tl.arange(0, 2) == 0, tl.sum(dy * y, 0), 0.0),
                    epoch + 1 + rnd)
            if PREFETCH:
                nxt = row + rows_at_once
                bound = tl.where(nxt < M, N, 0)
                dy_next = tl.load(dy_ptr + nxt * stride_dym + cols * stride_dyn, mask=cols < bound,
                                  other=0.0).to(tl.float32)
                y_next = tl.load(y_ptr + nxt * stride_ym + cols * stride_yn, mask=cols < bound,
                                 other=0.0).to(tl.float32)
            parts = collect(exchange_slots(sync_ptr, team, rnd), epoch + 1 + rnd, SPLITS, BLOCK_S, 2, WARPS)
            dot = tl.sum(column(parts, 0), 0)
            tl.store(dx_ptr + row * stride_dxm + cols, (y * (dy - dot)).to(dx_ptr.dtype.element_ty),
                     mask=cols < N)
            if PREFETCH:
                dy = dy_next
                y = y_next
    exchange_finish(sync_ptr, words, epoch, rounds)


def _launch_softmax_bwd(dy, y, dx, plan: utils.RowPlan):
    M, N = y.shape
    strides = (*dy.stride(), *y.stride(), N)
    unit = dy.stride(1) == 1 and y.stride(1) == 1
    align = utils.vector_align(y.element_size(), N, dy.stride(0), y.stride(0)) if unit else 1
    meta = dict(ALIGN=align, BLOCK_N=plan.block_n, num_warps=plan.num_warps)
    # EVEN: every step lies inside the row, so the kernel drops its column masks.  Only the plain
    # plans use it: the prefetching ones (stages 1) still mask their load past the row's end.
    even = N % plan.block_n == 0 and plan.stages is None
    if plan.mode == "tile":
        grid = (utils.cdiv(M, plan.block_m),)
        _softmax_bwd_tile_kernel[grid](dy, y, dx, M, N, *strides, BLOCK_M=plan.block_m, EVEN=even, **meta)
    elif plan.mode == "loop":
        _softmax_bwd_loop_kernel[(plan.grid or M,)](dy, y, dx, M, N, *strides, STAGES=plan.stages, EVEN=even,
                                                    **meta)
    elif plan.mode == "stream":
        _softmax_bwd_stream_kernel[(plan.grid,)](dy, y, dx, M, N, *strides, **meta)
    elif plan.mode == "split":
        ws = torch.empty((M * plan.splits,), dtype=torch.float32, device=y.device)
        grid = (M * plan.splits,)
        _softmax_bwd_split_stats_kernel[grid](dy, y, ws, N, *strides[:4], plan.splits, **meta)
        _softmax_bwd_split_apply_kernel[grid](dy, y, dx, ws, N, *strides, plan.splits,
                                              BLOCK_S=utils.next_pow2(plan.splits), **meta)
    else:
        sync = utils.exchange_buffer(y.device, plan.grid)
        _softmax_bwd_coop_kernel[(plan.grid,)](dy, y, dx, sync, sync.numel(), M, N, *strides, plan.splits,
                                               **utils.coop_launch_args(plan, y.device), **meta)


# ----------------------------------------------------------------------------------------------
# wrappers: same signature and outputs as the cases' eager functions


def _run(name, launch, inputs, out, plans, plan):
    """Launch with `plan`, or with the autotuned choice among `plans()` for these inputs."""
    if plan is None:
        key = (name, *utils.key_of(*inputs))
        plan = utils.autotune(key, plans, lambda p, *operands: launch(*operands, p), out.device, (*inputs, out))
    launch(*inputs, out, plan)
    return out


def softmax_impl(x: torch.Tensor, plan: utils.RowPlan | None = None, max_onchip: int = utils.MAX_ONCHIP):
    """softmax(x, 1); `plan` forces a launch plan, `max_onchip` the longest row kept on chip."""
    x = utils.as_2d_strided(x)
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if x.numel() == 0:
        return y
    plans = functools.partial(softmax_plans, *x.shape, x.device, max_onchip=max_onchip, elem_size=x.element_size())
    return _run("softmax", _launch_softmax, (x,), y, plans, plan)


def double_softmax_impl(x: torch.Tensor, plan: utils.RowPlan | None = None, max_onchip: int = utils.MAX_ONCHIP):
    x = utils.as_2d_strided(x)
    z = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if x.numel() == 0:
        return z
    plans = functools.partial(double_softmax_plans, *x.shape, x.device, max_onchip=max_onchip,
                              elem_size=x.element_size())
    return _run("double_softmax", _launch_double_softmax, (x,), z, plans, plan)


def softmax_backward_impl(dy: torch.Tensor, y: torch.Tensor, plan: utils.RowPlan | None = None,
                          max_onchip: int = utils.MAX_ONCHIP):
    dy, y = utils.as_2d_strided(dy), utils.as_2d_strided(y)
    if dy.shape != y.shape:
        raise ValueError(f"dy {tuple(dy.shape)} and y {tuple(y.shape)} differ in shape")
    dx = torch.empty(y.shape, dtype=y.dtype, device=y.device)
    if y.numel() == 0:
        return dx
    plans = functools.partial(softmax_backward_plans, *y.shape, y.device, max_onchip=max_onchip,
                              elem_size=y.element_size())
    return _run("softmax_backward", _launch_softmax_bwd, (dy, y), dx, plans, plan)


def _describe(shape, dtype):
    return utils.row_plans(shape[0], shape[1], "cuda" if torch.cuda.is_available() else "cpu",
                           elem_size=torch.empty((), dtype=dtype).element_size())[0].describe()


@triton_kernel("softmax", interpretable=True, describe=_describe)
def softmax(x):
    return softmax_impl(x)


@triton_kernel("double_softmax", interpretable=True, describe=_describe)
def double_softmax(x):
    return double_softmax_impl(x)


@triton_kernel("softmax_backward", interpretable=True, describe=_describe)
def softmax_backward(dy, y):
    return softmax_backward_impl(dy, y)
