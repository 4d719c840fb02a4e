"""One set of kernels for every row-wise op: a reduction over each row of an (M, N) tensor, then
an element-wise step that uses its result (softmax, softmax backward, layernorm, ...).

An op is a `RowOp` (rowops.py): small @triton.jit functions, passed to the generic kernels below
as `tl.constexpr` arguments, so that each op's kernels are compiled from the same skeleton with
its own steps inlined.  rowops.launch_args turns an op, its inputs and a plan into a launch's
grid, constexprs and arguments; this module keeps the kernels and the cached run path.

Plan modes (launch_plans.RowPlan):

* tile:   a program holds BLOCK_M whole rows in registers: one read, one write.
* loop:   a program makes two passes over a row in BLOCK_N-column steps, a statistics pass and a
          writing pass that walks the row backwards (the chunks read last, most likely still in
          L2, are read first), then takes row + P.  STAGES None: plain loads; >= 2: tl.range's
          shared-memory pipeline; 1: the next step's loads issued into registers before this
          step is used.
* stream: as loop, on persistent programs, with both passes of all of a program's rows one chain
          of steps whose next loads are always in flight (a loop's passes drain at every pass
          and row boundary), and a row's last chunk written from registers instead of re-read.
* reread: persistent programs whose first pass takes big steps, each reduced at once to
          scalars (so a step can be a whole 32768-column row), and whose second pass re-reads
          the row, mostly from L2, in steps of BLOCK_N2.
* coop:   SPLITS programs per row each hold a chunk in registers and exchange their partial
          results (exchange.publish / collect): one read, one launch.  GPU only.

Memory access, the same for every op: a two-pass plan's first pass loads evict_last (the second
re-reads) and its second pass loads and stores evict_first (the output streaming through L2 must
not push out rows waiting for their second pass); one-read plans (tile, coop) and per-column
parameters load without a hint.  ALIGN (see
launch_plans.vector_align) divides N and the row strides; rewriting them as multiples of it lets the
compiler use 16-byte vectors for rows whose length is not a multiple of 16.  Row offsets are
64-bit (a tensor may exceed 2**31 elements); offsets within a row are 32-bit.  EVEN (ops with
`even` set): every step lies inside the row, so the tile and the plain loop drop their masks.

Host work per call (`call`): one dict lookup of a launcher keyed by the op, a forced plan, the
longest row kept on chip and the tensors' shapes, strides, dtypes, device and 16-byte alignment
(launch.signature) in the family's launch.LauncherCache, the outputs' allocation, and a launch
through a launch.Launch, which calls the compiled kernel's launcher directly.  The operands'
checks, the plan, grid, constexprs and exchange buffer are decided when a key is first seen; the
tuner is asked only then.
"""
from __future__ import annotations

from typing import Callable

import torch
import triton
import triton.language as tl

from fusebench.kernels import launch_plans, tuning
from fusebench.kernels.exchange import collect, coop_layout, exchange_finish, exchange_slots, publish, within
from fusebench.kernels.launch import STATE, Launch, is_final, signature
# Mode, RowOp and steps: the ops' modules (and sass.py) take them from here too.
from fusebench.kernels.rowops import Mode, RowOp, launch_args, steps  # noqa: F401


# ----------------------------------------------------------------------------------------------
# device-side helpers shared by the ops


@triton.jit
def load_at(ptr, mask, other, POLICY: tl.constexpr):
    """tl.load with `mask` (and `other`), or unmasked when mask is None."""
    if mask is None:
        return tl.load(ptr, eviction_policy=POLICY)
    else:
        return tl.load(ptr, mask=mask, other=other, eviction_policy=POLICY)


@triton.jit
def exp_ftz(x):
    """e^x as exp2(x log2(e)), which compiles to PTX's ex2.approx.ftz.  tl.exp's ex2.approx without
    ftz costs a compare and two multiplies more an element, to keep subnormal results: with one
    program an SM (rows of 32768 columns on chip) that work is on the critical path
    (docs/kernels.md, 'Row-wise reductions', Exponentials).  Results below 2^-126 (1.2e-38) become 0."""
    return tl.exp2(x * 1.4426950408889634)


