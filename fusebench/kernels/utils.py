"""Helpers shared by fusebench's Triton kernels.

Host side: sizes, device facts, launch plans for row-wise and element-wise kernels, vector
alignment, scratch counters and a small per-shape autotuner.  Device side (`@triton.jit`
helpers): a column mask that compiles away when a row is a whole number of steps, the exchange of
partial results among the programs that share one row, for cooperative kernels, and the sum of
partial results that other programs wrote.

Heuristics (documented here once, used by every memory-bound kernel):

* Elements per thread.  A program holds its tile in registers; about 16 fp32 values per thread
  (four 16-byte loads) keeps enough loads in flight to cover DRAM latency without spilling.
  `num_warps_for` turns a tile size into a warp count with that target.
* Rows on chip.  A row of up to `MAX_ONCHIP` elements is held by one program in registers
  (16384 fp32 values is 32 per thread at 16 warps), so a row reduction reads its input once.
  Rows up to twice that are also tried as one 32-warp program per row: on an H200 it won at
  32768 columns for softmax, double_softmax and (before a change that spilled it) layernorm.
* Longer rows (see RowPlan): `loop`, one program per row making two passes over it (the second
  mostly from L2); `split`, several programs per row and a second launch that combines their
  partial results and re-reads the row; `coop`, several programs per row that keep their chunks
  in registers and exchange their partial results (publish, collect), so the row is read once
  (a cooperative launch, which guarantees that all programs are resident, so that the wait for
  the others' partials cannot deadlock; GPU only: the interpreter runs programs one after
  another).  The heuristic's first choice is `split`
  for fewer rows than twice the SM count, else `loop`; on a GPU the autotuner times them all.
  Looped passes may also be software-pipelined (`stages` >= 2: loads of the next steps in flight
  through shared memory) or prefetched (`stages` = 1: the next step's loads issued into registers
  before this step is used), on a persistent grid.  What decides a looped plan at long rows is
  how much of the second pass hits L2 (bench/long_rows.py, Nsight Compute DRAM bytes, H200,
  65536 fp32 columns, session 7): with one program per row, or a pipelined persistent grid, the
  input is read 1.5-1.9x from DRAM; one 32-warp program per SM taking 16384-column steps,
  prefetched, reads it 1.05x and reaches ~0.9 of the copy rate for norm_chain and softmax at
  8192 rows.  Pipelined passes re-read more (1.5-2x) even at short reuse distances (not
  understood).  Row "teams" (several programs per row, each walking its part twice, exchanging
  partials one row behind) read 1.0-1.1x but stayed at 0.3-0.65 of the copy rate: removed.
  `split` wins for few rows.  `coop` with a per-row barrier (until session 16) read once but
  reached only 0.55-0.9 of the copy rate: its fences waited for the chunk's loads and the last
  row's stores.  Since session 17 the partials travel as tagged words with no fence (see
  `publish`), and the autotuner keeps `coop` at 512-8192 rows of 65536 columns for softmax,
  softmax_backward, layernorm and norm_chain (H100: 0.83-0.99 of the same-size copy), and since
  session 19, with the 32-values-a-thread shapes of COOP_SHAPES, for double_softmax at 128-4096
  rows (until then it kept `reread`: its chunks cost more arithmetic).  A cooperative plan's next
  round may come ahead into registers (`prefetch`) or, since session 21, through shared memory
  (`stages` = 2, the compiler's pipeliner: no registers, so the 32- and 64-values shapes can have
  it too; the autotuner kept them for layernorm at 128-2048x65536 and 1024x32768, H100).  The
  fit of the staged buffers is checked before a plan is a candidate (coop_stages_fit; on the H100
  no staged candidate failed to launch).  `reread` (session 13)
  reduces each first-pass step at once, so that its steps can be whole 32768-column rows: at
  4096x32768 layernorm reaches 0.93 of the same-size copy (whole rows in registers: 0.86; H200).
* Vector alignment.  Loads and stores are 16-byte vectors only when the compiler can prove the
  row starts aligned and the mask uniform over each vector, which it knows only for sizes and
  strides divisible by 16.  `vector_align` finds the largest power of two that divides a row's
  length and strides; kernels rewrite `n` as `n // ALIGN * ALIGN`, which tells the compiler.
* Cache hints.  The looped kernels load a row's first pass `evict_last` (it is read again) and
  the second `evict_first`, and store `evict_first` (so that the output streaming through L2 does
  not push out rows waiting for their second pass: measured 1.2x -> 1.1x DRAM reads).
  horizontal_reduction_reduction, which only reads, loads everything `evict_first`; the kernels
  that write as much as they read measured slower with that hint (see horizontal.py).  Lines
  loaded `evict_last` outlived the plain L2 flush used before session 6 into the next timed
  call; the flush now evicts them too (measure.timing).
* The first call for a shape on a GPU times each candidate plan (`autotune`, with the same
  timing as the cells: L2 flushed, host launch cost kept out, the same launch on copies of the
  operands after each flush) and keeps the fastest for that key; the CPU, the interpreter and
  CUDA-graph capture use the heuristic's first candidate.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass, replace
from typing import Callable, Hashable, Sequence, TypeVar

import torch
import triton
import triton.language as tl

from fusebench.measure.timing import TimeStats, TimingSettings, time_call, time_interleaved, warm_call

T = TypeVar("T")

# A row this long (in elements) or shorter is kept in one program's registers.
MAX_ONCHIP = 16384


# ----------------------------------------------------------------------------------------------
# sizes


def is_interpreter() -> bool:
    """True when Triton runs kernels in its CPU interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def prev_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n.bit_length() - 1)


