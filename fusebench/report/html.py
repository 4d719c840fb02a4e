"""The run report: one self-contained HTML page (no network needed to view it).

At the top, a summary per case and pair of implementations (geometric-mean speedup over the
baseline, best and worst shape, launch-bound shapes), each implementation's % of the case's
ceiling, and the run's environment.  Then per case: heatmaps of the speedup of one implementation
over another across the shape grid, % of the ceiling, % of roofline, the spread of the timings,
kernels launched, traffic amplification and accuracy where they were measured, a table per
implementation, the cells too noisy to trust, the flagged cells, and why cells failed.

Flagged cells -- timed while the CPU was busy (`under_load`), or above their ceiling by more than a
ceiling allows (report.judge.beyond_ceiling) -- are marked `*` on the maps and left out of every
headline figure (geometric means, best and worst shapes, % of ceiling): a headline is never built
from a disturbed measurement.  Mismatched cells are timed but never compared.
"""
from __future__ import annotations

import json
import os
from collections import Counter

import jinja2
import pandas as pd

from fusebench.impls.ceiling import ceiling_for
from fusebench.measure.timing import NOISY_SPREAD
from fusebench.report import heatmap as hm
from fusebench.report.flags import FLAG_LEGEND, FLAG_MARK, flag_counts, flagged_table, with_flags
from fusebench.report.grid import Layout, place
from fusebench.report.judge import add_ceiling_pct, cell_spread, launch_bound
from fusebench.report.tables import (
    OK, Cell, Table, csv_data_uri, decode_json, num, panel_figures, pills_cell, ratio_frame, shape_ratio,
    speedup_cell, summarize,
)

# Drawn besides every implementation over the baseline, where both sides were timed.
EXTRA_PAIRS = [("triton", "inductor")]
CEILINGS = ("memcpy", "torch-mm")
# Baselines that are ceilings timed in the same run (fusebench.impls.ceiling), not implementations:
# a pair asked for against one is read as a fraction of the ceiling, not as a speedup.
CEILING_LEGENDS = {
    "memcpy": "fraction of a same-size copy = time(memcpy) / time({impl})\n"
              "memcpy: dst.copy_(src) moving the case's minimum bytes, same run",
    "torch-mm": "fraction of torch.mm = time(torch-mm) / time({impl})\ntorch-mm: the GEMM without the epilogue, same run",
}
FAILED = ["mismatch", "error", "crashed", "oom", "timeout", "skipped", "unsupported"]


# Per-implementation metrics drawn as heatmaps: (column, title, scale, colour-bar label, statuses
# whose value is still shown).  A wrong answer's error is exactly what the accuracy map is for.
# `pct_of_ceiling` and `spread_pct` are computed from the rows when the report is made.
CEILING_PCT = hm.Scale("viridis", lambda v: f"{v:.0f}", vmin=0.0, vmax=100.0)
SPREAD_PCT = hm.Scale("Oranges", lambda v: f"{v:.0f}" if v >= 1 else f"{v:.1f}", vmin=0.0)
METRICS = [
    ("pct_of_ceiling", "% of ceiling", CEILING_PCT,
     "% of the case's ceiling timed in the same run = time(ceiling) / time(impl)\n"
     "memory-bound cases: a copy of the minimum bytes (the goal is 100%); GEMM cases: torch.mm", {OK}),
    ("pct_roofline", "% of roofline", hm.PERCENT, "% of the roofline (ceilings measured on this device)", {OK}),
    ("kernels", "kernels launched per call", hm.COUNT, "kernels per call", {OK, "mismatch"}),
    ("traffic_amplification", "traffic amplification", hm.AMPLIFICATION,
     "DRAM bytes moved / minimum bytes (1 = each byte once)", {OK, "mismatch"}),
    ("tol_ratio", "accuracy: max error / tolerance", hm.TOLERANCE, "max error / tolerance (≤ 1 passes)",
     {OK, "mismatch"}),
    ("spread_pct", "spread of the timings", SPREAD_PCT,
     f"IQR / median of the repetitions, % (above {NOISY_SPREAD:.0%}: too noisy to trust)", {OK}),
]
# Drawn only where tol_ratio is not stored.
FALLBACK_ACCURACY = ("max_rel_err", "accuracy: max relative error", hm.ERROR,
                     "max relative error vs float64", {OK, "mismatch"})
