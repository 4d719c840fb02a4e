"""Convolution with a fused epilogue: conv_add, conv_relu, conv_bn.

Six paths run `epilogue(conv2d(x, w))`, all computing the epilogue in fp32 before one store:

- "igemm": an implicit-GEMM Triton convolution.  The GEMM is (output pixels) x (C_out) x
  (R*S*C_in); the A tile is gathered from x on the fly (no im2col buffer), zero padding comes from
  the load mask, and bias / residual / relu are applied to the fp32 accumulator.  The output is
  written once.  Best with channels_last tensors (C_in contiguous: vector loads along K).
- "gemm": a 1x1, stride-1 convolution on channels_last tensors *is* a GEMM,
  (N*H*W, C_in) @ (C_in, C_out), so it runs on matmul.py's GEMM with the same epilogue.
- "cudnn": cuDNN's convolution (torch conv2d, no bias) followed by one in-place Triton epilogue
  kernel.  Two kernels and one extra read+write of the output, but cuDNN's conv.
- "cudnn_cl": NCHW in and out through cuDNN's channels_last conv: x and w copied by one
  transposing kernel, the conv, then an epilogue that writes the NCHW output.
- "gemm_nchw", "gemm_nchw_cl": a 1x1 stride-1 convolution on NCHW tensors as conv1x1.py's GEMM,
  which writes the NCHW output with the epilogue; it reads x in place, or (the second) a
  channels_last copy of x made by the transposing kernel.

conv_bn folds eval-mode batch norm into the convolution (exact algebra):
    bn(conv(x, w)) = conv(x, w * s) + (beta - mean * s),  s = gamma / sqrt(var + eps)
One small Triton kernel writes the folded weight and the shift; the shift is then the conv's bias.

Every wrapper keeps a plan per problem key (conv_fused, conv_bn, the epilogue, the fold): the path
or way, the autotuned config, grids and integer arguments are decided at the key's first call, so a
later call is a lookup, the output's allocation and the launches (cuDNN's through torch).

Which path runs is decided per shape by `candidate_paths` (see its docstring for the measured
reasons): a fixed path, or the fastest of those timed at the first call for that shape (like autotuning,
across kernels); describe() stores the path, why, and the measured times with each result.
"""
from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_wait

from fusebench import settings
from fusebench.kernels.device import next_pow2
from fusebench.kernels.device import is_interpreter as interpreting
from fusebench.kernels import gemm_utils as gu
from fusebench.kernels.gemm_configs import conv_configs, prune_conv
from fusebench.kernels.gemm_utils import (
    check_device, dot_precision, grouped_tile, precision_note, tuned_launch,
)
from fusebench.kernels.launch import Launch, dependent, signature
from fusebench.kernels.tuning import fastest, fastest_record, source_hash
from fusebench.kernels.tuning import triton_autotune as autotune
from fusebench.kernels.matmul import gemm_with_plan
from fusebench.kernels import conv1x1
from fusebench.kernels.batchnorm import bn_scale_shift
from fusebench.kernels.registry import triton_kernel

BN_EPS = 1e-5  # fusebench/cases/conv.py's eps

# ------------------------------------------------------------------------------------------------
# Kernel 1: in-place epilogue after cuDNN's conv: y = relu?(y + bias[c] + res).


