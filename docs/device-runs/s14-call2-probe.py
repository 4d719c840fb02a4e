"""Session 14, call 2 probe (one H200): does the L2 state our flush leaves decide the close calls?

Inductor's kernel for bias_dropout_add_transposed at 128x16384 (session 13, call 7) loads all three
inputs evict_last; ours, with no hint, is 5-7% slower there in every tile tried (call 1).  Our
flush ("clean": evict_last stores, then an evict_last read sweep) leaves L2 full of evict_last
lines, which a call's unhinted loads cannot displace as easily as evict_last loads can.  Mode
"discard" (new: the stores' lines dropped from L2 without write-back) leaves L2 empty instead.

1. discard itself: other buffers' data survives it (also dirty lines written just before it), and a
   32 MiB read after it runs at the speed of one after "clean" (cold), not of a warm one.
2. Per shape, under flush modes clean / discard / zero, every variant timed rep by rep in turn
   (measure.timing.time_interleaved): our kernel as autotuned, Inductor, and forced plans, some
   with all loads evict_last (a copy of our kernel with that hint; not in the package).

    PYTHONPATH=. python docs/device-runs/s14-call2-probe.py
"""
import functools
import sys
import time

import numpy as np
import torch
import triton
import triton.language as tl

from fusebench.cases.base import get_case
from fusebench.impls.base import get_impl
from fusebench.kernels import horizontal, pointwise, utils
from fusebench.measure.accuracy import compare
from fusebench.measure.timing import TimingSettings, _flush_buffer, _flush_l2, time_call, time_interleaved

T0 = time.time()


def log(msg):
    print(f"[{time.time() - T0:6.1f}s] {msg}", flush=True)


