"""Device ceilings for the roofline, measured on the device itself (never datasheet constants).

`measure_ceilings(device)` measures
- `copy_bw`: a large device-to-device copy (each buffer at least 4x the L2, and at least 1 GiB),
  counting the bytes read plus the bytes written, median of CUDA-event-timed repetitions after
  warm-up, in GB/s (1e9 bytes per second);
- `matmul_<dtype>`: an 8192 x 8192 x 8192 product of random (not zero) matrices per dtype --
  fp32 (IEEE: TF32 off), tf32 (TF32 on), fp16, bf16 -- in TFLOP/s (2*M*N*K / time).
On the CPU the copy and the fp32 product are measured the same way with the host's clock, the
product at a smaller size (a 8192^3 product takes minutes there); the `timer` row says which clock
and the `*_size` rows say what was measured.

The values live in the results store, table `ceilings`, one row per (device name, ceiling).
"""
from __future__ import annotations

import platform
import statistics
import time

import torch

from fusebench.store import Store, now

CEILINGS_TABLE = (
    "CREATE TABLE IF NOT EXISTS ceilings (device_name TEXT, name TEXT, value REAL, unit TEXT, "
    "measured TEXT, torch TEXT, PRIMARY KEY(device_name, name))"
)

# Which matmul ceiling a cell of a dtype is held against.
MATMUL_CEILING = {torch.float32: "matmul_fp32", torch.float16: "matmul_fp16", torch.bfloat16: "matmul_bf16"}


def device_name(device: str) -> str:
    """The device's name as the runs table records it (fusebench.env.collect)."""
    if device.startswith("cuda"):
        return torch.cuda.get_device_name(device)
    return platform.processor() or platform.machine()


# ----------------------------------------------------------------------------------------------
# measuring


def _cuda_time_ms(fn, reps: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]


def _host_time_ms(fn, reps: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1e3)
    return out


