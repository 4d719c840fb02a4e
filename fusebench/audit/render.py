"""An audit in the terminal (rich): the steps of each backend, where a step's time goes by kernel
class, the ranked opportunities, the kernels outside the compiled graphs and the notes; and two
audits side by side.

Every name that came from a model or a store is printed as text (as_text), never as markup.
"""
from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from fusebench.audit import views as v
from fusebench.audit.result import AuditResult
from fusebench.util import as_text, plain

# Each class a glyph and a colour: the bar reads without colour too.
CLASS_STYLE = {
    "gemm": ("█", "blue"), "conv": ("▓", "cyan"), "attention": ("▒", "magenta"), "memory": ("░", "yellow"),
    "copy": ("▪", "red"), v.OTHER: ("?", "white"), v.BETWEEN: ("·", "grey50"),
}
BAR_WIDTH = 40
ESTIMATE_NOTE = ("ideal: the region's unavoidable bytes (its inputs from outside and what it leaves for outside) "
                 "at the device's measured copy ceiling, an estimate; measured: its kernels' time per step; "
                 "gap = measured − ideal")


def render(result: AuditResult, console: Console, *, top: int = 10, run_id: int | None = None,
           device_name: str | None = None) -> None:
    """Print the whole audit."""
    console.print(Text(v.headline(result, run_id, device_name), style="bold"))
    console.print(Text(v.ceilings_line(result), style="dim"))
    console.print(steps_table(result))
    bars = class_bars(result)
    if bars is not None:
        console.print(bars)
    for backend in result.backends:
        table = opportunities_table(result, backend, top)
        if table is not None:
            console.print(table)
    if any(r.ideal_us is not None for r in result.regions):
        console.print(Text(ESTIMATE_NOTE, style="dim"))
    outside = outside_table(result)
    if outside is not None:
        console.print(outside)
    found = v.notes(result)
    if found:
        console.print(Text("notes", style="bold"))
        for line in found:
            console.print(Text(f"- {plain(line)}"), soft_wrap=True)


def _status(step) -> str:
    """ok, or the status in red (its reason is among the notes)."""
    return "ok" if step.status == "ok" else f"[red]{as_text(step.status)}[/] (see notes)"


def steps_table(result: AuditResult) -> Table:
    label = v.time_label(result)
    t = Table(title=f"steps ({label} per step; wall: steps back to back, as the caller pays)",
              title_justify="left")
    for col, just in (("backend", "left"), ("status", "left"), (label, "right"), ("speedup", "right"),
                      ("wall", "right"), ("kernels", "right"), ("peak memory", "right"),
                      ("compile cold", "right"), ("compile warm", "right"), ("break-even", "right"),
                      ("graphs / breaks / recompiles", "right")):
        t.add_column(col, justify=just, overflow="fold")
    baseline = result.backends[0] if result.backends else None
    order = list(dict.fromkeys([*result.backends, *(s.backend for s in result.steps)]))
    for backend in order:
        s = result.step(backend)
        if s is None:
            t.add_row(as_text(backend), "[red]not measured[/]", *[""] * 9)
            continue
        name = as_text(backend) + (" (baseline)" if backend == baseline else "")
        compiled = backend != "eager"
        breaks = "" if not compiled else " / ".join(v.fmt_count(x) for x in (s.graphs, s.graph_breaks, s.recompiles))
        even = ""
        if compiled:
            even = (v.fmt_count(s.break_even_steps) + " steps") if s.break_even_steps is not None else "—"
        t.add_row(name, _status(s), v.fmt_us(s.gpu_time_us), v.fmt_ratio(v.speedup(result, s)) if compiled else "",
                  v.fmt_us(s.wall_us), v.fmt_count(s.kernels), v.fmt_bytes(s.peak_mem_bytes),
                  v.fmt_s(s.compile_cold_s) if compiled else "", v.fmt_s(s.compile_warm_s) if compiled else "",
                  even, breaks)
    return t


def bar(parts: list[tuple[str, float]], total: float, width: int) -> Text:
    """A horizontal bar of `width` cells for `total`, split into the parts (largest remainders)."""
    text = Text()
    if total <= 0 or width <= 0:
        return text
    exact = [us / total * width for _, us in parts]
    cells = [int(x) for x in exact]
    for i in sorted(range(len(parts)), key=lambda i: -(exact[i] - cells[i]))[: max(0, width - sum(cells))]:
        cells[i] += 1
    for (klass, _), n in zip(parts, cells):
        glyph, style = CLASS_STYLE.get(klass, CLASS_STYLE[v.OTHER])
        text.append(glyph * n, style=style)
    return text


