"""`fusebench show CASE --shape AxB --impl NAME`: one cell in depth.

`show_cell` measures one cell the way the runner does (prepare, accuracy on seed 0, time and
wall_time) and then every metric family, and keeps what a row cannot hold: the kernels of one call
with their durations (GPU), Inductor's generated code and the configs its autotuner chose, the
chosen configs of fusebench's own autotuned Triton kernels, and ncu's per-kernel counters when
asked.  `print_show` renders the result with rich.
"""
from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
import time

import torch

from fusebench.metrics import ALL_METRICS, get_metric
from fusebench.metrics._util import first_line, is_inductor
from fusebench.util import as_text

SHOWN_FAMILIES = tuple(f for f in ALL_METRICS if f != "ncu")  # ncu on request


def _resolve(case, impl, shape, dtype):
    """Names and strings to objects.  The CPU's dtype substitution is left to measure_cell."""
    from fusebench.cases import get_case, parse_dtype, parse_shape
    from fusebench.impls import get_impl

    case = get_case(case) if isinstance(case, str) else case
    impl = get_impl(impl) if isinstance(impl, str) else impl
    if isinstance(shape, str):
        shape = parse_shape(shape)
    shape = case.normalize_shape(tuple(shape))
    if dtype is None:
        dtype = case.default_dtype
    elif isinstance(dtype, str):
        dtype = parse_dtype(dtype)
    return case, impl, shape, dtype


def inductor_autotune_choices(kernel_names: list[str]) -> list[dict]:
    """Configs Inductor's runtime autotuner settled on for these generated Triton kernels: read from
    the loaded output-code modules (each kernel's CachingAutotuner keeps the launcher it chose)."""
    from torch._inductor.codecache import PyCodeCache

    wanted, found = set(kernel_names), {}
    modules = list(PyCodeCache.modules) + list(getattr(PyCodeCache, "modules_no_attr", {}).values())
    for mod in reversed(modules):
        for name, obj in list(vars(mod).items()):
            if name not in wanted or name in found or not hasattr(obj, "launchers"):
                continue
            launchers = list(getattr(obj, "launchers", []) or [])
            # Inductor drops its candidate list once the launchers are built: the count is often unknown.
            configs = getattr(obj, "configs", None)
            candidates = len(configs) if configs else None
            if len(launchers) == 1:
                cfg = str(getattr(launchers[0], "config", "?"))
            else:
                cfg = f"not reduced to one: {len(launchers)} launchers kept"
            found[name] = {"kernel": name, "config": cfg, "candidates": candidates}
    return [found[n] for n in kernel_names if n in found]


def fusebench_autotune_choices() -> list[dict]:
    """Configs chosen by triton.autotune for fusebench's own kernels in this process."""
    try:
        from triton.runtime.autotuner import Autotuner
    except ImportError:
        return []
    out = []
    for modname, mod in list(sys.modules.items()):
        if not modname.startswith("fusebench.kernels") or mod is None:
            continue
        for name, obj in list(vars(mod).items()):
            if isinstance(obj, Autotuner):
                for key, cfg in getattr(obj, "cache", {}).items():
                    out.append({"kernel": f"{modname.rsplit('.', 1)[-1]}.{name}", "config": str(cfg),
                                "candidates": len(getattr(obj, "configs", []) or []), "key": str(key)})
    return out


# Progress lines the profiler's library writes to the process's stderr ("USDT:2026-.. 123:123
# SyncActivityProfilerHandler.cpp:52] profiler_start"): not for a user's eyes.
PROFILER_CHATTER = re.compile(r"^(USDT|INFO|STAGE):\d{4}-\d\d-\d\d [\d:.]+ \d+:\d+ \S+:\d+\] ")


