"""Horizontal fusion: two consumers of one input served by a single read.

    horizontal_reduction_pointwise(a) = (sum(a, 1), cos(a))
    horizontal_reduction_reduction(a) = (sum(a, 1), amax(a, 1))

Neither needs a second look at a row, so every plan reads `a` exactly once, in one launch:

* tile:  whole rows in registers, several rows per program when rows are short.
* loop:  one program per long row, accumulating per-lane sums / maxima chunk by chunk.
* split: few long rows: `splits` programs per row each reduce a chunk and write their partial
         result; the last of a row's programs to finish (an atomic counter per row) combines
         the partials.  The counters (zeroed_counters) are reset to zero by that last
         program, so no memset is needed between calls.

The counter is a release-acquire atomic: a row's programs publishing tagged words with no fence
(as the cooperative row-wise plans do, exchange.publish) is slower here at every shape measured
(docs/kernels.md, 'Horizontal fusion').
"""
from __future__ import annotations

import functools
from dataclasses import replace

import torch
import triton
import triton.language as tl

from fusebench.cases import horizontal as cases
from fusebench.kernels import tuning
from fusebench.kernels.device import cdiv, next_pow2, num_sms
from fusebench.kernels.launch import STATE, Launch, is_final, signature
from fusebench.kernels.launch_plans import (MAX_ONCHIP, RowPlan, as_2d_strided, loop_plan, row_plans, unique, vector_align,
                                      zeroed_counters)
from fusebench.kernels.registry import triton_kernel
from fusebench.kernels.tuning import autotune, key_of, source_hash

_SOURCE = functools.partial(source_hash, __name__)

# ----------------------------------------------------------------------------------------------
# kernels: WITH_COS selects the pointwise consumer, WITH_MAX the second reduction


@triton.jit
def _add_max(s1, m1, s2, m2):
    # combine (sum, max) pairs: the two reductions of horizontal_reduction_reduction as one
    return s1 + s2, tl.maximum(m1, m2)


