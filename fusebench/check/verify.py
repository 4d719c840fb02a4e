"""Measuring a baseline's cells and holding each to its entry (`fusebench check`), or recording
them as the new entries (`fusebench check --update`).

The cells run through the normal runner (`fusebench.run`: worker processes, the accuracy check
against float64, timing on the quick shapes' budget), one run per group of cells that a request
can name exactly: the cases that share mode, dtype, implementations and shapes.  Every group's
request is planned before the first one runs, so a baseline the runner would not run as written
is refused before any store is touched.

A cell fails its entry when it
- launches more kernels per call (Inductor's code: generated + extern; on a GPU also the
  profiler's count of kernels, for every implementation),
- fuses other ATen operators (its kernels' graph, kind and operator lists differ: report.fusion_diff),
- gains a graph break or a recompile,
- is no longer ok (mismatch, error ...: status differs and is not ok),
- with timing checked, is slower beyond the noise: report.judge.change() finds the change real
  (the baseline keeps the q20-q80 range, so the two ranges must not overlap) and larger than
  `max_slowdown_pct`.
A change for the better (fewer kernels alone, a graph break gone, faster, ok again) is reported
without failing; --update records it.
"""
from __future__ import annotations

import datetime
import os
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, Sequence

from fusebench.check.baseline import Baseline, BaselineError, Entry, Section, this_device_class

Key = tuple  # (case, impl, shape, dtype, mode), as Entry.key()


@dataclass(frozen=True)
class Rules:
    check_time: bool = True
    max_slowdown_pct: float = 10.0


@dataclass
class Verdict:
    entry: Entry  # the baseline's
    row: dict | None  # the cell as measured now; None: not measured
    problems: list[str] = field(default_factory=list)  # each fails the check; may span lines
    notes: list[str] = field(default_factory=list)  # differences that do not fail it
    kinds: set[str] = field(default_factory=set)  # what failed: kernels, ops, graph_breaks, recompiles, status, time


def _num(value) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return None if v != v else v


def _us(value) -> str:
    v = _num(value)
    return "?" if v is None else f"{v:.4g} us"


def judge(entry: Entry, row: dict | None, rules: Rules = Rules()) -> Verdict:
    """Hold the measured `row` (a store row) to the baseline `entry`."""
    from fusebench.report.fusion_diff import diff_facts
    from fusebench.report.judge import change

    v = Verdict(entry, row)
    if row is None:
        v.problems.append("not measured (no row came back for this cell)")
        v.kinds.add("missing")
        return v
    status, reason = row.get("status"), row.get("reason")
    if status != entry.status:
        text = f"status: {entry.status} -> {status}" + (f" ({reason})" if isinstance(reason, str) and reason else "")
        if status == "ok":
            v.notes.append(text)
        else:
            v.problems.append(text)
            v.kinds.add("status")
    for c in diff_facts(entry.as_row(), row):
        (v.problems if c.worse else v.notes).append(c.text)
        if c.worse:
            v.kinds.add(c.what)
    was, now = _num(entry.profiled_kernels), _num(row.get("kernels"))
    if was is not None and now is not None and was != now:
        text = f"kernels launched (profiler): {was:g} -> {now:g}"
        (v.problems if now > was else v.notes).append(text)
        if now > was:
            v.kinds.add("kernels")
    if rules.check_time and entry.status == "ok" and status == "ok":
        c = change(entry.as_row(), row)
        if c is not None and c.real:
            text = (f"time: {_us(entry.time_us)} -> {_us(row.get('time_us'))} ({c.regression_pct:+.1f}%, outside "
                    f"the noise: q20-q80 {_us(entry.time_q20_us)}-{_us(entry.time_q80_us)} before, "
                    f"{_us(row.get('time_q20_us'))}-{_us(row.get('time_q80_us'))} now)")
            if c.regression_pct > rules.max_slowdown_pct:
                v.problems.append(text)
                v.kinds.add("time")
            else:
                v.notes.append(text)
    return v


