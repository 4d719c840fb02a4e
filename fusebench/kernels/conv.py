"""Convolution with a fused epilogue: the registered kernels conv_add, conv_relu and conv_bn.

Six paths run `epilogue(conv2d(x, w))`, all computing the epilogue in fp32 before one store
(conv_paths.py holds their plans):

- "igemm": an implicit-GEMM Triton convolution (conv_igemm.py).  Best with channels_last tensors
  (C_in contiguous: vector loads along K).
- "gemm": a 1x1, stride-1 convolution on channels_last tensors *is* a GEMM,
  (N*H*W, C_in) @ (C_in, C_out), so it runs on matmul.py's GEMM with the same epilogue.
- "cudnn": cuDNN's convolution (torch conv2d, no bias) followed by one in-place Triton epilogue
  kernel (conv_epilogue.py).  Two kernels and one extra read+write of the output, but cuDNN's conv.
- "cudnn_cl": NCHW in and out through cuDNN's channels_last conv: x and w copied by one
  transposing kernel, the conv, then an epilogue that writes the NCHW output (conv_epilogue.py).
- "gemm_nchw", "gemm_nchw_cl": a 1x1 stride-1 convolution on NCHW tensors as conv1x1.py's GEMM,
  which writes the NCHW output with the epilogue; it reads x in place, or (the second) a
  channels_last copy of x made by the transposing kernel.

conv_bn folds eval-mode batch norm into the convolution (exact algebra) or applies it in the
epilogue, whichever is faster (conv_batchnorm.py):
    bn(conv(x, w)) = conv(x, w * s) + (beta - mean * s),  s = gamma / sqrt(var + eps)

Every wrapper keeps a plan per problem key (conv_fused, conv_bn, the epilogue, the fold), in
launch.STATE's tables: the path or way, the autotuned config, grids and integer arguments are
decided at the key's first call, so a later call is a lookup, the output's allocation and the
launches (cuDNN's through torch).

Which path runs is decided per shape by conv_choice.candidate_paths: a fixed path, or the fastest
of those timed at the first call for that shape (like autotuning, across kernels); describe()
stores the path, why, and the measured times with each result.
"""
from __future__ import annotations

from fusebench.cases import conv as cases
from fusebench.kernels.batchnorm import BN_EPS, fold_bn  # noqa: F401  (re-exported: conv's public names)
from fusebench.kernels.conv_batchnorm import BN_WAYS, conv_bn, describe_bn  # noqa: F401
from fusebench.kernels.conv_choice import candidate_paths, choose_path, describe  # noqa: F401
from fusebench.kernels.conv_epilogue import epilogue_  # noqa: F401
from fusebench.kernels.conv_paths import conv_fused, conv_with_plan  # noqa: F401
from fusebench.kernels.gemm_utils import check_device
from fusebench.kernels.registry import triton_kernel


def supports(shape, dtype, device):
    """The reason a conv case's shape cannot run here, or None."""
    reason = check_device(dtype, device)
    if reason:
        return reason
    if shape[5] % 2 == 0:
        return "even filter sizes (asymmetric padding) not supported"
    return None


def _describe_add(shape, dtype):
    return describe(shape, dtype, (False, True, False))


def _describe_relu(shape, dtype):
    return describe(shape, dtype, (True, False, True))


@triton_kernel(cases.CONV_ADD, supports=supports, describe=_describe_add, interpretable=True)
def conv_add(x, w, residual, stride: int):
    return conv_fused(x, w, stride, residual=residual)


@triton_kernel(cases.CONV_RELU, supports=supports, describe=_describe_relu, interpretable=True)
def conv_relu(x, w, bias, stride: int):
    return conv_fused(x, w, stride, bias=bias, relu=True)


triton_kernel(cases.CONV_BN, supports=supports, describe=describe_bn, interpretable=True)(conv_bn)
