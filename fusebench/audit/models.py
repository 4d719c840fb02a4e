"""The models an audit runs: `ModelSpec`, the registry that holds them, and `fusebench.model`.

A model is a function that builds a module and its example inputs from sizes and a seed::

    @fusebench.model(sizes={"batch": 8, "tokens": 512}, cpu_sizes={"batch": 1, "tokens": 64})
    def my_block(batch, tokens, *, dtype, device, seed):
        m = MyBlock().to(device=device, dtype=dtype)
        x = torch.randn(batch, tokens, 1024, device=device, dtype=dtype)
        return m, (x,)

It takes its sizes as keyword arguments plus `dtype`, `device` and `seed`, and returns
`(module, inputs)`.  `build(spec, sizes, dtype, device, seed)` calls it with the global RNG seeded
from `seed` inside a forked RNG state, so that weights and inputs are the same for the same seed
(on one kind of device) and the caller's RNG is left as it was, and returns a `Built`:

    module, inputs   what the model function returned, inputs as a tuple
    source           who defined the module used: "fusebench" (fusebench's plain-torch definition),
                     "transformers", "timm" or "torchvision" (the library's own module, used when it
                     can be imported), or "user" (a model from a user's file)
    note             why a library's module was not used, when it was not
    loss             callable(output) -> scalar tensor, or None: then a step's backward
                     backpropagates a seeded random gradient of the output
    sizes, dtype, device, seed   what it was built with (every size, defaults filled in)

Sizes not given take the model's defaults for the device (`cpu_sizes` on the CPU, `sizes`
elsewhere); the dtype defaults to the model's `default_dtype` on a GPU and to float32 on the CPU.
Bad sizes and unknown names are ValueErrors with a one-line message; a model function that raises
or returns something else is a `ModelError` (a ValueError) naming the model.
"""
from __future__ import annotations

import inspect
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch

from fusebench.cases.base import FLAG_AXES, UnknownName, parse_dtype, suggest

# Who defined the module a build used (Built.source, ModelSpec.source).
SOURCES = ("fusebench", "transformers", "timm", "torchvision", "user")

# Keyword arguments a model function takes beside its sizes.
BUILD_ARGS = ("dtype", "device", "seed")


class ModelError(ValueError):
    """A model function that raised, or returned something other than (module, inputs)."""


@dataclass
class ModelSpec:
    """One model an audit can run.  See the module docstring."""

    name: str
    build: Callable[..., Any]  # fn(**sizes, dtype=, device=, seed=[, library=]) -> (module, inputs) | Built
    sizes: dict[str, int]  # the defaults on a GPU
    cpu_sizes: dict[str, int] = field(default_factory=dict)  # the defaults on the CPU: one step in seconds
    default_dtype: torch.dtype = torch.bfloat16  # on a GPU; the CPU's default is float32
    description: str = ""
    # Who defines the module when no library's module is used: "fusebench" or "user".
    source: str = "fusebench"
    # The library whose module a build uses when it can be imported ("transformers", "timm",
    # "torchvision"); None: the model has one definition.
    library: str | None = None
    plugin: str | None = None  # path of the user file that registered it; None for a built-in
    loss: Callable[[Any], torch.Tensor] | None = None
    # Checks a complete set of sizes beyond each being positive (e.g. a width the heads divide).
    check: Callable[[dict[str, int]], None] | None = None

    @property
    def builtin(self) -> bool:
        return self.source != "user"

    def default_sizes(self, device: str | torch.device = "cpu") -> dict[str, int]:
        if torch.device(device).type == "cpu":
            return {**self.sizes, **self.cpu_sizes}
        return dict(self.sizes)

    def dtype_for(self, device: str | torch.device = "cpu") -> torch.dtype:
        return torch.float32 if torch.device(device).type == "cpu" else self.default_dtype

    def resolve_sizes(self, sizes: Mapping[str, int] | None, device: str | torch.device = "cpu") -> dict[str, int]:
        """The device's defaults with `sizes` over them, checked; ValueError (one line) if bad."""
        full = self.default_sizes(device)
        for key, value in (sizes or {}).items():
            if key not in self.sizes:
                accepted = ", ".join(self.sizes) or "no sizes"
                raise ValueError(f"model {self.name} has no size {key!r}{suggest(key, list(self.sizes))}; "
                                 f"it takes {accepted}")
            full[key] = value
        for key, value in full.items():
            if key in FLAG_AXES:
                if isinstance(value, bool) or value not in (0, 1):
                    raise ValueError(f"size {key} of model {self.name} must be 0 or 1, not {value!r}")
            elif isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"size {key} of model {self.name} must be a positive integer, not {value!r}")
        if self.check is not None:
            self.check(full)
        return full


