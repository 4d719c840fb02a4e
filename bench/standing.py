#!/usr/bin/env python
"""Where issue 6's first target stands: the memory-bound cases' large shapes against the copy rate.

    python bench/standing.py docs/results/h200*.db [--ceiling GBPS] [--min-input-mib 64] [--all]

For each memory-bound case and each shape of its grid whose input (dim0 x dim1 elements of fp32)
exceeds --min-input-mib, the latest `ok` fp32 `triton` cell of the given stores (latest by its start
time, whichever store holds it) as a fraction of its GPU's copy ceiling (GB/s: --ceiling for every
GPU, else the `copy_bw` that `fusebench ceilings` stored for that GPU in any of the stores, else for
an H200 the 4,246 GB/s it measured in session 2; other GPUs have none: "not available"), and,
where the same run also timed the `memcpy` ceiling at that shape, as a fraction of that same-size
copy (memcpy's time over triton's: same run, same flush, same GPU).  Prints per case how many
shapes reach --target of the ceiling (of the same-size copy where the GPU has no ceiling) and lists
the others (--all: every shape).

--versus: the issue's second target instead, over every shape (any size) where one run of a store
timed eager, inductor and triton fp32 (where several runs did, the latest): per case the geometric
means of triton over Inductor, of
triton over eager and of Inductor over eager, and the shapes where triton is below 0.95x Inductor,
as a Markdown table.
"""
from __future__ import annotations

import argparse
import sqlite3

import numpy as np
import pandas as pd

from fusebench.cases import MEMORY_BOUND

# Measured by `fusebench ceilings` on an H200 (docs/results/h200-h100-session2.db).
H200_COPY_GBPS = 4245.8

QUERY = ("SELECT c.case_name, c.shape, c.impl, c.time_us, c.gbps, c.started, c.run_id, r.hostname, r.git_commit, "
         "r.device_name "
         "FROM cells c JOIN runs r ON r.id = c.run_id "
         "WHERE c.dtype = 'fp32' AND c.status = 'ok' AND c.impl IN ('triton', 'memcpy') AND c.time_us > 0")


def load(paths: list[str], query: str = QUERY) -> pd.DataFrame:
    frames = []
    for path in paths:
        con = sqlite3.connect(path)  # read only by use: SELECTs alone (read-only mode leaves -wal/-shm files behind)
        try:
            frame = pd.read_sql_query(query, con)
        finally:
            con.close()
        frames.append(frame.assign(store=path.rsplit("/", 1)[-1]))
    # A store without cells (a ceilings store) gives an empty frame of untyped columns, which would
    # leave the concatenation's times untyped too.
    out = pd.concat([f for f in frames if not f.empty] or frames, ignore_index=True)
    return out.astype({"time_us": float, "gbps": float})


def copy_ceilings(paths: list[str]) -> dict[str, float]:
    """GPU name -> copy ceiling (GB/s) from the stores' `ceilings` tables, the H200's if none has it."""
    found = {"NVIDIA H200": H200_COPY_GBPS}
    for path in paths:
        con = sqlite3.connect(path)
        try:
            rows = con.execute("SELECT device_name, value FROM ceilings WHERE name = 'copy_bw' "
                               "ORDER BY measured").fetchall()
        except sqlite3.OperationalError:  # a store without the table
            rows = []
        finally:
            con.close()
        found.update({name: float(value) for name, value in rows if value})
    return found


def input_mib(shape: str) -> float:
    dims = [int(d) for d in shape.split("x")]
    return dims[0] * dims[1] * 4 / 2**20


def standing(cells: pd.DataFrame, ceilings: dict[str, float], min_mib: float) -> pd.DataFrame:
    """The latest triton cell per (case, shape) above min_mib, with `of_ceiling` (NaN where its GPU
    has no entry in `ceilings`), `of_memcpy` and `measure`, the one of the two that the target is
    checked against."""
    cells = cells[cells.case_name.isin(MEMORY_BOUND) & (cells["shape"].map(input_mib) > min_mib)]
    triton = cells[cells.impl == "triton"].sort_values("started").groupby(["case_name", "shape"]).tail(1)
    copies = cells[cells.impl == "memcpy"][["store", "run_id", "case_name", "shape", "time_us"]]
    out = triton.merge(copies, on=["store", "run_id", "case_name", "shape"], how="left", suffixes=("", "_memcpy"))
    out["of_ceiling"] = out.gbps / out.device_name.map(ceilings).astype(float)
    out["of_memcpy"] = out.time_us_memcpy / out.time_us
    out["measure"] = out.of_ceiling.fillna(out.of_memcpy)
    return out


def versus(cells: pd.DataFrame, worst: int = 4) -> str:
    """The Markdown table of --versus (cells: load(..., QUERY with every implementation))."""
    times = cells.pivot_table(index=["store", "run_id", "case_name", "shape"], columns="impl", values="time_us",
                              aggfunc="last").dropna(subset=["eager", "inductor", "triton"]).reset_index()
    # A shape timed by several runs (stores given together): the latest run's cells.
    started = cells.groupby(["store", "run_id", "case_name", "shape"]).started.max().rename("started").reset_index()
    times = (times.merge(started, on=["store", "run_id", "case_name", "shape"]).sort_values("started")
             .drop_duplicates(["case_name", "shape"], keep="last"))
    lines = ["| case (shapes) | Inductor vs eager | triton vs Inductor | triton vs eager | below 0.95x Inductor |",
             "| --- | ---: | ---: | ---: | --- |"]
    for case in MEMORY_BOUND:
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("stores", nargs="+")
    ap.add_argument("--ceiling", type=float, default=None, help="copy ceiling of every GPU, GB/s")
    ap.add_argument("--min-input-mib", type=float, default=64.0)
    ap.add_argument("--target", type=float, default=0.9)
    ap.add_argument("--all", action="store_true", help="list every shape, not only those below the target")
    ap.add_argument("--versus", action="store_true", help="the geometric means against Inductor and eager instead")
    a = ap.parse_args()
    if a.versus:
        print(versus(load(a.stores, QUERY.replace("c.impl IN ('triton', 'memcpy')", "1"))))
        return
    cells = load(a.stores)
    ceilings = ({name: a.ceiling for name in cells.device_name.unique()} if a.ceiling
                else copy_ceilings(a.stores))
    table = standing(cells, ceilings, a.min_input_mib)
    for case in MEMORY_BOUND:
        rows = table[table.case_name == case].sort_values("measure")
        if rows.empty:
            continue
        ok = int((rows.measure >= a.target).sum())
        against = ", ".join(f"{ceilings[g]:,.0f} GB/s on the {g}" if g in ceilings else f"the same-size copy on the {g}"
                            f" (no copy ceiling stored for it)" for g in sorted(rows.device_name.unique()))
        print(f"{case}: {ok} of {len(rows)} shapes at >= {a.target:g} of {against}")
        for r in rows.itertuples():
            if a.all or r.measure < a.target:
                ceil = f"{r.of_ceiling:.3f} of ceiling" if pd.notna(r.of_ceiling) else "ceiling n/a"
                copy = f"{r.of_memcpy:.3f} of memcpy" if pd.notna(r.of_memcpy) else "no memcpy in its run"
                print(f"   {r.shape:>12} {r.time_us:10.2f} us  {ceil:>17}  {copy:>22}"
                      f"  ({r.store} run {r.run_id}, {r.git_commit})")


if __name__ == "__main__":
    main()
