"""Turning a request (cases, implementations, shapes, dtype, device) into the list of cells.

Only cells that apply are planned: an implementation is planned for a case only where
`Implementation.applies(case)` (SDPA on attention, the GEMM ceiling on the matmul-epilogue cases,
...).  Without `--impl`, the default implementations are planned: those marked `default` (not the
slow ones such as max-autotune) that can run on this device; the others are listed, with the
reason, by `not_planned()`.  `--impl all` plans every implementation that applies.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Sequence

import torch

from fusebench.cases import DTYPE_NAMES, all_cases, get_case, parse_dtype, parse_shape, shape_str
from fusebench.impls import all_impls, get_impl

# A shape request: "quick", "grid", "4096x4096,128x65536", or a sequence of tuples or strings.
ShapeSpec = str | Sequence[tuple | str]


@dataclass(frozen=True)
class Cell:
    case: str
    impl: str
    shape: tuple
    dtype: str  # requested dtype name (fp32 | fp16 | bf16)
    device: str
    mode: str = "fwd"  # what is timed: fwd | bwd | fwd_bwd (runner/modes.py); one per run

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


def shape_spec_text(spec: ShapeSpec) -> str:
    """A shape request as the CLI writes it: tuples and strings joined as "AxB,CxD"."""
    if isinstance(spec, str):
        return spec
    if isinstance(spec, tuple) and spec and all(isinstance(d, int) for d in spec):
        spec = [spec]  # one shape given as a bare tuple
    parts = []
    for s in spec:
        if isinstance(s, str):
            parts.append(s)
        elif isinstance(s, (tuple, list)) and all(isinstance(d, int) and not isinstance(d, bool) for d in s):
            parts.append(shape_str(tuple(s)))
        else:
            raise ValueError(f"malformed shape {s!r}: expected a tuple of integers or a string like 4096x4096")
    if not parts:
        raise ValueError("no shapes given")
    return ",".join(parts)


def resolve_shapes(case, spec: ShapeSpec, device: str) -> list[tuple]:
    """`quick`, `grid`, a comma-separated list like 4096x4096,128x65536, or a list of tuples."""
    spec = shape_spec_text(spec)
    if spec == "quick":
        return list(case.cpu_shapes if device == "cpu" and case.cpu_shapes else case.quick_shapes)
    if spec == "grid":
        return list(case.grid_shapes)
    return [case.normalize_shape(parse_shape(s)) for s in spec.split(",") if s.strip()]


def default_impls(device: str) -> list:
    """The implementations a run that names none plans on `device`."""
    return [i for i in all_impls() if i.default and (device != "cpu" or i.default_on_cpu)
            and i.available(device) is None]


def _is_peer(impl) -> bool:
    from fusebench.impls.peers import PeerImplementation

    return isinstance(impl, PeerImplementation)


def peer_impls() -> list:
    """The peer libraries' implementations (fusebench.impls.peers), installed or not."""
    return [i for i in all_impls() if _is_peer(i)]


PEERS_BY_NAME = "a peer library, not in the default run: --impl default,peers adds the installed peers"


def not_planned(device: str, cases: list[str] | None = None) -> dict[str, str]:
    """Implementations that apply to the selected cases but a default run on `device` leaves out:
    {name: why}.  Default ones that cannot run here (name one with --impl to plan it anyway: its
    cells then end `unsupported`), and on a GPU the peer libraries, which run when named."""
    case_objs = [get_case(n) for n in cases] if cases else all_cases()
    out = {}
    for i in all_impls():
        if not any(i.applies(c) for c in case_objs):
            continue
        why = i.available(device)
        if i.default and (device != "cpu" or i.default_on_cpu) and why is not None:
            out[i.name] = why
        elif _is_peer(i) and device != "cpu":  # GPU libraries: not a word about them on the CPU
            out[i.name] = why or PEERS_BY_NAME
    return out


def select_impls(names: Sequence[str] | None, device: str) -> list:
    """The implementations a request names: None for the defaults, ["all"] for every one; among
    names, "default" stands for the defaults and "peers" for the peer libraries installed here."""
    if not names:
        return default_impls(device)
    if list(names) == ["all"]:
        return all_impls()
    picked: dict = {}
    for n in names:
        if n == "default":
            group = default_impls(device)
        elif n == "peers":
            group = [i for i in peer_impls() if i.available(device) is None]
        else:
            group = [get_impl(n)]
        for impl in group:
            picked.setdefault(impl.name, impl)
    return list(picked.values())


def plan_cells(cases: list[str] | None, impls: list[str] | None, shapes: ShapeSpec, dtype: str | None,
               device: str, mode: str = "fwd") -> list[Cell]:
    """Validate a request and expand it; raises ValueError / UnknownName with a one-line message.

    An implementation named explicitly that applies to none of the selected cases is bad input.
    In a training mode (bwd, fwd_bwd) only differentiable cases are planned, and only the
    implementations with a backward for them (modes.applies_in)."""
    from fusebench.runner.modes import applies_in, check_mode

    mode = check_mode(mode)
    case_objs = [get_case(n) for n in cases] if cases else all_cases()
    if not cases and device == "cpu":
        case_objs = [c for c in case_objs if c.cpu_default]
    if mode != "fwd":
        if cases:
            fixed = [c.name for c in case_objs if not c.differentiable]
            if fixed:
                raise ValueError(f"{', '.join(fixed)}: no gradients defined, so no {mode} mode (differentiable "
                                 f"cases: {', '.join(c.name for c in all_cases() if c.differentiable)})")
        case_objs = [c for c in case_objs if c.differentiable]
    impl_objs = select_impls(impls, device)
    if impls and list(impls) != ["all"]:
        for impl in impl_objs:
            if not any(applies_in(impl, c, mode) for c in case_objs):
                names = ", ".join(c.name for c in case_objs) if len(case_objs) <= 4 else f"{len(case_objs)} cases"
                what = "" if mode == "fwd" else f" in {mode} mode"
                raise ValueError(f"implementation {impl.name!r} does not apply to {names}{what}")
    dt = parse_dtype(dtype) if dtype else None
    cells = []
    for case in case_objs:
        want = dt or case.default_dtype
        mine = [i for i in impl_objs if applies_in(i, case, mode)]
        for shape in resolve_shapes(case, shapes, device):
            for impl in mine:
                cells.append(Cell(case.name, impl.name, tuple(shape), DTYPE_NAMES[want], device, mode))
    return cells


__all__ = ["Cell", "plan_cells", "cpu_dtype", "resolve_shapes", "default_impls", "not_planned", "peer_impls",
           "select_impls", "shape_spec_text"]
