"""Session 13, call 2 probe (one H200): variants of the streamed long-row kernels.

Call 1 (Nsight Compute, 2048x65536 fp32) found two different limits:
* double_softmax's streamed plan is neither DRAM- (67%) nor issue-bound (53%): latency.  Each
  8192-column step of its first pass takes the chunk's max across the whole program (a block
  reduction through shared memory, with barriers) before it can exponentiate.  Variant "lane":
  a running max per lane instead, with one exp per element (d = x - m: if d > 0 the sums are
  rescaled by exp(-d) and gain 1, else they gain exp(d)), the lanes combined once per row.  The
  same for softmax.
* layernorm reads its input 1.33x from DRAM (softmax at the same step 1.14x): its second pass also
  reads weight and bias.  Variants: those loads evict_last; none at all (diagnostic: wrong output).
And softmax_backward's and layernorm's streamed plans with fewer programs than SMs (fewer rows
between a row's two passes, so more of the second pass hits L2).

    PYTHONPATH=. python docs/device-runs/s13-call2-probe.py time     # check + time every variant
    ncu ... python docs/device-runs/s13-call2-probe.py ncu           # each once, flushed, in NVTX "probe"
"""
import sys

import torch
import triton
import triton.language as tl

from fusebench.cases import get_case
from fusebench.kernels import norms, softmax, utils
from fusebench.measure.accuracy import compare
from fusebench.measure.timing import _flush_buffer, _flush_l2

NEG = tl.constexpr(-3.0e38)  # finite "minus infinity" for a lane's running max: NEG - NEG = 0, not nan


@triton.jit
def _lane_step(x, m):
    # The new per-lane max and e = exp(-|x - m|): the factor by which the old sums shrink (x > m)
    # or the new term (x <= m).
    d = x - m
    return tl.maximum(m, x), tl.exp(-tl.abs(d)), d > 0


