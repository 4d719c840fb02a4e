"""Reduction family: row-wise softmax, its backward, layernorm and a chain of row sums.

All reduce over dim 1 of a (dim0, dim1) tensor, so a fused kernel keeps each row on chip.

softmax and layernorm are differentiable (runner/modes.py).  Their backward byte models count the
fewest bytes a fused backward moves: softmax's reads y and dy and writes dx; layernorm's reads x,
dy and the weight and writes dx, dweight and dbias (each row's mean and rstd are recomputed from
x rather than read, M values each, as the training family's norms count them).
"""
import torch
import torch.nn.functional as F

from fusebench.cases.base import CPU_2D, QUICK_2D, Case, grid_2d, numel_bytes, rand, randn

# Where this family comes in the catalog (fusebench/catalog.py): the specification's order.
CATALOG_ORDER = 2
QUICK = QUICK_2D


def _x(shape, dtype, device, seed):
    return (randn(shape, dtype, device, seed),)


def _io_bytes(n_in: int, n_out: int):
    """n_in full-size tensors read, n_out written."""
    return lambda s, dt: (n_in + n_out) * numel_bytes(s, dt)


def softmax(x):
    return torch.softmax(x, 1)


def double_softmax(x):
    return torch.softmax(torch.softmax(x, 1), 1)


def softmax_backward(dy, y):
    return torch._softmax_backward_data(dy, y, 1, y.dtype)


def softmax_backward_formula(dy, y):
    return y * (dy - (dy * y).sum(1, keepdim=True))


def _softmax_backward_inputs(shape, dtype, device, seed):
    # y must be a real softmax output for the formula to be the gradient.
    y = torch.softmax(randn(shape, torch.float32, device, seed), 1).to(dtype)
    dy = randn(shape, dtype, device, seed + 10_000)
    return dy, y


LAYERNORM_EPS = 1e-5


def layernorm(x, weight, bias):
    # Exactly what nn.LayerNorm([N]) computes; the parameters are made once, outside the timed call.
    return F.layer_norm(x, (x.shape[1],), weight, bias, LAYERNORM_EPS)


def _layernorm_inputs(shape, dtype, device, seed):
    x = randn(shape, dtype, device, seed)
    # Random affine parameters, not 1 and 0, so that a kernel that ignores them fails.
    weight = randn((shape[1],), dtype, device, seed + 1, scale=0.5).add_(1.0)
    bias = randn((shape[1],), dtype, device, seed + 2, scale=0.5)
    return x, weight, bias


def _layernorm_bytes(s, dt):  # read x, weight, bias; write y
    return 2 * numel_bytes(s, dt) + 2 * numel_bytes((s[1],), dt)


def _layernorm_bwd_bytes(s, dt):  # read x, dy, weight; write dx, dweight, dbias
    return 3 * numel_bytes(s, dt) + 3 * numel_bytes((s[1],), dt)


def norm_chain(x):
    y = torch.sum(x, 1, keepdim=True)
    x = x * y
    y = torch.sum(x, 1, keepdim=True)
    x = x * y
    y = torch.sum(x, 1, keepdim=True)
    x = x * y
    return x


def _norm_chain_inputs(shape, dtype, device, seed):
    # Positive values scaled so each row sums to about 1: the chain neither overflows
    # (x * s^7 for a row sum s) nor cancels, so the check measures the kernel, not the conditioning.
    return (rand(shape, dtype, device, seed, 0.0, 2.0 / shape[1]),)


def _rows() -> dict:
    """What every case of the family shares: (dim0, dim1) shapes, reduced over dim 1, memory-bound."""
    return dict(quick_shapes=list(QUICK), cpu_shapes=CPU_2D, grid_shapes=grid_2d(), memory_bound=True)


SOFTMAX = Case(
    name="softmax", family="reduce", fn=softmax, make_inputs=_x,
    bytes_model=_io_bytes(1, 1), flops_model=lambda s, dt: 5 * s[0] * s[1],
    # backward: dy * y, its row sum, dy - sum, * y
    grad_inputs=(0,), backward_bytes_model=_io_bytes(2, 1), backward_flops_model=lambda s, dt: 4 * s[0] * s[1],
    description="torch.softmax(x, 1)", **_rows())
DOUBLE_SOFTMAX = Case(
    name="double_softmax", family="reduce", fn=double_softmax, make_inputs=_x,
    bytes_model=_io_bytes(1, 1), flops_model=lambda s, dt: 10 * s[0] * s[1],
    description="softmax(softmax(x, 1), 1)", **_rows())
SOFTMAX_BACKWARD = Case(
    name="softmax_backward", family="reduce", fn=softmax_backward,
    make_inputs=_softmax_backward_inputs, reference=softmax_backward_formula,
    bytes_model=_io_bytes(2, 1), flops_model=lambda s, dt: 4 * s[0] * s[1],
    description="dx = y * (dy - sum(dy * y, 1))", **_rows())
LAYERNORM = Case(
    name="layernorm", family="reduce", fn=layernorm, make_inputs=_layernorm_inputs,
    bytes_model=_layernorm_bytes, flops_model=lambda s, dt: 8 * s[0] * s[1],
    # backward per element: the statistics again (x - mean, its square, two sums: 4), x-hat,
    # g = dy * w, g * x-hat and two row sums (5), dx (4), dw and db (3)
    grad_inputs=(0, 1, 2), backward_bytes_model=_layernorm_bwd_bytes,
    backward_flops_model=lambda s, dt: 16 * s[0] * s[1],
    description="nn.LayerNorm([N]) with random affine weight and bias", **_rows())
NORM_CHAIN = Case(
    name="norm_chain", family="reduce", fn=norm_chain, make_inputs=_norm_chain_inputs,
    bytes_model=_io_bytes(1, 1), flops_model=lambda s, dt: 6 * s[0] * s[1],
    description="3 x (y = sum(x, 1, keepdim); x = x * y)", **_rows())
