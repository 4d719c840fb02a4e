"""`torch-mm`: the GEMM ceiling of the matmul-epilogue cases, timed in the same run.

It runs `torch.mm(a, b)` (cuBLAS) on the case's own inputs and leaves the epilogue out, so it is
not an implementation of the case: its output is not checked (the cell says so under `na`) and
its time is a bound to compare with -- "triton at x% of torch.mm" is torch-mm's time over
triton's, same shape, same device, same run.  TFLOP/s use the case's FLOP count (the epilogue's
M*N operations included), which changes the figure by less than 1/K.
"""
import torch

from fusebench.impls.base import Implementation, Prepared, implementation

EPILOGUE_CASES = ("matmul_add", "matmul_relu", "matmul_add_relu")


@implementation
class TorchMM(Implementation):
    name = "torch-mm"
    description = "torch.mm(a, b) alone (cuBLAS, no epilogue): the GEMM ceiling, output not checked"

    def supports(self, case, shape, dtype, device):
        if case.name not in EPILOGUE_CASES:
            return "a GEMM ceiling for the matmul-epilogue cases only"
        return None

    def prepare(self, case, shape, dtype, device):
        return Prepared(fn=lambda a, b, *rest: torch.mm(a, b), note="torch.mm only: no epilogue",
                        accuracy_available="a ceiling: torch.mm without the case's epilogue, not the case")
