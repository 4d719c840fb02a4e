"""A comparison of two runs as text: a table for the terminal, JSON for machines, markdown for a
pull-request comment.  The HTML page (report/compare.py) is the long form of the same judgement.

Each form says: which runs, how run B's times were normalised (or why not), whether the runs
could be judged, per case and implementation the geometric mean of time(A) / time(B), the real
regressions and improvements, and the cells that newly fail or were fixed.
"""
from __future__ import annotations

import json
import math

import pandas as pd

from fusebench.report.compare import CompareResult

FORMATS = ("table", "json", "markdown")
JSON_FORMAT = "fusebench-compare"
JSON_VERSION = 1
LIST_LIMIT = 20  # regressions and improvements listed in the table and the markdown


def verdict(result: CompareResult, fail_above: float | None) -> tuple[int, str]:
    """(exit status, one line): 0 passed or not asked, 1 a real regression above `fail_above` or a
    newly failing cell, 3 not judged (a run's machine changed speed while it measured)."""
    if fail_above is None:
        return 0, "no threshold given (--fail-above): nothing judged"
    if result.refused:
        return 3, f"not judged: {result.refused}"
    real = result.real_regressions(fail_above)
    if len(real) or len(result.new_failures):
        return 1, (f"--fail-above {fail_above:g}: {len(real)} cell(s) regressed outside the noise, "
                   f"{len(result.new_failures)} newly failing")
    return 0, f"--fail-above {fail_above:g}: no cell regressed by more than {fail_above:g}% outside the noise"


def _groups(result: CompareResult) -> pd.DataFrame:
    """Per case, implementation and dtype: shapes timed in both, geomean of time(A) / time(B),
    real regressions and improvements."""
    cells = result.cells
    rows = []
    for (case, impl, dtype), part in cells.groupby(["case_name", "impl", "dtype"], sort=False):
        timed = part[part["ratio"] > 0]
        real = part["real"].fillna(False).astype(bool)
        geo = float(math.exp(timed["ratio"].map(math.log).mean())) if len(timed) else None
        rows.append(dict(case=case, impl=impl, dtype=dtype, shapes=len(timed), of=len(part), geomean=geo,
                         regressed=int((real & (part["regression_pct"] > 0)).sum()),
                         improved=int((real & (part["regression_pct"] < 0)).sum())))
    return pd.DataFrame(rows, columns=["case", "impl", "dtype", "shapes", "of", "geomean", "regressed", "improved"])


def _changes(result: CompareResult, sign: int) -> pd.DataFrame:
    real = result.cells[result.cells["real"].fillna(False).astype(bool)]
    part = real[real["regression_pct"] * sign > 0]
    return part.sort_values("regression_pct", ascending=sign < 0)


def _cell_record(r) -> dict:
    def number(v):
        return None if v is None or (isinstance(v, float) and not math.isfinite(v)) else float(v)

    return {"case": r["case_name"], "impl": r["impl"], "shape": r["shape"], "dtype": r["dtype"],
            "time_a_us": number(r.get("time_a")), "time_b_us": number(r.get("time_b")),
            "slower_by_pct": number(r["regression_pct"]),  # negative: faster
            "interval": [number(r.get("change_lo")), number(r.get("change_hi"))],
            "method": r.get("change_method"), "real": bool(r.get("real"))}


def to_json(result: CompareResult, fail_above: float | None = None) -> dict:
    code, line = verdict(result, fail_above)
    norm = result.normalization
    return {
        "format": JSON_FORMAT, "version": JSON_VERSION,
        "run_a": result.labels.get("A"), "run_b": result.labels.get("B"),
        "normalization": {"applied": norm.applied, "factor": norm.factor, "range": [norm.lo, norm.hi],
                          "workloads": norm.workloads, "note": norm.note},
        "refused": result.refused, "notes": result.notes, "min_change_pct": result.min_change_pct,
        "matched": result.matched, "only_a": result.only_a, "only_b": result.only_b,
        "geomean_a_over_b": result.geomean_speedup, "geomean_a_over_b_as_measured": result.geomean_as_measured,
        "max_regression_pct": result.max_regression_pct,
        "max_real_regression_pct": result.max_real_regression_pct,
        "groups": json.loads(_groups(result).to_json(orient="records")),
        "regressions": [_cell_record(r) for _, r in _changes(result, 1).iterrows()],
        "improvements": [_cell_record(r) for _, r in _changes(result, -1).iterrows()],
        "new_failures": [{"case": r["case_name"], "impl": r["impl"], "shape": r["shape"], "dtype": r["dtype"],
                          "status_a": r["status_a"], "status_b": r["status_b"]}
                         for _, r in result.new_failures.iterrows()],
        "verdict": {"fail_above": fail_above, "exit_status": code, "text": line},
    }


