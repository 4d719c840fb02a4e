"""Training family: the fused ops of today's LLMs, each differentiable (runner/modes.py).

* rmsnorm(x, weight): x / sqrt(mean(x^2) + eps) * weight over the hidden dimension.
* add_rmsnorm(x, residual, weight): h = x + residual and rmsnorm(h, weight), both returned (a
  transformer block's residual stream and the next sublayer's normalized input).
* swiglu(a, b): silu(a) * b, the gated MLP's activation.
* cross_entropy(logits, targets): the mean over rows of -log softmax(logits)[target], logits of
  tokens x vocabulary; its backward writes the logits' gradient.

Shapes: tokens x hidden (or x vocabulary) of real models -- hidden 2048 (small Llamas) to 16384
(Llama-3 405B), vocabularies 32000 (Llama-2), 128256 (Llama-3), 151936 (Qwen-2), 256000
(Gemma) -- and the 2-D grid for the row-wise ones.

Byte models count the fewest bytes each direction must move: the forward reads its inputs and
writes its outputs; the backward reads the outputs' gradients and what it needs of the inputs
(recomputing row statistics rather than reading saved ones, which are M values) and writes the
inputs' gradients.  A parameter's gradient (weight, N values) is counted once, though a kernel
reduces it across rows in partial sums.  FLOPs count one per add, multiply, exp or rsqrt.
"""
import torch
import torch.nn.functional as F

from fusebench.cases.base import Case, generator, grid_2d, numel_bytes, randn

# Where this family comes in the catalog (fusebench/catalog.py): the specification's order.
CATALOG_ORDER = 7
RMSNORM_EPS = 1e-6
TOKENS = (1024, 4096, 16384, 65536)
HIDDEN = (2048, 4096, 5120, 8192, 16384)
VOCAB = (32000, 128256, 151936, 256000)
# Small enough that a CPU run of a case takes seconds (the interpreter's kernels included).
CPU_ROWS = [(256, 1024), (300, 2000)]


