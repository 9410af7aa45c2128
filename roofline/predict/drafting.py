"""What speculative decoding's drafts read and launch, by mechanism (pure): one answer behind the step
model's price of a speculative step and the per-module byte table.

vLLM's proposers (vllm/v1/spec_decode): an MTP head or an EAGLE / EAGLE-3 head runs one forward per draft
token. The first forward takes every token the target just verified (1 + n per sequence: the padded drafter
batch), each further forward one token per sequence; every forward samples from the vocabulary (the head's
own lm_head where it has one, else the target's, which vLLM shares with it). A draft model runs the same
forwards through its whole stack and reads its own KV cache. ngram / suffix read no weights: the proposer
runs on the host. The reads of one forward are the head's modules, its routed experts at the tokens of that
forward (the same distinct-expert count as the main layers: top-k each, not the whole expert bank), and for
a draft model its KV over the context."""
from __future__ import annotations

from dataclasses import dataclass

from roofline.data import load_table
from roofline.model.inventory import Inventory, Module
from roofline.model.roles import role_properties

from .traffic import distinct_experts


def draft_method_run(method: str, speculative_tokens: int) -> str | None:
    """The speculative method vLLM runs: none without draft tokens, whatever method a flag or request names."""
    return method if speculative_tokens else None


@dataclass(frozen=True)
class RoutedRead:
    nbytes: float  # the whole expert bank
    backend_bytes: float  # of it, in the backend's format (set by the step model's caller)
    experts: int
    top_k: int


@dataclass(frozen=True)
class DraftReads:
    """One drafter forward's reads: what every forward reads whole, the expert banks it routes to, and the
    KV bytes per token of context per sequence (a draft model's own cache; an MTP / EAGLE head's one layer)."""

    mechanism: str  # mtp | eagle | draft_model | ngram (data/kernels.toml [draft.*])
    full_bytes: float = 0.0
    full_by_format: tuple[tuple[str, float], ...] = ()  # (weight format, bytes) of full_bytes
    routed: tuple[tuple[str, RoutedRead], ...] = ()  # (weight format, bank)
    kv_bytes_per_context_token: float = 0.0
    layers: int = 1  # decoder layers of the drafter (a draft model's stack)
    source: str = ""

    @property
    def reads_weights(self) -> bool:
        return bool(self.full_bytes or self.routed)


def mechanism_of(method: str) -> str:
    """vLLM's method -> the mechanism the kernel table and pricing know (eagle3 drafts as eagle)."""
    table = load_table("vllm_args")["speculative"]["mechanism"]
    if method in table["mtp"]:
        return "mtp"
    if method in table["no_weights"]:
        return "ngram"
    if method == "draft_model":
        return "draft_model"
    return "eagle"


def pass_tokens(sequences: float, draft_tokens: int) -> list[float]:
    """Tokens of each drafter forward of one step: the verified 1 + n per sequence, then one per sequence."""
    if draft_tokens <= 0 or sequences <= 0:
        return []
    return [sequences * (1 + draft_tokens)] + [float(sequences)] * (draft_tokens - 1)


def routed_reads(experts: int, top_k: int, passes: list[float], shared: bool, sequences: float) -> float:
    """Whole expert banks one step's drafter forwards read: the distinct experts of each forward's tokens."""
    if not experts or not top_k:
        return float(len(passes))
    return sum(distinct_experts(experts, top_k, tokens / sequences if shared and sequences else tokens) / experts
               for tokens in passes)


def _is_bank(module: Module) -> bool:
    return bool(module.experts) and "shared_expert" not in module.name


def mtp_has_own_head(inventory: Inventory) -> bool:
    """An MTP block that stores its own vocabulary head (DeepSeek's shared_head.head) samples with it."""
    vocab = inventory.shape.vocab_size
    return any(len(t.shape) == 2 and t.shape[0] == vocab and "embed" not in t.name
               for m in inventory.modules if m.role == "mtp" for t in m.tensors)


