"""Which path conv_paths.conv_fused takes for a shape (conv.py's docstring lists the paths).

`candidate_paths` gives the paths worth trying and why: one, which runs, or several, the fastest
of which is timed at the first call for the shape (tuning.fastest) and kept.  FUSEBENCH_CONV_PATH
(settings.conv_path, read at each choice) forces one where it applies.  `runnable` swaps a path
for one that takes operands it cannot, and `describe` is the note stored with each result: the
path, why, and the measured times.
"""
from __future__ import annotations

import functools

import torch

from fusebench import settings
from fusebench.kernels import conv1x1
from fusebench.kernels.conv_epilogue import dense_format, is_channels_last
from fusebench.kernels.gemm_utils import precision_note
from fusebench.kernels.tuning import fastest_record, source_hash

# The code a timed choice is made with (tuning.ChoiceCache keys the stored choices by it): every
# module a conv path runs.
SOURCE = functools.partial(source_hash, "fusebench.kernels.conv", "fusebench.kernels.conv_choice",
                           "fusebench.kernels.conv_paths",
                           "fusebench.kernels.conv_epilogue", "fusebench.kernels.conv_igemm",
                           "fusebench.kernels.conv_batchnorm", "fusebench.kernels.matmul",
                           "fusebench.kernels.gemm_configs", "fusebench.kernels.conv1x1",
                           "fusebench.kernels.batchnorm")


def candidate_paths(n, cin, h, w, cout, r, stride, channels_last, dtype) -> tuple[list[str], str]:
    """The paths worth trying for a shape (the first is the default), and why.

    - NCHW 3x3: cuDNN's channels_last conv is faster than its NCHW one, enough to pay for the
      copies and the NCHW-writing epilogue, so that route is timed against the NCHW conv + epilogue.
    - NCHW 1x1 at stride 1: conv1x1's GEMM writes NCHW with the epilogue.  Where H*W is a multiple
      of 8 it reads x in place (aligned vectors), timed against cuDNN's NCHW conv + epilogue;
      elsewhere it also reads a channels_last copy of x (in place, no load of x is wider than an
      element), timed against the channels_last route.
    - NCHW, any filter: never the implicit GEMM, which gathers A with C_in strided by H*W (no
      vector loads, register spills); strided 1x1 convs take cuDNN + epilogue.
    - channels_last: cuDNN + epilogue and the implicit GEMM / 1x1 GEMM are close (a 3x3 conv at
      7x7 has too few output tiles for a GEMM without split-K), so both are timed at the first
      call per shape and the faster is kept.
    - fp32: cuDNN (PyTorch runs fp32 convs as tf32 on cuDNN; ours would be tf32 too, and slower).
    The measurements behind each rule: docs/kernels.md, 'Conv epilogues'.
    """
    forced = settings.current().conv_path
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


def choice_key(shape8, dtype, has_bias, has_res, relu):
    """The tuner's key of conv_fused's path choice for a shape (n, cin, h, w, cout, r, stride, cl)."""
    return ("conv", *shape8, dtype, bool(has_bias), bool(has_res), bool(relu))


def shape_of(x, w, stride) -> tuple:
    """(n, cin, h, w, cout, r, stride, channels_last) of a conv of x with w: the cases' shape."""
    n, cin, h, wd = x.shape
    return (n, cin, h, wd, w.shape[0], w.shape[-1], stride, int(is_channels_last(x)))


def runnable(path, x, w, stride):
    """`path`, or the path that runs in its place where it does not take these operands."""
    if path == "gemm" and not (w.shape[-1] == 1 and stride == 1 and is_channels_last(x)
                               and dense_format(w) is not None):
        path = "igemm"
    if path == "igemm" and x.numel() >= 2**31:
        path = "cudnn"  # the kernel's pointer arithmetic is 32-bit
    if path == "cudnn_cl" and not (x.is_contiguous() and w.is_contiguous()):
        path = "cudnn"  # the copies read contiguous NCHW x and OIHW w
    if path in ("gemm_nchw", "gemm_nchw_cl") and not conv1x1.applies(x, w, stride):
        path = "cudnn"  # 1x1 at stride 1 on contiguous NCHW x and w only
    return path


def describe(shape, dtype, epilogue=(False, False, False)):
    """The note stored with a conv_fused result of `shape` with the epilogue (bias, residual,
    relu): the path, why, and the times measured where several were timed."""
    n, cin, h, w, cout, r, stride, cl = shape
    paths, why = candidate_paths(n, cin, h, w, cout, r, stride, bool(cl), dtype)
    rec = fastest_record(choice_key(tuple(shape), dtype, *epilogue)) if len(paths) > 1 else None
    if rec:
        times = ", ".join(f"{p} {ms * 1e3:.1f}us" for p, ms in rec[1].items()) or "cached from an earlier run"
        return f"{precision_note(dtype)}, {rec[0]}: {why} (measured: {times})"
    if len(paths) > 1:
        return f"{precision_note(dtype)}, {' or '.join(paths)}: {why} (timed at first call)"
    return f"{precision_note(dtype)}, {paths[0]}: {why}"
