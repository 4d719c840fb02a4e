"""Reports: the HTML report and comparison render from stored rows, every status included, and the
pages are self-contained.  Rows are synthetic (no GPU here), built to cover each family's layout:
a 2-D grid, matmul, attention, conv, and a user case unknown to the registry.
"""
from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import select
import shutil
import subprocess
import time

import pandas as pd
import pytest

from fusebench.report import export, parse_pair, render_compare, render_report
from fusebench.report.export import ExportError
from fusebench.report.grid import place
from fusebench.report.html import case_pairs
from fusebench.report.tables import ratio_frame, summarize
from fusebench.store import Store

ENV = {"device": "cuda", "device_name": "NVIDIA H100 80GB HBM3 (synthetic)", "torch": "2.13.0", "triton": "3.5.0",
       "cuda": "12.8", "driver": "570.86", "python": "3.11.2", "git_commit": "abc1234",
       "clocks": {"sm_mhz": 1980, "mem_mhz": 2619}}
TIMING = {"mode": "cuda-events", "flush_l2": True, "warmup_ms": 25, "rep_ms": 100}
FAILED = ["oom", "skipped", "mismatch", "crashed", "timeout", "error", "unsupported"]


# --------------------------------------------------------------------------------------------
# a synthetic run


def _cell(case, impl, shape, time_us, dtype="fp32", status="ok", reason=None, **metrics):
    row = {"case_name": case, "impl": impl, "shape": shape, "dtype": dtype, "requested_dtype": dtype,
           "device": "cuda", "status": status, "reason": reason}
    if status == "ok" or status == "mismatch":
        row.update(time_us=time_us, wall_time_us=time_us + 12.0 + (25.0 if impl != "eager" else 0.0))
    row.update(metrics)
    return row


def grid_cells(sizes=(256, 1024, 4096, 16384)) -> list[dict]:
    """softmax on a dim0 x dim1 grid with eager, inductor and triton, and every failure status."""
    cells = []
    big = max(sizes)
    for d0 in sizes:
        for d1 in sizes:
            shape = f"{d0}x{d1}"
            eager = 4.0 + d0 * d1 * 8 / 2.0e6  # bytes / (2 TB/s) + launch
            # Inductor wins until rows stop fitting one block: a visible boundary on the grid.
            inductor = eager * (0.55 if d1 <= 4096 else 1.25)
            triton = inductor * 0.9
            common = dict(min_bytes=d0 * d1 * 8, kernels=1)
            for impl, t, extra in (("eager", eager, dict(pct_roofline=60.0 + d1 % 7, traffic_amplification=1.0)),
                                   ("inductor", inductor, dict(pct_roofline=80.0 - d1 % 5,
                                                               kernels=1 if d1 <= 4096 else 2,
                                                               traffic_amplification=1.0 if d1 <= 4096 else 1.5)),
                                   ("triton", triton, dict(pct_roofline=90.0))):
                err = 1e-7 * (1 + d1 / 1024)
                cells.append(_cell("softmax", impl, shape, t, max_rel_err=err, tol_ratio=err / 1e-4,
                                   na=json.dumps({"sass_inst": "ncu not installed"}), **{**common, **extra}))
    # every non-ok status, on the inductor or triton side of the pairs
    statuses = {(f"{big}x{big}", "eager"): ("oom", "CUDA out of memory"),
                (f"{big}x{big}", "inductor"): ("oom", "CUDA out of memory"),
                (f"{big}x{sizes[0]}", "inductor"): ("skipped", "predicted 90 GB > device memory"),
                (f"{sizes[0]}x{big}", "inductor"): ("mismatch", "max error 3e-3 > tolerance"),
                (f"{sizes[1]}x{sizes[1]}", "triton"): ("crashed", "worker died: SIGSEGV"),
                (f"{sizes[1]}x{sizes[2]}", "triton"): ("timeout", "cell took more than 900 s"),
                (f"{sizes[2]}x{sizes[1]}", "triton"): ("error", "CompilationError: out of resources"),
                (f"{sizes[2]}x{sizes[2]}", "triton"): ("unsupported", "row does not fit in shared memory")}
    for cell in cells:
        status = statuses.get((cell["shape"], cell["impl"]))
        if status:
            cell.update(status=status[0], reason=status[1])
            if status[0] == "mismatch":
                cell.update(tol_ratio=30.0, max_rel_err=3e-3)
            else:
                for k in ("time_us", "wall_time_us", "pct_roofline", "max_rel_err", "tol_ratio"):
                    cell.pop(k, None)
    return cells


