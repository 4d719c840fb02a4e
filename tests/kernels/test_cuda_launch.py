"""DirectLaunch: the parameter layout read from the PTX entry, the parameter block a call hands the
driver, and Triton's launcher for what it refuses.  The driver is faked here; on a GPU the kernels'
own tests run through it (test_launch.py checks that they do)."""
import ctypes
import struct
from types import SimpleNamespace

import pytest
import torch

from fusebench.kernels import cuda_launch
from fusebench.kernels.cuda_launch import DirectLaunch, entry_params, layout
from kernel_checks import gpu

PTX = """
.visible .entry k(
	.param .u64 .ptr .global .align 1 k_param_0,
	.param .u32 k_param_1,
	.param .f32 k_param_2,
	.param .u64 k_param_3,
	.param .u64 .ptr .global .align 1 k_param_4,
	.param .u64 .ptr .global .align 1 k_param_5
)
.maxntid 128, 1, 1
{
"""
# x_ptr, n, a, n64, ONE (an int Triton specialised to 1), BLOCK; two scratch pointers appended
TYPES = ["*fp32", "i32", "fp32", "i64", "constexpr", "constexpr"]


def test_entry_params_and_layout():
    assert entry_params(PTX) == ["u64", "u32", "f32", "u64", "u64", "u64"]
    assert entry_params("no entry here") is None
    fmt, slots, n_slots = layout(TYPES[:5], entry_params(PTX))
    assert (fmt, n_slots) == ("<Qi4xf4xq", 6)
    assert slots == [("ptr", 0), ("value", 1), ("value", 2), ("value", 3)]
    assert struct.calcsize(fmt) == 32  # every parameter in its own 8-byte slot


@pytest.mark.parametrize("types, params", [
    (["*fp32", "fp16"], ["u64", "u16"]),  # a scalar width it does not pack
    (["*fp32", "i32"], ["u64", "u64"]),  # the PTX disagrees with the signature
    (["*fp32", "i32"], ["u64", "u32", "u32"]),  # a leftover parameter that is not a pointer
    (["*fp32", "i32"], ["u64"]),  # fewer parameters than arguments
    (["tensordesc<fp16[64, 64]>"], ["b8[128]", "u32", "u32", "u64", "u64"]),  # no geometry given
])
def test_layouts_it_leaves_to_triton(types, params):
    assert layout(types, params) is None


def _compiled(**meta):
    fields = dict(num_warps=4, shared=1024, name="k", num_ctas=1, launch_pdl=False, launch_cooperative_grid=False,
                  global_scratch_size=0, profile_scratch_size=0, tensordesc_meta=[], cluster_dims=(1, 1, 1))
    fields.update(meta)
    return SimpleNamespace(metadata=SimpleNamespace(**fields), function=0x1234,
                           src=SimpleNamespace(signature=dict(zip("abcdef", TYPES))), asm={"ptx": PTX})


class FakeDriver:
    """cuLaunchKernelEx's stand-in: what each call was given, read while it is being made."""

    def __init__(self, results):
        self.results, self.calls = list(results), []

    def __call__(self, config, function, params, extra):
        cfg = config._obj
        slots = [ctypes.c_uint64.from_address(params[i]).value for i in range(6)]
        self.calls.append(dict(grid=(cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ), block=cfg.blockDimX,
                               shared=cfg.sharedMemBytes, stream=cfg.hStream, function=function.value,
                               slots=slots, extra=extra,
                               attrs=[(cfg.attrs[i].id, cfg.attrs[i].value[0]) for i in range(cfg.numAttrs)]))
        return self.results.pop(0)


def _direct(driver, fallen, **meta):
    return DirectLaunch.build(_compiled(**meta), (3, 2, 1), 5, lambda *a: fallen.append(a),
                              lambda device: 0xABC, "dev", entry=driver)


