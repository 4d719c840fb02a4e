"""The Triton kernels of layernorm_backward.py, which says which kernel takes which rows and why,
and launches them: rows on chip (`_rows_kernel`), cooperative rows (`_coop_rows_kernel`), long rows
(`_row_stats_kernel`, then `_columns_kernel`), and the sum of the weight's partial gradients
(`_sum_partials_kernel`).  All arithmetic is fp32.
"""
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from fusebench.kernels.exchange import collect, column, coop_layout, exchange_finish, exchange_slots, publish
from fusebench.kernels.rowwise import add2, add4


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
