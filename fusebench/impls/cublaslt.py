"""`cublaslt`: the vendor's own fused GEMM epilogue for the matmul-epilogue cases.

`torch.addmm(bias, a, b)` and `torch._addmm_activation(bias, a, b)` (what nn.Linear and Inductor's
decompositions call) run cuBLASLt with its bias and bias+ReLU epilogues applied inside the GEMM,
one kernel per call, when the operands allow it (CUDA, a 1-D bias of length N, contiguous
operands); otherwise PyTorch falls back to a GEMM plus a separate kernel, which the cell's kernel
count shows.  `matmul_relu` has no bias: it passes a zero one (N values, made outside the timed
calls).  This is the row our Triton epilogue competes with besides eager: a fused epilogue from
the vendor rather than cuBLAS plus a second kernel.
"""
import torch

from fusebench.cases.matmul import MATMUL_ADD, MATMUL_ADD_RELU, MATMUL_RELU
from fusebench.impls.base import Implementation, Prepared, implementation

# Its place among the implementations (fusebench/catalog.py): the order of a run's cells and of `fusebench list`.
CATALOG_ORDER = 6


# Adapters: (N, dtype, device) -> (the case as one addmm call (a, b[, bias]) -> out, a note).
def _add(n, dtype, device):
    return (lambda a, b, bias: torch.addmm(bias, a, b)), ""


def _add_relu(n, dtype, device):
    return (lambda a, b, bias: torch._addmm_activation(bias, a, b)), ""


def _relu(n, dtype, device):
    zero = torch.zeros(n, dtype=dtype, device=device)  # relu(a @ b + 0)
    return (lambda a, b: torch._addmm_activation(zero, a, b)), "zero bias"


def epilogue_fn(case_name: str, n: int, dtype: torch.dtype, device: str):
    """The case as one addmm call: (a, b[, bias]) -> out."""
    from fusebench.cases import get_case

    return get_case(case_name).adapters[CublasLtEpilogue.name](n, dtype, device)[0]


@implementation
class CublasLtEpilogue(Implementation):
    name = "cublaslt"
    description = "torch.addmm / torch._addmm_activation: cuBLASLt's GEMM with the bias (+ReLU) epilogue fused"
    adapters = ((MATMUL_ADD, _add), (MATMUL_RELU, _relu), (MATMUL_ADD_RELU, _add_relu))

    def available(self, device):
        return None if device.startswith("cuda") else "needs a CUDA GPU (cuBLASLt)"

    def applies(self, case):
        return self.name in case.adapters

    def prepare(self, case, shape, dtype, device):
        fn, extra = case.adapters[self.name](shape[1], dtype, device)
        tf32 = dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32
        precision = "fp32 via tf32" if tf32 else str(dtype).replace("torch.", "")
        return Prepared(fn=fn, note=f"{precision}, cuBLASLt epilogue" + (f" ({extra})" if extra else ""))
