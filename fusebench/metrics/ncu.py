"""`ncu`: DRAM bytes, SASS instructions and GPU time of exactly one warmed-up call, from Nsight Compute.

A child process (`python -m fusebench.metrics.ncu_child CASE IMPL SHAPE DTYPE`) builds the inputs,
prepares the implementation and warms it up -- compile and autotune happen there, outside the
profiled range -- then makes one call inside the NVTX push/pop range `fusebench_call`, synchronised,
with no L2 flush inside.  ncu runs it as

    ncu --target-processes all --cache-control none --clock-control none
        --metrics dram__bytes_read.sum,dram__bytes_write.sum,smsp__inst_executed.sum,gpu__time_duration.sum
        --print-units base --csv --log-file F --nvtx --nvtx-include fusebench_call/  python -m ...

and only the kernels launched inside that range are profiled.  The per-kernel values are summed.
`--cache-control none` leaves caches alone between kernels so that what a kernel leaves in L2 and the
next one reads is not counted as DRAM traffic twice; `--clock-control none` leaves the GPU's clocks
as they are (this machine's policy, and what `time` sees).  Derived:
traffic_amplification = (read + write) / the case's analytic minimum bytes.

Where ncu is missing, cannot read the counters (ERR_NVGPUCTRPERM, LibraryNotLoaded) or profiled no
kernel, the columns are not available with the reason.
"""
from __future__ import annotations

import csv
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile

from fusebench.metrics import MetricContext, metric
from fusebench.metrics._util import first_line, na

METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum", "smsp__inst_executed.sum", "gpu__time_duration.sum")
COLUMNS = ("dram_read_bytes", "dram_write_bytes", "traffic_amplification", "sass_inst", "ncu_time_us")
NVTX_RANGE = "fusebench_call"
TIMEOUT_S = 900
NCU_CANDIDATES = ("/usr/local/cuda/bin/ncu", "/opt/nvidia/nsight-compute/ncu")


def find_ncu() -> str | None:
    path = os.environ.get("FUSEBENCH_NCU") or shutil.which("ncu")
    if path:
        return path
    for p in NCU_CANDIDATES:
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    return None


# ----------------------------------------------------------------------------------------------
# parsing

