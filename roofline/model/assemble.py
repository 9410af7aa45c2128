"""Tensors + config -> Inventory: group, classify, detect formats, cross-check the config.

Shared by every source that sees real tensors (local files, hub headers, the vLLM capture)."""
from __future__ import annotations

import re

from .architecture import ModelShape, shape_from_config
from .detect import detect_format
from .formats import PLAIN_FORMATS, format_label
from .grouping import generic_name, group_tensors, short_label
from .inventory import Inventory, Module, Tensor
from .quant_config import LINEAR_ROLES, QuantConfig, parse_quant_config
from .roles import NOT_READ_IN_TEXT_DECODE, classify, layer_of, role_of

PLAIN = set(PLAIN_FORMATS.values())
_NUMBERS = re.compile(r"(\d+)")


def _quant_family(fmt: str) -> str:
    """Storage family, for comparing tensors with the config (W4A4 and W4A16 store alike)."""
    return fmt.split("-w4")[0] if fmt.startswith("nvfp4") else fmt


def inventory_from_tensors(model_id: str, source: str, config: dict, tensors: list[Tensor],
                           hf_quant_config: dict | None = None) -> Inventory:
    shape = shape_from_config(config)
    quant, notes = parse_quant_config(config, hf_quant_config)
    modules: list[Module] = []
    role_cache: dict[str, str] = {}
    for name, (members, experts) in group_tensors(tensors).items():
        generic = generic_name(name)
        role = role_cache.get(generic)
        if role is None:
            role = role_cache[generic] = role_of(generic)
        layer = layer_of(name)
        if layer is not None and layer >= shape.num_layers and role not in NOT_READ_IN_TEXT_DECODE:
            role, layer = classify(name, shape.num_layers)
        detected = detect_format(members)
        module = Module(name=name, layer=layer, role=role, format=detected.format,
                        quant_method=quant.method if quant and detected.format not in PLAIN else "none",
                        params=detected.params, tensors=members, experts=experts)
        if quant is not None:
            _cross_check(module, quant, detected.quantized_activations, notes)
        modules.append(module)
    _add_tied_lm_head(modules, shape)
    # one order whatever the shard layout: by name, layer numbers compared as numbers
    modules.sort(key=lambda m: [int(part) if part.isdigit() else part for part in _NUMBERS.split(m.name)])
    inventory = Inventory(model_id=model_id, source=source, config=config, shape=shape, modules=modules,
                          disagreements=_collapse(notes))
    if quant is not None:
        inventory.quant = quant.summary()
    return inventory


def _cross_check(module: Module, quant: QuantConfig, quantized_acts: bool | None, notes: list[str]) -> None:
    """Record where the tensors and the quantization config disagree; the tensors win for bytes,
    the config decides W4A4 vs W4A16 when the tensors store both alike."""
    if module.role not in LINEAR_ROLES or module.params == 0:
        return
    if not any(len(t.shape) >= 2 for t in module.tensors):
        # vectors only (norms inside an MTP layer, Mamba A_log / D, Gemma layer_scalar): no
        # linear weight here for a quantization config to speak about
        return
    expected = quant.expected(module.name, module.role)
    fmt = module.format
    label = short_label(module.name)
    if expected is None:
        if fmt not in PLAIN:
            notes.append(f"{label}: stored {format_label(fmt)} but {quant.config_file} leaves it unquantized")
        return
    if fmt in PLAIN:
        if module.role not in NOT_READ_IN_TEXT_DECODE:
            notes.append(f"{label}: {quant.config_file} says {format_label(expected.format)} but the tensors are "
                         f"{format_label(fmt)}")
        return
    if _quant_family(fmt) != _quant_family(expected.format):
        notes.append(f"{label}: stored {format_label(fmt)} but {quant.config_file} says {format_label(expected.format)}")
        return
    if fmt != expected.format:
        # NVFP4: same storage; activations per the config, unless the tensors contradict it
        if quantized_acts is False and expected.activation_bits == 4:
            notes.append(f"{label}: {quant.config_file} says W4A4 but the checkpoint has no input scales")
        elif quantized_acts is True and expected.activation_bits == 16:
            notes.append(f"{label}: {quant.config_file} says W4A16 but the checkpoint ships input scales")
        module.format = expected.format


def _collapse(notes: list[str]) -> list[str]:
    """One line per distinct sentence, with a count: 48 identical per-layer notes are one finding."""
    counts: dict[str, int] = {}
    for note in notes:
        counts[note] = counts.get(note, 0) + 1
    return [f"{note} (x{n})" if n > 1 else note for note, n in counts.items()]


def _add_tied_lm_head(modules: list[Module], shape: ModelShape) -> None:
    """A tied lm_head has no tensor of its own; decode still reads the whole embedding matrix
    through it, so it gets a module that owns no bytes but points at the embedding."""
    if any(m.role == "lm_head" for m in modules):
        return
    embeddings = [m for m in modules if m.role == "embedding" and m.layer is None]
    if not embeddings or not shape.tie_word_embeddings:
        return
    embedding = max(embeddings, key=lambda m: m.nbytes)
    modules.append(Module(name="lm_head", layer=None, role="lm_head", format=embedding.format,
                          quant_method=embedding.quant_method, params=embedding.params, tensors=[],
                          tied_to=embedding.name, notes=[f"tied to {embedding.name}: shares its tensor"]))
