"""`flash-attn` (FlashAttention-2, `flash_attn.flash_attn_func`) and `flash-attn-4` (FlashAttention-4,
CuTe DSL, `flash_attn.cute.flash_attn_func`) on the attention case.

The case holds q, k, v as (batch, heads, seqlen, head_dim); both libraries take
(batch, seqlen, heads, head_dim).  transpose(1, 2) gives that layout as a view (the last
dimension stays contiguous, which is what the kernels require), and the output is transposed
back the same way, so no copy is timed.  The scale is the library default, 1/sqrt(head_dim), as
in the case; causal=True masks the upper triangle as the case does (seqlen_q == seqlen_k, so
the top-left and bottom-right conventions agree).  Half precision only.
"""
import torch

from fusebench.cases.mix import ATTENTION
from fusebench.impls.peers import PeerImplementation, peer

# Its place among the implementations (fusebench/catalog.py): the order of a run's cells and of `fusebench list`.
CATALOG_ORDER = 3

HALF = (torch.float16, torch.bfloat16)


def _attention(case, shape, dtype, device, fa):
    flash_attn_func = fa.flash_attn_func

    def fn(q, k, v, causal):
        out = flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=bool(causal))
        if isinstance(out, tuple):  # FlashAttention-4 returns (out, lse)
            out = out[0]
        return out.transpose(1, 2)

    return fn, ""


class _Flash(PeerImplementation):
    adapters = ((ATTENTION, _attention),)
    max_head_dim = 256

    def cell_supports(self, case, shape, dtype):
        if dtype not in HALF:
            return f"{self.name} takes fp16 and bf16 only"
        if shape[3] > self.max_head_dim or shape[3] % 8:
            return f"{self.name} takes head_dim a multiple of 8 up to {self.max_head_dim}"
        return None


@peer
class FlashAttn(_Flash):
    name = "flash-attn"
    description = "FlashAttention-2 (flash_attn.flash_attn_func): attention"
    module = "flash_attn"
    dist = "flash-attn"
    install = "pip install flash-attn --no-build-isolation"


@peer
class FlashAttn4(_Flash):
    name = "flash-attn-4"
    description = "FlashAttention-4 (flash_attn.cute.flash_attn_func, CuTe DSL): attention; compute capability 9.0+"
    module = "flash_attn.cute"
    dist = "flash-attn-4"
    install = "pip install flash-attn-4"
    min_capability = (9, 0)
