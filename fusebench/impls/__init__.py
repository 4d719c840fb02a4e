"""Implementations: how a case is computed (eager, Inductor, our Triton kernels, vendor kernels)."""
from fusebench.impls.base import (  # noqa: F401
    FellBack, Implementation, Prepared, all_impls, get_impl, implementation,
)
