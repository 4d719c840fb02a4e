"""The baseline file a team commits: what each cell did when it was last accepted.

One entry per case x shape x dtype x mode x implementation, grouped by device class ("cpu",
"h100", "a100" ...: `device_class`), so one file can hold the CPU entries a CI machine checks and
the GPU entries a GPU runner checks.  Each entry holds the cell's status and accuracy (tol_ratio:
the worst error as a fraction of the tolerance), the kernels Inductor's code launches per call
(generated and extern) with the ATen operators of each, graph breaks, recompiles, and the time
with its q20-q80 range and spread.

Format: TOML by default (`fusebench-baseline.toml`), JSON where the file name ends in .json.
TOML because a reviewer reads the diff of an updated baseline: one short key = value line per
fact and one line per kernel, where JSON spreads each kernel's operator list over lines of
brackets.  The structure is flat (a table per device class, an array of tables for its cells,
inline tables for kernels), so a small writer here produces it; Python's tomllib (3.11+, or the
`tomli` package) reads it.  The time is kept as its median, q20-q80 range, spread and number of
repetitions, not the repetitions themselves: a thousand numbers per cell would make every update a
wall of changed digits, and judge.change() judges a change from the quantiles where no
repetitions are stored (the ranges must not overlap).
"""
from __future__ import annotations

import json
import math
import os
import re
import tempfile
from dataclasses import dataclass, field, fields
from typing import Mapping

FORMAT = 1
DEFAULT_NAMES = ("fusebench-baseline.toml", "fusebench-baseline.json")
_VENDOR_WORDS = {"nvidia", "geforce", "tesla", "amd", "radeon", "intel"}
_JOIN_NEXT = {"rtx", "gtx", "quadro", "titan", "instinct"}
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


class BaselineError(ValueError):
    """A baseline file that cannot be used (missing, unreadable, malformed)."""


def device_class(device_name: str | None, device: str = "cuda") -> str:
    """The class of device a baseline's entries hold for: "cpu" on the CPU; for a GPU its model,
    lower case, without the vendor's words or the memory size ("NVIDIA H100 80GB HBM3" -> "h100",
    "NVIDIA A100-SXM4-80GB" -> "a100", "NVIDIA GeForce RTX 4090" -> "rtx4090")."""
    if not device.startswith("cuda"):
        return "cpu"
    words = [w for w in re.split(r"[\s_\-/]+", (device_name or "").lower()) if w and w not in _VENDOR_WORDS]
    if not words:
        return "gpu"
    first = words[0]
    if first in _JOIN_NEXT and len(words) > 1:
        first += words[1]
    return re.sub(r"[^a-z0-9]", "", first) or "gpu"


def this_device_class(device: str) -> str:
    if not device.startswith("cuda"):
        return "cpu"
    import torch

    return device_class(torch.cuda.get_device_name(device), device)


def _round(value, digits: int = 5):
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return None
    return float(f"{float(value):.{digits}g}")


def _int(value):
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return int(value)


