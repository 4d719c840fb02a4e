"""Session 15, call 4 probe (one H200): the skewed kernels of call 3 with the writing pass walking
its row backwards, and L2 hints.

Call 3 (loads pipelined through shared memory) did not help: more stages made them slower.  Their
writing pass re-reads block k of row r a whole row of steps after the statistics pass loaded it,
while every SM loads a row's worth of new data (and writes one): 66 MiB through a 50 MiB L2 at
65536 columns, so the re-reads miss.  The re-read plans reuse at half that distance on average: their
second pass walks the row backwards.  Here the writing pass walks backwards too (block n - 1 - k at
step k), statistics loads are evict_last and re-reads evict_first.

    PYTHONPATH=. python docs/device-runs/s15-call4-probe.py
"""
import sys
import time

import numpy as np
import torch
import triton
import triton.language as tl

from fusebench.cases.base import get_case
from fusebench.impls.base import get_impl
from fusebench.kernels import utils
from fusebench.kernels.softmax import _second_normalizer
from fusebench.measure.accuracy import compare
from fusebench.measure.timing import TimingSettings, time_interleaved

T0 = time.time()


def log(msg):
    print(f"[{time.time() - T0:6.1f}s] {msg}", flush=True)


@triton.jit
def _step(t, pid, P, n_steps):
    # Step t of a program: pair j = t // n_steps reads row ra = pid + j P (statistics) and writes
    # row ra - P (when j >= 1), both at column block k = t % n_steps.
    j = t // n_steps
    return j, t % n_steps, pid + j.to(tl.int64) * P


@triton.jit
def _softmax_skew_kernel(x_ptr, y_ptr, M, N, stride_xm, stride_ym, BLOCK_N: tl.constexpr, STAGES: tl.constexpr):
    pid = tl.program_id(0)
    P = tl.num_programs(0)
    c = tl.arange(0, BLOCK_N)
    n_steps = tl.cdiv(N, BLOCK_N)
    total = (tl.cdiv(M - pid, P) + 1) * n_steps
    m = tl.full([], 0.0, tl.float32)  # the written row's max and 1 / sum
    inv = tl.full([], 0.0, tl.float32)
    m2 = tl.full([], float("-inf"), tl.float32)  # the read row's running max and sum
    s2 = tl.full([], 0.0, tl.float32)
    for t in tl.range(0, total, num_stages=STAGES):
        j, k, ra = _step(t, pid, P, n_steps)
        cols = k * BLOCK_N + c
        xa = tl.load(x_ptr + ra * stride_xm + cols, mask=cols < tl.where(ra < M, N, 0), other=float("-inf"),
                     eviction_policy="evict_last")
        cols_b = (n_steps - 1 - k) * BLOCK_N + c  # the writing pass walks its row backwards
        wmask = cols_b < tl.where(j >= 1, N, 0)
        xb = tl.load(x_ptr + (ra - P) * stride_xm + cols_b, mask=wmask, other=float("-inf"),
                     eviction_policy="evict_first")
        new = k == 0  # the read row's statistics are complete: they become the written row's
        m = tl.where(new, m2, m)
        inv = tl.where(new, 1.0 / s2, inv)
        m2 = tl.where(new, float("-inf"), m2)
        s2 = tl.where(new, 0.0, s2)
        xf = xa.to(tl.float32)
        mx = tl.maximum(m2, tl.max(xf, 0))
        s2 = s2 * tl.exp(m2 - mx) + tl.sum(tl.exp(xf - mx), 0)
        m2 = mx
        tl.store(y_ptr + (ra - P) * stride_ym + cols_b, (tl.exp(xb.to(tl.float32) - m) * inv).to(y_ptr.dtype.element_ty),
                 mask=wmask)


