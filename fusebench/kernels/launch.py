"""Launching a compiled Triton kernel with everything decided once: the host's cost per call.

`jit_fn[grid](*args, **constexprs)` binds and specialises every argument, hashes the result and
looks the binary up on each call: for kernels with 20-30 arguments that Python costs more than
the GPU time of a small row-wise kernel (docs/kernels.md, 'One launcher per problem key').  A
`Launch` makes that call once, keeps the compiled kernel it returns, and afterwards launches the
binary directly with the new tensors: through cuLaunchKernelEx (cuda_launch.DirectLaunch) where
the kernel's parameters allow, else through Triton's own launcher.

That is valid only while Triton would pick the same binary, so a caller keeps one `Launch` per
problem key that fixes everything Triton specialises on: the shapes and strides (every integer
argument fusebench passes is derived from them, and Triton specialises integers on == 1 and on
divisibility by 16) and each pointer's 16-byte alignment (`signature`).  The first call of a
`Launch` goes through the JIT, so a new key costs what it always did.

Under Triton's interpreter, while a launch hook is installed (profilers such as proton install
one), or if the compiled kernel lacks the launcher this module expects, every call goes through
the JIT.

A kernel that takes TMA tensor descriptors is given their geometry (shape, strides, block shape)
with the Launch, also fixed by the key, and a caller passes the base tensor in a descriptor's
place: the direct launch then needs no descriptor object, and Triton's paths get one built here.

`signature` is the key's tensor part and `is_final` says whether a tuner's choice may be kept in a
launcher.  Each kernel family keeps its launchers in a `LauncherCache` and its other per-problem
tables in a dict, all held by the one `STATE` (KernelState), which `STATE.clear()` empties.
"""
from __future__ import annotations

from typing import Sequence

import torch

from fusebench.kernels import cuda_launch
from fusebench.kernels import device as dev


def signature(*tensors: torch.Tensor | None) -> tuple:
    """Each tensor's shape, strides, dtype, device and 16-byte alignment (Triton specialises
    pointers on it), as one flat tuple: the part of a launcher's key that its tensors decide.  An
    absent optional tensor (None) counts as such."""
    key: list = []
    for t in tensors:
        if t is None:
            key.append(None)
        else:
            key += (t.shape, t.stride(), t.dtype, t.device, t.data_ptr() % 16 == 0)
    return tuple(key)


def dependent(device, on: bool = True) -> dict:
    """What a kernel with a `WAIT` constexpr (gdc_wait() first when set) takes to be launched as a
    programmatic dependent of the kernel before it in the stream, where the device can
    (dev.dependent_launch): its programs may then start as that kernel ends, or as it lets them
    (gdc_launch_dependents), which shortens a call (docs/kernels.md, 'How the norm backward
    launches').  Only for a call's second and later kernels, so that no kernel of a call starts
    before a caller's timing event; `on=False` gives the plain launch."""
    pdl = on and dev.dependent_launch(device)
    return dict(WAIT=pdl, launch_pdl=True) if pdl else dict(WAIT=False)


def is_final(tuner, tuner_key, device, n_candidates: int) -> bool:
    """Whether the plan the tuner just returned for `tuner_key` is the one every later call would
    get, so that a launcher may keep it: one candidate, a device the tuner never times on (the CPU,
    the interpreter), or a choice the tuner remembers.  Not so on a GPU while tuning is off or a
    CUDA graph is being captured: the tuner then returns its first candidate untimed."""
    return (n_candidates == 1 or torch.device(device).type != "cuda" or dev.is_interpreter()
            or tuner_key in tuner.choices)


try:
    from triton import knobs as _knobs
except ImportError:  # a Triton without knobs: no way to tell whether hooks are installed
    _knobs = None


def _hook_set(hook) -> bool:
    # Triton keeps launch hooks in a HookChain, empty (not None) when none is installed.
    calls = getattr(hook, "calls", None)
    return bool(calls) if calls is not None else hook is not None


def _hooks_installed() -> bool:
    if _knobs is None:
        return True
    runtime = _knobs.runtime
    return _hook_set(runtime.launch_enter_hook) or _hook_set(runtime.launch_exit_hook)


