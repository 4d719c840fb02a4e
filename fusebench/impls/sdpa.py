"""`sdpa-flash`, `sdpa-efficient`, `sdpa-cudnn`: PyTorch's fused attention backends, one each."""
import torch
import torch.nn.functional as F

from fusebench.cases.mix import ATTENTION
from fusebench.impls.base import Implementation, Prepared, implementation

# Its place among the implementations (fusebench/catalog.py): the order of a run's cells and of `fusebench list`.
CATALOG_ORDER = 4


def _sdpa(q, k, v, causal):
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


class _SDPA(Implementation):
    backend_name = ""  # attribute of torch.nn.attention.SDPBackend
    dtypes = (torch.float16, torch.bfloat16)
    adapters = ((ATTENTION, _sdpa),)  # attention as one SDPA call

    def available(self, device):
        return None if device.startswith("cuda") else "needs a CUDA GPU"

    def applies(self, case):
        return self.name in case.adapters

    def supports(self, case, shape, dtype, device):
        if self.available(device):
            return self.available(device)
        if dtype not in self.dtypes:
            return f"backend does not take {str(dtype).replace('torch.', '')}"
        return None

    def prepare(self, case, shape, dtype, device):
        from torch.nn.attention import SDPBackend, sdpa_kernel

        backend = getattr(SDPBackend, self.backend_name)
        # The backend is pinned for the whole measurement, outside the timed calls; when it cannot
        # take the inputs PyTorch raises "No available kernel", recorded as unsupported.
        return Prepared(fn=case.adapters[self.name], context=lambda: sdpa_kernel([backend]))


@implementation
class SDPAFlash(_SDPA):
    name = "sdpa-flash"
    description = "F.scaled_dot_product_attention, FlashAttention-2 backend"
    backend_name = "FLASH_ATTENTION"


@implementation
class SDPAEfficient(_SDPA):
    name = "sdpa-efficient"
    description = "F.scaled_dot_product_attention, memory-efficient (xformers) backend"
    backend_name = "EFFICIENT_ATTENTION"
    dtypes = (torch.float16, torch.bfloat16, torch.float32)


@implementation
class SDPACudnn(_SDPA):
    name = "sdpa-cudnn"
    description = "F.scaled_dot_product_attention, cuDNN backend"
    backend_name = "CUDNN_ATTENTION"