# An implementation gets an accuracy map only where some error comes within this fraction of its
# tolerance (or beyond): maps of errors far below tolerance would be most of a large report.
ACCURACY_MAP_ABOVE = 0.1
# Metrics drawn even when one value covers the whole grid (the spec asks for roofline per impl).
ALWAYS_DRAW = {"pct_roofline", "pct_of_ceiling"}


def render_report(store, run_id: int | list[int] | None, out_path: str,
                  pairs: list[tuple[str, str]] | None = None, baseline: str = "eager") -> str:
    """Write the HTML report of one run, or of several runs read as one, to out_path and return the
    path written.

    pairs: (implementation, baseline) pairs; each heatmap shows time(baseline) / time(impl), the
    speedup of the implementation.  Default: every implementation (not a ceiling) over `baseline`,
    and triton over inductor, where both ran.  run_id None means the store's latest run; a list joins runs made on one device with
    one software stack and timing (e.g. one case per GPU, joined with `fusebench merge`), a cell
    measured in several of them taken from the last.
    """
    run_ids = [store.latest_run()] if run_id is None else [run_id] if isinstance(run_id, int) else list(run_id)
    info, stored = joined_runs(store, run_ids)
    cells, layouts = place(stored)
    sections = [case_section(name, cells[cells["case_name"] == name], layouts.get(name), pairs, baseline)
                for name in case_order(cells["case_name"])]
    label = f"run {run_ids[0]}" if len(run_ids) == 1 else f"runs {info['id']}"
    from fusebench.runner.modes import mode_label
    from fusebench.runner.request import mode_of_run

    label += mode_label(mode_of_run(info))
    html = render_template(
        "report.html.j2",
        title=f"fusebench report — {label}" + (f" · {info['device_name']}" if info.get("device_name") else ""),
        heading=f"fusebench report — {label}", runs_label=label, runs_count=len(run_ids),
        csv_name=f"fusebench-run-{'-'.join(map(str, run_ids))}.csv", info=info, environment=environment(info, stored),
        summary=summary_table(sections), ceiling_summary=ceiling_table(sections), baseline=baseline,
        noisy_spread=f"{NOISY_SPREAD:.0%}", sections=sections, status_legend=status_legend(),
        warnings=_load_warnings(store, run_ids, stored),
        db=store.path, all_csv=csv_data_uri(stored),
    )
    return write(out_path, html)


def _load_warnings(store, run_ids: list[int], cells: pd.DataFrame) -> list[str]:
    """The warnings about the machine's load while the runs measured (measure.load.run_warnings)."""
    from fusebench.measure.load import run_warnings

    out: list[str] = []
    for rid in run_ids:
        for line in run_warnings(store.run_info(rid).get("load"), cells[cells["run_id"] == rid]):
            if line not in out:
                out.append(line if len(run_ids) == 1 else f"run {rid}: {line}")
    return out


def _joined_requests(requests: list[dict]) -> dict:
    """One request for runs read as one: the cases and implementations of all, the other settings
    where all runs agree, else "differ between runs"."""
    out: dict = {}
    for key in dict.fromkeys(k for r in requests for k in r):
        values = [r.get(key) for r in requests]
        if key in ("cases", "impls") and all(isinstance(v, list) for v in values):
            out[key] = list(dict.fromkeys(x for v in values for x in v))
        elif all(v == values[0] for v in values):
            out[key] = values[0]
        else:
            out[key] = "differ between runs"
    return out


# What must be equal for runs to be reported as one.
SAME_ACROSS_RUNS = ("device_name", "torch", "triton", "cuda", "timing")