def _size(dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def _model_shapes(widths) -> list[tuple[int, int]]:
    return [(t, w) for t in TOKENS for w in widths]


def _grid(widths) -> list[tuple[int, int]]:
    shapes = _model_shapes(widths) + [s for s in grid_2d() if s not in _model_shapes(widths)]
    return shapes


# ----------------------------------------------------------------------------------------------
# rmsnorm


def rmsnorm(x, weight):
    # What torch.nn.RMSNorm([N], eps) computes, with its weight made once outside the timed call.
    return F.rms_norm(x, (x.shape[1],), weight, RMSNORM_EPS)


def _weight(n, dtype, device, seed):
    # Random around 1, so that a kernel that ignores the weight fails.
    return randn((n,), dtype, device, seed, scale=0.5).add_(1.0)


def _rmsnorm_inputs(shape, dtype, device, seed):
    return randn(shape, dtype, device, seed), _weight(shape[1], dtype, device, seed + 1)


def _rms_bytes(s, dt):  # read x, w; write y
    return 2 * numel_bytes(s, dt) + s[1] * _size(dt)


def _rms_bwd_bytes(s, dt):  # read dy, x, w; write dx, dw
    return 3 * numel_bytes(s, dt) + 2 * s[1] * _size(dt)


RMSNORM = Case(
    name="rmsnorm", family="training", fn=rmsnorm, make_inputs=_rmsnorm_inputs, default_dtype=torch.bfloat16,
    quick_shapes=[(4096, 4096), (16384, 8192), (8192, 16384)], cpu_shapes=CPU_ROWS, grid_shapes=_grid(HIDDEN),
    axes=("tokens", "hidden"), bytes_model=_rms_bytes, backward_bytes_model=_rms_bwd_bytes,
    # x^2, the row sum, rsqrt, x * r, * w; the backward: dy * w, its dot with x, two scalings, dw's sum
    flops_model=lambda s, dt: 4 * s[0] * s[1], backward_flops_model=lambda s, dt: 8 * s[0] * s[1],
    grad_inputs=(0, 1), cpu_default=False, memory_bound=True,
    description="F.rms_norm(x, (N,), weight, 1e-6): RMSNorm over the hidden dimension",
)


# ----------------------------------------------------------------------------------------------
# residual add + rmsnorm


def add_rmsnorm(x, residual, weight):
    h = x + residual
    return h, F.rms_norm(h, (h.shape[1],), weight, RMSNORM_EPS)


def _add_rmsnorm_inputs(shape, dtype, device, seed):
    return (randn(shape, dtype, device, seed), randn(shape, dtype, device, seed + 2),
            _weight(shape[1], dtype, device, seed + 1))


def _add_rms_bytes(s, dt):  # read x, residual, w; write h, y
    return 4 * numel_bytes(s, dt) + s[1] * _size(dt)


def _add_rms_bwd_bytes(s, dt):
    # read dh, dy, h, w; write the gradient of x, which is also residual's (one tensor), and dw
    return 4 * numel_bytes(s, dt) + 2 * s[1] * _size(dt)


ADD_RMSNORM = Case(
    name="add_rmsnorm", family="training", fn=add_rmsnorm, make_inputs=_add_rmsnorm_inputs,
    default_dtype=torch.bfloat16, quick_shapes=[(4096, 4096), (16384, 8192), (8192, 16384)], cpu_shapes=CPU_ROWS,
    grid_shapes=_grid(HIDDEN), axes=("tokens", "hidden"), bytes_model=_add_rms_bytes,
    backward_bytes_model=_add_rms_bwd_bytes, flops_model=lambda s, dt: 5 * s[0] * s[1],
    backward_flops_model=lambda s, dt: 9 * s[0] * s[1], grad_inputs=(0, 1, 2), cpu_default=False, memory_bound=True,
    description="h = x + residual; (h, F.rms_norm(h, (N,), weight, 1e-6))",
)


# ----------------------------------------------------------------------------------------------
# swiglu


def swiglu(a, b):
    return F.silu(a) * b


def _swiglu_inputs(shape, dtype, device, seed):
    return randn(shape, dtype, device, seed), randn(shape, dtype, device, seed + 1)


# MLP widths of the same models (the gate's and the up projection's outputs): Llama-3 8B 14336,
# 70B 28672, 405B 53248; small models 5632 and 8192.
FFN = (5632, 8192, 14336, 28672, 53248)

SWIGLU = Case(
    name="swiglu", family="training", fn=swiglu, make_inputs=_swiglu_inputs, default_dtype=torch.bfloat16,
    quick_shapes=[(4096, 14336), (16384, 14336), (8192, 28672)], cpu_shapes=[(128, 1024), (100, 3001)],
    grid_shapes=_grid(FFN), axes=("tokens", "ffn"),
    bytes_model=lambda s, dt: 3 * numel_bytes(s, dt), backward_bytes_model=lambda s, dt: 5 * numel_bytes(s, dt),
    # sigmoid (exp, add, divide), two multiplies; the backward reuses the sigmoid: about 8
    flops_model=lambda s, dt: 5 * s[0] * s[1], backward_flops_model=lambda s, dt: 10 * s[0] * s[1],
    grad_inputs=(0, 1), cpu_default=False, memory_bound=True,
    description="F.silu(a) * b: the SwiGLU gate of a gated MLP",
)


# ----------------------------------------------------------------------------------------------
# cross entropy


def cross_entropy(logits, targets):
    return F.cross_entropy(logits, targets)


def _cross_entropy_inputs(shape, dtype, device, seed):
    logits = randn(shape, dtype, device, seed, scale=2.0)
    targets = torch.randint(0, shape[1], (shape[0],), generator=generator(device, seed + 1), device=device)
    return logits, targets


def _ce_bytes(s, dt):  # read the logits and the targets (int64); write the loss
    return numel_bytes(s, dt) + 8 * s[0] + _size(dt)


def _ce_bwd_bytes(s, dt):
    # read the logits (softmax is recomputed from them and the rows' logsumexp, M values not
    # counted) and the targets; write the logits' gradient
    return 2 * numel_bytes(s, dt) + 8 * s[0]


CROSS_ENTROPY = Case(
    name="cross_entropy", family="training", fn=cross_entropy, make_inputs=_cross_entropy_inputs,
    default_dtype=torch.bfloat16, quick_shapes=[(4096, 32000), (4096, 128256), (8192, 256000)],
    cpu_shapes=[(64, 1000), (37, 5003)], grid_shapes=_model_shapes(VOCAB), axes=("tokens", "vocab"),
    bytes_model=_ce_bytes, backward_bytes_model=_ce_bwd_bytes,
    # max, subtract, exp, sum per logit; the backward: exp, subtract, scale
    flops_model=lambda s, dt: 4 * s[0] * s[1], backward_flops_model=lambda s, dt: 4 * s[0] * s[1],
    grad_inputs=(0,), cpu_default=False, memory_bound=True,
    description="F.cross_entropy(logits, targets): mean loss over tokens x vocabulary",
)
