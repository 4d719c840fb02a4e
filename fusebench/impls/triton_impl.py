"""`triton`: fusebench's own fused Triton kernels (fusebench/kernels/).

On a GPU they are compiled and timed like the others.  On the CPU they run only under Triton's
interpreter (TRITON_INTERPRET=1), for correctness: interpreter timings mean nothing.
"""
import os

from fusebench.impls.base import Implementation, Prepared, implementation


def _kernels():
    from fusebench import kernels

    errors = kernels.load_all()
    return kernels.KERNELS, errors


@implementation
class Triton(Implementation):
    name = "triton"
    description = "fusebench's own fused Triton kernel for the case"

    def applies(self, case):
        # A built-in case has a kernel or is meant to (the registry says which once Triton imports);
        # a user's case has none.
        try:
            return case.name in _kernels()[0]
        except ImportError:
            return case.plugin is None

    def available(self, device):
        try:
            _kernels()
        except ImportError as exc:
            return f"triton not importable: {exc}"
        if device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
            return "on the CPU Triton kernels run only under TRITON_INTERPRET=1 (correctness only)"
        return None

    def supports(self, case, shape, dtype, device):
        reason = self.available(device)
        if reason:
            return reason
        kernel = _kernels()[0].get(case.name)
        if kernel is None:
            return "no fusebench Triton kernel for this case"
        if device == "cpu" and not kernel.interpretable:
            return "this kernel uses what Triton's interpreter cannot run"
        return kernel.supports(shape, dtype, device) if kernel.supports else None

    def prepare(self, case, shape, dtype, device):
        from fusebench.kernels import utils

        kernel = _kernels()[0][case.name]
        note = kernel.describe(shape, dtype) if kernel.describe else ""
        interp = "Triton interpreter: correctness only" if device == "cpu" else None
        utils.forget_choice()

        def chosen():
            # The plan the memory-bound kernels' autotuner took (the heuristic's guess is `note`),
            # or the describe() of the others again, now that their first call chose a path.
            plan = utils.last_choice()
            if plan is not None:
                return kernel.describe_plan(plan, device) if kernel.describe_plan else plan.describe()
            return kernel.describe(shape, dtype) if kernel.describe else None

        return Prepared(fn=kernel.fn, note=note, timing_available=interp, note_after=chosen)
