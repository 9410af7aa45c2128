"""How many tokens and requests vLLM's KV cache holds, computed the way vLLM 0.32 computes it (pure).

Read in the installed vLLM (vllm/v1/core/kv_cache_utils.py, vllm/platforms/interface.py
_align_hybrid_block_size, vllm/v1/kv_cache_interface.py):

- page (one block of one layer): full attention  block_size x 2 x kv_heads x head_dim x dtype bytes
  (K and V); a Mamba / GDN layer holds one state per request whose page is the sum of its state
  tensors (conv window at the model dtype, recurrent state at the SSM cache dtype).
- hybrid models: the attention block size grows (in steps of the backend's kernel block) until an
  attention page is at least the state page, and the state page is padded to equal it.
- groups: layers of one kind form buckets; every group has `group_size` layers, the smallest
  bucket's size (or the largest's when they are within 1.5x of each other), so a model of 12
  attention + 36 GDN layers makes 1 attention group and 3 state groups of 12 layers each.
- bytes per block = the largest group's sum of pages; num_blocks = memory // bytes per block.
- sliding-window layers (SlidingWindowSpec) form groups of their own beside the full-attention ones
  (the hybrid KV cache manager, on for CUDA and CPU); a request holds, of a sliding group, the
  window plus the tokens in flight: cdiv(min(window - 1 + max_in_flight_tokens, max_model_len),
  block_size) + 1 blocks (max_admission_blocks_per_request; max_in_flight_tokens = concurrent
  batches x max_num_batched_tokens, VllmConfig.max_in_flight_tokens).
- attention kinds of different page sizes (Gemma 4: sliding layers of head size 256, global ones of
  512 with fewer KV heads) are unified first (unify_kv_cache_spec_page_size): a kind whose page
  divides the largest takes a block size that many times larger; one that does not is padded to
  the largest page at the same block size.
- pipeline parallelism (get_kv_cache_configs): the groups are the whole model's; each stage's worker
  holds, of every group, the layers in its stage (group i of a kind takes its kind's layers i, i + n,
  ...), its bytes per block are the largest group's share there, its blocks its own memory over that,
  and the engine runs on the fewest blocks of any worker.
- a request at max_model_len needs cdiv(max_model_len, block_size) blocks of every attention group
  and, of every state group, one block — two with prefix caching on (vLLM's default), which switches
  hybrid models to mamba_cache_mode "align" (vllm/model_executor/models/config.py MambaModelConfig;
  MambaSpec.max_memory_usage_bytes: 2 + speculative blocks); max concurrency = num_blocks / that, and vLLM logs
  "KV cache size: int(max_concurrency x max_model_len) tokens".
"""
from __future__ import annotations

from dataclasses import dataclass, field

from roofline.errors import RooflineError
from roofline.model.architecture import ModelShape


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class KVLayout:
    """What a platform's attention backend imposes (roofline/data/serving.toml)."""

    default_block_size: int  # when --block-size is not given
    kernel_block: int  # block sizes are multiples of this


@dataclass
class KVCapacity:
    memory_bytes: int
    block_size: int  # of the kind(s) with the largest page per token
    kv_dtype_bytes: float
    attention_page_bytes: int  # one layer, one block
    state_page_bytes: int  # one GDN / Mamba layer's state, before padding (0: none)
    state_page_padded_bytes: int
    groups: list[tuple[str, int]]  # (kind, layers), padding layers included
    bytes_per_block: int
    num_blocks: int
    blocks_per_request: int
    max_model_len: int
    max_concurrency: float
    tokens: int
    kv_bytes_per_token: float  # KV of one token of context over every attention layer
    state_bytes_per_request: int  # recurrent state held once per request (padded pages)
    state_blocks_per_request: int = 1  # per state group: 2 with prefix caching (mamba_cache_mode "align")
    notes: list[str] = field(default_factory=list)
    windows: dict[str, int] = field(default_factory=dict)  # sliding group kind -> its window (tokens)
    max_in_flight_tokens: int = 0  # what a sliding group holds beyond its window
    block_sizes: dict[str, int] = field(default_factory=dict)  # attention kind -> its tokens per block

    def blocks_for(self, tokens: int) -> int:
        """Blocks one request of `tokens` tokens takes from the pool."""
        return _blocks_for(self.groups, self.block_sizes, self.state_blocks_per_request, tokens, self.windows,
                           self.max_in_flight_tokens)

    def to_json(self) -> dict:
        return {"memory_bytes": self.memory_bytes, "bytes_per_token": self.kv_bytes_per_token,
                "page_size_bytes": self.attention_page_bytes or self.state_page_padded_bytes,
                "state_page_bytes": self.state_page_bytes, "state_page_padded_bytes": self.state_page_padded_bytes,
                "state_bytes_per_request": self.state_bytes_per_request, "block_size": self.block_size,
                "groups": [{"kind": kind, "layers": n} for kind, n in self.groups],
                "bytes_per_block": self.bytes_per_block, "num_blocks": self.num_blocks,
                "block_sizes": dict(self.block_sizes),
                "blocks_per_request": self.blocks_per_request, "tokens": self.tokens,
                "max_model_len": self.max_model_len, "max_concurrency": self.max_concurrency,
                "notes": list(self.notes)}


