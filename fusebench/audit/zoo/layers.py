"""fusebench's own plain-torch definitions of the built-in models' layers.

Each mirrors the library module it stands in for (transformers' LlamaDecoderLayer and GPT2Block,
timm's ViT Block, torchvision's Bottleneck): the same operations in the same order, the same
configuration, and the same parameter names, so that a state dict of one loads into the other.
(GPT-2's projections are nn.Linear here; transformers stores them transposed, as Conv1D.)
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

# F.scaled_dot_product_attention takes enable_gqa from torch 2.5 on; before, the KV heads are repeated.
_SDPA_GQA = torch.torch_version.TorchVersion(torch.__version__) >= "2.5"


# ---------------------------------------------------------------------------------------------
# Llama-3-8B-style decoder layer.


@dataclass(frozen=True)
class LlamaShape:
    """A Llama-3-style layer's configuration, derived from its width (see `llama_shape`)."""

    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    eps: float = 1e-5
    rope_theta: float = 500000.0


def llama_shape(hidden: int) -> LlamaShape:
    """Llama-3-8B's proportions at a width: heads of 128 (64 below a width of 1024), four query heads
    per KV head (two below eight heads, so that the layer keeps several KV heads), and an MLP 3.5
    times as wide.  At hidden 4096: 32 heads, 8 KV heads, head_dim 128, intermediate 14336."""
    if hidden % 64:
        raise ValueError(f"hidden must be a multiple of 64, not {hidden}")
    head_dim = 128 if hidden >= 1024 else 64
    heads = hidden // head_dim
    group = 4 if heads >= 8 else 2 if heads >= 2 else 1
    return LlamaShape(hidden=hidden, heads=heads, kv_heads=heads // group, head_dim=head_dim,
                      intermediate=hidden * 7 // 2)


def rotary_table(shape: LlamaShape, batch: int, tokens: int, dtype: torch.dtype, device: str):
    """(cos, sin), each (batch, tokens, head_dim): the rotary table a Llama model computes once per
    step for all its layers (transformers' LlamaRotaryEmbedding, default rope type), in fp32 and
    rounded to dtype."""
    dim = shape.head_dim
    inv_freq = 1.0 / (shape.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.float, device=device) / dim))
    positions = torch.arange(tokens, device=device, dtype=torch.float)[None, :].expand(batch, tokens)
    freqs = positions[..., None] * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


class LlamaRMSNorm(nn.Module):
    def __init__(self, hidden: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.variance_epsilon = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalised in fp32, rounded back to the input's dtype before the weight, as Llama does.
        dtype = x.dtype
        x = x.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * x.to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _repeat_kv(x: torch.Tensor, n: int) -> torch.Tensor:
    if n == 1:
        return x
    b, h, t, d = x.shape
    return x[:, :, None].expand(b, h, n, t, d).reshape(b, h * n, t, d)


class LlamaAttention(nn.Module):
    def __init__(self, s: LlamaShape):
        super().__init__()
        self.head_dim, self.groups = s.head_dim, s.heads // s.kv_heads
        self.q_proj = nn.Linear(s.hidden, s.heads * s.head_dim, bias=False)
        self.k_proj = nn.Linear(s.hidden, s.kv_heads * s.head_dim, bias=False)
        self.v_proj = nn.Linear(s.hidden, s.kv_heads * s.head_dim, bias=False)
        self.o_proj = nn.Linear(s.heads * s.head_dim, s.hidden, bias=False)

    def forward(self, x: torch.Tensor, position_embeddings: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, -1, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, -1, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, -1, self.head_dim).transpose(1, 2)
        cos, sin = (e.unsqueeze(1) for e in position_embeddings)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        scale = self.head_dim ** -0.5
        if _SDPA_GQA and self.groups > 1:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=True)
        else:
            o = F.scaled_dot_product_attention(q, _repeat_kv(k, self.groups), _repeat_kv(v, self.groups),
                                               is_causal=True, scale=scale)
        return self.o_proj(o.transpose(1, 2).reshape(b, t, -1).contiguous())


