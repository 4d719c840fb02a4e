"""A compiled Triton kernel launched by one cuLaunchKernelEx call from Python, through ctypes.

Triton's launcher spends host time on every call (a Python wrapper that allocates scratch space,
then C code that parses the arguments and asks each tensor for its `data_ptr` by name), about as
much as eager's whole `torch.softmax` call (docs/kernels.md, 'What every kernel shares': "One
launcher per problem key").  A `DirectLaunch` decides everything but
the tensors' addresses and the stream once: grid, block, shared memory, the kernel's parameter
layout.  A call packs the new values into a fixed parameter block with one `struct.pack_into`
and hands the block to the driver.

Which parameters the kernel takes comes from its PTX entry, not from assumptions about Triton:
one per non-constexpr argument, then whatever scratch pointers this Triton version appends
(passed as NULL; kernels that need scratch space are not launched here).  A TMA tensor descriptor
argument is a 128-byte CUtensorMap parameter followed by the descriptor's shape (u32 each) and
strides (u64 each).  Its geometry is fixed by the caller's key, so only the base address changes
from call to call: `TensorMaps` encodes the map once per address, where Triton's launcher encodes
every descriptor at every call.  A cooperative grid and a programmatic dependent launch
(launch_pdl) are launch attributes, as in Triton's launcher.  Anything else -- clusters, scalars of
other widths -- keeps Triton's launcher (`build` returns None).  A call the driver refuses (no
current context on this thread, too many cooperative blocks) goes through Triton's launcher, which
reports the error its own way.

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
_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6  # programmatic dependent launch (launch_pdl)


class _LaunchAttribute(ctypes.Structure):  # CUlaunchAttribute: an id and a 64-byte value union
    _fields_ = [("id", ctypes.c_uint), ("pad", ctypes.c_char * 4), ("value", ctypes.c_uint * 16)]


class _LaunchConfig(ctypes.Structure):  # CUlaunchConfig
    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(_LaunchAttribute)), ("numAttrs", ctypes.c_uint)]


@functools.lru_cache(maxsize=None)
def _driver_entry(name: str = "cuLaunchKernelEx"):
    """A libcuda entry point returning a CUresult, called with the GIL held; None where it cannot
    be loaded."""
    try:
        fn = getattr(ctypes.PyDLL("libcuda.so.1"), name)
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_int
    return fn


# One entry parameter of the PTX: ".param .u64 .ptr .global .align 1 name_param_0" -> "u64",
# ".param .align 64 .b8 name_param_0[128]" (a CUtensorMap passed by value) -> "b8[128]"
_ENTRY = re.compile(r"\.entry\s+[\w$]+\s*\((.*?)\)", re.S)
_PARAM = re.compile(r"\.param\s+(?:\.align\s+\d+\s+)?\.(\w+)(?:\s+[\w$]+\[(\d+)\])?")
_TENSOR_MAP = "b8[128]"
_DESCRIPTOR_RANK = re.compile(r"tensordesc<\w+\[([\d,\s]*)\]")

# Triton signature type -> (the PTX parameter it becomes, struct code in an 8-byte slot)
_SCALARS = {"i32": ("u32", "i4x"), "u32": ("u32", "I4x"), "i64": ("u64", "q"), "u64": ("u64", "Q"),
            "fp32": ("f32", "f4x")}


def entry_params(ptx: str) -> list[str] | None:
    """The PTX types of the kernel entry's parameters, in order (None if there is no entry)."""
    found = _ENTRY.search(ptx)
    if found is None:
        return None
    matches = [_PARAM.match(p.strip()) for p in found.group(1).split(",") if p.strip()]
    return [(f"{m.group(1)}[{m.group(2)}]" if m.group(2) else m.group(1)) if m else "?" for m in matches]


