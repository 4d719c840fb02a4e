"""The library modules the built-in models use when the library can be imported: transformers'
LlamaDecoderLayer and GPT2Block, timm's ViT Block, torchvision's Bottleneck.

Each is configured exactly as fusebench's plain definition in layers.py (same widths, heads,
epsilons, activation, attention through F.scaled_dot_product_attention, no dropout), so that the
plain and the library module compute the same function of the same parameters.
"""
from __future__ import annotations

from functools import partial
from typing import Callable

from torch import nn

from fusebench.audit.zoo.layers import LlamaShape


class LibraryMissing(Exception):
    """A library that cannot be imported here (not installed, or failing to import)."""


def _load(library: str, load: Callable[[], object]) -> object:
    try:
        return load()
    except Exception as exc:  # a broken install fails with other errors than ImportError
        from fusebench.util import first_line

        missing = isinstance(exc, ModuleNotFoundError) and (exc.name or "").split(".")[0] == library
        raise LibraryMissing(f"{library} is not installed" if missing
                             else f"{library} cannot be imported here ({first_line(exc)})") from exc


def llama_layer(s: LlamaShape) -> nn.Module:
    def load():
        from transformers import LlamaConfig
        from transformers.models.llama.modeling_llama import LlamaDecoderLayer

        return LlamaConfig, LlamaDecoderLayer

    LlamaConfig, LlamaDecoderLayer = _load("transformers", load)
    config = LlamaConfig(
        hidden_size=s.hidden, intermediate_size=s.intermediate, num_attention_heads=s.heads,
        num_key_value_heads=s.kv_heads, head_dim=s.head_dim, rms_norm_eps=s.eps, rope_theta=s.rope_theta,
        hidden_act="silu", attention_bias=False, mlp_bias=False, attention_dropout=0.0, num_hidden_layers=1,
        attn_implementation="sdpa",
    )
    return LlamaDecoderLayer(config, layer_idx=0)


def gpt2_block(hidden: int, heads: int, inner: int, positions: int, eps: float) -> nn.Module:
    def load():
        from transformers import GPT2Config
        from transformers.models.gpt2.modeling_gpt2 import GPT2Block

        return GPT2Config, GPT2Block

    GPT2Config, GPT2Block = _load("transformers", load)
    config = GPT2Config(
        n_embd=hidden, n_head=heads, n_inner=inner, n_layer=1, n_positions=positions, layer_norm_epsilon=eps,
        activation_function="gelu_pytorch_tanh", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        attn_implementation="sdpa",
    )
    return GPT2Block(config, layer_idx=0)


def vit_block(dim: int, heads: int, mlp: int, eps: float) -> nn.Module:
    def load():
        from timm.models.vision_transformer import Block

        return Block

    Block = _load("timm", load)
    block = Block(dim=dim, num_heads=heads, mlp_ratio=mlp / dim, qkv_bias=True, act_layer=nn.GELU,
                  norm_layer=partial(nn.LayerNorm, eps=eps))
    # timm falls back to its unfused attention when TIMM_FUSED_ATTN=0; this model is defined by SDPA.
    block.attn.fused_attn = True
    return block


def bottleneck() -> type:
    def load():
        from torchvision.models.resnet import Bottleneck

        return Bottleneck

    return _load("torchvision", load)
