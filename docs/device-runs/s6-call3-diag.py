"""Session 6, call 3: the runner times our small kernels ~1.2 us slower than a direct time_call does
(call 2).  Same process, same cells, one variable at a time.  argv[1]: impl order."""
import sys

import torch

from fusebench.cases import get_case
from fusebench.impls.base import get_impl
from fusebench.measure.timing import TimingSettings, time_call
from fusebench.runner.cell import measure_cell
from fusebench.runner.plan import Cell

order = sys.argv[1].split(",")
cells = [("bias_dropout_add_transposed", (128, 2048)), ("bias_dropout_add_transposed", (512, 1024)),
         ("softmax_backward", (256, 4096)), ("norm_chain", (512, 4096))]
dev = "cuda"


def line(label, name, shape, res):
    print(f"{label:22s} {name:28s} {'x'.join(map(str, shape)):>9s}  " +
          "  ".join(f"{k} {v:6.2f}" for k, v in res.items()), flush=True)


for label, seeds in (("runner", (0, 1, 2)), ("runner-no-accuracy", ())):
    for name, shape in cells:
        res = {}
        for impl in order:
            row = measure_cell(Cell(name, impl, shape, "fp32", dev), TimingSettings(), seeds=seeds)
            res[impl] = row.get("time_us") or float("nan")
        line(label, name, shape, res)

for label in ("direct", "direct-no-grad", "direct-own-inputs", "direct-after-fp64"):
    for name, shape in cells:
        case = get_case(name)
        res = {}
        shared = case.make_inputs(shape, torch.float32, dev, 0)
        for impl in order:
            prep = get_impl(impl).prepare(case, shape, torch.float32, dev)
            if label == "direct-after-fp64":  # what the accuracy check allocates and frees first
                for s in (0, 1, 2):
                    a = case.make_inputs(shape, torch.float32, dev, s)
                    out = prep.fn(*a)
                    ref = case.run_reference(a)
                    del a, out, ref
                torch.cuda.empty_cache()
            args = shared if label in ("direct", "direct-no-grad") else case.make_inputs(shape, torch.float32, dev, 0)
            prep.fn(*args)
            if label == "direct-no-grad":
                with torch.no_grad():
                    res[impl] = time_call(lambda: prep.fn(*args), dev, TimingSettings()).median_us
            else:
                res[impl] = time_call(lambda: prep.fn(*args), dev, TimingSettings()).median_us
            res[impl + "@"] = args[0].data_ptr() % (1 << 21) / 1024
        line(label, name, shape, res)
