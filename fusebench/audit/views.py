"""What the terminal (render.py) and the HTML page (fusebench/report/audit.py) show of an audit,
as plain data: the step's time by kernel class, the ranked opportunities, the kernels outside the
compiled graphs, the notes, and two audits matched backend by backend and region by region.

Nothing here prints or draws.  A value that was not measured stays None and is shown as "—" or
"not available"; an estimate keeps its name (`ideal_us`).
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from fusebench.audit.result import KERNEL_CLASSES, AuditResult, KernelRow, RegionRow, StepRow

OTHER = "other"  # a kernel class this fusebench does not know
BETWEEN = "between kernels"  # the profiled step's span not covered by any kernel


# ------------------------------------------------------------------------------------------------
# numbers as text


def _number(v) -> float | None:
    if v is None or isinstance(v, bool):
        return None
    try:
        v = float(v)
    except (TypeError, ValueError):
        return None
    return v if not math.isnan(v) else None


def fmt_us(v) -> str:
    """Microseconds, in the unit that reads best: 812 ns, 41.2 µs, 5.80 ms, 1.23 s."""
    v = _number(v)
    if v is None:
        return "—"
    if math.isinf(v):
        return "∞"
    a = abs(v)
    if a < 1:
        return f"{v * 1e3:.0f} ns"
    if a < 1e3:
        return f"{v:.3g} µs" if a < 100 else f"{v:.0f} µs"
    if a < 1e6:
        return f"{v / 1e3:.3g} ms" if a < 1e5 else f"{v / 1e3:.0f} ms"
    return f"{v / 1e6:.3g} s"


def fmt_s(v) -> str:
    v = _number(v)
    if v is None:
        return "—"
    return f"{v:.3g} s" if abs(v) < 100 else f"{v:,.0f} s"


def fmt_bytes(v) -> str:
    v = _number(v)
    if v is None:
        return "—"
    for unit, size in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if abs(v) >= size:
            return f"{v / size:.3g} {unit}" if abs(v) / size < 1000 else f"{v / size:,.0f} {unit}"
    return f"{v:.0f} B"


def fmt_pct(v, digits: int = 2) -> str:
    v = _number(v)
    if v is None:
        return "—"
    return f"{v:.{digits}g}%" if abs(v) < 10 else f"{v:.0f}%"


def fmt_count(v) -> str:
    v = _number(v)
    if v is None:
        return "—"
    if math.isinf(v):
        return "never"
    return f"{v:,.0f}" if abs(v) >= 10 else f"{v:.2g}"


def fmt_ratio(v) -> str:
    v = _number(v)
    if v is None or v <= 0 or math.isinf(v):
        return "—"
    return f"{v:.2f}×" if v < 10 else f"{v:.1f}×"


# ------------------------------------------------------------------------------------------------
# one audit


def time_label(result: AuditResult) -> str:
    """What a step's time is on this audit's device."""
    return "host time" if str(result.device).startswith("cpu") else "GPU time"


def headline(result: AuditResult, run_id: int | None = None, device_name: str | None = None) -> str:
    sizes = " ".join(f"{k}={v}" for k, v in (result.sizes or {}).items())
    parts = [f"audit of {result.model}", result.mode, result.dtype, sizes, device_name or result.device]
    if run_id is not None:
        parts.append(f"run {run_id}")
    return " · ".join(str(p) for p in parts if p)


def ceilings_line(result: AuditResult) -> str:
    copy = (f"copy {result.copy_gbps:,.0f} GB/s" if _number(result.copy_gbps)
            else "copy ceiling not available (no ideal times)")
    matmul = (f"matmul {result.matmul_tflops:.3g} TFLOP/s ({result.dtype})" if _number(result.matmul_tflops)
              else "matmul ceiling not available")
    return f"model defined by {result.source}; device ceilings: {copy}, {matmul}"


@dataclass
class Breakdown:
    """Where one backend's profiled step goes: kernel time by class, and the rest of its span."""

    backend: str
    by_class: dict[str, float]  # class -> µs per step, in KERNEL_CLASSES order (other last)
    kernel_us: float  # sum of the kernels' time
    span_us: float | None  # the profiled step, first kernel start to last kernel end
    between_us: float | None  # span - kernel time, where positive
    outside_us: float  # kernels outside the compiled graphs
    outside_n: int

    @property
    def total_us(self) -> float:
        return max(self.span_us or 0.0, self.kernel_us)

    def parts(self) -> list[tuple[str, float]]:
        """(class, µs) of the bar, between-kernel time last; zero parts left out."""
        out = [(k, v) for k, v in self.by_class.items() if v > 0]
        if self.between_us:
            out.append((BETWEEN, self.between_us))
        return out

    def pct(self, us: float) -> float | None:
        return 100.0 * us / self.total_us if self.total_us > 0 else None