def test_a_call_packs_its_arguments_and_the_stream():
    driver, fallen = FakeDriver([0, 0]), []
    direct = _direct(driver, fallen)
    x, y = torch.zeros(4), torch.zeros(8)
    direct.call(x, 7, 0.5, 2**40, 1)
    direct.call(y, -3, 2.0, 5, 1)
    assert fallen == []
    first, second = driver.calls
    assert first["grid"] == (3, 2, 1) and first["block"] == 128 and first["shared"] == 1024
    assert first["stream"] == 0xABC and first["function"] == 0x1234 and first["extra"] is None and first["attrs"] == []
    lo32 = lambda v: v & 0xFFFFFFFF  # noqa: E731  (a 4-byte parameter sits in the slot's low half)
    assert first["slots"][0] == x.data_ptr() and lo32(first["slots"][1]) == 7
    assert struct.unpack("<f", struct.pack("<I", lo32(first["slots"][2])))[0] == 0.5
    assert first["slots"][3] == 2**40 and first["slots"][4:] == [0, 0]  # the scratch pointers: NULL
    assert second["slots"][0] == y.data_ptr() and lo32(second["slots"][1]) == (-3) & 0xFFFFFFFF


def test_a_refused_call_goes_to_triton():
    driver, fallen = FakeDriver([201]), []  # CUDA_ERROR_INVALID_CONTEXT
    x = torch.zeros(4)
    _direct(driver, fallen).call(x, 7, 0.5, 9, 1)
    assert len(driver.calls) == 1 and len(fallen) == 1 and fallen[0][0] is x


def test_a_cooperative_kernel_asks_for_a_cooperative_launch():
    driver = FakeDriver([0])
    _direct(driver, [], launch_cooperative_grid=True).call(torch.zeros(4), 1, 1.0, 1, 1)
    assert driver.calls[0]["attrs"] == [(cuda_launch._ATTRIBUTE_COOPERATIVE, 1)]


def test_a_dependent_kernel_asks_for_a_programmatic_launch():
    driver = FakeDriver([0, 0])
    _direct(driver, [], launch_pdl=True).call(torch.zeros(4), 1, 1.0, 1, 1)
    _direct(driver, [], launch_pdl=True, launch_cooperative_grid=True).call(torch.zeros(4), 1, 1.0, 1, 1)
    assert driver.calls[0]["attrs"] == [(cuda_launch._ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, 1)]
    assert driver.calls[1]["attrs"] == [(cuda_launch._ATTRIBUTE_COOPERATIVE, 1),
                                        (cuda_launch._ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, 1)]


@pytest.mark.parametrize("meta", [dict(num_ctas=2), dict(global_scratch_size=64),
                                  dict(profile_scratch_size=8), dict(tensordesc_meta=[{"swizzle": 3}]),
                                  dict(cluster_dims=(2, 1, 1))])
def test_kernels_it_leaves_to_triton(meta):
    assert _direct(FakeDriver([]), [], **meta) is None


def test_wrong_arguments_raise_rather_than_launch():
    driver, fallen = FakeDriver([]), []
    direct = _direct(driver, fallen)
    with pytest.raises(AttributeError):
        direct.call(12345, 7, 0.5, 9, 1)  # an int where a tensor goes
    with pytest.raises((struct.error, TypeError)):
        direct.call(torch.zeros(4), torch.zeros(1), 0.5, 9, 1)  # a float tensor where an int goes
    assert driver.calls == [] and fallen == []


# ----------------------------------------------------------------------------------------------
# TMA descriptor arguments: a CUtensorMap by value, then the descriptor's shape and strides

TMA_PTX = """
.visible .entry g(
	.param .align 64 .b8 g_param_0[128],
	.param .u32 g_param_1,
	.param .u32 g_param_2,
	.param .u64 g_param_3,
	.param .u64 g_param_4,
	.param .u64 .ptr .global .align 1 g_param_5,
	.param .u32 g_param_6,
	.param .u64 .ptr .global .align 1 g_param_7
)
"""
TMA_TYPES = ["tensordesc<fp16[64, 32]>", "*fp32", "i32", "constexpr"]
# the descriptor's (shape, strides, block shape): a (300, 40) view of rows of 48 elements
GEOMETRY = {0: ([300, 40], [48, 1], [64, 32])}
# what the compiled kernel's metadata says of it: the driver's box is 64 x 32, 64-byte swizzle
TILING = {"swizzle": 2, "elem_size": 2, "elem_type": 6, "block_size": [64, 32], "fp4_padded": False}


def test_a_descriptor_is_a_map_then_its_shape_and_strides():
    params = entry_params(TMA_PTX)
    assert params == ["b8[128]", "u32", "u32", "u64", "u64", "u64", "u32", "u64"]
    fmt, slots, n_slots = layout(TMA_TYPES[:3], params, GEOMETRY)
    assert fmt == "<Qi4xi4xqqQi4x" and n_slots == 8
    assert slots == [("map", 0), ("const", 300), ("const", 40), ("const", 48), ("const", 1), ("ptr", 1),
                     ("value", 2)]
    assert layout(TMA_TYPES[:3], params, {0: ([300, 40, 1], [48, 1, 1])}) is None  # a rank the type does not have


