"""Session 11, calls 1-2: why Inductor's softmax_backward beats ours at 1024x32768 and 2048x32768.

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
def smbwd_rows(dy_ptr, y_ptr, dx_ptr, N: tl.constexpr, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr,
               FORWARD: tl.constexpr, STORE_EVICT_FIRST: tl.constexpr):
    # XBLOCK rows per program, as Inductor's reduction kernels (int32 offsets: these shapes have
    # under 2**31 elements).
    rows = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:, None]
    base = rows * N
    r = tl.arange(0, RBLOCK)[None, :]
    acc = tl.zeros([XBLOCK, RBLOCK], tl.float32)
    for off in tl.range(0, N, RBLOCK):
        a = tl.load(dy_ptr + base + off + r, eviction_policy="evict_last")
        b = tl.load(y_ptr + base + off + r, eviction_policy="evict_last")
        acc += a * b
    dot = tl.sum(acc, 1)[:, None]
    for j in tl.range(0, N, RBLOCK):
        off = j if FORWARD else N - RBLOCK - j
        a = tl.load(dy_ptr + base + off + r, eviction_policy="evict_first")
        b = tl.load(y_ptr + base + off + r, eviction_policy="evict_first")
        if STORE_EVICT_FIRST:
            tl.store(dx_ptr + base + off + r, b * (a - dot), eviction_policy="evict_first")
        else:
            tl.store(dx_ptr + base + off + r, b * (a - dot))


def inductor_best_configs(fn, *args):
    """Run torch.compile(fn) once in a fresh Inductor cache; the configs its autotuner kept (the
    .best_config files it writes beside each kernel)."""
    import glob
    import os
    import tempfile
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp()
    torch._dynamo.reset()
    cfn = torch.compile(fn)
    cfn(*args)
    torch.cuda.synchronize()
    found = []
    for path in glob.glob(os.path.join(os.environ["TORCHINDUCTOR_CACHE_DIR"], "**", "*.best_config"), recursive=True):
        with open(path) as f:
            found.append(f"{os.path.basename(path)}: {f.read().strip()}")
    return cfn, found


def main():
    dev = "cuda"
    for M, N in ((1024, 32768), (2048, 32768)):
        g = torch.Generator(device=dev).manual_seed(0)
        dy = torch.randn(M, N, device=dev, generator=g)
        y = torch.softmax(torch.randn(M, N, device=dev, generator=g), 1)
        dx = torch.empty_like(y)
        ref = y * (dy - (dy * y).sum(1, keepdim=True))
        fn = lambda dy, y: torch._softmax_backward_data(dy, y, 1, torch.float32)  # noqa: E731
        cfn, cfgs = inductor_best_configs(fn, dy, y)
        print(f"== {M}x{N}")
        for line in cfgs:
            print(f"inductor kept {line}")
        t = utils.gpu_time_stats(lambda: cfn(dy, y), dev, budget_ms=50).median_us
        print(f"inductor                                 {t:8.1f} us")
        variants = [(1, rb, w) for rb in (1024, 2048, 4096, 8192) for w in (4, 8, 16) if 1 <= rb // (32 * w) <= 32]
        variants += [(2, 1024, 8), (4, 512, 8), (8, 256, 8), (8, 512, 8), (16, 256, 8), (64, 64, 8)]
        for (xb, rb, warps), fwd, sef in itertools.product(variants, (True, False), (False, True)):
            grid = (M // xb,)
            launch = lambda: smbwd_rows[grid](dy, y, dx, N, xb, rb, fwd, sef, num_warps=warps)  # noqa: E731
            launch()
            err = (dx - ref).abs().max().item()
            t = utils.gpu_time_stats(launch, dev, budget_ms=30).median_us
            print(f"rows x={xb:2d} r={rb:5d} w={warps:2d} {'fwd' if fwd else 'bwd'} store_ef={int(sef)}  {t:8.1f} us"
                  f"  (max err {err:.1e})")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
