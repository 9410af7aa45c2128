"""What a checkpoint's quantization config says about each module (pure, no I/O).

One parser per producer, each returning a QuantConfig whose `expected(name, role)` gives the
format the config promises for a module, or None when the config leaves it unquantized. The
header audit cross-checks this against the tensors; the config-only audit uses it directly.

Matching rules, checked against the producers' own code:
- compressed-tensors `ignore` / `targets`: an exact module name, a `re:` regex matched from
  the start of the name (re.match), or a class name ("Linear"); compressed-tensors
  `utils/match.py` is_match / match_name.
- ModelOpt `exclude_modules` (and `ignore` when mirrored into config.json): fnmatch wildcards;
  vLLM modelopt.py is_layer_excluded.
- transformers-style `modules_to_not_convert` (block FP8, MXFP4, AWQ): a module is skipped
  when an entry equals it, is one of its dotted prefixes or suffixes, or matches as fnmatch.
"""
from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field

from roofline.errors import RooflineError
from roofline.schema import checked

from .quant_schema import SCHEMAS

from .inventory import QuantSummary
from .roles import NOT_READ_IN_TEXT_DECODE, roles_where

# roles that are linear layers in the checkpoint (what "targets: [Linear]" reaches): roles.toml
LINEAR_ROLES = roles_where(linear=True)

SUPPORTED = ("compressed-tensors", "modelopt", "fp8", "mxfp4", "awq", "gptq")

# Roles vLLM builds unquantized whatever the quantization config says (roles.toml
# vllm_unquantized). Architectures that pass their quant_config to the router are the exception.
# Checked against vLLM 0.32 by tests/test_vllm_oracle.py.
VLLM_UNQUANTIZED_ROLES = roles_where(vllm_unquantized=True)
VLLM_QUANTIZED_ROUTER_ARCHITECTURES = frozenset({"Qwen3MoeForCausalLM"})  # qwen3_moe.py: GateLinear(quant_config=...)


def vllm_unquantized_roles(config: dict) -> frozenset:
    architectures = set(config.get("architectures") or ())
    if architectures & VLLM_QUANTIZED_ROUTER_ARCHITECTURES:
        return VLLM_UNQUANTIZED_ROLES - {"router"}
    return VLLM_UNQUANTIZED_ROLES


@dataclass(frozen=True)
class Scheme:
    """A quantization scheme as the config states it."""

    format: str  # key of data/formats.toml
    weight_bits: int
    activation_bits: int  # 16: weight-only


@dataclass
class QuantConfig:
    method: str
    algo: str = ""
    kv_cache: str = ""
    config_file: str = "config.json"
    auto_kv_cache_dtype: str = ""  # what vLLM runs for --kv-cache-dtype auto (vllm_auto_kv_dtype)
    # ordered (matcher, scheme) pairs; first match wins
    groups: list[tuple["Matcher", Scheme]] = field(default_factory=list)
    ignore: "Matcher | None" = None
    default: Scheme | None = None  # scheme for every linear module not ignored (None: only groups)
    # roles that the producer quantizes at all (e.g. gpt-oss MXFP4: routed experts only)
    quantizable_roles: frozenset = LINEAR_ROLES
    # roles the engine (vLLM) keeps unquantized for this architecture, whatever the config says
    unquantized_roles: frozenset = frozenset()

    def expected(self, name: str, role: str) -> Scheme | None:
        if role not in self.quantizable_roles or role in self.unquantized_roles:
            return None
        if self.ignore is not None and self.ignore.matches(name):
            return None
        for matcher, scheme in self.groups:
            if matcher.matches(name, role):
                return scheme
        return self.default

    def summary(self) -> QuantSummary:
        return QuantSummary(method=self.method, algo=self.algo, kv_cache=self.kv_cache,
                            config_file=self.config_file, auto_kv_cache_dtype=self.auto_kv_cache_dtype)


# --------------------------------------------------------------------------- matchers

@dataclass
class Matcher:
    exact: frozenset = frozenset()
    regexes: tuple = ()
    globs: tuple = ()
    classes: frozenset = frozenset()  # "Linear": any linear role
    dotted: bool = False  # transformers-style: entries also match as dotted prefix / suffix

    def matches(self, name: str, role: str | None = None) -> bool:
        if name in self.exact:
            return True
        if self.classes and role in LINEAR_ROLES and role not in NOT_READ_IN_TEXT_DECODE:
            return True
        if self.dotted and self.exact:
            parts = name.split(".")
            for i in range(1, len(parts)):
                if ".".join(parts[:i]) in self.exact or ".".join(parts[i:]) in self.exact:
                    return True
        if any(rx.match(name) for rx in self.regexes):
            return True
        return any(fnmatch.fnmatchcase(name, g) for g in self.globs)


