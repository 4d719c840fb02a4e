"""Element-wise cases, each one pass over its operands in one launch.

    pointwise_chain(x)                            y = cos(x); x = x*y; y = max(x, y); x + y
    bias_gelu(inp, bias)                          GELU (tanh form) of inp + bias[None, :]
    bias_dropout_add(inp, bias, residual)         residual + (inp + bias)   (dropout in eval mode)
    bias_dropout_add_transposed(inp, bias_t, residual_t)
                                                  the same with bias and residual stored (N, M)

Every kernel works on 2-D tiles with explicit strides, so any row (and column) stride is read in
place.  When all operands are contiguous and of one shape, the wrappers view them as one row of
M*N elements: tiles then never straddle a ragged row end, and every load is a 16-byte vector.
Otherwise ALIGN (vector_align of N and the row strides; the kernels rewrite them as
multiples of it) lets the compiler use 16-byte vectors for rows whose length is not a multiple
of 16, e.g. 3000x5000.

GELU: 0.5 * (1 + tanh(u)) = sigmoid(2u) = 1 / (1 + exp(-2u)), so the output is x / (1 + exp(-2u)).
This needs only exp (the interpreter cannot call libdevice's tanh) and saturates correctly for
large |u| (exp(+big) = inf gives 0, exp(-big) = 0 gives x).

Transposed layout: the output is an (M, N) tensor in one of two layouts, whichever the autotuner
measured faster for the shape (TilePlan.out_t): row-major, like `inp`, or column-major, the layout
eager PyTorch (TensorIterator follows the transposed operands) and Inductor return.  A program
loads its (M, N) tile of `inp` row-wise and the matching tiles of `bias_t` and `residual_t` in
their own (N, M) orientation, so that all three loads are coalesced, and transposes on chip once:
row-major output adds bias and residual in their orientation, transposes the sum and adds `inp`;
column-major output transposes `inp` and stores in the (N, M) orientation.  Either is a valid
(M, N) result (callers that need one layout ask for it with .contiguous()).  Column-major output
with tiles in column order (column_order_plans) serves the tall tensors; with fewer rows
(128x16384, 256x8192, ...) load hints serve instead (TRANSPOSED_HINTED_PLANS).

Host work per call (`_call`): one dict lookup of a launcher keyed by the kernel, a forced plan and
the inputs' shapes, strides, dtypes, device and alignment (the family's launch.LauncherCache); the
output's allocation; a launch through a launch.Launch.  Flattening, plan, grid and constexprs are
decided for a new key only (the flat layout needs no views: a kernel takes only the tensors'
addresses).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Callable

import torch
import triton
import triton.language as tl

from fusebench.cases import elementwise, mix
from fusebench.kernels import tuning
from fusebench.kernels.device import cdiv, num_sms
from fusebench.kernels.launch import STATE, Launch, is_final, signature
from fusebench.kernels.launch_plans import TilePlan, as_2d_strided, tile_2d_plans, unique, vector_align
from fusebench.kernels.registry import triton_kernel
from fusebench.kernels.tuning import autotune, key_of, source_hash

_SOURCE = functools.partial(source_hash, __name__)


@triton.jit
def _aligned(values, ALIGN: tl.constexpr):
    # The values rounded down to multiples of ALIGN.  ALIGN divides them already (plans.vector_align):
    # the rounding tells the compiler so, and it may use 16-byte vectors.
    return [v // ALIGN * ALIGN for v in values]


@triton.jit
def _load(operand, i0, j0, i, j, mask, EVICT: tl.constexpr):
    # tile (i, j) at (i0, j0) of operand (pointer, row stride, column stride) as fp32, 0 where not
    # mask; the 64-bit tile base apart from the in-tile offsets (32-bit)
    ptr, stride_i, stride_j = operand
    return tl.load(ptr + i0 * stride_i + j0 * stride_j + i[:, None] * stride_i + j[None, :] * stride_j,
                   mask=mask, other=0.0, eviction_policy=EVICT).to(tl.float32)


@triton.jit
def _tile(M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GRID: tl.constexpr):
    # This program's tile of the (M, N) grid of tiles, column blocks fastest: its first row and
    # column in 64 bits (row0 * stride may pass 2**31), in-tile indices, and the in-bounds mask.
    # GRID "cols": one block of rows covers M (a flattened tensor), programs step along the columns;
    # "rows": one block of columns covers N; "both": a 2-D grid, whose integer division by the
    # number of column blocks (~40 instructions before the first load) the 1-D grids skip.
    pid = tl.program_id(0)
    if GRID == "cols":
        row_block, col_block = pid * 0, pid
    elif GRID == "rows":
        row_block, col_block = pid, pid * 0
    else:
        n_col_blocks = tl.cdiv(N, BLOCK_N)
        row_block, col_block = pid // n_col_blocks, pid % n_col_blocks
    row0 = row_block.to(tl.int64) * BLOCK_M
    col0 = col_block.to(tl.int64) * BLOCK_N
    r = tl.arange(0, BLOCK_M)
    c = tl.arange(0, BLOCK_N)
    mask = (r < M - row0)[:, None] & (c < N - col0)[None, :]
    return row0, col0, r, c, mask


@triton.jit
def _grouped_tile(M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    # As _tile, but GROUP_M row blocks down one column block before the next column block (the
    # last group may be shorter), so that programs running at once read operands stored (N, M)
    # along their contiguous M axis too: GROUP_M * BLOCK_M elements of each of their rows.
    pid = tl.program_id(0)
    n_col_blocks = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * n_col_blocks
    first_row_block = (pid // per_group) * GROUP_M
    rows_here = tl.minimum(tl.cdiv(M, BLOCK_M) - first_row_block, GROUP_M)
    row0 = (first_row_block + (pid % per_group) % rows_here).to(tl.int64) * BLOCK_M
    col0 = ((pid % per_group) // rows_here).to(tl.int64) * BLOCK_N
    r = tl.arange(0, BLOCK_M)
    c = tl.arange(0, BLOCK_N)
    mask = (r < M - row0)[:, None] & (c < N - col0)[None, :]
    return row0, col0, r, c, mask


# ----------------------------------------------------------------------------------------------
# kernels


@triton.jit
def _pointwise_chain_kernel(x_ptr, y_ptr, M, N, stride_xm, stride_xn, stride_ym,
                            ALIGN: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                            GRID: tl.constexpr, EVICT: tl.constexpr):
    N, stride_xm, stride_ym = _aligned((N, stride_xm, stride_ym), ALIGN)
    row0, col0, r, c, mask = _tile(M, N, BLOCK_M, BLOCK_N, GRID)
    x = _load((x_ptr, stride_xm, stride_xn), row0, col0, r, c, mask, EVICT)
    y = tl.cos(x)
    x = x * y
    y = tl.maximum(x, y, propagate_nan=tl.PropagateNan.ALL)  # torch.max propagates NaN
    x = x + y
    tl.store(y_ptr + row0 * stride_ym + col0 + r[:, None] * stride_ym + c[None, :],
             x.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _bias_gelu_kernel(x_ptr, b_ptr, y_ptr, M, N, stride_xm, stride_xn, stride_b, stride_ym,
                      ALIGN: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GRID: tl.constexpr,
                      EVICT: tl.constexpr):
    N, stride_xm, stride_ym = _aligned((N, stride_xm, stride_ym), ALIGN)
    row0, col0, r, c, mask = _tile(M, N, BLOCK_M, BLOCK_N, GRID)
    x = _load((x_ptr, stride_xm, stride_xn), row0, col0, r, c, mask, EVICT)
    # The bias slice for this tile's columns, loaded once and broadcast over its rows.
    b = tl.load(b_ptr + col0 * stride_b + c * stride_b, mask=c < N - col0, other=0.0).to(tl.float32)
    x = x + b[None, :]
    u = 0.79788456 * x * (1.0 + 0.044715 * x * x)
    y = x / (1.0 + tl.exp(-2.0 * u))  # x * 0.5 * (1 + tanh(u)), see the module docstring
    tl.store(y_ptr + row0 * stride_ym + col0 + r[:, None] * stride_ym + c[None, :],
             y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _bias_dropout_add_kernel(x_ptr, b_ptr, res_ptr, y_ptr, M, N, stride_xm, stride_xn, stride_bm, stride_bn,
                             stride_rm, stride_rn, stride_ym,
                             ALIGN: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                             GRID: tl.constexpr, EVICT: tl.constexpr):
    N, stride_xm, stride_bm, stride_rm, stride_ym = _aligned((N, stride_xm, stride_bm, stride_rm, stride_ym), ALIGN)
    row0, col0, r, c, mask = _tile(M, N, BLOCK_M, BLOCK_N, GRID)
    x = _load((x_ptr, stride_xm, stride_xn), row0, col0, r, c, mask, EVICT)
    b = _load((b_ptr, stride_bm, stride_bn), row0, col0, r, c, mask, EVICT)
    res = _load((res_ptr, stride_rm, stride_rn), row0, col0, r, c, mask, EVICT)
    # dropout(p, training=False) is the identity
    tl.store(y_ptr + row0 * stride_ym + col0 + r[:, None] * stride_ym + c[None, :],
             (res + (x + b)).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _bias_dropout_add_transposed_kernel(x_ptr, bt_ptr, rt_ptr, y_ptr, M, N, stride_xm, stride_xn,
                                        stride_bt0, stride_bt1, stride_rt0, stride_rt1, stride_y,
                                        ALIGN_N: tl.constexpr, ALIGN_M: tl.constexpr,
                                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr,
                                        OUT_T: tl.constexpr, EVICT: tl.constexpr):
    # ALIGN_N divides N and the (M, N) operands' row strides, ALIGN_M divides M and the (N, M)
    # operands' row strides: 16-byte vectors in both orientations.  The output y is row-major (M, N)
    # with row stride stride_y, or with OUT_T column-major: stored (N, M) with row stride stride_y.
    N, stride_xm = _aligned((N, stride_xm), ALIGN_N)
    M, stride_bt0, stride_rt0 = _aligned((M, stride_bt0, stride_rt0), ALIGN_M)
    stride_y = _aligned((stride_y,), ALIGN_M if OUT_T else ALIGN_N)[0]
    row0, col0, r, c, mask = _grouped_tile(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    # bias_t / residual_t tiles (BLOCK_N, BLOCK_M): element (j, i) of the tile is operand[i, j],
    # stored at t[col0 + j, row0 + i], contiguous along the tile's second axis (M).
    mask_t = (c < N - col0)[:, None] & (r < M - row0)[None, :]
    bt = _load((bt_ptr, stride_bt0, stride_bt1), col0, row0, c, r, mask_t, EVICT)
    rt = _load((rt_ptr, stride_rt0, stride_rt1), col0, row0, c, r, mask_t, EVICT)
    # inp tile (BLOCK_M, BLOCK_N), contiguous along N, loaded last: loaded first, the compiler
    # moved inp itself into the others' layout through shared memory before it issued their loads
    # (two DRAM round trips one after the other, and a second on-chip transpose for the store; seen
    # in the sm_90 SASS).  In this order the three loads are in flight together.
    x = _load((x_ptr, stride_xm, stride_xn), row0, col0, r, c, mask, EVICT)
    if OUT_T:
        # inp transposed on chip; y[row0 + i, col0 + j] stored at y_t[col0 + j, row0 + i]
        y = tl.trans(x) + (bt + rt)
        tl.store(y_ptr + col0 * stride_y + row0 + c[:, None] * stride_y + r[None, :],
                 y.to(y_ptr.dtype.element_ty), mask=mask_t)
    else:
        # add in the transposed orientation, then one on-chip transpose (through shared memory)
        y = x + tl.trans(bt + rt)
        tl.store(y_ptr + row0 * stride_y + col0 + r[:, None] * stride_y + c[None, :],
                 y.to(y_ptr.dtype.element_ty), mask=mask)


# ----------------------------------------------------------------------------------------------
# wrappers


def _flat(*ts: torch.Tensor):
    """Views of `ts` as one row each when all are contiguous and of one shape, else None."""
    if all(t.is_contiguous() for t in ts) and len({tuple(t.shape) for t in ts}) == 1:
        return tuple(t.view(1, -1) for t in ts)
    return None


@dataclass(frozen=True)
class _Kernel:
    """What the launcher cache needs of one element-wise kernel.

    `args(plan, *operands)`: (grid, the runtime arguments after the tensors, the constexprs and
    options) for the operands (inputs, then the output) as the kernel sees them.  `check(*inputs)`:
    the inputs laid out for the kernel (plans.as_2d_strided), or ValueError.  `output(plan,
    *inputs)`: the output's shape, strides and dtype (plan None: as the tuner's launches get it).
    `plans(M, N, device, traffic)`: the candidates.  `flat`: contiguous operands of one shape are
    seen as one row.  `key_output`: the tuner's key names the output too."""

    name: str
    kernel: object
    args: Callable
    check: Callable
    output: Callable
    plans: Callable
    flat: bool = True
    key_output: bool = True


