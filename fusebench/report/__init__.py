"""Reports: heatmaps over shape grids, a self-contained HTML page per run, comparisons of two runs,
and exports of the stored cells.

    render_report(store, run_id, "report.html", pairs=[("inductor", "eager")])
    result = render_compare(store, 3, store, 5, "compare.html"); result.max_regression_pct
    export(store.cells(run_id), "csv", "cells.csv")
"""
from fusebench.report.compare import CompareResult, render_compare
from fusebench.report.export import FORMATS, ExportError, export
from fusebench.report.html import render_report

__all__ = ["CompareResult", "ExportError", "FORMATS", "export", "parse_pair", "render_compare",
           "render_report"]


def parse_pair(text: str) -> tuple[str, str]:
    """'inductor/eager' -> ('inductor', 'eager'): the implementation, then its baseline."""
    impl, sep, base = text.partition("/")
    if not sep or not impl.strip() or not base.strip() or "/" in base:
        raise ValueError(f"malformed pair {text!r}: expected IMPL/BASELINE, e.g. inductor/eager")
    return impl.strip(), base.strip()
