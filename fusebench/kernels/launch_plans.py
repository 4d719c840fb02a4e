"""Launch plans of the row-wise and element-wise kernels, and the host-side helpers their
launchers share (vector alignment, strided views, scratch counters).

Heuristics, used by every memory-bound kernel:

* Elements per thread.  A program holds its tile in registers; about 16 fp32 values per thread
  (four 16-byte loads) keeps enough loads in flight to cover DRAM latency without spilling.
  `num_warps_for` turns a tile size into a warp count with that target.
* Rows on chip.  A row of up to `MAX_ONCHIP` elements is held by one program in registers
  (16384 fp32 values is 32 per thread at 16 warps), so a row reduction reads its input once.
  Rows up to twice that are also tried as one 32-warp program per row.
* Longer rows: looped, streamed, re-read and cooperative plans (see RowPlan and rowwise.py); the
  tuner times them all on a GPU.  What decides a looped plan at long rows is how much of the
  second pass hits L2: one 32-warp program per SM taking big steps, the next step prefetched,
  keeps few rows between a row's two passes, so the second pass finds them in L2.
* Vector alignment.  Loads and stores are 16-byte vectors only when the compiler can prove the
  row starts aligned and the mask uniform over each vector, which it knows only for sizes and
  strides divisible by 16.  `vector_align` finds the largest power of two that divides a row's
  length and strides; kernels rewrite `n` as `n // ALIGN * ALIGN`, which tells the compiler.
* The first call for a shape on a GPU times each candidate plan (tuning.autotune) and keeps the
  fastest; the CPU, the interpreter and CUDA-graph capture use the heuristic's first candidate.
  The kernels' launchers keep the plan per key, so that later calls neither list candidates nor
  ask the tuner (rowwise.call, pointwise._call, horizontal._horizontal).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence, TypeVar

import torch

from fusebench import settings
from fusebench.kernels.device import (REGISTERS_PER_SM, cdiv, is_interpreter, next_pow2, num_sms,
                                      shared_memory_per_program)
from fusebench.kernels.launch import STATE

T = TypeVar("T")

# A row this long (in elements) or shorter is kept in one program's registers.
MAX_ONCHIP = 16384


def num_warps_for(elements: int, per_thread: int = 16, lo: int = 1, hi: int = 16) -> int:
    """Warps for a tile of `elements` so that each thread holds about `per_thread` of them."""
    w = next_pow2(cdiv(elements, 32 * per_thread))
    return max(lo, min(hi, w))


# ----------------------------------------------------------------------------------------------
# launch plans for kernels that reduce each row of a 2-D tensor


@dataclass(frozen=True)
class RowPlan:
    """How a row-wise kernel covers an (M, N) tensor.

    mode "tile":  each program holds `block_m` whole rows (`block_n` >= N columns) on chip.
    mode "loop":  a program walks a row in steps of `block_n` columns, then the next row
                  (`grid` programs; 0: one per row).
    mode "split": (the horizontal kernels) `splits` programs per row, each holding a chunk of
                  `block_n` columns on chip; a second launch combines their partial results.
    mode "stream": `grid` persistent programs walk their rows as "loop" does (a statistics pass,
                  then a backwards writing pass), but as one chain of `block_n`-column steps whose
                  next loads are always in flight, across pass and row boundaries too; a row's last
                  chunk is written from registers, not re-read.
    mode "coop":  `grid` programs (a multiple of `splits`) take `grid / splits` rows at a time,
                  `splits` programs per row, each holding a chunk of `block_n` columns in
                  registers while the row's programs exchange partial results: one launch, one
                  read.
    mode "reread": `grid` persistent programs; a first pass over a row in big steps of `block_n`
                  columns (a 32768-column row in one), each reduced at once to scalars, the next
                  step's loads in flight; then the row re-read backwards (mostly from L2) in steps
                  of `block_n2`, the next step's loads in flight.
    """

    mode: str
    block_m: int
    block_n: int
    num_warps: int
    splits: int = 1
    grid: int = 0
    # Load ahead what a later step needs -- coop: the next row's chunk before waiting for this row's
    # partials; tile: the per-column parameters (layernorm's weight and bias) together with the rows,
    # one memory round trip fewer before the store, three row-sized values per thread instead of one.
    prefetch: bool = False
    # loop: software-pipeline each pass's loads this deep through shared memory (None: not at all;
    # 1: the next step's loads are issued, into registers, before this step is used).  coop: 2 or
    # more, the compiler copies the next rounds' chunks into shared memory during this round's
    # exchange (the prefetch without its registers); None, not at all.
    stages: int | None = None
    # reread: the second pass's step
    block_n2: int = 0
    # Load the input evict_first (the horizontal kernels, which otherwise do so only when they
    # write no cos output: see horizontal._launch).
    evict_first: bool = False
    # tile: take the rows' statistics in one block-wide reduction (the op's tile_one_reduction step:
    # one exchange between warps instead of two)
    one_reduction: bool = False

    def describe(self) -> str:
        if self.mode == "tile":
            early = ", parameters loaded with the rows" if self.prefetch else ""
            evict = ", evict_first loads" if self.evict_first else ""
            one = ", one reduction" if self.one_reduction else ""
            return f"rows on chip ({self.block_m}x{self.block_n}, {self.num_warps} warps{early}{evict}{one})"
        if self.mode == "loop":
            progs = f", {self.grid} programs" if self.grid else ""
            stages = (", next step prefetched" if self.stages == 1 else
                      f", loads pipelined {self.stages} deep" if self.stages else "")
            rows = f"{self.block_m} rows, " if self.block_m > 1 else ""
            evict = ", evict_first loads" if self.evict_first else ""
            return f"looped rows ({rows}step {self.block_n}, {self.num_warps} warps{progs}{stages}{evict})"
        if self.mode == "stream":
            return f"streamed rows (step {self.block_n}, {self.num_warps} warps, {self.grid} programs)"
        if self.mode == "reread":
            return (f"re-read rows (steps {self.block_n} then {self.block_n2}, {self.num_warps} warps, "
                    f"{self.grid} programs)")
        if self.mode == "coop":
            ahead = (", prefetching" if self.prefetch else
                     f", loads pipelined {self.stages} deep" if self.stages else "")
            return (f"cooperative rows ({self.splits} x {self.block_n}, {self.num_warps} warps, "
                    f"{self.grid} programs{ahead})")
        return f"split rows ({self.splits} x {self.block_n}, {self.num_warps} warps)"


def tile_plan(M: int, N: int, device, block_m: int | None = None, num_warps: int | None = None) -> RowPlan:
    """Rows on chip: whole rows, several per program when rows are short.

    About 4096 elements per program (16 KB of fp32) unless that leaves fewer than two programs
    per SM, in which case fewer rows per program."""
    bn = max(16, next_pow2(N))
    if block_m is None:
        block_m = max(1, 4096 // bn)
        while block_m > 1 and cdiv(M, block_m) < 2 * num_sms(device):
            block_m //= 2
    if num_warps is None:
        num_warps = num_warps_for(block_m * bn, per_thread=16, lo=4, hi=16)
    return RowPlan("tile", block_m, bn, num_warps)


def loop_plan(block_n: int = 4096, num_warps: int | None = None, grid: int = 0, stages: int | None = None,
              rows: int = 1) -> RowPlan:
    """Looped rows; `rows` > 1 (kernels that accept it: the horizontal ones) streams that many
    rows side by side."""
    return RowPlan("loop", rows, block_n, num_warps or num_warps_for(rows * block_n, per_thread=16, lo=4, hi=16),
                   grid=grid, stages=stages)


def stream_plan(device, block_n: int = 16384, num_warps: int = 32, per_sm: int = 1) -> RowPlan:
    """Streamed rows: `per_sm` persistent programs per SM."""
    return RowPlan("stream", 1, block_n, num_warps, grid=per_sm * num_sms(device))


def reread_plan(device, block_n: int = 32768, block_n2: int = 8192, num_warps: int = 32) -> RowPlan:
    """Re-read rows: one persistent program per SM."""
    return RowPlan("reread", 1, block_n, num_warps, grid=num_sms(device), block_n2=block_n2)


def split_plan(N: int, chunk: int = 4096, num_warps: int | None = None) -> RowPlan:
    chunk = next_pow2(chunk)
    return RowPlan("split", 1, chunk, num_warps or num_warps_for(chunk, per_thread=16, lo=4, hi=16), cdiv(N, chunk))


# The cooperative plans every two-pass kernel tries: (chunk, warps, programs per SM).  Each is the
# fastest for some op and row count at long rows (docs/kernels.md, 'Chunk shapes'): (8192, 8, 2)
# and (4096, 4, 4) hold 32 values a thread under a 128-register cap (64 with the prefetch);
# (4096, 2, 4) holds 64 a thread at 2 warps under a 248-register cap (twice the bytes in flight
# per SM at half the warps).
COOP_SHAPES = ((8192, 16, 2), (4096, 8, 4), (8192, 16, 1), (4096, 16, 2), (8192, 8, 2), (4096, 4, 4), (4096, 2, 4))
# For 2-byte rows also 8192-column chunks at 4 warps (64 values a thread, 4 programs an SM): a
# round's exchange costs what it does in fp32 while a 2-byte chunk brings half the bytes, and
# with the prefetch it is the fastest plan for softmax at 512-16384 rows of 32768-65536 bf16
# columns, ahead of the streamed ones (docs/kernels.md, '2-byte rows').
COOP_SHAPES_2BYTE = ((8192, 4, 4),)


def coop_plan(M: int, N: int, device, chunk: int = 8192, num_warps: int = 16, per_sm: int = 2,
              prefetch: bool = False, stages: int | None = None) -> RowPlan:
    """Cooperative rows: `per_sm` programs per SM (coop_launch_args caps their registers so that
    they fit), grouped `splits` to a row, at most M rows at a time.  With `prefetch` each program
    loads its chunk of the next row before it waits for this row's partials, so that DRAM stays
    busy while the row's programs exchange them (twice the registers); `stages` does the same
    through shared memory (stages - 1 chunks ahead, `stages` chunk-sized buffers a program)."""
    if prefetch and stages:
        raise ValueError("a cooperative plan prefetches into registers or through shared memory, not both")
    chunk = next_pow2(chunk)
    splits = cdiv(N, chunk)
    rows_at_once = max(1, min(M, num_sms(device) * per_sm // splits))
    return RowPlan("coop", 1, chunk, num_warps, splits, rows_at_once * splits, prefetch, stages)


def coop_stages_fit(plan: RowPlan, device, elem_size: int = 4, row_inputs: int = 1) -> bool:
    """Whether a cooperative plan staged through shared memory (plan.stages chunks of each of the
    kernel's `row_inputs` inputs a program) still fits its programs per SM, with 2 KiB a program
    for the reductions' scratch (a cooperative launch that does not fit fails: softmax_backward's
    two inputs at 4 programs an SM, for one)."""
    return stages_fit(cdiv(plan.grid, num_sms(device)), plan.stages or 0, plan.block_n, elem_size, row_inputs,
                      shared_memory_per_program(device))


def stages_fit(per_sm: int, stages: int, block_n: int, elem_size: int, row_inputs: int, shared_memory: int) -> bool:
    """coop_stages_fit for `per_sm` programs an SM, each staging `stages` chunks of `block_n`
    elements of each input, under a per-program limit of `shared_memory` bytes."""
    # the SM's shared memory is 1 KiB more than a program's limit: this errs on the safe side
    return per_sm * (stages * block_n * elem_size * row_inputs + 2048) <= shared_memory


def coop_launch_args(plan: RowPlan, device) -> dict:
    """What every cooperative kernel takes from its plan: the constexprs BLOCK_S (the splits,
    rounded up to a power of two), PREFETCH, WARPS and STAGES (1: not staged), and the launch
    options: a cooperative grid, and a register cap that lets its programs per SM (plan.grid over
    the SM count) fit: uncapped, ptxas gives the 8- and 16-warp kernels more registers than 2 or 4
    programs an SM leave, and the launch fails; what the cap leaves out is spilled (a few bytes)."""
    per_sm = cdiv(plan.grid, num_sms(device))
    return dict(BLOCK_S=next_pow2(plan.splits), PREFETCH=plan.prefetch, WARPS=plan.num_warps,
                STAGES=plan.stages or 1, launch_cooperative_grid=True,
                maxnreg=coop_register_cap(per_sm, plan.num_warps))


def coop_register_cap(per_sm: int, num_warps: int) -> int:
    """Registers a thread may hold so that `per_sm` programs of `num_warps` warps share an SM's
    REGISTERS_PER_SM (a multiple of 8, as registers are allocated; at most 255)."""
    return min(255, REGISTERS_PER_SM // (per_sm * num_warps * 32)) // 8 * 8


def coop_enabled(device) -> bool:
    """Cooperative plans need a GPU (the interpreter runs programs one after another, so a
    program waiting for another's partials would wait forever); FUSEBENCH_COOP=0 turns them off."""
    return torch.device(device).type == "cuda" and not is_interpreter() and settings.current().coop


def row_plans(M: int, N: int, device, *, max_onchip: int = MAX_ONCHIP, elem_size: int = 4,
              tile_prefetch: bool = False, streams: bool = False, rereads: bool = False, splits: bool = False,
              row_inputs: int = 1, one_reduction: bool = False) -> list[RowPlan]:
    """Candidate plans for an (M, N) row-wise kernel, the heuristic's choice first.

    Rows on chip: the heuristic's tile, then tiles of 1/4 to 2x as many elements per program
    (smaller programs shorten the last wave of a small grid, larger ones cut per-program
    overhead), at 16 and at 8 elements per thread (one warp where that leaves a warp a row of up
    to 512 elements: its reductions need no barrier).  Longer rows: looped rows at several steps
    (smaller programs put more of them on an SM, hence more loads in flight) and cooperative rows
    (COOP_SHAPES, each also prefetching, RowPlan.prefetch, and each also staged through shared
    memory where that fits, RowPlan.stages, with `row_inputs` row-sized inputs staged a program);
    rows up to twice `max_onchip` also try one 32-warp program per row (the whole row in
    registers, 32 fp32 values per thread at 32768 columns).

    `tile_prefetch`: the kernel's tile plan can load its per-column parameters with the rows; add
    that variant of every tile of at most 16 elements per thread (more spills).  `streams`: add
    the "stream" plans (one persistent program per SM, and two at 8192-column steps).  `rereads`:
    add the "reread" plans (first-pass steps of 32768 and 16384 columns, second-pass steps of
    8192).  `splits` (the horizontal kernels): add "split" plans, first where there are fewer rows
    than twice the SM count.  `one_reduction`: add the one-reduction variant (RowPlan.one_reduction)
    of every tile of one row of at least 4096 columns a program (below that it is no faster, and
    more candidates there only give the tuner's noise more chances).  Each kind of plan is kept
    because it is the fastest somewhere (docs/kernels.md, 'Row-wise reductions', has the
    measurements)."""
    if N <= max_onchip:
        base = tile_plan(M, N, device)
        cands = [base]
        for scale in (1, 2, 4, 8):  # elements per program: base * 2 / scale
            bm = max(1, base.block_m * 2 // scale)
            if bm > next_pow2(M) or (bm == base.block_m and scale != 2):
                continue
            for per_thread in (16, 8):
                cands.append(tile_plan(M, N, device, bm, num_warps_for(bm * base.block_n, per_thread, lo=1, hi=32)))
        if tile_prefetch:
            cands += [replace(p, prefetch=True) for p in cands if p.block_m * p.block_n <= 16 * 32 * p.num_warps]
        return unique(cands + _one_reduction(cands, one_reduction))
    sms = num_sms(device)
    loops = [loop_plan(8192, 16), loop_plan(4096, 8), loop_plan(2048, 4), loop_plan(2048, 8), loop_plan(1024, 4),
             # pipelined: loads of the next steps in flight (shared memory) while this one is reduced;
             # a persistent grid then keeps fewer rows between a row's two passes, so that the
             # second pass finds them in L2
             loop_plan(4096, 8, stages=3), loop_plan(8192, 16, stages=2), loop_plan(4096, 8, grid=2 * sms, stages=3),
             loop_plan(8192, 16, grid=sms, stages=3), loop_plan(4096, 16, grid=sms, stages=4),
             # one program per SM, big steps, the next step's loads issued before this one is used
             # (registers, not shared memory): few rows between a row's two passes, so the second
             # finds them in L2 (the input read from DRAM little more than once, against up to
             # twice for the plans above; docs/kernels.md, 'Loop'), and still enough bytes in flight
             loop_plan(16384, 32, grid=sms, stages=1), loop_plan(8192, 32, grid=sms, stages=1),
             loop_plan(8192, 16, grid=sms, stages=1)]
    # the same, with the loads in flight across the pass and row boundaries too
    streamed = [stream_plan(device, 16384, 32), stream_plan(device, 8192, 32),
                stream_plan(device, 8192, 16), stream_plan(device, 8192, 16, per_sm=2)] if streams else []
    streamed += [reread_plan(device, 32768, 8192, 32), reread_plan(device, 16384, 8192, 32)] if rereads else []
    split = [split_plan(N, 4096), split_plan(N, 8192)] if splits else []
    shapes = COOP_SHAPES + (COOP_SHAPES_2BYTE if elem_size == 2 else ())
    coops = [coop_plan(M, N, device, chunk, warps, per_sm, prefetch)
             for prefetch in (False, True)
             for chunk, warps, per_sm in shapes] if coop_enabled(device) else []
    # staged 2 deep (3 deep is no faster: docs/kernels.md, 'The next round's chunk in flight')
    coops += [p for p in (replace(c, stages=2) for c in coops if not c.prefetch)
              if coop_stages_fit(p, device, elem_size, row_inputs)]
    wide = [tile_plan(M, N, device, 1, 32), tile_plan(M, N, device, 1, 16)] if N <= 2 * max_onchip else []
    few_rows = M < 2 * sms
    return unique((split + loops + streamed if few_rows else loops + streamed + split) + coops + wide
                  + _one_reduction(wide, one_reduction))


def _one_reduction(tiles: list[RowPlan], on: bool) -> list[RowPlan]:
    return [replace(p, one_reduction=True) for p in tiles if p.block_m == 1 and p.block_n >= 4096] if on else []


@dataclass(frozen=True)
class TilePlan:
    """A (block_m, block_n) tile per program for an element-wise kernel over an (M, N) tensor."""

    block_m: int
    block_n: int
    num_warps: int
    # Launch order: 1, column blocks fastest; g > 1, g row blocks down before the next column block
    # (kernels that accept it: the transposed one, whose (N, M) operands are contiguous along M).
    group_m: int = 1
    # Column-major output (kernels that accept it: the transposed one, see pointwise.py).
    out_t: bool = False
    # The loads' L2 eviction policy ("", "evict_first" or "evict_last"; the element-wise kernels,
    # see pointwise.element_wise_plans and TRANSPOSED_HINTED_PLANS).
    evict: str = ""

    def describe(self) -> str:
        order = f", {self.group_m} row blocks grouped" if self.group_m > 1 else ""
        layout = ", column-major output" if self.out_t else ""
        evict = f", {self.evict} loads" if self.evict else ""
        return f"tiles {self.block_m}x{self.block_n}, {self.num_warps} warps{order}{layout}{evict}"


def tile_2d_plans(M: int, N: int, sizes: Sequence[int] = (8192, 4096, 16384, 1024),
                  min_programs: int = 0) -> list[TilePlan]:
    """Candidate tiles for an element-wise kernel, the heuristic's choice first.

    Each candidate holds `size` elements (16 per thread: 8192 at 16 warps, the best measured,
    docs/kernels.md, 'Element-wise kernels'; 1024 gets 4 warps): as wide as the rows allow up to 1024 columns (M == 1, a
    flattened tensor, takes the whole size in one row), the rest in rows.  Tiles that would leave
    fewer than `min_programs` programs (pass the SM count) are dropped.  When none is left, the
    tensor is small and latency-bound: it gets tiles of 1024, 512, 256 and 128 elements (4 warps),
    so that it is spread over as many SMs as it can fill, each thread with up to two vectors (the
    128-element tile, one element per thread, is what Inductor keeps at 128x128).  Where only one
    tile is left (e.g. 256x1024: 256 tiles of 1024, the others too few), the tensor is nearly that
    small: the smaller tiles are candidates too."""
    def tile(size):
        bn = min(size, max(16, next_pow2(N))) if M == 1 else min(1024, size, max(16, next_pow2(N)))
        bm = max(1, min(size // bn, next_pow2(M)))
        return TilePlan(bm, bn, num_warps_for(bm * bn, per_thread=16, lo=4, hi=32))

    spread = [p for p in map(tile, sizes) if cdiv(M, p.block_m) * cdiv(N, p.block_n) >= min_programs]
    small = [tile(size) for size in (1024, 512, 256, 128)]
    return unique(spread + small if len(spread) < 2 else spread)


def unique(items: list[T]) -> list[T]:
    seen, out = set(), []
    for it in items:
        if it not in seen:
            seen.add(it)
            out.append(it)
    return out


# ----------------------------------------------------------------------------------------------
# tensors


def as_2d_strided(t: torch.Tensor) -> torch.Tensor:
    """`t` itself when its element offsets fit in int32 along a row, else a contiguous copy.

    Kernels take a 64-bit row stride but compute in-row offsets `col * col_stride` in 32 bits;
    only an exotic view (a column stride times the row length past 2**31) is copied."""
    if t.dim() != 2:
        raise ValueError(f"expected a 2-D tensor, got shape {tuple(t.shape)}")
    if t.shape[1] > 0 and (t.shape[1] - 1) * abs(t.stride(1)) >= 2**31:
        return t.contiguous()
    return t


def vector_align(elem_size: int, *sizes: int) -> int:
    """The largest power of two, at most one 16-byte vector of elements, dividing every size.

    Pass a row's length and its row strides (in elements): kernels rewrite them as multiples of
    the result, so that the compiler can use 16-byte loads where the rows allow it."""
    a = max(1, 16 // elem_size)
    while a > 1 and any(n % a for n in sizes):
        a //= 2
    return a


# device -> its counters
_COUNTERS = STATE.table("plans.counters")


def zeroed_counters(device, n: int) -> torch.Tensor:
    """At least n int32 counters on `device`, zero, shared by every kernel that uses them and
    leaves them zero when it finishes (no memset between calls).  Two such kernels running at
    once on different streams of one device would share them; fusebench runs one at a time."""
    key = str(torch.device(device))
    buf = _COUNTERS.get(key)
    if buf is None or buf.numel() < n:
        buf = torch.zeros(max(n, 4096), dtype=torch.int32, device=device)
        _COUNTERS[key] = buf
    return buf