def joined_runs(store, run_ids: list[int]) -> tuple[dict, pd.DataFrame]:
    """(run info, cells) of `run_ids` read as one run.  Raises StoreError if the runs differ in
    device, software or timing settings (compare them instead), or if a run is missing."""
    from fusebench.store import StoreError

    infos = [store.run_info(r) for r in run_ids]
    if len(infos) == 1:
        return infos[0], store.cells(run_ids[0])
    for key in SAME_ACROSS_RUNS:
        values = {str(i.get(key)) for i in infos}
        if len(values) > 1:
            raise StoreError(f"runs {', '.join(map(str, run_ids))} differ in {key} ({' / '.join(sorted(values))}): "
                             f"report them one by one, or `fusebench compare` them")
    info = dict(infos[0])
    info["id"] = ", ".join(str(r) for r in run_ids)
    info["started"] = min(str(i.get("started") or "") for i in infos)
    info["finished"] = max(str(i.get("finished") or "") for i in infos)
    for key in ("status", "git_commit"):
        info[key] = " | ".join(dict.fromkeys(str(i.get(key)) for i in infos if i.get(key)))
    info["request"] = json.dumps(_joined_requests([decode_json(i.get("request")) for i in infos]))
    frames = [store.cells(r) for r in run_ids]
    cells = pd.concat(frames, ignore_index=True)
    order = {r: n for n, r in enumerate(run_ids)}
    cells = (cells.assign(_order=cells["run_id"].map(order)).sort_values(["_order", "id"])
             .drop_duplicates(["case_name", "impl", "shape", "dtype"], keep="last").drop(columns="_order"))
    return info, cells.reset_index(drop=True)


# --------------------------------------------------------------------------------------------
# the page


def render_template(name: str, **context) -> str:
    env = jinja2.Environment(loader=jinja2.PackageLoader("fusebench.report", "templates"),
                             autoescape=jinja2.select_autoescape(["html", "j2"]),
                             trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined)
    env.filters["ratio"] = hm.fmt_ratio
    return env.get_template(name).render(**context)


def write(out_path: str, html: str) -> str:
    out_path = os.path.abspath(out_path)
    with open(out_path, "w", encoding="utf-8") as f:
        f.write(html)
    return out_path


def case_order(names: pd.Series) -> list[str]:
    """The registry's order (the specification's) for known cases, then the others as they came."""
    present = list(dict.fromkeys(names))
    try:
        from fusebench.cases import all_cases

        known = [c.name for c in all_cases()]
    except Exception:
        known = []
    return [n for n in known if n in present] + [n for n in present if n not in known]


def case_meta(name: str) -> dict:
    try:
        from fusebench.cases import get_case

        case = get_case(name)
        return {"family": case.family, "description": case.description, "known": True}
    except Exception:
        return {"family": "user", "description": "not in the case registry: laid out from the stored rows",
                "known": False}


def environment(info: dict, cells=None) -> list[dict]:
    """The run's identity, software and device, and its timing settings, as titled key-value lists.

    With the run's `cells`: when they were measured by more than one commit (a run resumed after
    a change), the commits and their cell counts."""
    ident = ["id", "status", "started", "finished", "git_commit", "fusebench_version", "hostname"]
    software = ["torch", "triton", "cuda", "driver", "python", "platform"]
    device = ["device", "device_name", "device_count"]
    groups = [("run", ident), ("device", device), ("software", software)]
    out = [{"title": t, "items": [(k, info.get(k)) for k in keys if info.get(k) not in (None, "")]}
           for t, keys in groups]
    if cells is not None and "git_commit" in cells and cells["git_commit"].nunique() > 1:
        counts = cells["git_commit"].value_counts()
        out[0]["items"].append(("cells by commit", ", ".join(f"{c}: {n}" for c, n in counts.items())))
    reference = _reference_items(info.get("reference"))
    if reference:
        out.append({"title": "reference workload (µs, median)", "items": reference})
    for title, key in (("clocks", "clocks"), ("timing", "timing"), ("precision", "precision"), ("request", "request")):
        items = decode_json(info.get(key))
        if key == "timing" and items.get("flush_l2") and "flush_mode" not in items:
            items["flush_mode"] = "zero (not recorded: runs before it was, flushed with ordinary stores)"
        if key == "timing" and items.get("flush_l2") and "warm_call_max_bytes" not in items:
            items["warm_call_max_bytes"] = "0 (not recorded: runs before it was had no warm call)"
        if key == "timing" and items.get("warm_call_max_bytes") and "warm_call_discards" not in items:
            items["warm_call_discards"] = "False (not recorded: runs before it was kept the warm call's outputs in L2)"
        out.append({"title": title, "items": [(k, _plain(v)) for k, v in items.items() if v not in (None, "", [])]})
    return [g for g in out if g["items"]]