class LlamaMLP(nn.Module):
    def __init__(self, s: LlamaShape):
        super().__init__()
        self.gate_proj = nn.Linear(s.hidden, s.intermediate, bias=False)
        self.up_proj = nn.Linear(s.hidden, s.intermediate, bias=False)
        self.down_proj = nn.Linear(s.intermediate, s.hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, s: LlamaShape):
        super().__init__()
        self.self_attn = LlamaAttention(s)
        self.mlp = LlamaMLP(s)
        self.input_layernorm = LlamaRMSNorm(s.hidden, s.eps)
        self.post_attention_layernorm = LlamaRMSNorm(s.hidden, s.eps)

    def forward(self, x: torch.Tensor, position_embeddings: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        h = x + self.self_attn(self.input_layernorm(x), position_embeddings=position_embeddings)
        return h + self.mlp(self.post_attention_layernorm(h))


class RotaryLayer(nn.Module):
    """A decoder layer as a Llama model calls it: the hidden states and the model's rotary table."""

    def __init__(self, layer: nn.Module):
        super().__init__()
        self.layer = layer

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        out = self.layer(x, position_embeddings=(cos, sin))
        return out[0] if isinstance(out, tuple) else out  # older transformers return a tuple


# ---------------------------------------------------------------------------------------------
# GPT-2-style block (GPT-2 small: hidden 768, 12 heads, MLP 3072).


class GPT2Attention(nn.Module):
    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(hidden, 3 * hidden)
        self.c_proj = nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = (y.view(b, t, self.heads, -1).transpose(1, 2) for y in self.c_attn(x).split(c, dim=2))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(o.transpose(1, 2).reshape(b, t, c).contiguous())


class GPT2MLP(nn.Module):
    def __init__(self, hidden: int, inner: int):
        super().__init__()
        self.c_fc = nn.Linear(hidden, inner)
        self.c_proj = nn.Linear(inner, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class GPT2Block(nn.Module):
    def __init__(self, hidden: int = 768, heads: int = 12, inner: int = 3072, eps: float = 1e-5):
        super().__init__()
        self.ln_1 = nn.LayerNorm(hidden, eps=eps)
        self.attn = GPT2Attention(hidden, heads)
        self.ln_2 = nn.LayerNorm(hidden, eps=eps)
        self.mlp = GPT2MLP(hidden, inner)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x + self.attn(self.ln_1(x))
        return h + self.mlp(self.ln_2(h))


class PositionedBlock(nn.Module):
    """A GPT-2 block with the model's learned position embeddings added to its input."""

    def __init__(self, block: nn.Module, positions: int, hidden: int):
        super().__init__()
        self.wpe = nn.Embedding(positions, hidden)
        self.block = block

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(x.shape[1], device=x.device)
        out = self.block(x + self.wpe(pos))
        return out[0] if isinstance(out, tuple) else out  # older transformers return a tuple


# ---------------------------------------------------------------------------------------------
# ViT-B/16 encoder block (timm's vit_base_patch16_224 Block).


class ViTAttention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        o = F.scaled_dot_product_attention(q, k, v)
        return self.proj(o.transpose(1, 2).reshape(b, n, c))


class ViTMlp(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class ViTBlock(nn.Module):
    def __init__(self, dim: int = 768, heads: int = 12, mlp: int = 3072, eps: float = 1e-6):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=eps)
        self.attn = ViTAttention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, eps=eps)
        self.mlp = ViTMlp(dim, mlp)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


# ---------------------------------------------------------------------------------------------
# ResNet-50 bottleneck (torchvision's, ResNet v1.5: the stride on the 3x3 convolution).


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * self.expansion, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        out += x if self.downsample is None else self.downsample(x)
        return self.relu(out)


def bottleneck_stage(block: type, inplanes: int, planes: int, blocks: int, stride: int) -> nn.Sequential:
    """A ResNet stage as torchvision's ResNet._make_layer builds it: the first block projects the
    shortcut (a strided 1x1 convolution and batch norm), the others keep the width."""
    out = planes * 4
    downsample = nn.Sequential(nn.Conv2d(inplanes, out, 1, stride=stride, bias=False), nn.BatchNorm2d(out))
    layers = [block(inplanes, planes, stride, downsample)]
    layers += [block(out, planes) for _ in range(blocks - 1)]
    return nn.Sequential(*layers)


# ---------------------------------------------------------------------------------------------
# A causal LM's head: final norm, projection to the vocabulary, cross-entropy.


class LMHeadLoss(nn.Module):
    """Llama's final RMSNorm and lm_head, and the loss transformers computes from them: logits
    upcast to fp32, cross-entropy averaged over the tokens."""

    def __init__(self, hidden: int, vocab: int, eps: float = 1e-5):
        super().__init__()
        self.norm = LlamaRMSNorm(hidden, eps)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)

    def forward(self, hidden_states: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        logits = self.lm_head(self.norm(hidden_states)).float()
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1))
