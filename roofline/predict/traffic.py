"""Bytes read per decoded token, per module, for a scenario (pure arithmetic).

A decode step of B sequences reads every dense weight once, the routed experts that at least
one of the B tokens picked, the lm_head fully, one embedding row per token, and per sequence its
KV cache (attention layers) and recurrent state (GDN / Mamba, read and written). Bytes per
token = bytes per step / tokens produced by the step.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from roofline.errors import RooflineError
from roofline.model.formats import DTYPE_BITS, TORCH_DTYPES
from roofline.model.inventory import Inventory, Module
from roofline.model.grouping import short_label
from roofline.model.roles import role_properties

from .memo import IdentityMemo

# The KV cache dtype vocabulary, in one place: bytes per element of each name the model uses, and
# vLLM's --kv-cache-dtype spellings mapped onto those names ("auto" is resolved by kv_dtype_and_bytes)
KV_DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "fp32": 4}
KV_SPELLINGS = {"auto": "auto", "bfloat16": "bf16", "bf16": "bf16", "float16": "fp16", "fp16": "fp16",
                "fp8": "fp8", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2"}
ROUTINGS = ("uniform", "shared")  # MoE experts per step: independent per token, or one prompt to every stream


# The bounds of a decode scenario wherever it comes from (an option, a bench file, a capture, a
# server): each far beyond real use (commands/types.py bounds the options with them).
CONTEXT_LIMIT = 1 << 24  # tokens
BATCH_LIMIT = 1 << 16  # sequences
DRAFT_TOKENS_LIMIT = 64  # speculative tokens per step


@dataclass(frozen=True)
class Scenario:
    batch: int = 1  # concurrent sequences decoded together
    context: int = 1024  # tokens already in each sequence's KV cache
    kv_cache_dtype: str = "auto"  # auto (the model dtype) | bf16 | fp16 | fp8
    speculative_tokens: int = 0  # draft tokens per step; 0 = speculative decoding off
    draft_method: str = "mtp"  # vLLM's speculative method: mtp drafts with the checkpoint's own MTP layers
    acceptance_rate: float = 0.7  # chance each draft token is accepted (when speculative)
    # MoE experts a step of B sequences reads: "uniform" (each token picks its experts independently:
    # E(1-(1-k/E)^B) distinct) or "shared" (every stream decodes the same text: one sequence's experts)
    routing: str = "uniform"

    def validate(self) -> "Scenario":
        if not 1 <= self.batch <= BATCH_LIMIT:
            raise RooflineError(f"batch {self.batch} is out of range 1..{BATCH_LIMIT}")
        if not 0 <= self.context <= CONTEXT_LIMIT:
            raise RooflineError(f"context {self.context} tokens is out of range 0..{CONTEXT_LIMIT} "
                                "(vLLM's longest contexts are 10M tokens)")
        if self.kv_cache_dtype != "auto" and self.kv_cache_dtype not in KV_DTYPE_BYTES:
            raise RooflineError(f"unknown --kv-cache-dtype {self.kv_cache_dtype!r}; use auto, bf16, fp16 or fp8")
        if not 0 <= self.speculative_tokens <= DRAFT_TOKENS_LIMIT:
            raise RooflineError(f"{self.speculative_tokens} speculative tokens is out of range 0..{DRAFT_TOKENS_LIMIT}")
        if not 0 <= self.acceptance_rate < 1:
            raise RooflineError("acceptance rate must be in [0, 1)")
        if self.routing not in ROUTINGS:
            raise RooflineError(f"--routing {self.routing!r}: use uniform or shared")
        return self

    def tokens_per_step(self) -> float:
        """Tokens each sequence gains per step: 1, or with n draft tokens accepted with
        probability a each (stopping at the first rejection) 1 + a + ... + a^n."""
        a, n = self.acceptance_rate, self.speculative_tokens
        return (1.0 - a ** (n + 1)) / (1.0 - a)  # closed form: n may come from a server or a file


@dataclass
class ModuleTraffic:
    name: str
    role: str
    layer: int | None
    format: str
    quant_method: str
    params: int
    bytes: int  # resident
    read_fraction: float  # share of its bytes one step reads
    bytes_per_token: float


@dataclass
class Traffic:
    scenario: Scenario
    modules: list[ModuleTraffic]
    kv_bytes_per_token: float
    state_bytes_per_token: float
    kv_dtype: str
    tokens_per_step: float
    expected_experts_per_step: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def weight_bytes_per_token(self) -> float:
        return sum(m.bytes_per_token for m in self.modules)

    @property
    def bytes_per_token(self) -> float:
        return self.weight_bytes_per_token + self.kv_bytes_per_token + self.state_bytes_per_token


def distinct_experts(num_experts: int, top_k: int, tokens: float) -> float:
    """Expected distinct experts hit by `tokens` tokens each picking top_k of num_experts,
    assuming uniform routing: E * (1 - (1 - k/E)^B)."""
    if num_experts <= 0 or top_k <= 0:
        return float(num_experts)
    return num_experts * (1 - (1 - min(top_k, num_experts) / num_experts) ** tokens)


def dtype_bytes(name: str) -> float:
    """Bytes per element of a torch dtype name ("bfloat16", "torch.float32", ...)."""
    st = TORCH_DTYPES.get(str(name).replace("torch.", ""), "BF16")
    return DTYPE_BITS[st] / 8


def kv_dtype_and_bytes(inventory: Inventory, scenario: Scenario) -> tuple[str, float]:
    """The KV cache dtype a scenario runs at, "auto" resolved: the one place that resolves it."""
    if scenario.kv_cache_dtype == "auto":
        # vLLM "auto": what the checkpoint's quantization config states (a ModelOpt kv_cache_quant_algo,
        # a compressed-tensors kv_cache_scheme: model/quant_config.vllm_auto_kv_dtype), else the
        # model's dtype
        stated = inventory.quant.auto_kv_cache_dtype
        if stated:
            if stated not in KV_DTYPE_BYTES:
                raise RooflineError(f"{inventory.model_id}: its quantization config has vLLM run a {stated} KV cache "
                                    f"for --kv-cache-dtype auto, which roofline does not model yet; give "
                                    f"--kv-cache-dtype explicitly")
            return stated, KV_DTYPE_BYTES[stated]
        dtype = {"float16": "fp16", "float32": "fp32"}.get(inventory.shape.dtype.replace("torch.", ""), "bf16")
        return dtype, KV_DTYPE_BYTES[dtype]
    return scenario.kv_cache_dtype, KV_DTYPE_BYTES[scenario.kv_cache_dtype]


def module_read_fraction(module: Module, inventory: Inventory, scenario: Scenario, tokens_in_step: float) -> float:
    """Share of a module's bytes one decode step reads (before dividing by tokens), by its role's
    `read` property (roofline/data/roles.toml)."""
    read = role_properties(module.role).read
    if read == "none":
        return 0.0
    from .drafting import mechanism_of, module_reads, mtp_has_own_head
    if read == "per_draft":  # the MTP head: once per drafter forward, its experts as routed (predict/drafting.py)
        if not scenario.speculative_tokens or mechanism_of(scenario.draft_method) != "mtp":
            return 0.0
        return module_reads(module, inventory, scenario.speculative_tokens, scenario.batch,
                            scenario.routing == "shared")
    if module.role == "lm_head" and scenario.speculative_tokens and mechanism_of(scenario.draft_method) == "mtp" \
            and any(m.role == "mtp" for m in inventory.modules) and not mtp_has_own_head(inventory):
        return 1.0 + scenario.speculative_tokens  # the verify samples with it, and every MTP forward
    if read == "row":
        rows = _rows(module)
        return min(1.0, tokens_in_step / rows) if rows else 0.0
    if read == "routed":
        experts = module.experts or inventory.shape.num_experts
        top_k = inventory.shape.experts_per_token
        if experts and top_k:
            return distinct_experts(experts, top_k, _routed_tokens(scenario, tokens_in_step)) / experts
    return 1.0


def _routed_tokens(scenario: Scenario, tokens_in_step: float) -> float:
    """Tokens whose expert choices are independent: all of them, or with shared routing (one
    prompt sent to every stream) one sequence's."""
    return tokens_in_step / scenario.batch if scenario.routing == "shared" else tokens_in_step