class _TileLauncher:
    """One kernel's call for one key: the plan, the Launch and its other arguments, the output's
    layout (launch None: an empty output)."""

    __slots__ = ("plan", "launch", "rest", "shape", "stride", "dtype")

    def __call__(self, *inputs):
        # on the first input's device; its dtype unless `dtype` says otherwise (new_empty_strided
        # with plain tuples: the cheapest allocation from Python)
        if self.dtype is None:
            out = inputs[0].new_empty_strided(self.shape, self.stride)
        else:
            out = inputs[0].new_empty_strided(self.shape, self.stride, dtype=self.dtype)
        if self.launch is not None:
            self.launch(*inputs, out, *self.rest)
        return out, self.plan


# (kernel name, forced plan, the inputs' signature) -> its _TileLauncher
_CACHE = STATE.launchers("pointwise")


def _call(k: _Kernel, plan, *inputs):
    """(output, plan) of kernel `k` on `inputs`: one dict lookup of the key's launcher, an output
    allocation and a launch; a new key checks the inputs, asks the tuner and builds the launcher."""
    key = (k.name, plan, signature(*inputs))
    found = _CACHE.get(key)
    if found is None:
        return _first_call(k, plan, key, inputs)
    return found(*inputs)


def _first_call(k: _Kernel, plan, key, inputs):
    """_call for a key without a launcher: check the inputs (an exotic view is copied, and the
    copies run under a key of their own), then call the key's launcher, built by _build."""
    laid = k.check(*inputs)
    if any(t is not u for t, u in zip(laid, inputs)):
        return _call(k, plan, *laid)
    return _CACHE.miss(key, _build, k, plan, inputs)(*inputs)


