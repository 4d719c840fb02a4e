"""Session 12, call 1: where the ~0.45 us that our kernels lose to Inductor's at 5-13 us calls goes.

Session 11's grid (4x H200): at every case's smallest shapes, `triton` is 0.35-0.86 us slower than
`inductor` (median 0.45 us) while the profiler's kernel durations (warm L2, earlier stores) differ by
about 0.1 us.  This probe times, with fusebench's cell timing (clean L2 flush, host cover):
  A. Inductor and ours at eight of those shapes, three ways: as a cell is timed; with the same call
     made on a second, same-shaped set of inputs just before (after the flush: code, launch path and
     page tables warm, the timed call's data still cold); and with no flush at all.
  B. pointwise_chain in depth: every flat tile plan of ours; an Inductor-shaped 1-D kernel (int32
     offsets, one mask, no division); each with its code warmed by a one-program launch of the same
     binary on a 4096-element dummy after the flush; Inductor with and without its static launcher;
     the kernel Inductor generated and the config it kept.
Not part of the package: a probe, kept with its output.
"""
import glob
import os
import sys
import tempfile

import torch
import triton
import triton.language as tl

from fusebench.cases import get_case
from fusebench.kernels import load_all, pointwise as pw, sass, utils
from fusebench.kernels.registry import KERNELS
from fusebench.measure.timing import TimingSettings, _flush_buffer, _flush_l2, _host_cover_cycles

DEV = "cuda:0"
torch.cuda.set_device(0)
load_all()


