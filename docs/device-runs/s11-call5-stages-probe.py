"""Session 11, call 5: does the kernels' default num_stages (3) slow our looped row kernels?

Inductor kept XBLOCK=1, R0_BLOCK=32768, num_warps=32, num_stages=1 for softmax_backward at
1024x32768 and 2048x32768 (98.8 / 192.1 us in the call-3 grid); our loop plan of the same shape
(step 32768, 32 warps, one program per row) took 191.7 us and our best plan 103.5 / 200.9 us.  Our
launches leave num_stages at Triton's default, so loops whose loads are "plain" (tl.range without
num_stages) may still be pipelined by the compiler through shared memory.  This times, with
fusebench's cell timing, our softmax_backward and layernorm looped/streamed kernels launched as the
package does (default num_stages) and with num_stages=1, checking each output.  A probe, not
part of the package.
"""
import torch

from fusebench.kernels import norms, softmax, utils


def timed(launch, out, ref, tag):
    out.zero_()
    launch()
    err = (out - ref).abs().max().item()
    t = utils.gpu_time_stats(launch, "cuda", budget_ms=40).median_us
    print(f"{tag:70s} {t:9.1f} us   (max err {err:.1e})", flush=True)


def smbwd(M, N):
    g = torch.Generator(device="cuda").manual_seed(0)
    dy = torch.randn(M, N, device="cuda", generator=g)
    y = torch.softmax(torch.randn(M, N, device="cuda", generator=g), 1)
    dx = torch.empty_like(y)
    ref = y * (dy - (dy * y).sum(1, keepdim=True))
    strides = (*dy.stride(), *y.stride(), N)
    print(f"== softmax_backward {M}x{N}")
    for bn, w, grid in ((32768, 32, 0), (16384, 32, 0), (8192, 16, 0), (4096, 8, 0), (2048, 8, 0), (8192, 16, 132),
                        (16384, 32, 132)):
        if bn > N:
            continue
        for stages in (None, 1):
            extra = {} if stages is None else {"num_stages": stages}
            launch = lambda: softmax._softmax_bwd_loop_kernel[(grid or M,)](  # noqa: E731
                dy, y, dx, M, N, *strides, ALIGN=4, BLOCK_N=bn, STAGES=None, num_warps=w, **extra)
            timed(launch, dx, ref, f"loop step {bn} {w} warps grid {grid or M} num_stages {stages or 'default'}")
    for bn, w, per_sm in ((8192, 16, 1), (8192, 16, 2), (8192, 32, 1), (16384, 32, 1)):
        for stages in (None, 1):
            extra = {} if stages is None else {"num_stages": stages}
            launch = lambda: softmax._softmax_bwd_stream_kernel[(132 * per_sm,)](  # noqa: E731
                dy, y, dx, M, N, *strides, ALIGN=4, BLOCK_N=bn, num_warps=w, **extra)
            timed(launch, dx, ref, f"stream step {bn} {w} warps {per_sm}/SM num_stages {stages or 'default'}")


def layernorm(M, N):
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(M, N, device="cuda", generator=g)
    w_ = torch.randn(N, device="cuda", generator=g)
    b_ = torch.randn(N, device="cuda", generator=g)
    y = torch.empty_like(x)
    ref = torch.nn.functional.layer_norm(x, (N,), w_, b_, 1e-5)
    print(f"== layernorm {M}x{N}")
    for bn, w, grid in ((8192, 16, 0), (4096, 8, 0), (8192, 16, 132), (8192, 32, 132)):
        for stages in (None, 1):
            extra = {} if stages is None else {"num_stages": stages}
            launch = lambda: norms._layernorm_loop_kernel[(grid or M,)](  # noqa: E731
                x, w_, b_, y, M, N, N, 1, N, 1e-5, ALIGN=4, BLOCK_N=bn, STAGES=None, num_warps=w, **extra)
            timed(launch, y, ref, f"loop step {bn} {w} warps grid {grid or M} num_stages {stages or 'default'}")
    for bn, w, per_sm in ((8192, 16, 1), (8192, 16, 2), (8192, 32, 1)):
        for stages in (None, 1):
            extra = {} if stages is None else {"num_stages": stages}
            launch = lambda: norms._layernorm_stream_kernel[(132 * per_sm,)](  # noqa: E731
                x, w_, b_, y, M, N, N, 1, N, 1e-5, ALIGN=4, BLOCK_N=bn, num_warps=w, **extra)
            timed(launch, y, ref, f"stream step {bn} {w} warps {per_sm}/SM num_stages {stages or 'default'}")


if __name__ == "__main__":
    smbwd(1024, 32768)
    smbwd(2048, 32768)
    smbwd(1024, 65536)
    layernorm(1024, 65536)
    layernorm(8192, 65536)
