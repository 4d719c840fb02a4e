"""Workers under another Python interpreter (fusebench run --python): the interpreter is asked
before any store is touched, its versions are the run's, and workers start under it."""
import os
import sqlite3
import stat
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from fusebench.cli import app
from fusebench.runner.interpreter import Interpreter, for_run, probe, spawning_under


def script(path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


@pytest.mark.parametrize("kind,message", [
    ("missing", "no such file"), ("directory", "not an executable file"), ("not executable", "not an executable file"),
    ("not python", "is not a Python that can run fusebench's workers: hello"),
])
def test_what_is_not_a_python_is_refused_in_one_line(tmp_path, kind, message):
    path = {"missing": lambda: str(tmp_path / "nope"), "directory": lambda: str(tmp_path),
            "not executable": lambda: (tmp_path / "f").write_text("x") and str(tmp_path / "f"),
            "not python": lambda: script(tmp_path / "py", "echo hello\n")}[kind]()
    with pytest.raises(ValueError, match=message) as exc:
        probe(path, "cpu")
    assert "\n" not in str(exc.value)


def test_a_python_without_fusebench_dependencies_is_refused(tmp_path):
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True)
    with pytest.raises(ValueError, match="cannot run fusebench's workers .*ModuleNotFoundError"):
        probe(str(tmp_path / "venv" / "bin" / "python"), "cpu")


def test_run_refuses_it_before_touching_the_store(tmp_path):
    db = tmp_path / "runs.db"
    r = CliRunner().invoke(app, ["run", "softmax", "--python", str(tmp_path / "nope"), "--db", str(db)])
    assert r.exit_code == 2 and r.output.strip() == f"fusebench: error: --python {tmp_path / 'nope'}: no such file"
    assert not db.exists()


def test_for_run_refuses_what_cannot_run_there():
    with pytest.raises(ValueError, match="does not apply to --ray"):
        for_run("/x/python", {}, None, isolate=True, ray="local")
    with pytest.raises(ValueError, match="registered in this process"):
        for_run("/x/python", {}, None, isolate=False, ray=None)
    with pytest.raises(ValueError, match="run 3 was measured with --python /a/python; resume it with the same"):
        for_run("/b/python", {"python": "/a/python"}, {"id": 3}, isolate=True, ray=None)
    assert for_run(None, {}, None, isolate=False, ray=None) is None


def test_spawning_under_sets_and_restores_multiprocessing():
    from multiprocessing import spawn

    exe, prepare = spawn.get_executable(), spawn.get_preparation_data
    interp = Interpreter("/other/python", {}, ("/tree", "/other/site-packages"))
    with spawning_under(interp):
        assert os.fsdecode(spawn.get_executable()) == "/other/python"
        data = spawn.get_preparation_data("worker")
        assert data["sys_path"] == ["/tree", "/other/site-packages"] and "init_main_from_path" not in data
    assert spawn.get_executable() == exe and spawn.get_preparation_data is prepare


@pytest.mark.slow
def test_a_run_records_the_interpreters_versions_and_its_workers_run_there(tmp_path):
    # A wrapper around this Python: it logs each start and, asked for its environment, reports
    # another torch version, which the run must record instead of this process's.
    log = tmp_path / "starts.log"
    python = script(tmp_path / "python", f"""echo start >> {log}
case "$*" in
  *FUSEBENCH-PROBE*) {sys.executable} "$@" | sed 's/"torch": "[^"]*"/"torch": "0.0.0+other"/'; exit ;;
esac
exec {sys.executable} "$@"
""")
    db = str(tmp_path / "runs.db")
    r = CliRunner().invoke(app, ["run", "softmax", "--impl", "eager", "--shapes", "16x32", "--metrics", "none",
                                 "--python", python, "--db", db])
    assert r.exit_code == 0, r.output
    torch_version, request = sqlite3.connect(db).execute("SELECT torch, request FROM runs").fetchone()
    assert torch_version == "0.0.0+other" and python in request
    assert log.read_text().split() == ["start", "start"]  # asked once, one worker
    assert sqlite3.connect(db).execute("SELECT status FROM cells").fetchone() == ("ok",)
