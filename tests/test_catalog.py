"""The catalog: one loader walks the packages, an op's pieces attach to its case object, and an op
added as one module of a package of its own runs like a built-in one, with no list edited."""
import os
import sqlite3
import sys
import textwrap

import pytest
import torch
from typer.testing import CliRunner

import fusebench
from fusebench import catalog, settings
from fusebench.cases import Case, all_cases, get_case
from fusebench.cases.base import _REGISTRY, MEMORY_BOUND_INTENSITY, numel_bytes
from fusebench.cli import app
from fusebench.impls import get_impl
from fusebench.kernels import KERNELS

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TOY = '''
"""A toy op: the case, and a plain torch function standing in for its Triton kernel."""
import torch

from fusebench.cases.base import Case, numel_bytes, randn
from fusebench.kernels.registry import triton_kernel


def toy_scale(x):
    return x * 3.0


TOY_SCALE = Case(
    name="toy_scale", family="toy", fn=toy_scale,
    make_inputs=lambda shape, dtype, device, seed: (randn(shape, dtype, device, seed),),
    quick_shapes=[(8, 16)], bytes_model=lambda s, dt: 2 * numel_bytes(s, dt),
    flops_model=lambda s, dt: s[0] * s[1], memory_bound=True,
)


@triton_kernel(TOY_SCALE)
def toy_scale_kernel(x):
    return torch.mul(x, 3.0)
'''


@pytest.fixture
def ops_package(tmp_path, monkeypatch):
    """write(name, {module: source}) makes package `name` under tmp_path, importable here and in
    worker processes, and names it in FUSEBENCH_OPS; the catalog and the package are forgotten after."""
    made = []

    def write(name, modules):
        pkg = tmp_path / name
        pkg.mkdir()
        (pkg / "__init__.py").write_text("")
        for module, source in modules.items():
            (pkg / f"{module}.py").write_text(textwrap.dedent(source))
        made.append(name)
        monkeypatch.setenv(catalog.OPS_VARIABLE, ",".join(made))
        return name

    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), REPO, os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # the toy kernel runs on the CPU, as our kernels do there
    settings.refresh()
    yield write
    monkeypatch.delenv(catalog.OPS_VARIABLE)
    for name in list(sys.modules):
        if name.split(".")[0] in made:
            del sys.modules[name]
    catalog.reset()


def test_an_op_in_one_module_of_a_package_of_its_own_is_loaded(ops_package):
    pkg = ops_package("toyops_a", {"scale": TOY})
    case = get_case("toy_scale")
    module = sys.modules[f"{pkg}.scale"]
    assert case is module.TOY_SCALE and case.kernel.fn is module.toy_scale_kernel
    assert KERNELS["toy_scale"] is case.kernel
    assert get_impl("triton").applies(case) and get_impl("memcpy").applies(case)
    assert not get_impl("torch-mm").applies(case)
    assert [c.name for c in all_cases()][-1] == "toy_scale"  # after the built-in packages


def test_fusebench_run_and_the_api_run_the_toy_op_with_triton(ops_package, db):
    ops_package("toyops_b", {"scale": TOY})
    df = fusebench.run(["toy_scale"], impls=["eager", "triton"], shapes="8x16", device="cpu", db=db,
                       metrics="none", isolate=False)
    assert dict(zip(df.impl, df.status)) == {"eager": "ok", "triton": "ok"}, df[["impl", "status", "reason"]]
    r = CliRunner().invoke(app, ["run", "toy_scale", "--impl", "triton", "--shapes", "8x16", "--device", "cpu",
                                 "--db", db, "--no-isolate", "--metrics", "none"])
    assert r.exit_code == 0, r.output
    rows = sqlite3.connect(db).execute("SELECT run_id, impl, status FROM cells WHERE impl = 'triton'").fetchall()
    assert rows == [(1, "triton", "ok"), (2, "triton", "ok")]


def test_worker_processes_find_the_toy_op_through_the_variable(ops_package, db):
    ops_package("toyops_h", {"scale": TOY})
    df = fusebench.run(["toy_scale"], impls=["eager", "triton"], shapes="8x16", device="cpu", db=db,
                       metrics="none", isolate=True)
    assert dict(zip(df.impl, df.status)) == {"eager": "ok", "triton": "ok"}, df[["impl", "status", "reason"]]


def test_a_wrong_toy_kernel_is_a_mismatch(ops_package, db):
    ops_package("toyops_c", {"scale": TOY.replace("torch.mul(x, 3.0)", "torch.mul(x, 2.0)")})
    df = fusebench.run(["toy_scale"], impls=["triton"], shapes="8x16", device="cpu", db=db, metrics="none",
                       isolate=False)
    assert list(df.status) == ["mismatch"]


def test_import_errors_are_data_and_helpers_add_nothing(ops_package):
    ops_package("toyops_d", {
        "scale": TOY,
        "broken": "raise RuntimeError('no such library')\n",
        "helper": "SCALE = 3.0\n",
        "_private": "raise AssertionError('a module named with _ is never imported')\n",
    })
    assert get_case("toy_scale").kernel is not None and get_case("softmax").kernel is not None
    errors = catalog.CATALOG.errors
    assert errors == {"toyops_d.broken": "RuntimeError: no such library"}
    assert "toyops_d._private" not in sys.modules
    with pytest.raises(ValueError, match="modules that failed: toyops_d.broken"):
        get_case("toy_scal")


