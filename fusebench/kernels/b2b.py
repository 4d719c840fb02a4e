"""matmul_matmul: (a @ b) @ c as one kernel that keeps the intermediate on chip, where it fits.

One program owns BLOCK_M rows of the output: it computes its rows of t = a @ b (all N columns,
accumulated over K in fp32, rounded to the input dtype as eager's a @ b is) into registers, then
multiplies them by c in BLOCK_P-column chunks.  Intermediates wider than B2B_MAX_N go through two
GEMMs (matmul.gemm), launched one after the other or, with gemm_utils.MULTI_KERNEL == "graph",
replayed from a CUDA graph captured per problem key.  Both paths keep a plan per key (see
matmul.py): a repeated call is a lookup, the output's allocation and the launch.
"""
from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from fusebench import settings
from fusebench.cases import matmul as cases
from fusebench.kernels.device import is_interpreter as interpreting
from fusebench.kernels.device import next_pow2
from fusebench.kernels import gemm_utils as gu
from fusebench.kernels.launch import STATE, signature
from fusebench.kernels.gemm_utils import dot_precision, precision_note, tuned_launch
from fusebench.kernels.matmul import _supports, gemm
from fusebench.kernels.registry import triton_kernel
from fusebench.kernels.tuning import triton_autotune as autotune


def _b2b_configs():
    if interpreting():
        return [triton.Config({"BLOCK_M": 32, "BLOCK_K": 32, "BLOCK_P": 32}, num_stages=1, num_warps=4)]
    return [triton.Config({"BLOCK_M": bm, "BLOCK_K": bk, "BLOCK_P": bp}, num_stages=s, num_warps=w)
            for bm, bk, bp, s, w in [(64, 64, 128, 3, 4), (128, 64, 128, 3, 8), (64, 64, 128, 3, 8),
                                     (64, 32, 64, 4, 4), (32, 64, 128, 3, 4)]]


def _prune_b2b(configs, named_args, **kwargs):
    n, p = named_args["N"], named_args["P"]
    keep = [c for c in configs if c.kwargs["BLOCK_P"] <= next_pow2(p, floor=16)]
    if n > 128:  # a (BLOCK_M x 256) fp32 accumulator: keep the tile short, or spread it over 8 warps
        keep = [c for c in keep if c.kwargs["BLOCK_M"] <= 64 and (c.num_warps == 8 or c.kwargs["BLOCK_K"] <= 32)]
    return keep or configs[-1:]


@autotune(configs=_b2b_configs(), key=["M", "N", "K", "P"], prune_configs_by={"early_config_prune": _prune_b2b})
@triton.jit
def _b2b_kernel(a_ptr, b_ptr, c_ptr, o_ptr,  #
                M, N, K, P,  #
                stride_am, stride_ak, stride_bk, stride_bn, stride_cn, stride_cp, stride_om, stride_op,  #
                PRECISION: tl.constexpr, BLOCK_N: tl.constexpr,  #
                BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_P: tl.constexpr):
    # One program owns BLOCK_M rows of the output and all its P columns.
    pid = tl.program_id(axis=0)
    offs_m = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_am = tl.where(offs_m < M, offs_m, 0)  # out-of-range rows read row 0, never stored
    offs_k = tl.arange(0, BLOCK_K)
    offs_n = tl.arange(0, BLOCK_N)  # the whole width of the intermediate (padded to a power of 2)
    n_mask = offs_n < N

    # Stage 1: t = a[rows, :] @ b  -> (BLOCK_M, BLOCK_N), accumulated over K in fp32.
    a_ptrs = a_ptr + offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    t = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & n_mask[None, :], other=0.0)
        t = tl.dot(a, b, t, input_precision=PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    # Round the intermediate to the input dtype, as eager's (a @ b) does; it stays in registers.
    t = t.to(c_ptr.dtype.element_ty)

    # Stage 2: out[rows, p:p+BLOCK_P] = t @ c[:, p:p+BLOCK_P] for each chunk of P.
    # Padded columns of t are 0 (b was masked) and the matching rows of c are masked to 0 too.
    offs_p = tl.arange(0, BLOCK_P)
    for p0 in range(0, P, BLOCK_P):
        cols = p0 + offs_p
        c_ptrs = c_ptr + offs_n[:, None] * stride_cn + cols[None, :] * stride_cp
        c = tl.load(c_ptrs, mask=n_mask[:, None] & (cols[None, :] < P), other=0.0)
        o = tl.dot(t, c, input_precision=PRECISION)
        o_ptrs = o_ptr + offs_m[:, None] * stride_om + cols[None, :] * stride_op
        tl.store(o_ptrs, o.to(o_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (cols[None, :] < P))


B2B_MAX_N = 256  # widest intermediate kept on chip


def b2b_fused(n: int) -> bool:
    return n <= B2B_MAX_N


# {problem key: plan}; a plan is `plan(a, b, c) -> out`, everything but the output decided at the
# key's first call.  The key holds the fp32_precision setting (the dots' precision), read at each
# call: a changed setting takes the next call to a plan of its own.
_PLANS = STATE.table("b2b.plans")


def b2b(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    key = (signature(a, b, c), settings.current().fp32_precision)
    plan = _PLANS.get(key)
    if plan is None:
        plan, out = _fused_plan(a, b, c)
        _PLANS[key] = plan
        return out
    return plan(a, b, c)


def _fused_plan(a, b, c):
    """The fused kernel run through its autotuner on this call's operands; then (plan, output)."""
    M, K = a.shape
    N, P = c.shape
    alloc = functools.partial(torch.empty, (M, P), device=a.device, dtype=a.dtype)
    out = alloc()
    if M == 0 or P == 0:
        return (lambda a, b, c: alloc()), out
    ints = (M, N, K, P, *a.stride(), *b.stride(), *c.stride(), *out.stride())
    consts = dict(PRECISION=dot_precision(a.dtype), BLOCK_N=next_pow2(N, floor=16))

    def grid(meta):
        return (triton.cdiv(M, meta["BLOCK_M"]),)

    args = (a, b, c, out, *ints)
    _b2b_kernel[grid](*args, **consts)
    launch = tuned_launch(_b2b_kernel, grid, args, consts)

    def plan(a, b, c):
        out = alloc()
        launch(a, b, c, out, *ints)
        return out

    return plan, out


def two_gemms(a, b, c):
    """(a @ b) @ c as two GEMM launches (the intermediate goes through memory)."""
    return gemm(gemm(a, b), c)


# Two-GEMM paths captured in a CUDA graph (gemm_utils.MULTI_KERNEL == "graph"), per problem key and
# the settings that decide the GEMMs' plans.
_GRAPHS = STATE.table("b2b.graphs")


def _describe_b2b(shape, dtype):
    n = shape[1]
    if b2b_fused(n):
        return f"{precision_note(dtype)}, fused b2b (intermediate on chip, N={n} <= {B2B_MAX_N})"
    return f"{precision_note(dtype)}, two GEMMs (N={n} > {B2B_MAX_N}: intermediate too wide for the chip)"


@triton_kernel(cases.MATMUL_MATMUL, supports=_supports, describe=_describe_b2b, interpretable=True)
def matmul_matmul(a, b, c):
    if b2b_fused(b.shape[1]):
        return b2b(a, b, c)
    if not gu.graph_capturable(a):
        return two_gemms(a, b, c)
    s = settings.current()
    key = (signature(a, b, c), s.gemm_impl, s.fp32_precision)
    graph = _GRAPHS.get(key)
    if graph is None:
        graph = _GRAPHS[key] = gu.GraphCall(two_gemms, (a, b, c))
    return graph(a, b, c)
