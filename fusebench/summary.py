"""The terminal summary of a run: per case, each implementation's time, spread, speedup over the
baseline and % of the case's ceiling; then which implementation is fastest, and why cells were
not measured (once per implementation).

Marks: `!` after a spread above 10% (too noisy to trust); `L!` a cell timed while the CPU was busy
(measure/load.py); a % of the ceiling in red with `?` beyond what a ceiling allows (a disturbed
measurement, report.judge.beyond_ceiling); `mismatch` with its time (a wrong answer, timed anyway);
`N×eager's error` in the accuracy column where an implementation errs more than
BASELINE_ERROR_FACTOR times eager does on the same inputs."""
from __future__ import annotations

from collections import Counter

import pandas as pd
from rich.console import Console
from rich.table import Table

from fusebench.impls.ceiling import ceiling_for
from fusebench.measure.accuracy import BASELINE_ERROR_FACTOR
from fusebench.measure.timing import NOISY_SPREAD
from fusebench.report.judge import beyond_ceiling, cell_spread, ceiling_pct, is_ceiling, is_noisy, launch_bound
from fusebench.util import as_text
from fusebench.runner.modes import mode_label

STATUS_STYLE = {"ok": "green", "mismatch": "bold red", "error": "red", "crashed": "bold red",
                "timeout": "red", "oom": "yellow", "skipped": "dim", "unsupported": "dim"}



def _status(status) -> str:
    """A status as markup: its colour where it is a known one, the text escaped either way."""
    style, text = STATUS_STYLE.get(status), as_text(status)
    return f"[{style}]{text}[/]" if style else text

def _fmt_time(us: float) -> str:
    if us >= 1e6:
        return f"{us / 1e6:.2f} s"
    if us >= 1e3:
        return f"{us / 1e3:.2f} ms"
    return f"{us:.1f} µs"


def _timed(row) -> bool:
    return row is not None and row.status == "ok" and not pd.isna(row.time_us)


def under_load(row) -> bool:
    v = getattr(row, "under_load", None)
    return v is not None and not pd.isna(v) and bool(v)


def impossible(row, ceiling) -> bool:
    """A % of the ceiling beyond what a ceiling allows (report.judge.beyond_ceiling)."""
    if not (_timed(row) and _timed(ceiling)):
        return False
    return beyond_ceiling(ceiling_pct(row.time_us, ceiling.time_us), cell_spread(row), cell_spread(ceiling))


def _spread_text(row) -> str:
    s = cell_spread(row)
    if s is None:
        return ""
    text = f"±{s * 100:.0f}%"
    return f" [yellow]{text}![/]" if is_noisy(s) else f" [dim]{text}[/]"


def cell_text(row, base=None, ceiling=None, role: str = "") -> str:
    """One table cell: time and spread; for an implementation also its speedup over the baseline,
    its % of the ceiling and, where wall time turns the verdict, the wall-time speedup."""
    status = row.status
    if status == "mismatch" and not pd.isna(row.time_us):  # wrong, and timed anyway: both verdicts
        return f"{_status(status)} [dim]{_fmt_time(row.time_us)}[/]"
    if status != "ok":
        return _status(status)
    if pd.isna(row.time_us):
        return "[green]ok[/] (no timing)"
    text = _fmt_time(row.time_us) + _spread_text(row) + (" [yellow]L![/]" if under_load(row) else "")
    if role == "ceiling":  # a bound, not a competitor: its time alone
        return text
    if role != "baseline" and _timed(base):
        speedup = base.time_us / row.time_us
        color = "green" if speedup >= 1.05 else "red" if speedup < 0.95 else ""
        text += f" [{color}]{speedup:.2f}×[/]" if color else f" {speedup:.2f}×"
        if launch_bound(row, base):
            text += f" [magenta]wall {base.wall_time_us / row.wall_time_us:.2f}×[/]"
    if _timed(ceiling):
        pct = ceiling_pct(row.time_us, ceiling.time_us)
        text += f" [bold red]{pct:.0f}%?[/]" if impossible(row, ceiling) else f" [cyan]{pct:.0f}%[/]"
    return text


