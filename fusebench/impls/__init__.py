"""Implementations: how a case is computed (eager, Inductor, our Triton kernels, vendor kernels, peer
libraries, a user's own functions)."""
from fusebench.impls.base import (  # noqa: F401
    FellBack, Implementation, Prepared, all_impls, get_impl, implementation,
)
from fusebench.impls.user import ImplementationError, UserImplementation  # noqa: F401,E402