@dataclass
class Entry:
    """One cell of a baseline."""

    case: str
    impl: str
    shape: str
    dtype: str  # the dtype asked for (half precision runs as fp32 on the CPU; the cell says so)
    mode: str = "fwd"
    status: str = "ok"
    reason: str | None = None  # why the cell is not ok
    tol_ratio: float | None = None  # accuracy: worst error / tolerance, over the seeds
    generated_kernels: int | None = None
    extern_kernels: int | None = None
    graph_breaks: int | None = None
    recompiles: int | None = None
    profiled_kernels: int | None = None  # on a GPU: kernels one call launches, by the profiler (any implementation)
    time_us: float | None = None
    time_q20_us: float | None = None
    time_q80_us: float | None = None
    time_spread: float | None = None
    time_reps: int | None = None
    kernels: list[dict] | None = None  # fusion/facts.py: graph, kind, launches, ops, name

    def key(self) -> tuple[str, str, str, str, str]:
        return self.case, self.impl, self.shape, self.dtype, self.mode

    @property
    def label(self) -> str:
        return f"{self.case} {self.impl} {self.shape} {self.dtype} {self.mode}"

    @classmethod
    def from_row(cls, row: Mapping) -> "Entry":
        """The entry of a stored cell (a row of Store.cells())."""
        from fusebench.fusion.facts import kernels_of

        ok = row.get("status") == "ok"
        reason = row.get("reason")
        return cls(
            case=str(row["case_name"]), impl=str(row["impl"]), shape=str(row["shape"]),
            dtype=str(row.get("requested_dtype") or row["dtype"]), mode=str(row.get("mode") or "fwd"),
            status=str(row["status"]), reason=None if ok or not isinstance(reason, str) else reason[:200],
            tol_ratio=_round(row.get("tol_ratio"), 3),
            generated_kernels=_int(row.get("generated_kernels")), extern_kernels=_int(row.get("extern_kernels")),
            graph_breaks=_int(row.get("graph_breaks")), recompiles=_int(row.get("recompiles")),
            profiled_kernels=_int(row.get("kernels")),
            time_us=_round(row.get("time_us")) if ok else None,
            time_q20_us=_round(row.get("time_q20_us")) if ok else None,
            time_q80_us=_round(row.get("time_q80_us")) if ok else None,
            time_spread=_round(row.get("time_spread"), 3) if ok else None,
            time_reps=_int(row.get("time_reps")) if ok else None,
            kernels=kernels_of(row.get("fusion_kernels")),
        )

    def as_row(self) -> dict:
        """The entry in the store's column names (for report.judge and report.fusion_diff)."""
        return {"case_name": self.case, "impl": self.impl, "shape": self.shape, "dtype": self.dtype,
                "mode": self.mode, "status": self.status, "reason": self.reason, "tol_ratio": self.tol_ratio,
                "generated_kernels": self.generated_kernels, "extern_kernels": self.extern_kernels,
                "fusion_kernels": self.kernels, "graph_breaks": self.graph_breaks, "recompiles": self.recompiles,
                "time_us": self.time_us, "time_q20_us": self.time_q20_us, "time_q80_us": self.time_q80_us,
                "time_spread": self.time_spread, "time_reps": self.time_reps}

    def as_dict(self) -> dict:
        """Its fields in file order, without the empty ones."""
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None:
                out[f.name] = [dict(k) for k in value] if f.name == "kernels" else value
        return out


def _sort_key(entry: Entry):
    dims = tuple(int(d) if d.isdigit() else 0 for d in entry.shape.split("x"))
    return entry.case, len(dims), dims, entry.shape, entry.dtype, entry.mode, entry.impl


@dataclass
class Section:
    """The entries of one device class, with where they were measured."""

    device_class: str
    meta: dict = field(default_factory=dict)  # device_name, torch, triton, python, commit, written
    entries: list[Entry] = field(default_factory=list)

    def by_key(self) -> dict[tuple, Entry]:
        return {e.key(): e for e in self.entries}

    def merged(self, new: list[Entry], meta: dict) -> "Section":
        """This section with `new` entries replacing those of the same cell, and `meta` replacing its own."""
        keep = {e.key(): e for e in self.entries}
        keep.update({e.key(): e for e in new})
        return Section(self.device_class, dict(meta), sorted(keep.values(), key=_sort_key))


@dataclass
class Baseline:
    sections: dict[str, Section] = field(default_factory=dict)

    def classes(self) -> list[str]:
        return sorted(self.sections)


# ----------------------------------------------------------------------------------------------
# reading


def _load_toml(text: str) -> dict:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        try:
            import tomli as tomllib
        except ImportError:
            raise BaselineError("reading a TOML baseline needs Python 3.11 or the tomli package "
                                "(pip install tomli); a .json baseline needs neither") from None
    return tomllib.loads(text)


ENTRY_KEYS = frozenset(f.name for f in fields(Entry))
_STR = ("case", "impl", "shape", "dtype", "mode", "status", "reason")
_INT = ("generated_kernels", "extern_kernels", "graph_breaks", "recompiles", "profiled_kernels", "time_reps")
_FLOAT = ("tol_ratio", "time_us", "time_q20_us", "time_q80_us", "time_spread")


def _entry(raw, where: str) -> Entry:
    if not isinstance(raw, dict):
        raise BaselineError(f"{where}: not a table of cell facts")
    unknown = sorted(set(raw) - ENTRY_KEYS)
    if unknown:
        raise BaselineError(f"{where}: unknown key {unknown[0]!r}")
    for key in ("case", "impl", "shape", "dtype"):
        if key not in raw:
            raise BaselineError(f"{where}: no {key!r}")
    for key, value in raw.items():
        ok = (isinstance(value, str) if key in _STR else
              isinstance(value, int) and not isinstance(value, bool) if key in _INT else
              isinstance(value, (int, float)) and not isinstance(value, bool) if key in _FLOAT else True)
        if not ok:
            raise BaselineError(f"{where}: {key} = {value!r} is not of the right type")
    kernels = raw.get("kernels")
    if kernels is not None:
        from fusebench.fusion.facts import kernels_of

        try:
            kernels = kernels_of(kernels)
        except ValueError as exc:
            raise BaselineError(f"{where}: {exc}") from None
    from fusebench.runner.modes import MODES

    if raw.get("mode", "fwd") not in MODES:
        raise BaselineError(f"{where}: unknown mode {raw['mode']!r} (one of {', '.join(MODES)})")
    return Entry(**{**raw, "kernels": kernels})


