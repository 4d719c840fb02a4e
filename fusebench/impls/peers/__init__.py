"""Peer libraries as implementations: the kernels a user would otherwise pick, in the same grid.

Each peer calls its library's public (documented) functional entry point on the case's own
inputs.  Peers run when named (`--impl liger`, or `--impl default,peers` for every installed
one); one whose library is not installed is listed with the command that installs it.  A peer's
version is stored with every run (`versions()`, in env.collect).
The adapters map a case's arguments onto the library's call and nothing more: no extra work is
timed that the library's own users would not do.  A peer declares them as ((case, adapter), ...);
`@peer` attaches each to its case object (case.adapters[peer name]), so a peer computes exactly
the cases it has an adapter for.  Each module of this package is one library; the catalog's loader
(fusebench/catalog.py) collects them.
"""
from __future__ import annotations

import functools
import importlib
import importlib.metadata
import importlib.util
from typing import Callable

import torch

from fusebench import catalog
from fusebench.impls.base import Implementation, Prepared, implementation
from fusebench.util import first_line

# Adapter: (case, shape, dtype, device, module) -> (fn, note).  fn takes the case's inputs.
Adapter = Callable[..., tuple[Callable, str]]


def _distribution_version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=None)
def _import(module: str):
    """The library's module, or the exception its import raised (cached: imports can be slow)."""
    try:
        return importlib.import_module(module)
    except Exception as exc:  # a broken install (missing native library, ABI mismatch ...)
        return exc


class PeerImplementation(Implementation):
    """A library's kernels for the cases of its `adapters` (((case, Adapter), ...))."""

    module: str = ""  # what is imported
    dist: str = ""  # the PyPI distribution whose version is stored
    install: str = ""  # the command that installs it
    # Lowest CUDA compute capability the library's kernels run on.
    min_capability: tuple[int, int] = (8, 0)
    default = False  # run when named (--impl liger, or --impl default,peers): not in the default run
    default_on_cpu = False

    def applies(self, case) -> bool:
        return self.name in case.adapters

    def installed(self) -> bool:
        top = self.module.split(".")[0]
        return importlib.util.find_spec(top) is not None and (
            top == self.module or importlib.util.find_spec(self.module) is not None)

    def load(self):
        mod = _import(self.module)
        if isinstance(mod, Exception):
            raise ImportError(f"import {self.module} failed: {first_line(mod)}")
        return mod

    def available(self, device: str) -> str | None:
        try:
            if not self.installed():
                return f"not installed: {self.install}"
        except Exception as exc:  # a parent package that is there but does not import
            return f"import {self.module} failed: {first_line(exc)}"
        if not device.startswith("cuda"):
            return "needs a CUDA GPU"
        try:
            self.load()
        except ImportError as exc:
            return str(exc)
        return None

    def supports(self, case, shape, dtype, device):
        if not self.applies(case):
            return f"{self.name} has no kernel for {case.name}"
        reason = self.available(device)
        if reason:
            return reason
        cap = torch.cuda.get_device_capability(device)
        if cap < self.min_capability:
            return f"{self.name} needs compute capability {'.'.join(map(str, self.min_capability))} or newer"
        return self.cell_supports(case, shape, dtype)

    def cell_supports(self, case, shape, dtype) -> str | None:
        """Limits of the library's kernels at one cell (dtype, head size ...); None if none."""
        return None

    def prepare(self, case, shape, dtype, device):
        fn, note = case.adapters[self.name](case, shape, dtype, device, self.load())
        version = _distribution_version(self.dist)
        return Prepared(fn=fn, note="; ".join(n for n in (f"{self.dist} {version}" if version else "", note) if n))


def peer(cls: type[PeerImplementation]) -> type[PeerImplementation]:
    """Declare a peer: an implementation, its adapters attached to their cases."""
    return implementation(cls)


def peers() -> list[PeerImplementation]:
    """Every peer of the catalog, installed or not."""
    return [i for i in catalog.load().impls.values() if isinstance(i, PeerImplementation)]


def versions() -> dict[str, str | None]:
    """Installed version of every peer library (None: not installed), for the run's environment."""
    return {p.dist: _distribution_version(p.dist) for p in peers()}
