"""The data behind the report: ratios between two sets of cells, summaries, and HTML-ready tables.

Shared by the run report (html.py) and the run comparison (compare.py).  Nothing here draws;
heatmap.py does.
"""
from __future__ import annotations

import base64
import json
import math
from dataclasses import dataclass, field

import matplotlib.colors as mcolors
import numpy as np
import pandas as pd

from fusebench.report import heatmap as hm
from fusebench.report.grid import Layout, ordered, pivot

OK = "ok"
PLACE = ["panel", "row", "col", "panel_key", "row_key", "col_key"]


@dataclass
class Cell:
    """One table cell: text, with an optional inline style, tooltip and link."""

    text: str
    style: str = ""
    title: str = ""
    href: str = ""
    pills: list[str] = field(default_factory=list)  # short tags drawn after the text (status counts)


@dataclass
class Table:
    columns: list[str]
    rows: list[list[Cell]] = field(default_factory=list)
    numeric: set[int] = field(default_factory=set)  # column indexes to right-align

    def add(self, *cells) -> None:
        self.rows.append([c if isinstance(c, Cell) else Cell("" if c is None else str(c)) for c in cells])


# --------------------------------------------------------------------------------------------
# number formatting


def num(v, digits: int = 3) -> str:
    """A measured number for a table; '—' where there is none."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "—"
    if isinstance(v, (int, np.integer)) or float(v).is_integer() and abs(v) < 1e15:
        return f"{int(v):,}"
    return f"{v:,.{digits}g}" if abs(v) < 10 ** digits else f"{v:,.0f}"


def pills_cell(counts: dict) -> Cell:
    """Counts such as {'oom': 2, 'eager: skipped': 1} as one small tag each; '—' when none."""
    return Cell("" if counts else "—", pills=[f"{k} {v}" for k, v in counts.items()])


def speedup_cell(v: float | None, span: float = 4.0, text: str | None = None) -> Cell:
    """A ratio coloured on a fixed scale of ±span (blue faster, red slower); text defaults to '1.23×'."""
    if v is None or not math.isfinite(v):
        return Cell("—")
    colour = hm.colour_of(v, span=span)
    ink = "#000" if sum(c * w for c, w in zip(mcolors.to_rgb(colour), (0.299, 0.587, 0.114))) > 0.55 else "#fff"
    return Cell(text or f"{hm.fmt_ratio(v)}×", style=f"background:{colour};color:{ink}")


# --------------------------------------------------------------------------------------------
# ratios between two sets of cells


def ratio_frame(top: pd.DataFrame, bottom: pd.DataFrame, value: str, top_tag: str | None,
                bottom_tag: str | None) -> pd.DataFrame:
    """Match two sets of placed cells on (dtype, shape); ratio = top[value] / bottom[value].

    Where a side did not finish ok (or has no row), `label` holds its status, prefixed by the
    side's tag ("eager: oom") unless the tag is None.  The bottom side's status wins when both
    failed differently: it is the one the heatmap is about.
    """
    keep = ["dtype", "shape", "status", value, *PLACE]
    merged = pd.merge(top[keep], bottom[keep], on=["dtype", "shape"], how="outer", suffixes=("_t", "_b"))
    for col in PLACE:  # the placement of a shape is the same on both sides; take whichever exists
        merged[col] = merged[f"{col}_b"].combine_first(merged[f"{col}_t"])
    merged["status_t"] = merged["status_t"].fillna("missing")
    merged["status_b"] = merged["status_b"].fillna("missing")
    both_ok = (merged["status_t"] == OK) & (merged["status_b"] == OK)
    merged["ratio"] = (merged[f"{value}_t"] / merged[f"{value}_b"]).where(both_ok)
    merged["label"] = [_pair_label(t, b, r, top_tag, bottom_tag)
                       for t, b, r in zip(merged["status_t"], merged["status_b"], merged["ratio"])]
    return merged[["dtype", "shape", "ratio", "label", "status_t", "status_b", *PLACE]]


def _pair_label(top: str, bottom: str, ratio: float, top_tag: str | None, bottom_tag: str | None):
    def tagged(tag, status):
        return f"{tag}: {status}" if tag else status

    if bottom != OK:
        return bottom if top == bottom else tagged(bottom_tag, bottom)
    if top != OK:
        return tagged(top_tag, top)
    if not (ratio > 0):  # both ok but one has no time (a correctness-only implementation)
        return "n/a"
    return None


def summarize(frame: pd.DataFrame, value: str = "ratio") -> dict:
    """Geometric mean, best and worst shape of a ratio frame, over the cells that have a ratio."""
    good = frame[frame[value] > 0]
    out = {"n": len(good), "total": len(frame), "geomean": None, "best": None, "worst": None}
    if len(good):
        out["geomean"] = float(np.exp(np.log(good[value]).mean()))
        best, worst = good.loc[good[value].idxmax()], good.loc[good[value].idxmin()]
        out["best"] = (best["shape"], float(best[value]))
        out["worst"] = (worst["shape"], float(worst[value]))
    return out


def shape_ratio(item) -> Cell:
    if item is None:
        return Cell("—")
    shape, v = item
    return Cell(f"{shape}  ({hm.fmt_ratio(v)}×)")


# --------------------------------------------------------------------------------------------
# heatmaps of one case, a panel at a time


def panel_figures(frame: pd.DataFrame, value: str, label: str, layout: Layout | None, scale: hm.Scale,
                  title: str, colorbar_label: str, mark: str | None = None) -> list[dict]:
    """A heatmap per panel (and dtype, when several) of a placed frame.

    frame has the placement columns, `dtype`, the value column and a status label column; `mark`
    names a column of flags written after the values (heatmap.heatmap's marks).
    """
    figures = []
    dtypes = list(dict.fromkeys(frame["dtype"]))
    for dtype in dtypes:
        of_dtype = frame[frame["dtype"] == dtype]
        for panel in ordered(of_dtype["panel"], of_dtype["panel_key"]):
            rows = of_dtype[of_dtype["panel"] == panel]
            where = " · ".join(p for p in (dtype if len(dtypes) > 1 else "", panel) if p)
            figures.append({
                "title": where,
                "img": hm.heatmap(pivot(rows, value), pivot(rows, label), scale,
                                  title=f"{title}\n{where}" if where else title,
                                  row_title=layout.row_title if layout else "",
                                  col_title=layout.col_title if layout else "shape",
                                  colorbar_label=colorbar_label,
                                  marks=pivot(rows, mark) if mark and mark in rows else None),
            })
    return figures


# --------------------------------------------------------------------------------------------
# exports and decoding


def csv_data_uri(df: pd.DataFrame) -> str:
    """The rows as a CSV download link (data: URI) without the columns that are empty throughout and
    without the per-repetition times (`fusebench results --format csv` exports those from the store)."""
    body = df.drop(columns=["time_samples_us"], errors="ignore").dropna(axis=1, how="all").to_csv(index=False)
    return "data:text/csv;base64," + base64.b64encode(body.encode()).decode("ascii")


def decode_json(text) -> dict:
    if not isinstance(text, str) or not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {"": text}
    return value if isinstance(value, dict) else {"": value}