def class_bars(result: AuditResult) -> Table | None:
    """Per backend, the profiled step as a bar split by kernel class (bars to one scale: the
    longest is the slowest step), then each class's share."""
    found = [b for b in (v.breakdown(result, n) for n in result.backends) if b is not None]
    if not found:
        return None
    longest = max(b.total_us for b in found) or 1.0
    t = Table(title="where the step's time goes (profiled step, by kernel class)", title_justify="left",
              show_header=False, box=None, padding=(0, 1))
    t.add_column("backend", no_wrap=True)
    t.add_column("bar", no_wrap=True)
    t.add_column("span", justify="right", no_wrap=True)
    t.add_column("classes", overflow="fold")
    for b in found:
        width = max(1, round(BAR_WIDTH * b.total_us / longest))
        shares = " · ".join(f"{CLASS_STYLE.get(k, CLASS_STYLE[v.OTHER])[0]} {k} {v.fmt_pct(b.pct(us))}"
                            for k, us in b.parts())
        if b.outside_n:
            shares += f"; outside the compiled graphs: {v.fmt_us(b.outside_us)} in {b.outside_n} kernel(s)"
        span = v.fmt_us(b.total_us)
        t.add_row(as_text(b.backend), bar(b.parts(), b.total_us, width), span, as_text(shares))
    return t


def opportunities_table(result: AuditResult, backend: str, top: int) -> Table | None:
    regions = v.ranked(result, backend)[:max(top, 0)]
    if not regions:
        return None
    summary = v.regions_summary(result, backend) or ""
    t = Table(title=f"opportunities in {as_text(backend)}: {as_text(summary)}"
                    + (f"; the top {len(regions)} by gap" if len(regions) < len(v.ranked(result, backend))
                       else ""), title_justify="left")
    for col, just in (("#", "right"), ("region", "left"), ("graph", "left"), ("kernels", "left"),
                      ("bytes", "right"), ("ideal (estimate)", "right"), ("measured", "right"), ("gap", "right"),
                      ("% of step", "right"), ("Inductor's reasons", "left"), ("fusebench case at this shape", "left")):
        t.add_column(col, justify=just, overflow="fold")
    for rank, r in enumerate(regions, 1):
        ideal = v.fmt_us(r.ideal_us) if r.ideal_us is not None else "not available"
        t.add_row(str(rank), as_text(r.label), as_text(r.graph), as_text(v.kernel_list(r.kernels)),
                  v.fmt_bytes(r.bytes), ideal, v.fmt_us(r.time_us), v.fmt_us(r.gap_us), v.fmt_pct(r.pct_step),
                  as_text(v.refusals_text(r.refusals)), as_text(v.case_text(r)))
    return t


def outside_table(result: AuditResult) -> Table | None:
    rows = v.outside_kernels(result)
    if not rows:
        return None
    t = Table(title="kernels outside the compiled graphs", title_justify="left")
    for col, just in (("backend", "left"), ("kernel", "left"), ("ATen op", "left"), ("launches", "right"),
                      ("time / step", "right"), ("% of step", "right"), ("why", "left")):
        t.add_column(col, justify=just, overflow="fold")
    for k in rows:
        step = v.step_time_us(result, k.backend)
        share = v.fmt_pct(100 * k.time_us / step) if step and k.time_us is not None else "—"
        t.add_row(as_text(k.backend), as_text(k.name), as_text(k.op or "—"), v.fmt_count(k.launches),
                  v.fmt_us(k.time_us), share, as_text(k.outside or "not named"))
    return t


# ------------------------------------------------------------------------------------------------
# two audits


def render_pair(a: AuditResult, b: AuditResult, console: Console, *, run_a, run_b, info_a: dict | None = None,
                info_b: dict | None = None, top: int = 10) -> None:
    """Print two audits side by side: A is the reference, ratios are time(A) / time(B) (above 1:
    B is faster)."""
    console.print(Text(f"A: {v.headline(a, run_a, (info_a or {}).get('device_name'))}", style="bold"))
    console.print(Text(f"B: {v.headline(b, run_b, (info_b or {}).get('device_name'))}", style="bold"))
    diffs = v.differences(a, b, info_a, info_b)
    console.print(Text("differences: " + ("; ".join(diffs) if diffs else "none besides the measurements"),
                       style="dim"), soft_wrap=True)
    pairs = v.pair_backends(a, b)
    console.print(pair_steps_table(a, b, pairs))
    console.print(pair_classes_table(a, b, pairs))
    console.print(pair_kernels_table(a, b, pairs))
    for p in pairs:
        table = pair_regions_table(p, top)
        if table is not None:
            console.print(table)


def _side(result: AuditResult, backend: str | None, attr: str, fmt) -> str:
    s = result.step(backend) if backend else None
    if s is None:
        return "—"
    if s.status != "ok" and getattr(s, attr) is None:
        return s.status
    return fmt(getattr(s, attr))


