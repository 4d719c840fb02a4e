"""Measuring one cell: one implementation of one case at one shape and dtype.

The order matters and is the methodology: check support; prepare (compile) outside any timing;
check accuracy against float64 on several seeds (the first call is the warm-up); only then time.
Nothing here writes to the store: the result is a plain dict, so a worker process can send it.
What a process keeps between its cells is the WorkerState its caller passes (runner/worker_state.py).
"""
from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass

import torch

from fusebench.cases import DTYPES, get_case, shape_str
from fusebench.impls import get_impl
from fusebench.measure.accuracy import (BASELINE_ERROR_FACTOR, Tolerance, compare, error_vs_baseline,
                                        tolerance_policy)
from fusebench.measure.load import apply_threads, watch
from fusebench.measure.phases import Phases
from fusebench.measure.timing import TimingSettings, time_call, wall_reps, wall_time, warm_call_for
from fusebench.metrics import MetricContext, get_metric
from fusebench.runner.mode_call import ModeCall, retained_graph_context
from fusebench.runner.modes import applies_in, case_in_mode
from fusebench.runner.plan import Cell, cpu_dtype
from fusebench.runner.worker_state import WorkerState
from fusebench.store import now
from fusebench.util import first_line

SEEDS = (0, 1, 2)


def is_oom(exc: BaseException) -> bool:
    if isinstance(exc, (torch.cuda.OutOfMemoryError, MemoryError)):
        return True
    msg = str(exc)
    return "out of memory" in msg or "DefaultCPUAllocator: can't allocate" in msg


def predicted_bytes(case, shape, dtype) -> int | None:
    """Memory a cell needs at least: the inputs and outputs, plus the float64 reference's copy of
    them for the accuracy check (unless the case checks a sample).  Intermediates come on top."""
    io = case.min_bytes(shape, dtype)
    if io is None:
        return None
    if case.reference_subset is not None:
        return io
    return io + io * 8 // torch.empty((), dtype=dtype).element_size()


def device_memory(device: str) -> int | None:
    """Total memory of the device a cell runs on: the GPU's, or the host's RAM for the CPU."""
    if device.startswith("cuda"):
        return torch.cuda.get_device_properties(device).total_memory
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def measure_cell(cell: Cell, timing: TimingSettings, seeds=SEEDS, metrics: tuple[str, ...] = (),
                 db_path: str | None = None, keep: dict | None = None, state: WorkerState | None = None) -> dict:
    """Measure `cell`; never raises for a failure of the cell itself (it becomes the status).

    `state`: what the calling process keeps between its cells (runner/worker_state.py); without
    one, nothing is kept.  With `keep`, keep["ctx"] receives the MetricContext of a timed cell (the
    warmed-up implementation and its inputs), for `fusebench show` to look further.  The cell's
    phases (report/columns.py, `phase_s`) are timed as it goes."""
    state = state or WorkerState()
    t0 = time.perf_counter()
    row = dict(case_name=cell.case, impl=cell.impl, shape=shape_str(cell.shape), requested_dtype=cell.dtype,
               dtype=cell.dtype, device=cell.device, mode=cell.mode, started=now(), seeds=0, status="error")
    m = _Measuring(cell, timing, tuple(seeds), tuple(metrics), db_path, keep, state, row)
    row["threads"] = apply_threads(timing.threads)
    try:
        _measure(m)
    except Exception as exc:  # the cell failed; record why and move on
        row["status"] = "oom" if is_oom(exc) else "error"
        row["reason"] = first_line(exc)
    finally:
        if row["status"] not in ("unsupported", "skipped"):  # nothing was allocated otherwise
            with m.ph("free"):
                state.after_cell(cell.case, cell.device, row["status"])
    row["note"] = "; ".join(n for n in m.notes if n) or None
    row["seconds"] = round(time.perf_counter() - t0, 3)
    row["phase_s"] = m.ph.column()
    return row


def dtype_that_runs(cell: Cell) -> str:
    """The dtype a planned cell runs in, for progress lines: its own, or "bf16 as fp32" where the CPU
    runs a half-precision request of a half-precision case in fp32 (as _admit does)."""
    try:
        case = get_case(cell.case)
    except Exception:  # a case this process does not know: the request as it stands
        return cell.dtype
    if cell.device == "cpu" and case.default_dtype in (torch.float16, torch.bfloat16):
        ran, _ = cpu_dtype(DTYPES[cell.dtype])
        if ran != DTYPES[cell.dtype]:
            return f"{cell.dtype} as fp32"
    return cell.dtype


