"""Compare two runs cell by cell: two devices, two PyTorch versions, two commits.

Run A is the reference and run B the one judged: each heatmap shows time(A) / time(B), so that
above 1 B is faster, as in the run report's speedups.  A cell *regressed* by
(time(B) / time(A) - 1) x 100 percent.  Two runs of one device are compared through their
reference workloads: B's times are divided by the ratio of the runs' reference times, so that a
machine that ran slower as a whole (a busy host, a throttled CPU) is not taken for slower code
(report.judge.normalization); a run whose machine changed speed while it measured is not judged
(`refused`).  A change is *real* only when it is outside the noise -- a bootstrap interval of
time(B) / time(A), resampled from both cells' stored repetitions and widened by the references'
range, excludes 1 and the change exceeds the cells' own spread (report.judge; rows without
repetitions: their q20-q80 ranges do not overlap) -- and when it is at least `min_change` percent.
`CompareResult.real_regressions(PCT)` are the cells `fusebench compare --fail-above PCT` fails on.
Per case, each implementation's speedup over the baseline (default eager) in A and in B.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from fusebench.report import fusion_diff
from fusebench.report import heatmap as hm
from fusebench.report.grid import place
from fusebench.report.judge import NOT_NORMALISED, Normalization, change, normalization
from fusebench.report.html import case_meta, case_order, render_template, status_legend, write
from fusebench.report.tables import (
    OK, PLACE, Cell, Table, csv_data_uri, num, panel_figures, ratio_frame, shape_ratio, speedup_cell, summarize,
)

KEY = ["case_name", "impl", "dtype", "shape"]
ENV_KEYS = ["device_name", "device", "device_count", "torch", "triton", "cuda", "driver", "python",
            "platform", "hostname", "git_commit", "fusebench_version", "started", "status", "timing", "clocks",
            "precision"]
# Below this change (percent) no cell is called a regression or an improvement, however sure.
MIN_CHANGE_PCT = 3.0


@dataclass
class CompareResult:
    """What a comparison found; out_path is the HTML page written."""

    out_path: str
    run_a: int
    run_b: int
    matched: int  # cells timed ok in both runs
    only_a: int  # cells run A has and B lacks
    only_b: int
    geomean_speedup: float | None  # of B over A: geomean of time(A) / time(B); None when nothing matched
    max_regression_pct: float  # largest slow-down of a matched cell, percent; 0.0 when none got slower
    # every matched key: time_a, time_b, status_a, status_b, regression_pct, and the noise interval
    # of time(B) / time(A) (change_lo, change_hi), whether it excludes 1 (real) and how it was found
    cells: pd.DataFrame = field(repr=False)
    new_failures: pd.DataFrame = field(repr=False)  # ok in A, not ok in B
    # cells whose fusion facts (kernels, fused operators, graph breaks) differ: report/fusion_diff.py
    fusion_changes: list = field(default_factory=list, repr=False)
    normalization: Normalization = NOT_NORMALISED  # how B's times were scaled
    refused: str | None = None  # why the runs cannot be judged (the machine changed speed in one)
    notes: list[str] = field(default_factory=list)  # what the reader must know (no reference, ...)
    min_change_pct: float = MIN_CHANGE_PCT
    geomean_as_measured: float | None = None  # geomean_speedup before B's times were normalised
    labels: dict = field(default_factory=dict)  # {"A": {...}, "B": {...}}: run, store, what
    # the rest of the page: each case's section, the runs' environments, cells fixed in B
    sections: list = field(default_factory=list, repr=False)
    context: dict = field(default_factory=dict, repr=False)

    def regressed(self, pct: float) -> pd.DataFrame:
        """Cells that got slower by more than pct percent, noise or not, worst first."""
        slow = self.cells[self.cells["regression_pct"] > pct]
        return slow.sort_values("regression_pct", ascending=False)

    def real_regressions(self, pct: float) -> pd.DataFrame:
        """Cells that got slower by more than pct percent, outside the noise, worst first."""
        slow = self.cells[(self.cells["regression_pct"] > pct) & self.cells["real"].fillna(False).astype(bool)]
        return slow.sort_values("regression_pct", ascending=False)

    @property
    def max_real_regression_pct(self) -> float:
        real = self.cells[self.cells["real"].fillna(False).astype(bool) & (self.cells["regression_pct"] > 0)]
        return float(real["regression_pct"].max()) if len(real) else 0.0


def compare_runs(store_a, run_a: int, store_b, run_b: int, baseline: str = "eager",
                 min_change_pct: float = MIN_CHANGE_PCT, normalize: bool = True) -> CompareResult:
    """Match the cells of run B against run A's (the two may share one store) and judge them."""
    info_a, info_b = store_a.run_info(run_a), store_b.run_info(run_b)
    from fusebench.runner.request import mode_of_run

    mode_a, mode_b = mode_of_run(info_a), mode_of_run(info_b)
    if mode_a != mode_b:  # a backward's time is no regression of a forward's
        raise ValueError(f"run {run_a} measured {mode_a} and run {run_b} {mode_b}: only runs of one mode compare")
    if not min_change_pct >= 0:
        raise ValueError(f"--min-change must be at least 0, got {min_change_pct:g}")
    norm, refused, notes = normalization({**info_a, "id": run_a}, {**info_b, "id": run_b}, min_change_pct / 100,
                                         normalize)
    both, layouts = place(pd.concat([store_a.cells(run_a).assign(side="A"),
                                     store_b.cells(run_b).assign(side="B")], ignore_index=True))
    keys = {side: set(map(tuple, both.loc[both["side"] == side, KEY].values)) for side in ("A", "B")}
    frames = []
    for (case, impl), rows in both.groupby(["case_name", "impl"], sort=False):
        if rows["side"].nunique() < 2:
            continue  # an implementation only one run measured: counted in only_a / only_b, not drawn
        frame = ratio_frame(rows[rows["side"] == "A"], rows[rows["side"] == "B"], "time_us", "A", "B")
        frames.append(frame.assign(case_name=case, impl=impl))
    matched = _with_times(pd.concat(frames, ignore_index=True), both) if frames else _empty()
    matched = matched.rename(columns={"status_t": "status_a"})  # ratio_frame's top side is run A
    matched["raw_ratio"] = matched["ratio"]
    matched["ratio"] = matched["raw_ratio"] * norm.factor  # time(A) / (time(B) / factor)
    matched["regression_pct"] = (1.0 / matched["ratio"] - 1.0) * 100.0
    matched = _with_noise(matched, both, norm, min_change_pct / 100)

    sections = [_case_section(name, matched[matched["case_name"] == name], layouts.get(name),
                              both[both["case_name"] == name], baseline)
                for name in case_order(matched["case_name"])]
    result = _result(matched, "", run_a, run_b, only_a=len(keys["A"] - keys["B"]),
                     only_b=len(keys["B"] - keys["A"]))
    loaded = int(both.get("under_load", pd.Series(dtype=float)).fillna(0).gt(0).sum())
    if loaded:
        notes.append(f"{loaded} of the cells were measured while the CPU was busy (flagged under load): "
                     f"their changes are less certain than their intervals say")
    result.normalization, result.refused, result.notes = norm, refused, notes
    result.fusion_changes = fusion_diff.between(both[both["side"] == "A"], both[both["side"] == "B"])
    result.min_change_pct, result.sections = min_change_pct, sections
    result.labels = {"A": _run_label(store_a, run_a, info_a), "B": _run_label(store_b, run_b, info_b)}
    result.context = dict(environment=_environment_table(info_a, info_b), baseline=baseline,
                          fixed=matched[~matched["status_a"].isin([OK, "missing"]) & (matched["status_b"] == OK)])
    return result


