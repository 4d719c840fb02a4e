"""Where each stored cell goes on a heatmap: its panel, row and column.

A case's shapes are stored as text ("4096x4096", "MxNxK", ...).  The report lays each family out
on its own axes: 2-D cases dim0 x dim1; matmul M x N (a panel per K unless K = N); attention
batch x seqlen with a panel per (heads, head_dim, causal); conv a row per layer and a column per
memory layout.  The axes come from the case registry when the case is known there, else from the
number of dimensions, so that rows of a user's plugin case still lay out.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import pandas as pd

Dims = dict[str, int]


@dataclass(frozen=True)
class Layout:
    """How one case's shapes map to (panel, row, column) labels, and how those sort."""

    row_title: str
    col_title: str
    # dims -> (label, sort key) for the panel, the row and the column
    panel: Callable[[Dims], tuple[str, tuple]]
    row: Callable[[Dims], tuple[str, tuple]]
    col: Callable[[Dims], tuple[str, tuple]]
    note: str = ""  # how to read the labels, for the page
    axes: tuple[str, ...] = ()  # the axes it was chosen for


def _num(axis: str) -> Callable[[Dims], tuple[str, tuple]]:
    return lambda d: (str(d[axis]), (d[axis],))


def _whole(label: str = "") -> Callable[[Dims], tuple[str, tuple]]:
    return lambda d: (label, ())


def _rest(axes: tuple[str, ...], used: set[str]) -> Callable[[Dims], tuple[str, tuple]]:
    """A panel per combination of the axes not drawn as rows or columns."""
    rest = [a for a in axes if a not in used]
    return lambda d: (", ".join(f"{a}={d[a]}" for a in rest), tuple(d[a] for a in rest))


def _matmul_panel(d: Dims) -> tuple[str, tuple]:
    # The plan's grid ties K (and P) to N, a square weight; only a K that breaks the tie is news.
    extra = [a for a in ("K", "P") if a in d]
    parts = [f"{a} = N" if d[a] == d["N"] else f"{a}={d[a]}" for a in extra]
    return ", ".join(parts), tuple((d[a] != d["N"], d[a]) for a in extra)


def _attention_panel(d: Dims) -> tuple[str, tuple]:
    causal = "causal" if d.get("causal") else "not causal"
    return (f"heads={d['heads']}, head_dim={d['head_dim']}, {causal}",
            (d["head_dim"], d["heads"], d.get("causal", 0)))


def _conv_row(d: Dims) -> tuple[str, tuple]:
    # Sorted as the network runs: big feature maps first, then by channels.
    r, s = d["R"], d["stride"]
    label = f"{d['C_in']}→{d['C_out']}  {d['H']}×{d['W']}  {r}×{r}" + (f" /{s}" if s != 1 else "")
    return label, (-d["H"], d["C_in"], d["C_out"], r, s)


def _conv_col(d: Dims) -> tuple[str, tuple]:
    return ("channels_last" if d["channels_last"] else "NCHW"), (d["channels_last"],)


def layout_for(axes: tuple[str, ...]) -> Layout:
    return replace(_layout_for(axes), axes=axes)


def _layout_for(axes: tuple[str, ...]) -> Layout:
    names = set(axes)
    if {"batch", "heads", "seqlen", "head_dim"} <= names:
        return Layout("batch", "seqlen", _attention_panel, _num("batch"), _num("seqlen"))
    if {"C_in", "C_out", "H", "W", "R", "stride", "channels_last"} <= names:
        panel = (lambda d: (f"batch {d['N']}", (d["N"],))) if "N" in names else _whole()
        return Layout("layer", "layout", panel, _conv_row, _conv_col,
                      note="a row per layer: C_in→C_out, input H×W, R×R filter, /stride where not 1")
    if axes[:2] == ("M", "N"):
        return Layout("M", "N", _matmul_panel, _num("M"), _num("N"))
    if len(axes) == 1:
        return Layout("", axes[0], _whole(), _whole(), _num(axes[0]))
    return Layout(axes[0], axes[1], _rest(axes, {axes[0], axes[1]}), _num(axes[0]), _num(axes[1]))


def case_axes(case_name: str, ndim: int) -> tuple[str, ...]:
    """The registry's axes for a known case with this many dimensions; dim0, dim1, ... otherwise."""
    try:
        from fusebench.cases import get_case

        axes = tuple(get_case(case_name).axes)
        if len(axes) == ndim:
            return axes
    except Exception:  # unknown (plugin) case, or a registry that fails to import: use the rows alone
        pass
    return tuple(f"dim{i}" for i in range(ndim))


# A shape that does not parse as the case's axes (a plugin that changed its mind, say) is laid out
# in one row, a column per shape, rather than dropped.
def _parse(shape: str) -> tuple[int, ...] | None:
    try:
        return tuple(int(p) for p in str(shape).lower().split("x"))
    except ValueError:
        return None


def _labels(case_name: str, shape: str, layouts: dict[str, Layout]) -> list[tuple[str, tuple]]:
    """(label, key) of the panel, row and column of one cell."""
    dims = _parse(shape)
    if dims is not None:
        axes = case_axes(case_name, len(dims))
        layout = layouts.setdefault(case_name, layout_for(axes))
        if layout.axes == axes:  # else this shape has other dims than the one the layout was chosen for
            named = dict(zip(axes, dims))
            return [layout.panel(named), layout.row(named), layout.col(named)]
    return [("", ()), ("", ()), (str(shape), (str(shape),))]


def place(df: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, Layout]]:
    """Add panel/row/col labels and their sort keys to cell rows (of any cases).

    Returns the rows with columns panel, row, col, panel_key, row_key, col_key, and the layout
    chosen per case (for the axis titles).
    """
    layouts: dict[str, Layout] = {}
    parts = [_labels(c, s, layouts) for c, s in zip(df["case_name"], df["shape"])]
    out = df.copy()
    for i, which in enumerate(("panel", "row", "col")):
        out[which] = [p[i][0] for p in parts]
        out[f"{which}_key"] = [p[i][1] for p in parts]
    return out, layouts


def ordered(labels: pd.Series, keys: pd.Series) -> list[str]:
    """Distinct labels sorted by their keys (by text where keys of different kinds meet)."""
    pairs = dict(zip(labels, keys))
    try:
        return sorted(pairs, key=lambda label: (pairs[label], label))
    except TypeError:
        return sorted(pairs, key=lambda label: (str(pairs[label]), label))


def pivot(panel_rows: pd.DataFrame, value: str) -> pd.DataFrame:
    """One panel's rows as a row x col table of `value`, rows and columns in their sorted order."""
    table = panel_rows.pivot(index="row", columns="col", values=value)
    return table.reindex(index=ordered(panel_rows["row"], panel_rows["row_key"]),
                         columns=ordered(panel_rows["col"], panel_rows["col_key"]))
