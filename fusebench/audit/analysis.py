"""From a profiled step and Inductor's captured graphs to kernel rows and ranked regions.

Each profiled kernel of a compiled graph is matched to a launch in that graph's output code: a
generated kernel by its name (the n-th launch of a name to its n-th launch in the code), an extern
or fallback kernel by the ATen operator that launched it (the n-th `aten::mm` call of the graph to
its n-th `extern_kernels.mm`).  A launch knows the graph nodes it computes (provenance), which
gives its region, its unavoidable bytes and its FLOPs.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from fusebench.audit.profile import ProfiledKernel, outside_reason
from fusebench.audit.result import KernelRow, RegionRow
from fusebench.fusion.capture import CompiledGraph, Launch
from fusebench.fusion.graph import ATTENTION, COMPUTE, CONVOLUTION, GraphIndex, regions

GEMM_NAMES = ("gemm", "nvjet", "xmma", "cutlass", "sm90_", "sm80_", "ampere_", "hopper_", "cublas", "mm_")


def kernel_class(ops: list[str], name: str, op: str | None = None, kind: str | None = None) -> str:
    """gemm | conv | attention | memory | copy, from the ATen operators a kernel computes, else
    from its name and the operator that launched it.  A kernel Inductor generated is memory-bound
    unless it is a template (a GEMM or convolution Inductor wrote itself)."""
    if kind == "generated":
        if name.startswith("triton_tem"):
            return "conv" if any("convolution" in o for o in ops) else "gemm"
        return "memory"
    packets = {o.split(".")[-1] if o.startswith("aten.") else o for o in ops}
    packets |= {o.replace("aten.", "") for o in ops}
    if packets & ATTENTION:
        return "attention"
    if packets & CONVOLUTION:
        return "conv"
    if packets & COMPUTE:
        return "gemm"
    text = f"{name} {op or ''}".lower()
    if "attention" in text or "flash" in text or "fmha" in text or "sdpa" in text:
        return "attention"
    if "conv" in text or "implicit_gemm" in text or ("cudnn" in text and "gemm" not in text):
        return "conv"
    if any(k in text for k in ("aten::mm", "aten::addmm", "aten::bmm", "aten::linear", "aten::matmul")):
        return "gemm"
    if not ops and any(k in name.lower() for k in GEMM_NAMES):
        return "gemm"
    if name.startswith(("Memcpy", "Memset")) or (op or "") in ("aten::copy_", "aten::fill_", "aten::zero_"):
        return "copy"
    return "memory"


def _extern_op(kernel: str) -> str | None:
    """The profiler's ATen operator name for an extern or fallback launch of the code."""
    if kernel.startswith("extern_kernels."):
        return "aten::" + kernel.split(".", 1)[1]
    kernel = kernel.removeprefix("torch.ops.")
    if kernel.startswith("aten."):
        return "aten::" + kernel.split(".")[1]
    return None


@dataclass
class _Matched:
    launch: Launch
    index: int  # position among the graph's launches
    kernels: list[ProfiledKernel] = field(default_factory=list)


def _pick_graph(calls: list[ProfiledKernel], kind: str | None, graphs: list[CompiledGraph]) -> CompiledGraph | None:
    names = {k.name for k in calls}
    candidates = [g for g in graphs if kind is None or g.kind == kind or g.kind == "graph"]
    best, score = None, -1
    for g in candidates:
        generated = {k.name for k in g.kernels if k.kind == "generated"}
        s = len(names & generated)
        if s > score:
            best, score = g, s
    return best


def _launches(graph: CompiledGraph) -> list[Launch]:
    if graph.launches:
        return graph.launches
    return [Launch(k.name, []) for k in graph.kernels for _ in range(max(k.launches, 1))]


