"""Session 11, call 1: why Inductor's softmax_backward beats ours at 1024x32768 and 2048x32768.

Session 10 (call 5, H200): Inductor 97.9 / 191.2 us, ours at best 103.3 / 200.3 us, and our looped
plans with one program per row 138-160 us / 274-322 us although Inductor's kernel is a looped
two-pass reduction with one program per row.  This script
  1. prints the config Inductor's autotuner kept (and its candidates),
  2. times a stand-alone copy of the Inductor-shaped kernel in variants -- step, warps, direction of
     the second pass, eviction hint of the stores -- with fusebench's cell timing (clean L2 flush),
so that the difference can be named.  Not part of the package: a probe, kept with its output.
"""
import itertools
import sys

import torch
import triton
import triton.language as tl

from fusebench.kernels import utils


@triton.jit
def smbwd_rows(dy_ptr, y_ptr, dx_ptr, N: tl.constexpr, RBLOCK: tl.constexpr, FORWARD: tl.constexpr,
               STORE_EVICT_FIRST: tl.constexpr):
    # One program per row (int32 offsets: these shapes have under 2**31 elements).
    base = tl.program_id(0) * N
    r = tl.arange(0, RBLOCK)
    acc = tl.zeros([RBLOCK], tl.float32)
    for off in tl.range(0, N, RBLOCK):
        a = tl.load(dy_ptr + base + off + r, eviction_policy="evict_last")
        b = tl.load(y_ptr + base + off + r, eviction_policy="evict_last")
        acc += a * b
    dot = tl.sum(acc, 0)
    for j in tl.range(0, N, RBLOCK):
        off = j if FORWARD else N - RBLOCK - j
        a = tl.load(dy_ptr + base + off + r, eviction_policy="evict_first")
        b = tl.load(y_ptr + base + off + r, eviction_policy="evict_first")
        if STORE_EVICT_FIRST:
            tl.store(dx_ptr + base + off + r, b * (a - dot), eviction_policy="evict_first")
        else:
            tl.store(dx_ptr + base + off + r, b * (a - dot))


def inductor_configs(fn, *args):
    """Run torch.compile(fn) once; the kernels' kept and candidate configs."""
    from torch._inductor.runtime import triton_heuristics as th
    made = []
    orig = th.CachingAutotuner.__init__

    def init(self, *a, **k):
        orig(self, *a, **k)
        made.append(self)

    th.CachingAutotuner.__init__ = init
    try:
        torch._dynamo.reset()
        cfn = torch.compile(fn)
        cfn(*args)
        torch.cuda.synchronize()
    finally:
        th.CachingAutotuner.__init__ = orig
    return cfn, [(k.fn.__name__, [str(l.config) for l in k.launchers], [str(c) for c in k.configs]) for k in made]


def main():
    torch._inductor.config.compile_threads = 1
    dev = "cuda"
    for M, N in ((1024, 32768), (2048, 32768)):
        g = torch.Generator(device=dev).manual_seed(0)
        dy = torch.randn(M, N, device=dev, generator=g)
        y = torch.softmax(torch.randn(M, N, device=dev, generator=g), 1)
        dx = torch.empty_like(y)
        ref = y * (dy - (dy * y).sum(1, keepdim=True))
        fn = lambda dy, y: torch._softmax_backward_data(dy, y, 1, torch.float32)  # noqa: E731
        cfn, cfgs = inductor_configs(fn, dy, y)
        print(f"== {M}x{N}")
        for name, kept, cands in cfgs:
            print(f"inductor kernel {name}: kept {kept}; candidates {cands}")
        t = utils.gpu_time_stats(lambda: cfn(dy, y), dev, budget_ms=50).median_us
        print(f"inductor                          {t:8.1f} us")
        for rblock, warps, fwd, sef in itertools.product((1024, 2048, 4096, 8192), (4, 8, 16), (True, False),
                                                         (False, True)):
            if rblock // (32 * warps) > 32 or rblock // (32 * warps) < 1:
                continue
            launch = lambda: smbwd_rows[(M,)](dy, y, dx, N, rblock, fwd, sef, num_warps=warps)  # noqa: E731
            launch()
            err = (dx - ref).abs().max().item()
            t = utils.gpu_time_stats(launch, dev, budget_ms=30).median_us
            print(f"rows r={rblock:5d} w={warps:2d} {'fwd' if fwd else 'bwd'} store_ef={int(sef)}  {t:8.1f} us"
                  f"  (max err {err:.1e})")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