def _build(k: _Kernel, plan, inputs) -> tuple[_TileLauncher, bool]:
    """(the launcher of checked inputs, whether its plan is final: launch.is_final): with `plan`,
    else with the tuner's choice among the kernel's candidates."""
    device = inputs[0].device
    shape, stride, dtype = k.output(None, *inputs)
    out = torch.empty_strided(shape, stride, dtype=dtype, device=device)
    operands = (k.flat and _flat(*inputs, out)) or (*inputs, out)
    final = True
    if out.numel() and plan is None:
        M, N = operands[0].shape
        cands = k.plans(M, N, device, traffic_bytes(*operands))
        tuner_key = (k.name, *key_of(*(operands if k.key_output else operands[:-1])))
        plan = autotune(tuner_key, cands, lambda p, *ops: _jit(k, p, ops), device, operands, source=_SOURCE())
        final = is_final(tuning.TUNER, tuner_key, device, len(cands))
    launcher = _TileLauncher()
    launcher.plan, launcher.launch, launcher.rest = plan, None, ()
    launcher.dtype = None if dtype == inputs[0].dtype else dtype
    shape, stride = k.output(plan, *inputs)[:2] if out.numel() else (shape, stride)
    launcher.shape, launcher.stride = tuple(shape), tuple(stride)
    if out.numel():
        grid, launcher.rest, constants = k.args(plan, *operands)
        launcher.launch = Launch(k.kernel, grid, constants)
    return launcher, final


