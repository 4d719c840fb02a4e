"""Small helpers shared across fusebench's layers."""
from __future__ import annotations


def first_line(exc: BaseException, limit: int = 500) -> str:
    """The exception's type and the first line of its message: what a status reason or an
    `na` entry holds."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:limit]
