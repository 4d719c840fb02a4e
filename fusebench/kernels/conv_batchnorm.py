"""conv_bn: a convolution followed by eval-mode batch norm, two ways, the faster timed at the first
call per shape (FUSEBENCH_CONV_BN, settings.conv_bn, forces one):

- "folded": batch norm folded into the weights and a bias (batchnorm.fold_bn, exact algebra), then
  conv_fused of the folded weights with the shift as its bias: the fold's launch, then the conv's
  (one launch more than eager unless the conv is one of ours with the bias fused).
- "bn-epilogue": the conv of the raw weights with batch norm applied in its epilogue: cuDNN's conv
  and the in-place epilogue kernel (the same two launches as eager), or, where conv_fused's first
  path applies batch norm in its own epilogue, that path (`_BN_EPILOGUES`).

A plan per problem key in launch.STATE, as conv_fused's; its key holds the settings that decide it.
"""
from __future__ import annotations

import torch.nn.functional as F

from fusebench import settings
from fusebench.kernels import conv_paths as paths
from fusebench.kernels import gemm_utils as gu
from fusebench.kernels.batchnorm import BN_EPS, fold_plan
from fusebench.kernels.conv_choice import SOURCE, candidate_paths, describe, runnable, shape_of
from fusebench.kernels.conv_epilogue import epilogue_plan
from fusebench.kernels.gemm_utils import precision_note
from fusebench.kernels.launch import STATE, signature
from fusebench.kernels.tuning import fastest, fastest_record

BN_WAYS = ("bn-epilogue", "folded")

# The paths whose plan applies batch norm in its epilogue (conv_bn's bn-epilogue way), as described.
_BN_EPILOGUES = {
    "cudnn": "cuDNN conv of the raw weights + batch norm in one Triton epilogue (2 kernels, as eager)",
    "cudnn_cl": "cuDNN's channels_last conv on copies of x and w + batch norm in the epilogue writing NCHW "
                "(3 kernels)",
    "gemm_nchw": "one GEMM reading x in place, batch norm in its epilogue (1 kernel)",
    "gemm_nchw_cl": "a channels_last copy of x, then one GEMM with batch norm in its epilogue (2 kernels)",
}


def _bn_choice_key(shape):
    return ("conv_bn", *shape)


def _bn_epilogue_path(shape, dtype) -> str:
    """The path of conv_bn's bn-epilogue way: conv_fused's first path for the shape where its plan
    applies batch norm, else cuDNN's conv and the epilogue kernel."""
    first = candidate_paths(*shape, dtype)[0][0]
    return first if first in _BN_EPILOGUES else "cudnn"


def describe_bn(shape, dtype):
    """The note stored with a conv_bn result: the way (and its path), and the times measured."""
    rec = fastest_record(_bn_choice_key(tuple(shape) + (dtype,)))
    unfolded = _BN_EPILOGUES[_bn_epilogue_path(shape, dtype)]
    folded = "BN folded into weights+bias (1 Triton kernel), then "
    if rec is None:
        return f"faster of [{unfolded}] and [{folded}conv + bias] (timed at first call)"
    times = ", ".join(f"{p} {ms * 1e3:.1f}us" for p, ms in rec[1].items()) or "cached from an earlier run"
    if rec[0] == "bn-epilogue":
        return f"{precision_note(dtype)}, {unfolded} (measured: {times})"
    return folded + describe(shape, dtype, (True, False, False)) + f" (vs unfolded: {times})"


# {problem key: plan} of conv_bn; a plan is `plan(x, w, mean, var, gamma, beta) -> y`.
_BN_PLANS = STATE.table("conv_batchnorm.plans")


def conv_bn(x, w, mean, var, gamma, beta, stride: int):
    """Batch norm (eps BN_EPS) of conv2d(x, w, stride, padding=R//2), the faster of BN_WAYS."""
    s = settings.current()
    plan = _BN_PLANS.get((signature(x, w, mean, var, gamma, beta), stride, None, s.conv_bn, s.conv_path,
                          s.fp32_precision, gu.MULTI_KERNEL))
    if plan is not None:
        return plan(x, w, mean, var, gamma, beta)
    return _conv_bn_with_plan(x, w, mean, var, gamma, beta, stride, None)[1]


def _conv_bn_with_plan(x, w, mean, var, gamma, beta, stride, way):
    """(plan, y) for conv_bn's key and `way` (None: settings.conv_bn, or the faster way, timed here)."""
    s = settings.current()
    key = (signature(x, w, mean, var, gamma, beta), stride, way, s.conv_bn, s.conv_path, s.fp32_precision,
           gu.MULTI_KERNEL)
    plan = _BN_PLANS.get(key)
    if plan is not None:
        return plan, plan(x, w, mean, var, gamma, beta)
    args = (x, w, mean, var, gamma, beta)
    if way is None:
        way = s.conv_bn
        if way not in BN_WAYS:
            choice = _bn_choice_key(shape_of(x, w, stride) + (x.dtype,))
            way = fastest(choice, {w_: (lambda w_=w_: _conv_bn_with_plan(*args, stride, w_)[1]) for w_ in BN_WAYS},
                          device=x.device, source=SOURCE())
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
    path = _bn_epilogue_path(shape_of(x, w, stride), x.dtype)
    build = {"cudnn_cl": paths.cudnn_cl_plan, "gemm_nchw": paths.gemm_nchw_plan,
             "gemm_nchw_cl": paths.gemm_nchw_cl_plan}.get(path)
    if build is not None and runnable(path, x, w, stride) == path:
        inner, y = build(x, w, stride, None, None, False, (mean, var, gamma, beta))
        return (lambda x, w, mean, var, gamma, beta: inner(x, w, None, None, (mean, var, gamma, beta))), y
    pad = w.shape[-1] // 2
    conv2d = F.conv2d
    y = conv2d(x, w, None, stride, pad)
    bn = (mean, var, gamma, beta)
    epi = epilogue_plan(y, None, None, False, bn)
    epi(y, None, None, bn)

    def plan(x, w, mean, var, gamma, beta):
        return epi(conv2d(x, w, None, stride, pad), None, None, (mean, var, gamma, beta))

    return plan, y


def _folded_plan(x, w, mean, var, gamma, beta, stride):
    """The fold kernel, then conv_fused of the folded weights with the shift as its bias."""
    fold = fold_plan(w, BN_EPS)
    w_folded, shift = fold(w, mean, var, gamma, beta)
    conv, y = paths.conv_with_plan(x, w_folded, stride, bias=shift)

    def plan(x, w, mean, var, gamma, beta):
        w_folded, shift = fold(w, mean, var, gamma, beta)
        return conv(x, w_folded, shift, None)

    return plan, y
