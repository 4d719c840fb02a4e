"""A compiled graph as data: its nodes, what each costs to read, and its memory-bound regions.

Inductor lowers one post-grad FX graph per compiled graph (forward, backward or inference).
`summarize(graph)` turns it into plain `Node`s (name, ATen operator, class, inputs, users, bytes),
which can be pickled, stored and tested without torch.fx.

Classes:
- `compute`: GEMMs, convolutions and attention: kernels bound by arithmetic, which a memory-bound
  fusion cannot swallow (`COMPUTE`);
- `view`: operators that alias their input without moving data (`VIEWS`, and `getitem`);
- `memory`: every other operator: pointwise, reductions, copies, what fusion is about;
- `input` (placeholders and constants held by the graph) and `output`.

A *region* is a maximal connected set of memory and view nodes: what lies between compute kernels
(and the graph's inputs and outputs).  Its *unavoidable bytes* are the bytes of the tensors it reads
from outside plus those of the tensors it leaves for outside (a compute node, the graph's outputs,
or an in-place write): what a single kernel computing the region would still have to move.  The
same rule gives a kernel's own unavoidable bytes from the nodes fused into it.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, field

COMPUTE = frozenset({
    "mm", "addmm", "bmm", "baddbmm", "_scaled_mm", "_int_mm", "addmv", "mv",
    "convolution", "convolution_backward", "_convolution", "cudnn_convolution", "mkldnn_convolution",
    "_convolution_pointwise", "_convolution_pointwise_", "_linear_pointwise", "_mkl_linear",
    "_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_backward",
    "_scaled_dot_product_efficient_attention", "_scaled_dot_product_efficient_attention_backward",
    "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_cudnn_attention_backward",
    "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention_for_cpu_backward",
    "_flash_attention_forward", "_flash_attention_backward", "_efficient_attention_forward",
    "_efficient_attention_backward", "scaled_dot_product_attention", "_scaled_dot_product_fused_attention_overrideable",
    "_scaled_dot_product_fused_attention_overrideable_backward", "flex_attention", "flex_attention_backward",
})
ATTENTION = frozenset(n for n in COMPUTE if "attention" in n)
CONVOLUTION = frozenset(n for n in COMPUTE if "convolution" in n)

VIEWS = frozenset({
    "view", "_unsafe_view", "reshape", "_reshape_alias", "expand", "permute", "transpose", "t", "squeeze",
    "unsqueeze", "slice", "select", "as_strided", "alias", "unfold", "split", "split_with_sizes", "chunk", "unbind",
    "diagonal", "narrow", "view_as_real", "view_as_complex", "detach", "lift_fresh", "numpy_T", "real", "imag",
    "getitem",
})


@dataclass
class Node:
    name: str
    op: str  # the ATen operator's packet name ("mm", "add", "getitem"), or the FX op for non-calls
    target: str  # the full target, e.g. "aten.add.Tensor"
    klass: str  # compute | view | memory | input | output
    inputs: list[str] = field(default_factory=list)
    users: list[str] = field(default_factory=list)
    nbytes: int = 0  # bytes of the value it produces (a tuple's: the sum of its tensors)
    shape: tuple | None = None
    dtype: str | None = None
    flops: int | None = None  # compute nodes: as torch.utils.flop_counter counts them


def _packet(target) -> str:
    if target is operator.getitem:
        return "getitem"
    name = getattr(target, "__name__", None) or str(target)
    packet = getattr(target, "overloadpacket", None)
    if packet is not None:
        name = getattr(packet, "__name__", name)
    return name.split(".")[0] if "." in name else name


def _target_text(target) -> str:
    if target is operator.getitem:
        return "getitem"
    text = str(target)
    return text if text.startswith(("aten.", "prims.", "mkldnn.", "mkl.", "torch.")) else getattr(target, "__name__", text)


def _value_info(val) -> tuple[int, tuple | None, str | None]:
    import torch

    if isinstance(val, torch.Tensor):
        try:
            numel = int(val.numel())
        except Exception:  # symbolic sizes: not countable
            return 0, None, str(val.dtype).replace("torch.", "")
        return numel * val.element_size(), tuple(int(d) for d in val.shape), str(val.dtype).replace("torch.", "")
    if isinstance(val, (tuple, list)):
        return sum(_value_info(v)[0] for v in val), None, None
    return 0, None, None


def _flat_inputs(node) -> list[str]:
    names: list[str] = []

    def visit(a):
        if hasattr(a, "op") and hasattr(a, "name") and hasattr(a, "users"):
            names.append(a.name)
        elif isinstance(a, (tuple, list)):
            for x in a:
                visit(x)
        elif isinstance(a, dict):
            for x in a.values():
                visit(x)

    visit(node.args)
    visit(node.kwargs)
    return list(dict.fromkeys(names))


def classify(fx_op: str, packet: str, source_klass: str | None = None) -> str:
    if fx_op in ("placeholder", "get_attr"):
        return "input"
    if fx_op == "output":
        return "output"
    if packet == "getitem" and source_klass == "compute":
        return "compute"  # an element of a compute node's tuple belongs to the compute node
    if packet in COMPUTE:
        return "compute"
    if packet in VIEWS:
        return "view"
    return "memory"


def summarize(graph) -> list[Node]:
    """A torch.fx.Graph (or GraphModule) as a list of `Node`s, in graph order."""
    graph = getattr(graph, "graph", graph)
    out: list[Node] = []
    klass_of: dict[str, str] = {}
    for n in graph.nodes:
        packet = _packet(n.target) if n.op == "call_function" else n.op
        inputs = _flat_inputs(n)
        source = klass_of.get(inputs[0]) if packet == "getitem" and inputs else None
        klass = classify(n.op, packet, source)
        nbytes, shape, dtype = _value_info(n.meta.get("val"))
        klass_of[n.name] = klass
        out.append(Node(n.name, packet, _target_text(n.target) if n.op == "call_function" else n.op, klass, inputs,
                        [u.name for u in n.users], nbytes, shape, dtype,
                        _flops(n) if klass == "compute" and packet != "getitem" else None))
    return out


def _flops(node) -> int | None:
    """FLOPs of a compute node from its inputs' and output's shapes (torch.utils.flop_counter)."""
    try:
        from torch.utils._pytree import tree_map
        from torch.utils.flop_counter import flop_registry

        fn = flop_registry.get(getattr(node.target, "overloadpacket", None))
        if fn is None:
            return None

        def val(a):
            return a.meta.get("val") if hasattr(a, "meta") else a

        args, kwargs = tree_map(val, node.args), tree_map(val, dict(node.kwargs))
        return int(fn(*args, **kwargs, out_val=node.meta.get("val")))
    except Exception:  # a shape the counter does not understand: not counted
        return None


# ----------------------------------------------------------------------------------------------
# bytes


class GraphIndex:
    """Lookups over one graph's nodes."""

    def __init__(self, nodes: list[Node]):
        self.nodes = nodes
        self.by_name = {n.name: n for n in nodes}

    def root(self, name: str) -> str:
        """The node whose data `name` aliases: through views back to what produced the data."""
        seen = set()
        node = self.by_name.get(name)
        while node is not None and node.klass == "view" and node.inputs and node.name not in seen:
            seen.add(node.name)
            node = self.by_name.get(node.inputs[0])
        return node.name if node is not None else name

    def read_bytes(self, name: str) -> int:
        """Bytes read through `name`: a view reads at most what it shows of its root."""
        node = self.by_name.get(name)
        if node is None:
            return 0
        root = self.by_name.get(self.root(name))
        if node.klass == "view" and root is not None and node.op != "getitem":
            return min(node.nbytes, root.nbytes) if node.nbytes else root.nbytes
        return node.nbytes

    def consumers(self, name: str) -> list[str]:
        """Non-view users of `name`, looking through views (and the output node)."""
        out, stack, seen = [], [name], set()
        while stack:
            cur = stack.pop()
            for u in self.by_name[cur].users if cur in self.by_name else ():
                if u in seen:
                    continue
                seen.add(u)
                user = self.by_name.get(u)
                if user is not None and user.klass == "view":
                    stack.append(u)
                else:
                    out.append(u)
        return out

    def unavoidable_bytes(self, members: set[str]) -> tuple[int, int]:
        """(bytes read from outside, bytes left for outside) by a fused computation of `members`.

        Reads: each tensor from outside that a member (or a member's view chain) reads, once.
        Writes: each member whose data a non-member consumes or the graph outputs, and each
        member that nothing consumes but that writes in place (a mutation keeps its result)."""
        compute_like = {m for m in members if self.by_name.get(m) and self.by_name[m].klass in ("memory", "compute")}
        read: dict[str, int] = {}
        for m in compute_like:
            for i in self.by_name[m].inputs:
                root = self.root(i)
                if root in compute_like:
                    continue
                read[root] = max(read.get(root, 0), self.read_bytes(i))
        written = 0
        for m in compute_like:
            node = self.by_name[m]
            users = self.consumers(m)
            if any(u not in members for u in users) or (not users and node.op.endswith("_")):
                written += node.nbytes
        return sum(read.values()), written