# ----------------------------------------------------------------------------------------------
# planning and measuring


@dataclass(frozen=True)
class Group:
    """Cells one request names exactly: cases x impls x shapes, one mode and dtype."""

    mode: str
    dtype: str
    cases: tuple[str, ...]
    impls: tuple[str, ...]
    shapes: tuple[str, ...]

    def keys(self) -> set[Key]:
        return {(c, i, s, self.dtype, self.mode) for c in self.cases for i in self.impls for s in self.shapes}


def groups(keys: Sequence[Key]) -> list[Group]:
    """The fewest requests (per mode and dtype, cases sharing implementations and shapes) that
    name exactly `keys`."""
    impls_at: dict[tuple, set[str]] = defaultdict(set)  # (case, mode, dtype, shape) -> impls
    for case, impl, shape, dtype, mode in keys:
        impls_at[(case, mode, dtype, shape)].add(impl)
    shapes_of: dict[tuple, list[str]] = defaultdict(list)  # (case, mode, dtype, impls) -> shapes
    for (case, mode, dtype, shape), impls in impls_at.items():
        shapes_of[(case, mode, dtype, tuple(sorted(impls)))].append(shape)
    cases_of: dict[tuple, list[str]] = defaultdict(list)  # (mode, dtype, impls, shapes) -> cases
    for (case, mode, dtype, impls), shapes in shapes_of.items():
        cases_of[(mode, dtype, impls, tuple(sorted(shapes)))].append(case)
    return [Group(mode, dtype, tuple(cases), impls, shapes)
            for (mode, dtype, impls, shapes), cases in sorted(cases_of.items())]


def plan(keys: Sequence[Key], device: str) -> list[Group]:
    """The groups of `keys`, each checked to plan exactly its cells here (ValueError otherwise)."""
    from fusebench.cases import shape_str
    from fusebench.runner.plan import plan_cells

    out = groups(keys)
    for g in out:
        cells = plan_cells(list(g.cases), list(g.impls), ",".join(g.shapes), g.dtype, device, g.mode)
        planned = {(c.case, c.impl, shape_str(c.shape), c.dtype, c.mode) for c in cells}
        missing = sorted(g.keys() - planned)
        if missing:
            case, impl, shape, dtype, mode = missing[0]
            raise ValueError(f"the runner does not plan {case} {impl} {shape} {dtype} {mode} as written "
                             f"(a shape is written as fusebench writes it, e.g. "
                             f"{shape_str(cells[0].shape) if cells else '4096x4096'}; the implementation must "
                             f"apply to the case in that mode)")
    return out


@dataclass
class Measured:
    rows: dict[Key, dict]
    env: dict  # the last run's row of the store: device_name, torch, triton, python, git_commit
    run_ids: list[int]
    db: str | None  # where the runs are kept; None: a temporary store, gone


# Where the time is not judged (--no-time) the cells are timed briefly: the runner times every ok cell.
BRIEF_TIMING = {"warmup_ms": 1.0, "rep_ms": 5.0, "min_reps": 3, "host_max_ms": 10.0}