class FakeEncoder:
    """cuTensorMapEncodeTiled's stand-in: records its arguments and writes the address into the map."""

    def __init__(self):
        self.calls = []

    def __call__(self, tmap, dtype, rank, address, dims, strides, box, element_strides, interleave, swizzle,
                 l2, fill):
        self.calls.append(dict(dtype=dtype, rank=rank, address=address.value, dims=list(dims)[:rank],
                               strides=list(strides)[:rank - 1], box=list(box)[:rank], swizzle=swizzle,
                               fill=fill, at=tmap.value))
        ctypes.c_uint64.from_address(tmap.value).value = address.value
        return 0


def _tma_direct(driver, encoder, **meta):
    compiled = _compiled(**{"tensordesc_meta": [TILING], **meta})
    compiled.src.signature = dict(zip("abcd", TMA_TYPES))
    compiled.asm = {"ptx": TMA_PTX}
    return DirectLaunch.build(compiled, (4, 1, 1), 3, lambda *a: None, lambda device: 0, "dev", GEOMETRY,
                              entry=driver, encode=encoder)


class MapReader(FakeDriver):
    """Reads the map a descriptor's parameter points at, and the slots after it."""

    def __call__(self, config, function, params, extra):
        self.calls.append(dict(map_at=params[0], map_word=ctypes.c_uint64.from_address(params[0]).value,
                               slots=[ctypes.c_uint64.from_address(params[i]).value for i in range(1, 8)]))
        return self.results.pop(0)


def test_a_descriptor_argument_is_encoded_once_per_address():
    driver, encoder = MapReader([0, 0, 0]), FakeEncoder()
    direct = _tma_direct(driver, encoder)
    base = torch.zeros(300, 48, dtype=torch.float16)[:, :40]
    other, out = torch.zeros(300, 48, dtype=torch.float16), torch.zeros(4)
    direct.call(base, out, 5)
    direct.call(base, out, 6)
    direct.call(other, out, 7)
    assert [c["address"] for c in encoder.calls] == [base.data_ptr(), other.data_ptr()]
    first = encoder.calls[0]
    # as Triton's launcher encodes it: innermost dimension first, byte strides, the metadata's box
    assert first["dtype"] == 6 and first["rank"] == 2 and first["dims"] == [40, 300]
    assert first["strides"] == [96] and first["box"] == [32, 64] and first["swizzle"] == 2 and first["fill"] == 0
    assert first["at"] % 128 == 0
    assert [c["map_word"] for c in driver.calls] == [base.data_ptr(), base.data_ptr(), other.data_ptr()]
    assert driver.calls[0]["map_at"] == driver.calls[1]["map_at"] != driver.calls[2]["map_at"]
    lo32 = lambda v: v & 0xFFFFFFFF  # noqa: E731
    slots = driver.calls[2]["slots"]
    assert [lo32(slots[0]), lo32(slots[1]), slots[2], slots[3]] == [300, 40, 48, 1]  # shape, strides
    assert slots[4] == out.data_ptr() and lo32(slots[5]) == 7 and slots[6] == 0


def test_the_oldest_maps_go():
    driver, encoder = MapReader([0] * 40), FakeEncoder()
    direct = _tma_direct(driver, encoder)
    maps = direct.maps[0]
    tensors = [torch.zeros(300, 48, dtype=torch.float16) for _ in range(maps.keep + 2)]
    for t in tensors:
        direct.call(t, torch.zeros(4), 1)
    assert len(maps.addresses) == maps.keep and tensors[0].data_ptr() not in maps.addresses
    assert tensors[-1].data_ptr() in maps.addresses


@pytest.mark.parametrize("meta", [dict(tensordesc_meta=[]), dict(tensordesc_meta=[None]),
                                  dict(tensordesc_meta=[{**TILING, "fp4_padded": True}])])
def test_descriptors_it_leaves_to_triton(meta):
    assert _tma_direct(MapReader([]), FakeEncoder(), **meta) is None


@gpu
def test_the_driver_entries_load():
    assert cuda_launch._driver_entry() is not None
    assert cuda_launch._driver_entry("cuTensorMapEncodeTiled") is not None