@contextlib.contextmanager
def without_profiler_chatter():
    """Drop the profiler library's progress lines: stderr (file descriptor 2, where C++ libraries
    write) goes to a file meanwhile, and what else was written there is passed on afterwards."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):  # no real stderr (an embedding host): leave it alone
        yield
        return
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            try:
                sys.stderr.flush()
            except (OSError, ValueError):
                pass
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            kept = [line for line in tmp.read().decode("utf-8", "replace").splitlines(keepends=True)
                    if not PROFILER_CHATTER.match(line)]
            if kept:
                sys.stderr.write("".join(kept))
                sys.stderr.flush()


class CannotRunHere(ValueError):
    """`show` asked for a cell that cannot run here (bad input: one line, exit status 2)."""


def check_runs_here(cell) -> None:
    """Raise CannotRunHere where `cell` (a runner Cell) cannot run on its device: the runner's own
    admission (runner.cell._admit) says unsupported or skipped."""
    from fusebench.runner.cell import _admit

    row = {"dtype": cell.dtype}
    if _admit(cell, row, []) is None:
        raise CannotRunHere(f"{cell.impl} cannot run {cell.case} {'x'.join(map(str, cell.shape))} {cell.dtype} on "
                            f"{cell.device} here ({row['status']}): {row['reason']}")


def _defined_triton_kernels(code: str) -> list[str]:
    import re

    return re.findall(r"^(\w+)\s*=\s*async_compile\.triton\(", code, re.MULTILINE)


def show_cell(case, impl, shape, dtype=None, device: str | None = None, with_ncu: bool = False,
              db_path: str | None = None, timing=None, families=SHOWN_FAMILIES) -> dict:
    """Measure one cell in depth; returns a plain dict (see print_show).  Never raises for a failure of
    the cell itself: it is in result["status"] / result["reason"].

    The cell is measured by the runner's own `measure_cell` (one seed), with every metric family;
    then the warmed-up implementation it hands back is inspected further.  A cell that cannot run
    here (the implementation is unavailable or refuses it, it cannot fit) raises CannotRunHere, a
    ValueError, before anything is measured."""
    from fusebench.cases import DTYPE_NAMES, shape_str
    from fusebench.device_peaks import device_name
    from fusebench.measure.timing import TimingSettings
    from fusebench.runner.cell import measure_cell
    from fusebench.runner.plan import Cell

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    case, impl, shape, dtype = _resolve(case, impl, shape, dtype)
    keep: dict = {}
    t = time.perf_counter()
    cell = Cell(case.name, impl.name, shape, DTYPE_NAMES[dtype], device)
    check_runs_here(cell)
    from fusebench.measure.load import apply_threads, default_threads

    before = torch.get_num_threads()  # the cell runs with a run's threads; the caller keeps its own
    try:
        with without_profiler_chatter():
            row = measure_cell(cell, timing or TimingSettings(threads=default_threads(device)), seeds=(0,),
                               metrics=tuple(families), db_path=db_path, keep=keep)
    finally:
        apply_threads(before)
    result: dict = {"cell": {"case": case.name, "impl": impl.name, "shape": shape_str(shape),
                             "dtype": row["dtype"], "device": device, "device_name": device_name(device)},
                    "status": row["status"], "reason": row.get("reason"), "row": row,
                    "na": dict(row.get("na") or {}), "notes": [n for n in (row.get("note") or "").split("; ") if n],
                    "kernels": [], "code": [], "autotune": [], "ncu_kernels": [],
                    "seconds": {"measure": time.perf_counter() - t}}
    ctx = keep.get("ctx")
    if ctx is None:  # not timed (unsupported, mismatch, error ...): the row says why
        return result
    with ctx.prepared.context(), torch.no_grad(), without_profiler_chatter():
        for what, look in (("kernels", _kernel_details), ("code", _generated_code), ("ncu", _ncu_details)):
            if what == "ncu" and not with_ncu:
                continue
            t = time.perf_counter()
            try:
                look(ctx, result)
            except Exception as exc:
                result["na"][what] = first_line(exc)
            result["seconds"][what] = time.perf_counter() - t
    return result


def _kernel_details(ctx, result: dict) -> None:
    """The kernels of one call with their durations (GPU only: the CPU has no device kernels)."""
    if ctx.device.startswith("cuda"):
        from fusebench.metrics import kernels as kmod

        result["kernels"] = kmod.measure(ctx)[1]


def _generated_code(ctx, result: dict) -> None:
    """Inductor's generated code and the configs its autotuner chose; or our kernels' autotune picks."""
    if is_inductor(ctx):
        from fusebench.metrics.kernels import inductor_output_code

        result["code"] = inductor_output_code(ctx.case.fn, getattr(ctx.impl, "mode", None), ctx.args)
        if ctx.device.startswith("cuda"):
            names = [n for code in result["code"] for n in _defined_triton_kernels(code)]
            result["autotune"] = inductor_autotune_choices(names)
    elif ctx.impl.name == "triton":
        result["autotune"] = fusebench_autotune_choices()


def _ncu_details(ctx, result: dict) -> None:
    """ncu's counters per kernel of one warmed-up call (in a profiled child process)."""
    from fusebench.cases import DTYPE_NAMES
    from fusebench.metrics import ncu as nmod

    if not ctx.device.startswith("cuda"):
        result["na"].update(get_metric("ncu")(ctx).get("na", {}))
        return
    parsed: list = []
    cols = nmod.run_ncu(ctx.case, ctx.impl.name, ctx.shape, DTYPE_NAMES[ctx.dtype], ctx.row.get("min_bytes"),
                        parsed_out=parsed)
    result["na"].update(cols.pop("na", {}) or {})
    cols.pop("note", None)
    result["row"].update(cols)
    result["ncu_kernels"] = parsed[0]["kernels"] if parsed else []