@triton.jit
def _double_softmax_skew_kernel(x_ptr, y_ptr, M, N, stride_xm, stride_ym, BLOCK_N: tl.constexpr,
                                STAGES: tl.constexpr):
    pid = tl.program_id(0)
    P = tl.num_programs(0)
    c = tl.arange(0, BLOCK_N)
    n_steps = tl.cdiv(N, BLOCK_N)
    total = (tl.cdiv(M - pid, P) + 1) * n_steps
    m = tl.full([], 0.0, tl.float32)
    inv1 = tl.full([], 0.0, tl.float32)
    inv2 = tl.full([], 0.0, tl.float32)
    m2 = tl.full([], float("-inf"), tl.float32)
    T1 = tl.full([], 0.0, tl.float32)
    T2 = tl.full([], 0.0, tl.float32)
    T3 = tl.full([], 0.0, tl.float32)
    T4 = tl.full([], 0.0, tl.float32)
    for t in tl.range(0, total, num_stages=STAGES):
        j, k, ra = _step(t, pid, P, n_steps)
        cols = k * BLOCK_N + c
        xa = tl.load(x_ptr + ra * stride_xm + cols, mask=cols < tl.where(ra < M, N, 0), other=float("-inf"),
                     eviction_policy="evict_last")
        cols_b = (n_steps - 1 - k) * BLOCK_N + c  # the writing pass walks its row backwards
        wmask = cols_b < tl.where(j >= 1, N, 0)
        xb = tl.load(x_ptr + (ra - P) * stride_xm + cols_b, mask=wmask, other=float("-inf"),
                     eviction_policy="evict_first")
        new = k == 0
        i1, i2 = _second_normalizer(T1, T2, T3, T4, N)
        m = tl.where(new, m2, m)
        inv1 = tl.where(new, i1, inv1)
        inv2 = tl.where(new, i2, inv2)
        m2 = tl.where(new, float("-inf"), m2)
        T1 = tl.where(new, 0.0, T1)
        T2 = tl.where(new, 0.0, T2)
        T3 = tl.where(new, 0.0, T3)
        T4 = tl.where(new, 0.0, T4)
        xf = xa.to(tl.float32)
        mx = tl.maximum(m2, tl.max(xf, 0))
        r = tl.exp(m2 - mx)
        e = tl.exp(xf - mx)
        e2 = e * e
        T1 = T1 * r + tl.sum(e, 0)
        r2 = r * r
        T2 = T2 * r2 + tl.sum(e2, 0)
        T3 = T3 * r2 * r + tl.sum(e2 * e, 0)
        T4 = T4 * r2 * r2 + tl.sum(e2 * e2, 0)
        m2 = mx
        z = tl.exp(tl.exp(xb.to(tl.float32) - m) * inv1) * inv2
        tl.store(y_ptr + (ra - P) * stride_ym + cols_b, z.to(y_ptr.dtype.element_ty), mask=wmask)


@triton.jit
def _layernorm_skew_kernel(x_ptr, w_ptr, b_ptr, y_ptr, M, N, stride_xm, stride_ym, eps, BLOCK_N: tl.constexpr,
                           STAGES: tl.constexpr):
    pid = tl.program_id(0)
    P = tl.num_programs(0)
    c = tl.arange(0, BLOCK_N)
    n_steps = tl.cdiv(N, BLOCK_N)
    total = (tl.cdiv(M - pid, P) + 1) * n_steps
    mean = tl.full([], 0.0, tl.float32)
    rstd = tl.full([], 0.0, tl.float32)
    sh2 = tl.full([], 0.0, tl.float32)  # the read row's shift: its first element
    S1 = tl.full([], 0.0, tl.float32)
    S2 = tl.full([], 0.0, tl.float32)
    for t in tl.range(0, total, num_stages=STAGES):
        j, k, ra = _step(t, pid, P, n_steps)
        cols = k * BLOCK_N + c
        xa = tl.load(x_ptr + ra * stride_xm + cols, mask=cols < tl.where(ra < M, N, 0), other=0.0,
                     eviction_policy="evict_last")
        sha = tl.load(x_ptr + ra * stride_xm, mask=ra < M, other=0.0).to(tl.float32)
        cols_b = (n_steps - 1 - k) * BLOCK_N + c
        wmask = cols_b < tl.where(j >= 1, N, 0)
        xb = tl.load(x_ptr + (ra - P) * stride_xm + cols_b, mask=wmask, other=0.0, eviction_policy="evict_first")
        w = tl.load(w_ptr + cols_b, mask=wmask, other=0.0, eviction_policy="evict_last")
        b = tl.load(b_ptr + cols_b, mask=wmask, other=0.0, eviction_policy="evict_last")
        new = k == 0
        mean_d = S1 / N
        mean = tl.where(new, sh2 + mean_d, mean)
        rstd = tl.where(new, 1.0 / tl.sqrt(tl.maximum(S2 / N - mean_d * mean_d, 0.0) + eps), rstd)
        sh2 = tl.where(new, sha, sh2)
        S1 = tl.where(new, 0.0, S1)
        S2 = tl.where(new, 0.0, S2)
        d = tl.where(cols < N, xa.to(tl.float32) - sh2, 0.0)
        S1 += tl.sum(d, 0)
        S2 += tl.sum(d * d, 0)
        y = (xb.to(tl.float32) - mean) * rstd * w.to(tl.float32) + b.to(tl.float32)
        tl.store(y_ptr + (ra - P) * stride_ym + cols_b, y.to(y_ptr.dtype.element_ty), mask=wmask)


