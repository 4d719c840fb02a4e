"""The `fusebench` command line.

Every command turns bad input (unknown name, malformed shape, unknown dtype, a file that is not a
fusebench store) into one line on stderr and exit status 2, before anything is stored; usage
errors that the option parser finds (a value of the wrong type, an unknown option, a missing
argument) too.  The commands are in fusebench/commands/; this module registers them, in the order
--help lists them.
"""
from __future__ import annotations

import sys
from typing import Optional

import typer
from typer.core import TyperGroup

from fusebench.commands import audit, check, measuring, stores
from fusebench.commands.common import fail

try:  # typer carries its own copy of click from 0.23 on
    from typer._click import exceptions as click_errors
except ImportError:  # pragma: no cover - older typer, on click itself
    from click import exceptions as click_errors


class OneLineErrors(TyperGroup):
    """The command group, with every usage error as one line (`fusebench: error: ...`) and exit
    status 2 instead of a usage box."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        try:
            result = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click_errors.NoArgsIsHelpError as exc:  # the help is printed: only its status
            return _finish(exc.exit_code, standalone_mode)
        except click_errors.ClickException as exc:
            ctx = getattr(exc, "ctx", None)
            where = f" (see {ctx.command_path} --help)" if ctx is not None else ""
            try:
                fail(exc.format_message() + where)
            except typer.Exit as exit_:
                return _finish(exit_.exit_code, standalone_mode)
        except typer.Abort:
            print("Aborted.", file=sys.stderr)
            return _finish(1, standalone_mode)
        return _finish(result if isinstance(result, int) else 0, standalone_mode)


def _finish(code: int, standalone_mode: bool):
    if standalone_mode:
        sys.exit(code)
    return code


app = typer.Typer(cls=OneLineErrors, add_completion=False, no_args_is_help=True,
                  help="Benchmark and test suite for GPU kernel fusion.")


def version_line() -> str:
    """fusebench's version with torch's and Triton's."""
    import fusebench

    try:
        import torch

        torch_version = torch.__version__
    except ImportError:
        torch_version = "not installed"
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = "not installed"
    return f"fusebench {fusebench.__version__} (torch {torch_version}, triton {triton_version})"


def _version(value: bool) -> None:
    if value:
        print(version_line())
        raise typer.Exit(0)


@app.callback()
def _options(version: Optional[bool] = typer.Option(None, "--version", is_eager=True, callback=_version,
                                                    help="Print fusebench's, torch's and Triton's versions and "
                                                         "exit.")):
    """Benchmark and test suite for GPU kernel fusion."""

COMMANDS = (
    ("list", measuring.list_cmd), ("run", measuring.run_cmd), ("results", stores.results),
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
