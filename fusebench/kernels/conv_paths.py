"""conv_fused, the convolution with a fused epilogue that conv_add and conv_relu are (and conv_bn
runs, conv_batchnorm.py), and the plans of its six paths (conv.py's docstring lists them).

conv_fused keeps a plan per problem key in launch.STATE: the path, the autotuned config, grids and
integer arguments are decided at the key's first call (conv_with_plan, which chooses the path as
conv_choice says, timing the candidates where several apply), so a later call is a lookup, the
output's allocation and the launches (cuDNN's through torch).  The key holds the settings that
decide a plan (conv_path, fp32_precision, read at each call), so that a changed setting
(settings.refresh()) is seen by the next call.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from fusebench import settings
from fusebench.kernels import conv1x1
from fusebench.kernels import gemm_utils as gu
from fusebench.kernels.batchnorm import BN_EPS
from fusebench.kernels.conv_choice import SOURCE, candidate_paths, choice_key, runnable, shape_of
from fusebench.kernels.conv_epilogue import (
    epilogue_plan, is_channels_last, nchw_epilogue_launch, to_channels_last_plan,
)
from fusebench.kernels.conv_igemm import igemm_plan
from fusebench.kernels.launch import STATE, signature
from fusebench.kernels.matmul import gemm_with_plan
from fusebench.kernels.tuning import fastest

# {problem key: plan} of conv_fused; a plan is `plan(x, w, bias, residual) -> y`, with the path,
# its autotuned config, the grid and every integer argument fixed at the key's first call.
_PLANS = STATE.table("conv_paths.plans")


def _conv_key(x, w, stride, bias, residual, relu, path):
    s = settings.current()
    return (signature(x, w, bias, residual), stride, relu, path, s.conv_path, s.fp32_precision, gu.MULTI_KERNEL)


def conv_fused(x, w, stride: int, bias=None, residual=None, relu=False, path: str | None = None):
    """epilogue(conv2d(x, w, stride, padding=R//2)): + bias[c], + residual, relu."""
    # _conv_key, inlined: this is every call's path
    s = settings.current()
    plan = _PLANS.get((signature(x, w, bias, residual), stride, relu, path, s.conv_path, s.fp32_precision,
                       gu.MULTI_KERNEL))
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
        shape8 = shape_of(x, w, stride)
        paths, _ = candidate_paths(*shape8, x.dtype)
        if len(paths) == 1:
            path = paths[0]
        else:
            path = fastest(choice_key(shape8, x.dtype, bias is not None, residual is not None, relu),
                           {p: (lambda p=p: conv_fused(x, w, stride, bias, residual, relu, path=p)) for p in paths},
                           device=x.device, source=SOURCE())
        plan, y = conv_with_plan(x, w, stride, bias, residual, relu, path)  # the chosen path's plan
    else:
        path = runnable(path, x, w, stride)
        build = {"gemm": gemm1x1_plan, "igemm": igemm_plan, "cudnn_cl": cudnn_cl_plan,
                 "gemm_nchw": gemm_nchw_plan, "gemm_nchw_cl": gemm_nchw_cl_plan}.get(path, cudnn_plan)
        plan, y = build(x, w, stride, bias, residual, relu)
        if path == "cudnn" and gu.graph_capturable(x):  # two launches: the graph option applies
            plan = gu.GraphCall(plan, (x, w, bias, residual))
    _PLANS[key] = plan
    return plan, y


# ------------------------------------------------------------------------------------------------
# The paths' plans: each `build(x, w, stride, bias, residual, relu) -> (plan, y)`, y the first
# result; those that can apply batch norm in their epilogue take `bn` too (conv_batchnorm.py).


def gemm1x1_plan(x, w, stride, bias, residual, relu):
    # x (N, C, H, W) channels_last is the row-major matrix (N*H*W, C); w (K, C, 1, 1) is (K, C).
    n, cin, h, wd = x.shape
    cout = w.shape[0]
    y = torch.empty((n, cout, h, wd), device=x.device, dtype=x.dtype, memory_format=torch.channels_last)
    shape, ystride = tuple(y.shape), y.stride()
    a = x.permute(0, 2, 3, 1).reshape(n * h * wd, cin)
    b = w.reshape(cout, cin).t()  # (C, K) view of the (K, C) weight
    y2 = y.permute(0, 2, 3, 1).view(n * h * wd, cout)
    res_cl = residual is not None and is_channels_last(residual)  # else made channels_last per call
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


def gemm_nchw_plan(x, w, stride, bias, residual, relu, bn=None):
    """conv1x1's GEMM reading x in place and writing NCHW with the epilogue (batch norm too, where
    `bn` is given): one launch.  The plan takes bn too."""
    return conv1x1.conv1x1_nchw_plan(x, w, bias, residual, relu, bn, BN_EPS)


def gemm_nchw_cl_plan(x, w, stride, bias, residual, relu, bn=None):
    """x copied to channels_last by the transposing kernel, then conv1x1's GEMM reading the copy:
    two launches.  The plan takes bn too."""
    copies = to_channels_last_plan(x)
    return conv1x1.conv1x1_nchw_plan(x, w, bias, residual, relu, bn, BN_EPS, copy_x=lambda x: copies(x)[0])


def cudnn_plan(x, w, stride, bias, residual, relu):
    """cuDNN's conv (torch, no bias), then the epilogue kernel in place: two launches."""
    pad = w.shape[-1] // 2
    conv2d = F.conv2d
    y = conv2d(x, w, None, stride, pad)
    epi = epilogue_plan(y, bias, residual, relu, None)
    epi(y, bias, residual, None)

    def plan(x, w, bias, residual):
        return epi(conv2d(x, w, None, stride, pad), bias, residual, None)

    return plan, y


def cudnn_cl_plan(x, w, stride, bias, residual, relu, bn=None):
    """NCHW in and out through cuDNN's channels_last conv: x and w (unless 1x1) copied to
    channels_last by one kernel, the conv, then the epilogue (with batch norm where `bn` is given)
    reading its result and writing a new NCHW output: three launches, where cuDNN's NCHW kernels
    are slower than its channels_last ones at 3x3 (docs/kernels.md, 'Conv epilogues').  The plan
    takes bn too."""
    pad = w.shape[-1] // 2
    conv2d = F.conv2d
    copies = to_channels_last_plan(x, w)
    y = conv2d(*copies(x, w), None, stride, pad)
    n, c, h, wd = y.shape
    shape, nchw = tuple(y.shape), (c * h * wd, h * wd, wd, 1)
    launch, ints = nchw_epilogue_launch(y, bias, residual, relu, bn)
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