def _matcher(entries, *, regex_prefix=True, globs=False, dotted=False) -> Matcher:
    exact, regexes, patterns, classes = set(), [], [], set()
    for entry in entries or ():
        if not isinstance(entry, str):
            raise RooflineError(f"quantization config: ignore/target entry {entry!r} is not a string")
        if regex_prefix and entry.startswith("re:"):
            try:
                regexes.append(re.compile(entry[3:]))
            except re.error as exc:
                raise RooflineError(f"quantization config: bad regex {entry!r}: {exc}") from None
        elif entry in ("Linear", "nn.Linear", "torch.nn.Linear"):
            classes.add("Linear")
        elif globs and any(ch in entry for ch in "*?["):
            patterns.append(entry)
        else:
            exact.add(entry)
    return Matcher(frozenset(exact), tuple(regexes), tuple(patterns), frozenset(classes), dotted)


# --------------------------------------------------------------------------- producers

def _ct_scheme(group: dict, fmt_hint: str) -> Scheme:
    weights = group.get("weights") or {}
    acts = group.get("input_activations") or None
    bits = int(weights.get("num_bits", 16))
    wtype = weights.get("type", "int")
    a_bits = int(acts.get("num_bits", 16)) if isinstance(acts, dict) else 16
    group_size = weights.get("group_size") or 0
    if wtype == "float" and bits == 4:
        if group_size == 32 or "mxfp4" in fmt_hint:
            return Scheme("mxfp4", 4, a_bits)
        return Scheme("nvfp4-w4a4" if a_bits == 4 else "nvfp4-w4a16", 4, a_bits)
    if wtype == "float" and bits == 8:
        block = weights.get("block_structure")
        strategy = weights.get("strategy")
        return Scheme("fp8-block" if (block or strategy == "block") else "fp8", 8, a_bits)
    if wtype == "int" and bits == 8:
        return Scheme("int8", 8, a_bits)
    if wtype == "int" and bits == 4:
        return Scheme("int4", 4, a_bits)
    if bits >= 16:
        return Scheme("bf16", 16, 16)
    raise RooflineError(f"quantization config: unsupported compressed-tensors scheme "
                        f"({wtype}, {bits} bits, group {group_size})")


def _compressed_tensors(q: dict) -> QuantConfig:
    fmt = str(q.get("format", ""))
    kv = q.get("kv_cache_scheme")
    cfg = QuantConfig("compressed-tensors", algo=fmt, kv_cache=_kv_label(kv))
    for name, group in (q.get("config_groups") or {}).items():
        if not isinstance(group, dict):
            raise RooflineError(f"quantization config: config_groups.{name} is not an object")
        scheme = _ct_scheme(group, str(group.get("format") or fmt))
        cfg.groups.append((_matcher(group.get("targets")), scheme))
    cfg.ignore = _matcher(q.get("ignore"))
    return cfg


_MODELOPT_ALGOS = {
    "NVFP4": Scheme("nvfp4-w4a4", 4, 4),
    "W4A16_NVFP4": Scheme("nvfp4-w4a16", 4, 16),
    "NVFP4_AWQ": Scheme("nvfp4-w4a4", 4, 4),
    "FP8": Scheme("fp8", 8, 8),
    "FP8_PER_CHANNEL_PER_TOKEN": Scheme("fp8", 8, 8),
    "FP8_PB_WO": Scheme("fp8-block", 8, 16),
    "W4A8_AWQ": Scheme("int4-awq", 4, 8),
    "W4A16_AWQ": Scheme("int4-awq", 4, 16),
    "INT8_SQ": Scheme("int8", 8, 8),
    "MXFP4": Scheme("mxfp4", 4, 16),
}


def _modelopt_scheme(algo: str) -> Scheme:
    scheme = _MODELOPT_ALGOS.get(str(algo).upper())
    if scheme is None:
        raise RooflineError(f"unknown ModelOpt quant_algo {algo!r}; known: {', '.join(sorted(_MODELOPT_ALGOS))}")
    return scheme


