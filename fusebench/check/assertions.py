"""`assert_fused`: a test states how many kernels Inductor may make of a function.

    from fusebench import assert_fused

    def test_gelu_bias_is_one_kernel():
        assert_fused(lambda x, b: torch.nn.functional.gelu(x + b), x, b, max_kernels=1)

The function is compiled afresh (a code object Dynamo has not seen, so an earlier compile of it
is not reused) and the kernels its output code launches per call are counted: generated kernels
plus extern kernels and ATen fallbacks, over every graph of the call -- the forward in "fwd", the
forward and the backward in "fwd_bwd", the backward alone in "bwd" (floating-point tensor inputs
then require gradients; the outputs' gradients are ones).  Above `max_kernels` the compile is
repeated with Inductor's fusion log on (a cold compile: its caches are bypassed) and the
AssertionError lists each kernel with the ATen operators fused into it, Dynamo's graph breaks, and
the reasons Inductor's fusion log gives for the fusions it refused.

`min_ceiling` asks for a fraction of the copy ceiling on a GPU: the call's time against a
`dst.copy_(src)` moving the call's minimum bytes (every input and output read or written once;
with a backward, the inputs, the outputs' gradients and the inputs' gradients once more), both
timed by fusebench's timing with the L2 flushed.  On a CPU there is no such ceiling to measure:
the kernel count is still asserted, then the check is reported as not done -- under pytest the
test is skipped with that reason (it neither passes nor fails on what was not measured), outside
pytest CeilingNotMeasured is raised.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from fusebench.util import tensors_in

MODES = ("fwd", "bwd", "fwd_bwd")
MAX_REFUSALS = 12


class CeilingNotMeasured(RuntimeError):
    """min_ceiling was asked for where the copy ceiling cannot be measured (not a GPU)."""


@dataclass
class FusionReport:
    """What Inductor made of one function: its graphs' kernels, as a call in `mode` launches them."""

    mode: str
    graphs: list = field(default_factory=list)  # fusion.capture.CompiledGraph, the mode's
    graph_breaks: list[str] = field(default_factory=list)  # Dynamo's reasons, one per break
    dynamo_graphs: int = 0
    detail: bool = False  # whether the graphs were captured with the fusion log

    @property
    def generated(self) -> int:
        return sum(k.launches for g in self.graphs for k in g.kernels if k.kind == "generated")

    @property
    def extern(self) -> int:
        return sum(k.launches for g in self.graphs for k in g.kernels if k.kind != "generated")

    @property
    def kernels(self) -> int:
        return self.generated + self.extern

    def text(self) -> str:
        """The kernels, the graph breaks, and Inductor's reasons not to fuse, one per line."""
        lines = [f"Inductor's kernels ({self.mode}; {len(self.graphs)} graph(s), "
                 f"{len(self.graph_breaks)} graph break(s)):"]
        for i, g in enumerate(self.graphs, 1):
            lines.append(f"  graph {i} ({g.kind}):")
            if not g.kernels:
                lines.append("    (launches no kernel)")
            width = max((len(k.name) for k in g.kernels), default=0)
            for k in g.kernels:
                ops = ", ".join(k.ops) or "(no ATen operator named)"
                lines.append(f"    {k.name:<{width}}  {k.kind:<9}  x{k.launches}  {ops}")
        if self.graph_breaks:
            lines.append("Dynamo's graph breaks (kernels of different graphs are never fused):")
            lines += [f"  - {first_line(why)}" for why in self.graph_breaks]
        if self.detail:
            refusals = [r for g in self.graphs for r in g.refusals]
            if refusals:
                lines.append("Inductor's reasons not to fuse (its fusion log):")
                for r in refusals[:MAX_REFUSALS]:
                    lines.append(f"  [{', '.join(r.a) or '?'}] with [{', '.join(r.b) or '?'}]: {r.reason}")
                if len(refusals) > MAX_REFUSALS:
                    lines.append(f"  ... and {len(refusals) - MAX_REFUSALS} more")
            else:
                lines.append("Inductor's fusion log names no refused fusion (kernels on either side of an extern "
                             "kernel, a fallback or a graph break are not candidates)")
        return "\n".join(lines)


