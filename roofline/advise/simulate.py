"""Simulate a quantization format on a base model's inventory (pure, no I/O).

A recipe (roofline/data/recipes.toml) says, per role, whether a module takes the target
format, a fixed format, or stays as stored. Modules that change get the tensors the format's
producer would store (roofline.model.storage.stored_tensors: scales included), so the
simulated inventory is the same kind of object a header audit of the quantized checkpoint
would give, and traffic / ceiling run on it unchanged.

A module the base checkpoint already stores quantized (an FP8 release planned to NVFP4) has no
BF16 weight shape left to re-pack; its bytes come from its logical parameter count times the
format's bytes_per_weight (formats.toml), and the result says so.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace

from roofline.data import load_table
from roofline.errors import RooflineError
from roofline.model.formats import PLAIN_FORMATS, get_format
from roofline.model.inventory import Inventory, Module, QuantSummary, Tensor
from roofline.model.quant_config import LINEAR_ROLES
from roofline.model.roles import ROLES
from roofline.model.storage import stored_tensors
from roofline.predict.ceiling import compute_ceiling
from roofline.predict.traffic import compute_traffic

PLAIN = set(PLAIN_FORMATS.values())
MATRIX_SUFFIXES = ("weight", "gate_up_proj", "down_proj", "up_proj", "gate_proj")


@dataclass(frozen=True)
class Recipe:
    key: str
    label: str
    description: str
    source: str
    default: str
    roles: dict = field(default_factory=dict)

    def choice(self, role: str) -> str:
        return self.roles.get(role, self.default)


@dataclass(frozen=True)
class Producer:
    method: str
    tool: str


@functools.lru_cache(maxsize=1)
def recipes() -> dict[str, Recipe]:
    table = load_table("recipes")
    out = {}
    for key, entry in table.items():
        if key == "producer":
            continue
        roles = {k: v for k, v in entry.items() if k in ROLES}
        unknown = set(entry) - set(roles) - {"label", "description", "source", "default"}
        if unknown:
            raise RooflineError(f"recipes.toml [{key}]: unknown keys {sorted(unknown)}")
        out[key] = Recipe(key, entry["label"], entry["description"], entry["source"], entry["default"], roles)
    return out


def get_recipe(name: str) -> Recipe:
    table = recipes()
    if name not in table:
        raise RooflineError(f"unknown recipe {name!r}; known: {', '.join(table)}")
    return table[name]


def producer(fmt: str) -> Producer:
    entry = load_table("recipes").get("producer", {}).get(fmt)
    if entry is None:
        raise RooflineError(f"no producer known for format {fmt!r} (recipes.toml [producer])")
    return Producer(entry["method"], entry["tool"])


def format_for(recipe: Recipe, role: str, target: str) -> str | None:
    """The format a module of `role` gets under `recipe` with target format `target`; None
    keeps the module as stored."""
    choice = recipe.choice(role)
    if choice == "keep":
        return None
    if choice == "target":
        return target
    fixed = get_format(choice)
    # a fixed format only applies when it is wider than the target (FP8 attention next to
    # NVFP4 experts); an FP8 or BF16 plan has nothing to fall back to
    return choice if fixed.weights > get_format(target).weights else target


def _is_matrix(tensor: Tensor) -> bool:
    return len(tensor.shape) >= 2 and tensor.name.rpartition(".")[2] in MATRIX_SUFFIXES


def _requantize(module: Module, fmt: str, method: str, model_type: str) -> tuple[list[Tensor], int, str | None]:
    """(tensors, params, note) of a module stored in `fmt`."""
    if module.format in PLAIN:
        tensors, params = [], 0
        for tensor in module.tensors:
            if _is_matrix(tensor):
                count = 1
                for d in tensor.shape:
                    count *= d
                params += count
                tensors.extend(stored_tensors(tensor, fmt, method, model_type=model_type,
                                              group_size=get_format(fmt).group_size or 128))
            else:
                tensors.append(tensor)
        return tensors, params or module.params, None
    nbytes = round(module.params * get_format(fmt).bytes_per_weight)
    tensor = Tensor(f"{module.name}.simulated_{fmt}", "U8", (nbytes,), nbytes)
    return [tensor], module.params, (f"stored {module.format} in the base checkpoint: {fmt} bytes estimated "
                                     f"from {module.params} params x bytes_per_weight")


def simulate(base: Inventory, target: str, recipe: Recipe) -> Inventory:
    """The inventory the base model would have after quantizing to `target` under `recipe`."""
    get_format(target)  # unknown format: one clear error
    made_by = producer(target)
    model_type = base.shape.model_type
    modules: list[Module] = []
    notes: list[str] = []
    changed = {}
    for module in base.modules:
        fmt = format_for(recipe, module.role, target) if module.role in LINEAR_ROLES else None
        if fmt is None or module.tied_to or fmt == module.format or not any(_is_matrix(t) for t in module.tensors):
            modules.append(module)
            continue
        method = producer(fmt).method
        tensors, params, note = _requantize(module, fmt, method, model_type)
        if note:
            notes.append(note)
        changed[module.name] = fmt
        modules.append(replace(module, format=fmt, quant_method=method if fmt not in PLAIN else "none",
                               params=params, tensors=tensors, kernel=None, notes=list(module.notes)))
    # a tied lm_head follows its embedding, which no recipe quantizes
    label = f"{get_format(target).label}, recipe {recipe.key}"
    simulated = Inventory(model_id=base.model_id, source=base.source, config=base.config, shape=base.shape,
                          modules=modules,
                          quant=QuantSummary(method=made_by.method if target not in PLAIN else "none",
                                             algo=label, kv_cache=base.quant.kv_cache, config_file="simulated"),
                          disagreements=sorted(set(notes)))
    return simulated


@dataclass
class SimulatedFormat:
    format: str
    recipe: str
    inventory: Inventory
    weight_bytes: int
    bytes_per_token: float
    ceiling_tok_s: float
    expected_tok_s: float
    traffic: object = None
    ceiling: object = None


def simulate_all(base: Inventory, formats: list[str], recipe_names: list[str], scenario, hardware) -> list[SimulatedFormat]:
    out = []
    for recipe_name in recipe_names:
        recipe = get_recipe(recipe_name)
        for fmt in formats:
            inventory = simulate(base, fmt, recipe)
            traffic = compute_traffic(inventory, scenario)
            ceiling = compute_ceiling(traffic, hardware)
            out.append(SimulatedFormat(fmt, recipe_name, inventory, inventory.weight_bytes, traffic.bytes_per_token,
                                       ceiling.ceiling_tok_s, ceiling.expected_tok_s, traffic, ceiling))
    return out
