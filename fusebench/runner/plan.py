"""Turning a request (cases, implementations, shapes, dtype, device) into the list of cells."""
from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from fusebench.cases import DTYPE_NAMES, all_cases, get_case, parse_dtype, parse_shape, shape_str
from fusebench.impls import all_impls, get_impl


@dataclass(frozen=True)
class Cell:
    case: str
    impl: str
    shape: tuple
    dtype: str  # requested dtype name (fp32 | fp16 | bf16)
    device: str

    def key(self) -> tuple:
        return (self.case, self.impl, shape_str(self.shape), self.dtype)

    def as_dict(self) -> dict:
        return asdict(self)


def cpu_dtype(dtype: torch.dtype) -> tuple[torch.dtype, str]:
    """The dtype a cell runs in on the CPU, and a note when it differs from what was asked.

    Half-precision GEMMs, convolutions and attention on the CPU are emulated and impractically
    slow (or unsupported) there, so those run in fp32 and the row says so."""
    if dtype in (torch.float16, torch.bfloat16):
        return torch.float32, f"{DTYPE_NAMES[dtype]} ran as fp32 on the CPU"
    return dtype, ""


def resolve_shapes(case, spec: str, device: str) -> list[tuple]:
    """`quick`, `grid`, or a comma-separated list like 4096x4096,128x65536."""
    if spec == "quick":
        return list(case.cpu_shapes if device == "cpu" and case.cpu_shapes else case.quick_shapes)
    if spec == "grid":
        return list(case.grid_shapes)
    return [case.normalize_shape(parse_shape(s)) for s in spec.split(",") if s.strip()]


def plan_cells(cases: list[str] | None, impls: list[str] | None, shapes: str, dtype: str | None,
               device: str) -> list[Cell]:
    """Validate a request and expand it; raises ValueError / UnknownName with a one-line message."""
    case_objs = [get_case(n) for n in cases] if cases else all_cases()
    if impls:
        impl_objs = [get_impl(n) for n in impls]
    else:
        impl_objs = [i for i in all_impls() if device != "cpu" or i.default_on_cpu]
    dt = parse_dtype(dtype) if dtype else None
    cells = []
    for case in case_objs:
        want = dt or case.default_dtype
        for shape in resolve_shapes(case, shapes, device):
            for impl in impl_objs:
                cells.append(Cell(case.name, impl.name, tuple(shape), DTYPE_NAMES[want], device))
    return cells


__all__ = ["Cell", "plan_cells", "cpu_dtype", "resolve_shapes"]
