"""Session 15, call 1 probe (one H200): cooperative rows with the barrier off the critical path.

The cooperative plans (softmax.py, norms.py) hold a row's chunks in the registers of SPLITS
programs that meet at a per-row barrier.  Session 13 measured them at 0.47-0.77 of the copy rate,
waiting at the barrier, and slower still (0.31-0.64) when the next row's chunk was loaded before the
wait.  Why slower: utils.row_barrier_wait arrives with a *release* atomic, and a release must wait
until every earlier memory operation of the thread is performed -- the prefetch load included, a
full DRAM round trip per row; row_barrier_leave (acq_rel) likewise waits for the row's output
stores to drain before the next row's load is issued.

"Pipelined" cooperative kernels here: per program three chunk buffers (row r being written, row
r + R whose partials are published, row r + 2R in flight), ordered so that no fence waits on a load:

    publish partials of row r + R, arrive (release: only finished loads and stores issued an
        iteration ago are before it)
    issue the loads of row r + 2R
    wait for row r's barrier (acquire polls: they do not wait for earlier loads), combine, store
    leave (relaxed: only counts departures, for the reset)

so a program always has a chunk load in flight while it waits.  Each is checked against the
float64 reference, then timed rep by rep in turn (measure.timing.time_interleaved, default flush)
with the package's autotuned kernel and a memcpy of the same bytes.

    PYTHONPATH=. python docs/device-runs/s15-call1-probe.py
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
from fusebench.kernels.softmax import _double_softmax_combine, _double_softmax_partial, _softmax_combine, \
    _softmax_partial
from fusebench.kernels.utils import sum_of_partials
from fusebench.measure.accuracy import compare
from fusebench.measure.timing import TimingSettings, time_interleaved

T0 = time.time()


def log(msg):
    print(f"[{time.time() - T0:6.1f}s] {msg}", flush=True)


@triton.jit
def _chunk(ptr, row, M, N, stride_m, stride_n, cols, other):
    # Row `row`'s chunk at `cols`, or `other` everywhere when row >= M (folded into the column bound).
    return tl.load(ptr + row * stride_m + cols * stride_n, mask=cols < tl.where(row < M, N, 0), other=other)


@triton.jit
def _arrive(cnt_ptr):
    tl.debug_barrier()  # every warp's partial stores are issued before thread 0 releases
    tl.atomic_add(cnt_ptr, 1, sem="release")


@triton.jit
def _wait(cnt_ptr, count):
    seen = tl.atomic_add(cnt_ptr, 0, sem="acquire")
    spins = tl.full([], 0, tl.int32)
    while (seen < count) & (spins < 4194304):
        seen = tl.atomic_add(cnt_ptr, 0, sem="acquire")
        spins += 1
    tl.debug_barrier()


@triton.jit
def _leave(cnt_ptr, count):
    # Departures only decide who resets the counters for the next launch: relaxed (every program
    # counted here has finished its acquire polls, on which this atomic depends).
    left = tl.atomic_add(cnt_ptr + 1, 1, sem="relaxed")
    if left == count - 1:
        tl.atomic_xchg(cnt_ptr, 0, sem="relaxed")
        tl.atomic_xchg(cnt_ptr + 1, 0, sem="relaxed")


@triton.jit
def _softmax_pipe_kernel(x_ptr, y_ptr, ws_ptr, cnt_ptr, M, N, stride_xm, stride_xn, stride_ym, SPLITS,
                         ALIGN: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_S: tl.constexpr):
    N = N // ALIGN * ALIGN
    stride_xm = stride_xm // ALIGN * ALIGN
    stride_ym = stride_ym // ALIGN * ALIGN
    pid = tl.program_id(0)
    R = tl.num_programs(0) // SPLITS
    part = pid % SPLITS
    cols = part * BLOCK_N + tl.arange(0, BLOCK_N)
    row = (pid // SPLITS).to(tl.int64)
    x = _chunk(x_ptr, row, M, N, stride_xm, stride_xn, cols, float("-inf")).to(tl.float32)
    if row < M:
        _softmax_partial(x, ws_ptr + (row * SPLITS + part) * 2)
        _arrive(cnt_ptr + row * 2)
    x_next = _chunk(x_ptr, row + R, M, N, stride_xm, stride_xn, cols, float("-inf"))
    for _ in tl.range(0, tl.cdiv(M - row, R)):
        nxt = row + R
        if nxt < M:
            _softmax_partial(x_next.to(tl.float32), ws_ptr + (nxt * SPLITS + part) * 2)
            _arrive(cnt_ptr + nxt * 2)
        x_far = _chunk(x_ptr, nxt + R, M, N, stride_xm, stride_xn, cols, float("-inf"))
        _wait(cnt_ptr + row * 2, SPLITS)
        m, inv = _softmax_combine(ws_ptr + row * SPLITS * 2, SPLITS, BLOCK_S)
        tl.store(y_ptr + row * stride_ym + cols, (tl.exp(x - m) * inv).to(y_ptr.dtype.element_ty), mask=cols < N)
        _leave(cnt_ptr + row * 2, SPLITS)
        x = x_next.to(tl.float32)
        x_next = x_far
        row = nxt


@triton.jit
def _double_softmax_pipe_kernel(x_ptr, z_ptr, ws_ptr, cnt_ptr, M, N, stride_xm, stride_xn, stride_zm, SPLITS,
                                ALIGN: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_S: tl.constexpr):
    N = N // ALIGN * ALIGN
    stride_xm = stride_xm // ALIGN * ALIGN
    stride_zm = stride_zm // ALIGN * ALIGN
    pid = tl.program_id(0)
    R = tl.num_programs(0) // SPLITS
    part = pid % SPLITS
    cols = part * BLOCK_N + tl.arange(0, BLOCK_N)
    row = (pid // SPLITS).to(tl.int64)
    x = _chunk(x_ptr, row, M, N, stride_xm, stride_xn, cols, float("-inf")).to(tl.float32)
    if row < M:
        _double_softmax_partial(x, ws_ptr + (row * SPLITS + part) * 8)
        _arrive(cnt_ptr + row * 2)
    x_next = _chunk(x_ptr, row + R, M, N, stride_xm, stride_xn, cols, float("-inf"))
    for _ in tl.range(0, tl.cdiv(M - row, R)):
        nxt = row + R
        if nxt < M:
            _double_softmax_partial(x_next.to(tl.float32), ws_ptr + (nxt * SPLITS + part) * 8)
            _arrive(cnt_ptr + nxt * 2)
        x_far = _chunk(x_ptr, nxt + R, M, N, stride_xm, stride_xn, cols, float("-inf"))
        _wait(cnt_ptr + row * 2, SPLITS)
        m, inv1, inv2 = _double_softmax_combine(ws_ptr + row * SPLITS * 8, N, SPLITS, BLOCK_S)
        z = tl.exp(tl.exp(x - m) * inv1) * inv2
        tl.store(z_ptr + row * stride_zm + cols, z.to(z_ptr.dtype.element_ty), mask=cols < N)
        _leave(cnt_ptr + row * 2, SPLITS)
        x = x_next.to(tl.float32)
        x_next = x_far
        row = nxt


@triton.jit
def _layernorm_partial_centered(x, cols, N, BLOCK_N: tl.constexpr, part_ptr):
    # A chunk's (mean, sum of squared deviations from it): Chan's combination needs no shift.
    n = tl.minimum(N - tl.min(cols, 0), BLOCK_N).to(tl.float32)  # the chunk's columns inside the row
    mean = tl.sum(tl.where(cols < N, x, 0.0), 0) / n
    d = tl.where(cols < N, x - mean, 0.0)
    tl.store(part_ptr, mean)
    tl.store(part_ptr + 1, tl.sum(d * d, 0))


@triton.jit
def _layernorm_combine_centered(row_parts, N, eps, SPLITS, BLOCK_N: tl.constexpr, BLOCK_S: tl.constexpr):
    sp = tl.arange(0, BLOCK_S)
    n_c = tl.where(sp < SPLITS, tl.minimum(N - sp * BLOCK_N, BLOCK_N), 0).to(tl.float32)
    mean_c = tl.load(row_parts + sp * 2, mask=sp < SPLITS, other=0.0, cache_modifier=".cg")
    m2_c = tl.load(row_parts + sp * 2 + 1, mask=sp < SPLITS, other=0.0, cache_modifier=".cg")
    mean = tl.sum(n_c * mean_c, 0) / N
    dm = mean_c - mean
    var = (tl.sum(m2_c, 0) + tl.sum(n_c * dm * dm, 0)) / N
    return mean, 1.0 / tl.sqrt(var + eps)


@triton.jit
def _layernorm_pipe_kernel(x_ptr, w_ptr, b_ptr, y_ptr, ws_ptr, cnt_ptr, M, N, stride_xm, stride_xn, stride_ym, eps,
                           SPLITS, ALIGN: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_S: tl.constexpr):
    N = N // ALIGN * ALIGN
    stride_xm = stride_xm // ALIGN * ALIGN
    stride_ym = stride_ym // ALIGN * ALIGN
    pid = tl.program_id(0)
    R = tl.num_programs(0) // SPLITS
    part = pid % SPLITS
    cols = part * BLOCK_N + tl.arange(0, BLOCK_N)
    # A program's columns are the same in every row: weight and bias once, kept in registers.
    w = tl.load(w_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
    row = (pid // SPLITS).to(tl.int64)
    x = _chunk(x_ptr, row, M, N, stride_xm, stride_xn, cols, 0.0).to(tl.float32)
    if row < M:
        _layernorm_partial_centered(x, cols, N, BLOCK_N, ws_ptr + (row * SPLITS + part) * 2)
        _arrive(cnt_ptr + row * 2)
    x_next = _chunk(x_ptr, row + R, M, N, stride_xm, stride_xn, cols, 0.0)
    for _ in tl.range(0, tl.cdiv(M - row, R)):
        nxt = row + R
        if nxt < M:
            _layernorm_partial_centered(x_next.to(tl.float32), cols, N, BLOCK_N, ws_ptr + (nxt * SPLITS + part) * 2)
            _arrive(cnt_ptr + nxt * 2)
        x_far = _chunk(x_ptr, nxt + R, M, N, stride_xm, stride_xn, cols, 0.0)
        _wait(cnt_ptr + row * 2, SPLITS)
        mean, rstd = _layernorm_combine_centered(ws_ptr + row * SPLITS * 2, N, eps, SPLITS, BLOCK_N, BLOCK_S)
        tl.store(y_ptr + row * stride_ym + cols, ((x - mean) * rstd * w + b).to(y_ptr.dtype.element_ty),
                 mask=cols < N)
        _leave(cnt_ptr + row * 2, SPLITS)
        x = x_next.to(tl.float32)
        x_next = x_far
        row = nxt


@triton.jit
def _softmax_bwd_pipe_kernel(dy_ptr, y_ptr, dx_ptr, ws_ptr, cnt_ptr, M, N, stride_m, SPLITS,
                             BLOCK_N: tl.constexpr, BLOCK_S: tl.constexpr):
    # contiguous operands only (a probe)
    pid = tl.program_id(0)
    R = tl.num_programs(0) // SPLITS
    part = pid % SPLITS
    cols = part * BLOCK_N + tl.arange(0, BLOCK_N)
    row = (pid // SPLITS).to(tl.int64)
    dy = _chunk(dy_ptr, row, M, N, stride_m, 1, cols, 0.0).to(tl.float32)
    y = _chunk(y_ptr, row, M, N, stride_m, 1, cols, 0.0).to(tl.float32)
    if row < M:
        tl.store(ws_ptr + row * SPLITS + part, tl.sum(dy * y, 0))
        _arrive(cnt_ptr + row * 2)
    dy_next = _chunk(dy_ptr, row + R, M, N, stride_m, 1, cols, 0.0)
    y_next = _chunk(y_ptr, row + R, M, N, stride_m, 1, cols, 0.0)
    for _ in tl.range(0, tl.cdiv(M - row, R)):
        nxt = row + R
        if nxt < M:
            tl.store(ws_ptr + nxt * SPLITS + part, tl.sum(dy_next.to(tl.float32) * y_next.to(tl.float32), 0))
            _arrive(cnt_ptr + nxt * 2)
        dy_far = _chunk(dy_ptr, nxt + R, M, N, stride_m, 1, cols, 0.0)
        y_far = _chunk(y_ptr, nxt + R, M, N, stride_m, 1, cols, 0.0)
        _wait(cnt_ptr + row * 2, SPLITS)
        dot = sum_of_partials(ws_ptr + row * SPLITS, SPLITS, BLOCK_S)
        tl.store(dx_ptr + row * stride_m + cols, (y * (dy - dot)).to(dx_ptr.dtype.element_ty), mask=cols < N)
        _leave(cnt_ptr + row * 2, SPLITS)
        dy = dy_next.to(tl.float32)
        y = y_next.to(tl.float32)
        dy_next = dy_far
        y_next = y_far
        row = nxt


def _grid(M, N, chunk, per_sm):
    splits = utils.cdiv(N, chunk)
    rows = max(1, min(M, utils.num_sms("cuda") * per_sm // splits))
    return splits, rows * splits


def pipe(case_name, chunk, warps, per_sm):
    def fn(*args):
        x = args[0]
        M, N = x.shape
        splits, grid = _grid(M, N, chunk, per_sm)
        out = torch.empty_like(x)
        cnt = utils.zeroed_counters(x.device, 2 * M)
        meta = dict(BLOCK_N=chunk, BLOCK_S=utils.next_pow2(splits), num_warps=warps, launch_cooperative_grid=True)
        if case_name == "softmax":
            ws = torch.empty(M * splits * 2, device=x.device)
            _softmax_pipe_kernel[(grid,)](x, out, ws, cnt, M, N, N, 1, N, splits, ALIGN=4, **meta)
        elif case_name == "double_softmax":
            ws = torch.empty(M * splits * 8, device=x.device)
            _double_softmax_pipe_kernel[(grid,)](x, out, ws, cnt, M, N, N, 1, N, splits, ALIGN=4, **meta)
        elif case_name == "layernorm":
            ws = torch.empty(M * splits * 2, device=x.device)
            _layernorm_pipe_kernel[(grid,)](x, args[1], args[2], out, ws, cnt, M, N, N, 1, N, 1e-5, splits,
                                            ALIGN=4, **meta)
        else:
            dy, y = args
            ws = torch.empty(M * splits, device=x.device)
            _softmax_bwd_pipe_kernel[(grid,)](dy, y, out, ws, cnt, M, N, N, splits, **meta)
        return out
    return fn


CONFIGS = [(4096, 8, 2), (4096, 8, 3), (4096, 4, 4), (2048, 4, 4), (2048, 4, 6), (8192, 16, 1), (8192, 8, 2)]


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
    for chunk, warps, per_sm in CONFIGS:
        if chunk * 2 > shape[1]:
            continue
        fn = pipe(case_name, chunk, warps, per_sm)
        label = f"pipelined coop {chunk} cols/{warps} warps/{per_sm} per SM"
        try:
            out = fn(*args)
            torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001
            log(f"  {label}: {type(exc).__name__}: {str(exc)[:160]}")
            continue
        acc = compare(out, ref, *tol)
        # a second call: the counters must have been reset by the first
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
    log(f"{case_name} {'x'.join(map(str, shape))} ({rounds} rounds, {n_bytes / 2**20:.0f} MiB moved)")
    for label, us in zip(labels, med):
        print(f"    {us:10.2f} us  {n_bytes / us / 1e3:7.0f} GB/s  {med[0] / us:6.3f}x autotuned  "
              f"{med[1] / us * n_bytes / (2 * src.numel() * 4):6.3f} of same-size copy  {label}", flush=True)


def main():
    for case_name, shape, rounds in [
            ("softmax", (512, 65536), 50), ("double_softmax", (512, 65536), 50), ("layernorm", (512, 65536), 50),
            ("softmax_backward", (512, 65536), 50),
            ("double_softmax", (2048, 65536), 30), ("layernorm", (2048, 65536), 30),
            ("double_softmax", (1024, 32768), 50), ("layernorm", (1024, 32768), 50),
            ("double_softmax", (8192, 65536), 10), ("layernorm", (8192, 65536), 10),
            ("softmax_backward", (4096, 65536), 10), ("double_softmax", (4096, 32768), 20)]:
        try:
            run_shape(case_name, shape, rounds)
        except Exception as exc:  # noqa: BLE001
            log(f"{case_name} {shape}: {type(exc).__name__}: {exc}")
        torch.cuda.empty_cache()


if __name__ == "__main__":
    sys.exit(main())