def unchecked_descriptor(base: torch.Tensor, shape: list, strides: list, block_shape: list):
    """A host-side TMA TensorDescriptor without the dataclass's per-call checks (alignment, block
    shape, strides): the caller's problem key already fixes everything they check, and
    TensorDescriptor.from_tensor ran them once, when the key was first met.  The driver reads the
    base's data pointer at each launch."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    desc = object.__new__(TensorDescriptor)
    desc.base, desc.shape, desc.strides, desc.block_shape = base, shape, strides, block_shape
    desc.padding, desc.round_f32_to_tf32 = "zero", False
    return desc


class Launch:
    """`jit_fn` on `grid` with keyword arguments `constants` (constexprs and options such as
    num_warps), called with the runtime arguments in signature order.  Runtime arguments must
    come first in the kernel's signature and be passed positionally.  `descriptors` maps the index
    of each TMA descriptor argument to its (shape, strides, block shape); a call passes the
    descriptor's base tensor there."""

    __slots__ = ("jit_fn", "grid", "constants", "descriptors", "kernel", "run", "head", "tail", "n_args",
                 "stream_of", "device", "fast")

    def __init__(self, jit_fn, grid: Sequence[int], constants: dict, descriptors: dict | None = None):
        self.jit_fn = jit_fn
        self.grid = (tuple(grid) + (1, 1))[:3]
        self.constants = constants
        self.descriptors = descriptors or {}
        self.kernel = None  # the compiled kernel once the first call has made it
        self.run = None  # its launcher
        self.head: tuple = ()  # what the launcher takes between the stream and the arguments
        self.tail: tuple = ()
        self.n_args = 0
        self.stream_of = None
        self.device = None
        self.fast = None  # the direct launch, else Triton's launcher

    def __call__(self, *args) -> None:
        if self.run is not None and len(args) == self.n_args and not _hooks_installed():
            self.fast(*args)
            return
        self._first(args)

    def triton_launch(self, *args) -> None:
        """The compiled kernel through Triton's launcher."""
        grid = self.grid
        self.run(grid[0], grid[1], grid[2], self.stream_of(self.device), *self.head, *self._described(args),
                 *self.tail)

    def jit(self, *args) -> None:
        """Launch through the JIT and keep nothing: a one-off launch (the tuner's, of each
        candidate plan), which the binding of the fast path's arguments would only slow."""
        self.jit_fn[self.grid](*self._described(args), **self.constants)

    def _described(self, args) -> tuple:
        """The arguments with each descriptor's base tensor made its TensorDescriptor."""
        geo = self.descriptors
        if not geo:
            return args
        return tuple(unchecked_descriptor(a, *geo[i]) if i in geo else a for i, a in enumerate(args))

    def _first(self, args) -> None:
        """Launch through the JIT, and keep what the fast path needs when it can take it."""
        args = self._described(args)
        compiled = self.jit_fn[self.grid](*args, **self.constants)
        if self.kernel is not None or dev.is_interpreter() or compiled is None:
            return
        try:
            from triton.runtime import driver

            device = driver.active.get_current_device()
            binder = self.jit_fn.device_caches[device][-1]  # (caches..., binder)
            bound = list(binder(*args, **self.constants)[0].values())
            stream_of, run = driver.active.get_current_stream, compiled.run
        except (AttributeError, IndexError, KeyError, TypeError):  # another Triton's internals: stay on the JIT
            return
        if not callable(run):
            return
        # (function, packed metadata, launch metadata, enter hook, exit hook): no hooks on this path
        self.head = (compiled.function, compiled.packed_metadata, None, None, None)
        self.tail, self.n_args = tuple(bound[len(args):]), len(args)
        self.stream_of, self.device, self.kernel, self.run = stream_of, device, compiled, run
        direct = cuda_launch.DirectLaunch.build(compiled, self.grid, len(args), self.triton_launch, stream_of, device,
                                                self.descriptors)
        self.fast = direct.call if direct is not None else self.triton_launch


class LauncherCache:
    """One kernel family's launchers, one per problem key (everything Triton specialises on, and
    the forced plan).  A call is `get(key)`, a plain dict lookup; a key without a launcher asks
    `miss(key, build, *args)`, which builds one and keeps it where `build` says its choice is
    final (is_final): a launcher built on an untimed tuner's guess must be asked again."""

    __slots__ = ("name", "_entries", "get")

    def __init__(self, name: str):
        self.name = name
        self._entries: dict = {}
        self.get = self._entries.get

    def miss(self, key, build, *args):
        """The launcher `build(*args)` returns as (launcher, final), kept under `key` when final."""
        launcher, final = build(*args)
        if final:
            self._entries[key] = launcher
        return launcher

    def clear(self) -> None:
        self._entries.clear()  # the same dict: `get` stays bound to it

    def values(self):
        """The launchers kept (for tests and for a reader wondering what is kept)."""
        return self._entries.values()

    def __len__(self) -> int:
        return len(self._entries)


class KernelState:
    """Everything the kernel layer keeps between calls, in one place: each family's launchers
    (`launchers`) and its other per-problem tables (`table`: launch plans, CUDA graphs, scratch
    buffers).  `clear()` empties all of them, so a test or a run with other settings starts from
    nothing."""

    def __init__(self):
        self._launchers: dict[str, LauncherCache] = {}
        self._tables: dict[str, dict] = {}

    def launchers(self, name: str) -> LauncherCache:
        """The launcher cache of family `name` (made on first use, the same object afterwards)."""
        cache = self._launchers.get(name)
        if cache is None:
            cache = self._launchers[name] = LauncherCache(name)
        return cache

    def table(self, name: str) -> dict:
        """The per-problem dict `name` (made on first use, the same object afterwards)."""
        table = self._tables.get(name)
        if table is None:
            table = self._tables[name] = {}
        return table

    def clear(self) -> None:
        for cache in self._launchers.values():
            cache.clear()
        for table in self._tables.values():
            table.clear()

    def sizes(self) -> dict[str, int]:
        """Entries held per cache and table (for tests and for a reader wondering what is kept)."""
        return {**{f"launchers:{k}": len(v) for k, v in self._launchers.items()},
                **{k: len(v) for k, v in self._tables.items()}}


# The kernel layer's one state object: kernel modules take their caches and tables from it at
# import (the same objects for the life of the process; clear() empties them in place).
STATE = KernelState()