def _admit(cell: Cell, row: dict, notes: list[str]):
    """(case, impl, dtype, shape) of a cell that can be measured here, else None with the row's
    status set (unsupported, skipped)."""
    # In a training mode the case's byte and FLOP models are the mode's (modes.case_in_mode).
    mode = cell.mode
    case, impl = case_in_mode(get_case(cell.case), mode), get_impl(cell.impl)
    dtype, device = DTYPES[cell.dtype], cell.device
    if device == "cpu" and case.default_dtype in (torch.float16, torch.bfloat16):
        dtype, note = cpu_dtype(dtype)
        if note:
            notes.append(note)
            row["dtype"] = "fp32"
    shape = tuple(cell.shape)
    row["min_bytes"], row["flops"] = case.min_bytes(shape, dtype), case.flops(shape, dtype)

    if dtype not in case.dtypes:
        row.update(status="unsupported", reason=f"{case.name} is not defined for {row['dtype']}")
        return None
    # The planner never plans a cell that does not apply; `fusebench show` can ask for one.
    reason = impl.supports(case, shape, dtype, device) if applies_in(impl, case, mode) else \
        f"{impl.name} does not apply to {case.name}" + ("" if mode == "fwd" else f" in {mode} mode")
    if reason:
        row.update(status="unsupported", reason=reason)
        return None

    need, have = predicted_bytes(case, shape, dtype), device_memory(device)
    if need and have:
        if need > have:
            row.update(status="skipped", reason=f"needs about {need / 2**30:.1f} GiB (inputs, outputs and their "
                                                f"float64 reference); the device has {have / 2**30:.1f} GiB")
            return None
    return case, impl, dtype, shape


@dataclass
class _Measuring:
    """One cell being measured: what was asked, the process's WorkerState, the row and notes it
    fills, its phases; then, once admitted and prepared (_prepare), what its steps share."""

    cell: Cell
    timing: TimingSettings
    seeds: tuple
    metrics: tuple
    db_path: str | None
    keep: dict | None
    state: WorkerState
    row: dict
    notes: list = dataclasses.field(default_factory=list)
    ph: Phases = dataclasses.field(default_factory=Phases)
    case: object = None  # in the cell's mode (modes.case_in_mode)
    impl: object = None
    dtype: torch.dtype | None = None
    shape: tuple = ()
    data_key: tuple = ()  # the WorkerState's CellData key
    prepared: object = None
    forward: object = None  # the implementation's forward: its autograd.Function where something is differentiated
    call_of: ModeCall | None = None  # what one call is in the cell's mode
    tol: Tolerance | None = None
    note_at: int = 0  # the prepared implementation's note among `notes`

    @property
    def device(self) -> str:
        return self.cell.device

    def inputs(self, seed: int) -> tuple:
        with self.ph("inputs"):
            return self.state.data.make_inputs(self.data_key, self.case, self.shape, self.dtype, self.device, seed)


def _measure(m: _Measuring) -> None:
    """Admit the cell, prepare it, check its accuracy, then time it (the module docstring's order)."""
    with m.ph("setup"):
        admitted = _admit(m.cell, m.row, m.notes)
    if admitted is None:
        return
    m.case, m.impl, m.dtype, m.shape = admitted
    _prepare(m)
    checked = _check_accuracy(m)
    if checked is not None:
        _time_cell(m, *checked)


def _prepare(m: _Measuring) -> None:
    """Prepare (compile) the implementation outside any timing, and decide the call and the tolerance."""
    case, dtype, mode = m.case, m.dtype, m.cell.mode
    # A case registered again under its name (a reloaded plugin) is another key: it holds its functions.
    m.data_key = (m.cell.case, mode, m.shape, dtype, m.device, case.fn, case.make_inputs, case.reference)
    with m.ph("prepare"):
        prepared = m.prepared = m.impl.prepare(case, m.shape, dtype, m.device)
    m.notes.append(prepared.note)
    m.note_at = len(m.notes) - 1
    # What one call is in this mode; a ceiling is timed as it is, with the mode's bytes.
    ceiling = m.impl.kind == "ceiling"
    # Our kernels' autograd.Function only where something is differentiated: a forward call
    # through it pays autograd's bookkeeping that an inference caller does not.
    m.forward = prepared.train_fn if mode != "fwd" and not ceiling and prepared.train_fn else prepared.fn
    m.call_of = ModeCall(m.forward, case, "fwd" if ceiling else mode)
    tol = Tolerance(*case.tolerance(dtype), grad=case.grad_tolerance(dtype), kind=m.row["dtype"])
    if not prepared.accuracy_available:
        with m.ph("setup"):
            ops = m.state.data.heavy_ops(m.data_key, case, m.inputs(m.seeds[0])) if dtype == torch.float32 \
                else frozenset()
            tol = tolerance_policy(case.tolerance(dtype), case.grad_tolerance(dtype), dtype, m.device, ops,
                                   prepared.note)
        m.notes.append(tol.note)
        m.row["tolerance"] = tol.kind
    m.row.update(atol=tol.atol, rtol=tol.rtol)
    m.tol = tol


