"""Session 21, call 3: does the cells' warm call cost the timed call a write-back?

The grid's cells at 256 MiB ran 5-8% slower than the same plans in the probes (call 2 against call
1: memcpy 92.4 us against a copy's 86.8 us at 512x65536).  The cells run a warm call after each
flush (measure.timing: the same call on a second input set); its outputs leave dirty lines in L2,
which the timed call then writes back -- the cost the "clean" flush was made to keep out.  Here,
per case and shape, each implementation timed as a cell times it (runner: time_call, flush
"clean") in turn: without the warm call, with it, and with it followed by discarding the warm
call's output lines from L2 (discard.global.L2, no write-back).

    PYTHONPATH=. python docs/device-runs/s21-call3-probe.py OUT.jsonl
"""
import json
import sys

import torch
import triton
import triton.language as tl

from fusebench.cases import get_case
from fusebench.impls import get_impl
from fusebench.measure.timing import TimingSettings, time_call, warm_call
from fusebench.runner.cell import WARM_CALL_SEED

DEV = "cuda:0"


@triton.jit
def _discard_kernel(ptr, n_lines, BLOCK: tl.constexpr):
    line = tl.minimum(tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK), n_lines - 1)
    tl.inline_asm_elementwise("discard.global.L2 [$1], 128;\n\tmov.u32 $0, 0;", "=r,l", [ptr + line * 128],
                              dtype=tl.int32, is_pure=False, pack=1)


def discard(out) -> None:
    for t in (out if isinstance(out, (tuple, list)) else [out]):
        if isinstance(t, torch.Tensor) and t.is_cuda and t.numel():
            raw = torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage())
            n = raw.numel() // 128
            if n:
                _discard_kernel[(triton.cdiv(n, 1024),)](raw, n, BLOCK=1024, num_warps=4)


def main() -> None:
    st = TimingSettings()
    cells = [("layernorm", (512, 65536)), ("softmax", (512, 65536)), ("double_softmax", (512, 65536)),
             ("layernorm", (1024, 32768)), ("layernorm", (2048, 65536)), ("layernorm", (256, 4096)),
             ("softmax", (64, 4096))]
    for name, shape in cells:
        case = get_case(name)
        args = case.make_inputs(shape, torch.float32, DEV, 0)
        other = case.make_inputs(shape, torch.float32, DEV, WARM_CALL_SEED)
        row = {"case": name, "shape": f"{shape[0]}x{shape[1]}"}
        for impl in ("memcpy", "triton", "inductor"):
            prep = get_impl(impl).prepare(get_case(name), shape, torch.float32, DEV)
            fn = lambda: prep.fn(*args)  # noqa: E731
            fn()
            torch.cuda.synchronize()
            plain = warm_call(lambda: prep.fn(*other), args)
            cleaned = warm_call(lambda: discard(prep.fn(*other)), args)
            res = {}
            for rep in range(2):  # twice, in turn, to see the drift
                for label, warm in (("none", None), ("warm", plain), ("warm+discard", cleaned)):
                    res.setdefault(label, []).append(round(time_call(fn, DEV, st, warm=warm).median_us, 2))
            row[impl] = res
            print(name, row["shape"], impl, res, flush=True)
        with open(sys.argv[1], "a") as f:
            f.write(json.dumps(row) + "\n")
        del args, other
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
