"""The subcommands that measure on this machine or say what it can run: list, run, show,
ceilings, paired."""
from __future__ import annotations

import math
import os
import signal
from typing import List, Optional

import typer
from rich.table import Table

from fusebench.commands.common import (BASELINE_HELP, bad_input_is_exit_2, check_baseline, check_device, comma_list,
                                       err, fail, out)
from fusebench.util import as_text, plain

# paired's most rounds: each times both implementations once, so this bounds a shape's time.
MAX_ROUNDS = 100_000


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
    # the case as a call (what an implementation of it takes); lists wrap at their commas
    t.add_column("case(arguments)", overflow="fold", max_width=34)
    t.add_column("family", no_wrap=True)
    t.add_column("dtype", no_wrap=True)
    t.add_column("shape axes", overflow="fold", max_width=16)
    t.add_column("quick shapes", overflow="fold", max_width=22)
    t.add_column("grid", no_wrap=True, justify="right")
    t.add_column("definition", overflow="fold", min_width=30)
    for c in all_cases():
        quick = c.cpu_shapes if device == "cpu" and c.cpu_shapes else c.quick_shapes
        t.add_row(as_text(f"{c.name}({_arguments(c.fn)})"), as_text(c.family), DTYPE_NAMES[c.default_dtype],
                  as_text("x".join(c.axes)), ", ".join(shape_str(s) for s in quick), str(len(c.grid_shapes)),
                  as_text(c.description))
    out.print(t)
    t = Table(title=f"implementations (here: {device})", title_justify="left")
    for col in ("implementation", "what", "here"):
        t.add_column(col, overflow="fold")
    for impl in all_impls():
        t.add_row(as_text(impl.name), as_text(impl.description), as_text(_availability(impl, device)))
    out.print(t)
    from fusebench.catalog import CATALOG

    for module, error in sorted(CATALOG.load().errors.items()):  # what it declares is missing above
        err.print(f"not loaded: {module}: {(error.splitlines() or [''])[0]}", highlight=False, markup=False)


