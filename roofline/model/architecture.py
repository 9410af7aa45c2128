"""The architecture facts decode traffic needs, read from a config.json (pure, no I/O).

Weights are counted from tensors; what tensors cannot tell is how many experts a token visits,
what each attention layer keeps in its KV cache, and how big the recurrent state of linear
attention / Mamba layers is. Those come from the config, and only those.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from roofline.data import load_table
from roofline.errors import RooflineError

from .limits import check_config_sizes


@dataclass(frozen=True)
class AttentionLayer:
    """One softmax-attention layer's KV cache shape, per token of context."""

    layer: int
    kv_heads: int
    head_dim: int  # K width per head
    value_dim: int  # V width per head (0: K and V share one tensor, e.g. MLA latent)
    window: int | None  # sliding window, None for full attention

    def kv_elements_per_token(self) -> int:
        return self.kv_heads * (self.head_dim + self.value_dim)


@dataclass(frozen=True)
class RecurrentLayer:
    """A GDN (gated delta net) or Mamba layer: fixed-size state, read and written every token."""

    layer: int
    kind: str  # "gdn" | "mamba"
    state_elements: int  # the recurrent (SSM / delta-rule) state
    conv_elements: int  # the causal-conv rolling window


@dataclass
class ModelShape:
    architecture: str
    model_type: str
    num_layers: int
    hidden_size: int
    vocab_size: int
    dtype: str  # "bfloat16", "float16", ...
    tie_word_embeddings: bool
    num_experts: int = 0
    experts_per_token: int = 0
    # a routed expert's intermediate width (0: no experts): its GEMMs' size, which moves the rate a MoE kernel
    # reaches (benchmarks/gpu_vllm/decode_rates.py: Marlin's at one token 475 GB/s at 512 wide, 1,956 at 14,336)
    expert_width: int = 0
    mtp_layers: int = 0
    attention: list[AttentionLayer] = field(default_factory=list)
    recurrent: list[RecurrentLayer] = field(default_factory=list)
    # dtype of the recurrent state as vLLM keeps it on a GPU (recurrent_state_dtype: the model dtype unless
    # the architecture's vLLM config hook sets another; a CPU platform may reset it, serving.toml)
    state_dtype: str = "float32"
    is_multimodal: bool = False


def text_config(config: dict) -> dict:
    """The language-model part of a config: multimodal wrappers nest it under text_config."""
    inner = config.get("text_config")
    if isinstance(inner, dict) and inner:
        merged = dict(inner)
        # wrapper-level fields the text config may lack
        for key in ("tie_word_embeddings", "torch_dtype", "dtype", "quantization_config"):
            if key not in merged and key in config:
                merged[key] = config[key]
        return merged
    return config


def config_int(cfg: dict, *keys: str, default: int = 0) -> int:
    """The first of `keys` whose value is a whole number (not a bool); `default` when none is: a
    per-layer list or a fraction is not read as a single size."""
    for key in keys:
        value = cfg.get(key)
        if isinstance(value, bool):
            continue
        if isinstance(value, int):
            return value
    return default


def recurrent_state_dtype(architectures: list, cfg: dict, model_dtype: str) -> str:
    """The dtype vLLM keeps a GDN / Mamba layer's recurrent state in on a GPU (serving.toml
    [[state_dtype]]): an architecture's config hook reads its config key or takes its default; "auto"
    is the conv state's dtype, the model's."""
    for rule in load_table("serving").get("state_dtype", []):
        if set(map(str, architectures)) & set(rule["architectures"]):
            wanted = str(cfg.get(rule["config_key"]) or rule["default"])
            return model_dtype if wanted == "auto" else wanted
    return model_dtype


# NemotronH's block kinds: the symbols of hybrid_override_pattern (M = Mamba2, * = attention, - = MLP, E = MoE)
# and the names newer exports list in layers_block_type / mtp_layers_block_type instead
NEMOTRON_BLOCKS = {"mamba": "M", "attention": "*", "mlp": "-", "moe": "E"}


