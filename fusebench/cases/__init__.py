"""The case catalog: what is computed.  See base.py for what a case holds."""
from fusebench.cases.base import (  # noqa: F401
    DTYPES, DTYPE_NAMES, Case, Shape, UnknownName, all_cases, case, get_case, load_plugin,
    parse_dtype, parse_shape, rand, randn, register, shape_str,
)