@triton.jit
def tile_ptrs(ptr, row0, r, c, stride_m, stride_n):
    """Pointers to rows row0 + r, columns c (a [len(r), len(c)] block)."""
    return ptr + row0 * stride_m + r[:, None] * stride_m + c[None, :] * stride_n


# tl.reduce's combine for several sums at once: one exchange between warps instead of one a sum
@triton.jit
def add2(a1, a2, b1, b2):
    return a1 + b1, a2 + b2


@triton.jit
def add4(a1, a2, a3, a4, b1, b2, b3, b4):
    return a1 + b1, a2 + b2, a3 + b3, a4 + b4


# ----------------------------------------------------------------------------------------------
# the two passes of a looped row


@triton.jit
def _stats_pass(src, row, k, lo, hi, N, LOAD: tl.constexpr, INIT: tl.constexpr, ACC: tl.constexpr,
                TOTAL: tl.constexpr, BLOCK_N: tl.constexpr, STAGES: tl.constexpr, EVEN: tl.constexpr,
                PREFETCH_LOOP: tl.constexpr):
    # The statistics of columns [lo, hi) of `row`, lanes summed.
    c = tl.arange(0, BLOCK_N)
    state = INIT(BLOCK_N)
    if STAGES == 1 and PREFETCH_LOOP:  # the next step's loads in flight (registers) while this one is reduced
        cols = lo + c
        chunk = LOAD(src, row, cols, cols < N, "evict_last", False)
        for start in tl.range(lo + BLOCK_N, hi + BLOCK_N, BLOCK_N):
            cols_next = start + c
            chunk_next = LOAD(src, row, cols_next, (cols_next < N) & (cols_next < hi), "evict_last", False)
            state = ACC(chunk, state, cols < N, k)
            cols = cols_next
            chunk = chunk_next
    else:
        for start in tl.range(lo, hi, BLOCK_N, num_stages=STAGES):
            cols = start + c
            ok = within(cols, N, EVEN)
            state = ACC(LOAD(src, row, cols, ok, "evict_last", False), state, ok, k)
    return TOTAL(state)


@triton.jit
def _write_pass(src, prm, out_row, row, consts, lo, hi, N, LOAD: tl.constexpr, PARAMS: tl.constexpr,
                APPLY: tl.constexpr, BLOCK_N: tl.constexpr, STAGES: tl.constexpr, EVEN: tl.constexpr,
                PREFETCH_LOOP: tl.constexpr):
    # out[lo:hi] = APPLY(inputs), last chunk first (those were read last, most likely still in L2).
    c = tl.arange(0, BLOCK_N)
    n_chunks = tl.cdiv(hi - lo, BLOCK_N)
    if STAGES == 1 and PREFETCH_LOOP:  # the next (lower) chunk's loads in flight while this one is written
        cols = lo + (n_chunks - 1) * BLOCK_N + c
        chunk = LOAD(src, row, cols, cols < N, "evict_first", False)
        p = PARAMS(prm, cols, cols < N)
        for j in tl.range(1, n_chunks + 1):
            cols_next = cols - BLOCK_N
            ok = (cols_next < N) & (cols_next >= lo)
            chunk_next = LOAD(src, row, cols_next, ok, "evict_first", False)
            p_next = PARAMS(prm, cols_next, ok)
            tl.store(out_row + cols, APPLY(chunk, p, consts).to(out_row.dtype.element_ty), mask=cols < N,
                     eviction_policy="evict_first")
            cols = cols_next
            chunk = chunk_next
            p = p_next
    else:
        for j in tl.range(0, n_chunks, num_stages=STAGES):
            cols = lo + (n_chunks - 1 - j) * BLOCK_N + c
            ok = within(cols, N, EVEN)
            chunk = LOAD(src, row, cols, ok, "evict_first", False)
            p = PARAMS(prm, cols, ok)
            tl.store(out_row + cols, APPLY(chunk, p, consts).to(out_row.dtype.element_ty), mask=ok,
                     eviction_policy="evict_first")


