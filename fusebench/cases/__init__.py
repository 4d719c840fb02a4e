"""The case catalog: what is computed.  See base.py for what a case holds; each module of this
package declares the cases of one family as module-level Case objects, which the catalog's loader
(fusebench/catalog.py) collects."""
from fusebench.cases.base import (  # noqa: F401
    DTYPES, DTYPE_NAMES, Case, PluginError, Shape, UnknownName, all_cases, case, get_case, load_plugin,
    memory_bound_names, parse_dtype, plugin_record, parse_shape, rand, randn, register, shape_str,
)

