"""Eval-mode batch norm for the convolutions: applied in a kernel's epilogue as a per-channel scale
and shift (`bn_scale_shift`), or folded into the convolution's weights and bias (`fold_bn`):
    bn(conv(x, w)) = conv(x, w * s) + (beta - mean * s),  s = gamma / sqrt(var + eps)
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from fusebench.kernels.device import next_pow2
from fusebench.kernels.launch import STATE, Launch, signature

BN_EPS = 1e-5  # fusebench/cases/conv.py's eps


@triton.jit
def bn_scale_shift(mean_ptr, var_ptr, gamma_ptr, beta_ptr, ch, mask, eps):
    """fp32 (scale, shift) of channels `ch` (loaded where `mask`), so that
    (y - mean) * gamma / sqrt(var + eps) + beta = y * scale + shift."""
    mean = tl.load(mean_ptr + ch, mask=mask, other=0.0).to(tl.float32)
    var = tl.load(var_ptr + ch, mask=mask, other=1.0).to(tl.float32)
    gamma = tl.load(gamma_ptr + ch, mask=mask, other=0.0).to(tl.float32)
    beta = tl.load(beta_ptr + ch, mask=mask, other=0.0).to(tl.float32)
    scale = gamma / tl.sqrt(var + eps)
    return scale, beta - mean * scale


# ------------------------------------------------------------------------------------------------
# the fold: one small kernel writes the folded weight and the shift; the shift is then the conv's bias


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
_FOLD_PLANS = STATE.table("batchnorm.fold_plans")


def fold_bn(w, mean, var, gamma, beta, eps=BN_EPS):
    """(w * s, beta - mean * s) with s = gamma / sqrt(var + eps), computed in fp32, stored in w's dtype.

    The shift is rounded to w's dtype like the conv_relu bias, so that conv_bn reuses the same
    compiled conv kernels; its rounding error (2**-11 relative in fp16) is far inside the tolerance.
    """
    key = (signature(w, mean, var, gamma, beta), eps)
    plan = _FOLD_PLANS.get(key)
    if plan is None:
        plan = _FOLD_PLANS[key] = fold_plan(w, eps)
    return plan(w, mean, var, gamma, beta)


def fold_plan(w, eps):
    """The fold's launch for w's key: `plan(w, mean, var, gamma, beta) -> (w * s, shift)`."""
    # a weight dense in neither layout is folded from a dense copy, per call
    dense = w.is_contiguous() or w.is_contiguous(memory_format=torch.channels_last)
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