def test_a_missing_package_is_an_error_not_a_crash(ops_package, monkeypatch):
    ops_package("toyops_e", {"scale": TOY})
    monkeypatch.setenv(catalog.OPS_VARIABLE, "toyops_e,no_such_ops_package")
    assert get_case("toy_scale").name == "toy_scale"
    assert "ModuleNotFoundError" in catalog.CATALOG.errors["no_such_ops_package"]


def test_a_case_declared_twice_keeps_the_first_and_says_so(ops_package):
    ops_package("toyops_f", {"a_first": TOY, "b_second": TOY.replace("x * 3.0", "x * 3")})
    assert get_case("toy_scale") is sys.modules["toyops_f.a_first"].TOY_SCALE
    assert "declared twice" in catalog.CATALOG.errors["toyops_f.b_second"]


def test_a_kernel_named_by_its_case_name_attaches_to_that_case(ops_package):
    ops_package("toyops_g", {"scale": TOY.replace("@triton_kernel(TOY_SCALE)", '@triton_kernel("toy_scale")'),
                             "stray": 'from fusebench.kernels.registry import triton_kernel\n'
                                      '@triton_kernel("no_such_case")\ndef k(x):\n    return x\n'})
    assert get_case("toy_scale").kernel.fn is sys.modules["toyops_g.scale"].toy_scale_kernel
    assert "no_such_case" in catalog.CATALOG.errors["toyops_g.stray"]


def test_reset_empties_the_tables_in_place_and_the_next_lookup_refills_them():
    names = [c.name for c in all_cases()]
    softmax, triton, metric = get_case("softmax"), get_impl("triton"), fusebench.metrics.get_metric("flops")
    catalog.reset()
    assert not _REGISTRY and _REGISTRY is catalog.CATALOG.cases and not catalog.CATALOG.walked
    assert [c.name for c in all_cases()] == names
    assert get_case("softmax") is softmax and get_impl("triton") is triton
    assert fusebench.metrics.get_metric("flops") is metric
    assert softmax.kernel is KERNELS["softmax"] and softmax.kernel is not None


def test_the_built_in_order_is_the_specifications():
    names = [c.name for c in all_cases() if c.plugin is None]
    assert names[:3] == ["pointwise_chain", "softmax", "double_softmax"] and names[-1] == "cross_entropy"
    impls = [i.name for i in fusebench.impls.all_impls()]
    assert impls[:4] == ["eager", "inductor", "inductor-max-autotune", "triton"]
    assert impls.index("memcpy") < impls.index("liger")


def test_each_kernel_and_adapter_is_attached_to_its_case_object():
    with_kernel = {c.name for c in all_cases() if c.kernel is not None}
    assert {"softmax", "layernorm", "matmul_add", "attention", "conv_bn", "cross_entropy"} <= with_kernel
    assert all(get_case(n).kernel.case == n for n in with_kernel)
    assert get_case("softmax").kernel.autograd is not None
    assert {"liger", "quack"} <= set(get_case("softmax").adapters)
    assert {"sdpa-flash", "flash-attn", "xformers"} <= set(get_case("attention").adapters)
    assert set(get_case("matmul_relu").adapters) == {"cublaslt"}


def test_memory_bound_and_the_ceiling_are_fields_of_the_case():
    from fusebench.cases import memory_bound_names

    # the built-in cases whose Triton kernel should run at the copy rate, each declaring it
    assert set(memory_bound_names()) == {
        "pointwise_chain", "softmax", "double_softmax", "softmax_backward", "layernorm", "norm_chain",
        "horizontal_reduction_pointwise", "horizontal_reduction_reduction", "bias_gelu", "bias_dropout_add",
        "bias_dropout_add_transposed", "rmsnorm", "add_rmsnorm", "swiglu", "cross_entropy"}
    assert get_case("softmax").ceiling == "memcpy" and get_case("matmul_add").ceiling == "torch-mm"
    assert get_case("matmul_matmul").ceiling is None

    def user_case(flops_per_element):
        return Case(name="u", family="user", fn=lambda x: x, make_inputs=lambda *a: (), quick_shapes=[(4, 4)],
                    bytes_model=lambda s, dt: numel_bytes(s, dt),
                    flops_model=lambda s, dt: flops_per_element * s[0] * s[1])

    light, heavy = user_case(1), user_case(4 * MEMORY_BOUND_INTENSITY + 4)  # fp32: 4 bytes an element
    assert light.memory_bound and light.ceiling == "memcpy"
    assert not heavy.memory_bound and heavy.ceiling is None
    assert not Case(name="v", family="user", fn=abs, make_inputs=lambda *a: ()).memory_bound  # no byte model


def test_an_implementation_marked_in_a_plugin_file_is_registered(tmp_path):
    plugin = tmp_path / "plug.py"
    plugin.write_text(textwrap.dedent('''
        from fusebench.impls.base import Implementation, Prepared, implementation

        @implementation
        class Twice(Implementation):
            name = "test-catalog-twice"

            def prepare(self, case, shape, dtype, device):
                return Prepared(fn=case.fn)
        '''))
    try:
        fusebench.cases.load_plugin(str(plugin))
        assert get_impl("test-catalog-twice").prepare(get_case("softmax"), (2, 2), torch.float32, "cpu").fn \
            is get_case("softmax").fn
    finally:
        catalog.reset()


def test_a_module_that_fails_to_import_is_named_by_list_and_the_rest_loads(ops_package):
    ops_package("toyops_broken", {"scale": TOY, "broken": "raise RuntimeError('no such library')\n"})
    r = CliRunner().invoke(app, ["list"])
    assert r.exit_code == 0, r.output
    assert "toy_scale" in r.output and "softmax" in r.output
    assert "not loaded: toyops_broken.broken: RuntimeError: no such library" in r.output
