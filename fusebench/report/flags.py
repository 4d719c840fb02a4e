"""Flags on a run's cells, shared by the report's maps and tables: cells timed while the CPU was
busy (`under_load`, measure/load.py), above their ceiling by more than a ceiling allows
(report.judge.beyond_ceiling), too noisy to trust, mismatched but timed, or less accurate than
eager by more than BASELINE_ERROR_FACTOR.  The first two are `flagged`: marked on the maps and left
out of every headline figure.
"""
from __future__ import annotations

import pandas as pd

from fusebench.measure.accuracy import BASELINE_ERROR_FACTOR
from fusebench.measure.timing import NOISY_SPREAD
from fusebench.report.judge import add_beyond_ceiling
from fusebench.report.tables import OK, Table, num

FLAG_MARK = "*"  # written after a flagged cell's value on the maps
FLAG_LEGEND = "\n* flagged (timed under load, or beyond its ceiling): left out of the headline"


def with_flags(rows: pd.DataFrame, ceiling: str | None) -> pd.DataFrame:
    """The rows with their flags: under_load (timed while the CPU was busy), beyond (above the
    ceiling by more than it allows), flagged (either: out of headlines), noisy, less_accurate
    (err_vs_eager above BASELINE_ERROR_FACTOR), timed_mismatch, and `mark` for the maps."""
    ok = rows["status"] == OK
    loaded = rows["under_load"].fillna(0).astype(float).gt(0) if "under_load" in rows else pd.Series(False, rows.index)
    out = rows.assign(under_load_flag=loaded & ok, beyond=add_beyond_ceiling(rows, ceiling))
    out["flagged"] = out["under_load_flag"] | out["beyond"]
    out["noisy"] = ok & out["spread_pct"].gt(100 * NOISY_SPREAD)
    out["less_accurate"] = (out["err_vs_eager"].astype(float).gt(BASELINE_ERROR_FACTOR) if "err_vs_eager" in out
                            else False)
    out["timed_mismatch"] = (out["status"] == "mismatch") & out["time_us"].notna()
    out["mark"] = out["flagged"].map(lambda f: FLAG_MARK if f else None)
    return out


def flag_counts(rows: pd.DataFrame) -> dict:
    """{flag: cells} of the flags that occur, in the order the summary shows them."""
    names = (("noisy", "noisy"), ("under_load_flag", "under load"), ("beyond", "beyond ceiling"),
             ("timed_mismatch", "mismatch (timed)"), ("less_accurate", f"> {BASELINE_ERROR_FACTOR:g}× eager's error"))
    return {label: int(rows[col].sum()) for col, label in names if col in rows and int(rows[col].sum())}


def flagged_table(rows: pd.DataFrame) -> Table:
    """Cells timed while the CPU was busy, above their ceiling beyond what it allows, or less
    accurate than eager by more than BASELINE_ERROR_FACTOR: each with why."""
    table = Table(["implementation", "dtype", "shape", "time µs", "why flagged"])
    table.numeric = {3}
    for _, r in rows[rows["flagged"] | rows["less_accurate"]].iterrows():
        why = []
        if r["under_load_flag"]:
            pressure = r.get("cpu_pressure")
            why.append("timed while the CPU was busy" + (f" (some task waited for a CPU {100 * pressure:.0f}% of "
                                                          f"its timing)" if pd.notna(pressure) else ""))
        if r["beyond"]:
            why.append(f"{r['pct_of_ceiling']:.0f}% of its ceiling: beyond what a ceiling allows, a disturbed "
                       f"measurement")
        if r["less_accurate"]:
            why.append(f"error {r['err_vs_eager']:.3g}× eager's on the same inputs")
        table.add(r["impl"], r["dtype"], r["shape"], num(r.get("time_us")), "; ".join(why))
    return table