def num_warps_for(elements: int, per_thread: int = 16, lo: int = 1, hi: int = 16) -> int:
    """Warps for a tile of `elements` so that each thread holds about `per_thread` of them."""
    w = next_pow2(cdiv(elements, 32 * per_thread))
    return max(lo, min(hi, w))


# ----------------------------------------------------------------------------------------------
# device facts


@functools.lru_cache(maxsize=None)
def _cuda_props(index: int):
    return torch.cuda.get_device_properties(index)


def _cuda_index(device) -> int:
    dev = torch.device(device)
    return dev.index if dev.index is not None else torch.cuda.current_device()


def num_sms(device) -> int:
    """Streaming multiprocessors of `device`.  On the CPU (the interpreter runs programs one
    after another) a small fixed count keeps plans, and tests, small and deterministic."""
    if torch.device(device).type != "cuda":
        return 4
    return _cuda_props(_cuda_index(device)).multi_processor_count


def shared_memory_per_program(device) -> int:
    """The most shared memory one program may take on `device` (Triton's driver: the opt-in limit
    per block, 227 KiB on sm_90).  On the CPU, sm_90's, so that plans and tests are the same."""
    if torch.device(device).type != "cuda":
        return 232448
    from triton.runtime import driver

    return driver.active.utils.get_device_properties(_cuda_index(device))["max_shared_mem"]


# ----------------------------------------------------------------------------------------------
# launch plans for kernels that reduce each row of a 2-D tensor


