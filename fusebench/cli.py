"""The `fusebench` command line.

Every command turns bad input (unknown name, malformed shape, unknown dtype, a file that is not a
fusebench store) into one line on stderr and exit status 2, before anything is stored.
"""
from __future__ import annotations

import functools
import signal
import sys
from typing import List, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from fusebench.util import as_text, plain

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Benchmark and test suite for GPU kernel fusion.")
# Wide enough for a summary table when the output is piped to a file.
out = Console(width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 160)

EXIT_BAD_INPUT = 2


def fail(message: str) -> None:
    """One line on stderr, printed as text (no markup, control characters replaced), exit 2."""
    line = " ".join(part.strip() for part in plain(message).splitlines() if part.strip())
    err.print(f"fusebench: error: {line}", markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(EXIT_BAD_INPUT)


def bad_input_is_exit_2(fn):
    """Turn the exceptions that mean "bad input" into one clear line and exit status 2."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        import sqlite3

        from fusebench.cases import UnknownName
        from fusebench.store import StoreError

        try:
            return fn(*args, **kwargs)
        except (UnknownName, StoreError, FileNotFoundError, PermissionError, IsADirectoryError, ValueError,
                KeyError, OverflowError) as exc:
            fail(str(exc).strip("'\""))
        except sqlite3.DatabaseError as exc:  # damage found only while reading
            fail(f"the results database cannot be read: {exc}")

    return wrapper


def _split(values: Optional[List[str]]) -> Optional[List[str]]:
    if not values:
        return None
    return [v.strip() for item in values for v in item.split(",") if v.strip()]


def parse_run_ids(text: str) -> list[int]:
    """'3' -> [3]; '2,5' -> [2, 5]; '2-4' -> [2, 3, 4] (ranges and lists mix)."""
    ids: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        lo, dash, hi = part.partition("-")
        if not lo.isdigit() or (dash and (not hi.isdigit() or int(hi) < int(lo))):
            raise ValueError(f"bad run id {part!r} in --run {text!r}: expected N, N,M or N-M")
        ids += list(range(int(lo), int(hi) + 1)) if hi else [int(lo)]
    return list(dict.fromkeys(ids))


# ---------------------------------------------------------------------------------------------
@app.command("list")
@bad_input_is_exit_2
def list_cmd(plugin: Optional[List[str]] = typer.Option(None, help="Python file registering extra cases or "
                                                                   "implementations.")):
    """List cases, implementations (with why one cannot run here), and default shapes."""
    from fusebench.cases import DTYPE_NAMES, all_cases, load_plugin, shape_str
    from fusebench.env import best_device
    from fusebench.impls import all_impls

    for path in plugin or []:
        load_plugin(path)
    device = best_device()
    t = Table(title="cases", title_justify="left")
    for col in ("case", "family", "dtype", "shape axes", "quick shapes", "grid", "definition"):
        t.add_column(col, overflow="fold")
    for c in all_cases():
        quick = c.cpu_shapes if device == "cpu" and c.cpu_shapes else c.quick_shapes
        t.add_row(as_text(c.name), as_text(c.family), DTYPE_NAMES[c.default_dtype], as_text("x".join(c.axes)),
                  ", ".join(shape_str(s) for s in quick), str(len(c.grid_shapes)), as_text(c.description))
    out.print(t)
    t = Table(title=f"implementations (here: {device})", title_justify="left")
    for col in ("implementation", "what", "here"):
        t.add_column(col, overflow="fold")
    for impl in all_impls():
        t.add_row(as_text(impl.name), as_text(impl.description), as_text(_availability(impl, device)))
    out.print(t)


def _availability(impl, device: str) -> str:
    """Whether an implementation runs on this device, and for which cases."""
    from fusebench.cases import all_cases

    reason = impl.available(device)
    if reason:
        return f"no: {reason}"
    cases = [c.name for c in all_cases() if impl.applies(c)
             and impl.supports(c, (c.cpu_shapes or c.quick_shapes)[0], c.default_dtype, device) is None]
    return "yes (all cases)" if len(cases) == len(all_cases()) else f"yes: {', '.join(cases) or 'no case yet'}"


def check_baseline(name: str) -> str:
    """A --baseline: a known implementation that is not a ceiling (a copy is no baseline)."""
    from fusebench.impls import get_impl

    impl = get_impl(name)
    if impl.kind == "ceiling":
        raise ValueError(f"--baseline {name!r} is a ceiling: speedups are over an implementation of the case")
    return name


BASELINE_HELP = "Implementation that speedups are computed against."


def _interrupt(signum, frame):
    raise KeyboardInterrupt


# ---------------------------------------------------------------------------------------------
@app.command()
@bad_input_is_exit_2
def run(
    cases: Optional[List[str]] = typer.Argument(None, help="Cases to run (default: all)."),
    impl: Optional[List[str]] = typer.Option(
        None, "--impl", help="Implementations, comma-separated, or all (default: eager, inductor, triton, the vendor "
                             "kernels and the ceilings, where they run here; slow ones such as "
                             "inductor-max-autotune only by name or all)."),
    shapes: str = typer.Option("quick", help="quick | grid | AxB,CxD,..."),
    dtype: Optional[str] = typer.Option(None, help="fp32 | fp16 | bf16 (default: each case's own)."),
    device: Optional[str] = typer.Option(None, help="cpu | cuda (default: CUDA if present)."),
    db: Optional[str] = typer.Option(None, help="Results database (default ./fusebench.db or $FUSEBENCH_DB)."),
    plugin: Optional[List[str]] = typer.Option(None, help="Python file registering extra cases.  With --resume: "
                                               "the run's own plugin files again (path and content are checked "
                                               "against what the run recorded; a store's plugins are never "
                                               "imported on its say-so)."),
    strict: bool = typer.Option(False, help="Exit 1 if any cell is mismatch, error, crashed or timeout."),
    resume: Optional[int] = typer.Option(None, help="Run ID to complete: measure only its missing cells.  A run "
                                         "still being measured (its process alive here, or a recent heartbeat) "
                                         "is refused."),
    retry_failed: bool = typer.Option(False, "--retry-failed", help="With --resume: also measure again the cells "
                                      "that crashed or timed out (the process or machine failed them).  error, "
                                      "mismatch and oom are the code's own results and stay; measure those in a "
                                      "new run."),
    gpus: Optional[str] = typer.Option(None, help="all | 0,1,...: one worker per GPU."),
    cell_timeout: float = typer.Option(900.0, help="Seconds before a cell is declared hung and killed."),
    isolate: bool = typer.Option(True, help="Run cells in worker processes (crash and hang containment)."),
    metrics: str = typer.Option("default", help="Metric families beyond time and accuracy: default | all | none | "
                                                "kernels,graph,memory,flops,roofline,compile,ncu"),
    ncu: bool = typer.Option(False, "--ncu", help="Add Nsight Compute counters (DRAM bytes, instructions)."),
    flush: str = typer.Option("clean", help="L2 flush before each timed call: clean (evict_last stores, then a "
                                            "read sweep that leaves L2 clean) | evict_last (the stores alone) | "
                                            "zero (ordinary stores, as triton.testing.do_bench)."),
    warm_call: bool = typer.Option(True, help="After each flush, run the call once on a second input set "
                                              "(calls up to 1 GiB of traffic), so that what the flush disturbed "
                                              "beyond the data is settled before the timed call."),
    baseline: str = typer.Option("eager", help=BASELINE_HELP),
    ray: Optional[str] = typer.Option(None, "--ray", metavar="[ADDRESS]",
                                      help="Run the cells on Ray actors, one per GPU (or CPU slot): on a Ray "
                                           "instance started here, or on the cluster at ADDRESS (auto, "
                                           "ray://host:10001, host:6379). Needs fusebench[ray]."),
    ray_gpu_kind: Optional[str] = typer.Option(None, help="With --ray: only GPUs of this Ray accelerator type "
                                                          "(H100, A100, ...)."),
    mode: str = typer.Option("fwd", help="What each cell times: fwd (the forward) | bwd (the backward alone, "
                                         "its forward run outside the timed call) | fwd_bwd (both).  The training "
                                         "modes run the differentiable cases and check every input's gradient."),
):
    """Measure cases x implementations x shapes, store every cell, print a summary."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, \
        TimeRemainingColumn

    import fusebench
    from fusebench.cases import shape_str

    from fusebench.metrics import parse_metrics

    metric_names = parse_metrics(metrics) + (("ncu",) if ncu and "ncu" not in parse_metrics(metrics) else ())
    check_baseline(baseline)
    if resume is not None and (cases or impl or dtype or device or shapes != "quick" or flush != "clean"
                               or not warm_call or mode != "fwd"):
        fail("--resume takes the selection of the run it resumes; give no cases, --impl, --shapes, --dtype, "
             "--device, --mode, --flush or --no-warm-call with it (only its --plugin files)")
    if retry_failed and resume is None:
        fail("--retry-failed applies to --resume RUN_ID")
    from fusebench.measure.timing import FLUSH_MODES, TimingSettings

    if flush not in FLUSH_MODES:
        fail(f"unknown --flush {flush!r}: {', '.join(FLUSH_MODES)}")
    if ray is not None:
        from fusebench.runner.ray_backend import RAY_MISSING, ray_available

        if not ray_available():
            fail(RAY_MISSING)
    elif ray_gpu_kind:
        fail("--ray-gpu-kind needs --ray")
    timing = None if resume is not None else TimingSettings.for_shapes(
        shapes, flush_mode=flush, **({} if warm_call else {"warm_call_max_bytes": 0}))
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("{task.fields[counts]}"), TimeElapsedColumn(), TextColumn("eta"),
                        TimeRemainingColumn(), console=err, transient=False)
    state = {"task": None, "counts": {}}

    def on_plan(run_id: int, n: int):
        err.print(f"run {run_id}: {n} cells{' to resume' if resume else ''}", highlight=False)
        state["task"] = progress.add_task("starting", total=n, counts="")
        progress.start()  # only now: a request refused before this prints its one line alone

    def on_cell(cell, row):
        if row is None:
            progress.update(state["task"],
                            description=as_text(f"{cell.case} {cell.impl} {shape_str(cell.shape)} {cell.dtype}"))
            return
        state["counts"][row["status"]] = state["counts"].get(row["status"], 0) + 1
        counts = as_text(" ".join(f"{k}:{v}" for k, v in sorted(state["counts"].items())))
        progress.update(state["task"], advance=1, counts=counts)

    # SIGTERM stops like Ctrl-C: the cell in flight is dropped, everything finished is stored.
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        try:
            df = fusebench.run(cases or None, impls=_split(impl), shapes=shapes, dtype=dtype, device=device, db=db,
                               plugins=plugin or [], isolate=isolate, cell_timeout=cell_timeout, gpus=gpus,
                               resume=resume, on_cell=on_cell, on_plan=on_plan, metrics=metric_names, timing=timing,
                               retry_failed=retry_failed, ray=ray, ray_gpu_kind=ray_gpu_kind, mode=mode)
        finally:
            if state["task"] is not None:
                progress.stop()
    except KeyboardInterrupt:
        err.print("interrupted: finished cells are stored; complete the run with "
                  "`fusebench run --resume RUN_ID`", highlight=False)
        raise typer.Exit(130)
    from fusebench.summary import print_summary

    print_summary(df, out, baseline=baseline)
    if isolate and ray is None:
        err.print(f"workers' output (compiler warnings, profiler messages): {plain(df.attrs.get('db', ''))}.log",
                  highlight=False, markup=False)
    bad = df[df.status.isin(["mismatch", "error", "crashed", "timeout"])]
    if strict and len(bad):
        err.print(f"--strict: {len(bad)} cell(s) failed", highlight=False)
        raise typer.Exit(1)


