"""Measuring one cell: one implementation of one case at one shape and dtype.

The order matters and is the methodology: check support; prepare (compile) outside any timing;
check accuracy against float64 on several seeds (the first call is the warm-up); only then time.
Nothing here writes to the store: the result is a plain dict, so a worker process can send it.
"""
from __future__ import annotations

import dataclasses
import gc
import os
import time

import torch

from fusebench.cases import DTYPES, get_case, shape_str
from fusebench.impls import get_impl
from fusebench.measure.accuracy import (BASELINE_ERROR_FACTOR, Tolerance, compare, error_vs_baseline, heavy_ops,
                                        tolerance_policy)
from fusebench.measure.load import apply_threads, watch
from fusebench.measure.phases import Phases
from fusebench.measure.timing import TimingSettings, time_call, wall_reps, wall_time, warm_call_for
from fusebench.metrics import MetricContext, get_metric
from fusebench.runner.modes import ModeCall, applies_in, case_in_mode, retained_graph_context
from fusebench.runner.plan import Cell, cpu_dtype
from fusebench.store import now
from fusebench.util import first_line

SEEDS = (0, 1, 2)


def is_oom(exc: BaseException) -> bool:
    if isinstance(exc, (torch.cuda.OutOfMemoryError, MemoryError)):
        return True
    msg = str(exc)
    return "out of memory" in msg or "DefaultCPUAllocator: can't allocate" in msg


# Whether free_memory freezes what survives a collection: in worker processes (worker_process()),
# whose objects are fusebench's own, not in a caller's process (inline runs, the API).
_FREEZE = [False]


def worker_process() -> None:
    """Called by a worker process before its first cell (runner/scheduler.py, runner/ray_backend.py)."""
    _FREEZE[0] = True


def free_memory(device: str, full: bool = True) -> None:
    """Collect a cell's garbage (tensors in reference cycles too) and return cached GPU memory.

    In a worker, objects alive after a collection are frozen (gc.freeze): the next collection then
    walks only what was made since, not the ~400,000 objects of torch, Inductor and Triton (0.18 s
    a walk on a 2-core CPU).  `full` first unfreezes them, so that anything frozen and since become
    garbage (in a cycle) is collected too: after a failed cell, and when the case changes (on a
    GPU only if it still holds more than LEFTOVER_BYTES)."""
    if not _FREEZE[0]:
        gc.collect()
    else:
        if full:
            gc.unfreeze()
        gc.collect()
        gc.freeze()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


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


class CellData:
    """Inputs and float64 references that the cells of one (case, mode, shape, dtype, device) share.

    A worker measures a shape's implementations one after another (runner/plan.py orders cells so,
    the scheduler keeps a case on one worker): the inputs of each seed, and the forward's float64
    reference on them, are the same for all of them, so they are made once and kept until a cell
    of another key comes.  Each cell gets clones of the inputs (an implementation may write over
    its inputs, as Liger's cross-entropy does); the references are only read.  Only sets of at
    most `max_bytes` are kept, so a large shape's copies never stay beside the next cell's.
    `made` counts what was computed rather than reused (tests read it)."""

    def __init__(self, max_bytes: int = 256 << 20):
        self.max_bytes = max_bytes
        self.key: tuple | None = None
        self.inputs: dict[int, tuple] = {}
        self.references: dict[int, object] = {}
        self.made = {"inputs": 0, "reference": 0}
        self.ops: frozenset[str] | None = None  # heavy_ops of the case's function (fp32 cells)
        self.eager_error: float | None = None  # eager's worst relative error at this key

    def clear(self) -> None:
        self.key, self.inputs, self.references = None, {}, {}
        self.ops, self.eager_error = None, None

    def _use(self, key: tuple) -> None:
        # A case registered again under its name (a reloaded plugin) is another key: the key holds
        # its functions (see _measure).
        if key != self.key:
            self.clear()
            self.key = key

    def _fits(self, more) -> bool:
        held = sum(_tensor_bytes(v) for d in (self.inputs, self.references) for v in d.values())
        return held + _tensor_bytes(more) <= self.max_bytes

    def make_inputs(self, key: tuple, case, shape, dtype, device, seed: int) -> tuple:
        """The seed's inputs: fresh clones of the kept ones, or made (and kept where they fit)."""
        self._use(key)
        kept = self.inputs.get(seed)
        if kept is not None:
            return tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in kept)
        self.made["inputs"] += 1
        args = case.make_inputs(shape, dtype, device, seed)
        if _clone_keeps_layout(args) and self._fits(args):
            self.inputs[seed] = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)
        return args

    def heavy_ops(self, key: tuple, case, args: tuple) -> frozenset[str]:
        """Whether the case's function computes GEMMs or convolutions (once per key)."""
        self._use(key)
        if self.ops is None:
            self.ops = heavy_ops(case.fn, args)
        return self.ops

    def reference(self, key: tuple, case, args: tuple, seed: int):
        """case.run_reference(args) for the seed's inputs `args` (or the case's sample of them)."""
        self._use(key)
        if seed in self.references:
            return self.references[seed]
        self.made["reference"] += 1
        ref = case.run_reference(args)
        if seed in self.inputs and self._fits(ref):  # kept only beside inputs that are the seed's own
            self.references[seed] = ref
        return ref


