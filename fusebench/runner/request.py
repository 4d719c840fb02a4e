"""A run as asked for: the one spelling of `fusebench run`'s options.

The CLI builds a RunRequest from its flags and fusebench.run from its keywords; fusebench.api checks
it whole (the form of each option, then the plan) before the store is touched, and hands the
checked request -- every option in its resolved form -- to the scheduler, its workers and the Ray
actors, which read its timing, metrics, plugins and store from it.  A run stores what it measured
(`stored`) as JSON in its runs row; `run_mode` and `mode_of_run` read that record back.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from typing import Sequence

from fusebench.measure.timing import TimingSettings
from fusebench.runner.modes import MODES
from fusebench.runner.plan import Cell, ShapeSpec
from fusebench.store import StoreError

# The largest size the store holds (SQLite's integers are 64-bit).
INT64 = 2**63


@dataclass(frozen=True)
class RunRequest:
    """What to measure, how, and where to store it.  As asked, a field may take any form fusebench.run
    accepts ("a,b" or a list of names, shapes as text or tuples, gpus as "all" or indices); once
    checked (fusebench.api) each holds its resolved form, noted after the field."""

    cases: str | Sequence[str] | None = None  # checked: a list of names, or None for all
    impls: str | Sequence[str] | None = None  # checked: a list of names, or None for the default ones
    shapes: ShapeSpec = "quick"  # checked: the --shapes text
    dtype: str | None = None  # None: each case's own
    device: str | None = None  # checked: cpu, cuda or cuda:N (a new run's)
    mode: str = "fwd"  # fwd | bwd | fwd_bwd (runner/modes.py)
    metrics: str | Sequence[str] | None = "default"  # checked: a tuple of metric family names
    timing: TimingSettings | None = None  # checked: the run's settings, torch's thread count fixed
    cell_timeout: float = 900.0  # seconds before a cell is declared hung and its worker killed
    isolate: bool | None = None  # cells in worker processes; checked: True or False
    gpus: str | Sequence[int] | None = None  # checked: a list of GPU indices, or None
    plugins: Sequence[str] = ()  # plugin files; checked: their absolute paths
    db: str | None = None  # the store; checked: its absolute path
    resume: int | None = None  # the run whose missing cells to measure
    retry_failed: bool = False  # with resume: its crashed and timed-out cells too
    ray: str | None = None  # "local", "auto" or a cluster address: cells on Ray actors
    ray_gpu_kind: str | None = None  # with ray: only GPUs of this accelerator type
    python: str | None = None  # the workers' interpreter (runner/interpreter.py)

    def stored(self, plugins: list[dict]) -> dict:
        """The checked request as its run stores it (the runs row's `request`), with the plugin
        files' records (path and sha256)."""
        return dict(cases=self.cases, impls=self.impls, shapes=self.shapes, dtype=self.dtype, device=self.device,
                    plugins=plugins, metrics=list(self.metrics), mode=self.mode)


def names(value: str | Sequence[str] | None) -> list[str] | None:
    """'a,b' or ['a', 'b'] -> ['a', 'b']; None or empty -> None."""
    if value is None:
        return None
    items = value.split(",") if isinstance(value, str) else list(value)
    found = [n.strip() for n in items if n and n.strip()]
    return found or None


def parse_gpus(gpus: str | Sequence[int] | None) -> list[int] | None:
    """"all", "0,1" or [0, 1] -> GPU indices among the visible ones; None or "" -> None."""
    if gpus is None or gpus == "":
        return None
    if isinstance(gpus, str):
        if gpus == "all":
            import torch

            n = torch.cuda.device_count()
            if n == 0:
                raise ValueError("--gpus all: no CUDA GPU is visible")
            return list(range(n))
        try:
            gpus = [int(g) for g in gpus.split(",")]
        except ValueError:
            raise ValueError(f"malformed --gpus {gpus!r}: expected 'all' or indices like 0,1") from None
    from fusebench.runner.scheduler import visible_device

    for g in gpus:  # indices among the visible GPUs: fail here, not in every worker
        visible_device(g, os.environ.get("CUDA_VISIBLE_DEVICES"))
    return list(gpus)


def check_timeout(seconds) -> float:
    try:
        value = float(seconds)
    except (TypeError, ValueError):
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"--cell-timeout {seconds!r}: must be a positive number of seconds")
    return value


def check_device(device: str) -> str:
    if device not in ("cpu", "cuda") and not device.startswith("cuda:"):
        raise ValueError(f"unknown device {device!r}; choose cpu or cuda")
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise ValueError("--device cuda: no CUDA GPU is visible")
    return device


def check_sizes(cells: list[Cell]) -> None:
    """Every size the store holds for a cell (dimensions, minimum bytes, FLOPs) fits in 64 bits."""
    import torch

    from fusebench.cases import DTYPES, get_case, shape_str

    for cell in cells:
        case = get_case(cell.case)
        values = list(cell.shape)
        for dt in {DTYPES[cell.dtype], torch.float32}:  # on the CPU half precision runs as fp32
            values += [case.min_bytes(tuple(cell.shape), dt), case.flops(tuple(cell.shape), dt)]
        if any(v is not None and abs(int(v)) >= INT64 for v in values):
            raise ValueError(f"shape {shape_str(cell.shape)} of {cell.case} is too large: its sizes, bytes and FLOPs "
                             f"must fit in 64 bits")


# ---------------------------------------------------------------------------------------------
# Stored requests: what a run recorded, read back.


def stored_request(info: dict) -> dict:
    """The request a runs row recorded (StoreError where it is unreadable: the run cannot be resumed)."""
    try:
        request = json.loads(info["request"] or "{}")
    except (TypeError, ValueError):
        request = None
    if not isinstance(request, dict) or not isinstance(request.get("plugins") or [], list):
        raise StoreError(f"run {info['id']}'s stored request is unreadable; it cannot be resumed")
    return request


def run_mode(request: dict | None) -> str:
    """The mode of a stored run's request (runs stored before modes existed measured forwards)."""
    mode = (request or {}).get("mode") or "fwd"
    return mode if mode in MODES else "fwd"


def mode_of_run(info: dict | None) -> str:
    """The mode of a stored run, from its row (its request is stored as JSON)."""
    try:
        request = json.loads((info or {}).get("request") or "{}")
    except (TypeError, ValueError):
        request = {}
    return run_mode(request if isinstance(request, dict) else {})