# ---------------------------------------------------------------------------------------------
@app.command()
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
    check_baseline(baseline)
    df = fusebench.results(run_id, db)
    if format == "table":
        print_summary(df, out, baseline=baseline)
        return
    from fusebench.report.export import export

    export(df, format, output)


@app.command()
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


@app.command()
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

    pairs = [parse_pair(p) for p in _split(pair)] if pair else None
    check_baseline(baseline)
    runs = parse_run_ids(run_id) if run_id else None
    with Store.open(db or default_db_path(), create=False) as store:  # read-only
        path = render_report(store, runs, output, pairs=pairs, baseline=baseline)
    out.print(f"wrote {plain(path)}", highlight=False, markup=False)


@app.command()
@bad_input_is_exit_2
def compare(
    run_a: int = typer.Argument(..., help="The baseline run."),
    run_b: int = typer.Argument(..., help="The run compared with it."),
    db: Optional[str] = typer.Option(None, help="Results database holding run A (and B)."),
    db_b: Optional[str] = typer.Option(None, help="Results database holding run B, if another."),
    output: str = typer.Option("compare.html", "-o", "--output", help="HTML file to write."),
    fail_above: Optional[float] = typer.Option(None, help="Exit 1 if any cell got slower by more than PCT % "
                                                          "outside the noise of its repetitions, or newly fails."),
    baseline: str = typer.Option("eager", help=BASELINE_HELP + " (within each run)"),
):
    """Compare the same cells of two runs (devices, versions, commits): ratio heatmaps and a summary."""
    from fusebench.report import render_compare
    from fusebench.store import Store, default_db_path

    check_baseline(baseline)
    store_a = Store.open(db or default_db_path(), create=False)
    store_b = Store.open(db_b, create=False) if db_b else store_a
    try:
        result = render_compare(store_a, run_a, store_b, run_b, output, baseline=baseline)
    finally:
        store_a.close()
        if store_b is not store_a:
            store_b.close()
    geo = f"{result.geomean_speedup:.3f}×" if result.geomean_speedup else "n/a"
    out.print(f"wrote {plain(result.out_path)}: {result.matched} cells timed in both runs, geomean speedup of run "
              f"{run_b} over run {run_a} {geo}, worst regression {result.max_regression_pct:.1f}% "
              f"({result.max_real_regression_pct:.1f}% outside the noise); "
              f"{len(result.new_failures)} cell(s) newly failing", highlight=False, markup=False)
    if fail_above is None:
        return
    real = result.real_regressions(fail_above)
    within = len(result.regressed(fail_above)) - len(real)
    if within:
        err.print(f"--fail-above {fail_above:g}: {within} cell(s) slower by more than {fail_above:g}% but within "
                  f"the noise of their repetitions (not counted)", highlight=False)
    # A cell that was ok in run A and failed in run B (oom, mismatch, ...) is the worst regression of all.
    if len(real) or len(result.new_failures):
        for r in real.itertuples():
            err.print(f"  regressed {r.regression_pct:.1f}% (B / A within {r.change_lo:.3f}-{r.change_hi:.3f}): "
                      f"{plain(r.case_name)} {plain(r.impl)} {plain(r.shape)} {plain(r.dtype)}",
                      markup=False, highlight=False)
        for r in result.new_failures.itertuples():
            err.print(f"  newly failing: {plain(r.case_name)} {plain(r.impl)} {plain(r.shape)} {plain(r.dtype)}",
                      markup=False, highlight=False)
        err.print(f"--fail-above {fail_above:g}: {len(real)} cell(s) regressed outside the noise, "
                  f"{len(result.new_failures)} newly failing", highlight=False)
        raise typer.Exit(1)


