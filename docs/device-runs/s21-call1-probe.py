"""Session 21, call 1: cooperative plans whose next rounds' chunks the compiler copies into shared
memory (RowPlan.stages 2 and 3: Triton's pipeliner, cp.async) while this round's programs exchange
partials -- the prefetch without its registers, so that the 32- and 64-values-a-thread shapes can
prefetch too.  Built offline for sm_90 (Triton 3.9), every shape pipelines and spills at most 8
bytes at 2 stages.  Runs s17-call1-probe.py (this commit's plans only) with a staged copy of every
cooperative plan added to the candidates, at long rows, fp32.

    PYTHONPATH=. python docs/device-runs/s21-call1-probe.py OUT.jsonl case ...
"""
import os
import runpy
import sys
from dataclasses import replace

from fusebench.kernels import utils

_row_plans = utils.row_plans


def row_plans_staged(*args, **kwargs):
    plans = _row_plans(*args, **kwargs)
    staged = [replace(p, stages=s) for s in (2, 3) for p in plans if p.mode == "coop" and not p.prefetch]
    return plans + staged


utils.row_plans = row_plans_staged
os.environ["PROBE_OLD"] = "0"
sys.argv = ["s17-call1-probe.py", *sys.argv[1:]]
runpy.run_path(os.path.join(os.path.dirname(__file__), "s17-call1-probe.py"), run_name="__main__")
