import sqlite3

import pytest

from fusebench.store import Store, StoreError


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


def _store_with_run(path, time_us):
    s = Store.open(str(path))
    run = s.start_run({"device": "cpu"}, {"cases": ["softmax"]}, {"rep_ms": 1})
    for impl in ("eager", "triton"):
        s.add_cell(run, dict(case_name="softmax", impl=impl, shape="4x4", dtype="fp32", device="cpu",
                             status="ok", time_us=time_us))
    s.finish_run(run)
    return s


def test_merge_copies_runs_under_new_ids(tmp_path):
    dst = _store_with_run(tmp_path / "a.db", 1.0)
    src = _store_with_run(tmp_path / "b.db", 2.0)
    _store_with_run(tmp_path / "b.db", 3.0).close()  # b.db now holds runs 1 and 2
    assert dst.merge_from(src) == {1: 2, 2: 3}
    assert list(dst.runs().cells) == [2, 2, 2]
    assert list(dst.cells(3).time_us) == [3.0, 3.0] and dst.run_info(3)["status"] == "done"
    assert list(dst.cells(1).time_us) == [1.0, 1.0]  # what was there is untouched
    with pytest.raises(StoreError, match="into itself"):
        dst.merge_from(Store.open(str(tmp_path / "a.db")))


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
