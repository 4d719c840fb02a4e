"""An audit in the results store: saved whole in one transaction, read back as it was."""
import math
import sqlite3

import numpy as np
import pytest

from audit_fixtures import store_audit, store_cells_run, synthetic_audit
from fusebench.audit.result import KernelRow
from fusebench.audit.store import audit_summary, is_audit, load, save
from fusebench.store import Store, StoreError


def test_round_trip_keeps_every_row_and_field(db):
    result = synthetic_audit(backends=("eager", "inductor", "inductor-max-autotune"),
                             failed={"inductor-max-autotune": "oom"})
    result.steps[1].break_even_steps = math.inf  # never pays off: kept as such
    result.kernels[0].name = "kernel «ü» [bold]x[/bold]"
    rid = store_audit(db, result)
    with Store.open(db, create=False) as st:
        back = load(st, rid)
        assert is_audit(st, rid)
        assert st.run_info(rid)["status"] == "done"
        assert st.cells(rid).empty  # an audit has no cells
    assert back.as_dict() == result.as_dict()
    assert back.regions[0].case_times == {"triton": 2.1, "liger": 2.4, "quack": "not installed"}
    assert back.step("inductor-max-autotune").status == "oom"


def test_numpy_numbers_are_stored_as_numbers(db):
    result = synthetic_audit()
    result.kernels[0].launches = np.int64(8)
    result.kernels[0].time_us = np.float32(300.0)
    result.regions[0].case_times = {"triton": np.float64(2.5)}
    rid = store_audit(db, result)
    with Store.open(db, create=False) as st:
        back = load(st, rid)
    assert back.kernels[0].launches == 8 and isinstance(back.kernels[0].launches, int)
    assert back.regions[0].case_times == {"triton": 2.5}


def test_saving_again_replaces_the_rows(db):
    result = synthetic_audit()
    rid = store_audit(db, result)
    with Store.open(db) as st:
        result.kernels = result.kernels[:1]
        save(st, rid, result)
        assert len(load(st, rid).kernels) == 1


def test_a_failed_save_leaves_nothing_half_written(db):
    good = synthetic_audit()
    rid = store_audit(db, good)
    bad = synthetic_audit()
    bad.kernels.append(KernelRow("inductor", "forward", "k", "memory", 1, 1.0, op=object()))  # cannot be stored
    with Store.open(db) as st:
        with pytest.raises((sqlite3.Error, TypeError)):
            save(st, rid, bad)
        assert load(st, rid).as_dict() == good.as_dict()  # the earlier save is intact
        assert not st.con.in_transaction


def test_columns_a_store_lacks_are_added_and_unknown_ones_ignored(db):
    rid = store_audit(db, synthetic_audit())
    con = sqlite3.connect(db)
    con.execute("ALTER TABLE audit_kernels ADD COLUMN from_a_newer_fusebench TEXT")
    con.execute("ALTER TABLE audit_steps DROP COLUMN recompiles")  # an older store's table
    con.commit()
    con.close()
    with Store.open(db, create=False) as st:
        back = load(st, rid)
    assert back.step("inductor").recompiles is None and back.step("inductor").graphs == 2
    rid2 = store_audit(db, synthetic_audit())
    with Store.open(db, create=False) as st:
        assert load(st, rid2).step("inductor").recompiles == 0


def test_not_an_audit_and_an_audit_without_results(db):
    cells = store_cells_run(db)
    with Store.open(db) as st:
        assert not is_audit(st, cells)
        with pytest.raises(StoreError, match="not an audit"):
            load(st, cells)
        rid = st.start_run({"device": "cpu"}, {"kind": "audit", "audit": {"model": "m"}}, {})
        st.finish_run(rid, "interrupted")
        with pytest.raises(StoreError, match="stored no results.*interrupted"):
            load(st, rid)
        with pytest.raises(StoreError, match="no run 99"):
            is_audit(st, 99)


def test_a_read_only_store_takes_no_audit(db):
    rid = store_audit(db, synthetic_audit())
    with Store.open(db, create=False) as st:
        with pytest.raises(StoreError, match="read-only"):
            save(st, rid, synthetic_audit())


def test_audit_summary_names_what_was_measured():
    request = {"kind": "audit", "audit": {"model": "llama3-layer", "mode": "fwd_bwd", "dtype": "bf16",
                                          "sizes": {"batch": 1, "tokens": 2048},
                                          "compile_modes": ["default", "max-autotune"], "baseline": "eager"}}
    assert audit_summary(request) == ("audit llama3-layer fwd_bwd bf16 batch=1 tokens=2048: "
                                      "eager, inductor, inductor-max-autotune")
    import json

    assert audit_summary(json.dumps(request)) == audit_summary(request)
    assert audit_summary({"cases": ["softmax"]}) is None
    assert audit_summary("not json") is None
    assert audit_summary({"kind": "audit", "audit": "garbled"}) == "audit ? fwd: eager"


def test_copying_an_audit_into_another_store(db, tmp_path):
    from fusebench.audit.store import copy_audit_rows

    result = synthetic_audit()
    rid = store_audit(db, result)
    other = str(tmp_path / "other.db")
    store_cells_run(other)
    with Store.open(db, create=False) as src, Store.open(other) as dst:
        with dst.con:  # the merge's transaction: the run row, then its rows
            new = dst.con.execute("INSERT INTO runs (status, request) VALUES ('done', ?)",
                                  (src.run_info(rid)["request"],)).lastrowid
            n = copy_audit_rows(src.con, rid, dst.con, new)
        assert n == 1 + len(result.steps) + len(result.kernels) + len(result.regions)
        assert load(dst, new).as_dict() == result.as_dict()
        assert copy_audit_rows(dst.con, 1, src.con, 99) == 0  # a run of cells has no audit rows


def test_the_api_returns_an_audits_tables_as_frames(db):
    import fusebench

    result = synthetic_audit()
    rid = store_audit(db, result)
    regions = fusebench.results(rid, db=db)
    assert list(regions.columns[:4]) == ["run_id", "model", "mode", "dtype"]
    assert list(regions["index"]) == [r.index for r in result.opportunities()]  # largest gap first
    assert regions.attrs["audit"].as_dict() == result.as_dict()
    kernels = fusebench.results(rid, db=db, table="kernels")
    assert len(kernels) == len(result.kernels) and set(kernels["run_id"]) == {rid}
    assert list(fusebench.results(rid, db=db, table="steps")["backend"]) == [s.backend for s in result.steps]
    with pytest.raises(ValueError, match="is an audit: table is one of"):
        fusebench.results(rid, db=db, table="cells")
    cells = store_cells_run(db)
    with pytest.raises(ValueError, match="is a run of cells"):
        fusebench.results(cells, db=db, table="kernels")
    assert not fusebench.results(cells, db=db).empty
