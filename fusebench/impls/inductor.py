"""`inductor` and `inductor-max-autotune`: torch.compile of the case's function.

Each cell gets a fresh compile (Dynamo state reset), so a sweep can never run into Dynamo's
recompile limit and silently fall back to eager -- the plan's A100 "boundary at 8192x2048" was
exactly that.  As a second guard the limit is raised and made fatal, and every prepared function
counts the graphs Dynamo compiled: none after warm-up means the call ran eagerly, which fails the
cell; new graphs during timing are recompiles, which are counted and fail the cell too.
"""
from fusebench.impls.base import FellBack, Implementation, Prepared, implementation


def _compiled_graphs() -> int:
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def _graph_breaks() -> int:
    from torch._dynamo.utils import counters

    return int(sum(counters["graph_break"].values()))


class _Inductor(Implementation):
    mode: str | None = None

    def prepare(self, case, shape, dtype, device):
        import torch._dynamo

        torch._dynamo.reset()
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 1024)
        torch._dynamo.config.fail_on_recompile_limit_hit = True
        compiled = torch.compile(case.fn, mode=self.mode)
        graphs0, breaks0 = _compiled_graphs(), _graph_breaks()
        state = {"after_warmup": None}

        def check() -> dict:
            graphs, breaks = _compiled_graphs() - graphs0, _graph_breaks() - breaks0
            if graphs == 0:
                raise FellBack("torch.compile produced no graph: the call ran eagerly")
            if state["after_warmup"] is None:
                state["after_warmup"] = graphs
            recompiles = graphs - state["after_warmup"]
            if recompiles:
                raise FellBack(f"{recompiles} recompile(s) during measurement")
            return {"graphs": graphs, "graph_breaks": breaks, "recompiles": recompiles}

        return Prepared(fn=compiled, check=check, note=f"mode={self.mode or 'default'}")


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