def family_cells() -> list[dict]:
    """A matmul, attention, conv, a second dtype, and a user case unknown to the registry."""
    cells = []
    for m in (1024, 4096):
        for n in (1024, 4096):
            for k in {n, 512}:  # K = N (the plan's grid) and one K that is not
                t = 2 * m * n * k / 5e8
                for impl, f in (("eager", 1.0), ("inductor", 0.8)):
                    cells.append(_cell("matmul_add", impl, f"{m}x{n}x{k}", t * f, dtype="fp16", tflops=400.0 * f,
                                       pct_roofline=50.0 * f))
    for heads, hd in ((32, 64),):
        for causal in (0, 1):
            for b in (1, 4):
                for s in (512, 2048):
                    shape = f"{b}x{heads}x{s}x{hd}x{causal}"
                    t = b * heads * s * s * hd / 1e8
                    cells.append(_cell("attention", "eager", shape, t, dtype="fp16"))
                    cells.append(_cell("attention", "sdpa-flash", shape, t / 4, dtype="fp16"))
                    if b == 4 and s == 2048:
                        cells[-2].update(status="oom", reason="CUDA out of memory", time_us=None)
    for layer in ("64x56x56x64x3x1", "256x14x14x1024x1x1", "128x56x56x128x3x2"):
        for cl in (0, 1):
            shape = f"32x{layer}x{cl}"
            for impl, f in (("eager", 1.0), ("inductor", 0.7 if cl else 1.1)):
                cells.append(_cell("conv_relu", impl, shape, 100.0 * f, dtype="fp16"))
    for d0 in (512, 2048):
        for d1 in (512, 2048):
            for dtype in ("fp32", "fp16"):
                t = d0 * d1 / 1e5 * (0.5 if dtype == "fp16" else 1.0)
                cells.append(_cell("layernorm", "eager", f"{d0}x{d1}", t, dtype=dtype))
                cells.append(_cell("layernorm", "inductor", f"{d0}x{d1}", t * 0.7, dtype=dtype,
                                   note="fp16 math in fp32" if dtype == "fp16" else None))
    for shape in ("64x128x4", "64x256x4", "128x128x8"):
        for impl, f in (("eager", 1.0), ("inductor", 0.6)):
            cells.append(_cell("my_plugin_case", impl, shape, 50.0 * f))
    cells.append(_cell("my_plugin_case", "eager", "not-a-shape", 10.0))
    return cells


def make_run(store: Store, cells: list[dict], env: dict = ENV) -> int:
    run_id = store.start_run(env, {"cases": sorted({c["case_name"] for c in cells}), "shapes": "grid"}, TIMING)
    for cell in cells:
        store.add_cell(run_id, {k: v for k, v in cell.items() if v is not None})
    store.finish_run(run_id)
    return run_id


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    store = Store.open(str(tmp_path_factory.mktemp("db") / "results.db"))
    run_id = make_run(store, grid_cells() + family_cells())
    yield store, run_id
    store.close()


@pytest.fixture(scope="module")
def report(run, tmp_path_factory):
    store, _ = run
    path = render_report(store, None, str(tmp_path_factory.mktemp("out") / "report.html"))  # None: latest run
    with open(path, encoding="utf-8") as f:
        return path, f.read()


def external_references(html: str) -> list[str]:
    """src/href/url() that would need the network to load."""
    return re.findall(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//[^"'\s>]*|url\(\s*["']?(?:https?:)?//[^)]*""",
                      html, flags=re.I)


# --------------------------------------------------------------------------------------------
# the report


