"""conv.py's "igemm" path: an implicit-GEMM Triton convolution with the epilogue fused.

The GEMM is (output pixels) x (C_out) x (R*S*C_in); the A tile is gathered from x on the fly (no
im2col buffer), zero padding comes from the load mask, and bias / residual / relu are applied to
the fp32 accumulator before the output's only store.  Best with channels_last tensors (C_in
contiguous: vector loads along K).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from fusebench.kernels.conv_epilogue import is_channels_last
from fusebench.kernels.gemm_configs import conv_configs, prune_conv
from fusebench.kernels.gemm_utils import dot_precision, grouped_tile, tuned_launch
from fusebench.kernels.tuning import triton_autotune as autotune

HOPPER_IGEMM = [(128, 128, 64, 3, 8), (128, 64, 64, 4, 4), (64, 128, 64, 4, 4), (128, 128, 64, 4, 8)]


def _igemm_configs():
    return conv_configs(HOPPER_IGEMM)


def _prune_igemm(configs, named_args, **kwargs):
    return prune_conv(configs, named_args["x_ptr"].element_size(), named_args["K_OUT"], named_args["C"], "BLOCK_N")


@autotune(configs=_igemm_configs(), key=["N", "C", "H", "W", "K_OUT", "R", "S", "stride"],
                 prune_configs_by={"early_config_prune": _prune_igemm})
@triton.jit(do_not_specialize=["HAS_BIAS", "HAS_RES", "RELU"])
def _conv_igemm_kernel(x_ptr, w_ptr, y_ptr, bias_ptr, res_ptr,  #
                       N, C, H, W, K_OUT, P, Q, R, S, stride, pad,  #
                       sxn, sxc, sxh, sxw,  # x (N, C, H, W) strides
                       swk, swc, swr, sws,  # w (K_OUT, C, R, S) strides
                       syn, syk, syp, syq,  # y (N, K_OUT, P, Q) strides
                       srn, srk, srp, srq,  # residual strides (same shape as y)
                       HAS_BIAS, HAS_RES, RELU,  #
                       PRECISION: tl.constexpr,  #
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    # GEMM view: rows m = output pixels (n, p, q), columns = output channels, reduction = (r, s, c).
    M = N * P * Q
    pid_m, pid_n = grouped_tile(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.cdiv(K_OUT, BLOCK_N), GROUP_M)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    # output pixel m -> (n, p, q); its receptive field starts at input (p*stride - pad, q*stride - pad)
    n_idx = offs_m // (P * Q)
    pq = offs_m % (P * Q)
    ih0 = (pq // Q) * stride - pad
    iw0 = (pq % Q) * stride - pad
    m_ok = offs_m < M
    x_base = x_ptr + n_idx * sxn
    w_base = w_ptr + offs_n[None, :] * swk
    n_ok = offs_n[None, :] < K_OUT

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # One flat loop over (r, s, c-block) so that the compiler can software-pipeline the loads.
    c_tiles = tl.cdiv(C, BLOCK_K)
    for t in range(0, R * S * c_tiles):
        rs = t // c_tiles
        c0 = (t % c_tiles) * BLOCK_K
        r = rs // S
        s = rs % S
        ih = ih0 + r
        iw = iw0 + s
        cs = c0 + offs_k
        # A[m, c] = x[n, c, ih, iw], zero outside the image (the padding) and past C
        row_ok = m_ok & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
        a_ptrs = x_base[:, None] + ih[:, None] * sxh + iw[:, None] * sxw + cs[None, :] * sxc
        a = tl.load(a_ptrs, mask=row_ok[:, None] & (cs[None, :] < C), other=0.0)
        # B[c, k] = w[k, c, r, s]
        b_ptrs = w_base + cs[:, None] * swc + r * swr + s * sws
        b = tl.load(b_ptrs, mask=(cs[:, None] < C) & n_ok, other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)

    # epilogue on the fp32 accumulator, then the single store
    p_idx = pq // Q
    q_idx = pq % Q
    out_mask = m_ok[:, None] & n_ok
    if HAS_BIAS != 0:
        acc += tl.load(bias_ptr + offs_n, mask=offs_n < K_OUT, other=0.0).to(tl.float32)[None, :]
    if HAS_RES != 0:
        r_ptrs = res_ptr + (n_idx * srn + p_idx * srp + q_idx * srq)[:, None] + offs_n[None, :] * srk
        acc += tl.load(r_ptrs, mask=out_mask, other=0.0).to(tl.float32)
    if RELU != 0:
        acc = tl.maximum(acc, 0.0)
    y_ptrs = y_ptr + (n_idx * syn + p_idx * syp + q_idx * syq)[:, None] + offs_n[None, :] * syk
    tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=out_mask)



def out_hw(x, w, stride):
    """(output height, output width, padding) of a conv of x with the odd-sized w at `stride`,
    padded by R // 2."""
    pad = w.shape[-1] // 2
    ho = (x.shape[2] + 2 * pad - w.shape[2]) // stride + 1
    wo = (x.shape[3] + 2 * pad - w.shape[3]) // stride + 1
    return ho, wo, pad


def igemm_plan(x, w, stride, bias, residual, relu):
    """(plan, y): `plan(x, w, bias, residual) -> y` for x's key, autotuned here, and its first result."""
    n, cin, h, wd = x.shape
    cout, _, r, s = w.shape
    ho, wo, pad = out_hw(x, w, stride)
    fmt = torch.channels_last if is_channels_last(x) else torch.contiguous_format
    y = torch.empty((n, cout, ho, wo), device=x.device, dtype=x.dtype, memory_format=fmt)
    shape, ystride = tuple(y.shape), y.stride()  # a plan's allocation: new_empty_strided, the cheapest
    if y.numel() == 0:
        return (lambda x, w, bias, residual: x.new_empty_strided(shape, ystride)), y
    # without a residual, pass y's strides: the same integer specialization, so the same binary
    rs = residual.stride() if residual is not None else y.stride()
    ints = (n, cin, h, wd, cout, ho, wo, r, s, stride, pad, *x.stride(), *w.stride(), *y.stride(), *rs,
            int(bias is not None), int(residual is not None), int(relu))
    consts = dict(PRECISION=dot_precision(x.dtype))

    def grid(meta):
        return (triton.cdiv(n * ho * wo, meta["BLOCK_M"]) * triton.cdiv(cout, meta["BLOCK_N"]),)

    args = (x, w, y, bias if bias is not None else y, residual if residual is not None else y, *ints)
    _conv_igemm_kernel[grid](*args, **consts)
    launch = tuned_launch(_conv_igemm_kernel, grid, args, consts)

    def plan(x, w, bias, residual):
        y = x.new_empty_strided(shape, ystride)
        launch(x, w, y, y if bias is None else bias, y if residual is None else residual, *ints)
        return y

    return plan, y