def first_line(text: str) -> str:
    return next((line.strip() for line in str(text).splitlines() if line.strip()), "")


def _prepare_inputs(inputs: tuple, mode: str, device) -> tuple[tuple, list]:
    """The inputs on `device` (if given), and in a training mode the floating-point tensors as
    fresh leaves that require gradients (returned second)."""
    import torch

    moved = tuple(a.to(device) if device is not None and isinstance(a, torch.Tensor) else a for a in inputs)
    if mode == "fwd":
        return moved, []
    out, leaves = [], []
    for a in moved:
        if isinstance(a, torch.Tensor) and a.is_floating_point():
            a = a.detach().requires_grad_(True)
            leaves.append(a)
        out.append(a)
    if not leaves:
        raise ValueError(f"mode {mode!r} differentiates the floating-point tensor inputs: there are none")
    return tuple(out), leaves


def _step(compiled, args: tuple, leaves: list, mode: str):
    """One call in `mode`: the forward, or the forward and the gradients of its outputs."""
    import torch

    if mode == "fwd":
        with torch.no_grad():
            return compiled(*args)
    out = compiled(*args)
    outs = [t for t in tensors_in(out) if t.requires_grad]
    if not outs:
        raise ValueError("no output depends on the floating-point inputs: nothing to differentiate")
    return torch.autograd.grad(outs, leaves, [torch.ones_like(t) for t in outs], allow_unused=True)


def _keep(graphs: list, mode: str) -> list:
    if mode == "bwd":
        return [g for g in graphs if g.kind == "backward"]
    return list(graphs)


def inspect(fn, *inputs, mode: str = "fwd", device=None, detail: bool = False) -> FusionReport:
    """Compile `fn` afresh with Inductor, call it once in `mode`, and report its kernels."""
    import torch

    from fusebench.fusion.capture import InductorCapture
    from fusebench.metrics.kernels import fresh_function, keep_dynamo_counters

    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; choose one of {', '.join(MODES)}")
    args, leaves = _prepare_inputs(inputs, mode, device)
    from torch._dynamo.utils import counters

    with keep_dynamo_counters():
        breaks0 = dict(counters["graph_break"])
        graphs0 = int(counters["stats"]["unique_graphs"])
        with InductorCapture(detail=detail) as cap:
            _step(torch.compile(fresh_function(fn)), args, leaves, mode)
        breaks = [why for why, n in counters["graph_break"].items() for _ in range(n - breaks0.get(why, 0))]
        dynamo_graphs = int(counters["stats"]["unique_graphs"]) - graphs0
    return FusionReport(mode, _keep(cap.graphs, mode), breaks, dynamo_graphs, detail)


def _name(fn) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__


def assert_fused(fn, *inputs, max_kernels: int = 1, min_ceiling: float | None = None, mode: str = "fwd",
                 device=None) -> FusionReport:
    """Assert that Inductor's code for `fn(*inputs)` launches at most `max_kernels` kernels per call
    in `mode` (and, on a GPU, reaches `min_ceiling` of the copy ceiling); returns the report."""
    if isinstance(max_kernels, bool) or not isinstance(max_kernels, int) or max_kernels < 0:
        raise ValueError(f"max_kernels={max_kernels!r}: a number of kernels, at least 0")
    if min_ceiling is not None and not (isinstance(min_ceiling, (int, float)) and math.isfinite(min_ceiling)
                                        and 0 < min_ceiling <= 1.5):
        raise ValueError(f"min_ceiling={min_ceiling!r}: a fraction of the copy ceiling, such as 0.8")
    report = inspect(fn, *inputs, mode=mode, device=device)
    if not report.graphs:
        why = ("Dynamo compiled no graph: the call ran eagerly" if report.dynamo_graphs == 0 else
               f"Inductor handed over no output code for the {report.dynamo_graphs} graph(s) Dynamo compiled")
        breaks = "".join(f"\n  - {first_line(b)}" for b in report.graph_breaks)
        raise AssertionError(f"assert_fused({_name(fn)}): {why}{breaks}")
    if report.kernels > max_kernels:
        detailed = inspect(fn, *inputs, mode=mode, device=device, detail=True)
        raise AssertionError(
            f"assert_fused({_name(fn)}): {report.kernels} kernels per call ({report.generated} generated + "
            f"{report.extern} extern), expected at most {max_kernels}\n{detailed.text()}")
    if min_ceiling is not None:
        _check_ceiling(fn, inputs, mode, device, min_ceiling, max_kernels, report)
    return report


