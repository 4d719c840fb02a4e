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
import matplotlib.colors as mcolors
import matplotlib.ticker as mticker
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

# Figures are made with Figure() rather than pyplot: no display and no GUI backend are involved,
# and a notebook's own pyplot backend and figure list are left alone.

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
    """Two decimals near 1; two significant digits far below (0.0033), fewer decimals far above."""
    if v < 0.0995:
        return f"{v:.2g}"
    return f"{v:.2f}" if v < 9.995 else f"{v:.1f}" if v < 99.95 else f"{v:.0f}"


def fmt_sig(v: float) -> str:
    return f"{v:.2g}" if abs(v) < 1e-2 or abs(v) >= 1e4 else f"{v:.3g}"


@dataclass(frozen=True)
class Scale:
    """How values map to colours and to the text written in the cells."""

    cmap: str
    fmt: Callable[[float], str]
    log: bool = False
    ratio: bool = False  # a ratio: log colours centred on 1.0, symmetric (0.5 and 2 equally far)
    vmin: float | None = None
    vmax: float | None = None
    # for a ratio, the colour range spans at least and at most these factors either side of 1
    min_span: float = 2.0
    max_span: float = 16.0
    tick_suffix: str = ""
    integer: bool = False  # counts: integer colour-bar ticks


# Blue where the implementation is faster than its baseline, red where slower; white at 1.0.
SPEEDUP = Scale("RdBu", fmt_ratio, log=True, ratio=True, tick_suffix="×")
# Two runs of the same cells usually differ by percents, not factors: a finer colour range.
RUN_RATIO = Scale("RdBu", fmt_ratio, log=True, ratio=True, min_span=1.25, tick_suffix="×")
# Error over tolerance: blue passes (< 1), red fails.
TOLERANCE = Scale("RdBu_r", fmt_sig, log=True, ratio=True, min_span=10.0, max_span=1e4)
PERCENT = Scale("viridis", lambda v: f"{v:.0f}", vmin=0.0, vmax=100.0)
COUNT = Scale("Purples", lambda v: f"{v:.0f}", vmin=0.0, integer=True)
AMPLIFICATION = Scale("Oranges", lambda v: f"{v:.2f}" if v < 10 else f"{v:.1f}", vmin=1.0)
ERROR = Scale("Reds", fmt_sig, log=True)


def norm_for(scale: Scale, values: np.ndarray) -> mcolors.Normalize:
    finite = values[np.isfinite(values) & ((values > 0) if scale.log else True)]
    if scale.ratio:
        spread = np.abs(np.log(finite)).max() if finite.size else 0.0
        span = float(np.clip(np.exp(spread), scale.min_span, scale.max_span))
        return mcolors.LogNorm(1 / span, span)
    lo = scale.vmin if scale.vmin is not None else (finite.min() if finite.size else 0.0)
    hi = scale.vmax if scale.vmax is not None else (finite.max() if finite.size else 1.0)
    if scale.log:
        lo = lo if lo > 0 else (finite.min() if finite.size else 1.0)
        hi = max(hi, lo * 1.5)  # a constant metric still gets a valid range
        return mcolors.LogNorm(lo, hi)
    return mcolors.Normalize(lo, hi if hi > lo else lo + 1.0)


def _colorbar_ticks(bar, scale: Scale, norm: mcolors.Normalize) -> None:
    """Readable colour-bar ticks: factors (0.5×, 1×, 2×) for ratios, integers for counts."""
    _ticks(bar.ax.xaxis, scale, norm.vmin, norm.vmax)


