"""The `fusebench` command line.

Every command turns bad input (unknown name, malformed shape, unknown dtype, a file that is not a
fusebench store) into one line on stderr and exit status 2, before anything is stored.  The
commands are in fusebench/commands/; this module registers them, in the order --help lists them.
"""
from __future__ import annotations

import sys

import typer

from fusebench.commands import audit, check, measuring, stores

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Benchmark and test suite for GPU kernel fusion.")
COMMANDS = (
    ("list", measuring.list_cmd), ("run", measuring.run), ("results", stores.results),
    ("overhead", stores.overhead), ("report", stores.report), ("compare", stores.compare),
    ("show", measuring.show), ("ceilings", measuring.ceilings), ("runs", stores.runs), ("merge", stores.merge),
    ("paired", measuring.paired_cmd), ("standing", stores.standing_cmd), ("audit", audit.audit),
    ("check", check.check),
)
for name, command in COMMANDS:
    app.command(name)(command)


def bare_ray_flag(argv: list[str]) -> list[str]:
    """`--ray` takes an optional address: a bare `--ray` (not followed by auto, local, ray://...
    or host:port) becomes `--ray=local`."""
    out = []
    for i, arg in enumerate(argv):
        nxt = argv[i + 1] if i + 1 < len(argv) else ""
        if arg == "--ray" and not (nxt in ("auto", "local") or "://" in nxt or ":" in nxt):
            arg = "--ray=local"
        out.append(arg)
    return out


def main() -> None:
    sys.argv[1:] = bare_ray_flag(sys.argv[1:])
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
