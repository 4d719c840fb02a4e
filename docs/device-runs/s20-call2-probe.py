"""Session 20, call 2: cooperative plans of 16 values a thread under a 128-register cap (2048-column
chunks at 4 warps, 4 programs an SM; 4096 at 8 warps, 2 an SM; 1024 at 2 warps, 8 an SM), which
leave room for the prefetch and for layernorm's weight and bias held across rounds together
(norms.layernorm_holds_wb; none spills, sm_90 offline), next to utils.COOP_SHAPES, at long rows,
fp32.  Runs s17-call1-probe.py (this commit's plans only) with those shapes added.

    PYTHONPATH=. python docs/device-runs/s20-call2-probe.py OUT.jsonl case ...
"""
import os
import runpy
import sys

from fusebench.kernels import utils

utils.COOP_SHAPES = utils.COOP_SHAPES + ((2048, 4, 4), (4096, 8, 2), (1024, 2, 8))
os.environ["PROBE_OLD"] = "0"
sys.argv = ["s17-call1-probe.py", *sys.argv[1:]]
runpy.run_path(os.path.join(os.path.dirname(__file__), "s17-call1-probe.py"), run_name="__main__")
