"""Source: config.json (+ hf_quant_config.json) alone, no weights.

Three steps, each its own module and testable alone:
1. skeleton: the unquantized tensors a checkpoint of this config stores, with checkpoint names
   (roofline.sources.transformers_meta builds the model on the meta device; MTP layers that
   transformers does not build are added by roofline.model.skeleton);
2. quantization: the config's quantization_config / hf_quant_config.json, parsed by
   roofline.model.quant_config (shared with the header audit);
3. stored tensors: roofline.model.quantize replaces every quantized weight by the tensors its
   producer stores, scales included (roofline.model.storage).

The tensor list then goes through roofline.model.assemble.inventory_from_tensors, exactly like a
header audit: grouping, roles, tied lm_head and the config cross-check are shared.

Limits, said where they apply: layers the transformers class does not build (MTP / next-token
heads of Qwen3-Next, Qwen3.5 and DeepSeek-V3) are modelled from one decoder layer of the same
model (roofline.model.skeleton.add_mtp); small tensors that a producer adds outside the weight
format (KV-cache k_scale / v_scale) are not counted.
"""
from __future__ import annotations

import os

from roofline import progress
from roofline.errors import RooflineError
from roofline.model.assemble import inventory_from_tensors
from roofline.model.inventory import Inventory
from roofline.model.limits import check_config_sizes
from roofline.model.quant_config import parse_quant_config, without_quantization
from roofline.model.quantize import apply_quant_config
from roofline.model.skeleton import Skeleton

from .hub import download
from .local import optional_json, read_json
from .skeleton_cache import cached_skeleton

CONFIG = "config.json"
HF_QUANT_CONFIG = "hf_quant_config.json"


def load_config_only(directory: str, trust_remote_code: bool = False, model_id: str | None = None,
                     use_cache: bool = True) -> Inventory:
    if not os.path.isdir(directory):
        raise RooflineError(f"{directory}: not a directory")
    config = read_json(os.path.join(directory, CONFIG), f"{directory}/{CONFIG}")
    hf_quant = optional_json(os.path.join(directory, HF_QUANT_CONFIG))
    return inventory_from_config(model_id or os.path.basename(os.path.abspath(directory)), config, hf_quant,
                                 trust_remote_code=trust_remote_code,
                                 remote_code_source=directory if trust_remote_code else None, use_cache=use_cache)


def load_config_only_hub(repo_id: str, revision: str | None = None, trust_remote_code: bool = False,
                         use_cache: bool = True) -> Inventory:
    """config.json (and hf_quant_config.json when the repository has one) through
    huggingface_hub; nothing else is downloaded unless --trust-remote-code asks for the
    repository's own modelling code."""
    config_path = download(repo_id, CONFIG, revision)
    quant_path = download(repo_id, HF_QUANT_CONFIG, revision, optional=True)
    config = read_json(config_path, f"{repo_id}/{CONFIG}")
    hf_quant = read_json(quant_path, f"{repo_id}/{HF_QUANT_CONFIG}") if quant_path else None
    inventory = inventory_from_config(repo_id, config, hf_quant, trust_remote_code=trust_remote_code,
                                      remote_code_source=repo_id if trust_remote_code else None,
                                      revision=revision, use_cache=use_cache)
    inventory.bytes_read = os.path.getsize(config_path) + (os.path.getsize(quant_path) if quant_path else 0)
    return inventory


def inventory_from_config(model_id: str, config: dict, hf_quant_config: dict | None = None, *,
                          trust_remote_code: bool = False, remote_code_source: str | None = None,
                          revision: str | None = None, use_cache: bool = True) -> Inventory:
    check_config_sizes(config)  # before anything is built from it
    quant, _ = parse_quant_config(config, hf_quant_config)

    def build() -> Skeleton:
        from .transformers_meta import (
            checkpoint_tensors,  # torch + transformers: only to build
        )

        with progress.step(f"{model_id}: building the model skeleton from config.json (transformers on the meta "
                           "device; cached for next time)"):
            return checkpoint_tensors(config, trust_remote_code=trust_remote_code,
                                      remote_code_source=remote_code_source, revision=revision)

    # the repository's own code may differ between revisions: never cached
    skeleton = cached_skeleton(config, build, use_cache=use_cache and not trust_remote_code)
    tensors = apply_quant_config(skeleton, config, quant)
    inventory = inventory_from_tensors(model_id, "config", config, tensors, hf_quant_config)
    inventory.checkpoint_bytes = sum(t.nbytes for t in tensors)
    return inventory


def base_inventory(quantized: Inventory, *, use_cache: bool = True) -> Inventory:
    """The unquantized model a quantized checkpoint was made from: its own config without the
    quantization config (and without hf_quant_config.json), named after the base."""
    from roofline.model.naming import base_model_name

    inventory = inventory_from_config(base_model_name(quantized.model_id), without_quantization(quantized.config),
                                      None, use_cache=use_cache)
    inventory.source = f"config (base of {quantized.model_id})"
    return inventory
