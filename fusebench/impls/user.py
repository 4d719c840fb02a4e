"""`fusebench.implementation`: a user's own function or kernel as an implementation of a case.

    @fusebench.implementation("my-softmax", cases=["softmax"])
    def my_softmax(x):
        ...                                   # same arguments as the case's eager function

    @fusebench.implementation("my-layernorm", cases=["layernorm"], factory=True)
    def make_layernorm(case, shape, dtype, device):
        ...                                   # prepare once per cell (buffers, a tuned config ...)
        return lambda x, weight, bias: ...

The function then runs in every cell of the cases it names, like eager or Inductor: accuracy
against the float64 reference, timing, every metric, the store, the report and `compare`.
Registered from a `--plugin FILE`, it is registered again in every worker process, since the
workers load the same plugin files.
"""
from __future__ import annotations

from typing import Callable, Sequence

from fusebench import catalog, settings
from fusebench.cases.base import Case, get_case
from fusebench.impls.base import Implementation, Prepared

TRITON_ON_CPU = "on the CPU Triton kernels run only under TRITON_INTERPRET=1 (correctness only)"


class ImplementationError(ValueError):
    """A user's implementation cannot be registered (name taken by a built-in, unknown case ...)."""


class UserImplementation(Implementation):
    """A function registered with `fusebench.implementation`."""

    def __init__(self, name: str, fn: Callable, cases: tuple[str, ...], *, factory: bool = False,
                 supports: Callable | None = None, description: str = "", triton: bool = False):
        self.name, self.fn, self.cases, self.factory = name, fn, cases, factory
        self._supports, self.triton = supports, triton
        self.description = description or (fn.__doc__ or "").strip().split("\n")[0] or \
            f"{getattr(fn, '__qualname__', name)}, registered for {', '.join(cases)}"
        self.module = getattr(fn, "__module__", None)

    def applies(self, case: Case) -> bool:
        """Only the cases it was registered for."""
        return case.name in self.cases

    def available(self, device: str) -> str | None:
        if self.triton and device == "cpu" and not settings.current().interpret:
            return TRITON_ON_CPU
        return None

    def supports(self, case, shape, dtype, device):
        if not self.applies(case):
            return f"{self.name} is registered for {', '.join(self.cases)} only"
        reason = self.available(device)
        if reason is None and self._supports is not None:
            reason = self._supports(case, shape, dtype, device)
        return reason or None

    def prepare(self, case, shape, dtype, device):
        fn = self.fn(case, shape, dtype, device) if self.factory else self.fn
        if not callable(fn):
            raise TypeError(f"the factory of {self.name} returned {type(fn).__name__}, not a callable")
        interp = "Triton interpreter: correctness only" if self.triton and device == "cpu" else None
        return Prepared(fn=fn, timing_available=interp)


def implementation(name: str, *, cases: Sequence[str] | str, factory: bool = False,
                   supports: Callable | None = None, description: str = "",
                   triton: bool = False) -> Callable[[Callable], Callable]:
    """Register the decorated function as implementation `name` of `cases`.

    fn is called with the case's inputs, as the case's eager function is.  With factory=True,
    fn(case, shape, dtype, device) is called once per cell, outside any timing, and returns that
    function.  supports(case, shape, dtype, device) returns None, or the reason a cell cannot run
    (stored as unsupported).  triton=True: the function launches Triton kernels, so on the CPU it
    runs only under TRITON_INTERPRET=1, where it is checked but not timed.  The function is
    returned unchanged.
    """
    if isinstance(cases, str):
        cases = [cases]
    cases = tuple(dict.fromkeys(cases))
    if not isinstance(name, str) or not name.strip() or name != name.strip() or "," in name:
        raise ImplementationError(f"implementation name {name!r}: a non-empty name without commas or "
                                  "surrounding spaces is required")
    if not cases:
        raise ImplementationError(f"implementation {name!r} names no case: give cases=[...]")

    def wrap(fn: Callable) -> Callable:
        if not callable(fn):
            raise ImplementationError(f"implementation {name!r}: {type(fn).__name__} is not callable")
        register_user(UserImplementation(name, fn, cases, factory=factory, supports=supports,
                                         description=description, triton=triton))
        return fn

    return wrap


def register_user(impl: UserImplementation) -> UserImplementation:
    """Check the name and the cases, then add the implementation to the registry."""
    impls = catalog.load().impls
    existing = impls.get(impl.name)
    if existing is not None and not isinstance(existing, UserImplementation):
        raise ImplementationError(f"implementation {impl.name!r} is built in; give yours another name")
    if existing is not None and existing.module != impl.module:
        raise ImplementationError(f"implementation {impl.name!r} is already registered by "
                                  f"{existing.module}; give yours another name")
    for name in impl.cases:
        try:
            get_case(name)
        except ValueError as exc:  # UnknownName, with its "did you mean"
            raise ImplementationError(f"{exc} for implementation {impl.name!r} (a case of your own must be "
                                      "registered before the implementation that uses it)") from None
    impls[impl.name] = impl  # a plugin loaded again (e.g. in a worker) replaces its own
    return impl


__all__ = ["implementation", "ImplementationError", "UserImplementation"]