def _jit(k: _Kernel, plan, operands) -> None:
    """Launch `k` with `plan` through the JIT (the tuner's launches)."""
    grid, rest, constants = k.args(plan, *operands)
    k.kernel[grid](*operands, *rest, **constants)


# Tensors of at most HINTED_MAX_BYTES of traffic (a few L2s) also try the heuristic's first two
# tiles with evict_first and evict_last loads (see TRANSPOSED_HINTED_PLANS for why).
HINTED_MAX_BYTES = 256 << 20


def traffic_bytes(*operands: torch.Tensor) -> int:
    """The bytes an element-wise kernel moves: each of its inputs and outputs once (the measure
    HINTED_MAX_BYTES is compared with)."""
    return sum(t.numel() * t.element_size() for t in operands)


def element_wise_plans(M: int, N: int, device, traffic: int) -> list[TilePlan]:
    plans = tile_2d_plans(M, N, min_programs=num_sms(device))
    if traffic <= HINTED_MAX_BYTES:
        plans += [replace(p, evict=e) for e in ("evict_first", "evict_last") for p in plans[:2]]
    return plans


def _align(n, *ts: torch.Tensor) -> int:
    """vector_align for a row length n and the row strides of `ts` (1 unless their
    columns are contiguous, when no vector would help)."""
    if any(t.dim() == 2 and t.stride(1) != 1 and t.shape[1] > 1 for t in ts):
        return 1
    return vector_align(ts[0].element_size(), n, *(t.stride(0) for t in ts if t.dim() == 2))