@triton.jit
def _softmax_bwd_skew_kernel(dy_ptr, y_ptr, dx_ptr, M, N, stride_m, BLOCK_N: tl.constexpr, STAGES: tl.constexpr):
    pid = tl.program_id(0)
    P = tl.num_programs(0)
    c = tl.arange(0, BLOCK_N)
    n_steps = tl.cdiv(N, BLOCK_N)
    total = (tl.cdiv(M - pid, P) + 1) * n_steps
    dot = tl.full([], 0.0, tl.float32)
    dot2 = tl.full([], 0.0, tl.float32)
    for t in tl.range(0, total, num_stages=STAGES):
        j, k, ra = _step(t, pid, P, n_steps)
        cols = k * BLOCK_N + c
        ma = cols < tl.where(ra < M, N, 0)
        dya = tl.load(dy_ptr + ra * stride_m + cols, mask=ma, other=0.0, eviction_policy="evict_last")
        ya = tl.load(y_ptr + ra * stride_m + cols, mask=ma, other=0.0, eviction_policy="evict_last")
        cols_b = (n_steps - 1 - k) * BLOCK_N + c
        wmask = cols_b < tl.where(j >= 1, N, 0)
        dyb = tl.load(dy_ptr + (ra - P) * stride_m + cols_b, mask=wmask, other=0.0, eviction_policy="evict_first")
        yb = tl.load(y_ptr + (ra - P) * stride_m + cols_b, mask=wmask, other=0.0, eviction_policy="evict_first")
        new = k == 0
        dot = tl.where(new, dot2, dot)
        dot2 = tl.where(new, 0.0, dot2)
        dot2 += tl.sum(dya.to(tl.float32) * ya.to(tl.float32), 0)
        yf = yb.to(tl.float32)
        tl.store(dx_ptr + (ra - P) * stride_m + cols_b, (yf * (dyb.to(tl.float32) - dot)).to(dx_ptr.dtype.element_ty),
                 mask=wmask)


def skew(case_name, block_n, warps, per_sm, stages):
    def fn(*args):
        x = args[0]
        M, N = x.shape
        out = torch.empty_like(x)
        grid = (min(M, per_sm * utils.num_sms(x.device)),)
        meta = dict(BLOCK_N=block_n, STAGES=stages, num_warps=warps)
        if case_name == "softmax":
            _softmax_skew_kernel[grid](x, out, M, N, N, N, **meta)
        elif case_name == "double_softmax":
            _double_softmax_skew_kernel[grid](x, out, M, N, N, N, **meta)
        elif case_name == "layernorm":
            _layernorm_skew_kernel[grid](x, args[1], args[2], out, M, N, N, N, 1e-5, **meta)
        else:
            dy, y = args
            _softmax_bwd_skew_kernel[grid](dy, y, out, M, N, N, **meta)
        return out
    return fn


