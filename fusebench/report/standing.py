"""Where the memory-bound cases stand: their large shapes against the copy rate, and their grids
against Inductor and eager.

`standing`: for each memory-bound case and each shape whose input (dim0 x dim1 fp32 elements)
exceeds a size, the latest `ok` fp32 `triton` cell of the given stores (latest by start time,
whichever store holds it) as a fraction of its GPU's copy ceiling (the `copy_bw` that `fusebench
ceilings` stored for that GPU in any of the stores, or one given for every GPU; a GPU with neither
has no ceiling: not available), and, where the same run also timed the `memcpy` ceiling at that
shape, as a fraction of that same-size copy (memcpy's time over triton's: same run, same flush,
same GPU).  The target is checked against the ceiling, else against the same-size copy.

`versus`: over every shape (any size) where one run timed eager, inductor and triton in fp32 (the
latest such run per shape), the geometric means of triton over Inductor, of triton over eager and
of Inductor over eager, and the shapes where triton is below 0.95x Inductor, as a Markdown table.
"""
from __future__ import annotations

import os

import numpy as np
import pandas as pd

from fusebench.cases import memory_bound_names

_SELECT = ("SELECT c.case_name, c.shape, c.impl, c.time_us, c.gbps, c.started, c.run_id, r.git_commit, "
           "r.device_name FROM cells c JOIN runs r ON r.id = c.run_id "
           "WHERE c.dtype = 'fp32' AND c.status = 'ok' AND c.time_us > 0")
STANDING_QUERY = _SELECT + " AND c.impl IN ('triton', 'memcpy')"
VERSUS_QUERY = _SELECT + " AND c.impl IN ('eager', 'inductor', 'triton')"


def _open(path: str):
    """The store at `path`, refused (StoreError) when missing or not a fusebench store."""
    from fusebench.store import Store, StoreError

    if not os.path.isfile(path):
        raise StoreError(f"no results database at {path}")
    return Store.open(path, create=False)


