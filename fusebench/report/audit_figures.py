"""The pictures of an audit page, drawn with matplotlib and returned as SVG data: URIs.

- where the step's time goes: a horizontal bar per backend split by kernel class, every bar to one
  scale (the longest is the slowest step), the profiled span not covered by kernels hatched;
- the opportunities: a bar per region, ranked by gap, the measured time solid and the ideal time
  (an estimate: the region's unavoidable bytes at the copy ceiling) hatched inside it.
"""
from __future__ import annotations

import matplotlib
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from fusebench.audit import views as v
from fusebench.report.heatmap import RC, _to_data_uri

CLASS_COLOURS = {"gemm": "#2b5fa8", "conv": "#5aa9c9", "attention": "#8e5ea2", "memory": "#e6a23c",
                 "copy": "#c0504d", v.OTHER: "#9a9a9a", v.BETWEEN: "#e4e4e4"}
MEASURED, IDEAL = "#e6a23c", "#ffffff"


def _unit(longest_us: float) -> tuple[float, str]:
    """(divisor, unit) for an axis whose longest bar is `longest_us` microseconds."""
    return (1e3, "ms") if longest_us >= 2e3 else (1.0, "µs")


def _label_width(labels: list[str]) -> float:
    return 0.6 + 0.065 * max((len(s) for s in labels), default=4)


def _short(labels: list[str], width: int = 60) -> list[str]:
    return [s if len(s) <= width else s[:width - 3] + "…" for s in labels]


def _bar_axes(ax, labels: list[str], label_size: float, xmax: float, xlabel: str, title: str) -> None:
    """The styling every bar chart of the page shares: one labelled row per bar, first at the top,
    no top or right frame."""
    ax.set_yticks(range(len(labels)), labels, fontsize=label_size)
    ax.invert_yaxis()
    ax.set_xlim(0, xmax)
    ax.set_xlabel(xlabel, fontsize=8)
    ax.tick_params(labelsize=7.5)
    ax.set_title(title, fontsize=9.5, loc="left")
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def class_bars(rows: list[tuple[str, v.Breakdown | None, str | None]], title: str, unit_label: str) -> str:
    """rows: (label, breakdown, status when there is no breakdown).  One bar per row."""
    shown = [b for _, b, _ in rows if b is not None]
    longest = max((b.total_us for b in shown), default=1.0) or 1.0
    scale, unit = _unit(longest)
    labels = [label for label, _, _ in rows]
    with matplotlib.rc_context(RC):
        fig = Figure(figsize=(max(7.0, _label_width(labels) + 6.0), 1.2 + 0.42 * len(rows)), layout="constrained")
        ax = fig.subplots()
        used: dict[str, Patch] = {}
        for i, (label, b, status) in enumerate(rows):
            if b is None:
                ax.text(0, i, f"  {status or 'no kernels profiled'}: no kernels profiled", va="center", fontsize=8,
                        color="#7d1420")
                continue
            left = 0.0
            for klass, us in b.parts():
                colour = CLASS_COLOURS.get(klass, CLASS_COLOURS[v.OTHER])
                hatch = "///" if klass == v.BETWEEN else None
                ax.barh(i, us / scale, left=left, color=colour, edgecolor="#9a9a9a" if hatch else "white",
                        hatch=hatch, linewidth=0.5, height=0.62)
                pct = b.pct(us)
                if pct is not None and pct >= 8 and us >= 0.07 * longest:  # room for the label
                    ax.text(left + us / scale / 2, i, f"{pct:.0f}%", ha="center", va="center", fontsize=7,
                            color="#1a1a1a" if klass in ("memory", v.BETWEEN, "conv") else "white")
                left += us / scale
                used.setdefault(klass, Patch(facecolor=colour, hatch=hatch, edgecolor="#9a9a9a", label=klass))
            ax.text(left, i, f" {v.fmt_us(b.total_us)}", va="center", fontsize=7.5)
        _bar_axes(ax, labels, 8, longest / scale * 1.15, f"{unit_label}, {unit}", title)
        if used:
            fig.legend(handles=list(used.values()), fontsize=7.5, ncols=min(len(used), 6), frameon=False,
                       loc="outside lower left")
        return _to_data_uri(fig)


