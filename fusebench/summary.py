"""The terminal summary of a run: per case, each implementation's time and speedup over eager."""
from __future__ import annotations

import pandas as pd
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from fusebench.util import plain

STATUS_STYLE = {"ok": "green", "mismatch": "bold red", "error": "red", "crashed": "bold red",
                "timeout": "red", "oom": "yellow", "skipped": "dim", "unsupported": "dim"}


def _t(value) -> str:
    """Text from a store, for a markup string or a Table: control characters replaced, markup escaped."""
    return escape(plain(value))


def _status(status) -> str:
    """A status, styled when it is one fusebench writes (a store can hold anything)."""
    style = STATUS_STYLE.get(status)
    return f"[{style}]{_t(status)}[/]" if style else _t(status)


def _fmt_time(us: float) -> str:
    if us >= 1e6:
        return f"{us / 1e6:.2f} s"
    if us >= 1e3:
        return f"{us / 1e3:.2f} ms"
    return f"{us:.1f} µs"


def cell_text(row, base_time: float | None) -> str:
    status = row.status
    if status != "ok":
        return _status(status)
    if pd.isna(row.time_us):
        return "[green]ok[/] (no timing)"
    text = _fmt_time(row.time_us)
    if base_time and row.impl != "eager":
        speedup = base_time / row.time_us
        color = "green" if speedup >= 1.05 else "red" if speedup < 0.95 else ""
        text += f" [{color}]{speedup:.2f}×[/]" if color else f" {speedup:.2f}×"
    return text


def accuracy_text(rows: pd.DataFrame) -> str:
    """Worst error over the row's implementations, as a fraction of the tolerance (<= 1 passes)."""
    checked = rows.dropna(subset=["tol_ratio"])
    if checked.empty:
        return ""
    worst = checked.loc[checked.tol_ratio.idxmax()]
    failed = (rows.status == "mismatch").sum()
    text = f"worst {worst.tol_ratio:.2g}×tol ({_t(worst.impl)})"
    return f"[bold red]{failed} mismatch[/], {text}" if failed else text


def print_summary(df: pd.DataFrame, console: Console) -> None:
    if df.empty:
        console.print("no cells")
        return
    impls = list(dict.fromkeys(df.impl))
    for case_name, cdf in df.groupby("case_name", sort=False):
        t = Table(title=_t(case_name), title_justify="left", caption_justify="left")
        t.add_column("shape")
        t.add_column("dtype")
        # Columns for the implementations that apply to this case; the rest are listed below.
        case_impls = [i for i in impls if (cdf[cdf.impl == i].status != "unsupported").any()]
        for i in case_impls:
            t.add_column(_t(i), justify="right")
        t.add_column("accuracy", justify="right")
        for (shape, dtype), sdf in cdf.groupby(["shape", "dtype"], sort=False):
            by_impl = {r.impl: r for r in sdf.itertuples()}
            eager = by_impl.get("eager")
            base = eager.time_us if eager is not None and eager.status == "ok" and not pd.isna(eager.time_us) else None
            t.add_row(_t(shape), _t(dtype), *[cell_text(by_impl[i], base) if i in by_impl else "" for i in case_impls],
                      accuracy_text(sdf))
        console.print(t)
    counts = df.status.value_counts()
    console.print("cells: " + ", ".join(f"{_status(k)} {v}" for k, v in counts.items()))
    console.print("time: median per call (CUDA events, L2 flushed) on the GPU, host time on the CPU; "
                  "× = speedup over eager")
    problems = df[~df.status.isin(["ok"])]
    if len(problems):
        console.print("not measured, and why:")
        grouped = problems.groupby(["status", "reason"], dropna=False, sort=False)
        for (status, reason), g in grouped:
            where = _t(", ".join(sorted(set(g.impl))))
            cases = sorted(set(g.case_name))
            scope = _t(", ".join(cases)) if len(cases) <= 3 else f"{len(cases)} cases"
            console.print(f"  {_status(status)} {where} ({scope}; {len(g)} cells): "
                          f"{_t(reason)}", highlight=False)