def _reference_items(text) -> list[tuple[str, str]]:
    """The reference workload's medians at each sample (measure/reference.py), or why it is missing."""
    from fusebench.measure.reference import WORKLOADS, load_record

    record = load_record(text)
    if record is None:
        why = decode_json(text).get("not_available")
        return [("not available", str(why))] if why else []
    items = [(w, str(record.get("workloads", {}).get(w, ""))) for w in WORKLOADS]
    for s in record["samples"]:
        items.append((f"{s.get('at')} ({s.get('time', '')})",
                      ", ".join(f"{w} {s[w]['time_us']:,.1f} ±{100 * (s[w].get('time_spread') or 0):.0f}%"
                                for w in WORKLOADS)))
    return items


def _plain(v) -> str:
    if isinstance(v, (list, tuple)):
        return ", ".join(str(x) for x in v) if len(v) <= 12 else f"{', '.join(str(x) for x in v[:12])} … ({len(v)})"
    return str(v)


def status_legend() -> list[dict]:
    return [{"status": s, "fill": hm.STATUS_STYLE[s][0], "hatch": bool(hm.STATUS_STYLE[s][1])}
            for s in (*FAILED, "missing")]


# --------------------------------------------------------------------------------------------
# one case


def case_section(name: str, rows: pd.DataFrame, layout: Layout | None, pairs, baseline: str = "eager") -> dict:
    meta = case_meta(name)
    ceiling = ceiling_for(name)
    rows = rows.assign(pct_of_ceiling=add_ceiling_pct(rows, ceiling),
                       spread_pct=[None if s is None else 100.0 * s for s in map(cell_spread, rows.to_dict("records"))])
    rows["spread_pct"] = rows["spread_pct"].astype(float)
    rows = with_flags(rows, ceiling)
    impls = list(dict.fromkeys(rows["impl"]))
    chosen = case_pairs(rows, pairs, baseline)
    return {
        "name": name, "anchor": f"case-{name}", **meta,
        "dtypes": list(dict.fromkeys(rows["dtype"])), "impls": impls,
        "axes": f"{layout.row_title} × {layout.col_title}" if layout and layout.row_title else "",
        "layout_note": layout.note if layout else "",
        "statuses": dict(Counter(rows["status"])),
        "substituted": _substituted(rows),
        "pairs": [pair_block(rows, impl, base, layout) for impl, base in chosen],
        "unpaired": _unpaired_note(rows, impls, pairs, chosen),
        "ceiling": ceiling if ceiling in set(rows["impl"]) else None,
        "ceiling_rows": _ceiling_rows(rows, ceiling),
        "noisy": noisy_table(rows),
        "flagged": flagged_table(rows),
        "flag_counts": flag_counts(rows),
        "metrics": metric_blocks(rows, layout),
        "impl_table": impl_table(rows),
        "failures": failure_table(rows),
        "not_available": not_available_table(rows),
        "notes": note_table(rows),
    }


def _substituted(rows: pd.DataFrame) -> list[str]:
    """Where the dtype that ran differs from the one asked for (fp16 -> fp32 on the CPU, say)."""
    if "requested_dtype" not in rows:
        return []
    asked = rows["requested_dtype"].fillna(rows["dtype"])
    moved = Counter(zip(asked[asked != rows["dtype"]], rows.loc[asked != rows["dtype"], "dtype"]))
    return [f"asked for {a}, ran {b}: {n} cells" for (a, b), n in moved.items()]


def timed_impls(rows: pd.DataFrame) -> set[str]:
    """Implementations with at least one timed cell in this case."""
    return set(rows.loc[rows["time_us"].notna(), "impl"])


