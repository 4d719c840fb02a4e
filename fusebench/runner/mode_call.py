"""The call a cell times in its mode (runner/modes.py names them): the forward, or with autograd.

In the training modes the inputs named by the case's `grad_inputs` are leaves that require
gradients, and the implementation's forward is differentiated by autograd: eager through
PyTorch's own backward ops, Inductor through the backward AOTAutograd compiled with the forward
(torch.compile of the forward, called on inputs that require gradients, traces the joint graph
and compiles its forward and backward parts), our Triton kernels through their autograd.Function,
peers and users' functions through their own autograd.

* `fwd_bwd`: one call is the forward and `torch.autograd.grad` of its outputs.
* `bwd`: the forward runs once, outside the timed call; one call is `torch.autograd.grad(...,
  retain_graph=True)` on that graph, so that every repetition runs the same backward.

The gradients flowing into the outputs are seeded normal samples (not ones, so that a backward
that ignores them fails).  `autograd.grad` returns the gradients rather than accumulating them into
`.grad`, so no accumulation kernel is timed.  The accuracy check compares the forward's outputs
and every input's gradient with float64 autograd on the case's reference, given the same output
gradients (rounded to the inputs' dtype), on the case's sample where it checks one.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from fusebench.cases.base import Case, generator
from fusebench.runner.modes import check_mode

# The gradients of the outputs are drawn with seeds this far from the inputs' own.
GRAD_SEED_OFFSET = 50_000


def retained_graph_context(mode: str):
    """Around a cell of `mode`: bwd runs one graph's backward many times (retain_graph), which
    AOTAutograd's donated buffers (saved tensors the compiled backward overwrites) forbid, so
    torch.compile keeps them off there."""
    import contextlib

    if mode != "bwd":
        return contextlib.nullcontext()
    import torch._functorch.config

    return torch._functorch.config.patch(donated_buffer=False)


def _outputs(out) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    return [t for o in out for t in _outputs(o)] if isinstance(out, (tuple, list)) else []


def grad_outputs(outs: list[torch.Tensor], seed: int) -> list[torch.Tensor]:
    """Seeded normal gradients for the floating outputs, in their dtypes."""
    grads = []
    for i, o in enumerate(outs):
        g = torch.randn(tuple(o.shape), generator=generator(o.device.type, seed + GRAD_SEED_OFFSET + i),
                        dtype=torch.float32, device=o.device)
        grads.append(g.to(o.dtype))
    return grads


def leaves(case: Case, args: tuple) -> tuple:
    """`args` with the gradient inputs as fresh leaves that require gradients."""
    return tuple(a.detach().requires_grad_(True) if i in case.grad_inputs else a for i, a in enumerate(args))


def _differentiate(fn, case: Case, args: tuple, seed: int, retain: bool, cache: dict | None = None,
                   grads: list | None = None, rounded_to: torch.dtype | None = None):
    """(outputs, Graph) of fn on leaves of args: the forward, with what the backward needs.  With
    `cache`, the outputs' gradients are drawn once per output shape and kept there (the timed
    fwd_bwd call draws no random numbers).  `grads`: the outputs' gradients given, not drawn;
    `rounded_to`: drawn gradients are rounded to this dtype first (a float64 reference then gets
    the very gradients an implementation in that dtype got)."""
    args = leaves(case, args)
    with torch.enable_grad():
        out = fn(*args)
    outs = [o for o in _outputs(out) if o.requires_grad]
    if not outs:
        raise RuntimeError("no output of the forward requires gradients: the implementation is not differentiable")
    if grads is None and cache is not None:
        key = tuple((tuple(o.shape), o.dtype, str(o.device)) for o in outs)
        grads = cache.get(key)
        if grads is None:
            grads = cache[key] = grad_outputs(outs, seed)
    elif grads is None:
        grads = grad_outputs(outs, seed)
        if rounded_to is not None:
            grads = [g.to(rounded_to).to(o.dtype) for g, o in zip(grads, outs)]
    return out, Graph(outs, [args[i] for i in case.grad_inputs], grads, retain)


@dataclass
class Graph:
    """A forward's differentiable outputs, the leaves, and the gradients flowing into the outputs."""

    outs: list
    inputs: list
    grad_outs: list
    retain: bool

    def backward(self) -> tuple:
        with torch.enable_grad():
            grads = torch.autograd.grad(self.outs, self.inputs, self.grad_outs, retain_graph=self.retain,
                                        allow_unused=True)
        return tuple(torch.zeros_like(x) if g is None else g for g, x in zip(grads, self.inputs))


