"""`fusebench standing` (fusebench.report.standing): each GPU's cells against that GPU's own copy
ceiling, or the same-size copy where none is stored; --versus, the geometric means."""
import math
import sqlite3

import pandas as pd
import pytest
from typer.testing import CliRunner

from fusebench.cli import app
from fusebench.report import standing
from fusebench.store import Store

H100 = "NVIDIA H100 80GB HBM3"
H200 = "NVIDIA H200"
SHAPE = "1024x32768"  # 128 MiB of fp32 input
MIN_BYTES = 2 * 1024 * 32768 * 4
runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, ["standing", *map(str, args)])


def make_store(path, device_name, times: dict, started="2026-11-25T12:00:00", commit="abc1234",
               case="softmax", shape=SHAPE):
    """A fusebench store with one run on `device_name` and one ok fp32 cell per implementation."""
    store = Store.open(str(path))
    with store.con:
        run = store.con.execute("INSERT INTO runs (started, git_commit, device_name) VALUES (?, ?, ?)",
                                (started, commit, device_name)).lastrowid
        for impl, t in times.items():
            store.con.execute(
                "INSERT INTO cells (run_id, case_name, impl, shape, dtype, device, status, started, time_us, gbps) "
                "VALUES (?, ?, ?, ?, 'fp32', 'cuda', 'ok', ?, ?, ?)",
                (run, case, impl, shape, started, t, MIN_BYTES / t / 1e3))
    store.close()
    return str(path)


def add_ceiling(path, device_name, gbps):
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE IF NOT EXISTS ceilings (device_name TEXT, name TEXT, value REAL, unit TEXT, "
                "measured TEXT, torch TEXT, PRIMARY KEY(device_name, name))")
    con.execute("INSERT INTO ceilings VALUES (?, 'copy_bw', ?, 'GB/s', '2026-11-25', '2.11')", (device_name, gbps))
    con.commit()
    con.close()


def test_each_gpu_against_its_own_ceiling(tmp_path):
    a = make_store(tmp_path / "a.db", H200, {"triton": 100.0, "memcpy": 95.0})
    b = make_store(tmp_path / "b.db", H100, {"triton": 200.0, "memcpy": 190.0}, shape="2048x16384")
    add_ceiling(a, H200, 4000.0)
    cells = standing.load([a, b])
    table = standing.standing(cells, standing.copy_ceilings([a, b]), 64).set_index("device_name")
    h200, h100 = table.loc[H200], table.loc[H100]
    assert abs(h200.of_ceiling - MIN_BYTES / 100.0 / 1e3 / 4000.0) < 1e-9 and h200.measure == h200.of_ceiling
    # no ceiling stored for the H100: not available, and the same-size copy is what the target is checked against
    assert pd.isna(h100.of_ceiling) and abs(h100.measure - 190.0 / 200.0) < 1e-12


def test_copy_ceilings_read_from_the_stores_and_none_invented(tmp_path):
    with_ceiling = make_store(tmp_path / "s.db", H100, {"triton": 1.0})
    add_ceiling(with_ceiling, H100, 3000.0)
    without = make_store(tmp_path / "none.db", H200, {"triton": 1.0})
    assert standing.copy_ceilings([with_ceiling, without]) == {H100: 3000.0}


def test_command_reports_the_copy_where_no_ceiling_is_stored(tmp_path):
    path = make_store(tmp_path / "h100.db", H100, {"triton": 200.0, "memcpy": 150.0})  # 0.75 of the copy
    r = invoke(path)
    assert r.exit_code == 0, r.output
    assert f"softmax: 0 of 1 shapes at >= 0.9 of the same-size copy on the {H100}" in r.output
    assert "ceiling n/a" in r.output and "0.750 of memcpy" in r.output and "h100.db run 1, abc1234" in r.output
    # with a ceiling stored the verdict is against it: 2*128 MiB in 200 us is 1342 GB/s, 0.447 of 3000
    add_ceiling(path, H100, 3000.0)
    r = invoke(path, "--all")
    assert "0 of 1 shapes at >= 0.9 of 3,000 GB/s" in r.output and "0.447 of ceiling" in r.output
    r = invoke(path, "--ceiling", 1000)
    assert "1 of 1 shapes at >= 0.9 of 1,000 GB/s" in r.output


def test_latest_cell_per_shape_wins_across_stores(tmp_path):
    old = make_store(tmp_path / "old.db", H100, {"triton": 400.0, "memcpy": 150.0}, started="2026-11-24T00:00:00")
    new = make_store(tmp_path / "new.db", H100, {"triton": 160.0, "memcpy": 150.0}, started="2026-11-25T00:00:00")
    table = standing.standing(standing.load([new, old]), {}, 64)
    assert len(table) == 1 and table.iloc[0].store == "new.db" and math.isclose(table.iloc[0].measure, 150 / 160)


def test_versus_with_a_store_of_ceilings_only(tmp_path):
    # a ceilings store given beside the grid stores (as for the copy-rate table) has no cells of these
    # implementations; its empty frame must not leave the times untyped
    grid = make_store(tmp_path / "grid.db", H100, {"eager": 40.0, "inductor": 20.0, "triton": 10.0})
    make_store(tmp_path / "grid.db", H100, {"eager": 8.0, "inductor": 4.0, "triton": 5.0}, shape="256x256")
    ceilings = make_store(tmp_path / "ceilings.db", H100, {})
    add_ceiling(ceilings, H100, 3000.0)
    r = invoke(grid, ceilings, "--versus")
    assert r.exit_code == 0, r.output
    # geometric means over the two shapes: triton vs Inductor sqrt(2 * 0.8), vs eager sqrt(4 * 1.6)
    assert "| `softmax` (2) | 2.00x | 1.26x | 2.53x | 1: 256x256 0.80 |" in r.output


@pytest.mark.parametrize("args, message", [(["/nonexistent/x.db"], "no results database at"),
                                           (["--ceiling", "0", "{db}"], "--ceiling must be positive"),
                                           (["--target", "-1", "{db}"], "--target must be positive"),
                                           (["{text}"], "not an SQLite database")])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, message):
    db = make_store(tmp_path / "ok.db", H100, {"triton": 1.0})
    text = tmp_path / "notes.txt"
    text.write_text("not a store")
    r = invoke(*[a.format(db=db, text=text) for a in args])
    assert r.exit_code == 2, r.output
    out = r.output.strip()
    assert out.startswith("fusebench: error:") and message in out and "\n" not in out
    assert text.read_text() == "not a store"
