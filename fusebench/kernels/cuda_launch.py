"""A compiled Triton kernel launched by one cuLaunchKernelEx call from Python, through ctypes.

Triton's launcher spends ~5-8 us of host time a call (a Python wrapper that allocates scratch
space, then C code that parses the arguments and asks each tensor for its `data_ptr` by name);
eager's whole `torch.softmax` call costs about as much.  A `DirectLaunch` decides everything but
the tensors' addresses and the stream once: grid, block, shared memory, the kernel's parameter
layout.  A call packs the new values into a fixed parameter block with one `struct.pack_into`
and hands the block to the driver.

Which parameters the kernel takes comes from its PTX entry, not from assumptions about Triton:
one per non-constexpr argument, then whatever scratch pointers this Triton version appends
(passed as NULL; kernels that need scratch space are not launched here).  Anything else -- TMA
descriptors, clusters, programmatic dependent launch, scalars of other widths -- keeps Triton's
launcher (`build` returns None).  A call the driver refuses (no current context on this thread,
too many cooperative blocks) goes through Triton's launcher, which reports the error its own way.

The call holds the GIL (ctypes.PyDLL) and a lock around the shared parameter block, so threads
launching the same kernel cannot interleave their arguments.
"""
from __future__ import annotations

import ctypes
import functools
import re
import struct
import threading
from typing import Callable, Sequence

# CUlaunchAttributeID (cuda.h)
_ATTRIBUTE_COOPERATIVE = 2


class _LaunchAttribute(ctypes.Structure):  # CUlaunchAttribute: an id and a 64-byte value union
    _fields_ = [("id", ctypes.c_uint), ("pad", ctypes.c_char * 4), ("value", ctypes.c_uint * 16)]


class _LaunchConfig(ctypes.Structure):  # CUlaunchConfig
    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(_LaunchAttribute)), ("numAttrs", ctypes.c_uint)]


@functools.lru_cache(maxsize=1)
def _driver_entry():
    """libcuda's cuLaunchKernelEx, called with the GIL held; None where it cannot be loaded."""
    try:
        fn = ctypes.PyDLL("libcuda.so.1").cuLaunchKernelEx
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_int
    return fn


# One entry parameter of the PTX: ".param .u64 .ptr .global .align 1 name_param_0" -> "u64"
_ENTRY = re.compile(r"\.entry\s+[\w$]+\s*\((.*?)\)", re.S)
_PARAM = re.compile(r"\.param\s+\.(\w+)")

# Triton signature type -> (the PTX parameter it becomes, struct code in an 8-byte slot)
_SCALARS = {"i32": ("u32", "i4x"), "u32": ("u32", "I4x"), "i64": ("u64", "q"), "u64": ("u64", "Q"),
            "fp32": ("f32", "f4x")}


def entry_params(ptx: str) -> list[str] | None:
    """The PTX types of the kernel entry's parameters, in order (None if there is no entry)."""
    found = _ENTRY.search(ptx)
    if found is None:
        return None
    matches = [_PARAM.match(p.strip()) for p in found.group(1).split(",") if p.strip()]
    return [m.group(1) if m else "?" for m in matches]


def layout(types: Sequence[str], ptx_params: Sequence[str]) -> tuple[str, list[int], int] | None:
    """(struct codes, indices of the runtime arguments passed, n slots) for arguments of Triton
    signature `types` and an entry taking `ptx_params`; None unless every passed argument is a
    pointer or a supported scalar, matching its PTX parameter, and the parameters left over are
    trailing pointers (the scratch space this Triton appends)."""
    codes, passed, expect = [], [], []
    for i, ty in enumerate(types):
        if ty == "constexpr":
            continue  # specialised into the binary: not a parameter
        if ty.startswith("*"):
            code, ptx_type = "Q", "u64"
        elif ty in _SCALARS:
            ptx_type, code = _SCALARS[ty]
        else:
            return None
        codes.append(code)
        passed.append(i)
        expect.append(ptx_type)
    extra = list(ptx_params[len(expect):])
    if list(ptx_params[:len(expect)]) != expect or any(p != "u64" for p in extra):
        return None
    return "<" + "".join(codes), passed, len(ptx_params)