def _arguments(fn) -> str:
    """A case function's parameter names: what an implementation of the case takes."""
    import inspect

    try:
        return ", ".join(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return "?"


def _availability(impl, device: str) -> str:
    """Whether an implementation runs on this device, and for which cases."""
    from fusebench.cases import all_cases

    reason = impl.available(device)
    if reason:
        return f"no: {reason}"
    cases = [c.name for c in all_cases() if impl.applies(c)
             and impl.supports(c, (c.cpu_shapes or c.quick_shapes)[0], c.default_dtype, device) is None]
    return "yes (all cases)" if len(cases) == len(all_cases()) else f"yes: {', '.join(cases) or 'no case yet'}"


def _interrupt(signum, frame):
    raise KeyboardInterrupt


@bad_input_is_exit_2
def run_cmd(
    cases: Optional[List[str]] = typer.Argument(None, help="Cases to run (default: all)."),
    impl: Optional[List[str]] = typer.Option(
        None, "--impl", help="Implementations, comma-separated, or all (default: eager, inductor, triton, the vendor "
                             "kernels and the ceilings, where they run here).  `default` and `peers` (the "
                             "peer libraries installed here) name groups, e.g. default,peers; slow ones "
                             "such as inductor-max-autotune run only by name or all."),
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
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan (cells per case and implementation, "
                                 "the total) and an estimated duration, then exit: nothing is measured and no "
                                 "store is written."),
    python: Optional[str] = typer.Option(None, "--python", help="Run the workers under this Python interpreter "
                                         "(another PyTorch and Triton installed there; fusebench's dependencies "
                                         "too): the run records its versions.  A resume uses the run's own."),
):
    """Measure cases x implementations x shapes, store every cell, print a summary."""
    from fusebench.api import run_request
    from fusebench.commands.run_support import RunProgress, resume_hint
    from fusebench.metrics import parse_metrics
    from fusebench.runner.ray_backend import ActorStartError
    from fusebench.runner.request import RunRequest

    metric_names = parse_metrics(metrics) + (("ncu",) if ncu and "ncu" not in parse_metrics(metrics) else ())
    check_baseline(baseline)
    if resume is not None and (cases or impl or dtype or device or shapes != "quick" or flush != "clean"
                               or not warm_call or mode != "fwd"):
        fail("--resume takes the selection of the run it resumes; give no cases, --impl, --shapes, --dtype, "
             "--device, --mode, --flush or --no-warm-call with it (only its --plugin files)")
    if retry_failed and resume is None:
        fail("--retry-failed applies to --resume RUN_ID")
    _check_request(impl, dtype, gpus, ray, device)
    from fusebench.measure.timing import FLUSH_MODES, TimingSettings

    if flush not in FLUSH_MODES:
        fail(f"unknown --flush {flush!r}: {', '.join(FLUSH_MODES)}")
    if ray is not None:
        from fusebench.runner.ray_backend import RAY_MISSING, ray_available

        if not ray_available():
            fail(RAY_MISSING)
    elif ray_gpu_kind:
        fail("--ray-gpu-kind needs --ray")
    if dry_run:
        if resume is not None:
            fail("--dry-run plans a new run; give the request (cases, --impl, --shapes ...) without --resume")
        if not (math.isfinite(cell_timeout) and cell_timeout > 0):
            fail(f"--cell-timeout {cell_timeout:g}: must be a positive number of seconds")
    timing = None if resume is not None else TimingSettings.for_shapes(
        shapes, flush_mode=flush, **({} if warm_call else {"warm_call_max_bytes": 0}))
    request = RunRequest(cases=cases or None, impls=comma_list(impl), shapes=shapes, dtype=dtype, device=device,
                         mode=mode, metrics=metric_names, timing=timing, cell_timeout=cell_timeout, isolate=isolate,
                         gpus=gpus, plugins=tuple(plugin or ()), db=db, resume=resume, retry_failed=retry_failed,
                         ray=ray, ray_gpu_kind=ray_gpu_kind, python=python)
    if dry_run:
        return _dry_run(request)
    progress = RunProgress(err, resume=resume is not None)

    # SIGTERM stops like Ctrl-C: the cell in flight is dropped, everything finished is stored.
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        try:
            df = run_request(request, on_cell=progress.cell, on_plan=progress.plan)
        finally:
            progress.stop()
    except (KeyboardInterrupt, ActorStartError) as exc:
        rid = progress.run_id
        if rid is None:  # stopped before the run was stored: there is nothing to resume
            why = "interrupted" if isinstance(exc, KeyboardInterrupt) else f"fusebench: error: {exc}"
            err.print(f"{why}; no run was stored", highlight=False, markup=False, soft_wrap=True)
        else:
            why = "interrupted" if isinstance(exc, KeyboardInterrupt) else f"fusebench: error: {exc}"
            err.print(f"{why}; run {rid}'s finished cells are stored; complete it with "
                      f"`{resume_hint(rid, request)}`", highlight=False, markup=False, soft_wrap=True)
        raise typer.Exit(130 if isinstance(exc, KeyboardInterrupt) else 1)
    from fusebench.summary import print_summary

    print_summary(df, out, baseline=baseline)
    if isolate and ray is None:
        err.print(f"workers' output (compiler warnings, profiler messages): {plain(df.attrs.get('db', ''))}.log",
                  highlight=False, markup=False)
    bad = df[df.status.isin(["mismatch", "error", "crashed", "timeout"])]
    if strict and len(bad):
        err.print(f"--strict: {len(bad)} cell(s) failed", highlight=False)
        raise typer.Exit(1)


def _check_request(impl, dtype, gpus, ray, device) -> None:
    """Values the run's options take that name nothing: refused before anything is planned.  (--gpus
    with --device cpu runs that many workers on the CPU: the multi-worker path, testable anywhere.)"""
    if impl is not None and not comma_list(impl):
        fail(f"--impl {','.join(impl)!r} names no implementation: give names such as eager,triton, or default, "
             f"peers or all")
    if dtype is not None:
        from fusebench.cases import parse_dtype

        if not dtype.strip():
            fail(f"--dtype {dtype!r} names no dtype: give fp32, fp16 or bf16")
        parse_dtype(dtype)
    if gpus is not None and ray is None:
        if not gpus.strip():
            fail("--gpus '' names no GPU: give all or indices such as 0,1")
        import torch

        from fusebench.runner.request import parse_gpus

        parse_gpus(gpus)  # the form, and indices among CUDA_VISIBLE_DEVICES
        if device != "cpu" and not torch.cuda.is_available():
            fail(f"--gpus {gpus}: no CUDA GPU is visible here (without --gpus a run uses the CPU)")


def _dry_run(request) -> None:
    """`run --dry-run`: the plan and an estimate; plugins are imported, nothing is measured or stored."""
    from fusebench.cases import load_plugin, plugin_record
    from fusebench.commands.run_support import dry_run
    from fusebench.env import best_device
    from fusebench.runner.modes import check_mode
    from fusebench.runner.plan import plan_cells
    from fusebench.runner.request import check_sizes
    from fusebench.store import default_db_path

    for path in request.plugins:
        record = plugin_record(path)
        load_plugin(record["path"], record["sha256"])
    device = check_device(request.device or best_device())
    if not any(s.strip() for s in request.shapes.split(",")):
        fail(f"--shapes {request.shapes!r} names no shape: give quick, grid or e.g. 4096x4096")
    todo = plan_cells(request.cases, request.impls, request.shapes, request.dtype, device, check_mode(request.mode))
    if not todo:
        fail("the request selects no cells")
    check_sizes(todo)
    dry_run(out, todo, device, os.path.abspath(request.db or default_db_path()), request.ray)


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
    from fusebench.runner.show import print_show, show_cell
    from fusebench.store import default_db_path

    from fusebench.store import Store

    for path in plugin or []:
        load_plugin(path)
    c, i = get_case(case), get_impl(impl)  # validate before measuring
    s = c.normalize_shape(parse_shape(shape))
    if dtype is not None:
        parse_dtype(dtype)
    device = check_device(device or best_device())
    db_path = db or default_db_path()
    if db is not None or os.path.exists(db_path):  # the store the ceilings come from must be sound
        Store.open(db_path, create=False).close()
    result = show_cell(c, i, s, dtype, device=device, with_ncu=ncu, db_path=db_path)
    print_show(result, out, code_lines=code_lines or None)
    if result["status"] not in ("ok", "unsupported"):
        raise typer.Exit(1)


@bad_input_is_exit_2
def ceilings(
    db: Optional[str] = typer.Option(None, help="Results database to store them in."),
    device: Optional[str] = typer.Option(None, help="cpu | cuda (default: CUDA if present)."),
):
    """Measure this device's copy bandwidth and matmul peaks (the roofline's ceilings) and store them."""
    from fusebench.device_peaks import format_ceilings, run_ceilings
    from fusebench.env import best_device
    from fusebench.store import default_db_path

    from fusebench.store import check_writable

    device = check_device(device or best_device())
    check_writable(db or default_db_path())  # before minutes of measuring
    name, measured = run_ceilings(db or default_db_path(), device)
    for line in format_ceilings(name, measured):
        out.print(plain(line), highlight=False, markup=False)


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
    from fusebench.cases import DTYPE_NAMES, get_case, load_plugin, parse_dtype, parse_shape, shape_str
    from fusebench.env import best_device
    from fusebench.impls import get_impl
    from fusebench.runner.paired import append_csv, format_row, measure

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
    if not 2 <= rounds <= MAX_ROUNDS:
        fail(f"--rounds must be from 2 to {MAX_ROUNDS:,}, got {rounds}")
    if not (math.isfinite(threshold) and threshold > 0):
        fail(f"--threshold must be a positive number, got {threshold:g}")
    device = check_device(device or best_device())
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