def _modelopt(q: dict, config_file: str) -> QuantConfig:
    q = q.get("quantization", q)  # hf_quant_config.json nests under "quantization"
    algo = str(q.get("quant_algo") or "")
    cfg = QuantConfig("modelopt", algo=algo, kv_cache=str(q.get("kv_cache_quant_algo") or _kv_label(q.get("kv_cache_scheme"))),
                      config_file=config_file)
    excludes = list(q.get("exclude_modules") or []) + list(q.get("ignore") or [])
    cfg.ignore = _matcher(excludes, regex_prefix=False, globs=True)
    if algo.upper() == "MIXED_PRECISION":
        layers = q.get("quantized_layers") or {}
        if not isinstance(layers, dict):
            raise RooflineError("ModelOpt MIXED_PRECISION: quantized_layers is not an object")
        by_scheme: dict[Scheme, list[str]] = {}
        for name, spec in layers.items():
            scheme = _modelopt_scheme((spec or {}).get("quant_algo", ""))
            by_scheme.setdefault(scheme, []).append(name)
        for scheme, names in by_scheme.items():
            # a quantized_layers entry names a module or a fused parent ("...mlp.experts")
            cfg.groups.append((_matcher(names, regex_prefix=False, dotted=True), scheme))
        cfg.default = None  # only the listed layers are quantized
    else:
        cfg.default = _modelopt_scheme(algo)
    return cfg


def _not_convert(q: dict) -> Matcher:
    entries = q.get("modules_to_not_convert") or q.get("ignored_layers") or []
    return _matcher(entries, regex_prefix=False, globs=True, dotted=True)


def _fp8(q: dict) -> QuantConfig:
    block = q.get("weight_block_size")
    scheme = Scheme("fp8-block" if block else "fp8", 8, 8)
    return QuantConfig("fp8", algo=f"fp8 block {block}" if block else "fp8", default=scheme, ignore=_not_convert(q))


def _mxfp4(q: dict) -> QuantConfig:
    # gpt-oss: only the routed experts are MXFP4 (transformers mxfp4 integration and vLLM
    # Mxfp4Config quantize FusedMoE only; attention, router, embeddings stay BF16)
    return QuantConfig("mxfp4", algo="mxfp4", default=Scheme("mxfp4", 4, 16), ignore=_not_convert(q),
                       quantizable_roles=frozenset({"moe_experts"}))


def _awq_gptq(q: dict, method: str) -> QuantConfig:
    bits = int(q.get("bits", q.get("w_bit", 4)))
    if bits != 4:
        raise RooflineError(f"{method.upper()} with {bits} bits is not supported (4-bit only)")
    roles = LINEAR_ROLES - {"lm_head"}  # AutoAWQ / GPTQ leave lm_head unquantized
    if method == "gptq" and q.get("lm_head"):
        roles = LINEAR_ROLES
    return QuantConfig(method, algo=f"{method} {bits}-bit g{q.get('group_size', q.get('q_group_size', 128))}",
                       default=Scheme(f"int4-{method}", 4, 16), ignore=_not_convert(q),
                       quantizable_roles=frozenset(roles))


def _kv_label(kv) -> str:
    if isinstance(kv, dict) and kv.get("num_bits") == 8:
        return "FP8" if kv.get("type") == "float" else "INT8"
    return ""


def parse_quant_config(config: dict, hf_quant_config: dict | None = None) -> tuple[QuantConfig | None, list[str]]:
    """The quantization config vLLM would use, and sentences about conflicts between files.

    vLLM reads `quantization_config` from config.json first and falls back to
    hf_quant_config.json (vllm/model_executor/model_loader/weight_utils.py get_quant_config),
    so config.json wins here too; a disagreement between the two is reported, not hidden.
    """
    from .architecture import text_config  # wrapper configs nest it

    notes: list[str] = []
    q = config.get("quantization_config") or text_config(config).get("quantization_config")
    primary = None
    if isinstance(q, dict) and q:
        primary = _parse_one(q, "config.json")
    if hf_quant_config:
        secondary = _parse_one(hf_quant_config, "hf_quant_config.json")
        if primary is None:
            primary = secondary
        else:
            notes.extend(_compare(primary, secondary))
    if primary is not None:
        primary.unquantized_roles = vllm_unquantized_roles(config)
        primary.auto_kv_cache_dtype = vllm_auto_kv_dtype(config, hf_quant_config)
    return primary, notes


