"""What a model audit finds, as plain data: the step of each backend, every kernel of a step, and
the memory-bound regions of each compiled graph ranked by the time fusion could still save.

Units are in the field names.  `None` means not measured; `notes` (and each row's `note`) say why.
An estimate is named as one: `ideal_us` is the time a region's unavoidable bytes take at the
device's measured copy ceiling, not a measurement.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

# Kernel classes: what bounds a kernel, judged by what it computes.
KERNEL_CLASSES = ("gemm", "conv", "attention", "memory", "copy")


@dataclass
class StepRow:
    """One backend's step: eager, inductor, inductor-max-autotune ..."""

    backend: str
    status: str = "ok"  # ok | error | oom | crashed | unsupported
    reason: str | None = None
    gpu_time_us: float | None = None  # device time of one step (CUDA events; host time on the CPU)
    wall_us: float | None = None  # host time of one step, steps back to back
    profiled_us: float | None = None  # the profiled step's span, first kernel start to last kernel end
    kernel_time_us: float | None = None  # sum of the profiled step's kernel durations
    kernels: int | None = None  # kernel launches in one step
    peak_mem_bytes: int | None = None  # peak allocated during a step, above what was held before it
    compile_cold_s: float | None = None  # first step minus a steady step, empty compiler caches
    compile_warm_s: float | None = None  # the same with the on-disk caches warm
    break_even_steps: float | None = None  # steps after which compiling has paid for itself (cold)
    graphs: int | None = None
    graph_breaks: int | None = None
    recompiles: int | None = None
    note: str | None = None


@dataclass
class KernelRow:
    """One kernel of a step (launches of the same kernel at one place summed)."""

    backend: str
    graph: str  # forward | backward | inference: a compiled graph's; eager; outside (not in any compiled graph)
    name: str
    klass: str  # one of KERNEL_CLASSES
    launches: int
    time_us: float  # per step, all launches
    op: str | None = None  # the ATen operator the profiler saw launch it
    kind: str | None = None  # generated | extern | fallback (compiled graphs); None for eager
    nodes: list[str] = field(default_factory=list)  # graph nodes fused into it (provenance)
    ops: list[str] = field(default_factory=list)  # ATen operators fused into it
    bytes: int | None = None  # per step: the unavoidable bytes of its own inputs and outputs
    bytes_source: str | None = None  # graph (the fused nodes' inputs and outputs) | inductor (its own count)
    gbps: float | None = None
    pct_copy: float | None = None  # gbps / the device's copy ceiling
    flops: int | None = None
    tflops: float | None = None
    pct_matmul: float | None = None  # tflops / the device's matmul ceiling for the dtype
    region: int | None = None  # RegionRow.index in its graph
    outside: str | None = None  # why it runs outside the compiled graphs (e.g. gradient accumulation)


@dataclass
class RegionRow:
    """A memory-bound region of a compiled graph: what lies between two compute kernels."""

    backend: str
    graph: str
    index: int
    label: str  # what it computes, readable ("rmsnorm-like: pow, mean, rsqrt, mul")
    ops: list[str]
    kernels: list[str]  # the kernels that compute it, in launch order (repeated names: one each)
    bytes: int  # unavoidable bytes: its inputs from outside plus what it leaves for outside
    ideal_us: float | None  # ESTIMATE: bytes at the copy ceiling
    time_us: float  # its kernels' time per step (measured)
    gap_us: float | None  # time_us - ideal_us
    pct_step: float | None  # gap_us as a percentage of the step's GPU time
    after: list[str] = field(default_factory=list)  # compute nodes or inputs it reads
    before: list[str] = field(default_factory=list)  # compute nodes or outputs it feeds
    refusals: list[str] = field(default_factory=list)  # Inductor's reasons not to fuse its kernels
    case: str | None = None  # the fusebench case it matches
    case_shape: str | None = None
    case_mode: str | None = None  # fwd | bwd
    case_times: dict = field(default_factory=dict)  # {implementation: us or "why not"} at that shape


@dataclass
class AuditResult:
    model: str
    mode: str  # fwd | fwd_bwd
    dtype: str
    sizes: dict
    device: str
    backends: list[str]  # the baseline first
    source: str = "fusebench"  # who defined the model: fusebench (plain torch), transformers, timm, torchvision, a plugin
    copy_gbps: float | None = None  # the device's measured copy ceiling
    matmul_tflops: float | None = None  # its measured matmul ceiling for the dtype
    steps: list[StepRow] = field(default_factory=list)
    kernels: list[KernelRow] = field(default_factory=list)
    regions: list[RegionRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def step(self, backend: str) -> StepRow | None:
        return next((s for s in self.steps if s.backend == backend), None)

    def opportunities(self, backend: str | None = None) -> list[RegionRow]:
        """Regions ranked by their gap, largest first (of one backend, or all)."""
        rows = [r for r in self.regions if backend is None or r.backend == backend]
        return sorted(rows, key=lambda r: -(r.gap_us or 0.0))

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "AuditResult":
        d = dict(d)
        d["steps"] = [StepRow(**s) for s in d.get("steps", [])]
        d["kernels"] = [KernelRow(**k) for k in d.get("kernels", [])]
        d["regions"] = [RegionRow(**r) for r in d.get("regions", [])]
        return cls(**d)
