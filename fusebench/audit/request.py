"""What an audit is asked to measure."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

# Backends an audit can compile a model with: torch.compile's modes ("default" is Inductor's own).
COMPILE_MODES = ("default", "max-autotune", "max-autotune-no-cudagraphs", "reduce-overhead")
AUDIT_MODES = ("fwd", "fwd_bwd")


def backend_name(compile_mode: str) -> str:
    """The backend's name in results: "inductor" for the default mode, "inductor-<mode>" else."""
    return "inductor" if compile_mode == "default" else f"inductor-{compile_mode}"


@dataclass
class AuditRequest:
    model: str
    mode: str = "fwd"  # fwd | fwd_bwd
    dtype: str | None = None  # fp32 | fp16 | bf16; None: the model's default on this device
    sizes: dict = field(default_factory=dict)  # overrides of the model's default sizes
    device: str = "cpu"
    compile_modes: tuple[str, ...] = ("default",)
    baseline: str = "eager"  # eager, or a compiled backend's name
    plugins: tuple[str, ...] = ()  # files registering the model (paths)
    catalog: bool = True  # time fusebench's matching cases at the model's shapes
    compile_time: bool = True  # measure cold and warm compile times (two more compiles per backend)
    seed: int = 0
    timeout_s: float = 1800.0  # per backend

    @property
    def backends(self) -> list[str]:
        return ["eager"] + [backend_name(m) for m in self.compile_modes]

    def as_dict(self) -> dict:
        d = asdict(self)
        d["compile_modes"] = list(self.compile_modes)
        d["plugins"] = list(self.plugins)
        return d
