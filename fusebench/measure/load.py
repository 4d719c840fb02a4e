"""The machine's load while a run measures, and torch's thread count.

A timing taken while other processes compete for the CPU is longer than the code's own, and its
spread need not show it: a host slowed for seconds times every repetition alike.  So:

- Each run fixes torch's intra-op thread count (`TimingSettings.threads`, recorded with the run)
  and every cell applies it in its own process, worker or Ray actor alike.  On the CPU the default
  is one thread (OMP_NUM_THREADS, where set, chooses another count), as torch.utils.benchmark's
  Timer does: a parallel region waits for its slowest thread, so with a thread per core any other
  work on the machine stalls every call for whole scheduler ticks, and a run's times then depend
  on its neighbours more than on its code.  On a GPU the process's own count is kept (the host's
  threads only launch work there).
- The run's load is sampled at its start and its end: the load averages and, where the kernel
  exposes it (Linux pressure stall information, /proc/pressure/cpu), the share of time some
  runnable task waited for a CPU.  `run_warnings` turns them into warning lines, as pyperf
  warns about an unstable system.
- Each cell's timing is watched (`watch`): the share of its wall time during which some task
  waited for a CPU (`cpu_pressure`, from the pressure file's cumulative stall time) and the
  1-minute load average per usable CPU at its end (`load_per_cpu`).  A cell above the limits is
  `under_load`: flagged in the terminal, the store and the report, and left out of headlines.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass

PSI_PATH = "/proc/pressure/cpu"
# A cell is under load when some task waited for a CPU this share of its timing's wall time ...
PRESSURE_LIMIT = 0.10
# ... or, where the pressure file is missing, when the 1-minute load average less the cell's own
# threads exceeds this share of the usable CPUs (a coarse sign: a minute's decaying average).
OTHER_LOAD_LIMIT = 0.5
# A run is warned about when its start or end sample shows more than this pressure (the last
# 60 s) or, without the pressure file, a load average per CPU above LOAD_WARN.
PRESSURE_WARN = 0.10
LOAD_WARN = 1.0


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def default_threads(device: str = "cpu") -> int:
    """The thread count a run on `device` fixes unless asked otherwise (module docstring): on the
    CPU OMP_NUM_THREADS where it is set to a positive count, else 1; on a GPU this process's."""
    import torch

    if device.startswith("cuda"):
        return max(1, int(torch.get_num_threads()))
    try:
        asked = int(os.environ.get("OMP_NUM_THREADS", "").strip() or 0)
    except ValueError:
        asked = 0
    return asked if asked > 0 else 1


def apply_threads(threads: int | None) -> int:
    """Make torch use `threads` intra-op threads in this process (None: leave as is); returns the
    count in force."""
    import torch

    if threads and torch.get_num_threads() != int(threads):
        torch.set_num_threads(int(threads))
    return int(torch.get_num_threads())


def read_pressure(path: str = PSI_PATH) -> dict | None:
    """The `some` line of a pressure file: {"avg10", "avg60", "avg300": percent, "total": us},
    or None where the file is missing or unreadable (not Linux, an old kernel, PSI disabled)."""
    try:
        with open(path, encoding="ascii") as f:
            for line in f:
                if line.startswith("some "):
                    fields = dict(part.split("=", 1) for part in line.split()[1:])
                    return {"avg10": float(fields["avg10"]), "avg60": float(fields["avg60"]),
                            "avg300": float(fields["avg300"]), "total": int(fields["total"])}
    except (OSError, ValueError, KeyError):
        return None
    return None


def loadavg() -> tuple[float, float, float] | None:
    try:
        return os.getloadavg()
    except (AttributeError, OSError):
        return None


def sample() -> dict:
    """The machine's load now: load averages, usable CPUs and the CPU pressure (None where absent)."""
    avg = loadavg()
    psi = read_pressure()
    return {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "cpus": usable_cpus(),
            "loadavg": list(avg) if avg else None,
            "cpu_pressure_pct": None if psi is None else {k: psi[k] for k in ("avg10", "avg60", "avg300")}}