# ----------------------------------------------------------------------------------------------
# regions


@dataclass
class Region:
    index: int
    nodes: list[str]  # memory and view nodes, graph order
    ops: list[str]  # their operators, memory nodes only, first-seen order
    read_bytes: int
    write_bytes: int
    after: list[str]  # compute nodes (or graph inputs) it reads from
    before: list[str]  # compute nodes (or the graph's output) it feeds

    @property
    def bytes(self) -> int:
        return self.read_bytes + self.write_bytes


def regions(nodes: list[Node], together: list[set[str]] = ()) -> list[Region]:
    """The memory-bound regions of a graph, in graph order.  `together` are node sets that one
    kernel computes (Inductor's fusions): their members join one region even where the graph does
    not connect them (a horizontal fusion)."""
    index = GraphIndex(nodes)
    parent = {n.name: n.name for n in nodes if n.klass in ("memory", "view")}

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(a, b):
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[rb] = ra

    for n in nodes:
        if n.name not in parent:
            continue
        for i in n.inputs:
            if i in parent:
                union(n.name, i)
    for group in together:
        members = [m for m in group if m in parent and index.by_name[m].klass == "memory"]
        for m in members[1:]:
            union(members[0], m)
    groups: dict[str, list[str]] = {}
    for n in nodes:
        if n.name in parent:
            groups.setdefault(find(n.name), []).append(n.name)
    out = []
    for members in groups.values():
        memory = [m for m in members if index.by_name[m].klass == "memory"]
        if not memory:
            continue  # views alone move nothing
        member_set = set(members)
        read, write = index.unavoidable_bytes(member_set)
        after = list(dict.fromkeys(index.root(i) for m in memory for i in index.by_name[m].inputs
                                   if index.root(i) not in member_set))
        before = list(dict.fromkeys(u for m in memory for u in index.consumers(m) if u not in member_set))
        ops = list(dict.fromkeys(index.by_name[m].op for m in memory))
        out.append(Region(len(out), members, ops, read, write, after, before))
    return out