def _grid(M, N, p: TilePlan):
    return (cdiv(M, p.block_m) * cdiv(N, p.block_n),)


def _grid_kind(M, N, p: TilePlan) -> str:
    """_tile's GRID: "cols" when one block of rows covers M, "rows" when one block of columns
    covers N, else "both"."""
    return "cols" if M <= p.block_m else "rows" if N <= p.block_n else "both"


def _tiles(M, N, p: TilePlan) -> dict:
    return dict(BLOCK_M=p.block_m, BLOCK_N=p.block_n, GRID=_grid_kind(M, N, p), EVICT=p.evict,
                num_warps=p.num_warps)


def _same_shape(*inputs):
    return tuple(as_2d_strided(t) for t in inputs)


def _like(dtype_of):
    """output(): a contiguous tensor of the first input's shape, of dtype `dtype_of(*inputs)`."""
    def output(plan, first, *others):
        return first.shape, (first.shape[1], 1), dtype_of(first, *others)
    return output


def _chain_args(p, x, y):
    M, N = y.shape
    return _grid(M, N, p), (M, N, *x.stride(), y.stride(0)), dict(ALIGN=_align(N, x, y), **_tiles(M, N, p))


_CHAIN = _Kernel("pointwise_chain", _pointwise_chain_kernel, _chain_args, _same_shape,
                 _like(lambda x: x.dtype), element_wise_plans)


def pointwise_chain_run(x: torch.Tensor, plan: TilePlan | None = None):
    """(y, the plan it ran with)."""
    return _call(_CHAIN, plan, x)


def pointwise_chain_impl(x: torch.Tensor, plan: TilePlan | None = None, return_plan: bool = False):
    y, plan = _call(_CHAIN, plan, x)
    return (y, plan) if return_plan else y


def _gelu_check(inp, bias):
    inp = as_2d_strided(inp)
    if bias.shape != (inp.shape[1],):
        raise ValueError(f"bias must have shape ({inp.shape[1]},), got {tuple(bias.shape)}")
    return inp, bias


def _gelu_args(p, x, b, out):
    M, N = x.shape
    return (_grid(M, N, p), (M, N, *x.stride(), b.stride(0), N),
            dict(ALIGN=_align(N, x, out), **_tiles(M, N, p)))


_GELU = _Kernel("bias_gelu", _bias_gelu_kernel, _gelu_args, _gelu_check, _like(torch.result_type),
                element_wise_plans, flat=False)


def bias_gelu_run(inp: torch.Tensor, bias: torch.Tensor, plan: TilePlan | None = None):
    return _call(_GELU, plan, inp, bias)


def bias_gelu_impl(inp: torch.Tensor, bias: torch.Tensor, plan: TilePlan | None = None, return_plan: bool = False):
    y, plan = _call(_GELU, plan, inp, bias)
    return (y, plan) if return_plan else y


