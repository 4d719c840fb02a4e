"""Session 13, call 3 probe (one H200): layernorm's streamed kernel with bigger first-pass steps on
fewer programs.

Call 2 (ncu, 2048x65536 fp32): our streamed layernorm reads its input 1.32x from DRAM with 264
programs (1.16x without the second pass's weight and bias loads) and 1.01x with 66 programs,
which however keep too few bytes in flight (482 against 347 us).  This variant's first pass takes
16384-column steps (64 KiB in flight per program, the next step's loads issued before this one is
reduced) and reduces each step to two scalars, so that it needs only two row-sized registers per
thread at 32 warps; its second pass walks the row backwards in 8192-column steps with the next
step's x, weight and bias in flight.  Timed and counted at 66 to 132 programs.

    PYTHONPATH=. python docs/device-runs/s13-call3-probe.py time|ncu
"""
import sys

import torch
import triton
import triton.language as tl

from fusebench.cases import get_case
from fusebench.kernels import norms, utils
from fusebench.measure.accuracy import compare
from fusebench.measure.timing import _flush_buffer, _flush_l2


@triton.jit
def _ln_big_step_kernel(x_ptr, w_ptr, b_ptr, y_ptr, M, N, stride_xm, stride_ym, eps,
                        BLOCK1: tl.constexpr, BLOCK2: tl.constexpr):
    pid = tl.program_id(0)
    n_prog = tl.num_programs(0)
    c1 = tl.arange(0, BLOCK1)
    c2 = tl.arange(0, BLOCK2)
    n2 = tl.cdiv(N, BLOCK2)
    for i in tl.range(0, tl.cdiv(M - pid, n_prog)):
        row = (pid + i * n_prog).to(tl.int64)
        x_row = x_ptr + row * stride_xm
        y_row = y_ptr + row * stride_ym
        k = tl.load(x_row).to(tl.float32)
        # pass 1: scalar sums of d = x - k, BLOCK1-column steps, the next one in flight
        s1 = 0.0
        s2 = 0.0
        x = tl.load(x_row + c1, mask=c1 < N, other=0.0, eviction_policy="evict_last")
        for start in tl.range(BLOCK1, N + BLOCK1, BLOCK1):
            x_next = tl.load(x_row + start + c1, mask=start + c1 < N, other=0.0, eviction_policy="evict_last")
            d = tl.where(start - BLOCK1 + c1 < N, x.to(tl.float32) - k, 0.0)
            s1 += tl.sum(d, 0)
            s2 += tl.sum(d * d, 0)
            x = x_next
        mean_d = s1 / N
        rstd = 1.0 / tl.sqrt(tl.maximum(s2 / N - mean_d * mean_d, 0.0) + eps)
        mean = k + mean_d
        # pass 2: backwards, BLOCK2-column steps, the next step's x, w, b in flight
        cols = (n2 - 1) * BLOCK2 + c2
        xx = tl.load(x_row + cols, mask=cols < N, other=0.0, eviction_policy="evict_first")
        w = tl.load(w_ptr + cols, mask=cols < N, other=0.0)
        b = tl.load(b_ptr + cols, mask=cols < N, other=0.0)
        for j in tl.range(1, n2 + 1):
            nxt = cols - BLOCK2
            ok = (nxt >= 0) & (nxt < N)
            xx_next = tl.load(x_row + nxt, mask=ok, other=0.0, eviction_policy="evict_first")
            w_next = tl.load(w_ptr + nxt, mask=ok, other=0.0)
            b_next = tl.load(b_ptr + nxt, mask=ok, other=0.0)
            y = (xx.to(tl.float32) - mean) * rstd * w.to(tl.float32) + b.to(tl.float32)
            tl.store(y_row + cols, y.to(y_row.dtype.element_ty), mask=cols < N, eviction_policy="evict_first")
            cols = nxt
            xx = xx_next
            w = w_next
            b = b_next


def ln_big(b1, b2, warps, grid):
    def fn(x, w, b):
        y = torch.empty_like(x)
        _ln_big_step_kernel[(grid,)](x, w, b, y, *x.shape, x.stride(0), y.stride(0), norms.LAYERNORM_EPS,
                                     BLOCK1=b1, BLOCK2=b2, num_warps=warps)
        return y
    return fn


def variants():
    P = utils.num_sms("cuda")
    out = []
    for shape in ((2048, 65536), (512, 65536), (1024, 32768)):
        out.append(("layernorm", shape, "stream 8192/16w x2 (kept)",
                    lambda *a: norms.layernorm_impl(*a, plan=utils.stream_plan("cuda", 8192, 16, 2))))
        for g in (P // 2, 2 * P // 3, 3 * P // 4, P):
            out.append(("layernorm", shape, f"big 16384/8192 32w grid {g}", ln_big(16384, 8192, 32, g)))
        for g in (P // 2, 3 * P // 4, P):
            out.append(("layernorm", shape, f"big 32768/8192 32w grid {g}", ln_big(32768, 8192, 32, g)))
        out.append(("layernorm", shape, f"big 16384/4096 16w grid {P}", ln_big(16384, 4096, 16, P)))
        out.append(("layernorm", shape, f"big 8192/4096 16w grid {2 * P}", ln_big(8192, 4096, 16, 2 * P)))
    return out


def main(mode):
    flush = _flush_buffer("cuda")
    inputs, copy = {}, {}
    for case_name, shape, label, fn in variants():
        case = get_case(case_name)
        if shape not in inputs:
            inputs.clear()
            torch.cuda.empty_cache()
            args = case.make_inputs(shape, torch.float32, "cuda", 0)
            inputs[shape] = (args, case.run_reference(args) if mode == "time" else None)
        args, ref = inputs[shape]
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
