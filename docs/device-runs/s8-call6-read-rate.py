"""Session 8, call 6: how fast can this GPU only read?  horizontal_reduction_reduction (two row
reductions of one input: it reads M*N*4 bytes and writes 2*M*4) stays at 0.73-0.89 of the copy rate,
Inductor with it.  Times, as cells are timed (L2 flushed), a read-only Triton kernel (persistent
programs summing 16-byte vectors into one partial each), torch.sum, and the copy, at 128 MiB to 4 GiB."""
import torch
import triton
import triton.language as tl

from fusebench.kernels import utils


@triton.jit
def _read_kernel(x_ptr, part_ptr, n, BLOCK: tl.constexpr):
    # grid-stride: program p sums blocks p, p + P, ...; one partial per program
    pid = tl.program_id(0)
    acc = tl.zeros([BLOCK], tl.float32)
    for start in tl.range(pid * BLOCK, n, tl.num_programs(0) * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + offs, mask=offs < n, other=0.0, eviction_policy="evict_first")
    tl.store(part_ptr + pid, tl.sum(acc, 0))


def main():
    sms = utils.num_sms("cuda")
    print("MiB,what,us,GB/s")
    for mib in (128, 512, 1024, 4096):
        n = mib * 2**20 // 4
        x = torch.randn(n, device="cuda")
        y = torch.empty_like(x)
        cands = {}
        for per_sm, block, warps in ((1, 8192, 32), (2, 4096, 16), (4, 4096, 8), (8, 2048, 8), (16, 1024, 4)):
            part = torch.empty(per_sm * sms, device="cuda")
            fn = lambda: _read_kernel[(per_sm * sms,)](x, part, n, BLOCK=block, num_warps=warps)
            fn()
            assert torch.allclose(part.sum(), x.sum(), rtol=1e-3, atol=1e-1)
            cands[f"triton read {per_sm}/SM {block}x{warps}w"] = fn
        cands["torch.sum"] = lambda: x.sum()
        cands["copy (read + write)"] = lambda: y.copy_(x)
        for what, fn in cands.items():
            us = utils.gpu_time_stats(fn, "cuda", budget_ms=100.0).median_us
            nbytes = x.numel() * 4 * (2 if what.startswith("copy") else 1)
            print(f"{mib},{what},{us:.1f},{nbytes / us / 1e3:.0f}", flush=True)


if __name__ == "__main__":
    main()