CONFIGS = {  # (step, warps, programs per SM, stages)
    "softmax": [(8192, 16, 1, 3), (8192, 16, 1, 2), (8192, 32, 1, 2), (4096, 8, 2, 3), (16384, 32, 1, 2)],
    "double_softmax": [(8192, 16, 1, 3), (8192, 16, 1, 2), (8192, 32, 1, 2), (4096, 8, 2, 3), (16384, 32, 1, 2)],
    "layernorm": [(4096, 16, 1, 4), (4096, 8, 1, 4), (4096, 8, 2, 3), (8192, 16, 1, 2), (8192, 32, 1, 2)],
    "softmax_backward": [(4096, 16, 1, 4), (4096, 8, 1, 4), (4096, 8, 2, 3), (8192, 16, 1, 2), (8192, 32, 1, 2)],
}


def run_shape(case_name, shape, rounds):
    case = get_case(case_name)
    dev = "cuda"
    args = case.make_inputs(shape, torch.float32, dev, 0)
    ref = case.run_reference(args)
    tol = case.tolerance(torch.float32)
    fns, labels = [], []
    prepared = get_impl("triton").prepare(case, shape, torch.float32, dev)
    with prepared.context(), torch.no_grad():
        out = prepared.fn(*args)
    acc = compare(out, ref, *tol)
    labels.append(f"triton as autotuned: {prepared.note_after() or prepared.note}" + ("" if acc.passed else " WRONG"))
    fns.append(lambda p=prepared: p.fn(*args))
    src = args[0]
    dst = torch.empty_like(src)
    fns.append(lambda: dst.copy_(src))
    labels.append("memcpy of the input")
    for cfg in CONFIGS[case_name]:
        fn = skew(case_name, *cfg)
        label = f"skewed {cfg[0]}-column steps/{cfg[1]} warps/{cfg[2]} per SM/{cfg[3]} stages"
        try:
            out = fn(*args)
            torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001
            log(f"  {label}: {type(exc).__name__}: {str(exc)[:160]}")
            continue
        acc = compare(out, ref, *tol)
        acc2 = compare(fn(*args), ref, *tol)
        if not (acc.passed and acc2.passed):
            log(f"  {label}: WRONG ({acc.tol_ratio:.3g}, {acc2.tol_ratio:.3g})")
            continue
        labels.append(label)
        fns.append(lambda f=fn: f(*args))
    del ref
    n_bytes = sum(t.numel() * t.element_size() for t in args if t.dim() == 2) + src.numel() * 4
    with torch.no_grad():
        samples = time_interleaved(fns, dev, TimingSettings(), rounds)
    med = [float(np.median(s)) for s in samples]
    copy_rate = 2 * src.numel() * 4 / med[1]
    log(f"{case_name} {'x'.join(map(str, shape))} ({rounds} rounds, {n_bytes / 2**20:.0f} MiB moved)")
    for label, us in zip(labels, med):
        print(f"    {us:10.2f} us  {n_bytes / us / 1e3:7.0f} GB/s  {med[0] / us:6.3f}x autotuned  "
              f"{n_bytes / us / copy_rate:6.3f} of the copy rate  {label}", flush=True)


def main():
    for case_name, shape, rounds in [
            ("softmax", (512, 65536), 50), ("double_softmax", (512, 65536), 50), ("layernorm", (512, 65536), 50),
            ("softmax_backward", (512, 65536), 50),
            ("double_softmax", (2048, 65536), 30), ("layernorm", (2048, 65536), 30),
            ("softmax_backward", (2048, 65536), 30),
            ("double_softmax", (1024, 32768), 50), ("layernorm", (1024, 32768), 50),
            ("double_softmax", (8192, 65536), 10), ("layernorm", (8192, 65536), 10),
            ("softmax_backward", (8192, 65536), 10), ("double_softmax", (4096, 32768), 20),
            ("double_softmax", (65536, 32768), 3), ("layernorm", (32768, 65536), 3)]:
        try:
            run_shape(case_name, shape, rounds)
        except Exception as exc:  # noqa: BLE001
            log(f"{case_name} {shape}: {type(exc).__name__}: {exc}")
        torch.cuda.empty_cache()


if __name__ == "__main__":
    sys.exit(main())
