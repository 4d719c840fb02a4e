"""`fusebench audit MODEL`: a whole model eagerly and compiled, every kernel of a step, and the time
fusion could still save; and what `results`, `report` and `compare` do with an audit run (the
hooks at the top of those commands hand an audit over to the functions here)."""
from __future__ import annotations

import json
import signal
from typing import List, Optional

import typer
from rich.table import Table

from fusebench.commands.common import bad_input_is_exit_2, comma_list, err, fail, out
from fusebench.util import as_text, plain


def _interrupt(signum, frame):
    raise KeyboardInterrupt


@bad_input_is_exit_2
def audit(
    model: Optional[str] = typer.Argument(None, help="The model to audit (`--list` lists them)."),
    plugin: Optional[List[str]] = typer.Option(None, help="Python file registering models with "
                                               "@fusebench.model (and cases)."),
    mode: str = typer.Option("fwd", help="fwd (the forward) | fwd_bwd (forward and backward, as in training)."),
    dtype: Optional[str] = typer.Option(None, help="fp32 | fp16 | bf16 (default: the model's own on a GPU, "
                                                   "fp32 on the CPU)."),
    size: Optional[List[str]] = typer.Option(None, "--size", help="NAME=N over the model's default sizes, "
                                             "e.g. --size batch=8 --size tokens=512."),
    sizes: Optional[str] = typer.Option(None, "--sizes", help="The same as one list: batch=8,tokens=512."),
    compile_mode: Optional[List[str]] = typer.Option(None, "--compile-mode", help="torch.compile modes to "
                                                     "audit, comma-separated: default (Inductor), max-autotune, "
                                                     "max-autotune-no-cudagraphs, reduce-overhead."),
    baseline: str = typer.Option("eager", help="The backend speedups are over: eager, or a compiled backend "
                                               "(inductor, inductor-max-autotune, ...)."),
    catalog: bool = typer.Option(True, "--catalog/--no-catalog", help="Time fusebench's cases that match a "
                                 "region at the model's shapes (triton and the installed peers)."),
    compile_time: bool = typer.Option(True, "--compile-time/--no-compile-time", help="Measure cold and warm "
                                      "compile times and the break-even (two more compiles per backend)."),
    timeout: float = typer.Option(1800.0, help="Seconds a backend may take; past it the backend is recorded as "
                                               "timeout and the audit goes on."),
    db: Optional[str] = typer.Option(None, help="Results database (default ./fusebench.db or $FUSEBENCH_DB)."),
    device: Optional[str] = typer.Option(None, help="cpu | cuda (default: CUDA if present)."),
    top: int = typer.Option(10, help="Opportunities listed per backend."),
    list_: bool = typer.Option(False, "--list", help="List the models (built-in and --plugin) with their sizes "
                                                     "and exit."),
):
    """Audit a model: its step eagerly and compiled, every kernel, and the memory-bound regions
    ranked by the time fusion could still save."""
    from fusebench.audit.api import run_audit

    if list_:
        if model:
            fail("--list lists every model: give no MODEL with it")
        list_models(plugin or [])
        return
    if not model:
        fail("give the model to audit (`fusebench audit --list` lists them)")
    if top < 1:
        fail(f"--top must be at least 1, got {top}")
    if size and sizes:
        fail("give the sizes with --size or with --sizes, not both")
    modes = comma_list(compile_mode) or ["default"]
    started: dict = {}

    def on_start(run_id: int) -> None:
        started["run"] = run_id
        err.print(f"run {run_id}: auditing {plain(model)}", highlight=False, markup=False)

    def on_progress(text: str) -> None:
        err.print(f"  measuring: {plain(text)}", highlight=False, markup=False)

    signal.signal(signal.SIGTERM, _interrupt)  # SIGTERM stops like Ctrl-C: the run is left interrupted
    try:
        done = run_audit(model, mode=mode, dtype=dtype, sizes=size or sizes, device=device, compile_modes=modes,
                         baseline=baseline, plugins=plugin or [], catalog=catalog,
                         compile_time=compile_time, timeout_s=timeout, db=db, on_progress=on_progress,
                         on_start=on_start)
    except KeyboardInterrupt:
        where = f"run {started['run']} is stored as interrupted" if "run" in started else "no run was stored"
        err.print(f"interrupted; {where}", highlight=False, markup=False)
        raise typer.Exit(130)
    from fusebench.audit.render import render

    render(done.result, out, top=top, run_id=done.run_id, device_name=done.device_name)
    err.print(f"stored as run {done.run_id} in {plain(done.db)}; `fusebench report --run {done.run_id}` draws it",
              highlight=False, markup=False, soft_wrap=True)


