"""Session 22, call 3: bench/paired.py as is, or (PROBE_OLD_WARM=1) with the autotuner's warm call
as it was before this session -- its outputs left in L2, dirty -- to compare the plans each chooses.
    python docs/device-runs/s22-call3-probe.py CASE SHAPES [paired.py's options]"""
import os
import runpy
import sys

from fusebench.kernels import utils

if os.environ.get("PROBE_OLD_WARM") == "1":
    real = utils._warm_for
    utils._warm_for = lambda cand, launch, operands, shadow, n_outputs=1: real(cand, launch, operands, shadow, 0)
sys.argv = ["bench/paired.py", *sys.argv[1:]]
runpy.run_path("bench/paired.py", run_name="__main__")