def case_pairs(rows: pd.DataFrame, pairs, baseline: str = "eager") -> list[tuple[str, str]]:
    """The pairs to draw for a case: those asked for whose sides both ran here, or by default every
    timed implementation over the baseline (eager unless asked; the first timed implementation
    where the baseline was not timed), then triton over inductor.

    Ceilings are never given a speedup: they are drawn as "% of ceiling" instead.  A pair asked for
    against a ceiling that is not this case's (memcpy on a GEMM, in rows stored before ceilings
    were planned only where they apply) is left out."""
    timed = timed_impls(rows)
    case = rows["case_name"].iloc[0] if len(rows) else ""
    if pairs is not None:
        return [(a, b) for a, b in pairs if a in timed and b in timed and a != b
                and (b not in CEILINGS or ceiling_for(case) == b) and a not in CEILINGS]
    order = [i for i in dict.fromkeys(rows["impl"]) if i in timed and i not in CEILINGS]
    if len(order) < 2:
        return []
    base = baseline if baseline in order else order[0]
    chosen = [(i, base) for i in order if i != base]
    chosen += [(a, b) for a, b in EXTRA_PAIRS if a in order and b in order and b != base and (a, b) not in chosen]
    return chosen


def _unpaired_note(rows, impls, pairs, chosen) -> str:
    if chosen:
        return ""
    timed = sorted(timed_impls(rows))
    if pairs is not None:
        asked = ", ".join(f"{a}/{b}" for a, b in pairs)
        return f"None of the pairs asked for ({asked}) has both sides timed in this case; timed: {', '.join(timed) or 'none'}."
    return f"Fewer than two implementations were timed here ({', '.join(timed) or 'none'}): no speedup to draw."


def pair_block(rows: pd.DataFrame, impl: str, base: str, layout: Layout | None) -> dict:
    """Heatmaps and numbers of the speedup of impl over base (time(base) / time(impl))."""
    frame = ratio_frame(rows[rows["impl"] == base], rows[rows["impl"] == impl], "time_us", base, None)
    flagged = rows[rows["impl"].isin([impl, base]) & rows["flagged"]]
    keys = set(zip(flagged["dtype"], flagged["shape"]))
    frame["mark"] = [FLAG_MARK if (d, sh) in keys and r > 0 else None
                     for d, sh, r in zip(frame["dtype"], frame["shape"], frame["ratio"])]
    # the headline: shapes whose two cells are both unflagged
    headline = frame.assign(ratio=frame["ratio"].where(frame["mark"].isna()))
    if base in CEILING_LEGENDS:  # a ceiling timed in the same run: the ratio is a fraction of it
        title = heading = f"{impl} as a fraction of {base}"
        legend = CEILING_LEGENDS[base].format(impl=impl)
        subtitle = f"time({base}) / time({impl}): 1 = at the ceiling timed in the same run"
    else:
        title, heading = f"{impl} vs {base}", f"speedup of {impl} over {base}"
        legend = f"speedup = time({base}) / time({impl})\n> 1: {impl} faster"
        subtitle = f"{heading} = time({base}) / time({impl}); blue: {impl} faster, red: slower"
    block = {
        "impl": impl, "base": base, "title": title, "subtitle": subtitle,
        "figures": panel_figures(frame, "ratio", "label", layout, hm.SPEEDUP,
                                 f"{rows['case_name'].iloc[0]} · {heading}",
                                 legend + (FLAG_LEGEND if frame["mark"].notna().any() else ""), mark="mark"),
        "by_dtype": [], "wall_figures": [], "launch_bound": launch_bound_shapes(rows, impl, base),
    }
    wall = ratio_frame(rows[rows["impl"] == base], rows[rows["impl"] == impl], "wall_time_us", base, None)
    wall["ratio"] = wall["ratio"].where([(d, sh) not in keys for d, sh in zip(wall["dtype"], wall["shape"])])
    for dtype in dict.fromkeys(frame["dtype"]):
        mine = headline[headline["dtype"] == dtype]
        block["by_dtype"].append({"dtype": dtype, "gpu": summarize(mine),
                                  "wall": summarize(wall[wall["dtype"] == dtype]),
                                  "flagged": int(frame.loc[frame["dtype"] == dtype, "mark"].notna().sum()),
                                  "failed": _failed_counts(frame[frame["dtype"] == dtype])})
    # Host time per call tells a different story where wrappers and guards cost more than the
    # kernels save (the plan's finding); drawn when measured, folded away by default.
    if wall["ratio"].notna().any():
        block["wall_figures"] = panel_figures(
            wall, "ratio", "label", layout, hm.SPEEDUP,
            f"{rows['case_name'].iloc[0]} · wall-time speedup of {impl} over {base}",
            f"wall-time speedup = wall({base}) / wall({impl})\n> 1: {impl} faster")
    return block


