"""Source: config.json (+ hf_quant_config.json) alone, no weights.

The module skeleton comes from transformers itself: the model class is built on the meta
device (no memory, no weights, no network), so every parameter has the shape the real model
has. Two steps turn that into the tensors a checkpoint on disk holds:

1. Names. transformers 5 renames and fuses some weights at load time (per-expert
   `experts.7.gate_proj.weight` -> fused 3-D `experts.gate_up_proj`; NemotronH `backbone.` ->
   `model.`; Mixtral `block_sparse_moe.experts.*.w1` -> `mlp.experts.gate_up_proj`). Its own
   save path (`transformers.core_model_loading.revert_weight_conversion`, what
   `save_pretrained` runs) undoes that, so the names here are checkpoint names: the names that
   ignore lists, vLLM's loader and the header audit all see. Tied weights (`lm_head` sharing
   `embed_tokens`) are dropped, as save_pretrained drops them.
2. Formats. The quantization config (roofline.quant_config, shared with the header audit)
   says which module is stored in which format; `stored_tensors` writes the tensors that
   format's producer stores, scales included (NVFP4 packed weight + E4M3 group scales + fp32
   global scale, FP8 + per-channel or 128x128 block scales, gpt-oss MXFP4 blocks + E8M0
   scales, AWQ / GPTQ qweight + qzeros + scales, ...).

The tensor list then goes through roofline.assemble.inventory_from_tensors, exactly like a
header audit: grouping, roles, tied lm_head and the config cross-check are shared.

Limits, said where they apply: layers the transformers class does not build (MTP / next-token
heads of Qwen3-Next, Qwen3.5 and DeepSeek-V3) are modelled from one decoder layer of the same
model (see `_add_mtp`); small tensors that a producer adds outside the weight format
(KV-cache k_scale / v_scale) are not counted.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

from .architecture import shape_from_config, text_config
from .assemble import inventory_from_tensors
from .errors import RooflineError
from .formats import TORCH_DTYPES, dtype_nbytes
from .grouping import module_and_expert
from .inventory import Inventory, Tensor
from .quant_config import LINEAR_ROLES, QuantConfig, parse_quant_config
from .roles import classify
from .source_local import optional_json, read_json

CONFIG = "config.json"
HF_QUANT_CONFIG = "hf_quant_config.json"


# --------------------------------------------------------------------------- entry points

def load_config_only(directory: str, trust_remote_code: bool = False, model_id: str | None = None) -> Inventory:
    if not os.path.isdir(directory):
        raise RooflineError(f"{directory}: not a directory")
    config = read_json(os.path.join(directory, CONFIG), f"{directory}/{CONFIG}")
    hf_quant = optional_json(os.path.join(directory, HF_QUANT_CONFIG))
    return inventory_from_config(model_id or os.path.basename(os.path.abspath(directory)), config, hf_quant,
                                 trust_remote_code=trust_remote_code,
                                 remote_code_source=directory if trust_remote_code else None)


def load_config_only_hub(repo_id: str, revision: str | None = None, trust_remote_code: bool = False) -> Inventory:
    """config.json (and hf_quant_config.json when the repository has one) through
    huggingface_hub; nothing else is downloaded unless --trust-remote-code asks for the
    repository's own modelling code."""
    from .source_hub import _download

    config_path = _download(repo_id, CONFIG, revision)
    quant_path = _download(repo_id, HF_QUANT_CONFIG, revision, optional=True)
    config = read_json(config_path, f"{repo_id}/{CONFIG}")
    hf_quant = read_json(quant_path, f"{repo_id}/{HF_QUANT_CONFIG}") if quant_path else None
    inventory = inventory_from_config(repo_id, config, hf_quant, trust_remote_code=trust_remote_code,
                                      remote_code_source=repo_id if trust_remote_code else None,
                                      revision=revision)
    inventory.bytes_read = os.path.getsize(config_path) + (os.path.getsize(quant_path) if quant_path else 0)
    return inventory


def inventory_from_config(model_id: str, config: dict, hf_quant_config: dict | None = None, *,
                          trust_remote_code: bool = False, remote_code_source: str | None = None,
                          revision: str | None = None) -> Inventory:
    quant, _ = parse_quant_config(config, hf_quant_config)
    skeleton = checkpoint_tensors(config, trust_remote_code=trust_remote_code,
                                  remote_code_source=remote_code_source, revision=revision)
    tensors = apply_quant_config(skeleton, config, quant)
    inventory = inventory_from_tensors(model_id, "config", config, tensors, hf_quant_config)
    inventory.checkpoint_bytes = sum(t.nbytes for t in tensors)
    return inventory


