"""The kernel behind the L2 flush before each timed call (see timing._flush_l2).

Zeroing a buffer twice the L2's size with ordinary stores leaves lines that an earlier call loaded
`evict_last` in L2: L2 evicts lower-priority lines first.  These stores carry evict_last themselves
(Triton's L2 cache policy, fraction 1.0), so they are the newest lines of that class and push the
older ones out.  Imported only when a GPU call is timed, so that importing fusebench on the CPU
does not compile anything.
"""
import torch
import triton
import triton.language as tl


@triton.jit
def _zero_evict_last_kernel(ptr, n, BLOCK: tl.constexpr):
    # Program pid zeroes words [pid * BLOCK, (pid + 1) * BLOCK) with evict_last stores.
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    tl.store(ptr + offs, tl.zeros([BLOCK], tl.int32), mask=offs < n, eviction_policy="evict_last")


def zero_evict_last(buf: torch.Tensor) -> None:
    """Zero the int32 tensor `buf` with stores that carry L2's evict_last priority."""
    n = buf.numel()
    _zero_evict_last_kernel[(triton.cdiv(n, 8192),)](buf, n, BLOCK=8192, num_warps=8)
