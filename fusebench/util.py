"""Small helpers shared across fusebench's layers."""
from __future__ import annotations

import contextlib


def first_line(exc: BaseException, limit: int = 500) -> str:
    """The exception's type and the first line of its message: what a status reason or an
    `na` entry holds."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:limit]


_CONTROL = {c: "\ufffd" for c in list(range(0, 9)) + [11, 12] + list(range(14, 32)) + [127]}


def plain(text: object) -> str:
    """Text from a store or an exception, safe to print: control characters (ESC sequences
    included) replaced by U+FFFD, newlines and tabs kept.  Print it with markup off, or pass it
    through rich.markup.escape where a Table or markup string holds it."""
    return str(text).translate(_CONTROL)


def as_text(text: object) -> str:
    """plain() text escaped for rich markup (None as ""): for a Table cell or a markup string, where a
    stored name or message must print as itself (a `[/x]` in it neither vanishes nor raises)."""
    from rich.markup import escape

    return escape(plain("" if text is None else text))


def tensors_in(obj) -> list:
    """Every tensor in a (nested) tuple, list or dict, or a model output with `to_tuple()`
    (transformers' ModelOutput), in order."""
    import torch

    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (tuple, list)):
        return [t for o in obj for t in tensors_in(o)]
    if isinstance(obj, dict):
        return [t for o in obj.values() for t in tensors_in(o)]
    to_tuple = getattr(obj, "to_tuple", None)
    return tensors_in(to_tuple()) if callable(to_tuple) else []


@contextlib.contextmanager
def workers_skip_main():
    """While worker processes start (a run's cells, an audit's backends), they do not run the
    caller's main module again.

    A spawned process imports the parent's __main__ (as __mp_main__) so that objects defined there
    can be unpickled; a script that calls fusebench.run() at its top level, without an
    `if __name__ == "__main__":` guard, would then start the run again inside every worker.
    Workers need nothing from __main__ (a case or implementation registered there runs in this
    process, see fusebench.api._registered_here), so __main__ is presented to multiprocessing as a module it
    must leave alone for the run's duration."""
    import importlib.machinery
    import sys

    main = sys.modules.get("__main__")
    if main is None:
        yield
        return
    had, spec = hasattr(main, "__spec__"), getattr(main, "__spec__", None)
    main.__spec__ = importlib.machinery.ModuleSpec("__main__", None)
    try:
        yield
    finally:
        if had:
            main.__spec__ = spec
        else:
            del main.__spec__
