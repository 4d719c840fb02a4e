"""What one process keeps across the cells it measures.  A worker process, a Ray actor and the
in-process runner each own one WorkerState and pass it to every measure_cell call.

It holds the inputs and float64 references the implementations of one shape share (CellData),
the case measured last, and whether objects that survive a collection are frozen: only in a
process that is fusebench's own, never in a caller's (inline runs, the Python API).
"""
from __future__ import annotations

import gc

import torch

from fusebench.measure.accuracy import heavy_ops

# When the case changes, frozen objects are walked again (free_memory's `full`) only if this much
# GPU memory is still allocated: garbage in frozen cycles that holds no GPU memory can wait, and
# the walk costs ~0.35 s a case.
LEFTOVER_BYTES = 256 << 20


class WorkerState:
    """The state measure_cell keeps between the cells of one process (module docstring).  `freeze`:
    objects alive after a collection are frozen (gc.freeze), in a process that is fusebench's own."""

    def __init__(self, freeze: bool = False):
        self.freeze = freeze
        self.data = CellData()
        self.last_case: str | None = None  # the case of the cell measured last (after_cell)

    def free_memory(self, device: str, full: bool = True) -> None:
        """Collect a cell's garbage (tensors in reference cycles too) and return cached GPU memory.

        With `freeze`, objects alive after a collection are frozen: the next collection then walks
        only what was made since, not the ~400,000 objects of torch, Inductor and Triton (0.18 s a
        walk on a 2-core CPU).  `full` first unfreezes them, so that anything frozen and since become
        garbage (in a cycle) is collected too."""
        if not self.freeze:
            gc.collect()
        else:
            if full:
                gc.unfreeze()
            gc.collect()
            gc.freeze()
        if device.startswith("cuda"):
            torch.cuda.empty_cache()

    def after_cell(self, case: str, device: str, status: str) -> None:
        """Free what a measured cell left: a full collection after a failed cell (the shared data
        dropped too after an out-of-memory), and when the case changes on a GPU that still holds
        more than LEFTOVER_BYTES; otherwise only what the cell made."""
        if status == "oom":
            self.data.clear()
        failed, new_case = status != "ok", case != self.last_case
        self.free_memory(device, full=failed)
        if new_case and not failed and not _gpu_nearly_empty(device):
            self.free_memory(device, full=True)
        self.last_case = case


def _gpu_nearly_empty(device: str) -> bool:
    return device.startswith("cuda") and torch.cuda.memory_allocated(device) <= LEFTOVER_BYTES


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
        # its functions (runner/cell.py, data_key).
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
