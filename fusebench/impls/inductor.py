"""`inductor` and `inductor-max-autotune`: torch.compile of the case's function.

Each cell gets a fresh compile (Dynamo state reset), so a sweep can never run into Dynamo's
recompile limit and silently fall back to eager -- the plan's A100 "boundary at 8192x2048" was
exactly that.  As a second guard the limit is raised and made fatal, and every prepared function
counts the graphs Dynamo compiled: none after warm-up means the call ran eagerly, which fails the
cell; new graphs during timing are recompiles, which are counted and fail the cell too.

The cell's fusion facts (fusion/facts.py: the kernels Inductor's code launches, with the ATen
operators fused into each) come from the output code of this compile itself: the prepared
context collects it (fusion.capture.InductorCapture without detail, which also sees an FX-graph
cache hit) from its first entry -- the first calls, forward and backward -- until the first check,
which stops collecting before timing and metrics compile anything of their own.
"""
import contextlib

from fusebench.impls.base import FellBack, Implementation, Prepared, implementation
from fusebench.util import first_line

# Its place among the implementations (fusebench/catalog.py): the order of a run's cells and of `fusebench list`.
CATALOG_ORDER = 2


def _compiled_graphs() -> int:
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def _graph_breaks() -> int:
    from torch._dynamo.utils import counters

    return int(sum(counters["graph_break"].values()))


class CodeWatch:
    """Collects Inductor's output code from the first entry of `watching()` until `stop()` (or the
    end of that first entry); later entries collect nothing."""

    def __init__(self):
        self._capture = None
        self._stopped = False
        self.graphs: list = []
        self.failed: str | None = None  # why nothing could be collected

    @contextlib.contextmanager
    def watching(self):
        if self._stopped or self._capture is not None:
            yield
            return
        from fusebench.fusion.capture import InductorCapture

        capture = InductorCapture(detail=False)
        try:
            capture.__enter__()
        except Exception as exc:  # an Inductor without the hook: the cell runs, its facts are not available
            self.failed, self._stopped = f"Inductor's output code could not be collected: {first_line(exc)}", True
            yield
            return
        self._capture = capture
        try:
            yield
        finally:
            self.stop()

    def stop(self) -> None:
        if self._capture is not None:
            self._capture.__exit__(None, None, None)
            self.graphs = list(self._capture.graphs)
            self._capture = None
        self._stopped = True

    def facts(self, graphs_compiled: int) -> dict:
        """Store columns of the collected code (fusion.facts), or `na` saying why there are none."""
        from fusebench.fusion.facts import COLUMNS, facts_from_graphs

        self.stop()
        why = self.failed or (None if self.graphs else
                              f"Inductor handed over no output code for the {graphs_compiled} graph(s) Dynamo compiled")
        if why:
            return {"na": {name: why for name in COLUMNS}}
        return facts_from_graphs(self.graphs).columns()


class _Inductor(Implementation):
    mode: str | None = None

    def prepare(self, case, shape, dtype, device):
        import torch._dynamo

        torch._dynamo.reset()
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 1024)
        torch._dynamo.config.fail_on_recompile_limit_hit = True
        compiled = torch.compile(case.fn, mode=self.mode)
        graphs0, breaks0 = _compiled_graphs(), _graph_breaks()
        state = {"after_warmup": None, "facts": None}
        watch = CodeWatch()

        def check() -> dict:
            graphs, breaks = _compiled_graphs() - graphs0, _graph_breaks() - breaks0
            if graphs == 0:
                watch.stop()
                raise FellBack("torch.compile produced no graph: the call ran eagerly")
            if state["after_warmup"] is None:
                state["after_warmup"] = graphs
                # The runner sets no `na` of an Inductor cell before its checks, so this one stands.
                state["facts"] = watch.facts(graphs)
            recompiles = graphs - state["after_warmup"]
            if recompiles:
                raise FellBack(f"{recompiles} recompile(s) during measurement")
            return {"graphs": graphs, "graph_breaks": breaks, "recompiles": recompiles, **state["facts"]}

        return Prepared(fn=compiled, check=check, context=watch.watching, note=f"mode={self.mode or 'default'}")


@implementation
class Inductor(_Inductor):
    name = "inductor"
    description = "torch.compile(fn) with default options"


@implementation
class InductorMaxAutotune(_Inductor):
    name = "inductor-max-autotune"
    description = 'torch.compile(fn, mode="max-autotune-no-cudagraphs")'
    mode = "max-autotune-no-cudagraphs"
    default = False  # minutes of autotuning per run: by name or `--impl all`
