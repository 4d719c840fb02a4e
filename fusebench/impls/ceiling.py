"""Ceilings timed in the same run as the implementations: bounds to compare with, not the case.

A case names the ceiling it is shown against (`case.ceiling`, fusebench/cases/base.py).

`torch-mm` (the matmul-epilogue cases): `torch.mm(a, b)` (cuBLAS) on the case's own inputs with
the epilogue left out -- "triton at x% of torch.mm" is torch-mm's time over triton's, same shape,
same device, same run.  TFLOP/s use the case's FLOP count (the epilogue's M*N operations
included), which changes the figure by less than 1/K.

`memcpy` (the memory-bound cases): `dst.copy_(src)`, two buffers of half the case's minimum
bytes each, so that the copy moves exactly the bytes any implementation of the case must move.  It
is the memory-bound ceiling at that size: a copy of 128 MiB per buffer runs at about 0.92 of the
1-2 GiB copy rate that `fusebench ceilings` stores (launch, ramp-up and tail are a larger share of
a shorter transfer).  "triton at x% of memcpy" is memcpy's time over triton's; both were timed in
one run, with the same L2 flush, on the same GPU, so the figure does not move with the machine as
a fraction of a stored ceiling does.  For a case that reads much more than it writes (a
reduction), the copy's even mix of reads and writes is not the case's mix: read the figure as a
bound on bytes moved, not on the read rate.

Neither output is compared with the reference (the cell says so under `na`).  Both are of kind
"ceiling": the summary and the report show every implementation as a percentage of them, never
a speedup of theirs.
"""
import torch

from fusebench.impls.base import Implementation, Prepared, implementation

# Its place among the implementations (fusebench/catalog.py): the order of a run's cells and of `fusebench list`.
CATALOG_ORDER = 5


def ceiling_for(case_name: str) -> str | None:
    """The ceiling a case's implementations are shown against, by the case's name (stored rows
    name their case): its `ceiling` -- torch-mm for the matmul-epilogue cases, memcpy for the
    memory-bound ones, None for the others."""
    try:
        from fusebench.cases import get_case

        return get_case(case_name).ceiling
    except Exception:  # a case not registered in this process (a plugin's stored rows)
        return None


class _Ceiling(Implementation):
    kind = "ceiling"

    def applies(self, case):
        """The cases that name this ceiling as theirs."""
        return case.ceiling == self.name


@implementation
class TorchMM(_Ceiling):
    name = "torch-mm"
    description = "torch.mm(a, b) alone (cuBLAS, no epilogue): the GEMM ceiling, output not checked"

    def prepare(self, case, shape, dtype, device):
        return Prepared(fn=lambda a, b, *rest: torch.mm(a, b), note="torch.mm only: no epilogue",
                        accuracy_available="a ceiling: torch.mm without the case's epilogue, not the case")


@implementation
class MemCopy(_Ceiling):
    name = "memcpy"
    description = "dst.copy_(src) moving the case's minimum bytes: the same-size copy ceiling, output not checked"

    def supports(self, case, shape, dtype, device):
        if case.bytes_model is None:
            return "the case has no byte model: no copy size to match"
        if not case.min_bytes(shape, dtype):
            return "the case moves no bytes at this shape"
        return None

    def prepare(self, case, shape, dtype, device):
        per_buffer = max(1, case.min_bytes(shape, dtype) // 2)
        # Contiguous buffers of one dtype: PyTorch copies them with cudaMemcpyAsync (a plain memcpy
        # on the CPU), as `fusebench ceilings` measures the device's copy rate.
        src = torch.ones(per_buffer, dtype=torch.uint8, device=device)
        dst = torch.empty_like(src)
        return Prepared(fn=lambda *inputs: dst.copy_(src),
                        note=f"copy of {per_buffer:,} bytes per buffer (half the case's minimum bytes)",
                        accuracy_available="a ceiling: a copy of the case's minimum bytes, not the case")
