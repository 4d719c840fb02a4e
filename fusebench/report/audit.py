"""The HTML page of an audit (`fusebench report --run N` on an audit run), and of two audits side
by side (`fusebench compare A B` where both are audits).

An audit page: the steps of each backend; where each step's time goes, by kernel class (one bar
per backend, to one scale); the opportunities of each compiled backend, ranked by gap, as a bar
chart (measured time solid, the ideal estimate hatched) and a table; the kernels outside the
compiled graphs; every kernel; the notes and the environment.
"""
from __future__ import annotations

import json

from fusebench.audit import views as v
from fusebench.audit.result import AuditResult
from fusebench.audit.store import load, request_of
from fusebench.report import audit_figures as fig
from fusebench.report.html import environment, render_template, write
from fusebench.report.tables import Cell, Table

TOP = 20  # regions drawn and listed per backend


def _env(info: dict) -> list[dict]:
    """The run's environment, its request shown as the audit asked for."""
    audit = request_of(info).get("audit")
    return environment({**info, "request": json.dumps(audit) if isinstance(audit, dict) else None})


def _status_cell(step) -> Cell:
    if step.status == "ok":
        return Cell("ok")
    return Cell(step.status, style="color:#7d1420;font-weight:600", title=step.reason or "")


def steps_table(result: AuditResult) -> Table:
    label = v.time_label(result)
    t = Table(["backend", "status", f"{label} / step", "speedup", "wall / step", "kernels", "profiled span",
               "kernel time", "peak memory", "compile cold", "compile warm", "break-even",
               "graphs / breaks / recompiles"], numeric=set(range(2, 13)))
    baseline = result.backends[0] if result.backends else None
    for backend in dict.fromkeys([*result.backends, *(s.backend for s in result.steps)]):
        s = result.step(backend)
        if s is None:
            t.add(backend, Cell("not measured", style="color:#7d1420"), *[""] * 11)
            continue
        compiled = backend != "eager"
        even = "" if not compiled else (f"{v.fmt_count(s.break_even_steps)} steps"
                                        if s.break_even_steps is not None else "—")
        t.add(backend + (" (baseline)" if backend == baseline else ""), _status_cell(s), v.fmt_us(s.gpu_time_us),
              v.fmt_ratio(v.speedup(result, s)) if compiled else "", v.fmt_us(s.wall_us), v.fmt_count(s.kernels),
              v.fmt_us(s.profiled_us), v.fmt_us(s.kernel_time_us), v.fmt_bytes(s.peak_mem_bytes),
              v.fmt_s(s.compile_cold_s) if compiled else "", v.fmt_s(s.compile_warm_s) if compiled else "", even,
              " / ".join(v.fmt_count(x) for x in (s.graphs, s.graph_breaks, s.recompiles)) if compiled else "")
    return t


def classes_table(result: AuditResult) -> Table:
    """Each backend's time per class (µs and % of the profiled step)."""
    found = {b: v.breakdown(result, b) for b in result.backends}
    classes = list(dict.fromkeys(k for b in found.values() if b for k, _ in b.parts()))
    t = Table(["backend", *classes, "outside the compiled graphs"], numeric=set(range(1, len(classes) + 2)))
    for backend, b in found.items():
        if b is None:
            continue
        parts = dict(b.parts())
        t.add(backend, *[f"{v.fmt_us(parts[k])} ({v.fmt_pct(b.pct(parts[k]))})" if k in parts else "—"
                         for k in classes],
              f"{v.fmt_us(b.outside_us)} in {b.outside_n} kernel(s)" if b.outside_n else "—")
    return t


def opportunities_table(result: AuditResult, backend: str, top: int) -> Table:
    t = Table(["#", "region", "graph", "kernels", "bytes", "ideal (estimate)", "measured", "gap", "% of step",
               "reads / feeds", "Inductor's reasons", "fusebench case at this shape"], numeric={0, 4, 5, 6, 7, 8})
    for rank, r in enumerate(v.ranked(result, backend)[:top], 1):
        ideal = (Cell(v.fmt_us(r.ideal_us), style="font-style:italic", title="an estimate, not a measurement")
                 if r.ideal_us is not None else Cell("not available", title="no copy ceiling"))
        edges = " → ".join(x for x in (", ".join(r.after), ", ".join(r.before)) if x)
        t.add(rank, Cell(r.label, title=", ".join(r.ops)), r.graph, Cell(v.kernel_list(r.kernels),
                                                                          title="\n".join(r.kernels)),
              v.fmt_bytes(r.bytes), ideal, v.fmt_us(r.time_us), v.fmt_us(r.gap_us), v.fmt_pct(r.pct_step), edges,
              Cell(v.refusals_text(r.refusals, limit=3, width=200), title="\n".join(r.refusals)), v.case_text(r))
    return t


