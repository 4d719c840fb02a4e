"""Host overhead per kernel: what a Python caller pays beyond the GPU's work (`fusebench overhead`).

From a stored run, for each case, shape and dtype, every implementation's GPU time (`time_us`: the
call's GPU work, the host's launch cost hidden by a spin kernel), its wall time per call with calls
back to back (`wall_time_us`: what a Python caller pays) and the difference, the host overhead.
Ceilings (memcpy, torch-mm) are left out: they are references, not kernels a caller picks.

`triton` -- fusebench's own kernels -- is held to the rule

    wall_time <= max(RULE_FACTOR x its GPU time, eager's wall time)

that is, calling it from Python costs at most 10% over its GPU time, or no more than eager does.
A cell without the numbers the rule needs is "not available", with the reason; nothing is
estimated in its place.  On the CPU both times are host times, so the rule does not apply.

The overhead can be negative: back-to-back calls find their data in L2 and overlap one call's
launch with the previous call's GPU work, while the GPU time is taken with L2 flushed.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import pandas as pd

from fusebench.report.judge import is_ceiling

RULE_FACTOR = 1.1
SUBJECT, REFERENCE = "triton", "eager"


@dataclass(frozen=True)
class Verdict:
    """`triton` at one case, shape and dtype: meets (True), misses (False) or cannot be judged
    (None, with `why`).  `limit_us`: max(RULE_FACTOR x GPU time, eager's wall time) where known."""

    case: str
    shape: str
    dtype: str
    meets: bool | None
    wall_us: float | None = None
    limit_us: float | None = None
    why: str = ""

    def text(self) -> str:
        if self.meets is None:
            return f"not available: {self.why}"
        rel = "<=" if self.meets else ">"
        return f"{'meets' if self.meets else 'misses'}: wall {self.wall_us:.1f} {rel} {self.limit_us:.1f} µs"


def fmt_us(us: float) -> str:
    """Microseconds as text, in the unit that suits them (negative kept: see the module docstring)."""
    sign, us = ("-" if us < 0 else ""), abs(us)
    if us >= 1e6:
        return f"{sign}{us / 1e6:.2f} s"
    if us >= 1e3:
        return f"{sign}{us / 1e3:.2f} ms"
    return f"{sign}{us:.1f} µs"


def _number(value) -> float | None:
    return None if value is None or pd.isna(value) else float(value)


def unavailable(cell) -> str:
    """Why a cell has no GPU time or no wall time ("" if it has both)."""
    if cell.status != "ok":
        return f"{cell.status}" + (f": {cell.reason}" if isinstance(cell.reason, str) and cell.reason else "")
    missing = [name for name, col in (("GPU time", "time_us"), ("wall time", "wall_time_us"))
               if _number(getattr(cell, col, None)) is None]
    if not missing:
        return ""
    try:
        na = json.loads(cell.na) if isinstance(cell.na, str) else {}
    except ValueError:
        na = {}
    why = na.get("wall_time") or na.get("time") if isinstance(na, dict) else None
    return f"{' and '.join(missing)} not stored" + (f": {why}" if isinstance(why, str) and why else "")


def overhead_rows(cells: pd.DataFrame) -> pd.DataFrame:
    """One row per cell that is not a ceiling: case_name, shape, dtype, impl, device, time_us,
    wall_time_us, overhead_us (wall - GPU) and why (why a time is missing, else "").  Ordered by
    case, shape, dtype, then triton, eager, the others by name."""
    cols = ["case_name", "shape", "dtype", "impl", "device", "time_us", "wall_time_us", "overhead_us", "why"]
    rows = []
    for cell in cells.itertuples(index=False):
        if is_ceiling(cell.impl):
            continue
        why = unavailable(cell)
        t, w = (None, None) if why else (_number(cell.time_us), _number(cell.wall_time_us))
        rows.append((cell.case_name, cell.shape, cell.dtype, cell.impl, cell.device, t, w,
                     None if why else w - t, why))
    df = pd.DataFrame(rows, columns=cols)
    def key(r):
        return (r.case_name, _shape_key(r.shape), r.dtype, 0 if r.impl == SUBJECT else 1 if r.impl == REFERENCE else 2,
                r.impl)

    order = sorted(range(len(df)), key=lambda k: key(df.iloc[k]))
    return df.iloc[order].reset_index(drop=True)


def _shape_key(shape: str) -> tuple:
    """'128x65536' -> (0, (128, 65536)): shapes in numeric order; text that is not one after them."""
    try:
        return 0, tuple(int(p) for p in str(shape).split("x")), ""
    except ValueError:
        return 1, (), str(shape)


def verdicts(rows: pd.DataFrame) -> list[Verdict]:
    """The rule's verdict for `triton` at every case, shape and dtype of `rows` (overhead_rows)
    that has a triton cell."""
    out = []
    for (case, shape, dtype), group in rows.groupby(["case_name", "shape", "dtype"], sort=False):
        by_impl = {r.impl: r for r in group.itertuples(index=False)}
        mine = by_impl.get(SUBJECT)
        if mine is None:
            continue
        ref = by_impl.get(REFERENCE)
        if mine.device != "cuda":
            out.append(Verdict(case, shape, dtype, None, why="a CPU run: its times are both host times"))
            continue
        if mine.why:
            out.append(Verdict(case, shape, dtype, None, why=f"triton: {mine.why}"))
            continue
        own = RULE_FACTOR * mine.time_us
        if ref is not None and not ref.why:
            limit = max(own, ref.wall_time_us)
        elif mine.wall_time_us <= own:  # within 10% of its GPU time: met whatever eager's wall time
            limit = own
        else:
            why = ref.why if ref is not None else "no eager cell in this run"
            out.append(Verdict(case, shape, dtype, None, wall_us=mine.wall_time_us,
                               why=f"eager's wall time is needed (triton's wall time is over {RULE_FACTOR:g}x its "
                                   f"GPU time): {why}"))
            continue
        out.append(Verdict(case, shape, dtype, mine.wall_time_us <= limit, mine.wall_time_us, limit))
    return out


def summary_line(found: list[Verdict]) -> str:
    """One line: how many cells triton meets the rule at, and which it misses."""
    if not found:
        return "no triton cells in this run: the rule has nothing to judge"
    missed = [v for v in found if v.meets is False]
    judged = sum(v.meets is not None for v in found)
    na = len(found) - judged
    tail = f"; not available at {na}" if na else ""
    if not missed:
        return f"triton meets wall_time <= max({RULE_FACTOR:g}x GPU time, eager's wall time) at all {judged} " \
               f"cells judged{tail}"
    names = ", ".join(f"{v.case} {v.shape} {v.dtype}" for v in missed)
    return f"triton misses wall_time <= max({RULE_FACTOR:g}x GPU time, eager's wall time) at {len(missed)} of " \
           f"{judged} cells judged{tail}: {names}"


__all__ = ["RULE_FACTOR", "Verdict", "fmt_us", "overhead_rows", "summary_line", "unavailable", "verdicts"]