def match_launches(calls: list[ProfiledKernel], graph: CompiledGraph) -> tuple[list[_Matched], list[ProfiledKernel]]:
    """Each launch of `graph`'s code with the profiled kernels it ran; profiled kernels no launch
    explains are returned apart."""
    matched = [_Matched(l, i) for i, l in enumerate(_launches(graph))]
    by_name: dict[str, list[_Matched]] = defaultdict(list)
    by_op: dict[str, list[_Matched]] = defaultdict(list)
    for m in matched:
        op = _extern_op(m.launch.kernel)
        (by_op[op] if op else by_name[m.launch.kernel]).append(m)
    used = defaultdict(int)
    groups: dict[tuple, list[ProfiledKernel]] = defaultdict(list)
    unexplained = []
    for k in calls:
        if k.name in by_name:
            slot = by_name[k.name]
            i = used[k.name]
            slot[min(i, len(slot) - 1)].kernels.append(k)
            used[k.name] += 1
        elif k.op and k.op in by_op and k.op_seq is not None:
            groups[(k.op, k.op_seq)].append(k)
        else:
            unexplained.append(k)
    order: dict[str, int] = defaultdict(int)
    for (op, _seq), ks in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        slot = by_op[op]
        slot[min(order[op], len(slot) - 1)].kernels.extend(ks)
        order[op] += 1
    return matched, unexplained


