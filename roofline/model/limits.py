"""Bounds on what a config.json may state (roofline/data/limits.toml), checked before a skeleton
is built: an absurd layer count, hidden size, expert count or vocabulary would otherwise make the
config path build for minutes, or forever. The refusal names the field, its value and the limit."""
from __future__ import annotations

from roofline.data import load_table
from roofline.errors import RooflineError


def _sections(config: dict) -> list[tuple[str, dict]]:
    out = [("", config)]
    for nested in ("text_config", "llm_config", "language_config"):
        inner = config.get(nested)
        if isinstance(inner, dict):
            out.append((f"{nested}.", inner))
    return out


def _value(where: str, key: str, value) -> int | float:
    if isinstance(value, list) and value:  # per-layer sizes (some architectures list them)
        return max(_value(where, key, v) for v in value)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:  # NaN
        raise RooflineError(f"config.json: {where}{key} = {value!r} is not a number")
    if value < 0:
        raise RooflineError(f"config.json: {where}{key} = {value!r} is negative")
    return value


def check_config_sizes(config: dict) -> None:
    """Raise RooflineError on the first size beyond its limit (or not a number)."""
    table = load_table("limits")
    largest_seen: dict[str, float] = {}
    for where, section in _sections(config):
        for field, rule in table["field"].items():
            for key in (field, *rule["aliases"]):
                if key not in section or section[key] is None:
                    continue
                value = _value(where, key, section[key])
                if value > rule["limit"]:
                    raise RooflineError(f"config.json: {where}{key} = {value:g} is implausibly large (limit "
                                        f"{rule['limit']:g}; the largest public model has {rule['largest']}): "
                                        f"refusing to build it")
                largest_seen[field] = max(largest_seen.get(field, 0), value)
    for name, rule in table["product"].items():
        if name == "parameters":
            value = _parameters(largest_seen)
        else:
            value = 1
            for field in rule["fields"]:
                value *= largest_seen.get(field, 1)
        if value > rule["limit"]:
            raise RooflineError(f"config.json: {name.replace('_', ' ')} ~ {value:.3g} is implausibly large (limit "
                                f"{rule['limit']:.3g}; the largest public model has {rule['largest']}): "
                                f"refusing to build it")


def _parameters(seen: dict[str, float]) -> float:
    layers, hidden = seen.get("num_hidden_layers", 1), seen.get("hidden_size", 1)
    dense = 4 * hidden + 3 * seen.get("intermediate_size", 0)
    moe = 3 * seen.get("num_experts", 0) * seen.get("moe_intermediate_size", seen.get("intermediate_size", 0))
    return layers * hidden * (dense + moe) + 2 * seen.get("vocab_size", 0) * hidden


def max_positions(config: dict | None) -> int | None:
    """The longest sequence the model's config allows (vLLM's derived max_model_len), or None when
    the config states none."""
    if not config:
        return None
    inner = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    for key in ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length"):
        for section in (inner, config):
            value = section.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return None


def check_max_model_len(config: dict | None, tokens: int, option: str = "--max-model-len") -> int:
    """`tokens` when the model allows sequences that long; else the one line vLLM refuses it with
    (ModelConfig.get_and_verify_max_len)."""
    derived = max_positions(config)
    if derived is not None and tokens > derived:
        raise RooflineError(f"{option} {tokens} is greater than the derived max_model_len "
                            f"(max_position_embeddings={derived} in the model's config.json), as vLLM refuses it")
    return tokens


def default_context(config: dict | None, preferred: int) -> int:
    """A command's default context: `preferred`, or the model's limit where that is shorter."""
    derived = max_positions(config)
    return min(preferred, derived) if derived else preferred
