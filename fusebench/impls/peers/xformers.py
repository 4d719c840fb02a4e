"""`xformers`: xFormers' `xformers.ops.memory_efficient_attention` on the attention case.

It takes (batch, seqlen, heads, head_dim), like FlashAttention: q, k and v are passed as
transpose(1, 2) views and the output is transposed back, no copy timed.  The scale is its
default, 1/sqrt(head_dim); causal attention is `attn_bias=LowerTriangularMask()`, the mask the
case applies (query i sees keys 0..i).
"""
from fusebench.cases.mix import ATTENTION
from fusebench.impls.peers import PeerImplementation, peer

# Its place among the implementations (fusebench/catalog.py): the order of a run's cells and of `fusebench list`.
CATALOG_ORDER = 4


def _attention(case, shape, dtype, device, xops):
    mea = xops.memory_efficient_attention
    causal_mask = xops.LowerTriangularMask()

    def fn(q, k, v, causal):
        out = mea(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                  attn_bias=causal_mask if causal else None)
        return out.transpose(1, 2)

    return fn, ""


@peer
class XFormers(PeerImplementation):
    name = "xformers"
    description = "xFormers (xformers.ops.memory_efficient_attention): attention"
    module = "xformers.ops"
    dist = "xformers"
    install = "pip install xformers"
    adapters = ((ATTENTION, _attention),)
