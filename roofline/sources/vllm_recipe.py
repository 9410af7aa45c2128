"""A recipe in vLLM's own recipes format (github.com/vllm-project/recipes, `models/<org>/<model>.yaml`: a
`model` mapping, `variants`, `features`, hardware and strategy overrides) read into the one-node serve line
its command builder makes, layer by layer as the builder's resolveCommand adds them: the model's base
arguments, the variant's (and the variant's for this GPU), the strategy's with its parallel size, the
recipe's strategy overrides, the hardware overrides (the strategy's for this generation replacing the
recipe's and the variant's), the features switched on (one mode of a single-select feature), the last of
a repeated flag winning. The choices -- variant, hardware profile, strategy, features -- default as the
builder's do and are given with --set; each is said in the recipe's `defaults`. The table is
roofline/data/vllm_recipes.toml."""
from __future__ import annotations

import shlex

import msgspec

from roofline.data import load_table
from roofline.errors import RooflineError
from roofline.schema import checked
from roofline.untrusted import printable

Word = str | int | float | bool
Keyed = dict[str, object]


class HardwareOverride(msgspec.Struct, forbid_unknown_fields=False):
    extra_args: list[Word] = []
    extra_env: dict[str, Word | None] = {}
    args: list[Word] | None = None  # a feature's override replaces its args


class Variant(msgspec.Struct, forbid_unknown_fields=False):
    model_id: str | None = None
    precision: str | None = None
    vram_minimum_gb: float | None = None
    tp: int | dict[str, int] | None = None
    extra_args: list[Word] = []
    extra_env: dict[str, Word | None] = {}
    hardware_overrides: dict[str, HardwareOverride] = {}
    default_modes: dict[str, str] = {}
    supported_hardware: list[str] = []
    precision_hardware: dict[str, str] | None = None


class Mode(msgspec.Struct, forbid_unknown_fields=False):
    args: list[Word] = []
    hardware_overrides: dict[str, HardwareOverride] = {}
    hardware: dict[str, str] = {}
    variants: list[str] = []


class Feature(msgspec.Struct, forbid_unknown_fields=False):
    args: list[Word] = []
    hardware_overrides: dict[str, HardwareOverride] = {}
    modes: dict[str, Mode] | None = None
    default_mode: str | None = None
    strategies: list[str] = []


class StrategyOverride(msgspec.Struct, forbid_unknown_fields=False):
    tp: int | dict[str, int] | None = None
    extra_args: list[Word] = []
    vllm_args: list[Word] = []
    env: dict[str, Word | None] = {}
    extra_env: dict[str, Word | None] = {}
    hardware_overrides: dict[str, HardwareOverride] = {}


class ModelSection(msgspec.Struct, forbid_unknown_fields=False):
    model_id: str
    base_args: list[Word] = []
    base_env: dict[str, Word | None] = {}


class VllmRecipeFile(msgspec.Struct, forbid_unknown_fields=False):
    model: ModelSection
    meta: dict[str, object] = {}
    variants: dict[str, Variant] = {}
    features: dict[str, Feature] = {}
    opt_in_features: list[str] = []
    hardware_opt_in_features: dict[str, list[str]] = {}
    compatible_strategies: list[str] = []
    default_strategy: str | None = None
    strategy_overrides: dict[str, StrategyOverride] = {}
    hardware_overrides: dict[str, HardwareOverride] = {}


# the builder's precision constraints (PRECISION_HARDWARE_CONSTRAINTS): NVFP4 on NVIDIA Blackwell only
PRECISION_GENERATION = {"nvfp4": "blackwell", "fp4": "blackwell"}
CHOICES = ("variant", "hardware", "strategy", "features")


def is_vllm_recipe(data: dict) -> bool:
    return isinstance(data.get("model"), dict) or "variants" in data


def _text(value) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _keyed(table: dict, profile_id: str, profile: dict):
    """The builder's hardware-keyed lookup: exact profile > generation > brand > default."""
    for key in (profile_id, profile["generation"], profile["brand"].lower(), "default"):
        if key in table:
            return table[key]
    return None


def _by_generation(overrides: dict, profile: dict):
    """A generation's override, else the brand-wide `nvidia:` one on an NVIDIA GPU."""
    found = overrides.get(profile["generation"])
    if found is None and profile["brand"] == "NVIDIA":
        found = overrides.get("nvidia")
    return found