@triton.jit
def _bdat_hinted_kernel(x_ptr, bt_ptr, rt_ptr, y_ptr, M, N, stride_xm, stride_bt0, stride_rt0, stride_y,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, OUT_T: tl.constexpr, EVICT: tl.constexpr):
    # pointwise._bias_dropout_add_transposed_kernel (contiguous operands, no grouping) with EVICT on
    # every load
    pid = tl.program_id(0)
    n_col_blocks = tl.cdiv(N, BLOCK_N)
    row0 = (pid // n_col_blocks).to(tl.int64) * BLOCK_M
    col0 = (pid % n_col_blocks).to(tl.int64) * BLOCK_N
    r = tl.arange(0, BLOCK_M)
    c = tl.arange(0, BLOCK_N)
    mask = (r < M - row0)[:, None] & (c < N - col0)[None, :]
    mask_t = (c < N - col0)[:, None] & (r < M - row0)[None, :]
    bt = tl.load(bt_ptr + col0 * stride_bt0 + row0 + c[:, None] * stride_bt0 + r[None, :], mask=mask_t, other=0.0,
                 eviction_policy=EVICT)
    rt = tl.load(rt_ptr + col0 * stride_rt0 + row0 + c[:, None] * stride_rt0 + r[None, :], mask=mask_t, other=0.0,
                 eviction_policy=EVICT)
    x = tl.load(x_ptr + row0 * stride_xm + col0 + r[:, None] * stride_xm + c[None, :], mask=mask, other=0.0,
                eviction_policy=EVICT)
    if OUT_T:
        tl.store(y_ptr + col0 * stride_y + row0 + c[:, None] * stride_y + r[None, :], tl.trans(x) + (bt + rt),
                 mask=mask_t)
    else:
        tl.store(y_ptr + row0 * stride_y + col0 + r[:, None] * stride_y + c[None, :], x + tl.trans(bt + rt), mask=mask)


def bdat_hinted(bm, bn, warps, out_t, evict):
    def fn(x, bt, rt):
        M, N = x.shape
        buf = torch.empty(M * N, dtype=x.dtype, device=x.device)
        _bdat_hinted_kernel[(triton.cdiv(M, bm) * triton.cdiv(N, bn),)](
            x, bt, rt, buf, M, N, x.stride(0), bt.stride(0), rt.stride(0), M if out_t else N,
            BLOCK_M=bm, BLOCK_N=bn, OUT_T=out_t, EVICT=evict, num_warps=warps)
        return buf.view(N, M).t() if out_t else buf.view(M, N)
    return fn


def planned(impl, plan):
    return lambda *a: impl(*a, plan=plan)


def variants(case_name, shape):
    """(label, fn or impl name) besides 'triton' and 'inductor'."""
    if case_name == "bias_dropout_add_transposed":
        T = utils.TilePlan
        return [("64x64/8 row-major", planned(pointwise.bias_dropout_add_transposed_impl, T(64, 64, 8))),
                ("32x32/4 col-major", planned(pointwise.bias_dropout_add_transposed_impl, T(32, 32, 4, out_t=True))),
                ("64x64/8 row-major evict_last", bdat_hinted(64, 64, 8, False, "evict_last")),
                ("32x32/4 col-major evict_last", bdat_hinted(32, 32, 4, True, "evict_last")),
                ("64x64/8 col-major evict_last", bdat_hinted(64, 64, 8, True, "evict_last"))]
    if case_name == "horizontal_reduction_pointwise":
        tile = utils.tile_plan(*shape, "cuda")
        from dataclasses import replace
        return [("tile plain", planned(horizontal.horizontal_reduction_pointwise_impl, tile)),
                ("tile evict_first", planned(horizontal.horizontal_reduction_pointwise_impl,
                                             replace(tile, evict_first=True)))]
    return []


def check_discard():
    dev = "cuda"
    buf = _flush_buffer(dev)
    y = torch.arange(1 << 23, dtype=torch.int32, device=dev)
    for i in range(3):
        y.add_(1)  # dirty lines in L2 right before the flush
        _flush_l2(buf, "discard")
        torch.cuda.synchronize()
        assert torch.equal(y, torch.arange(1 << 23, dtype=torch.int32, device=dev) + i + 1), "discard lost data"
    log("discard: another buffer's (dirty) data intact after 3 flushes")
    x = torch.randn(1 << 23, device=dev)  # 32 MiB
    st = dict(warmup_ms=5, rep_ms=50)
    warm = time_call(lambda: x.sum(), dev, TimingSettings(flush_l2=False, **st)).median_us
    for mode in ("clean", "discard", "zero"):
        us = time_call(lambda: x.sum(), dev, TimingSettings(flush_mode=mode, **st)).median_us
        log(f"32 MiB sum: no flush {warm:.2f} us, after {mode} {us:.2f} us")
    flush = time_call(lambda: _flush_l2(buf, "discard"), dev, TimingSettings(flush_l2=False, **st)).median_us
    clean = time_call(lambda: _flush_l2(buf, "clean"), dev, TimingSettings(flush_l2=False, **st)).median_us
    log(f"the flush itself: discard {flush:.1f} us, clean {clean:.1f} us")


def compare_modes(case_name, shape, rounds):
    case = get_case(case_name)
    dev = "cuda"
    args = case.make_inputs(shape, torch.float32, dev, 0)
    ref = case.run_reference(args)
    fns, labels = [], []
    for name in ("triton", "inductor"):
        prepared = get_impl(name).prepare(case, shape, torch.float32, dev)
        with prepared.context(), torch.no_grad():
            out = prepared.fn(*args)
        acc = compare(out, ref, *case.tolerance(torch.float32))
        labels.append(f"{name} ({prepared.note_after() or prepared.note})" + ("" if acc.passed else " WRONG"))

        def call(p=prepared):
            with p.context():
                return p.fn(*args)
        fns.append(call)
    for label, fn in variants(case_name, shape):
        acc = compare(fn(*args), ref, *case.tolerance(torch.float32))
        labels.append(label + ("" if acc.passed else f" WRONG {acc.tol_ratio:.3g}"))
        fns.append(functools.partial(fn, *args))
    del ref
    for mode in ("clean", "discard", "zero"):
        with torch.no_grad():
            samples = time_interleaved(fns, dev, TimingSettings(flush_mode=mode), rounds)
        med = [float(np.median(s)) for s in samples]
        log(f"{case_name} {'x'.join(map(str, shape))} flush={mode} ({rounds} rounds)")
        for label, us in zip(labels, med):
            print(f"    {us:10.3f} us  {med[1] / us:6.3f}x inductor  {label}", flush=True)


def main():
    check_discard()
    for case_name, shape, rounds in [
            ("bias_dropout_add_transposed", (128, 16384), 200), ("bias_dropout_add_transposed", (256, 8192), 200),
            ("horizontal_reduction_pointwise", (512, 8192), 200), ("pointwise_chain", (256, 1024), 200),
            ("bias_dropout_add_transposed", (8192, 8192), 50), ("softmax", (8192, 8192), 50),
            ("bias_dropout_add", (4096, 4096), 100), ("layernorm", (4096, 4096), 100),
            ("horizontal_reduction_reduction", (8192, 4096), 100)]:
        try:
            compare_modes(case_name, shape, rounds)
        except Exception as exc:  # noqa: BLE001
            log(f"{case_name} {shape}: {type(exc).__name__}: {exc}")
        torch.cuda.empty_cache()


if __name__ == "__main__":
    sys.exit(main())
