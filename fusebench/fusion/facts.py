"""A cell's fusion facts: the kernels Inductor's code launches, as data that can be stored,
written to a baseline and compared across runs and versions.

A kernel is kept as {"graph", "kind", "launches", "ops", "name"}: the graph it belongs to
(forward | backward | inference | graph), generated (Inductor wrote it) | extern (a library
kernel such as mm) | fallback (an ATen operator run as it is), its call sites per call of the
graph, the ATen operators fused into it in order, and Inductor's name for it.

Names are not compared: Inductor numbers kernels (`_0`, `_1`) in the order it emits them and cuts
long names short, so the same fusion can carry another name in another run.  Two kernels are the
same fusion when their graph, kind and ordered ATen operator list agree (`signature`); two cells
fuse alike when their multisets of signatures (one per launch) agree.  The order of the kernels in
a graph is not part of it: Inductor may emit independent kernels in another order without fusing
anything differently.
"""
from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass, field

# The store's columns for the facts (fusebench/store.py CELL_COLUMNS holds the same entries).
COLUMNS = {"generated_kernels": "INTEGER", "extern_kernels": "INTEGER", "fusion_kernels": "TEXT"}
GENERATED = "generated"
EXTERN_KINDS = ("extern", "fallback")
_INDEX = re.compile(r"_\d+$")


def stable_name(name: str) -> str:
    """A kernel's name without the index Inductor appends (cpp_fused_add_0 -> cpp_fused_add)."""
    return _INDEX.sub("", name) if "." not in name else name


@dataclass
class FusionFacts:
    """The kernels of every graph Inductor compiled for one cell, in launch order per graph."""

    kernels: list[dict] = field(default_factory=list)
    graphs: int = 0  # output-code modules captured

    @property
    def generated(self) -> int:
        return sum(k["launches"] for k in self.kernels if k["kind"] == GENERATED)

    @property
    def extern(self) -> int:
        return sum(k["launches"] for k in self.kernels if k["kind"] in EXTERN_KINDS)

    def columns(self) -> dict:
        return {"generated_kernels": self.generated, "extern_kernels": self.extern,
                "fusion_kernels": json.dumps(self.kernels)}


def facts_from_graphs(graphs) -> FusionFacts:
    """FusionFacts of captured graphs (fusion.capture.CompiledGraph: .kind and .kernels)."""
    kernels = [{"graph": g.kind, "kind": k.kind, "launches": int(k.launches), "ops": list(k.ops), "name": k.name}
               for g in graphs for k in g.kernels]
    return FusionFacts(kernels, len(graphs))


def kernels_of(value) -> list[dict] | None:
    """A stored `fusion_kernels` value (JSON text, a list, or empty) as a list of kernels; None where
    the cell has none recorded.  Raises ValueError on text that is not such a list."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, str):
        if not value.strip():
            return None
        value = json.loads(value)
    if not isinstance(value, list) or not all(isinstance(k, dict) for k in value):
        raise ValueError("fusion_kernels is not a list of kernels")
    out = []
    for k in value:
        try:
            out.append({"graph": str(k.get("graph", "graph")), "kind": str(k["kind"]),
                        "launches": int(k.get("launches", 1)), "ops": [str(o) for o in k.get("ops", [])],
                        "name": str(k.get("name", ""))})
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"fusion_kernels holds a malformed kernel: {k!r}"[:200]) from None
    return out


def signature(kernel: dict) -> tuple[str, str, tuple[str, ...]]:
    """What identifies a kernel across runs: its graph, kind and ordered ATen operators."""
    return kernel.get("graph", "graph"), kernel["kind"], tuple(kernel.get("ops", ()))


def signatures(kernels: list[dict]) -> Counter:
    """The multiset of signatures of a cell's kernels, one per launch."""
    out: Counter = Counter()
    for k in kernels:
        out[signature(k)] += max(int(k.get("launches", 1)), 0)
    return out


def describe(sig: tuple[str, str, tuple[str, ...]], count: int = 1) -> str:
    """One line for a signature: `inference generated x1: aten.amax, aten.sub`."""
    graph, kind, ops = sig
    return f"{graph} {kind} x{count}: {', '.join(ops) if ops else '(no ATen operator named)'}"
