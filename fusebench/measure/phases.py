"""Where a cell's seconds go: wall-clock seconds per phase, stored with every cell (`phase_s`).

A phase that repeats (the inputs of each seed, the reference of each seed) is summed under one
name; phases are named in report/columns.py.  The worker's phases lie within the cell's
`seconds` (what they leave out, the Python between them, is the difference); `handoff`, added by
the scheduler, lies outside it.
"""
from __future__ import annotations

import contextlib
import time


class Phases:
    """Seconds per phase: `with phases("inputs"): ...` adds the block's wall time to "inputs"."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, name: str):
        t = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - t)

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    def column(self) -> dict[str, float]:
        """The stored form: seconds rounded to 0.1 ms, in the order the phases first ran."""
        return {k: round(v, 4) for k, v in self.seconds.items()}
