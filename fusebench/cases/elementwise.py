"""Element-wise family: a chain of point-wise ops that a fuser turns into one pass."""
import torch

from fusebench.cases.base import CPU_2D, QUICK_2D, Case, grid_2d, numel_bytes, randn

# Where this family comes in the catalog (fusebench/catalog.py): the specification's order.
CATALOG_ORDER = 1


def pointwise_chain(x):
    y = torch.cos(x)
    x = x * y
    y = torch.max(x, y)
    x = x + y
    return x


POINTWISE_CHAIN = Case(
    name="pointwise_chain",
    family="elementwise",
    fn=pointwise_chain,
    make_inputs=lambda shape, dtype, device, seed: (randn(shape, dtype, device, seed),),
    quick_shapes=QUICK_2D,
    cpu_shapes=CPU_2D,
    grid_shapes=grid_2d(),
    # one read, one write
    bytes_model=lambda s, dt: 2 * numel_bytes(s, dt),
    # cos, mul, max, add: one FLOP each (special functions count as one)
    flops_model=lambda s, dt: 4 * s[0] * s[1],
    description="y=cos(x); x=x*y; y=max(x,y); x=x+y",
    memory_bound=True,
)