# ----------------------------------------------------------------------------------------------
# rendering

UNITS = [("time_us", "us"), ("time_spread", "IQR/median"), ("threads", ""), ("cpu_pressure", "share"),
         ("load_per_cpu", ""), ("under_load", ""),
         ("wall_time_us", "us"), ("graph_time_us", "us"), ("kernel_time_us", "us"),
         ("ncu_time_us", "us"), ("gbps", "GB/s"), ("tflops", "TFLOP/s"), ("pct_roofline", "%"),
         ("roofline_bound", ""), ("kernels", ""), ("memsets", ""), ("memcpys", ""), ("peak_mem_bytes", "B"),
         ("footprint_bytes", "B"), ("min_bytes", "B"), ("dram_read_bytes", "B"), ("dram_write_bytes", "B"),
         ("traffic_amplification", "x"), ("sass_inst", "inst"), ("flops", "FLOP"), ("flops_counted", "FLOP"),
         ("compile_cold_s", "s"), ("compile_warm_s", "s"), ("max_abs_err", ""), ("max_rel_err", ""),
         ("tol_ratio", "x tol"), ("tolerance", ""), ("atol", ""), ("rtol", ""), ("err_vs_eager", "x eager's"),
         ("graphs", ""), ("graph_breaks", ""), ("recompiles", "")]


def _fmt(v) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        if v.is_integer() and abs(v) < 1e18:
            return f"{int(v):,}"
        if v != 0 and (abs(v) < 1e-3 or abs(v) >= 1e7):
            return f"{v:.3e}"
        return f"{v:,.3f}" if abs(v) < 100 else f"{v:,.1f}"
    return str(v)


