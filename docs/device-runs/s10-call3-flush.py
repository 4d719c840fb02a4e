"""Session 10, call 3 (one H200): what the L2 flush before each timed call costs the call itself.

fusebench's flush (measure/timing.py, mode "evict_last") writes a buffer twice the L2 with
evict_last stores, so the timed call starts with an L2 full of dirty lines that someone must write
back to DRAM, and that may be the timed call.  Each kernel below is timed exactly as cells are
(measure.timing._time_cuda) under four flushes, twice, interleaved:

  evict_last  fusebench's flush (dirty evict_last lines left in L2)
  clean       the same, then a read-only sweep (evict_last loads) of another buffer twice the L2:
              L2 left full of clean high-priority lines, the write-back done before the events
  zero        buf.zero_(): ordinary stores (do_bench's flush; dirty lines of normal priority)
  none        no flush (the previous call's output is what L2 holds)

Kernels: dst.copy_(src) at 32-512 MiB per buffer, a read-only sum of 128 and 512 MiB, and our
Triton softmax, horizontal_reduction_reduction (read-only) and pointwise_chain at 4096x8192 fp32
(128 MiB in).  Prints microseconds per (kernel, flush) and each over the evict_last time.
"""
import statistics
import sys

import torch
import triton
import triton.language as tl

from fusebench.cases import get_case
from fusebench.kernels import horizontal, pointwise, softmax
from fusebench.measure import timing

DEV = "cuda"


@triton.jit
def _read_sweep_kernel(ptr, out_ptr, n, BLOCK: tl.constexpr):
    # Load words [pid * BLOCK, (pid + 1) * BLOCK) evict_last and keep only a data-dependent store,
    # so that the loads are not removed; nothing is written unless the data holds a sentinel.
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(ptr + offs, mask=offs < n, other=0, eviction_policy="evict_last")
    s = tl.sum(v, 0)
    if s == -123456789:
        tl.store(out_ptr, s)


l2 = torch.cuda.get_device_properties(DEV).L2_cache_size
sweep = torch.ones(2 * l2 // 4, dtype=torch.int32, device=DEV)
sink = torch.zeros(1, dtype=torch.int32, device=DEV)
plain_flush = timing._flush_l2


def flush(buf, mode):
    if mode == "clean":
        plain_flush(buf, "evict_last")
        _read_sweep_kernel[(triton.cdiv(sweep.numel(), 8192),)](sweep, sink, sweep.numel(), BLOCK=8192, num_warps=8)
    else:
        plain_flush(buf, mode)


timing._flush_l2 = flush


def copy_of(mib):
    src = torch.ones(mib << 20, dtype=torch.uint8, device=DEV)
    dst = torch.empty_like(src)
    return lambda: dst.copy_(src)


def read_of(mib):
    src = torch.ones(mib << 18, dtype=torch.float32, device=DEV).view(-1, 8192)
    return lambda: horizontal.horizontal_reduction_reduction_impl(src)


def case_of(name, impl, shape=(4096, 8192)):
    args = get_case(name).make_inputs(shape, torch.float32, DEV, 0)
    return lambda: impl(*args)


kernels = {f"copy {m} MiB/buffer": copy_of(m) for m in (32, 64, 128, 256, 512)}
kernels.update({f"hrr read {m} MiB": read_of(m) for m in (128, 512)})
kernels["softmax 4096x8192"] = case_of("softmax", softmax.softmax_impl)
kernels["pointwise_chain 4096x8192"] = case_of("pointwise_chain", pointwise.pointwise_chain_impl)

modes = ["evict_last", "clean", "zero", "none"]
times = {}
for rnd in range(2):
    for label, fn in kernels.items():
        for mode in modes:
            st = timing.TimingSettings(flush_l2=mode != "none", flush_mode="evict_last" if mode == "none" else mode)
            us = timing._time_cuda(fn, DEV, st).median_us
            times.setdefault((label, mode), []).append(us)
            print(f"round {rnd} {label:28s} {mode:10s} {us:9.2f} us", flush=True)

print("\nkernel | " + " | ".join(modes) + " | each / evict_last (median of rounds)")
for label in kernels:
    med = {m: statistics.median(times[(label, m)]) for m in modes}
    print(f"{label:28s} | " + " | ".join(f"{med[m]:9.2f}" for m in modes) + " | "
          + " ".join(f"{med[m] / med['evict_last']:.3f}" for m in modes))
sys.stdout.flush()