def _bda_check(inp, bias, residual):
    laid = _same_shape(inp, bias, residual)
    if not laid[0].shape == laid[1].shape == laid[2].shape:
        raise ValueError("inp, bias and residual must have one shape")
    return laid


def _bda_args(p, x, b, r, out):
    M, N = out.shape
    return (_grid(M, N, p), (M, N, *x.stride(), *b.stride(), *r.stride(), out.stride(0)),
            dict(ALIGN=_align(N, x, b, r, out), **_tiles(M, N, p)))


_BDA = _Kernel("bias_dropout_add", _bias_dropout_add_kernel, _bda_args, _bda_check,
               _like(lambda x, b, r: torch.result_type(r, x)), element_wise_plans)


def bias_dropout_add_run(inp: torch.Tensor, bias: torch.Tensor, residual: torch.Tensor,
                         plan: TilePlan | None = None):
    return _call(_BDA, plan, inp, bias, residual)


def bias_dropout_add_impl(inp: torch.Tensor, bias: torch.Tensor, residual: torch.Tensor,
                          plan: TilePlan | None = None, return_plan: bool = False):
    y, plan = _call(_BDA, plan, inp, bias, residual)
    return (y, plan) if return_plan else y


# Square-ish tiles: both orientations need at least 32 contiguous elements for full 128-byte
# lines.  The first is the heuristic's pick, the best at most shapes (docs/kernels.md,
# 'Element-wise kernels').
TRANSPOSED_PLANS = [TilePlan(64, 64, 8), TilePlan(128, 64, 8), TilePlan(64, 64, 4),
                    TilePlan(32, 128, 4)]
# Small tensors (fewer 64x64 tiles than two per SM): 32-element edges, four times the programs,
# and Inductor's own tile for them (its pointwise autotuner kept 16 x 256 over (N, M) with 8 warps
# at 512x1024: half-line reads of `inp`, full lines of the (N, M) operands).
TRANSPOSED_SMALL_PLANS = [TilePlan(32, 32, 4), TilePlan(32, 64, 4), TilePlan(64, 32, 4),
                          TilePlan(256, 16, 8), TilePlan(128, 32, 8)]


# Large tensors: the 64x64 tiles also in grouped order (TilePlan.group_m).  Column blocks fastest,
# the programs running at once read the (N, M) operands in 256-byte pieces one row stride (4M
# bytes) apart; grouped, neighbouring programs also read neighbouring pieces.
TRANSPOSED_GROUPED_PLANS = [replace(p, group_m=g) for g in (8, 32) for p in TRANSPOSED_PLANS[::2]]


# Column-major output (eager's and Inductor's layout, see the module docstring): Inductor's tiles
# for it (32x32 with 4 warps at 128x16384, 64x64 with 8 at 32768x2048) and ours.
TRANSPOSED_COLUMN_MAJOR_PLANS = [replace(p, out_t=True) for p in
                                 (TilePlan(64, 64, 8), TilePlan(32, 32, 4), TilePlan(64, 64, 4))]


# Loads with an L2 eviction hint, for tensors that fit in L2 several times over (at most
# HINTED_MAX_BYTES of traffic).  Inductor loads all three inputs evict_last here.  The likely
# reason it matters: the warm call (measure.timing) leaves its output's lines dirty in L2 at the
# address the timed call writes to; unhinted loads evict those lines (a write-back inside the
# timed call), hinted ones evict lines of their own class first.  A model's step leaves L2 much
# the same, so the hint is a candidate like any other, chosen by the same timing.
TRANSPOSED_HINTED_PLANS = [replace(p, evict=e) for e in ("evict_last", "evict_first")
                           for p in (TilePlan(64, 64, 8), TilePlan(128, 64, 8),
                                     TilePlan(64, 64, 8, out_t=True))]


def column_order_plans(M: int) -> list[TilePlan]:
    """64x64 tiles in column order -- every row block of a column block before the next one (one
    group of all row blocks), the order of Inductor's 2-D grid here -- with either output layout.
    Column-major output in this order reads and writes the (N, M) tensors along their rows: for
    tensors whose (N, M) row strides are 128 KiB or more (32768x8192, 65536x4096)."""
    return [TilePlan(64, 64, w, group_m=cdiv(M, 64), out_t=t) for t in (True, False) for w in (8, 4)]


