"""Session 6, call 2: why do small transposed-add cells time ~1.3 us slower in a grid run than alone?
In one process, the same inputs, Inductor and ours alternately (3 rounds each, cell timing), before
and after a torch.profiler session and a CUDA-graph capture (what the runner's metrics do after each
cell's timing)."""
import torch
from torch.profiler import ProfilerActivity, profile

from fusebench.cases import get_case
from fusebench.impls.base import get_impl
from fusebench.measure.timing import TimingSettings, time_call

dev = "cuda:0"
torch.cuda.set_device(0)
cells = [("bias_dropout_add_transposed", (128, 2048)), ("bias_dropout_add_transposed", (512, 1024)),
         ("bias_dropout_add_transposed", (2048, 256)), ("bias_dropout_add_transposed", (1024, 128)),
         ("softmax_backward", (128, 8192)), ("norm_chain", (256, 4096))]
fns = {}
for name, shape in cells:
    case = get_case(name)
    args = case.make_inputs(shape, torch.float32, dev, 0)
    ind = torch.compile(case.fn, dynamic=False)
    tri = get_impl("triton").prepare(case, shape, torch.float32, dev).fn
    for f in (ind, tri):
        f(*args)
    fns[(name, shape)] = {"inductor": ind, "triton": tri, "args": args}
torch.cuda.synchronize()


def sweep(label):
    for key, d in fns.items():
        res = {"inductor": [], "triton": []}
        for _ in range(3):
            for impl in ("inductor", "triton"):
                f, a = d[impl], d["args"]
                res[impl].append(time_call(lambda: f(*a), dev, TimingSettings()).median_us)
        print(f"{label:16s} {key[0]:28s} {'x'.join(map(str, key[1])):>9s}  inductor "
              + " ".join(f"{x:6.2f}" for x in res["inductor"]) + "   triton " + " ".join(f"{x:6.2f}" for x in res["triton"]),
              flush=True)


sweep("fresh")
sweep("fresh-again")
for d in fns.values():
    for impl in ("inductor", "triton"):
        with profile(activities=[ProfilerActivity.CUDA]):
            d[impl](*d["args"])
            torch.cuda.synchronize()
sweep("after-profiler")
g = torch.cuda.CUDAGraph()
d = next(iter(fns.values()))
s = torch.cuda.Stream()
with torch.cuda.stream(s):
    d["triton"](*d["args"])
torch.cuda.synchronize()
with torch.cuda.graph(g):
    d["triton"](*d["args"])
g.replay()
torch.cuda.synchronize()
sweep("after-graph")