def load(paths: list[str], query: str = STANDING_QUERY) -> pd.DataFrame:
    """The cells the query selects from every store, with a `store` column (the file's name)."""
    frames = []
    for path in paths:
        store = _open(path)
        try:
            tables = {r[0] for r in store.con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            frame = pd.read_sql_query(query, store.con) if {"cells", "runs"} <= tables else pd.DataFrame()
        finally:
            store.close()
        frames.append(frame.assign(store=os.path.basename(path)))
    # A store without cells (a ceilings store) gives an empty frame of untyped columns, which would
    # leave the concatenation's times untyped too.
    kept = [f for f in frames if not f.empty]
    if not kept:
        return pd.DataFrame(columns=["case_name", "shape", "impl", "time_us", "gbps", "started", "run_id",
                                     "git_commit", "device_name", "store"]).astype({"time_us": float, "gbps": float})
    return pd.concat(kept, ignore_index=True).astype({"time_us": float, "gbps": float})


def copy_ceilings(paths: list[str]) -> dict[str, float]:
    """GPU name -> copy ceiling (GB/s) from the stores' `ceilings` tables (the latest per GPU)."""
    found: dict[str, float] = {}
    for path in paths:
        store = _open(path)
        try:
            tables = {r[0] for r in store.con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            rows = store.con.execute("SELECT device_name, value FROM ceilings WHERE name = 'copy_bw' "
                                     "ORDER BY measured").fetchall() if "ceilings" in tables else []
        finally:
            store.close()
        found.update({name: float(value) for name, value in rows if value})
    return found


def input_mib(shape: str) -> float:
    dims = [int(d) for d in shape.split("x")]
    return dims[0] * dims[1] * 4 / 2**20


def standing(cells: pd.DataFrame, ceilings: dict[str, float], min_mib: float) -> pd.DataFrame:
    """The latest triton cell per (case, shape) above min_mib, with `of_ceiling` (NaN where its GPU
    has no entry in `ceilings`), `of_memcpy` and `measure`, the one of the two that the target is
    checked against."""
    cells = cells[cells.case_name.isin(memory_bound_names()) & (cells["shape"].map(input_mib) > min_mib)]
    triton = cells[cells.impl == "triton"].sort_values("started").groupby(["case_name", "shape"]).tail(1)
    copies = cells[cells.impl == "memcpy"][["store", "run_id", "case_name", "shape", "time_us"]]
    out = triton.merge(copies, on=["store", "run_id", "case_name", "shape"], how="left", suffixes=("", "_memcpy"))
    out["of_ceiling"] = out.gbps / out.device_name.map(ceilings).astype(float)
    out["of_memcpy"] = out.time_us_memcpy / out.time_us
    out["measure"] = out.of_ceiling.fillna(out.of_memcpy)
    return out


def standing_lines(table: pd.DataFrame, ceilings: dict[str, float], target: float = 0.9,
                   every: bool = False) -> list[str]:
    """Per case: how many shapes reach `target`, then the shapes below it (every shape with
    `every`), each with its store, run and commit."""
    lines = []
    for case in memory_bound_names():
        rows = table[table.case_name == case].sort_values("measure")
        if rows.empty:
            continue
        ok = int((rows.measure >= target).sum())
        against = ", ".join(f"{ceilings[g]:,.0f} GB/s on the {g}" if g in ceilings
                            else f"the same-size copy on the {g} (no copy ceiling stored for it)"
                            for g in sorted(rows.device_name.unique()))
        lines.append(f"{case}: {ok} of {len(rows)} shapes at >= {target:g} of {against}")
        for r in rows.itertuples():
            if every or not r.measure >= target:
                ceil = f"{r.of_ceiling:.3f} of ceiling" if pd.notna(r.of_ceiling) else "ceiling n/a"
                copy = f"{r.of_memcpy:.3f} of memcpy" if pd.notna(r.of_memcpy) else "no memcpy in its run"
                lines.append(f"   {r.shape:>12} {r.time_us:10.2f} us  {ceil:>17}  {copy:>22}"
                             f"  ({r.store} run {r.run_id}, {r.git_commit})")
    return lines


def versus(cells: pd.DataFrame, worst: int = 4) -> str:
    """The Markdown table of the second target (cells: load(..., VERSUS_QUERY))."""
    lines = ["| case (shapes) | Inductor vs eager | triton vs Inductor | triton vs eager | below 0.95x Inductor |",
             "| --- | ---: | ---: | ---: | --- |"]
    if cells.empty:
        return "\n".join(lines)
    times = cells.pivot_table(index=["store", "run_id", "case_name", "shape"], columns="impl", values="time_us",
                              aggfunc="last")
    if not {"eager", "inductor", "triton"} <= set(times.columns):
        return "\n".join(lines)
    times = times.dropna(subset=["eager", "inductor", "triton"]).reset_index()
    # A shape timed by several runs (stores given together): the latest run's cells.
    started = cells.groupby(["store", "run_id", "case_name", "shape"]).started.max().rename("started").reset_index()
    times = (times.merge(started, on=["store", "run_id", "case_name", "shape"]).sort_values("started")
             .drop_duplicates(["case_name", "shape"], keep="last"))
    for case in memory_bound_names():
        t = times[times.case_name == case]
        if t.empty:
            continue
        gm = lambda a, b: float(np.exp(np.log(t[a] / t[b]).mean()))  # noqa: E731 - time(a) / time(b)
        vs = (t.inductor / t.triton).round(3)
        slow = t.assign(vs=vs)[vs < 0.95].sort_values("vs")
        listed = ", ".join(f"{r.shape} {r.vs:.2f}" for r in slow.head(worst).itertuples())
        below = f"{len(slow)}: {listed}{', ...' if len(slow) > worst else ''}" if len(slow) else "0"
        lines.append(f"| `{case}` ({len(t)}) | {gm('eager', 'inductor'):.2f}x | {gm('inductor', 'triton'):.2f}x | "
                     f"{gm('eager', 'triton'):.2f}x | {below} |")
    return "\n".join(lines)
