"""Attention backward, FlashAttention-2 style, and the autograd.Function that pairs it with the forward.

With S = scale * q k^T, P = softmax(S) (causal: keys after the query masked) and O = P v, the
gradients given dO are
    dV = P^T dO,   dP = dO v^T,   dS = P * (dP - delta),   dQ = scale * dS k,   dK = scale * dS^T q
where delta = rowsum(dP * P) = rowsum(dO * O) per query row.  The forward (attention.py) saves each
row's logsumexp `lse` of S (fp32), so that any block of P is recomputed exactly as exp(S - lse)
without the row's other blocks: the (seqlen x seqlen) matrices P, dP and dS never exist in memory.

Three kernels, as in Triton's fused-attention tutorial:
- `_bwd_preprocess`: delta = rowsum(dO * O), fp32 (batch, heads, seqlen).
- `_bwd_dkdv`: one program owns BLOCK_N keys of one head and streams the queries in blocks of
  BLOCK_M, accumulating dK and dV (fp32) on chip.  It works on the transposed tiles (P^T, dP^T)
  so that each product has the key block on its rows.
- `_bwd_dq`: one program owns BLOCK_M queries and streams the keys in blocks of BLOCK_N,
  accumulating dQ.  It recomputes q k^T and dO v^T, which the dK/dV kernel has also computed:
  two more GEMMs against the atomics a single kernel would need to add dQ across key blocks.
Both loops split their range into blocks without masks, the blocks straddling the diagonal
(causal) and the partial last block (seqlen not a multiple of the block), as the forward does.
Exponentials are exp2 with scale * log2(e) folded into one multiplier.

Inputs may have any strides; dQ, dK and dV are contiguous, in the inputs' dtype.  As in the
forward, the host keeps a plan per problem key (the three launches with their tuned configs).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from fusebench.kernels.attention import flash_attention
from fusebench.kernels.device import is_hopper_or_newer
from fusebench.kernels.device import is_interpreter as interpreting
from fusebench.kernels.gemm_utils import tuned_launch
from fusebench.kernels.launch import STATE, Launch, signature
from fusebench.kernels.tuning import triton_autotune as autotune

LOG2E = 1.4426950408889634
PRE_BLOCK = 64  # rows of O and dO a preprocess program reads


@dataclass(frozen=True)
class Blocks:
    """One launch configuration of a backward kernel: the query rows (block_m) and keys (block_n)
    of a tile; the dK/dV kernel needs block_n % block_m == 0, the dQ kernel block_m % block_n == 0
    (the diagonal blocks then line up with the unmasked ones)."""
    block_m: int
    block_n: int
    num_warps: int
    num_stages: int

    def config(self) -> triton.Config:
        return triton.Config({"BLOCK_M": self.block_m, "BLOCK_N": self.block_n}, num_warps=self.num_warps,
                             num_stages=self.num_stages)


INTERPRETER = Blocks(16, 16, 4, 1)
# The tuning spaces.  dK/dV holds two (BLOCK_N, head_dim) fp32 accumulators and streams thin query
# blocks; dQ holds one (BLOCK_M, head_dim) accumulator and streams thin key blocks.
DKDV_SPACE = (Blocks(32, 128, 8, 3), Blocks(32, 128, 4, 3), Blocks(64, 128, 8, 2), Blocks(32, 64, 4, 3),
              Blocks(16, 64, 4, 2))
DQ_SPACE = (Blocks(128, 32, 8, 3), Blocks(128, 32, 4, 3), Blocks(128, 64, 8, 2), Blocks(64, 32, 4, 3),
            Blocks(64, 16, 4, 2))
DKDV_SPACE_PRE_HOPPER = (Blocks(32, 64, 4, 3), Blocks(16, 64, 4, 2), Blocks(32, 128, 8, 2))
DQ_SPACE_PRE_HOPPER = (Blocks(64, 32, 4, 3), Blocks(64, 16, 4, 2), Blocks(128, 32, 8, 2))


def _configs(space, pre_hopper_space):
    if interpreting():
        return [INTERPRETER.config()]
    return [b.config() for b in (space if is_hopper_or_newer() else pre_hopper_space)]


def _prune(configs, named_args, **kwargs):
    """Tiles no longer than the (padded) sequence; head_dim 256: tiles of at most 64 x 64, two stages."""
    n_ctx, d = named_args["N_CTX"], kwargs.get("HEAD_DIM", named_args.get("HEAD_DIM"))
    longest = max(16, triton.next_power_of_2(n_ctx))
    keep = [c for c in configs if max(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"]) <= longest]
    if d is not None and d > 128:
        keep = [c for c in keep if max(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"]) <= 64 and c.num_stages <= 2]
    return keep or configs[-1:]


@triton.jit
def _head(ptr, off_hz, H, stride_z, stride_h):
    # this (batch, head)'s base in a (batch, heads, seqlen, head_dim) tensor; int64 offsets
    return ptr + (off_hz // H).to(tl.int64) * stride_z + (off_hz % H).to(tl.int64) * stride_h


@triton.jit
def _load(ptrs, mask, MASK_TAIL: tl.constexpr):
    # with MASK_TAIL, rows past seqlen (mask false) read 0; without it (whole blocks) no mask, which
    # lets the compiler vectorize the load
    if MASK_TAIL:
        x = tl.load(ptrs, mask=mask, other=0.0)
    else:
        x = tl.load(ptrs)
    return x


# ------------------------------------------------------------------------------------------------
# delta = rowsum(dO * O)


@triton.jit
def _bwd_preprocess(O, DO, Delta,  #
                    stride_oz, stride_oh, stride_om, stride_od,  #
                    stride_dz, stride_dh, stride_dm, stride_dd,  #
                    H, N_CTX, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr):
    off_hz = tl.program_id(1)
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    rows = offs_m < N_CTX
    o = tl.load(_head(O, off_hz, H, stride_oz, stride_oh) + offs_m[:, None] * stride_om + offs_d[None, :] * stride_od,
                mask=rows[:, None], other=0.0).to(tl.float32)
    do = tl.load(_head(DO, off_hz, H, stride_dz, stride_dh) + offs_m[:, None] * stride_dm
                 + offs_d[None, :] * stride_dd, mask=rows[:, None], other=0.0).to(tl.float32)
    tl.store(Delta + off_hz.to(tl.int64) * N_CTX + offs_m, tl.sum(o * do, 1), mask=rows)


# ------------------------------------------------------------------------------------------------
# dK and dV: a block of keys, the queries streamed


@triton.jit
def _dkdv_inner(dk, dv, k, v, q_base, do_base, lse_row, delta_row,  #
                stride_qm, stride_qd, stride_dm, stride_dd,  #
                lo, hi, qk_scale, N_CTX, offs_n,  #
                BLOCK_M: tl.constexpr, HEAD_DIM: tl.constexpr, MASK_DIAG: tl.constexpr, MASK_TAIL: tl.constexpr):
    offs_d = tl.arange(0, HEAD_DIM)
    for start_m in range(lo, hi, BLOCK_M):
        start_m = tl.multiple_of(start_m, BLOCK_M)
        offs_m = start_m + tl.arange(0, BLOCK_M)
        # q^T tile (HEAD_DIM, BLOCK_M), dO tile (BLOCK_M, HEAD_DIM) and the rows' scalars
        rows = offs_m < N_CTX
        qt = _load(q_base + offs_m[None, :] * stride_qm + offs_d[:, None] * stride_qd, rows[None, :], MASK_TAIL)
        do = _load(do_base + offs_m[:, None] * stride_dm + offs_d[None, :] * stride_dd, rows[:, None], MASK_TAIL)
        lse = _load(lse_row + offs_m, rows, MASK_TAIL)
        delta = _load(delta_row + offs_m, rows, MASK_TAIL)
        # P^T (BLOCK_N, BLOCK_M) = exp(scale * k q^T - lse), in base 2
        pt = tl.math.exp2(tl.dot(k, qt, input_precision="ieee") * qk_scale - lse[None, :] * 1.4426950408889634)
        if MASK_DIAG or MASK_TAIL:
            keep = offs_m[None, :] < N_CTX
            if MASK_DIAG:
                keep = keep & (offs_m[None, :] >= offs_n[:, None])
            pt = tl.where(keep, pt, 0.0)
        dv = tl.dot(pt.to(do.dtype), do, dv, input_precision="ieee")
        # dS^T = P^T * (dP^T - delta), dP^T = v dO^T
        dpt = tl.dot(v, tl.trans(do), input_precision="ieee")
        dst = pt * (dpt - delta[None, :])
        dk = tl.dot(dst.to(qt.dtype), tl.trans(qt), dk, input_precision="ieee")
    return dk, dv


@autotune(configs=_configs(DKDV_SPACE, DKDV_SPACE_PRE_HOPPER), key=["N_CTX", "HEAD_DIM", "CAUSAL"],
          prune_configs_by={"early_config_prune": _prune})
@triton.jit
def _bwd_dkdv(Q, K, V, DO, Lse, Delta, DK, DV, sm_scale,  #
              stride_qz, stride_qh, stride_qm, stride_qd,  #
              stride_kz, stride_kh, stride_kn, stride_kd,  #
              stride_vz, stride_vh, stride_vn, stride_vd,  #
              stride_dz, stride_dh, stride_dm, stride_dd,  #
              H, N_CTX,  #
              HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    tl.static_assert(BLOCK_N % BLOCK_M == 0)
    # program (key block, batch*head); causal: the first key blocks see the most queries and go first
    start_n = tl.program_id(0) * BLOCK_N
    off_hz = tl.program_id(1)
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    keys = offs_n[:, None] < N_CTX
    # k and v stay in registers for the whole query loop; keys past seqlen read 0 and are never stored
    k = tl.load(_head(K, off_hz, H, stride_kz, stride_kh) + offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kd,
                mask=keys, other=0.0)
    v = tl.load(_head(V, off_hz, H, stride_vz, stride_vh) + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd,
                mask=keys, other=0.0)
    q_base = _head(Q, off_hz, H, stride_qz, stride_qh)
    do_base = _head(DO, off_hz, H, stride_dz, stride_dh)
    lse_row = Lse + off_hz.to(tl.int64) * N_CTX
    delta_row = Delta + off_hz.to(tl.int64) * N_CTX
    dk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.4426950408889634
    n_full = (N_CTX // BLOCK_M) * BLOCK_M  # queries in whole blocks
    if CAUSAL:
        # queries before start_n see none of these keys; the block's own queries straddle the
        # diagonal (masked with query >= key, and may hold the partial last block)
        lo = tl.minimum(start_n + BLOCK_N, N_CTX)
        dk, dv = _dkdv_inner(dk, dv, k, v, q_base, do_base, lse_row, delta_row, stride_qm, stride_qd, stride_dm,
                             stride_dd, start_n, lo, qk_scale, N_CTX, offs_n, BLOCK_M, HEAD_DIM, True, True)
        tail_lo = tl.maximum(lo, n_full)
    else:
        lo = 0
        tail_lo = n_full
    # the later queries see every key of the block: no mask but the partial last block's
    dk, dv = _dkdv_inner(dk, dv, k, v, q_base, do_base, lse_row, delta_row, stride_qm, stride_qd, stride_dm,
                         stride_dd, lo, n_full, qk_scale, N_CTX, offs_n, BLOCK_M, HEAD_DIM, False, False)
    dk, dv = _dkdv_inner(dk, dv, k, v, q_base, do_base, lse_row, delta_row, stride_qm, stride_qd, stride_dm,
                         stride_dd, tail_lo, N_CTX, qk_scale, N_CTX, offs_n, BLOCK_M, HEAD_DIM,
                         False, True)
    dk *= sm_scale
    # dK and dV: contiguous (batch, heads, seqlen, head_dim)
    out_offs = off_hz.to(tl.int64) * N_CTX * HEAD_DIM + offs_n[:, None] * HEAD_DIM + offs_d[None, :]
    tl.store(DK + out_offs, dk.to(DK.dtype.element_ty), mask=keys)
    tl.store(DV + out_offs, dv.to(DV.dtype.element_ty), mask=keys)


# ------------------------------------------------------------------------------------------------
# dQ: a block of queries, the keys streamed


@triton.jit
def _dq_inner(dq, q, do, lse, delta, k_base, v_base,  #
              stride_kn, stride_kd, stride_vn, stride_vd,  #
              lo, hi, qk_scale, N_CTX, offs_m,  #
              BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, MASK_DIAG: tl.constexpr, MASK_TAIL: tl.constexpr):
    offs_d = tl.arange(0, HEAD_DIM)
    for start_n in range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        offs_n = start_n + tl.arange(0, BLOCK_N)
        # k^T and v^T tiles (HEAD_DIM, BLOCK_N)
        keys = offs_n[None, :] < N_CTX
        kt = _load(k_base + offs_n[None, :] * stride_kn + offs_d[:, None] * stride_kd, keys, MASK_TAIL)
        vt = _load(v_base + offs_n[None, :] * stride_vn + offs_d[:, None] * stride_vd, keys, MASK_TAIL)
        p = tl.math.exp2(tl.dot(q, kt, input_precision="ieee") * qk_scale - lse[:, None])
        if MASK_DIAG or MASK_TAIL:
            keep = offs_n[None, :] < N_CTX
            if MASK_DIAG:
                keep = keep & (offs_m[:, None] >= offs_n[None, :])
            p = tl.where(keep, p, 0.0)
        dp = tl.dot(do, vt, input_precision="ieee")
        ds = p * (dp - delta[:, None])
        dq = tl.dot(ds.to(kt.dtype), tl.trans(kt), dq, input_precision="ieee")
    return dq


@autotune(configs=_configs(DQ_SPACE, DQ_SPACE_PRE_HOPPER), key=["N_CTX", "HEAD_DIM", "CAUSAL"],
          prune_configs_by={"early_config_prune": _prune})
@triton.jit
def _bwd_dq(Q, K, V, DO, Lse, Delta, DQ, sm_scale,  #
            stride_qz, stride_qh, stride_qm, stride_qd,  #
            stride_kz, stride_kh, stride_kn, stride_kd,  #
            stride_vz, stride_vh, stride_vn, stride_vd,  #
            stride_dz, stride_dh, stride_dm, stride_dd,  #
            H, N_CTX,  #
            HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    tl.static_assert(BLOCK_M % BLOCK_N == 0)
    # program (query block, batch*head); causal: heaviest query blocks (the last ones) first
    start_m = tl.program_id(0)
    if CAUSAL:
        start_m = tl.num_programs(0) - 1 - start_m
    start_m *= BLOCK_M
    off_hz = tl.program_id(1)
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    rows = offs_m < N_CTX
    # q, dO and the rows' scalars stay in registers; rows past seqlen read 0 and are never stored
    q = tl.load(_head(Q, off_hz, H, stride_qz, stride_qh) + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd,
                mask=rows[:, None], other=0.0)
    do = tl.load(_head(DO, off_hz, H, stride_dz, stride_dh) + offs_m[:, None] * stride_dm
                 + offs_d[None, :] * stride_dd, mask=rows[:, None], other=0.0)
    lse = tl.load(Lse + off_hz.to(tl.int64) * N_CTX + offs_m, mask=rows, other=0.0) * 1.4426950408889634
    delta = tl.load(Delta + off_hz.to(tl.int64) * N_CTX + offs_m, mask=rows, other=0.0)
    k_base = _head(K, off_hz, H, stride_kz, stride_kh)
    v_base = _head(V, off_hz, H, stride_vz, stride_vh)
    dq = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.4426950408889634
    if CAUSAL:
        # keys [0, start_m) are before every query of the block: no mask; then the diagonal blocks
        dq = _dq_inner(dq, q, do, lse, delta, k_base, v_base, stride_kn, stride_kd, stride_vn, stride_vd,
                       0, start_m, qk_scale, N_CTX, offs_m, BLOCK_N, HEAD_DIM, False, False)
        dq = _dq_inner(dq, q, do, lse, delta, k_base, v_base, stride_kn, stride_kd, stride_vn, stride_vd,
                       start_m, tl.minimum(start_m + BLOCK_M, N_CTX), qk_scale, N_CTX, offs_m, BLOCK_N, HEAD_DIM,
                       True, True)
    else:
        n_full = (N_CTX // BLOCK_N) * BLOCK_N
        dq = _dq_inner(dq, q, do, lse, delta, k_base, v_base, stride_kn, stride_kd, stride_vn, stride_vd,
                       0, n_full, qk_scale, N_CTX, offs_m, BLOCK_N, HEAD_DIM, False, False)
        # partial last block of keys: at most one iteration
        dq = _dq_inner(dq, q, do, lse, delta, k_base, v_base, stride_kn, stride_kd, stride_vn, stride_vd,
                       n_full, N_CTX, qk_scale, N_CTX, offs_m, BLOCK_N, HEAD_DIM, False, True)
    dq *= sm_scale
    out_offs = off_hz.to(tl.int64) * N_CTX * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :]
    tl.store(DQ + out_offs, dq.to(DQ.dtype.element_ty), mask=rows[:, None])


# ------------------------------------------------------------------------------------------------
# Host side.

# {problem key: plan}; a plan is `plan(do, q, k, v, out, lse) -> (dq, dk, dv)`, the three launches
# with the configs tuned at the key's first call.
_PLANS = STATE.table("attention_backward.plans")


def attention_backward(do, q, k, v, out, lse, causal: bool):
    """(dq, dk, dv) of softmax(scale * q k^T [+ causal mask]) v given the output's gradient `do`,
    the output `out` and the rows' logsumexp `lse` (fp32 (batch, heads, seqlen), contiguous) that
    flash_attention(..., with_lse=True) returned."""
    key = (signature(do, q, k, v, out, lse), bool(causal))
    plan = _PLANS.get(key)
    if plan is None:
        plan, grads = _first_call(do, q, k, v, out, lse, bool(causal))
        _PLANS[key] = plan
        return grads
    return plan(do, q, k, v, out, lse)


def _first_call(do, q, k, v, out, lse, causal):
    """Run the kernels (the two GEMM kernels through their autotuners) on this call's operands;
    then (plan, (dq, dk, dv))."""
    B, H, S, D = q.shape
    assert k.shape == q.shape and v.shape == q.shape and do.shape == q.shape and out.shape == q.shape
    assert lse.shape == (B, H, S) and lse.dtype == torch.float32 and lse.is_contiguous()

    def alloc():
        # dq, dk, dv contiguous, and delta
        grads = tuple(torch.empty(q.shape, device=q.device, dtype=q.dtype) for _ in range(3))
        return grads, torch.empty((B, H, S), device=q.device, dtype=torch.float32)

    (dq, dk, dv), delta = alloc()
    if q.numel() == 0:
        return (lambda *args: alloc()[0]), (dq, dk, dv)
    sm_scale = 1.0 / math.sqrt(D)
    consts = dict(HEAD_DIM=D, CAUSAL=causal)
    pre_block = 16 if interpreting() else PRE_BLOCK
    pre = Launch(_bwd_preprocess, (triton.cdiv(S, pre_block), B * H),
                 dict(HEAD_DIM=D, BLOCK_M=pre_block, num_warps=4))
    pre_ints = (*out.stride(), *do.stride(), H, S)
    gemm_ints = (sm_scale, *q.stride(), *k.stride(), *v.stride(), *do.stride(), H, S)

    def dkdv_grid(meta):
        return (triton.cdiv(S, meta["BLOCK_N"]), B * H)

    def dq_grid(meta):
        return (triton.cdiv(S, meta["BLOCK_M"]), B * H)

    pre(out, do, delta, *pre_ints)
    _bwd_dkdv[dkdv_grid](q, k, v, do, lse, delta, dk, dv, *gemm_ints, **consts)
    dkdv = tuned_launch(_bwd_dkdv, dkdv_grid, (q, k, v, do, lse, delta, dk, dv, *gemm_ints), consts)
    _bwd_dq[dq_grid](q, k, v, do, lse, delta, dq, *gemm_ints, **consts)
    dq_launch = tuned_launch(_bwd_dq, dq_grid, (q, k, v, do, lse, delta, dq, *gemm_ints), consts)

    def plan(do, q, k, v, out, lse):
        (dq, dk, dv), delta = alloc()
        pre(out, do, delta, *pre_ints)
        dkdv(q, k, v, do, lse, delta, dk, dv, *gemm_ints)
        dq_launch(q, k, v, do, lse, delta, dq, *gemm_ints)
        return dq, dk, dv

    return plan, (dq, dk, dv)


# ------------------------------------------------------------------------------------------------
# autograd


class FlashAttention(torch.autograd.Function):
    """attention.flash_attention forward (storing the rows' logsumexp), attention_backward
    backward; saves q, k, v, the output and the logsumexp."""

    @staticmethod
    def forward(ctx, q, k, v, causal):
        out, lse = flash_attention(q, k, v, causal, with_lse=True)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal = bool(causal)
        return out

    @staticmethod
    def backward(ctx, do):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = attention_backward(do, q, k, v, out, lse, ctx.causal)
        return dq, dk, dv, None


def attention(q, k, v, causal: bool):
    """The attention case's function through FlashAttention (registered as the kernel's autograd)."""
    return FlashAttention.apply(q, k, v, causal)
