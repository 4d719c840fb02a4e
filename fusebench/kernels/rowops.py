"""What a row-wise op is, and what a plan gives its launch: the host-side description that
rowwise.py's generic kernels are launched from (no kernels here).

An op is a `RowOp`: small @triton.jit functions, passed to the generic kernels as `tl.constexpr`
arguments, so that each op's kernels are compiled from the same skeleton with its own steps
inlined:

    load(src, row, cols, mask, POLICY, F32)  a chunk of the row inputs (a tuple; in fp32 if F32)
    params(prm, cols, mask)             the per-column parameters at `cols` (a tuple, maybe empty)
    shift(src, row, mask)               a per-row constant the statistics are taken about (or 0)
    init(BLOCK_N)                       per-lane running statistics, empty
    acc(chunk, state, ok, k)            the statistics with one more chunk (`ok`: its columns < N,
                                        or None for a whole chunk)
    total(state)                        the per-lane statistics summed across lanes
    merge(stats, N, eps, k)             the row's constants for the element-wise step
    apply(chunk, p, consts)             the output at a chunk, in fp32
    tile(src, prm, row0, r, c, mask, M, N, eps, PREFETCH)  the output of whole rows held on chip
    coop_stats(chunk, ok, k)            (the chunk as kept, a chunk-local value, the partial
                                        results published to the row's other programs)
    coop_merge(parts, local, N, eps, k, SPLITS, BLOCK_S) the constants from all partials
    coop_apply(chunk, p, consts)        the output at a kept chunk
    reread_init(), reread_acc(chunk, stats, ok, k)  scalar statistics, a big step at a time
    tile_saving(...)                    as tile, returning (output, the rows' constants) (ops
                                        that save their constants for a backward, `saves`)
    tile_one_reduction(...)             as tile, the rows' statistics taken in one block-wide
                                        reduction (plans with one_reduction; softmax, double_softmax)

Ops with `saves` (LayerNorm: mean and rstd) write the first `saves` of a row's constants to an
[M, saves] fp32 tensor when run with save=True (SAVE, a constexpr: nothing is stored otherwise).

`launch_args(op, ins, plan, save)` is everything a launch of an op takes besides the kernel and
the tensors: the plan's mode (which of rowwise.KERNELS), the grid, the constexprs and options,
and the runtime arguments after the six tensors (the cooperative plans' exchange buffer among
them).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Callable

from fusebench.kernels import device, exchange, launch_plans


class Mode(enum.Enum):
    TILE = "tile"
    LOOP = "loop"
    STREAM = "stream"
    REREAD = "reread"
    COOP = "coop"


@dataclass(frozen=True)
class RowOp:
    """A row-wise op: its device-side steps (see the module docstring) and what it reads.

    `inputs`: row-sized inputs (1 or 2, of one dtype); `n_params`: per-column parameter vectors
    (0 to 2; with one, the kernels get it in both parameter slots); `aux_out`: the op also writes
    a second row-sized output (add_rmsnorm's sum of rows), through the last parameter slot as a
    pointer to its contiguous rows: run allocates it and returns (it, the output); `stats_k`: the
    words a cooperative program publishes; `even`: EVEN is passed (the op's plain loop and tile
    drop their masks where the steps allow it); `prefetch_loop`: STAGES 1 issues the
    next step's loads ahead (else it is tl.range's num_stages=1); `holds_params(plan, cap)`:
    whether a cooperative program keeps its parameters in registers across rounds; `saves`: how
    many of a row's constants (merge's first ones) a run with save=True writes for a backward,
    with `tile_saving(...)`, the tile step returning (output, the rows' constants)."""

    name: str
    load: object
    params: object
    shift: object
    init: object
    acc: object
    total: object
    merge: object
    apply: object
    tile: object
    coop_stats: object
    coop_merge: object
    coop_apply: object
    stats_k: int = 2
    saves: int = 0
    tile_saving: object = None
    tile_one_reduction: object = None
    reread_init: object = None
    reread_acc: object = None
    inputs: int = 1
    n_params: int = 0
    eps: float = 0.0
    even: bool = False
    prefetch_loop: bool = True
    aux_out: bool = False
    holds_params: Callable[[launch_plans.RowPlan, int], bool] | None = None

    @property
    def modes(self) -> frozenset[Mode]:
        modes = {Mode.TILE, Mode.LOOP, Mode.STREAM, Mode.COOP}
        return frozenset(modes | ({Mode.REREAD} if self.reread_acc is not None else set()))


# The op's steps each mode's kernel takes (kernel argument -> RowOp field).
_COMMON = dict(LOAD="load", PARAMS="params", SHIFT="shift")
_STEPS = {
    Mode.TILE: dict(TILE="tile", TILE_SAVING="tile_saving"),
    Mode.LOOP: dict(_COMMON, INIT="init", ACC="acc", TOTAL="total", MERGE="merge", APPLY="apply"),
    Mode.STREAM: dict(_COMMON, INIT="init", ACC="acc", TOTAL="total", MERGE="merge", APPLY="apply"),
    Mode.REREAD: dict(_COMMON, RINIT="reread_init", RACC="reread_acc", MERGE="merge", APPLY="apply"),
    Mode.COOP: dict(_COMMON, STATS="coop_stats", MERGE="coop_merge", APPLY="coop_apply"),
}


def steps(op: RowOp, mode: Mode) -> dict:
    """The constexpr arguments that make rowwise.KERNELS[mode] `op`'s kernel."""
    return {arg: getattr(op, field) for arg, field in _STEPS[mode].items()}


def _dims(op: RowOp, ins):
    """(M, N, a's row and column strides, b's, the output's row stride) and ALIGN for `ins`."""
    a = ins[0]
    b = ins[1] if op.inputs > 1 else a
    M, N = a.shape
    unit = all(t.stride(1) == 1 for t in ins)
    align = launch_plans.vector_align(a.element_size(), N, *(t.stride(0) for t in ins)) if unit else 1
    return (M, N, *a.stride(), *b.stride(), N), align  # the output is contiguous


def _tile(op, plan, dims, dev):
    M, N = dims[:2]
    even = op.even and N == plan.block_n
    meta = dict(BLOCK_M=plan.block_m, EVEN=even, WHOLE_ROWS=op.even and plan.block_m == 1, PREFETCH=plan.prefetch,
                WIDE=wide_offsets(dims, plan.block_m))
    if plan.one_reduction:
        if op.tile_one_reduction is None:
            raise ValueError(f"{op.name} has no one-reduction tile")
        meta["TILE"] = op.tile_one_reduction
    return device.cdiv(M, plan.block_m), meta


def wide_offsets(dims: tuple, block_m: int) -> bool:
    """Whether a tile of `block_m` rows over (M, N, row and column strides of every tensor: _dims's
    dims) can reach an element offset of 2**31 or more (rows past M included)."""
    M, N, *strides = dims
    rows, cols = strides[0::2], strides[1::2]
    return (M + block_m) * max(map(abs, rows)) + N * max(map(abs, cols)) >= 2**31


def _loop(op, plan, dims, dev):
    M, N = dims[:2]
    # the prefetching STAGES 1 still masks its load past the row's end
    even = op.even and N % plan.block_n == 0 and plan.stages is None
    return plan.grid or M, dict(STAGES=plan.stages, EVEN=even, PREFETCH_LOOP=op.prefetch_loop)


def _stream(op, plan, dims, dev):
    return plan.grid, {}


def _reread(op, plan, dims, dev):
    return plan.grid, dict(BLOCK_N2=plan.block_n2)


def _coop(op, plan, dims, dev):
    coop = launch_plans.coop_launch_args(plan, dev)
    hold = bool(op.holds_params and op.holds_params(plan, coop["maxnreg"]))
    return plan.grid, dict(K=op.stats_k, HOLD=hold, **coop)


# mode -> (op, plan, _dims's dims, dev) -> (programs, the launch's other constexprs and options)
_LAUNCH = {Mode.TILE: _tile, Mode.LOOP: _loop, Mode.STREAM: _stream, Mode.REREAD: _reread, Mode.COOP: _coop}


def launch_args(op: RowOp, ins, plan: launch_plans.RowPlan, save: bool = False) -> tuple[Mode, int, dict, tuple]:
    """(mode, programs, constexprs and options, the runtime arguments after the six tensors) of
    `op` with `plan` on inputs laid out as `ins` (2-D, one shape), writing the rows' constants if
    `save`; the cooperative plans' exchange buffer is among the runtime arguments."""
    mode = next((m for m in op.modes if m.value == plan.mode), None)
    if mode is None:
        raise ValueError(f"{op.name} has no {plan.mode} plan")
    dims, align = _dims(op, ins)
    dev = ins[0].device
    grid, meta = _LAUNCH[mode](op, plan, dims, dev)
    rest = (*dims, op.eps)
    if mode is Mode.COOP:  # the exchange buffer, and its size in words
        sync = exchange.exchange_buffer(dev, plan.grid)
        rest = (sync, sync.numel(), *rest, plan.splits)
    # meta may replace a step (the one-reduction tile)
    constants = {**steps(op, mode), "ALIGN": align, "BLOCK_N": plan.block_n, "num_warps": plan.num_warps,
                 "SAVE": op.saves if save else 0, **meta}
    return mode, grid, constants, rest
