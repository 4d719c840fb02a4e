"""Session 19, call 6: softmax's and double_softmax's cooperative plans at 32 values a thread
under a 128-register cap (8192-column chunks at 8 warps, 2 programs an SM; 4096 at 4 warps, 4 an
SM: until then layernorm's own plans) next to the shared ones, at long rows, fp32.
Runs s17-call1-probe.py (this commit's plans only) with those two shapes added to
utils.COOP_SHAPES.

    PROBE_OLD=0 PYTHONPATH=. python docs/device-runs/s19-call6-probe.py OUT.jsonl case ...
"""
import os
import runpy
import sys

from fusebench.kernels import utils

utils.COOP_SHAPES = utils.COOP_SHAPES + ((8192, 8, 2), (4096, 4, 4))
os.environ["PROBE_OLD"] = "0"
sys.argv = ["s17-call1-probe.py", *sys.argv[1:]]
runpy.run_path(os.path.join(os.path.dirname(__file__), "s17-call1-probe.py"), run_name="__main__")
