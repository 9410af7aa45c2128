"""What vLLM's "Model loading took X GiB" counts beyond the checkpoint's tensors (pure): the experts' kernel layout,
the caching allocator's blocks and the rotary embeddings' cos/sin caches.

- Layout. Some MoE kernels re-lay the weights out at load (vLLM's process_weights_after_loading) into shapes the
  kernel reads: triton_kernels' MXFP4 experts on Hopper swizzle the block scales into tiles whose rows and scale
  groups are padded and cast the experts' biases to float32 (vllm/model_executor/layers/fused_moe/oracle/mxfp4.py
  convert_gpt_oss_weight_to_mxfp4_moe_kernel_format, quantization/utils/mxfp4_utils.py _swizzle_mxfp4,
  third_party/triton_kernels/tensor_details/layout_details/hopper_scale.py); Marlin's MXFP4 experts (GB10's, and
  Hopper's under --moe-backend marlin) are allocated with the hidden and intermediate sizes padded
  (fused_moe/oracle/mxfp4.py mxfp4_round_up_hidden_size_and_intermediate_size). serving.toml [[expert_layout]].
- Blocks. vLLM loads the weights with torch's caching allocator at max_split_size_mb=20 (vllm/v1/worker/
  gpu_worker.py load_model). A request above 10 MiB gets a segment of its size rounded up to 2 MiB, and a block of
  20 MiB or more is never split, so such a tensor holds its whole segment; allocated_bytes, which vLLM reads, counts
  the blocks (c10/cuda/CUDACachingAllocator.cpp get_allocation_size, should_split). vLLM holds fused parameters (q/k/v
  in one, gate and up in one, each projection's experts in one), so the blocks are those of the fused tensors.
  serving.toml [load_allocator].
- K as V. Where K is V (Gemma 4's global layers, attention_k_eq_v) the checkpoint has no v_proj, but vLLM's fused
  qkv_proj holds a V slot and loads K's weights into both (vllm/model_executor/models/gemma4.py): K's bytes twice.
- Rope. Each distinct rotary embedding holds a cos/sin cache of max_position_embeddings x its rotary width, in the
  model's dtype (vllm/model_executor/layers/rotary_embedding base.py, get_rope); Gemma 4's two (256 and 128 MiB
  at 262,144 positions) were the 0.4 GiB its weights held beyond the tensors. serving.toml [rope_cache].
"""
from __future__ import annotations

import functools
from collections import defaultdict
from dataclasses import dataclass

from roofline.data import load_table
from roofline.model.architecture import config_int, text_config
from roofline.model.inventory import Inventory, Module, Tensor
from roofline.predict.memo import IdentityMemo
from roofline.predict.traffic import dtype_bytes

MIB = 2**20
SCALE_SUFFIXES = ("scales", "weight_scale", "scale")
BIAS_SUFFIX = "bias"
# the column-parallel projection of a MoE (its rows split over tensor-parallel ranks; the other's scale groups split)
SPLIT_ROWS = ("gate_up", "w13", "w1", "w3")
# vLLM's fused parameters, by the checkpoint's projection names: (names, the fused parameter)
FUSED = ((("q_proj", "k_proj", "v_proj"), "qkv_proj"), (("gate_proj", "up_proj", "w1", "w3", "gate_up_proj"), "w13"),
         (("down_proj", "w2"), "w2"))
# each name of FUSED: (its group's place, its place in the group, the fused parameter)
FUSED_NAMES = {name: (group, place, fused) for group, (names, fused) in enumerate(FUSED)
               for place, name in enumerate(names)}


@dataclass(frozen=True)
class HeldLayout:
    layout: float  # what the experts' kernel layout holds beyond the checkpoint's tensors, per rank
    blocks: float  # the caching allocator's blocks beyond the tensors they hold, per rank
    source: str
    rope: float = 0.0  # the rotary embeddings' cos/sin caches, whole on every rank

    @property
    def bytes(self) -> float:
        return self.layout + self.blocks + self.rope

    def share(self, fraction: float) -> HeldLayout:
        """A pipeline stage's part: the fraction of the weights it holds (the rope caches whole: every stage with
        attention layers builds its own)."""
        return HeldLayout(self.layout * fraction, self.blocks * fraction, self.source, self.rope)


