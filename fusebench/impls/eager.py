"""`eager`: the case's function as written, run by PyTorch op by op."""
from fusebench.impls.base import Implementation, Prepared, implementation

# Its place among the implementations (fusebench/catalog.py): the order of a run's cells and of `fusebench list`.
CATALOG_ORDER = 1


@implementation
class Eager(Implementation):
    name = "eager"
    description = "the function as written, in PyTorch"

    def prepare(self, case, shape, dtype, device):
        return Prepared(fn=case.fn)
