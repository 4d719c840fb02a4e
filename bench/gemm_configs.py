#!/usr/bin/env python
"""Time every GEMM kernel configuration at the shapes where our epilogue GEMM trails eager.

    PYTHONPATH=. python bench/gemm_configs.py [--dtype fp16] [--shapes 128x4096x4096,...] [--csv F]

For each M x N x K shape: torch.mm, eager relu(mm) (what matmul_relu's eager cell runs), the
`triton` implementation as the cells run it (its own choice among kernels), then each config of
the pointer kernel and of the TMA kernel forced one at a time, all with relu fused.  Every time is
utils.gpu_time_ms, the cells' method (L2 flushed, host launch cost kept out).  The output is
checked against torch.mm + relu before a config is timed.  GPU only.

Why: at M = 128-2048 with long K the grid is about one wave of tiles, and cuBLAS is 5-20% ahead
of the autotuned configs (session-4 runs on an H200); this lists which tile shapes and pipeline
depths close that gap, to update the autotuning spaces in fusebench/kernels/matmul.py.
"""
from __future__ import annotations

import argparse
import csv
import sys

import torch
import triton

from fusebench.kernels import matmul as mm
from fusebench.kernels.utils import gpu_time_ms

# the weakest first (session-4 matmul_relu cells, H200: 0.88-0.95x eager)
SHAPES = ["256x16384x16384", "128x4096x4096", "512x8192x8192", "512x16384x16384", "1024x8192x8192",
          "128x8192x8192", "2048x4096x4096", "1024x4096x4096", "4096x2048x2048", "8192x1024x1024", "16384x512x512"]

# (BLOCK_M, BLOCK_N, BLOCK_K, stages, warps): the autotuning spaces' configs plus candidates for
# one-wave grids (short tiles, deeper K steps, more stages)
PTR = [(128, 256, 64, 3, 8), (128, 128, 64, 4, 8), (128, 128, 64, 4, 4), (128, 64, 64, 4, 4), (64, 128, 64, 4, 4),
       (64, 128, 128, 3, 4), (64, 64, 128, 4, 4), (128, 64, 128, 4, 4), (64, 64, 64, 4, 4),
       (64, 128, 64, 6, 4), (64, 256, 64, 4, 4), (64, 256, 64, 4, 8), (128, 128, 128, 3, 8), (128, 128, 64, 5, 8),
       (128, 64, 64, 6, 4), (64, 64, 256, 3, 4), (128, 256, 64, 4, 8), (64, 128, 256, 2, 4)]
# (BLOCK_M, BLOCK_N, BLOCK_K, stages, warps, epilogue subtile, persistent)
TMA = [(128, 256, 64, 3, 8, True, False), (128, 128, 64, 4, 8, True, False), (128, 128, 64, 4, 4, True, False),
       (128, 64, 64, 4, 4, False, False), (64, 128, 64, 4, 4, False, False), (64, 128, 128, 4, 4, False, False),
       (64, 256, 64, 4, 4, False, False), (64, 256, 64, 5, 8, True, False), (128, 128, 128, 3, 8, True, False),
       (128, 64, 128, 4, 4, False, False), (64, 64, 128, 6, 4, False, False), (128, 256, 64, 3, 8, True, True),
       (128, 128, 64, 4, 8, True, True), (64, 128, 128, 4, 4, False, True), (128, 64, 128, 4, 4, False, True)]

SMEM = 227 * 1024


def _ptr_call(a, b, c, cfg):
    bm, bn, bk, stages, warps = cfg
    M, K = a.shape
    N = b.shape[1]
    grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
    fn = mm._gemm_kernel.fn  # the heuristics-wrapped kernel below the autotuner: one config

    def call():
        fn[grid](a, b, c, c, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                 c.stride(0), c.stride(1), 0, 0, 1, PRECISION="ieee", BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8,
                 num_warps=warps, num_stages=stages)
    return call


