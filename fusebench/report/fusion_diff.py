"""Where two measurements of a cell differ in their fusion facts: kernels launched per call,
the ATen operators fused into each kernel, graph breaks and recompiles.

The facts are the store's columns `generated_kernels`, `extern_kernels`, `fusion_kernels`,
`graph_breaks` and `recompiles` (fusion/facts.py).  Kernels are matched by graph, kind and ordered
ATen operators, never by name (Inductor numbers kernels and shortens long names).  `diff_facts`
compares two rows (store rows, or a baseline's entries in the same shape); `between` compares every
cell two runs share.  `fusebench check` prints these for its baseline, `fusebench compare` for two
runs (say, two PyTorch versions).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping

from fusebench.fusion.facts import describe, kernels_of, signatures

FACTS = ("generated_kernels", "extern_kernels", "fusion_kernels", "graph_breaks", "recompiles")
KEY = ("case_name", "impl", "dtype", "shape")


@dataclass(frozen=True)
class FactChange:
    what: str  # kernels | ops | graph_breaks | recompiles | facts
    text: str  # one line, or several joined by newlines (the operator lists removed and added)
    worse: bool  # more kernels, other fusions, a graph break or recompile gained, facts lost


@dataclass
class FusionDifference:
    """One cell whose fusion facts differ between A and B."""

    case_name: str
    impl: str
    dtype: str
    shape: str
    changes: list[FactChange] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.case_name} {self.impl} {self.shape} {self.dtype}"


def _num(value) -> int | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def has_facts(row: Mapping) -> bool:
    return any(_num(row.get(c)) is not None for c in ("generated_kernels", "extern_kernels")) or \
        _kernels(row) is not None


def _kernels(row: Mapping) -> list[dict] | None:
    try:
        return kernels_of(row.get("fusion_kernels"))
    except ValueError:
        return None


def diff_facts(a: Mapping, b: Mapping) -> list[FactChange]:
    """How row `b`'s fusion facts differ from row `a`'s (empty: they agree)."""
    out: list[FactChange] = []
    if has_facts(a) and not has_facts(b):
        return [FactChange("facts", "kernels: recorded before, not recorded now", True)]
    if has_facts(b) and not has_facts(a):
        out.append(FactChange("facts", "kernels: not recorded before, recorded now", False))
    ga, ea, gb, eb = (_num(r.get(c)) for r in (a, b) for c in ("generated_kernels", "extern_kernels"))
    if None not in (ga, ea, gb, eb) and (ga, ea) != (gb, eb):
        out.append(FactChange("kernels", f"kernels per call: {ga} generated + {ea} extern -> "
                                         f"{gb} generated + {eb} extern", gb + eb > ga + ea))
    ka, kb = _kernels(a), _kernels(b)
    if ka is not None and kb is not None:
        sa, sb = signatures(ka), signatures(kb)
        if sa != sb:
            lines = ["fused differently (- before, + now; graph, kind, launches: ATen operators):"]
            lines += [f"  - {describe(s, n)}" for s, n in sorted((sa - sb).items())]
            lines += [f"  + {describe(s, n)}" for s, n in sorted((sb - sa).items())]
            out.append(FactChange("ops", "\n".join(lines), True))
    for col, name in (("graph_breaks", "graph breaks"), ("recompiles", "recompiles")):
        va, vb = _num(a.get(col)), _num(b.get(col))
        if va is not None and vb is not None and va != vb:
            out.append(FactChange(col, f"{name}: {va} -> {vb}", vb > va))
    return out


def between(cells_a, cells_b) -> list[FusionDifference]:
    """Every cell both runs measured (DataFrames of store rows) whose fusion facts differ, in
    case, implementation, dtype and shape order."""
    rows_a = {tuple(str(r[k]) for k in KEY): r for r in cells_a.to_dict("records")}
    out = []
    for r in cells_b.to_dict("records"):
        key = tuple(str(r[k]) for k in KEY)
        a = rows_a.get(key)
        if a is None or not (has_facts(a) or has_facts(r)):
            continue
        changes = diff_facts(a, r)
        if changes:
            out.append(FusionDifference(*key, changes=changes))
    return sorted(out, key=lambda d: (d.case_name, d.impl, d.dtype, d.shape))


def lines(diffs: list[FusionDifference], indent: str = "  ") -> list[str]:
    """The differences as terminal lines: the cell, then each change indented."""
    out = []
    for d in diffs:
        out.append(d.label)
        for c in d.changes:
            out += [indent + line for line in c.text.splitlines()]
    return out


def table(diffs: list[FusionDifference]):
    """The differences as a report table (fusebench.report.tables.Table)."""
    from fusebench.report.tables import Table

    t = Table(["case", "implementation", "dtype", "shape", "what differs (A -> B)"])
    for d in diffs:
        t.add(d.case_name, d.impl, d.dtype, d.shape, "; ".join(c.text.replace("\n", " ") for c in d.changes))
    return t


def print_changes(diffs: list[FusionDifference], console) -> None:
    """`fusebench compare`'s lines for the cells whose fusion facts differ (nothing where none do)."""
    from fusebench.util import plain

    if not diffs:
        return
    console.print(f"fusion facts differ at {len(diffs)} cell(s) (A -> B):", highlight=False, markup=False)
    for line in lines(diffs):
        console.print("  " + plain(line), highlight=False, markup=False, soft_wrap=True)