class DirectLaunch:
    """Calls `compiled` on `grid` with the runtime arguments in signature order (as Launch passes
    them), through cuLaunchKernelEx; `fallback(*args)` (Triton's launcher) takes a refused call."""

    def __init__(self, compiled, grid: Sequence[int], fmt: str, passed: list[int], n_slots: int,
                 n_args: int, types: Sequence[str], fallback: Callable, stream_of: Callable, device,
                 entry: Callable):
        meta = compiled.metadata
        self.compiled = compiled  # keeps the module, and so the function handle, alive
        self.config = _LaunchConfig(*grid, 32 * meta.num_warps, 1, 1, meta.shared)
        self.attributes = (_LaunchAttribute * 1)()
        if meta.launch_cooperative_grid:
            self.attributes[0].id, self.attributes[0].value[0] = _ATTRIBUTE_COOPERATIVE, 1
            self.config.attrs, self.config.numAttrs = self.attributes, 1
        # each parameter in an 8-byte slot; kernelParams points at the slots
        self.values = (ctypes.c_uint64 * max(1, n_slots))()
        base = ctypes.addressof(self.values)
        self.params = (ctypes.c_void_p * max(1, n_slots))(*[base + 8 * i for i in range(n_slots)])
        self.launch_ex = functools.partial(entry, ctypes.byref(self.config),
                                           ctypes.c_void_p(compiled.function), self.params, None)
        names = [f"a{i}" for i in range(n_args)]
        values = ", ".join(f"a{i}.data_ptr()" if types[i].startswith("*") else f"a{i}" for i in passed)
        # Generated so that a call is straight-line code: no loop over the arguments.
        self.source = (
            f"def call({', '.join(names)}):\n"
            f"    with lock:\n"
            f"        config.hStream = stream_of(device)\n"
            f"        pack(values, 0{', ' if values else ''}{values})\n"
            f"        failed = launch_ex()\n"
            f"    if failed:\n"
            f"        fallback({', '.join(names)})\n")
        scope = dict(lock=threading.Lock(), config=self.config, stream_of=stream_of, device=device,
                     pack=struct.Struct(fmt).pack_into, values=self.values, launch_ex=self.launch_ex,
                     fallback=fallback)
        exec(compile(self.source, f"<DirectLaunch {meta.name}>", "exec"), scope)
        self.call = scope["call"]

    @classmethod
    def build(cls, compiled, grid: Sequence[int], n_args: int, fallback: Callable, stream_of: Callable,
              device, entry=None) -> "DirectLaunch | None":
        """A DirectLaunch of `compiled`, whose first `n_args` parameters are the runtime arguments
        and the rest constexprs; None where this launch path does not apply.  `entry` stands in
        for the driver's cuLaunchKernelEx."""
        meta = compiled.metadata
        entry = entry or _driver_entry()
        if (entry is None or getattr(meta, "num_ctas", 1) != 1 or getattr(meta, "launch_pdl", False)
                or getattr(meta, "global_scratch_size", 0) or getattr(meta, "profile_scratch_size", 0)
                or getattr(meta, "tensordesc_meta", None)
                or any(d != 1 for d in getattr(meta, "cluster_dims", None) or ())):
            return None
        try:
            types = list(compiled.src.signature.values())
            ptx = compiled.asm["ptx"]
        except (AttributeError, KeyError, TypeError):
            return None
        if any(ty != "constexpr" for ty in types[n_args:]):
            return None
        params = entry_params(ptx if isinstance(ptx, str) else ptx.decode())
        found = layout(types[:n_args], params) if params is not None else None
        if found is None or 0 in grid:
            return None
        return cls(compiled, grid, *found, n_args, types, fallback, stream_of, device, entry)
