"""A 1x1 convolution on NCHW tensors as one GEMM with the epilogue fused: conv.py's "gemm_nchw" and
"gemm_nchw_cl" paths.

For every image b, y[b] = W @ x[b] with W the (C_out, C_in) weight and x[b] the (C_in, H*W) image.
The images' GEMMs share W, so the kernel runs them as one GEMM whose columns are the pixels of
every image in turn (no tile is half padding where H*W is 49 or 196).  Its B operand is x read in
place, or x's channels_last copy, the (N*H*W, C_in) matrix that conv_epilogue.py's transposing
kernel writes first: in place, an image's channels are H*W elements apart, and at 7x7 no load of x
is wider than one element, so the GEMM is slower there than on the copy, while at 28x28 and 56x56
it loads 16-byte vectors and the copy costs more than it saves (docs/kernels.md, 'Conv epilogues').
Bias, batch norm, residual and relu are applied to the fp32 accumulator, whose rows are output
channels, and the tile is stored straight into the NCHW output: one pass over y, where cuDNN's
conv (and Inductor's) is followed by an epilogue kernel reading and writing it again.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_wait

from fusebench.kernels.batchnorm import bn_scale_shift
from fusebench.kernels.gemm_configs import conv_configs, prune_conv
from fusebench.kernels.gemm_utils import dot_precision, grouped_tile, tuned_launch
from fusebench.kernels.launch import dependent
from fusebench.kernels.tuning import triton_autotune as autotune


# Hopper: mid-sized tiles, and 128x256 for the large layers, the fastest at some of them (far
# slower than the others at 7x7 and 14x14); 128x128 at 4 warps is never the fastest
# (docs/kernels.md, 'Conv epilogues')
HOPPER_SPACE = [(128, 128, 64, 4, 8), (128, 256, 64, 3, 8), (128, 64, 64, 4, 4), (64, 128, 64, 4, 4),
                (64, 128, 128, 3, 4), (128, 64, 128, 4, 4), (64, 64, 128, 4, 4), (64, 64, 64, 6, 4),
                (64, 64, 64, 4, 4)]


def _prune(configs, named_args, **kwargs):
    return prune_conv(configs, named_args["x_ptr"].element_size(), named_args["COUT"], named_args["CIN"], "BLOCK_M")


@autotune(configs=conv_configs(HOPPER_SPACE), key=["NPIX", "CIN", "COUT", "P", "X_NCHW"],
          prune_configs_by={"early_config_prune": _prune})
@triton.heuristics({"EVEN_K": lambda args: args["CIN"] % args["BLOCK_K"] == 0})
@triton.jit(do_not_specialize=["HAS_BN", "HAS_BIAS", "HAS_RES", "RELU"])
def _conv1x1_nchw_kernel(x_ptr, w_ptr, y_ptr, mean_ptr, var_ptr, gamma_ptr, beta_ptr, bias_ptr, res_ptr,  #
                         NPIX, CIN, COUT, P, eps,  #
                         HAS_BN, HAS_BIAS, HAS_RES, RELU,  #
                         PRECISION: tl.constexpr, WAIT: tl.constexpr, X_NCHW: tl.constexpr, VEC: tl.constexpr,  #
                         EVEN_K: tl.constexpr,  #
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    # GEMM view: rows m = output channels, columns n = pixels of every image (image * P + pixel),
    # reduction k = input channels.  x is (NPIX, CIN) row-major (channels_last), w (COUT, CIN),
    # y (NPIX / P, COUT, P) NCHW, the residual as y.  WAIT: launched as a dependent of x's copy.
    if WAIT:
        gdc_wait()
    pid_m, pid_n = grouped_tile(tl.program_id(0), tl.cdiv(COUT, BLOCK_M), tl.cdiv(NPIX, BLOCK_N), GROUP_M)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    m_ok = offs_m < COUT
    n_ok = offs_n < NPIX
    # rows and columns past the edge read row / column 0 (the loads need no mask; the store drops
    # them), as matmul.py's GEMM
    offs_am = tl.max_contiguous(tl.multiple_of(tl.where(m_ok, offs_m, 0), BLOCK_M), BLOCK_M)
    offs_bn = tl.where(n_ok, offs_n, 0)
    # both operands K-contiguous: A[m, k] = w[m, k]; B[k, n] = x[n, k] from the channels_last copy,
    # or x[n // P, k, n % P] in place (X_NCHW: aligned where P is a multiple of 8, see the store)
    a_ptrs = w_ptr + offs_am[:, None] * CIN + offs_k[None, :]
    if X_NCHW:
        x_cols = tl.max_contiguous(tl.multiple_of((offs_bn // P) * (CIN * P) + offs_bn % P, VEC), BLOCK_N)
        b_ptrs = x_ptr + x_cols[None, :] + tl.multiple_of(offs_k * P, VEC)[:, None]
    else:
        b_ptrs = x_ptr + offs_bn[None, :] * CIN + offs_k[:, None]

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, CIN, BLOCK_K):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:  # the K tail reads zeros
            a = tl.load(a_ptrs, mask=offs_k[None, :] < CIN - k0, other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < CIN - k0, other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K * P if X_NCHW else BLOCK_K

    # epilogue on the fp32 accumulator: a row is one output channel
    if HAS_BN != 0:  # eval-mode batch norm
        scale, shift = bn_scale_shift(mean_ptr, var_ptr, gamma_ptr, beta_ptr, offs_m, m_ok, eps)
        acc = acc * scale[:, None] + shift[:, None]
    if HAS_BIAS != 0:
        acc += tl.load(bias_ptr + offs_m, mask=m_ok, other=0.0).to(tl.float32)[:, None]
    # pixel n of image n // P sits at y[n // P, m, n % P].  Columns run on within an image, which
    # the compiler cannot see through the division: max_contiguous orders the store's lanes along
    # a row (down a column, every element was a transaction of its own; docs/kernels.md, 'Conv epilogues'), and
    # multiple_of lets it store VEC at once, VEC being the power of two dividing P (at most 8):
    # VEC columns from a multiple of VEC never straddle two images.
    cols = tl.max_contiguous(tl.multiple_of((offs_n // P) * (COUT * P) + offs_n % P, VEC), BLOCK_N)
    y_offs = cols[None, :] + tl.multiple_of(offs_m * P, VEC)[:, None]  # unknown to the compiler: P's factor of 2s
    mask = m_ok[:, None] & n_ok[None, :]
    if HAS_RES != 0:
        acc += tl.load(res_ptr + y_offs, mask=mask, other=0.0).to(tl.float32)
    if RELU != 0:
        acc = tl.maximum(acc, 0.0)
    tl.store(y_ptr + y_offs, acc.to(y_ptr.dtype.element_ty), mask=mask)


def applies(x: torch.Tensor, w: torch.Tensor, stride: int) -> bool:
    """Whether the path takes this conv: 1x1 at stride 1, contiguous NCHW x and w, 32-bit offsets."""
    return (w.shape[-1] == 1 and w.shape[-2] == 1 and stride == 1 and x.is_contiguous() and w.is_contiguous()
            and x.numel() < 2**31 and x.shape[0] * w.shape[0] * x.shape[2] * x.shape[3] < 2**31)


def conv1x1_nchw_plan(x, w, bias, residual, relu, bn=None, eps=1e-5, copy_x=None):
    """(plan, y): `plan(x, w, bias, residual, bn=None) -> y` for x's key, autotuned here, and its
    first result.  bn = (mean, var, gamma, beta) applies batch norm before the bias.  `copy_x(x)`,
    where given, is x's channels_last copy (conv_epilogue.py's transposing kernel), which the GEMM then reads,
    launched as its dependent; else the GEMM reads x in place."""
    n, cin, h, wd = x.shape
    cout = w.shape[0]
    shape, p = (n, cout, h, wd), h * wd
    nchw = (cout * p, p, wd, 1)
    ints = (n * p, cin, cout, p, eps, int(bn is not None), int(bias is not None), int(residual is not None), int(relu))
    x_nchw = copy_x is None
    copy_x = copy_x or (lambda x: x)
    after_copy = dependent(x.device, on=not x_nchw)

    def grid(meta):
        return (triton.cdiv(cout, meta["BLOCK_M"]) * triton.cdiv(n * p, meta["BLOCK_N"]),)

    dense_res = residual is None or residual.stride() == nchw  # the key fixes it; else made NCHW per call

    def operands(x, w, bias, residual, bn):
        y = x.new_empty_strided(shape, nchw)
        if not dense_res:
            residual = residual.contiguous()
        return (copy_x(x), w, y, *(bn if bn is not None else (y, y, y, y)), y if bias is None else bias,
                y if residual is None else residual)

    args = operands(x, w, bias, residual, bn)
    if args[2].numel() == 0:
        return (lambda x, w, bias, residual, bn=None: x.new_empty_strided(shape, nchw)), args[2]
    consts = dict(PRECISION=dot_precision(x.dtype), WAIT=after_copy["WAIT"], X_NCHW=x_nchw, VEC=min(p & -p, 8))
    _conv1x1_nchw_kernel[grid](*args, *ints, **consts)  # tunes: the copy and the GEMM in one stream
    launch = tuned_launch(_conv1x1_nchw_kernel, grid, args + ints, {**consts, **after_copy})

    def plan(x, w, bias, residual, bn=None):
        args = operands(x, w, bias, residual, bn)
        launch(*args, *ints)
        return args[2]

    return plan, args[2]