# ----------------------------------------------------------------------------------------------
# the copy ceiling (GPU)


def _min_bytes(args: tuple, out, leaves: list, mode: str) -> int:
    ins = sum(t.numel() * t.element_size() for t in tensors_in(args))
    outs = sum(t.numel() * t.element_size() for t in tensors_in(out))
    grads = sum(t.numel() * t.element_size() for t in leaves)
    forward = ins + outs
    backward = ins + outs + grads  # inputs again, the outputs' gradients, the inputs' gradients
    return {"fwd": forward, "bwd": backward, "fwd_bwd": forward + backward}[mode]


def _not_measured(message: str):
    try:
        import pytest
    except ImportError:
        raise CeilingNotMeasured(message) from None
    pytest.skip(message)


def _check_ceiling(fn, inputs, mode: str, device, min_ceiling: float, max_kernels: int,
                   report: FusionReport) -> None:
    import torch

    from fusebench.measure.timing import QUICK_BUDGET, TimingSettings, time_call

    args, leaves = _prepare_inputs(inputs, mode, device)
    where = next((t.device for t in tensors_in(args)), torch.device("cpu"))
    if where.type != "cuda":
        _not_measured(f"assert_fused({_name(fn)}): {report.kernels} kernel(s) per call (at most {max_kernels} "
                      f"asked: holds); min_ceiling={min_ceiling:g} not checked: the copy ceiling is measured on a "
                      f"CUDA GPU, and the inputs are on {where.type}")
        return
    compiled = torch.compile(fn)
    if mode == "fwd":
        with torch.no_grad():
            out = compiled(*args)
    else:
        out = compiled(*args)
    nbytes = _min_bytes(args, out, leaves, mode)
    del out
    settings = TimingSettings(**QUICK_BUDGET)
    if mode == "bwd":  # the backward alone, on one forward's graph
        out = compiled(*args)
        outs = [t for t in tensors_in(out) if t.requires_grad]
        grads = [torch.ones_like(t) for t in outs]

        def call():
            return torch.autograd.grad(outs, leaves, grads, retain_graph=True, allow_unused=True)
    else:
        def call():
            return _step(compiled, args, leaves, mode)
    call()
    t_fn = time_call(call, str(where), settings).median_us
    half = max(nbytes // 2, 1)
    src = torch.empty(half, dtype=torch.uint8, device=where)
    dst = torch.empty_like(src)
    t_copy = time_call(lambda: dst.copy_(src), str(where), settings).median_us
    fraction = t_copy / t_fn
    if fraction < min_ceiling:
        raise AssertionError(
            f"assert_fused({_name(fn)}): {fraction:.2f} of the copy ceiling, expected at least {min_ceiling:g}: "
            f"{t_fn:.2f} us per call ({nbytes / t_fn / 1e3:.0f} GB/s of its {nbytes:,} minimum bytes) against "
            f"{t_copy:.2f} us for a copy of those bytes ({nbytes / t_copy / 1e3:.0f} GB/s)\n{report.text()}")
