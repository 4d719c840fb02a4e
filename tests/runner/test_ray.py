"""The Ray backend on the CPU: a local Ray instance of two CPU slots, so two actors.

Cells spread over the actors and are stored once each, with the host that measured them; a cell
that kills its actor is `crashed`, one that hangs is `timeout`, and the sweep goes on; a cell whose
node left the cluster is measured again, once; a killed driver's run is completed by --resume."""
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

import fusebench
from fusebench.cli import bare_ray_flag
from fusebench.measure.timing import TimingSettings

try:
    import ray
except ImportError:
    ray = None

needs_ray = pytest.mark.skipif(ray is None, reason='Ray is not installed (pip install "fusebench[ray]")')

FAST = TimingSettings(warmup_ms=1, rep_ms=2, min_reps=2, max_reps=5)
TESTS = Path(__file__).resolve().parent.parent  # the fixture plugins are in tests/faults_ray/
FAULTS = str(TESTS / "faults_ray" / "faults.py")
SLOW = str(TESTS / "faults_ray" / "slow.py")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A Ray instance with two CPU slots for the whole module; yields its address."""
    if ray is None:
        pytest.skip('Ray is not installed (pip install "fusebench[ray]")')
    # Set before ray.init so the instance's workers inherit it: the fault cases log their pid there.
    os.environ["FUSEBENCH_RAY_PIDS"] = str(tmp_path_factory.mktemp("ray") / "pids.txt")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()
    del os.environ["FUSEBENCH_RAY_PIDS"]


def run_ray(cases, db, **kw):
    return fusebench.run(cases, impls=["eager"], db=db, plugins=[FAULTS], device="cpu", timing=FAST,
                         metrics="none", ray="local", **kw)


def stored(db):
    con = sqlite3.connect(db)
    rows = con.execute("SELECT case_name, shape, status, reason, hostname, device_name FROM cells ORDER BY id").fetchall()
    con.close()
    return rows


@pytest.mark.slow
@needs_ray
def test_cells_spread_over_the_actors_and_are_stored_once_with_their_host(cluster, db):
    pids = Path(os.environ["FUSEBENCH_RAY_PIDS"])
    pids.write_text("")
    df = run_ray(["ray_fine", "ray_fine_too"], db)
    rows = stored(db)
    assert sorted((c, s) for c, s, *_ in rows) == sorted(
        [("ray_fine", f"8x{n}") for n in range(1, 5)] + [("ray_fine_too", f"4x{n}") for n in range(1, 5)])
    assert all(st == "ok" for _, _, st, *_ in rows)
    assert {h for *_, h, _ in rows} == {socket.gethostname()} and all(d for *_, d in rows)
    assert len(df) == 8 and set(df.hostname) == {socket.gethostname()}
    # each case's cells on one actor, never this process (the two cases take two actors when both
    # are up in time; a slow start can leave both to the first, so that is not asserted)
    logged = [line.split() for line in pids.read_text().split("\n") if line]
    by_case = {rows: {int(pid) for shape, pid in logged if shape.startswith(f"{rows}x")} for rows in (8, 4)}
    assert all(len(p) == 1 for p in by_case.values()), by_case
    assert os.getpid() not in set().union(*by_case.values())
    assert sqlite3.connect(db).execute("SELECT status FROM runs").fetchone()[0] == "done"


@pytest.mark.slow
@needs_ray
def test_a_cell_that_kills_its_actor_is_crashed_and_a_hang_times_out(cluster, db):
    t0 = time.time()
    run_ray(["ray_dies", "ray_hangs"], db, cell_timeout=6)
    status = {(c, s): (st, why) for c, s, st, why, *_ in stored(db)}
    assert len(status) == 4
    assert status[("ray_dies", "8x2")][0] == "crashed" and "Ray actor died" in status[("ray_dies", "8x2")][1]
    assert {h for *_, h, _ in stored(db)} == {socket.gethostname()}  # crashed and timeout cells too
    assert status[("ray_dies", "8x1")][0] == "ok" and status[("ray_dies", "8x3")][0] == "ok"  # on a fresh actor
    assert status[("ray_hangs", "8x1")] == ("timeout", "no result within 6 s; Ray actor killed")
    assert time.time() - t0 < 60


@pytest.mark.slow
@needs_ray
def test_a_cell_whose_node_left_is_measured_again_once(cluster, db, monkeypatch):
    from fusebench.runner.ray_backend import RayScheduler

    # Every actor death looks like its node leaving: the cell is queued again once, then recorded.
    monkeypatch.setattr(RayScheduler, "_node_alive", staticmethod(lambda node_id: False))
    run_ray(["ray_dies"], db)
    status = {s: (st, why) for c, s, st, why, *_ in stored(db)}
    assert status == {"8x1": ("ok", None), "8x3": ("ok", None),
                      "8x2": ("crashed", "lost twice with its Ray node (the node left or stopped answering)")}


@needs_ray
@pytest.mark.slow
def test_a_cell_whose_node_really_leaves_is_measured_on_the_other_node(tmp_path):
    """Two Ray nodes on this machine (ray.cluster_utils, in a process of its own); the node that
    measures the third cell is removed mid-cell.  That cell is measured again on the other node;
    the sweep completes, every cell once and ok."""
    db = str(tmp_path / "fb.db")
    r = subprocess.run([sys.executable, str(TESTS / "faults_ray" / "node_leaves.py"), db],
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "removed " in r.stdout, r.stderr[-3000:]  # the node did leave mid-cell
    removed = r.stdout.split("removed ")[1].split()[0]
    nodes_of_cell_3 = list(dict.fromkeys(node for shape, node in (line.split() for line in open(db + ".nodes"))
                                         if shape == "3"))
    assert nodes_of_cell_3[0] == removed and len(nodes_of_cell_3) == 2
    rows = [(s, st) for _, s, st, *_ in stored(db)]
    assert Counter(s for s, _ in rows) == Counter(f"8x{n}" for n in range(1, 9))
    assert {st for _, st in rows} == {"ok"}


def cli(*args, **kw):
    return subprocess.run([sys.executable, "-m", "fusebench", *args], capture_output=True, text=True, **kw)


@pytest.mark.slow
@needs_ray
def test_a_killed_drivers_run_is_completed_by_resume(cluster, db):
    """The driver connects to the module's Ray instance by address (as to a cluster), is killed
    with SIGKILL mid-run, and `--resume --ray ADDRESS` measures exactly the missing cells."""
    args = [sys.executable, "-m", "fusebench", "run", "ray_slow", "--plugin", SLOW, "--impl", "eager",
            "--device", "cpu", "--metrics", "none", "--db", db, "--ray", cluster]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline and len(shapes_or_none(db)) < 2 and proc.poll() is None:
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    before = shapes_or_none(db)
    assert 2 <= len(before) < 8, proc.stderr.read()
    r = cli("run", "--resume", "1", "--plugin", SLOW, "--db", db, "--ray", cluster, timeout=120)
    assert r.returncode == 0, r.stderr
    after = shapes_or_none(db)
    assert after[:len(before)] == before
    assert Counter(after) == Counter(f"8x{n}" for n in range(1, 9))  # each cell exactly once
    con = sqlite3.connect(db)
    assert {st for (st,) in con.execute("SELECT status FROM cells")} == {"ok"}
    assert con.execute("SELECT status FROM runs").fetchone()[0] == "done"


def shapes_or_none(db):
    try:
        con = sqlite3.connect(db)
        rows = [s for (s,) in con.execute("SELECT shape FROM cells ORDER BY id")]
        con.close()
        return rows
    except sqlite3.OperationalError:
        return []


@needs_ray
def test_a_request_the_cluster_cannot_serve_stores_nothing(cluster, tmp_path):
    db = str(tmp_path / "never.db")
    with pytest.raises(ValueError, match="no GPU"):
        fusebench.run(["ray_fine"], impls=["eager"], db=db, plugins=[FAULTS], device="cuda", ray="local")
    with pytest.raises(ValueError, match="needs a GPU run"):
        fusebench.run(["ray_fine"], impls=["eager"], db=db, plugins=[FAULTS], device="cpu", ray="local",
                      ray_gpu_kind="H100")
    assert not os.path.exists(db)


@pytest.mark.slow
@needs_ray
def test_an_address_that_does_not_answer_is_one_line_and_exit_2(tmp_path):
    db = tmp_path / "never.db"
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.time()
    r = cli("run", "softmax", "--impl", "eager", "--device", "cpu", "--db", str(db), "--ray", f"127.0.0.1:{port}",
            timeout=120)
    assert r.returncode == 2 and time.time() - t0 < 60
    line = r.stderr.strip()  # (the progress bar, stopped, leaves an empty line before it)
    assert line.startswith(f"fusebench: error: --ray 127.0.0.1:{port}: cannot reach") and "\n" not in line
    assert not db.exists()


def test_without_ray_the_option_is_one_line_and_exit_2(tmp_path):
    """Ray made unimportable (a `ray` package that raises ImportError, first on the path)."""
    fake = tmp_path / "noray" / "ray"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('no ray here')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(fake.parent), os.environ.get("PYTHONPATH", "")])}
    db = tmp_path / "never.db"
    r = cli("run", "softmax", "--impl", "eager", "--device", "cpu", "--db", str(db), "--ray", env=env, timeout=120)
    assert r.returncode == 2
    assert r.stderr == 'fusebench: error: --ray needs Ray: pip install "fusebench[ray]"\n'
    assert not db.exists()


def test_ray_takes_an_optional_address():
    assert bare_ray_flag(["run", "softmax", "--ray"]) == ["run", "softmax", "--ray=local"]
    assert bare_ray_flag(["run", "--ray", "softmax"]) == ["run", "--ray=local", "softmax"]
    assert bare_ray_flag(["run", "--ray", "--shapes", "grid"]) == ["run", "--ray=local", "--shapes", "grid"]
    for address in ("auto", "ray://head:10001", "10.0.0.5:6379"):
        assert bare_ray_flag(["run", "--ray", address]) == ["run", "--ray", address]



SLOW_START = str(TESTS / "faults_ray" / "slow_start.py")  # actors take 6 s to import it


def run_slow_start(db, **kw):
    return fusebench.run(["ray_slow_start"], impls=["eager"], db=db, plugins=[SLOW_START], device="cpu",
                         timing=FAST, metrics="none", ray="local", **kw)


@needs_ray
@pytest.mark.slow
def test_the_cell_timeout_counts_from_the_cell_not_from_the_actors_start(cluster, db):
    """Every actor takes 6 s to start; a 3 s cell limit still stores every cell ok."""
    t0 = time.time()
    run_slow_start(db, cell_timeout=3)
    assert time.time() - t0 > 6  # the actors' start-up did take that long
    assert [(s, st) for _, s, st, *_ in stored(db)] == [("8x1", "ok"), ("8x2", "ok"), ("8x3", "ok")]


@needs_ray
@pytest.mark.slow
def test_an_actor_start_beyond_its_limit_is_one_line_and_a_resumable_run(cluster, db, monkeypatch):
    from typer.testing import CliRunner

    from fusebench.cli import app

    monkeypatch.setenv("FUSEBENCH_RAY_START_S", "2")
    t0 = time.time()
    r = CliRunner().invoke(app, ["run", "ray_slow_start", "--plugin", SLOW_START, "--impl", "eager", "--device",
                                 "cpu", "--metrics", "none", "--db", db, "--ray=local"])
    assert r.exit_code == 1 and time.time() - t0 < 30, r.output
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert lines[0] == "run 1: 3 cells" and len(lines) == 2, r.stderr
    assert lines[1].startswith("fusebench: error: no Ray actor started within 2 s") and "Traceback" not in r.output
    assert f"complete it with `fusebench run --resume 1 --db {db} --plugin {SLOW_START} --ray`" in lines[1]
    con = sqlite3.connect(db)
    assert con.execute("SELECT status FROM runs").fetchone()[0] == "interrupted"
    con.close()
    # resumable: here on local workers, where the plugin imports at once
    r = CliRunner().invoke(app, ["run", "--resume", "1", "--plugin", SLOW_START, "--db", db, "--no-isolate"])
    assert r.exit_code == 0, r.output
    assert [(s, st) for _, s, st, *_ in stored(db)] == [("8x1", "ok"), ("8x2", "ok"), ("8x3", "ok")]