def outside_table(result: AuditResult) -> Table:
    t = Table(["backend", "kernel", "ATen op", "launches", "time / step", "% of step", "why"], numeric={3, 4, 5})
    for k in v.outside_kernels(result):
        step = v.step_time_us(result, k.backend)
        t.add(k.backend, k.name, k.op or "—", v.fmt_count(k.launches), v.fmt_us(k.time_us),
              v.fmt_pct(100 * k.time_us / step) if step and k.time_us is not None else "—", k.outside or "not named")
    return t


def kernels_table(result: AuditResult, backend: str) -> Table:
    t = Table(["graph", "kernel", "class", "kind", "ATen op", "launches", "time / step", "bytes", "GB/s",
               "% of copy", "TFLOP/s", "% of matmul", "region", "fused nodes"], numeric=set(range(5, 13)))
    for k in sorted(v.kernels_of(result, backend), key=lambda k: -(k.time_us or 0)):
        source = f" ({k.bytes_source})" if k.bytes is not None and k.bytes_source else ""
        pct = (lambda x: v.fmt_pct(100 * x) if x is not None else "—")
        t.add(k.graph, k.name, k.klass, k.kind or "", k.op or "", v.fmt_count(k.launches), v.fmt_us(k.time_us),
              v.fmt_bytes(k.bytes) + source, v.fmt_count(k.gbps), pct(k.pct_copy), v.fmt_count(k.tflops),
              pct(k.pct_matmul), "" if k.region is None else k.region,
              Cell(", ".join(k.nodes[:6]) + (f" … ({len(k.nodes)})" if len(k.nodes) > 6 else ""),
                   title=", ".join(k.nodes)))
    return t


def class_figure(rows: list[tuple[str, AuditResult, str | None]], title: str) -> str:
    """A bar per row: (label, audit, backend)."""
    drawn = []
    for label, result, backend in rows:
        step = result.step(backend) if backend else None
        status = "not measured" if step is None else step.status
        drawn.append((label, v.breakdown(result, backend) if backend else None, status))
    first = rows[0][1]
    return fig.class_bars(drawn, title, v.time_label(first) + " per step")


def audit_context(result: AuditResult, info: dict, top: int = TOP) -> dict:
    opportunities = []
    for backend in result.backends:
        regions = v.ranked(result, backend)
        if not regions:
            continue
        shown = regions[:top]
        opportunities.append({
            "backend": backend, "summary": v.regions_summary(result, backend), "shown": len(shown),
            "total": len(regions), "table": opportunities_table(result, backend, top),
            "figure": fig.gap_bars(shown, f"{backend}: memory-bound regions ranked by gap (top {len(shown)})",
                                   v.step_time_us(result, backend))})
    kpis = []
    for s in result.steps:
        ratio = v.speedup(result, s)
        kpis.append({"value": v.fmt_us(s.gpu_time_us) if s.status == "ok" else s.status,
                     "label": f"{s.backend}" + (f" · {v.fmt_ratio(ratio)} the baseline" if ratio else "")})
    return {
        "headline": v.headline(result, info.get("id"), info.get("device_name")),
        "ceilings": v.ceilings_line(result), "result": result, "kpis": kpis, "steps": steps_table(result),
        "class_figure": (class_figure([(b, result, b) for b in result.backends],
                                      "where the step's time goes, by kernel class (profiled step)")
                         if any(v.kernels_of(result, b) for b in result.backends) else None),
        "classes": classes_table(result), "opportunities": opportunities, "outside": outside_table(result),
        "kernels": [{"backend": b, "table": kernels_table(result, b), "n": len(v.kernels_of(result, b))}
                    for b in result.backends if v.kernels_of(result, b)],
        "notes": v.notes(result), "environment": _env(info), "time_label": v.time_label(result),
    }


def render_audit_report(store, run_id: int, out_path: str, top: int = TOP) -> str:
    """Write the page of audit run `run_id` and return the path written."""
    info = store.run_info(run_id)
    result = load(store, run_id)
    html = render_template("audit.html.j2", title=f"fusebench audit — {result.model} · run {run_id}",
                           db=store.path, info=info, **audit_context(result, info, top))
    return write(out_path, html)


# ------------------------------------------------------------------------------------------------
# two audits