def render_compare(store_a, run_a: int, store_b, run_b: int, out_path: str, baseline: str = "eager",
                   min_change_pct: float = MIN_CHANGE_PCT, normalize: bool = True,
                   result: CompareResult | None = None) -> CompareResult:
    """Write the comparison page of run B against run A (the two may share one store); `result`:
    compare_runs' answer, if already computed."""
    result = result or compare_runs(store_a, run_a, store_b, run_b, baseline, min_change_pct, normalize)
    for section in result.sections:
        _draw(section, result.normalization.applied)
    real = result.cells[result.cells["real"].astype(bool)]
    html = render_template(
        "compare.html.j2", title=f"fusebench comparison — run {run_a} vs run {run_b}",
        a=result.labels["A"], b=result.labels["B"], environment=result.context["environment"], result=result,
        summary=_summary_table(result.sections, result.context["baseline"]), baseline=result.context["baseline"],
        real_regressions=_regression_table(real, limit=15), regressions=_regression_table(result.cells, limit=15),
        new_failures=_status_table(result.new_failures), fixed=_status_table(result.context["fixed"]),
        sections=result.sections, status_legend=status_legend(), fusion=fusion_diff.table(result.fusion_changes),
        csv=csv_data_uri(result.cells.drop(columns=PLACE + ["label"])),
    )
    result.out_path = write(out_path, html)
    return result


