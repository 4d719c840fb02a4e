"""Session 6, call 4: is a small kernel's cell time a property of the kernel or of where its tensors
landed?  Per cell, 8 input sets placed differently (spacers of varying size between them); on each,
Inductor and ours alternately, with the addresses of an input and of each output (offset in its
2 MiB page, and the page's index mod 8)."""
import torch

from fusebench.cases import get_case
from fusebench.impls.base import get_impl
from fusebench.measure.timing import TimingSettings, time_call

dev = "cuda"
cells = [("bias_dropout_add_transposed", (128, 2048)), ("bias_dropout_add_transposed", (512, 1024)),
         ("softmax_backward", (256, 4096)), ("norm_chain", (512, 4096))]


def where(t):
    p = t.data_ptr()
    return f"{(p >> 21) % 8}:{(p % (1 << 21)) >> 10:4d}K"


for name, shape in cells:
    case = get_case(name)
    impls = {"inductor": torch.compile(case.fn, dynamic=False),
             "triton": get_impl("triton").prepare(case, shape, torch.float32, dev).fn}
    keep = []
    sets = []
    for k in range(8):
        keep.append(torch.empty((k * 5 + 1) * 256 * 1024, dtype=torch.uint8, device=dev))
        sets.append(case.make_inputs(shape, torch.float32, dev, k))
    for f in impls.values():
        f(*sets[0])
    torch.cuda.synchronize()
    ts = {"inductor": [], "triton": []}
    for k, args in enumerate(sets):
        row = [f"{name[:20]:20s} {'x'.join(map(str, shape)):>9s} set {k} in {where(args[0])}"]
        for impl in ("triton", "inductor", "triton"):
            f = impls[impl]
            out = f(*args)
            w = where(out)
            del out
            t = time_call(lambda: f(*args), dev, TimingSettings()).median_us
            ts[impl].append(t)
            row.append(f"{impl[:3]} {t:6.2f} (out {w})")
        print("  ".join(row), flush=True)
    med = {k: sorted(v)[len(v) // 2] for k, v in ts.items()}
    print(f"{name} {shape}: median over sets  inductor {med['inductor']:.2f}  triton {med['triton']:.2f}", flush=True)