def _change(a, b) -> str:
    a, b = v._number(a), v._number(b)
    return v.fmt_ratio(a / b) if a and b else "—"


def pair_steps_table(a: AuditResult, b: AuditResult, pairs) -> Table:
    label = v.time_label(a) if v.time_label(a) == v.time_label(b) else "time"
    t = Table(title=f"steps, A vs B ({label} per step; A / B above 1: B faster)", title_justify="left")
    for col in ("backend", f"{label} A", f"{label} B", "A / B", "wall A", "wall B", "peak mem A", "peak mem B",
                "compile cold A", "compile cold B", "kernels A", "kernels B"):
        t.add_column(col, justify="left" if col == "backend" else "right", overflow="fold")
    for p in pairs:
        sa, sb = (a.step(p.a) if p.a else None), (b.step(p.b) if p.b else None)
        t.add_row(as_text(p.label), _side(a, p.a, "gpu_time_us", v.fmt_us), _side(b, p.b, "gpu_time_us", v.fmt_us),
                  _change(sa and sa.gpu_time_us, sb and sb.gpu_time_us),
                  _side(a, p.a, "wall_us", v.fmt_us), _side(b, p.b, "wall_us", v.fmt_us),
                  _side(a, p.a, "peak_mem_bytes", v.fmt_bytes), _side(b, p.b, "peak_mem_bytes", v.fmt_bytes),
                  _side(a, p.a, "compile_cold_s", v.fmt_s), _side(b, p.b, "compile_cold_s", v.fmt_s),
                  _side(a, p.a, "kernels", v.fmt_count), _side(b, p.b, "kernels", v.fmt_count))
    return t


def pair_classes_table(a: AuditResult, b: AuditResult, pairs) -> Table:
    t = Table(title="time per step by kernel class, A vs B (profiled step)", title_justify="left")
    for col in ("backend", "class", "A", "B", "A / B"):
        t.add_column(col, justify="left" if col in ("backend", "class") else "right")
    for p in pairs:
        ba = v.breakdown(a, p.a) if p.a else None
        bb = v.breakdown(b, p.b) if p.b else None
        if ba is None and bb is None:
            continue
        da = dict(ba.parts()) if ba else {}
        db = dict(bb.parts()) if bb else {}
        for klass in dict.fromkeys([*da, *db]):
            t.add_row(as_text(p.label), as_text(klass), v.fmt_us(da.get(klass)), v.fmt_us(db.get(klass)),
                      _change(da.get(klass), db.get(klass)))
    return t


def pair_kernels_table(a: AuditResult, b: AuditResult, pairs) -> Table:
    t = Table(title="kernels per step by graph, A vs B (distinct kernels / launches / time)", title_justify="left")
    for col in ("backend", "graph", "kernels A", "kernels B", "launches A", "launches B", "time A", "time B"):
        t.add_column(col, justify="left" if col in ("backend", "graph") else "right")
    for p in pairs:
        ca, cb = v.kernel_counts(a, p.a), v.kernel_counts(b, p.b)
        for graph in dict.fromkeys([*ca, *cb]):
            ra, rb = ca.get(graph, (None,) * 3), cb.get(graph, (None,) * 3)
            t.add_row(as_text(p.label), as_text(graph), v.fmt_count(ra[0]), v.fmt_count(rb[0]), v.fmt_count(ra[1]),
                      v.fmt_count(rb[1]), v.fmt_us(ra[2]), v.fmt_us(rb[2]))
    return t


def pair_regions_table(pair, top: int) -> Table | None:
    rows = pair.regions[:max(top, 0)]
    if not rows:
        return None
    more = f"; the top {len(rows)} of {len(pair.regions)}" if len(rows) < len(pair.regions) else ""
    t = Table(title=f"regions of {as_text(pair.label)}, A vs B (matched by graph, label and operators; "
                    f"largest gap first{more})", title_justify="left")
    for col in ("graph", "region", "measured A", "gap A", "measured B", "gap B", "A / B", "case A", "case B"):
        t.add_column(col, justify="left" if col in ("graph", "region", "case A", "case B") else "right",
                     overflow="fold")
    for r in rows:
        label = r.label + (f" (#{r.occurrence + 1})" if r.occurrence else "")
        t.add_row(as_text(r.graph), as_text(label),
                  v.fmt_us(r.a.time_us) if r.a else "absent", v.fmt_us(r.a.gap_us) if r.a else "",
                  v.fmt_us(r.b.time_us) if r.b else "absent", v.fmt_us(r.b.gap_us) if r.b else "",
                  v.fmt_ratio(r.change), as_text(v.case_text(r.a)) if r.a else "",
                  as_text(v.case_text(r.b)) if r.b else "")
    return t