def _tensor_bytes(obj) -> int:
    if isinstance(obj, torch.Tensor):
        return obj.untyped_storage().nbytes()
    if isinstance(obj, (tuple, list)):
        return sum(_tensor_bytes(o) for o in obj)
    return 0


def _clone_keeps_layout(args: tuple) -> bool:
    """Whether clone() reproduces every input exactly: dense tensors (contiguous or channels-last)
    keep their strides under clone; a view with gaps would come back compacted."""
    for a in args:
        if isinstance(a, torch.Tensor):
            if a.requires_grad:
                return False
            if not (a.is_contiguous() or (a.dim() == 4 and a.is_contiguous(memory_format=torch.channels_last))):
                return False
    return True


# One per process: a worker's cells of one key reuse it (CellData).
CELL_DATA = CellData()
_LAST_CASE: list[str | None] = [None]  # the case of the cell measured last (free_memory's `full`)
# When the case changes, frozen objects are walked again (free_memory's `full`) only if this much
# GPU memory is still allocated: garbage in frozen cycles that holds no GPU memory can wait, and
# the walk costs ~0.35 s a case.
LEFTOVER_BYTES = 256 << 20


def _gpu_nearly_empty(device: str) -> bool:
    return device.startswith("cuda") and torch.cuda.memory_allocated(device) <= LEFTOVER_BYTES


def measure_cell(cell: Cell, timing: TimingSettings, seeds=SEEDS, metrics: tuple[str, ...] = (),
                 db_path: str | None = None, keep: dict | None = None) -> dict:
    """Measure `cell`; never raises for a failure of the cell itself (it becomes the status).

    With `keep`, keep["ctx"] receives the MetricContext of a timed cell (the warmed-up
    implementation and its inputs), for `fusebench show` to look further.  The cell's phases
    (report/columns.py, `phase_s`) are timed as it goes."""
    t0 = time.perf_counter()
    row = dict(case_name=cell.case, impl=cell.impl, shape=shape_str(cell.shape), requested_dtype=cell.dtype,
               dtype=cell.dtype, device=cell.device, mode=cell.mode, started=now(), seeds=0, status="error")
    notes: list[str] = []
    ph = Phases()
    row["threads"] = apply_threads(timing.threads)
    try:
        _measure(cell, timing, seeds, row, notes, metrics, db_path, keep, ph)
    except Exception as exc:  # the cell failed; record why and move on
        row["status"] = "oom" if is_oom(exc) else "error"
        row["reason"] = first_line(exc)
    finally:
        if row["status"] not in ("unsupported", "skipped"):  # nothing was allocated otherwise
            with ph("free"):
                if row["status"] == "oom":
                    CELL_DATA.clear()
                failed, new_case = row["status"] != "ok", cell.case != _LAST_CASE[0]
                free_memory(cell.device, full=failed)
                if new_case and not failed and not _gpu_nearly_empty(cell.device):
                    free_memory(cell.device, full=True)
                _LAST_CASE[0] = cell.case
    row["note"] = "; ".join(n for n in notes if n) or None
    row["seconds"] = round(time.perf_counter() - t0, 3)
    row["phase_s"] = ph.column()
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