def dedupe(args: list[str]) -> list[str]:
    """The builder's last-wins dedupe: a flag with its value is one unit; the last of a flag is kept."""
    units = []
    i = 0
    while i < len(args):
        word = args[i]
        if word.startswith("-"):
            if i + 1 < len(args) and not args[i + 1].startswith("-"):
                units.append((word, [word, args[i + 1]]))
                i += 2
                continue
            units.append((word, [word]))
        else:
            units.append((None, [word]))
        i += 1
    seen, keep = set(), []
    for flag, words in reversed(units):
        if flag is None or flag not in seen:
            keep.append(words)
            if flag is not None:
                seen.add(flag)
    return [w for words in reversed(keep) for w in words]


def read_vllm_recipe(data: dict, path: str, overrides: dict[str, str], hardware_key: str | None,
                     extra_args: list[str] | None = None):
    """The Recipe (roofline.sources.recipe) a vLLM recipe makes for one node of `hardware_key`'s profile."""
    from .recipe import Recipe

    recipe = checked(data, VllmRecipeFile, path)
    table = load_table("vllm_recipes")
    unknown = sorted(set(overrides) - set(CHOICES) - set(recipe.features))
    if unknown:
        raise RooflineError(f"{path}: --set {unknown[0]}: a vLLM recipe takes --set " + ", ".join(
            f"{c}=..." for c in CHOICES) + (" or FEATURE=on|off|MODE (features: " + ", ".join(recipe.features) + ")" if recipe.features else ""))
    profiles = table["profile"]
    by_hardware = {p.get("hardware"): name for name, p in profiles.items() if p.get("hardware")}
    profile_id = overrides.get("hardware") or by_hardware.get(hardware_key)
    if profile_id is None or profile_id not in profiles:
        raise RooflineError(f"{path}: name the recipe's hardware profile with --set hardware=ID (one of "
                            f"{', '.join(profiles)})" + (f"; {printable(profile_id, 40)!r} is not one" if profile_id else ""))
    profile = profiles[profile_id]
    if (recipe.meta.get("hardware") or {}).get(profile_id) == "unsupported":
        raise RooflineError(f"{path}: the recipe marks {profile_id} unsupported")

    variant_key = overrides.get("variant") or ("default" if "default" in recipe.variants else
                                               next(iter(recipe.variants), "default"))
    if recipe.variants and variant_key not in recipe.variants:
        raise RooflineError(f"{path}: no variant {printable(variant_key, 40)!r} (it has {', '.join(recipe.variants)})")
    variant = recipe.variants.get(variant_key) or Variant()
    need = (variant.precision_hardware or {}).get("generation") or PRECISION_GENERATION.get(variant.precision or "")
    if need and profile["generation"] != need:
        raise RooflineError(f"{path}: variant {variant_key} ({variant.precision}) runs on {need} GPUs; {profile_id} "
                            f"is {profile['generation']}")
    if variant.supported_hardware and profile_id not in variant.supported_hardware:
        raise RooflineError(f"{path}: variant {variant_key} runs on {', '.join(variant.supported_hardware)} only")

    compatible = recipe.compatible_strategies or ["single_node_tp"]
    strategy_name = overrides.get("strategy") or (
        recipe.default_strategy if recipe.default_strategy in compatible else
        "single_node_tp" if "single_node_tp" in compatible else compatible[0])
    if strategy_name not in table["strategy"]:
        raise RooflineError(f"{path}: strategy {printable(strategy_name, 40)!r} starts more than one server (give "
                            f"one node's serve line); one-node strategies: {', '.join(table['strategy'])}")
    if strategy_name not in compatible:
        raise RooflineError(f"{path}: the recipe does not offer {strategy_name} (it offers {', '.join(compatible)})")
    strategy = table["strategy"][strategy_name]
    so = recipe.strategy_overrides.get(strategy_name) or StrategyOverride()

    gpus = profile["gpu_count"]
    if strategy_name != "single_node_tp":
        size = gpus
    else:  # resolveSingleNodeTp: the variant's tp, the strategy override's, else fit by memory
        declared = next((t for t in (variant.tp, so.tp) if t is not None), None)
        if isinstance(declared, dict):
            declared = _keyed(declared, profile_id, profile)
        if isinstance(declared, int) and declared > 0:
            size = min(declared, gpus)
        else:
            per_gpu = profile["vram_gb"] / gpus
            size = 1 if variant.vram_minimum_gb and variant.vram_minimum_gb <= per_gpu else gpus

    features_on = _features(recipe, overrides, profile_id, strategy_name, path)
    args: list = list(recipe.model.base_args) + list(variant.extra_args)
    exact = variant.hardware_overrides.get(profile_id)
    if exact:
        args += exact.extra_args
    args += list(strategy["vllm_args"]) + [strategy["parallel_flag"], str(size)]
    args += list(so.extra_args) + list(so.vllm_args)
    strategy_gen = _by_generation(so.hardware_overrides, profile)
    layers = [strategy_gen] if strategy_gen else [_by_generation(recipe.hardware_overrides, profile),
                                                  _by_generation(variant.hardware_overrides, profile)]
    layers.append(so.hardware_overrides.get(profile_id))
    for layer in layers:
        if layer:
            args += layer.extra_args
    chosen_modes = {}
    for name in features_on:
        feature = recipe.features[name]
        if feature.modes:
            asked = overrides.get(name)
            mode_name = _mode(feature, name, variant, variant_key, profile_id, profile,
                              None if asked in (None, "on", "true", "1") else asked, path)
            if mode_name is None:
                continue
            chosen_modes[name] = mode_name
            mode = feature.modes[mode_name]
            override = _keyed(mode.hardware_overrides, profile_id, profile) if mode.hardware_overrides else None
            args += override.args if override is not None and override.args is not None else mode.args
            continue
        override = _by_generation(feature.hardware_overrides, profile)
        args += override.args if override is not None and override.args is not None else feature.args
    args += list(extra_args or [])
    model_id = variant.model_id or recipe.model.model_id

    env: dict[str, str] = {}
    for layer in (recipe.model.base_env, variant.extra_env, exact.extra_env if exact else {}, so.env, so.extra_env):
        env.update({k: _text(v) for k, v in layer.items() if v is not None})
    for layer in layers:
        if layer:
            env.update({k: _text(v) for k, v in layer.extra_env.items() if v is not None})

    words = ["vllm", "serve", model_id] + dedupe([_text(a) for a in args])
    chosen = {"variant": variant_key, "hardware": profile_id, "strategy": strategy_name,
              "features": ",".join(features_on) or "none"} | chosen_modes
    return Recipe(path=path, name=str((recipe.meta or {}).get("title") or model_id), model=model_id,
                  serve_line=shlex.join(words), env=env, defaults={}, chosen=chosen)


