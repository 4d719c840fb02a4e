"""The subcommands that read results stores: results, overhead, report, compare, runs, merge,
standing.  A store they only read is opened read-only."""
from __future__ import annotations

from typing import List, Optional

import typer
from rich.markup import escape
from rich.table import Table

from fusebench.commands import audit as audit_hooks
from fusebench.commands.common import (BASELINE_HELP, bad_input_is_exit_2, check_baseline, comma_list, err, fail,
                                       out, parse_run_ids)
from fusebench.util import as_text, plain


@bad_input_is_exit_2
def results(
    run_id: Optional[int] = typer.Option(None, "--run", help="Run ID (default: the latest)."),
    db: Optional[str] = typer.Option(None, help="Results database."),
    format: str = typer.Option("table", "--format", help="table | csv | json | parquet"),
    output: Optional[str] = typer.Option(None, "-o", "--output", help="Write to this file instead of stdout."),
    baseline: str = typer.Option("eager", help=BASELINE_HELP),
    describe: bool = typer.Option(False, "--describe", help="Print what each exported column means and exit."),
):
    """Print or export the cells of a run."""
    import fusebench
    from fusebench.summary import print_summary

    if describe:
        from fusebench.report.columns import render_text

        t = Table(title="result columns (docs/columns.md)", title_justify="left")
        t.add_column("column", no_wrap=True)
        t.add_column("meaning", overflow="fold")
        for name, text in render_text():
            t.add_row(escape(name), escape(text))
        out.print(t)
        return
    if format not in ("table", "csv", "json", "parquet"):
        fail(f"unknown format {format!r}; choose table, csv, json or parquet")
    if audit_hooks.results_hook(run_id, db, format, output):  # an audit run prints and exports its own way
        return
    check_baseline(baseline)
    df = fusebench.results(run_id, db)
    if format == "table":
        print_summary(df, out, baseline=baseline)
        return
    from fusebench.report.export import export

    export(df, format, output)


@bad_input_is_exit_2
def overhead(
    store: Optional[str] = typer.Argument(None, metavar="STORE", help="Results database (default ./fusebench.db "
                                          "or $FUSEBENCH_DB)."),
    run_id: Optional[int] = typer.Option(None, "--run", help="Run ID (default: the latest)."),
    db: Optional[str] = typer.Option(None, help="Results database (the same as STORE)."),
    fail_: bool = typer.Option(False, "--fail", help="Exit 1 if triton misses the rule at any cell."),
):
    """Host overhead per kernel: GPU time, wall time per call back to back, and their difference.

    Whether triton meets wall_time <= max(1.1x its GPU time, eager's wall time), per cell; --fail: exit 1 on a miss."""
    from fusebench.report.overhead import fmt_us, overhead_rows, summary_line, verdicts
    from fusebench.store import Store, default_db_path

    if store and db and store != db:
        fail(f"two stores given ({store} and --db {db}): give one")
    with Store.open(store or db or default_db_path(), create=False) as st:  # read-only
        rid = run_id if run_id is not None else st.latest_run()
        rows = overhead_rows(st.cells(rid))
    found = verdicts(rows)
    rule = {(v.case, v.shape, v.dtype): v for v in found}
    on_gpu = (rows["device"] == "cuda").any() or rows.empty
    gpu = "GPU time" if on_gpu else "time (host: a CPU run)"
    t = Table(title=f"host overhead per call, run {rid} ({gpu}: the call's {'GPU ' if on_gpu else ''}work; wall "
                    f"time: per call, back to back, as a Python caller pays it)", title_justify="left")
    for col, just in (("case", "left"), ("shape", "left"), ("dtype", "left"), ("impl", "left"), (gpu, "right"),
                      ("wall time", "right"), ("host overhead", "right"), ("triton's rule", "left")):
        t.add_column(col, justify=just, overflow="fold")
    for r in rows.itertuples(index=False):
        verdict = rule.get((r.case_name, r.shape, r.dtype)) if r.impl == "triton" else None
        rule_text = as_text(verdict.text()) if verdict else ""
        if verdict is not None and verdict.meets is False:
            rule_text = f"[red]{rule_text}[/]"
        if r.why:
            times = (as_text(f"not available: {r.why}"), "", "")
        else:
            times = (fmt_us(r.time_us), fmt_us(r.wall_time_us), fmt_us(r.overhead_us))
        t.add_row(as_text(r.case_name), as_text(r.shape), as_text(r.dtype), as_text(r.impl), *times, rule_text)
    out.print(t)
    out.print(plain(summary_line(found)), markup=False, highlight=False, soft_wrap=True)
    if fail_ and any(v.meets is False for v in found):
        raise typer.Exit(1)