def _measure(cell: Cell, timing: TimingSettings, seeds, row: dict, notes: list[str], metrics=(),
             db_path=None, keep=None, ph: Phases | None = None) -> None:
    ph = ph or Phases()
    with ph("setup"):
        admitted = _admit(cell, row, notes)
    if admitted is None:
        return
    case, impl, dtype, shape = admitted
    mode, device = cell.mode, cell.device
    data_key = (cell.case, mode, shape, dtype, device, case.fn, case.make_inputs, case.reference)

    def inputs(seed):
        with ph("inputs"):
            return CELL_DATA.make_inputs(data_key, case, shape, dtype, device, seed)

    with ph("prepare"):
        prepared = impl.prepare(case, shape, dtype, device)
    notes.append(prepared.note)
    note_at = len(notes) - 1
    # What one call is in this mode; a ceiling is timed as it is, with the mode's bytes.
    ceiling = impl.kind == "ceiling"
    # Our kernels' autograd.Function only where something is differentiated: a forward call
    # through it pays autograd's bookkeeping that an inference caller does not.
    forward = prepared.train_fn if mode != "fwd" and not ceiling and prepared.train_fn else prepared.fn
    call_of = ModeCall(forward, case, "fwd" if ceiling else mode)
    tol = Tolerance(*case.tolerance(dtype), grad=case.grad_tolerance(dtype), kind=row["dtype"])
    if not prepared.accuracy_available:
        with ph("setup"):
            ops = CELL_DATA.heavy_ops(data_key, case, inputs(seeds[0])) if dtype == torch.float32 else frozenset()
            tol = tolerance_policy(case.tolerance(dtype), case.grad_tolerance(dtype), dtype, device, ops,
                                   prepared.note)
        notes.append(tol.note)
        row["tolerance"] = tol.kind
    row.update(atol=tol.atol, rtol=tol.rtol)

    with prepared.context(), torch.no_grad(), retained_graph_context(call_of.mode):
        # --- accuracy, several seeds; the first call also compiles / autotunes -----------------
        worst, rel = None, None
        args = None  # seed 0's inputs where the timing may use them as they are
        if prepared.accuracy_available:  # a ceiling, not the case: warm up only, say why unchecked
            args = inputs(seeds[0])
            with ph(f"seed{seeds[0]}"):
                call_of(*args)
            row["na"] = {"accuracy": prepared.accuracy_available}
        else:
            try:
                worst, rel = _accuracy(call_of, case, shape, dtype, device, seeds, data_key, tol, inputs, ph, row)
            except RuntimeError as exc:
                if "No available kernel" in str(exc):  # SDPA backend refused these inputs
                    row.update(status="unsupported", reason=first_line(exc))
                    return
                raise
        notes[note_at] = prepared.note_after() or notes[note_at]
        if case.reference_subset is not None and worst is not None:
            notes.append("accuracy checked on a sample of the output")
        if worst is not None:
            row.update(max_abs_err=worst.max_abs_err, max_rel_err=worst.max_rel_err, tol_ratio=worst.tol_ratio)
        row.update(prepared.check())
        mismatch = worst is not None and not worst.passed
        if mismatch:
            row.update(status="mismatch", reason=worst.detail or
                       f"error {worst.tol_ratio:.3g}x the tolerance (atol {tol.atol:g}*max|ref|, rtol {tol.rtol:g})")
    if worst is not None:
        _against_eager(cell, impl, case, shape, dtype, device, seeds, data_key, tol, inputs, ph, row, notes, rel)

    with prepared.context(), torch.no_grad(), retained_graph_context(call_of.mode):
        # --- timing: a wrong cell is timed too and stays `mismatch` (both verdicts are shown) ---
        if prepared.timing_available:
            row.update(status="mismatch" if mismatch else "ok", na={**(row.get("na") or {}),
                                                                     "time": prepared.timing_available})
            return
        if args is None:  # the checked calls may have written over theirs
            args = inputs(seeds[0])
        if not mismatch:
            _time(call_of, case, prepared, forward, args, shape, dtype, device, timing, row, notes, metrics,
                  db_path, keep, impl, mode, ph)
            row["status"] = "ok"
            return
        try:
            _time(call_of, case, prepared, forward, args, shape, dtype, device, timing, row, notes, (), db_path,
                  None, impl, mode, ph)
        except Exception as exc:  # the wrong answer is the cell's verdict; its time is extra
            if is_oom(exc):
                free_memory(device)
            row["na"] = {**(row.get("na") or {}), "time": f"timing the mismatched cell failed: {first_line(exc)}"}
        row["status"] = "mismatch"


def _accuracy(call_of: ModeCall, case, shape, dtype, device, seeds, data_key, tol: Tolerance, inputs, ph: Phases,
              row: dict | None = None):
    """Check `call_of` against the float64 reference on each seed: (the worst Accuracy, the largest
    relative error over the seeds).  `row["seeds"]` counts the seeds checked."""
    worst, rel = None, 0.0
    for seed in seeds:
        seed_args = inputs(seed)
        # A training mode's reference is computed before the implementation runs, or on a
        # copy of the inputs: an implementation may write over its inputs (Liger's
        # cross-entropy stores the gradient in the logits).
        ref = None
        with ph(f"seed{seed}"):
            if call_of.mode == "fwd":
                out = call_of.checked(seed_args, seed)
            else:  # the float64 reference runs inside this phase
                out, ref = call_of.checked_and_reference(seed_args, seed)
        if call_of.mode == "fwd":
            with ph("reference"):
                # The reference runs on the seed's own inputs, not on seed_args, which the
                # implementation may have written over: the kept ones, or made again (seeded,
                # so the same); or on the case's sample of them.
                kept = CELL_DATA.inputs.get(seed) if CELL_DATA.key == data_key else None
                if kept is None:
                    del seed_args
                    seed_args = kept = case.make_inputs(shape, dtype, device, seed)
                ref_args = kept
                if case.reference_subset is not None:
                    ref_args, out = case.reference_subset(ref_args, out)
                ref = CELL_DATA.reference(data_key, case, ref_args, seed)
            with ph("compare"):
                acc = compare(out, ref, tol.atol, tol.rtol)
        else:
            with ph("compare"):
                acc = compare_training(out, ref, (tol.atol, tol.rtol), tol.grad, case.grad_inputs)
        del out, seed_args, ref
        worst = acc if worst is None else worst.worst(acc)
        rel = max(rel, acc.max_rel_err)
        if row is not None:
            row["seeds"] += 1
    return worst, rel


