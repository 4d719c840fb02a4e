"""The case catalog: what is computed.  See base.py for what a case holds."""
from fusebench.cases.base import (  # noqa: F401
    DTYPES, DTYPE_NAMES, Case, PluginError, Shape, UnknownName, all_cases, case, get_case, load_plugin,
    parse_dtype, plugin_record, parse_shape, rand, randn, register, shape_str,
)

# The memory-bound cases (issue 6's set: our Triton kernel for each should run at the copy rate), in
# the specification's order; the bench scripts that sweep or score them share this list.
MEMORY_BOUND = ["pointwise_chain", "softmax", "double_softmax", "softmax_backward", "layernorm", "norm_chain",
                "horizontal_reduction_pointwise", "horizontal_reduction_reduction", "bias_gelu", "bias_dropout_add",
                "bias_dropout_add_transposed", "rmsnorm", "add_rmsnorm", "swiglu", "cross_entropy"]