def _features(recipe: VllmRecipeFile, overrides: dict[str, str], profile_id: str, strategy: str,
              path: str) -> list[str]:
    """The features switched on: --set features=a,b (or none), else all but the recipe's opt-in ones;
    a FEATURE=MODE setting switches its feature on; those the strategy does not allow are left out."""
    if "features" in overrides:
        wanted = [f for f in overrides["features"].split(",") if f and f != "none"]
        missing = [f for f in wanted if f not in recipe.features]
        if missing:
            raise RooflineError(f"{path}: no feature {printable(missing[0], 40)!r} (it has "
                                f"{', '.join(recipe.features) or 'none'})")
    else:
        opt_in = set(recipe.opt_in_features) | set(recipe.hardware_opt_in_features.get(profile_id, []))
        wanted = [f for f in recipe.features if f not in opt_in]
    for name in (f for f in recipe.features if f in overrides):
        value = overrides[name].lower()
        if not recipe.features[name].modes and value not in ("on", "off", "true", "false", "1", "0"):
            raise RooflineError(f"{path}: {name} is on or off (--set {name}=on|off): it has no modes")
        if value in ("off", "false", "0"):
            wanted = [f for f in wanted if f != name]
        elif name not in wanted:
            wanted.append(name)
    return [f for f in wanted if not recipe.features[f].strategies or strategy in recipe.features[f].strategies]


def _mode(feature: Feature, name: str, variant: Variant, variant_key: str, profile_id: str, profile: dict,
          asked: str | None, path: str) -> str | None:
    """resolveModeKey: the asked mode, the variant's default, the feature's, else the first allowed here."""
    allowed = [key for key, mode in feature.modes.items()
               if (not mode.variants or variant_key in mode.variants)
               and mode.hardware.get(profile["generation"]) != "unsupported"
               and mode.hardware.get(profile_id) != "unsupported"]
    if asked is not None and asked not in allowed:
        raise RooflineError(f"{path}: {name}={printable(asked, 40)}: not a mode here (modes: "
                            f"{', '.join(allowed) or 'none'})")
    for candidate in (asked, variant.default_modes.get(name), feature.default_mode):
        if candidate and candidate in allowed:
            return candidate
    return allowed[0] if allowed else None