@dataclass(frozen=True)
class RowPlan:
    """How a row-wise kernel covers an (M, N) tensor.

    mode "tile":  each program holds `block_m` whole rows (`block_n` >= N columns) on chip.
    mode "loop":  a program walks a row in steps of `block_n` columns, then the next row
                  (`grid` programs; 0: one per row).
    mode "split": `splits` programs per row, each holding a chunk of `block_n` columns on chip;
                  a second launch combines their partial results and re-reads the chunks.
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

    def describe(self) -> str:
        if self.mode == "tile":
            early = ", parameters loaded with the rows" if self.prefetch else ""
            evict = ", evict_first loads" if self.evict_first else ""
            return f"rows on chip ({self.block_m}x{self.block_n}, {self.num_warps} warps{early}{evict})"
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


# The cooperative plans every two-pass kernel tries: (chunk, warps, programs per SM).  (8192, 8, 2)
# and (4096, 4, 4) hold 32 values a thread under a 128-register cap (64 with the prefetch): first
# layernorm's own, where they hold weight and bias too (1.02-1.04x, H100, session 18); prefetching,
# they are the fastest for double_softmax at 512-2048x65536 (0.88-0.93 of a same-size copy, against
# 0.79-0.85 for the others and 0.81-0.88 for re-read rows) and for softmax at 512x65536 (0.919
# against 0.895; H100, session 19, docs/device-runs/s19-call6).  The last, (4096, 2, 4), 64 values a
# thread at 2 warps under a 248-register cap, twice the bytes in flight per SM at half the warps, is
# layernorm's fastest at 512-1024 rows of 65536 columns, holding weight and bias without the
# prefetch (0.88 and 0.915 of a same-size copy against 0.86 and 0.90; H100, session 20,
# docs/device-runs/s20-call3); its autotuner kept it at 128-4096 rows of 65536 columns and at
# 1024x32768 (call 4).  Not shapes: 16 values a thread under a 128 cap (2048 at 4 warps, 4 an SM;
# 4096 at 8, 2 an SM; 1024 at 2, 8 an SM), where layernorm holds weight and bias with the prefetch
# too: slower than the 32-values plans for layernorm, softmax and double_softmax (0.80-0.85 against
# 0.86-0.92, call 2); 8192 at 4 warps and 16384 at 8 (64 values, 2 and 1 an SM): never the fastest
# (call 3).
COOP_SHAPES = ((8192, 16, 2), (4096, 8, 4), (8192, 16, 1), (4096, 16, 2), (8192, 8, 2), (4096, 4, 4), (4096, 2, 4))


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
    for the reductions' scratch.  softmax_backward's two inputs at 4 programs an SM do not: the
    cooperative launch fails (H100, session 21)."""
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
    the SM count) fit.  Without
    the cap, double_softmax and layernorm took 76-102 registers a thread at 8 and 16 warps, so
    that 4 (or 2) programs per SM, and the launch, did not fit; ptxas spills what the cap leaves
    out, at most 8 bytes in the kernels without a prefetch (sm_90, offline, session 17)."""
    per_sm = cdiv(plan.grid, num_sms(device))
    return dict(BLOCK_S=next_pow2(plan.splits), PREFETCH=plan.prefetch, WARPS=plan.num_warps,
                STAGES=plan.stages or 1, launch_cooperative_grid=True,
                maxnreg=coop_register_cap(per_sm, plan.num_warps))


def coop_register_cap(per_sm: int, num_warps: int) -> int:
    """Registers a thread may hold so that `per_sm` programs of `num_warps` warps share an SM's
    65536 (a multiple of 8, as registers are allocated; at most 255)."""
    return min(255, 65536 // (per_sm * num_warps * 32)) // 8 * 8


def coop_enabled(device) -> bool:
    """Cooperative plans need a GPU (the interpreter runs programs one after another, so a
    program waiting for another's partials would wait forever); FUSEBENCH_COOP=0 turns them off."""
    return torch.device(device).type == "cuda" and not is_interpreter() and os.environ.get("FUSEBENCH_COOP", "1") != "0"


def row_plans(M: int, N: int, device, *, max_onchip: int = MAX_ONCHIP, elem_size: int = 4,
              tile_prefetch: bool = False, streams: bool = False,
              rereads: bool = False, row_inputs: int = 1) -> list[RowPlan]:
    """Candidate plans for an (M, N) row-wise kernel, the heuristic's choice first.

    Rows on chip: the heuristic's tile, then tiles of 1/4 to 2x as many elements per program
    (smaller programs shorten the last wave of a small grid, larger ones cut per-program
    overhead), at 16 and at 8 elements per thread.  Longer rows: looped rows at several steps
    (smaller programs put more of them on an SM, hence more loads in flight), split and
    cooperative rows (COOP_SHAPES, each also prefetching, RowPlan.prefetch, and each also staged
    through shared memory where that fits, RowPlan.stages, with `row_inputs` row-sized inputs
    staged a program; one at one program per
    SM, whose registers hold a prefetch of two inputs; one of 8 values a thread, twice the threads:
    the fastest for softmax_backward at 512-2048 rows of 65536 columns, H100; 2048-column chunks at
    8 programs an SM were not faster than these, session 17; two of 32 values a thread and one of
    64, see COOP_SHAPES); rows up to twice `max_onchip` also try one 32-warp program per row (the
    whole row in registers, 32 fp32 values per thread at 32768 columns).

    `tile_prefetch`: the kernel's tile plan can load its per-column parameters with the rows; add
    that variant of every tile of at most 16 elements per thread (more would spill: measured 2x
    slower).  `streams`:
    the kernel has a "stream" mode; add those plans (one persistent program per SM, and two at
    8192-column steps: 0-2% faster at some long rows, session 11).  `rereads`: the kernel has a
    "reread" mode; add those plans (first-pass steps of 32768 and 16384 columns, second-pass steps
    of 8192).

    Inductor's kept config for softmax_backward at 1024x32768, one 32-warp program per row whose
    passes are one 32768-column step each (98.8 us on an H200), took 190 us as our looped plan in
    session 11: its column masks made ptxas spill.  Without them (utils.within) it is that case's
    fastest plan at 32768 columns (session 16), a candidate there (softmax.softmax_backward_plans).
    Not candidates: (session 11) launching our looped and streamed kernels with num_stages=1, as
    Inductor does, changed nothing; (session 13, 2048x65536) a running max per lane instead of per
    step in the streamed softmax: 0.58-0.81 against 0.83-0.87; (session 19, H100) cooperative plans
    whose last round cuts its fewer rows finer, so that every program shares them: no faster at
    512-2048 rows of 65536 columns, often slower (docs/device-runs/s19-call1).  A row's programs
    go through their rounds independently of other rows', so the last round's fewer rows already
    had more of the bandwidth each, and the per-round layout cost registers."""
    if N <= max_onchip:
        base = tile_plan(M, N, device)
        cands = [base]
        for scale in (1, 2, 4, 8):  # elements per program: base * 2 / scale
            bm = max(1, base.block_m * 2 // scale)
            if bm > next_pow2(M) or (bm == base.block_m and scale != 2):
                continue
            for per_thread in (16, 8):
                cands.append(tile_plan(M, N, device, bm, num_warps_for(bm * base.block_n, per_thread, lo=2, hi=32)))
        if tile_prefetch:
            cands += [replace(p, prefetch=True) for p in cands if p.block_m * p.block_n <= 16 * 32 * p.num_warps]
        return unique(cands)
    sms = num_sms(device)
    loops = [loop_plan(8192, 16), loop_plan(4096, 8), loop_plan(2048, 4), loop_plan(2048, 8), loop_plan(1024, 4),
             # pipelined: loads of the next steps in flight (shared memory) while this one is reduced;
             # a persistent grid then keeps fewer rows between a row's two passes, so that the
             # second pass finds them in L2
             loop_plan(4096, 8, stages=3), loop_plan(8192, 16, stages=2), loop_plan(4096, 8, grid=2 * sms, stages=3),
             loop_plan(8192, 16, grid=sms, stages=3), loop_plan(4096, 16, grid=sms, stages=4),
             # one program per SM, big steps, the next step's loads issued before this one is used
             # (registers, not shared memory): few rows between a row's two passes, so the second
             # finds them in L2 (about 1.05x the input read from DRAM at 65536 columns, against
             # 1.5-1.9x for the plans above), and still enough bytes in flight
             loop_plan(16384, 32, grid=sms, stages=1), loop_plan(8192, 32, grid=sms, stages=1),
             loop_plan(8192, 16, grid=sms, stages=1)]
    # the same, with the loads in flight across the pass and row boundaries too
    streamed = [stream_plan(device, 16384, 32), stream_plan(device, 8192, 32),
                stream_plan(device, 8192, 16), stream_plan(device, 8192, 16, per_sm=2)] if streams else []
    # Layernorm at 1024x32768, H200 (session 13): 0.84 of the same-size copy against 0.76 for the
    # streamed plan and the whole row in registers; at 2048x65536 0.79 against 0.73.
    streamed += [reread_plan(device, 32768, 8192, 32), reread_plan(device, 16384, 8192, 32)] if rereads else []
    splits = [split_plan(N, 4096), split_plan(N, 8192)]
    coops = [coop_plan(M, N, device, chunk, warps, per_sm, prefetch)
             for prefetch in (False, True)
             for chunk, warps, per_sm in COOP_SHAPES] if coop_enabled(device) else []
    # Staged 2 deep: layernorm's fastest at 512-1024 rows of 32768-65536 columns (0.89-0.91 of a
    # same-size copy against 0.87-0.90 unstaged, H100, session 21, docs/device-runs/s21-call1);
    # softmax and double_softmax stay faster with the prefetch in registers.  3 deep was no faster.
    coops += [p for p in (replace(c, stages=2) for c in coops if not c.prefetch)
              if coop_stages_fit(p, device, elem_size, row_inputs)]
    wide = [tile_plan(M, N, device, 1, 32), tile_plan(M, N, device, 1, 16)] if N <= 2 * max_onchip else []
    few_rows = M < 2 * sms
    return unique((splits + loops + streamed if few_rows else loops + streamed + splits) + coops + wide)


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

    Each candidate holds `size` elements (16 per thread: 8192 at 16 warps, the best measured on
    an H200; 1024 gets 4 warps): as wide as the rows allow up to 1024 columns (M == 1, a
    flattened tensor, takes the whole size in one row), the rest in rows.  Tiles that would leave
    fewer than `min_programs` programs (pass the SM count) are dropped.  When none is left, the
    tensor is small and latency-bound: it gets tiles of 1024, 512, 256 and 128 elements (4 warps),
    so that it is spread over as many SMs as it can fill, each thread with up to two vectors (the
    128-element tile, one element per thread, is what Inductor kept at 128x128 on an H200, where
    ours ran at 0.82x Inductor's speed without it: session 12, call 7).  Where only one tile is
    left (e.g. 256x1024: 256 tiles of 1024, the others too few), the tensor is nearly that small:
    the smaller tiles are candidates too (pointwise_chain 256x1024 was 0.95x Inductor with one
    candidate: session 13, paired timing)."""
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
# per-shape autotuning

_TUNED: dict[Hashable, object] = {}
# The plan of the latest autotune() answer (tuned or heuristic), for the cell's note.
_LAST_CHOICE: list = [None]


def autotune_enabled(device) -> bool:
    return (
        torch.device(device).type == "cuda"
        and not is_interpreter()
        and os.environ.get("FUSEBENCH_AUTOTUNE", "1") != "0"
        and not torch.cuda.is_current_stream_capturing()
    )


def autotune(key: Hashable, candidates: Sequence[T] | Callable[[], Sequence[T]], launch: Callable[..., object],
             device, operands: Sequence[torch.Tensor | None], n_outputs: int = 1) -> T:
    """The candidate to use for `key` (which must name the shape, dtype, strides and device).

    `launch(c, *operands)` launches candidate c on `operands` (the call's input tensors, then its
    `n_outputs` output tensors, or None for an output a variant does not write).  `candidates` may
    be a function that lists them, called only when `key` has no choice yet (it keeps the host's
    per-call cost low once a shape is tuned).

    On a GPU the first call for a key runs every candidate, timing each (median of a few runs,
    timed as cells are, see gpu_time_ms, with the warm call on copies of the operands, see
    shadow_operands) and keeps the fastest for later calls.  Elsewhere, or with
    FUSEBENCH_AUTOTUNE=0, the first candidate is used.  A candidate that fails to compile or launch
    (e.g. out of shared memory) is skipped.  Candidates within FINALIST_MARGIN of the fastest are
    then timed again, interleaved (finalist), and the fastest of those is kept."""
    if key in _TUNED:
        _LAST_CHOICE[0] = _TUNED[key]
        return _TUNED[key]  # type: ignore[return-value]
    if callable(candidates):
        candidates = candidates()
    if len(candidates) == 1 or not autotune_enabled(device):
        _LAST_CHOICE[0] = candidates[0]
        return candidates[0]
    shadow = shadow_operands(operands)
    best, best_ms, errors, timings = None, float("inf"), [], []
    for cand in candidates:
        warm = _warm_for(cand, launch, operands, shadow, n_outputs)
        try:
            ms = gpu_time_ms(lambda: launch(cand, *operands), device, warm=warm)
        except Exception as exc:  # noqa: BLE001 - a candidate may not fit this device
            errors.append(f"{cand}: {type(exc).__name__}: {exc}")
            continue
        timings.append((cand, ms))
        if ms < best_ms:
            best, best_ms = cand, ms
    if best is None:
        raise RuntimeError("no candidate config ran: " + "; ".join(errors))
    close = [c for c, ms in sorted(timings, key=lambda t: t[1]) if ms <= best_ms * FINALIST_MARGIN][:FINALISTS]
    final = finalist(close, launch, device, operands, shadow, best_ms, n_outputs=n_outputs) if len(close) > 1 else []
    if final:
        best = min(final, key=lambda t: t[1])[0]
    del shadow
    _TUNED[key] = best
    _LAST_CHOICE[0] = best
    log_path = os.environ.get("FUSEBENCH_AUTOTUNE_LOG")
    if log_path:  # a file to append each decision to, with every candidate's time
        with open(log_path, "a") as f:
            f.write(f"{key}\n" + "".join(f"    {ms:9.4f} ms  {c}\n" for c, ms in timings) + "".join(
                f"    failed: {e}\n" for e in errors) + "".join(
                f"    final {ms:9.4f} ms  {c}\n" for c, ms in final) + f"    kept {best}\n")
    return best


# Separately timed medians of a few-microsecond kernel move by a few percent from one timing to the
# next (clocks, the state a flush leaves), enough to swap near-equal candidates between processes
# (session 13: the same shapes 0.94x and 1.00x Inductor in two runs).  The candidates within 5%
# of the fastest are timed once more rep by rep in turn, where such drift falls on all alike.
FINALIST_MARGIN = 1.05
FINALISTS = 4


def finalist(cands: Sequence[T], launch: Callable[..., object], device, operands, shadow,
             best_ms: float, kernel_ms_budget: float = 100.0, n_outputs: int = 1) -> list[tuple[T, float]]:
    """(candidate, median ms) for `cands` timed interleaved (measure.timing.time_interleaved):
    10 to 50 rounds, as many as fit about kernel_ms_budget of their run time."""
    fns = [functools.partial(launch, c, *operands) for c in cands]
    warms = [_warm_for(c, launch, operands, shadow, n_outputs) for c in cands]
    rounds = max(10, min(50, int(kernel_ms_budget / (best_ms * len(cands)))))
    samples = time_interleaved(fns, _timing_device(device), TimingSettings(), rounds, warms)
    return [(c, sorted(t)[len(t) // 2] / 1e3) for c, t in zip(cands, samples)]


def shadow_operands(operands: Sequence[torch.Tensor | None],
                    max_bytes: int = TimingSettings.warm_call_max_bytes) -> list | None:
    """Copies of `operands` for the autotuner's warm call (measure.timing): new memory, same
    shapes, strides and alignment (so the JIT specializes them alike), inputs' values copied.
    None when they hold more than `max_bytes` together (as cells above it have no warm call)."""
    tensors = [t for t in operands if t is not None]
    if sum(t.numel() * t.element_size() for t in tensors) > max_bytes:
        return None

    def copy(t):
        if t is None:
            return None
        # The elements the view spans (non-negative strides), placed at the same offset from a
        # 128-byte boundary as the original's first element.
        span = 1 + sum((n - 1) * st for n, st in zip(t.shape, t.stride()) if n > 0) if t.numel() else 0
        offset = t.data_ptr() % 128 // t.element_size()
        base = torch.empty(offset + span, dtype=t.dtype, device=t.device)
        out = base.as_strided(t.shape, t.stride(), offset)
        return out.copy_(t)

    return [copy(t) for t in operands]


def gpu_time_stats(fn: Callable[[], object], device, budget_ms: float = 5.0, warmup_ms: float = 1.0,
                   max_reps: int = 100, warm: Callable[[], object] | None = None) -> TimeStats:
    """GPU time of fn, measured as fusebench measures cells (measure.timing: L2 flushed, then
    `warm` if given -- the same launch on other operands --, and a spin before each start event so
    that the host's launch cost, which exceeds a small kernel's run time, is not what gets
    compared), over about budget_ms of runs (5 to max_reps).  time_call's warm-up makes the first
    call, which compiles."""
    settings = TimingSettings(warmup_ms=warmup_ms, rep_ms=budget_ms, min_reps=5, max_reps=max_reps)
    return time_call(fn, _timing_device(device), settings, warm=warm)


def _timing_device(device) -> str:
    """`device` as measure.timing takes it: a CUDA device names its index."""
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    return str(dev)


def _warm_for(cand, launch: Callable[..., object], operands, shadow, n_outputs: int = 1) -> Callable[[], object] | None:
    """The warm call before each timed launch of `cand`: the same launch on the shadow operands,
    whose last `n_outputs` are then dropped from L2 as a cell's warm call drops its outputs
    (measure.timing.warm_call; before session 22 they stayed there, dirty).  None when there are
    no shadow operands (too large for a warm call, see shadow_operands)."""
    if shadow is None:
        return None
    outputs = tuple(shadow[len(shadow) - n_outputs:])

    def other():
        launch(cand, *shadow)
        return outputs

    return warm_call(other, operands)


def gpu_time_ms(fn: Callable[[], object], device, budget_ms: float = 5.0,
                warm: Callable[[], object] | None = None) -> float:
    """Median of gpu_time_stats in ms.  Used by `autotune` here and by gemm_utils.fastest
    (choosing between whole GEMM / conv implementations)."""
    return gpu_time_stats(fn, device, budget_ms, warm=warm).median_us / 1e3


def last_choice() -> object | None:
    """The plan autotune() returned most recently (None before any call); `forget_choice`
    clears it, so that a caller can tell whether its own call made one."""
    return _LAST_CHOICE[0]


def forget_choice() -> None:
    _LAST_CHOICE[0] = None


def tuned() -> dict[Hashable, object]:
    """The choices made so far, key -> candidate (for reports)."""
    return dict(_TUNED)


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


_COUNTERS: dict[str, torch.Tensor] = {}


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


def key_of(*tensors: torch.Tensor) -> tuple:
    """Autotuning key part that names shapes, dtypes, strides and device of `tensors`."""
    return tuple((tuple(t.shape), t.dtype, t.stride(), str(t.device)) for t in tensors)


# ----------------------------------------------------------------------------------------------
# device side: column masks


@triton.jit
def within(cols, N, EVEN: tl.constexpr):
    """The mask cols < N; all true, and compiled away, when EVEN (the launcher knows that every
    step lies inside the row).  Per-element masks hold registers: with two inputs at 32768-column
    steps they made ptxas spill, and Inductor's unmasked kernel did not (session 16)."""
    return (cols < N) | EVEN


@triton.jit
def first_chunk(ptr, row, M, N, stride_m, stride_n, other, BLOCK_N: tl.constexpr):
    """Columns [0, BLOCK_N) of `row` (loaded evict_last: a first pass that a second re-reads), or
    nothing but `other` when row >= M -- the streamed kernels' load of the next row's first chunk.
    The row condition is folded into the column bound: the interpreter rejects a tensor mask `&` a
    scalar condition."""
    c = tl.arange(0, BLOCK_N)
    return tl.load(ptr + row * stride_m + c * stride_n, mask=c < tl.where(row < M, N, 0), other=other,
                   eviction_policy="evict_last")


# ----------------------------------------------------------------------------------------------
# cooperative rows: the programs of one row exchange their partial results (GPU launches only)
#
# Each program publishes its chunk's statistics as 64-bit words, the fp32 value in the low half
# and a tag in the high half, and polls its row's words until all carry this round's tag: the
# word is its own flag, so no fence, counter or second read is needed.  (The barrier used until
# session 17 -- a release atomic, acquire polls, a re-read of the partials and an acq_rel atomic
# to leave -- waited for the chunk's loads and the last row's stores at its fences; the same plans
# with this exchange ran 1.07-1.39x faster, H100, docs/device-runs/s17-call2.)  Tags are
# unique per round and launch: round r of a launch uses epoch + 1 + r, and the last program to
# finish moves the epoch past them.  The epoch lives on the device, so a launch replayed from a
# CUDA graph still gets fresh tags.  Slots alternate by round parity: a program can be one round
# ahead of the others in its row, never two (round r + 1 needs their words of round r + 1, and a
# program publishes those only once all its warps have read round r's: the statistics' block-wide
# reduction is a CTA barrier; a kernel without one would need tl.debug_barrier() before publish).

SLOT_WORDS = 8  # words per program per round: at most 8 statistics
_EXCHANGE: dict[str, torch.Tensor] = {}  # device -> its exchange buffer
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
    (session 17, H100: wrong rows at 300x70000).  The poll gives up after 2**22 reads, so that a
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


@triton.jit
def sum_of_partials(parts_ptr, count, BLOCK: tl.constexpr):
    """The sum of `count` fp32 partial results at parts_ptr (BLOCK >= count, a power of two),
    read through L2 (.cg), where other programs wrote them."""
    i = tl.arange(0, BLOCK)
    return tl.sum(tl.load(parts_ptr + i, mask=i < count, other=0.0, cache_modifier=".cg"), 0)
