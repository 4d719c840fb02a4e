"""A plugin case for the tests: sin, cos and an add, which Inductor fuses into one kernel -- or,
where FUSEBENCH_TEST_BREAK is 1 when the file is imported, with a graph break between sin and cos,
which leaves Inductor two graphs and two kernels."""
import os

import torch

import fusebench

BREAK = os.environ.get("FUSEBENCH_TEST_BREAK") == "1"


@fusebench.case(inputs=lambda shape, dtype, device, seed: (fusebench.randn(shape, dtype, device, seed),),
                shapes=[(64, 64)], description="cos(sin(x)) + 1, one fusion unless the graph is broken")
def breakable(x):
    y = x.sin()
    if BREAK:
        torch._dynamo.graph_break()
    return y.cos() + 1
