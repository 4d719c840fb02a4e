"""Matmul family: GEMM with a fused epilogue, and two GEMMs back to back.

Shapes are (M, N, K): a is (M, K), b is (K, N).  The plan's grid uses a square weight, K = N,
as in a linear layer; a shape written "MxN" is completed that way.  Operands are scaled like
initialised weights so outputs stay O(1) and fp16 never overflows.
"""
import math

import torch

from fusebench.cases.base import Case, numel_bytes, randn

# Where this family comes in the catalog (fusebench/catalog.py): the specification's order.
CATALOG_ORDER = 4
SIZES = [2**i for i in range(7, 15)]  # 128 .. 16384
GRID = [(m, n, n) for m in SIZES for n in SIZES]
QUICK = [(1024, 1024, 1024), (4096, 4096, 4096), (8192, 8192, 8192)]
CPU = [(512, 512, 512), (1024, 1024, 1024)]
# tf32 is PyTorch's default for fp32 convolutions and Triton's for fp32 dots: allow its rounding.
TOLERANCES = {torch.float32: (2e-3, 1e-2), torch.float16: (2e-3, 1e-2), torch.bfloat16: (1e-2, 5e-2)}


def matmul_add(a, b, bias):
    return a @ b + bias


def matmul_relu(a, b):
    return torch.relu(a @ b)


def matmul_add_relu(a, b, bias):
    return torch.relu(a @ b + bias)


def matmul_matmul(a, b, c):
    return (a @ b) @ c


def _ab(shape, dtype, device, seed):
    m, n, k = shape[:3]
    a = randn((m, k), dtype, device, seed)
    b = randn((k, n), dtype, device, seed + 1, scale=1 / math.sqrt(k))
    return a, b


def _ab_bias(shape, dtype, device, seed):
    return (*_ab(shape, dtype, device, seed), randn((shape[1],), dtype, device, seed + 2))


def _abc(shape, dtype, device, seed):
    m, n, k, p = shape
    return (*_ab((m, n, k), dtype, device, seed), randn((n, p), dtype, device, seed + 3, scale=1 / math.sqrt(n)))


def _gemm_bytes(extra_n: int):
    # read a and b once, write c once; extra_n vectors of length N (the bias)
    return lambda s, dt: numel_bytes((s[0], s[2]), dt) + numel_bytes((s[2], s[1]), dt) + numel_bytes(
        (s[0], s[1]), dt) + extra_n * numel_bytes((s[1],), dt)


def _gemm_flops(epilogue_ops: int):
    return lambda s, dt: 2 * s[0] * s[1] * s[2] + epilogue_ops * s[0] * s[1]


def _epilogue_case(name, fn, inputs, extra_n: int, epilogue_ops: int, description: str) -> Case:
    """A GEMM with an epilogue: shown against the GEMM alone (torch-mm), compute-bound."""
    return Case(
        name=name, family="matmul", fn=fn, make_inputs=inputs, default_dtype=torch.float16,
        quick_shapes=list(QUICK), cpu_shapes=list(CPU), grid_shapes=list(GRID), axes=("M", "N", "K"),
        complete_shape=lambda s: (s[0], s[1], s[1]),
        bytes_model=_gemm_bytes(extra_n), flops_model=_gemm_flops(epilogue_ops), tolerances=TOLERANCES,
        description=description, memory_bound=False, ceiling="torch-mm",
    )


MATMUL_ADD = _epilogue_case("matmul_add", matmul_add, _ab_bias, 1, 1, "a @ b + bias")
MATMUL_RELU = _epilogue_case("matmul_relu", matmul_relu, _ab, 0, 1, "relu(a @ b)")
MATMUL_ADD_RELU = _epilogue_case("matmul_add_relu", matmul_add_relu, _ab_bias, 1, 2, "relu(a @ b + bias)")

MATMUL_MATMUL = Case(
    name="matmul_matmul", family="matmul", fn=matmul_matmul, make_inputs=_abc, default_dtype=torch.float16,
    quick_shapes=[(8192, 128, 128, 128), (4096, 1024, 1024, 1024), (8192, 4096, 4096, 4096)],
    cpu_shapes=[(1024, 128, 128, 128), (1024, 512, 512, 512)],
    grid_shapes=[(m, n, n, n) for m in SIZES for n in SIZES],
    axes=("M", "N", "K", "P"),
    # (M, N) -> K = P = N: a (M,N) @ b (N,N) @ c (N,N)
    complete_shape=lambda s: (s[0], s[1], s[1], s[1]) if len(s) == 2 else (*s, s[1]),
    # read a, b, c once; write the (M, P) result; the (M, N) intermediate need not touch memory
    bytes_model=lambda s, dt: numel_bytes((s[0], s[2]), dt) + numel_bytes((s[2], s[1]), dt)
    + numel_bytes((s[1], s[3]), dt) + numel_bytes((s[0], s[3]), dt),
    flops_model=lambda s, dt: 2 * s[0] * s[1] * s[2] + 2 * s[0] * s[1] * s[3],
    tolerances=TOLERANCES,
    description="(a @ b) @ c, back-to-back GEMM", memory_bound=False,
)