@pytest.mark.slow
def test_report_has_every_case_status_and_default_pair(report):
    _, html = report
    for name in ("softmax", "matmul_add", "attention", "conv_relu", "layernorm", "my_plugin_case"):
        assert f'id="case-{name}"' in html
    for status in FAILED:
        assert status in html
    assert "inductor vs eager" in html and "triton vs inductor" in html
    assert "sdpa-flash vs eager" in html  # attention has no default pair: every impl over eager
    assert "NVIDIA H100 80GB HBM3 (synthetic)" in html and "flush_l2" in html  # environment and timing
    assert "not in the case registry" in html
    assert html.count("data:image/svg+xml;base64,") >= 10


def test_report_is_self_contained(report):
    _, html = report
    assert external_references(html) == []
    assert "<script src" not in html and "<link" not in html


def test_summary_geomean(run):
    store, run_id = run
    cells, _ = place(store.cells(run_id))
    soft = cells[cells["case_name"] == "softmax"]
    frame = ratio_frame(soft[soft["impl"] == "eager"], soft[soft["impl"] == "inductor"], "time_us", "eager", None)
    s = summarize(frame)
    # 16 shapes, 3 not ok on the inductor side (oom, skipped, mismatch); 0.55 on 11, 1.25 on 2 of the rest
    assert (s["n"], s["total"]) == (13, 16)
    assert s["geomean"] == pytest.approx(math.exp((11 * math.log(1 / 0.55) + 2 * math.log(1 / 1.25)) / 13))
    assert s["best"][1] == pytest.approx(1 / 0.55) and s["worst"][1] == pytest.approx(1 / 1.25)
    labels = dict(zip(frame["shape"], frame["label"]))
    assert labels["16384x16384"] == "oom" and labels["16384x256"] == "skipped" and labels["256x16384"] == "mismatch"


def test_pairs_are_choosable(run):
    store, run_id = run
    cells = store.cells(run_id)
    soft, attention = cells[cells["case_name"] == "softmax"], cells[cells["case_name"] == "attention"]
    # every implementation over the baseline, then triton over inductor
    assert case_pairs(soft, None) == [("inductor", "eager"), ("triton", "eager"), ("triton", "inductor")]
    assert case_pairs(soft, None, baseline="inductor") == [("eager", "inductor"), ("triton", "inductor")]
    assert case_pairs(soft, [("triton", "eager"), ("sdpa-flash", "eager")]) == [("triton", "eager")]
    assert case_pairs(attention, None) == [("sdpa-flash", "eager")]
    assert case_pairs(attention, [("inductor", "eager")]) == []


def test_report_of_a_real_cpu_run(tmp_path):
    api = pytest.importorskip("fusebench.api")
    db = str(tmp_path / "cpu.db")
    api.run(["softmax"], impls=["eager"], shapes="64x64,64x128", db=db, isolate=False, metrics="none")
    store = Store.open(db)
    with open(render_report(store, None, str(tmp_path / "cpu.html")), encoding="utf-8") as f:
        html = f.read()
    store.close()
    assert 'id="case-softmax"' in html and external_references(html) == []
    assert "Fewer than two implementations were timed" in html  # eager alone: no pair to draw


@pytest.mark.slow
def test_report_shows_ceilings_as_percent_of_ceiling_not_speedup(tmp_path):
    api = pytest.importorskip("fusebench.api")
    db = str(tmp_path / "cpu.db")
    api.run(["softmax", "matmul_add"], impls=["eager", "memcpy", "torch-mm"], shapes="64x64,64x128", db=db,
            isolate=False, metrics="none")
    store = Store.open(db)
    cells = store.cells(None)
    assert set(cells[cells.case_name == "softmax"].impl) == {"eager", "memcpy"}  # only the ceiling that applies
    assert set(cells[cells.case_name == "matmul_add"].impl) == {"eager", "torch-mm"}
    with open(render_report(store, None, str(tmp_path / "cpu.html")), encoding="utf-8") as f:
        html = f.read()
    store.close()
    assert case_pairs(cells[cells.case_name == "softmax"], None) == []  # a ceiling is not a competitor
    assert "% of ceiling" in html and "eager as a fraction" not in html and "speedup of memcpy" not in html
    from fusebench.report.html import ceiling_table, case_section

    # the ceiling's arithmetic, whatever this machine's load flagged (flags: tests/report/test_flags.py)
    quiet = cells[cells.case_name == "softmax"].assign(under_load=0)
    soft = case_section("softmax", place(quiet)[0], None, None)
    [row] = soft["ceiling_rows"]
    assert (row["impl"], row["ceiling"], row["n"] + row["left_out"]) == ("eager", "memcpy", 2)
    assert any("% of ceiling" == b["title"] for b in soft["metrics"])
    assert "memcpy" in [c.text for r in ceiling_table([{**soft, "anchor": "a"}]).rows for c in r]