def layout(types: Sequence[str], ptx_params: Sequence[str],
           geometry: dict | None = None) -> tuple[str, list[tuple], int] | None:
    """(struct codes, what each parameter slot holds, n slots) for arguments of Triton signature
    `types` and an entry taking `ptx_params`.  A slot holds ("ptr", i): argument i's data pointer,
    ("value", i): argument i itself, ("map", i): nothing (its parameter is argument i's CUtensorMap,
    pointed at per call), or ("const", v): v, a descriptor's shape or stride.  `geometry` gives each
    descriptor argument's (shape, strides).  None unless every passed argument is a pointer, a
    supported scalar or a descriptor with a geometry, matching its PTX parameters, and the
    parameters left over are trailing pointers (the scratch space this Triton appends)."""
    codes, slots, expect = [], [], []
    for i, ty in enumerate(types):
        if ty == "constexpr":
            continue  # specialised into the binary: not a parameter
        if ty.startswith("*"):
            codes.append("Q"), slots.append(("ptr", i)), expect.append("u64")
        elif ty in _SCALARS:
            ptx_type, code = _SCALARS[ty]
            codes.append(code), slots.append(("value", i)), expect.append(ptx_type)
        elif ty.startswith("tensordesc") and geometry and i in geometry:
            rank = _DESCRIPTOR_RANK.match(ty)
            shape, strides = geometry[i][:2]
            if rank is None or not len(shape) == len(strides) == rank.group(1).count(",") + 1:
                return None
            codes += ["Q"] + ["i4x"] * len(shape) + ["q"] * len(strides)
            slots += [("map", i)] + [("const", int(v)) for v in (*shape, *strides)]
            expect += [_TENSOR_MAP] + ["u32"] * len(shape) + ["u64"] * len(strides)
        else:
            return None
    extra = list(ptx_params[len(expect):])
    if list(ptx_params[:len(expect)]) != expect or any(p != "u64" for p in extra):
        return None
    return "<" + "".join(codes), slots, len(ptx_params)


# Triton's descriptor metadata names the element type in the device's enum; the driver's
# CUtensorMapDataType numbers three of them differently (Triton's TMA_DTYPE_DEVICE_TO_HOST).
_HOST_DTYPE = {8: 10, 9: 8, 10: 9}
_L2_PROMOTION_128B = 2  # CU_TENSOR_MAP_L2_PROMOTION_L2_128B, as Triton asks for


class TensorMaps:
    """CUtensorMaps of one descriptor argument of a kernel: a tensor of fixed shape and strides,
    tiled as the compiled kernel's descriptor metadata says, at whatever base address a call
    passes.  Encoded with the arguments Triton's launcher gives cuTensorMapEncodeTiled (zero
    padding), once per address; the last `keep` addresses are kept."""

    def __init__(self, meta: dict, shape: Sequence[int], strides: Sequence[int], encode: Callable, keep: int = 32):
        rank, size = len(shape), meta["elem_size"]
        u64s, u32s = ctypes.c_uint64 * rank, ctypes.c_uint32 * rank
        # the driver lists dimensions innermost first, strides in bytes without the innermost one
        self.arrays = (u64s(*reversed(shape)), u64s(*[s * size for s in reversed(strides[:-1])], 0),
                       u32s(*reversed(meta["block_size"])), u32s(*[1] * rank))
        self.fixed = (_HOST_DTYPE.get(meta["elem_type"], meta["elem_type"]), rank)
        self.tail = (0, meta["swizzle"], _L2_PROMOTION_128B, 0)  # no interleave; zero fill out of bounds
        self.encode_fn, self.keep = encode, keep
        self.addresses: dict[int, int] = {}  # base address -> its map's address
        self.buffers: dict[int, ctypes.Array] = {}

    def encode(self, base: int) -> int:
        """The address of the map for a tensor at `base`, encoded now."""
        if len(self.addresses) >= self.keep:  # the oldest goes; a launch made with it copied it already
            oldest = next(iter(self.addresses))
            del self.addresses[oldest], self.buffers[oldest]
        buf = (ctypes.c_uint8 * 255)()  # 128 bytes at a 128-byte boundary
        at = (ctypes.addressof(buf) + 127) & ~127
        failed = self.encode_fn(ctypes.c_void_p(at), *self.fixed, ctypes.c_void_p(base), *self.arrays, *self.tail)
        if failed:
            raise RuntimeError(f"cuTensorMapEncodeTiled failed (CUresult {failed}) for a tensor at {base:#x}")
        self.addresses[base], self.buffers[base] = at, buf
        return at