def kernels_of(result: AuditResult, backend: str) -> list[KernelRow]:
    return [k for k in result.kernels if k.backend == backend]


def breakdown(result: AuditResult, backend: str) -> Breakdown | None:
    """The breakdown of `backend`'s step, None where no kernel of it was profiled."""
    kernels = kernels_of(result, backend)
    if not kernels:
        return None
    by_class = {k: 0.0 for k in (*KERNEL_CLASSES, OTHER)}
    for k in kernels:
        by_class[k.klass if k.klass in KERNEL_CLASSES else OTHER] += float(k.time_us or 0.0)
    if not by_class[OTHER]:
        del by_class[OTHER]
    kernel_us = sum(by_class.values())
    step = result.step(backend)
    span = _number(step.profiled_us) if step else None
    between = span - kernel_us if span is not None and span > kernel_us else None
    outside = [k for k in kernels if is_outside(k)]
    return Breakdown(backend, by_class, kernel_us, span, between, sum(float(k.time_us or 0) for k in outside),
                     len(outside))


def is_outside(k: KernelRow) -> bool:
    return k.graph == "outside" or bool(k.outside)


def outside_kernels(result: AuditResult) -> list[KernelRow]:
    """Kernels of compiled backends that run outside the compiled graphs, slowest first."""
    return sorted((k for k in result.kernels if is_outside(k)), key=lambda k: -(k.time_us or 0.0))


def baseline_step(result: AuditResult) -> StepRow | None:
    return result.step(result.backends[0]) if result.backends else None


def speedup(result: AuditResult, step: StepRow) -> float | None:
    """The baseline's step time over this step's (above 1: faster than the baseline)."""
    base = baseline_step(result)
    if base is None or base is step or step.status != "ok" or base.status != "ok":
        return None
    a, b = _number(base.gpu_time_us), _number(step.gpu_time_us)
    return a / b if a and b else None


def step_time_us(result: AuditResult, backend: str) -> float | None:
    step = result.step(backend)
    return _number(step.gpu_time_us) if step else None


def ranked(result: AuditResult, backend: str) -> list[RegionRow]:
    """A backend's regions, largest gap first; a region without an ideal time (no copy ceiling)
    ranks by its measured time, the most its gap could be."""
    rows = [r for r in result.regions if r.backend == backend]

    def key(r: RegionRow) -> float:
        gap = _number(r.gap_us)
        return -(gap if gap is not None else _number(r.time_us) or 0.0)

    return sorted(rows, key=key)


def regions_summary(result: AuditResult, backend: str) -> str | None:
    """"23 memory-bound regions: 0.41 ms measured, gap 0.22 ms (5.1% of the step)"."""
    regions = [r for r in result.regions if r.backend == backend]
    if not regions:
        return None
    measured = sum(float(r.time_us or 0) for r in regions)
    gaps = [float(r.gap_us) for r in regions if _number(r.gap_us) is not None]
    text = f"{len(regions)} memory-bound region{'s' if len(regions) != 1 else ''}: {fmt_us(measured)} measured"
    if gaps:
        total = sum(g for g in gaps if g > 0)
        step = step_time_us(result, backend)
        share = f" ({fmt_pct(100 * total / step)} of the step)" if step else ""
        text += f", gap {fmt_us(total)}{share}"
        if len(gaps) < len(regions):
            text += f"; {len(regions) - len(gaps)} without an ideal time"
    else:
        text += "; no ideal times (no copy ceiling): gaps not available"
    return text


def case_text(region: RegionRow) -> str:
    """The matching fusebench case and what its implementations take at the region's shape."""
    if not region.case:
        return ""
    where = " ".join(str(p) for p in (region.case, region.case_shape, region.case_mode) if p)
    times = []
    for impl, value in (region.case_times or {}).items():
        v = _number(value)
        times.append(f"{impl} {fmt_us(v)}" if v is not None else f"{impl}: {value}")
    return where + (": " + ", ".join(times) if times else ": not timed")


def kernel_list(names: list[str], limit: int = 3) -> str:
    """'3: a, b, c' with repeated names counted ('2× a') and the rest elided."""
    counts = Counter(names)
    items = [f"{n}× {name}" if n > 1 else name for name, n in counts.items()]
    shown = ", ".join(items[:limit]) + (f", … {len(items) - limit} more" if len(items) > limit else "")
    return f"{len(names)}: {shown}" if names else "—"


def refusals_text(refusals: list[str], limit: int = 2, width: int = 120) -> str:
    """Inductor's reasons, the first `limit` of them each cut at `width` characters."""
    shown = [r if len(r) <= width else r[:width - 1] + "…" for r in refusals[:limit]]
    more = f"; … {len(refusals) - limit} more" if len(refusals) > limit else ""
    return "; ".join(shown) + more


