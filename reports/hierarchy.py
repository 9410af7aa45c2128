"""The module hierarchy as a tree (networkx), summed bottom-up for a treemap sized by bytes
read per token. Node ids are dotted module paths under the model's root."""
from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

from .view import ModuleView

ROOT = ""  # the root node (the model) inside the graph
ROOT_ID = "(root)"  # its id on the page: plotly wants one explicit root, and no module has this name
OWN = "(own tensors)"  # leaf for tensors held directly by a module that also has children


@dataclass
class TreeNode:
    id: str
    parent: str
    label: str
    value: float  # bytes per token of the subtree
    own: float  # bytes per token of the node itself (leaves only; plotly's branchvalues="remainder")
    module: ModuleView | None  # the module a leaf stands for


def module_tree(modules: list[ModuleView]) -> nx.DiGraph:
    """Parent -> child edges along the dotted names; each module's node carries it."""
    tree = nx.DiGraph()
    tree.add_node(ROOT, label="", module=None)
    for module in modules:
        parts = module.name.split(".")
        parent = ROOT
        for depth in range(len(parts)):
            node = ".".join(parts[: depth + 1])
            if node not in tree:
                tree.add_node(node, label=parts[depth], module=None)
                tree.add_edge(parent, node)
            parent = node
        tree.nodes[parent]["module"] = module
    # a module that also has sub-modules (Qwen3-Next's linear_attn holds A_log and dt_bias)
    # keeps its own tensors in a leaf of its own, so that parents are exactly their children
    for node in list(tree.nodes):
        module = tree.nodes[node]["module"]
        if module is not None and tree.out_degree(node):
            own = f"{node}.{OWN}"
            tree.add_node(own, label=OWN, module=module)
            tree.add_edge(node, own)
            tree.nodes[node]["module"] = None
    return tree


def _collapse_chains(tree: nx.DiGraph) -> None:
    """Merge a node with its only child when the node holds nothing itself
    ("model" -> "language_model" -> "layers" becomes "model.language_model.layers")."""
    changed = True
    while changed:
        changed = False
        for node in list(nx.dfs_preorder_nodes(tree, ROOT)):
            if node == ROOT or node not in tree:
                continue
            children = list(tree.successors(node))
            if len(children) != 1 or tree.nodes[node]["module"] is not None:
                continue
            child = children[0]
            if tree.out_degree(child) == 0:
                continue  # keep leaves under a named parent
            parent = next(tree.predecessors(node))
            tree.nodes[child]["label"] = f"{tree.nodes[node]['label']}.{tree.nodes[child]['label']}"
            tree.add_edge(parent, child)
            tree.remove_node(node)
            changed = True


def treemap_nodes(modules: list[ModuleView], root_label: str) -> list[TreeNode]:
    """Nodes in depth-first order, the root first, with their own and subtree bytes per token.
    Plotly sums the tree itself from the leaves (branchvalues="remainder"), so float rounding in
    the totals shown on hover can never make it refuse to draw."""
    tree = module_tree(modules)
    _collapse_chains(tree)
    totals: dict[str, float] = {}
    owns: dict[str, float] = {}
    for node in nx.dfs_postorder_nodes(tree, ROOT):
        module = tree.nodes[node]["module"]
        owns[node] = module.bytes_per_token if module is not None and tree.out_degree(node) == 0 else 0.0
        totals[node] = owns[node] + sum(totals[child] for child in tree.successors(node))
    out = [TreeNode(id=ROOT_ID, parent="", label=root_label, value=totals[ROOT], own=0.0,
                    module=None)]
    for node in nx.dfs_preorder_nodes(tree, ROOT):
        if node == ROOT:
            continue
        parent = next(tree.predecessors(node))
        out.append(TreeNode(id=node, parent=parent or ROOT_ID, label=tree.nodes[node]["label"],
                            value=totals[node], own=owns[node], module=tree.nodes[node]["module"]))
    return out