@triton.jit
def _horizontal_tile_kernel(a_ptr, sum_ptr, max_ptr, cos_ptr, M, N, stride_am, stride_an,
                            WITH_COS: tl.constexpr, WITH_MAX: tl.constexpr, ALIGN: tl.constexpr, EVICT: tl.constexpr,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    N = N // ALIGN * ALIGN  # ALIGN divides N and the row stride: 16-byte vectors
    stride_am = stride_am // ALIGN * ALIGN
    row0 = tl.program_id(0).to(tl.int64) * BLOCK_M
    r = tl.arange(0, BLOCK_M)
    c = tl.arange(0, BLOCK_N)
    rmask = r < M - row0
    mask = rmask[:, None] & (c < N)[None, :]
    a = tl.load(a_ptr + row0 * stride_am + r[:, None] * stride_am + c[None, :] * stride_an,
                mask=mask, other=0.0, eviction_policy=EVICT).to(tl.float32)
    if WITH_COS:
        tl.store(cos_ptr + row0 * N + r[:, None] * N + c[None, :], tl.cos(a).to(cos_ptr.dtype.element_ty),
                 mask=mask)
    if WITH_MAX:
        # both reductions in one tree: one exchange between warps instead of two
        total, amax = tl.reduce((a, tl.where(mask, a, float("-inf"))), 1, _add_max)
        tl.store(max_ptr + row0 + r, amax.to(max_ptr.dtype.element_ty), mask=rmask)
    else:
        total = tl.sum(a, 1)
    tl.store(sum_ptr + row0 + r, total.to(sum_ptr.dtype.element_ty), mask=rmask)


@triton.jit
def _horizontal_loop_kernel(a_ptr, sum_ptr, max_ptr, cos_ptr, M, N, stride_am, stride_an,
                            WITH_COS: tl.constexpr, WITH_MAX: tl.constexpr, ALIGN: tl.constexpr, EVICT: tl.constexpr,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, STAGES: tl.constexpr):
    N = N // ALIGN * ALIGN
    stride_am = stride_am // ALIGN * ALIGN
    # Groups of BLOCK_M rows pid, pid + P, ... (P = the grid size), one pass each: per-lane
    # sums (and maxima) over the rows' chunks of BLOCK_N columns, reduced across lanes at the end.
    pid = tl.program_id(0)
    n_prog = tl.num_programs(0)
    r = tl.arange(0, BLOCK_M)
    c = tl.arange(0, BLOCK_N)
    for i in tl.range(0, tl.cdiv(tl.cdiv(M, BLOCK_M) - pid, n_prog)):
        row0 = (pid + i * n_prog).to(tl.int64) * BLOCK_M
        rmask = r < M - row0
        a_rows = a_ptr + row0 * stride_am + r[:, None] * stride_am  # (BLOCK_M, 1) row starts
        cos_rows = cos_ptr + row0 * N + r[:, None] * N
        acc_sum = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
        acc_max = tl.full([BLOCK_M, BLOCK_N], float("-inf"), tl.float32)
        for start in tl.range(0, N, BLOCK_N, num_stages=STAGES):
            cols = start + c
            mask = rmask[:, None] & (cols < N)[None, :]
            a = tl.load(a_rows + cols[None, :] * stride_an, mask=mask, other=0.0,
                        eviction_policy=EVICT).to(tl.float32)
            if WITH_COS:
                tl.store(cos_rows + cols[None, :], tl.cos(a).to(cos_ptr.dtype.element_ty), mask=mask)
            acc_sum += a
            if WITH_MAX:
                acc_max = tl.maximum(acc_max, tl.where(mask, a, float("-inf")))
        if WITH_MAX:
            total, amax = tl.reduce((acc_sum, acc_max), 1, _add_max)
            tl.store(max_ptr + row0 + r, amax.to(max_ptr.dtype.element_ty), mask=rmask)
        else:
            total = tl.sum(acc_sum, 1)
        tl.store(sum_ptr + row0 + r, total.to(sum_ptr.dtype.element_ty), mask=rmask)


@triton.jit
def _horizontal_split_kernel(a_ptr, sum_ptr, max_ptr, cos_ptr, ws_ptr, count_ptr, N, stride_am, stride_an,
                             SPLITS, WITH_COS: tl.constexpr, WITH_MAX: tl.constexpr, ALIGN: tl.constexpr,
                             EVICT: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_S: tl.constexpr):
    N = N // ALIGN * ALIGN
    stride_am = stride_am // ALIGN * ALIGN
    # Program pid reduces chunk (pid % SPLITS) of row (pid // SPLITS).
    pid = tl.program_id(0)
    row = (pid // SPLITS).to(tl.int64)
    cols = (pid % SPLITS) * BLOCK_N + tl.arange(0, BLOCK_N)
    a = tl.load(a_ptr + row * stride_am + cols * stride_an, mask=cols < N, other=0.0,
                eviction_policy=EVICT).to(tl.float32)
    if WITH_COS:
        tl.store(cos_ptr + row * N + cols, tl.cos(a).to(cos_ptr.dtype.element_ty), mask=cols < N)
    # Partials: ws[pid, 0] = chunk sum, ws[pid, 1] = chunk max.
    tl.store(ws_ptr + pid * 2, tl.sum(a, 0))
    if WITH_MAX:
        tl.store(ws_ptr + pid * 2 + 1, tl.max(tl.where(cols < N, a, float("-inf")), 0))
    # Every thread's partial store happens before the counter increment (barrier), and the
    # increment releases them to the GPU (acq_rel); the program that brings the count to
    # SPLITS sees all of the row's partials.
    tl.debug_barrier()
    done = tl.atomic_add(count_ptr + row, 1, sem="acq_rel")
    if done == SPLITS - 1:
        sp = tl.arange(0, BLOCK_S)
        part = ws_ptr + row * SPLITS * 2 + sp * 2
        # .cg: read from L2, where the other programs' partials are, not from this SM's L1.
        tl.store(sum_ptr + row, tl.sum(tl.load(part, mask=sp < SPLITS, other=0.0, cache_modifier=".cg"), 0)
                 .to(sum_ptr.dtype.element_ty))
        if WITH_MAX:
            m = tl.max(tl.load(part + 1, mask=sp < SPLITS, other=float("-inf"), cache_modifier=".cg"), 0)
            tl.store(max_ptr + row, m.to(max_ptr.dtype.element_ty))
        # Reset for the next call.
        tl.atomic_xchg(count_ptr + row, 0)


def _launch_for(a, with_cos: bool, with_max: bool, plan: RowPlan) -> tuple[Launch, tuple]:
    """(the Launch, the runtime arguments after the four tensors) for `plan` on an input laid out
    as `a`; the split plan's workspace and counters are among them."""
    M, N = a.shape
    sam, san = a.stride()
    align = vector_align(a.element_size(), N, sam) if san == 1 else 1
    # Read-only (no cos output): `a` is loaded evict_first, so that L2 keeps what it held before
    # the call rather than lines never read again (the L2 flush leaves dirty lines that a plain
    # streaming read has to write back).  Kernels that write as much as they read are slower with
    # the hint at large shapes, so they do without it; with the cos output it is a candidate of
    # its own (RowPlan.evict_first, see horizontal_plans; docs/kernels.md, 'Horizontal fusion').
    evict = "evict_first" if plan.evict_first or not with_cos else ""
    flags = dict(WITH_COS=with_cos, WITH_MAX=with_max, ALIGN=align, EVICT=evict, num_warps=plan.num_warps)
    if plan.mode == "tile":
        return (Launch(_horizontal_tile_kernel, (cdiv(M, plan.block_m),),
                       dict(BLOCK_M=plan.block_m, BLOCK_N=plan.block_n, **flags)), (M, N, sam, san))
    if plan.mode == "loop":
        return (Launch(_horizontal_loop_kernel, (plan.grid or cdiv(M, plan.block_m),),
                       dict(BLOCK_M=plan.block_m, BLOCK_N=plan.block_n, STAGES=plan.stages, **flags)),
                (M, N, sam, san))
    # split (the long-row plans of row_plans other than loop): the partials' workspace is written
    # and read within a launch, so one per launcher serves every call (one stream at a time, as
    # the counters)
    ws = torch.empty((M * plan.splits, 2), dtype=torch.float32, device=a.device)
    return (Launch(_horizontal_split_kernel, (M * plan.splits,),
                   dict(BLOCK_N=plan.block_n, BLOCK_S=next_pow2(plan.splits), **flags)),
            (ws, zeroed_counters(a.device, M), N, sam, san, plan.splits))


def _launch(a, out_sum, out_max, out_cos, plan: RowPlan):
    """Launch `plan` through the JIT (the tuner's launches).  Unused outputs get a harmless
    pointer: the constexpr flags remove every access to them."""
    launch, rest = _launch_for(a, out_cos is not None, out_max is not None, plan)
    launch.jit(a, out_sum, out_sum if out_max is None else out_max, out_sum if out_cos is None else out_cos, *rest)


class _HorizontalLauncher:
    """One case's call for one key: the plan, the Launch and its other arguments, the outputs'
    shapes (launch None: no rows)."""

    __slots__ = ("plan", "launch", "rest", "with_cos", "with_max", "rows", "shape", "stride")

    def __call__(self, a):
        # new_empty_strided with plain tuples: the cheapest allocation from Python
        out_sum = a.new_empty_strided(self.rows, (1,))
        if self.with_cos:
            second = a.new_empty_strided(self.shape, self.stride)
            if self.launch is not None:
                self.launch(a, out_sum, out_sum, second, *self.rest)
        else:
            second = a.new_empty_strided(self.rows, (1,)) if self.with_max else None
            if self.launch is not None:
                self.launch(a, out_sum, second, out_sum, *self.rest)
        return (out_sum, second), self.plan


# (case, forced plan, max_onchip, the input's signature) -> its _HorizontalLauncher
_CACHE = STATE.launchers("horizontal")


def horizontal_plans(M, N, device, max_onchip=MAX_ONCHIP, with_cos=False, **kw):
    """row_plans without the cooperative ones (these cases read each row once anyway).

    Rows of 1024 columns or more that fit on chip also try looped plans, which here are one pass
    too: a few rows per program streamed in 1-2 K-column steps into per-lane accumulators and
    reduced across lanes once per row (the shape of Inductor's looped reductions), with one
    program per group of rows or a persistent, pipelined grid.  One of them is the config
    Inductor's autotuner keeps for horizontal_reduction_pointwise at 512x8192 (one row per
    program, 2048-column steps, 16 warps).  Inductor loads `a` there evict_first, as ours does
    only without the cos output: `with_cos` adds the first plan and that config with evict_first
    loads as candidates."""
    plans = [p for p in row_plans(M, N, device, max_onchip=max_onchip, splits=True, **kw) if p.mode != "coop"]
    if 1024 <= N <= max_onchip:
        sms = num_sms(device)
        plans += [loop_plan(step, warps, rows=rows, grid=grid, stages=stages)
                  for rows, step, warps, grid, stages in [
                      (1, 2048, 8, 0, None), (1, 2048, 16, 0, None), (1, 1024, 4, 0, None), (2, 1024, 8, 0, None),
                      (4, 1024, 8, 0, None),
                      (1, 2048, 8, 4 * sms, 3), (2, 1024, 8, 2 * sms, 3)]
                  if step <= next_pow2(N)]
    if with_cos:
        inductors = [p for p in plans
                     if (p.mode, p.block_m, p.block_n, p.num_warps, p.grid) == ("loop", 1, 2048, 16, 0)]
        plans += [replace(p, evict_first=True) for p in plans[:1] + inductors]
    return unique(plans)


def _horizontal(name, a, with_cos, with_max, plan, max_onchip, return_plan=False):
    """The case's outputs (and the plan): one dict lookup of the key's launcher, the outputs'
    allocation and a launch; a new key checks the input, asks the tuner and builds the launcher."""
    key = (name, plan, max_onchip, signature(a))
    found = _CACHE.get(key)
    out, plan = found(a) if found is not None else _first_call(name, a, with_cos, with_max, plan, max_onchip, key)
    return (out, plan) if return_plan else out


def _first_call(name, a, with_cos, with_max, plan, max_onchip, key):
    """_horizontal for a key without a launcher: check the input (an exotic view is copied, and
    the copy runs under a key of its own; no columns: no launch), then call the key's launcher,
    built by _build."""
    laid = as_2d_strided(a)
    if laid is not a:
        return _horizontal(name, laid, with_cos, with_max, plan, max_onchip, True)
    M, N = a.shape
    if N == 0:
        # sum over nothing is 0 (amax over nothing raises in PyTorch, as eager does)
        if with_max:
            raise RuntimeError("amax(): expected a non-empty reduction dimension")
        out_cos = torch.empty((M, N), dtype=a.dtype, device=a.device) if with_cos else None
        return (torch.zeros((M,), dtype=a.dtype, device=a.device), out_cos), None
    return _CACHE.miss(key, _build, name, a, with_cos, with_max, plan, max_onchip)(a)


def _build(name, a, with_cos, with_max, plan, max_onchip) -> tuple[_HorizontalLauncher, bool]:
    """(the launcher of a checked input, whether its plan is final: launch.is_final): with `plan`,
    else with the tuner's choice among horizontal_plans."""
    M, N = a.shape
    final = True
    if M > 0 and plan is None:
        operands = (a, torch.empty((M,), dtype=a.dtype, device=a.device),
                    torch.empty((M,), dtype=a.dtype, device=a.device) if with_max else None,
                    torch.empty((M, N), dtype=a.dtype, device=a.device) if with_cos else None)
        cands = horizontal_plans(M, N, a.device, max_onchip=max_onchip, with_cos=with_cos,
                                 elem_size=a.element_size())
        tuner_key = (name, *key_of(a))
        plan = autotune(tuner_key, cands, lambda p, *ops: _launch(*ops, p), a.device, operands, n_outputs=3,
                        source=_SOURCE())
        final = is_final(tuning.TUNER, tuner_key, a.device, len(cands))
    launcher = _HorizontalLauncher()
    launcher.plan, launcher.with_cos, launcher.with_max = plan, with_cos, with_max
    launcher.rows, launcher.shape, launcher.stride = (M,), (M, N), (N, 1)
    launcher.launch, launcher.rest = _launch_for(a, with_cos, with_max, plan) if M > 0 else (None, ())
    return launcher, final


def horizontal_reduction_pointwise_impl(a: torch.Tensor, plan: RowPlan | None = None,
                                        max_onchip: int = MAX_ONCHIP):
    return _horizontal("horizontal_reduction_pointwise", a, True, False, plan, max_onchip)


def horizontal_reduction_reduction_impl(a: torch.Tensor, plan: RowPlan | None = None,
                                        max_onchip: int = MAX_ONCHIP):
    return _horizontal("horizontal_reduction_reduction", a, False, True, plan, max_onchip)


def _describe(shape, dtype):
    return row_plans(shape[0], shape[1], "cuda" if torch.cuda.is_available() else "cpu", splits=True,
                           elem_size=torch.empty((), dtype=dtype).element_size())[0].describe()


@triton_kernel(cases.HORIZONTAL_REDUCTION_POINTWISE, interpretable=True, describe=_describe,
               run=lambda a: _horizontal("horizontal_reduction_pointwise", a, True, False, None, MAX_ONCHIP, True))
def horizontal_reduction_pointwise(a):
    return horizontal_reduction_pointwise_impl(a)


@triton_kernel(cases.HORIZONTAL_REDUCTION_REDUCTION, interpretable=True, describe=_describe,
               run=lambda a: _horizontal("horizontal_reduction_reduction", a, False, True, None, MAX_ONCHIP, True))
def horizontal_reduction_reduction(a):
    return horizontal_reduction_reduction_impl(a)