@triton.jit(do_not_specialize=["HAS_BN", "HAS_BIAS", "HAS_RES", "RELU"])
def _epilogue_kernel(y_ptr, mean_ptr, var_ptr, gamma_ptr, beta_ptr, bias_ptr, res_ptr, n, L, C, eps,  #
                     HAS_BN, HAS_BIAS, HAS_RES, RELU,  #
                     PER_CHANNEL: tl.constexpr, CHANNEL_IS_LAST: tl.constexpr, WIDE: tl.constexpr,
                     BLOCK: tl.constexpr, WAIT: tl.constexpr):
    # y and res are dense with the same strides, walked as flat vectors of n elements, BLOCK a
    # program.  Element i's channel is i % C in channels_last storage (N, H, W, C), and (i // L) % C
    # in NCHW, L = H * W; it is computed only where a per-channel vector is read (PER_CHANNEL), in
    # 32-bit arithmetic unless the tensor needs 64 (WIDE).  WAIT: launched as a dependent of the
    # conv (launch.dependent), it waits for it before reading y.
    if WAIT:
        gdc_wait()
    pid = tl.program_id(0)
    offs = (pid.to(tl.int64) if WIDE else pid) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    acc = tl.load(y_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    if PER_CHANNEL:
        ch = offs % C if CHANNEL_IS_LAST else (offs // L) % C
        if HAS_BN != 0:  # eval-mode batch norm
            scale, shift = bn_scale_shift(mean_ptr, var_ptr, gamma_ptr, beta_ptr, ch, mask, eps)
            acc = acc * scale + shift
        if HAS_BIAS != 0:
            acc += tl.load(bias_ptr + ch, mask=mask, other=0.0).to(tl.float32)
    if HAS_RES != 0:
        acc += tl.load(res_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    if RELU != 0:
        acc = tl.maximum(acc, 0.0)
    tl.store(y_ptr + offs, acc.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _plane_tile(src_ptr, dst_ptr, t, C, P, BLOCK_C: tl.constexpr, BLOCK_P: tl.constexpr):
    # Tile t of an NCHW tensor's [C, P] planes (P = H * W; images outermost, then pixel blocks,
    # then channel blocks) into its [P, C] channels_last storage: read along P, written along C
    # (the compiler transposes the tile through shared memory).
    c_tiles = tl.cdiv(C, BLOCK_C)
    per_image = tl.cdiv(P, BLOCK_P) * c_tiles
    img = (t // per_image).to(tl.int64) * C * P
    p = (t % per_image) // c_tiles * BLOCK_P + tl.arange(0, BLOCK_P)
    c = t % c_tiles * BLOCK_C + tl.arange(0, BLOCK_C)
    mask = (c < C)[:, None] & (p < P)[None, :]
    tile = tl.load(src_ptr + img + c[:, None] * P + p[None, :], mask=mask)
    tl.store(dst_ptr + img + p[None, :] * C + c[:, None], tile, mask=mask)


@triton.jit
def _to_channels_last_kernel(x_ptr, x_cl_ptr, w_ptr, w_cl_ptr, CX, PX, CW, PW, X_TILES,
                             BLOCK_CX: tl.constexpr, BLOCK_PX: tl.constexpr, BLOCK_CW: tl.constexpr,
                             BLOCK_PW: tl.constexpr):
    # x (NCHW) and w (OIHW) into channels_last copies in one launch: the first X_TILES programs
    # take x's tiles, the others w's (a plane of R * S pixels, so narrower tiles).
    t = tl.program_id(0)
    if t < X_TILES:
        _plane_tile(x_ptr, x_cl_ptr, t, CX, PX, BLOCK_CX, BLOCK_PX)
    else:
        _plane_tile(w_ptr, w_cl_ptr, t - X_TILES, CW, PW, BLOCK_CW, BLOCK_PW)


@triton.jit(do_not_specialize=["HAS_BN", "HAS_BIAS", "HAS_RES", "RELU"])
def _epilogue_to_nchw_kernel(y_ptr, out_ptr, mean_ptr, var_ptr, gamma_ptr, beta_ptr, bias_ptr, res_ptr, C, P, eps,  #
                             HAS_BN, HAS_BIAS, HAS_RES, RELU,  #
                             BLOCK_P: tl.constexpr, BLOCK_C: tl.constexpr, WAIT: tl.constexpr):
    # _epilogue_kernel from a channels_last y ([P, C] an image) into a new NCHW out ([C, P] an
    # image, as the residual): a [BLOCK_P, BLOCK_C] tile, the channel vector loaded once.
    if WAIT:
        gdc_wait()
    img = tl.program_id(0).to(tl.int64) * C * P
    p = tl.program_id(1) * BLOCK_P + tl.arange(0, BLOCK_P)
    c = tl.program_id(2) * BLOCK_C + tl.arange(0, BLOCK_C)
    ok_c = c < C
    mask = (p < P)[:, None] & ok_c[None, :]
    acc = tl.load(y_ptr + img + p[:, None] * C + c[None, :], mask=mask, other=0.0).to(tl.float32)
    if HAS_BN != 0:
        scale, shift = bn_scale_shift(mean_ptr, var_ptr, gamma_ptr, beta_ptr, c, ok_c, eps)
        acc = acc * scale[None, :] + shift[None, :]
    if HAS_BIAS != 0:
        acc += tl.load(bias_ptr + c, mask=ok_c, other=0.0).to(tl.float32)[None, :]
    nchw = img + c[None, :] * P + p[:, None]
    if HAS_RES != 0:
        acc += tl.load(res_ptr + nchw, mask=mask, other=0.0).to(tl.float32)
    if RELU != 0:
        acc = tl.maximum(acc, 0.0)
    tl.store(out_ptr + nchw, acc.to(out_ptr.dtype.element_ty), mask=mask)


# The transposing kernels' tile: 64 x 64 (4 warps) in general, narrower where there are few
# channels (a 3x3 weight's plane is 9 wide) or pixels; small under the interpreter.
def _transpose_tiles(C: int, P: int) -> tuple[int, int]:
    cap = 16 if interpreting() else 64
    return min(cap, next_pow2(C, floor=16)), min(cap, next_pow2(P, floor=16))


def _to_channels_last_plan(x: torch.Tensor, w: torch.Tensor | None = None):
    """plan(x, w=None) -> channels_last copies of the dense NCHW x and OIHW w of this key, through
    one kernel (one launch fewer than a kernel each).  A 1x1 weight (or none) is not copied: its
    OIHW storage is its channels_last storage, and it is returned as it is."""
    copy_w = w is not None and w.shape[-1] * w.shape[-2] > 1
    geometry = []  # per tensor: its [C, P] planes' C and P, the tile, the tiles
    for t in (x, w) if copy_w else (x,):
        n, c, h, wd = t.shape
        bc, bp = _transpose_tiles(c, h * wd)
        geometry.append((c, h * wd, bc, bp, n * triton.cdiv(h * wd, bp) * triton.cdiv(c, bc)))
    no_w = [(1, 1, 16, 16, 0)]  # no weight tiles: the kernel's second half never runs
    (cx, px, bcx, bpx, x_tiles), (cw, pw, bcw, bpw, w_tiles) = geometry if copy_w else geometry + no_w
    launch = Launch(_to_channels_last_kernel, (x_tiles + w_tiles,),
                    dict(BLOCK_CX=bcx, BLOCK_PX=bpx, BLOCK_CW=bcw, BLOCK_PW=bpw, num_warps=4))
    x_shape, x_cl = tuple(x.shape), _channels_last_strides(x.shape)
    w_shape, w_cl = (tuple(w.shape), _channels_last_strides(w.shape)) if copy_w else (None, None)

    def plan(x, w=None):
        xc = x.new_empty_strided(x_shape, x_cl)
        wc = w.new_empty_strided(w_shape, w_cl) if copy_w else w
        launch(x, xc, w if copy_w else xc, wc if copy_w else xc, cx, px, cw, pw, x_tiles)
        return xc, wc

    return plan


def _channels_last_strides(shape) -> tuple:
    n, c, h, w = shape
    return (h * w * c, 1, w * c, c)


def _dense_format(t: torch.Tensor):
    if t.is_contiguous():
        return torch.contiguous_format
    if t.is_contiguous(memory_format=torch.channels_last):
        return torch.channels_last
    return None


# {problem key: plan} of the epilogue; a plan is `plan(y, bias, residual, bn) -> y`.
_EPILOGUE_PLANS: dict = {}


def _epilogue_key(y, bias, residual, relu, bn):
    return (signature(y, bias, residual, *(bn if bn is not None else ())), relu)


def epilogue_(y: torch.Tensor, bias=None, residual=None, relu=False, bn=None) -> torch.Tensor:
    """In place on y (N, C, H, W), dense in either layout: relu?(bn(y) + bias[c] + residual), where
    bn = (mean, var, gamma, beta) is eval-mode batch norm (eps BN_EPS)."""
    key = _epilogue_key(y, bias, residual, relu, bn)
    plan = _EPILOGUE_PLANS.get(key)
    if plan is None:
        plan = _EPILOGUE_PLANS[key] = _epilogue_plan(y, bias, residual, relu, bn)
    return plan(y, bias, residual, bn)


def _epilogue_plan(y, bias, residual, relu, bn):
    """The epilogue's launch for y's key: layout, grid and integer arguments decided here."""
    fmt = _dense_format(y)
    if fmt is None:  # not dense: through a dense copy (not a path fusebench's wrappers take)
        def strided(y, bias, residual, bn):
            return y.copy_(epilogue_(y.contiguous(), bias, residual, relu, bn))
        return strided
    if y.numel() == 0:
        return lambda y, bias, residual, bn: y
    # a residual of another layout is made dense like y, per call
    convert_res = residual is not None and residual.stride() != y.stride()
    n, c, h, w = y.shape
    # 1024 elements a program at 4 warps (8 a thread): on an H100 at ResNet-50's 3x3 layers (batch
    # 32, fp16) as fast as torch's add or faster, where (rows, columns) tiles of NCHW's 7x7 planes
    # left a quarter of each row's lanes masked (32x512x7x7: 9.4 against torch's 5.1 us).  Small
    # blocks under the interpreter, which runs them one after another.
    block = 256 if interpreting() else 1024
    launch = Launch(_epilogue_kernel, (triton.cdiv(y.numel(), block),), dict(
        PER_CHANNEL=bias is not None or bn is not None, CHANNEL_IS_LAST=fmt == torch.channels_last and c > 1,
        WIDE=y.numel() + block >= 2**31, BLOCK=block, num_warps=4, **dependent(y.device)))
    ints = (y.numel(), h * w, c, BN_EPS, int(bn is not None), int(bias is not None), int(residual is not None),
            int(relu))

    def plan(y, bias, residual, bn):
        if convert_res:
            residual = residual.contiguous(memory_format=fmt)
        launch(y, *(bn if bn is not None else (y, y, y, y)), y if bias is None else bias,
               y if residual is None else residual, *ints)
        return y

    return plan


# ------------------------------------------------------------------------------------------------
# Kernel 2: fold eval-mode batch norm into the weights.


@triton.jit
def _fold_bn_kernel(w_ptr, w_out_ptr, shift_ptr, mean_ptr, var_ptr, gamma_ptr, beta_ptr,  #
                    per_channel, eps, BLOCK: tl.constexpr):
    # One program per output channel o.  In both OIHW and OHWI (channels_last) storage the output
    # channel is the outermost dimension, so channel o owns storage [o*per_channel, (o+1)*per_channel).
    o = tl.program_id(0)
    var = tl.load(var_ptr + o).to(tl.float32)
    scale = tl.load(gamma_ptr + o).to(tl.float32) / tl.sqrt(var + eps)
    shift = tl.load(beta_ptr + o).to(tl.float32) - tl.load(mean_ptr + o).to(tl.float32) * scale
    tl.store(shift_ptr + o, shift.to(shift_ptr.dtype.element_ty))
    base = o.to(tl.int64) * per_channel
    for start in range(0, per_channel, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < per_channel
        w = tl.load(w_ptr + base + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(w_out_ptr + base + offs, (w * scale).to(w_out_ptr.dtype.element_ty), mask=mask)


# {problem key: plan} of the fold; a plan is `plan(w, mean, var, gamma, beta) -> (w * s, shift)`.
_FOLD_PLANS: dict = {}


def fold_bn(w, mean, var, gamma, beta, eps=BN_EPS):
    """(w * s, beta - mean * s) with s = gamma / sqrt(var + eps), computed in fp32, stored in w's dtype.

    The shift is rounded to w's dtype like the conv_relu bias, so that conv_bn reuses the same
    compiled conv kernels; its rounding error (2**-11 relative in fp16) is far inside the tolerance.
    """
    key = (signature(w, mean, var, gamma, beta), eps)
    plan = _FOLD_PLANS.get(key)
    if plan is None:
        plan = _FOLD_PLANS[key] = _fold_plan(w, eps)
    return plan(w, mean, var, gamma, beta)


def _fold_plan(w, eps):
    dense = _dense_format(w) is not None  # else folded from a dense copy, per call
    cout = w.shape[0]
    per_channel = w.numel() // cout
    # w_out keeps the (dense) weight's layout; a plan allocates with new_empty_strided, the cheapest
    w_shape, w_stride = tuple(w.shape), (w if dense else w.contiguous()).stride()
    launch = Launch(_fold_bn_kernel, (cout,), dict(BLOCK=min(1024, next_pow2(per_channel, floor=16)), num_warps=4))

    def plan(w, mean, var, gamma, beta):
        if not dense:
            w = w.contiguous()
        w_out = w.new_empty_strided(w_shape, w_stride)
        shift = w.new_empty_strided((cout,), (1,))
        launch(w, w_out, shift, mean, var, gamma, beta, per_channel, eps)
        return w_out, shift

    return plan


# ------------------------------------------------------------------------------------------------
# Kernel 3: implicit-GEMM convolution with fused epilogue.


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


# ------------------------------------------------------------------------------------------------
# Host side.


def _out_hw(x, w, stride):
    pad = w.shape[-1] // 2
    ho = (x.shape[2] + 2 * pad - w.shape[2]) // stride + 1
    wo = (x.shape[3] + 2 * pad - w.shape[3]) // stride + 1
    return ho, wo, pad


def _is_cl(t: torch.Tensor) -> bool:
    return t.is_contiguous(memory_format=torch.channels_last) and not t.is_contiguous()


# Path policy.  FUSEBENCH_CONV_PATH forces one ("igemm", "gemm", "cudnn", "cudnn_cl", "gemm_nchw",
# "gemm_nchw_cl") where it applies.
_SOURCE = functools.partial(source_hash, __name__, "fusebench.kernels.matmul", "fusebench.kernels.gemm_configs",
                            "fusebench.kernels.conv1x1", "fusebench.kernels.batchnorm")
CONV_PATH = settings.current().conv_path
# conv_bn: "folded", "bn-epilogue", or "auto" (the faster, timed at the first call per shape).
CONV_BN_WAY = settings.current().conv_bn


def candidate_paths(n, cin, h, w, cout, r, stride, channels_last, dtype) -> tuple[list[str], str]:
    """The paths worth trying for a shape (the first is the default), and why.

    Measured on an H200 (ResNet-50 layers at batch 32, fp16):
    - NCHW: cuDNN + epilogue.  The implicit GEMM gathers A with C_in strided by H*W (no vector
      loads, register spills): 0.9x of cuDNN+epilogue at 56x56, 0.3x at 7x7.
    - channels_last: cuDNN + epilogue won 5 of 6 cells against the implicit GEMM / 1x1 GEMM (a
      3x3 conv at 7x7 has too few output tiles for a GEMM without split-K), but not by much
      everywhere, so both are timed at the first call per shape and the faster is kept.
    - fp32: cuDNN (PyTorch runs fp32 convs as tf32 on cuDNN; ours would be tf32 too, and slower).
    On an H100 (2026-11-26, fp16): at NCHW 3x3 layers cuDNN's channels_last conv is 1.8-2.5x faster
    than its NCHW one, and with the copies and the NCHW-writing epilogue the channels_last route
    is 1.18-1.37x faster than the NCHW conv + epilogue.  At NCHW 1x1 stride-1 layers conv1x1's
    GEMM writes NCHW with the epilogue: where H*W is a multiple of 8 it reads x in place (aligned
    vectors), timed against cuDNN's NCHW conv + epilogue (0.93-1.40x that one's speed at 28x28 and
    56x56); elsewhere on a channels_last copy of x or in place (at 7x7 in place is 1.5-2.3x
    slower), timed against the channels_last route (cuDNN's NCHW 1x1 kernels are 1.35-1.8x slower
    than the fastest of these three there).
    """
    forced = CONV_PATH
    if forced in ("igemm", "cudnn"):
        return [forced], "forced by FUSEBENCH_CONV_PATH"
    if forced == "cudnn_cl" and not channels_last:  # 1x1 too
        return [forced], "forced by FUSEBENCH_CONV_PATH"
    if forced == "gemm" and channels_last and r == 1 and stride == 1:
        return ["gemm"], "forced by FUSEBENCH_CONV_PATH"
    if forced in ("gemm_nchw", "gemm_nchw_cl") and not channels_last and r == 1 and stride == 1:
        return [forced], "forced by FUSEBENCH_CONV_PATH"
    if dtype == torch.float32:
        return ["cudnn"], "fp32: cuDNN's tf32 conv + Triton epilogue"
    if not channels_last and r == 1 and stride == 1 and (h * w) % 8 == 0:
        return ["gemm_nchw", "cudnn"], ("NCHW 1x1: faster of one GEMM reading x in place and writing NCHW with the "
                                        "epilogue, and cuDNN's NCHW conv + in-place Triton epilogue")
    if not channels_last and r == 1 and stride == 1:
        return ["gemm_nchw_cl", "gemm_nchw", "cudnn_cl"], (
            "NCHW 1x1, H*W not a multiple of 8: fastest of a GEMM writing NCHW with the epilogue from a "
            "channels_last copy of x or from x in place, and cuDNN's channels_last conv on a copy of x")
    if not channels_last and r == 1:
        return ["cudnn"], "NCHW strided 1x1: cuDNN conv + in-place Triton epilogue"
    if not channels_last:
        return ["cudnn_cl", "cudnn"], ("NCHW: faster of cuDNN's channels_last conv on copies, its epilogue writing "
                                       "NCHW, and cuDNN's NCHW conv + in-place Triton epilogue (strided C_in gathers "
                                       "make implicit GEMM slow)")
    if r == 1 and stride == 1:
        return ["cudnn", "gemm"], "channels_last 1x1: faster of cuDNN conv + Triton epilogue and one fused GEMM"
    return ["cudnn", "igemm"], "channels_last: faster of cuDNN conv + Triton epilogue and implicit-GEMM conv"


def choose_path(n, cin, h, w, cout, r, stride, channels_last, dtype) -> tuple[str, str]:
    """(path, why) with the default candidate; conv_fused times the candidates when there are several."""
    paths, why = candidate_paths(n, cin, h, w, cout, r, stride, channels_last, dtype)
    return paths[0], why


def _choice_key(shape8, dtype, has_bias, has_res, relu):
    return ("conv", *shape8, dtype, bool(has_bias), bool(has_res), bool(relu))


# {problem key: plan} of conv_fused; a plan is `plan(x, w, bias, residual) -> y`, with the path,
# its autotuned config, the grid and every integer argument fixed at the key's first call.
_PLANS: dict = {}


def _conv_key(x, w, stride, bias, residual, relu, path):
    return (signature(x, w, bias, residual), stride, relu, path, CONV_PATH, gu.MULTI_KERNEL)


def conv_fused(x, w, stride: int, bias=None, residual=None, relu=False, path: str | None = None):
    """epilogue(conv2d(x, w, stride, padding=R//2)): + bias[c], + residual, relu."""
    # _conv_key, inlined: this is every call's path
    plan = _PLANS.get((signature(x, w, bias, residual), stride, relu, path, CONV_PATH, gu.MULTI_KERNEL))
    if plan is not None:
        return plan(x, w, bias, residual)
    return conv_with_plan(x, w, stride, bias, residual, relu, path)[1]


def conv_with_plan(x, w, stride, bias=None, residual=None, relu=False, path=None):
    """(plan, y): conv_fused() made at a key's first call, with the plan it keeps for the key.
    Chooses the path (timing the candidates where several apply) and runs it."""
    key = _conv_key(x, w, stride, bias, residual, relu, path)
    plan = _PLANS.get(key)
    if plan is not None:
        return plan, plan(x, w, bias, residual)
    if path is None:
        n, cin, h, wd = x.shape
        shape8 = (n, cin, h, wd, w.shape[0], w.shape[-1], stride, int(_is_cl(x)))
        paths, _ = candidate_paths(*shape8, x.dtype)
        if len(paths) == 1:
            path = paths[0]
        else:
            path = fastest(_choice_key(shape8, x.dtype, bias is not None, residual is not None, relu),
                           {p: (lambda p=p: conv_fused(x, w, stride, bias, residual, relu, path=p)) for p in paths},
                           device=x.device, source=_SOURCE())
        plan, y = conv_with_plan(x, w, stride, bias, residual, relu, path)  # the chosen path's plan
    else:
        path = _runnable(path, x, w, stride)
        build = {"gemm": _gemm1x1_plan, "igemm": _igemm_plan, "cudnn_cl": _cudnn_cl_plan,
                 "gemm_nchw": _gemm_nchw_plan, "gemm_nchw_cl": _gemm_nchw_cl_plan}.get(path, _cudnn_plan)
        plan, y = build(x, w, stride, bias, residual, relu)
        if path == "cudnn" and gu.graph_capturable(x):  # two launches: the graph option applies
            plan = gu.GraphCall(plan, (x, w, bias, residual))
    _PLANS[key] = plan
    return plan, y


def _runnable(path, x, w, stride):
    """`path`, or the path that runs in its place where it does not take these operands."""
    if path == "gemm" and not (w.shape[-1] == 1 and stride == 1 and _is_cl(x) and _dense_format(w) is not None):
        path = "igemm"
    if path == "igemm" and x.numel() >= 2**31:
        path = "cudnn"  # the kernel's pointer arithmetic is 32-bit
    if path == "cudnn_cl" and not (x.is_contiguous() and w.is_contiguous()):
        path = "cudnn"  # the copies read contiguous NCHW x and OIHW w
    if path in ("gemm_nchw", "gemm_nchw_cl") and not conv1x1.applies(x, w, stride):
        path = "cudnn"  # 1x1 at stride 1 on contiguous NCHW x and w only
    return path


def _igemm_plan(x, w, stride, bias, residual, relu):
    n, cin, h, wd = x.shape
    cout, _, r, s = w.shape
    ho, wo, pad = _out_hw(x, w, stride)
    fmt = torch.channels_last if _is_cl(x) else torch.contiguous_format
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


def _gemm1x1_plan(x, w, stride, bias, residual, relu):
    # x (N, C, H, W) channels_last is the row-major matrix (N*H*W, C); w (K, C, 1, 1) is (K, C).
    n, cin, h, wd = x.shape
    cout = w.shape[0]
    y = torch.empty((n, cout, h, wd), device=x.device, dtype=x.dtype, memory_format=torch.channels_last)
    shape, ystride = tuple(y.shape), y.stride()
    a = x.permute(0, 2, 3, 1).reshape(n * h * wd, cin)
    b = w.reshape(cout, cin).t()  # (C, K) view of the (K, C) weight
    y2 = y.permute(0, 2, 3, 1).view(n * h * wd, cout)
    res_cl = residual is not None and _is_cl(residual)  # else made channels_last per call
    res2 = None
    if residual is not None:
        res2 = residual.contiguous(memory_format=torch.channels_last).permute(0, 2, 3, 1).reshape(n * h * wd, cout)
    inner, _ = gemm_with_plan(a, b, bias=bias, residual=res2, relu=relu, out=y2)
    if inner is None:  # an empty problem: nothing to launch
        return (lambda x, w, bias, residual: conv_fused(x, w, 1, bias, residual, relu, path="cudnn")), y

    # the GEMM's plan reads only data pointers: x, w, y and the residual stand for their 2-D views
    def plan(x, w, bias, residual):
        y = x.new_empty_strided(shape, ystride)
        if residual is not None and not res_cl:
            residual = residual.contiguous(memory_format=torch.channels_last)
        inner(x, w, bias, residual, y)
        return y

    return plan, y


def _gemm_nchw_plan(x, w, stride, bias, residual, relu, bn=None):
    """conv1x1's GEMM reading x in place and writing NCHW with the epilogue (batch norm too, where
    `bn` is given): one launch.  The plan takes bn too."""
    return conv1x1.conv1x1_nchw_plan(x, w, bias, residual, relu, bn, BN_EPS)


def _gemm_nchw_cl_plan(x, w, stride, bias, residual, relu, bn=None):
    """x copied to channels_last by the transposing kernel, then conv1x1's GEMM reading the copy:
    two launches.  The plan takes bn too."""
    copies = _to_channels_last_plan(x)
    return conv1x1.conv1x1_nchw_plan(x, w, bias, residual, relu, bn, BN_EPS, copy_x=lambda x: copies(x)[0])


def _cudnn_plan(x, w, stride, bias, residual, relu):
    """cuDNN's conv (torch, no bias), then the epilogue kernel in place: two launches."""
    pad = w.shape[-1] // 2
    conv2d = F.conv2d
    y = conv2d(x, w, None, stride, pad)
    epi = _epilogue_plan(y, bias, residual, relu, None)
    epi(y, bias, residual, None)

    def plan(x, w, bias, residual):
        return epi(conv2d(x, w, None, stride, pad), bias, residual, None)

    return plan, y


def _cudnn_cl_plan(x, w, stride, bias, residual, relu, bn=None):
    """NCHW in and out through cuDNN's channels_last conv: x and w (unless 1x1) copied to
    channels_last by one kernel, the conv, then the epilogue (with batch norm where `bn` is given) reading its result
    and writing a new NCHW output: three launches, where cuDNN's NCHW kernels are 1.8-2.5x
    slower than its channels_last ones at 3x3 (fp16, docs/kernels.md).  The plan takes bn too."""
    pad = w.shape[-1] // 2
    conv2d = F.conv2d
    copies = _to_channels_last_plan(x, w)
    y = conv2d(*copies(x, w), None, stride, pad)
    n, c, h, wd = y.shape
    shape, nchw = tuple(y.shape), (c * h * wd, h * wd, wd, 1)
    bc, bp = _transpose_tiles(c, h * wd)
    launch = Launch(_epilogue_to_nchw_kernel, (n, triton.cdiv(h * wd, bp), triton.cdiv(c, bc)),
                    dict(BLOCK_P=bp, BLOCK_C=bc, num_warps=4, **dependent(y.device)))
    ints = (c, h * wd, BN_EPS, int(bn is not None), int(bias is not None), int(residual is not None), int(relu))
    dense_res = residual is None or residual.stride() == nchw  # else made NCHW per call

    def plan(x, w, bias, residual, bn=None):
        y = conv2d(*copies(x, w), None, stride, pad)
        out = y.new_empty_strided(shape, nchw)
        if not dense_res:
            residual = residual.contiguous()
        launch(y, out, *(bn if bn is not None else (y, y, y, y)), y if bias is None else bias,
               y if residual is None else residual, *ints)
        return out

    return plan, plan(x, w, bias, residual, bn)


# ------------------------------------------------------------------------------------------------
# Registered wrappers: same signatures and outputs as the eager functions.


def _supports(shape, dtype, device):
    reason = check_device(dtype, device)
    if reason:
        return reason
    if shape[5] % 2 == 0:
        return "even filter sizes (asymmetric padding) not supported"
    return None


def _describe(shape, dtype, epilogue=(False, False, False)):
    n, cin, h, w, cout, r, stride, cl = shape
    paths, why = candidate_paths(n, cin, h, w, cout, r, stride, bool(cl), dtype)
    rec = fastest_record(_choice_key(tuple(shape), dtype, *epilogue)) if len(paths) > 1 else None
    if rec:
        times = ", ".join(f"{p} {ms * 1e3:.1f}us" for p, ms in rec[1].items()) or "cached from an earlier run"
        return f"{precision_note(dtype)}, {rec[0]}: {why} (measured: {times})"
    if len(paths) > 1:
        return f"{precision_note(dtype)}, {' or '.join(paths)}: {why} (timed at first call)"
    return f"{precision_note(dtype)}, {paths[0]}: {why}"


def _describe_add(shape, dtype):
    return _describe(shape, dtype, (False, True, False))


def _describe_relu(shape, dtype):
    return _describe(shape, dtype, (True, False, True))


def _bn_choice_key(shape):
    return ("conv_bn", *shape)


# The paths whose plan applies batch norm in its epilogue (conv_bn's bn-epilogue way), as described.
_BN_EPILOGUES = {
    "cudnn": "cuDNN conv of the raw weights + batch norm in one Triton epilogue (2 kernels, as eager)",
    "cudnn_cl": "cuDNN's channels_last conv on copies of x and w + batch norm in the epilogue writing NCHW "
                "(3 kernels)",
    "gemm_nchw": "one GEMM reading x in place, batch norm in its epilogue (1 kernel)",
    "gemm_nchw_cl": "a channels_last copy of x, then one GEMM with batch norm in its epilogue (2 kernels)",
}


def _bn_epilogue_path(shape, dtype) -> str:
    """The path of conv_bn's bn-epilogue way: conv_fused's first path for the shape where its plan
    applies batch norm, else cuDNN's conv and the epilogue kernel."""
    first = candidate_paths(*shape, dtype)[0][0]
    return first if first in _BN_EPILOGUES else "cudnn"


def _describe_bn(shape, dtype):
    rec = fastest_record(_bn_choice_key(tuple(shape) + (dtype,)))
    unfolded = _BN_EPILOGUES[_bn_epilogue_path(shape, dtype)]
    folded = "BN folded into weights+bias (1 Triton kernel), then "
    if rec is None:
        return f"faster of [{unfolded}] and [{folded}conv + bias] (timed at first call)"
    times = ", ".join(f"{p} {ms * 1e3:.1f}us" for p, ms in rec[1].items()) or "cached from an earlier run"
    if rec[0] == "bn-epilogue":
        return f"{precision_note(dtype)}, {unfolded} (measured: {times})"
    return folded + _describe(shape, dtype, (True, False, False)) + f" (vs unfolded: {times})"


@triton_kernel("conv_add", supports=_supports, describe=_describe_add, interpretable=True)
def conv_add(x, w, residual, stride: int):
    return conv_fused(x, w, stride, residual=residual)


@triton_kernel("conv_relu", supports=_supports, describe=_describe_relu, interpretable=True)
def conv_relu(x, w, bias, stride: int):
    return conv_fused(x, w, stride, bias=bias, relu=True)


# {problem key: plan} of conv_bn; a plan is `plan(x, w, mean, var, gamma, beta) -> y`.
_BN_PLANS: dict = {}
BN_WAYS = ("bn-epilogue", "folded")


@triton_kernel("conv_bn", supports=_supports, describe=_describe_bn, interpretable=True)
def conv_bn(x, w, mean, var, gamma, beta, stride: int):
    """Two ways, the faster timed at the first call per shape: fold BN into the weights and a bias
    (a fold kernel, then a conv whose epilogue adds the bias: one launch more than eager unless the
    conv is one of ours with the bias fused), or cuDNN's conv of the raw weights and one Triton
    epilogue applying the batch norm (the same two launches as eager, one fewer than folding)."""
    plan = _BN_PLANS.get((signature(x, w, mean, var, gamma, beta), stride, None, CONV_BN_WAY, CONV_PATH,
                          gu.MULTI_KERNEL))
    if plan is not None:
        return plan(x, w, mean, var, gamma, beta)
    return _conv_bn_with_plan(x, w, mean, var, gamma, beta, stride, None)[1]


def _conv_bn_with_plan(x, w, mean, var, gamma, beta, stride, way):
    """(plan, y) for conv_bn's key and `way` (None: CONV_BN_WAY, or the faster way, timed here)."""
    key = (signature(x, w, mean, var, gamma, beta), stride, way, CONV_BN_WAY, CONV_PATH, gu.MULTI_KERNEL)
    plan = _BN_PLANS.get(key)
    if plan is not None:
        return plan, plan(x, w, mean, var, gamma, beta)
    args = (x, w, mean, var, gamma, beta)
    if way is None:
        way = CONV_BN_WAY
        if way not in BN_WAYS:
            n, cin, h, wd = x.shape
            choice = _bn_choice_key((n, cin, h, wd, w.shape[0], w.shape[-1], stride, int(_is_cl(x)), x.dtype))
            way = fastest(choice, {w_: (lambda w_=w_: _conv_bn_with_plan(*args, stride, w_)[1]) for w_ in BN_WAYS},
                          device=x.device, source=_SOURCE())
        plan, y = _conv_bn_with_plan(*args, stride, way)
    else:
        plan, y = (_bn_epilogue_plan if way == "bn-epilogue" else _folded_plan)(*args, stride)
        if gu.graph_capturable(x):  # two launches or more: the graph option applies
            plan = gu.GraphCall(plan, args)
    _BN_PLANS[key] = plan
    return plan, y


def _bn_epilogue_plan(x, w, mean, var, gamma, beta, stride):
    """Batch norm in the epilogue of _bn_epilogue_path's path: cuDNN's conv of the raw weights, then
    the epilogue kernel (two launches), or the channels_last route or conv1x1's GEMM with batch
    norm in their epilogue."""
    n, cin, h, wd = x.shape
    path = _bn_epilogue_path((n, cin, h, wd, w.shape[0], w.shape[-1], stride, int(_is_cl(x))), x.dtype)
    build = {"cudnn_cl": _cudnn_cl_plan, "gemm_nchw": _gemm_nchw_plan, "gemm_nchw_cl": _gemm_nchw_cl_plan}.get(path)
    if build is not None and _runnable(path, x, w, stride) == path:
        inner, y = build(x, w, stride, None, None, False, (mean, var, gamma, beta))
        return (lambda x, w, mean, var, gamma, beta: inner(x, w, None, None, (mean, var, gamma, beta))), y
    pad = w.shape[-1] // 2
    conv2d = F.conv2d
    y = conv2d(x, w, None, stride, pad)
    bn = (mean, var, gamma, beta)
    epi = _epilogue_plan(y, None, None, False, bn)
    epi(y, None, None, bn)

    def plan(x, w, mean, var, gamma, beta):
        return epi(conv2d(x, w, None, stride, pad), None, None, (mean, var, gamma, beta))

    return plan, y


def _folded_plan(x, w, mean, var, gamma, beta, stride):
    """The fold kernel, then conv_fused of the folded weights with the shift as its bias."""
    fold = _fold_plan(w, BN_EPS)
    w_folded, shift = fold(w, mean, var, gamma, beta)
    conv, y = conv_with_plan(x, w_folded, stride, bias=shift)

    def plan(x, w, mean, var, gamma, beta):
        w_folded, shift = fold(w, mean, var, gamma, beta)
        return conv(x, w_folded, shift, None)

    return plan, y
