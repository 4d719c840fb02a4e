"""bench/standing.py: each GPU's cells against that GPU's own copy ceiling, or none."""
import importlib.util
import pathlib
import sqlite3
import subprocess
import sys

import pandas as pd

ROOT = pathlib.Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("standing", ROOT / "bench" / "standing.py")
standing = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(standing)

H100 = "NVIDIA H100 80GB HBM3"


def _cells():
    rows = []
    for gpu, store, (t_triton, t_copy) in (("NVIDIA H200", "a.db", (100.0, 95.0)), (H100, "b.db", (200.0, 190.0))):
        for impl, t in (("triton", t_triton), ("memcpy", t_copy)):
            rows.append(dict(case_name="softmax", shape="1024x32768", impl=impl, time_us=t,
                             gbps=268.435456 / t * 1e3, started="2026-11-25T12:00" if store == "a.db" else "2026-11-24",
                             run_id=1, hostname="vm", git_commit="abc", device_name=gpu, store=store))
    return pd.DataFrame(rows)


def test_each_gpu_against_its_own_ceiling():
    cells = _cells()
    h200 = standing.standing(cells[cells.store == "a.db"], {"NVIDIA H200": 4000.0}, 64).iloc[0]
    assert abs(h200.of_ceiling - 2684.35456 / 4000.0) < 1e-9 and h200.measure == h200.of_ceiling
    # no ceiling for the H100: not available, and the same-size copy is what the target is checked against
    h100 = standing.standing(cells[cells.store == "b.db"], {"NVIDIA H200": 4000.0}, 64).iloc[0]
    assert pd.isna(h100.of_ceiling) and abs(h100.measure - 190.0 / 200.0) < 1e-12


def test_copy_ceilings_read_from_the_stores(tmp_path):
    path = tmp_path / "s.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE ceilings (device_name TEXT, name TEXT, value REAL, unit TEXT, measured TEXT)")
    con.execute("INSERT INTO ceilings VALUES (?, 'copy_bw', 3000.0, 'GB/s', '2026-11-25')", (H100,))
    con.commit()
    con.close()
    empty = tmp_path / "none.db"
    sqlite3.connect(empty).close()
    found = standing.copy_ceilings([str(path), str(empty)])
    assert found == {"NVIDIA H200": standing.H200_COPY_GBPS, H100: 3000.0}


def test_committed_h100_store_reports_the_copy_not_the_h200_ceiling():
    store = ROOT / "docs" / "results" / "h100-session16-smbwd-grid.db"
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "standing.py"), str(store)], capture_output=True,
                         text=True, check=True, timeout=120).stdout
    assert "same-size copy on the NVIDIA H100" in out and "of ceiling" not in out


def test_versus_with_a_store_of_ceilings_only():
    # a ceilings store given beside the grid stores (as for the first target) has no cells; its
    # empty frame used to leave the times untyped, and --versus failed on their logarithm
    grid = ROOT / "docs" / "results" / "h100x2-session22-elementwise-grid.db"
    ceilings = ROOT / "docs" / "device-runs" / "s17-call1" / "ceilings.db"
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "standing.py"), str(grid), str(ceilings), "--versus"],
                         capture_output=True, text=True, check=True, timeout=120).stdout
    assert "| `bias_dropout_add_transposed` (97) |" in out
