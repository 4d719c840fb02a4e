"""A cell's fixed cost: its phases are recorded, inputs and references are shared between the
implementations of one shape, and the garbage collector walks only what a cell made."""
import gc
import json
import weakref

import pytest
import torch

import fusebench
from fusebench.measure.phases import Phases
from fusebench.measure.timing import TimingSettings
from fusebench.runner import cell as cellmod
from fusebench.runner import worker_state
from fusebench.runner.cell import measure_cell
from fusebench.runner.plan import Cell
from fusebench.runner.worker_state import CellData, WorkerState

FAST = TimingSettings(warmup_ms=1, rep_ms=2, min_reps=2, max_reps=5)


@pytest.fixture
def counted_case():
    """A user case whose reference counts its calls."""
    calls = {"reference": 0}

    def reference(x):
        calls["reference"] += 1
        return torch.tanh(x) * 2

    @fusebench.case(inputs=lambda s, dt, dev, seed: (fusebench.randn(s, dt, dev, seed),), shapes=[(16, 24)],
                    reference=reference, bytes_model=lambda s, dt: 2 * s[0] * s[1] * 4)
    def cellcost_tanh(x):
        return torch.tanh(x) * 2

    @fusebench.implementation("cellcost-clobber", cases="cellcost_tanh")
    def clobber(x):  # right answer, then writes over its input
        y = torch.tanh(x) * 2
        x.zero_()
        return y

    @fusebench.implementation("cellcost-copy", cases="cellcost_tanh")
    def copy(x):
        return torch.tanh(x.clone()) * 2

    from fusebench.cases.base import _REGISTRY
    from fusebench.impls import base

    yield calls
    _REGISTRY.pop("cellcost_tanh", None)
    for name in ("cellcost-clobber", "cellcost-copy"):
        base._IMPLS.pop(name, None)


def _cells(impls, shape=(16, 24)):
    return [Cell("cellcost_tanh", i, shape, "fp32", "cpu") for i in impls]


def test_reference_and_inputs_are_made_once_for_every_implementation_of_a_shape(counted_case):
    impls = ["eager", "cellcost-clobber", "cellcost-copy", "memcpy"]
    state = WorkerState()
    rows = [measure_cell(c, FAST, state=state) for c in _cells(impls)]
    assert [r["status"] for r in rows] == ["ok"] * 4, [r.get("reason") for r in rows]
    # three seeds: three references and three input sets for four implementations
    assert counted_case["reference"] == 3
    assert state.data.made == {"reference": 3, "inputs": 3}
    # the one that wrote over its inputs is checked against the seed's inputs, and the
    # implementation after it still got them
    assert rows[1]["max_abs_err"] < 1e-5
    assert rows[2]["max_abs_err"] < 1e-5 and rows[2]["seeds"] == 3


def test_another_shape_or_nothing_kept_computes_again(counted_case):
    state = WorkerState()
    measure_cell(_cells(["eager"])[0], FAST, state=state)
    measure_cell(_cells(["eager"], shape=(8, 24))[0], FAST, state=state)  # another key: its own references
    assert counted_case["reference"] == 6
    state.data.max_bytes = 0  # nothing fits: each cell computes its own
    for c in _cells(["eager", "cellcost-copy"]):
        assert measure_cell(c, FAST, state=state)["status"] == "ok"
    assert counted_case["reference"] == 12
    # kept or not, the reference is of the seed's inputs, not of what an implementation left in them
    row = measure_cell(_cells(["cellcost-clobber"])[0], FAST, state=state)
    assert row["status"] == "ok" and row["max_abs_err"] < 1e-5, row.get("reason")


def test_without_a_state_nothing_is_kept_between_cells(counted_case):
    for c in _cells(["eager", "cellcost-copy"]):
        assert measure_cell(c, FAST)["status"] == "ok"
    assert counted_case["reference"] == 6


def test_kept_inputs_are_cloned_with_their_layout():
    case = fusebench.get_case("softmax")
    data = CellData()
    key = ("softmax", "fwd", (8, 16), torch.float32, "cpu")
    a = data.make_inputs(key, case, (8, 16), torch.float32, "cpu", 0)
    b = data.make_inputs(key, case, (8, 16), torch.float32, "cpu", 0)
    fresh = case.make_inputs((8, 16), torch.float32, "cpu", 0)
    assert data.made["inputs"] == 1
    for x, y, z in zip(a, b, fresh):
        assert torch.equal(x, z) and torch.equal(y, z) and x.stride() == z.stride()
        assert x.data_ptr() != y.data_ptr()  # each cell its own copy
    # a view with gaps would come back compacted by clone(): not kept
    assert not worker_state._clone_keeps_layout((torch.randn(8, 16)[:, ::2],))


@pytest.mark.slow
def test_every_cell_records_its_phases(counted_case, db):
    row = measure_cell(_cells(["eager"])[0], FAST, metrics=("memory", "flops"))
    ph = row["phase_s"]
    for name in ("setup", "prepare", "inputs", "seed0", "seed1", "seed2", "reference", "compare", "timing",
                 "wall_time", "metric_memory", "metric_flops", "free"):
        assert name in ph and ph[name] >= 0, name
    assert sum(ph.values()) <= row["seconds"] + 0.01
    # the ceiling: one warm-up call and the timing on the same inputs, nothing checked
    cp = measure_cell(_cells(["memcpy"])[0], FAST)["phase_s"]
    assert "seed0" in cp and "reference" not in cp and "compare" not in cp
    # in a worker process, the hand-off to it and back is a phase too
    df = fusebench.run(["softmax"], impls=["eager"], shapes="8x8", device="cpu", db=db, timing=FAST,
                       metrics="none", isolate=True)
    stored = json.loads(df.iloc[0].phase_s)
    assert df.iloc[0].status == "ok" and stored["handoff"] >= 0 and stored["timing"] > 0


