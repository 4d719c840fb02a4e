"""Session 12, call 6: does the level a small call's time settles at depend on where its tensors are?

Call 5: with the warm call, cells of the same shape still moved by up to 0.8 us from one pass to the
next (new tensors each pass), while call 3's probe -- the same tensors for every repeat -- agreed
within 0.05 us.  Here one kernel (an Inductor-shaped pointwise kernel) at two sizes, with its input
and output allocated anew 12 times at shifted addresses; each placement timed twice in each of three
ways: no warm call; the input's and output's pages touched after the flush (l2flush.touch_pages);
a launch on a second pair of tensors allocated beside them, then the touch.  Printed with the
addresses (offset in the 2 MiB page).  Not part of the package: a probe, kept with its output.
"""
import random

import torch
import triton
import triton.language as tl

from fusebench.measure.l2flush import touch_pages
from fusebench.measure.timing import _flush_buffer, _flush_l2

DEV = "cuda:0"
buf = _flush_buffer(DEV)


@triton.jit
def kernel(in_ptr, out_ptr, xnumel, XBLOCK: tl.constexpr):
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    xmask = xindex < xnumel
    x = tl.load(in_ptr + xindex, xmask)
    y = tl.cos(x)
    x = x * y
    y = tl.maximum(x, y, propagate_nan=tl.PropagateNan.ALL)
    tl.store(out_ptr + xindex, x + y, xmask)


def timing(fn, pre=None, reps=300, cover_us=60):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        _flush_l2(buf, "clean")
        if pre:
            pre()
        torch.cuda._sleep(int(cover_us * 2000))
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    t = sorted(s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends))
    return t[reps // 2]


random.seed(0)
keep = []
for n, xblock, warps in ((16384, 1024, 4), (262144, 512, 8)):
    print(f"\n## {n} fp32 elements ({n * 4 // 1024} KiB), XBLOCK {xblock}, {warps} warps: medians (us), two repeats")
    print("place  x%2MiB   y%2MiB |   no warm call |  touch pages   | launch beside + touch")
    for place in range(12):
        keep.append(torch.empty(random.randrange(1, 3 << 20) // 4, device=DEV))  # shifts what follows
        x = torch.randn(n, device=DEV)
        y = torch.empty_like(x)
        x2, y2 = torch.randn(n, device=DEV), torch.empty(n, device=DEV)
        grid = (triton.cdiv(n, xblock),)
        run = lambda: kernel[grid](x, y, n, XBLOCK=xblock, num_warps=warps)
        touch = lambda: touch_pages([x, y])
        beside = lambda: (kernel[grid](x2, y2, n, XBLOCK=xblock, num_warps=warps), touch_pages([x, y]))
        res = [timing(run, pre=p) for p in (None, None, touch, touch, beside, beside)]
        print(f"{place:5d} {x.data_ptr() % (2 << 20):8x} {y.data_ptr() % (2 << 20):8x} | "
              + " | ".join(f"{res[i]:6.2f} {res[i + 1]:6.2f}" for i in (0, 2, 4)), flush=True)