def print_show(result: dict, console=None, code_lines: int | None = 200) -> None:
    """Render show_cell's result: metrics, kernels, code, autotuner choices, ncu counters."""
    from rich.console import Console
    from rich.syntax import Syntax
    from rich.table import Table

    console = console or Console()
    c = result["cell"]
    console.rule(f"{c['case']} · {c['impl']} · {c['shape']} · {c['dtype']} · {c.get('device_name') or c['device']}")
    console.print(f"status: [bold]{as_text(result['status'])}[/bold]" + (f" — {as_text(result['reason'])}" if result.get("reason") else ""))

    t = Table(title="metrics", show_lines=False)
    t.add_column("metric")
    t.add_column("value", justify="right")
    t.add_column("unit")
    t.add_column("not available because")
    row, na = result.get("row", {}), result.get("na", {})
    shown = set()
    for key, unit in UNITS:
        if key in row or key in na:
            t.add_row(key, as_text(_fmt(row.get(key))), unit if key in row else "", "" if key in row else as_text(na.get(key, "")))
            shown.add(key)
    for key, why in na.items():
        if key not in shown:
            t.add_row(key, "", "", as_text(why))
    console.print(t)
    for note in result.get("notes", []):
        console.print(f"[dim]note:[/dim] {as_text(note)}")

    if result.get("kernels"):
        kt = Table(title="kernels of one call (profiler)")
        kt.add_column("#", justify="right")
        kt.add_column("kind")
        kt.add_column("name", overflow="fold")
        kt.add_column("us", justify="right")
        for i, k in enumerate(result["kernels"]):
            kt.add_row(str(i), as_text(k["kind"]), as_text(k["name"]), f"{k['dur_us']:.2f}")
        console.print(kt)
    elif row.get("kernel_names"):
        kt = Table(title="kernels (from generated code)")
        kt.add_column("name")
        kt.add_column("calls", justify="right")
        for name, n in row["kernel_names"]:
            kt.add_row(as_text(name), str(n))
        console.print(kt)

    if result.get("ncu_kernels"):
        nt = Table(title="Nsight Compute, per kernel")
        nt.add_column("kernel", overflow="fold")
        for m in ("dram__bytes_read.sum", "dram__bytes_write.sum", "smsp__inst_executed.sum", "gpu__time_duration.sum"):
            nt.add_column(m, justify="right")
        for k in result["ncu_kernels"]:
            nt.add_row(as_text(k.get("name", "")), *[_fmt(k.get(m)) for m in (
                "dram__bytes_read.sum", "dram__bytes_write.sum", "smsp__inst_executed.sum", "gpu__time_duration.sum")])
        console.print(nt)

    if result.get("autotune"):
        at = Table(title="autotuner choices (the launcher each kernel kept)")
        at.add_column("kernel")
        at.add_column("config", overflow="fold")
        at.add_column("candidates", justify="right")
        for a in result["autotune"]:
            n = a.get("candidates")
            at.add_row(as_text(a["kernel"]), as_text(a["config"] + (f"  (key {a['key']})" if a.get("key") else "")),
                       "" if n is None else str(n))
        console.print(at)

    for i, code in enumerate(result.get("code", [])):
        text, what = code_excerpt(code, code_lines)
        console.rule(f"Inductor output code, graph {i}" + (f" ({what})" if what else ""))
        console.print(Syntax(text, "python", line_numbers=False, word_wrap=False))


_KERNEL = re.compile(r"^(\w+) = async_compile\.\w+\(")
_CALL = re.compile(r"^(\s*)def call\(")


def _blocks(lines: list[str]) -> tuple[list[tuple[str, list[str]]], list[str]]:
    """(the kernels' definitions as (name, lines), the `call` function's lines) of Inductor's code."""
    kernels, call, i = [], [], 0
    while i < len(lines):
        m, c = _KERNEL.match(lines[i]), _CALL.match(lines[i])
        if m:  # up to the line that closes the call: the next line at column 0 ending in ")"
            j = i + 1
            while j < len(lines) and not (lines[j][:1] not in (" ", "\t", "") and lines[j].rstrip().endswith(")")):
                j += 1
            kernels.append((m.group(1), lines[i:j + 1]))
            i = j + 1
            continue
        if c and not call:
            indent, j = len(c.group(1)), i + 1
            while j < len(lines) and (not lines[j].strip() or len(lines[j]) - len(lines[j].lstrip()) > indent):
                j += 1
            call = lines[i:j]
            while call and not call[-1].strip():
                call.pop()
            i = j
            continue
        i += 1
    return kernels, call


def code_excerpt(code: str, limit: int | None) -> tuple[str, str]:
    """(text, what it is) of Inductor's output code within `limit` lines: the kernels and the
    `call` function that launches them, not the imports and helpers above them; all of it without
    a limit or where it fits."""
    lines = code.splitlines()
    if not limit or len(lines) <= limit:
        return code, ""
    kernels, call = _blocks(lines)
    if not kernels and not call:
        return "\n".join(lines[:limit]), f"first {limit} of {len(lines)} lines"
    call_budget = min(len(call), max(limit // 2, limit - sum(len(b) for _, b in kernels)))
    budget, out = limit - call_budget, []
    for name, block in kernels:
        if budget <= 0:
            out.append(f"# ... kernel {name}: {len(block)} lines not shown")
            continue
        out += block[:budget]
        if len(block) > budget:
            out.append(f"# ... {len(block) - budget} more lines of {name}")
        budget -= len(block)
    if call:
        out += [""] + call[:call_budget] + ([f"# ... {len(call) - call_budget} more lines of call"]
                                            if len(call) > call_budget else [])
    shown = sum(1 for line in out if line and not line.startswith("# ... "))
    return "\n".join(out), (f"its kernels and `call`, {shown} of {len(lines)} lines; imports and helpers left out; "
                             f"--code-lines 0 shows all")
