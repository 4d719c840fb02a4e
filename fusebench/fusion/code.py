"""What Inductor's output code says about its kernels: which it launches, how often, and what each
computes.

An output-code module is the wrapper Inductor generates for one graph: kernel definitions
(`name = async_compile.triton(...)` / `.cpp_pybinding(...)`) followed by straight-line `call()` code
that launches them, extern kernels (`extern_kernels.mm`) and ATen fallbacks
(`torch.ops.aten.x.default`).  Everything here reads that text and nothing else, so it works on an
FX-graph-cache hit (the cached code is the same) and on the CPU's C++ kernels as on the GPU's Triton.
"""
from __future__ import annotations

import functools
import re
from collections import Counter
from dataclasses import dataclass, field

_TRIPLE = re.compile(r"[rRbB]?('''.*?'''|\"\"\".*?\"\"\")", re.DOTALL)
_DEF = re.compile(r"^\s*(\w+)\s*=\s*async_compile\.\w+\(", re.MULTILINE)
_EXTERN = re.compile(r"\bextern_kernels\.(\w+)\(")
_ATEN = re.compile(r"\btorch\.ops\.(\w+)\.(\w+)(?:\.(\w+))?\(")
_SOURCE = re.compile(r"#\s*(?:Topologically Sorted|Unsorted) Source Nodes:\s*\[(.*?)\],\s*Original ATen:\s*\[(.*?)\]")
_AOT_ID = re.compile(r"#\s*AOT ID:\s*\[(.*?)\]")
_NUM_GB = re.compile(r"['\"]kernel_num_gb['\"]\s*:\s*([0-9.eE+-]+)")
# Generated kernel names: a prefix, the fused operators' names joined by "_", an index.
_GENERATED = re.compile(r"^(?:cpp_fused|triton_(?:poi|red|per|tem|for|mix)_fused|triton_\w+?_fused)_(.*?)(?:_(\d+))?$")


@dataclass
class KernelInfo:
    """One kernel of an output-code module."""

    name: str  # as defined and launched: triton_red_fused_..._0, cpp_fused_..._1, extern_kernels.mm, aten.x.default
    kind: str  # "generated" (Inductor wrote it) | "extern" (a library kernel) | "fallback" (an ATen operator)
    launches: int = 0  # call sites in the wrapper (straight-line code: each is one launch per call)
    ops: list[str] = field(default_factory=list)  # ATen operators fused into it, in order, e.g. ["aten.add", ...]
    nodes: list[str] = field(default_factory=list)  # graph node names fused into it, where the code names them
    num_gb: float | None = None  # Inductor's own count of the bytes it moves (benchmark_kernel), GB

    def as_dict(self) -> dict:
        return {"name": self.name, "kind": self.kind, "launches": self.launches, "ops": list(self.ops),
                "nodes": list(self.nodes), "num_gb": self.num_gb}


def _strip_strings(code: str) -> str:
    return _TRIPLE.sub("''", code)


def wrapper_kernel_calls(code: str) -> list[str]:
    """Kernel calls of one output-code module, in the order they appear.

    Counts call sites of the kernels it defines (called as `name(...)` or `name.run(...)`), extern
    kernels (`extern_kernels.mm(...)`) and ATen fallbacks (`torch.ops.aten.x.default(...)`).  The
    wrapper is straight-line code, so each call site is one launch."""
    text = _strip_strings(code)
    defined = set(_DEF.findall(text))
    call_re = re.compile(r"\b(" + "|".join(map(re.escape, sorted(defined, key=len, reverse=True))) + r")(?:\.run)?\("
                         ) if defined else None
    calls = []
    for line in text.splitlines():
        if _DEF.match(line) or line.lstrip().startswith(("def ", "#", "import ", "from ")):
            continue
        found = []
        if call_re is not None:
            found += [(m.start(), m.group(1)) for m in call_re.finditer(line)]
        found += [(m.start(), f"extern_kernels.{m.group(1)}") for m in _EXTERN.finditer(line)]
        found += [(m.start(), ".".join(g for g in m.groups() if g)) for m in _ATEN.finditer(line)]
        calls += [name for _, name in sorted(found)]
    return calls


def graph_kind(code: str) -> str:
    """'forward' | 'backward' | 'inference' | 'graph' (unknown), from the module's AOT ID line."""
    m = _AOT_ID.search(code)
    text = m.group(1) if m else ""
    for kind in ("backward", "forward", "inference"):
        if kind in text:
            return kind
    return "graph"