def sample_warning(s: dict, when: str) -> str | None:
    """A warning line for a run-level sample (`when`: "start" or "end"), or None."""
    if not s:
        return None
    psi, avg, cpus = s.get("cpu_pressure_pct"), s.get("loadavg"), s.get("cpus") or 1
    if psi is not None:
        if psi.get("avg60", 0.0) > 100 * PRESSURE_WARN:
            return (f"at the run's {when}, some task waited for a CPU {psi['avg60']:.0f}% of the last minute "
                    f"(load average {avg[0]:.2f} on {cpus} CPUs)" if avg else
                    f"at the run's {when}, some task waited for a CPU {psi['avg60']:.0f}% of the last minute")
        return None
    if avg and avg[0] / cpus > LOAD_WARN:
        return f"at the run's {when}, the load average was {avg[0]:.2f} on {cpus} CPUs"
    return None


def run_warnings(load_json, cells=None) -> list[str]:
    """Warning lines for a run: its start and end samples (the `load` column of its runs row) and
    how many of its timed cells were under load (`cells`: the run's rows, a DataFrame, whose
    `threads` also says whether fewer threads would help)."""
    out = []
    try:
        record = json.loads(load_json) if isinstance(load_json, str) and load_json else (load_json or {})
    except ValueError:
        record = {}
    for s in record.get("samples", []) if isinstance(record, dict) else []:
        line = sample_warning(s, s.get("at", "start"))
        if line:
            out.append(line)
    if cells is not None and "under_load" in cells and "time_us" in cells:
        timed = cells[cells["time_us"].notna()]
        busy = int((timed["under_load"].fillna(0) > 0).sum())
        if busy:
            out.append(f"{busy} of {len(timed)} timed cell(s) were measured while the CPU was busy "
                       f"(some task waited for a CPU more than {PRESSURE_LIMIT:.0%} of their timing)")
    if out:
        known = cells is not None and "threads" in cells and cells["threads"].notna().any()
        threads = cells["threads"].max() if known else None
        fewer = (f"; this run used {int(threads)} threads: with one (OMP_NUM_THREADS=1) a thread that other work "
                 f"holds off no longer stalls every parallel region" if threads and threads > 1 else "")
        out.append("timings taken on a busy machine are longer than the code's own and change from run to run: "
                   "rerun on a quiet machine" + fewer + "; `fusebench compare` normalises two runs by their "
                   "reference workloads")
    return out


@dataclass
class CellLoad:
    """What `watch` saw during one cell's timing."""

    threads: int
    cpu_pressure: float | None = None
    load_per_cpu: float | None = None

    @property
    def under_load(self) -> bool:
        return under_load(self.cpu_pressure, self.load_per_cpu, self.threads)

    def columns(self) -> dict:
        return dict(threads=self.threads, cpu_pressure=self.cpu_pressure, load_per_cpu=self.load_per_cpu,
                    under_load=int(self.under_load))


def under_load(cpu_pressure: float | None, load_per_cpu: float | None, threads: int | None = None,
               cpus: int | None = None) -> bool:
    """The rule: CPU pressure above PRESSURE_LIMIT where it was measured, else a load average
    whose share beyond the cell's own threads exceeds OTHER_LOAD_LIMIT of the CPUs."""
    if cpu_pressure is not None:
        return cpu_pressure > PRESSURE_LIMIT
    if load_per_cpu is None:
        return False
    cpus = cpus or usable_cpus()
    other = max(0.0, load_per_cpu * cpus - (threads or 1))
    return other / cpus > OTHER_LOAD_LIMIT


class watch:
    """Context manager around a cell's timing: `with watch(threads) as seen: ...`; afterwards
    `seen` (a CellLoad) holds the CPU pressure over the block and the load at its end."""

    def __init__(self, threads: int):
        self.seen = CellLoad(threads)

    def __enter__(self) -> CellLoad:
        psi = read_pressure()
        self._t0, self._stall0 = time.perf_counter(), None if psi is None else psi["total"]
        return self.seen

    def __exit__(self, *exc) -> None:
        wall_us = (time.perf_counter() - self._t0) * 1e6
        psi = read_pressure()
        if self._stall0 is not None and psi is not None and wall_us > 0:
            self.seen.cpu_pressure = round(min(1.0, max(0.0, (psi["total"] - self._stall0) / wall_us)), 4)
        avg = loadavg()
        if avg:
            self.seen.load_per_cpu = round(avg[0] / usable_cpus(), 3)