_SCALE = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_BINARY = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40}
_TIME = {"nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6, "second": 1e9, "s": 1e9}


def unit_scale(unit: str) -> tuple[float, str]:
    """(factor to the base unit, base unit): bytes -> byte, times -> nsecond, counts -> as counted."""
    u = (unit or "").strip()
    if u in _TIME:
        return _TIME[u], "nsecond"
    for base in ("byte", "B"):
        if u.endswith(base):
            prefix = u[: -len(base)]
            if prefix in _BINARY:
                return _BINARY[prefix], "byte"
            if prefix in _SCALE:
                return _SCALE[prefix], "byte"
    for base in ("inst", "cycle", "warp", "request", "sector"):
        if u.endswith(base):
            prefix = u[: -len(base)]
            if prefix in _SCALE:
                return _SCALE[prefix], base
    return 1.0, u


_THOUSANDS_COMMA = re.compile(r"[+-]?\d{1,3}(,\d{3})+(\.\d+)?")
_THOUSANDS_DOT = re.compile(r"[+-]?\d{1,3}(\.\d{3}){2,}(,\d+)?")
_DECIMAL_COMMA = re.compile(r"[+-]?\d+,\d+")


def parse_value(text: str) -> float | None:
    """A metric value as ncu prints it: '1,234,567' / '1234.5' / '1 234 567' / '3,5' / 'n/a'."""
    v = (text or "").strip().strip('"').strip().replace("\u202f", "").replace("\xa0", "")
    if not v or v.lower() in ("n/a", "na", "nan", "-", "(!) n/a"):
        return None
    v = v.replace(" ", "").replace("'", "")
    if _THOUSANDS_COMMA.fullmatch(v):
        v = v.replace(",", "")
    elif _THOUSANDS_DOT.fullmatch(v):
        v = v.replace(".", "").replace(",", ".")
    elif _DECIMAL_COMMA.fullmatch(v):
        v = v.replace(",", ".")
    try:
        return float(v)
    except ValueError:
        return None


def _csv_lines(text: str) -> list[str]:
    """The CSV part of an ncu log: everything but ncu's own ==PROF== / ==WARNING== / ==ERROR== lines."""
    return [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("==")]


def _is_metric_name(col: str) -> bool:
    return "__" in col


def parse_ncu_csv(text: str) -> dict:
    """Parse `ncu --csv` output (long form with Metric Name/Unit/Value columns, or the wide form with
    one column per metric and an optional units row).  Returns
    {"totals": {metric: sum over kernels, in base units}, "units": {metric: base unit},
     "kernels": [{"id", "name", metric: value, ...}, ...]} -- kernels in profiling order."""
    rows = list(csv.reader(io.StringIO("\n".join(_csv_lines(text)))))
    header_at = next((i for i, r in enumerate(rows)
                      if "Kernel Name" in r or "Metric Name" in r or any(_is_metric_name(c) for c in r)), None)
    kernels: dict[str, dict] = {}
    units: dict[str, str] = {}
    if header_at is None:
        return {"totals": {}, "units": {}, "kernels": []}
    header = [c.strip() for c in rows[header_at]]
    body = rows[header_at + 1:]
    col = {name: i for i, name in enumerate(header)}

    def kernel_of(r: list[str], n: int) -> dict:
        kid = r[col["ID"]].strip() if "ID" in col and col["ID"] < len(r) else str(n)
        name = r[col["Kernel Name"]] if "Kernel Name" in col and col["Kernel Name"] < len(r) else ""
        return kernels.setdefault(kid, {"id": kid, "name": name})

    if "Metric Name" in col and "Metric Value" in col:
        for n, r in enumerate(body):
            if len(r) <= col["Metric Value"] or r == header:
                continue
            metric_name = r[col["Metric Name"]].strip()
            unit = r[col["Metric Unit"]].strip() if "Metric Unit" in col else ""
            value = parse_value(r[col["Metric Value"]])
            k = kernel_of(r, n)
            if value is None:
                k.setdefault(metric_name, None)
                continue
            factor, base = unit_scale(unit)
            k[metric_name] = value * factor
            units[metric_name] = base
    else:
        metric_cols = [c for c in header if _is_metric_name(c)]
        unit_row = {}
        if body and all(parse_value(body[0][col[c]]) is None for c in metric_cols if col[c] < len(body[0])):
            unit_row = {c: body[0][col[c]].strip() for c in metric_cols if col[c] < len(body[0])}
            body = body[1:]
        for n, r in enumerate(body):
            if r == header:
                continue
            k = kernel_of(r, n)
            for c in metric_cols:
                if col[c] >= len(r):
                    continue
                value = parse_value(r[col[c]])
                if value is None:
                    k.setdefault(c, None)
                    continue
                factor, base = unit_scale(unit_row.get(c, ""))
                k[c] = value * factor
                units[c] = base
    totals: dict[str, float] = {}
    for k in kernels.values():
        for m, v in k.items():
            if m in ("id", "name") or v is None:
                continue
            totals[m] = totals.get(m, 0.0) + v
    return {"totals": totals, "units": units, "kernels": list(kernels.values())}


def ncu_failure(text: str) -> str | None:
    """Why an ncu run gave no counters, from its output; None if nothing says it failed."""
    if "ERR_NVGPUCTRPERM" in text:
        return ("ncu cannot read the GPU's performance counters (ERR_NVGPUCTRPERM: profiling needs "
                "permission, NVreg_RestrictProfilingToAdminUsers=0 or root)")
    if "LibraryNotLoaded" in text:
        return "ncu could not initialise the profiler: LibraryNotLoaded"
    for line in text.splitlines():
        if "==ERROR==" in line:
            return "ncu: " + line.split("==ERROR==", 1)[1].strip()[:250]
    if "No kernels were profiled" in text:
        return "ncu profiled no kernels inside the NVTX range"
    return None


def columns_from(parsed: dict, min_bytes: int | None) -> dict:
    """Store columns from a parsed ncu CSV (totals over the call's kernels)."""
    t = parsed["totals"]
    row: dict = {}
    reasons: dict = {}
    missing = "ncu reported no value for {}"
    for col, m in (("dram_read_bytes", METRICS[0]), ("dram_write_bytes", METRICS[1]), ("sass_inst", METRICS[2])):
        if m in t:
            row[col] = int(round(t[m]))
        else:
            reasons[col] = missing.format(m)
    if METRICS[3] in t:
        row["ncu_time_us"] = t[METRICS[3]] / 1e3
    else:
        reasons["ncu_time_us"] = missing.format(METRICS[3])
    if "dram_read_bytes" in row and "dram_write_bytes" in row and min_bytes:
        row["traffic_amplification"] = (row["dram_read_bytes"] + row["dram_write_bytes"]) / min_bytes
    else:
        reasons["traffic_amplification"] = "needs DRAM bytes read and written and the analytic minimum"
    row["note"] = f"ncu: {len(parsed['kernels'])} kernel(s) in one warmed-up call"
    if reasons:
        row["na"] = reasons
    return row


# ----------------------------------------------------------------------------------------------
# running


def _repo_root() -> str:
    """The directory holding the fusebench package (fusebench/metrics/ncu.py is two levels in)."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def child_env(extra: dict | None = None) -> dict:
    env = dict(os.environ)
    root = _repo_root()
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")  # no pool of compile workers under the profiler
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def plugin_args(case) -> tuple[list[str], str | None]:
    """Arguments that let the child rebuild a user's case; (args, reason it cannot)."""
    plugin = getattr(case, "plugin", None)
    if not plugin:
        return [], None
    if os.path.isfile(plugin):
        return ["--plugin", plugin], None
    if plugin != "__main__" and re.fullmatch(r"[\w.]+", plugin):
        return ["--module", plugin], None
    return [], f"case {case.name!r} was registered in {plugin!r}, which a child process cannot import"


def child_command(case, impl_name: str, shape, dtype_name: str, mode: str = "ncu") -> tuple[list[str], str | None]:
    from fusebench.cases import shape_str

    extra, why = plugin_args(case)
    cmd = [sys.executable, "-m", "fusebench.metrics.ncu_child", case.name, impl_name, shape_str(shape), dtype_name,
           "--mode", mode] + extra
    return cmd, why


def ncu_command(ncu: str, log_file: str, child: list[str], metrics=METRICS, nvtx_range: str = NVTX_RANGE,
                cache_control: str = "none") -> list[str]:
    """ncu running `child`, profiling the kernels inside its NVTX push/pop range `nvtx_range`
    (a caller may pass its own metrics and range and, for metrics that take several replay passes,
    cache control "all")."""
    return [ncu, "--target-processes", "all", "--cache-control", cache_control, "--clock-control", "none",
            "--metrics", ",".join(metrics), "--print-units", "base", "--csv", "--log-file", log_file,
            "--nvtx", "--nvtx-include", f"{nvtx_range}/"] + child


def run_ncu(case, impl_name: str, shape, dtype_name: str, min_bytes: int | None, timeout: float = TIMEOUT_S,
            keep_log: str | None = None, parsed_out: list | None = None) -> dict:
    """Profile one call of the cell in a child process under ncu: store columns, or {"na": ...}.
    `keep_log`: copy ncu's log there; `parsed_out`: a list that receives the parsed CSV."""
    ncu = find_ncu()
    if ncu is None:
        return na(COLUMNS, "ncu (Nsight Compute) not found on PATH or in /usr/local/cuda/bin")
    child, why = child_command(case, impl_name, shape, dtype_name)
    if why:
        return na(COLUMNS, why)
    tmp = tempfile.mkdtemp(prefix="fusebench_ncu_")
    log_file = os.path.join(tmp, "ncu.csv")
    try:
        cmd = ncu_command(ncu, log_file, child)
        try:
            proc = subprocess.run(cmd, env=child_env(), capture_output=True, text=True, timeout=timeout)
            if proc.returncode != 0 and "print-units" in proc.stdout + proc.stderr and not os.path.exists(log_file):
                # an ncu without --print-units: ask again with its default (scaled) units, which the parser reads
                i = cmd.index("--print-units")
                proc = subprocess.run(cmd[:i] + cmd[i + 2:], env=child_env(), capture_output=True, text=True,
                                      timeout=timeout)
        except subprocess.TimeoutExpired:
            return na(COLUMNS, f"ncu did not finish within {timeout:.0f} s")
        text = open(log_file, errors="replace").read() if os.path.exists(log_file) else ""
        if keep_log and os.path.exists(log_file):
            shutil.copyfile(log_file, keep_log)
        output = text + "\n" + proc.stdout + "\n" + proc.stderr
        parsed = parse_ncu_csv(text)
        if parsed_out is not None:
            parsed_out.append(parsed)
        if not parsed["kernels"]:
            why = ncu_failure(output)
            if why is None:
                tail = [ln for ln in (proc.stderr + proc.stdout).strip().splitlines() if ln.strip()]
                why = (f"ncu exited {proc.returncode} with no counters" +
                       (f": {tail[-1][:250]}" if tail else ""))
            return na(COLUMNS, why)
        row = columns_from(parsed, min_bytes)
        if proc.returncode != 0:
            row["note"] += f"; ncu exited {proc.returncode}"
        return row
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@metric("ncu")
def ncu_metric(ctx: MetricContext) -> dict:
    from fusebench.cases import DTYPE_NAMES

    if not ctx.device.startswith("cuda"):
        return na(COLUMNS, "Nsight Compute profiles CUDA GPUs only")
    try:
        return run_ncu(ctx.case, getattr(ctx.impl, "name", ""), ctx.shape, DTYPE_NAMES[ctx.dtype],
                       (ctx.row or {}).get("min_bytes"))
    except Exception as exc:
        return na(COLUMNS, first_line(exc))
