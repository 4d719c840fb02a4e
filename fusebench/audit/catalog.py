"""Which fusebench case a model's region computes, and what fusebench's kernels and the peers'
take for it at the model's own shape.

A region is recognised by the ATen operators Inductor's post-grad graph spells it with (RMSNorm
as pow, mean, add, rsqrt, mul; SiLU as sigmoid and mul, or neg, exp, add, div, mul on the CPU)
and by the shapes it reads and writes.  The rules are conservative: a region that fits none is
left unmatched rather than guessed.
"""
from __future__ import annotations

from dataclasses import dataclass

from fusebench.fusion.graph import GraphIndex, Region

REDUCTIONS = {"sum", "mean", "amax", "amin", "var_mean", "var", "max", "min", "prod", "logsumexp"}
CASTS = {"_to_copy", "convert_element_type", "clone", "copy", "copy_"}
SIGMOID_PARTS = {"sigmoid", "neg", "exp", "add", "div", "reciprocal", "silu"}


@dataclass
class Match:
    case: str
    shape: tuple
    mode: str  # fwd | bwd


def _rows_cols(shape: tuple | None) -> tuple[int, int] | None:
    if not shape or len(shape) < 2:
        return None
    rows = 1
    for d in shape[:-1]:
        rows *= d
    return rows, shape[-1]


def _numel(shape: tuple) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _itemsize(node) -> int:
    return node.nbytes // _numel(node.shape) if node.shape and _numel(node.shape) else 1


def _big_inputs(region: Region, index: GraphIndex) -> list:
    """The region's inputs from outside, largest first."""
    names = [index.root(i) for m in region.nodes for i in index.by_name[m].inputs]
    nodes = {n: index.by_name[n] for n in names if n in index.by_name and n not in set(region.nodes)}
    return sorted(nodes.values(), key=lambda n: -n.nbytes)


def _outputs(region: Region, index: GraphIndex) -> list:
    member = set(region.nodes)
    return [index.by_name[m] for m in region.nodes
            if index.by_name[m].klass == "memory" and any(u not in member for u in index.consumers(m))]


def match(region: Region, index: GraphIndex, graph_kind: str) -> Match | None:
    """The case `region` computes, at the model's shape, or None."""
    ops = set(region.ops) - CASTS
    inputs = _big_inputs(region, index)
    if not inputs:
        return None
    rc = _rows_cols(inputs[0].shape)
    if rc is None:
        return None
    mode = "bwd" if graph_kind == "backward" else "fwd"
    numel = inputs[0].nbytes // max(_itemsize(inputs[0]), 1)
    same = [n for n in inputs if n.shape and n.nbytes // max(_itemsize(n), 1) == numel]
    if mode == "fwd":
        if {"amax", "exp", "log"} <= ops and ops & {"gather", "nll_loss_forward", "where", "index"}:
            return Match("cross_entropy", rc, mode)
        if {"amax", "exp", "sum", "div"} <= ops and "log" not in ops:
            return Match("softmax", rc, mode)
        if "var_mean" in ops or {"mean", "sub", "rsqrt"} <= ops:
            return Match("layernorm", rc, mode)
        if {"mean", "rsqrt"} <= ops and ops <= {"pow", "mul", "mean", "add", "rsqrt"}:
            adds = [index.by_name[m] for m in region.nodes if index.by_name[m].op == "add"
                    and index.by_name[m].shape and _numel(index.by_name[m].shape) == numel]
            return Match("add_rmsnorm" if adds and len(same) >= 2 else "rmsnorm", rc, mode)
        if not ops & REDUCTIONS and "mul" in ops and ops & {"sigmoid", "silu", "exp"} and ops <= SIGMOID_PARTS | {"mul"}:
            if len(same) >= 2:
                return Match("swiglu", rc, mode)
        if ops & {"erf", "tanh"} and not ops & REDUCTIONS and ops <= {"erf", "tanh", "mul", "add", "pow", "div"}:
            return Match("bias_gelu", rc, mode) if len(inputs) >= 2 else None
        return None
    # The backward's regions: only the shapes whose signature is unmistakable.
    if not ops & REDUCTIONS and ops & {"sigmoid", "exp"} and "mul" in ops and ("sub" in ops or "neg" in ops):
        if len(same) >= 2:
            return Match("swiglu", rc, mode)
    if {"exp", "sub"} <= ops and ops & {"scatter", "where", "index_put", "eq"} and "amax" not in ops:
        return Match("cross_entropy", rc, mode)
    reads_stat = any(n.shape and n.shape[-1] == 1 and len(n.shape) >= 2 for n in inputs)
    writes_vector = any(o.shape and _numel(o.shape) == rc[1] for o in _outputs(region, index))
    if "sum" in ops and "mul" in ops and reads_stat and writes_vector:
        return Match("layernorm" if "sub" in ops else "rmsnorm", rc, mode)
    return None


def time_case(m: Match, dtype: str, device: str, impls: list[str]) -> dict:
    """{implementation: microseconds, or why it has no time} for the case at the match's shape."""
    from fusebench.cases import get_case
    from fusebench.impls import get_impl
    from fusebench.measure.timing import TimingSettings
    from fusebench.runner.cell import measure_cell
    from fusebench.runner.modes import applies_in
    from fusebench.runner.plan import Cell

    case = get_case(m.case)
    out: dict = {}
    for name in impls:
        impl = get_impl(name)
        if not applies_in(impl, case, m.mode):
            continue
        why = impl.available(device)
        if why:
            out[name] = f"not available: {why}"
            continue
        try:
            shape = case.normalize_shape(tuple(m.shape))
        except ValueError as exc:
            out[name] = f"not available: {exc}"
            continue
        row = measure_cell(Cell(m.case, name, shape, dtype, device, m.mode), TimingSettings.for_shapes("quick"))
        if row.get("status") == "ok" and row.get("time_us") is not None:
            out[name] = float(row["time_us"])
        else:
            na = row.get("na") or {}
            why = na.get("time_us") if isinstance(na, dict) else None
            out[name] = f"not available: {row.get('reason') or why or row.get('status')}"
    return out
