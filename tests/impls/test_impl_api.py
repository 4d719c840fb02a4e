"""fusebench.implementation: a user's function or factory registered for cases, run in the grid."""
import json
import os
import sqlite3
import subprocess
import sys
import textwrap

import pytest
import torch
from typer.testing import CliRunner

import fusebench
from fusebench import catalog, settings
from fusebench.cases import get_case
from fusebench.cli import app
from fusebench.impls import ImplementationError, UserImplementation, get_impl

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(REPO, "examples", "my_softmax.py")


@pytest.fixture(autouse=True)
def _forget_user_impls():
    yield
    catalog.reset()  # the next lookup collects the built-ins again, without this test's own


def invoke(*args):
    return CliRunner().invoke(app, list(args))


def last_line(result):
    return [ln for ln in result.output.splitlines() if ln.strip()][-1]


@pytest.mark.slow
def test_a_function_runs_in_every_cell_of_its_case(db):
    calls = []

    @fusebench.implementation("t-softmax", cases=["softmax"])
    def t_softmax(x):
        calls.append(tuple(x.shape))
        return torch.softmax(x.double(), 1).to(x.dtype)

    df = fusebench.run(["softmax"], impls=["eager", "t-softmax"], shapes="8x16,4x32", device="cpu", db=db)
    mine = df[df.impl == "t-softmax"]
    assert list(mine.status) == ["ok", "ok"] and list(mine.seeds) == [3, 3]
    assert mine.time_us.notna().all()  # a plain function on the CPU is timed
    assert (8, 16) in calls and (4, 32) in calls
    assert isinstance(get_impl("t-softmax"), UserImplementation)


def test_a_wrong_function_is_a_mismatch(db):
    @fusebench.implementation("t-wrong", cases="softmax")
    def wrong(x):
        return torch.softmax(x, 0)  # the wrong dimension

    df = fusebench.run(["softmax"], impls=["t-wrong"], shapes="8x16", device="cpu", db=db)
    assert list(df.status) == ["mismatch"]


def test_a_factory_prepares_one_callable_per_cell(db):
    prepared = []

    @fusebench.implementation("t-ln", cases=["layernorm"], factory=True, description="a factory")
    def make(case, shape, dtype, device):
        prepared.append((case.name, shape, dtype, device))
        return lambda x, w, b: torch.nn.functional.layer_norm(x, (shape[1],), w, b, 1e-5)

    df = fusebench.run(["layernorm"], impls=["t-ln"], shapes="8x16,4x32", device="cpu", db=db)
    assert list(df.status) == ["ok", "ok"]
    assert prepared == [("layernorm", (8, 16), torch.float32, "cpu"), ("layernorm", (4, 32), torch.float32, "cpu")]
    assert get_impl("t-ln").description == "a factory"


def test_it_applies_only_to_the_cases_it_named(db):
    @fusebench.implementation("t-two", cases=["softmax", "double_softmax"])
    def two(x):
        return torch.softmax(x, 1)

    impl = get_impl("t-two")
    assert impl.applies(get_case("softmax")) and impl.applies(get_case("double_softmax"))
    assert not impl.applies(get_case("layernorm"))
    assert "registered for softmax, double_softmax only" in impl.supports(get_case("layernorm"), (8, 16),
                                                                          torch.float32, "cpu")


def test_the_supports_hook_makes_a_cell_unsupported(db):
    @fusebench.implementation("t-small", cases=["softmax"],
                              supports=lambda case, shape, dtype, device: "rows too long" if shape[1] > 16 else None)
    def small(x):
        return torch.softmax(x, 1)

    df = fusebench.run(["softmax"], impls=["t-small"], shapes="8x16,8x32", device="cpu", db=db)
    assert list(df.status) == ["ok", "unsupported"] and df.reason.iloc[1] == "rows too long"


def test_a_triton_function_on_the_cpu_is_checked_but_not_timed(db, monkeypatch):
    @fusebench.implementation("t-tri", cases=["softmax"], triton=True)
    def tri(x):
        return torch.softmax(x, 1)

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    settings.refresh()
    df = fusebench.run(["softmax"], impls=["t-tri"], shapes="8x16", device="cpu", db=db)
    assert list(df.status) == ["ok"] and df.time_us.isna().all() and "interpreter" in df.na.iloc[0]
    monkeypatch.delenv("TRITON_INTERPRET")
    settings.refresh()
    assert "TRITON_INTERPRET=1" in get_impl("t-tri").available("cpu")


