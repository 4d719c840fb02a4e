"""Synthetic audits: what the measuring core returns, built by hand so that the store, the terminal,
the report and the comparison are tested without compiling anything."""
from fusebench.audit.result import AuditResult, KernelRow, RegionRow, StepRow


def synthetic_audit(*, device="cuda", mode="fwd_bwd", backends=("eager", "inductor"), scale=1.0,
                    failed=None, copy_gbps=3000.0, model="tiny-llama") -> AuditResult:
    """A small llama-like step: eager and the compiled backends, each with GEMMs, attention, memory
    kernels and (compiled) a gradient accumulation outside the graph; two memory-bound regions per
    compiled backend.  `scale` multiplies every compiled time; `failed` = {backend: status} makes
    that backend's step fail (no kernels)."""
    failed = failed or {}
    r = AuditResult(model=model, mode=mode, dtype="bf16", sizes={"batch": 1, "tokens": 128}, device=device,
                    backends=list(backends), copy_gbps=copy_gbps, matmul_tflops=700.0 if copy_gbps else None,
                    notes=["ceilings measured at the audit's start"])
    r.steps.append(StepRow("eager", gpu_time_us=500.0, wall_us=620.0, profiled_us=480.0, kernel_time_us=470.0,
                           kernels=40, peak_mem_bytes=64 << 20))
    r.kernels += [
        KernelRow("eager", "eager", "ampere_bf16_gemm_128x64", "gemm", 8, 300.0, op="aten::mm"),
        KernelRow("eager", "eager", "flash_fwd_kernel", "attention", 1, 60.0, op="aten::_flash_attention_forward"),
        KernelRow("eager", "eager", "vectorized_elementwise_kernel<mul>", "memory", 20, 100.0, op="aten::mul"),
        KernelRow("eager", "eager", "CatArrayBatchedCopy", "copy", 2, 10.0, op="aten::cat"),
    ]
    for backend in backends[1:]:
        if backend in failed:
            r.steps.append(StepRow(backend, status=failed[backend], reason="CUDA out of memory. Tried to allocate 2.00 GiB"))
            continue
        s = scale
        r.steps.append(StepRow(backend, gpu_time_us=400.0 * s, wall_us=450.0 * s, profiled_us=390.0 * s,
                               kernel_time_us=370.0 * s, kernels=22, peak_mem_bytes=60 << 20, compile_cold_s=30.0,
                               compile_warm_s=3.0, break_even_steps=300000.0, graphs=2, graph_breaks=0, recompiles=0))
        r.kernels += [
            KernelRow(backend, "forward", "ampere_bf16_gemm_128x64", "gemm", 4, 150.0 * s, op="aten::mm",
                      kind="extern", flops=10**9, tflops=6.7, pct_matmul=0.95),
            KernelRow(backend, "backward", "ampere_bf16_gemm_128x64", "gemm", 4, 140.0 * s, op="aten::mm",
                      kind="extern"),
            KernelRow(backend, "forward", "triton_red_fused_add_mean_pow_rsqrt_0", "memory", 2, 30.0 * s,
                      kind="generated", nodes=["add", "pow", "mean", "rsqrt", "mul"], ops=["aten.add", "aten.mean"],
                      bytes=4 << 20, bytes_source="inductor", gbps=140.0, pct_copy=0.05, region=0),
            KernelRow(backend, "backward", "triton_poi_fused_mul_silu_1", "memory", 2, 30.0 * s, kind="generated",
                      bytes=6 << 20, bytes_source="inductor", region=0),
            KernelRow(backend, "outside", "vectorized_elementwise_kernel<add>", "memory", 10, 20.0 * s,
                      op="aten::add_", outside="gradient accumulation (AccumulateGrad)"),
        ]
        r.regions += [
            RegionRow(backend, "forward", 0, "rmsnorm-like: pow, mean, rsqrt, mul", ["pow", "mean", "rsqrt", "mul"],
                      ["triton_red_fused_add_mean_pow_rsqrt_0", "triton_red_fused_add_mean_pow_rsqrt_0"],
                      bytes=4 << 20, ideal_us=1.4 if copy_gbps else None, time_us=30.0 * s,
                      gap_us=30.0 * s - 1.4 if copy_gbps else None,
                      pct_step=100 * (30.0 * s - 1.4) / (400.0 * s) if copy_gbps else None,
                      after=["mm"], before=["mm_1"], refusals=["node too large for one reduction"],
                      case="rmsnorm", case_shape="128x4096", case_mode="fwd",
                      case_times={"triton": 2.1, "liger": 2.4, "quack": "not installed"}),
            RegionRow(backend, "backward", 0, "swiglu-like: silu, mul", ["silu", "mul"],
                      ["triton_poi_fused_mul_silu_1"], bytes=6 << 20, ideal_us=2.1 if copy_gbps else None,
                      time_us=30.0 * s, gap_us=30.0 * s - 2.1 if copy_gbps else None,
                      pct_step=100 * (30.0 * s - 2.1) / (400.0 * s) if copy_gbps else None),
        ]
    return r


def store_audit(path, result, *, status="done", env=None) -> int:
    """Record `result` as an audit run in the store at `path`, as `fusebench audit` does."""
    from fusebench.audit.request import AuditRequest
    from fusebench.audit.store import save
    from fusebench.store import Store

    request = AuditRequest(result.model, mode=result.mode, dtype=result.dtype, sizes=dict(result.sizes),
                           device=result.device, compile_modes=tuple(b.removeprefix("inductor-") if b != "inductor"
                                                                     else "default" for b in result.backends[1:]))
    env = env or {"device": result.device, "device_name": "NVIDIA H100 80GB HBM3", "torch": "2.13.0"}
    with Store.open(path) as st:
        rid = st.start_run(env, {"kind": "audit", "audit": request.as_dict()}, {})
        save(st, rid, result)
        st.finish_run(rid, status)
    return rid


def store_cells_run(path) -> int:
    """A run of cells (no audit), stored directly."""
    from fusebench.store import Store

    with Store.open(path) as st:
        rid = st.start_run({"device": "cpu"}, {"cases": ["softmax"], "impls": ["eager"], "shapes": "16x32"}, {})
        st.add_cell(rid, {"case_name": "softmax", "impl": "eager", "shape": "16x32", "dtype": "fp32",
                          "device": "cpu", "status": "ok", "time_us": 3.0})
        st.finish_run(rid, "done")
    return rid