def launch_bound_shapes(rows: pd.DataFrame, impl: str, base: str) -> list[str]:
    """Shapes (and dtypes) where impl is faster than base on the device but slower from Python."""
    mine = rows[rows["impl"] == impl].set_index(["dtype", "shape"])
    theirs = rows[rows["impl"] == base].set_index(["dtype", "shape"])
    out = []
    for key in mine.index.intersection(theirs.index):
        a, b = mine.loc[key], theirs.loc[key]
        if isinstance(a, pd.DataFrame) or isinstance(b, pd.DataFrame):
            continue  # a duplicated key (joined runs keep one; rows passed in directly may not)
        if a["status"] == OK and b["status"] == OK and launch_bound(a.to_dict(), b.to_dict()):
            out.append(f"{key[1]} {key[0]}" if len(set(rows["dtype"])) > 1 else str(key[1]))
    return out


def _failed_counts(frame: pd.DataFrame) -> dict:
    return dict(Counter(frame["label"].dropna()).most_common())


def metric_blocks(rows: pd.DataFrame, layout: Layout | None) -> list[dict]:
    """Per metric, a heatmap per implementation where it was measured and varies over shapes."""
    metrics = [m for m in METRICS if m[0] in rows]
    if not _measured(rows, "tol_ratio") and _measured(rows, "max_rel_err"):
        metrics.append(FALLBACK_ACCURACY)
    blocks = []
    for column, title, scale, legend, shown in metrics:
        accuracy = column in ("tol_ratio", "max_rel_err")
        figures = []
        for impl in dict.fromkeys(rows["impl"]):
            mine = rows[rows["impl"] == impl]
            measured = mine[column].dropna()
            if measured.empty or (column not in ALWAYS_DRAW and measured.nunique() < 2):
                continue  # not measured, or one value for the whole grid: the table says it
            if column == "tol_ratio" and measured.max() < ACCURACY_MAP_ABOVE:
                continue  # far within tolerance everywhere: the table's worst value says enough
            frame = mine.assign(label=mine["status"].where(~mine["status"].isin(shown)))
            marked = column in ("pct_of_ceiling", "pct_roofline") and frame["mark"].notna().any()
            figures += panel_figures(frame, column, "label", layout, scale,
                                     f"{rows['case_name'].iloc[0]} · {impl} · {title}",
                                     legend + (FLAG_LEGEND if marked else ""), mark="mark" if marked else None)
        if figures:
            # Accuracy maps are folded away unless some answer was wrong: then they are the news.
            wrong = (rows["status"] == "mismatch").any()
            # The spread maps are folded away unless some cell is too noisy to trust.
            noisy = column != "spread_pct" or bool((rows[column] > 100 * NOISY_SPREAD).any())
            blocks.append({"title": title, "figures": figures, "column": column,
                           "open": (not accuracy or wrong) and noisy})
    return blocks


def _measured(rows: pd.DataFrame, column: str) -> bool:
    return column in rows and rows[column].notna().any()


# --------------------------------------------------------------------------------------------
# tables of one case


