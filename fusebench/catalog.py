"""The catalog: every case, implementation and metric fusebench knows, filled by one loader.

The unit is the op.  A case object (fusebench/cases/) declares what the op is: its function, its
inputs, its byte and FLOP models, whether it is memory-bound, the ceiling it is shown against.  What
computes it attaches to that object, never to its name: its Triton kernel and autograd wrapper
(`case.kernel`, by `@triton_kernel(case)` in fusebench/kernels/) and other implementations'
adapters (`case.adapters`: the peer libraries' calls, cuBLASLt's, SDPA's, fusebench/impls/).
Adding an op is adding one module to a walked package; no list names it.

`load()` walks the packages of LAYERS in order, each a layer that imports only the layers before it
(cases are definitions, torch only; kernels attach to cases; implementations use both; metrics
measure cells), then the packages or modules named in FUSEBENCH_OPS (comma-separated, importable:
users' ops, found by worker processes too since they inherit the variable).  It imports every module
of a package whose name does not start with "_" and collects what each declares:

* an instance bound at module level of a class that names its table in TABLE_OF_INSTANCES (a
  `Case`: a case, under its `name`);
* what a decorator marked with `mark()`: an implementation (`@implementation`), a metric
  (`@metric`), a Triton kernel naming its case by name (`@triton_kernel("name")`).

The catalog imports nothing of fusebench's (it only names packages): every layer may use it.

A module that declares nothing (a helper) adds nothing.  A module may set CATALOG_ORDER (an int) to
place its declarations before others' (lower first; modules without one follow, by name): the
order of `fusebench list` and of a run's cells.  A module that fails to import is recorded in
`errors` (module -> message), not raised: one broken module must not take the others down.

The tables live in one object, CATALOG.  `reset()` empties them in place (references to them stay
valid); the next lookup walks the packages again, and modules already imported are collected again
from their namespaces, so a reset catalog is the same catalog.
"""
from __future__ import annotations

import importlib
import os
import pkgutil
import threading
import types
from typing import Any

# The built-in packages, in layer order (a layer imports only the ones before it).
LAYERS = ("fusebench.cases", "fusebench.kernels", "fusebench.impls", "fusebench.impls.peers", "fusebench.metrics")
# More packages (or modules) of ops, walked after LAYERS: "pkg_a,pkg_b".
OPS_VARIABLE = "FUSEBENCH_OPS"
# The attribute under which a decorator marks what it declares: a list of (table, name, value).
MARK = "__catalog__"
# The class attribute naming the table that the class's module-level instances are entries of.
TABLE_OF_INSTANCES = "__catalog_table__"


def mark(obj: Any, table: str, name: str, value: Any) -> None:
    """Declare `value` as entry `name` of `table` ("impls", "metrics" or "kernels"); the loader
    collects it from the namespace of the module that binds `obj`."""
    entries = vars(obj).get(MARK, [])
    setattr(obj, MARK, [*entries, (table, name, value)])


def _marks(value: Any) -> list[tuple[str, str, Any]]:
    # The value's own marks: a subclass does not declare what its parent class declared.
    if isinstance(value, types.ModuleType):
        return []
    try:
        entries = vars(value).get(MARK, ())
    except Exception:  # no __dict__ (an int, a tuple, a dtype ...), or one that is no mapping
        return []
    return list(entries)


def extra_packages() -> list[str]:
    return [p.strip() for p in os.environ.get(OPS_VARIABLE, "").split(",") if p.strip()]