@app.command()
@bad_input_is_exit_2
def show(
    case: str = typer.Argument(..., help="The case."),
    shape: str = typer.Option(..., "--shape", help="One shape, e.g. 8192x8192."),
    impl: str = typer.Option(..., "--impl", help="One implementation."),
    dtype: Optional[str] = typer.Option(None, help="fp32 | fp16 | bf16 (default: the case's own)."),
    device: Optional[str] = typer.Option(None, help="cpu | cuda (default: CUDA if present)."),
    ncu: bool = typer.Option(False, "--ncu", help="Add Nsight Compute counters per kernel."),
    db: Optional[str] = typer.Option(None, help="Results database (for the device's stored ceilings)."),
    plugin: Optional[List[str]] = typer.Option(None, help="Python file registering extra cases."),
    code_lines: int = typer.Option(200, help="Lines of generated code to print per module (0: all)."),
):
    """One cell in depth: every metric, the kernels launched, Inductor's code and autotune choices."""
    from fusebench.cases import get_case, load_plugin, parse_dtype, parse_shape
    from fusebench.env import best_device
    from fusebench.impls import get_impl
    from fusebench.metrics.show import print_show, show_cell
    from fusebench.store import default_db_path

    for path in plugin or []:
        load_plugin(path)
    c, i = get_case(case), get_impl(impl)  # validate before measuring
    s = c.normalize_shape(parse_shape(shape))
    if dtype:
        parse_dtype(dtype)
    result = show_cell(c, i, s, dtype, device=device or best_device(), with_ncu=ncu,
                       db_path=db or default_db_path())
    print_show(result, out, code_lines=code_lines or None)
    if result["status"] not in ("ok", "unsupported"):
        raise typer.Exit(1)


