import pytest

from fusebench.kernels import tuning
import fusebench.kernels.attention as katt
import fusebench.kernels.b2b as kb2b
import fusebench.kernels.conv  # noqa: F401  (registers conv_add, conv_relu and conv_bn in KERNELS)
import fusebench.kernels.conv_igemm as kigemm
import fusebench.kernels.matmul as kmm


@pytest.fixture(autouse=True)
def _tuning_cache_in_tmp(tmp_path_factory, monkeypatch):
    # Tuning choices made by tests (on a GPU) go to a temporary cache, never the user's, and a
    # later test run tunes again.
    monkeypatch.setattr(tuning.TUNER, "cache", tuning.ChoiceCache(tmp_path_factory.mktemp("tuning")))


# GPU tests: autotuning cut to the first and last config of each space (the largest and the
# smallest tile, which cover the code paths) to keep compiles few.
@pytest.fixture
def few_configs(monkeypatch):
    for tuner in (kmm._gemm_kernel, kmm._gemm_tma_kernel, kmm._gemm_splitk_kernel, kb2b._b2b_kernel, katt._attn_fwd,
                  katt._attn_fwd_tma, kigemm._conv_igemm_kernel):
        if len(tuner.configs) > 2:
            monkeypatch.setattr(tuner, "configs", [tuner.configs[0], tuner.configs[-1]])
