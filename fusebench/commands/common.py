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
        except UnknownName as exc:
            fail(str(exc) + plugin_hint(str(exc), kwargs.get("plugin")))
        except (StoreError, FileNotFoundError, PermissionError, IsADirectoryError, ValueError, KeyError,
                OverflowError) as exc:
            fail(message_of(exc))
        except sqlite3.DatabaseError as exc:  # damage found only while reading
            fail(f"the results database cannot be read: {exc}")

    return wrapper


def message_of(exc: BaseException) -> str:
    """An exception's message as written (str() of a KeyError quotes it)."""
    if isinstance(exc, KeyError) and len(exc.args) == 1 and isinstance(exc.args[0], str):
        return exc.args[0]
    return str(exc)


def plugin_hint(message: str, plugins) -> str:
    """For an unknown case or implementation named without any --plugin: where it may come from."""
    if plugins or not message.startswith(("unknown implementation", "unknown case")):
        return ""
    return "; registered in a plugin file? give it with --plugin FILE"


def comma_list(values: Optional[List[str]]) -> Optional[List[str]]:
    """Repeated options that may each hold a comma-separated list -> one list (None if empty)."""
    if not values:
        return None
    return [v.strip() for item in values for v in item.split(",") if v.strip()]


# The most run ids one --run may name: a report of more runs than this is not one report.
MAX_RUN_IDS = 10_000
MAX_RUN_ID = 2**63 - 1  # SQLite's largest integer


def parse_run_ids(text: str) -> list[int]:
    """'3' -> [3]; '2,5' -> [2, 5]; '2-4' -> [2, 3, 4] (ranges and lists mix).  A list of more than
    MAX_RUN_IDS ids is refused before it is expanded."""
    ids: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        lo, dash, hi = part.partition("-")
        if (not lo.isascii() or not lo.isdigit() or (dash and (not hi.isascii() or not hi.isdigit()
                                                               or int(hi) < int(lo)))):
            raise ValueError(f"bad run id {part!r} in --run {text!r}: expected N, N,M or N-M")
        first, last = int(lo), int(hi) if dash else int(lo)
        if last > MAX_RUN_ID:
            raise ValueError(f"run id {last} in --run {text!r} is beyond any store's ids (at most {MAX_RUN_ID})")
        if len(ids) + last - first + 1 > MAX_RUN_IDS:
            raise ValueError(f"--run {text!r} names more than {MAX_RUN_IDS:,} runs; name fewer")
        ids += list(range(first, last + 1))
    return list(dict.fromkeys(ids))


def check_device(device: str, option: str = "--device") -> str:
    """A device this machine has: cpu, cuda or cuda:N (N among the visible GPUs)."""
    if device == "cpu":
        return device
    if device != "cuda" and not (device.startswith("cuda:") and device[5:].isdigit()):
        raise ValueError(f"{option} {device!r} is not available here: choose cpu or cuda")
    import torch

    if not torch.cuda.is_available():
        raise ValueError(f"{option} {device!r} is not available here: no CUDA GPU is visible (use cpu)")
    if device.startswith("cuda:") and int(device[5:]) >= torch.cuda.device_count():
        raise ValueError(f"{option} {device}: only {torch.cuda.device_count()} GPU(s) visible")
    return device


def check_baseline(name: str) -> str:
    """A --baseline: a known implementation that is not a ceiling (a copy is no baseline)."""
    from fusebench.impls import get_impl

    impl = get_impl(name)
    if impl.kind == "ceiling":
        raise ValueError(f"--baseline {name!r} is a ceiling: speedups are over an implementation of the case")
    return name


BASELINE_HELP = "Implementation that speedups are computed against."