def _tma_call(a, b, c, cfg):
    from triton.tools.tensor_descriptor import TensorDescriptor
    bm, bn, bk, stages, warps, sub, pers = cfg
    M, K = a.shape
    N = b.shape[1]
    a_desc = TensorDescriptor.from_tensor(a, [bm, bk])
    b_desc = TensorDescriptor.from_tensor(b, [bk, bn])
    c_desc = TensorDescriptor.from_tensor(c, [bm, bn // 2] if sub else [bm, bn])
    sms = mm.num_sms(a.device.index or 0)
    tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
    grid = (min(sms, tiles) if pers else tiles,)
    fn = mm._gemm_tma_kernel.fn

    def call():
        fn[grid](a_desc, b_desc, c_desc, c, c, M, N, K, c.stride(0), c.stride(1), 0, 0, 1, B_TRANS=False, NUM_SMS=sms,
                 BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, EPILOGUE_SUBTILE=sub, PERSISTENT=pers,
                 num_warps=warps, num_stages=stages)
    return call


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtype", default="fp16", choices=["fp16", "bf16"])
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--csv", default=None, help="also write the rows to this CSV file")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("gemm_configs.py: needs a CUDA GPU", file=sys.stderr)
        return 2
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    es = torch.tensor([], dtype=dtype).element_size()
    out = open(args.csv, "w", newline="") if args.csv else None  # rows are written as they come
    writer = csv.DictWriter(out, fieldnames=["shape", "dtype", "what", "us"]) if out else None
    if writer:
        writer.writeheader()
    print(f"{torch.cuda.get_device_name()}  {args.dtype}  times in us (relu fused; cells' timing method)")
    for shape in args.shapes.split(","):
        M, N, K = (int(s) for s in shape.split("x"))
        g = torch.Generator(device="cuda").manual_seed(0)
        a = torch.randn((M, K), device="cuda", dtype=dtype, generator=g)
        b = torch.randn((K, N), device="cuda", dtype=dtype, generator=g)
        c = torch.empty((M, N), device="cuda", dtype=dtype)
        ref = torch.relu(a @ b).float()

        def timed(name, call, check=True):
            try:
                call()
                torch.cuda.synchronize()
                if check:
                    err = (c.float() - ref).abs().max().item()
                    if not err <= 2e-2 * max(1.0, ref.abs().max().item()):
                        raise AssertionError(f"max error {err:.3g}")
                us = gpu_time_ms(call, "cuda", budget_ms=20.0) * 1e3
            except Exception as exc:  # noqa: BLE001 - a config may not fit; record why
                us, name = float("nan"), f"{name} FAILED {type(exc).__name__}: {str(exc)[:80]}"
            if writer:
                writer.writerow({"shape": shape, "dtype": args.dtype, "what": name, "us": us})
                out.flush()
            return us

        mm_us = timed("torch.mm", lambda: torch.mm(a, b, out=c), check=False)
        eager_us = timed("eager relu(mm)", lambda: torch.relu(torch.mm(a, b)), check=False)
        ours_us = timed("triton (auto)", lambda: c.copy_(mm.gemm(a, b, relu=True)))
        print(f"\n{shape}: torch.mm {mm_us:.1f}  eager {eager_us:.1f}  triton(auto) {ours_us:.1f} "
              f"{mm.fastest_record(mm._choice_key(a, b, c))}")
        for cfg in PTR:
            if cfg[3] * (cfg[0] + cfg[1]) * cfg[2] * es > SMEM:
                continue
            us = timed(f"ptr {cfg}", _ptr_call(a, b, c, cfg))
            print(f"  ptr {str(cfg):28s} {us:8.1f}  {mm_us / us:5.2f}x mm  {eager_us / us:5.2f}x eager")
        for cfg in TMA:
            if cfg[3] * (cfg[0] + cfg[1]) * cfg[2] * es + cfg[0] * cfg[1] * es // (2 if cfg[5] else 1) > SMEM:
                continue
            us = timed(f"tma {cfg}", _tma_call(a, b, c, cfg))
            print(f"  tma {str(cfg):28s} {us:8.1f}  {mm_us / us:5.2f}x mm  {eager_us / us:5.2f}x eager")
        a = b = c = ref = None  # free before the next shape
        torch.cuda.empty_cache()
    if out:
        out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
