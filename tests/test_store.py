import os
import sqlite3
import subprocess
import sys

import pytest

from fusebench.store import Store, StoreError
from fusebench.store_merge import MergeRefused, merge

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_cells_are_committed_and_read_back(db):
    s = Store.open(db)
    run = s.start_run({"device": "cpu", "torch": "x"}, {"cases": ["softmax"]}, {"rep_ms": 1})
    s.add_cell(run, dict(case_name="softmax", impl="eager", shape="4x4", dtype="fp32", requested_dtype="fp32",
                         device="cpu", status="ok", time_us=3.5, na={"kernels": "cpu"}))
    # a second connection sees it at once: committed per cell
    other = Store.open(db)
    df = other.cells(run)
    assert list(df.status) == ["ok"] and df.time_us[0] == 3.5 and '"kernels"' in df.na[0]
    assert other.done_keys(run) == {("softmax", "eager", "4x4", "fp32")}
    with pytest.raises(KeyError):
        s.add_cell(run, dict(case_name="x", impl="y", shape="1", dtype="fp32", device="cpu", status="ok", bogus=1))


def test_foreign_and_broken_files_are_refused_untouched(tmp_path):
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not a database at all" * 10)
    before = garbage.read_bytes()
    with pytest.raises(StoreError, match="not an SQLite database"):
        Store.open(str(garbage))
    assert garbage.read_bytes() == before

    foreign = tmp_path / "foreign.db"
    con = sqlite3.connect(foreign)
    con.execute("CREATE TABLE accounts (id INTEGER, balance REAL)")
    con.execute("INSERT INTO accounts VALUES (1, 2.0)")
    con.commit()
    con.close()
    before = foreign.read_bytes()
    with pytest.raises(StoreError, match="something else"):
        Store.open(str(foreign))
    assert foreign.read_bytes() == before

    with pytest.raises(StoreError, match="no results database"):
        Store.open(str(tmp_path / "missing.db"), create=False)


def test_old_store_gains_new_columns(db):
    s = Store.open(db)
    s.con.execute("ALTER TABLE cells DROP COLUMN pct_roofline")
    s.close()
    s = Store.open(db)
    cols = {r[1] for r in s.con.execute("PRAGMA table_info(cells)")}
    assert "pct_roofline" in cols