@dataclass
class Built:
    """A built model: see the module docstring."""

    module: torch.nn.Module
    inputs: tuple
    source: str = "fusebench"
    note: str | None = None
    loss: Callable[[Any], torch.Tensor] | None = None
    model: str = ""
    sizes: dict[str, int] = field(default_factory=dict)
    dtype: torch.dtype = torch.float32
    device: str = "cpu"
    seed: int = 0


def output_is_loss(output: torch.Tensor) -> torch.Tensor:
    """The loss of a model whose module returns its loss (a scalar) itself."""
    return output


class ModelRegistry:
    """The models known to this process: the built-ins (fusebench/audit/zoo), loaded on first use,
    and those a user's file registered.  `clear_plugins()` forgets the user's."""

    def __init__(self) -> None:
        self._specs: dict[str, ModelSpec] = {}
        self._builtins_loaded = False

    def _load_builtin(self) -> None:
        if not self._builtins_loaded:
            self._builtins_loaded = True
            from fusebench.audit.zoo import BUILTIN

            for spec in BUILTIN:
                self._specs.setdefault(spec.name, spec)

    def register(self, spec: ModelSpec) -> ModelSpec:
        """Add a model; a user's model may replace a user's model of its name (a reloaded file)."""
        self._load_builtin()
        existing = self._specs.get(spec.name)
        if existing is not None and existing.builtin:
            raise ValueError(f"{spec.name!r} is a built-in model; give yours another name")
        self._specs[spec.name] = spec
        return spec

    def get(self, name: str) -> ModelSpec:
        self._load_builtin()
        if name not in self._specs:
            raise UnknownName(f"unknown model {name!r}{suggest(name, list(self._specs))}")
        return self._specs[name]

    def all(self) -> list[ModelSpec]:
        self._load_builtin()
        return list(self._specs.values())

    def from_plugin(self, path: str) -> list[str]:
        """The names of the models the file at `path` registered."""
        import os

        path = os.path.abspath(path)
        return [s.name for s in self._specs.values() if s.plugin == path]

    def clear_plugins(self) -> None:
        self._specs = {n: s for n, s in self._specs.items() if s.builtin}


REGISTRY = ModelRegistry()


def get_model(name: str) -> ModelSpec:
    return REGISTRY.get(name)


def all_models() -> list[ModelSpec]:
    return REGISTRY.all()


def plugin_models(path: str) -> list[str]:
    return REGISTRY.from_plugin(path)


def _reset_user_models() -> None:
    REGISTRY.clear_plugins()


def _origin(fn: Callable) -> str:
    # fusebench.cases.load_plugin runs a user's file as a module named fusebench_plugin_<hash> whose
    # __file__ is the file: such a model records the path, as the cases of that file do; a model
    # defined in an imported module records the module's name.
    name = getattr(fn, "__module__", None) or "__main__"
    module = sys.modules.get(name)
    if name.startswith("fusebench_plugin_") and getattr(module, "__file__", None):
        return module.__file__
    return name


def _check_signature(name: str, fn: Callable, sizes: Mapping[str, int]) -> None:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    missing = [k for k in (*sizes, *BUILD_ARGS) if k not in params]
    if missing:
        raise ValueError(f"model {name}: its function must take {', '.join(missing)} as keyword arguments")


def _check_sizes(name: str, sizes: Mapping[str, int], what: str) -> dict[str, int]:
    for key, value in sizes.items():
        valid = isinstance(value, int) and not isinstance(value, bool)
        if not valid or not (value in (0, 1) if key in FLAG_AXES else value > 0):
            raise ValueError(f"model {name}: {what} {key}={value!r} is not a valid size")
    return dict(sizes)