def measure(groups_: list[Group], device: str, *, db: str | None = None, plugins: Sequence[str] = (),
            cell_timeout: float = 900.0, timed: bool = True, say: Callable[[str], None] = lambda line: None
            ) -> Measured:
    """Run every group through fusebench.run; the rows by key.  With `db` the runs are kept there,
    otherwise in a temporary store that is removed afterwards.  `timed`: on the quick shapes'
    budget, as a baseline's times are; else briefly (BRIEF_TIMING)."""
    from fusebench.api import run
    from fusebench.measure.timing import TimingSettings
    from fusebench.store import Store

    metrics = ("kernels",) if device.startswith("cuda") else ()  # the profiler's count; none on the CPU
    with tempfile.TemporaryDirectory(prefix="fusebench-check-") as tmp:
        path = db or os.path.join(tmp, "check.db")
        rows: dict[Key, dict] = {}
        run_ids: list[int] = []
        env: dict = {}
        for g in groups_:
            say(f"measuring {len(g.keys())} cell(s): {', '.join(g.cases)} x {', '.join(g.impls)} at "
                f"{', '.join(g.shapes)} ({g.dtype}, {g.mode})")
            df = run(list(g.cases), impls=list(g.impls), shapes=",".join(g.shapes), dtype=g.dtype,
                               device=device, db=path, plugins=list(plugins), metrics=metrics,
                               timing=TimingSettings.for_shapes("quick", **({} if timed else BRIEF_TIMING)),
                               mode=g.mode, cell_timeout=cell_timeout)
            run_ids.append(int(df.attrs["run_id"]))
            for r in df.to_dict("records"):
                # A run is of one mode and dtype; a row the worker never sent (crashed) may lack them.
                r.update(mode=g.mode, requested_dtype=g.dtype)
                rows[(r["case_name"], r["impl"], r["shape"], g.dtype, g.mode)] = r
        if run_ids:
            with Store.open(path, create=False) as store:
                env = store.run_info(run_ids[-1])
    return Measured(rows, env, run_ids, db)


# ----------------------------------------------------------------------------------------------
# the check and the update


@dataclass
class CheckResult:
    path: str
    device_class: str
    verdicts: list[Verdict]
    rules: Rules
    measured: Measured

    @property
    def failed(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.problems]

    def report(self) -> list[str]:
        """The readable diff: each failing cell with what changed, then changes that did not fail."""
        out = []
        for v in self.failed:
            out.append(f"FAIL {v.entry.label}")
            out += ["  " + line for text in v.problems for line in text.splitlines()]
            out += ["  (also) " + line for text in v.notes for line in text.splitlines()]
        for v in self.verdicts:
            if v.notes and not v.problems:
                out.append(f"changed, not failing: {v.entry.label}")
                out += ["  " + line for text in v.notes for line in text.splitlines()]
        return out

    def summary(self) -> str:
        timing = (f"slower than {self.rules.max_slowdown_pct:g}% beyond the noise fails" if self.rules.check_time
                  else "timing not checked")
        where = f"{self.path} ({self.device_class}; {timing})"
        if not self.failed:
            return f"fusebench check: {len(self.verdicts)} cell(s) hold against {where}"
        counts = defaultdict(int)
        for v in self.failed:
            for k in v.kinds:
                counts[k] += 1
        what = {"kernels": "more kernels", "ops": "other fusions", "graph_breaks": "graph break gained",
                "recompiles": "recompile gained", "status": "no longer ok", "time": "slower",
                "facts": "kernel facts lost", "missing": "not measured"}
        parts = ", ".join(f"{what.get(k, k)}: {n}" for k, n in sorted(counts.items()))
        return f"fusebench check: {len(self.failed)} of {len(self.verdicts)} cell(s) differ from {where}: {parts}"


def section_for(baseline: Baseline, path: str, device: str, device_class: str | None) -> Section:
    """The section this machine is held to: --device-class's, else this device's class."""
    here = this_device_class(device)
    cls = device_class or here
    if cls not in baseline.sections:
        held = ", ".join(baseline.classes()) or "no device class"
        if device_class:
            raise BaselineError(f"{path} has no entries for device class {cls!r} (it holds: {held})")
        raise BaselineError(f"{path} holds baselines for {held}, not for this machine's device class {here!r}; "
                            f"--device-class NAME checks against another class's entries")
    if not baseline.sections[cls].entries:
        raise BaselineError(f"{path} names no cells for device class {cls!r}")
    return baseline.sections[cls]


def load_plugins(plugins: Sequence[str]) -> None:
    from fusebench.cases import load_plugin, plugin_record

    for p in plugins:
        r = plugin_record(p)
        load_plugin(r["path"], r["sha256"])


