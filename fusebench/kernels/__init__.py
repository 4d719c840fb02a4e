"""fusebench's own fused Triton kernels, one module per op family.

Each kernel module attaches its kernels to their case objects with `@triton_kernel(CASE)`
(registry.py); the catalog's loader (fusebench/catalog.py) imports every module of this package.
A module that attaches nothing (launch helpers, plans, tuning) is simply a helper.
`KERNELS` is a read-only view, case name -> TritonKernel.
"""
from fusebench.kernels.registry import KERNELS, TritonKernel, triton_kernel  # noqa: F401