# --------------------------------------------------------------------------- skeleton

def _strip_quantization(config: dict) -> dict:
    """The config without quantization_config: roofline applies it itself; transformers
    would otherwise try to load a quantizer (and some, like MXFP4, need a GPU)."""
    out = {k: v for k, v in config.items() if k not in ("quantization_config", "auto_map")}
    inner = out.get("text_config")
    if isinstance(inner, dict) and "quantization_config" in inner:
        out["text_config"] = {k: v for k, v in inner.items() if k != "quantization_config"}
    return out


def _model_dtype(config: dict):
    import torch

    name = str(text_config(config).get("torch_dtype") or text_config(config).get("dtype")
               or config.get("torch_dtype") or config.get("dtype") or "bfloat16").replace("torch.", "")
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise RooflineError(f"config.json: unsupported dtype {name!r}")
    return dtype


def _transformers_model_class(config_obj, config: dict, trust_remote_code: bool):
    """The class the checkpoint names (architectures[0]) when transformers has it natively,
    else the auto class for causal LM / image-text-to-text."""
    import transformers
    from transformers import AutoModelForCausalLM

    for arch in config.get("architectures") or ():
        cls = getattr(transformers, str(arch), None)
        if isinstance(cls, type) and hasattr(cls, "_from_config"):
            return cls._from_config
    if trust_remote_code:
        return lambda cfg, **kw: AutoModelForCausalLM.from_config(cfg, trust_remote_code=True, **kw)
    for auto in ("AutoModelForCausalLM", "AutoModelForImageTextToText"):
        auto_cls = getattr(transformers, auto, None)
        mapping = getattr(auto_cls, "_model_mapping", None)
        if auto_cls is not None and mapping is not None and type(config_obj) in mapping:
            return auto_cls.from_config
    return None


def _build_meta_model(config: dict, trust_remote_code: bool, remote_code_source: str | None, revision: str | None):
    try:
        import torch
        import transformers
        from transformers import AutoConfig
    except ImportError as exc:  # transformers is what builds the skeleton
        raise RooflineError(f"the config-only audit needs transformers and torch ({exc.name} is missing)") from None

    model_type = str(config.get("model_type") or "")
    arch = str((config.get("architectures") or ["?"])[0])
    clean = _strip_quantization(config)
    try:
        if trust_remote_code and remote_code_source:
            config_obj = AutoConfig.from_pretrained(remote_code_source, trust_remote_code=True, revision=revision)
            if hasattr(config_obj, "quantization_config"):
                delattr(config_obj, "quantization_config")
        else:
            config_obj = AutoConfig.for_model(**clean)
    except (KeyError, ValueError):
        remote = " It ships its own code (auto_map): pass --trust-remote-code to run it." if config.get("auto_map") else ""
        raise RooflineError(f"architecture {arch} (model_type {model_type!r}) is not in the installed transformers "
                            f"{transformers.__version__}.{remote}") from None
    except Exception as exc:  # noqa: BLE001 - a config the class rejects is bad input
        raise RooflineError(f"config.json for {arch}: transformers rejects it ({exc.__class__.__name__}: "
                            f"{str(exc).splitlines()[0] if str(exc) else ''})") from None
    build = _transformers_model_class(config_obj, config, trust_remote_code)
    if build is None:
        raise RooflineError(f"architecture {arch} (model_type {model_type!r}) has no causal-LM class in the installed "
                            f"transformers {transformers.__version__}")
    dtype = _model_dtype(config)
    try:
        with torch.device("meta"):
            return build(config_obj, dtype=dtype)
    except Exception as exc:  # noqa: BLE001
        raise RooflineError(f"transformers cannot build {arch} from this config.json ({exc.__class__.__name__}: "
                            f"{str(exc).splitlines()[0] if str(exc) else ''})") from None


@dataclass
class Skeleton:
    """The unquantized tensors a checkpoint of this config stores (checkpoint names), and
    which of them are linear-layer weights: only those can be quantized (a quantization
    config's "Linear" target reaches nn.Linear modules and routed experts, never embeddings,
    norms or conv1d)."""

    tensors: list[Tensor]
    linear_weights: set[str] = field(default_factory=set)