@bad_input_is_exit_2
def report(
    run_id: Optional[str] = typer.Option(None, "--run", help="Run ID (default: the latest); several, e.g. 2,3 "
                                         "or 2-11, make one report of runs from one device and software."),
    db: Optional[str] = typer.Option(None, help="Results database."),
    output: str = typer.Option("report.html", "-o", "--output", help="HTML file to write."),
    pair: Optional[List[str]] = typer.Option(None, help="IMPL/BASELINE heatmap pairs, e.g. triton/inductor."),
    baseline: str = typer.Option("eager", help=BASELINE_HELP + " (pairs of every implementation over it)"),
):
    """Write a self-contained HTML report of a run: heatmaps over the shape grids and tables."""
    from fusebench.report import parse_pair, render_report
    from fusebench.store import Store, default_db_path

    pairs = [parse_pair(p) for p in comma_list(pair)] if pair else None
    check_baseline(baseline)
    runs = parse_run_ids(run_id) if run_id else None
    with Store.open(db or default_db_path(), create=False) as store:  # read-only
        if audit_hooks.report_hook(store, runs, output, pairs):  # an audit run has a page of its own
            return
        if pairs:
            _check_pairs(store, runs, pairs)
        path = render_report(store, runs, output, pairs=pairs, baseline=baseline)
    out.print(f"wrote {plain(path)}", highlight=False, markup=False)


def _check_pairs(store, runs: list[int] | None, pairs: list[tuple[str, str]]) -> None:
    """Every side of a --pair names an implementation: a registered one, or one the runs hold (a
    plugin's, measured elsewhere)."""
    from fusebench.cases import UnknownName
    from fusebench.impls import get_impl

    ids = runs or [store.latest_run()]
    for rid in ids:
        store.run_info(rid)  # raises if absent
    marks = ", ".join("?" * len(ids))
    stored = sorted(r[0] for r in store.con.execute(f"SELECT DISTINCT impl FROM cells WHERE run_id IN ({marks})",
                                                    ids))
    for impl, base in pairs:
        for name in (impl, base):
            if name in stored:
                continue
            try:
                get_impl(name)
            except UnknownName:
                raise ValueError(f"--pair {impl}/{base}: no implementation {name!r} here or in run(s) "
                                 f"{', '.join(map(str, ids))} (measured there: {', '.join(stored) or 'none'})") from None