def impl_table(rows: pd.DataFrame) -> Table:
    """One line per implementation and dtype: outcomes, median time and the other metrics."""
    g = rows.groupby(["impl", "dtype"], sort=False)
    columns = [
        ("time µs median", "time_us", lambda s: num(s.median())),
        ("spread % median · max", "spread_pct", lambda s: f"{s.median():.1f} · {s.max():.1f}"),
        ("% of ceiling median", "pct_of_ceiling", lambda s: f"{s.median():.0f}"),
        ("wall µs median", "wall_time_us", lambda s: num(s.median())),
        ("GB/s median", "gbps", lambda s: num(s.median())),
        ("TFLOP/s median", "tflops", lambda s: num(s.median())),
        ("% roofline median · max", "pct_roofline", lambda s: f"{s.median():.0f} · {s.max():.0f}"),
        ("kernels", "kernels", _span),
        ("traffic ampl. median · max", "traffic_amplification", lambda s: f"{s.median():.2f} · {s.max():.2f}"),
        ("error / tolerance worst", "tol_ratio", lambda s: num(s.max())),
        ("max rel. error worst", "max_rel_err", lambda s: num(s.max())),
        ("compile cold s median", "compile_cold_s", lambda s: num(s.median())),
        ("peak mem MiB max", "peak_mem_bytes", lambda s: num(s.max() / 2**20)),
    ]
    present = [(h, c, f) for h, c, f in columns if c in rows and rows[c].notna().any()]
    table = Table(["implementation", "dtype", "cells", "ok", "not ok", "flags"] + [h for h, _, _ in present])
    table.numeric = {2, 3} | set(range(6, len(table.columns)))
    for (impl, dtype), part in g:
        failed = Counter(part.loc[part["status"] != OK, "status"])
        # a mismatched cell's time is stored beside its verdict, never in a median with right answers;
        # neither is a flagged cell's
        good = part[(part["status"] == OK) & ~part["flagged"]]
        figures = [f(src[c].dropna()) if src[c].notna().any() else "—"
                   for _, c, f in present for src in [part if c in ("tol_ratio", "max_rel_err", "kernels") else good]]
        table.add(f"{impl} (ceiling)" if impl in CEILINGS else impl, dtype, len(part),
                  int((part["status"] == OK).sum()), pills_cell(dict(failed.most_common())),
                  pills_cell(flag_counts(part)), *figures)
    return table


def _span(s: pd.Series) -> str:
    lo, hi = int(s.min()), int(s.max())
    return str(lo) if lo == hi else f"{lo}–{hi}"


def failure_table(rows: pd.DataFrame, limit: int = 6) -> Table:
    """Why cells did not finish ok, grouped by implementation, status and reason."""
    failed = rows[rows["status"] != OK].assign(reason=lambda d: d["reason"].fillna(""))
    table = Table(["implementation", "dtype", "status", "cells", "shapes", "reason"])
    for (impl, dtype, status, reason), part in failed.groupby(["impl", "dtype", "status", "reason"], sort=False):
        shapes = list(part["shape"])
        more = f" … and {len(shapes) - limit} more" if len(shapes) > limit else ""
        short = reason if len(reason) <= 240 else reason[:240] + " …"
        table.add(impl, dtype, Cell(status, style=_status_style(status)), len(shapes),
                  ", ".join(shapes[:limit]) + more, Cell(short, title=reason))
    return table


def _status_style(status: str) -> str:
    return f"background:{hm.status_style(status)[0]}"


def not_available_table(rows: pd.DataFrame) -> Table:
    """Metrics that could not be measured, with the stored reasons (never estimated instead)."""
    seen: dict[tuple[str, str], set[str]] = {}
    for impl, na in zip(rows["impl"], rows["na"]):
        for metric, why in decode_json(na).items():
            seen.setdefault((metric, str(why)), set()).add(impl)
    table = Table(["metric", "why not available", "implementations"])
    for (metric, why), impls in sorted(seen.items()):
        table.add(metric, why, ", ".join(sorted(impls)))
    return table