def checkpoint_tensors(config: dict, *, trust_remote_code: bool = False, remote_code_source: str | None = None,
                       revision: str | None = None) -> Skeleton:
    """The unquantized tensors a checkpoint of this config stores, with checkpoint names."""
    model = _build_meta_model(config, trust_remote_code, remote_code_source, revision)
    state_before = model.state_dict()  # parameters + persistent buffers, as save_pretrained sees them
    state = _to_checkpoint_names(model, state_before)
    tied = _tied_names(model, config)
    linear = _linear_weight_names(model, state_before)
    tensors, linear_weights = [], set()
    for name, value in state.items():
        if name in tied:
            continue
        dtype = TORCH_DTYPES.get(str(value.dtype).replace("torch.", ""))
        if dtype is None:
            raise RooflineError(f"{name}: unsupported dtype {value.dtype}")
        shape = tuple(int(d) for d in value.shape)
        tensors.append(Tensor(name, dtype, shape, dtype_nbytes(dtype, shape)))
        if name in linear or _fused_expert(name, shape) or _expert_weight(name, shape) or _router_weight(name, shape):
            linear_weights.add(name)
    skeleton = Skeleton(tensors, linear_weights)
    _add_mtp(config, skeleton)
    return skeleton


def _to_checkpoint_names(model, state: dict) -> dict:
    try:
        from transformers.core_model_loading import revert_weight_conversion
    except ImportError:  # transformers 4.x stores what it builds
        return state
    return revert_weight_conversion(model, state)


def _linear_weight_names(model, state: dict) -> set[str]:
    """Checkpoint names of the weights of the model's nn.Linear modules."""
    import torch

    names = {f"{name}.weight" for name, module in model.named_modules() if isinstance(module, torch.nn.Linear)}
    subset = {name: value for name, value in state.items() if name in names}
    return set(_to_checkpoint_names(model, subset)) if subset else set()


def _fused_expert(name: str, shape: tuple[int, ...]) -> bool:
    last = name.rpartition(".")[2]
    return len(shape) == 3 and ".experts." in f"{name}." and last in ("gate_up_proj", "down_proj", "up_proj", "gate_proj")


def _router_weight(name: str, shape: tuple[int, ...]) -> bool:
    """A MoE router / shared-expert gate weight: transformers 5 implements some routers as a
    bare Parameter (Qwen3MoeTopKRouter), vLLM as a linear layer (GateLinear): whether it is
    quantized is the quantization config's and vLLM's call (quant_config.vllm_unquantized_roles)."""
    from .roles import role_of

    return len(shape) == 2 and name.endswith(".weight") and role_of(name[: -len(".weight")]) in (
        "router", "shared_expert_gate")


def _expert_weight(name: str, shape: tuple[int, ...]) -> bool:
    """A per-expert weight as revert_weight_conversion unfuses it (experts.7.down_proj.weight)."""
    module, expert = module_and_expert(name)
    return expert is not None and len(shape) == 2 and name.endswith(".weight")


def _tied_names(model, config: dict) -> set[str]:
    """Names save_pretrained leaves out because they share another tensor (tied lm_head)."""
    if not text_config(config).get("tie_word_embeddings", config.get("tie_word_embeddings", False)):
        return set()
    keys = getattr(model, "_tied_weights_keys", None) or {}
    names = set(keys) if isinstance(keys, (dict, list, set, tuple)) else set()
    return names or {"lm_head.weight"}


# --------------------------------------------------------------------------- MTP