class Analysis:
    """Kernel and region rows of one backend's step."""

    def __init__(self, backend: str, step_us: float | None, copy_gbps: float | None, matmul_tflops: float | None):
        self.backend, self.step_us = backend, step_us
        self.copy_gbps, self.matmul_tflops = copy_gbps, matmul_tflops
        self.kernels: list[KernelRow] = []
        self.regions: list[RegionRow] = []
        self.notes: list[str] = []

    # -- rows --------------------------------------------------------------------------------------
    def _row(self, graph: str, name: str, ks: list[ProfiledKernel], **extra) -> KernelRow:
        time_us = sum(k.time_us for k in ks)
        row = KernelRow(backend=self.backend, graph=graph, name=name, klass=extra.pop("klass", None) or "memory",
                        launches=len(ks), time_us=time_us, op=ks[0].op if ks else None, **extra)
        if row.bytes and time_us > 0:
            row.gbps = row.bytes / (time_us * 1e3)
            row.pct_copy = 100.0 * row.gbps / self.copy_gbps if self.copy_gbps else None
        if row.flops and time_us > 0:
            row.tflops = row.flops / (time_us * 1e6)
            row.pct_matmul = 100.0 * row.tflops / self.matmul_tflops if self.matmul_tflops else None
        return row

    def add_uncompiled(self, ks: list[ProfiledKernel], graph: str) -> None:
        """Kernels with no compiled graph behind them: eager's, or a compiled step's outside ones."""
        groups: dict[tuple, list[ProfiledKernel]] = defaultdict(list)
        for k in ks:
            why = outside_reason(k) if graph == "outside" else None
            groups[(k.name, k.op, why)].append(k)
        for (name, op, why), group in groups.items():
            self.kernels.append(self._row(graph, name, group, klass=kernel_class([], name, op), outside=why))

    def add_graph(self, calls: list[ProfiledKernel], graph: CompiledGraph) -> None:
        matched, unexplained = match_launches(calls, graph)
        index = GraphIndex(graph.nodes) if graph.nodes else None
        together = [set(m.launch.nodes) for m in matched if m.launch.nodes and _extern_op(m.launch.kernel) is None]
        found = regions(graph.nodes, together) if graph.nodes else []
        region_of = {n: r.index for r in found for n in r.nodes}
        by_kernel: dict[str, list[_Matched]] = defaultdict(list)
        for m in matched:
            by_kernel[m.launch.kernel].append(m)
        for name, ms in by_kernel.items():
            info = graph.kernel(name)
            nodes = list(dict.fromkeys(n for m in ms for n in m.launch.nodes))
            ops = list(info.ops) if info else []
            if index is not None and nodes:
                ops = list(dict.fromkeys(f"aten.{index.by_name[n].op}" for n in nodes
                                         if n in index.by_name and index.by_name[n].klass in ("memory", "compute")))
            nbytes = flops = None
            source = None
            if index is not None and all(m.launch.nodes for m in ms):
                nbytes = sum(sum(index.unavoidable_bytes(set(m.launch.nodes))) for m in ms)
                source = "graph"
                flops = sum(index.by_name[n].flops or 0 for m in ms for n in m.launch.nodes
                            if n in index.by_name and index.by_name[n].klass == "compute") or None
            elif info is not None and info.num_gb:
                nbytes, source = int(info.num_gb * 1e9) * len(ms), "inductor"
            regs = {region_of.get(n) for n in nodes if n in region_of}
            ks = [k for m in ms for k in m.kernels]
            self.kernels.append(self._row(
                graph.kind, name, ks, klass=kernel_class(ops, name, ks[0].op if ks else None, info.kind if info else None),
                kind=info.kind if info else None, nodes=nodes, ops=ops, bytes=nbytes, bytes_source=source,
                flops=flops, region=regs.pop() if len(regs) == 1 else None))
        if unexplained:
            self.add_uncompiled(unexplained, graph.kind)
            self.notes.append(f"{len(unexplained)} kernel(s) of the {graph.kind} graph matched no launch in its code "
                              f"(listed without nodes)")
        self._regions(graph, found, region_of, matched, index)

    def _regions(self, graph: CompiledGraph, found, region_of: dict[str, int], matched: list[_Matched],
                 index: GraphIndex | None) -> None:
        from fusebench.audit.catalog import match

        per_region: dict[int, list[_Matched]] = defaultdict(list)
        for m in matched:
            if _extern_op(m.launch.kernel) is not None:
                continue
            regs = [region_of[n] for n in m.launch.nodes if n in region_of]
            if regs:
                per_region[max(set(regs), key=regs.count)].append(m)
        for r in found:
            ms = per_region.get(r.index, [])
            if not ms:
                continue
            time_us = sum(k.time_us for m in ms for k in m.kernels)
            ideal = r.bytes / (self.copy_gbps * 1e3) if self.copy_gbps else None
            gap = time_us - ideal if ideal is not None else None
            member = set(r.nodes)
            launch_nodes = [set(m.launch.nodes) for m in ms]
            refusals = []
            for ref in graph.refusals:
                a, b = set(ref.a) & member, set(ref.b) & member
                if a and b and not any(a <= s and b <= s for s in launch_nodes):
                    refusals.append(f"{', '.join(sorted(a))} | {', '.join(sorted(b))}: {ref.reason}")
            found_case = match(r, index, graph.kind) if index is not None else None
            label = ", ".join(r.ops[:8])
            self.regions.append(RegionRow(
                backend=self.backend, graph=graph.kind, index=r.index,
                label=f"{found_case.case}-like: {label}" if found_case else label, ops=r.ops,
                case=found_case.case if found_case else None,
                case_shape="x".join(map(str, found_case.shape)) if found_case else None,
                case_mode=found_case.mode if found_case else None,
                kernels=[m.launch.kernel for m in ms], bytes=r.bytes, ideal_us=ideal, time_us=time_us, gap_us=gap,
                pct_step=100.0 * gap / self.step_us if gap is not None and self.step_us else None,
                after=r.after, before=r.before, refusals=list(dict.fromkeys(refusals))))


def analyse(backend: str, profiled: list[ProfiledKernel], graphs: list[CompiledGraph], step_us: float | None,
            copy_gbps: float | None, matmul_tflops: float | None) -> Analysis:
    """Kernel rows (every kernel of the step) and region rows (every memory-bound region of each
    compiled graph that ran kernels) of one backend."""
    a = Analysis(backend, step_us, copy_gbps, matmul_tflops)
    if backend == "eager":
        a.add_uncompiled(profiled, "eager")
        return a
    calls: dict[str, list[ProfiledKernel]] = defaultdict(list)
    outside = []
    for k in profiled:
        (calls[k.graph_key] if k.graph_key else outside).append(k)
    for key, ks in calls.items():
        graph = _pick_graph(ks, ks[0].graph_kind, graphs)
        if graph is None:
            a.add_uncompiled(ks, ks[0].graph_kind or "graph")
            a.notes.append(f"no captured code for compiled graph {key}: its kernels are listed without nodes")
            continue
        a.add_graph(ks, graph)
    a.add_uncompiled(outside, "outside")
    return a