def _ratio(v) -> str:
    return "—" if v is None or not (v > 0) else f"{v:.3f}×"


def _header_lines(result: CompareResult) -> list[str]:
    a, b = result.labels.get("A", {}), result.labels.get("B", {})
    lines = [f"A: run {a.get('run')} · {a.get('what', '')}", f"B: run {b.get('run')} · {b.get('what', '')}"]
    norm = result.normalization
    lines.append(f"normalised: {norm.note}" if norm.applied else "not normalised: times compared as measured")
    lines += [f"note: {n}" for n in result.notes]
    if result.refused:
        lines.append(f"NOT JUDGED: {result.refused}")
    geo = _ratio(result.geomean_speedup)
    if norm.applied:
        geo += f" normalised, {_ratio(result.geomean_as_measured)} as measured"
    lines.append(f"{result.matched} cells timed in both runs; geomean time(A) / time(B) {geo} (above 1: B "
                 f"faster); largest real regression {result.max_real_regression_pct:.1f}% (changes under "
                 f"{result.min_change_pct:g}% are not called changes); {len(result.new_failures)} newly failing; "
                 f"{result.only_a} only in A, {result.only_b} only in B")
    return lines


def _change_rows(result: CompareResult) -> list[list[str]]:
    rows = []
    for sign, word in ((1, "slower"), (-1, "faster")):
        for _, r in _changes(result, sign).head(LIST_LIMIT).iterrows():
            pct = abs(r["regression_pct"])
            rows.append([r["case_name"], r["impl"], r["dtype"], r["shape"], f"{pct:.1f}% {word}",
                         f"{r['change_lo']:.3f}-{r['change_hi']:.3f}"])
    return rows


def print_table(result: CompareResult, console, fail_above: float | None = None) -> None:
    from rich.table import Table

    from fusebench.util import as_text

    for line in _header_lines(result):
        console.print(as_text(line), highlight=False)
    groups = _groups(result)
    t = Table(title="per case and implementation", title_justify="left")
    for col, just in (("case", "left"), ("impl", "left"), ("dtype", "left"), ("shapes", "right"),
                      ("time(A) / time(B)", "right"), ("real regressions", "right"), ("real improvements", "right")):
        t.add_column(col, justify=just)
    for g in groups.itertuples():
        t.add_row(as_text(g.case), as_text(g.impl), as_text(g.dtype), f"{g.shapes} / {g.of}", _ratio(g.geomean),
                  str(g.regressed), str(g.improved))
    console.print(t)
    rows = _change_rows(result)
    if rows:
        t = Table(title="changes outside the noise (B against A, worst first)", title_justify="left")
        for col in ("case", "impl", "dtype", "shape", "change", "B / A within"):
            t.add_column(col)
        for row in rows:
            t.add_row(*[as_text(x) for x in row])
        console.print(t)
    for _, r in result.new_failures.iterrows():
        console.print(as_text(f"newly failing: {r['case_name']} {r['impl']} {r['shape']} {r['dtype']} "
                              f"({r['status_a']} -> {r['status_b']})"), highlight=False)
    if not result.refused:  # the header said why it is not judged
        console.print(as_text(verdict(result, fail_above)[1]), highlight=False)


def _md_escape(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown(result: CompareResult, fail_above: float | None = None) -> str:
    a, b = result.labels.get("A", {}), result.labels.get("B", {})
    code, line = verdict(result, fail_above)
    mark = {0: "passed" if fail_above is not None else "not judged", 1: "failed", 3: "not judged"}[code]
    out = [f"### fusebench compare: run {a.get('run')} → run {b.get('run')} ({mark})", "",
           f"**{_md_escape(line)}**", ""]
    out += [f"- {_md_escape(x)}" for x in _header_lines(result)]
    out += ["", "| case | impl | dtype | shapes | time(A) / time(B) | real regressions | real improvements |",
            "|---|---|---|---:|---:|---:|---:|"]
    for g in _groups(result).itertuples():
        out.append(f"| {_md_escape(g.case)} | {_md_escape(g.impl)} | {g.dtype} | {g.shapes} / {g.of} | "
                   f"{_ratio(g.geomean)} | {g.regressed} | {g.improved} |")
    rows = _change_rows(result)
    if rows:
        out += ["", "Changes outside the noise (worst first):", "",
                "| case | impl | dtype | shape | change | B / A within |", "|---|---|---|---|---:|---|"]
        out += ["| " + " | ".join(_md_escape(x) for x in row) + " |" for row in rows]
    if len(result.new_failures):
        out += ["", "Newly failing:", ""]
        out += [f"- {_md_escape(r['case_name'])} {_md_escape(r['impl'])} {r['shape']} {r['dtype']}: "
                f"{r['status_a']} → {r['status_b']}" for _, r in result.new_failures.iterrows()]
    return "\n".join(out) + "\n"
