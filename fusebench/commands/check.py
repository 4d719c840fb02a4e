"""`fusebench check`: hold this machine's cells to a committed baseline (fusebench/check/)."""
from __future__ import annotations

import math
from typing import List, Optional

import typer

from fusebench.commands.common import bad_input_is_exit_2, comma_list, err, fail, out
from fusebench.util import plain

DEFAULT_MAX_SLOWDOWN = 10.0


def _say(line: str) -> None:
    err.print(plain(line), markup=False, highlight=False)


def _print(lines) -> None:
    for line in lines:
        out.print(plain(line), markup=False, highlight=False, soft_wrap=True)


def _runs_failed(exc: Exception) -> None:
    err.print(f"fusebench: check: {plain(str(exc))}", markup=False, highlight=False)
    raise typer.Exit(1)


@bad_input_is_exit_2
def check(
    cases: Optional[List[str]] = typer.Argument(None, help="Only these cases of the baseline; with --update, the "
                                                           "cases to record (with --impl, --shapes, --dtype, --mode)."),
    baseline: Optional[str] = typer.Option(None, "--baseline", help="The baseline file (default "
                                           "fusebench-baseline.toml, or fusebench-baseline.json where only it "
                                           "exists).  .json is written as JSON, anything else as TOML."),
    update: bool = typer.Option(False, "--update", help="Measure the cells and write them as this device class's "
                                "entries instead of checking: the baseline's own cells, or the ones named."),
    impl: Optional[List[str]] = typer.Option(None, "--impl", help="Only these implementations (comma-separated); "
                                             "with --update, the implementations to record."),
    shapes: Optional[str] = typer.Option(None, help="Only these shapes (AxB,CxD); with --update: quick | AxB,..."),
    dtype: Optional[str] = typer.Option(None, help="Only this dtype; with --update, the dtype to record."),
    mode: Optional[str] = typer.Option(None, help="Only this mode (fwd | bwd | fwd_bwd); with --update, the mode "
                                                  "to record (default fwd)."),
    time: bool = typer.Option(True, "--time/--no-time", help="Check the time too (--no-time: kernels, fusions, "
                              "graph breaks, recompiles and accuracy only; for shared or noisy machines)."),
    max_slowdown: Optional[float] = typer.Option(None, "--max-slowdown", metavar="PCT", help="Fail a cell slower "
                                                 f"than its baseline by more than PCT % outside the noise "
                                                 f"(default {DEFAULT_MAX_SLOWDOWN:g})."),
    device: Optional[str] = typer.Option(None, help="cpu | cuda (default: CUDA if present)."),
    device_class: Optional[str] = typer.Option(None, "--device-class", help="Hold the cells to this device "
                                               "class's entries (default: this machine's: cpu, h100, ...)."),
    plugin: Optional[List[str]] = typer.Option(None, help="Python file registering cases or implementations the "
                                                          "baseline names."),
    db: Optional[str] = typer.Option(None, help="Keep the runs in this results database (default: a temporary "
                                                "one, removed afterwards)."),
    cell_timeout: float = typer.Option(900.0, help="Seconds before a cell is declared hung and killed."),
):
    """Run the cells a baseline names and fail (exit 1) where one launches more kernels, fuses other
    operators, gains a graph break or recompile, stops matching its reference, or is slower."""
    from fusebench.check.baseline import default_path
    from fusebench.check.verify import Rules, load_plugins, run_check, run_update, selection_keys
    from fusebench.env import best_device
    from fusebench.runner.modes import check_mode

    path = baseline or default_path()
    if max_slowdown is not None and not time:
        fail("--max-slowdown applies to the time check, which --no-time turns off")
    slowdown = DEFAULT_MAX_SLOWDOWN if max_slowdown is None else max_slowdown
    if not math.isfinite(slowdown) or slowdown < 0:
        fail(f"--max-slowdown {max_slowdown!r}: must be a percentage of at least 0")
    device = device or best_device()
    if device not in ("cpu", "cuda") and not device.startswith("cuda:"):
        fail(f"unknown device {device!r}; choose cpu or cuda")
    if mode is not None:
        check_mode(mode)
    impls = comma_list(impl)
    if update:
        if not time or max_slowdown is not None:
            fail("--update records the cells; --no-time and --max-slowdown apply to the check")
        named = cases or impls or shapes or dtype or mode
        load_plugins(plugin or [])  # the cases they register may be named
        keys = selection_keys(cases, impls, shapes or "quick", dtype, mode or "fwd", device) if named else None
        try:
            result = run_update(path, device=device, device_class=device_class, keys=keys, plugins=plugin or [],
                                db=db, cell_timeout=cell_timeout, say=_say)
        except RuntimeError as exc:  # the runs themselves failed: not bad input
            _runs_failed(exc)
        for v in result.changes:
            _print([f"changed: {v.entry.label}"]
                   + ["  " + line for t in v.problems + v.notes for line in t.splitlines()])
        not_ok = [e for e in result.entries if e.status != "ok"]
        for e in not_ok:
            _print([f"recorded as {e.status}: {e.label}" + (f" ({e.reason})" if e.reason else "")])
        _print([f"fusebench check --update: wrote {len(result.entries)} cell(s) for {result.device_class} to "
                f"{result.path} ({result.added} added, {len(result.changes)} changed, {len(not_ok)} not ok)"])
        return
    shape_set = {s.strip() for s in shapes.split(",") if s.strip()} if shapes else None

    def only(entry) -> bool:
        return ((not cases or entry.case in cases) and (not impls or entry.impl in impls)
                and (shape_set is None or entry.shape in shape_set) and (dtype is None or entry.dtype == dtype)
                and (mode is None or entry.mode == mode))

    try:
        result = run_check(path, device=device, device_class=device_class, plugins=plugin or [], db=db,
                           rules=Rules(check_time=time, max_slowdown_pct=slowdown), cell_timeout=cell_timeout,
                           only=only, say=_say)
    except RuntimeError as exc:  # the runs themselves failed: not bad input
        _runs_failed(exc)
    _print(result.report())
    _print([result.summary()])
    if result.failed:
        raise typer.Exit(1)
