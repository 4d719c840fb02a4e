"""Workers under another Python interpreter (`fusebench run --python /other/venv/bin/python`): the
same cells, measured by another PyTorch and Triton installed there, to compare two releases side
by side.

The interpreter is asked first, before any store is touched: it runs fusebench.env from this
source tree (PYTHONPATH) and reports its environment -- torch, Triton, CUDA, Python versions,
which the run records instead of this process's -- and its module search path.  A path that is not
an executable Python that can import torch and fusebench's worker modules is bad input.  That
interpreter needs fusebench's dependencies (numpy, pandas, rich, typer, jinja2, matplotlib), not
fusebench itself: its code is this tree's.

Workers start through multiprocessing's spawn, which runs `multiprocessing.spawn`'s executable
and hands the child this process's sys.path (and main module); while a worker starts,
`spawning_under` makes them the interpreter's executable and module search path (and no main
module): multiprocessing keeps both module-wide, so they are set only around the start and put
back.  The worker then imports that interpreter's torch, not this one's.
"""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
from dataclasses import dataclass, field

PROBE_S = 300.0  # an interpreter that takes longer to import torch and report is refused
_MARK = "FUSEBENCH-PROBE "
_PROBE = f"""
import json, sys
try:
    import fusebench.env as env
    import fusebench.runner.cell, fusebench.runner.scheduler  # what a worker imports
    found = env.collect(sys.argv[1])
except BaseException as exc:
    print({_MARK!r} + json.dumps({{"error": type(exc).__name__ + ": " + str(exc).splitlines()[0][:300]
                                   if str(exc) else type(exc).__name__}}))
    raise SystemExit(3)
print({_MARK!r} + json.dumps({{"env": found, "sys_path": sys.path, "executable": sys.executable}}, default=str))
"""


def package_dir() -> str:
    """This tree's fusebench package directory (this module lies in its runner/)."""
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def source_root() -> str:
    """The directory holding this tree's fusebench package."""
    return os.path.dirname(package_dir())


@dataclass(frozen=True)
class Interpreter:
    path: str  # as given, made absolute (a venv's bin/python is often a link: kept as the venv's)
    env: dict = field(default_factory=dict, compare=False)  # fusebench.env.collect() as it reports it
    sys_path: tuple[str, ...] = ()  # its module search path, this source tree first

    @property
    def torch(self) -> str | None:
        return self.env.get("torch")


def probe(python: str, device: str, timeout: float = PROBE_S) -> Interpreter:
    """Ask `python` for its environment; ValueError (one line) if it cannot run fusebench's workers."""
    path = os.path.abspath(os.path.expanduser(python))
    if not os.path.exists(path):
        raise ValueError(f"--python {python}: no such file")
    if os.path.isdir(path) or not os.access(path, os.X_OK):
        raise ValueError(f"--python {python}: not an executable file")
    root = source_root()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([root] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    try:
        done = subprocess.run([path, "-c", _PROBE, device], capture_output=True, text=True, timeout=timeout,
                              env=env, cwd=root, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise ValueError(f"--python {python}: no answer within {timeout:g} s") from None
    except OSError as exc:
        raise ValueError(f"--python {python}: cannot be run ({exc.strerror or exc})") from None
    report = next((line[len(_MARK):] for line in reversed(done.stdout.splitlines()) if line.startswith(_MARK)), None)
    try:
        data = json.loads(report) if report else None
    except ValueError:
        data = None
    if not isinstance(data, dict):
        last = (done.stderr.strip().splitlines() or done.stdout.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        raise ValueError(f"--python {python} is not a Python that can run fusebench's workers: {last[:300]}")
    if "error" in data:
        raise ValueError(f"--python {python} cannot run fusebench's workers (torch and fusebench's dependencies "
                         f"must import there): {data['error']}")
    sys_path = [p for p in data.get("sys_path", []) if isinstance(p, str) and p]  # not '' (the cwd of `-c`)
    return Interpreter(path, dict(data.get("env") or {}), tuple([root] + [p for p in sys_path if p != root]))


def for_run(python: str | None, request: dict, seen: dict | None, *, isolate: bool, ray) -> Interpreter | None:
    """The interpreter a run's workers use: `python`, or on a resume the one the run recorded
    (request["python"]), which must still have the run's torch.  Records it in `request`."""
    recorded = request.get("python")
    if seen is not None and python and recorded != os.path.abspath(os.path.expanduser(python)):
        raise ValueError(f"run {seen.get('id')} was measured with --python {recorded or 'this interpreter'}; "
                         f"resume it with the same")
    python = python or recorded
    if not python:
        return None
    if ray is not None:
        raise ValueError("--python runs the workers on this host; it does not apply to --ray")
    if not isolate:
        raise ValueError("--python runs the cells in worker processes under that interpreter: a case or "
                         "implementation registered in this process (not from a --plugin file) cannot run there")
    interp = probe(python, request.get("device") or "cpu")
    if seen is not None and seen.get("torch") and interp.torch != seen.get("torch"):
        raise ValueError(f"run {seen.get('id')} was measured with torch {seen['torch']}; {python} now has "
                         f"torch {interp.torch}")
    request["python"] = interp.path
    return interp


@contextlib.contextmanager
def spawning_under(interp: Interpreter | None):
    """Processes started by multiprocessing's spawn inside the block run `interp`, with its module
    search path and without this process's main module (nothing changes where interp is None)."""
    if interp is None:
        yield
        return
    from multiprocessing import resource_tracker, spawn

    resource_tracker.ensure_running()  # under this interpreter, before the executable changes
    exe, prepare = spawn.get_executable(), spawn.get_preparation_data

    def preparation(name):
        data = prepare(name)
        data["sys_path"] = list(interp.sys_path)
        data.pop("init_main_from_path", None)  # a script of this interpreter's, not for that one to run
        return data

    spawn.set_executable(interp.path)
    spawn.get_preparation_data = preparation
    try:
        yield
    finally:
        spawn.get_preparation_data = prepare
        spawn.set_executable(exe)
