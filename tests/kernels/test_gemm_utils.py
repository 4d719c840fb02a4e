"""gemm_utils: the dot precision the GEMM-like kernels are built with."""
import torch

from fusebench import settings
import fusebench.kernels.gemm_utils as gu


def test_fp32_dot_precision_follows_the_setting(monkeypatch):
    # FUSEBENCH_FP32_PRECISION is read when a plan is made (settings.refresh(), no reimport); the
    # interpreter computes in ieee whatever the setting, so the GPU's answer is asked for here
    monkeypatch.setattr(gu, "is_interpreter", lambda: False)
    for value in ("ieee", "tf32", "ieee"):
        monkeypatch.setenv("FUSEBENCH_FP32_PRECISION", value)
        settings.refresh()
        assert gu.dot_precision(torch.float32) == value and gu.precision_note(torch.float32) == f"fp32 {value}"
    assert gu.dot_precision(torch.float16) == "ieee" and gu.precision_note(torch.bfloat16) == "bf16"