def _check_accuracy(m: _Measuring) -> tuple | None:
    """Accuracy on several seeds, the first call also compiling or autotuning; then eager's error
    on the same inputs beside the cell's.  Returns (seed 0's inputs where the timing may use them as
    they are, or None; whether the cell is a mismatch), or None where the cell is unsupported."""
    prepared, row = m.prepared, m.row
    with prepared.context(), torch.no_grad(), retained_graph_context(m.call_of.mode):
        worst, rel = None, None
        args = None
        if prepared.accuracy_available:  # a ceiling, not the case: warm up only, say why unchecked
            args = m.inputs(m.seeds[0])
            with m.ph(f"seed{m.seeds[0]}"):
                m.call_of(*args)
            row["na"] = {"accuracy": prepared.accuracy_available}
        else:
            try:
                worst, rel = _accuracy(m, m.call_of, count=True)
            except RuntimeError as exc:
                if "No available kernel" in str(exc):  # SDPA backend refused these inputs
                    row.update(status="unsupported", reason=first_line(exc))
                    return None
                raise
        m.notes[m.note_at] = prepared.note_after() or m.notes[m.note_at]
        if m.case.reference_subset is not None and worst is not None:
            m.notes.append("accuracy checked on a sample of the output")
        if worst is not None:
            row.update(max_abs_err=worst.max_abs_err, max_rel_err=worst.max_rel_err, tol_ratio=worst.tol_ratio)
        row.update(prepared.check())
        mismatch = worst is not None and not worst.passed
        if mismatch:
            row.update(status="mismatch", reason=worst.detail or f"error {worst.tol_ratio:.3g}x the tolerance "
                       f"(atol {m.tol.atol:g}*max|ref|, rtol {m.tol.rtol:g})")
    if worst is not None:
        _against_eager(m, rel)
    return args, mismatch


def _accuracy(m: _Measuring, call_of: ModeCall, count: bool = False):
    """Check `call_of` against the float64 reference on each seed: (the worst Accuracy, the largest
    relative error over the seeds).  `count`: the row's `seeds` counts the seeds checked."""
    data, case, tol = m.state.data, m.case, m.tol
    worst, rel = None, 0.0
    for seed in m.seeds:
        seed_args = m.inputs(seed)
        # A training mode's reference is computed before the implementation runs, or on a
        # copy of the inputs: an implementation may write over its inputs (Liger's
        # cross-entropy stores the gradient in the logits).
        ref = None
        with m.ph(f"seed{seed}"):
            if call_of.mode == "fwd":
                out = call_of.checked(seed_args, seed)
            else:  # the float64 reference runs inside this phase
                out, ref = call_of.checked_and_reference(seed_args, seed)
        if call_of.mode == "fwd":
            with m.ph("reference"):
                # The reference runs on the seed's own inputs, not on seed_args, which the
                # implementation may have written over: the kept ones, or made again (seeded,
                # so the same); or on the case's sample of them.
                kept = data.inputs.get(seed) if data.key == m.data_key else None
                if kept is None:
                    del seed_args
                    seed_args = kept = case.make_inputs(m.shape, m.dtype, m.device, seed)
                ref_args = kept
                if case.reference_subset is not None:
                    ref_args, out = case.reference_subset(ref_args, out)
                ref = data.reference(m.data_key, case, ref_args, seed)
            with m.ph("compare"):
                acc = compare(out, ref, tol.atol, tol.rtol)
        else:
            with m.ph("compare"):
                acc = compare_training(out, ref, (tol.atol, tol.rtol), tol.grad, case.grad_inputs)
        del out, seed_args, ref
        worst = acc if worst is None else worst.worst(acc)
        rel = max(rel, acc.max_rel_err)
        if count:
            m.row["seeds"] += 1
    return worst, rel


def _against_eager(m: _Measuring, rel: float) -> None:
    """err_vs_eager: the cell's worst relative error over eager's on the same inputs, eager's own
    error measured once per shape (by the eager cell, or here on the first other cell)."""
    data, row = m.state.data, m.row
    if m.impl.name == "eager":
        data.eager_error = rel
        row["err_vs_eager"] = 1.0
        return
    elif data.key != m.data_key or data.eager_error is None:
        try:
            with m.ph("eager_error"):
                eager = get_impl("eager").prepare(m.case, m.shape, m.dtype, m.device)
                with eager.context(), torch.no_grad(), retained_graph_context(m.cell.mode):
                    _, eager_rel = _accuracy(m, ModeCall(eager.fn, m.case, m.cell.mode))
            data.eager_error = eager_rel
        except Exception as exc:
            if is_oom(exc):
                m.state.free_memory(m.device)
            row["na"] = {**(row.get("na") or {}), "err_vs_eager": f"eager's own error: {first_line(exc)}"}
            return
    ratio = error_vs_baseline(rel, data.eager_error, m.dtype)
    row["err_vs_eager"] = ratio
    if ratio is not None and ratio > BASELINE_ERROR_FACTOR:
        m.notes.append(f"error {ratio:.3g}x eager's on the same inputs (more than {BASELINE_ERROR_FACTOR:g}x: "
                       f"less accurate than eager)")