def gap_bars(regions, title: str, step_us: float | None) -> str:
    """A bar per region (ranked as given): measured time, the ideal estimate hatched inside it, the
    gap written at the bar's end (µs and % of the step)."""
    labels = _short([f"{r.label} ({r.graph})" for r in regions])
    longest = max((float(r.time_us or 0) for r in regions), default=1.0) or 1.0
    scale, unit = _unit(longest)
    with matplotlib.rc_context(RC):
        fig = Figure(figsize=(max(7.0, _label_width(labels) + 6.0), 1.4 + 0.36 * len(regions)), layout="constrained")
        ax = fig.subplots()
        for i, r in enumerate(regions):
            measured = float(r.time_us or 0)
            ax.barh(i, measured / scale, color=MEASURED, height=0.64, linewidth=0)
            if r.ideal_us is not None:
                ax.barh(i, float(r.ideal_us) / scale, color=IDEAL, hatch="////", edgecolor="#555555", height=0.34,
                        linewidth=0.4)
            if r.gap_us is not None:
                share = f", {v.fmt_pct(r.pct_step)} of the step" if r.pct_step is not None else ""
                text = f" gap {v.fmt_us(r.gap_us)}{share}"
            else:
                text = " gap not available (no ideal time)"
            ax.text(measured / scale, i, text, va="center", fontsize=7.5)
        _bar_axes(ax, labels, 7.5, longest / scale * 1.45, f"{unit} per step", title)
        handles = [Patch(facecolor=MEASURED, label="measured: the region's kernels"),
                   Patch(facecolor=IDEAL, hatch="////", edgecolor="#555555",
                         label="ideal (estimate): unavoidable bytes at the copy ceiling")]
        fig.legend(handles=handles, fontsize=7.5, frameon=False, loc="outside lower left", ncols=len(handles))
        return _to_data_uri(fig)


def paired_region_bars(pairs, title: str) -> str:
    """Matched regions of two audits: the measured time of A and of B side by side, with each
    side's ideal estimate hatched inside its bar."""
    labels = _short([f"{p.label} ({p.graph})" + (f" #{p.occurrence + 1}" if p.occurrence else "") for p in pairs])
    longest = max((float(r.time_us or 0) for p in pairs for r in (p.a, p.b) if r is not None), default=1.0) or 1.0
    scale, unit = _unit(longest)
    colours = {"A": "#9ab3d6", "B": "#2b5fa8"}
    with matplotlib.rc_context(RC):
        fig = Figure(figsize=(max(7.0, _label_width(labels) + 6.0), 1.4 + 0.5 * len(pairs)), layout="constrained")
        ax = fig.subplots()
        for i, p in enumerate(pairs):
            for offset, side, r in ((-0.2, "A", p.a), (0.2, "B", p.b)):
                if r is None:
                    ax.text(0, i + offset, f"  absent in {side}", va="center", fontsize=7, color="#7d1420")
                    continue
                ax.barh(i + offset, float(r.time_us or 0) / scale, color=colours[side], height=0.38, linewidth=0)
                if r.ideal_us is not None:
                    ax.barh(i + offset, float(r.ideal_us) / scale, color="white", hatch="////", edgecolor="#555555",
                            height=0.18, linewidth=0.4)
                ax.text(float(r.time_us or 0) / scale, i + offset, f" {side} {v.fmt_us(r.time_us)}", va="center",
                        fontsize=7)
        _bar_axes(ax, labels, 7.5, longest / scale * 1.3, f"{unit} per step (measured)", title)
        handles = [Patch(facecolor=colours["A"], label="A"), Patch(facecolor=colours["B"], label="B"),
                   Patch(facecolor="white", hatch="////", edgecolor="#555555", label="ideal (estimate)")]
        fig.legend(handles=handles, fontsize=7.5, frameon=False, loc="outside lower left", ncols=len(handles))
        return _to_data_uri(fig)
