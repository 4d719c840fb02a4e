"""Your own model in a fusion audit: a pre-norm transformer MLP block.

    fusebench audit my_block --plugin examples/my_model.py --mode fwd_bwd
    fusebench audit my_block --plugin examples/my_model.py --sizes batch=4,tokens=1024

The decorated function takes the model's sizes as keyword arguments, plus the dtype, the device
and a seed, and returns the module and its example inputs.  fusebench seeds torch's random number
generator from `seed` before calling it, so the same seed gives the same weights and inputs.
`sizes` are the defaults on a GPU; `cpu_sizes` the ones to use on a CPU, where a step should
compile and run in seconds.  In a forward-backward step fusebench backpropagates a seeded random
gradient of the output (give `loss=` to backpropagate a loss of the output instead); an input that
requires grad gets its gradient, as the input of a layer inside a network does.
"""
import torch
import torch.nn.functional as F
from torch import nn

import fusebench


class MLPBlock(nn.Module):
    """x + W2 · gelu(W1 · layernorm(x)): the feed-forward half of a transformer block."""

    def __init__(self, hidden: int, inner: int):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        self.up = nn.Linear(hidden, inner)
        self.down = nn.Linear(inner, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(F.gelu(self.up(self.norm(x)), approximate="tanh"))


@fusebench.model(sizes={"batch": 8, "tokens": 512, "hidden": 1024},
                 cpu_sizes={"batch": 1, "tokens": 64, "hidden": 256})
def my_block(batch, tokens, hidden, *, dtype, device, seed):
    """A transformer MLP block: LayerNorm, GELU MLP 4x wide, residual."""
    module = MLPBlock(hidden, 4 * hidden).to(device=device, dtype=dtype)
    x = torch.randn(batch, tokens, hidden, device=device, dtype=dtype, requires_grad=True)
    return module, (x,)