def _time_cell(m: _Measuring, args: tuple | None, mismatch: bool) -> None:
    """Time the cell and measure its metric families.  A wrong cell is timed too and stays
    `mismatch` (both verdicts are shown), without the other families."""
    prepared, row = m.prepared, m.row
    with prepared.context(), torch.no_grad(), retained_graph_context(m.call_of.mode):
        if prepared.timing_available:
            row.update(status="mismatch" if mismatch else "ok", na={**(row.get("na") or {}),
                                                                     "time": prepared.timing_available})
            return
        if args is None:  # the checked calls may have written over theirs
            args = m.inputs(m.seeds[0])
        if not mismatch:
            _time(m, args, m.metrics, m.keep)
            row["status"] = "ok"
            return
        try:
            _time(m, args, (), None)
        except Exception as exc:  # the wrong answer is the cell's verdict; its time is extra
            if is_oom(exc):
                m.state.free_memory(m.device)
            row["na"] = {**(row.get("na") or {}), "time": f"timing the mismatched cell failed: {first_line(exc)}"}
        row["status"] = "mismatch"


def _time(m: _Measuring, args: tuple, metrics, keep: dict | None) -> None:
    """Time the call (and the other metric families); the machine's load is watched meanwhile."""
    call_of, case, device, row, ph = m.call_of, m.case, m.device, m.row, m.ph
    call_of.prime(args)  # bwd: the forward and its saved tensors, outside the timed call
    call = lambda: call_of(*args)  # noqa: E731
    warm_fn = ModeCall(m.forward, case, call_of.mode)  # the mode's call, with its own graph in bwd

    def second_inputs(seed):
        other = case.make_inputs(m.shape, m.dtype, device, seed)
        warm_fn.prime(other)
        return other

    with ph("warm_call"):
        warm = warm_call_for(warm_fn, second_inputs, args, device, m.timing, row["min_bytes"])
    with watch(row.get("threads") or torch.get_num_threads()) as seen:
        with ph("timing"):
            stats = time_call(call, device, m.timing, warm=warm)
        row.update(stats.columns())
        with ph("wall_time"):
            row["wall_time_us"] = wall_time(call, device, wall_reps(stats, m.timing))
    row.update(seen.columns())
    row.update(m.prepared.check())  # a recompile during timing fails the cell
    if row["min_bytes"]:
        row["gbps"] = row["min_bytes"] / stats.median_us / 1e3
    if row["flops"]:
        row["tflops"] = row["flops"] / stats.median_us / 1e6
    ctx = MetricContext(case, m.impl, dataclasses.replace(m.prepared, fn=call_of), args, m.shape, m.dtype, device,
                        row, m.db_path, extra={"timing": m.timing})
    _other_metrics(m, metrics, ctx)
    if keep is not None:
        keep["ctx"] = ctx


def compare_training(out, ref, tol: tuple[float, float], grad_tol: tuple[float, float], grad_inputs):
    """The worse of the outputs' accuracy and each gradient's, the failing part named."""
    (outs, grads), (ref_outs, ref_grads) = out, ref
    worst = compare(outs, ref_outs, *tol)
    for i, g, r in zip(grad_inputs, grads, ref_grads):
        acc = compare(g, r, *grad_tol)
        if not acc.passed or acc.tol_ratio > worst.tol_ratio:
            acc.detail = f"gradient of input {i}: " + (acc.detail or f"error {acc.tol_ratio:.3g}x the tolerance "
                                                       f"(atol {grad_tol[0]:g}*max|ref|, rtol {grad_tol[1]:g})")
        worst = worst.worst(acc)
    return worst


def _other_metrics(m: _Measuring, names, ctx) -> None:
    """Run the selected metric families; a family that fails says why instead of failing the cell."""
    row, mode = m.row, m.cell.mode
    na = dict(row.get("na") or {})
    for name in names:
        if name == "ncu" and mode != "fwd":  # its child process profiles the forward of the cell
            na[name] = f"Nsight Compute profiles the forward only; not available in {mode} mode"
            continue
        try:
            with m.ph(f"metric_{name}"):
                result = dict(get_metric(name)(ctx))
        except Exception as exc:
            if is_oom(exc):
                m.state.free_memory(ctx.device)
            na[name] = first_line(exc)
            continue
        na.update(result.pop("na", {}) or {})
        if result.get("note"):
            m.notes.append(result.pop("note"))
        result.pop("note", None)
        row.update(result)
    if na:
        row["na"] = na