def transposed_plans(M: int, N: int, device, traffic: int) -> list[TilePlan]:
    """The transposed kernel's candidates; `traffic`: traffic_bytes of its operands."""
    hinted = TRANSPOSED_HINTED_PLANS if traffic <= HINTED_MAX_BYTES else []
    if cdiv(M, 64) * cdiv(N, 64) < 2 * num_sms(device):
        return TRANSPOSED_PLANS + TRANSPOSED_SMALL_PLANS + TRANSPOSED_COLUMN_MAJOR_PLANS + hinted
    return unique(TRANSPOSED_PLANS + TRANSPOSED_GROUPED_PLANS + TRANSPOSED_COLUMN_MAJOR_PLANS + hinted
                        + column_order_plans(M))


def _bdat_check(inp, bias_t, residual_t):
    laid = _same_shape(inp, bias_t, residual_t)
    M, N = laid[0].shape
    if laid[1].shape != (N, M) or laid[2].shape != (N, M):
        raise ValueError(f"bias_t and residual_t must have shape ({N}, {M})")
    return laid


def _bdat_output(plan, inp, bias_t, residual_t):
    # row-major (M, N), or column-major: stored (N, M), as plan.out_t says (see the module docstring)
    M, N = inp.shape
    stride = (1, M) if plan is not None and plan.out_t else (N, 1)
    return inp.shape, stride, torch.result_type(residual_t, inp)


def _bdat_args(p, x, bt, rt, out):
    M, N = x.shape
    return (_grid(M, N, p), (M, N, *x.stride(), *bt.stride(), *rt.stride(), M if p.out_t else N),
            dict(ALIGN_N=_align(N, x), ALIGN_M=_align(M, bt, rt), BLOCK_M=p.block_m, BLOCK_N=p.block_n,
                 GROUP_M=p.group_m, OUT_T=p.out_t, EVICT=p.evict, num_warps=p.num_warps))


_BDAT = _Kernel("bias_dropout_add_transposed", _bias_dropout_add_transposed_kernel, _bdat_args, _bdat_check,
                _bdat_output, transposed_plans, flat=False, key_output=False)


def bias_dropout_add_transposed_run(inp: torch.Tensor, bias_t: torch.Tensor, residual_t: torch.Tensor,
                                    plan: TilePlan | None = None):
    return _call(_BDAT, plan, inp, bias_t, residual_t)


def bias_dropout_add_transposed_impl(inp: torch.Tensor, bias_t: torch.Tensor, residual_t: torch.Tensor,
                                     plan: TilePlan | None = None, return_plan: bool = False):
    """residual_t.T + (inp + bias_t.T) as an (M, N) tensor, row- or column-major as the plan says
    (see the module docstring)."""
    y, plan = _call(_BDAT, plan, inp, bias_t, residual_t)
    return (y, plan) if return_plan else y


def _describe_tiles(shape, dtype):
    return tile_2d_plans(*shape)[0].describe()


@triton_kernel(elementwise.POINTWISE_CHAIN, interpretable=True, describe=_describe_tiles,
               run=pointwise_chain_run)
def pointwise_chain(x):
    return pointwise_chain_impl(x)


@triton_kernel(mix.BIAS_GELU, interpretable=True, describe=_describe_tiles,
               run=bias_gelu_run)
def bias_gelu(inp, bias):
    return bias_gelu_impl(inp, bias)


@triton_kernel(mix.BIAS_DROPOUT_ADD, interpretable=True, describe=_describe_tiles,
               run=bias_dropout_add_run)
def bias_dropout_add(inp, bias, residual):
    return bias_dropout_add_impl(inp, bias, residual)


@triton_kernel(mix.BIAS_DROPOUT_ADD_TRANSPOSED, interpretable=True,
               describe=lambda shape, dtype: "transpose-aware tiles, row- or column-major output",
               run=bias_dropout_add_transposed_run)
def bias_dropout_add_transposed(inp, bias_t, residual_t):
    return bias_dropout_add_transposed_impl(inp, bias_t, residual_t)
