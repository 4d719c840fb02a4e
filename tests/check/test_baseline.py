"""The baseline file: entries from stored cells, written as TOML or JSON and read back the same,
device classes, and files that are not baselines."""
import json

import pytest

from fusebench.check.baseline import (Baseline, BaselineError, Entry, Section, default_path, device_class, read,
                                      to_toml, write)

KERNELS = [{"graph": "inference", "kind": "generated", "launches": 1, "ops": ["aten.amax", "aten.sub"],
            "name": "cpp_fused_amax_sub_0"},
           {"graph": "inference", "kind": "extern", "launches": 2, "ops": ["aten.mm"], "name": "extern_kernels.mm"}]


def stored_row(**kw):
    row = {"case_name": "softmax", "impl": "inductor", "shape": "1024x1024", "dtype": "fp32",
           "requested_dtype": "fp32", "mode": "fwd", "status": "ok", "reason": float("nan"),
           "tol_ratio": 0.00123456, "generated_kernels": 1.0, "extern_kernels": 2.0,
           "fusion_kernels": json.dumps(KERNELS), "graph_breaks": 0.0, "recompiles": 0.0, "kernels": float("nan"),
           "time_us": 123.456789, "time_q20_us": 120.0, "time_q80_us": 130.0, "time_spread": 0.0812345,
           "time_reps": 500.0}
    row.update(kw)
    return row


def sample() -> Baseline:
    odd = Entry("my \"case\"\\ é\x7f", "eager", "64x64", "fp16", status="mismatch", reason="error 3.2x the tolerance",
                tol_ratio=3.2)
    cpu = Section("cpu", {"device_name": "x86_64", "torch": "2.13.0+cpu"},
                  [Entry.from_row(stored_row()), odd])
    gpu = Section("h100", {"device_name": "NVIDIA H100 80GB HBM3"},
                  [Entry.from_row(stored_row(kernels=3.0, requested_dtype="bf16"))])
    return Baseline({"cpu": cpu, "h100": gpu})


def test_an_entry_keeps_the_cell_facts_rounded_for_reading():
    e = Entry.from_row(stored_row())
    assert e.key() == ("softmax", "inductor", "1024x1024", "fp32", "fwd")
    assert (e.generated_kernels, e.extern_kernels, e.graph_breaks, e.recompiles) == (1, 2, 0, 0)
    assert (e.time_us, e.time_spread, e.time_reps, e.tol_ratio) == (123.46, 0.0812, 500, 0.00123)
    assert e.reason is None and e.profiled_kernels is None and e.kernels == KERNELS
    failed = Entry.from_row(stored_row(status="mismatch", reason="wrong", time_us=float("nan")))
    assert failed.reason == "wrong" and failed.time_us is None


@pytest.mark.parametrize("name", ["b.toml", "b.json"])
def test_round_trip(tmp_path, name):
    path = str(tmp_path / name)
    write(sample(), path)
    back = read(path)
    assert back == sample()


def test_toml_is_one_line_per_fact_and_per_kernel_and_valid_toml():
    tomllib = pytest.importorskip("tomllib")
    text = to_toml(sample())
    assert tomllib.loads(text)["format"] == 1
    assert "[[cpu.cells]]" in text and "[[h100.cells]]" in text and "generated_kernels = 1" in text
    assert ('  { graph = "inference", kind = "extern", launches = 2, ops = ["aten.mm"], '
            'name = "extern_kernels.mm" },') in text.splitlines()


def test_writing_replaces_the_file_whole(tmp_path):
    path = tmp_path / "b.toml"
    path.write_text("old")
    write(sample(), str(path))
    assert read(str(path)) == sample() and [p.name for p in tmp_path.iterdir()] == ["b.toml"]


def test_merged_section_replaces_the_same_cells_and_keeps_the_others():
    s = sample().sections["cpu"]
    newer = Entry.from_row(stored_row(generated_kernels=2.0))
    added = Entry.from_row(stored_row(shape="64x64"))
    merged = s.merged([newer, added], {"torch": "x"})
    assert merged.meta == {"torch": "x"} and len(merged.entries) == 3
    assert merged.by_key()[newer.key()].generated_kernels == 2
    assert [e.shape for e in merged.entries if e.case == "softmax"] == ["64x64", "1024x1024"]  # by size


@pytest.mark.parametrize("name,expected", [
    ("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA H200", "h200"), ("NVIDIA A100-SXM4-80GB", "a100"),
    ("Tesla V100-SXM2-16GB", "v100"), ("NVIDIA GeForce RTX 4090", "rtx4090"), ("NVIDIA L40S", "l40s"),
    ("", "gpu"),
])
def test_device_class(name, expected):
    assert device_class(name) == expected
    assert device_class(name, "cpu") == "cpu"


@pytest.mark.parametrize("text,message", [
    ("format = 2\n", "not a fusebench baseline"),
    ("[cpu\n", "not valid TOML"),
    ("format = 1\ncpu = 3\n", "[cpu] is not a device class"),
    ('format = 1\n[[cpu.cells]]\ncase = "softmax"\n', "cpu cell 1: no 'impl'"),
    ('format = 1\n[[cpu.cells]]\ncase = "s"\nimpl = "i"\nshape = "1x1"\ndtype = "fp32"\nspeed = 1\n',
     "unknown key 'speed'"),
    ('format = 1\n[[cpu.cells]]\ncase = "s"\nimpl = "i"\nshape = "1x1"\ndtype = "fp32"\ngraph_breaks = "0"\n',
     "graph_breaks = '0' is not of the right type"),
    ('format = 1\n[[cpu.cells]]\ncase = "s"\nimpl = "i"\nshape = "1x1"\ndtype = "fp32"\nmode = "train"\n',
     "unknown mode 'train'"),
    ('format = 1\n[[cpu.cells]]\ncase = "s"\nimpl = "i"\nshape = "1x1"\ndtype = "fp32"\nkernels = [1]\n',
     "fusion_kernels is not a list of kernels"),
    ('format = 1\n[[cpu.cells]]\ncase = "s"\nimpl = "i"\nshape = "1x1"\ndtype = "fp32"\n'
     '[[cpu.cells]]\ncase = "s"\nimpl = "i"\nshape = "1x1"\ndtype = "fp32"\n', "names s i 1x1 fp32 fwd twice"),
])
def test_files_that_are_not_baselines_are_refused_in_one_line(tmp_path, text, message):
    path = tmp_path / "b.toml"
    path.write_text(text)
    with pytest.raises(BaselineError, match=None) as exc:
        read(str(path))
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_missing_file_and_default_name(tmp_path):
    with pytest.raises(BaselineError, match="no baseline file"):
        read(str(tmp_path / "nothing.toml"))
    assert default_path(str(tmp_path)).endswith("fusebench-baseline.toml")
    (tmp_path / "fusebench-baseline.json").write_text("{}")
    assert default_path(str(tmp_path)).endswith("fusebench-baseline.json")