def _add_mtp(config: dict, skeleton: Skeleton) -> None:
    """MTP / next-token-prediction layers that checkpoints ship but transformers does not build.

    Qwen3-Next / Qwen3.5: `mtp.layers.{i}.*` is one full-attention decoder layer (same MoE),
    plus `mtp.fc` [H, 2H] and the `mtp.pre_fc_norm_*` / `mtp.norm` norms (vLLM qwen3_next_mtp.py).
    DeepSeek-V3: `model.layers.{L+i}.*` is one MoE decoder layer plus `eh_proj` [H, 2H],
    `enorm`, `hnorm` and `shared_head.norm` (vLLM deepseek_mtp.py); the shared embedding and
    head are not stored again. The decoder layer is copied from the model's last layer of the
    same kind, so its bytes are right to the extent the layers are alike.
    """
    cfg = text_config(config)
    model_type = str(cfg.get("model_type") or config.get("model_type") or "")
    layers = int(cfg.get("mtp_num_hidden_layers") or cfg.get("num_nextn_predict_layers") or 0)
    if layers <= 0:
        return
    tensors = skeleton.tensors
    hidden = int(cfg.get("hidden_size") or 0)
    num_layers = int(cfg.get("num_hidden_layers") or 0)
    dtype = next((t.dtype for t in tensors if t.name.endswith("norm.weight")), "BF16")
    shape = shape_from_config(config)
    by_layer: dict[int, list[Tensor]] = {}
    prefix = None
    for t in tensors:
        role, layer = classify(t.name, num_layers)
        if layer is not None and role not in ("vision", "audio"):
            by_layer.setdefault(layer, []).append(t)
            if prefix is None:
                prefix = t.name[: t.name.index(f"layers.{layer}.")]
    if prefix is None:
        return
    attention_layers = [a.layer for a in shape.attention]
    source = max(attention_layers) if attention_layers else max(by_layer)
    template = by_layer.get(source, [])
    marker = f"{prefix}layers.{source}."

    def vec(name: str, n: int) -> Tensor:
        return Tensor(name, dtype, (n,), dtype_nbytes(dtype, (n,)))

    def mat(name: str, out: int, inp: int) -> Tensor:
        return Tensor(name, dtype, (out, inp), dtype_nbytes(dtype, (out, inp)))

    linear = skeleton.linear_weights
    if model_type.startswith("deepseek"):
        for i in range(layers):
            base = f"{prefix}layers.{num_layers + i}."
            tensors += _copy_layer(template, marker, base, linear)
            tensors += [mat(base + "eh_proj.weight", hidden, 2 * hidden), vec(base + "enorm.weight", hidden),
                        vec(base + "hnorm.weight", hidden), vec(base + "shared_head.norm.weight", hidden)]
            linear.add(base + "eh_proj.weight")
    elif model_type.startswith("qwen3_next") or model_type.startswith("qwen3_5"):
        for i in range(layers):
            tensors += _copy_layer(template, marker, f"mtp.layers.{i}.", linear)
        tensors += [mat("mtp.fc.weight", hidden, 2 * hidden), vec("mtp.pre_fc_norm_embedding.weight", hidden),
                    vec("mtp.pre_fc_norm_hidden.weight", hidden), vec("mtp.norm.weight", hidden)]
        linear.add("mtp.fc.weight")


def _copy_layer(template: list[Tensor], marker: str, base: str, linear: set[str]) -> list[Tensor]:
    out = []
    for t in template:
        name = base + t.name[len(marker):]
        if t.name in linear:
            linear.add(name)
        out.append(Tensor(name, t.dtype, t.shape, t.nbytes))
    return out


# --------------------------------------------------------------------------- formats

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
    from .formats import get_format

    return get_format(fmt).group_size or 128


def _per_expert(tensor: Tensor) -> list[Tensor]:
    """Split a fused 3-D expert weight [E, out, in] into per-expert 2-D weights, named as the
    per-expert checkpoints name them (`experts.{e}.gate_up_proj.weight`)."""
    prefix, _, proj = tensor.name.rpartition(".")
    experts, rows, cols = tensor.shape
    return [Tensor(f"{prefix}.{e}.{proj}.weight", tensor.dtype, (rows, cols), dtype_nbytes(tensor.dtype, (rows, cols)))
            for e in range(experts)]


def _t(name: str, dtype: str, shape: tuple[int, ...]) -> Tensor:
    shape = tuple(int(d) for d in shape)
    return Tensor(name, dtype, shape, dtype_nbytes(dtype, shape))


