"""Mixed family: attention (matmul, softmax, matmul) and the transformer's point-wise epilogues."""
import math

import torch

from fusebench.cases.base import CPU_2D, QUICK_2D, Case, grid_2d, numel_bytes, randn

# Where this family comes in the catalog (fusebench/catalog.py): the specification's order.
CATALOG_ORDER = 6

# ---------------------------------------------------------------------------------------------
# attention: a shape is (batch, heads, seqlen, head_dim, causal)

ATTN_AXES = ("batch", "heads", "seqlen", "head_dim", "causal")
ATTN_GRID = [
    (b, h, s, d, c)
    for d, h in ((64, 32), (128, 16))
    for c in (0, 1)
    for b in (1, 2, 4, 8, 16, 32)
    for s in (128, 256, 512, 1024, 2048, 4096, 8192)
]
ATTN_QUICK = [(4, 32, 1024, 64, 0), (4, 16, 2048, 128, 0), (4, 16, 2048, 128, 1), (1, 16, 8192, 128, 1)]


def attention(q, k, v, causal: bool):
    """The explicit math: softmax(q k^T / sqrt(d) [+ causal mask]) v."""
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    if causal:
        s = q.shape[-2]
        mask = torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
    return torch.softmax(scores, -1) @ v


def attention_reference(q, k, v, causal: bool):
    """float64 reference, one (batch, head) slice at a time so the scores never exceed S*S."""
    out = torch.empty_like(q)
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            out[b, h] = attention(q[b, h], k[b, h], v[b, h], causal)
    return out


ATTN_SAMPLE = 4  # (batch, head) slices checked per seed on large shapes