def mtp_reads(inventory: Inventory, ranks: int = 1, kv_bytes_per_element: float = 2.0) -> DraftReads:
    """An MTP head's forward, from the target checkpoint: its layer (attention, router, shared expert, the
    experts it routes to), and the vocabulary head it samples with; its one layer's KV in the target's cache
    dtype (vLLM's drafter shares the target's cache config)."""
    modules = [m for m in inventory.modules if m.role == "mtp"]
    if modules and not mtp_has_own_head(inventory):
        modules += [m for m in inventory.modules if m.role == "lm_head"]
    layer = inventory.shape.attention[0] if inventory.shape.attention else None
    kv = layer.kv_elements_per_token() * kv_bytes_per_element if layer is not None and modules else 0.0
    return _reads("mtp", inventory, modules, ranks, kv_bytes=kv,
                  source=f"{inventory.model_id}: its MTP layer and the vocabulary head it samples with")


def checkpoint_reads(draft: Inventory, method: str, target: Inventory, ranks: int = 1,
                     kv_cache_dtype: str = "auto") -> DraftReads:
    """An EAGLE / EAGLE-3 head or a draft model, from its own checkpoint: every module a forward reads (the
    embedding by row), its KV at the deployment's --kv-cache-dtype (one cache config for target and draft;
    "auto" as the draft's own checkpoint says), and the target's vocabulary head where the draft has none."""
    from .traffic import kv_bytes_by_layer, Scenario
    modules = [m for m in draft.modules if role_properties(m.role).read not in ("none", "row")]
    if not any(m.role == "lm_head" for m in modules):
        modules += [m for m in target.modules if m.role == "lm_head"]
    per_token = sum(kv_bytes_by_layer(draft, Scenario(context=1, kv_cache_dtype=kv_cache_dtype)).values())
    return _reads(mechanism_of(method), draft, modules, ranks, kv_bytes=per_token,
                  layers=max(1, draft.shape.num_layers),
                  source=f"{draft.model_id} ({method}): {len(modules)} modules a draft forward reads")


def no_weight_reads(method: str) -> DraftReads:
    return DraftReads(mechanism_of(method), source=f"{method}: drafted on the host, no weights")


def _reads(mechanism: str, inventory: Inventory, modules: list[Module], ranks: int, *, kv_bytes: float,
           source: str, layers: int = 1) -> DraftReads:
    by_name = inventory.by_name()
    full: dict[str, float] = {}
    routed = []
    top_k = inventory.shape.experts_per_token
    for m in modules:
        nbytes = (by_name[m.tied_to].nbytes if m.tied_to and m.tied_to in by_name else m.nbytes) / ranks
        if _is_bank(m) and top_k:
            routed.append((m.format, RoutedRead(nbytes, 0.0, m.experts, top_k)))
        else:
            full[m.format] = full.get(m.format, 0.0) + nbytes
    return DraftReads(mechanism, sum(full.values()), tuple(sorted(full.items())), tuple(routed),
                      kv_bytes / ranks, layers, source)


def module_reads(module: Module, inventory: Inventory, draft_tokens: int, sequences: float, shared: bool) -> float:
    """Whole reads of one MTP module in a step's drafter forwards (the per-module byte table)."""
    passes = pass_tokens(sequences, draft_tokens)
    if _is_bank(module) and inventory.shape.experts_per_token:
        return routed_reads(module.experts, inventory.shape.experts_per_token, passes, shared, sequences)
    return float(len(passes))


def launches(reads: DraftReads, draft_tokens: int, eager: bool = False) -> tuple[float, float, float]:
    """(kernels, host launches outside CUDA graphs, host milliseconds) of one step's drafts
    (data/kernels.toml [draft.MECHANISM]; a draft model's per layer of its stack)."""
    if draft_tokens <= 0:
        return 0.0, 0.0, 0.0
    row = load_table("kernels")["draft"][reads.mechanism]
    scale = reads.layers if row.get("per_layer") else 1
    further = draft_tokens - 1
    key = "eager_kernels" if eager and "first_eager_kernels" in row else "kernels"
    kernels = (row[f"first_{key}"] + further * row[f"per_{key}"]) * scale
    host = (row["first_host_launches"] + further * row["per_host_launches"]) * scale
    return kernels, host, row.get("host_ms", 0.0)
