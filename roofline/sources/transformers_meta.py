"""Build a checkpoint's skeleton from config.json with transformers on the meta device.

The model class is built on the meta device (no memory, no weights, no network), so every
parameter has the shape the real model has. transformers 5 renames and fuses some weights at
load time (per-expert `experts.7.gate_proj.weight` -> fused 3-D `experts.gate_up_proj`;
NemotronH `backbone.` -> `model.`; Mixtral `block_sparse_moe.experts.*.w1` ->
`mlp.experts.gate_up_proj`). Its own save path (`transformers.core_model_loading.
revert_weight_conversion`, what `save_pretrained` runs) undoes that, so the names here are
checkpoint names: the names that ignore lists, vLLM's loader and the header audit all see. Tied
weights (`lm_head` sharing `embed_tokens`) are dropped, as save_pretrained drops them.

This is the only module of the config path that imports torch and transformers; it is imported
only when a skeleton has to be built.
"""
from __future__ import annotations

from roofline.errors import RooflineError
from roofline.model.architecture import text_config
from roofline.model.formats import TORCH_DTYPES, dtype_nbytes
from roofline.model.grouping import module_and_expert
from roofline.model.inventory import Tensor
from roofline.model.roles import role_of
from roofline.model.skeleton import Skeleton, add_mtp

from .skeleton_cache import buildable_config


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
    clean = buildable_config(config)
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
    add_mtp(config, skeleton)
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