def attention_subset(args, out):
    """Bound the reference's cost on large shapes: check ATTN_SAMPLE (batch, head) slices, spread
    over the tensor (first, last and between), instead of all of them.  `out` may be any tensor
    laid out as the output: the training modes cut the gradients of the output, q, k and v with
    it too."""
    q, k, v, causal = args
    b, h = q.shape[:2]
    if b * h <= ATTN_SAMPLE:
        return args, out
    picks = sorted({round(i * (b * h - 1) / (ATTN_SAMPLE - 1)) for i in range(ATTN_SAMPLE)})
    idx = [(p // h, p % h) for p in picks]

    def take(t):
        return torch.stack([t[i, j] for i, j in idx])[:, None]  # (n, 1, S, D)

    return (take(q), take(k), take(v), causal), take(out)


def _attention_inputs(shape, dtype, device, seed):
    b, h, s, d, causal = shape
    q, k, v = (randn((b, h, s, d), dtype, device, seed + i) for i in range(3))
    return q, k, v, bool(causal)


def _attention_flops(s, dt):
    b, h, n, d, causal = s
    full = 4 * b * h * n * n * d  # two GEMMs of 2*n*n*d each
    return full // 2 if causal else full  # the usual convention: causal does half the work


def _attention_bwd_bytes(s, dt):
    # FlashAttention-2's backward: read q, k, v, the output o, its gradient do and the rows'
    # logsumexp (fp32, batch*heads*seqlen); write dq, dk, dv
    b, h, n, d, causal = s
    return 8 * numel_bytes(s[:4], dt) + 4 * b * h * n


def _attention_bwd_flops(s, dt):
    # FlashAttention's convention: 2.5x the forward (five GEMMs -- q k^T again, dv, dp, dq,
    # dk -- against the forward's two), causal halved as the forward is
    return 5 * _attention_flops(s, dt) // 2


ATTENTION = Case(
    name="attention", family="mix", fn=attention, make_inputs=_attention_inputs,
    default_dtype=torch.float16, dtypes=(torch.float16, torch.bfloat16, torch.float32),
    quick_shapes=ATTN_QUICK, cpu_shapes=[(2, 8, 512, 64, 0), (2, 8, 512, 64, 1)], grid_shapes=ATTN_GRID, axes=ATTN_AXES,
    bytes_model=lambda s, dt: 4 * numel_bytes(s[:4], dt),  # q, k, v read; out written
    flops_model=_attention_flops, reference=attention_reference, reference_subset=attention_subset,
    tolerances={torch.float32: (2e-3, 1e-2), torch.float16: (4e-3, 2e-2), torch.bfloat16: (2e-2, 5e-2)},
    # In the training modes the gradients of q, k and v, checked on the same (batch, head) sample
    # (runner/modes.py cuts them as it cuts the output).  Their tolerance is twice the output's:
    # dq and dk go through dS = P * (dP - rowsum(dO * O)), whose difference cancels.
    grad_inputs=(0, 1, 2), backward_bytes_model=_attention_bwd_bytes, backward_flops_model=_attention_bwd_flops,
    grad_tolerances={torch.float32: (4e-3, 2e-2), torch.float16: (8e-3, 4e-2), torch.bfloat16: (4e-2, 1e-1)},
    description="softmax(q k^T * scale [+ causal mask]) v",
    memory_bound=False,
)

# ---------------------------------------------------------------------------------------------
# bias + dropout + add.  Dropout is in eval mode (identity), as in the plan: what is measured is
# whether the framework removes it and fuses the two adds.  All three tensors are (dim0, dim1);
# the transposed variant stores bias and residual as (dim1, dim0), the plan's layout study.

QUICK = QUICK_2D


def bias_dropout_add(inp, bias, residual):
    out = torch.nn.functional.dropout(inp + bias, p=0.5, training=False)
    return residual + out


def bias_dropout_add_transposed(inp, bias_t, residual_t):
    bias = torch.transpose(bias_t, 0, 1)
    out = torch.nn.functional.dropout(inp + bias, p=0.5, training=False)
    residual = torch.transpose(residual_t, 0, 1)
    return residual + out


def _bda_inputs(shape, dtype, device, seed):
    return tuple(randn(shape, dtype, device, seed + i) for i in range(3))


def _bda_transposed_inputs(shape, dtype, device, seed):
    m, n = shape
    return randn((m, n), dtype, device, seed), randn((n, m), dtype, device, seed + 1), randn(
        (n, m), dtype, device, seed + 2)


BIAS_DROPOUT_ADD = Case(
    name="bias_dropout_add", family="mix", fn=bias_dropout_add, make_inputs=_bda_inputs,
    quick_shapes=QUICK, cpu_shapes=CPU_2D, grid_shapes=grid_2d(),
    bytes_model=lambda s, dt: 4 * numel_bytes(s, dt), flops_model=lambda s, dt: 2 * s[0] * s[1],
    description="residual + dropout(inp + bias, p=0.5, training=False)",
    memory_bound=True,
)
BIAS_DROPOUT_ADD_TRANSPOSED = Case(
    name="bias_dropout_add_transposed", family="mix", fn=bias_dropout_add_transposed,
    make_inputs=_bda_transposed_inputs, quick_shapes=QUICK, cpu_shapes=CPU_2D, grid_shapes=grid_2d(),
    bytes_model=lambda s, dt: 4 * numel_bytes(s, dt), flops_model=lambda s, dt: 2 * s[0] * s[1],
    description="bias_dropout_add with bias and residual stored transposed",
    memory_bound=True,
)

# ---------------------------------------------------------------------------------------------
# bias + GELU (tanh approximation, written out as in Megatron).


def bias_gelu(inp, bias):
    x = inp + bias
    return x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))


def _bias_gelu_inputs(shape, dtype, device, seed):
    return randn(shape, dtype, device, seed), randn((shape[1],), dtype, device, seed + 1)


BIAS_GELU = Case(
    name="bias_gelu", family="mix", fn=bias_gelu, make_inputs=_bias_gelu_inputs,
    quick_shapes=QUICK, cpu_shapes=CPU_2D, grid_shapes=grid_2d(),
    bytes_model=lambda s, dt: 2 * numel_bytes(s, dt) + numel_bytes((s[1],), dt),
    flops_model=lambda s, dt: 10 * s[0] * s[1],
    description="x = inp + bias; x * 0.5 * (1 + tanh(0.79788456 x (1 + 0.044715 x^2)))",
    memory_bound=True,
)