@triton.jit
def _aligned(a_ptr, b_ptr, w_ptr, v_ptr, N, stride_am, stride_an, stride_bm, stride_bn, stride_om,
             ALIGN: tl.constexpr):
    # (N, src, prm, stride_om) with N and the row strides rewritten as multiples of ALIGN, which
    # divides them: that tells the compiler it may use 16-byte vectors.
    src = (a_ptr, b_ptr, stride_am // ALIGN * ALIGN, stride_an, stride_bm // ALIGN * ALIGN, stride_bn)
    return N // ALIGN * ALIGN, src, (w_ptr, v_ptr), stride_om // ALIGN * ALIGN


@triton.jit
def _save(stats_ptr, row, consts, ok, SAVE: tl.constexpr):
    # A row's first SAVE constants (or a tile's rows', where ok), [M, SAVE] fp32, for a backward
    # to read (LayerNorm: mean, rstd).
    for j in tl.static_range(SAVE):
        tl.store(stats_ptr + row * SAVE + j, consts[j], mask=ok)


# ----------------------------------------------------------------------------------------------
# the kernels: src = (a, b, a's row and column strides, b's), b is a for one-input ops;
# prm = (the per-column parameters' pointers); stats_ptr: where SAVE > 0 constants a row go


@triton.jit
def _tile_kernel(a_ptr, b_ptr, w_ptr, v_ptr, out_ptr, stats_ptr, M, N, stride_am, stride_an, stride_bm, stride_bn,
                 stride_om, eps, TILE: tl.constexpr, TILE_SAVING: tl.constexpr, ALIGN: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EVEN: tl.constexpr, WHOLE_ROWS: tl.constexpr,
                 PREFETCH: tl.constexpr, SAVE: tl.constexpr, WIDE: tl.constexpr):
    N, src, prm, stride_om = _aligned(a_ptr, b_ptr, w_ptr, v_ptr, N, stride_am, stride_an, stride_bm, stride_bn,
                                      stride_om, ALIGN)
    # 64-bit row offsets only where a tile can reach 2**31 elements (WIDE): 32-bit ones are as fast
    # or faster (docs/kernels.md, 'Row-wise reductions', Tile)
    if WIDE:
        row0 = tl.program_id(0).to(tl.int64) * BLOCK_M
    else:
        row0 = tl.program_id(0) * BLOCK_M
    r = tl.arange(0, BLOCK_M)
    c = tl.arange(0, BLOCK_N)
    # WHOLE_ROWS (one row per program) and EVEN (N == BLOCK_N): no row or column masks.
    mask = ((r < M - row0) | WHOLE_ROWS)[:, None] & within(c, N, EVEN)[None, :]
    if SAVE:
        y, consts = TILE_SAVING(src, prm, row0, r, c, mask, M, N, eps, PREFETCH)
        _save(stats_ptr, row0 + r, consts, r < M - row0, SAVE)
    else:
        y = TILE(src, prm, row0, r, c, mask, M, N, eps, PREFETCH)
    tl.store(out_ptr + row0 * stride_om + r[:, None] * stride_om + c[None, :], y.to(out_ptr.dtype.element_ty),
             mask=mask)


@triton.jit
def _loop_kernel(a_ptr, b_ptr, w_ptr, v_ptr, out_ptr, stats_ptr, M, N, stride_am, stride_an, stride_bm, stride_bn,
                 stride_om, eps, LOAD: tl.constexpr, PARAMS: tl.constexpr, SHIFT: tl.constexpr,
                 INIT: tl.constexpr, ACC: tl.constexpr, TOTAL: tl.constexpr, MERGE: tl.constexpr,
                 APPLY: tl.constexpr, ALIGN: tl.constexpr, BLOCK_N: tl.constexpr, STAGES: tl.constexpr,
                 EVEN: tl.constexpr, PREFETCH_LOOP: tl.constexpr, SAVE: tl.constexpr):
    N, src, prm, stride_om = _aligned(a_ptr, b_ptr, w_ptr, v_ptr, N, stride_am, stride_an, stride_bm, stride_bn,
                                      stride_om, ALIGN)
    # Rows pid, pid + P, ... (P = the grid size): a statistics pass, then a writing pass.
    pid = tl.program_id(0)
    n_prog = tl.num_programs(0)
    for i in tl.range(0, tl.cdiv(M - pid, n_prog)):
        row = (pid + i * n_prog).to(tl.int64)
        k = SHIFT(src, row, None)
        stats = _stats_pass(src, row, k, 0, N, N, LOAD, INIT, ACC, TOTAL, BLOCK_N, STAGES, EVEN, PREFETCH_LOOP)
        consts = MERGE(stats, N, eps, k)
        _save(stats_ptr, row, consts, True, SAVE)
        _write_pass(src, prm, out_ptr + row * stride_om, row, consts, 0, N, N, LOAD, PARAMS, APPLY,
                    BLOCK_N, STAGES, EVEN, PREFETCH_LOOP)


@triton.jit
def _stream_kernel(a_ptr, b_ptr, w_ptr, v_ptr, out_ptr, stats_ptr, M, N, stride_am, stride_an, stride_bm,
                   stride_bn, stride_om, eps, LOAD: tl.constexpr, PARAMS: tl.constexpr, SHIFT: tl.constexpr,
                   INIT: tl.constexpr, ACC: tl.constexpr, TOTAL: tl.constexpr, MERGE: tl.constexpr,
                   APPLY: tl.constexpr, ALIGN: tl.constexpr, BLOCK_N: tl.constexpr, SAVE: tl.constexpr):
    # Persistent programs (rows pid, pid + P, ...), each making both passes over its rows as one
    # chain of steps in which the next step's loads are always in flight, across the pass and row
    # boundaries too; the row's last chunk, read last by the first pass, is written first by the
    # second straight from registers.
    N, src, prm, stride_om = _aligned(a_ptr, b_ptr, w_ptr, v_ptr, N, stride_am, stride_an, stride_bm, stride_bn,
                                      stride_om, ALIGN)
    pid = tl.program_id(0)
    n_prog = tl.num_programs(0)
    c = tl.arange(0, BLOCK_N)
    n_chunks = tl.cdiv(N, BLOCK_N)
    last = (n_chunks - 1) * BLOCK_N  # first column of a row's last chunk
    row = pid.to(tl.int64)
    # The first row's chunk 0 (a program may have no row: the row bound is folded into the columns'
    # as the interpreter rejects a tensor mask `&` a scalar condition).
    chunk = LOAD(src, row, c, c < tl.where(row < M, N, 0), "evict_last", False)
    k = SHIFT(src, row, row < M)
    for i in tl.range(0, tl.cdiv(M - pid, n_prog)):
        out_row = out_ptr + row * stride_om
        # Pass 1, chunks 0 .. n-2 (`chunk` holds the current one): whole chunks.
        state = INIT(BLOCK_N)
        for start in tl.range(BLOCK_N, last + 1, BLOCK_N):  # start: the next chunk's first column
            chunk_next = LOAD(src, row, start + c, start + c < N, "evict_last", False)
            state = ACC(chunk, state, None, k)
            chunk = chunk_next
        # The last chunk: pass 2's next one (n-2, if any) in flight while the row's statistics are taken.
        p = PARAMS(prm, last + c, last + c < N)
        ok = last - BLOCK_N + c >= 0
        chunk_next = LOAD(src, row, last - BLOCK_N + c, ok, "evict_first", False)
        p_next = PARAMS(prm, last - BLOCK_N + c, ok)
        consts = MERGE(TOTAL(ACC(chunk, state, last + c < N, k)), N, eps, k)
        _save(stats_ptr, row, consts, True, SAVE)
        tl.store(out_row + last + c, APPLY(chunk, p, consts).to(out_row.dtype.element_ty), mask=last + c < N,
                 eviction_policy="evict_first")
        chunk = chunk_next
        p = p_next
        # Pass 2, chunks n-2 .. 1, whole chunks: no masks.
        for j in tl.range(1, n_chunks - 1):
            start = last - j * BLOCK_N  # the current chunk's first column
            chunk_next = LOAD(src, row, start - BLOCK_N + c, None, "evict_first", False)
            p_next = PARAMS(prm, start - BLOCK_N + c, None)
            tl.store(out_row + start + c, APPLY(chunk, p, consts).to(out_row.dtype.element_ty),
                     eviction_policy="evict_first")
            chunk = chunk_next
            p = p_next
        # Chunk 0 (if the row has more than one), with the next row's chunk 0 in flight.
        row_next = row + n_prog
        chunk_next = LOAD(src, row_next, c, c < tl.where(row_next < M, N, 0), "evict_last", False)
        k_next = SHIFT(src, row_next, row_next < M)
        tl.store(out_row + c, APPLY(chunk, p, consts).to(out_row.dtype.element_ty),
                 mask=c < tl.where(last > 0, N, 0), eviction_policy="evict_first")
        chunk = chunk_next
        k = k_next
        row = row_next


@triton.jit
def _reread_kernel(a_ptr, b_ptr, w_ptr, v_ptr, out_ptr, stats_ptr, M, N, stride_am, stride_an, stride_bm,
                   stride_bn, stride_om, eps, LOAD: tl.constexpr, PARAMS: tl.constexpr, SHIFT: tl.constexpr,
                   RINIT: tl.constexpr, RACC: tl.constexpr, MERGE: tl.constexpr, APPLY: tl.constexpr,
                   ALIGN: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_N2: tl.constexpr, SAVE: tl.constexpr):
    # Reducing each first-pass step to scalars at once leaves two row-sized values per thread (this
    # step's and the next one's), so a step can be a whole 32768-column row; the second pass
    # carries its next step's inputs and parameters.
    N, src, prm, stride_om = _aligned(a_ptr, b_ptr, w_ptr, v_ptr, N, stride_am, stride_an, stride_bm, stride_bn,
                                      stride_om, ALIGN)
    pid = tl.program_id(0)
    n_prog = tl.num_programs(0)
    c = tl.arange(0, BLOCK_N)
    c2 = tl.arange(0, BLOCK_N2)
    for i in tl.range(0, tl.cdiv(M - pid, n_prog)):
        row = (pid + i * n_prog).to(tl.int64)
        out_row = out_ptr + row * stride_om
        k = SHIFT(src, row, None)
        stats = RINIT()
        chunk = LOAD(src, row, c, c < N, "evict_last", False)
        for start in tl.range(BLOCK_N, N + BLOCK_N, BLOCK_N):  # start: the next step's first column
            chunk_next = LOAD(src, row, start + c, start + c < N, "evict_last", False)
            stats = RACC(chunk, stats, start - BLOCK_N + c < N, k)
            chunk = chunk_next
        consts = MERGE(stats, N, eps, k)
        _save(stats_ptr, row, consts, True, SAVE)
        # Pass 2, last step first (read last by pass 1: most likely still in L2).
        cols = (tl.cdiv(N, BLOCK_N2) - 1) * BLOCK_N2 + c2
        chunk = LOAD(src, row, cols, cols < N, "evict_first", False)
        p = PARAMS(prm, cols, cols < N)
        for j in tl.range(0, tl.cdiv(N, BLOCK_N2)):
            nxt = cols - BLOCK_N2
            ok = nxt >= 0  # (nxt < N: the step before a row's last is whole)
            chunk_next = LOAD(src, row, nxt, ok, "evict_first", False)
            p_next = PARAMS(prm, nxt, ok)
            tl.store(out_row + cols, APPLY(chunk, p, consts).to(out_row.dtype.element_ty), mask=cols < N,
                     eviction_policy="evict_first")
            cols = nxt
            chunk = chunk_next
            p = p_next


@triton.jit
def _coop_kernel(a_ptr, b_ptr, w_ptr, v_ptr, out_ptr, stats_ptr, sync_ptr, words, M, N, stride_am, stride_an,
                 stride_bm, stride_bn, stride_om, eps, SPLITS, LOAD: tl.constexpr, PARAMS: tl.constexpr,
                 SHIFT: tl.constexpr, STATS: tl.constexpr, MERGE: tl.constexpr, APPLY: tl.constexpr,
                 K: tl.constexpr, ALIGN: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_S: tl.constexpr,
                 PREFETCH: tl.constexpr, WARPS: tl.constexpr, STAGES: tl.constexpr, HOLD: tl.constexpr,
                 SAVE: tl.constexpr):
    N, src, prm, stride_om = _aligned(a_ptr, b_ptr, w_ptr, v_ptr, N, stride_am, stride_an, stride_bm, stride_bn,
                                      stride_om, ALIGN)
    # Program pid holds chunk (pid % SPLITS) of a row, in rounds of P / SPLITS rows (coop_layout).
    pid, rows_at_once, rounds, team, epoch, cols = coop_layout(sync_ptr, M, SPLITS, BLOCK_N)
    if HOLD:  # a program's columns are the same in every round: its parameters loaded once
        p = PARAMS(prm, cols, cols < N)
    if PREFETCH:  # the first row's chunk; later ones are loaded a round ahead
        first = (pid // SPLITS).to(tl.int64)
        chunk = LOAD(src, first, cols, cols < tl.where(first < M, N, 0), "", True)
    # STAGES 2: the compiler's pipeliner copies the next round's chunk into shared memory while
    # this round's programs exchange partials (the prefetch without its registers); it pipelines
    # only a load outside the `if`, hence the mask on rows past M.
    for rnd in tl.range(0, rounds, num_stages=STAGES):
        row = (rnd * rows_at_once + pid // SPLITS).to(tl.int64)
        if not PREFETCH:
            chunk = LOAD(src, row, cols, cols < tl.where(row < M, N, 0), "", True)
        if row < M:
            k = SHIFT(src, row, None)
            slots = exchange_slots(sync_ptr, pid, rnd)  # ahead of the statistics, as the per-op kernels had it
            chunk, local, parts = STATS(chunk, cols < N, k)
            publish(slots, parts, epoch + 1 + rnd)
            if PREFETCH:  # the next row's chunk is in flight while this row's partials arrive
                nxt = row + rows_at_once
                chunk_next = LOAD(src, nxt, cols, cols < tl.where(nxt < M, N, 0), "", True)
            # Parameters (from L2) in flight during the exchange where the registers allow it:
            # no prefetch, at most 8 values a thread (16 made ptxas spill under the register cap).
            EARLY: tl.constexpr = (not PREFETCH) and BLOCK_N <= 8 * 32 * WARPS and not HOLD
            if EARLY:
                p = PARAMS(prm, cols, cols < N)
            # The chunk stays in registers while the row's programs exchange partials.
            parts = collect(exchange_slots(sync_ptr, team, rnd), epoch + 1 + rnd, SPLITS, BLOCK_S, K, WARPS)
            consts = MERGE(parts, local, N, eps, k, SPLITS, BLOCK_S)
            _save(stats_ptr, row, consts, pid % SPLITS == 0, SAVE)  # the row's first program
            if not EARLY and not HOLD:
                p = PARAMS(prm, cols, cols < N)
            tl.store(out_ptr + row * stride_om + cols, APPLY(chunk, p, consts).to(out_ptr.dtype.element_ty),
                     mask=cols < N)
            if PREFETCH:
                chunk = chunk_next
    exchange_finish(sync_ptr, words, epoch, rounds)


# ----------------------------------------------------------------------------------------------
# launches and the cached run path


KERNELS = {Mode.TILE: _tile_kernel, Mode.LOOP: _loop_kernel, Mode.STREAM: _stream_kernel,
           Mode.REREAD: _reread_kernel, Mode.COOP: _coop_kernel}

# The modules whose source decides a row-wise launch (a tuned choice is kept for their code only).
SOURCE_MODULES = ("fusebench.kernels.rowwise", "fusebench.kernels.rowops", "fusebench.kernels.exchange")


def _launch_for(op: RowOp, ins, plan: launch_plans.RowPlan, save: bool = False) -> tuple[Launch, tuple]:
    """(the Launch, the runtime arguments after the six tensors) of `op` with `plan` on inputs
    laid out as `ins` (2-D, one shape), writing the rows' constants if `save` (rowops.launch_args)."""
    mode, grid, constants, rest = launch_args(op, ins, plan, save)
    return Launch(KERNELS[mode], (grid,), constants), rest


def launch(op: RowOp, ins, prm, out, plan: launch_plans.RowPlan, stats: torch.Tensor | None = None) -> None:
    """Launch `op` on inputs `ins` (row-sized, 2-D), parameters `prm`, into `out` (and the rows'
    constants into `stats`) with `plan`, through the JIT (the tuner's launches: each plan once or
    a few times)."""
    kernel, rest = _launch_for(op, ins, plan, save=stats is not None)
    a = ins[0]
    kernel.jit(a, ins[op.inputs - 1], prm[0] if prm else a, prm[-1] if prm else a, out,
               a if stats is None else stats, *rest)


class _RowLauncher:
    """Everything a call of one op on one key needs besides its tensors: the plan, the Launch
    and its other arguments, the outputs' shape and strides (launch None: empty outputs)."""

    __slots__ = ("plan", "launch", "rest", "shape", "stride", "two", "aux", "saved")

    def __init__(self, op: RowOp, ins, plan: launch_plans.RowPlan | None, save: bool = False):
        a = ins[0]
        M, N = a.shape
        # plain tuples: new_empty_strided parses them faster than torch.Size
        # (docs/kernels.md, 'One launcher per problem key')
        self.plan, self.shape, self.stride = plan, (M, N), (N, 1)
        self.two, self.aux = op.inputs > 1, op.aux_out
        self.saved = (M, op.saves) if save else None
        self.launch, self.rest = _launch_for(op, ins, plan, save) if a.numel() else (None, ())

    def __call__(self, ins, prm):
        a = ins[0]
        out = a.new_empty_strided(self.shape, self.stride)  # contiguous, a's dtype and device
        b = ins[1] if self.two else a
        if self.saved is not None:
            stats = a.new_empty(self.saved, dtype=torch.float32)
            if self.launch is not None:
                self.launch(a, b, prm[0], prm[-1], out, stats, *self.rest)
            return (out, stats), self.plan
        if self.aux:
            aux = a.new_empty_strided(self.shape, self.stride)
            if self.launch is not None:
                self.launch(a, b, prm[0], aux, out, a, *self.rest)
            return (aux, out), self.plan
        if self.launch is not None:
            if prm:
                self.launch(a, b, prm[0], prm[-1], out, a, *self.rest)
            else:
                self.launch(a, b, a, a, out, a, *self.rest)
        return out, self.plan


# (op name, forced plan, max_onchip, save, the tensors' signature) -> its _RowLauncher
_CACHE = STATE.launchers("rowwise")


def call(op: RowOp, ins, prm, candidates: Callable[..., list], plan: launch_plans.RowPlan | None, source,
        max_onchip: int = launch_plans.MAX_ONCHIP, save: bool = False):
    """(output, plan): `op` on `ins` with `plan`, or with the tuner's choice among
    `candidates(M, N, device, max_onchip=, elem_size=)` (the op's plan list).  With `save` (ops
    with `saves`), the output is (output, [M, op.saves] fp32: each row's constants).

    A call is one dict lookup of a launcher keyed by the op, `plan`, `max_onchip` and the tensors'
    shapes, strides, dtypes, device and alignment, the outputs' allocation and a launch.  Only a
    new key checks the operands, lists the candidates, asks the tuner and evaluates `source` (the
    code's hash, or a function returning it)."""
    found = _CACHE.get((op.name, plan, max_onchip, save, signature(*ins, *prm)))
    if found is None:
        return _first_call(op, ins, prm, candidates, plan, source, max_onchip, save)
    return found(ins, prm)


def _first_call(op: RowOp, ins, prm, candidates, plan, source, max_onchip, save):
    """call() for a key without a launcher: check the operands (an exotic layout is copied, and the
    copies run under a key of their own), then call the key's launcher, built by _build."""
    ins, prm = tuple(ins), tuple(prm)
    if len(ins) != op.inputs or len(prm) != op.n_params:
        raise ValueError(f"{op.name} takes {op.inputs} row input(s) and {op.n_params} parameter vector(s)")
    if save and (not op.saves or op.aux_out):
        raise ValueError(f"{op.name} saves no row constants")
    laid = tuple(launch_plans.as_2d_strided(t) for t in ins)  # raises unless 2-D
    N = laid[0].shape[1]
    if any(t.shape != laid[0].shape for t in laid):
        raise ValueError(f"{op.name}: inputs of shapes {[tuple(t.shape) for t in laid]} differ in shape")
    if any(t.dtype != laid[0].dtype for t in laid):
        raise ValueError(f"{op.name}: inputs of dtypes {[t.dtype for t in laid]} differ in dtype")
    if any(p.shape != (N,) for p in prm):
        raise ValueError(f"{op.name}: parameters must have shape ({N},), got {[tuple(p.shape) for p in prm]}")
    # Kernels index the parameters as dense tensors (a strided view is copied).
    dense = tuple(p.contiguous() for p in prm)
    if any(t is not u for t, u in zip((*laid, *dense), (*ins, *prm))):
        return call(op, laid, dense, candidates, plan, source, max_onchip, save)
    key = (op.name, plan, max_onchip, save, signature(*ins, *prm))
    return _CACHE.miss(key, _build, op, ins, prm, candidates, plan, source, max_onchip, save)(ins, prm)


def _build(op: RowOp, ins, prm, candidates, plan, source, max_onchip, save) -> tuple[_RowLauncher, bool]:
    """(the launcher of checked operands, whether its plan is final: launch.is_final): with
    `plan`, else with the tuner's choice among the candidates."""
    final = True
    if plan is None and ins[0].numel():
        M, N = ins[0].shape
        device = ins[0].device
        cands = candidates(M, N, device, max_onchip=max_onchip, elem_size=ins[0].element_size())
        out = torch.empty((M, N), dtype=ins[0].dtype, device=device)
        n = op.inputs
        # a saving run is tuned apart (docs/kernels.md, 'Saving costs some forward plans more
        # than others')
        if save:
            tuner_key = (op.name, "save", *tuning.key_of(*ins, *prm))
            operands = (*ins, *prm, torch.empty((M, op.saves), dtype=torch.float32, device=device), out)
            run_plan = lambda p, *o: launch(op, o[:n], o[n:-2], o[-1], p, stats=o[-2])  # noqa: E731
        else:
            tuner_key = (op.name, *tuning.key_of(*ins, *prm))
            aux = (torch.empty((M, N), dtype=ins[0].dtype, device=device),) if op.aux_out else ()
            operands = (*ins, *prm, *aux, out)
            run_plan = lambda p, *o: launch(op, o[:n], o[n:-1], o[-1], p)  # noqa: E731
        plan = tuning.autotune(tuner_key, cands, run_plan, device, operands,
                               source=source() if callable(source) else source)
        final = is_final(tuning.TUNER, tuner_key, device, len(cands))
    return _RowLauncher(op, ins, plan, save), final


def describe(shape, dtype) -> str:
    """The heuristic plan's description (the cell's note before the tuner has chosen)."""
    return launch_plans.row_plans(shape[0], shape[1], "cuda" if torch.cuda.is_available() else "cpu",
                           elem_size=torch.empty((), dtype=dtype).element_size())[0].describe()