def _empty() -> pd.DataFrame:
    return pd.DataFrame(columns=[*KEY, "ratio", "label", "status_t", "status_b", "time_a", "time_b", "panel",
                                 "row", "col", "panel_key", "row_key", "col_key", "change_lo", "change_hi", "real",
                                 "change_method"])


def _with_noise(frame: pd.DataFrame, both: pd.DataFrame, norm: Normalization = NOT_NORMALISED,
                min_change: float = 0.0) -> pd.DataFrame:
    """Add each matched cell's noise interval of time(B) / time(A), normalised, and whether the
    change is real."""
    rows = {side: {tuple(r[k] for k in KEY): r for r in both[both["side"] == side].to_dict("records")}
            for side in ("A", "B")}
    lo, hi, real, method = [], [], [], []
    for key in map(tuple, frame[KEY].values):
        a, b = rows["A"].get(key), rows["B"].get(key)
        c = change(a, b) if a is not None and b is not None and a.get("status") == OK and b.get("status") == OK else None
        c = c.normalised(norm, min_change) if c is not None else None
        lo.append(c.lo if c else float("nan"))
        hi.append(c.hi if c else float("nan"))
        real.append(bool(c and c.real))
        method.append(c.method if c else None)
    return frame.assign(change_lo=lo, change_hi=hi, real=real, change_method=method)


def _with_times(frame: pd.DataFrame, both: pd.DataFrame) -> pd.DataFrame:
    """Add each side's time (µs) to the matched frame, for the tables."""
    times = both.pivot_table(index=KEY, columns="side", values="time_us", aggfunc="first")
    times = times.reindex(columns=["A", "B"]).rename(columns={"A": "time_a", "B": "time_b"}).reset_index()
    return frame.merge(times, on=KEY, how="left")


def _result(cells: pd.DataFrame, out_path: str, run_a: int, run_b: int, only_a: int, only_b: int) -> CompareResult:
    timed = cells[cells["ratio"] > 0]
    summary = summarize(timed) if len(timed) else {"geomean": None}
    worst = timed["regression_pct"].max() if len(timed) else 0.0
    raw = summarize(timed, "raw_ratio")["geomean"] if len(timed) and "raw_ratio" in timed else summary["geomean"]
    return CompareResult(
        out_path=out_path, run_a=run_a, run_b=run_b, matched=len(timed), only_a=only_a, only_b=only_b,
        geomean_speedup=summary["geomean"], max_regression_pct=max(0.0, float(worst)),
        cells=cells, new_failures=cells[(cells["status_a"] == OK) & ~cells["status_b"].isin([OK, "missing"])],
        geomean_as_measured=raw,
    )


# --------------------------------------------------------------------------------------------
# page parts


def _run_label(store, run_id: int, info: dict) -> dict:
    what = " · ".join(str(x) for x in (info.get("device_name") or info.get("device"),
                                        info.get("torch") and f"torch {info['torch']}", info.get("started")) if x)
    return {"run": run_id, "db": store.path, "what": what}


def _environment_table(info_a: dict, info_b: dict) -> Table:
    """The two runs' environments side by side; differing fields are highlighted."""
    table = Table(["", "A", "B"])
    for key in ENV_KEYS:
        va, vb = info_a.get(key), info_b.get(key)
        if va in (None, "") and vb in (None, ""):
            continue
        style = "background:#fff4cf" if va != vb else ""
        table.add(key, Cell(str(va if va is not None else "—"), style=style),
                  Cell(str(vb if vb is not None else "—"), style=style))
    return table


def _speedups(cells: pd.DataFrame, impl: str, baseline: str, dtype: str) -> dict:
    """Geomean speedup of impl over the baseline in run A and in run B (None where not timed)."""
    out = {}
    for side in ("A", "B"):
        mine = cells[(cells["side"] == side) & (cells["dtype"] == dtype)]
        if impl == baseline or not (mine["impl"] == baseline).any():
            out[side] = None
            continue
        frame = ratio_frame(mine[mine["impl"] == baseline], mine[mine["impl"] == impl], "time_us", baseline, None)
        out[side] = summarize(frame)["geomean"]
    return out