def test_phases_add_up_repeats():
    ph = Phases()
    for _ in range(3):
        with ph("inputs"):
            pass
    ph.add("inputs", 0.5)
    ph.add("timing", 0.123456)
    assert list(ph.column()) == ["inputs", "timing"]
    assert 0.5 <= ph.column()["inputs"] < 0.51 and ph.column()["timing"] == 0.1235


class _Node:
    pass


def test_free_memory_collects_only_new_garbage_unless_full(monkeypatch):
    state = WorkerState(freeze=True)  # as in a worker process
    gc.collect()
    node = _Node()
    node.me = node  # a cycle: only the collector frees it
    alive = weakref.ref(node)
    state.free_memory("cpu", full=False)  # it is alive now, so it is frozen
    assert gc.get_freeze_count() > 0
    del node
    state.free_memory("cpu", full=False)
    assert alive() is not None  # frozen garbage is not walked: that is what makes it cheap
    state.free_memory("cpu", full=True)
    assert alive() is None
    fresh = _Node()
    fresh.me = fresh
    young = weakref.ref(fresh)
    del fresh
    state.free_memory("cpu", full=False)  # garbage made since the last freeze is collected
    assert young() is None
    gc.unfreeze()


def _one_worker_scheduler(db, events):
    from multiprocessing import Pipe

    from fusebench.runner.request import RunRequest
    from fusebench.runner.scheduler import Scheduler, _Worker
    from fusebench.store import Store

    parent, child = Pipe()
    sentinel, _keep = Pipe()

    class Proc:  # a worker that stays alive; the test plays its side of the pipe
        pid = None
        exitcode = None

        def __init__(self):
            self.sentinel = sentinel.fileno()

        def is_alive(self):
            return True

    store = Store.open(db)
    run_id = store.start_run({"device": "cpu", "device_name": "test"}, {}, {})
    sched = Scheduler(store, run_id, RunRequest(isolate=True),
                      on_cell=lambda c, r: events.append(("stored" if r else "sent", c.impl)))
    cells = [Cell("softmax", "eager", (8, 8), "fp32", "cpu"), Cell("softmax", "inductor", (8, 8), "fp32", "cpu")]
    groups = sched._groups(cells)
    w = _Worker(None, Proc(), parent, ready=True)
    sched._dispatch(w, groups)
    assert child.recv()["impl"] == "eager"
    row = dict(case_name="softmax", impl="eager", shape="8x8", dtype="fp32", requested_dtype="fp32", device="cpu",
               status="ok", seconds=0.01, phase_s={"timing": 0.005})
    return sched, w, groups, child, row, (store, _keep)


def test_the_next_cell_is_sent_before_the_last_is_stored(db):
    events = []
    sched, w, groups, child, row, keep = _one_worker_scheduler(db, events)
    child.send(("done", (row, 0)))
    sched._wait([w], groups)
    assert events == [("sent", "eager"), ("sent", "inductor"), ("stored", "eager")]
    assert child.recv()["impl"] == "inductor" and w.cell.impl == "inductor"
    stored = keep[0].cells(sched.run_id)
    assert json.loads(stored.iloc[0].phase_s)["handoff"] >= 0


def test_a_cell_sent_to_a_gone_worker_goes_back_to_its_group(db):
    events = []
    sched, w, groups, child, row, keep = _one_worker_scheduler(db, events)
    child.send(("done", (row, 0)))
    child.close()  # the worker is gone: sending the next cell fails
    sched._wait([w], groups)
    assert ("stored", "eager") in events and w.cell is None
    assert [c.impl for c in w.group] == ["inductor"]


def test_a_callers_process_is_left_unfrozen_and_keeps_nothing(db):
    gc.unfreeze()
    fusebench.run(["softmax"], impls=["eager"], shapes="8x8", device="cpu", db=db, timing=FAST, metrics="none",
                  isolate=False)
    assert gc.get_freeze_count() == 0
    assert not [o for o in gc.get_objects() if type(o) is CellData and (o.key or o.inputs or o.references)]


@pytest.mark.parametrize("held, walks", [(0, [False, False]), (1 << 30, [False, False, True])])
def test_a_new_case_walks_frozen_objects_again_only_if_the_gpu_still_holds_memory(monkeypatch, held, walks):
    # on a GPU, a case change re-walks the frozen objects (full) only when memory is still held
    fulls = []

    def measure(m):
        m.row["status"] = "ok"

    state = WorkerState()
    state.last_case = "softmax"
    monkeypatch.setattr(cellmod, "_measure", measure)
    monkeypatch.setattr(state, "free_memory", lambda device, full=True: fulls.append(full))
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: held)
    measure_cell(Cell("softmax", "eager", (8, 8), "fp32", "cuda:0"), FAST, state=state)
    measure_cell(Cell("layernorm", "eager", (8, 8), "fp32", "cuda:0"), FAST, state=state)
    assert fulls == walks