def kv_bytes_by_layer(inventory: Inventory, scenario: Scenario) -> dict[int, float]:
    """KV cache bytes one sequence's step reads, per attention layer (capped by sliding windows)."""
    _, kv_bytes = kv_dtype_and_bytes(inventory, scenario)
    return {layer.layer: layer.kv_elements_per_token() * min(scenario.context, layer.window or scenario.context)
            * kv_bytes for layer in inventory.shape.attention}


def state_bytes_by_layer(inventory: Inventory) -> dict[int, float]:
    """Recurrent state bytes one sequence's step reads and writes back, per GDN / Mamba layer
    (the state in its dtype, the conv window in the model dtype)."""
    shape = inventory.shape
    state_bytes, conv_bytes = dtype_bytes(shape.state_dtype), dtype_bytes(shape.dtype)
    return {r.layer: 2 * (r.state_elements * state_bytes + r.conv_elements * conv_bytes) for r in shape.recurrent}


def _rows(module: Module) -> int:
    weights = [t for t in module.tensors if len(t.shape) == 2]
    return max((t.shape[0] for t in weights), default=0)


_MEMO = IdentityMemo(64)


def compute_traffic(inventory: Inventory, scenario: Scenario) -> Traffic:
    """Bytes each module, the KV cache and the recurrent state put on one decode step of `scenario`
    (memoised per inventory object and scenario: the result is shared, read-only)."""
    scenario = scenario.validate()
    return _MEMO.get(inventory, scenario, lambda: _compute_traffic(inventory, scenario))