class DirectLaunch:
    """Calls `compiled` on `grid` with the runtime arguments in signature order (as Launch passes
    them), through cuLaunchKernelEx; `fallback(*args)` (Triton's launcher) takes a refused call."""

    def __init__(self, compiled, grid: Sequence[int], fmt: str, slots: list[tuple], n_slots: int,
                 n_args: int, fallback: Callable, stream_of: Callable, device, entry: Callable,
                 maps: dict[int, TensorMaps]):
        meta = compiled.metadata
        self.compiled = compiled  # keeps the module, and so the function handle, alive
        self.config = _LaunchConfig(*grid, 32 * meta.num_warps, 1, 1, meta.shared)
        wanted = [a for a, on in ((_ATTRIBUTE_COOPERATIVE, meta.launch_cooperative_grid),
                                  (_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, getattr(meta, "launch_pdl", False)))
                  if on]
        self.attributes = (_LaunchAttribute * max(1, len(wanted)))()
        for i, a in enumerate(wanted):
            self.attributes[i].id, self.attributes[i].value[0] = a, 1
        if wanted:
            self.config.attrs, self.config.numAttrs = self.attributes, len(wanted)
        # each parameter in an 8-byte slot; kernelParams points at the slots
        self.values = (ctypes.c_uint64 * max(1, n_slots))()
        base = ctypes.addressof(self.values)
        self.params = (ctypes.c_void_p * max(1, n_slots))(*[base + 8 * i for i in range(n_slots)])
        self.launch_ex = functools.partial(entry, ctypes.byref(self.config),
                                           ctypes.c_void_p(compiled.function), self.params, None)
        names = [f"a{i}" for i in range(n_args)]
        values = ", ".join({"ptr": f"a{v}.data_ptr()", "value": f"a{v}", "map": "0", "const": str(v)}[kind]
                           for kind, v in slots)
        # a descriptor's parameter points at its tensor's map: the one kept for that address, else a new one
        pointing = "".join(f"        base = a{v}.data_ptr()\n"
                           f"        params[{s}] = known{v}.get(base) or encode{v}(base)\n"
                           for s, (kind, v) in enumerate(slots) if kind == "map")
        # Generated so that a call is straight-line code: no loop over the arguments.
        self.source = (
            f"def call({', '.join(names)}):\n"
            f"    with lock:\n"
            f"        config.hStream = stream_of(device)\n"
            f"        pack(values, 0{', ' if values else ''}{values})\n"
            f"{pointing}"
            f"        failed = launch_ex()\n"
            f"    if failed:\n"
            f"        fallback({', '.join(names)})\n")
        scope = dict(lock=threading.Lock(), config=self.config, stream_of=stream_of, device=device,
                     pack=struct.Struct(fmt).pack_into, values=self.values, launch_ex=self.launch_ex,
                     fallback=fallback, params=self.params)
        for i, m in maps.items():
            scope[f"known{i}"], scope[f"encode{i}"] = m.addresses, m.encode
        self.maps = maps
        exec(compile(self.source, f"<DirectLaunch {meta.name}>", "exec"), scope)
        self.call = scope["call"]

    @classmethod
    def build(cls, compiled, grid: Sequence[int], n_args: int, fallback: Callable, stream_of: Callable,
              device, geometry: dict | None = None, entry=None, encode=None) -> "DirectLaunch | None":
        """A DirectLaunch of `compiled`, whose first `n_args` parameters are the runtime arguments
        and the rest constexprs; None where this launch path does not apply.  `geometry` gives
        each descriptor argument's (shape, strides, ...); a call passes the tensor in its place.
        `entry` and `encode` stand in for the driver's cuLaunchKernelEx and cuTensorMapEncodeTiled."""
        meta = compiled.metadata
        entry = entry or _driver_entry()
        if (entry is None or getattr(meta, "num_ctas", 1) != 1
                or getattr(meta, "global_scratch_size", 0) or getattr(meta, "profile_scratch_size", 0)
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
        found = layout(types[:n_args], params, geometry) if params is not None else None
        if found is None or 0 in grid:
            return None
        maps = {}
        described = [i for i, ty in enumerate(types[:n_args]) if ty.startswith("tensordesc")]
        if described:
            # one metadata entry per descriptor argument, in order: its tiling and swizzle
            tiling = list(getattr(meta, "tensordesc_meta", None) or ())
            encode = encode or _driver_entry("cuTensorMapEncodeTiled")
            if encode is None or len(tiling) != len(described) or any(
                    not t or t.get("fp4_padded") or t.get("is_im2col") for t in tiling):
                return None
            maps = {i: TensorMaps(t, *geometry[i][:2], encode) for i, t in zip(described, tiling)}
        elif getattr(meta, "tensordesc_meta", None):
            return None
        return cls(compiled, grid, *found, n_args, fallback, stream_of, device, entry, maps)