@functools.lru_cache(maxsize=1)
def _aten_names() -> frozenset[str]:
    import torch

    return frozenset(n for n in dir(torch.ops.aten) if not n.startswith("__"))


def ops_from_name(name: str) -> list[str]:
    """The ATen operators a generated kernel's descriptive name lists (Inductor names a kernel after
    what it fused, e.g. cpp_fused__to_copy_add_mean_0 -> aten._to_copy, aten.add, aten.mean).
    Greedy longest match against ATen's operator names; unknown tokens are kept as they are."""
    m = _GENERATED.match(name)
    if not m:
        return []
    tokens = m.group(1).split("_")
    known, out, i = _aten_names(), [], 0
    while i < len(tokens):
        for j in range(len(tokens), i, -1):
            word = "_".join(tokens[i:j])
            if word in known:
                out.append(f"aten.{word}")
                i = j
                break
        else:
            if tokens[i]:
                out.append(tokens[i])
            i += 1
    return list(dict.fromkeys(out))


def _split_list(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _kind(name: str) -> str:
    if name.startswith("extern_kernels."):
        return "extern"
    if "." in name:
        return "fallback"
    return "generated"


def parse_output_code(code: str) -> list[KernelInfo]:
    """The kernels one output-code module launches, in first-launch order, each with its launch
    count, the ATen operators and graph nodes fused into it (from the code's "Source Nodes"
    comments where present, else from the kernel's descriptive name) and Inductor's byte count
    where the code carries one (TORCHINDUCTOR_BENCHMARK_KERNEL)."""
    calls = wrapper_kernel_calls(code)
    counts = Counter(calls)
    kernels = {name: KernelInfo(name, _kind(name), counts[name]) for name in dict.fromkeys(calls)}
    _attach_comments(code, kernels)
    _attach_num_gb(code, kernels)
    for k in kernels.values():
        if not k.ops and k.kind == "generated":
            k.ops = ops_from_name(k.name)
        if k.kind == "extern":
            k.ops = [f"aten.{k.name.split('.', 1)[1]}"]
        if not k.ops and k.kind == "fallback":
            k.ops = [k.name.rsplit(".", 1)[0] if k.name.count(".") >= 2 else k.name]
    return list(kernels.values())


def _attach_comments(code: str, kernels: dict[str, KernelInfo]) -> None:
    """A "Source Nodes" comment names what the next kernel definition or launch fused."""
    pending: tuple[list[str], list[str]] | None = None
    text_lines = code.splitlines()
    in_string = False
    for line in text_lines:
        quotes = line.count("'''") + line.count('"""')
        if in_string:
            in_string = quotes % 2 == 0
            continue
        m = _SOURCE.search(line)
        if m:
            pending = (_split_list(m.group(1)), _split_list(m.group(2)))
        else:
            target = _target_of(line, kernels)
            if target is not None and pending is not None:
                k = kernels[target]
                # An extern kernel's comment lists its inputs' origins too: its op is its name.
                if not k.nodes and k.kind == "generated":
                    k.nodes, k.ops = pending[0], pending[1]
                pending = None
            elif line.strip() and not line.lstrip().startswith("#") and target is None and "= async_compile" in line:
                pending = None
        if quotes % 2 == 1:
            in_string = True


def _target_of(line: str, kernels: dict[str, KernelInfo]) -> str | None:
    stripped = line.strip()
    m = _DEF.match(line)
    if m and m.group(1) in kernels:
        return m.group(1)
    if stripped.startswith(("#", "def ")):
        return None
    for name in kernels:
        call = name.split(".", 1)[1] if name.startswith("extern_kernels.") else name
        if name.startswith("extern_kernels.") and f"extern_kernels.{call}(" in stripped:
            return name
        if f"{name}(" in stripped or f"{name}.run(" in stripped:
            return name
    return None


def _attach_num_gb(code: str, kernels: dict[str, KernelInfo]) -> None:
    for m in re.finditer(r"^(\w+)\s*=\s*async_compile\.triton\(", code, re.MULTILINE):
        name = m.group(1)
        if name not in kernels:
            continue
        end = code.find("device_str=", m.end())
        gb = _NUM_GB.search(code, m.end(), end if end > 0 else len(code))
        if gb:
            kernels[name].num_gb = float(gb.group(1))