def parse(data: dict, path: str) -> Baseline:
    """A baseline from the parsed file (TOML or JSON): {"format": 1, CLASS: {meta..., "cells": [...]}}."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise BaselineError(f"{path} is not a fusebench baseline (format = {FORMAT} is missing)")
    out = Baseline()
    for cls, body in data.items():
        if cls == "format":
            continue
        if not isinstance(body, dict) or not isinstance(body.get("cells", []), list):
            raise BaselineError(f"{path}: [{cls}] is not a device class's table of cells")
        meta = {k: v for k, v in body.items() if k != "cells"}
        entries = [_entry(raw, f"{path}: {cls} cell {i + 1}") for i, raw in enumerate(body.get("cells", []))]
        seen: set = set()
        for e in entries:
            if e.key() in seen:
                raise BaselineError(f"{path}: {cls} names {e.label} twice")
            seen.add(e.key())
        out.sections[cls] = Section(cls, meta, entries)
    return out


def read(path: str) -> Baseline:
    """Read a baseline file; BaselineError (one line) where it is missing or not a baseline."""
    if not os.path.exists(path):
        raise BaselineError(f"no baseline file {path}")
    if os.path.isdir(path):
        raise BaselineError(f"{path} is a directory, not a baseline file")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise BaselineError(f"cannot read {path}: {exc}") from None
    try:
        data = json.loads(text) if path.endswith(".json") else _load_toml(text)
    except BaselineError:
        raise
    except ValueError as exc:  # json.JSONDecodeError and tomllib.TOMLDecodeError both are
        raise BaselineError(f"{path} is not valid {'JSON' if path.endswith('.json') else 'TOML'}: "
                            f"{str(exc).splitlines()[0]}") from None
    return parse(data, path)


def default_path(directory: str = ".") -> str:
    """fusebench-baseline.toml, or fusebench-baseline.json where only that one exists."""
    toml, js = (os.path.join(directory, n) for n in DEFAULT_NAMES)
    return js if os.path.exists(js) and not os.path.exists(toml) else toml


# ----------------------------------------------------------------------------------------------
# writing

HEADER = """\
# fusebench baseline: the cells `fusebench check` runs, and what each did when it was accepted.
# `fusebench check` fails when a cell launches more kernels, fuses other ATen operators, gains a
# graph break or a recompile, stops matching its reference, or (with timing on) is slower beyond
# its noise.  Written by `fusebench check --update`; review its diff like code.
"""


def _toml_str(text: str) -> str:
    # A JSON string is a TOML basic string, but for DEL, which TOML wants escaped.
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def _toml_key(key: str) -> str:
    return key if _BARE_KEY.match(key) else _toml_str(key)


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("a baseline holds finite numbers only")
        return repr(value)
    if isinstance(value, str):
        return _toml_str(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items() if v is not None) + " }"
    raise TypeError(f"cannot write {type(value).__name__} to a baseline")


def to_toml(baseline: Baseline) -> str:
    lines = [HEADER.rstrip("\n"), f"format = {FORMAT}"]
    for cls in baseline.classes():
        section = baseline.sections[cls]
        lines += ["", f"[{_toml_key(cls)}]"]
        lines += [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in section.meta.items() if v is not None]
        for e in section.entries:
            lines += ["", f"[[{_toml_key(cls)}.cells]]"]
            for k, v in e.as_dict().items():
                if k == "kernels":
                    lines.append("kernels = [")
                    lines += [f"  {_toml_value(kernel)}," for kernel in v]
                    lines.append("]")
                else:
                    lines.append(f"{k} = {_toml_value(v)}")
    return "\n".join(lines) + "\n"


def to_json(baseline: Baseline) -> str:
    data: dict = {"format": FORMAT}
    for cls in baseline.classes():
        s = baseline.sections[cls]
        data[cls] = {**{k: v for k, v in s.meta.items() if v is not None}, "cells": [e.as_dict() for e in s.entries]}
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


def write(baseline: Baseline, path: str) -> None:
    """Write atomically: an interrupted write leaves the old file as it was."""
    text = to_json(baseline) if path.endswith(".json") else to_toml(baseline)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".fusebench-baseline-", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        if os.path.exists(path):
            os.chmod(tmp, os.stat(path).st_mode & 0o777)
        else:  # mkstemp makes it 0600; a new file gets the usual mode under the umask
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