class ModeCall:
    """The call a cell times in its mode, built over an implementation's forward `fn`."""

    def __init__(self, fn, case: Case, mode: str):
        self.fn, self.case, self.mode = fn, case, check_mode(mode)
        self._graph_of: tuple | None = None  # (args, Graph) of the bwd mode's current graph
        self._grads: dict = {}  # fwd_bwd: the outputs' gradients, by output shapes

    def checked(self, args: tuple, seed: int):
        """What the accuracy check compares: the outputs, then in a training mode each gradient
        input's gradient."""
        if self.mode == "fwd":
            return self.fn(*args)
        out, graph = _differentiate(self.fn, self.case, args, seed, retain=False)
        return _detached(out), graph.backward()

    def reference(self, args: tuple, seed: int, grads: list | None = None):
        """The float64 reference of checked(args, seed); `grads`: the outputs' gradients to use."""
        if self.mode == "fwd":
            return self.case.run_reference(args)
        fn = self.case.reference or self.case.fn
        out, graph = _differentiate(fn, self.case, _float64(args), seed, retain=False, grads=grads,
                                    rounded_to=_floating_dtype(args))
        return _detached(out), graph.backward()

    def checked_and_reference(self, args: tuple, seed: int):
        """A training mode's (checked(args, seed), its float64 reference).

        Where the case checks a sample (Case.reference_subset), both are of the sample: the
        implementation runs on all of args, then its outputs, the outputs' gradients and the
        inputs' gradients are cut by the subset (each in the place of the output: the subset must
        cut any tensor laid out as the output, as attention's (batch, head) slices do), and the
        reference runs on the sampled inputs with the sampled output gradients."""
        subset = self.case.reference_subset
        if subset is None:
            ref = self.reference(args, seed)  # first: an implementation may write over its inputs
            return self.checked(args, seed), ref
        kept = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)
        out, graph = _differentiate(self.fn, self.case, args, seed, retain=False)
        grads = graph.backward()
        sub_args, sub_out = subset(kept, _detached(out))

        def cut(t):
            return subset(kept, t)[1]

        ref = self.reference(sub_args, seed, grads=[cut(g).double() for g in graph.grad_outs])
        return (sub_out, tuple(cut(g) for g in grads)), ref

    def prime(self, args: tuple, seed: int = 0) -> None:
        """bwd: run the forward on `args` (outside any timing); the timed calls differentiate it."""
        if self.mode == "bwd":
            self._graph_of = None
            _, graph = _differentiate(self.fn, self.case, args, seed, retain=True)
            self._graph_of = (args, graph)

    def __call__(self, *args):
        """One timed call: the forward, the backward of a primed forward, or both."""
        if self.mode == "fwd":
            return self.fn(*args)
        if self.mode == "fwd_bwd":
            out, graph = _differentiate(self.fn, self.case, args, 0, retain=False, cache=self._grads)
            return _detached(out), graph.backward()
        if self._graph_of is None or self._graph_of[0] is not args and \
                any(a is not b for a, b in zip(self._graph_of[0], args)):
            self.prime(args)
        return self._graph_of[1].backward()


def _float64(args: tuple) -> tuple:
    return tuple(a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args)


def _floating_dtype(args: tuple) -> torch.dtype | None:
    return next((a.dtype for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()), None)


def _detached(out):
    if isinstance(out, torch.Tensor):
        return out.detach()
    if isinstance(out, (tuple, list)):
        return type(out)(_detached(o) for o in out)
    return out


__all__ = ["Graph", "ModeCall", "grad_outputs", "leaves", "retained_graph_context"]
