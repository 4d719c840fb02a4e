"""The element-wise kernels around a convolution that is not ours (cuDNN's, through torch), and
the layout helpers of the convolution paths.

- The epilogue, in place on the conv's output: y = relu?(bn(y) + bias[c] + residual), y walked as
  a flat vector of either dense layout (`epilogue_`).
- The channels_last route for NCHW tensors: one transposing kernel copies x (and w, unless 1x1) to
  channels_last (`to_channels_last_plan`), and the epilogue then reads the conv's channels_last
  result and writes a new NCHW output (`_epilogue_to_nchw_kernel`).

Both epilogues are launched as programmatic dependents of the conv before them (launch.dependent);
the copy, a call's first kernel, is launched plainly.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_wait

from fusebench.kernels.batchnorm import BN_EPS, bn_scale_shift
from fusebench.kernels.device import is_interpreter as interpreting
from fusebench.kernels.device import next_pow2
from fusebench.kernels.launch import STATE, Launch, dependent, signature

# ------------------------------------------------------------------------------------------------
# kernels


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


# ------------------------------------------------------------------------------------------------
# layouts


def is_channels_last(t: torch.Tensor) -> bool:
    return t.is_contiguous(memory_format=torch.channels_last) and not t.is_contiguous()


def dense_format(t: torch.Tensor):
    """The memory format in which t is dense, or None."""
    if t.is_contiguous():
        return torch.contiguous_format
    if t.is_contiguous(memory_format=torch.channels_last):
        return torch.channels_last
    return None


def channels_last_strides(shape) -> tuple:
    n, c, h, w = shape
    return (h * w * c, 1, w * c, c)


# The transposing kernels' tile: 64 x 64 (4 warps) in general, narrower where there are few
# channels (a 3x3 weight's plane is 9 wide) or pixels; small under the interpreter.
def transpose_tiles(C: int, P: int) -> tuple[int, int]:
    cap = 16 if interpreting() else 64
    return min(cap, next_pow2(C, floor=16)), min(cap, next_pow2(P, floor=16))


def to_channels_last_plan(x: torch.Tensor, w: torch.Tensor | None = None):
    """plan(x, w=None) -> channels_last copies of the dense NCHW x and OIHW w of this key, through
    one kernel (one launch fewer than a kernel each).  A 1x1 weight (or none) is not copied: its
    OIHW storage is its channels_last storage, and it is returned as it is."""
    copy_w = w is not None and w.shape[-1] * w.shape[-2] > 1
    geometry = []  # per tensor: its [C, P] planes' C and P, the tile, the tiles
    for t in (x, w) if copy_w else (x,):
        n, c, h, wd = t.shape
        bc, bp = transpose_tiles(c, h * wd)
        geometry.append((c, h * wd, bc, bp, n * triton.cdiv(h * wd, bp) * triton.cdiv(c, bc)))
    no_w = [(1, 1, 16, 16, 0)]  # no weight tiles: the kernel's second half never runs
    (cx, px, bcx, bpx, x_tiles), (cw, pw, bcw, bpw, w_tiles) = geometry if copy_w else geometry + no_w
    launch = Launch(_to_channels_last_kernel, (x_tiles + w_tiles,),
                    dict(BLOCK_CX=bcx, BLOCK_PX=bpx, BLOCK_CW=bcw, BLOCK_PW=bpw, num_warps=4))
    x_shape, x_cl = tuple(x.shape), channels_last_strides(x.shape)
    w_shape, w_cl = (tuple(w.shape), channels_last_strides(w.shape)) if copy_w else (None, None)

    def plan(x, w=None):
        xc = x.new_empty_strided(x_shape, x_cl)
        wc = w.new_empty_strided(w_shape, w_cl) if copy_w else w
        launch(x, xc, w if copy_w else xc, wc if copy_w else xc, cx, px, cw, pw, x_tiles)
        return xc, wc

    return plan


def nchw_epilogue_launch(y: torch.Tensor, bias, residual, relu, bn) -> tuple[Launch, tuple]:
    """(launch, its integer arguments) of the epilogue from the channels_last conv output y into a
    new NCHW output of y's shape; a call passes (y, out, *bn or 4 stand-ins, bias or y, residual or
    y, *ints)."""
    n, c, h, wd = y.shape
    bc, bp = transpose_tiles(c, h * wd)
    launch = Launch(_epilogue_to_nchw_kernel, (n, triton.cdiv(h * wd, bp), triton.cdiv(c, bc)),
                    dict(BLOCK_P=bp, BLOCK_C=bc, num_warps=4, **dependent(y.device)))
    ints = (c, h * wd, BN_EPS, int(bn is not None), int(bias is not None), int(residual is not None), int(relu))
    return launch, ints


# ------------------------------------------------------------------------------------------------
# the in-place epilogue

# {problem key: plan} of the epilogue; a plan is `plan(y, bias, residual, bn) -> y`.
_EPILOGUE_PLANS = STATE.table("conv_epilogue.plans")


def _epilogue_key(y, bias, residual, relu, bn):
    return (signature(y, bias, residual, *(bn if bn is not None else ())), relu)


def epilogue_(y: torch.Tensor, bias=None, residual=None, relu=False, bn=None) -> torch.Tensor:
    """In place on y (N, C, H, W), dense in either layout: relu?(bn(y) + bias[c] + residual), where
    bn = (mean, var, gamma, beta) is eval-mode batch norm (eps BN_EPS)."""
    key = _epilogue_key(y, bias, residual, relu, bn)
    plan = _EPILOGUE_PLANS.get(key)
    if plan is None:
        plan = _EPILOGUE_PLANS[key] = epilogue_plan(y, bias, residual, relu, bn)
    return plan(y, bias, residual, bn)


def epilogue_plan(y, bias, residual, relu, bn):
    """The epilogue's launch for y's key: layout, grid and integer arguments decided here."""
    fmt = dense_format(y)
    if fmt is None:  # not dense: through a dense copy (not a path fusebench's wrappers take)
        def strided(y, bias, residual, bn):
            return y.copy_(epilogue_(y.contiguous(), bias, residual, relu, bn))
        return strided
    if y.numel() == 0:
        return lambda y, bias, residual, bn: y
    # a residual of another layout is made dense like y, per call
    convert_res = residual is not None and residual.stride() != y.stride()
    n, c, h, w = y.shape
    # A flat block of 1024 elements a program at 4 warps (8 a thread): no lanes are masked at the
    # ends of small NCHW planes, as (rows, columns) tiles were (docs/kernels.md, 'Conv epilogues').
    # Small blocks under the interpreter, which runs them one after another.
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