def _ticks(axis, scale: Scale, vmin: float, vmax: float) -> None:
    if scale.ratio:
        lo, hi = math.log2(vmin), math.log2(vmax)
        if hi - lo <= 1.2:  # a narrow range (run-to-run comparisons): ticks at ±10%, ±25%, ±50%
            factors = [1.0] + [f ** s for f in (1.1, 1.25, 1.5) for s in (-1, 1)]
            ticks = sorted(f for f in factors if vmin <= f <= vmax)
        else:
            # factors of 2, 4, or powers of ten: at most about eight ticks
            step = 1 if hi - lo <= 6 else 2 if hi - lo <= 12 else math.ceil((hi - lo) / 8 / math.log2(10)) * math.log2(10)
            ticks = [2.0 ** (k * step) for k in range(math.ceil(lo / step), math.floor(hi / step) + 1)]
        axis.set_major_locator(mticker.FixedLocator(ticks))
        axis.set_major_formatter(mticker.FuncFormatter(lambda v, _: f"{v:.2g}{scale.tick_suffix}"))
        axis.set_minor_locator(mticker.NullLocator())
    elif scale.integer:
        axis.set_major_locator(mticker.MaxNLocator(integer=True))


def _text_colour(rgba) -> str:
    r, g, b = rgba[:3]
    return "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.55 else "white"


def _cell_label(value: float, status, scale: Scale) -> tuple[str | None, str | None]:
    """(status label, value text) for one cell; exactly one of them is set.

    A cell with neither a value nor a status is a hole in the grid (that shape was not asked
    for): it gets the empty label and is drawn blank.
    """
    if isinstance(status, str):
        return status.replace(": ", ":\n"), None  # "eager: oom" on two lines, to fit the cell
    if value is None or not np.isfinite(value):
        return "", None
    return None, scale.fmt(value)


def heatmap(values: pd.DataFrame, statuses: pd.DataFrame | None, scale: Scale, *, title: str,
            row_title: str, col_title: str, colorbar_label: str, marks: pd.DataFrame | None = None) -> str:
    """Draw values (rows x cols) as a heatmap and return it as an SVG data: URI.

    statuses has the same index and columns; a string there replaces the value with that label,
    drawn as a failed cell.  A NaN value without a status is drawn blank (a hole in the grid).
    `marks`: a string there is written after the value (a flag the colour-bar label explains).
    A title line break separates what is drawn from which panel it is.  A handful of shapes
    scattered over a grid (most of it empty) is drawn as a list instead (bars).
    """
    if sparse(values, statuses):
        return bars(values, statuses, scale, title=title, row_title=row_title, col_title=col_title,
                    colorbar_label=colorbar_label, marks=marks)
    data = values.to_numpy(dtype=float)
    labels = (statuses.reindex_like(values).to_numpy(dtype=object) if statuses is not None
              else np.full(data.shape, None, dtype=object))
    flags = (marks.reindex_like(values).to_numpy(dtype=object) if marks is not None
             else np.full(data.shape, None, dtype=object))
    cells = [[_marked(_cell_label(data[i, j], labels[i, j], scale), flags[i, j]) for j in range(data.shape[1])]
             for i in range(data.shape[0])]
    shown = np.where([[lab is None for lab, _ in row] for row in cells], data, np.nan)
    norm = norm_for(scale, shown)
    size = _figsize(values, cells, title)
    with matplotlib.rc_context(RC):
        fig = Figure(figsize=size, layout="constrained")
        ax = fig.subplots()
        image = ax.imshow(np.ma.masked_invalid(shown), cmap=scale.cmap, norm=norm, aspect="auto",
                          interpolation="nearest")
        _annotate(ax, cells, shown, image)
        _axes(ax, values, row_title, col_title)
        ax.set_title(title, fontsize=9.5, loc="left", linespacing=1.5)
        # Below the grid, where there is room for a label that says what the colours mean.
        bar = fig.colorbar(image, ax=ax, location="bottom", shrink=0.75, aspect=40, pad=0.01,
                           extend=_extend(scale, norm, shown))
        bar.set_label(wrap_label(colorbar_label, size[0]), fontsize=8)
        bar.ax.tick_params(labelsize=7)
        _colorbar_ticks(bar, scale, norm)
        return _to_data_uri(fig)


def _marked(label: tuple[str | None, str | None], mark) -> tuple[str | None, str | None]:
    status, text = label
    if text is not None and isinstance(mark, str) and mark:
        return status, text + mark
    return status, text


# A grid is drawn as a list when it holds at most this many shapes and they fill at most this share of
# it: two quick shapes on a 2x2 grid are a diagonal of values in a square of blanks.
SPARSE_MAX_SHAPES = 8
SPARSE_MAX_FILL = 0.5


