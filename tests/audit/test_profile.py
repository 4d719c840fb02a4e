"""Profiled events turned into kernels with their launch context (synthetic profiler events)."""
from types import SimpleNamespace

from torch.autograd import DeviceType

from fusebench.audit.profile import STEP_RANGE, gpu_kernels, median_step


def _ev(name, start, end, device=DeviceType.CPU, parent=None, kernels=(), id=0, annotation=False):
    e = SimpleNamespace(name=name, device_type=device, is_user_annotation=annotation, time_range=SimpleNamespace(start=start, end=end,
                        elapsed_us=lambda: end - start), cpu_parent=parent, kernels=[SimpleNamespace(name=k) for k in kernels],
                        cpu_children=[], id=id)
    if parent is not None:
        parent.cpu_children.append(e)
    return e


def test_device_kernels_find_their_launcher_and_graph():
    step = _ev(f"{STEP_RANGE}1", 0, 100)
    fn = _ev("CompiledFunction", 1, 90, parent=step)
    call = _ev("## Call CompiledFxGraph None ##", 2, 80, parent=fn)
    launch = _ev("cuLaunchKernel", 3, 4, parent=call, kernels=["triton_poi_fused_add_0"])
    mm = _ev("aten::mm", 5, 9, parent=call)
    mm_launch = _ev("cudaLaunchKernel", 6, 7, parent=mm, kernels=["nvjet_gemm"])
    acc = _ev("torch::autograd::AccumulateGrad", 91, 95, parent=step)
    add = _ev("aten::add_", 92, 94, parent=acc, kernels=["vectorized_add"])
    # Inductor also opens a CPU range named after each Triton kernel it launches
    _ev("triton_poi_fused_add_0", 3, 4, parent=call)
    device = [_ev("ProfilerStep*", 0, 100, DeviceType.CUDA, annotation=True),
              _ev("triton_poi_fused_add_0", 10, 12, DeviceType.CUDA),
              _ev("nvjet_gemm", 13, 20, DeviceType.CUDA), _ev("vectorized_add", 95, 96, DeviceType.CUDA),
              _ev("## Call CompiledFxGraph None ##", 10, 20, DeviceType.CUDA, annotation=True)]
    prof = SimpleNamespace(events=lambda: [step, fn, call, launch, mm, mm_launch, acc, add] + device)
    ks = gpu_kernels(prof)
    assert [k.name for k in ks] == ["triton_poi_fused_add_0", "nvjet_gemm", "vectorized_add"]
    triton, gemm, outside = ks
    assert triton.graph_kind == "forward" and triton.graph_key and triton.op is None
    assert gemm.op == "aten::mm" and gemm.op_seq == 1 and gemm.graph_key == triton.graph_key
    assert outside.graph_key is None and "torch::autograd::AccumulateGrad" in outside.ancestors
    assert {k.step for k in ks} == {f"{STEP_RANGE}1"}


def test_median_step_takes_each_kernels_median_and_the_span():
    from fusebench.audit.profile import ProfiledKernel

    def k(name, t, start, step):
        return ProfiledKernel(name, t, start, start + t, graph_key=f"g@{step}", ancestors=[f"{STEP_RANGE}{step}"])

    runs = [k("a", 10, 0, 1), k("b", 5, 10, 1), k("a", 90, 100, 2), k("b", 6, 190, 2), k("a", 12, 300, 3), k("b", 4, 312, 3)]
    kernels, span = median_step(runs)
    assert [(x.name, x.time_us) for x in kernels] == [("a", 12), ("b", 5)]
    assert {x.graph_key for x in kernels} == {"g@3"}  # one step's graph call, whichever step gave the median
    assert span == 16
