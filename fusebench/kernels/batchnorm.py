"""Eval-mode batch norm as a per-channel scale and shift, for the convolution epilogues."""
import triton
import triton.language as tl


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