def pair_steps_table(a: AuditResult, b: AuditResult, pairs) -> Table:
    t = Table(["backend", "time A", "time B", "A / B", "wall A", "wall B", "peak memory A", "peak memory B",
               "compile cold A", "compile cold B", "kernels A", "kernels B"], numeric=set(range(1, 12)))
    for p in pairs:
        sa, sb = (a.step(p.a) if p.a else None), (b.step(p.b) if p.b else None)

        def side(s, attr, fmt):
            if s is None:
                return "—"
            return s.status if s.status != "ok" and getattr(s, attr) is None else fmt(getattr(s, attr))

        ta, tb = (sa.gpu_time_us if sa else None), (sb.gpu_time_us if sb else None)
        t.add(p.label, side(sa, "gpu_time_us", v.fmt_us), side(sb, "gpu_time_us", v.fmt_us),
              v.fmt_ratio(ta / tb) if ta and tb else "—", side(sa, "wall_us", v.fmt_us), side(sb, "wall_us", v.fmt_us),
              side(sa, "peak_mem_bytes", v.fmt_bytes), side(sb, "peak_mem_bytes", v.fmt_bytes),
              side(sa, "compile_cold_s", v.fmt_s), side(sb, "compile_cold_s", v.fmt_s),
              side(sa, "kernels", v.fmt_count), side(sb, "kernels", v.fmt_count))
    return t


def pair_kernels_table(a: AuditResult, b: AuditResult, pairs) -> Table:
    t = Table(["backend", "graph", "kernels A", "kernels B", "launches A", "launches B", "time A", "time B"],
              numeric=set(range(2, 8)))
    for p in pairs:
        ca, cb = v.kernel_counts(a, p.a), v.kernel_counts(b, p.b)
        for graph in dict.fromkeys([*ca, *cb]):
            ra, rb = ca.get(graph, (None,) * 3), cb.get(graph, (None,) * 3)
            t.add(p.label, graph, v.fmt_count(ra[0]), v.fmt_count(rb[0]), v.fmt_count(ra[1]), v.fmt_count(rb[1]),
                  v.fmt_us(ra[2]), v.fmt_us(rb[2]))
    return t


def pair_regions_table(pair, top: int) -> Table:
    t = Table(["graph", "region", "measured A", "ideal A (estimate)", "gap A", "measured B", "ideal B (estimate)",
               "gap B", "A / B", "case A", "case B"], numeric=set(range(2, 9)))
    for r in pair.regions[:top]:
        label = r.label + (f" (#{r.occurrence + 1})" if r.occurrence else "")
        sides = []
        for x in (r.a, r.b):
            sides += ([v.fmt_us(x.time_us), v.fmt_us(x.ideal_us), v.fmt_us(x.gap_us)] if x is not None
                      else [Cell("absent", style="color:#7d1420"), "", ""])
        t.add(r.graph, Cell(label, title=", ".join(r.ops)), *sides, v.fmt_ratio(r.change),
              v.case_text(r.a) if r.a else "", v.case_text(r.b) if r.b else "")
    return t


def render_audit_compare(store_a, run_a: int, store_b, run_b: int, out_path: str, top: int = TOP) -> str:
    """Write the page of audit B against audit A and return the path written."""
    info_a, info_b = store_a.run_info(run_a), store_b.run_info(run_b)
    a, b = load(store_a, run_a), load(store_b, run_b)
    v.check_comparable(a, b, run_a, run_b)
    pairs = v.pair_backends(a, b)
    rows = []
    for p in pairs:
        rows += [(f"{p.label} · A", a, p.a), (f"{p.label} · B", b, p.b)]
    regions = []
    for p in pairs:
        if not p.regions:
            continue
        shown = p.regions[:top]
        regions.append({"label": p.label, "shown": len(shown), "total": len(p.regions),
                        "figure": fig.paired_region_bars(shown, f"{p.label}: regions of A and B (largest gap first)"),
                        "table": pair_regions_table(p, top)})
    html = render_template(
        "audit_compare.html.j2", title=f"fusebench audit comparison — run {run_a} vs run {run_b}",
        a={"run": run_a, "db": store_a.path, "headline": v.headline(a, run_a, info_a.get("device_name"))},
        b={"run": run_b, "db": store_b.path, "headline": v.headline(b, run_b, info_b.get("device_name"))},
        differences=v.differences(a, b, info_a, info_b), steps=pair_steps_table(a, b, pairs),
        class_figure=class_figure(rows, "where each step's time goes, A and B (profiled step, one scale)"),
        kernels=pair_kernels_table(a, b, pairs), regions=regions,
        notes_a=v.notes(a), notes_b=v.notes(b), env_a=_env(info_a), env_b=_env(info_b))
    return write(out_path, html)
