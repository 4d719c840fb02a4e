"""fusebench's pytest plugin, run by pytest itself (pytester): the `fusebench` fixture's
assert_fused in a user's test file, and the fusebench_baseline marker.  Inner pytest runs that
compile run in a subprocess: an in-process run drops the modules it imported when it ends, and
torch's compiler cannot be imported twice in one process."""
import importlib.metadata
import os
import sys

import pytest

pytest_plugins = ["pytester"]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _installed() -> bool:
    """Whether the installed fusebench declares the entry point (the working directory left out of the
    search: a stale fusebench.egg-info beside the sources would answer for the installation)."""
    paths = [p for p in sys.path if p not in ("", os.getcwd(), ROOT)]
    return any(e.group == "pytest11" and e.name == "fusebench" and e.value == "fusebench.pytest_plugin"
               for d in importlib.metadata.distributions(name="fusebench", path=paths) for e in d.entry_points)


# The plugin named, its entry point blocked: one registration whether or not fusebench is installed.
PLUGIN = ["-p", "no:fusebench", "-p", "fusebench.pytest_plugin"]


def test_the_entry_point_names_the_plugin():
    tomllib = pytest.importorskip("tomllib")
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    assert project["entry-points"]["pytest11"] == {"fusebench": "fusebench.pytest_plugin"}


@pytest.mark.slow
def test_the_installed_entry_point_loads_the_plugin(pytester):
    if not _installed():
        pytest.skip("fusebench is installed without its pytest11 entry point: reinstall it (pip install -e .)")
    result = pytester.runpytest_subprocess("--fixtures", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["fusebench -- *pytest_plugin.py*"])


def test_the_fixture_and_the_marker_are_registered(pytester):
    result = pytester.runpytest(*PLUGIN, "--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.fusebench_baseline(*cases, shape=None, *"])
    result = pytester.runpytest(*PLUGIN, "--fixtures")
    result.stdout.fnmatch_lines(["fusebench -- *pytest_plugin.py*"])


@pytest.mark.slow
def test_assert_fused_in_a_users_suite(pytester):
    pytester.makepyfile(test_user="""
        import torch

        def split(x):
            y = x.sin()
            torch._dynamo.graph_break()
            return y.cos() + 1

        def test_fused(fusebench):
            assert fusebench.assert_fused(lambda x: (x.sin() + 1).cos(), torch.randn(8, 8)).kernels == 1

        def test_split(fusebench):
            fusebench.assert_fused(split, torch.randn(8, 8), max_kernels=1)

        def test_ceiling_on_the_cpu(fusebench):
            fusebench.assert_fused(torch.sin, torch.randn(8), min_ceiling=0.8)
    """)
    result = pytester.runpytest_subprocess(*PLUGIN, "-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1, skipped=1)
    result.stdout.fnmatch_lines([
        "*AssertionError: assert_fused(split): 2 kernels per call (2 generated + 0 extern), expected at most 1",
        "*cpp_fused_sin_0*generated*x1*aten.sin",
        "*SKIPPED*min_ceiling=0.8 not checked: the copy ceiling is measured on a CUDA GPU*",
    ])


@pytest.mark.slow
def test_the_marker_holds_a_case_to_the_baseline(pytester):
    entry = """
        [[cpu.cells]]
        case = "softmax"
        impl = "inductor"
        shape = "64x64"
        dtype = "fp32"
        status = "ok"
        generated_kernels = 1
        extern_kernels = 0
        graph_breaks = 0
        recompiles = 0
        kernels = [{{ graph = "inference", kind = "generated", launches = 1, ops = [{ops}], name = "k_0" }}]
    """
    pytester.makefile(".toml", **{
        "fusebench-baseline": "format = 1\n[cpu]\n" + entry.format(ops='"aten._softmax"').replace("        ", ""),
        "wrong": "format = 1\n[cpu]\n" + entry.format(ops='"aten.exp"').replace("        ", ""),
    })
    pytester.makepyfile(test_marked="""
        import pytest

        @pytest.mark.fusebench_baseline("softmax", shape="64x64", device="cpu")
        def test_holds():
            pass

        @pytest.mark.fusebench_baseline("softmax", baseline="wrong.toml", device="cpu")
        def test_differs():
            pass

        @pytest.mark.fusebench_baseline("layernorm", device="cpu")
        def test_not_in_the_baseline():
            pass
    """)
    result = pytester.runpytest_subprocess(*PLUGIN, "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(["*FAIL softmax inductor 64x64 fp32 fwd", "*- inference generated x1: aten.exp",
                                 "*+ inference generated x1: aten._softmax"])
    result.stdout.fnmatch_lines(["*fusebench_baseline: *names no such cell for device class 'cpu'"])
