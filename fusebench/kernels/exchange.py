"""Device-side helpers of the row-wise kernels: a column mask that compiles away, and the exchange
of partial results among the programs that share one row (cooperative plans, GPU launches only).

Each program publishes its chunk's statistics as 64-bit words, the fp32 value in the low half and
a tag in the high half, and polls its row's words until all carry this round's tag: the word is
its own flag, so no fence, counter or second read is needed (a barrier with release/acquire fences
waits for the chunk's loads and the last row's stores; see docs/kernels.md).  Tags are unique per
round and launch: round r of a launch uses epoch + 1 + r, and the last program to finish moves the
epoch past them.  The epoch lives on the device, so a launch replayed from a CUDA graph still gets
fresh tags.  Slots alternate by round parity: a program can be one round ahead of the others in
its row, never two (round r + 1 needs their words of round r + 1, and a program publishes those
only once all its warps have read round r's: the statistics' block-wide reduction is a CTA
barrier; a kernel without one would need tl.debug_barrier() before publish).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from fusebench.kernels.launch import STATE


@triton.jit
def within(cols, N, EVEN: tl.constexpr):
    """The mask cols < N; all true, and compiled away, when EVEN (the launcher knows that every
    step lies inside the row).  Per-element masks hold registers: with two inputs at 32768-column
    steps they make ptxas spill where an unmasked kernel does not."""
    return (cols < N) | EVEN


# ----------------------------------------------------------------------------------------------
# cooperative rows

SLOT_WORDS = 8  # words per program per round: at most 8 statistics
_EXCHANGE = STATE.table("exchange.buffers")  # device -> its exchange buffer
_SLOT = tl.constexpr(SLOT_WORDS)
_EPOCH_WRAP = tl.constexpr(2**30)


def exchange_buffer(device, programs: int) -> torch.Tensor:
    """The int64 buffer of cooperative launches on `device` for up to `programs` programs:
    [0] the epoch, [1] the count of finished programs, then two rounds' slots per program.  Shared
    by every cooperative kernel (one launch at a time: fusebench runs one kernel at a time per
    device); zero when new, so that no slot carries a tag (tags start at 1)."""
    key = str(torch.device(device))
    need = 2 + 2 * programs * SLOT_WORDS
    buf = _EXCHANGE.get(key)
    if buf is None or buf.numel() < need:
        buf = torch.zeros(max(need, 2 + 2 * 1024 * SLOT_WORDS), dtype=torch.int64, device=device)
        _EXCHANGE[key] = buf
    return buf


@triton.jit
def exchange_epoch(sync_ptr):
    """This launch's epoch (read at a program's start; the previous launch's last program wrote it)."""
    return tl.load(sync_ptr, volatile=True).to(tl.int32)


@triton.jit
def coop_layout(sync_ptr, M, SPLITS, BLOCK_N: tl.constexpr):
    """Where a cooperative program works: the grid takes P / SPLITS rows at a time, and program
    pid holds chunk (pid % SPLITS) of row (round * P / SPLITS + pid // SPLITS), whose programs
    start at pid // SPLITS * SPLITS (its team).  Returns (pid, rows_at_once, rounds, team, epoch,
    the chunk's columns)."""
    pid = tl.program_id(0)
    rows_at_once = tl.num_programs(0) // SPLITS
    cols = (pid % SPLITS) * BLOCK_N + tl.arange(0, BLOCK_N)
    return pid, rows_at_once, tl.cdiv(M, rows_at_once), pid // SPLITS * SPLITS, exchange_epoch(sync_ptr), cols


@triton.jit
def exchange_slots(sync_ptr, pid, rnd):
    """Program `pid`'s words for round `rnd` (see exchange_buffer)."""
    return sync_ptr + 2 + ((rnd % 2) * tl.num_programs(0) + pid) * _SLOT