def run_check(path: str, *, device: str, device_class: str | None = None, plugins: Sequence[str] = (),
              db: str | None = None, rules: Rules = Rules(), cell_timeout: float = 900.0,
              only: Callable[[Entry], bool] | None = None, say: Callable[[str], None] = lambda line: None
              ) -> CheckResult:
    """Measure the cells of `path`'s section for this device (those `only` keeps) and judge each."""
    from fusebench.check.baseline import read

    section = section_for(read(path), path, device, device_class)
    entries = [e for e in section.entries if only is None or only(e)]
    if not entries:
        raise ValueError(f"{path} names no such cell for device class {section.device_class!r}")
    load_plugins(plugins)
    groups_ = plan([e.key() for e in entries], device)
    measured = measure(groups_, device, db=db, plugins=plugins, cell_timeout=cell_timeout, timed=rules.check_time,
                       say=say)
    verdicts = [judge(e, measured.rows.get(e.key()), rules) for e in entries]
    return CheckResult(path, section.device_class, verdicts, rules, measured)


@dataclass
class UpdateResult:
    path: str
    device_class: str
    entries: list[Entry]  # as written
    changes: list[Verdict]  # entries that replaced different ones (judged with timing off)
    added: int


def selection_keys(cases, impls, shapes: str, dtype: str | None, mode: str, device: str) -> list[Key]:
    """The cells a selection (as `fusebench run` takes it) names."""
    from fusebench.cases import shape_str
    from fusebench.runner.plan import plan_cells

    cells = plan_cells(cases or None, impls or None, shapes, dtype, device, mode)
    return [(c.case, c.impl, shape_str(c.shape), c.dtype, c.mode) for c in cells]


def run_update(path: str, *, device: str, device_class: str | None = None, keys: Sequence[Key] | None = None,
               plugins: Sequence[str] = (), db: str | None = None, cell_timeout: float = 900.0,
               say: Callable[[str], None] = lambda line: None) -> UpdateResult:
    """Measure cells and write them as this device class's entries of `path`: `keys` (a selection)
    added to or replacing its entries, or, without keys, its own cells again (a new class: the
    cells the file's other classes name)."""
    from fusebench.check.baseline import read, write

    baseline = read(path) if os.path.exists(path) else Baseline()
    cls = device_class or this_device_class(device)
    section = baseline.sections.get(cls, Section(cls))
    load_plugins(plugins)
    if keys is None:
        others = [e.key() for s in baseline.sections.values() for e in s.entries]
        keys = [e.key() for e in section.entries] or list(dict.fromkeys(others))
        if not keys:
            raise ValueError(f"{path} names no cells yet: name them (cases, --impl, --shapes, --dtype, --mode)")
    groups_ = plan(list(keys), device)
    measured = measure(groups_, device, db=db, plugins=plugins, cell_timeout=cell_timeout, say=say)
    new = [Entry.from_row(measured.rows[k]) for k in keys if k in measured.rows]
    lost = [k for k in keys if k not in measured.rows]
    if lost:
        raise RuntimeError(f"{len(lost)} cell(s) came back without a row (first: {' '.join(lost[0])}); "
                           f"{path} is left as it was")
    old = section.by_key()
    changes = []
    for e in new:
        if e.key() in old:
            v = judge(old[e.key()], measured.rows[e.key()], Rules(check_time=False))
            if v.problems or v.notes:
                changes.append(v)
    env = measured.env
    meta = {"device_name": env.get("device_name"), "torch": env.get("torch"), "triton": env.get("triton"),
            "python": env.get("python"), "commit": env.get("git_commit"),
            "written": datetime.date.today().isoformat()}
    merged = section.merged(new, meta)
    baseline.sections[cls] = merged
    write(baseline, path)
    return UpdateResult(path, cls, merged.entries, changes, sum(1 for e in new if e.key() not in old))
