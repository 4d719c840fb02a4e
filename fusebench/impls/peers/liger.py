"""`liger`: Liger-Kernel's Triton kernels, through `liger_kernel.transformers.functional`.

Of fusebench's cases Liger covers softmax (`liger_softmax`, over the last dimension, which is the
case's dim 1), layernorm (`liger_layer_norm(X, W, B, eps)`, the case's own weight, bias and
eps), rmsnorm (`liger_rms_norm(X, W, eps)`), swiglu (`liger_swiglu(a, b)`, silu(a) * b) and
cross_entropy (`liger_cross_entropy(input, target)`, mean reduction).  It has no residual-add +
RMSNorm among its functional entry points, nor kernels for the other cases.  Each call goes
through the library's autograd Function, as a model's would (the bwd and fwd_bwd modes
differentiate it); under torch.no_grad() that adds no saved tensors.

rmsnorm runs with Liger's default casting mode ("llama": the statistics in fp32, x * rstd
rounded to the input's dtype before the weight) and in_place=False: in place, its backward
writes dX over the incoming gradient, which the bwd mode reuses across repetitions.
cross_entropy is Liger's own design: its forward writes the logits' gradient over the logits
(the inputs a cell times are overwritten with it) and its backward scales that gradient in place
unless the incoming gradient is exactly 1 (the modes' incoming gradients are random).
"""
from fusebench.cases.reduce import LAYERNORM, LAYERNORM_EPS, SOFTMAX
from fusebench.cases.training import CROSS_ENTROPY, RMSNORM, RMSNORM_EPS, SWIGLU
from fusebench.impls.peers import PeerImplementation, peer

# Its place among the implementations (fusebench/catalog.py): the order of a run's cells and of `fusebench list`.
CATALOG_ORDER = 1


def _softmax(case, shape, dtype, device, liger):
    softmax = liger.liger_softmax
    return (lambda x: softmax(x)), ""


def _layernorm(case, shape, dtype, device, liger):
    layer_norm = liger.liger_layer_norm
    return (lambda x, weight, bias: layer_norm(x, weight, bias, LAYERNORM_EPS)), ""


def _rmsnorm(case, shape, dtype, device, liger):
    rms_norm = liger.liger_rms_norm
    return (lambda x, weight: rms_norm(x, weight, RMSNORM_EPS, in_place=False)), "casting_mode llama"


def _swiglu(case, shape, dtype, device, liger):
    swiglu = liger.liger_swiglu
    return (lambda a, b: swiglu(a, b)), ""


def _cross_entropy(case, shape, dtype, device, liger):
    cross_entropy = liger.liger_cross_entropy
    return (lambda logits, targets: cross_entropy(logits, targets)), "gradient written over the logits"


@peer
class Liger(PeerImplementation):
    name = "liger"
    description = ("Liger-Kernel (liger_kernel.transformers.functional): softmax, layernorm, rmsnorm, swiglu, "
                   "cross_entropy")
    module = "liger_kernel.transformers.functional"
    dist = "liger-kernel"
    install = "pip install liger-kernel"
    adapters = ((SOFTMAX, _softmax), (LAYERNORM, _layernorm), (RMSNORM, _rmsnorm), (SWIGLU, _swiglu),
                (CROSS_ENTROPY, _cross_entropy))
