#!/usr/bin/env python
"""Where does a small kernel's time go after the L2 flush?  (GPU only.)

    PYTHONPATH=. python bench/cold_start.py [--cells softmax_backward:128x4096,...] [--impls inductor,triton]
                                            [--copy-sizes 8,16,...]

For each cell, timings of one call, all with the host's launch cost covered (as the cells):
  cell     : L2 flushed before the call -- fusebench's `time` (measure.timing), once per --flush
             mode: evict_last (the cells' flush) and zero (ordinary stores, as do_bench)
  no-flush : nothing flushed: data and code may be in L2 from the previous call
  code-warm: L2 flushed, then the same call on a *second* set of inputs (same shapes), untimed:
             the kernel's code and parameters are back in the caches, its timed data is not.
cell - code-warm is what a cold instruction / constant cache costs; code-warm - no-flush is the
cold data.  Then every compiled kernel (Triton's and Inductor's caches) is listed with its SASS
instruction count and the order of its memory operations (cuobjdump): loads issued after a
barrier wait for what came before it -- one more DRAM round trip.  And a copy curve:
dst.copy_(src) timed as the cells are, per size, in GB/s (read + write) -- the copy rate a kernel
of that size can be held against.
Writes $OUT/cold_start.csv and $OUT/copy_curve.csv when OUT is set.
"""
from __future__ import annotations

import argparse
import csv
import glob
import json
import os
import subprocess
import sys

import torch

from fusebench.cases import get_case
from fusebench.impls.base import get_impl
from fusebench.kernels.sass import cubin_sass, memory_op_order
from fusebench.measure.timing import TimingSettings, _flush_buffer, _flush_l2, _host_cover_cycles, time_call

DEFAULT_CELLS = ("bias_dropout_add_transposed:128x2048,bias_dropout_add_transposed:1024x128,"
                 "bias_dropout_add_transposed:256x1024,softmax_backward:128x4096,softmax_backward:512x4096,"
                 "norm_chain:256x4096,layernorm:512x8192,pointwise_chain:128x128")


def code_warm_us(fn, args, args2, device, reps=200, mode="evict_last") -> float:
    """Median time of fn(*args) after an L2 flush followed by an untimed fn(*args2)."""
    flush = _flush_buffer(device)
    cover = _host_cover_cycles(lambda: fn(*args), device)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        _flush_l2(flush, mode)
        fn(*args2)
        torch.cuda._sleep(cover)
        starts[i].record()
        fn(*args)
        ends[i].record()
    torch.cuda.synchronize(device)
    t = sorted(s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends))
    return t[len(t) // 2]


def compiled_kernels() -> list[tuple[str, int, int, str]]:
    """(kernel name, cubin bytes, SASS instructions, memory-op order) of every cubin in Triton's
    and Inductor's caches."""
    roots = [os.environ.get("TRITON_CACHE_DIR", os.path.expanduser("~/.triton/cache")),
             os.environ.get("TORCHINDUCTOR_CACHE_DIR", "/tmp")]
    out = set()
    for root in roots:
        for path in glob.glob(os.path.join(root, "**", "*.cubin"), recursive=True):
            try:
                with open(path, "rb") as f:
                    sass = cubin_sass(f.read())
            except (OSError, subprocess.SubprocessError):
                sass = ""
            n, order = memory_op_order(sass)
            out.add((os.path.basename(path)[:-6], os.path.getsize(path), n, order))
    return sorted(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", default=DEFAULT_CELLS)
    ap.add_argument("--impls", default="inductor,triton")
    ap.add_argument("--flush", default="evict_last,zero", help="flush modes for the cell timing")
    ap.add_argument("--copy-sizes", default="4,8,16,32,64,128,256,512,1024,2048", help="MiB per buffer")
    a = ap.parse_args()
    dev = "cuda:0"
    rows = []
    modes = a.flush.split(",")
    print(f"{'case':30s} {'shape':>10s} {'impl':>9s} " + " ".join(f"{'cell/' + m:>14s}" for m in modes)
          + f" {'no-flush':>8s} {'code-warm':>9s}  note")
    for spec in a.cells.split(","):
        name, shape_s = spec.split(":")
        case = get_case(name)
        shape = tuple(int(x) for x in shape_s.split("x"))
        args = case.make_inputs(shape, torch.float32, dev, 0)
        args2 = case.make_inputs(shape, torch.float32, dev, 100)
        for impl_name in a.impls.split(","):
            prep = get_impl(impl_name).prepare(case, shape, torch.float32, dev)
            fn = prep.fn
            fn(*args)
            fn(*args2)
            torch.cuda.synchronize()
            cells = {m: time_call(lambda: fn(*args), dev, TimingSettings(flush_mode=m)).median_us for m in modes}
            noflush = time_call(lambda: fn(*args), dev, TimingSettings(flush_l2=False)).median_us
            warm = code_warm_us(fn, args, args2, dev, mode=modes[0])
            note = prep.note_after() or prep.note
            print(f"{name:30s} {shape_s:>10s} {impl_name:>9s} " + " ".join(f"{cells[m]:14.2f}" for m in modes)
                  + f" {noflush:8.2f} {warm:9.2f}  {note}", flush=True)
            rows.append(dict(case=name, shape=shape_s, impl=impl_name, **{f"cell_{m}_us": cells[m] for m in modes},
                             noflush_us=noflush, code_warm_us=warm, note=note))
    print("\ncompiled kernels: name, cubin bytes, SASS instructions, memory operations in order")
    kernels = compiled_kernels()
    for k in kernels:
        print(f"  {k[0][:48]:48s} {k[1]:7d} {k[2]:5d}  {k[3]}")
    print("\ncopy curve (dst.copy_(src), timed as the cells: L2 flushed (evict_last), launch covered)")
    curve = []
    for mib in (int(x) for x in a.copy_sizes.split(",")):
        n = mib << 20
        src = torch.randint(0, 127, (n,), dtype=torch.int8, device=dev)
        dst = torch.empty_like(src)
        for flush in (True, False):
            t = time_call(lambda: dst.copy_(src), dev, TimingSettings(flush_l2=flush)).median_us
            gbs = 2 * n / t / 1e3
            curve.append(dict(mib=mib, flush=flush, us=t, gbps=gbs))
            print(f"  {mib:6d} MiB  flush={flush!s:5s} {t:10.2f} us {gbs:8.1f} GB/s", flush=True)
        src = dst = None  # free before the next size
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "cold_start.csv"), "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
        with open(os.path.join(out, "copy_curve.csv"), "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(curve[0]))
            w.writeheader()
            w.writerows(curve)
        with open(os.path.join(out, "kernels.json"), "w") as f:
            json.dump(kernels, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
