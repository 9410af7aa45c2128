"""Apply a quantization config to a skeleton: every weight the config quantizes is replaced by
the tensors its producer stores (roofline.model.storage). Which module is quantized is
QuantConfig.expected, the same rule the header audit cross-checks with."""
from __future__ import annotations

from .architecture import shape_from_config
from .formats import get_format
from .grouping import module_and_expert
from .inventory import Tensor
from .quant_config import LINEAR_ROLES, QuantConfig
from .roles import classify
from .skeleton import Skeleton
from .storage import stored_tensors


def apply_quant_config(skeleton: Skeleton, config: dict, quant: QuantConfig | None) -> list[Tensor]:
    """Replace every weight the quantization config quantizes by the tensors its producer
    stores. Which module is quantized is QuantConfig.expected, the same rule the header audit
    cross-checks with."""
    if quant is None:
        return list(skeleton.tensors)
    num_layers = shape_from_config(config).num_layers
    model_type = str(config.get("model_type") or "")
    out: list[Tensor] = []
    decisions: dict[str, object] = {}
    for tensor in skeleton.tensors:
        if tensor.name not in skeleton.linear_weights:
            out.append(tensor)
            continue
        module, _ = module_and_expert(tensor.name)
        if module not in decisions:
            role, _ = classify(module, num_layers)
            decisions[module] = quant.expected(module, role) if role in LINEAR_ROLES else None
        scheme = decisions[module]
        if scheme is None:
            out.append(tensor)
            continue
        out.extend(stored_tensors(tensor, scheme.format, quant.method, model_type=model_type,
                                  group_size=_group_size(quant, scheme.format)))
    return out


def _group_size(quant: QuantConfig, fmt: str) -> int:
    return get_format(fmt).group_size or 128