@pytest.mark.parametrize("name,cases,message", [
    ("triton", ["softmax"], "implementation 'triton' is built in"),
    ("eager", ["softmax"], "implementation 'eager' is built in"),
    ("liger", ["softmax"], "implementation 'liger' is built in"),
    ("t-x", ["sofmax"], "unknown case 'sofmax' (did you mean softmax"),
    ("t-x", [], "names no case"),
    ("a,b", ["softmax"], "a non-empty name without commas"),
])
def test_bad_registrations_raise(name, cases, message):
    with pytest.raises(ImplementationError) as info:
        fusebench.implementation(name, cases=cases)(lambda x: x)
    assert message in str(info.value)
    assert isinstance(info.value, ValueError)  # the CLI's bad-input handler: exit 2


def test_another_module_cannot_take_a_registered_name():
    fusebench.implementation("t-owned", cases=["softmax"])(lambda x: x)
    other = lambda x: x  # noqa: E731
    other.__module__ = "someone_else"
    with pytest.raises(ImplementationError, match="already registered by"):
        fusebench.implementation("t-owned", cases=["softmax"])(other)
    fusebench.implementation("t-owned", cases=["softmax"])(lambda x: x + 0)  # its own module: replaced


def _plugin(tmp_path, body):
    path = tmp_path / "plug.py"
    path.write_text("import torch\nimport fusebench\n" + textwrap.dedent(body))
    return str(path)


@pytest.mark.parametrize("body,message", [
    ('@fusebench.implementation("triton", cases=["softmax"])\ndef f(x):\n    return x\n',
     "implementation 'triton' is built in"),
    ('@fusebench.implementation("mine", cases=["sofmax"])\ndef f(x):\n    return x\n',
     "unknown case 'sofmax'"),
])
def test_cli_bad_plugin_is_one_line_and_exit_2(tmp_path, db, body, message):
    r = invoke("run", "softmax", "--plugin", _plugin(tmp_path, body), "--shapes", "8x16", "--db", db,
               "--no-isolate", "--metrics", "none")
    assert r.exit_code == 2, r.output
    assert last_line(r).startswith("fusebench: error: ") and message in last_line(r), r.output
    assert not os.path.exists(db) or sqlite3.connect(db).execute("SELECT COUNT(*) FROM cells").fetchone()[0] == 0


def test_a_plugin_implementation_of_a_plugin_case(tmp_path, db):
    path = _plugin(tmp_path, '''
        @fusebench.case(inputs=lambda shape, dtype, device, seed: (fusebench.randn(shape, dtype, device, seed),),
                        shapes=[(8, 16)])
        def t_gelu(x):
            return torch.nn.functional.gelu(x)

        @fusebench.implementation("t-gelu-tanh", cases=["t_gelu"])
        def t_gelu_tanh(x):
            return torch.nn.functional.gelu(x, approximate="tanh")
        ''')
    r = invoke("run", "t_gelu", "--plugin", path, "--impl", "eager,t-gelu-tanh", "--device", "cpu", "--db", db,
               "--no-isolate", "--metrics", "none")
    assert r.exit_code == 0, r.output
    rows = dict(sqlite3.connect(db).execute("SELECT impl, status FROM cells"))
    # tanh's approximation is ~1e-3 off: fusebench sees that it is not the case's function
    assert rows == {"eager": "ok", "t-gelu-tanh": "mismatch"}


@pytest.mark.slow
def test_the_example_plugin_end_to_end(tmp_path):
    """examples/my_softmax.py through the CLI, in worker processes (which load the plugin again):
    stored ok, in the terminal table, the report and compare."""
    db = str(tmp_path / "ex.db")
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))

    def cli(*args):
        r = subprocess.run([sys.executable, "-m", "fusebench", *args], capture_output=True, text=True, env=env,
                           cwd=str(tmp_path), timeout=600)
        assert r.returncode == 0, r.stdout + r.stderr
        return r.stdout

    args = ("run", "softmax", "--plugin", EXAMPLE, "--impl", "eager,my-softmax", "--shapes", "64x128",
            "--device", "cpu", "--db", db)
    table = cli(*args)
    assert "my-softmax" in table and "ok (no timing)" in table
    cli(*args[:-2], "--db", db, "--no-isolate")
    con = sqlite3.connect(db)
    rows = con.execute("SELECT run_id, status, seeds, max_abs_err, na FROM cells WHERE impl='my-softmax'").fetchall()
    assert [r[:3] for r in rows] == [(1, "ok", 3), (2, "ok", 3)] and all(r[3] < 1e-6 for r in rows)
    assert all("interpreter" in json.loads(r[4])["time"] for r in rows)
    cli("report", "--db", db, "-o", "r.html")
    assert "my-softmax" in (tmp_path / "r.html").read_text()
    cli("compare", "1", "2", "--db", db, "-o", "c.html")
    assert "my-softmax" in (tmp_path / "c.html").read_text()