def list_models(plugins: list[str]) -> None:
    """The models, with their default sizes on a GPU and on the CPU, and their dtype."""
    import torch

    from fusebench.audit import models
    from fusebench.cases import DTYPE_NAMES, load_plugin

    for path in plugins:
        load_plugin(path)
    t = Table(title="models (fusebench audit MODEL; --size NAME=N changes a size)", title_justify="left")
    for col in ("model", "defined by", "sizes (GPU)", "sizes (CPU)", "dtype (GPU)", "what"):
        t.add_column(col, overflow="fold")
    for spec in models.all_models():
        by = spec.source if spec.library is None else f"{spec.library} if installed, else {spec.source}"
        if spec.plugin and not spec.builtin:
            by = f"user ({spec.plugin})"
        cpu = spec.default_sizes("cpu")
        t.add_row(as_text(spec.name), as_text(by), as_text(_sizes(spec.sizes)),
                  as_text(_sizes(cpu) if cpu != spec.sizes else "the same"),
                  DTYPE_NAMES.get(spec.default_dtype, str(spec.default_dtype).replace("torch.", ""))
                  if isinstance(spec.default_dtype, torch.dtype) else as_text(spec.default_dtype),
                  as_text(spec.description))
    out.print(t)


def _sizes(sizes: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in sizes.items())


# ------------------------------------------------------------------------------------------------
# results, report and compare of audit runs


def _latest_or(store, run_id: int | None) -> int:
    return run_id if run_id is not None else store.latest_run()


def results_hook(run_id: Optional[int], db: Optional[str], format: str, output: Optional[str]) -> bool:
    """`fusebench results` on an audit run: print it (table) or export it (json).  False where the
    run is not an audit (the caller goes on)."""
    from fusebench.audit.store import is_audit, load
    from fusebench.store import Store, default_db_path

    with Store.open(db or default_db_path(), create=False) as store:  # read-only
        rid = _latest_or(store, run_id)
        if not is_audit(store, rid):
            return False
        if format not in ("table", "json"):
            raise ValueError(f"run {rid} is an audit: --format table or json (its kernels and regions are "
                             f"not cells)")
        info = store.run_info(rid)
        result = load(store, rid)
    if format == "json":
        text = json.dumps({"run_id": rid, **result.as_dict()}, indent=1, default=str)
        if output:
            with open(output, "w", encoding="utf-8") as f:
                f.write(text + "\n")
            err.print(f"wrote {plain(output)}", highlight=False, markup=False)
        else:
            print(text)
        return True
    if output:
        raise ValueError("-o writes an export: give --format json with it")
    from fusebench.audit.render import render

    render(result, out, run_id=rid, device_name=info.get("device_name"))
    return True


def report_hook(store, run_ids: list[int] | None, output: str, pairs=None) -> bool:
    """`fusebench report` on an audit run: its page.  False where no run asked for is an audit;
    an audit among several runs is refused (its page is its own)."""
    from fusebench.audit.store import is_audit
    from fusebench.report.audit import render_audit_report

    ids = run_ids or [store.latest_run()]
    audits = [r for r in ids if is_audit(store, r)]
    if not audits:
        return False
    if len(ids) > 1:
        raise ValueError(f"run {audits[0]} is an audit: report it alone (--run {audits[0]})")
    if pairs:
        raise ValueError(f"run {audits[0]} is an audit: --pair applies to runs of cells")
    path = render_audit_report(store, audits[0], output)
    out.print(f"wrote {plain(path)}", highlight=False, markup=False)
    return True


def compare_hook(store_a, run_a: int, store_b, run_b: int, output: str, fail_above=None) -> bool:
    """`fusebench compare A B` where both runs are audits: them side by side, in the terminal and
    on a page.  False where neither is an audit; an audit against a run of cells is refused."""
    from fusebench.audit.store import is_audit, load

    a, b = is_audit(store_a, run_a), is_audit(store_b, run_b)
    if not a and not b:
        return False
    if a != b:
        audit_run, cells_run = (run_a, run_b) if a else (run_b, run_a)
        raise ValueError(f"run {audit_run} is an audit and run {cells_run} a run of cells: compare an audit "
                         f"with an audit")
    if fail_above is not None:
        raise ValueError("--fail-above judges cells against the noise of their repetitions; audits are "
                         "compared without it")
    from fusebench.audit import views
    from fusebench.audit.render import render_pair
    from fusebench.report.audit import render_audit_compare

    result_a, result_b = load(store_a, run_a), load(store_b, run_b)
    views.check_comparable(result_a, result_b, run_a, run_b)
    path = render_audit_compare(store_a, run_a, store_b, run_b, output)
    render_pair(result_a, result_b, out, run_a=run_a, run_b=run_b, info_a=store_a.run_info(run_a),
                info_b=store_b.run_info(run_b))
    out.print(f"wrote {plain(path)}", highlight=False, markup=False)
    return True