@bad_input_is_exit_2
def compare(
    run_a: Optional[int] = typer.Argument(None, help="The baseline run (A)."),
    run_b: Optional[int] = typer.Argument(None, help="The run compared with it (B)."),
    latest: bool = typer.Option(False, "--latest", help="Compare the store's last two runs (A: the one before "
                                                        "the last); give no run ids with it."),
    db: Optional[str] = typer.Option(None, help="Results database holding run A (and B)."),
    db_b: Optional[str] = typer.Option(None, help="Results database holding run B, if another."),
    format: str = typer.Option("table", "--format", help="What stdout gets: table (the terminal) | json (for "
                                                         "machines) | markdown (a pull-request comment)."),
    output: Optional[str] = typer.Option(None, "-o", "--output", help="Also write the HTML page (heatmaps, "
                                                                      "every table) to this file."),
    fail_above: Optional[float] = typer.Option(None, help="Exit 1 if any cell got slower by more than PCT % "
                                                          "outside the noise, or newly fails."),
    min_change: float = typer.Option(3.0, "--min-change", metavar="PCT", help="Changes smaller than PCT % are "
                                     "not called regressions or improvements, however sure."),
    normalize: bool = typer.Option(True, "--normalize/--no-normalize", help="Divide run B's times by the ratio of "
                                   "the two runs' reference workloads (same device only)."),
    baseline: str = typer.Option("eager", help=BASELINE_HELP + " (within each run)"),
):
    """Compare the same cells of two runs (devices, versions, commits) and judge the changes.

    Run B's times are normalised by the two runs' reference workloads (a machine slower as a whole
    is not slower code); a run whose machine changed speed while it measured is not judged.
    Exit status: 0 passed (or no --fail-above), 1 a regression above --fail-above outside the noise
    or a newly failing cell, 2 bad input, 3 not judged (a run's machine changed speed)."""
    from fusebench.report import fusion_diff
    from fusebench.report.compare import compare_runs, render_compare
    from fusebench.report.compare_text import FORMATS, markdown, print_table, to_json, verdict
    from fusebench.store import Store, default_db_path

    check_baseline(baseline)
    if format not in FORMATS:
        fail(f"unknown --format {format!r}; choose {', '.join(FORMATS)}")
    if latest and (run_a is not None or run_b is not None or db_b):
        fail("--latest compares the last two runs of one store: give no run ids and no --db-b with it")
    if not latest and (run_a is None or run_b is None):
        fail("give two runs, RUN_A RUN_B, or --latest for the store's last two")
    if fail_above is not None and not fail_above >= 0:
        fail(f"--fail-above must be at least 0, got {fail_above:g}")
    store_a = Store.open(db or default_db_path(), create=False)
    store_b = Store.open(db_b, create=False) if db_b else store_a
    try:
        if latest:
            ids = [int(r[0]) for r in store_a.con.execute("SELECT id FROM runs ORDER BY id DESC LIMIT 2")]
            if len(ids) < 2:
                fail(f"--latest: {store_a.path} holds {len(ids)} run(s); two are needed")
            run_b, run_a = ids
        if audit_hooks.compare_hook(store_a, run_a, store_b, run_b, output or "compare.html", fail_above):
            return  # two audits
        result = compare_runs(store_a, run_a, store_b, run_b, baseline, min_change, normalize)
        if output:
            render_compare(store_a, run_a, store_b, run_b, output, result=result)
    finally:
        store_a.close()
        if store_b is not store_a:
            store_b.close()
    code, line = verdict(result, fail_above)
    if format == "json":
        import json

        print(json.dumps(to_json(result, fail_above), indent=1, default=str))
    elif format == "markdown":
        print(markdown(result, fail_above), end="")
    else:
        print_table(result, out, fail_above)
        fusion_diff.print_changes(result.fusion_changes, out)
    if output:
        (out if format == "table" else err).print(f"wrote {plain(result.out_path)}", highlight=False, markup=False)
    if fail_above is None:
        return
    real = result.real_regressions(fail_above)
    within = len(result.regressed(fail_above)) - len(real)
    if within:
        err.print(f"--fail-above {fail_above:g}: {within} cell(s) slower by more than {fail_above:g}% but within "
                  f"the noise or under --min-change {min_change:g} (not counted)", highlight=False)
    if code == 1:
        # A cell that was ok in run A and failed in run B (oom, mismatch, ...) is the worst regression of all.
        for r in real.itertuples():
            err.print(f"  regressed {r.regression_pct:.1f}% (B / A within {r.change_lo:.3f}-{r.change_hi:.3f}): "
                      f"{plain(r.case_name)} {plain(r.impl)} {plain(r.shape)} {plain(r.dtype)}",
                      markup=False, highlight=False)
        for r in result.new_failures.itertuples():
            err.print(f"  newly failing: {plain(r.case_name)} {plain(r.impl)} {plain(r.shape)} {plain(r.dtype)}",
                      markup=False, highlight=False)
    if code:
        err.print(plain(line), highlight=False, markup=False)
        raise typer.Exit(code)


@bad_input_is_exit_2
def runs(db: Optional[str] = typer.Option(None, help="Results database.")):
    """List the runs in the store: when, status, device, commit, software, what was asked for."""
    from fusebench.store import Store, default_db_path

    with Store.open(db or default_db_path(), create=False) as store:  # read-only
        df = store.runs()
    t = Table()
    for col in ("id", "started", "finished", "status", "device", "commit", "torch", "triton", "request", "cells"):
        t.add_column(col, overflow="fold", justify="right" if col in ("id", "cells") else "left")
    for r in df.itertuples(index=False):
        t.add_row(*[as_text("" if v is None else v) for v in (
            r.id, r.started, r.finished, r.status, r.device_name, r.git_commit, r.torch, r.triton,
            request_summary(r.request), r.cells)])
    out.print(t)


def _names(value, everything: str, shown: int = 3) -> str:
    if not value:
        return everything
    names = [str(v) for v in value] if isinstance(value, list) else [str(value)]
    return ",".join(names[:shown]) + (f" +{len(names) - shown}" if len(names) > shown else "")