@triton.jit
def _softmax_lane_kernel(x_ptr, y_ptr, M, N, stride_xm, stride_ym, BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    n_prog = tl.num_programs(0)
    c = tl.arange(0, BLOCK_N)
    n_chunks = tl.cdiv(N, BLOCK_N)
    last = (n_chunks - 1) * BLOCK_N
    row = pid.to(tl.int64)
    x = utils.first_chunk(x_ptr, row, M, N, stride_xm, 1, float("-inf"), BLOCK_N)
    for i in tl.range(0, tl.cdiv(M - pid, n_prog)):
        x_row = x_ptr + row * stride_xm
        y_row = y_ptr + row * stride_ym
        m = tl.full([BLOCK_N], NEG, tl.float32)
        s = tl.zeros([BLOCK_N], tl.float32)
        for start in tl.range(BLOCK_N, last + 1, BLOCK_N):
            x_next = tl.load(x_row + start + c, mask=start + c < N, other=float("-inf"), eviction_policy="evict_last")
            m, e, up = _lane_step(x.to(tl.float32), m)
            s = tl.where(up, s * e + 1.0, s + e)
            x = x_next
        x_next = tl.load(x_row + last - BLOCK_N + c, mask=last - BLOCK_N + c >= 0, other=float("-inf"),
                         eviction_policy="evict_first")
        m, e, up = _lane_step(x.to(tl.float32), m)
        s = tl.where(up, s * e + 1.0, s + e)
        mx = tl.max(m, 0)
        inv = 1.0 / tl.sum(s * tl.exp(m - mx), 0)
        tl.store(y_row + last + c, (tl.exp(x.to(tl.float32) - mx) * inv).to(y_row.dtype.element_ty),
                 mask=last + c < N, eviction_policy="evict_first")
        x = x_next
        for j in tl.range(1, n_chunks - 1):
            start = last - j * BLOCK_N
            x_next = tl.load(x_row + start - BLOCK_N + c, eviction_policy="evict_first")
            tl.store(y_row + start + c, (tl.exp(x.to(tl.float32) - mx) * inv).to(y_row.dtype.element_ty),
                     eviction_policy="evict_first")
            x = x_next
        row_next = row + n_prog
        x_next = utils.first_chunk(x_ptr, row_next, M, N, stride_xm, 1, float("-inf"), BLOCK_N)
        tl.store(y_row + c, (tl.exp(x.to(tl.float32) - mx) * inv).to(y_row.dtype.element_ty),
                 mask=c < tl.where(last > 0, N, 0), eviction_policy="evict_first")
        x = x_next
        row = row_next


@triton.jit
def _ds_lane_kernel(x_ptr, z_ptr, M, N, stride_xm, stride_zm, BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    n_prog = tl.num_programs(0)
    c = tl.arange(0, BLOCK_N)
    n_chunks = tl.cdiv(N, BLOCK_N)
    last = (n_chunks - 1) * BLOCK_N
    row = pid.to(tl.int64)
    x = utils.first_chunk(x_ptr, row, M, N, stride_xm, 1, float("-inf"), BLOCK_N)
    for i in tl.range(0, tl.cdiv(M - pid, n_prog)):
        x_row = x_ptr + row * stride_xm
        z_row = z_ptr + row * stride_zm
        m = tl.full([BLOCK_N], NEG, tl.float32)
        P1 = tl.zeros([BLOCK_N], tl.float32)
        P2 = tl.zeros([BLOCK_N], tl.float32)
        P3 = tl.zeros([BLOCK_N], tl.float32)
        P4 = tl.zeros([BLOCK_N], tl.float32)
        x_last = x
        for start in tl.range(BLOCK_N, last + 2 * BLOCK_N, BLOCK_N):  # one step more: the last chunk
            cols = tl.where(start <= last, start, last - BLOCK_N) + c  # the last step fetches chunk n-2
            x_next = tl.load(x_row + cols, mask=(cols < N) & (cols >= 0), other=float("-inf"),
                             eviction_policy="evict_last")
            m, e, up = _lane_step(x.to(tl.float32), m)
            e2 = e * e
            P1 = tl.where(up, P1 * e + 1.0, P1 + e)
            P2 = tl.where(up, P2 * e2 + 1.0, P2 + e2)
            P3 = tl.where(up, P3 * (e2 * e) + 1.0, P3 + e2 * e)
            P4 = tl.where(up, P4 * (e2 * e2) + 1.0, P4 + e2 * e2)
            x_last = x
            x = x_next
        mx = tl.max(m, 0)
        r = tl.exp(m - mx)
        r2 = r * r
        inv1, inv2 = softmax._second_normalizer(tl.sum(P1 * r, 0), tl.sum(P2 * r2, 0), tl.sum(P3 * r2 * r, 0),
                                                tl.sum(P4 * r2 * r2, 0), N)
        tl.store(z_row + last + c, (tl.exp(tl.exp(x_last.to(tl.float32) - mx) * inv1) * inv2).to(z_row.dtype.element_ty),
                 mask=last + c < N, eviction_policy="evict_first")
        for j in tl.range(1, n_chunks - 1):
            start = last - j * BLOCK_N
            x_next = tl.load(x_row + start - BLOCK_N + c, eviction_policy="evict_first")
            tl.store(z_row + start + c, (tl.exp(tl.exp(x.to(tl.float32) - mx) * inv1) * inv2).to(z_row.dtype.element_ty),
                     eviction_policy="evict_first")
            x = x_next
        row_next = row + n_prog
        x_next = utils.first_chunk(x_ptr, row_next, M, N, stride_xm, 1, float("-inf"), BLOCK_N)
        tl.store(z_row + c, (tl.exp(tl.exp(x.to(tl.float32) - mx) * inv1) * inv2).to(z_row.dtype.element_ty),
                 mask=c < tl.where(last > 0, N, 0), eviction_policy="evict_first")
        x = x_next
        row = row_next


@triton.jit
def _ln_variant_kernel(x_ptr, w_ptr, b_ptr, y_ptr, M, N, stride_xm, stride_ym, eps, BLOCK_N: tl.constexpr,
                       WB: tl.constexpr):
    # norms._layernorm_stream_kernel with the second pass's weight and bias loads WB = 0 as there,
    # 1 evict_last, 2 not at all (w = 1, b = 0: wrong output, for the DRAM bytes).
    pid = tl.program_id(0)
    n_prog = tl.num_programs(0)
    c = tl.arange(0, BLOCK_N)
    n_chunks = tl.cdiv(N, BLOCK_N)
    last = (n_chunks - 1) * BLOCK_N
    row = pid.to(tl.int64)
    x = utils.first_chunk(x_ptr, row, M, N, stride_xm, 1, 0.0, BLOCK_N)
    k = tl.load(x_ptr + row * stride_xm, mask=row < M, other=0.0).to(tl.float32)
    for i in tl.range(0, tl.cdiv(M - pid, n_prog)):
        x_row = x_ptr + row * stride_xm
        y_row = y_ptr + row * stride_ym
        s1 = tl.zeros([BLOCK_N], tl.float32)
        s2 = tl.zeros([BLOCK_N], tl.float32)
        for start in tl.range(BLOCK_N, last + 1, BLOCK_N):
            x_next = tl.load(x_row + start + c, mask=start + c < N, other=0.0, eviction_policy="evict_last")
            d = x.to(tl.float32) - k
            s1 += d
            s2 += d * d
            x = x_next
        d = tl.where(last + c < N, x.to(tl.float32) - k, 0.0)
        mean_d = tl.sum(s1 + d, 0) / N
        rstd = 1.0 / tl.sqrt(tl.maximum(tl.sum(s2 + d * d, 0) / N - mean_d * mean_d, 0.0) + eps)
        mean = k + mean_d
        for j in tl.range(0, n_chunks):
            cols = last - j * BLOCK_N + c
            if j > 0:
                x = tl.load(x_row + cols, mask=cols < N, other=0.0, eviction_policy="evict_first")
            if WB == 0:
                w = tl.load(w_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
                b = tl.load(b_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
            elif WB == 1:
                w = tl.load(w_ptr + cols, mask=cols < N, other=0.0, eviction_policy="evict_last").to(tl.float32)
                b = tl.load(b_ptr + cols, mask=cols < N, other=0.0, eviction_policy="evict_last").to(tl.float32)
            else:
                w = 1.0
                b = 0.0
            y = (x.to(tl.float32) - mean) * rstd * w + b
            tl.store(y_row + cols, y.to(y_row.dtype.element_ty), mask=cols < N, eviction_policy="evict_first")
        row = row + n_prog
        x = utils.first_chunk(x_ptr, row, M, N, stride_xm, 1, 0.0, BLOCK_N)
        k = tl.load(x_ptr + row * stride_xm, mask=row < M, other=0.0).to(tl.float32)


def sms():
    return utils.num_sms("cuda")


def softmax_lane(block_n, warps, grid):
    def fn(x):
        y = torch.empty_like(x)
        _softmax_lane_kernel[(grid,)](x, y, *x.shape, x.stride(0), y.stride(0), BLOCK_N=block_n, num_warps=warps)
        return y
    return fn


def ds_lane(block_n, warps, grid):
    def fn(x):
        z = torch.empty_like(x)
        _ds_lane_kernel[(grid,)](x, z, *x.shape, x.stride(0), z.stride(0), BLOCK_N=block_n, num_warps=warps)
        return z
    return fn


def ln_variant(block_n, warps, grid, wb):
    def fn(x, w, b):
        y = torch.empty_like(x)
        _ln_variant_kernel[(grid,)](x, w, b, y, *x.shape, x.stride(0), y.stride(0), norms.LAYERNORM_EPS,
                                    BLOCK_N=block_n, WB=wb, num_warps=warps)
        return y
    return fn


def planned(impl, plan):
    return lambda *a: impl(*a, plan=plan)


def variants():
    """(case, shape, label, fn) in order."""
    out = []
    P = sms()
    for shape in ((2048, 65536), (512, 65536)):
        out += [("double_softmax", shape, "stream 8192/16w x2 (kept)",
                 planned(softmax.double_softmax_impl, utils.stream_plan("cuda", 8192, 16, 2))),
                ("double_softmax", shape, "lane 8192/16w x2", ds_lane(8192, 16, 2 * P)),
                ("double_softmax", shape, "lane 8192/32w x1", ds_lane(8192, 32, P)),
                ("double_softmax", shape, "lane 4096/8w x4", ds_lane(4096, 8, 4 * P)),
                ("double_softmax", shape, "lane 4096/16w x2", ds_lane(4096, 16, 2 * P)),
                ("softmax", shape, "stream 16384/32w x1 (kept)",
                 planned(softmax.softmax_impl, utils.stream_plan("cuda", 16384, 32, 1))),
                ("softmax", shape, "lane 16384/32w x1", softmax_lane(16384, 32, P)),
                ("softmax", shape, "lane 8192/16w x2", softmax_lane(8192, 16, 2 * P)),
                ("softmax", shape, "lane 8192/32w x1", softmax_lane(8192, 32, P))]
    for shape in ((2048, 65536),):
        out += [("layernorm", shape, "stream 8192/16w x2 (kept)",
                 planned(norms.layernorm_impl, utils.stream_plan("cuda", 8192, 16, 2))),
                ("layernorm", shape, "variant wb=plain 8192/16w x2", ln_variant(8192, 16, 2 * P, 0)),
                ("layernorm", shape, "variant wb=evict_last 8192/16w x2", ln_variant(8192, 16, 2 * P, 1)),
                ("layernorm", shape, "variant no w,b (wrong) 8192/16w x2", ln_variant(8192, 16, 2 * P, 2)),
                ("layernorm", shape, "variant wb=evict_last 8192/32w x1", ln_variant(8192, 32, P, 1)),
                ("layernorm", shape, "variant no w,b (wrong) 8192/32w x1", ln_variant(8192, 32, P, 2))]
        for g in (P // 2, 3 * P // 4, P):
            out.append(("layernorm", shape, f"stream 8192/16w grid {g}",
                        planned(norms.layernorm_impl, utils.RowPlan("stream", 1, 8192, 16, grid=g))))
        for g in (P // 2, 3 * P // 4):
            for bn, w in ((8192, 16), (16384, 32)):
                out.append(("softmax_backward", shape, f"stream {bn}/{w}w grid {g}",
                            planned(softmax.softmax_backward_impl, utils.RowPlan("stream", 1, bn, w, grid=g))))
        out.append(("softmax_backward", shape, "coop 16x4096/8w x4 (kept)",
                    planned(softmax.softmax_backward_impl, utils.coop_plan(*shape, "cuda", 4096, 8, 4))))
    return out


def main(mode):
    flush = _flush_buffer("cuda")
    inputs = {}
    if mode == "time":
        copy = {}
    for case_name, shape, label, fn in variants():
        case = get_case(case_name)
        key = (case_name, shape)
        if key not in inputs:
            inputs.clear()
            torch.cuda.empty_cache()
            args = case.make_inputs(shape, torch.float32, "cuda", 0)
            inputs[key] = (args, case.run_reference(args) if mode == "time" else None)
        args, ref = inputs[key]
        if mode == "ncu":
            fn(*args)
            torch.cuda.synchronize()
            torch.cuda.nvtx.range_push("probe")
            _flush_l2(flush, "clean")
            fn(*args)
            torch.cuda.synchronize()
            torch.cuda.nvtx.range_pop()
            print(f"ncu: {case_name} {shape} {label}", flush=True)
            continue
        nbytes = case.min_bytes(shape, torch.float32)
        if nbytes not in copy:
            src = torch.empty(nbytes // 8, dtype=torch.float32, device="cuda")
            dst = torch.empty_like(src)
            copy[nbytes] = utils.gpu_time_stats(lambda: dst.copy_(src), "cuda", budget_ms=50.0).median_us
            del src, dst
        acc = compare(fn(*args), ref, *case.tolerance(torch.float32))
        us = utils.gpu_time_stats(lambda: fn(*args), "cuda", budget_ms=50.0).median_us
        print(f"{case_name:16s} {'x'.join(map(str, shape)):>10s} {us:9.2f} us  {copy[nbytes] / us:.3f} of copy  "
              f"{'ok' if acc.passed else 'WRONG ' + f'{acc.tol_ratio:.3g}'}  {label}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
