"""Horizontal family: two independent consumers of one input, which a fuser serves with one read."""
import torch

from fusebench.cases.base import CPU_2D, QUICK_2D, Case, grid_2d, numel_bytes, randn

# Where this family comes in the catalog (fusebench/catalog.py): the specification's order.
CATALOG_ORDER = 3


def horizontal_reduction_pointwise(a):
    return torch.sum(a, 1), torch.cos(a)


def horizontal_reduction_reduction(a):
    return torch.sum(a, 1), torch.amax(a, 1)


def _a(shape, dtype, device, seed):
    return (randn(shape, dtype, device, seed),)


QUICK = QUICK_2D

HORIZONTAL_REDUCTION_POINTWISE = Case(
    name="horizontal_reduction_pointwise", family="horizontal", fn=horizontal_reduction_pointwise,
    make_inputs=_a, quick_shapes=QUICK, cpu_shapes=CPU_2D, grid_shapes=grid_2d(),
    # read a once; write the row sums and cos(a)
    bytes_model=lambda s, dt: 2 * numel_bytes(s, dt) + numel_bytes((s[0],), dt),
    flops_model=lambda s, dt: 2 * s[0] * s[1],
    description="return sum(a, 1), cos(a)", memory_bound=True,
)
HORIZONTAL_REDUCTION_REDUCTION = Case(
    name="horizontal_reduction_reduction", family="horizontal", fn=horizontal_reduction_reduction,
    make_inputs=_a, quick_shapes=QUICK, cpu_shapes=CPU_2D, grid_shapes=grid_2d(),
    bytes_model=lambda s, dt: numel_bytes(s, dt) + 2 * numel_bytes((s[0],), dt),
    flops_model=lambda s, dt: 2 * s[0] * s[1],
    description="return sum(a, 1), amax(a, 1)", memory_bound=True,
)
