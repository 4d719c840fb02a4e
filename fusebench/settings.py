"""Every environment variable fusebench's kernel layer reads, read once into one frozen object.

    FUSEBENCH_AUTOTUNE=0        use each kernel's heuristic plan, never time candidates
    FUSEBENCH_AUTOTUNE_LOG=F    append each tuning decision, with every candidate's time, to F
    FUSEBENCH_COMPILE_THREADS=N compile a tuning's candidates N at a time (default: up to 8, one per
                                core); 1 compiles each when it is first timed
    FUSEBENCH_COOP=0            no cooperative (multi-program-per-row) plans
    FUSEBENCH_TUNING_CACHE=0    neither read nor write the on-disk cache of tuning choices
    FUSEBENCH_CACHE_DIR=D       where that cache lives (default ~/.cache/fusebench; choices in D/tuning)
    FUSEBENCH_FP32_PRECISION    tl.dot's input precision for fp32 operands (default tf32)
    FUSEBENCH_GEMM_IMPL, FUSEBENCH_CONV_PATH, FUSEBENCH_CONV_BN, FUSEBENCH_ATTN_IMPL
                                force one of the compute-bound kernels' implementations ("auto": time them)
    TRITON_INTERPRET=1          Triton's CPU interpreter (kernels run on the CPU, for correctness)

`current()` reads them on first use; `refresh()` reads them again (tests that set variables).
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path


def _flag(name: str, default: str = "1") -> bool:
    return os.environ.get(name, default) not in ("", "0")


def _usable_cpus() -> int:
    # the CPUs this process may run on (a container or taskset may allow fewer than the host has)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _count(name: str, default: int) -> int:
    """A positive integer variable; unset, empty or not a positive integer: `default`."""
    try:
        value = int(os.environ.get(name, ""))
    except ValueError:
        return default
    return value if value >= 1 else default


@dataclass(frozen=True)
class Settings:
    interpret: bool
    autotune: bool
    autotune_log: str | None
    compile_threads: int
    coop: bool
    tuning_cache: bool
    cache_dir: Path
    fp32_precision: str
    gemm_impl: str
    conv_path: str
    conv_bn: str
    attn_impl: str

    @property
    def tuning_dir(self) -> Path:
        return self.cache_dir / "tuning"

    @classmethod
    def from_environ(cls) -> "Settings":
        env = os.environ
        return cls(
            interpret=_flag("TRITON_INTERPRET", "0"),
            autotune=_flag("FUSEBENCH_AUTOTUNE"),
            autotune_log=env.get("FUSEBENCH_AUTOTUNE_LOG") or None,
            compile_threads=_count("FUSEBENCH_COMPILE_THREADS", min(16, _usable_cpus())),
            coop=_flag("FUSEBENCH_COOP"),
            tuning_cache=_flag("FUSEBENCH_TUNING_CACHE"),
            cache_dir=Path(env.get("FUSEBENCH_CACHE_DIR") or Path.home() / ".cache" / "fusebench"),
            fp32_precision=env.get("FUSEBENCH_FP32_PRECISION", "tf32"),
            gemm_impl=env.get("FUSEBENCH_GEMM_IMPL", "auto"),
            conv_path=env.get("FUSEBENCH_CONV_PATH", "auto"),
            conv_bn=env.get("FUSEBENCH_CONV_BN", "auto"),
            attn_impl=env.get("FUSEBENCH_ATTN_IMPL", "auto"),
        )


@functools.lru_cache(maxsize=1)
def current() -> Settings:
    """The settings, read from the environment once: kernel launches consult them on every call,
    so they must cost nothing there.  Change a variable at run time, then call refresh()."""
    return Settings.from_environ()


def refresh() -> Settings:
    """Read the environment again (the next current() returns the new settings)."""
    current.cache_clear()
    return current()