def test_ceiling_pairs_are_dropped_for_compute_bound_cases(run):
    # rows stored when memcpy ran on every case: no "fraction of memcpy" for a GEMM
    store, run_id = run
    cells = store.cells(run_id)
    mm = cells[cells["case_name"] == "matmul_add"]
    copies = mm[mm["impl"] == "eager"].assign(impl="memcpy")
    assert case_pairs(pd.concat([mm, copies]), [("inductor", "memcpy")]) == []
    soft = cells[cells["case_name"] == "softmax"]
    assert case_pairs(pd.concat([soft, soft[soft.impl == "eager"].assign(impl="memcpy")]),
                      [("inductor", "memcpy")]) == [("inductor", "memcpy")]


# --------------------------------------------------------------------------------------------
# layouts


def _placed(case, shapes):
    df, layouts = place(pd.DataFrame({"case_name": case, "shape": shapes}))
    return df, layouts.get(case)


def test_layouts_per_family():
    df, layout = _placed("attention", ["1x32x512x64x0", "4x16x2048x128x1"])
    assert (layout.row_title, layout.col_title) == ("batch", "seqlen")
    assert list(df["panel"]) == ["heads=32, head_dim=64, not causal", "heads=16, head_dim=128, causal"]
    df, layout = _placed("matmul_add", ["1024x4096x4096", "1024x4096x512"])
    assert list(df["panel"]) == ["K = N", "K=512"] and list(df["row"]) == ["1024", "1024"]
    df, layout = _placed("conv_relu", ["32x64x56x56x64x3x1x0", "32x64x56x56x64x3x1x1"])
    assert df["row"].nunique() == 1 and list(df["col"]) == ["NCHW", "channels_last"]
    df, layout = _placed("softmax", ["128x65536"])
    assert (df["row"][0], df["col"][0], layout.row_title) == ("128", "65536", "dim0")
    df, layout = _placed("my_plugin_case", ["64x128x4", "not-a-shape"])
    assert list(df["panel"]) == ["dim2=4", ""] and df["col"][1] == "not-a-shape"
    df, layout = _placed("softmax", ["128x256", "128x256x1"])  # a shape of another rank: its own column
    assert list(df["col"]) == ["256", "128x256x1"]


def test_parse_pair():
    assert parse_pair("inductor/eager") == ("inductor", "eager")
    with pytest.raises(ValueError):
        parse_pair("inductor")


# --------------------------------------------------------------------------------------------
# comparison


@pytest.mark.slow
def test_compare_regression_and_new_failures(run, tmp_path):
    store, run_a = run
    cells = grid_cells() + family_cells()
    for c in cells:  # B: everything 10% faster, one cell 50% slower, one cell now out of memory
        if c.get("time_us"):
            c["time_us"] *= 0.9
        if (c["case_name"], c["impl"], c["shape"]) == ("softmax", "inductor", "1024x1024"):
            c["time_us"] = c["time_us"] / 0.9 * 1.5
        if (c["case_name"], c["impl"], c["shape"]) == ("conv_relu", "eager", "32x64x56x56x64x3x1x0"):
            c.update(status="oom", time_us=None)
    other = Store.open(str(tmp_path / "b.db"))
    run_b = make_run(other, cells, {**ENV, "device_name": "NVIDIA H200 (synthetic)"})
    result = render_compare(store, run_a, other, run_b, str(tmp_path / "compare.html"))
    assert result.max_regression_pct == pytest.approx(50.0)
    assert list(result.regressed(10.0)["shape"]) == ["1024x1024"]
    assert list(result.new_failures["shape"]) == ["32x64x56x56x64x3x1x0"]
    assert result.geomean_speedup > 1.0
    with open(result.out_path, encoding="utf-8") as f:
        html = f.read()
    assert external_references(html) == []
    assert "NVIDIA H200 (synthetic)" in html and "50.0%" in html and 'id="case-attention"' in html

    small = make_run(other, [c for c in cells if c["case_name"] == "my_plugin_case"])
    same = render_compare(other, small, other, small, str(tmp_path / "same.html"))
    assert same.max_regression_pct == 0.0 and same.geomean_speedup == pytest.approx(1.0)


