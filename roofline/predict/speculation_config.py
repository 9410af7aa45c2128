"""--speculative-config checked field by field as vLLM 0.32's SpeculativeConfig checks it (pure).

The fields, their types, bounds and choices are a table (data/vllm_args.toml [speculative]); this module
reads it once and checks a user's JSON object against it: an unknown key is refused (vLLM's config has
extra='forbid'), a value of the wrong type or out of its Field's bounds is refused naming the field and the
bound, as pydantic states it. What survives is returned as {field: value}."""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from roofline.data import load_table
from roofline.errors import RooflineError


@dataclass(frozen=True)
class Field:
    name: str
    type: str  # bool | int | float | str | choice | list | object | internal
    nullable: bool = False
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    choices: tuple[str, ...] = ()
    item: str = ""
    type_note: str = ""


@functools.lru_cache(maxsize=1)
def speculative_fields() -> dict[str, Field]:
    out = {}
    for entry in load_table("vllm_args")["speculative"]["field"]:
        entry = dict(entry)
        entry["choices"] = tuple(entry.get("choices", ()))
        out[entry["name"]] = Field(**entry)
    return out


def _number(value, integer: bool) -> bool:
    if isinstance(value, bool):
        return False
    if integer:
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer() and abs(value) < 2 ** 53)
    return isinstance(value, (int, float)) and math.isfinite(value)


def _checked(field: Field, value, where: str):
    name = f"{where}: {field.name}"
    if value is None:
        if field.nullable:
            return None
        raise RooflineError(f"{name}: Input should be a valid {field.type}, not null")
    kind = field.type
    if kind == "internal":
        raise RooflineError(f"{name}: set by vLLM itself, not taken from --speculative-config")
    if kind == "bool":
        if not isinstance(value, bool):
            raise RooflineError(f"{name}: Input should be a valid boolean")
        return value
    if kind in ("int", "float"):
        if not _number(value, kind == "int"):
            raise RooflineError(f"{name}: Input should be a valid {'integer' if kind == 'int' else 'number'}")
        value = int(value) if kind == "int" else float(value)
        if abs(value) > 1e15:
            raise RooflineError(f"{name}: {value:g} is larger than any value vLLM takes")
        for bound, ok, words in (("ge", lambda b: value >= b, "greater than or equal to"),
                                 ("gt", lambda b: value > b, "greater than"),
                                 ("le", lambda b: value <= b, "less than or equal to"),
                                 ("lt", lambda b: value < b, "less than")):
            limit = getattr(field, bound)
            if limit is not None and not ok(limit):
                raise RooflineError(f"{name}: Input should be {words} {limit:g} (got {value:g})")
        return value
    if kind == "str":
        if not isinstance(value, str) or len(value) > 4096:
            raise RooflineError(f"{name}: Input should be a valid string")
        return value
    if kind == "choice":
        if not isinstance(value, str) or value not in field.choices:
            shown = ", ".join(field.choices[:12]) + (", ..." if len(field.choices) > 12 else "")
            raise RooflineError(f"{name}: Input should be one of {shown} (got {str(value)[:40]!r})")
        return value
    if kind == "list":
        if not isinstance(value, list) or len(value) > 1024:
            raise RooflineError(f"{name}: Input should be a valid list")
        if field.item == "float" and not all(_number(v, False) for v in value):
            raise RooflineError(f"{name}: Input should be a list of numbers")
        if field.item == "int_triple" and not all(isinstance(v, list) and len(v) == 3 and
                                                  all(_number(x, True) for x in v) for v in value):
            raise RooflineError(f"{name}: Input should be a list of [int, int, int]")
        return value
    if kind == "object":
        if not isinstance(value, dict):
            raise RooflineError(f"{name}: Input should be a {field.type_note or 'JSON object'}")
        return value
    raise RooflineError(f"vllm_args.toml: [speculative] {field.name} has unknown type {kind!r}")


def checked_fields(value: dict, where: str = "--speculative-config") -> dict:
    """{field: value} of a --speculative-config object, every field known to vLLM and within its bounds."""
    fields = speculative_fields()
    out = {}
    for key, item in value.items():
        field = fields.get(key)
        if field is None:
            raise RooflineError(f"{where}: {str(key)[:60]!r}: Extra inputs are not permitted (vLLM's "
                                "SpeculativeConfig has no such field)")
        out[key] = _checked(field, item, where)
    return {k: v for k, v in out.items() if v is not None}
