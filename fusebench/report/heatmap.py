"""Heatmaps over a shape grid, drawn with matplotlib and returned as data: URIs for <img> tags.

Every cell carries its value written in it.  A cell with no value to colour (an implementation
that ran out of memory, was skipped, gave a wrong answer ...) is drawn in grey with a hatch that
tells the kind of failure apart, and labelled with its status, so that failed cells stand out
instead of vanishing into the colour scale.
"""
from __future__ import annotations

import base64
import io
import math
from dataclasses import dataclass
from typing import Callable

import matplotlib

matplotlib.use("Agg")  # no display: the report is rendered to files, on servers and in CI

import matplotlib.colors as mcolors  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker as mticker  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

# Status -> (fill, hatch).  Three families, so that a glance tells "it broke" (dark, crossed) from
# "it hit a limit" (mid grey, slanted) from "it was not run" (light, plain).
STATUS_STYLE: dict[str, tuple[str, str]] = {
    "mismatch": ("#a0a0a0", "xx"),
    "error": ("#a0a0a0", "xx"),
    "crashed": ("#a0a0a0", "xx"),
    "oom": ("#c8c8c8", "//"),
    "timeout": ("#c8c8c8", "//"),
    "skipped": ("#e2e2e2", ""),
    "unsupported": ("#e2e2e2", ""),
    "missing": ("#f4f4f4", ""),
    "n/a": ("#f4f4f4", ""),
}
OTHER_STATUS = STATUS_STYLE["error"]  # a status this report does not know: treat it as broken

# Text stays text in the SVG (small files, searchable, crisp); the browser picks the font.
RC = {"svg.fonttype": "none", "font.family": "sans-serif",
      "font.sans-serif": ["DejaVu Sans", "Helvetica", "Arial"], "hatch.linewidth": 0.6}


def status_style(label: str) -> tuple[str, str]:
    """Style of a cell label such as 'oom' or 'eager: oom' (the baseline's status)."""
    return STATUS_STYLE.get(label.split(":")[-1].strip(), OTHER_STATUS)


def fmt_ratio(v: float) -> str:
    return f"{v:.2f}" if v < 9.995 else f"{v:.1f}" if v < 99.95 else f"{v:.0f}"


def fmt_sig(v: float) -> str:
    return f"{v:.2g}" if abs(v) < 1e-2 or abs(v) >= 1e4 else f"{v:.3g}"


@dataclass(frozen=True)
class Scale:
    """How values map to colours and to the text written in the cells."""

    cmap: str
    fmt: Callable[[float], str]
    log: bool = False
    centre: float | None = None  # diverging: symmetric (in log space when log) around this value
    vmin: float | None = None
    vmax: float | None = None
    # for a centred scale, the colour range spans at least and at most these factors either side
    min_span: float = 2.0
    max_span: float = 16.0


# Blue where the implementation is faster than its baseline, red where slower; white at 1.0.
SPEEDUP = Scale("RdBu", fmt_ratio, log=True, centre=1.0)
# Error over tolerance: blue passes (< 1), red fails.
TOLERANCE = Scale("RdBu_r", fmt_sig, log=True, centre=1.0, min_span=10.0, max_span=1e4)
PERCENT = Scale("viridis", lambda v: f"{v:.0f}", vmin=0.0, vmax=100.0)
COUNT = Scale("Purples", lambda v: f"{v:.0f}", vmin=0.0)
AMPLIFICATION = Scale("Oranges", lambda v: f"{v:.2f}" if v < 10 else f"{v:.1f}", log=True, vmin=1.0)
ERROR = Scale("Reds", fmt_sig, log=True)


def norm_for(scale: Scale, values: np.ndarray) -> mcolors.Normalize:
    finite = values[np.isfinite(values) & ((values > 0) if scale.log else True)]
    if scale.centre is not None:
        if scale.log:
            spread = np.abs(np.log(finite / scale.centre)).max() if finite.size else 0.0
            span = float(np.clip(np.exp(spread), scale.min_span, scale.max_span))
            return mcolors.LogNorm(scale.centre / span, scale.centre * span)
        spread = float(np.abs(finite - scale.centre).max()) if finite.size else 1.0
        return mcolors.CenteredNorm(scale.centre, spread or 1.0)
    lo = scale.vmin if scale.vmin is not None else (finite.min() if finite.size else 0.0)
    hi = scale.vmax if scale.vmax is not None else (finite.max() if finite.size else 1.0)
    if scale.log:
        lo = lo if lo > 0 else (finite.min() if finite.size else 1.0)
        hi = max(hi, lo * 1.5)  # a constant metric still gets a valid range
        return mcolors.LogNorm(lo, hi)
    return mcolors.Normalize(lo, hi if hi > lo else lo + 1.0)


def _factor_ticks(norm: mcolors.Normalize) -> list[float]:
    """Ticks at 1/16, 1/8, ... 8, 16 (times the centre) within the colour range."""
    return [2.0**k for k in range(-14, 15) if norm.vmin <= 2.0**k <= norm.vmax]


def _text_colour(rgba) -> str:
    r, g, b = rgba[:3]
    return "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.55 else "white"


