"""Backward of LayerNorm, and of RMSNorm (the same kernels without the mean and the bias).

With y = x-hat * w + b, x-hat = (x - mean) * rstd and g = dy * w:
    dx = rstd * (g - mean(g) - x-hat * mean(g * x-hat))
    dw = sum over rows of dy * x-hat,   db = sum over rows of dy
RMSNorm has no mean (x-hat = x * rstd) and no bias: dx = rstd * (g - x-hat * mean(g * x-hat)).
add_rmsnorm's gradient of h (dh) is added to dx in the same kernel.

Each row's mean and rstd are recomputed here from the row in hand, but for the cooperative kernel,
which reads the forward's (the autograd Functions save them where it runs): there the sums a row
are what a team exchanges and waits for, and half of them (LayerNorm two, RMSNorm one) are
1.02-1.2x faster.  Where a program holds whole rows, reading the statistics gains nothing (within 1% on an
H100 at 8192 columns).

Three variants, chosen by row length (as the forwards' plans are):

* Rows on chip (N <= COOP_FROM_N on a GPU; without cooperative launches N <= max_onchip, and for
  4-byte inputs N <= FP32_ONCHIP, or FP32_ONCHIP_RMS for RMSNorm): each program takes a
  contiguous block of rows, one row at a time held whole in registers, with its partial dw and db
  kept in registers across its rows and written once ([programs, N] fp32), as Liger-Kernel's
  LayerNorm and RMSNorm backwards do.  A row's sums (four for LayerNorm, two for RMSNorm) are
  taken in one reduction, so the warps meet once per row.  With `prefetch` the next row's loads
  are issued before this row's reduction, so that DRAM stays busy while the warps meet; it costs
  the next row's registers.  It is on by default for 2-byte inputs up to PREFETCH_MAX_N columns
  (4-12% faster on an H100 at 4096-8192 columns) and off otherwise (fp32 rows gain nothing).
  Two programs an SM up to 4096 columns, one above (_rows_plan).  Above 8192 columns a row no
  longer fits a program's registers with its dw and db, and spills.
* Cooperative rows (COOP_FROM_N < N <= COOP_MAX_N, GPU launches only): the rows-on-chip kernel
  with each row shared by the programs of a team, a chunk each (coop_rows: 512-2048 columns, at
  most 32 a row, 1024 or more for fp32); they exchange their chunks' sums through global memory
  (exchange.py), so a row is still read once and a program holds 16 columns of it a thread.  The
  next row's chunk is loaded while the team exchanges, through shared memory (on an H100 1.1-1.6x
  the other two variants at 16384-65536 columns, docs/kernels.md).
* Long rows (above COOP_MAX_N, or above the rows-on-chip limits without cooperative launches):
  the row is walked in chunks by two kernels.  `_row_stats` takes one row per program and writes
  its four scalars (mean, rstd, mean(g * x-hat), mean(g)); `_columns` takes a block of columns
  over a group of rows, writes dx from those scalars and sums its partial dw and db in registers.
  x and dy are read twice, so 5 row-sized tensors move instead of the 3 of the other variants (dx,
  and x and dy once).

In every variant the [programs, N] partials of dw and db are summed by one small kernel that writes
both in the weight's dtype, launched on sm_90 and later as a programmatic dependent of the kernel
before it, which the cooperative kernel lets launch at once.

All arithmetic is fp32; dx has x's dtype, dw and db the weight's.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from fusebench.kernels import exchange, plans
from fusebench.kernels.device import cdiv, dependent_launch, next_pow2, num_sms
from fusebench.kernels.exchange import collect, column, coop_layout, exchange_finish, exchange_slots, publish
from fusebench.kernels.launch import Launch, dependent, signature
from fusebench.kernels.rowwise import add2, add4

LAYERNORM_EPS = 1e-5
# The longest fp32 rows held on chip, and the longest 2-byte rows that prefetch (module docstring).
FP32_ONCHIP, FP32_ONCHIP_RMS = 8192, 16384
PREFETCH_MAX_N = 8192
# Long-row kernels: the chunk a stats program reads per step and its warps, and the column
# kernel's tile.  With no more rows than SMs (a program per row, at most one an SM) each program
# needs more loads in flight: 8192 columns a step over 16 warps (bf16 128x65536: 24.6 against
# 31.5 µs, fp32 35.4 against 51.3 µs on an H100); with more rows 2048 over 8 warps is as fast or
# faster (bf16 1024x65536: 105 against 122 µs).
STATS_BLOCK, STATS_WARPS = 2048, 8
STATS_BLOCK_FEW_ROWS, STATS_WARPS_FEW_ROWS = 8192, 16
# Its tile for 2-byte inputs is 4 x 1024: a thread then holds its columns' 4 rows itself, so the
# per-step dw and db sums need no exchange between warps (3.4-4.3x faster than 8 x 256 on an H100
# at 128 and 1024 x 65536 bf16; for fp32 inputs the tiles measured are within 4% of each other).
COL_BLOCK_M, COL_BLOCK_N = 8, 256
COL_BLOCK_M_2BYTE, COL_BLOCK_N_2BYTE = 4, 1024
# The partial-sum kernel's tile: 32 fp32 columns are one 128-byte line of a partials row, and
# enough column blocks to cover the SMs at N >= 4096.
SUM_BLOCK_P, SUM_BLOCK_N = 64, 32


@dataclass(frozen=True)
class CoopRows:
    """A cooperative launch of the backward: `chunk` columns of a row a program, its warps, the
    programs an SM, and how a program gets its next row's chunk while it waits for this row's
    partials: into registers (`prefetch`), or `stages` - 1 rows ahead through shared memory (the
    compiler's pipeliner)."""

    chunk: int = 2048
    warps: int = 4
    per_sm: int = 4
    prefetch: bool = False
    stages: int | None = None


# Sweeps on an H100 with the forward's statistics read (docs/kernels.md): 16 columns a thread and
# 16 warps an SM, in the smallest chunk that leaves a row at most 32 programs: at 16384 columns
# bf16 LayerNorm in 512-column chunks at one warp is 4-6% faster than in 2048 at four.  fp32 rows
# take chunks of 1024 columns or more (in 512 they are up to 2% slower).  Each stages the next
# row through shared memory (the register prefetch is 0.83-1.01x as fast).
COOP_MAX_SPLITS = 32
COOP_FROM_N, COOP_MAX_N = 8192, 65536


def coop_rows(N: int, elem_size: int) -> CoopRows:
    """The cooperative launch for rows of N columns (COOP_FROM_N < N <= COOP_MAX_N) of
    `elem_size`-byte inputs: chunks of 512 (2-byte) or 1024 (fp32) to 2048 columns, at most
    COOP_MAX_SPLITS a row, 16 columns a thread, 16 warps an SM."""
    chunk = max(512 if elem_size <= 2 else 1024, next_pow2(cdiv(N, COOP_MAX_SPLITS)))
    warps = chunk // (16 * 32)
    return CoopRows(chunk, warps, 16 // warps, stages=2)


# ----------------------------------------------------------------------------------------------
# rows on chip


@triton.jit
def _chunk(dy_ptr, x_ptr, dh_ptr, row, M, N, stride_dy, stride_x, stride_dh, cols, HAS_DH: tl.constexpr):
    # A row's chunk of x, dy and dh (x again without dh), in their dtype; rows past M load nothing.
    mask = cols < tl.where(row < M, N, 0)
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0)
    dy = tl.load(dy_ptr + row * stride_dy + cols, mask=mask, other=0.0)
    dh = tl.load(dh_ptr + row * stride_dh + cols, mask=mask, other=0.0) if HAS_DH else x
    return x, dy, dh


@triton.jit
def _shift(x_ptr, row, M, stride_x, CENTER: tl.constexpr):
    # LayerNorm's shift k, the row's first element (the same for every program of the row); 0
    if CENTER:
        return tl.load(x_ptr + row * stride_x, mask=row < M, other=0.0).to(tl.float32)
    return tl.full([], 0.0, tl.float32)


@triton.jit
def _grads_from_sums(x_or_d, g, s0, s1, s2, s3, N, eps, CENTER: tl.constexpr):
    # (dx without dh, x-hat) from a row's sums: LayerNorm's of d, g, d^2 and g * d over d = x - k
    # (in that order: the cooperative kernel takes them from the exchange in the order they are
    # first used), RMSNorm's of x^2 and g * x (s2, s3 unused)
    if CENTER:
        mean_d = s0 / N
        mean_g = s1 / N
        rstd = 1.0 / tl.sqrt(tl.maximum(s2 / N - mean_d * mean_d, 0.0) + eps)
        xhat = (x_or_d - mean_d) * rstd
        # mean(g * x-hat) = rstd * mean(g * (d - mean(d)))
        c1 = rstd * (s3 / N - mean_d * mean_g)
        dx = rstd * (g - mean_g - xhat * c1)
    else:
        rstd = 1.0 / tl.sqrt(s0 / N + eps)
        xhat = x_or_d * rstd
        dx = rstd * (g - xhat * (rstd * s1 / N))
    return dx, xhat


@triton.jit
def _finish_row(dx_row_ptr, cols, mask, dx, dh_in, dy, xhat, dw, db, HAS_DH: tl.constexpr, CENTER: tl.constexpr):
    # A row's dx (plus dh) stored, and its terms of dw and db added: (dw, db)
    if HAS_DH:
        dx += dh_in.to(tl.float32)
    tl.store(dx_row_ptr + cols, dx.to(dx_row_ptr.dtype.element_ty), mask=mask)
    dw += dy * xhat
    if CENTER:
        db += dy
    return dw, db


@triton.jit
def _rows_kernel(dy_ptr, x_ptr, w_ptr, dh_ptr, dx_ptr, dw_ptr, db_ptr, M, N, stride_dy, stride_x, stride_dh,
                 stride_dx, eps, rows_per_program, CENTER: tl.constexpr, HAS_DH: tl.constexpr,
                 PREFETCH: tl.constexpr, BLOCK_N: tl.constexpr):
    # Each program walks its block of rows, a whole row in registers at a time.  A row's sums
    # are taken in one reduction (a tuple reduce: one cross-warp round through shared memory
    # rather than one per sum), over d = x - k with k the row's first element, so that a large
    # mean neither costs the sums their low bits nor cancels the variance away.  With PREFETCH
    # the next row's loads are issued before this row's reduction, so that memory stays busy
    # while the warps wait on each other.  The shift k is loaded a row ahead and dh with the
    # row, as in the cooperative kernel (here it makes no measured difference: the loads of a
    # row on chip are all in flight together).
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    ok = cols < N
    if not PREFETCH:
        w = tl.load(w_ptr + cols, mask=ok, other=0.0).to(tl.float32)
    dw = tl.zeros([BLOCK_N], tl.float32)
    db = tl.zeros([BLOCK_N], tl.float32)
    first = pid * rows_per_program
    last = tl.minimum(M, first + rows_per_program)  # rows from here on load nothing
    k_next = _shift(x_ptr, first.to(tl.int64), last, stride_x, CENTER)
    if PREFETCH:
        x_next, dy_next, dh_next = _chunk(dy_ptr, x_ptr, dh_ptr, first.to(tl.int64), last, N, stride_dy, stride_x,
                                          stride_dh, cols, HAS_DH)
    for i in tl.range(0, rows_per_program):
        row = (first + i).to(tl.int64)
        mask = cols < tl.where(row < M, N, 0)
        k = k_next
        k_next = _shift(x_ptr, row + 1, last, stride_x, CENTER)
        if PREFETCH:
            x_in, dy_in, dh_in = x_next, dy_next, dh_next
            x_next, dy_next, dh_next = _chunk(dy_ptr, x_ptr, dh_ptr, row + 1, last, N, stride_dy, stride_x, stride_dh,
                                              cols, HAS_DH)
            # the weight read again each row (from cache): its registers hold the next row
            w = tl.load(w_ptr + cols, mask=ok, other=0.0).to(tl.float32)
        else:
            x_in, dy_in, dh_in = _chunk(dy_ptr, x_ptr, dh_ptr, row, last, N, stride_dy, stride_x, stride_dh, cols,
                                        HAS_DH)
        x = x_in.to(tl.float32)
        dy = dy_in.to(tl.float32)
        g = dy * w
        if CENTER:
            d = tl.where(mask, x - k, 0.0)
            s_d, s_dd, s_g, s_gd = tl.reduce((d, d * d, g, g * d), 0, add4)
            dx, xhat = _grads_from_sums(d, g, s_d, s_g, s_dd, s_gd, N, eps, True)
        else:
            s_xx, s_gx = tl.reduce((x * x, g * x), 0, add2)
            dx, xhat = _grads_from_sums(x, g, s_xx, s_gx, 0.0, 0.0, N, eps, False)
        dw, db = _finish_row(dx_ptr + row * stride_dx, cols, mask, dx, dh_in, dy, xhat, dw, db, HAS_DH, CENTER)
    tl.store(dw_ptr + pid * N + cols, dw, mask=ok)
    if CENTER:
        tl.store(db_ptr + pid * N + cols, db, mask=ok)


# ----------------------------------------------------------------------------------------------
# cooperative rows


@triton.jit
def _saved(stats_ptr, row, M, CENTER: tl.constexpr):
    # the forward's (mean, rstd) of a row (LayerNorm: [M, 2]; RMSNorm: [M, 1], its rstd); 0 past M
    ok = row < M
    if CENTER:
        return (tl.load(stats_ptr + row * 2, mask=ok, other=0.0), tl.load(stats_ptr + row * 2 + 1, mask=ok, other=0.0))
    return tl.full([], 0.0, tl.float32), tl.load(stats_ptr + row, mask=ok, other=0.0)


@triton.jit
def _coop_rows_kernel(dy_ptr, x_ptr, w_ptr, dh_ptr, stats_ptr, dx_ptr, dw_ptr, db_ptr, sync_ptr, words, M, N,
                      stride_dy, stride_x, stride_dh, stride_dx, eps, SPLITS, CENTER: tl.constexpr,
                      HAS_DH: tl.constexpr, PREFETCH: tl.constexpr, SAVED: tl.constexpr, BLOCK_N: tl.constexpr,
                      BLOCK_S: tl.constexpr, WARPS: tl.constexpr, STAGES: tl.constexpr, DEPENDENTS: tl.constexpr):
    # _rows_kernel with a row shared by SPLITS programs (exchange.coop_layout): each holds its
    # chunk of the row, and of dw and db, in registers and publishes the chunk's sums; every
    # program of the row adds the row's SPLITS partials itself.  Rows past M are skipped by the
    # whole team alike.  The next row's chunk is loaded while the team exchanges: into registers
    # with PREFETCH, through shared memory with STAGES > 1 (the pipeliner; the loads sit outside
    # the `if` for it).  The shift k is loaded a row ahead either way: a load of it in the round
    # would put a DRAM round trip before every row's sums.  SAVED: the forward's mean and rstd
    # are read instead, also a row ahead, and a row has half the sums (LayerNorm two, RMSNorm one).
    if DEPENDENTS:  # the partials' summing kernel may launch: its programs wait for this kernel to end
        gdc_launch_dependents()
    pid, rows_at_once, rounds, team, epoch, cols = coop_layout(sync_ptr, M, SPLITS, BLOCK_N)
    ok = cols < N
    if not PREFETCH:
        w = tl.load(w_ptr + cols, mask=ok, other=0.0).to(tl.float32)
    dw = tl.zeros([BLOCK_N], tl.float32)
    db = tl.zeros([BLOCK_N], tl.float32)
    K: tl.constexpr = (2 if CENTER else 1) if SAVED else (4 if CENTER else 2)
    i = tl.arange(0, K)
    first = (pid // SPLITS).to(tl.int64)
    if SAVED:
        mean_next, rstd_next = _saved(stats_ptr, first, M, CENTER)
    else:
        k_next = _shift(x_ptr, first, M, stride_x, CENTER)
    if PREFETCH:
        x_next, dy_next, dh_next = _chunk(dy_ptr, x_ptr, dh_ptr, first, M, N, stride_dy, stride_x, stride_dh, cols,
                                          HAS_DH)
    for rnd in tl.range(0, rounds, num_stages=STAGES):
        row = (rnd * rows_at_once + pid // SPLITS).to(tl.int64)
        nxt = row + rows_at_once
        if SAVED:
            mean, rstd = mean_next, rstd_next
            mean_next, rstd_next = _saved(stats_ptr, nxt, M, CENTER)
        else:
            k = k_next
            k_next = _shift(x_ptr, nxt, M, stride_x, CENTER)
        if PREFETCH:
            x_in, dy_in, dh_in = x_next, dy_next, dh_next
        else:
            x_in, dy_in, dh_in = _chunk(dy_ptr, x_ptr, dh_ptr, row, M, N, stride_dy, stride_x, stride_dh, cols,
                                        HAS_DH)
        if row < M:
            x = x_in.to(tl.float32)
            dy = dy_in.to(tl.float32)
            if PREFETCH:  # the weight from cache: its registers hold the next row
                w = tl.load(w_ptr + cols, mask=ok, other=0.0).to(tl.float32)
            g = dy * w
            if SAVED and CENTER:
                xhat = (x - mean) * rstd
                s_g, s_gx = tl.reduce((g, g * xhat), 0, add2)
                parts = tl.where(i == 0, s_g, s_gx)
            elif SAVED:
                xhat = x * rstd
                parts = tl.full([K], tl.sum(g * xhat, 0), tl.float32)
            elif CENTER:
                d = tl.where(ok, x - k, 0.0)
                s_d, s_dd, s_g, s_gd = tl.reduce((d, d * d, g, g * d), 0, add4)
                parts = tl.where(i == 0, s_d, tl.where(i == 1, s_dd, tl.where(i == 2, s_g, s_gd)))
            else:
                s_xx, s_gx = tl.reduce((x * x, g * x), 0, add2)
                parts = tl.where(i == 0, s_xx, s_gx)
            publish(exchange_slots(sync_ptr, pid, rnd), parts, epoch + 1 + rnd)
            if PREFETCH:
                x_next, dy_next, dh_next = _chunk(dy_ptr, x_ptr, dh_ptr, nxt, M, N, stride_dy, stride_x, stride_dh,
                                                  cols, HAS_DH)
            sums = collect(exchange_slots(sync_ptr, team, rnd), epoch + 1 + rnd, SPLITS, BLOCK_S, K, WARPS)
            if SAVED and CENTER:  # dx = rstd * (g - mean(g) - x-hat * mean(g * x-hat))
                dx = rstd * (g - tl.sum(column(sums, 0), 0) / N - xhat * (tl.sum(column(sums, 1), 0) / N))
            elif SAVED:
                dx = rstd * (g - xhat * (tl.sum(column(sums, 0), 0) / N))
            elif CENTER:
                dx, xhat = _grads_from_sums(d, g, tl.sum(column(sums, 0), 0), tl.sum(column(sums, 2), 0),
                                            tl.sum(column(sums, 1), 0), tl.sum(column(sums, 3), 0), N, eps, True)
            else:
                dx, xhat = _grads_from_sums(x, g, tl.sum(column(sums, 0), 0), tl.sum(column(sums, 1), 0), 0.0, 0.0,
                                            N, eps, False)
            dw, db = _finish_row(dx_ptr + row * stride_dx, cols, ok, dx, dh_in, dy, xhat, dw, db, HAS_DH, CENTER)
    # the team's partials: row pid // SPLITS of [rows_at_once, N], this program's columns
    tl.store(dw_ptr + (pid // SPLITS) * N + cols, dw, mask=ok)
    if CENTER:
        tl.store(db_ptr + (pid // SPLITS) * N + cols, db, mask=ok)
    exchange_finish(sync_ptr, words, epoch, rounds)


# ----------------------------------------------------------------------------------------------
# long rows


@triton.jit
def _row_stats_kernel(dy_ptr, x_ptr, w_ptr, stats_ptr, N, stride_dy, stride_x, eps, CENTER: tl.constexpr,
                      BLOCK_N: tl.constexpr):
    # One row: per-lane sums of d = x - k, d^2, g and g * d over the chunks (k the row's first
    # element, so that a large mean neither costs the sums their low bits nor cancels the
    # variance away), then (mean, rstd, mean(g * x-hat), mean(g)).
    row = tl.program_id(0).to(tl.int64)
    c = tl.arange(0, BLOCK_N)
    if CENTER:
        k = tl.load(x_ptr + row * stride_x).to(tl.float32)
    else:
        k = 0.0
    s_d = tl.zeros([BLOCK_N], tl.float32)
    s_dd = tl.zeros([BLOCK_N], tl.float32)
    s_g = tl.zeros([BLOCK_N], tl.float32)
    s_gd = tl.zeros([BLOCK_N], tl.float32)
    for start in tl.range(0, N, BLOCK_N):
        cols = start + c
        ok = cols < N
        x = tl.load(x_ptr + row * stride_x + cols, mask=ok, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + row * stride_dy + cols, mask=ok, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=ok, other=0.0).to(tl.float32)
        d = tl.where(ok, x - k, 0.0)
        g = dy * w
        s_d += d
        s_dd += d * d
        s_g += g
        s_gd += g * d
    mean_g = tl.sum(s_g, 0) / N
    if CENTER:
        mean_d = tl.sum(s_d, 0) / N
        rstd = 1.0 / tl.sqrt(tl.maximum(tl.sum(s_dd, 0) / N - mean_d * mean_d, 0.0) + eps)
    else:
        mean_d = 0.0
        rstd = 1.0 / tl.sqrt(tl.sum(s_dd, 0) / N + eps)
    # mean(g * x-hat) = rstd * mean(g * (d - mean(d)))
    c1 = rstd * (tl.sum(s_gd, 0) / N - mean_d * mean_g)
    i = tl.arange(0, 4)
    stats = tl.where(i == 0, k + mean_d, tl.where(i == 1, rstd, tl.where(i == 2, c1, mean_g)))
    tl.store(stats_ptr + row * 4 + i, stats)


@triton.jit
def _columns_kernel(dy_ptr, x_ptr, w_ptr, dh_ptr, stats_ptr, dx_ptr, dw_ptr, db_ptr, M, N, stride_dy, stride_x,
                    stride_dh, stride_dx, rows_per_group, CENTER: tl.constexpr, HAS_DH: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # A block of columns over a group of rows: dx from the rows' scalars; dw, db summed here.
    group = tl.program_id(1)
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    ok_n = cols < N
    w = tl.load(w_ptr + cols, mask=ok_n, other=0.0).to(tl.float32)
    dw = tl.zeros([BLOCK_N], tl.float32)
    db = tl.zeros([BLOCK_N], tl.float32)
    r = tl.arange(0, BLOCK_M)
    first = group * rows_per_group
    end = tl.minimum(first + rows_per_group, M)
    for start in tl.range(first, end, BLOCK_M):
        rows = (start + r).to(tl.int64)
        ok_m = rows < end
        mask = ok_m[:, None] & ok_n[None, :]
        x = tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + rows[:, None] * stride_dy + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        # padding rows: scalars 0, so x-hat = 0 there; padding columns: dy = 0 adds nothing
        mean = tl.load(stats_ptr + rows * 4, mask=ok_m, other=0.0)
        rstd = tl.load(stats_ptr + rows * 4 + 1, mask=ok_m, other=0.0)
        c1 = tl.load(stats_ptr + rows * 4 + 2, mask=ok_m, other=0.0)
        c2 = tl.load(stats_ptr + rows * 4 + 3, mask=ok_m, other=0.0)
        xhat = (x - mean[:, None]) * rstd[:, None]
        g = dy * w[None, :]
        if CENTER:
            dx = rstd[:, None] * (g - c2[:, None] - xhat * c1[:, None])
        else:
            dx = rstd[:, None] * (g - xhat * c1[:, None])
        if HAS_DH:
            dx += tl.load(dh_ptr + rows[:, None] * stride_dh + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        tl.store(dx_ptr + rows[:, None] * stride_dx + cols[None, :], dx.to(dx_ptr.dtype.element_ty), mask=mask)
        dw += tl.sum(dy * xhat, 0)
        if CENTER:
            db += tl.sum(dy, 0)
    tl.store(dw_ptr + group * N + cols, dw, mask=ok_n)
    if CENTER:
        tl.store(db_ptr + group * N + cols, db, mask=ok_n)


# ----------------------------------------------------------------------------------------------
# the weight's gradients


@triton.jit
def _sum_partials_kernel(dw_part_ptr, db_part_ptr, dw_ptr, db_ptr, P, N, HAS_DB: tl.constexpr,
                         BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr, WAIT: tl.constexpr):
    # dw (and db) = the [P, N] fp32 partials summed over P, written in the weight's dtype: one
    # launch for both, where torch takes a sum and a cast for each.  WAIT: launched as a dependent of
    # the kernel writing the partials (launch.dependent), it may start before they are written.
    if WAIT:
        gdc_wait()
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    ok_n = cols < N
    r = tl.arange(0, BLOCK_P)
    acc_w = tl.zeros([BLOCK_P, BLOCK_N], tl.float32)
    acc_b = tl.zeros([BLOCK_P, BLOCK_N], tl.float32)
    for start in tl.range(0, P, BLOCK_P):
        rows = start + r
        mask = (rows < P)[:, None] & ok_n[None, :]
        offs = rows[:, None].to(tl.int64) * N + cols[None, :]
        acc_w += tl.load(dw_part_ptr + offs, mask=mask, other=0.0)
        if HAS_DB:
            acc_b += tl.load(db_part_ptr + offs, mask=mask, other=0.0)
    tl.store(dw_ptr + cols, tl.sum(acc_w, 0).to(dw_ptr.dtype.element_ty), mask=ok_n)
    if HAS_DB:
        tl.store(db_ptr + cols, tl.sum(acc_b, 0).to(db_ptr.dtype.element_ty), mask=ok_n)


# ----------------------------------------------------------------------------------------------
# launchers: a plan per problem key, made at the key's first call; a later call allocates the
# outputs and the partials and launches (launch.Launch), with every grid, constant and integer
# argument decided at the first.


def _programs(device, wanted: int | None, limit: int, per_sm: int = 4) -> int:
    # `per_sm` programs per SM on a GPU; under the interpreter few, since each runs serially.
    if wanted is None:
        wanted = per_sm * num_sms(device) if device.type == "cuda" else 4
    return max(1, min(wanted, limit))


def _rows_plan(dy, x, dh, center: bool, eps: float, programs: int | None, prefetch: bool):
    M, N = x.shape
    # Each program holds about 32 (2-byte inputs) or 16 (fp32) of a row's columns per thread, up
    # to 2.4x faster than 8 columns a thread (docs/kernels.md).  Two programs per SM up to 4096
    # columns (6-50% faster than one on an H100); one above, where a program is 8-16 warps and
    # the prefetched row keeps its loads in flight (1-6% faster at 8192 columns; at 16384, where
    # the rows spill, one spills into less traffic).
    programs = _programs(x.device, programs, M, per_sm=2 if N <= 4096 else 1)
    block_n = triton.next_power_of_2(N)
    per_thread = 32 if x.element_size() <= 2 else 16
    launch = Launch(_rows_kernel, (programs,), dict(
        CENTER=center, HAS_DH=dh is not dy, PREFETCH=prefetch, BLOCK_N=block_n,
        num_warps=plans.num_warps_for(block_n, per_thread=per_thread, lo=4, hi=16)))
    ints = (M, N, dy.stride(0), x.stride(0), dh.stride(0), N, eps, triton.cdiv(M, programs))  # dx is dense
    return _partials(launch, ints, programs, N, center, takes_stats=False)


def _partials(launch: Launch, ints: tuple, n_partials: int, N: int, center: bool, takes_stats: bool):
    """(partials, [launch], n_partials): partials(dy, x, w, dh, stats, dx) launches a rows kernel
    that writes dx and its [n_partials, N] fp32 partial sums of dw (and db), and returns those;
    `stats` goes to a kernel that `takes_stats` (the cooperative one)."""

    def partials(dy, x, w, dh, stats, dx):
        dw = x.new_empty((n_partials, N), dtype=torch.float32)
        db = x.new_empty((n_partials, N), dtype=torch.float32) if center else dw
        if takes_stats:
            launch(dy, x, w, dh, stats, dx, dw, db, *ints)
        else:
            launch(dy, x, w, dh, dx, dw, db, *ints)
        return dw, db

    return partials, [launch], n_partials


def _coop_plan(dy, x, dh, center: bool, eps: float, shape: CoopRows, saved: bool):
    M, N = x.shape
    coop = plans.coop_plan(M, N, x.device, chunk=shape.chunk, num_warps=shape.warps, per_sm=shape.per_sm,
                           prefetch=shape.prefetch, stages=shape.stages)
    if coop.stages and not plans.coop_stages_fit(coop, x.device, x.element_size(), row_inputs=2 if dh is dy else 3):
        coop = replace(coop, stages=None)  # a cooperative grid must fit at once: no staging then
    launch = Launch(_coop_rows_kernel, (coop.grid,), dict(
        CENTER=center, HAS_DH=dh is not dy, SAVED=saved, BLOCK_N=coop.block_n, num_warps=coop.num_warps,
        DEPENDENTS=dependent_launch(x.device), **plans.coop_launch_args(coop, x.device)))
    sync = exchange.exchange_buffer(x.device, coop.grid)
    ints = (sync, sync.numel(), M, N, dy.stride(0), x.stride(0), dh.stride(0), N, eps, coop.splits)  # dx is dense
    return _partials(launch, ints, coop.grid // coop.splits, N, center, takes_stats=True)


def _long_rows_plan(dy, x, dh, center: bool, eps: float, programs: int | None):
    M, N = x.shape
    few_rows = x.device.type == "cuda" and M <= num_sms(x.device)
    block, warps = (STATS_BLOCK_FEW_ROWS, STATS_WARPS_FEW_ROWS) if few_rows else (STATS_BLOCK, STATS_WARPS)
    block = min(block, triton.next_power_of_2(N))
    stats = Launch(_row_stats_kernel, (M,), dict(
        CENTER=center, BLOCK_N=block, num_warps=plans.num_warps_for(block, per_thread=8, lo=1, hi=warps)))
    stats_ints = (N, dy.stride(0), x.stride(0), eps)
    bm, bn = (COL_BLOCK_M_2BYTE, COL_BLOCK_N_2BYTE) if x.element_size() <= 2 else (COL_BLOCK_M, COL_BLOCK_N)
    col_blocks = triton.cdiv(N, bn)
    wanted = None if programs is None else triton.cdiv(programs, col_blocks)
    if wanted is None and x.device.type == "cuda":
        wanted = triton.cdiv(4 * num_sms(x.device), col_blocks)
    groups = _programs(x.device, wanted, triton.cdiv(M, bm))
    rows_per_group = triton.cdiv(triton.cdiv(M, groups), bm) * bm
    groups = triton.cdiv(M, rows_per_group)
    columns = Launch(_columns_kernel, (col_blocks, groups), dict(
        CENTER=center, HAS_DH=dh is not dy, BLOCK_M=bm, BLOCK_N=bn, num_warps=4))
    column_ints = (M, N, dy.stride(0), x.stride(0), dh.stride(0), N, rows_per_group)  # dx is dense

    def partials(dy, x, w, dh, saved, dx):  # the row statistics recomputed, any saved ones unused
        scalars = x.new_empty((M, 4), dtype=torch.float32)
        dw = x.new_empty((groups, N), dtype=torch.float32)
        db = x.new_empty((groups, N), dtype=torch.float32) if center else dw
        stats(dy, x, w, scalars, *stats_ints)
        columns(dy, x, w, dh, scalars, dx, dw, db, *column_ints)
        return dw, db

    return partials, [stats, columns], groups


def _plan(dy, x, w, dh, center: bool, eps: float, onchip: bool, programs: int | None, prefetch: bool,
          coop: CoopRows | None, saved: bool):
    """plan(dy, x, w, dh) -> (dx, dw, db) for this key, and its launches."""
    M, N = x.shape
    if coop is not None:
        partials, launches, n_partials = _coop_plan(dy, x, dh, center, eps, coop, saved)
    elif onchip:
        partials, launches, n_partials = _rows_plan(dy, x, dh, center, eps, programs, prefetch)
    else:
        partials, launches, n_partials = _long_rows_plan(dy, x, dh, center, eps, programs)
    total, summed = _sum_plan(n_partials, N, center, x.device)

    def plan(dy, x, w, dh, stats):
        dx = x.new_empty((M, N))
        dw_part, db_part = partials(dy, x, w, dh, stats, dx)
        dw = w.new_empty(N)
        db = w.new_empty(N) if center else dw
        total(dw_part, db_part, dw, db)
        return dx, dw, db if center else None

    return plan, launches + [summed]


def _sum_plan(n_partials: int, N: int, with_db: bool, device):
    """(total, its launch): total(dw_part, db_part, dw, db) sums the [n_partials, N] fp32 partials
    of dw (and of db, with_db) into dw (db), written in their dtype.  Where it can, the launch is a
    dependent of the partials' kernel: it then starts 1-1.5 us earlier (docs/kernels.md)."""
    launch = Launch(_sum_partials_kernel, (triton.cdiv(N, SUM_BLOCK_N),), dict(
        HAS_DB=with_db, BLOCK_P=SUM_BLOCK_P, BLOCK_N=SUM_BLOCK_N, num_warps=4, **dependent(device)))

    def total(dw_part, db_part, dw, db):
        launch(dw_part, db_part, dw, db, n_partials, N)

    return total, launch


def _rows_contiguous(t: torch.Tensor) -> torch.Tensor:
    # kernels index columns with stride 1 and take the row stride
    return t if t.stride(-1) == 1 else t.contiguous()


def _coop_rows(N: int, device) -> bool:
    """Whether rows of N columns take the cooperative kernel: on a GPU, above COOP_FROM_N columns
    (rows that spill on chip, or would be read twice by the long-row kernels) and up to
    COOP_MAX_N."""
    return plans.coop_enabled(device) and COOP_FROM_N < N <= COOP_MAX_N


# {problem key: (plan, its launches)}
_PLANS: dict = {}


def norm_backward(dy, x, weight, dh=None, *, center: bool, eps: float, max_onchip: int = plans.MAX_ONCHIP,
                  programs: int | None = None, prefetch: bool | None = None, coop: CoopRows | bool | None = None,
                  stats: torch.Tensor | None = None, kernels: list | None = None):
    """(dx, dw, db) of a LayerNorm (center=True) or RMSNorm (center=False, db None) of x's rows
    given dy; with dh, dx also carries it.  Rows longer than `max_onchip` take the long-row
    kernels, unless they take the cooperative one (module docstring).  `programs` sets how many
    programs share the rows (tests), `prefetch` whether rows on chip load the next row ahead
    (None: by dtype and row length, module docstring), `coop` the cooperative launch (None:
    coop_rows where _coop_rows says so; False: none), `stats` gives the forward's fp32 row
    statistics (run with save=True: LayerNorm's [M, 2] means and rstds, RMSNorm's [M, 1] rstds),
    which the cooperative kernel reads instead of recomputing them (the others recompute them
    either way), `kernels` collects the compiled kernels launched (a GPU test reads their spill
    counts)."""
    if x.dim() != 2 or dy.shape != x.shape or weight.shape != (x.shape[1],):
        raise ValueError(f"dy {tuple(dy.shape)}, x {tuple(x.shape)} and weight {tuple(weight.shape)} do not match")
    if stats is not None and (stats.shape != (x.shape[0], 2 if center else 1) or stats.dtype != torch.float32
                              or not stats.is_contiguous()):
        raise ValueError("stats are contiguous fp32 rows: [M, 2] (mean, rstd) for LayerNorm, [M, 1] (rstd) for RMSNorm")
    dy, x, w = _rows_contiguous(dy), _rows_contiguous(x), weight.contiguous()
    has_dh = dh is not None
    dh = _rows_contiguous(dh) if has_dh else dy  # `dh is dy` tells the kernels there is none
    saved = stats is not None
    key = (signature(dy, x, w, dh if has_dh else None), center, eps, max_onchip, programs, prefetch, coop, saved)
    found = _PLANS.get(key)
    if found is None:
        M, N = x.shape
        if M == 0 or N == 0:
            zero = torch.zeros_like(weight)
            return torch.empty((M, N), dtype=x.dtype, device=x.device), zero, zero.clone() if center else None
        onchip = N <= (max_onchip if x.element_size() <= 2
                       else min(max_onchip, FP32_ONCHIP if center else FP32_ONCHIP_RMS))
        if prefetch is None:
            prefetch = x.element_size() <= 2 and N <= PREFETCH_MAX_N
        if coop is None:
            coop = coop_rows(N, x.element_size()) if programs is None and _coop_rows(N, x.device) else None
        elif coop is False or not plans.coop_enabled(x.device):
            coop = None
        found = _PLANS[key] = _plan(dy, x, w, dh, center, eps, onchip, programs, onchip and prefetch, coop, saved)
    plan, launches = found
    dx, dw, db = plan(dy, x, w, dh, stats if saved else dy)
    if kernels is not None:
        kernels.extend(launch.kernel for launch in launches if launch.kernel is not None)
    return dx, dw, db


def layernorm_backward(dy, x, weight, max_onchip: int = plans.MAX_ONCHIP, programs: int | None = None,
                       stats: torch.Tensor | None = None):
    """(dx, dweight, dbias) of F.layer_norm(x, (N,), weight, bias, 1e-5) given dy (and the
    forward's row statistics, see norm_backward)."""
    return norm_backward(dy, x, weight, center=True, eps=LAYERNORM_EPS, max_onchip=max_onchip, programs=programs,
                         stats=stats)


def reads_saved_stats(x: torch.Tensor, center: bool) -> bool:
    """Whether the autograd Functions save the forward's row statistics of x for norm_backward:
    where the cooperative kernel takes its rows (half the sums a row; on an H100 at 16384-65536
    columns LayerNorm runs 1.04-1.12x faster, bf16 RMSNorm 1.02-1.03x, fp32 RMSNorm 0.98-1.01x,
    so RMSNorm saves them for 2-byte inputs only).  The other kernels hold whole rows or read them
    twice, and gain nothing."""
    return x.dim() == 2 and _coop_rows(x.shape[1], x.device) and (center or x.element_size() <= 2)