def request_summary(text) -> str:
    """A run's stored request in a few words: cases; implementations; shapes; dtype; mode."""
    import json

    try:
        req = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        req = None
    if not isinstance(req, dict):
        return "unreadable" if text else ""
    if req.get("kind") == "audit":  # an audit: its model, mode, dtype, sizes and backends
        from fusebench.audit.store import audit_summary

        return audit_summary(req)
    shapes = str(req.get("shapes") or "quick")
    if "," in shapes:
        parts = shapes.split(",")
        shapes = f"{parts[0]} +{len(parts) - 1} shapes"
    words = [_names(req.get("cases"), "all cases"), _names(req.get("impls"), "default impls"), shapes[:40]]
    if req.get("dtype"):
        words.append(str(req["dtype"]))
    if req.get("mode") and req.get("mode") != "fwd":
        words.append(str(req["mode"]))
    if req.get("plugins"):
        words.append(f"{len(req['plugins'])} plugin(s)")
    return "; ".join(words)


@bad_input_is_exit_2
def merge(sources: List[str] = typer.Argument(..., metavar="SOURCE...", help="Stores whose runs to copy."),
          db: Optional[str] = typer.Option(None, help="Results database to copy them into (created if absent).")):
    """Copy every run of other stores into one (new run ids), e.g. runs made by separate processes.

    Each source is checked whole first (a value no reader accepts is refused, one line per row, and
    nothing is written); each run is copied in one transaction, so an interrupted merge leaves whole
    runs; a run the store already holds is not copied again."""
    from fusebench.store import Store, default_db_path
    from fusebench.store_merge import merge as merge_runs
    from fusebench.store_merge import problem_lines, problems

    # check every source (opened read-only) and the destination before anything is written
    opened = []
    try:
        for src in sources:
            opened.append(Store.open(src, create=False))
        found = [line for src in opened for line in problems(src)]
        if found:
            lines = problem_lines(found)
            for line in lines[:-1]:
                err.print(f"fusebench: error: {plain(line)}", markup=False, highlight=False, soft_wrap=True)
            fail(f"{lines[-1]}; nothing merged (fix or delete these rows in the source first)")
        store = Store.open(db or default_db_path())
        try:
            for src in opened:
                done = merge_runs(store, src)
                if done.copied or not done.present:
                    moved = ", ".join(f"{old} -> {new}" for old, new in done.copied.items()) or "no runs"
                    out.print(f"{plain(src.path)}: runs {moved}", highlight=False, markup=False)
                for old, here in done.present.items():
                    out.print(f"{plain(src.path)}: run {old} is already in {plain(store.path)} as run {here}: "
                              f"not copied again", highlight=False, markup=False)
        finally:
            store.close()
    finally:
        for src in opened:
            src.close()


@bad_input_is_exit_2
def standing_cmd(
    stores: List[str] = typer.Argument(..., metavar="STORE...", help="Results databases (their `ceilings` "
                                       "tables give each GPU's copy ceiling)."),
    ceiling: Optional[float] = typer.Option(None, help="Copy ceiling of every GPU, GB/s (default: the stored one)."),
    min_input_mib: float = typer.Option(64.0, help="Only shapes whose fp32 input exceeds this many MiB."),
    target: float = typer.Option(0.9, help="Fraction of the ceiling (or of the same-size copy) to reach."),
    every: bool = typer.Option(False, "--all", help="List every shape, not only those below the target."),
    versus: bool = typer.Option(False, "--versus", help="Geometric means against Inductor and eager instead."),
):
    """The memory-bound cases' large shapes against the copy ceiling (or, --versus, against
    Inductor and eager), from the latest fp32 cells of the given stores."""
    from fusebench.report.standing import (VERSUS_QUERY, copy_ceilings, load, standing, standing_lines,
                                           versus as versus_table)

    import math

    if ceiling is not None and not (math.isfinite(ceiling) and ceiling > 0):
        fail(f"--ceiling must be positive and finite (GB/s), got {ceiling:g}")
    if not (math.isfinite(target) and target > 0):
        fail(f"--target must be positive and finite, got {target:g}")
    if not (math.isfinite(min_input_mib) and min_input_mib >= 0):
        fail(f"--min-input-mib must be at least 0 and finite, got {min_input_mib:g}")
    if versus:
        out.print(plain(versus_table(load(stores, VERSUS_QUERY))), markup=False, highlight=False, soft_wrap=True)
        return
    cells = load(stores)
    ceilings = ({name: ceiling for name in cells.device_name.unique()} if ceiling else copy_ceilings(stores))
    lines = standing_lines(standing(cells, ceilings, min_input_mib), ceilings, target, every)
    if not lines:
        lines = [f"no ok fp32 triton cell of a memory-bound case above {min_input_mib:g} MiB in these stores"]
    for line in lines:
        out.print(plain(line), markup=False, highlight=False, soft_wrap=True)