def time_us(fn, pre=None, flush=True, reps=400):
    """Median event time of fn as timing._time_cuda takes it (clean flush, host cover); `pre` runs
    after the flush and before the cover spin, outside the timed region."""
    buf = _flush_buffer(DEV)
    fn()
    if pre:
        pre()
    torch.cuda.synchronize()
    cover = _host_cover_cycles(lambda: (pre and pre(), fn()), DEV)
    for _ in range(20):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        if flush:
            _flush_l2(buf, "clean")
        if pre:
            pre()
        torch.cuda._sleep(cover)
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    t = sorted(s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends))
    return t[len(t) // 2]


def fresh_inductor(fn, args, static=True):
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp()
    torch._dynamo.reset()
    torch._inductor.config.use_static_cuda_launcher = static
    cfn = torch.compile(fn)
    cfn(*args)
    torch.cuda.synchronize()
    return cfn, os.environ["TORCHINDUCTOR_CACHE_DIR"]


# ---------------------------------------------------------------------------------------------
print("# A. Inductor and ours: cell timing, with the same call on other inputs first, without flush")
print(f"{'case':32s} {'shape':>10s} {'impl':>9s} {'cell':>7s} {'pre-ran':>7s} {'noflush':>7s}")
SHAPES = [("pointwise_chain", (128, 128)), ("pointwise_chain", (256, 512)), ("pointwise_chain", (1024, 512)),
          ("bias_dropout_add", (128, 128)), ("bias_dropout_add", (256, 2048)), ("softmax_backward", (256, 512)),
          ("horizontal_reduction_pointwise", (128, 512)), ("layernorm", (4096, 256))]
for name, shape in SHAPES:
    case = get_case(name)
    args = case.make_inputs(shape, torch.float32, DEV, 0)
    other = case.make_inputs(shape, torch.float32, DEV, 1)
    cfn, _ = fresh_inductor(case.fn, args)
    for impl, f in (("inductor", cfn), ("triton", KERNELS[name].fn)):
        f(*args)
        row = [time_us(lambda: f(*args)), time_us(lambda: f(*args), pre=lambda: f(*other)),
               time_us(lambda: f(*args), flush=False)]
        print(f"{name:32s} {'x'.join(map(str, shape)):>10s} {impl:>9s} " + " ".join(f"{v:7.3f}" for v in row),
              flush=True)


# ---------------------------------------------------------------------------------------------
@triton.jit
def inductor_like(in_ptr, out_ptr, xnumel, XBLOCK: tl.constexpr):
    # Inductor's pointwise shape: one flat block per program, int32 offsets, one mask.
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    xmask = xindex < xnumel
    x = tl.load(in_ptr + xindex, xmask)
    y = tl.cos(x)
    x = x * y
    y = tl.maximum(x, y, propagate_nan=tl.PropagateNan.ALL)
    tl.store(out_ptr + xindex, x + y, xmask)


print("\n# B. pointwise_chain in depth")
dummy_x = torch.randn(1, 4096, device=DEV)
dummy_y = torch.empty_like(dummy_x)
for shape in [(128, 128), (256, 512), (1024, 512), (2048, 128), (4096, 256)]:
    M, N = shape
    x = torch.randn(shape, device=DEV)
    y = torch.empty_like(x)
    xs, ys = x.view(1, -1), y.view(1, -1)
    n = M * N
    cfn, cache = fresh_inductor(get_case("pointwise_chain").fn, (x,))
    cfn_dyn, _ = fresh_inductor(get_case("pointwise_chain").fn, (x,), static=False)
    torch._inductor.config.use_static_cuda_launcher = True
    best = [open(p).read().strip() for p in glob.glob(f"{cache}/**/*.best_config", recursive=True)]
    print(f"\n## {M}x{N}: inductor {time_us(lambda: cfn(x)):.3f} us (static launcher), "
          f"{time_us(lambda: cfn_dyn(x)):.3f} us (Triton's launcher); kept {best}")
    ours = KERNELS["pointwise_chain"].fn
    ours(x)
    print(f"   ours via wrapper {time_us(lambda: ours(x)):.3f} us, autotune chose {utils.last_choice()}")
    if shape == (256, 512):
        for src in glob.glob(f"{cache}/**/*.py", recursive=True):
            text = open(src).read()
            if "@triton.jit" in text and "triton_poi" in text:
                print("   --- Inductor's kernel ---\n" + text[text.find("@triton.jit"):][:1800])
                break
    rows = []
    for size in (256, 512, 1024, 2048, 4096, 8192):
        for warps in (1, 2, 4, 8, 16):
            if size // (32 * warps) < 4 or size > max(256, n):
                continue

            def launch(size=size, warps=warps, xs=xs, ys=ys, n=n):
                pw._pointwise_chain_kernel[(triton.cdiv(n, size),)](xs, ys, 1, n, *xs.stride(), ys.stride(0), ALIGN=4,
                                                                    BLOCK_M=1, BLOCK_N=size, num_warps=warps)

            def warm(size=size, warps=warps):
                pw._pointwise_chain_kernel[(1,)](dummy_x, dummy_y, 1, 4096, *dummy_x.stride(), dummy_y.stride(0),
                                                 ALIGN=4, BLOCK_M=1, BLOCK_N=size, num_warps=warps)

            def ind(size=size, warps=warps, x=x, y=y, n=n):
                inductor_like[(triton.cdiv(n, size),)](x, y, n, XBLOCK=size, num_warps=warps)

            def ind_warm(size=size, warps=warps):
                inductor_like[(1,)](dummy_x, dummy_y, 4096, XBLOCK=size, num_warps=warps)

            rows.append((size, warps, time_us(launch), time_us(launch, pre=warm), time_us(ind), time_us(ind, pre=ind_warm)))
    print(f"   {'size':>5s} {'warps':>5s} {'ours':>7s} {'ours+code warm':>14s} {'ind-like':>8s} {'ind-like+warm':>13s}")
    for r in rows:
        print(f"   {r[0]:5d} {r[1]:5d} {r[2]:7.3f} {r[3]:14.3f} {r[4]:8.3f} {r[5]:13.3f}", flush=True)

# SASS sizes, ours and the Inductor-shaped kernel (sm_90), for the 1024-element 4-warp tile.
ours_sass = sass.compile_sass(pw._pointwise_chain_kernel, dict(ALIGN=4, BLOCK_M=1, BLOCK_N=1024, stride_xn=1, M=1), 4)
ind_sass = sass.compile_sass(inductor_like, dict(XBLOCK=1024), 4)
print("\nSASS (instructions, memory-op order): ours", sass.memory_op_order(ours_sass),
      "; inductor-like", sass.memory_op_order(ind_sass))