def model(
    name: str | None = None,
    *,
    sizes: Mapping[str, int],
    cpu_sizes: Mapping[str, int] | None = None,
    dtype: torch.dtype | str = torch.bfloat16,
    description: str = "",
    loss: Callable[[Any], torch.Tensor] | None = None,
    check: Callable[[dict[str, int]], None] | None = None,
) -> Callable[[Callable], Callable]:
    """Decorator registering a user's model (see the module docstring).

    `sizes`: the default sizes on a GPU; `cpu_sizes`: those to change on the CPU, where one step
    should compile and run in seconds; `dtype`: the default on a GPU (the CPU's is float32);
    `loss(output) -> scalar`: what a step backpropagates (default: a seeded random gradient of the
    output); `check(sizes)`: raises ValueError for sizes the model cannot take."""

    def wrap(fn: Callable) -> Callable:
        spec_name = name or fn.__name__
        gpu = _check_sizes(spec_name, sizes, "size")
        cpu = _check_sizes(spec_name, cpu_sizes or {}, "cpu size")
        unknown = [k for k in cpu if k not in gpu]
        if unknown:
            raise ValueError(f"model {spec_name}: cpu_sizes names {', '.join(unknown)}, which sizes does not")
        _check_signature(spec_name, fn, gpu)
        REGISTRY.register(ModelSpec(
            name=spec_name,
            build=fn,
            sizes=gpu,
            cpu_sizes=cpu,
            default_dtype=parse_dtype(dtype) if isinstance(dtype, str) else dtype,
            description=description or (fn.__doc__ or "").strip().split("\n")[0],
            source="user",
            plugin=_origin(fn),
            loss=loss,
            check=check,
        ))
        return fn

    return wrap


def _library_arg(spec: ModelSpec, library: bool | None) -> dict:
    if spec.library is not None:
        return {"library": library}
    if library:
        raise ValueError(f"model {spec.name} has no library definition; it is defined by {spec.source}")
    return {}


def _fork_rng(device: torch.device):
    devices = []
    if device.type == "cuda":
        devices = [device.index if device.index is not None else torch.cuda.current_device()]
    return torch.random.fork_rng(devices=devices)


def build(
    spec: ModelSpec | str,
    sizes: Mapping[str, int] | None = None,
    dtype: torch.dtype | str | None = None,
    device: str | torch.device = "cpu",
    seed: int = 0,
    *,
    library: bool | None = None,
) -> Built:
    """Build a model (see the module docstring).  `library`: None uses the library's module when it
    can be imported, False fusebench's own definition, True the library's or a ValueError."""
    from fusebench.util import first_line

    if isinstance(spec, str):
        spec = get_model(spec)
    dev = torch.device(device)
    full = spec.resolve_sizes(sizes, dev)
    dt = spec.dtype_for(dev) if dtype is None else (parse_dtype(dtype) if isinstance(dtype, str) else dtype)
    extra = _library_arg(spec, library)
    try:
        with _fork_rng(dev):
            torch.manual_seed(seed)
            result = spec.build(**full, dtype=dt, device=str(dev), seed=seed, **extra)
    except ModelError:
        raise
    except Exception as exc:
        raise ModelError(f"model {spec.name} failed to build: {first_line(exc)}") from exc
    built = _as_built(spec, result)
    built.model, built.sizes, built.dtype, built.device, built.seed = spec.name, full, dt, str(dev), seed
    if built.loss is None:
        built.loss = spec.loss
    _check_device(spec, built, dev)
    return built


def _as_built(spec: ModelSpec, result: Any) -> Built:
    if isinstance(result, Built):
        built = result
    elif isinstance(result, (tuple, list)) and len(result) == 2:
        module, inputs = result
        if isinstance(inputs, list):
            inputs = tuple(inputs)
        elif not isinstance(inputs, tuple):
            inputs = (inputs,)
        built = Built(module=module, inputs=inputs, source=spec.source)
    else:
        raise ModelError(f"model {spec.name} returned {type(result).__name__}; expected (module, inputs)")
    if not isinstance(built.module, torch.nn.Module):
        raise ModelError(f"model {spec.name} returned a {type(built.module).__name__} as its module; "
                         "expected a torch.nn.Module")
    return built


def _check_device(spec: ModelSpec, built: Built, device: torch.device) -> None:
    for i, x in enumerate(built.inputs):
        if isinstance(x, torch.Tensor) and x.device.type != device.type:
            raise ModelError(f"model {spec.name} put input {i} on {x.device}; it was built for {device}")
    for pname, p in [*built.module.named_parameters(), *built.module.named_buffers()]:
        if p.device.type != device.type:
            raise ModelError(f"model {spec.name} put {pname} on {p.device}; it was built for {device}")
