"""Every kernel of one step, from torch.profiler, with where it was launched from.

On a GPU a kernel is a device activity; the CPU event that launched it (the profiler links the two
by correlation id) and that event's ancestors say whether it ran inside a compiled graph
(`## Call CompiledFxGraph <key> ##`, under `CompiledFunction` or `CompiledFunctionBackward`), which
ATen operator launched it, and what ran it outside the graphs (gradient accumulation, the loss's
backward, a copy).  On a CPU there are no device activities: a kernel is one of Inductor's generated
C++ kernels (recorded under `graph_<n>_<kernel>` when `config.cpp.enable_kernel_profile` is on), an
ATen operator called by a compiled graph, or a top-level ATen operator; times are host times.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from fusebench.fusion.graph import VIEWS

GRAPH_CALL = "## Call CompiledFxGraph"


@dataclass
class ProfiledKernel:
    name: str
    time_us: float
    start_us: float
    end_us: float
    graph_key: str | None = None  # the compiled graph call it ran in
    graph_kind: str | None = None  # forward | backward | inference, when inside a graph
    op: str | None = None  # nearest ATen operator above it
    op_seq: int | None = None  # which top-level call of that graph launched it (for extern kernels)
    ancestors: list[str] = field(default_factory=list)
    is_copy: bool = False  # a memcpy or memset
    step: str | None = None  # the profiled step it ran in (STEP_RANGE n)


def _ancestors(event) -> list:
    out, p = [], event.cpu_parent
    while p is not None:
        out.append(p)
        p = p.cpu_parent
    return out


def _graph_of(chain: list) -> tuple[str | None, str | None, object | None]:
    """(graph call key, kind, the graph-call event) from an ancestor chain, innermost first."""
    for i, e in enumerate(chain):
        if e.name.startswith(GRAPH_CALL):
            # The cache key in the name is "None" when the FX graph cache was bypassed: the
            # event's own id tells two calls apart.
            key = f"{e.name[len(GRAPH_CALL):].strip(' #')}@{e.id}"
            outer = [a.name for a in chain[i + 1:]]
            kind = "backward" if any("CompiledFunctionBackward" in n for n in outer) else (
                "forward" if any(n == "CompiledFunction" for n in outer) else "inference")
            return key, kind, e
    return None, None, None


def _outer_op(chain: list) -> str | None:
    """The outermost ATen operator above an event: what the caller (or a compiled graph) called."""
    ops = [e.name for e in chain if e.name.startswith("aten::")]
    return ops[-1] if ops else None


STEP_RANGE = "fusebench audit step "  # the record_function around each profiled step


def _steps(cpu_events) -> list[tuple[float, float, str]]:
    return sorted((float(e.time_range.start), float(e.time_range.end), e.name) for e in cpu_events
                  if e.name.startswith(STEP_RANGE))


def _step_at(steps: list[tuple[float, float, str]], t: float) -> str | None:
    """The profiler step whose CPU range holds time `t` (each step synchronises inside its range,
    so its device work also lies within it)."""
    return next((name for start, end, name in steps if start <= t <= end), None)


def _direct_child_index(graph_event, chain: list) -> int | None:
    """Index, among the graph call's direct children, of the child on this chain."""
    if graph_event is None:
        return None
    for i, e in enumerate(chain):
        if e is graph_event and i > 0:
            child = chain[i - 1]
            kids = list(getattr(graph_event, "cpu_children", []))
            return kids.index(child) if child in kids else None
    return None


def gpu_kernels(prof) -> list[ProfiledKernel]:
    """The device activities of a profiled GPU step, in start order, with their CPU context.

    The profiler attaches each device kernel to the CPU event that launched it (`event.kernels`);
    on one stream the n-th kernel of a name on the device is the n-th launch of that name on the
    host, which gives each device activity its launcher, and through it its ancestors.  Device
    events that mirror a CPU range (user annotations such as `ProfilerStep*`) are not kernels."""
    from collections import defaultdict

    from torch.autograd import DeviceType

    events = list(prof.events())
    cpu = sorted((e for e in events if e.device_type == DeviceType.CPU), key=lambda e: e.time_range.start)
    steps = _steps(cpu)
    device = sorted((e for e in events if e.device_type == DeviceType.CUDA and not getattr(e, "is_user_annotation", False)
                     and not e.name.startswith(("ProfilerStep", GRAPH_CALL, STEP_RANGE))), key=lambda e: e.time_range.start)
    launchers: dict[str, list] = defaultdict(list)
    for e in cpu:
        for k in getattr(e, "kernels", None) or ():
            launchers[k.name].append(e)
    by_id = {e.id: e for e in cpu}
    used: dict[str, int] = defaultdict(int)
    out = []
    for e in device:
        queue = launchers.get(e.name) or []
        launcher = queue[used[e.name]] if used[e.name] < len(queue) else None
        used[e.name] += 1
        if launcher is None:  # a profiler that links device events by correlation id only
            launcher = by_id.get(getattr(e, "linked_correlation_id", 0) or -1)
        chain = ([launcher] + _ancestors(launcher)) if launcher is not None else []
        key, kind, graph_event = _graph_of(chain)
        out.append(ProfiledKernel(
            name=e.name, time_us=float(e.time_range.elapsed_us()), start_us=float(e.time_range.start),
            end_us=float(e.time_range.end), graph_key=key, graph_kind=kind, op=_outer_op(chain),
            op_seq=_direct_child_index(graph_event, chain), ancestors=[a.name for a in chain],
            is_copy=e.name.startswith(("Memcpy", "Memset")), step=_step_at(steps, float(e.time_range.start))))
    return out