def _against_eager(cell: Cell, impl, case, shape, dtype, device, seeds, data_key, tol: Tolerance, inputs,
                   ph: Phases, row: dict, notes: list[str], rel: float) -> None:
    """err_vs_eager: the cell's worst relative error over eager's on the same inputs, eager's own
    error measured once per shape (by the eager cell, or here on the first other cell)."""
    if impl.name == "eager":
        CELL_DATA.eager_error = rel
        row["err_vs_eager"] = 1.0
        return
    elif CELL_DATA.key != data_key or CELL_DATA.eager_error is None:
        try:
            with ph("eager_error"):
                eager = get_impl("eager").prepare(case, shape, dtype, device)
                with eager.context(), torch.no_grad(), retained_graph_context(cell.mode):
                    _, eager_rel = _accuracy(ModeCall(eager.fn, case, cell.mode), case, shape, dtype, device,
                                             seeds, data_key, tol, inputs, ph)
            CELL_DATA.eager_error = eager_rel
        except Exception as exc:
            if is_oom(exc):
                free_memory(device)
            row["na"] = {**(row.get("na") or {}), "err_vs_eager": f"eager's own error: {first_line(exc)}"}
            return
    ratio = error_vs_baseline(rel, CELL_DATA.eager_error, dtype)
    row["err_vs_eager"] = ratio
    if ratio is not None and ratio > BASELINE_ERROR_FACTOR:
        notes.append(f"error {ratio:.3g}x eager's on the same inputs (more than {BASELINE_ERROR_FACTOR:g}x: "
                     f"less accurate than eager)")


def _time(call_of: ModeCall, case, prepared, forward, args, shape, dtype, device, timing: TimingSettings,
          row: dict, notes: list[str], metrics, db_path, keep, impl, mode: str, ph: Phases) -> None:
    """Time the call (and the other metric families); the machine's load is watched meanwhile."""
    call_of.prime(args)  # bwd: the forward and its saved tensors, outside the timed call
    call = lambda: call_of(*args)  # noqa: E731
    warm_fn = ModeCall(forward, case, call_of.mode)  # the mode's call, with its own graph in bwd

    def second_inputs(seed):
        other = case.make_inputs(shape, dtype, device, seed)
        warm_fn.prime(other)
        return other

    with ph("warm_call"):
        warm = warm_call_for(warm_fn, second_inputs, args, device, timing, row["min_bytes"])
    with watch(row.get("threads") or torch.get_num_threads()) as seen:
        with ph("timing"):
            stats = time_call(call, device, timing, warm=warm)
        row.update(stats.columns())
        with ph("wall_time"):
            row["wall_time_us"] = wall_time(call, device, wall_reps(stats, timing))
    row.update(seen.columns())
    row.update(prepared.check())  # a recompile during timing fails the cell
    if row["min_bytes"]:
        row["gbps"] = row["min_bytes"] / stats.median_us / 1e3
    if row["flops"]:
        row["tflops"] = row["flops"] / stats.median_us / 1e6
    ctx = MetricContext(case, impl, dataclasses.replace(prepared, fn=call_of), args, shape, dtype, device, row,
                        db_path, extra={"timing": timing})
    _other_metrics(metrics, ctx, row, notes, mode, ph)
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


def _other_metrics(names, ctx, row: dict, notes: list[str], mode: str = "fwd", ph: Phases | None = None) -> None:
    """Run the selected metric families; a family that fails says why instead of failing the cell."""
    na = dict(row.get("na") or {})
    for name in names:
        if name == "ncu" and mode != "fwd":  # its child process profiles the forward of the cell
            na[name] = f"Nsight Compute profiles the forward only; not available in {mode} mode"
            continue
        try:
            with (ph or Phases())(f"metric_{name}"):
                result = dict(get_metric(name)(ctx))
        except Exception as exc:
            if is_oom(exc):
                free_memory(ctx.device)
            na[name] = first_line(exc)
            continue
        na.update(result.pop("na", {}) or {})
        if result.get("note"):
            notes.append(result.pop("note"))
        result.pop("note", None)
        row.update(result)
    if na:
        row["na"] = na
