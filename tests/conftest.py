import os

import pytest
import torch

# Without a GPU, Triton kernels run under Triton's interpreter.  This must be set before any
# kernel module is imported (triton.jit reads it at decoration time), so it is set here.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        # Triton compiles for the GPU here: no kernel runs on CPU tensors or in the interpreter's order
        if os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
            skip = pytest.mark.skip(reason="runs only under Triton's interpreter: run without a GPU")
            for item in items:
                if "interpreter" in item.keywords and "gpu" not in item.keywords:
                    item.add_marker(skip)
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _settings_follow_the_environment():
    # fusebench reads its settings once (settings.current()); a test that changes a variable
    # calls settings.refresh(), and the environment it restores is read again here afterwards.
    # Defined before any fixture that uses monkeypatch, so it is torn down after monkeypatch.
    from fusebench import settings

    settings.refresh()
    yield
    settings.refresh()


@pytest.fixture
def db(tmp_path):
    return str(tmp_path / "fb.db")


@pytest.fixture(autouse=True)
def _no_user_db(monkeypatch, tmp_path):
    # Tests never touch a fusebench.db in the working directory.
    monkeypatch.setenv("FUSEBENCH_DB", str(tmp_path / "default.db"))
    yield
