"""fusebench's own fused Triton kernels, one module per op family.

Importing this package imports every module in it, which registers their kernels in
`registry.KERNELS` (case name -> TritonKernel).
"""
import importlib
import pkgutil

from fusebench.kernels.registry import KERNELS, TritonKernel, triton_kernel  # noqa: F401

_LOAD_ERRORS: dict[str, str] = {}


def load_all() -> dict[str, str]:
    """Import every kernel module; returns {module: error} for those that failed to import."""
    for info in pkgutil.iter_modules(__path__):
        if info.name in ("registry", "device", "plans", "exchange", "rowwise", "tuning", "gemm_utils", "sass") \
                or info.name.startswith("_"):
            continue
        try:
            importlib.import_module(f"{__name__}.{info.name}")
        except Exception as exc:  # a broken kernel module must not take the benchmark down
            _LOAD_ERRORS[info.name] = f"{type(exc).__name__}: {exc}"
    return dict(_LOAD_ERRORS)