def test_the_columns_are_declared_in_the_store_module_alone(tmp_path):
    # store.py loaded by itself (no other fusebench module imported) creates every column, typed as
    # a store made by the whole package: no module adds columns when it is imported.
    alone = tmp_path / "alone.db"
    code = ("import importlib.util, sys; spec = importlib.util.spec_from_file_location('store_alone', sys.argv[1]); "
            "m = sys.modules['store_alone'] = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); "
            "m.Store.open(sys.argv[2]).close(); print(sorted(n for n in sys.modules if n.startswith('fusebench')))")
    r = subprocess.run([sys.executable, "-c", code, os.path.join(ROOT, "fusebench", "store.py"), str(alone)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stderr

    def columns(path):
        with sqlite3.connect(path) as con:
            return {t: [(c[1], c[2]) for c in con.execute(f"PRAGMA table_info({t})")] for t in ("runs", "cells")}

    Store.open(str(tmp_path / "whole.db")).close()
    assert columns(alone) == columns(tmp_path / "whole.db")
    assert {"tolerance", "phase_s", "time_samples_us", "under_load", "gpu_id"} <= {c for c, _ in columns(alone)["cells"]}


def _store_with_run(path, time_us):
    s = Store.open(str(path))
    run = s.start_run({"device": "cpu"}, {"cases": ["softmax"]}, {"rep_ms": 1})
    for impl in ("eager", "triton"):
        s.add_cell(run, dict(case_name="softmax", impl=impl, shape="4x4", dtype="fp32", device="cpu",
                             status="ok", time_us=time_us))
    s.finish_run(run)
    return s


def test_merge_copies_runs_under_new_ids_once(tmp_path):
    dst = _store_with_run(tmp_path / "a.db", 1.0)
    src = _store_with_run(tmp_path / "b.db", 2.0)
    _store_with_run(tmp_path / "b.db", 3.0).close()  # b.db now holds runs 1 and 2
    done = merge(dst, src)
    assert done.copied == {1: 2, 2: 3} and done.present == {}
    assert list(dst.runs().cells) == [2, 2, 2]
    assert list(dst.cells(3).time_us) == [3.0, 3.0] and dst.run_info(3)["status"] == "done"
    assert list(dst.cells(1).time_us) == [1.0, 1.0]  # what was there is untouched
    again = merge(dst, src)  # the same runs: not copied twice
    assert again.copied == {} and again.present == {1: 2, 2: 3} and list(dst.runs().cells) == [2, 2, 2]
    with pytest.raises(StoreError, match="into itself"):
        merge(dst, Store.open(str(tmp_path / "a.db")))


def test_merge_copies_an_audit_runs_rows_with_it(tmp_path):
    from fusebench.audit.store import _ensure_tables

    dst = _store_with_run(tmp_path / "a.db", 1.0)
    src = _store_with_run(tmp_path / "b.db", 2.0)
    with src.con:
        _ensure_tables(src.con)
        src.con.execute("INSERT INTO audits (run_id) VALUES (1)")
        src.con.executemany("INSERT INTO audit_steps (run_id) VALUES (1)", [(), ()])
    assert merge(dst, src).copied == {1: 2}
    assert dst.con.execute("SELECT run_id FROM audits").fetchall() == [(2,)]
    assert dst.con.execute("SELECT run_id FROM audit_steps").fetchall() == [(2,), (2,)]


def test_merge_refuses_a_source_readers_would_refuse_and_writes_nothing(tmp_path):
    dst = _store_with_run(tmp_path / "a.db", 1.0)
    dst.close()
    src = _store_with_run(tmp_path / "b.db", 2.0)
    _store_with_run(tmp_path / "b.db", 3.0).close()
    with src.con:
        src.con.execute("PRAGMA foreign_keys=OFF")
        src.con.execute("UPDATE cells SET time_us='fast' WHERE id=1")
        src.con.execute("UPDATE cells SET shape='zz', status='weird', dtype='fp99' WHERE id=2")
        src.con.execute("UPDATE runs SET device_count='many' WHERE id=2")
        src.con.execute("INSERT INTO cells (run_id, case_name, impl, shape, dtype, device, status) "
                        "VALUES (9, 'softmax', 'eager', '4x4', 'fp32', 'cpu', 'ok')")
    src.close()
    before = _sha(str(tmp_path / "a.db"))
    with Store.open(str(tmp_path / "a.db")) as dst, Store.open(str(tmp_path / "b.db"), create=False) as src:
        with pytest.raises(MergeRefused) as refused:
            merge(dst, src)
    lines = refused.value.lines
    assert len(lines) == 4, lines
    assert "1 cell(s) of run 9, which has no row in the runs table" in lines[0]
    assert "run 2 holds 'many' in device_count" in lines[1]
    assert "cell 1 of run 1 holds 'fast' in time_us" in lines[2]
    assert all(word in lines[3] for word in ("cell 2 of run 1", "shape 'zz'", "status 'weird'", "dtype 'fp99'"))
    assert _sha(str(tmp_path / "a.db")) == before


# A merge process that kills itself (SIGKILL) after copying part of the second run's cells, with a
# cache so small that the pages it changed reach the file before the transaction ends.
KILLED_MERGE = """
import os, signal, sys
from fusebench.store import Store
from fusebench.store_merge import merge

class Dying:
    def __init__(self, con):
        self.con = con
    def execute(self, sql, *args):
        cur = self.con.execute(sql, *args)
        if "FROM cells WHERE run_id=?" in sql and args and args[0] == (2,):
            return self._die_after(cur, 100)
        return cur
    def _die_after(self, cur, n):
        for i, row in enumerate(cur):
            if i == n:
                os.kill(os.getpid(), signal.SIGKILL)
            yield row
    def __getattr__(self, name):
        return getattr(self.con, name)

target, source = Store.open(sys.argv[1]), Store.open(sys.argv[2], create=False)
target.con.execute("PRAGMA cache_size=2")
source.con = Dying(source.con)
merge(target, source)
"""


def _store_with_big_runs(path, runs=2, cells=300):
    s = Store.open(str(path))
    for _ in range(runs):
        run = s.start_run({"device": "cpu"}, {"cases": ["softmax"]}, {})
        with s.con:
            s.con.executemany(
                "INSERT INTO cells (run_id, case_name, impl, shape, dtype, device, status, reason, time_us) "
                "VALUES (?, 'softmax', 'eager', ?, 'fp32', 'cpu', 'ok', ?, 1.0)",
                [(run, f"4x{n}", "x" * 1000) for n in range(1, cells + 1)])
        s.finish_run(run)
    s.close()


def _killed_merge(tmp_path):
    """A target holding one run, and the same target after a merge killed mid-way (its journal left)."""
    target, source = tmp_path / "a.db", tmp_path / "b.db"
    _store_with_run(target, 1.0).close()
    _store_with_big_runs(source)
    r = subprocess.run([sys.executable, "-c", KILLED_MERGE, str(target), str(source)], capture_output=True,
                       text=True, env={**os.environ, "PYTHONPATH": ROOT}, timeout=120)
    assert r.returncode == -9, r.stderr
    assert os.path.getsize(str(target) + "-journal") > 0  # a hot journal, as a kill -9 leaves it
    with pytest.raises(sqlite3.OperationalError, match="readonly"):  # what a plain read-only open meets
        sqlite3.connect(f"file:{target}?mode=ro", uri=True).execute("SELECT COUNT(*) FROM runs").fetchone()
    return str(target), str(source)


@pytest.mark.slow
def test_a_killed_merge_leaves_whole_runs_that_a_reader_recovers(tmp_path):
    target, source = _killed_merge(tmp_path)
    with Store.open(target, create=False) as st:  # a reader's open rolls the journal back
        assert st.readonly and list(st.runs().cells) == [2, 300]  # the first source run whole, the second absent
        assert st.con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert not os.path.exists(target + "-journal")
    with Store.open(target) as st, Store.open(source, create=False) as src:  # merging again completes it
        done = merge(st, src)
        assert done.present == {1: 2} and done.copied == {2: 3}
        assert list(st.runs().cells) == [2, 300, 300]


@pytest.mark.slow
def test_every_command_opens_a_store_left_by_a_killed_merge(tmp_path):
    import shutil

    from typer.testing import CliRunner

    from fusebench.cli import app

    target, _ = _killed_merge(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    commands = [["runs"], ["results", "--run", "2"], ["report", "-o", str(out / "r.html")],
                ["compare", "1", "2", "-o", str(out / "c.html")], ["overhead"], ["merge", "{copy}"]]
    for i, args in enumerate(commands):
        d = tmp_path / f"copy{i}"  # each command meets the journal itself
        d.mkdir()
        copy = str(d / "a.db")
        shutil.copy(target, copy)
        shutil.copy(target + "-journal", copy + "-journal")
        argv = [a.format(copy=copy) for a in args]
        argv += ["--db", str(out / f"m{i}.db")] if args[0] == "merge" else ["--db", copy]
        r = CliRunner().invoke(app, argv)
        assert r.exit_code == 0, (args, r.output)
        with Store.open(copy, create=False) as st:
            assert list(st.runs().cells) == [2, 300]


def test_a_journal_that_cannot_be_rolled_back_is_one_line_saying_how(tmp_path):
    target, _ = _killed_merge(tmp_path)
    locked = subprocess.run(["chattr", "+i", target], capture_output=True).returncode == 0
    if not locked:
        os.chmod(target, 0o444)
    try:
        if os.access(target, os.W_OK):
            pytest.skip("cannot make the store read-only here (root without chattr)")
        with pytest.raises(StoreError) as refused:
            Store.open(target, create=False)
    finally:
        subprocess.run(["chattr", "-i", target], capture_output=True)
        os.chmod(target, 0o644)
    message = str(refused.value)
    assert "\n" not in message and "left unfinished by a killed writer" in message
    assert "as a user who can write" in message
    assert os.path.exists(target + "-journal")  # nothing was changed


def _sha(path):
    import hashlib

    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def test_opening_writes_nothing_unless_something_is_written(tmp_path):
    path = str(tmp_path / "a.db")
    _store_with_run(path, 1.0).close()
    before = _sha(path)
    Store.open(path).close()  # a writer's open of an up-to-date store
    with Store.open(path, create=False) as ro:  # read-only
        assert ro.readonly and len(ro.cells(1)) == 2
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            ro.con.execute("DELETE FROM cells")
    assert _sha(path) == before and sorted(p.name for p in tmp_path.iterdir()) == ["a.db"]


def test_empty_corrupt_and_read_only_stores_are_refused(tmp_path):
    empty = tmp_path / "empty.db"
    empty.touch()
    with pytest.raises(StoreError, match="empty"):
        Store.open(str(empty), create=False)
    Store.open(str(empty)).close()  # a writer may initialise it: it holds nothing
    good = str(tmp_path / "good.db")
    _store_with_run(good, 1.0).close()
    data = bytearray(open(good, "rb").read())
    data[4096 + 8:] = b"\xff" * (len(data) - 4096 - 8)
    (tmp_path / "corrupt.db").write_bytes(bytes(data))
    for create in (True, False):
        with pytest.raises(StoreError, match="corrupt|unreadable"):
            Store.open(str(tmp_path / "corrupt.db"), create=create)


def test_a_cell_measured_again_replaces_its_row_whatever_dtype_it_ran_in(db):
    s = Store.open(db)
    run = s.start_run({"device": "cpu"}, {}, {})
    key = dict(case_name="softmax", impl="eager", shape="4x4", requested_dtype="fp16", device="cpu")
    s.add_cell(run, dict(key, dtype="fp16", status="crashed"))
    s.add_cell(run, dict(key, dtype="fp32", status="ok"))  # on the CPU fp16 runs as fp32
    assert list(s.cells(run).status) == ["ok"]
    assert s.done_keys(run) == {("softmax", "eager", "4x4", "fp16")}
    s.add_cell(run, dict(key, dtype="fp32", status="timeout"))
    assert s.done_keys(run, redo=("crashed", "timeout")) == set()
