"""fusebench: a benchmark and test suite for GPU kernel fusion.

    import fusebench
    df = fusebench.run(["softmax"], shapes="4096x4096")       # a pandas DataFrame, also stored

    @fusebench.case(inputs=lambda shape, dtype, device, seed: (fusebench.randn(shape, dtype, device, seed),),
                    shapes=[(4096, 4096)])
    def my_gelu(x):
        return torch.nn.functional.gelu(x)

    @fusebench.implementation("my-softmax", cases=["softmax"])   # your kernel, in the same grid
    def my_softmax(x):
        ...
"""
from fusebench.version import __version__  # noqa: E402,F401

from fusebench.api import results, run  # noqa: E402,F401
from fusebench.cases import Case, case, get_case, rand, randn, register  # noqa: E402,F401
from fusebench.impls.user import implementation  # noqa: E402,F401
from fusebench.check.assertions import assert_fused  # noqa: E402,F401
from fusebench.audit.models import model  # noqa: E402,F401
from fusebench.audit.api import audit_model  # noqa: E402,F401 (fusebench.audit is the subpackage)
