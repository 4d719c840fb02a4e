"""Backward of LayerNorm, and of RMSNorm (the same kernels without the mean and the bias).

With y = x-hat * w + b, x-hat = (x - mean) * rstd and g = dy * w:
    dx = rstd * (g - mean(g) - x-hat * mean(g * x-hat))
    dw = sum over rows of dy * x-hat,   db = sum over rows of dy
RMSNorm has no mean (x-hat = x * rstd) and no bias: dx = rstd * (g - x-hat * mean(g * x-hat)).
add_rmsnorm's gradient of h (dh) is added to dx in the same kernel.

Each row's mean and rstd are recomputed here from the row in hand, but for the cooperative kernel,
which reads the forward's (the autograd Functions save them where it runs): there the sums a row
are what a team exchanges and waits for, and exchanging half as many (LayerNorm two, RMSNorm one)
is faster, but for fp32 RMSNorm (reads_saved_stats).  Where a program holds whole rows, reading
the statistics gains nothing.

Three variants, chosen by row length (as the forwards' plans are); their kernels are in
layernorm_backward_kernels.py, their launches here:

* Rows on chip (N <= COOP_FROM_N on a GPU; without cooperative launches N <= max_onchip, and for
  4-byte inputs N <= FP32_ONCHIP, or FP32_ONCHIP_RMS for RMSNorm): each program takes a
  contiguous block of rows, one row at a time held whole in registers, with its partial dw and db
  kept in registers across its rows and written once ([programs, N] fp32), as Liger-Kernel's
  LayerNorm and RMSNorm backwards do.  A row's sums (four for LayerNorm, two for RMSNorm) are
  taken in one reduction, so the warps meet once per row.  With `prefetch` the next row's loads
  are issued before this row's reduction, so that DRAM stays busy while the warps meet; it costs
  the next row's registers.  It is on by default for 2-byte inputs up to PREFETCH_MAX_N columns,
  where it is faster, and off otherwise (fp32 rows gain nothing).
  Two programs an SM up to 4096 columns, one above (_rows_plan).  Above 8192 columns a row no
  longer fits a program's registers with its dw and db, and spills.
* Cooperative rows (COOP_FROM_N < N <= COOP_MAX_N, GPU launches only): the rows-on-chip kernel
  with each row shared by the programs of a team, a chunk each (coop_rows: 512-2048 columns, at
  most 32 a row, 1024 or more for fp32); they exchange their chunks' sums through global memory
  (exchange.py), so a row is still read once and a program holds 16 columns of it a thread.  The
  next row's chunk is loaded while the team exchanges, through shared memory.  Faster than the
  other two variants at 16384-65536 columns.
* Long rows (above COOP_MAX_N, or above the rows-on-chip limits without cooperative launches):
  the row is walked in chunks by two kernels.  `_row_stats` takes one row per program and writes
  its four scalars (mean, rstd, mean(g * x-hat), mean(g)); `_columns` takes a block of columns
  over a group of rows, writes dx from those scalars and sums its partial dw and db in registers.
  x and dy are read twice, so 5 row-sized tensors move instead of the 3 of the other variants (dx,
  and x and dy once).

In every variant the [programs, N] partials of dw and db are summed by one small kernel that writes
both in the weight's dtype, launched on sm_90 and later as a programmatic dependent of the kernel
before it, which the cooperative kernel lets launch at once.

All arithmetic is fp32; dx has x's dtype, dw and db the weight's.  The measurements behind each
choice: docs/kernels.md, 'What every kernel shares' (the norm backward's entries).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import triton

from fusebench import settings
from fusebench.kernels import exchange, launch_plans
from fusebench.kernels.device import cdiv, dependent_launch, next_pow2, num_sms
from fusebench.kernels.launch import STATE, Launch, dependent, signature
from fusebench.kernels.layernorm_backward_kernels import (
    _columns_kernel, _coop_rows_kernel, _row_stats_kernel, _rows_kernel, _sum_partials_kernel,
)

LAYERNORM_EPS = 1e-5
# The longest fp32 rows held on chip, and the longest 2-byte rows that prefetch (module docstring).
FP32_ONCHIP, FP32_ONCHIP_RMS = 8192, 16384
PREFETCH_MAX_N = 8192
# Long-row kernels: the chunk a stats program reads per step and its warps, and the column
# kernel's tile.  With no more rows than SMs (a program per row, at most one an SM) each program
# needs more loads in flight: 8192 columns a step over 16 warps; with more rows 2048 over 8 warps
# is as fast or faster (docs/kernels.md, 'What every kernel shares': "Long rows, few of them").
STATS_BLOCK, STATS_WARPS = 2048, 8
STATS_BLOCK_FEW_ROWS, STATS_WARPS_FEW_ROWS = 8192, 16
# Its tile for 2-byte inputs is 4 x 1024: a thread then holds its columns' 4 rows itself, so the
# per-step dw and db sums need no exchange between warps; for fp32 inputs the tiles measured are
# alike, and 8 x 256 stays (docs/kernels.md, 'What every kernel shares': "Long 2-byte rows").
COL_BLOCK_M, COL_BLOCK_N = 8, 256
COL_BLOCK_M_2BYTE, COL_BLOCK_N_2BYTE = 4, 1024
# The partial-sum kernel's tile: 32 fp32 columns are one 128-byte line of a partials row, and
# enough column blocks to cover the SMs at N >= 4096.
SUM_BLOCK_P, SUM_BLOCK_N = 64, 32


@dataclass(frozen=True)
class CoopRows:
    """A cooperative launch of the backward: `chunk` columns of a row a program, its warps, the
    programs an SM, and how a program gets its next row's chunk while it waits for this row's
    partials: into registers (`prefetch`), or `stages` - 1 rows ahead through shared memory (the
    compiler's pipeliner)."""

    chunk: int = 2048
    warps: int = 4
    per_sm: int = 4
    prefetch: bool = False
    stages: int | None = None


# The cooperative launch: 16 columns a thread and 16 warps an SM, in the smallest chunk that
# leaves a row at most 32 programs (smaller chunks are faster at 16384 columns); fp32 rows take
# chunks of 1024 columns or more (512 are slower for them).  Each stages the next row through
# shared memory, faster than the register prefetch (docs/kernels.md, 'What every kernel shares':
# "Cooperative norm backward above 8192 columns").
COOP_MAX_SPLITS = 32
COOP_FROM_N, COOP_MAX_N = 8192, 65536


def coop_rows(N: int, elem_size: int) -> CoopRows:
    """The cooperative launch for rows of N columns (COOP_FROM_N < N <= COOP_MAX_N) of
    `elem_size`-byte inputs: chunks of 512 (2-byte) or 1024 (fp32) to 2048 columns, at most
    COOP_MAX_SPLITS a row, 16 columns a thread, 16 warps an SM."""
    chunk = max(512 if elem_size <= 2 else 1024, next_pow2(cdiv(N, COOP_MAX_SPLITS)))
    warps = chunk // (16 * 32)
    return CoopRows(chunk, warps, 16 // warps, stages=2)


# ----------------------------------------------------------------------------------------------
# launchers: a plan per problem key, made at the key's first call; a later call allocates the
# outputs and the partials and launches (launch.Launch), with every grid, constant and integer
# argument decided at the first.


def _programs(device, wanted: int | None, limit: int, per_sm: int = 4) -> int:
    # `per_sm` programs per SM on a GPU; under the interpreter few, since each runs serially.
    if wanted is None:
        wanted = per_sm * num_sms(device) if device.type == "cuda" else 4
    return max(1, min(wanted, limit))


def _rows_plan(dy, x, dh, center: bool, eps: float, programs: int | None, prefetch: bool):
    M, N = x.shape
    # Each program holds about 32 (2-byte inputs) or 16 (fp32) of a row's columns per thread,
    # faster than 8 columns a thread.  Two programs per SM up to 4096 columns; one above, where a
    # program is 8-16 warps and the prefetched row keeps its loads in flight (at 16384, where the
    # rows spill, one spills into less traffic).  (docs/kernels.md, 'What every kernel shares':
    # "How the norm backward launches", "Programs an SM on chip")
    programs = _programs(x.device, programs, M, per_sm=2 if N <= 4096 else 1)
    block_n = triton.next_power_of_2(N)
    per_thread = 32 if x.element_size() <= 2 else 16
    launch = Launch(_rows_kernel, (programs,), dict(
        CENTER=center, HAS_DH=dh is not dy, PREFETCH=prefetch, BLOCK_N=block_n,
        num_warps=launch_plans.num_warps_for(block_n, per_thread=per_thread, lo=4, hi=16)))
    ints = (M, N, dy.stride(0), x.stride(0), dh.stride(0), N, eps, triton.cdiv(M, programs))  # dx is dense
    return _partials(launch, ints, programs, N, center, takes_stats=False)


def _partials(launch: Launch, ints: tuple, n_partials: int, N: int, center: bool, takes_stats: bool):
    """(partials, [launch], n_partials): partials(dy, x, w, dh, stats, dx) launches a rows kernel
    that writes dx and its [n_partials, N] fp32 partial sums of dw (and db), and returns those;
    `stats` goes to a kernel that `takes_stats` (the cooperative one)."""

    def partials(dy, x, w, dh, stats, dx):
        dw = x.new_empty((n_partials, N), dtype=torch.float32)
        db = x.new_empty((n_partials, N), dtype=torch.float32) if center else dw
        if takes_stats:
            launch(dy, x, w, dh, stats, dx, dw, db, *ints)
        else:
            launch(dy, x, w, dh, dx, dw, db, *ints)
        return dw, db

    return partials, [launch], n_partials


def _coop_plan(dy, x, dh, center: bool, eps: float, shape: CoopRows, saved: bool):
    M, N = x.shape
    coop = launch_plans.coop_plan(M, N, x.device, chunk=shape.chunk, num_warps=shape.warps, per_sm=shape.per_sm,
                           prefetch=shape.prefetch, stages=shape.stages)
    if coop.stages and not launch_plans.coop_stages_fit(coop, x.device, x.element_size(), row_inputs=2 if dh is dy else 3):
        coop = replace(coop, stages=None)  # a cooperative grid must fit at once: no staging then
    launch = Launch(_coop_rows_kernel, (coop.grid,), dict(
        CENTER=center, HAS_DH=dh is not dy, SAVED=saved, BLOCK_N=coop.block_n, num_warps=coop.num_warps,
        DEPENDENTS=dependent_launch(x.device), **launch_plans.coop_launch_args(coop, x.device)))
    sync = exchange.exchange_buffer(x.device, coop.grid)
    ints = (sync, sync.numel(), M, N, dy.stride(0), x.stride(0), dh.stride(0), N, eps, coop.splits)  # dx is dense
    return _partials(launch, ints, coop.grid // coop.splits, N, center, takes_stats=True)


def _long_rows_plan(dy, x, dh, center: bool, eps: float, programs: int | None):
    M, N = x.shape
    few_rows = x.device.type == "cuda" and M <= num_sms(x.device)
    block, warps = (STATS_BLOCK_FEW_ROWS, STATS_WARPS_FEW_ROWS) if few_rows else (STATS_BLOCK, STATS_WARPS)
    block = min(block, triton.next_power_of_2(N))
    stats = Launch(_row_stats_kernel, (M,), dict(
        CENTER=center, BLOCK_N=block, num_warps=launch_plans.num_warps_for(block, per_thread=8, lo=1, hi=warps)))
    stats_ints = (N, dy.stride(0), x.stride(0), eps)
    bm, bn = (COL_BLOCK_M_2BYTE, COL_BLOCK_N_2BYTE) if x.element_size() <= 2 else (COL_BLOCK_M, COL_BLOCK_N)
    col_blocks = triton.cdiv(N, bn)
    wanted = None if programs is None else triton.cdiv(programs, col_blocks)
    if wanted is None and x.device.type == "cuda":
        wanted = triton.cdiv(4 * num_sms(x.device), col_blocks)
    groups = _programs(x.device, wanted, triton.cdiv(M, bm))
    rows_per_group = triton.cdiv(triton.cdiv(M, groups), bm) * bm
    groups = triton.cdiv(M, rows_per_group)
    columns = Launch(_columns_kernel, (col_blocks, groups), dict(
        CENTER=center, HAS_DH=dh is not dy, BLOCK_M=bm, BLOCK_N=bn, num_warps=4))
    column_ints = (M, N, dy.stride(0), x.stride(0), dh.stride(0), N, rows_per_group)  # dx is dense

    def partials(dy, x, w, dh, saved, dx):  # the row statistics recomputed, any saved ones unused
        scalars = x.new_empty((M, 4), dtype=torch.float32)
        dw = x.new_empty((groups, N), dtype=torch.float32)
        db = x.new_empty((groups, N), dtype=torch.float32) if center else dw
        stats(dy, x, w, scalars, *stats_ints)
        columns(dy, x, w, dh, scalars, dx, dw, db, *column_ints)
        return dw, db

    return partials, [stats, columns], groups


def _plan(dy, x, w, dh, center: bool, eps: float, onchip: bool, programs: int | None, prefetch: bool,
          coop: CoopRows | None, saved: bool):
    """plan(dy, x, w, dh) -> (dx, dw, db) for this key, and its launches."""
    M, N = x.shape
    if coop is not None:
        partials, launches, n_partials = _coop_plan(dy, x, dh, center, eps, coop, saved)
    elif onchip:
        partials, launches, n_partials = _rows_plan(dy, x, dh, center, eps, programs, prefetch)
    else:
        partials, launches, n_partials = _long_rows_plan(dy, x, dh, center, eps, programs)
    total, summed = _sum_plan(n_partials, N, center, x.device)

    def plan(dy, x, w, dh, stats):
        dx = x.new_empty((M, N))
        dw_part, db_part = partials(dy, x, w, dh, stats, dx)
        dw = w.new_empty(N)
        db = w.new_empty(N) if center else dw
        total(dw_part, db_part, dw, db)
        return dx, dw, db if center else None

    return plan, launches + [summed]


def _sum_plan(n_partials: int, N: int, with_db: bool, device):
    """(total, its launch): total(dw_part, db_part, dw, db) sums the [n_partials, N] fp32 partials
    of dw (and of db, with_db) into dw (db), written in their dtype.  Where it can, the launch is a
    dependent of the partials' kernel, so that it starts earlier (docs/kernels.md, 'What every
    kernel shares': "The partial sums")."""
    launch = Launch(_sum_partials_kernel, (triton.cdiv(N, SUM_BLOCK_N),), dict(
        HAS_DB=with_db, BLOCK_P=SUM_BLOCK_P, BLOCK_N=SUM_BLOCK_N, num_warps=4, **dependent(device)))

    def total(dw_part, db_part, dw, db):
        launch(dw_part, db_part, dw, db, n_partials, N)

    return total, launch


def _rows_contiguous(t: torch.Tensor) -> torch.Tensor:
    # kernels index columns with stride 1 and take the row stride
    return t if t.stride(-1) == 1 else t.contiguous()


def _coop_rows(N: int, device) -> bool:
    """Whether rows of N columns take the cooperative kernel: on a GPU, above COOP_FROM_N columns
    (rows that spill on chip, or would be read twice by the long-row kernels) and up to
    COOP_MAX_N."""
    return launch_plans.coop_enabled(device) and COOP_FROM_N < N <= COOP_MAX_N


# {problem key: (plan, its launches)}
_PLANS = STATE.table("layernorm_backward.plans")


def norm_backward(dy, x, weight, dh=None, *, center: bool, eps: float, max_onchip: int = launch_plans.MAX_ONCHIP,
                  programs: int | None = None, prefetch: bool | None = None, coop: CoopRows | bool | None = None,
                  stats: torch.Tensor | None = None, kernels: list | None = None):
    """(dx, dw, db) of a LayerNorm (center=True) or RMSNorm (center=False, db None) of x's rows
    given dy; with dh, dx also carries it.  Rows longer than `max_onchip` take the long-row
    kernels, unless they take the cooperative one (module docstring).  `programs` sets how many
    programs share the rows (tests), `prefetch` whether rows on chip load the next row ahead
    (None: by dtype and row length, module docstring), `coop` the cooperative launch (None:
    coop_rows where _coop_rows says so; False: none), `stats` gives the forward's fp32 row
    statistics (run with save=True: LayerNorm's [M, 2] means and rstds, RMSNorm's [M, 1] rstds),
    which the cooperative kernel reads instead of recomputing them (the others recompute them
    either way), `kernels` collects the compiled kernels launched (a GPU test reads their spill
    counts)."""
    if x.dim() != 2 or dy.shape != x.shape or weight.shape != (x.shape[1],):
        raise ValueError(f"dy {tuple(dy.shape)}, x {tuple(x.shape)} and weight {tuple(weight.shape)} do not match")
    if stats is not None and (stats.shape != (x.shape[0], 2 if center else 1) or stats.dtype != torch.float32
                              or not stats.is_contiguous()):
        raise ValueError("stats are contiguous fp32 rows: [M, 2] (mean, rstd) for LayerNorm, [M, 1] (rstd) for RMSNorm")
    dy, x, w = _rows_contiguous(dy), _rows_contiguous(x), weight.contiguous()
    has_dh = dh is not None
    dh = _rows_contiguous(dh) if has_dh else dy  # `dh is dy` tells the kernels there is none
    saved = stats is not None
    # FUSEBENCH_COOP decides whether a cooperative plan may be made: part of the key, so a changed
    # setting decides the next call
    key = (signature(dy, x, w, dh if has_dh else None), center, eps, max_onchip, programs, prefetch, coop, saved,
           settings.current().coop)
    found = _PLANS.get(key)
    if found is None:
        M, N = x.shape
        if M == 0 or N == 0:
            zero = torch.zeros_like(weight)
            return torch.empty((M, N), dtype=x.dtype, device=x.device), zero, zero.clone() if center else None
        onchip = N <= (max_onchip if x.element_size() <= 2
                       else min(max_onchip, FP32_ONCHIP if center else FP32_ONCHIP_RMS))
        if prefetch is None:
            prefetch = x.element_size() <= 2 and N <= PREFETCH_MAX_N
        if coop is None:
            coop = coop_rows(N, x.element_size()) if programs is None and _coop_rows(N, x.device) else None
        elif coop is False or not launch_plans.coop_enabled(x.device):
            coop = None
        found = _PLANS[key] = _plan(dy, x, w, dh, center, eps, onchip, programs, onchip and prefetch, coop, saved)
    plan, launches = found
    dx, dw, db = plan(dy, x, w, dh, stats if saved else dy)
    if kernels is not None:
        kernels.extend(launch.kernel for launch in launches if launch.kernel is not None)
    return dx, dw, db


def layernorm_backward(dy, x, weight, max_onchip: int = launch_plans.MAX_ONCHIP, programs: int | None = None,
                       stats: torch.Tensor | None = None):
    """(dx, dweight, dbias) of F.layer_norm(x, (N,), weight, bias, 1e-5) given dy (and the
    forward's row statistics, see norm_backward)."""
    return norm_backward(dy, x, weight, center=True, eps=LAYERNORM_EPS, max_onchip=max_onchip, programs=programs,
                         stats=stats)


def reads_saved_stats(x: torch.Tensor, center: bool) -> bool:
    """Whether the autograd Functions save the forward's row statistics of x for norm_backward:
    where the cooperative kernel takes its rows (half the sums a row: faster for LayerNorm and for
    2-byte RMSNorm, not for fp32 RMSNorm, which therefore recomputes them).  The other kernels hold
    whole rows or read them twice, and gain nothing (docs/kernels.md, 'What every kernel shares':
    "The team reads the forward's statistics")."""
    return x.dim() == 2 and _coop_rows(x.shape[1], x.device) and (center or x.element_size() <= 2)