@triton.jit
def publish(slot_ptr, stats, tag):
    """Write the fp32 vector `stats` (at most SLOT_WORDS) to slot_ptr[0:K], each as one 64-bit
    word tagged `tag`: relaxed atomic exchanges, one per word, issued and not waited for."""
    k = tl.arange(0, stats.shape[0])
    bits = stats.to(tl.int32, bitcast=True).to(tl.int64) & 0xFFFFFFFF
    tl.atomic_xchg(slot_ptr + k, (tag.to(tl.int64) << 32) | bits, sem="relaxed")


@triton.jit
def collect(slot_ptr, tag, SPLITS, BLOCK_S: tl.constexpr, K: tl.constexpr, WARPS: tl.constexpr):
    """[BLOCK_S, K] fp32: the statistics of the SPLITS programs whose slots start at slot_ptr
    (program s at slot_ptr + s * SLOT_WORDS), polled until every word carries `tag`; rows from
    SPLITS on are 0.  WARPS: the program's warps.

    Every thread polls words of its own: R copies of the BLOCK_S x K words, at least two per
    thread.  With fewer words than threads, Triton would hold them replicated across warps, load
    every copy, but test the tags of one copy only, and a warp could go on with a stale copy
    (wrong rows; docs/kernels.md, 'Every thread polls copies of its own').  The poll gives up after 2**22 reads, so that a
    bug shows as a wrong result rather than a hung GPU."""
    R: tl.constexpr = 1 if BLOCK_S * K >= 64 * WARPS else 64 * WARPS // (BLOCK_S * K)
    s = tl.arange(0, BLOCK_S)[None, :, None]
    k = tl.arange(0, K)[None, None, :]
    ptrs = tl.broadcast_to(slot_ptr + s * _SLOT + k, [R, BLOCK_S, K])
    mask = tl.broadcast_to((s < SPLITS) & (k < K), [R, BLOCK_S, K])
    done = tag.to(tl.int64) << 32  # what a masked-off word reads as: tagged, value 0
    w = tl.load(ptrs, mask=mask, other=done, volatile=True)
    spins = tl.full([], 0, tl.int32)
    while (tl.sum(((w >> 32).to(tl.int32) != tag).to(tl.int32)) > 0) & (spins < 4194304):
        w = tl.load(ptrs, mask=mask, other=done, volatile=True)
        spins += 1
    # the copies are equal now: the first, exactly (zeros added)
    first = tl.broadcast_to(tl.arange(0, R)[:, None, None] == 0, [R, BLOCK_S, K])
    return tl.sum(tl.where(first, (w & 0xFFFFFFFF).to(tl.int32).to(tl.float32, bitcast=True), 0.0), 0)


@triton.jit
def column(stats, k: tl.constexpr):
    """Column k of collect's [BLOCK_S, K] result, as a [BLOCK_S] vector."""
    return tl.sum(tl.where(tl.arange(0, stats.shape[1])[None, :] == k, stats, 0.0), 1)


@triton.jit
def exchange_finish(sync_ptr, words, epoch, rounds):
    """Every program's last step: the last to finish moves the epoch past this launch's tags
    (epoch + 1 .. epoch + rounds) and resets the count.  Near 2**30 the epoch starts again from
    0, after that program has cleared all `words` of the buffer's slots (no program reads them
    any more, and a stale tag could otherwise match a new one)."""
    done = tl.atomic_add(sync_ptr + 1, 1, sem="acq_rel")
    if done == tl.num_programs(0) - 1:
        nxt = epoch + 1 + rounds
        if nxt >= _EPOCH_WRAP:
            for start in range(2, words, 1024):
                i = start + tl.arange(0, 1024)
                tl.store(sync_ptr + i, tl.zeros([1024], tl.int64), mask=i < words)
        tl.atomic_xchg(sync_ptr + 1, 0)
        tl.atomic_xchg(sync_ptr, tl.where(nxt >= _EPOCH_WRAP, 0, nxt).to(tl.int64))
