"""One training or inference step of a model, and what it costs: device time, wall time, peak
memory, compile time.

A *step* is what a user's loop repeats: the forward alone (`fwd`, under no_grad), or the forward,
the loss (the model's own, or the output against a seeded gradient) and the backward (`fwd_bwd`),
with the parameters' gradients set to None first, as `optimizer.zero_grad()` does by default.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable

import torch

from fusebench.util import tensors_in

WARMUP_STEPS = 3
TIMED_STEPS = 10
WALL_STEPS = 10


def seeded_like(t: torch.Tensor, seed: int) -> torch.Tensor:
    g = torch.Generator(device=t.device)
    g.manual_seed(seed)
    return torch.randn(t.shape, generator=g, device=t.device, dtype=torch.float32).to(t.dtype)


@dataclass
class Step:
    """`step()` runs one step of `module` (or its compiled form `fn`) on `inputs`."""

    module: torch.nn.Module
    fn: Callable
    inputs: tuple
    mode: str  # fwd | fwd_bwd
    loss: Callable | None = None  # output -> scalar; None: backward of a seeded output gradient
    seed: int = 0

    def __post_init__(self):
        # The inputs are differentiated as the model built them: an activation that a layer inside a
        # network passes a gradient back to requires grad; a table (RoPE's cos and sin) does not.
        self._grads: list[torch.Tensor] | None = None

    def __call__(self):
        if self.mode == "fwd":
            with torch.no_grad():
                return self.fn(*self.inputs)
        for p in self.module.parameters():
            p.grad = None
        for a in self.inputs:
            if isinstance(a, torch.Tensor) and a.requires_grad:
                a.grad = None
        out = self.fn(*self.inputs)
        if self.loss is not None:
            self.loss(out).backward()
            return None
        outs = [t for t in tensors_in(out) if t.requires_grad]
        if self._grads is None:
            self._grads = [seeded_like(t, self.seed + i) for i, t in enumerate(outs)]
        torch.autograd.backward(outs, self._grads)
        return None


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def first_step_s(step: Step, device: str) -> float:
    """Seconds of the first step (a compiled backend compiles in it)."""
    synchronize(device)
    t = time.perf_counter()
    step()
    synchronize(device)
    return time.perf_counter() - t


def device_time_us(step: Step, device: str, steps: int = TIMED_STEPS) -> list[float]:
    """Each step's device time: CUDA events around it on a GPU, the host clock on a CPU (where each
    step is synchronous).  Warm-up steps first."""
    for _ in range(WARMUP_STEPS):
        step()
    synchronize(device)
    out = []
    if device.startswith("cuda"):
        for _ in range(steps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            end.synchronize()
            out.append(start.elapsed_time(end) * 1e3)
        return out
    for _ in range(steps):
        t = time.perf_counter()
        step()
        out.append((time.perf_counter() - t) * 1e6)
    return out


def wall_us(step: Step, device: str, steps: int = WALL_STEPS) -> float:
    """Host time per step, steps back to back, synchronised once at the end."""
    synchronize(device)
    t = time.perf_counter()
    for _ in range(steps):
        step()
    synchronize(device)
    return (time.perf_counter() - t) / steps * 1e6


def peak_memory_bytes(step: Step, device: str) -> int | None:
    """Peak device memory allocated during one step above what was allocated before it (GPU)."""
    if not device.startswith("cuda"):
        return None
    synchronize(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    step()
    synchronize(device)
    return int(torch.cuda.max_memory_allocated(device) - before)


def median(values: list[float]) -> float:
    return float(statistics.median(values))