# --------------------------------------------------------------------------------------------
# export


def test_export_csv_and_json(run, tmp_path, capsys):
    store, run_id = run
    df = store.cells(run_id)
    export(df, "csv", str(tmp_path / "c.csv"))
    assert len(pd.read_csv(tmp_path / "c.csv")) == len(df)
    export(df.head(3), "json", None)
    records = json.loads(capsys.readouterr().out)
    assert len(records) == 3 and records[0]["na"] == {"sass_inst": "ncu not installed"}
    with pytest.raises(ExportError, match="unknown export format"):
        export(df, "xlsx", str(tmp_path / "x"))


def test_export_parquet(run, tmp_path):
    store, run_id = run
    df = store.cells(run_id)
    if importlib.util.find_spec("pyarrow") is None:
        with pytest.raises(ExportError, match="parquet needs pyarrow"):
            export(df, "parquet", str(tmp_path / "c.parquet"))
        return
    export(df, "parquet", str(tmp_path / "c.parquet"))
    assert len(pd.read_parquet(tmp_path / "c.parquet")) == len(df)


# --------------------------------------------------------------------------------------------
# in a real browser, when one is installed


def chromium_binary() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    try:
        from playwright.sync_api import sync_playwright

        with sync_playwright() as p:
            path = p.chromium.executable_path
        return path if os.path.exists(path) else None
    except Exception:
        return None


class DevTools:
    """The Chrome DevTools protocol over --remote-debugging-pipe: no websocket library needed."""

    def __init__(self, binary: str, profile: str):
        to_chrome, self._w = os.pipe()
        self._r, from_chrome = os.pipe()

        def fds():  # chromium reads commands on fd 3 and writes replies on fd 4
            os.dup2(to_chrome, 3)
            os.dup2(from_chrome, 4)

        self.proc = subprocess.Popen(
            [binary, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
             f"--user-data-dir={profile}", "about:blank"],
            preexec_fn=fds, pass_fds=(3, 4), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_chrome)
        os.close(from_chrome)
        self._buf, self._id, self.events = b"", 0, []

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        return self.wait(lambda m: m.get("id") == self._id)

    def wait(self, match, timeout: float = 20.0) -> dict:
        deadline = time.time() + timeout
        while True:
            while b"\0" in self._buf:
                raw, self._buf = self._buf.split(b"\0", 1)
                msg = json.loads(raw)
                if "method" in msg:
                    self.events.append(msg)
                if match(msg):
                    return msg
            left = deadline - time.time()
            if left <= 0 or not select.select([self._r], [], [], left)[0]:
                raise TimeoutError("no answer from chromium")
            chunk = os.read(self._r, 1 << 16)
            if not chunk:
                raise RuntimeError("chromium closed the pipe")
            self._buf += chunk

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except Exception:
            pass
        self.proc.wait(timeout=10)
        os.close(self._w)
        os.close(self._r)


def browser_problems(binary: str, path: str, profile: str) -> list[str]:
    """Console errors, uncaught exceptions and images that failed to decode, on loading the page."""
    tools = DevTools(binary, profile)
    try:
        target = tools.send("Target.createTarget", {"url": "about:blank"})["result"]["targetId"]
        session = tools.send("Target.attachToTarget", {"targetId": target, "flatten": True})["result"]["sessionId"]
        for domain in ("Runtime", "Log", "Page"):
            tools.send(f"{domain}.enable", session=session)
        tools.send("Page.navigate", {"url": f"file://{path}"}, session=session)
        tools.wait(lambda m: m.get("method") == "Page.loadEventFired")
        broken = tools.send("Runtime.evaluate", {
            "expression": "[...document.images].filter(i => !(i.complete && i.naturalWidth > 0)).length",
            "returnByValue": True}, session=session)["result"]["result"]["value"]
    finally:
        tools.close()
    problems = [f"{broken} image(s) failed to load"] if broken else []
    for e in tools.events:
        p = e.get("params", {})
        if e["method"] == "Runtime.exceptionThrown":
            details = p["exceptionDetails"]
            problems.append(details.get("exception", {}).get("description") or details.get("text", "exception"))
        elif e["method"] == "Runtime.consoleAPICalled" and p.get("type") == "error":
            problems.append(str(p.get("args")))
        elif e["method"] == "Log.entryAdded" and p["entry"].get("level") == "error":
            problems.append(p["entry"].get("text", ""))
    return problems