def _cell_label(value: float, status, scale: Scale) -> tuple[str | None, str | None]:
    """(status label, value text) for one cell; exactly one of them is set.

    A cell with neither a value nor a status is a hole in the grid (that shape was not asked
    for): it gets the empty label and is drawn blank.
    """
    if isinstance(status, str):
        return status, None
    if value is None or not np.isfinite(value):
        return "", None
    return None, scale.fmt(value)


def heatmap(values: pd.DataFrame, statuses: pd.DataFrame | None, scale: Scale, *, title: str,
            row_title: str, col_title: str, colorbar_label: str) -> str:
    """Draw values (rows x cols) as a heatmap and return it as an SVG data: URI.

    statuses has the same index and columns; a string there replaces the value with that label,
    drawn as a failed cell.  A NaN value without a status is drawn blank (a hole in the grid).
    """
    data = values.to_numpy(dtype=float)
    labels = (statuses.reindex_like(values).to_numpy(dtype=object) if statuses is not None
              else np.full(data.shape, None, dtype=object))
    cells = [[_cell_label(data[i, j], labels[i, j], scale) for j in range(data.shape[1])]
             for i in range(data.shape[0])]
    shown = np.where([[lab is None for lab, _ in row] for row in cells], data, np.nan)
    norm = norm_for(scale, shown)
    cmap = plt.get_cmap(scale.cmap)

    with plt.rc_context(RC):
        fig, ax = plt.subplots(figsize=_figsize(values), layout="constrained")
        _draw(fig, ax, values, cells, shown, norm, cmap, scale, title, row_title, col_title, colorbar_label)
        return _to_data_uri(fig)


def _draw(fig, ax, values, cells, shown, norm, cmap, scale, title, row_title, col_title, colorbar_label):
    image = ax.imshow(np.ma.masked_invalid(shown), cmap=cmap, norm=norm, aspect="auto",
                      interpolation="nearest")
    small = 7 if values.shape[1] > 8 else 8
    for i, row in enumerate(cells):
        for j, (status, text) in enumerate(row):
            if status == "":
                ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, facecolor="#fafafa", linewidth=0))
            elif status is not None:
                fill, hatch = status_style(status)
                ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, facecolor=fill, hatch=hatch,
                                       edgecolor="#6f6f6f", linewidth=0))
                ax.text(j, i, status.replace(": ", ":\n"), ha="center", va="center", fontsize=small - 1,
                        color="#222222", bbox=dict(boxstyle="round,pad=0.15", fc=fill, ec="none", alpha=0.85))
            else:
                ax.text(j, i, text, ha="center", va="center", fontsize=small,
                        color=_text_colour(cmap(norm(shown[i, j]))))
    _axes(ax, values, row_title, col_title)
    ax.set_title(title, fontsize=10, loc="left")
    bar = fig.colorbar(image, ax=ax, shrink=0.9 if values.shape[0] > 3 else 1.0, aspect=25, pad=0.02)
    bar.set_label(colorbar_label, fontsize=8)
    bar.ax.tick_params(labelsize=7)
    if scale.log and scale.centre is not None:
        bar.ax.yaxis.set_major_locator(mticker.FixedLocator(_factor_ticks(norm)))
        bar.ax.yaxis.set_major_formatter(mticker.FuncFormatter(lambda v, _: f"{v:g}×"))
        bar.ax.yaxis.set_minor_locator(mticker.NullLocator())


def _figsize(values: pd.DataFrame) -> tuple[float, float]:
    nrows, ncols = values.shape
    label = max((len(str(r)) for r in values.index), default=4)
    col_label = max((len(str(c)) for c in values.columns), default=4)
    cell_w = max(0.58, 0.075 * col_label)
    width = 1.9 + 0.07 * label + cell_w * max(ncols, 2)
    height = 1.35 + 0.36 * max(nrows, 1)
    return min(width, 16.0), min(height, 14.0)


def _axes(ax, values: pd.DataFrame, row_title: str, col_title: str) -> None:
    nrows, ncols = values.shape
    ax.set_xticks(range(ncols), [str(c) for c in values.columns], fontsize=8,
                  rotation=0 if ncols <= 12 else 45)
    ax.set_yticks(range(nrows), [str(r) for r in values.index], fontsize=8)
    # Like the plan's tables: column headers on top, first row at the top.
    ax.xaxis.tick_top()
    ax.xaxis.set_label_position("top")
    ax.set_xlabel(col_title, fontsize=9)
    ax.set_ylabel(row_title, fontsize=9)
    ax.set_xticks(np.arange(-0.5, ncols), minor=True)
    ax.set_yticks(np.arange(-0.5, nrows), minor=True)
    ax.grid(which="minor", color="white", linewidth=1.5)
    ax.tick_params(which="both", length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)


def _to_data_uri(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="svg", metadata={"Date": None})
    plt.close(fig)
    return "data:image/svg+xml;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def colour_of(value: float, scale: Scale = SPEEDUP, span: float = 4.0) -> str:
    """CSS colour of a value on a fixed scale, for table cells (e.g. a geomean in the summary)."""
    if value is None or not math.isfinite(value) or (scale.log and value <= 0):
        return "transparent"
    norm = mcolors.LogNorm(1 / span, span) if scale.centre is not None else mcolors.Normalize(0, 100)
    return mcolors.to_hex(plt.get_cmap(scale.cmap)(norm(value)))