@app.command()
@bad_input_is_exit_2
def ceilings(
    db: Optional[str] = typer.Option(None, help="Results database to store them in."),
    device: Optional[str] = typer.Option(None, help="cpu | cuda (default: CUDA if present)."),
):
    """Measure this device's copy bandwidth and matmul peaks (the roofline's ceilings) and store them."""
    from fusebench.ceilings import format_ceilings, run_ceilings
    from fusebench.env import best_device
    from fusebench.store import default_db_path

    name, measured = run_ceilings(db or default_db_path(), device or best_device())
    for line in format_ceilings(name, measured):
        out.print(plain(line), highlight=False, markup=False)


@app.command()
@bad_input_is_exit_2
def runs(db: Optional[str] = typer.Option(None, help="Results database.")):
    """List the runs in the store."""
    from fusebench.store import Store, default_db_path

    with Store.open(db or default_db_path(), create=False) as store:  # read-only
        df = store.runs()
    t = Table()
    for col in df.columns:
        t.add_column(as_text(col))
    for _, r in df.iterrows():
        t.add_row(*[as_text(v) for v in r])
    out.print(t)


@app.command()
@bad_input_is_exit_2
def merge(sources: List[str] = typer.Argument(..., metavar="SOURCE...", help="Stores whose runs to copy."),
          db: Optional[str] = typer.Option(None, help="Results database to copy them into (created if absent).")):
    """Copy every run of other stores into one (new run ids), e.g. runs made by separate processes."""
    from fusebench.store import Store, default_db_path

    # check every source (opened read-only) and the destination before anything is written
    opened = []
    try:
        for src in sources:
            opened.append(Store.open(src, create=False))
        store = Store.open(db or default_db_path())
        try:
            for src in opened:
                mapping = store.merge_from(src)
                moved = ", ".join(f"{old} -> {new}" for old, new in mapping.items()) or "no runs"
                out.print(f"{plain(src.path)}: runs {moved}", highlight=False, markup=False)
        finally:
            store.close()
    finally:
        for src in opened:
            src.close()



