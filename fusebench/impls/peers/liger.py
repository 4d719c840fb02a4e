"""`liger`: Liger-Kernel's Triton kernels, through `liger_kernel.transformers.functional`.

Of fusebench's cases Liger covers softmax (`liger_softmax`, over the last dimension, which is the
case's dim 1) and layernorm (`liger_layer_norm(X, W, B, eps)`, the case's own weight, bias and
eps).  Its other kernels (RMSNorm, SwiGLU, GEGLU, cross-entropy ...) compute nothing that a
fusebench case defines.  Each call goes through the library's autograd Function, as a model's
would; under torch.no_grad() that adds no saved tensors.
"""
from fusebench.cases.reduce import LAYERNORM_EPS
from fusebench.impls.peers import PeerImplementation, peer


def _softmax(case, shape, dtype, device, liger):
    softmax = liger.liger_softmax
    return (lambda x: softmax(x)), ""


def _layernorm(case, shape, dtype, device, liger):
    layer_norm = liger.liger_layer_norm
    return (lambda x, weight, bias: layer_norm(x, weight, bias, LAYERNORM_EPS)), ""


@peer
class Liger(PeerImplementation):
    name = "liger"
    description = "Liger-Kernel (liger_kernel.transformers.functional): softmax, layernorm"
    module = "liger_kernel.transformers.functional"
    dist = "liger-kernel"
    install = "pip install liger-kernel"
    adapters = {"softmax": _softmax, "layernorm": _layernorm}
