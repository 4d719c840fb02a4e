"""What a case is, and the lookups of the catalog that holds them.

A *case* is one fusion workload: a plain PyTorch function (the eager reference), a seeded input
factory, an analytic model of the fewest bytes it must move and the FLOPs it must do, shape sets,
and tolerances.  Every implementation (eager, Inductor, our Triton kernels, vendor kernels) computes
the same function on the same inputs, so that they can be compared cell by cell.

A case is the op's one object: what computes it attaches to it (`kernel`, `adapters`), and the
catalog (fusebench/catalog.py) holds the cases that modules declare.  This layer imports torch and
the catalog only, never kernels, implementations or the runner: they import it.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Sequence

import torch

from fusebench import catalog

Shape = tuple[int, ...]
# make_inputs(shape, dtype, device, seed) -> tuple of positional arguments for fn
InputFactory = Callable[[Shape, torch.dtype, str, int], tuple]
# bytes_model / flops_model(shape, dtype) -> int
Model = Callable[[Shape, torch.dtype], int]

DTYPES: dict[str, torch.dtype] = {
    "fp32": torch.float32,
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}

# (atol, rtol) per dtype.  An output element passes when
#   |out - ref| <= atol * max|ref| + rtol * |ref|
# i.e. allclose with the absolute term scaled to the output's magnitude, so that one tolerance
# serves softmax probabilities (~1e-5) and norm-chain values alike.  The reference is float64.
DEFAULT_TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float32: (1e-5, 1e-4),
    torch.float16: (2e-3, 1e-2),
    torch.bfloat16: (1e-2, 5e-2),
}


# A case whose memory_bound is not given is read as memory-bound when it does fewer FLOPs per
# minimum byte than this at its first shape: a GPU does tens of FLOPs in the time it moves a byte
# from DRAM, element-wise and reduction work a few at most.
MEMORY_BOUND_INTENSITY = 10.0

# Shape axes that are on/off switches rather than sizes.
FLAG_AXES = {"causal", "channels_last"}


class UnknownName(ValueError):
    """A case or implementation name that is not registered."""


def suggest(name: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, list(choices), n=3, cutoff=0.5)
    return f" (did you mean {', '.join(close)}?)" if close else ""


def parse_dtype(name: str) -> torch.dtype:
    key = name.lower().replace("float", "fp").replace("bfloat16", "bf16")
    key = {"fp": "fp32", "half": "fp16", "bfp16": "bf16"}.get(key, key)
    if key not in DTYPES:
        raise ValueError(f"unknown dtype {name!r}; choose one of {', '.join(DTYPES)}")
    return DTYPES[key]


def shape_str(shape: Shape) -> str:
    return "x".join(str(d) for d in shape)


def parse_shape(text: str, ndim: int | None = None) -> Shape:
    """'4096x4096' -> (4096, 4096); rejects anything that is not positive integers joined by x."""
    parts = text.strip().lower().split("x")
    try:
        dims = tuple(int(p) for p in parts)
    except ValueError:
        raise ValueError(f"malformed shape {text!r}: expected integers joined by 'x', e.g. 4096x4096") from None
    if any(d < 0 for d in dims) or not dims:
        raise ValueError(f"malformed shape {text!r}: dimensions must be non-negative integers")
    if ndim is not None and len(dims) != ndim:
        raise ValueError(f"malformed shape {text!r}: this case takes {ndim} dimensions")
    return dims


def numel_bytes(shape: Sequence[int], dtype: torch.dtype) -> int:
    n = 1
    for d in shape:
        n *= d
    return n * torch.empty((), dtype=dtype).element_size()


@dataclass
class Case:
    """One fusion workload.  See module docstring."""

    # A Case bound at module level in a walked package is a case of the catalog (fusebench/catalog.py).
    __catalog_table__: ClassVar[str] = "cases"

    name: str
    family: str
    fn: Callable[..., Any]
    make_inputs: InputFactory
    default_dtype: torch.dtype = torch.float32
    quick_shapes: list[Shape] = field(default_factory=list)
    # The quick set on the CPU, where the GPU's quick shapes can take minutes; default: quick_shapes.
    cpu_shapes: list[Shape] = field(default_factory=list)
    grid_shapes: list[Shape] = field(default_factory=list)
    axes: tuple[str, ...] = ("dim0", "dim1")
    bytes_model: Model | None = None
    flops_model: Model | None = None
    tolerances: dict[torch.dtype, tuple[float, float]] = field(default_factory=dict)
    dtypes: tuple[torch.dtype, ...] = (torch.float32, torch.float16, torch.bfloat16)
    # float64 reference; default: fn itself on the inputs upcast to float64.
    reference: Callable[..., Any] | None = None
    # (args, outputs) -> (args', outputs'): a part of the problem on which the reference is checked
    # when checking all of it would cost too much (e.g. a few of attention's (batch, head) slices).
    reference_subset: Callable[[tuple, Any], tuple[tuple, Any]] | None = None
    # How a shape's dimensions are checked beyond their count (e.g. causal must be 0 or 1).
    validate_shape: Callable[[Shape], None] | None = None
    # Completes a short shape written by a user, e.g. matmul "MxN" -> (M, N, K=N).
    complete_shape: Callable[[Shape], Shape] | None = None
    description: str = ""
    plugin: str | None = None  # path of the user file that registered it
    # Positions of the inputs that need gradients in the bwd and fwd_bwd modes (runner/modes.py);
    # empty: the case is measured forward only.
    grad_inputs: tuple[int, ...] = ()
    # Fewest bytes and FLOPs of the backward alone (the gradients of grad_inputs from the outputs'
    # gradients and what the forward saved); fwd_bwd counts the forward's and the backward's.
    backward_bytes_model: Model | None = None
    backward_flops_model: Model | None = None
    # (atol, rtol) of the gradients per dtype; default: the outputs' tolerance.
    grad_tolerances: dict[torch.dtype, tuple[float, float]] = field(default_factory=dict)
    # Planned by a CPU run that names no cases?  (Cases whose CPU cells cost more than the default
    # run's few minutes allow run on the CPU only by name.)
    cpu_default: bool = True
    # Bound by the bytes it must move rather than by its FLOPs: a fused kernel of it should run at
    # the copy rate.  None: judged from the byte and FLOP models (a user's case).
    memory_bound: bool | None = None
    # The ceiling implementation its implementations are shown against (fusebench/impls/ceiling.py),
    # e.g. "torch-mm"; None: "memcpy" when the case is memory-bound, else none.
    ceiling: str | None = None
    # Attached by the layers above, never set here.  kernel: fusebench's Triton kernel for it (a
    # kernels.registry.TritonKernel, with its autograd wrapper), by @triton_kernel(case).
    # adapters: what other implementations run for it, by implementation name (a peer library's
    # call, cuBLASLt's epilogue, SDPA), each of the form its implementation defines (impls/).
    kernel: Any = field(default=None, compare=False, repr=False)
    adapters: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self):
        if self.memory_bound is None:
            self.memory_bound = judged_memory_bound(self)
        if self.ceiling is None and self.memory_bound:
            self.ceiling = "memcpy"

    @property
    def differentiable(self) -> bool:
        return bool(self.grad_inputs)

    def grad_tolerance(self, dtype: torch.dtype) -> tuple[float, float]:
        return self.grad_tolerances.get(dtype, self.tolerance(dtype))

    def tolerance(self, dtype: torch.dtype) -> tuple[float, float]:
        return self.tolerances.get(dtype, DEFAULT_TOLERANCES.get(dtype, (1e-5, 1e-4)))

    def normalize_shape(self, shape: Shape) -> Shape:
        """Complete and validate a shape; raises ValueError with a one-line message."""
        if self.complete_shape is not None and len(shape) < len(self.axes):
            shape = self.complete_shape(shape)
        self.check_shape(shape)
        return shape

    def check_shape(self, shape: Shape) -> None:
        if len(shape) != len(self.axes):
            raise ValueError(
                f"malformed shape {shape_str(shape)!r} for {self.name}: expected {len(self.axes)} "
                f"dimensions ({'x'.join(self.axes)})"
            )
        for axis, d in zip(self.axes, shape):
            if axis in FLAG_AXES and d not in (0, 1):
                raise ValueError(f"malformed shape {shape_str(shape)!r} for {self.name}: {axis} must be 0 or 1")
            if axis not in FLAG_AXES and d <= 0:
                raise ValueError(f"malformed shape {shape_str(shape)!r} for {self.name}: {axis} must be positive")
        if self.validate_shape is not None:
            self.validate_shape(shape)

    def min_bytes(self, shape: Shape, dtype: torch.dtype) -> int | None:
        return None if self.bytes_model is None else int(self.bytes_model(shape, dtype))

    def flops(self, shape: Shape, dtype: torch.dtype) -> int | None:
        return None if self.flops_model is None else int(self.flops_model(shape, dtype))

    def run_reference(self, args: tuple) -> Any:
        """The float64 reference outputs for these inputs (floating tensors are upcast)."""
        up = tuple(a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args)
        with torch.no_grad():
            return (self.reference or self.fn)(*up)


def judged_memory_bound(case: Case) -> bool:
    """Memory-bound by its models: a byte model, and fewer FLOPs per minimum byte than
    MEMORY_BOUND_INTENSITY at its first shape (or no FLOP model).  A model that fails: not judged so."""
    if case.bytes_model is None:
        return False
    shape = (case.quick_shapes or case.grid_shapes or [None])[0]
    if shape is None or case.flops_model is None:
        return True
    try:
        nbytes = case.min_bytes(shape, case.default_dtype) or 0
        return nbytes > 0 and case.flops(shape, case.default_dtype) / nbytes < MEMORY_BOUND_INTENSITY
    except Exception:  # the user's model raised at its own first shape: its cells will say so
        return False


# The catalog's table of cases; kept under this name for callers that remove a case they added.
_REGISTRY: dict[str, Case] = catalog.CATALOG.cases


def register(case: Case, *, replace: bool = False) -> Case:
    """Add a case to the catalog; a user case may replace one of its own name (a reloaded plugin)."""
    catalog.load().add("cases", case.name, case, replace=replace)
    return case


def get_case(name: str) -> Case:
    cases = catalog.load().cases
    if name not in cases:
        raise UnknownName(f"unknown case {name!r}{suggest(name, list(cases))}{catalog.CATALOG.failures()}")
    return cases[name]


def all_cases() -> list[Case]:
    return list(catalog.load().cases.values())


def memory_bound_names() -> list[str]:
    """The memory-bound cases, in catalog order."""
    return [c.name for c in all_cases() if c.memory_bound]


def case(
    name: str | None = None,
    *,
    inputs: InputFactory,
    shapes: Sequence[Shape] = (),
    grid: Sequence[Shape] | None = None,
    axes: Sequence[str] | None = None,
    family: str = "user",
    dtype: torch.dtype | str = torch.float32,
    bytes_model: Model | None = None,
    flops_model: Model | None = None,
    tolerances: dict | None = None,
    reference: Callable | None = None,
    description: str = "",
    memory_bound: bool | None = None,
) -> Callable[[Callable], Callable]:
    """Decorator to register a user's own case::

        @fusebench.case(inputs=lambda shape, dtype, device, seed: (randn(shape, dtype, device, seed),),
                        shapes=[(1024, 1024)])
        def gelu_tanh(x):
            return torch.nn.functional.gelu(x, approximate="tanh")

    memory_bound: whether its bytes rather than its FLOPs bound it (shown against the same-size copy);
    None: judged from bytes_model and flops_model.
    """

    def wrap(fn: Callable) -> Callable:
        existing = catalog.load().cases.get(name or fn.__name__)
        if existing is not None and existing.plugin is None:  # built-in cases have no plugin
            raise ValueError(f"{existing.name!r} is a built-in case; give yours another name")
        dt = parse_dtype(dtype) if isinstance(dtype, str) else dtype
        quick = [tuple(s) for s in shapes]
        if not quick:
            raise ValueError(f"case {name or fn.__name__!r} needs at least one shape")
        register(
            Case(
                name=name or fn.__name__,
                family=family,
                fn=fn,
                make_inputs=inputs,
                default_dtype=dt,
                quick_shapes=quick,
                grid_shapes=[tuple(s) for s in (grid or quick)],
                axes=tuple(axes) if axes else tuple(f"dim{i}" for i in range(len(quick[0]))),
                bytes_model=bytes_model,
                flops_model=flops_model,
                tolerances={parse_dtype(k) if isinstance(k, str) else k: v for k, v in (tolerances or {}).items()},
                reference=reference,
                description=description or (fn.__doc__ or "").strip().split("\n")[0],
                plugin=getattr(fn, "__module__", None),
                memory_bound=memory_bound,
            ),
            replace=True,
        )
        return fn

    return wrap


class PluginError(ValueError):
    """A plugin file that cannot be used: it fails to import, or it is not the file recorded."""


def plugin_record(path: str) -> dict:
    """{"path": absolute path, "sha256": of its content}: how a run records a plugin, so that a
    resume can check that the file given to it is the one measured."""
    import hashlib
    import os

    path = os.path.abspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"plugin file not found: {path}")
    with open(path, "rb") as f:
        return {"path": path, "sha256": hashlib.sha256(f.read()).hexdigest()}


def load_plugin(path: str, sha256: str | None = None) -> list[str]:
    """Import a user's Python file; returns the names of the cases it registered.

    With `sha256`, the content read must have that hash (the bytes checked are the bytes run).
    Any failure while importing it is a PluginError naming the file and the line."""
    import hashlib
    import os
    import sys
    import types

    path = os.path.abspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"plugin file not found: {path}")
    with open(path, "rb") as f:
        source = f.read()
    if sha256 is not None and hashlib.sha256(source).hexdigest() != sha256:
        raise PluginError(f"plugin {path} has changed since it was recorded (sha256 "
                          f"{hashlib.sha256(source).hexdigest()[:12]}, recorded {sha256[:12]})")
    cases = catalog.load().cases  # first: built-in cases are not the plugin's
    before = set(cases)
    mod_name = f"fusebench_plugin_{hashlib.sha256(path.encode()).hexdigest()[:16]}"
    module = types.ModuleType(mod_name)
    module.__file__ = path
    sys.modules[mod_name] = module  # dataclasses and pickling look a module up by name
    try:
        exec(compile(source, path, "exec"), module.__dict__)
    except (Exception, SystemExit) as exc:
        sys.modules.pop(mod_name, None)
        tb, line = exc.__traceback__, getattr(exc, "lineno", None) if isinstance(exc, SyntaxError) else None
        while tb is not None:  # the deepest line of the plugin itself
            if tb.tb_frame.f_code.co_filename == path:
                line = tb.tb_lineno
            tb = tb.tb_next
        where = f" (line {line})" if line else ""
        from fusebench.util import first_line

        raise PluginError(f"plugin {path} failed to import{where}: {first_line(exc)}") from None
    catalog.CATALOG.collect(module, replace=True)  # what it declares (a marked implementation ...)
    added = [n for n in cases if n not in before or cases[n].plugin == mod_name]
    for n in added:
        cases[n].plugin = path
    return added


# ----------------------------------------------------------------------------------------------
# Helpers shared by the input factories.


def generator(device: str, seed: int) -> torch.Generator:
    # Drawn on the target device: generating gigabytes on the host would dominate a GPU sweep.
    # The same seed gives the same numbers on one kind of device, not across CPU and GPU.
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return g


def randn(shape: Sequence[int], dtype: torch.dtype, device: str, seed: int, scale: float = 1.0) -> torch.Tensor:
    """Seeded normal samples, drawn in fp32 and rounded to dtype."""
    t = torch.randn(tuple(shape), generator=generator(device, seed), dtype=torch.float32, device=device)
    if scale != 1.0:
        t.mul_(scale)
    return t.to(dtype)


def rand(shape: Sequence[int], dtype: torch.dtype, device: str, seed: int, low=0.0, high=1.0) -> torch.Tensor:
    """Seeded uniform samples in [low, high)."""
    t = torch.rand(tuple(shape), generator=generator(device, seed), dtype=torch.float32, device=device)
    return t.mul_(high - low).add_(low).to(dtype)


# The GPU's quick set for the (dim0, dim1) cases, one shape per regime (fp32, H100/H200 L2 of
# 50 MiB): 1024x1024 (4 MiB per tensor: launch-bound, in L2), 128x65536 (32 MiB: L2-resident,
# long rows that a row-wise kernel must split), 8192x8192 (256 MiB: well above L2, DRAM-bound).
QUICK_2D = [(1024, 1024), (8192, 8192), (128, 65536)]

# The CPU's quick set for the (dim0, dim1) cases: 4 MiB per fp32 tensor (within a core's caches)
# and 16 MiB (beyond them, memory-bound), small enough that every case runs in the default run's
# few minutes on two cores.
CPU_2D = [(1024, 1024), (2048, 2048)]


def grid_2d(sizes: Sequence[int] = tuple(2**i for i in range(7, 17))) -> list[Shape]:
    return [(a, b) for a in sizes for b in sizes]