def noisy_table(rows: pd.DataFrame) -> Table:
    """Cells whose timings spread too much to be trusted (IQR / median above NOISY_SPREAD)."""
    noisy = rows[(rows["status"] == OK) & (rows["spread_pct"] > 100 * NOISY_SPREAD)]
    table = Table(["implementation", "dtype", "shape", "time µs median", "spread %", "repetitions"])
    table.numeric = {3, 4, 5}
    for _, r in noisy.sort_values("spread_pct", ascending=False).iterrows():
        table.add(r["impl"], r["dtype"], r["shape"], num(r.get("time_us")), f"{r['spread_pct']:.0f}",
                  num(r.get("time_reps")))
    return table


def note_table(rows: pd.DataFrame) -> Table:
    notes = rows.dropna(subset=["note"]).groupby(["impl", "note"], sort=False).size()
    table = Table(["implementation", "note", "cells"])
    for (impl, note), n in notes.items():
        table.add(impl, note, n)
    return table


# --------------------------------------------------------------------------------------------
# the summary at the top


def _ceiling_rows(rows: pd.DataFrame, ceiling: str | None) -> list[dict]:
    """Per implementation and dtype: median, best and worst % of the case's ceiling."""
    out = []
    measured = rows.dropna(subset=["pct_of_ceiling"])
    for (impl, dtype), every in measured.groupby(["impl", "dtype"], sort=False):
        part = every[~every["flagged"]]  # a disturbed value is no headline
        if part.empty:
            continue
        best, worst = part.loc[part["pct_of_ceiling"].idxmax()], part.loc[part["pct_of_ceiling"].idxmin()]
        out.append({"impl": impl, "dtype": dtype, "ceiling": ceiling, "n": len(part),
                    "left_out": len(every) - len(part),
                    "median": float(part["pct_of_ceiling"].median()),
                    "best": (best["shape"], float(best["pct_of_ceiling"])),
                    "worst": (worst["shape"], float(worst["pct_of_ceiling"]))})
    return out


def ceiling_table(sections: list[dict]) -> Table:
    """% of each case's ceiling per implementation: the memory-bound goal is 100% of a same-size copy."""
    table = Table(["case", "dtype", "implementation", "ceiling", "% of ceiling median", "shapes",
                   "best shape", "worst shape", "flagged, left out"])
    table.numeric = {4, 5, 8}
    for s in sections:
        for r in s["ceiling_rows"]:
            table.add(Cell(s["name"], href=f"#{s['anchor']}"), r["dtype"], r["impl"], r["ceiling"],
                      f"{r['median']:.0f}%", r["n"], f"{r['best'][0]}  ({r['best'][1]:.0f}%)",
                      f"{r['worst'][0]}  ({r['worst'][1]:.0f}%)", r["left_out"] or "—")
    return table


def summary_table(sections: list[dict]) -> Table:
    table = Table(["case", "dtype", "implementation vs baseline", "geomean speedup", "wall-time geomean",
                   "shapes compared", "best shape", "worst shape", "launch-bound shapes", "not compared",
                   "flags in the case"])
    table.numeric = {3, 4, 5}
    for s in sections:
        link = Cell(s["name"], href=f"#{s['anchor']}")
        flags = pills_cell(s.get("flag_counts") or {})
        if not s["pairs"]:
            failed = {k: v for k, v in s["statuses"].items() if k != OK}
            table.add(link, ", ".join(s["dtypes"]), Cell(s["unpaired"] or "—", style="color:#666"),
                      "—", "—", "—", "—", "—", "—", pills_cell(failed), flags)
        for p in s["pairs"]:
            for d in p["by_dtype"]:
                gpu, wall = d["gpu"], d["wall"]
                launch = [x for x in p["launch_bound"] if len(p["by_dtype"]) == 1 or x.endswith(d["dtype"])]
                failed = dict(d["failed"], **({"flagged, left out": d["flagged"]} if d.get("flagged") else {}))
                table.add(link, d["dtype"], p["title"], speedup_cell(gpu["geomean"]),
                          speedup_cell(wall["geomean"]), f"{gpu['n']} / {gpu['total']}",
                          shape_ratio(gpu["best"]), shape_ratio(gpu["worst"]),
                          Cell(str(len(launch)) if launch else "—", title=", ".join(launch)),
                          pills_cell(failed), flags)
    return table

