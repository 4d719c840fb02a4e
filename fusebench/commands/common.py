"""What every subcommand shares: the consoles, the one-line error with exit status 2 for bad
input, and the parsing of options that several commands take."""
from __future__ import annotations

import functools
import sys
from typing import List, Optional

import typer
from rich.console import Console

from fusebench.util import plain

# Wide enough for a summary table when the output is piped to a file.
out = Console(width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 160)

EXIT_BAD_INPUT = 2


def fail(message: str) -> None:
    """One line on stderr, printed as text (no markup, control characters replaced), exit 2."""
    line = " ".join(part.strip() for part in plain(message).splitlines() if part.strip())
    err.print(f"fusebench: error: {line}", markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(EXIT_BAD_INPUT)


def bad_input_is_exit_2(fn):
    """Turn the exceptions that mean "bad input" into one clear line and exit status 2."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        import sqlite3

        from fusebench.cases import UnknownName
        from fusebench.store import StoreError

        try:
            return fn(*args, **kwargs)
        except (UnknownName, StoreError, FileNotFoundError, PermissionError, IsADirectoryError, ValueError,
                KeyError, OverflowError) as exc:
            fail(str(exc).strip("'\""))
        except sqlite3.DatabaseError as exc:  # damage found only while reading
            fail(f"the results database cannot be read: {exc}")

    return wrapper


def comma_list(values: Optional[List[str]]) -> Optional[List[str]]:
    """Repeated options that may each hold a comma-separated list -> one list (None if empty)."""
    if not values:
        return None
    return [v.strip() for item in values for v in item.split(",") if v.strip()]


def parse_run_ids(text: str) -> list[int]:
    """'3' -> [3]; '2,5' -> [2, 5]; '2-4' -> [2, 3, 4] (ranges and lists mix)."""
    ids: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        lo, dash, hi = part.partition("-")
        if not lo.isdigit() or (dash and (not hi.isdigit() or int(hi) < int(lo))):
            raise ValueError(f"bad run id {part!r} in --run {text!r}: expected N, N,M or N-M")
        ids += list(range(int(lo), int(hi) + 1)) if hi else [int(lo)]
    return list(dict.fromkeys(ids))


def check_baseline(name: str) -> str:
    """A --baseline: a known implementation that is not a ceiling (a copy is no baseline)."""
    from fusebench.impls import get_impl

    impl = get_impl(name)
    if impl.kind == "ceiling":
        raise ValueError(f"--baseline {name!r} is a ceiling: speedups are over an implementation of the case")
    return name


BASELINE_HELP = "Implementation that speedups are computed against."