def sparse(values: pd.DataFrame, statuses: pd.DataFrame | None = None) -> bool:
    """Whether a grid holds a handful of shapes scattered over mostly empty cells."""
    filled = values.notna().to_numpy().copy()
    if statuses is not None:
        filled |= statuses.reindex_like(values).notna().to_numpy()
    n = int(filled.sum())
    return 0 < n <= SPARSE_MAX_SHAPES and n <= SPARSE_MAX_FILL * filled.size and min(values.shape) > 1


def _at(frame: pd.DataFrame | None, r, c):
    return frame.at[r, c] if frame is not None and r in frame.index and c in frame.columns else None


def bars(values: pd.DataFrame, statuses: pd.DataFrame | None, scale: Scale, *, title: str, row_title: str,
         col_title: str, colorbar_label: str, marks: pd.DataFrame | None = None) -> str:
    """The filled cells of a sparse grid as a list, one bar per shape ("row × col"), coloured and
    labelled as the heatmap would; a failed cell as its status.  Returns an SVG data: URI."""
    entries = []
    for r in values.index:
        for c in values.columns:
            v = values.at[r, c]
            status, mark = _at(statuses, r, c), _at(marks, r, c)
            if not isinstance(status, str) and (v is None or not np.isfinite(v)):
                continue
            entries.append((f"{r} × {c}" if str(r) else str(c), v, status if isinstance(status, str) else None, mark))
    finite = np.array([v for _, v, s, _ in entries if s is None], dtype=float)
    norm = norm_for(scale, finite)
    log = scale.log or scale.ratio
    base = 1.0 if scale.ratio else (float(norm.vmin) if scale.log else 0.0)
    lo = min([base, *finite]) / (1.4 if log else 1.0)
    hi = max([base * (1.5 if log else 1.0) or 1.0, *finite]) * (1.6 if log else 1.15)
    axis_title = " × ".join(t for t in (row_title, col_title) if t) or "shape"
    width = min(12.0, max(5.2, 0.07 * max(len(t) for t in title.split("\n")) + 1.0))
    with matplotlib.rc_context(RC):
        fig = Figure(figsize=(width, min(12.0, 1.9 + 0.34 * len(entries))), layout="constrained")
        ax = fig.subplots()
        cmap = matplotlib.colormaps[scale.cmap]
        for i, (_, v, status, mark) in enumerate(entries):
            if status is not None:
                fill, _ = status_style(status)
                ax.text(base, i, status.replace("\n", " "), va="center", ha="center", fontsize=7.5,
                        bbox=dict(boxstyle="round,pad=0.25", fc=fill, ec="#707070", lw=0.5))
                continue
            ax.barh(i, v - base, left=base, color=cmap(norm(v)), edgecolor="#707070", linewidth=0.4, height=0.6)
            text = scale.fmt(v) + (mark if isinstance(mark, str) else "")
            ax.text(v, i, f" {text} " if v >= base else f" {text} ", va="center", ha="left" if v >= base else "right",
                    fontsize=8)
        ax.set_yticks(range(len(entries)), [e[0] for e in entries], fontsize=7.5)
        ax.set_ylim(len(entries) - 0.5, -0.5)
        if log:
            ax.set_xscale("log")
        ax.set_xlim(lo, hi)
        _ticks(ax.xaxis, scale, lo, hi)
        if scale.ratio:
            ax.axvline(1.0, color="#333", linewidth=0.8)
        ax.set_ylabel(axis_title, fontsize=8.5)
        ax.set_xlabel(wrap_label(colorbar_label, width), fontsize=8)
        ax.tick_params(labelsize=7)
        for spine in ("top", "right"):
            ax.spines[spine].set_visible(False)
        ax.set_title(title, fontsize=9.5, loc="left", linespacing=1.5)
        return _to_data_uri(fig)


