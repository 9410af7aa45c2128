"""The quantization configs roofline reads (compressed-tensors, ModelOpt, FP8 / FP8 block, MXFP4, AWQ / GPTQ),
declared as the schemas of the fields quant_config.py uses: a config of the wrong shape (config_groups a list,
a bit width a string) is one line naming the key, never a traceback. Other fields are left to their writers."""
from __future__ import annotations

from typing import Annotated

import msgspec
from msgspec import Meta

Names = Annotated[list[Annotated[str, Meta(max_length=4096)]], Meta(max_length=100_000)]
Bits = Annotated[int, Meta(ge=1, le=64)]
Text = Annotated[str, Meta(max_length=256)]


class CTWeights(msgspec.Struct):
    num_bits: Bits = 16
    type: Text = "int"
    group_size: Annotated[int, Meta(ge=0, le=1 << 20)] | None = None
    strategy: Text | None = None
    block_structure: list[Annotated[int, Meta(ge=1, le=1 << 20)]] | None = None


class CTActivations(msgspec.Struct):
    num_bits: Bits = 16


class CTGroup(msgspec.Struct):
    targets: Names | None = None
    weights: CTWeights | None = None
    input_activations: CTActivations | None = None
    format: Text | None = None


class CTKVScheme(msgspec.Struct):
    num_bits: Bits | None = None
    type: Text | None = None


class CompressedTensors(msgspec.Struct):
    format: Text | None = None
    config_groups: dict[Text, CTGroup] | None = None
    ignore: Names | None = None
    kv_cache_scheme: CTKVScheme | None = None


class ModelOptLayer(msgspec.Struct):
    quant_algo: Text | None = None


class ModelOptFields(msgspec.Struct):
    quant_algo: Text | None = None
    kv_cache_quant_algo: Text | None = None
    kv_cache_scheme: CTKVScheme | None = None
    exclude_modules: Names | None = None
    ignore: Names | None = None
    quantized_layers: dict[Annotated[str, Meta(max_length=4096)], ModelOptLayer | None] | None = None


class ModelOpt(ModelOptFields):
    quantization: ModelOptFields | None = None  # hf_quant_config.json nests the fields here


class NotConverted(msgspec.Struct):
    modules_to_not_convert: Names | None = None
    ignored_layers: Names | None = None


class FP8(NotConverted):
    weight_block_size: list[Annotated[int, Meta(ge=1, le=1 << 20)]] | None = None


class AwqGptq(NotConverted):
    bits: Bits | None = None
    w_bit: Bits | None = None
    group_size: Annotated[int, Meta(ge=-1, le=1 << 20)] | None = None
    q_group_size: Annotated[int, Meta(ge=-1, le=1 << 20)] | None = None
    lm_head: bool | None = None


# quant_method (as quant_config._parse_one resolves it) -> the schema of its fields
SCHEMAS = {"compressed-tensors": CompressedTensors, "modelopt": ModelOpt, "fp8": FP8, "mxfp4": NotConverted,
           "awq": AwqGptq, "gptq": AwqGptq}