def accuracy_text(rows: pd.DataFrame) -> str:
    """Worst error over the row's implementations, as a fraction of the tolerance (<= 1 passes)."""
    checked = rows.dropna(subset=["tol_ratio"])
    if checked.empty:
        return ""
    worst = checked.loc[checked.tol_ratio.idxmax()]
    failed = (rows.status == "mismatch").sum()
    tf32 = "tolerance" in rows and (rows["tolerance"] == "tf32").any()
    text = f"worst {worst.tol_ratio:.2g}×tol ({as_text(worst.impl)})" + (" [dim]TF32 tol[/]" if tf32 else "")
    if "err_vs_eager" in rows:
        worse = rows[rows["err_vs_eager"] > BASELINE_ERROR_FACTOR]
        if len(worse):
            w = worse.loc[worse["err_vs_eager"].idxmax()]
            text += f", [magenta]{as_text(w.impl)} {w.err_vs_eager:.3g}×eager's error[/]"
    return f"[bold red]{failed} mismatch[/], {text}" if failed else text


def fastest(cdf: pd.DataFrame) -> Counter:
    """Per (shape, dtype), the implementation (not a ceiling) with the lowest time."""
    ok = cdf[(cdf.status == "ok") & cdf.time_us.notna() & ~cdf.impl.map(is_ceiling)]
    wins: Counter = Counter()
    for _, sdf in ok.groupby(["shape", "dtype"], sort=False):
        if len(sdf) > 1:
            wins[sdf.loc[sdf.time_us.idxmin(), "impl"]] += 1
    return wins


def _mode(df: pd.DataFrame, cdf: pd.DataFrame) -> str:
    """The mode of a case's cells: the cells' own column, else the run's (df.attrs)."""
    if "mode" in cdf.columns:
        modes = cdf["mode"].dropna().unique()
        if len(modes):
            return str(modes[0])
    return str(df.attrs.get("mode") or "fwd")