def _case_section(name: str, rows: pd.DataFrame, layout, cells: pd.DataFrame | None = None,
                  baseline: str = "eager") -> dict:
    """A case's part of the comparison; its heatmaps are drawn by _draw, for the page only."""
    impls = []
    for impl in dict.fromkeys(rows["impl"]):
        mine = rows[rows["impl"] == impl]
        impls.append({
            "impl": impl,
            "by_dtype": [{"dtype": d, **summarize(mine[mine["dtype"] == d]),
                          "changed": _status_changes(mine[mine["dtype"] == d]),
                          "real": int(mine.loc[mine["dtype"] == d, "real"].astype(bool).sum()),
                          "speedup": _speedups(cells, impl, baseline, d) if cells is not None else {"A": None, "B": None}}
                         for d in dict.fromkeys(mine["dtype"])],
            "figures": [], "_draw": (mine, layout),
        })
    return {"name": name, "anchor": f"case-{name}", **case_meta(name), "impls": impls,
            "regressions": _regression_table(rows, limit=8)}


def _draw(section: dict, normalised: bool) -> None:
    """The heatmaps of time(A) / time(B) of a case's implementations."""
    what = "time(A) / time(B)" + (", B normalised" if normalised else "")
    for i in section["impls"]:
        mine, layout = i["_draw"]
        i["figures"] = panel_figures(mine, "ratio", "label", layout, hm.RUN_RATIO,
                                     f"{section['name']} · {i['impl']} · {what}", "time(A) / time(B)\n> 1: B faster")


def _status_changes(frame: pd.DataFrame) -> str:
    changed = frame[(frame["status_a"] != frame["status_b"])
                    & ~frame["status_a"].eq("missing") & ~frame["status_b"].eq("missing")]
    pairs = changed.groupby(["status_a", "status_b"]).size()
    return " · ".join(f"{a} → {b}: {n}" for (a, b), n in pairs.items())


def _summary_table(sections: list[dict], baseline: str = "eager") -> Table:
    table = Table(["case", "implementation", "dtype", "B over A (geomean)", "shapes compared",
                   "changes outside the noise", f"speedup over {baseline}: A → B",
                   "best shape", "worst shape", "status changes A → B"])
    table.numeric = {3, 4, 5}
    for s in sections:
        for i in s["impls"]:
            for d in i["by_dtype"]:
                sa, sb = d["speedup"]["A"], d["speedup"]["B"]
                speed = "—" if sa is None and sb is None else \
                    f"{hm.fmt_ratio(sa) if sa else '—'}× → {hm.fmt_ratio(sb) if sb else '—'}×"
                table.add(Cell(s["name"], href=f"#{s['anchor']}"), i["impl"], d["dtype"],
                          speedup_cell(d["geomean"], span=1.25), f"{d['n']} / {d['total']}", d["real"],
                          speed, shape_ratio(d["best"]), shape_ratio(d["worst"]), d["changed"] or "—")
    return table


def _regression_table(cells: pd.DataFrame, limit: int) -> Table:
    slow = cells[cells["regression_pct"] > 0].sort_values("regression_pct", ascending=False).head(limit)
    table = Table(["case", "implementation", "dtype", "shape", "time A (µs)", "time B (µs)", "slower by",
                   "noise interval of B / A", "outside the noise"])
    table.numeric = {4, 5, 6}
    for _, r in slow.iterrows():
        interval = (f"{r['change_lo']:.3f} – {r['change_hi']:.3f} ({r['change_method']})"
                    if "change_lo" in r and pd.notna(r["change_lo"]) else "—")
        table.add(r["case_name"], r["impl"], r["dtype"], r["shape"], num(r.get("time_a")), num(r.get("time_b")),
                  speedup_cell(r["ratio"], span=1.25, text=f"{r['regression_pct']:.1f}%"), interval,
                  "yes" if r.get("real") else "no: within the noise")
    return table


def _status_table(cells: pd.DataFrame) -> Table:
    table = Table(["case", "implementation", "dtype", "shape", "A", "B"])
    for _, r in cells.iterrows():
        table.add(r["case_name"], r["impl"], r["dtype"], r["shape"], r["status_a"], r["status_b"])
    return table
