"""The kernels behind the L2 flush before each timed call (see timing._flush_l2).

Zeroing a buffer twice the L2's size with ordinary stores leaves lines that an earlier call loaded
`evict_last` in L2: L2 evicts lower-priority lines first.  These stores carry evict_last themselves
(Triton's L2 cache policy, fraction 1.0), so they are the newest lines of that class and push the
older ones out.

Those stores leave L2 full of dirty lines, and whoever evicts them writes them back to DRAM: the
timed call, unless the flush does it first.  The read sweep loads a second buffer twice the L2's
size, evict_last too, so that its clean lines replace the dirty ones and the write-back happens
before the timed call.

Both leave L2 full of evict_last lines, which a call's own loads then compete with: lines it loads
with no hint or evict_first are evicted before them.  Mode "discard" instead drops the stores'
lines without writing them back (discard.global.L2): the timed call starts with an empty L2.  Imported only
when a GPU call is timed, so that importing fusebench on the CPU does not compile anything.

`discard_outputs` drops the warm call's outputs from L2 the same way: left dirty there, they were
written back inside the timed call.

`touch_pages` reads one byte every 64 KiB of the timed call's inputs after the flush (see
timing's warm call): the address translations of their pages are walked again, while the data
itself stays out of L2 but for one 32-byte sector per 64 KiB (0.05%).
"""
import torch
import triton
import triton.language as tl


@triton.jit
def _zero_evict_last_kernel(ptr, n, BLOCK: tl.constexpr):
    # Program pid zeroes words [pid * BLOCK, (pid + 1) * BLOCK) with evict_last stores.
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    tl.store(ptr + offs, tl.zeros([BLOCK], tl.int32), mask=offs < n, eviction_policy="evict_last")


@triton.jit
def _read_evict_last_kernel(ptr, sink_ptr, n, BLOCK: tl.constexpr):
    # Program pid loads words [pid * BLOCK, (pid + 1) * BLOCK) evict_last.  The store depends on the
    # data, so the compiler keeps the loads; it never happens (the sweep buffer holds no such sum).
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    total = tl.sum(tl.load(ptr + offs, mask=offs < n, other=0, eviction_policy="evict_last"), 0)
    if total == -123456789:
        tl.store(sink_ptr, total)


@triton.jit
def _discard_lines_kernel(ptr, n_lines, BLOCK: tl.constexpr):
    # Program pid drops 128-byte lines [pid * BLOCK, (pid + 1) * BLOCK) of the byte buffer at ptr
    # (line i at byte 128 * i) from L2 without writing them back (PTX discard.global.L2; their
    # contents become undefined).  Past the end, the last line again (harmless) rather than a
    # mask: the asm takes no predicate.
    line = tl.minimum(tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK), n_lines - 1)
    tl.inline_asm_elementwise("discard.global.L2 [$1], 128;\n\tmov.u32 $0, 0;", "=r,l", [ptr + line * 128],
                              dtype=tl.int32, is_pure=False, pack=1)


def _discard_lines(raw: torch.Tensor, n_lines: int) -> None:
    """Drop the first n_lines 128-byte lines of the uint8 tensor `raw` (128-byte aligned) from L2."""
    if n_lines > 0:
        _discard_lines_kernel[(triton.cdiv(n_lines, 1024),)](raw, n_lines, BLOCK=1024, num_warps=4)


@triton.jit
def _touch_kernel(ptr, sink_ptr, n, STEP: tl.constexpr, BLOCK: tl.constexpr):
    # Program pid loads bytes STEP apart, numbers [pid * BLOCK, (pid + 1) * BLOCK) of them; the store
    # (to a scratch word, never to the buffer) depends on them so that the compiler keeps the loads.
    offs = (tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)) * STEP
    total = tl.sum(tl.load(ptr + offs, mask=offs < n, other=0).to(tl.int32), 0)
    if total == -1:  # a sum of bytes (0..255) is never negative
        tl.store(sink_ptr, total)


_SINK: dict[torch.device, torch.Tensor] = {}
TOUCH_STEP = 1 << 16


def touch_pages(tensors) -> None:
    """Read one byte every TOUCH_STEP bytes of the storage of each CUDA tensor in `tensors`."""
    for t in tensors:
        if not isinstance(t, torch.Tensor) or not t.is_cuda or t.numel() == 0:
            continue
        storage = t.untyped_storage()
        raw = torch.empty(0, dtype=torch.uint8, device=t.device).set_(storage)
        sink = _SINK.setdefault(t.device, torch.zeros(1, dtype=torch.int32, device=t.device))
        n = storage.nbytes()
        _touch_kernel[(triton.cdiv(triton.cdiv(n, TOUCH_STEP), 1024),)](raw, sink, n, STEP=TOUCH_STEP, BLOCK=1024,
                                                                         num_warps=4)


def discard_outputs(out, keep=()) -> None:
    """Drop from L2, without writing them back, the lines of every CUDA tensor in `out` (a tensor
    or a tuple/list of them) whose storage is not one of `keep`'s: the warm call's outputs, so
    that the timed call does not write them back (timing's warm call).  Their contents are
    undefined afterwards.  Only whole 128-byte lines inside the storage are dropped."""
    kept = {t.untyped_storage().data_ptr() for t in keep if isinstance(t, torch.Tensor)}
    for t in (out if isinstance(out, (tuple, list)) else [out]):
        if isinstance(t, (tuple, list)):
            discard_outputs(t, keep)
            continue
        if not isinstance(t, torch.Tensor) or not t.is_cuda or t.untyped_storage().data_ptr() in kept:
            continue
        storage = t.untyped_storage()
        start = -storage.data_ptr() % 128  # the first whole line
        raw = torch.empty(0, dtype=torch.uint8, device=t.device).set_(storage)[start:]
        _discard_lines(raw, (storage.nbytes() - start) // 128)


def zero_evict_last(buf: torch.Tensor) -> None:
    """Zero the int32 tensor `buf` with stores that carry L2's evict_last priority."""
    n = buf.numel()
    _zero_evict_last_kernel[(triton.cdiv(n, 8192),)](buf, n, BLOCK=8192, num_warps=8)


def discard_l2(buf: torch.Tensor) -> None:
    """Drop the int32 tensor `buf`'s lines from L2, dirty or not, without writing them back: its
    contents are undefined afterwards (only for the flush's own buffer)."""
    _discard_lines(buf.view(torch.uint8), triton.cdiv(buf.numel() * 4, 128))


def read_evict_last(buf: torch.Tensor) -> None:
    """Read the int32 tensor `buf` (its last element is left free as the never-written sink) with
    loads that carry L2's evict_last priority."""
    n = buf.numel() - 1
    _read_evict_last_kernel[(triton.cdiv(n, 8192),)](buf, buf[n:], n, BLOCK=8192, num_warps=8)