def stored_tensors(weight: Tensor, fmt: str, producer: str, *, model_type: str = "", group_size: int = 128) -> list[Tensor]:
    """The tensors a producer stores for one weight in format `fmt`, scales included.

    `weight` is the unquantized `....weight` [out, in] (or a fused 3-D expert weight). Layouts
    as detect.py documents them; `producer` is a QuantConfig.method (compressed-tensors,
    modelopt, fp8, mxfp4, awq, gptq).
    """
    if len(weight.shape) == 3:
        if fmt == "mxfp4" and producer == "mxfp4":
            # gpt-oss: `experts.gate_up_proj` is [E, in, out] in transformers; the checkpoint
            # stores `gate_up_proj_blocks` U8 [E, out, in/32, 16] + `_scales` U8 [E, out, in/32]
            experts, inp, outp = weight.shape
            blocks = math.ceil(inp / 32)
            return [_t(f"{weight.name}_blocks", "U8", (experts, outp, blocks, 16)),
                    _t(f"{weight.name}_scales", "U8", (experts, outp, blocks))]
        return [t for w in _per_expert(weight) for t in stored_tensors(w, fmt, producer, model_type=model_type,
                                                                        group_size=group_size)]
    if fmt in ("bf16", "fp16", "fp32"):
        dtype = {"bf16": "BF16", "fp16": "F16", "fp32": "F32"}[fmt]
        return [_t(weight.name, dtype, weight.shape)]
    out, inp = weight.shape
    base = weight.name[: -len(".weight")] if weight.name.endswith(".weight") else weight.name
    model_dtype = weight.dtype if weight.dtype in ("BF16", "F16") else "BF16"
    if fmt in ("nvfp4-w4a4", "nvfp4-w4a16"):
        packed, scales = (out, math.ceil(inp / 2)), (out, math.ceil(inp / 16))
        if producer == "modelopt":
            tensors = [_t(f"{base}.weight", "U8", packed), _t(f"{base}.weight_scale", "F8_E4M3", scales),
                       _t(f"{base}.weight_scale_2", "F32", ())]
            return tensors + ([_t(f"{base}.input_scale", "F32", ())] if fmt == "nvfp4-w4a4" else [])
        tensors = [_t(f"{base}.weight_packed", "U8", packed), _t(f"{base}.weight_scale", "F8_E4M3", scales),
                   _t(f"{base}.weight_global_scale", "F32", (1,))]
        return tensors + ([_t(f"{base}.input_global_scale", "F32", (1,))] if fmt == "nvfp4-w4a4" else [])
    if fmt == "mxfp4":
        return [_t(f"{base}.weight_packed", "U8", (out, math.ceil(inp / 2))),
                _t(f"{base}.weight_scale", "U8", (out, math.ceil(inp / 32)))]
    if fmt == "fp8":
        if producer == "modelopt":
            return [_t(f"{base}.weight", "F8_E4M3", (out, inp)), _t(f"{base}.weight_scale", "F32", ()),
                    _t(f"{base}.input_scale", "F32", ())]
        # compressed-tensors FP8_DYNAMIC: one scale per output channel, in the model dtype
        return [_t(f"{base}.weight", "F8_E4M3", (out, inp)), _t(f"{base}.weight_scale", model_dtype, (out, 1))]
    if fmt == "fp8-block":
        blocks = (math.ceil(out / 128), math.ceil(inp / 128))
        if producer == "compressed-tensors":
            return [_t(f"{base}.weight", "F8_E4M3", (out, inp)), _t(f"{base}.weight_scale", model_dtype, blocks)]
        return [_t(f"{base}.weight", "F8_E4M3", (out, inp)), _t(f"{base}.weight_scale_inv", "F32", blocks)]
    if fmt == "int8":
        return [_t(f"{base}.weight", "I8", (out, inp)), _t(f"{base}.weight_scale", model_dtype, (out, 1))]
    if fmt == "int4":  # compressed-tensors pack-quantized, symmetric
        return [_t(f"{base}.weight_packed", "I32", (out, math.ceil(inp / 8))),
                _t(f"{base}.weight_scale", model_dtype, (out, math.ceil(inp / group_size))),
                _t(f"{base}.weight_shape", "I64", (2,))]
    if fmt == "int4-awq":
        groups = math.ceil(inp / group_size)
        return [_t(f"{base}.qweight", "I32", (inp, math.ceil(out / 8))),
                _t(f"{base}.qzeros", "I32", (groups, math.ceil(out / 8))),
                _t(f"{base}.scales", "F16", (groups, out))]
    if fmt == "int4-gptq":
        groups = math.ceil(inp / group_size)
        return [_t(f"{base}.qweight", "I32", (math.ceil(inp / 8), out)),
                _t(f"{base}.qzeros", "I32", (groups, math.ceil(out / 8))),
                _t(f"{base}.scales", "F16", (groups, out)), _t(f"{base}.g_idx", "I32", (inp,))]
    raise RooflineError(f"no storage layout for format {fmt!r}")