def _extend(scale: Scale, norm: mcolors.Normalize, shown: np.ndarray) -> str:
    """Arrow ends on the colour bar where values fall outside its range (saturated colours)."""
    finite = shown[np.isfinite(shown)]
    low = bool(finite.size) and finite.min() < norm.vmin
    high = bool(finite.size) and finite.max() > norm.vmax
    return "both" if low and high else "min" if low else "max" if high else "neither"


def _annotate(ax, cells, shown: np.ndarray, image) -> None:
    size = 7 if len(cells[0]) > 8 else 8
    for i, row in enumerate(cells):
        for j, (status, text) in enumerate(row):
            if status == "":
                ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, facecolor="#fafafa", linewidth=0))
            elif status is not None:
                fill, hatch = status_style(status)
                # edgecolor sets the hatch colour; linewidth 0 keeps the cell borderless
                ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, facecolor=fill, hatch=hatch,
                                       edgecolor="#707070", linewidth=0))
                ax.text(j, i, status, ha="center", va="center", fontsize=size - 1.5, color="#1a1a1a",
                        linespacing=1.1, bbox=dict(boxstyle="round,pad=0.15", fc=fill, ec="none", alpha=0.9),
                        in_layout=False)  # inside the grid: the layout need not measure it (it is slow)
            else:
                ax.text(j, i, text, ha="center", va="center", fontsize=size, in_layout=False,
                        color=_text_colour(image.cmap(image.norm(shown[i, j]))))


def _figsize(values: pd.DataFrame, cells, title: str) -> tuple[float, float]:
    """Inches: a cell wide enough for its longest text, a left margin for the row labels, and
    room for the title, which starts where the grid does."""
    nrows, ncols = values.shape
    longest = max([len(str(c)) for c in values.columns]
                  + [len(line) for row in cells for lab, text in row for line in (lab or text or "").split("\n")])
    row_label = max((len(str(r)) for r in values.index), default=4)
    cell_w = max(0.5, 0.06 * longest)
    margin = 0.9 + 0.065 * row_label
    width = max(4.4, margin + cell_w * ncols, margin + 0.07 * max(len(t) for t in title.split("\n")))
    height = 1.75 + 0.32 * max(nrows, 1)
    return min(width, 18.0), min(height, 16.0)


def _axes(ax, values: pd.DataFrame, row_title: str, col_title: str) -> None:
    nrows, ncols = values.shape
    ax.set_xticks(range(ncols), [str(c) for c in values.columns], fontsize=7.5,
                  rotation=0 if ncols <= 12 else 45)
    ax.set_yticks(range(nrows), [str(r) for r in values.index], fontsize=7.5)
    # Like the plan's tables: column headers on top, first row at the top.
    ax.xaxis.tick_top()
    ax.xaxis.set_label_position("top")
    ax.set_xlabel(col_title, fontsize=8.5)
    ax.set_ylabel(row_title, fontsize=8.5)
    ax.set_xticks(np.arange(-0.5, ncols), minor=True)
    ax.set_yticks(np.arange(-0.5, nrows), minor=True)
    ax.grid(which="minor", color="white", linewidth=1.5)
    ax.tick_params(which="both", length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)


def wrap_label(text: str, width_in: float) -> str:
    """A colour-bar label wrapped to the figure's width (8-point text: about 0.065 in a character),
    so that no line runs past the figure's edge."""
    import textwrap

    chars = max(24, int(width_in / 0.065))
    return "\n".join(part for line in text.split("\n") for part in textwrap.wrap(line, chars) or [""])


def _to_data_uri(fig) -> str:
    buf = io.BytesIO()
    # the tight box takes in whatever the layout let stick out (a long label), instead of cutting it
    fig.savefig(buf, format="svg", metadata={"Date": None}, bbox_inches="tight", pad_inches=0.04)
    return "data:image/svg+xml;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def colour_of(value: float, span: float = 4.0) -> str:
    """CSS colour of a ratio on the speedup colours, fixed at 1/span .. span (for table cells)."""
    if value is None or not math.isfinite(value) or value <= 0:
        return "transparent"
    return mcolors.to_hex(matplotlib.colormaps[SPEEDUP.cmap](mcolors.LogNorm(1 / span, span)(value)))