def _parse_one(q: dict, config_file: str) -> QuantConfig:
    if not isinstance(q, dict):
        raise RooflineError(f"{config_file}: quantization config is not an object")
    method = str(q.get("quant_method") or "").lower()
    if not method and ("quantization" in q or (q.get("producer") or {}).get("name") == "modelopt"):
        method = "modelopt"
    family = "modelopt" if method.startswith("modelopt") else method
    if family in SCHEMAS:  # the fields read below, checked: a wrong type is one line naming the key
        checked(q, SCHEMAS[family], f"{config_file}: quantization config")
    if method == "compressed-tensors":
        cfg = _compressed_tensors(q)
    elif method == "modelopt" or method.startswith("modelopt"):
        cfg = _modelopt(q, config_file)
    elif method == "fp8":
        cfg = _fp8(q)
    elif method == "mxfp4":
        cfg = _mxfp4(q)
    elif method in ("awq", "gptq"):
        cfg = _awq_gptq(q, method)
    else:
        raise RooflineError(f"unknown quantization method {method or '(none)'!r} in {config_file}; "
                            f"supported: {', '.join(SUPPORTED)}")
    cfg.config_file = config_file
    return cfg


def _compare(primary: QuantConfig, secondary: QuantConfig) -> list[str]:
    """Where config.json and hf_quant_config.json say different things about the same layer."""
    a = {s.format for _, s in primary.groups} | ({primary.default.format} if primary.default else set())
    b = {s.format for _, s in secondary.groups} | ({secondary.default.format} if secondary.default else set())
    if a != b:
        return [f"config.json quantization_config (used by vLLM) says {', '.join(sorted(a))}; "
                f"hf_quant_config.json says {', '.join(sorted(b))}"]
    return []


def without_quantization(config: dict) -> dict:
    """config.json without its quantization_config (at the top and in text_config): the config
    of the unquantized model it was made from."""
    out = {k: v for k, v in config.items() if k != "quantization_config"}
    inner = out.get("text_config")
    if isinstance(inner, dict) and "quantization_config" in inner:
        out["text_config"] = {k: v for k, v in inner.items() if k != "quantization_config"}
    return out


# --------------------------------------------------------------------------- KV cache dtype "auto"

# vLLM's names for the KV dtype a ModelOpt checkpoint states (vllm/utils/torch_utils.py
# MODELOPT_TO_VLLM_KV_CACHE_DTYPE_MAP, vLLM 0.32)
MODELOPT_KV_DTYPES = {"fp8": "fp8_e4m3", "nvfp4": "nvfp4"}
# ModelOpt quant_algo values vLLM's config conversion maps to its quant_method
# (vllm/transformers_utils/model_arch_config_convertor.py, vLLM 0.32)
MODELOPT_METHODS = {"FP8": "modelopt", "FP8_PER_CHANNEL_PER_TOKEN": "modelopt", "FP8_PB_WO": "modelopt",
                    "NVFP4": "modelopt_fp4"}


def vllm_auto_kv_dtype(config: dict, hf_quant_config: dict | None = None) -> str:
    """What vLLM 0.32 runs for --kv-cache-dtype auto, from the checkpoint, in its own order: the
    quantization config (config.json's, else hf_quant_config.json) with quant_method set as vLLM's
    config conversion sets it; a ModelOpt KV scheme (resolve_kv_cache_dtype_string), else a
    compressed-tensors kv_cache_scheme (fp8: its Attention layer's rule for "auto"). "" when the
    checkpoint states none: the model's dtype."""
    quant = config.get("quantization_config") if isinstance(config, dict) else None
    if not isinstance(quant, dict):
        quant = hf_quant_config if isinstance(hf_quant_config, dict) else None
    if quant is None:
        return ""
    inner = quant.get("quantization")
    method = str(quant.get("quant_method") or "")
    producer = quant.get("producer") if isinstance(quant.get("producer"), dict) else {}
    legacy = isinstance(inner, dict) and "modelopt_quant_config" in inner
    if (producer.get("name") == "modelopt" or legacy) and isinstance(inner, dict) and inner.get("quant_algo") is not None:
        method = MODELOPT_METHODS.get(str(inner["quant_algo"]).upper(), method)
    method = method.lower().replace("compressed_tensors", "compressed-tensors")
    if method.startswith("modelopt"):
        inner = inner if isinstance(inner, dict) else quant
        algo = (inner.get("kv_cache_scheme") or quant.get("kv_cache_scheme") or inner.get("kv_cache_quant_algo")
                or quant.get("kv_cache_quant_algo"))
        if isinstance(algo, dict):
            if algo.get("dynamic") is False and algo.get("num_bits") == 8 and algo.get("type") == "float":
                return MODELOPT_KV_DTYPES["fp8"]
            if algo.get("num_bits") == 4 and algo.get("type") == "float":
                return MODELOPT_KV_DTYPES["nvfp4"]
            return ""  # vLLM warns and falls back to auto
        if isinstance(algo, str):
            return MODELOPT_KV_DTYPES.get(algo.lower(), "")
        return ""
    if method == "compressed-tensors" and quant.get("kv_cache_scheme") is not None:
        return "fp8"
    return ""
