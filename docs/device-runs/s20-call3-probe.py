"""Session 20, call 3: cooperative plans of 64 values a thread under a 248-register cap (8192-column
chunks at 4 warps, 2 programs an SM; 4096 at 2 warps, 4 an SM; 16384 at 8 warps, 1 an SM): twice
the bytes in flight per SM of COOP_SHAPES' 32-values plans at half the warps (call 2 found 16
values a thread slower than 32 at the same warps per SM).  Built offline for sm_90 they spill
nothing in softmax and double_softmax, with the prefetch too (145-196 registers); layernorm's
hold weight and bias without the prefetch and spill 40 bytes with it.  Runs s17-call1-probe.py
(this commit's plans only) with those shapes added to utils.COOP_SHAPES, at long rows, fp32.

    PYTHONPATH=. python docs/device-runs/s20-call3-probe.py OUT.jsonl case ...
"""
import os
import runpy
import sys

from fusebench.kernels import utils

utils.COOP_SHAPES = utils.COOP_SHAPES + ((8192, 4, 2), (4096, 2, 4), (16384, 8, 1))
os.environ["PROBE_OLD"] = "0"
sys.argv = ["s17-call1-probe.py", *sys.argv[1:]]
runpy.run_path(os.path.join(os.path.dirname(__file__), "s17-call1-probe.py"), run_name="__main__")
