"""Session 12, call 2: is the ~0.7 us that comes and goes at 5 us calls the kernel's code, cold after
the L2 flush?  (Call 1: a one-program launch of the same binary after the flush removed it wherever it
was there; which of two kernels had it changed from one group of shapes to the next.)

Eight instances of one kernel (the same source loaded as eight modules, so eight code addresses),
each timed as a cell is (event pairs, L2 flush before each call, host-cover spin) under conditions
that differ in one thing each, with the spread of each timing (p10 / p50 / p90), at two sizes.
Not part of the package: a probe, kept with its output.
"""
import importlib.util
import os
import sys
import tempfile

import torch
import triton

from fusebench.measure.timing import _flush_buffer, _flush_l2

SRC = '''
import triton
import triton.language as tl


@triton.jit
def kernel(in_ptr, out_ptr, xnumel, XBLOCK: tl.constexpr, COPY: tl.constexpr):
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    xmask = xindex < xnumel
    x = tl.load(in_ptr + xindex, xmask)
    y = tl.cos(x)
    x = x * y
    y = tl.maximum(x, y, propagate_nan=tl.PropagateNan.ALL)
    tl.store(out_ptr + xindex, x + y + COPY, xmask)
'''


def instances(k):
    # Eight modules with one source each; COPY (a constexpr added to the result, 0 here at run
    # time through a constexpr of 0.0 + i * 0) keeps their compiled binaries apart in Triton's cache.
    out = []
    d = tempfile.mkdtemp()
    for i in range(k):
        path = os.path.join(d, f"inst{i}.py")
        with open(path, "w") as f:
            f.write(SRC.replace("x + y + COPY", f"x + y + COPY * {i + 1}"))
        spec = importlib.util.spec_from_file_location(f"inst{i}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        out.append(mod.kernel)
    return out


DEV = "cuda:0"
buf = _flush_buffer(DEV)
dummy_x = torch.randn(4096, device=DEV)
dummy_y = torch.empty_like(dummy_x)


def timing(fn, pre=None, flush="clean", cover_us=20, reps=300):
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        if flush:
            _flush_l2(buf, flush)
        if pre:
            pre()
        torch.cuda._sleep(int(cover_us * 2000))
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    t = sorted(s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends))
    return t[reps // 10], t[reps // 2], t[9 * reps // 10]


kernels = instances(8)
for n, xblock, warps in ((16384, 1024, 4), (524288, 512, 8)):
    x = torch.randn(n, device=DEV)
    y = torch.empty_like(x)
    print(f"\n## {n} elements, XBLOCK {xblock}, {warps} warps: p10/p50/p90 us per condition")
    conds = ["clean", "clean+cover100", "clean+same code warm", "clean+other code warm", "zero", "evict_last",
             "none"]
    print("inst " + " ".join(f"{c:>22s}" for c in conds))
    for i, k in enumerate(kernels):
        other = kernels[(i + 1) % len(kernels)]
        run = lambda k=k: k[(triton.cdiv(n, xblock),)](x, y, n, XBLOCK=xblock, COPY=0.0, num_warps=warps)
        warm = lambda k=k: k[(1,)](dummy_x, dummy_y, 4096, XBLOCK=xblock, COPY=0.0, num_warps=warps)
        warm_other = lambda k=other: k[(1,)](dummy_x, dummy_y, 4096, XBLOCK=xblock, COPY=0.0, num_warps=warps)
        warm_other()
        res = [timing(run), timing(run, cover_us=100), timing(run, pre=warm), timing(run, pre=warm_other),
               timing(run, flush="zero"), timing(run, flush="evict_last"), timing(run, flush=None)]
        print(f"{i:4d} " + " ".join(f"{a:6.2f}/{b:6.2f}/{c:6.2f}".rjust(22) for a, b, c in res), flush=True)
    # the same instance again, later: does an instance keep its mode?
    k = kernels[0]
    run = lambda k=k: k[(triton.cdiv(n, xblock),)](x, y, n, XBLOCK=xblock, COPY=0.0, num_warps=warps)
    print("inst 0 again, clean:", " ".join("%.2f/%.2f/%.2f" % timing(run) for _ in range(3)))
