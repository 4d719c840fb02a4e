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

from fusebench.impls.base import Implementation, Prepared, implementation
from fusebench.impls.ceiling import EPILOGUE_CASES


def epilogue_fn(case_name: str, n: int, dtype: torch.dtype, device: str):
    """The case as one addmm call: (a, b[, bias]) -> out."""
    if case_name == "matmul_add":
        return lambda a, b, bias: torch.addmm(bias, a, b)
    if case_name == "matmul_add_relu":
        return lambda a, b, bias: torch._addmm_activation(bias, a, b)
    zero = torch.zeros(n, dtype=dtype, device=device)  # matmul_relu: relu(a @ b + 0)
    return lambda a, b: torch._addmm_activation(zero, a, b)


@implementation
class CublasLtEpilogue(Implementation):
    name = "cublaslt"
    description = "torch.addmm / torch._addmm_activation: cuBLASLt's GEMM with the bias (+ReLU) epilogue fused"

    def available(self, device):
        return None if device.startswith("cuda") else "needs a CUDA GPU (cuBLASLt)"

    def applies(self, case):
        return case.name in EPILOGUE_CASES

    def prepare(self, case, shape, dtype, device):
        tf32 = dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32
        precision = "fp32 via tf32" if tf32 else str(dtype).replace("torch.", "")
        note = f"{precision}, cuBLASLt epilogue" + (" (zero bias)" if case.name == "matmul_relu" else "")
        return Prepared(fn=epilogue_fn(case.name, shape[1], dtype, device), note=note)
