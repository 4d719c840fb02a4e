"""fusebench's pytest plugin (registered through the `pytest11` entry point): fusion checks in a
team's own test suite.

The `fusebench` fixture:

    def test_bias_gelu_fuses(fusebench):
        x, b = torch.randn(256, 1024), torch.randn(1024)
        fusebench.assert_fused(lambda x, b: F.gelu(x + b), x, b, max_kernels=1)

`fusebench.assert_fused` is fusebench.assert_fused (check/assertions.py); `fusebench.inspect`
returns the report of what Inductor made of a function without asserting anything.

The marker holds cells to the committed baseline (`fusebench check`'s file):

    @pytest.mark.fusebench_baseline("softmax", shape="1024x1024", impl="inductor")
    def test_softmax_holds():
        pass

Before the test's body runs, the baseline's entries for this device class that match (the case;
shape, impl, dtype and mode where given) are measured and judged as `fusebench check` judges them,
timing left out unless `max_slowdown=PCT` is given; the test fails with the check's diff.
The file is the marker's `baseline=` or the ini option `fusebench_baseline` (relative to the
rootdir; default fusebench-baseline.toml), plugin files for cases the baseline names are
`plugins=[...]` or the ini option `fusebench_plugins`.
"""
from __future__ import annotations

import os

import pytest

MARKER = "fusebench_baseline"


def pytest_addoption(parser) -> None:
    parser.addini("fusebench_baseline", "fusebench baseline file the fusebench_baseline marker checks against "
                                        "(relative to the rootdir)", default="fusebench-baseline.toml")
    parser.addini("fusebench_plugins", "Python files registering cases or implementations the fusebench baseline "
                                       "names (relative to the rootdir)", type="linelist", default=[])


def pytest_configure(config) -> None:
    config.addinivalue_line(
        "markers", f"{MARKER}(*cases, shape=None, impl=None, dtype=None, mode=None, baseline=None, plugins=None, "
                   "max_slowdown=None, device=None): hold the cases' cells to the committed fusebench baseline "
                   "(fusebench check)")


class Fusebench:
    """What the `fusebench` fixture gives a test."""

    @staticmethod
    def assert_fused(fn, *inputs, max_kernels: int = 1, min_ceiling: float | None = None, mode: str = "fwd",
                     device=None):
        from fusebench.check.assertions import assert_fused

        return assert_fused(fn, *inputs, max_kernels=max_kernels, min_ceiling=min_ceiling, mode=mode, device=device)

    @staticmethod
    def inspect(fn, *inputs, mode: str = "fwd", device=None, detail: bool = False):
        from fusebench.check.assertions import inspect

        return inspect(fn, *inputs, mode=mode, device=device, detail=detail)


@pytest.fixture
def fusebench() -> Fusebench:
    """fusebench.assert_fused(fn, *inputs, max_kernels=1, min_ceiling=None, mode="fwd", device=None), and
    fusebench.inspect(fn, *inputs, mode="fwd"): what Inductor made of fn."""
    return Fusebench()


def _paths(config, values) -> list[str]:
    root = str(config.rootpath)
    return [v if os.path.isabs(v) else os.path.join(root, v) for v in values]


def check_marker(item, marker) -> None:
    """Run the check a fusebench_baseline marker asks for; pytest.fail with its diff."""
    from fusebench.check.verify import Rules, run_check
    from fusebench.env import best_device

    kw = dict(marker.kwargs)
    unknown = sorted(set(kw) - {"shape", "impl", "dtype", "mode", "baseline", "plugins", "max_slowdown", "device"})
    if unknown or not marker.args:
        pytest.fail(f"{MARKER}: name the case(s) as arguments; unknown keyword {unknown[0]!r}" if unknown
                    else f"{MARKER}: name the case(s) as arguments", pytrace=False)
    config = item.config
    path = _paths(config, [kw.get("baseline") or config.getini("fusebench_baseline")])[0]
    plugins = _paths(config, kw.get("plugins") or config.getini("fusebench_plugins"))
    cases, want = set(marker.args), {k: kw.get(k) for k in ("shape", "impl", "dtype", "mode")}

    def only(entry) -> bool:
        return entry.case in cases and all(v is None or getattr(entry, k) == v for k, v in want.items())

    slowdown = kw.get("max_slowdown")
    rules = Rules(check_time=slowdown is not None, max_slowdown_pct=float(slowdown or 0.0))
    try:
        result = run_check(path, device=kw.get("device") or best_device(), plugins=plugins, rules=rules, only=only)
    except (ValueError, RuntimeError) as exc:  # a baseline or request that cannot be checked
        pytest.fail(f"{MARKER}: {exc}", pytrace=False)
    if result.failed:
        pytest.fail("\n".join(result.report() + [result.summary()]), pytrace=False)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item) -> None:
    for marker in item.iter_markers(MARKER):
        check_marker(item, marker)
