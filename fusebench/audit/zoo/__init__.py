"""The built-in models, in the layer shapes people run, with random weights (nothing is downloaded):

    llama           a Llama-3-8B decoder layer: RMSNorm, RoPE, grouped-query attention, SwiGLU MLP
    gpt2            a GPT-2 (small) block with the model's learned position embeddings
    vit             a ViT-B/16 encoder block (197 tokens)
    resnet50_stage  ResNet-50's conv3_x stage: four bottlenecks, 256 -> 512 channels, stride 2
    lm_head_ce      a causal LM's head: final RMSNorm, projection to 128256 tokens, cross-entropy

Where transformers, timm or torchvision can be imported (`pip install "fusebench[models]"`), a build
uses the library's module, configured as fusebench's own plain-torch definition (layers.py) is;
otherwise it uses that definition.  `Built.source` names the one used and `Built.note` says why a
library's was not.

Every module is in training mode.  The floating inputs that stand for the activations of a
preceding layer require grad, so that a forward-backward step computes their gradient as training
a whole network does; other inputs (the rotary table, labels) do not.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from fusebench.audit.models import Built, ModelError, ModelSpec, output_is_loss
from fusebench.audit.zoo import layers, libraries


def _pick(model: str, library: bool | None, library_name: str, make_library: Callable[[], nn.Module],
          make_plain: Callable[[], nn.Module], dtype: torch.dtype, device: str) -> tuple[nn.Module, str, str | None]:
    """(module, source, note): the library's module unless it is refused (library=False) or cannot
    be imported; with library=True, a library that cannot be imported is a ModelError."""
    if library is False:
        return _on(device, dtype, make_plain), "fusebench", None
    try:
        return _on(device, dtype, make_library), library_name, None
    except libraries.LibraryMissing as exc:
        if library:
            raise ModelError(f"model {model}: {exc}; install it with pip install 'fusebench[models]'") from None
        return _on(device, dtype, make_plain), "fusebench", str(exc)


def _on(device: str, dtype: torch.dtype, make: Callable[[], nn.Module]) -> nn.Module:
    # Parameters are drawn on the device itself: a large layer's initialisation on the host would
    # dominate its build.  The same seed gives the same weights on one kind of device.
    with torch.device(device):
        return make().to(dtype=dtype)


def _activation(*shape: int, dtype: torch.dtype, device: str) -> torch.Tensor:
    return torch.randn(*shape, dtype=dtype, device=device).requires_grad_()


def _check_llama(sizes: dict) -> None:
    layers.llama_shape(sizes["hidden"])


def llama(batch: int, tokens: int, hidden: int, *, dtype, device, seed, library=None) -> Built:
    s = layers.llama_shape(hidden)
    module, source, note = _pick(
        "llama", library, "transformers",
        lambda: layers.RotaryLayer(libraries.llama_layer(s)),
        lambda: layers.RotaryLayer(layers.LlamaDecoderLayer(s)), dtype, device)
    x = _activation(batch, tokens, hidden, dtype=dtype, device=device)
    cos, sin = layers.rotary_table(s, batch, tokens, dtype, device)
    return Built(module=module, inputs=(x, cos, sin), source=source, note=note)


def gpt2(batch: int, tokens: int, *, dtype, device, seed, library=None) -> Built:
    hidden, heads, inner, eps = 768, 12, 3072, 1e-5
    positions = max(1024, tokens)  # GPT-2 has 1024 positions; longer inputs get a longer table

    def make(block: Callable[[], nn.Module]) -> Callable[[], nn.Module]:
        return lambda: layers.PositionedBlock(block(), positions, hidden)

    module, source, note = _pick(
        "gpt2", library, "transformers",
        make(lambda: libraries.gpt2_block(hidden, heads, inner, positions, eps)),
        make(lambda: layers.GPT2Block(hidden, heads, inner, eps)), dtype, device)
    x = _activation(batch, tokens, hidden, dtype=dtype, device=device)
    return Built(module=module, inputs=(x,), source=source, note=note)


def vit(batch: int, *, dtype, device, seed, library=None) -> Built:
    dim, heads, mlp, eps = 768, 12, 3072, 1e-6
    tokens = 197  # the 14x14 patches of a 224x224 image and the class token
    module, source, note = _pick(
        "vit", library, "timm",
        lambda: libraries.vit_block(dim, heads, mlp, eps),
        lambda: layers.ViTBlock(dim, heads, mlp, eps), dtype, device)
    x = _activation(batch, tokens, dim, dtype=dtype, device=device)
    return Built(module=module, inputs=(x,), source=source, note=note)


def resnet50_stage(batch: int, resolution: int, channels_last: int, *, dtype, device, seed, library=None) -> Built:
    inplanes, planes, blocks, stride = 256, 128, 4, 2  # conv3_x: 256 -> 512 channels, 56x56 -> 28x28
    module, source, note = _pick(
        "resnet50_stage", library, "torchvision",
        lambda: layers.bottleneck_stage(libraries.bottleneck(), inplanes, planes, blocks, stride),
        lambda: layers.bottleneck_stage(layers.Bottleneck, inplanes, planes, blocks, stride), dtype, device)
    x = torch.randn(batch, inplanes, resolution, resolution, dtype=dtype, device=device)
    if channels_last:
        module = module.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    return Built(module=module, inputs=(x.requires_grad_(),), source=source, note=note)


def lm_head_ce(batch: int, tokens: int, hidden: int, vocab: int, *, dtype, device, seed) -> Built:
    module = _on(device, dtype, lambda: layers.LMHeadLoss(hidden, vocab))
    x = _activation(batch, tokens, hidden, dtype=dtype, device=device)
    labels = torch.randint(0, vocab, (batch, tokens), device=device)
    return Built(module=module, inputs=(x, labels), source="fusebench")


BUILTIN: list[ModelSpec] = [
    ModelSpec(
        name="llama", build=llama, library="transformers", check=_check_llama,
        sizes={"batch": 1, "tokens": 2048, "hidden": 4096},
        cpu_sizes={"batch": 1, "tokens": 32, "hidden": 256},
        description="Llama-3-8B decoder layer: RMSNorm, RoPE (theta 500000), grouped-query attention "
                    "(SDPA, causal), SwiGLU MLP; hidden 4096: 32 heads of 128, 8 KV heads, MLP 14336",
    ),
    ModelSpec(
        name="gpt2", build=gpt2, library="transformers",
        sizes={"batch": 8, "tokens": 1024}, cpu_sizes={"batch": 1, "tokens": 64},
        description="GPT-2 block with learned positions: LayerNorm, causal attention (SDPA), GELU (tanh) "
                    "MLP; hidden 768, 12 heads, MLP 3072",
    ),
    ModelSpec(
        name="vit", build=vit, library="timm",
        sizes={"batch": 64}, cpu_sizes={"batch": 1},
        description="ViT-B/16 encoder block, 197 tokens: LayerNorm, attention (SDPA), GELU MLP; hidden 768, "
                    "12 heads, MLP 3072",
    ),
    ModelSpec(
        name="resnet50_stage", build=resnet50_stage, library="torchvision",
        sizes={"batch": 32, "resolution": 56, "channels_last": 0},
        cpu_sizes={"batch": 2, "resolution": 16},
        description="ResNet-50 conv3_x stage in training: 4 bottlenecks (conv, batch norm, ReLU), "
                    "256 -> 512 channels, stride 2; resolution is the input's height and width",
    ),
    ModelSpec(
        name="lm_head_ce", build=lm_head_ce, loss=output_is_loss,
        sizes={"batch": 1, "tokens": 2048, "hidden": 4096, "vocab": 128256},
        cpu_sizes={"batch": 1, "tokens": 32, "hidden": 256, "vocab": 4096},
        description="causal LM head: final RMSNorm, projection to the vocabulary, cross-entropy over "
                    "fp32 logits against random labels; returns the loss",
    ),
]