# ---------------------------------------------------------------------------------------------
@app.command("paired")
@bad_input_is_exit_2
def paired_cmd(
    case: str = typer.Argument(..., help="The case."),
    shapes: str = typer.Argument(..., help="Shapes, comma-separated: AxB[,CxD,...]."),
    impl: str = typer.Option("triton,inductor", "--impl", help="Two implementations A,B: the speedup of A over B."),
    dtype: Optional[str] = typer.Option(None, help="fp32 | fp16 | bf16 (default: the case's own)."),
    rounds: int = typer.Option(300, help="Rounds; each times A and B once, in alternating order."),
    threshold: float = typer.Option(0.95, help="The verdict's line: below / not below / undecided."),
    device: Optional[str] = typer.Option(None, help="cpu | cuda (default: CUDA if present)."),
    plugin: Optional[List[str]] = typer.Option(None, help="Python file registering extra cases."),
    csv: Optional[str] = typer.Option(None, "--csv", help="Append the rows to this CSV file."),
):
    """Time two implementations rep by rep in turn: the speedup with a 95% bootstrap interval.

    For differences that one cell's median cannot decide (a 5 us call).  Outputs are checked against the float64 reference first; exit 1 if a shape could not be timed."""
    import os

    import torch

    from fusebench.cases import DTYPE_NAMES, get_case, load_plugin, parse_dtype, parse_shape, shape_str
    from fusebench.env import best_device
    from fusebench.impls import get_impl
    from fusebench.measure.paired import append_csv, format_row, measure

    for path in plugin or []:
        load_plugin(path)
    c = get_case(case)
    names = [n.strip() for n in impl.split(",")]
    if len(names) != 2 or not all(names):
        fail(f"--impl takes two implementations, A,B; got {impl!r}")
    for name in names:
        get_impl(name)
    parsed = [c.normalize_shape(parse_shape(s.strip())) for s in shapes.split(",")]
    dtype_name = DTYPE_NAMES[parse_dtype(dtype)] if dtype else DTYPE_NAMES[c.default_dtype]
    if rounds < 2:
        fail(f"--rounds must be at least 2, got {rounds}")
    if not threshold > 0:
        fail(f"--threshold must be positive, got {threshold:g}")
    device = device or best_device()
    if device != "cpu" and not (device.startswith("cuda") and torch.cuda.is_available()):
        fail(f"device {device!r} is not available here: cpu" + (" or cuda" if torch.cuda.is_available() else ""))
    if csv and not os.path.isdir(os.path.dirname(os.path.abspath(csv))):
        fail(f"directory {os.path.dirname(os.path.abspath(csv))} does not exist (--csv)")
    rows = []
    for shape in parsed:
        row = measure(c.name, shape, names, dtype_name, device, rounds, threshold)
        rows.append(row)
        out.print(plain(format_row(row)), markup=False, highlight=False, soft_wrap=True)
    if csv:
        append_csv(rows, csv)
    untimed = [shape_str(s) for s, r in zip(parsed, rows) if "speedup" not in r]
    if untimed:
        err.print(f"not timed: {', '.join(untimed)}", highlight=False, markup=False)
        raise typer.Exit(1)


@app.command("standing")
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

    if ceiling is not None and not ceiling > 0:
        fail(f"--ceiling must be positive, got {ceiling:g}")
    if not target > 0:
        fail(f"--target must be positive, got {target:g}")
    if not min_input_mib >= 0:
        fail(f"--min-input-mib must be at least 0, got {min_input_mib:g}")
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

def bare_ray_flag(argv: list[str]) -> list[str]:
    """`--ray` takes an optional address: a bare `--ray` (not followed by auto, local, ray://...
    or host:port) becomes `--ray=local`."""
    out = []
    for i, arg in enumerate(argv):
        nxt = argv[i + 1] if i + 1 < len(argv) else ""
        if arg == "--ray" and not (nxt in ("auto", "local") or "://" in nxt or ":" in nxt):
            arg = "--ray=local"
        out.append(arg)
    return out


def main() -> None:
    sys.argv[1:] = bare_ray_flag(sys.argv[1:])
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