def nemotron_pattern(cfg: dict, pattern_key: str, list_key: str) -> str:
    """A NemotronH stack as its pattern string, from the string or from the list of block names ('' if
    neither); a name the table does not know is kept as '?' (no kind roofline prices)."""
    pattern = cfg.get(pattern_key)
    if isinstance(pattern, str) and pattern:
        return pattern
    blocks = cfg.get(list_key)
    if isinstance(blocks, list) and blocks:
        return "".join(NEMOTRON_BLOCKS.get(str(b).lower(), "?") for b in blocks)
    return ""


def _layer_types(cfg: dict, num_layers: int) -> list[str]:
    """Per-layer kind: 'full_attention', 'sliding_attention', 'linear_attention', 'mamba',
    or 'mlp' (a layer with no token mixer, NemotronH '-' / 'E')."""
    types = cfg.get("layer_types")
    if isinstance(types, str):  # some exports store the list as a JSON string
        try:
            types = json.loads(types)
        except ValueError:
            types = None
    if isinstance(types, list) and len(types) >= num_layers:
        return [str(t) for t in types[:num_layers]]
    pattern = nemotron_pattern(cfg, "hybrid_override_pattern", "layers_block_type")
    if pattern:
        kinds = {"M": "mamba", "*": "full_attention", "-": "mlp", "E": "mlp"}
        return [kinds.get(ch, "mlp") for ch in pattern[:num_layers]]
    interval = config_int(cfg, "full_attention_interval")
    if interval > 0 and (cfg.get("linear_num_value_heads") or cfg.get("linear_key_head_dim")):
        # Qwen3-Next: every interval-th layer is full attention, the rest Gated DeltaNet
        return ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(num_layers)]
    if cfg.get("use_sliding_window") and cfg.get("sliding_window"):
        max_window_layers = config_int(cfg, "max_window_layers", default=num_layers)
        return ["sliding_attention" if i < max_window_layers else "full_attention" for i in range(num_layers)]
    if cfg.get("sliding_window") and cfg.get("model_type") in ("mistral", "mixtral"):
        return ["sliding_attention"] * num_layers
    return ["full_attention"] * num_layers


def shape_from_config(config: dict) -> ModelShape:
    if not isinstance(config, dict):
        raise RooflineError("config.json is not a JSON object")
    check_config_sizes(config)  # every source's config: sizes are numbers, and not absurd
    cfg = text_config(config)
    num_layers = config_int(cfg, "num_hidden_layers", "n_layer", "num_layers")
    hidden = config_int(cfg, "hidden_size", "n_embd", "d_model")
    if num_layers <= 0 or hidden <= 0:
        raise RooflineError("config.json has no num_hidden_layers / hidden_size: not a decoder LM config")
    heads = config_int(cfg, "num_attention_heads", "n_head", default=1)
    kv_heads = config_int(cfg, "num_key_value_heads", default=heads)
    head_dim = config_int(cfg, "head_dim", default=hidden // max(heads, 1))
    architectures = config.get("architectures") or cfg.get("architectures") or ["unknown"]
    dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or config.get("torch_dtype") or "bfloat16")
    shape = ModelShape(
        architecture=str(architectures[0]),
        model_type=str(config.get("model_type") or cfg.get("model_type") or "unknown"),
        num_layers=num_layers,
        hidden_size=hidden,
        vocab_size=config_int(cfg, "vocab_size"),
        dtype=dtype,
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", config.get("tie_word_embeddings", False))),
        num_experts=config_int(cfg, "num_experts", "num_local_experts", "n_routed_experts"),
        experts_per_token=config_int(cfg, "num_experts_per_tok", "experts_per_token", "top_k_experts", "moe_topk"),
        mtp_layers=config_int(cfg, "num_nextn_predict_layers", "mtp_num_hidden_layers"),
        state_dtype=recurrent_state_dtype(architectures, cfg, dtype),
        is_multimodal=cfg is not config,
    )
    if shape.num_experts:
        # Mixtral and gpt-oss name no MoE width of their own: their experts are the intermediate_size wide
        shape.expert_width = config_int(cfg, "moe_intermediate_size", "expert_intermediate_size", "intermediate_size")
    window = config_int(cfg, "sliding_window") or None
    mla = config_int(cfg, "kv_lora_rank")
    for layer, kind in enumerate(_layer_types(cfg, num_layers)):
        if kind in ("full_attention", "sliding_attention", "attention"):
            if mla:
                # DeepSeek MLA: vLLM caches the compressed latent + the rope key, one "head"
                shape.attention.append(AttentionLayer(layer, 1, mla + config_int(cfg, "qk_rope_head_dim"), 0, None))
                continue
            layer_kv, layer_dim = kv_heads, head_dim
            if kind == "full_attention" and cfg.get("global_head_dim"):
                # Gemma 4: global layers use their own head size, and their own KV-head count where K is V
                # (transformers' Gemma4TextConfig per_layer_config: num_global_key_value_heads applies when
                # attention_k_eq_v is true or absent)
                layer_dim = config_int(cfg, "global_head_dim", default=head_dim)
                if cfg.get("attention_k_eq_v", True):
                    layer_kv = config_int(cfg, "num_global_key_value_heads", default=kv_heads)
            # Gemma 4 "attention_k_eq_v": K and V are one projection but vLLM still caches both
            shape.attention.append(
                AttentionLayer(layer, layer_kv, layer_dim, layer_dim,
                               window if kind == "sliding_attention" else None)
            )
        elif kind == "linear_attention" and _is_mamba2(cfg) and not _is_gdn(cfg):
            # transformers 5 names every recurrent mixer "linear_attention" (configuration_utils.py
            # _LEGACY_LAYER_TYPE_REMAP: Granite 4.0-H's "mamba" is remapped to it): a Mamba2 config sizes its SSM
            shape.recurrent.append(_mamba_layer(cfg, layer, hidden))
        elif kind == "linear_attention":
            key_heads = config_int(cfg, "linear_num_key_heads")
            value_heads = config_int(cfg, "linear_num_value_heads", default=key_heads)
            key_dim = config_int(cfg, "linear_key_head_dim")
            value_dim = config_int(cfg, "linear_value_head_dim")
            conv_kernel = config_int(cfg, "linear_conv_kernel_dim", default=4)
            conv_dim = 2 * key_heads * key_dim + value_heads * value_dim
            shape.recurrent.append(RecurrentLayer(
                layer, "gdn", value_heads * key_dim * value_dim, conv_dim * (conv_kernel - 1)))
        elif kind == "mamba":
            shape.recurrent.append(_mamba_layer(cfg, layer, hidden))
    return shape