def _copy_bytes(device: str) -> int:
    """Bytes of each of the copy's two buffers: >= 4x the L2 (and >= 1 GiB) on a GPU."""
    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(device)
        l2 = getattr(props, "L2_cache_size", 0) or (64 << 20)
        want = max(4 * l2, 1 << 30)
        free, _ = torch.cuda.mem_get_info(device)
        return int(min(want, free // 4)) // 4096 * 4096
    return 512 << 20  # far beyond any CPU's last-level cache


def measure_copy_bw(device: str, nbytes: int | None = None, reps: int = 20, warmup: int = 5) -> dict:
    nbytes = nbytes or _copy_bytes(device)
    src = torch.randint(0, 127, (nbytes,), dtype=torch.int8, device=device)
    dst = torch.empty_like(src)
    timer = _cuda_time_ms if device.startswith("cuda") else _host_time_ms
    ms = statistics.median(timer(lambda: dst.copy_(src), reps, warmup))
    return {"value": 2 * nbytes / (ms * 1e-3) / 1e9, "unit": "GB/s", "bytes": nbytes, "ms": ms}


def measure_matmul(device: str, dtype: torch.dtype, tf32: bool = False, n: int = 8192, reps: int = 10,
                   warmup: int = 3) -> dict:
    g = torch.Generator(device=device)
    g.manual_seed(0)
    a = torch.randn((n, n), generator=g, device=device, dtype=torch.float32).to(dtype)
    b = torch.randn((n, n), generator=g, device=device, dtype=torch.float32).to(dtype)
    c = torch.empty((n, n), device=device, dtype=dtype)
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        timer = _cuda_time_ms if device.startswith("cuda") else _host_time_ms
        ms = statistics.median(timer(lambda: torch.mm(a, b, out=c), reps, warmup))
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old
    return {"value": 2 * n**3 / (ms * 1e-3) / 1e12, "unit": "TFLOP/s", "n": n, "ms": ms}


def measure_ceilings(device: str, *, cpu_matmul_n: int = 2048, copy_bytes: int | None = None) -> dict:
    """Measure this device's ceilings: {name: {"value", "unit", ...}}.  See the module docstring."""
    out: dict[str, dict] = {}
    cuda = device.startswith("cuda")
    out["timer"] = {"value": None, "unit": "CUDA events, median" if cuda else "host perf_counter, median"}
    cp = measure_copy_bw(device, copy_bytes)
    out["copy_bw"] = {"value": cp["value"], "unit": "GB/s"}
    out["copy_bw_size"] = {"value": cp["bytes"], "unit": "bytes per buffer (read + write counted)"}
    if cuda:
        for name, dtype, tf32 in (("matmul_fp32", torch.float32, False), ("matmul_tf32", torch.float32, True),
                                  ("matmul_fp16", torch.float16, False), ("matmul_bf16", torch.bfloat16, False)):
            mm = measure_matmul(device, dtype, tf32=tf32)
            out[name] = {"value": mm["value"], "unit": "TFLOP/s"}
        out["matmul_size"] = {"value": 8192, "unit": "M=N=K, random normal inputs"}
        torch.cuda.empty_cache()
    else:
        mm = measure_matmul(device, torch.float32, n=cpu_matmul_n, reps=3, warmup=1)
        out["matmul_fp32"] = {"value": mm["value"], "unit": "TFLOP/s"}
        out["matmul_size"] = {"value": cpu_matmul_n, "unit": "M=N=K, random normal inputs"}
    return out


# ----------------------------------------------------------------------------------------------
# storing


def _open(db_path: str) -> Store:
    store = Store.open(db_path)
    with store.con:
        store.con.execute(CEILINGS_TABLE)
    return store


def store_ceilings(db_path: str, device_name: str, ceilings: dict) -> None:
    """Write (replacing) this device's ceilings."""
    store = _open(db_path)
    try:
        stamp = now()
        with store.con:
            for name, entry in ceilings.items():
                store.con.execute(
                    "INSERT OR REPLACE INTO ceilings (device_name, name, value, unit, measured, torch) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (device_name, name, entry.get("value"), entry.get("unit"), stamp, torch.__version__))
    finally:
        store.close()


def load_ceilings(db_path: str | None, device_name: str) -> dict:
    """{name: {"value", "unit", "measured", "torch"}} for this device; {} when none are stored."""
    import os

    if not db_path or not os.path.exists(db_path):
        return {}
    store = Store.open(db_path, create=False)
    try:
        tables = {r[0] for r in store.con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "ceilings" not in tables:
            return {}
        rows = store.con.execute(
            "SELECT name, value, unit, measured, torch FROM ceilings WHERE device_name=?", (device_name,)).fetchall()
    finally:
        store.close()
    return {r[0]: {"value": r[1], "unit": r[2], "measured": r[3], "torch": r[4]} for r in rows}


def run_ceilings(db_path: str, device: str) -> tuple[str, dict]:
    """Measure and store: what `fusebench ceilings` does.  Returns (device name, ceilings)."""
    name = device_name(device)
    ceilings = measure_ceilings(device)
    store_ceilings(db_path, name, ceilings)
    return name, ceilings


def format_value(value, unit: str) -> tuple[str, str]:
    """(number, unit) for the terminal: four significant figures, and a rate below 1 TFLOP/s in
    GFLOP/s (a CPU's fp32 GEMM), so that no measured ceiling prints as 0.0."""
    if value is None:
        return "", unit
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer() and abs(value) >= 1000):
        return f"{int(value):,}", unit
    if unit == "TFLOP/s" and abs(value) < 1:
        value, unit = value * 1e3, "GFLOP/s"
    return (f"{value:,.4g}" if abs(value) < 1e4 else f"{value:,.0f}"), unit


def format_ceilings(name: str, ceilings: dict) -> list[str]:
    lines = [f"ceilings for {name}:"]
    for key, entry in ceilings.items():
        text, unit = format_value(entry.get("value"), entry.get("unit") or "")
        lines.append(f"  {key:<14} {text:>12} {unit}")
    return lines