def _state_page(shape: ModelShape, model_dtype_bytes: int, state_dtype_bytes: int, tp: int) -> int:
    """One recurrent layer's state page: conv window at the model dtype + SSM state at its dtype."""
    pages = {(r.state_elements // tp) * state_dtype_bytes + (r.conv_elements // tp) * model_dtype_bytes
             for r in shape.recurrent}
    return max(pages) if pages else 0


def _blocks_for(groups: list[tuple[str, int]], block_sizes: dict[str, int], state_blocks: int, tokens: int,
                windows: dict[str, int] | None = None, in_flight: int = 0) -> int:
    def blocks(kind: str) -> int:
        if kind == "attention":
            return cdiv(tokens, block_sizes[kind])
        if kind in (windows or {}):  # SlidingWindowSpec.max_admission_blocks_per_request
            return cdiv(min(windows[kind] - 1 + in_flight, tokens), block_sizes[kind]) + 1
        return state_blocks
    return sum(blocks(kind) for kind, _ in groups)


def _groups(buckets: dict[str, int]) -> tuple[list[tuple[str, int]], int]:
    """vLLM's _get_kv_cache_groups_uniform_page_size: (kind, layers per group) and the group size."""
    sizes = [n for n in buckets.values() if n]
    if not sizes:
        return [], 0
    group_size = min(sizes)
    if max(sizes) < min(sizes) * 1.5:
        group_size = max(sizes)
    groups = []
    for kind, n in buckets.items():
        groups += [(kind, group_size)] * cdiv(n, group_size) if n else []
    return groups, group_size


def _kind_of(layer) -> str:
    """An attention layer's KV cache kind: full attention, or a sliding window of its size."""
    return f"sliding {layer.window}" if layer.window else "attention"


def _layer_buckets(shape: ModelShape) -> dict[str, list[int]]:
    """vLLM's same_type_layers, in layer order: full attention, each sliding window, the recurrent state."""
    layers_by_kind: dict[str, list[int]] = {}
    for layer in sorted(shape.attention, key=lambda a: a.layer):
        layers_by_kind.setdefault(_kind_of(layer), []).append(layer.layer)
    layers_by_kind["state"] = sorted(r.layer for r in shape.recurrent)
    return layers_by_kind


def kv_cache_groups(shape: ModelShape) -> int:
    """How many KV cache groups vLLM makes of the model's layers (one for a model of one attention kind; a hybrid's
    state layers and each sliding window add theirs): the engine builds each group's attention metadata every step."""
    return max(1, len(kv_cache_group_kinds(shape)))


def kv_cache_group_kinds(shape: ModelShape) -> tuple[str, ...]:
    """Each KV cache group's kind, in vLLM's order (full attention, each sliding window, then the recurrent state,
    named by its mixer: "mamba", "gdn"): what the engine builds every step, by kind, since each kind's metadata
    builder costs the host its own time."""
    groups, _ = _groups({kind: len(layers) for kind, layers in _layer_buckets(shape).items()})
    state = "/".join(sorted({r.kind for r in shape.recurrent})) or "state"
    return tuple(state if kind == "state" else kind for kind, _ in groups)


def _stage_bytes_per_block(layers_by_kind: dict[str, list[int]], groups: list[tuple[str, int]],
                           page: dict[str, int], stage: range) -> int:
    """One pipeline stage's bytes per block: the largest group's pages among the stage's layers."""
    out = 0
    for kind in dict.fromkeys(kind for kind, _ in groups):
        count = sum(1 for k, _ in groups if k == kind)
        for i in range(count):
            out = max(out, page[kind] * sum(1 for layer in layers_by_kind[kind][i::count] if layer in stage))
    return out


def kv_capacity(shape: ModelShape, *, kv_dtype_bytes: float, model_dtype_bytes: int, state_dtype_bytes: int,
                memory_bytes: int, max_model_len: int, layout: KVLayout, block_size: int | None = None,
                tp: int = 1, prefix_caching: bool = True, max_in_flight_tokens: int = 0,
                stages: list[tuple[range, int]] | None = None) -> KVCapacity:
    """`stages`: under pipeline parallelism, each stage's layers and the memory its worker gives the KV
    cache (memory_bytes is then the smallest of them)."""
    if memory_bytes <= 0:
        raise RooflineError("no memory is left for the KV cache")
    notes: list[str] = []

    def layer_page(layer) -> int:  # one token of one layer
        return int(max(1, layer.kv_heads // tp) * (layer.head_dim + layer.value_dim) * kv_dtype_bytes)

    kind_pages: dict[str, int] = {}
    for layer in shape.attention:
        page = layer_page(layer)
        if kind_pages.setdefault(_kind_of(layer), page) != page:
            raise RooflineError(f"{_kind_of(layer)} layers of different page sizes: vLLM would give them KV cache "
                                f"groups of their own, which roofline does not model")
    windows = {_kind_of(layer): layer.window for layer in shape.attention if layer.window}
    per_token_page = max(kind_pages.values(), default=0)
    block = block_size or layout.default_block_size
    state_page = _state_page(shape, model_dtype_bytes, state_dtype_bytes, tp)
    padded_state = state_page
    if state_page and per_token_page:
        # _align_hybrid_block_size: attention page >= state page, then pad the state page
        alignment = max(layout.kernel_block, block)
        needed = layout.kernel_block * cdiv(alignment * cdiv(state_page, alignment * per_token_page),
                                            layout.kernel_block)
        if block < needed:
            notes.append(f"vLLM raises the attention block size from {block} to {needed} tokens so that an "
                         f"attention page holds a state page")
            block = needed
        padded_state = block * per_token_page
        if padded_state > state_page:
            notes.append(f"vLLM pads the recurrent state page from {state_page:,} to {padded_state:,} bytes "
                         f"(+{100 * (padded_state - state_page) / state_page:.2f}%)")
    attention_page = block * per_token_page
    block_sizes = {kind: _unified_block(block, page, per_token_page) for kind, page in kind_pages.items()}
    for kind, size in block_sizes.items():
        if size != block:
            notes.append(f"vLLM unifies the page sizes: {kind} layers ({kind_pages[kind]:,} bytes per token) take "
                         f"{size}-token blocks to fill the {attention_page:,}-byte page of the others")
        elif kind_pages[kind] != per_token_page:
            notes.append(f"vLLM pads the {kind} layers' {block * kind_pages[kind]:,}-byte page to "
                         f"{attention_page:,} bytes (it does not divide it)")
    layers_by_kind = _layer_buckets(shape)
    buckets = {kind: len(layers) for kind, layers in layers_by_kind.items()}
    groups, group_size = _groups(buckets)
    if not groups:
        raise RooflineError("the model has no KV cache or recurrent state (attention-free and stateless)")
    page = {kind: attention_page for kind in buckets} | {"state": padded_state}
    bytes_per_block = max(page[kind] * n for kind, n in groups)
    num_blocks = memory_bytes // bytes_per_block
    if stages and len(stages) > 1:
        per_stage = [(_stage_bytes_per_block(layers_by_kind, groups, page, layers), memory)
                     for layers, memory in stages]
        if any(memory <= 0 for _, memory in per_stage):
            raise RooflineError("a pipeline stage has no memory left for the KV cache")
        num_blocks = min(memory // stage_bytes for stage_bytes, memory in per_stage if stage_bytes)
        bytes_per_block = max(stage_bytes for stage_bytes, _ in per_stage)
        notes.append(f"{len(stages)} pipeline stages: each worker holds its stage's layers of every group "
                     f"({', '.join(f'{b:,}' for b, _ in per_stage)} bytes per block); the engine runs on the fewest "
                     f"blocks of any stage")
    state_blocks = 2 if prefix_caching else 1
    blocks_per_request = _blocks_for(groups, block_sizes, state_blocks, max_model_len, windows,
                                     max_in_flight_tokens)
    if windows:
        notes.append(f"sliding-window layers hold their window plus {max_in_flight_tokens:,} tokens in flight "
                     f"(concurrent batches x max_num_batched_tokens): "
                     + ", ".join(f"{_blocks_for([(kind, 1)], block_sizes, 0, max_model_len, windows, max_in_flight_tokens)}"
                                 f" blocks of window {w}" for kind, w in windows.items())
                     + f" per request instead of {cdiv(max_model_len, block_sizes[next(iter(windows))])}")
    max_concurrency = num_blocks / blocks_per_request
    padding = sum(n for _, n in groups) - len(shape.attention) - len(shape.recurrent)
    if padding:
        notes.append(f"{padding} padding layer(s) to make every group {group_size} layers")
    kv_per_token = sum(layer.kv_elements_per_token() // tp for layer in shape.attention) * kv_dtype_bytes
    return KVCapacity(memory_bytes=memory_bytes, block_size=block, kv_dtype_bytes=kv_dtype_bytes,
                      attention_page_bytes=attention_page, state_page_bytes=state_page,
                      state_page_padded_bytes=padded_state, groups=groups, bytes_per_block=bytes_per_block,
                      num_blocks=num_blocks, blocks_per_request=blocks_per_request, max_model_len=max_model_len,
                      max_concurrency=max_concurrency, tokens=int(max_concurrency * max_model_len),
                      kv_bytes_per_token=kv_per_token,
                      state_bytes_per_request=padded_state * len(shape.recurrent),
                      state_blocks_per_request=state_blocks, notes=notes, windows=windows,
                      max_in_flight_tokens=max_in_flight_tokens, block_sizes=block_sizes)


def _unified_block(block: int, page_per_token: int, largest_per_token: int) -> int:
    """unify_kv_cache_spec_page_size: a smaller page that divides the largest one grows its block by
    the ratio; one that does not keeps its block (its page is padded to the largest)."""
    largest, page = block * largest_per_token, block * page_per_token
    return block * (largest // page) if largest % page == 0 else block
