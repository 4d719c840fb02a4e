"""Convolution family: conv2d with an epilogue (residual add, bias+relu, eval-mode batch norm).

A shape is (N, C_in, H, W, C_out, R, stride, channels_last): an R x R filter with padding R // 2,
NCHW when channels_last is 0.  The grid is ResNet-50's 1x1 and 3x3 layers at batch 32.
"""
import math

import torch
import torch.nn.functional as F

from fusebench.cases.base import Case, numel_bytes, rand, randn

# Where this family comes in the catalog (fusebench/catalog.py): the specification's order.
CATALOG_ORDER = 5
AXES = ("N", "C_in", "H", "W", "C_out", "R", "stride", "channels_last")
BN_EPS = 1e-5

# (C_in, H, W, C_out, R, stride) of ResNet-50's bottleneck convolutions (torchvision's v1.5 layout,
# stride on the 3x3), deduplicated.
RESNET50_LAYERS = [
    (64, 56, 56, 64, 1, 1), (64, 56, 56, 64, 3, 1), (64, 56, 56, 256, 1, 1), (256, 56, 56, 64, 1, 1),
    (256, 56, 56, 128, 1, 1), (128, 56, 56, 128, 3, 2), (128, 28, 28, 512, 1, 1), (512, 28, 28, 128, 1, 1),
    (128, 28, 28, 128, 3, 1), (512, 28, 28, 256, 1, 1), (256, 28, 28, 256, 3, 2), (256, 14, 14, 1024, 1, 1),
    (1024, 14, 14, 256, 1, 1), (256, 14, 14, 256, 3, 1), (1024, 14, 14, 512, 1, 1), (512, 14, 14, 512, 3, 2),
    (512, 7, 7, 2048, 1, 1), (2048, 7, 7, 512, 1, 1), (512, 7, 7, 512, 3, 1),
]
GRID = [(32, *layer, cl) for layer in RESNET50_LAYERS for cl in (0, 1)]
QUICK = [(32, 64, 56, 56, 64, 3, 1, 1), (32, 256, 14, 14, 1024, 1, 1, 1), (32, 512, 7, 7, 512, 3, 1, 0)]
CPU = [(4, 64, 56, 56, 64, 3, 1, 0), (4, 256, 14, 14, 1024, 1, 1, 1)]
TOLERANCES = {torch.float32: (2e-3, 1e-2), torch.float16: (2e-3, 1e-2), torch.bfloat16: (1e-2, 5e-2)}


def out_hw(s):
    n, cin, h, w, cout, r, stride, _ = s
    pad = r // 2
    return (h + 2 * pad - r) // stride + 1, (w + 2 * pad - r) // stride + 1


# Stride is part of the shape, not of the tensors: the functions take it as a trailing int argument.
def conv_add(x, w, residual, stride: int):
    return F.conv2d(x, w, stride=stride, padding=w.shape[-1] // 2) + residual


def conv_relu(x, w, bias, stride: int):
    return torch.relu(F.conv2d(x, w, bias, stride=stride, padding=w.shape[-1] // 2))


def conv_bn(x, w, mean, var, gamma, beta, stride: int):
    y = F.conv2d(x, w, stride=stride, padding=w.shape[-1] // 2)
    return F.batch_norm(y, mean, var, gamma, beta, training=False, eps=BN_EPS)


def _layout(t, s):
    return t.contiguous(memory_format=torch.channels_last) if s[7] else t


def _xw(s, dtype, device, seed):
    n, cin, h, w, cout, r, stride, _ = s
    x = _layout(randn((n, cin, h, w), dtype, device, seed), s)
    wt = _layout(randn((cout, cin, r, r), dtype, device, seed + 1, scale=1 / math.sqrt(cin * r * r)), s)
    return x, wt


def _conv_add_inputs(s, dtype, device, seed):
    ho, wo = out_hw(s)
    residual = _layout(randn((s[0], s[4], ho, wo), dtype, device, seed + 2), s)
    return (*_xw(s, dtype, device, seed), residual, s[6])


def _conv_relu_inputs(s, dtype, device, seed):
    return (*_xw(s, dtype, device, seed), randn((s[4],), dtype, device, seed + 2, scale=0.5), s[6])


def _conv_bn_inputs(s, dtype, device, seed):
    c = s[4]
    mean = randn((c,), dtype, device, seed + 2, scale=0.5)
    var = rand((c,), dtype, device, seed + 3, 0.5, 2.0)
    gamma = rand((c,), dtype, device, seed + 4, 0.5, 1.5)
    beta = randn((c,), dtype, device, seed + 5, scale=0.5)
    return (*_xw(s, dtype, device, seed), mean, var, gamma, beta, s[6])


def _conv_bytes(extra_out_sized: int, extra_vectors: int):
    def model(s, dt):
        n, cin, h, w, cout, r, _, _ = s
        ho, wo = out_hw(s)
        out = numel_bytes((n, cout, ho, wo), dt)
        return (numel_bytes((n, cin, h, w), dt) + numel_bytes((cout, cin, r, r), dt) + out
                + extra_out_sized * out + extra_vectors * numel_bytes((cout,), dt))
    return model


def _conv_flops(epilogue_ops: int):
    def model(s, dt):
        n, cin, _, _, cout, r, _, _ = s
        ho, wo = out_hw(s)
        return 2 * n * cout * ho * wo * cin * r * r + epilogue_ops * n * cout * ho * wo
    return model


def _validate(s):
    if s[5] > s[2] + 2 * (s[5] // 2) or s[5] > s[3] + 2 * (s[5] // 2):
        raise ValueError(f"filter {s[5]}x{s[5]} is larger than the padded {s[2]}x{s[3]} input")


def _conv_case(name, fn, inputs, bytes_model, flops_model, description: str) -> Case:
    return Case(
        name=name, family="conv", fn=fn, make_inputs=inputs, default_dtype=torch.float16,
        quick_shapes=list(QUICK), cpu_shapes=list(CPU), grid_shapes=list(GRID), axes=AXES,
        bytes_model=bytes_model, flops_model=flops_model, tolerances=TOLERANCES,
        validate_shape=_validate, description=description, memory_bound=False,
    )


CONV_ADD = _conv_case("conv_add", conv_add, _conv_add_inputs, _conv_bytes(1, 0), _conv_flops(1),
                      "conv2d(x, w) + residual")
CONV_RELU = _conv_case("conv_relu", conv_relu, _conv_relu_inputs, _conv_bytes(0, 1), _conv_flops(2),
                       "relu(conv2d(x, w, bias))")
CONV_BN = _conv_case("conv_bn", conv_bn, _conv_bn_inputs, _conv_bytes(0, 4), _conv_flops(2),
                     "batch_norm(conv2d(x, w), running stats, eval mode)")
