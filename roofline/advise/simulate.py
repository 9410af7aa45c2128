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
from roofline.model.grouping import module_and_expert
from roofline.model.inventory import Inventory, Module, QuantSummary, Tensor
from roofline.model.quant_config import LINEAR_ROLES
from roofline.model.roles import ROLES
from roofline.model.storage import stored_tensors
from roofline.predict.step import StepConfig, price_step
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
    suffix: str = ""  # the made checkpoint's name after its base: Qwen3-8B-<suffix>


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
    return Producer(entry["method"], entry["tool"], entry.get("suffix", ""))


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


@dataclass(frozen=True)
class StackPlan:
    """A plain module's weights as records to requantize: the routed experts of a layer are
    hundreds of weights of one shape, simulated as one record per kind
    (`mlp.experts.gate_proj.weight` for `mlp.experts.{0..E-1}.gate_proj.weight`) whose stored
    tensors carry the expert count as a leading dimension, so the bytes are exact and the work is
    per kind of weight, not per expert. Computed once per base module, reused by every format."""

    records: tuple[tuple[Tensor, int], ...]  # (representative 2-D weight, how many it stands for)
    # fused 3-D expert weights [E, out, in] as they are, with their records: a producer whose
    # layout keeps the stack fused (gpt-oss MXFP4) stores them whole
    fused: tuple[tuple[Tensor, Tensor, int], ...]
    kept: tuple[Tensor, ...]  # tensors that are not weights (norms, biases): stored as they are
    params: int

def _representative(tensor: Tensor) -> tuple[str, Tensor, int]:
    """(record name, one 2-D weight of the kind, how many weights the tensor holds)."""
    if len(tensor.shape) == 3:  # fused [E, out, in] (transformers 5 / fused checkpoints)
        experts, rows, cols = tensor.shape
        prefix, _, proj = tensor.name.rpartition(".")
        record = f"{prefix}.{proj}.weight"
        return record, Tensor(record, tensor.dtype, (rows, cols), tensor.nbytes // max(experts, 1)), experts
    module, expert = module_and_expert(tensor.name)
    if expert is None:
        return tensor.name, tensor, 1
    record = f"{module}.{tensor.name[len(module) + 1:].partition('.')[2]}"
    return record, Tensor(record, tensor.dtype, tensor.shape, tensor.nbytes), 1


def stack_plan(module: Module) -> StackPlan:
    stacks: dict[tuple, list] = {}  # (record, dtype, shape) -> [representative, count]
    fused, kept, params = [], [], 0
    for tensor in module.tensors:
        if not _is_matrix(tensor):
            kept.append(tensor)
            continue
        count = 1
        for d in tensor.shape:
            count *= d
        params += count
        record, representative, copies = _representative(tensor)
        if len(tensor.shape) == 3:
            fused.append((tensor, representative, copies))
            continue
        stack = stacks.setdefault((record, representative.dtype, representative.shape), [representative, 0])
        stack[1] += copies
    return StackPlan(tuple((r, n) for r, n in stacks.values()), tuple(fused), tuple(kept), params)


def _stacked(stored: list[Tensor], count: int) -> list[Tensor]:
    if count == 1:
        return stored
    return [Tensor(t.name, t.dtype, (count, *t.shape), t.nbytes * count) for t in stored]


def _requantize(module: Module, plan: StackPlan, fmt: str, method: str,
                model_type: str) -> tuple[list[Tensor], int, str | None]:
    """(tensors, params, note) of a module stored in `fmt`."""
    if module.format in PLAIN:
        group_size = get_format(fmt).group_size or 128
        tensors = list(plan.kept)
        records = list(plan.records)
        for whole, representative, copies in plan.fused:
            if fmt == "mxfp4" and method == "mxfp4":  # gpt-oss's own layout stores the stack whole
                tensors += stored_tensors(whole, fmt, method, model_type=model_type, group_size=group_size)
            else:
                records.append((representative, copies))
        for representative, copies in records:
            stored = stored_tensors(representative, fmt, method, model_type=model_type, group_size=group_size)
            tensors += _stacked(stored, copies)
        return tensors, plan.params or module.params, None
    nbytes = round(module.params * get_format(fmt).bytes_per_weight)
    tensor = Tensor(f"{module.name}.simulated_{fmt}", "U8", (nbytes,), nbytes)
    return [tensor], module.params, (f"stored {module.format} in the base checkpoint: {fmt} bytes estimated "
                                     f"from {module.params} params x bytes_per_weight")


def simulate(base: Inventory, target: str, recipe: Recipe, plans: dict[str, StackPlan] | None = None) -> Inventory:
    """The inventory the base model would have after quantizing to `target` under `recipe`.
    `plans`: stack plans by module name, shared between the simulations of one base."""
    plans = {} if plans is None else plans
    get_format(target)  # unknown format: one clear error
    made_by = producer(target)
    model_type = base.shape.model_type
    modules: list[Module] = []
    notes: list[str] = []
    changed = {}
    for module in base.modules:
        fmt = format_for(recipe, module.role, target) if module.role in LINEAR_ROLES else None
        if fmt is None or module.tied_to or fmt == module.format:
            modules.append(module)
            continue
        plan = plans.get(module.name)
        if plan is None:
            plan = plans[module.name] = stack_plan(module)
        if not plan.records and not plan.fused:  # no weight matrix to requantize
            modules.append(module)
            continue
        method = producer(fmt).method
        tensors, params, note = _requantize(module, plan, fmt, method, model_type)
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
    step: object = None  # roofline.predict.step.StepTime of one stream, vLLM's default backend


def simulate_all(base: Inventory, formats: list[str], recipe_names: list[str], hardware,
                 config: StepConfig) -> list[SimulatedFormat]:
    """Each format under each recipe, with its bytes and its step of one stream priced by the step
    model at `config` (the plan's own scenario and topology; vLLM's default backend of the format)."""
    out = []
    plans: dict[str, StackPlan] = {}
    priced: dict[tuple, tuple] = {}
    config = replace(config, batch=1, backend=None)
    scenario = config.scenario(1)
    for recipe_name in recipe_names:
        recipe = get_recipe(recipe_name)
        for fmt in formats:
            inventory = simulate(base, fmt, recipe, plans)
            # recipes that leave the same modules in the same formats (BF16 under every recipe, a dense
            # model under default and modelopt) are one simulation: priced once
            signature = tuple(m.format for m in inventory.modules)
            if signature in priced:
                _, traffic, step = priced[signature]
            else:
                traffic = compute_traffic(inventory, scenario)
                step = price_step(inventory, hardware, config)
                priced[signature] = (inventory, traffic, step)
            out.append(SimulatedFormat(fmt, recipe_name, inventory, inventory.weight_bytes, traffic.bytes_per_token,
                                       step.ceiling_tok_s, step.tok_s, traffic, step))
    return out