def cpu_kernels(prof) -> list[ProfiledKernel]:
    """The "kernels" of a profiled CPU step: generated kernels and the ATen operators a compiled
    graph calls directly, and top-level ATen operators outside any graph; host times."""
    out = []
    events = list(prof.events())
    steps = _steps(events)
    for e in events:
        chain = _ancestors(e)
        key, kind, graph_event = _graph_of(chain)
        name = e.name
        if key is not None:
            direct = chain and chain[0] is graph_event
            if not direct:
                continue
            if name.startswith("graph_") and "_" in name[6:]:
                name = name.split("_", 2)[2]  # graph_<n>_<kernel>
            elif not name.startswith("aten::"):
                continue
        elif not name.startswith("aten::") or any(a.name.startswith("aten::") for a in chain):
            continue  # only top-level ATen operators outside the graphs
        elif name[len("aten::"):] in VIEWS:
            continue  # a view moves no data
        elif any(a.name.startswith(("Torch-Compiled Region", "CompiledFunction")) for a in chain):
            continue  # the compiled region's own bookkeeping (its graph call is counted above)
        out.append(ProfiledKernel(
            name=name, time_us=float(e.cpu_time_total), start_us=float(e.time_range.start),
            end_us=float(e.time_range.end), graph_key=key, graph_kind=kind,
            op=e.name if e.name.startswith("aten::") else None,
            op_seq=_direct_child_index(graph_event, [e] + chain) if key else None,
            ancestors=[a.name for a in chain], is_copy=e.name in ("aten::copy_", "aten::fill_", "aten::zero_"),
            step=_step_at(steps, float(e.time_range.start))))
    out.sort(key=lambda k: k.start_us)
    return out


PROFILED_STEPS = 3


def _step_of(k: ProfiledKernel) -> str | None:
    return k.step or next((a for a in k.ancestors if a.startswith(STEP_RANGE)), None)


def median_step(kernels: list[ProfiledKernel]) -> tuple[list[ProfiledKernel], float | None]:
    """One step's kernels from several profiled steps, and the step's span (first kernel's start to
    last kernel's end, the median over steps).  Where every step ran the same kernels in the same
    order, each kernel gets its median time (a step preempted on a busy host does not become the
    answer); otherwise the last step is kept as it ran."""
    import statistics

    steps: dict[str, list[ProfiledKernel]] = {}
    for k in kernels:
        steps.setdefault(_step_of(k) or "", []).append(k)
    runs = [sorted(v, key=lambda k: k.start_us) for v in steps.values() if v]
    if not runs:
        return [], None
    span = statistics.median(max(k.end_us for k in r) - min(k.start_us for k in r) for r in runs)
    if len(runs) < 2 or len({tuple(k.name for k in r) for r in runs}) != 1:
        return runs[-1], span
    # The last step's kernels (their graph calls and start times stay those of one step), each with
    # the median of its times over the steps.
    return [dataclasses.replace(group[-1], time_us=statistics.median(k.time_us for k in group))
            for group in zip(*runs)], span


def profile_step(step, device: str, steps: int = PROFILED_STEPS) -> tuple[list[ProfiledKernel], float | None]:
    """Profile `steps` warmed-up steps and return one step's kernels and span (median_step).  The profiler
    records a step first and discards it (its schedule's warm-up), so that its own start-up costs
    stay out of the kernels' times."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    cuda = device.startswith("cuda")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    step()
    if cuda:
        torch.cuda.synchronize(device)
    with profile(activities=activities, schedule=schedule(wait=0, warmup=1, active=steps, repeat=1)) as prof:
        for i in range(steps + 1):
            with record_function(f"{STEP_RANGE}{i}"):
                step()
                if cuda:
                    torch.cuda.synchronize(device)
            prof.step()
    return median_step(gpu_kernels(prof) if cuda else cpu_kernels(prof))


def outside_reason(k: ProfiledKernel) -> str:
    """Why a kernel of a compiled backend's step ran outside its compiled graphs."""
    names = " ".join(k.ancestors)
    if "AccumulateGrad" in names:
        return "gradient accumulation (AccumulateGrad)"
    for a in k.ancestors:
        if a.startswith("autograd::engine::evaluate_function: "):
            return f"autograd outside the graph ({a.split(': ', 1)[1]})"
    if "Torch-Compiled Region" in names or "CompiledFunction" in names:
        return "the compiled region's own bookkeeping"
    return f"outside the compiled graph ({k.op or k.name})"