class Catalog:
    """The tables (name -> object) and how they were filled; see the module docstring."""

    def __init__(self):
        self.cases: dict[str, Any] = {}  # name -> fusebench.cases.Case
        self.impls: dict[str, Any] = {}  # name -> fusebench.impls.Implementation
        self.metrics: dict[str, Any] = {}  # name -> measure(ctx) -> dict
        self.errors: dict[str, str] = {}  # module -> why it did not load, or what it declared wrong
        self.walked: list[str] = []  # packages walked, in order
        self._loading = False
        self._lock = threading.RLock()  # one walk at a time: workers may look up from threads

    def reset(self) -> None:
        """Forget everything, in place; the next load() walks the packages again."""
        with self._lock:
            for table in (self.cases, self.impls, self.metrics, self.errors):
                table.clear()
            self.walked.clear()

    def load(self) -> "Catalog":
        """Walk the packages not walked yet (LAYERS, then FUSEBENCH_OPS's).  A call made while
        loading (a module that looks something up as it is imported) returns at once: it sees the
        layers collected so far, which are all that module may use."""
        with self._lock:
            if self._loading:
                return self
            todo = [p for p in (*LAYERS, *extra_packages()) if p not in self.walked]
            if not todo:
                return self
            self._loading = True
            try:
                for package in todo:
                    self.walked.append(package)
                    self.collect(*self._import(package))
            finally:
                self._loading = False
        return self

    def _import(self, package: str) -> list[types.ModuleType]:
        """The modules of `package` (or the module itself when it is no package), imported, in
        catalog order."""
        top = self._import_one(package)
        if top is None:
            return []
        if not hasattr(top, "__path__"):
            return [top]
        names = [f"{package}.{info.name}" for info in pkgutil.iter_modules(top.__path__)
                 if not info.name.startswith("_")]
        modules = [m for m in map(self._import_one, names) if m is not None]
        return sorted(modules, key=lambda m: (getattr(m, "CATALOG_ORDER", float("inf")), m.__name__))

    def _import_one(self, name: str) -> types.ModuleType | None:
        try:
            return importlib.import_module(name)
        except Exception as exc:  # a broken module is recorded; the others load
            self._error(name, f"{type(exc).__name__}: {exc}")
            return None

    def _error(self, module: str, why: str) -> None:
        self.errors[module] = f"{self.errors[module]}; {why}" if module in self.errors else why

    def collect(self, *modules: types.ModuleType, replace: bool = False) -> None:
        """Add what `modules` declare: the instances first (the cases), then the marked entries (a
        kernel named by its case's name needs the case).  replace: a declaration replaces an entry
        of its name (a plugin file loaded again); otherwise the first one stays, the other is an
        error."""
        found = [(m.__name__, v) for m in modules for v in list(vars(m).values())]
        for module, value in found:
            table = getattr(type(value), TABLE_OF_INSTANCES, None)
            if table is not None:
                self._add(module, table, value.name, value, replace)
        for module, value in found:
            for table, name, entry in _marks(value):
                if table == "kernels":
                    self._attach_kernel(module, name, entry)
                else:
                    self._add(module, table, name, entry, replace)

    def _add(self, module: str, table: str, name: str, value: Any, replace: bool) -> None:
        entries = getattr(self, table)
        if entries.get(name, value) is value or replace:
            entries[name] = value
        else:
            self._error(module, f"{table[:-1]} {name!r} is declared twice; the first one is kept")

    def _attach_kernel(self, module: str, case_name: str, kernel: Any) -> None:
        case = self.cases.get(case_name)
        if case is None:
            self._error(module, f"a Triton kernel for {case_name!r}, which is no case")
        else:
            case.kernel = kernel

    def add(self, table: str, name: str, value: Any, *, replace: bool = False) -> None:
        """Register one entry outside the walk (a user's case or implementation); raises
        ValueError when the name is taken and replace is not set."""
        entries = getattr(self, table)
        if entries.get(name, value) is not value and not replace:
            raise ValueError(f"{table[:-1]} {name!r} is already registered")
        entries[name] = value

    def failures(self) -> str:
        """The modules that failed, for an error message ("" when none)."""
        if not self.errors:
            return ""
        return "; modules that failed: " + ", ".join(f"{m} ({e})" for m, e in self.errors.items())


CATALOG = Catalog()


def load() -> Catalog:
    """The catalog, its packages walked (see the module docstring)."""
    return CATALOG.load()


def reset() -> None:
    CATALOG.reset()
