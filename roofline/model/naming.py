"""The base model a checkpoint was made from, by name (roofline/data/naming.toml)."""
from __future__ import annotations

from roofline.data import load_table


def repo_name(model_id: str) -> str:
    """"RedHatAI/Qwen3-8B-FP8-dynamic" -> "Qwen3-8B-FP8-dynamic"; "Qwen__Qwen3-8B" -> "Qwen3-8B"."""
    name = model_id.rstrip("/").rsplit("/", 1)[-1]
    separator = load_table("naming")["org_separator"]
    return name.rsplit(separator, 1)[-1] if separator in name else name


def base_model_name(model_id: str) -> str:
    """The repository name without its quantization suffixes."""
    table = load_table("naming")
    suffixes = sorted(table["quant_suffixes"], key=len, reverse=True)
    name = repo_name(model_id)
    changed = True
    while changed:
        changed = False
        for suffix in suffixes:
            cut = len(name) - len(suffix)
            if cut > 0 and name[cut:].lower() == suffix.lower() and name[cut - 1] in table["separators"]:
                name = name[:cut - 1]
                changed = True
                break
    return name