def print_summary(df: pd.DataFrame, console: Console, baseline: str = "eager") -> None:
    if df.empty:
        console.print("no cells")
        return
    impls = list(dict.fromkeys(df.impl))
    noisy = launch = loaded = beyond = 0
    for case_name, cdf in df.groupby("case_name", sort=False):
        ceiling = ceiling_for(case_name)
        t = Table(title=as_text(case_name + mode_label(_mode(df, cdf))), title_justify="left",
                  caption_justify="left")
        t.add_column("shape")
        t.add_column("dtype")
        # Columns for the implementations that ran here; those unsupported throughout are listed below.
        case_impls = [i for i in impls if (cdf[cdf.impl == i].status != "unsupported").any()]
        for i in case_impls:
            role = " (baseline)" if i == baseline else " (ceiling)" if is_ceiling(i) else ""
            t.add_column(as_text(i) + role, justify="right")
        t.add_column("accuracy", justify="right")
        for (shape, dtype), sdf in cdf.groupby(["shape", "dtype"], sort=False):
            by_impl = {r.impl: r for r in sdf.itertuples()}
            base, ceil = by_impl.get(baseline), by_impl.get(ceiling) if ceiling else None
            cells = []
            for i in case_impls:
                row = by_impl.get(i)
                if row is None:
                    cells.append("")
                    continue
                role = "baseline" if i == baseline else "ceiling" if is_ceiling(i) else ""
                cells.append(cell_text(row, base, ceil, role))
                if _timed(row):
                    noisy += is_noisy(cell_spread(row))
                    launch += bool(not role and _timed(base) and launch_bound(row, base))
                    loaded += under_load(row)
                    beyond += bool(not role and impossible(row, ceil))
            t.add_row(as_text(shape), as_text(dtype), *cells, accuracy_text(sdf))
        wins = fastest(cdf)
        if wins:
            n = sum(wins.values())
            t.caption = "fastest: " + ", ".join(f"{as_text(i)} at {k} of {n}" for i, k in wins.most_common())
        console.print(t)
    counts = df.status.value_counts()
    console.print("cells: " + ", ".join(f"{_status(k)} {v}"
                                        for k, v in counts.items()))
    device = "the GPU" if (df.device.astype(str).str.startswith("cuda")).any() else "the CPU"
    console.print(f"time: median per call on {device} "
                  f"({'CUDA events, L2 flushed' if device == 'the GPU' else 'host time'}), ±: spread "
                  f"(IQR / median of the repetitions; [yellow]![/] above {NOISY_SPREAD:.0%}: too noisy to trust); "
                  f"×: speedup over {as_text(baseline)}; [cyan]%[/]: of the case's ceiling "
                  f"(memcpy or torch-mm, same run)", highlight=False)
    if noisy:
        console.print(f"[yellow]{noisy} cell(s) too noisy to trust[/] (spread above {NOISY_SPREAD:.0%}): "
                      f"a quieter machine or a rerun is needed before reading them", highlight=False)
    if launch:
        console.print(f"[magenta]{launch} launch-bound cell(s)[/]: faster than {as_text(baseline)} on the "
                      f"device but slower from Python (wall-time speedup shown)", highlight=False)
    if loaded:
        console.print("[yellow]L![/]: timed while the CPU was busy (other work held it): the time may be "
                      "inflated", highlight=False)
    if beyond:
        console.print(f"[bold red]{beyond} cell(s) above the ceiling by more than a ceiling allows (%?)[/]: the "
                      f"ceiling or the cell was disturbed while timed; not a result", highlight=False)
    timed_wrong = df[(df.status == "mismatch") & df.time_us.notna()] if "time_us" in df else df.iloc[:0]
    if len(timed_wrong):
        console.print(f"[bold red]{len(timed_wrong)} mismatch cell(s)[/] were timed anyway (time shown dim): "
                      f"a wrong answer's time is not a result", highlight=False)
    if baseline not in set(df.impl):
        console.print(f"no {as_text(baseline)} cells in this run: no speedups to show", highlight=False)
    _print_problems(df, console)
    for line in df.attrs.get("warnings") or []:
        console.print(f"[yellow]warning:[/] {as_text(line)}", highlight=False)
    skipped = df.attrs.get("not_planned") or {}
    if skipped:
        console.print("not run here (name one with --impl to run it anyway):", highlight=False)
        by_reason: dict[str, list[str]] = {}
        for name, reason in skipped.items():
            by_reason.setdefault(reason, []).append(name)
        for reason, names in by_reason.items():
            console.print(f"  {as_text(', '.join(names))}: {as_text(reason)}", highlight=False)


def _print_problems(df: pd.DataFrame, console: Console) -> None:
    """Why cells were not measured: `unsupported` once per implementation, the rest by reason."""
    problems = df[df.status != "ok"]
    if not len(problems):
        return
    console.print("not measured, and why:")
    unsupported = problems[problems.status == "unsupported"]
    for impl, g in unsupported.groupby("impl", sort=False):
        reasons = Counter(g.reason.fillna(""))
        reason, _ = reasons.most_common(1)[0]
        more = f" (and {len(reasons) - 1} other reason(s))" if len(reasons) > 1 else ""
        console.print(f"  [dim]unsupported[/] {as_text(impl)} ({len(g)} cells): {as_text(reason)}{more}",
                      highlight=False)
    grouped = problems[problems.status != "unsupported"].groupby(["status", "reason"], dropna=False, sort=False)
    for (status, reason), g in grouped:
        where = ", ".join(sorted(set(g.impl)))
        cases = sorted(set(g.case_name))
        scope = ", ".join(cases) if len(cases) <= 3 else f"{len(cases)} cases"
        console.print(f"  {_status(status)} {as_text(where)} "
                      f"({as_text(scope)}; {len(g)} cells): {as_text(str(reason))}", highlight=False)
