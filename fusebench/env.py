"""The environment a run measured on: versions, device, clocks.  Stored with every run."""
from __future__ import annotations

import json
import os
import platform
import socket
import subprocess

import torch

from fusebench.version import __version__


def git_commit() -> str | None:
    """fusebench's commit (with -dirty for local changes); FUSEBENCH_COMMIT names it where the
    source was copied without its .git (e.g. to a lent GPU machine)."""
    if os.environ.get("FUSEBENCH_COMMIT"):
        return os.environ["FUSEBENCH_COMMIT"]
    return read_commit(os.path.dirname(os.path.abspath(__file__)))


def read_commit(where: str) -> str | None:
    """The commit checked out at `where`, read without writing to the repository: `git status` and
    `git diff` refresh the index and may write it back (taking .git/index.lock, which fails a git
    command running there at the same time); `git status` with optional locks off refreshes in
    memory only and writes nothing."""
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}

    def git(*args):
        return subprocess.run(["git", "--no-optional-locks", "-C", where, *args], capture_output=True, text=True,
                              timeout=5, env=env)

    try:
        head = git("rev-parse", "--short", "HEAD")
        if head.returncode != 0:
            return None
        dirty = git("status", "--porcelain", "--untracked-files=no").stdout.strip()
        return head.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def _nvidia_smi(query: str) -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits", "-i", "0"],
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip() if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def best_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def peer_versions() -> str:
    """JSON {distribution: version or null} of the peer libraries (fusebench/impls/peers)."""
    from fusebench.impls.peers import versions

    return json.dumps(versions(), sort_keys=True)


def kernel_settings() -> str | None:
    """JSON of the settings and tuner parameters that decide fusebench's kernels' choices."""
    try:
        from fusebench.kernels.tuning import record
    except ImportError:  # no Triton: none of fusebench's kernels runs
        return None
    return json.dumps(record(), sort_keys=True)


def precision_settings() -> dict:
    """PyTorch's fp32 precision switches in this process: whether fp32 GEMMs (cuBLAS) and cuDNN's
    convolutions may run in TF32, and torch.get_float32_matmul_precision().  The accuracy check
    reads them per cell (measure/accuracy.py); a run records them as they were when it started."""
    from fusebench.measure.accuracy import tf32_switches

    return tf32_switches()


def collect(device: str) -> dict:
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    env = {
        "fusebench_version": __version__,
        "git_commit": git_commit(),
        "torch": torch.__version__,
        "triton": triton_version,
        "cuda": torch.version.cuda,
        "hostname": socket.gethostname(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "device": "cuda" if device.startswith("cuda") else "cpu",
        "peers": peer_versions(),
        "kernel_settings": kernel_settings(),
        "precision": json.dumps(precision_settings(), sort_keys=True),
    }
    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(device)
        env.update(device_name=props.name, device_count=torch.cuda.device_count(),
                   driver=_nvidia_smi("driver_version"))
        clocks = _nvidia_smi("clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,power.draw,temperature.gpu")
        if clocks:
            keys = ["sm_mhz", "mem_mhz", "max_sm_mhz", "max_mem_mhz", "power_w", "temp_c"]
            env["clocks"] = dict(zip(keys, [c.strip() for c in clocks.split(",")]))
    else:
        env.update(device_name=platform.processor() or platform.machine(), device_count=os.cpu_count(), driver=None)
    return env