def test_report_opens_in_headless_chromium_without_errors(report, tmp_path):
    binary = chromium_binary()
    if binary is None:
        pytest.skip("no headless Chromium installed")
    path, _ = report
    assert browser_problems(binary, path, str(tmp_path / "profile")) == []


def test_environment_names_the_commits_of_a_resumed_run():
    from fusebench.report.html import environment

    info = {"id": 3, "status": "done", "git_commit": "aaa1111"}
    one = environment(info, pd.DataFrame({"git_commit": ["aaa1111"] * 3}))
    assert all(k != "cells by commit" for k, _ in one[0]["items"])
    two = dict(environment(info, pd.DataFrame({"git_commit": ["aaa1111", "aaa1111", "bbb2222"]}))[0]["items"])
    assert two["cells by commit"] == "aaa1111: 2, bbb2222: 1"


def test_report_of_several_runs_joins_them(tmp_path):
    """Runs made one case per GPU (then merged) read as one report; a cell measured twice is taken
    from the later run; runs of different timing settings are refused."""
    from fusebench.report.html import joined_runs
    from fusebench.store import StoreError

    store = Store.open(str(tmp_path / "joined.db"))
    first = make_run(store, [_cell("softmax", "eager", "512x512", 10.0), _cell("softmax", "inductor", "512x512", 8.0)])
    second = make_run(store, [_cell("softmax", "inductor", "512x512", 5.0), _cell("layernorm", "eager", "512x512", 9.0)])
    info, cells = joined_runs(store, [first, second])
    assert info["id"] == f"{first}, {second}"
    got = {(r.case_name, r.impl): r.time_us for r in cells.itertuples()}
    assert got == {("softmax", "eager"): 10.0, ("softmax", "inductor"): 5.0, ("layernorm", "eager"): 9.0}
    assert json.loads(info["request"])["cases"] == ["softmax", "layernorm"]
    path = render_report(store, [first, second], str(tmp_path / "r.html"))
    html = open(path, encoding="utf-8").read()
    assert f"runs {first}, {second}" in html and 'id="case-layernorm"' in html
    other = store.start_run(ENV, {"cases": ["softmax"]}, dict(TIMING, flush_mode="evict_last"))
    store.add_cell(other, _cell("softmax", "eager", "512x512", 11.0))
    with pytest.raises(StoreError, match="differ in timing"):
        joined_runs(store, [first, other])
    store.close()


def test_parse_run_ids():
    from fusebench.commands.common import parse_run_ids

    assert parse_run_ids("3") == [3]
    assert parse_run_ids("2,5") == [2, 5]
    assert parse_run_ids("2-4,7,3") == [2, 3, 4, 7]
    for bad in ("x", "4-2", "1-", "-3", "2,,3"):
        with pytest.raises(ValueError, match="bad run id"):
            parse_run_ids(bad)


def test_environment_says_how_an_older_run_flushed():
    from fusebench.report.html import environment

    old = {"id": 1, "timing": json.dumps({"flush_l2": True, "warmup_ms": 25})}
    timing = dict(next(g for g in environment(old) if g["title"] == "timing")["items"])
    assert timing["flush_mode"].startswith("zero")
    new = {"id": 2, "timing": json.dumps({"flush_l2": True, "flush_mode": "evict_last"})}
    assert dict(next(g for g in environment(new) if g["title"] == "timing")["items"])["flush_mode"] == "evict_last"