def notes(result: AuditResult) -> list[str]:
    """What was not available and why, and the backends that did not finish."""
    out = []
    for s in result.steps:
        if s.status != "ok":
            out.append(f"{s.backend}: {s.status}" + (f": {s.reason}" if s.reason else ""))
        if s.note:
            out.append(f"{s.backend}: {s.note}")
    return out + [str(n) for n in result.notes]


# ------------------------------------------------------------------------------------------------
# two audits


@dataclass
class RegionPair:
    graph: str
    label: str
    ops: list[str]
    occurrence: int  # the n-th region of this graph, label and ops (several alike: one per place)
    a: RegionRow | None
    b: RegionRow | None

    @property
    def change(self) -> float | None:
        """time(A) / time(B) of the region (above 1: faster in B)."""
        if self.a is None or self.b is None:
            return None
        ta, tb = _number(self.a.time_us), _number(self.b.time_us)
        return ta / tb if ta and tb else None


@dataclass
class BackendPair:
    a: str | None
    b: str | None
    regions: list[RegionPair] = field(default_factory=list)

    @property
    def label(self) -> str:
        return self.a if self.a == self.b else f"{self.a or '—'} / {self.b or '—'}"


def pair_backends(a: AuditResult, b: AuditResult) -> list[BackendPair]:
    """Backends of the same name side by side; where each audit has exactly one compiled backend
    left unpaired (two compile modes measured apart), those two; then the rest alone."""
    names_a = list(dict.fromkeys([*a.backends, *(s.backend for s in a.steps)]))
    names_b = list(dict.fromkeys([*b.backends, *(s.backend for s in b.steps)]))
    pairs = [BackendPair(n, n) for n in names_a if n in names_b]
    left_a = [n for n in names_a if n not in names_b]
    left_b = [n for n in names_b if n not in names_a]
    if len(left_a) == 1 and len(left_b) == 1 and "eager" not in (left_a[0], left_b[0]):
        pairs.append(BackendPair(left_a[0], left_b[0]))
        left_a, left_b = [], []
    pairs += [BackendPair(n, None) for n in left_a] + [BackendPair(None, n) for n in left_b]
    for p in pairs:
        p.regions = match_regions(a, p.a, b, p.b)
    return pairs


def _keyed(regions: list[RegionRow]) -> dict[tuple, RegionRow]:
    seen: Counter = Counter()
    out = {}
    for r in sorted(regions, key=lambda r: (r.graph, r.index)):
        key = (r.graph, r.label, tuple(r.ops or ()))
        out[(*key, seen[key])] = r
        seen[key] += 1
    return out


def match_regions(a: AuditResult, backend_a: str | None, b: AuditResult, backend_b: str | None) -> list[RegionPair]:
    """The regions of two backends matched by graph, label and operators (the n-th alike with the
    n-th alike), largest gap of either side first."""
    ka = _keyed([r for r in a.regions if r.backend == backend_a])
    kb = _keyed([r for r in b.regions if r.backend == backend_b])
    pairs = [RegionPair(k[0], k[1], list(k[2]), k[3], ka.get(k), kb.get(k)) for k in dict.fromkeys([*ka, *kb])]

    def worst(p: RegionPair) -> float:
        return -max(_number(r.gap_us) or _number(r.time_us) or 0.0 for r in (p.a, p.b) if r is not None)

    return sorted(pairs, key=worst)


def kernel_counts(result: AuditResult, backend: str | None) -> dict[str, tuple[int, int, float]]:
    """{graph: (distinct kernels, launches, µs per step)} of one backend."""
    out: dict[str, list] = {}
    for k in kernels_of(result, backend) if backend else []:
        row = out.setdefault(k.graph, [0, 0, 0.0])
        row[0] += 1
        row[1] += int(k.launches or 0)
        row[2] += float(k.time_us or 0.0)
    return {g: tuple(v) for g, v in out.items()}


def differences(a: AuditResult, b: AuditResult, info_a: dict | None = None, info_b: dict | None = None) -> list[str]:
    """What differs between two audits besides their times: "torch 2.11.0 → 2.13.0"."""
    out = []
    for name in ("model", "mode", "dtype", "sizes", "device", "source", "copy_gbps", "matmul_tflops"):
        va, vb = getattr(a, name), getattr(b, name)
        if va != vb:
            out.append(f"{name} {va} → {vb}")
    for key in ("device_name", "torch", "triton", "cuda", "git_commit", "hostname"):
        va, vb = (info_a or {}).get(key), (info_b or {}).get(key)
        if va != vb:
            out.append(f"{key} {va} → {vb}")
    return out


def check_comparable(a: AuditResult, b: AuditResult, run_a, run_b) -> None:
    """Audits of two modes do not compare: a backward's kernels are no change of a forward's."""
    if a.mode != b.mode:
        raise ValueError(f"run {run_a} audited {a.mode} and run {run_b} {b.mode}: only audits of one mode compare")