def _is_gdn(cfg: dict) -> bool:
    """A gated-delta-net config (Qwen3-Next, Qwen3.5): its linear-attention heads are named."""
    return bool(cfg.get("linear_num_value_heads") or cfg.get("linear_key_head_dim"))


def _is_mamba2(cfg: dict) -> bool:
    """A config that sizes a Mamba2 mixer (NemotronH's or Granite 4.0-H's spelling)."""
    return any(config_int(cfg, key) for key in ("mamba_num_heads", "mamba_n_heads", "ssm_state_size", "mamba_d_state"))


def _mamba_layer(cfg: dict, layer: int, hidden: int) -> RecurrentLayer:
    """A Mamba2 layer's state (heads x head dim x state size) and conv window ((kernel - 1) x (inner + 2 x groups x
    state)), as vLLM's MambaStateShapeCalculator.mamba2_state_shape sizes them. NemotronH spells the sizes
    mamba_num_heads / mamba_head_dim / ssm_state_size / n_groups / conv_kernel; Granite 4.0-H (and Bamba, Falcon-H1)
    mamba_n_heads / mamba_d_head / mamba_d_state / mamba_n_groups / mamba_d_conv (vLLM granitemoehybrid.py)."""
    heads = config_int(cfg, "mamba_num_heads", "mamba_n_heads")
    head_dim = config_int(cfg, "mamba_head_dim", "mamba_d_head")
    state = config_int(cfg, "ssm_state_size", "mamba_d_state", "state_size")
    groups = config_int(cfg, "n_groups", "mamba_n_groups", default=1)
    conv_kernel = config_int(cfg, "conv_kernel", "mamba_d_conv", default=4)
    inner = (heads * head_dim or config_int(cfg, "mamba_d_ssm")
             or config_int(cfg, "expand", "mamba_expand", default=2) * hidden)
    conv_dim = inner + 2 * groups * state
    return RecurrentLayer(layer, "mamba", (heads or 1) * (head_dim or inner) * state, conv_dim * (conv_kernel - 1))