def _round_up(value: float, multiple: float) -> float:
    return -(-value // multiple) * multiple


def _rule(moe_format: str, moe_backend: str | None) -> dict | None:
    return next((r for r in load_table("serving").get("expert_layout", [])
                 if r["format"] == moe_format and r["moe_backend"] == moe_backend), None)


def _splits_rows(tensor: Tensor) -> bool:
    """Whether the tensor belongs to the column-parallel projection (gate/up): its rows split over the ranks."""
    return any(part in tensor.name.rsplit(".", 1)[-1] for part in SPLIT_ROWS)


def _scale_extra(tensor: Tensor, rule: dict, tp: int) -> float:
    """Bytes a (experts, rows, scale groups) scale tensor gains when its tiles pad rows and groups (one byte each:
    E8M0 scales); a rank's rows or groups are its share."""
    if len(tensor.shape) != 3:
        return 0.0
    experts, rows, groups = tensor.shape
    if _splits_rows(tensor):
        rows = rows / tp
    else:
        groups = groups / tp
    padded = _round_up(rows, rule["scale_rows_multiple"]) * _round_up(groups, rule["scale_groups_multiple"])
    return experts * (padded - rows * groups)


def _padded_extra(tensor: Tensor, rule: dict, tp: int) -> float:
    """Bytes an expert tensor gains when the kernel allocates its dimensions padded (Marlin's MXFP4 experts: the
    hidden size to 0 mod 256, a rank's intermediate size to 0 mod 128): (experts, rows[, groups[, packed]]), the
    rows of the column-parallel projection being 2 x the intermediate, the other's the hidden size; the groups
    (`block_elements` weights each) span the other dimension; a bias has rows only."""
    if len(tensor.shape) < 2:
        return 0.0
    split_rows = _splits_rows(tensor)
    rows = tensor.shape[1] / tp if split_rows else tensor.shape[1]
    row_multiple = 2 * rule["intermediate_multiple"] if split_rows else rule["hidden_multiple"]
    factor = _round_up(rows, row_multiple) / rows
    if len(tensor.shape) >= 3:
        columns = tensor.shape[2] * rule["block_elements"] / (1 if split_rows else tp)
        factor *= _round_up(columns, rule["hidden_multiple"] if split_rows else rule["intermediate_multiple"]) / columns
    return tensor.nbytes / tp * (factor - 1)


def _layout_extra(tensor: Tensor, rule: dict | None, tp: int) -> float:
    if rule is None:
        return 0.0
    if "hidden_multiple" in rule:
        return _padded_extra(tensor, rule, tp)
    leaf = tensor.name.rsplit(".", 1)[-1]
    if leaf.endswith(SCALE_SUFFIXES):
        return _scale_extra(tensor, rule, tp)
    if leaf.endswith(BIAS_SUFFIX):
        return tensor.nbytes * (rule["bias_bytes"] / dtype_bytes(tensor.dtype.lower()) - 1) / tp
    return 0.0


def _k_as_v(inventory: Inventory) -> set[str]:
    """The k_proj modules vLLM also loads as V: a layer with K and no V where the config says K is V."""
    if not text_config(inventory.config).get("attention_k_eq_v"):
        return set()
    projections: dict[int, set[str]] = defaultdict(set)
    for module in inventory.modules:
        if module.role == "attention_qkv":
            projections[module.layer].add(module.name.rsplit(".", 1)[-1])
    return {module.name for module in inventory.modules if module.role == "attention_qkv"
            and module.name.endswith(".k_proj") and "v_proj" not in projections[module.layer]}


def rope_cache_bytes(inventory: Inventory) -> float:
    """The cos/sin caches of the model's distinct rotary embeddings (serving.toml [rope_cache]): max_position_embeddings
    x the rotary width, in the model's dtype (float32 where vLLM builds the rope so), one per distinct rope."""
    rule = load_table("serving")["rope_cache"]
    shape = inventory.shape
    cfg = text_config(inventory.config)
    only_when = rule["rope_only_when"].get(shape.model_type)
    if shape.model_type in rule["no_rope_model_types"] or not shape.attention or (
            only_when and cfg.get(only_when["key"]) != only_when["value"]):
        return 0.0
    positions = config_int(cfg, "max_position_embeddings", "n_positions")
    element = 4 if shape.model_type in rule["float32_model_types"] else dtype_bytes(shape.dtype)
    params = cfg.get("rope_parameters") if isinstance(cfg.get("rope_parameters"), dict) else {}
    per_kind = all(isinstance(v, dict) for v in params.values()) and bool(params)  # rope parameters by layer type
    partial = cfg.get("partial_rotary_factor", params.get("partial_rotary_factor", 1.0))
    partial = float(partial) if isinstance(partial, (int, float)) and not isinstance(partial, bool) else 1.0
    mla_rope = config_int(cfg, "qk_rope_head_dim") if config_int(cfg, "kv_lora_rank") else 0
    ropes = set()
    for layer in shape.attention:
        if mla_rope:
            width = mla_rope
        elif shape.model_type in rule["whole_head_model_types"]:
            width = layer.head_dim
        else:
            width = int(layer.head_dim * partial)
        ropes.add((layer.head_dim, width, layer.window is not None if per_kind else None))
    return float(sum(positions * width * element for _, width, _ in ropes))


def _parameter(module: Module, tensor: Tensor) -> tuple:
    """The vLLM parameter a checkpoint tensor is loaded into: its layer, fused projection and kind (weight, scale,
    bias ...); one per module where vLLM fuses nothing."""
    return _parameter_named(module.layer, module.name, module.role == "moe_experts", tensor.name)


@functools.lru_cache(maxsize=2 ** 18)
def _parameter_named(layer: int | None, module: str, experts: bool, tensor: str) -> tuple:
    """_parameter by names (a model's names recur in every capacity, plan and check of it)."""
    parts = tensor.split(".")
    best = None  # the first group of FUSED that names a part, its first such part, that group's first name
    for i, part in enumerate(parts):
        # the part itself, or a prefix of it before an underscore (gpt-oss: gate_up_proj_blocks)
        for name in (part, *(part[:j] for j, char in enumerate(part) if char == "_")):
            hit = FUSED_NAMES.get(name)
            if hit is not None and (best is None or (hit[0], i, hit[1]) < best[:3]):
                best = (hit[0], i, hit[1], name, hit[2])
    if best is None:
        return module, tensor
    _, i, _, name, fused = best
    kind = parts[i][len(name):] + "." + ".".join(parts[i + 1:])
    return layer, module if experts else module.rsplit(".", 1)[0], fused, kind


# one capacity curve, plan or check prices the same inventory's held weights many times: each tensor's parameter once
_MEMO = IdentityMemo(64)


def held_layout(inventory: Inventory, moe_format: str = "", moe_backend: str | None = None,
                tp: int = 1) -> HeldLayout:
    """What the weights take on one rank of `tp` beyond the checkpoint's tensors: the experts' kernel layout under
    `moe_backend` (serving.toml [[expert_layout]]) and the caching allocator's blocks ([load_allocator])."""
    return _MEMO.get(inventory, (moe_format, moe_backend, tp),
                     lambda: _held_layout(inventory, moe_format, moe_backend, tp))


def _held_layout(inventory: Inventory, moe_format: str, moe_backend: str | None, tp: int) -> HeldLayout:
    rule = _rule(moe_format, moe_backend)
    allocator = load_table("serving")["load_allocator"]
    parameters: dict[tuple, float] = defaultdict(float)
    layout = 0.0
    k_as_v = _k_as_v(inventory)
    for module in inventory.modules:
        experts = module.role == "moe_experts" and module.format == moe_format
        for tensor in module.tensors:
            extra = _layout_extra(tensor, rule, tp) if experts else 0.0
            if module.name in k_as_v:  # the V slot of the fused qkv_proj, loaded with K's weights
                extra += tensor.nbytes / tp
            layout += extra
            parameters[_parameter(module, tensor)] += tensor.nbytes / tp + extra
    segment, unsplit, smallest = (allocator["segment_round_mib"] * MIB, allocator["max_split_size_mib"] * MIB,
                                  allocator["large_segment_above_mib"] * MIB)
    blocks = 0.0
    for size in parameters.values():
        if size <= smallest:
            continue  # packed into shared 20 MiB segments, split to the request
        whole = _round_up(size, segment)
        if size >= unsplit or whole - size <= allocator["split_remainder_above_mib"] * MIB:
            blocks += whole - size
    words = "the caching allocator's 2 MiB blocks while vLLM loads (serving.toml [load_allocator])"
    if layout and rule is not None:
        words = f"{rule['name']}: {rule['what']} (serving.toml [[expert_layout]]); {words}"
    if k_as_v:
        words = f"K's weights loaded again as V in {len(k_as_v)} K-is-V layers' qkv_proj; {words}"
    rope = rope_cache_bytes(inventory)
    if rope:
        words += "; the rotary embeddings' cos/sin caches (serving.toml [rope_cache])"
    return HeldLayout(layout, blocks, words, rope)
