"""Watching Inductor compile: each graph's output code, its post-grad FX graph, which graph nodes
each kernel launch computes (Inductor's provenance tracking), and why it refused fusions.

    with InductorCapture() as cap:
        out = torch.compile(fn)(*args)      # or a training step: forward and backward are captured
    for graph in cap.graphs: ...            # CompiledGraph: kind, code, kernels, launches, nodes, refusals

`InductorCapture(detail=False)` only collects the output code, which Inductor also hands over on a
cache hit.  With `detail=True` (the default) Inductor must lower the graphs itself: its FX graph and
AOT-autograd caches are bypassed inside the block, so the compile is a cold one.  Settings are
restored on exit.
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field

from fusebench.fusion.code import KernelInfo, graph_kind, parse_output_code
from fusebench.fusion.graph import Node, summarize

_HANDLE = re.compile(r"#\s*\[Provenance debug handles\]\s*([\w.]+):(\d+)")
_CANDIDATE = re.compile(r"name='(op\d+)'.*?origins=OrderedSet\(\[(.*?)\]\)")
_REFUSAL = re.compile(r"cannot fuse (\w+) with (\w+): (.+)")
FUSION_LOGGER = "torch._inductor.scheduler.__fusion"


@dataclass
class Launch:
    """One launch site of a kernel in a graph's wrapper, with the graph nodes it computes."""

    kernel: str
    nodes: list[str] = field(default_factory=list)


@dataclass
class Refusal:
    """Inductor considered fusing two scheduler nodes and did not: the graph nodes on each side."""

    a: list[str]
    b: list[str]
    reason: str


@dataclass
class CompiledGraph:
    kind: str  # forward | backward | inference | graph
    code: str
    kernels: list[KernelInfo]
    launches: list[Launch] = field(default_factory=list)  # in call order; nodes known with detail=True
    nodes: list[Node] = field(default_factory=list)  # the post-grad graph, with detail=True
    refusals: list[Refusal] = field(default_factory=list)

    def kernel(self, name: str) -> KernelInfo | None:
        """The kernel a launch names (a fallback's launch may spell it torch.ops.aten.x[.overload])."""
        name = name.removeprefix("torch.ops.")
        return next((k for k in self.kernels if k.name == name or k.name.rsplit(".", 1)[0] == name), None)


class _FusionLog(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.lines.append(record.getMessage())
        except Exception:  # a message that cannot be formatted is not worth failing a compile for
            pass


def refusals_from_log(lines: list[str]) -> list[Refusal]:
    """Inductor's "cannot fuse opA with opB: reason" lines, with each side's graph nodes (the
    origins of its scheduler nodes, named in the log's candidate lines).  The last reason given for
    a pair is kept: later rounds see the fusions made before them."""
    origins: dict[str, list[str]] = {}
    reasons: dict[tuple[str, str], str] = {}
    for line in lines:
        for m in _CANDIDATE.finditer(line):
            origins[m.group(1)] = [o.strip() for o in m.group(2).split(",") if o.strip()]
        m = _REFUSAL.search(line)
        if m:
            reasons[(m.group(1), m.group(2))] = m.group(3).strip()

    def nodes_of(fused: str) -> list[str]:
        return [n for op in re.findall(r"op\d+", fused) for n in origins.get(op, [])]

    return [Refusal(nodes_of(a), nodes_of(b), why) for (a, b), why in reasons.items()]


def launches_from_code(code: str, provenance: dict[str, list[str]]) -> list[Launch]:
    """Each launch in `call()` with the nodes Inductor's provenance tracking recorded for its debug
    handle (the `# [Provenance debug handles] name:N` comment before the call)."""
    return [Launch(m.group(1), list(provenance.get(f"{m.group(1)}:{m.group(2)}", []))) for m in _HANDLE.finditer(code)]


class InductorCapture:
    def __init__(self, detail: bool = True):
        self.detail = detail
        self.graphs: list[CompiledGraph] = []
        self._pending_fx: list = []
        self._log = _FusionLog()
        self._undo: list = []

    # -- hooks ------------------------------------------------------------------------------------
    def _on_post_grad(self, graph) -> None:
        self._pending_fx.append(summarize(graph))

    def _on_code(self, code: str) -> None:
        nodes = self._pending_fx.pop(0) if self._pending_fx else []
        launches: list[Launch] = []
        if self.detail:
            launches = launches_from_code(code, _provenance_snapshot())
        refusals = refusals_from_log(self._log.lines)
        self._log.lines = []
        self.graphs.append(CompiledGraph(graph_kind(code), code, parse_output_code(code), launches, nodes, refusals))

    # -- settings ---------------------------------------------------------------------------------
    def _set(self, obj, name: str, value) -> None:
        """Set a setting for the block; one this PyTorch lacks is skipped (what needs it is then
        missing from the capture: provenance or the fusion log)."""
        if not hasattr(obj, name):
            return
        self._undo.append((obj, name, getattr(obj, name)))
        setattr(obj, name, value)

    def __enter__(self) -> "InductorCapture":
        from torch._inductor import config
        from torch._inductor.graph import GraphLowering

        self._set(GraphLowering, "save_output_code", staticmethod(self._on_code))
        if self.detail:
            import torch._functorch.config as functorch_config

            self._set(config, "post_grad_custom_post_pass", _recorder(self._on_post_grad, config.post_grad_custom_post_pass))
            self._set(config, "fx_graph_cache", False)
            self._set(functorch_config, "enable_autograd_cache", False)
            self._set(config.trace, "provenance_tracking_level",
                      max(1, getattr(config.trace, "provenance_tracking_level", 0)))
            logger = logging.getLogger(FUSION_LOGGER)
            self._set(logger, "level", logging.DEBUG)
            self._set(logger, "propagate", False)
            logger.addHandler(self._log)
        return self

    def __exit__(self, *exc) -> None:
        logging.getLogger(FUSION_LOGGER).removeHandler(self._log)
        for obj, name, value in reversed(self._undo):
            setattr(obj, name, value)
        self._undo.clear()


def _recorder(record, chained=None):
    """A post-grad custom pass that records the graph Inductor is about to lower (and runs the
    pass that was configured before, if any).  Its uuid is None: Inductor then skips its FX graph
    cache, which could not replay what is recorded here."""
    from torch._inductor.custom_graph_pass import CustomGraphPass

    class Recorder(CustomGraphPass):
        def __call__(self, graph) -> None:
            if chained is not None:
                chained(graph)
            record(graph)

        def uuid(self):
            return None

        def __deepcopy__(self, memo):  # Inductor copies its config; the recorder is shared
            return self

    return Recorder()


def _provenance_snapshot() -> dict[str, list[str]]:
    """Inductor's map from `kernel:debug handle` to post-grad node names, for the graph just
    generated (Inductor resets it per graph)."""
    try:
        from torch._inductor import debug
    except ImportError:
        return {}
    mapping = getattr(debug, "_inductor_triton_kernel_to_post_grad_node_info", None)
    return {str(k): list(v) for k, v in mapping.items()} if isinstance(mapping, dict) else {}
