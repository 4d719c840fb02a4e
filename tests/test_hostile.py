"""Sweeps that survive hostile input: a store that names code, text that looks like markup, workers
that cannot start, processes left behind, and bad input of every kind (one line, exit 2, the
store's bytes unchanged).  The fault-injecting plugins are in tests/faults/."""
import hashlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
import torch
from typer.testing import CliRunner

from fusebench.cli import app

FAULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "faults")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
runner = CliRunner()


def fault(name):
    return os.path.join(FAULTS, name)


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def run_cli(*args, env=None, cwd=None, timeout=300):
    env = {**os.environ, "PYTHONPATH": ROOT, **(env or {})}
    return subprocess.run([sys.executable, "-m", "fusebench.cli", *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=timeout)


def cells(db, where=""):
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    rows = con.execute(f"SELECT case_name, shape, status, reason FROM cells {where} ORDER BY id").fetchall()
    con.close()
    return rows


def alive(pid):
    """Running (a zombie waiting for a reaper counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.fixture
def stored_run(tmp_path):
    """A store holding one finished run of a plugin case (2 cells), made in this process."""
    db = str(tmp_path / "fb.db")
    r = invoke("run", "marked", "--plugin", fault("marks_import.py"), "--impl", "eager", "--db", db, "--no-isolate",
               "--metrics", "none")
    assert r.exit_code == 0, r.output
    return db


# ---------------------------------------------------------------------------------------------
# 1. Nothing executes because a store says so


def test_resume_imports_only_the_recorded_plugins_given_again(tmp_path, stored_run, monkeypatch):
    db, marker_dir = stored_run, tmp_path / "marks"
    marker_dir.mkdir()
    monkeypatch.setenv("FB_FAULT_DIR", str(marker_dir))
    (request,) = sqlite3.connect(db).execute("SELECT request FROM runs WHERE id=1").fetchone()
    recorded = json.loads(request)["plugins"]
    assert recorded == [{"path": fault("marks_import.py"), "sha256": sha(fault("marks_import.py"))}]
    con = sqlite3.connect(db)  # one cell missing, as after an interruption
    with con:
        con.execute("DELETE FROM cells WHERE shape='8x16'")
        con.execute("UPDATE runs SET status='interrupted'")
    con.close()
    before = sha(db)

    r = invoke("run", "--resume", "1", "--db", db, "--no-isolate")  # the plugin not given: refused
    assert r.exit_code == 2 and len(r.stderr.splitlines()) == 1, r.output
    assert "give it with --plugin" in r.stderr and sha(db) == before
    changed = tmp_path / "marks_import.py"  # another file of the same name
    changed.write_text(open(fault("marks_import.py")).read() + "\n# changed\n")
    r = invoke("run", "--resume", "1", "--db", db, "--plugin", changed, "--no-isolate")
    assert r.exit_code == 2 and len(r.stderr.splitlines()) == 1 and sha(db) == before, r.output
    assert not (marker_dir / "imported").exists()  # refused before anything was imported

    r = invoke("run", "--resume", "1", "--db", db, "--plugin", fault("marks_import.py"), "--no-isolate")
    assert r.exit_code == 0, r.output
    assert sorted(s for _, s, _, _ in cells(db)) == ["8x16", "8x8"]


def test_a_store_naming_a_plugin_runs_nothing(tmp_path, stored_run, monkeypatch):
    # A stranger's store whose run names their plugin: resume refuses without importing it.
    marker_dir = tmp_path / "marks"
    marker_dir.mkdir()
    monkeypatch.setenv("FB_FAULT_DIR", str(marker_dir))
    evil = tmp_path / "evil.py"
    evil.write_text(f"open({str(marker_dir / 'evil')!r}, 'w').write('ran')\n")
    con = sqlite3.connect(stored_run)
    with con:
        con.execute("UPDATE runs SET status='interrupted', request=?",
                    (json.dumps({"cases": ["marked"], "device": "cpu", "shapes": "quick",
                                 "plugins": [{"path": str(evil), "sha256": sha(evil)}, str(evil)]}),))
        con.execute("DELETE FROM cells")
    con.close()
    before = sha(stored_run)
    for extra in ([], ["--plugin", fault("marks_import.py")]):
        r = invoke("run", "--resume", "1", "--db", stored_run, "--no-isolate", *extra)
        assert r.exit_code == 2 and len(r.stderr.splitlines()) == 1, r.output
    assert not (marker_dir / "evil").exists() and sha(stored_run) == before


def test_api_resume_checks_plugins_too(stored_run):
    import fusebench

    con = sqlite3.connect(stored_run)
    with con:
        con.execute("UPDATE runs SET status='interrupted'")
    con.close()
    with pytest.raises(ValueError, match="give it with --plugin"):
        fusebench.run(resume=1, db=stored_run)
    df = fusebench.run(resume=1, db=stored_run, plugins=[fault("marks_import.py")])
    assert len(df) == 2


# ---------------------------------------------------------------------------------------------
# 2. Text from a store or an exception is printed as text


def test_markup_and_escape_sequences_print_as_text(tmp_path):
    db = str(tmp_path / "fb.db")
    r = invoke("run", "markup_error", "--plugin", fault("cell_faults.py"), "--impl", "eager", "--db", db,
               "--no-isolate", "--metrics", "none")
    assert r.exit_code == 0, r.output
    for out in (r.output, invoke("results", "--db", db).output):
        flat = " ".join(out.split())
        assert "bad [/x] [bold]kept[/bold]" in flat and "red" in flat  # nothing vanished
        assert "\x1b" not in out
    # a crafted store: markup and ESC in a status, a case name and an implementation
    con = sqlite3.connect(db)
    with con:
        con.execute("UPDATE cells SET status='[/]', case_name='\x1b]0;owned\x07[red]x', impl='[/bold]'")
    con.close()
    for args in (("results",), ("runs",), ("results", "--format", "json")):
        r = invoke(*args, "--db", db)
        assert r.exit_code == 0 and "\x1b" not in r.output and "\x07" not in r.output, r.output
    assert "[/]" in invoke("results", "--db", db).output


# ---------------------------------------------------------------------------------------------
# 3. Worker start-up inside containment


@pytest.mark.slow
def test_worker_start_faults_cost_a_cell_each_and_the_sweep_goes_on(tmp_path):
    # first worker hangs importing the plugin, the second raises, the third starts: the two cells
    # they would have run end as timeout and crashed, with reasons; the other four are measured
    db, state = str(tmp_path / "fb.db"), tmp_path / "state"
    state.mkdir()
    t0 = time.time()
    r = run_cli("run", "started", "--plugin", fault("worker_start.py"), "--impl", "eager", "--db", db,
                "--metrics", "none", "--cell-timeout", "3",
                env={"FB_FAULT_DIR": str(state), "FB_WORKER_FAULTS": "hang,raise"})
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    rows = cells(db)
    assert [st for _, _, st, _ in rows] == ["timeout", "crashed", "ok", "ok", "ok", "ok"]
    assert "start-up" in rows[0][3] and "no device for this worker" in rows[1][3]
    assert time.time() - t0 < 120


@pytest.mark.slow
def test_workers_that_never_start_give_up_the_run_not_loop(tmp_path):
    db, state = str(tmp_path / "fb.db"), tmp_path / "state"
    state.mkdir()
    r = run_cli("run", "started", "--plugin", fault("worker_start.py"), "--impl", "eager", "--db", db,
                "--metrics", "none", "--cell-timeout", "3",
                env={"FB_FAULT_DIR": str(state), "FB_WORKER_FAULTS": "abort,abort,abort,abort,abort,abort,abort"},
                cwd=tmp_path)  # where a core file would go
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    rows = cells(db)
    assert len(rows) == 6 and all(st == "crashed" for _, _, st, _ in rows)
    assert all("signal 6" in why for *_, why in rows[:3])
    assert all(why.startswith("not attempted: workers failed to start 3 times") for *_, why in rows[3:])
    assert len((state / "starts").read_text()) == 3  # no more workers than that


# ---------------------------------------------------------------------------------------------
# 4. No leaks: process groups, death with the parent, fresh workers after oom or growth


@pytest.fixture(scope="module")
def faulty_sweep(tmp_path_factory):
    """One isolated sweep over the cell faults: markup in an error, a leak then oom, a cell that
    starts a child and hangs."""
    tmp = tmp_path_factory.mktemp("faulty")
    db, state = str(tmp / "fb.db"), tmp / "state"
    state.mkdir()
    r = run_cli("run", "markup_error", "leaks_then_ooms", "clean_after_oom", "spawns_child_and_hangs",
                "--plugin", fault("cell_faults.py"), "--impl", "eager", "--db", db, "--metrics", "none",
                "--cell-timeout", "4", env={"FB_FAULT_DIR": str(state)})
    return r, db, state


@pytest.mark.slow
def test_isolated_sweep_prints_error_text_as_text(faulty_sweep):
    r, db, _ = faulty_sweep
    assert r.returncode == 0, r.stderr
    assert "bad [/x] [bold]kept[/bold]" in " ".join(r.stdout.split()) and "\x1b" not in r.stdout


def test_a_worker_is_replaced_after_an_oom(faulty_sweep):
    _, db, _ = faulty_sweep
    status = {c: (st, why) for c, _, st, why in cells(db)}
    assert status["leaks_then_ooms"][0] == "oom"
    assert status["clean_after_oom"] == ("ok", None)  # a fresh worker, without the leaked memory


def test_a_timed_out_cell_leaves_no_process_behind(faulty_sweep):
    _, db, state = faulty_sweep
    status = {c: (st, why) for c, _, st, why in cells(db)}
    assert status["spawns_child_and_hangs"][0] == "timeout"
    worker, child = map(int, (state / "hang_pids").read_text().split())
    deadline = time.time() + 5
    while time.time() < deadline and (alive(worker) or alive(child)):
        time.sleep(0.1)
    assert not alive(worker) and not alive(child)


@pytest.mark.slow
def test_a_helper_that_left_the_process_group_is_killed_with_its_timed_out_cell(tmp_path):
    # one helper in a session of its own, one re-parented away from the worker: both go
    db, state = str(tmp_path / "fb.db"), tmp_path / "state"
    state.mkdir()
    r = run_cli("run", "softmax", "--shapes", "8x8", "--plugin", fault("escaping_helper.py"), "--impl",
                "escapes-session", "--db", db, "--metrics", "none", "--cell-timeout", "10",
                env={"FB_FAULT_DIR": str(state)})
    assert r.returncode == 0, r.stderr
    assert [st for _, _, st, _ in cells(db)] == ["timeout"]
    worker, helper, orphan = map(int, (state / "helper_pids").read_text().split())
    deadline = time.time() + 5
    while time.time() < deadline and any(map(alive, (worker, helper, orphan))):
        time.sleep(0.1)
    assert not any(map(alive, (worker, helper, orphan)))


@pytest.mark.slow
def test_kill_9_of_the_main_process_takes_its_workers_along(tmp_path):
    db, state = str(tmp_path / "fb.db"), tmp_path / "state"
    state.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "fusebench.cli", "run", "spawns_child_and_hangs", "--plugin",
                             fault("cell_faults.py"), "--impl", "eager", "--db", db, "--metrics", "none",
                             "--cell-timeout", "120"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "PYTHONPATH": ROOT, "FB_FAULT_DIR": str(state)})
    pids = state / "hang_pids"
    deadline = time.time() + 120
    while time.time() < deadline and not (pids.exists() and pids.read_text().endswith("\n")):
        time.sleep(0.2)
    worker, child = map(int, pids.read_text().split())
    assert alive(worker) and alive(child)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    deadline = time.time() + 5
    while time.time() < deadline and (alive(worker) or alive(child)):
        time.sleep(0.1)
    assert not alive(worker) and not alive(child)


def _run_scheduler(tmp_path, **opts):
    from fusebench.cases import plugin_record
    from fusebench.measure.timing import TimingSettings
    from fusebench.runner.plan import Cell
    from fusebench.runner.request import RunRequest
    from fusebench.runner.scheduler import Scheduler, WorkerSettings
    from fusebench.store import Store

    state = tmp_path / f"state{len(opts)}"
    state.mkdir()
    os.environ["FB_FAULT_DIR"] = str(state)
    try:
        rec = plugin_record(fault("cell_faults.py"))
        with Store.open(str(tmp_path / "fb.db")) as store:
            run = store.start_run({"device": "cpu"}, {}, {})
            todo = [Cell("records_pid", "eager", shape, "fp32", "cpu") for shape in ((8, 8), (8, 16))]
            request = RunRequest(timing=TimingSettings(warmup_ms=1, rep_ms=2, min_reps=2, max_reps=3), metrics=(),
                                 cell_timeout=60, isolate=True, plugins=(rec["path"],))
            workers = WorkerSettings(plugin_hashes={rec["path"]: rec["sha256"]}, **opts)
            Scheduler(store, run, request, workers=workers).run(todo)
            assert list(store.cells(run).status) == ["ok", "ok"]
    finally:
        del os.environ["FB_FAULT_DIR"]
    return set((state / "pids").read_text().split())


@pytest.mark.slow
def test_a_worker_is_replaced_when_its_memory_grows_past_the_limit(tmp_path):
    from fusebench.runner.scheduler import WorkerSettings

    assert WorkerSettings().rss_limit > 0  # a default: half of this machine's memory
    assert len(_run_scheduler(tmp_path)) == 1  # both cells measured by one worker (seeds repeat the call)
    assert len(_run_scheduler(tmp_path, rss_limit=1)) == 2  # replaced after the first cell


# ---------------------------------------------------------------------------------------------
# 5. Bad input: one line on stderr, exit 2, the store's bytes unchanged


def _corrupt(src, dst):
    data = bytearray(open(src, "rb").read())
    page = int.from_bytes(data[16:18], "big") or 65536
    data[page + 8:page * 3] = os.urandom(page * 3 - page - 8)[:len(data[page + 8:page * 3])]
    open(dst, "wb").write(bytes(data))


@pytest.fixture(scope="module")
def one_run(tmp_path_factory):
    """A store holding one finished run of a plugin case, made once for the module: copied, never used."""
    db = str(tmp_path_factory.mktemp("one_run") / "fb.db")
    r = invoke("run", "marked", "--plugin", fault("marks_import.py"), "--impl", "eager", "--db", db, "--no-isolate",
               "--metrics", "none")
    assert r.exit_code == 0, r.output
    return db


@pytest.fixture
def stores(tmp_path, one_run):
    """A good store and hostile ones beside it, each in its own directory."""
    made = {}
    for name in ("good", "corrupt", "truncated", "empty", "garbage", "immutable", "other", "mistyped", "metaonly",
                 "nocols", "future"):
        d = tmp_path / name
        d.mkdir()
        made[name] = str(d / "fb.db")
    stored_run = str(tmp_path / "fb.db")
    shutil.copy(one_run, stored_run)
    for name in ("good", "immutable", "other", "mistyped", "metaonly", "nocols", "future"):
        shutil.copy(stored_run, made[name])
    for name, change in (("mistyped", "UPDATE cells SET time_us='fast', wall_time_us='[bold]x' WHERE id=1"),
                         ("metaonly", "DROP TABLE cells; DROP TABLE runs"),  # only fusebench_meta is left
                         ("nocols", "ALTER TABLE runs DROP COLUMN device_name; ALTER TABLE runs DROP COLUMN status"),
                         ("future", "UPDATE fusebench_meta SET value='99' WHERE key='schema_version'")):
        con = sqlite3.connect(made[name])
        con.executescript(change)
        con.close()
    _corrupt(stored_run, made["corrupt"])
    data = open(stored_run, "rb").read()
    open(made["truncated"], "wb").write(data[:len(data) // 3 + 100])
    open(made["empty"], "wb").close()
    # random bytes after SQLite's magic, with a rollback write version and a WAL read version: SQLite
    # would read it through a WAL, which a reader must not create
    garbage = bytearray(b"SQLite format 3\x00" + os.urandom(3000))
    garbage[18], garbage[19] = 1, 2
    open(made["garbage"], "wb").write(bytes(garbage))
    locked = subprocess.run(["chattr", "+i", made["immutable"]], capture_output=True).returncode == 0
    if not locked or os.access(made["immutable"], os.W_OK):
        if locked:
            subprocess.run(["chattr", "-i", made["immutable"]])
        os.chmod(made["immutable"], 0o444)
        os.chmod(os.path.dirname(made["immutable"]), 0o555)
    yield made
    subprocess.run(["chattr", "-i", made["immutable"]], capture_output=True)
    os.chmod(os.path.dirname(made["immutable"]), 0o755)


READERS = [("results", "--db", "{db}"), ("runs", "--db", "{db}"), ("report", "--db", "{db}", "-o", "{out}/r.html"),
           ("compare", "1", "1", "--db", "{db}", "-o", "{out}/c.html"), ("merge", "{db}", "--db", "{out}/m.db"),
           ("overhead", "{db}"), ("show", "softmax", "--shape", "8x8", "--impl", "eager", "--db", "{db}")]
SHOW = ("show", "softmax", "--shape", "8x8", "--impl", "eager")
RUN = ("run", "marked", "--plugin", fault("marks_import.py"), "--impl", "eager", "--no-isolate", "--metrics", "none",
       "--db", "{db}")

BAD_INPUTS = (
    # every command on every hostile store
    [(kind, args) for kind in ("corrupt", "truncated", "empty", "garbage", "metaonly", "nocols", "future")
     for args in READERS]
    + [(kind, RUN) for kind in ("corrupt", "truncated", "garbage", "nocols", "future")]  # `run` may initialise an empty file
    # the commands that read cells, on a store with text in numeric columns
    + [("mistyped", args) for args in READERS if args[0] in ("results", "report", "compare", "overhead")]
    + [("mistyped", ("results", "--format", "json", "--db", "{db}"))]
    + [("immutable", RUN), ("immutable", ("merge", "{good}", "--db", "{db}"))]
    + [("good", ("merge", "{empty}", "--db", "{db}")), ("good", ("merge", "{corrupt}", "--db", "{db}"))]
    # bad requests against a good store
    + [("good", ("run", "softmax", "--plugin", fault("syntax_error.py"), "--db", "{db}")),
       ("good", ("run", "softmax", "--plugin", fault("raises_on_import.py"), "--db", "{db}")),
       ("good", ("run", "softmax", "--shapes", "99999999999999999999x1", "--db", "{db}", "--no-isolate")),
       ("good", ("run", "softmax", "--shapes", "", "--db", "{db}", "--no-isolate")),
       ("good", ("run", "softmax", "--shapes", " , ", "--db", "{db}", "--no-isolate")),
       ("good", ("run", "softmax", "--cell-timeout", "-1", "--db", "{db}")),
       ("good", ("run", "softmax", "--cell-timeout", "0", "--db", "{db}")),
       ("good", ("run", "softmax", "--cell-timeout", "nan", "--db", "{db}")),
       ("good", ("run", "softmax", "--cell-timeout", "inf", "--db", "{db}")),
       ("good", ("run", "softmax", "--retry-failed", "--db", "{db}")),
       ("good", ("run", "--resume", "1", "--db", "{db}")),  # its plugin not given
       ("good", ("run", "--resume", "7", "--db", "{db}", "--plugin", fault("marks_import.py"))),
       ("good", ("run", "--resume", "1", "--db", "{db}", "--plugin", fault("marks_import.py"),
                 "--plugin", fault("slow.py"))),
       ("good", ("run", "softmax", "--db", "{out}")),  # a directory
       ("good", ("run", "softmax", "--db", "/dev/null")),
       ("good", ("results", "--run", "99", "--db", "{db}")),
       ("good", ("overhead", "{db}", "--run", "99")),
       ("good", ("overhead", "{db}", "--db", "{corrupt}")),
       ("good", ("merge", "{db}", "--db", "{db}"))]
    # a source holding values no reader accepts: refused whole, nothing written
    + [("good", ("merge", "{mistyped}", "--db", "{db}"))]
    # absurd ranges and bounds, refused before anything is expanded or run
    + [("good", ("report", "--run", "1-99999999999", "--db", "{db}", "-o", "{out}/r.html")),
       ("good", ("report", "--run", "99999999999999999999", "--db", "{db}", "-o", "{out}/r.html")),
       ("good", ("paired", "softmax", "8x8", "--impl", "eager,inductor", "--rounds", "99999999999999999999")),
       ("good", ("paired", "softmax", "8x8", "--impl", "eager,inductor", "--threshold", "inf")),
       ("good", ("compare", "1", "1", "--db", "{db}", "-o", "{out}/c.html", "--fail-above", "nan")),
       ("good", ("compare", "1", "1", "--db", "{db}", "-o", "{out}/c.html", "--fail-above", "-5")),
       ("good", ("standing", "{db}", "--ceiling", "inf")),
       ("good", ("standing", "{db}", "--target", "nan"))]
    # devices that do not exist here
    + [("good", ("ceilings", "--device", "tpu", "--db", "{db}")), ("good", (*SHOW, "--device", "tpu")),
       ("good", ("paired", "softmax", "8x8", "--impl", "eager,inductor", "--device", "tpu")),
       ("good", ("run", "softmax", "--device", "tpu", "--db", "{db}", "--dry-run"))]
    # values that name nothing
    + [("good", ("run", "softmax", "--impl", ",", "--db", "{db}", "--no-isolate")),
       ("good", ("run", "softmax", "--dtype", "", "--db", "{db}", "--no-isolate")),
       ("good", ("run", "softmax", "--gpus", "", "--db", "{db}", "--no-isolate")),
       ("good", ("report", "--pair", "eager/nosuch", "--db", "{db}", "-o", "{out}/r.html")),
       ("good", ("report", "--pair", "nosuch", "--db", "{db}", "-o", "{out}/r.html")),
       ("good", ("run", "softmax", "--impl", "my-softmax", "--db", "{db}", "--no-isolate")),
       ("good", ("run", "sofmax", "--db", "{db}", "--dry-run")),
       ("good", ("run", "--resume", "1", "--db", "{db}", "--dry-run")),
       ("good", ("run", "softmax", "--flush", "wipe", "--db", "{db}", "--dry-run")),
       ("good", ("run", "softmax", "--cell-timeout", "-3", "--db", "{db}", "--dry-run"))]
    + ([("good", ("run", "softmax", "--gpus", "0", "--db", "{db}", "--no-isolate"))]
       if not torch.cuda.is_available() else [])
    # usage errors the option parser finds: one line, not a usage box
    + [("good", ("run", "--cell-timeout", "abc", "--db", "{db}")), ("good", ("results", "--run", "abc", "--db", "{db}")),
       ("good", ("compare", "abc", "1", "--db", "{db}")), ("good", ("run", "--no-such-option", "--db", "{db}")),
       ("good", ("nosuchcommand",)), ("good", ("show", "--db", "{db}")), ("good", ("merge", "--db", "{db}"))]
)


@pytest.mark.parametrize("kind,args", BAD_INPUTS, ids=lambda v: v if isinstance(v, str) else " ".join(v[:2]))
def test_bad_input_is_one_line_exit_2_and_changes_no_byte(stores, kind, args):
    db = stores[kind]
    out = os.path.dirname(stores["other"])
    argv = [a.format(db=db, out=out, good=stores["good"], empty=stores["empty"], corrupt=stores["corrupt"],
                     mistyped=stores["mistyped"]) for a in args]
    watched = {p: sha(p) for p in stores.values()}
    listing = {d: sorted(os.listdir(d)) for d in map(os.path.dirname, stores.values())}
    r = invoke(*argv)
    assert r.exit_code == 2, r.output
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("fusebench: error: "), r.output
    assert {p: sha(p) for p in stores.values()} == watched
    assert {d: sorted(os.listdir(d)) for d in listing} == listing  # no -wal, -shm, journal, new store


def test_a_writer_may_initialise_an_empty_file(tmp_path):
    db = tmp_path / "new.db"
    db.touch()  # e.g. from mktemp: it holds nothing to lose
    r = invoke("run", "softmax", "--shapes", "8x8", "--impl", "eager", "--db", db, "--no-isolate", "--metrics", "none")
    assert r.exit_code == 0 and cells(str(db)), r.output


def test_readers_open_read_only_and_runs_leave_no_wal(stored_run, tmp_path):
    d, html = os.path.dirname(stored_run), tmp_path / "html"
    html.mkdir()
    assert open(stored_run, "rb").read()[18:20] == b"\x01\x01"  # rollback journal: nothing lives in a -wal
    before = sorted(os.listdir(d))
    os.chmod(stored_run, 0o444)
    try:
        for args in (("results",), ("runs",), ("report", "-o", html / "r.html"),
                     ("compare", "1", "1", "-o", html / "c.html")):
            r = invoke(*args, "--db", stored_run)
            assert r.exit_code == 0, r.output
    finally:
        os.chmod(stored_run, 0o644)
    assert sorted(os.listdir(d)) == before
    # a store left in WAL mode by an older writer is read without files appearing beside it,
    # and converted when written to
    con = sqlite3.connect(stored_run)
    con.execute("PRAGMA journal_mode=WAL")
    con.close()
    assert invoke("results", "--db", stored_run).exit_code == 0 and sorted(os.listdir(d)) == before
    r = invoke("run", "softmax", "--shapes", "8x8", "--impl", "eager", "--db", stored_run, "--no-isolate",
               "--metrics", "none")
    assert r.exit_code == 0 and open(stored_run, "rb").read()[18:20] == b"\x01\x01"
    assert sorted(os.listdir(d)) == before


# ---------------------------------------------------------------------------------------------
# 6. --resume refuses a live run; --retry-failed


@pytest.mark.slow
def test_resume_refuses_a_live_run(tmp_path):
    db = str(tmp_path / "fb.db")
    proc = subprocess.Popen([sys.executable, "-m", "fusebench.cli", "run", "slow", "--plugin", fault("slow.py"),
                             "--impl", "eager", "--db", db, "--metrics", "none", "--no-isolate"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "PYTHONPATH": ROOT})
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                if len(cells(db)) >= 2:
                    break
            except sqlite3.Error:
                pass
            time.sleep(0.2)
        r = invoke("run", "--resume", "1", "--db", db, "--plugin", fault("slow.py"), "--no-isolate")
        assert r.exit_code == 2 and len(r.stderr.splitlines()) == 1, r.output
        assert f"still being measured by process {proc.pid}" in r.stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    # its owner gone (interrupted), the resume goes ahead and finishes exactly the missing cells
    r = invoke("run", "--resume", "1", "--db", db, "--plugin", fault("slow.py"), "--no-isolate")
    assert r.exit_code == 0, r.output
    shapes = [s for _, s, _, _ in cells(db)]
    assert sorted(shapes) == sorted(f"8x{n}" for n in range(1, 13))


def test_resume_judges_another_hosts_run_by_its_heartbeat(stored_run):
    con = sqlite3.connect(stored_run)
    with con:
        con.execute("UPDATE runs SET status='running', owner_host='elsewhere', owner_pid=1, heartbeat=?",
                    (time.time(),))
    con.close()
    before = sha(stored_run)
    r = invoke("run", "--resume", "1", "--db", stored_run, "--plugin", fault("marks_import.py"), "--no-isolate")
    assert r.exit_code == 2 and "heartbeat" in r.stderr and sha(stored_run) == before, r.output
    con = sqlite3.connect(stored_run)
    with con:
        con.execute("UPDATE runs SET heartbeat=?", (time.time() - 3600,))  # long silent: abandoned
    con.close()
    r = invoke("run", "--resume", "1", "--db", stored_run, "--plugin", fault("marks_import.py"), "--no-isolate")
    assert r.exit_code == 0, r.output


@pytest.mark.slow
def test_retry_failed_measures_crashed_and_timed_out_cells_again(tmp_path):
    db = str(tmp_path / "fb.db")
    r = invoke("run", "softmax", "--shapes", "8x8,8x16,8x24,8x32", "--impl", "eager", "--db", db, "--no-isolate",
               "--metrics", "none")
    assert r.exit_code == 0, r.output
    con = sqlite3.connect(db)
    with con:
        for shape, status in (("8x8", "crashed"), ("8x16", "timeout"), ("8x24", "error")):
            con.execute("UPDATE cells SET status=?, reason='injected', time_us=NULL WHERE shape=?", (status, shape))
    con.close()
    r = invoke("run", "--resume", "1", "--db", db, "--no-isolate")  # without --retry-failed: nothing missing
    assert r.exit_code == 0 and "0 cells to resume" in r.stderr, r.output
    r = invoke("run", "--resume", "1", "--retry-failed", "--db", db, "--no-isolate")
    assert r.exit_code == 0 and "2 cells to resume" in r.stderr, r.output
    status = {s: st for _, s, st, _ in cells(db)}
    assert status == {"8x8": "ok", "8x16": "ok", "8x24": "error", "8x32": "ok"}  # each cell once


def test_list_prints_a_plugins_names_and_descriptions_as_text(tmp_path):
    plugin = tmp_path / "odd_names.py"
    plugin.write_text(
        "import fusebench, torch\n"
        "x = lambda shape, dtype, device, seed: (fusebench.randn(shape, dtype, device, seed),)\n"
        "@fusebench.case(inputs=x, shapes=[(8, 8)], description='bad [/x] [bold]kept[/bold] \\x1b[31mred')\n"
        "def odd_case(a):\n"
        "    return a\n"
        "@fusebench.implementation('odd-impl', cases=['odd_case'], description='[/] impl \\x1b]0;t\\x07')\n"
        "def odd_impl(a):\n"
        "    return a\n")
    r = invoke("list", "--plugin", plugin)
    assert r.exit_code == 0, r.output
    flat = " ".join(r.output.split())
    assert "[/x] [bold]kept[/bold]" in flat and "[/] impl" in flat  # nothing vanished
    assert "\x1b" not in r.output and "\x07" not in r.output
