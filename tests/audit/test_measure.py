"""Audits measured end to end on the CPU (Inductor's C++ backend), on small models."""
import os
import textwrap

import pytest

from fusebench.audit.measure import measure_audit
from fusebench.audit.request import AuditRequest

MODEL = textwrap.dedent('''
    import torch, fusebench

    class Block(torch.nn.Module):
        def __init__(self, d=64, f=128):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(d))
            self.up, self.gate, self.down = torch.nn.Linear(d, f), torch.nn.Linear(d, f), torch.nn.Linear(f, d)

        def forward(self, x):
            if getattr(self, "eager_only", False):
                return self.eager(x)
            y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * self.w
            return x + self.down(torch.nn.functional.silu(self.gate(y)) * self.up(y))

        @torch.compiler.disable
        def eager(self, x):
            return x * 2

    @fusebench.model(sizes={"tokens": 256}, cpu_sizes={"tokens": 32})
    def tiny_block(tokens, *, dtype, device, seed):
        return Block().to(device=device, dtype=dtype), (torch.randn(tokens, 64, device=device, dtype=dtype),)

    @fusebench.model(sizes={"tokens": 256}, cpu_sizes={"tokens": 32})
    def uncompilable(tokens, *, dtype, device, seed):
        m = Block().to(device=device, dtype=dtype)
        m.eager_only = True
        return m, (torch.randn(tokens, 64, device=device, dtype=dtype),)
''')


@pytest.fixture
def plugin(tmp_path, user_models):
    from fusebench.cases import load_plugin

    path = tmp_path / "tiny_model.py"
    path.write_text(MODEL)
    load_plugin(str(path))
    return str(path)


@pytest.mark.slow
def test_audit_of_a_small_block_in_process(plugin):
    req = AuditRequest("tiny_block", mode="fwd_bwd", plugins=(plugin,), compile_time=False)
    res = measure_audit(req, isolate=False)
    assert [s.backend for s in res.steps] == ["eager", "inductor"]
    assert all(s.status == "ok" and s.gpu_time_us > 0 and s.kernels > 0 for s in res.steps)
    assert res.dtype == "fp32" and res.sizes == {"tokens": 32} and res.copy_gbps > 0
    inductor = [k for k in res.kernels if k.backend == "inductor"]
    assert {k.graph for k in inductor} >= {"forward", "backward"}
    gemm = [k for k in inductor if k.klass == "gemm"]
    assert gemm and all(k.flops for k in gemm)
    generated = [k for k in inductor if k.kind == "generated"]
    assert generated and all(k.nodes and k.bytes for k in generated)
    fwd = [r for r in res.regions if r.graph == "forward"]
    assert any(r.case == "rmsnorm" and r.case_shape == "32x64" for r in fwd)
    assert any(r.case == "swiglu" and r.case_shape == "32x128" for r in fwd)
    for r in res.regions:
        assert r.ideal_us is not None and r.time_us > 0 and r.gap_us == pytest.approx(r.time_us - r.ideal_us)
    timed = [r for r in res.regions if r.case_times]
    assert timed and all("triton" in r.case_times for r in timed)


@pytest.mark.slow
def test_a_backend_that_fails_is_recorded_and_the_audit_goes_on(plugin):
    req = AuditRequest("uncompilable", mode="fwd", plugins=(plugin,), compile_time=False, catalog=False)
    res = measure_audit(req, isolate=True)
    eager, inductor = res.steps
    assert eager.status == "ok" and eager.gpu_time_us > 0
    assert inductor.status == "error" and "ran eagerly" in inductor.reason


@pytest.mark.slow
def test_a_script_without_a_main_guard_audits_its_own_model(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "audit_me.py"
    script.write_text(textwrap.dedent('''
        import torch, fusebench

        @fusebench.model(sizes={"tokens": 64}, cpu_sizes={"tokens": 16})
        def scripted(tokens, *, dtype, device, seed):
            return torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.GELU()).to(device, dtype), \\
                (torch.randn(tokens, 32, device=device, dtype=dtype),)

        r = fusebench.audit_model("scripted", compile_time=False, catalog=False, db="audit.db")
        print("STEPS", [(s.backend, s.status) for s in r.steps])
    '''))
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PYTHONPATH": root}
    out = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                         env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.count("STEPS") == 1 and "('eager', 'ok'), ('inductor', 'ok')" in out.stdout, out.stdout
