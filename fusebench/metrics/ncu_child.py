"""Child process for the `ncu` and `compile` metrics: one cell, built from scratch in a fresh process.

    python -m fusebench.metrics.ncu_child CASE IMPL SHAPE DTYPE [--mode ncu|compile]
                                          [--plugin FILE]... [--module NAME]... [--warmup N]

--mode ncu (default): build the inputs (seed 0), prepare the implementation, warm it up (compile
  and autotune happen here), then make exactly one call inside the NVTX push/pop range
  `fusebench_call`, synchronised before the range is popped.  No L2 flush inside the range.
--mode compile: initialise CUDA and Triton (a trivial kernel), then time the first call of the
  implementation (JIT compile + autotune, with whatever TRITON_CACHE_DIR holds) and steady calls,
  synchronised.  Prints one JSON line: {"first_s": ..., "steady_s": ...}.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

NVTX_RANGE = "fusebench_call"


def _init_triton() -> None:
    """Compile and run a trivial Triton kernel: Triton's driver and compiler are loaded here, so
    that the timed first call holds only the case's own kernels' compile and autotune."""
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def _fusebench_init_kernel(x_ptr):
        tl.store(x_ptr, tl.load(x_ptr) + 1.0)

    x = torch.zeros(1, device="cuda")
    _fusebench_init_kernel[(1,)](x)
    torch.cuda.synchronize()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="fusebench.metrics.ncu_child")
    ap.add_argument("case")
    ap.add_argument("impl")
    ap.add_argument("shape")
    ap.add_argument("dtype")
    ap.add_argument("--mode", choices=("ncu", "compile"), default="ncu")
    ap.add_argument("--plugin", action="append", default=[])
    ap.add_argument("--module", action="append", default=[])
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args(argv)

    import importlib

    import torch

    from fusebench.cases import DTYPES, get_case, load_plugin, parse_shape
    from fusebench.impls import get_impl

    for path in a.plugin:
        load_plugin(path)
    for mod in a.module:
        importlib.import_module(mod)
    case, impl = get_case(a.case), get_impl(a.impl)
    shape = case.normalize_shape(parse_shape(a.shape))
    dtype, device = DTYPES[a.dtype], a.device
    cuda = device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    if a.mode == "compile" and cuda:
        _init_triton()
    args = case.make_inputs(shape, dtype, device, 0)
    sync()
    prepared = impl.prepare(case, shape, dtype, device)
    with prepared.context(), torch.no_grad():
        if a.mode == "ncu":
            for _ in range(max(1, a.warmup)):
                out = prepared.fn(*args)
                del out
            sync()
            torch.cuda.nvtx.range_push(NVTX_RANGE)
            out = prepared.fn(*args)
            sync()
            torch.cuda.nvtx.range_pop()
            del out
            print(json.dumps({"ok": True, "warmup_calls": max(1, a.warmup)}))
            return 0
        t = time.perf_counter()
        out = prepared.fn(*args)
        sync()
        first = time.perf_counter() - t
        del out
        steady = []
        for _ in range(1 + 3):
            t = time.perf_counter()
            out = prepared.fn(*args)
            sync()
            steady.append(time.perf_counter() - t)
            del out
        print(json.dumps({"first_s": first, "steady_s": statistics.median(steady[1:])}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
