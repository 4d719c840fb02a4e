"""`sdpa-flash`, `sdpa-efficient`, `sdpa-cudnn`: PyTorch's fused attention backends, one each."""
import torch
import torch.nn.functional as F

from fusebench.impls.base import Implementation, Prepared, implementation


class _SDPA(Implementation):
    backend_name = ""  # attribute of torch.nn.attention.SDPBackend
    dtypes = (torch.float16, torch.bfloat16)

    def available(self, device):
        return None if device.startswith("cuda") else "needs a CUDA GPU"

    def applies(self, case):
        return case.name == "attention"

    def supports(self, case, shape, dtype, device):
        if self.available(device):
            return self.available(device)
        if dtype not in self.dtypes:
            return f"backend does not take {str(dtype).replace('torch.', '')}"
        return None

    def prepare(self, case, shape, dtype, device):
        from torch.nn.attention import SDPBackend, sdpa_kernel

        backend = getattr(SDPBackend, self.backend_name)

        def sdpa(q, k, v, causal):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

        # The backend is pinned for the whole measurement, outside the timed calls; when it cannot
        # take the inputs PyTorch raises "No available kernel", recorded as unsupported.
        return Prepared(fn=sdpa, context=lambda: sdpa_kernel([backend]))


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
