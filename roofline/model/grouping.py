"""Tensor names -> modules: the module is the tensor name minus its last component; the
routed experts of one MoE layer (per-expert `experts.7.down_proj.weight` or fused
`experts.gate_up_proj`) fold into one `...experts` module, since a token reads them as one."""
from __future__ import annotations

import re

from .inventory import Tensor
from .roles import LAYER_CONTAINERS, role_of


def module_and_expert(tensor_name: str) -> tuple[str, int | None]:
    """(owning module name, routed-expert index or None)."""
    at = tensor_name.find(".experts.")
    if at >= 0:
        index, dot, _ = tensor_name[at + 9:].partition(".")
        if dot and index.isdigit() and ".shared_expert" not in tensor_name[:at]:
            return tensor_name[:at + 8], int(index)
    module, _, _ = tensor_name.rpartition(".")
    return module or tensor_name, None


def group_tensors(tensors: list[Tensor]) -> dict[str, tuple[list[Tensor], int]]:
    """module name -> (its tensors, number of routed experts it holds)."""
    modules: dict[str, list[Tensor]] = {}
    experts: dict[str, set[int]] = {}
    for tensor in tensors:
        name = tensor.name
        if ".experts." in name:  # the rare path: one regex per expert tensor
            module, expert = module_and_expert(name)
            if expert is not None:
                experts.setdefault(module, set()).add(expert)
        else:
            module = name.rpartition(".")[0] or name
        members = modules.get(module)
        if members is None:
            modules[module] = [tensor]
        else:
            members.append(tensor)
    out = {}
    for module, members in modules.items():
        count = len(experts.get(module, ()))
        if not count and (module.endswith(".experts") or role_of(module) == "moe_experts"):
            # fused 3-D expert tensors (transformers 5 / gpt-oss; Granite's block_sparse_moe.input_linear):
            # experts are the leading dim
            count = max((t.shape[0] for t in members if len(t.shape) >= 3), default=0)
        out[module] = (members, count)
    return out


def generic_name(module_name: str) -> str:
    """The module name with its layer index replaced, so that role rules and group labels are
    computed once per kind of module, not once per layer."""
    return _LAYER_INDEX.sub(r"\1.#.", module_name)


_LAYER_INDEX = re.compile(rf"(\.{LAYER_CONTAINERS})\.\d+\.")


def short_label(module_name: str) -> str:
    """Display label of a kind of module: the part after the layer index
    ("linear_attn.in_proj_qkvz"), or the name without the model prefix ("lm_head")."""
    match = _LAYER_INDEX.search(module_name)
    if match:
        prefix = module_name[: match.start()]
        label = module_name[match.end():]
        if prefix.startswith("mtp") or ".mtp" in prefix:
            label = "mtp." + label
        return label
    for prefix in ("model.language_model.", "language_model.model.", "model.", "backbone.", "transformer."):
        if module_name.startswith(prefix):
            return module_name[len(prefix):]
    return module_name