# weights no rule of roofline/data/roles.toml names are priced as read whole each step and launch no kernel of their
# own: past this share of the checkpoint that guess sets the figures, and the output says so (a Mamba2 mixer's own
# A_log, D and dt_bias, a few kB a layer, stay quiet)
UNNAMED_SHARE = 0.01


def _unnamed_notes(inventory: Inventory) -> list[str]:
    unnamed = [m for m in inventory.modules if m.role == "other"]
    total = sum(m.nbytes for m in inventory.modules)
    held = sum(m.nbytes for m in unnamed)
    if not total or held <= UNNAMED_SHARE * total:
        return []
    by_kind: Counter[str] = Counter()
    for m in unnamed:
        by_kind[short_label(m.name)] += m.nbytes
    kinds = [kind for kind, _ in by_kind.most_common()]
    return [f"{len(unnamed)} modules ({held / 1e9:.2f} GB, {held / total:.0%} of the weights; "
            f"{', '.join(kinds[:3])}) match no role of roofline/data/roles.toml: priced as read whole every token, "
            "launching no kernel of their own"]


def _compute_traffic(inventory: Inventory, scenario: Scenario) -> Traffic:
    tokens_per_seq_step = scenario.tokens_per_step()
    # the target model verifies 1 + n tokens per sequence in one step
    tokens_in_step = scenario.batch * (1 + scenario.speculative_tokens)
    tokens_out = scenario.batch * tokens_per_seq_step
    by_name = inventory.by_name()
    modules = []
    for m in inventory.modules:
        fraction = module_read_fraction(m, inventory, scenario, tokens_in_step)
        nbytes = m.nbytes
        source_bytes = by_name[m.tied_to].nbytes if m.tied_to and m.tied_to in by_name else nbytes
        modules.append(ModuleTraffic(m.name, m.role, m.layer, m.format, m.quant_method, m.params, nbytes,
                                     fraction, source_bytes * fraction / tokens_out))
    kv_dtype, _ = kv_dtype_and_bytes(inventory, scenario)
    shape = inventory.shape
    kv_per_seq = sum(kv_bytes_by_layer(inventory, scenario).values())
    state_per_seq = sum(state_bytes_by_layer(inventory).values())
    notes = _unnamed_notes(inventory)
    from .drafting import mechanism_of
    if scenario.speculative_tokens and mechanism_of(scenario.draft_method) == "mtp" \
            and not any(m.role == "mtp" for m in inventory.modules):
        notes.append("speculative decoding on, but the checkpoint has no MTP / draft layers: draft cost not counted")
    return Traffic(
        scenario=scenario, modules=modules,
        kv_bytes_per_token=kv_per_seq * scenario.batch / tokens_out,
        state_bytes_per_token=state_per_seq * scenario.batch / tokens_out,
        kv_dtype=kv_dtype, tokens_per_step=tokens_per_seq_step,
        expected_experts_per_step=distinct_experts(shape.num_experts, shape.experts_per_token,
                                                   _routed_tokens(scenario, tokens_in_step))
        if shape.num_experts else 0.0,
        notes=notes,
    )
