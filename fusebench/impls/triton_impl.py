"""`triton`: fusebench's own fused Triton kernels (fusebench/kernels/), each attached to its case
object as `case.kernel` by `@triton_kernel(case)`.

On a GPU they are compiled and timed like the others.  On the CPU they run only under Triton's
interpreter (TRITON_INTERPRET=1), for correctness: interpreter timings mean nothing.
"""
from fusebench import settings
from fusebench.impls.base import Implementation, Prepared, implementation

# Its place among the implementations (fusebench/catalog.py): the order of a run's cells and of `fusebench list`.
CATALOG_ORDER = 3

_AUTOGRAD = object()  # what a cell's last call ran: the kernel's autograd.Function


def _triton_missing() -> str | None:
    try:
        import triton  # noqa: F401
    except ImportError as exc:
        return f"triton not importable: {exc}"
    return None


@implementation
class Triton(Implementation):
    name = "triton"
    description = "fusebench's own fused Triton kernel for the case"

    def applies(self, case):
        # The cases a kernel module attached a kernel to (none where Triton does not import).
        return case.kernel is not None

    def has_backward(self, case, mode):
        # Our kernels run backward only through an autograd.Function with backward kernels of ours.
        return case.kernel is not None and case.kernel.autograd is not None

    def available(self, device):
        missing = _triton_missing()
        if missing:
            return missing
        if device == "cpu" and not settings.current().interpret:
            return "on the CPU Triton kernels run only under TRITON_INTERPRET=1 (correctness only)"
        return None

    def supports(self, case, shape, dtype, device):
        reason = self.available(device)
        if reason:
            return reason
        kernel = case.kernel
        if kernel is None:
            return "no fusebench Triton kernel for this case"
        if device == "cpu" and not kernel.interpretable:
            return "this kernel uses what Triton's interpreter cannot run"
        return kernel.supports(shape, dtype, device) if kernel.supports else None

    def prepare(self, case, shape, dtype, device):
        kernel = case.kernel
        note = kernel.describe(shape, dtype) if kernel.describe else ""
        interp = "Triton interpreter: correctness only" if device == "cpu" else None
        if kernel.run is None:
            # Kernels that choose a path at their first call say which in describe(), asked again after it.
            return Prepared(fn=kernel.fn, note=note, timing_available=interp, train_fn=kernel.autograd,
                            note_after=lambda: kernel.describe(shape, dtype) if kernel.describe else None)
        # Kernels that choose a launch plan per shape return it with their outputs: the note says
        # which one ran (the heuristic's guess is `note`).
        run, autograd = kernel.run, kernel.autograd
        ran = [None]  # the plan of the last call, or _AUTOGRAD after a call of train_fn

        def fn(*args):
            out, ran[0] = run(*args)
            return out

        def train_fn(*args):
            ran[0] = _AUTOGRAD
            return autograd(*args)

        def chosen():
            plan = ran[0]
            if plan is None:
                return None
            if plan is _AUTOGRAD:
                return ("through its autograd.Function: forward and backward kernels, each with its plan tuned "
                        "for the shape")
            return kernel.describe_plan(plan, device) if kernel.describe_plan else plan.describe()

        return Prepared(fn=fn, note=note, timing_available=interp, note_after=chosen,
                        train_fn=train_fn if autograd is not None else None)
