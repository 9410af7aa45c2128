"""vLLM's memory-profiling run, priced per rank: the caching allocator's peak ("peak activation" in vLLM's log) and
the CUDA-graph memory vLLM estimates beside it, the two terms that decide how much of the requested memory the KV
cache gets after the weights (pure).

vLLM runs one forward of max_num_batched_tokens tokens and then a dummy sampler run on max_num_seqs rows
(vllm/v1/worker/gpu_worker.py determine_available_memory). What stays allocated depends on the model runner vLLM
picks (serving.toml [profile_run]):

- V1 (MoE outside vLLM's V2 list, hybrids, V2-unsupported speculation): the peak is the larger of the forward and
  the sampler run. A modular fused MoE's workspaces live in vLLM's workspace manager and are never freed, so from
  the first MoE layer on they sit under every later layer's transients and under the sampler. The sampler holds the
  head's logits, a float32 copy, the softmax probabilities, the exponential noise and top-k / top-p's buffer.
- V2 (the rest): the forward holds the residual stream, the attention's q/k/v projection and q-norm outputs (the
  profile skips the attention itself) and the MLP's transients at once; the dummy sampler holds the head's logits in
  the model dtype. The two are apart (V2 frees the forward before it samples); V2 estimates no CUDA-graph memory.
- With torch.compile (vLLM's default; not under --enforce-eager) the first forward compiles the model, cold: the
  compiler's benchmark of the first piece allocates a fresh copy of its input embedding table and its two outputs at
  the compile range's top (max_num_batched_tokens) - a phase of its own, the peak of a dense 8B model at any budget.
  A warm compile cache (the same model and settings started before on that machine) skips it: vLLM then gives the
  KV cache that much more than priced here.

Checked against the allocations alive at vLLM 0.26.0's peak, traced on an H200 (roofline/live/vllm_probe.py
--memory-trace, benchmarks/results/vllm_h200_memory for V1, vllm_h200_loadtrace for V2 and the compile) and the
logged peaks of every start-up the project ran.
"""
from __future__ import annotations

from dataclasses import dataclass

from roofline.data import load_table
from roofline.model.architecture import config_int, text_config
from roofline.model.inventory import Inventory
from roofline.predict.traffic import dtype_bytes

# the chunked prefill workspace of vLLM's MLA profile run (mla_attention.py: "simulate the worst case output size
# for kv_b_proj(kv_c_normed)"): rows = min(max(8 x max_model_len, 4 x max_num_seqs x block size), 64k tokens)
# (MLACommonMetadataBuilder.determine_chunked_prefill_workspace_size)
MLA_WORKSPACE_PER_MODEL_LEN = 8
MLA_WORKSPACE_PAGES_PER_SEQ = 4
MLA_WORKSPACE_MAX_TOKENS = 64 * 1024
# the chunk of the Gated DeltaNet prefill kernels (fla's chunked delta rule in vLLM 0.26): one fp32 state per
# value head per chunk of this many tokens
GDN_CHUNK_TOKENS = 64
# the layer's output kept past the forward for the sampler: the final hidden states and the last compiled
# piece's output, (tokens, hidden) each (traced: 32 + 32 MiB for Qwen3-30B-A3B at 8,192 tokens)
KEPT_HIDDEN = 2
# V2's forward: the residual stream and the last projection's output, (tokens, hidden) each, beside the layer's
# transients (traced: Qwen3-8B and Llama-3.1-8B at 8,192 tokens, benchmarks/results/vllm_h200_loadtrace)
V2_HIDDEN = 2
# a cold torch.compile's benchmark of the first compiled piece (embedding lookup and the first norm): its outputs,
# the residual and the normed stream, (tokens, hidden) each, beside the embedding table's copy
COMPILE_OUTPUTS = 2
FLOAT32 = 4
# the input projection of each kind of layer that allocates transients of its own
TRANSIENT_ROLES = ("attention_qkv", "mlp", "linear_attn_in", "mamba_in")


@dataclass(frozen=True)
class ProfilePeak:
    """The profile run's peak on one rank and what set it (bytes)."""

    runner: str  # "v1" | "v2"
    forward: float  # the forward of max_num_batched_tokens tokens (with the MoE workspace where it persists)
    sampler: float  # the dummy sampler run (with the MoE workspace where it persists and the kept hidden states)
    moe_workspace: float  # a modular fused MoE's workspaces where they persist (0: none, monolithic experts, or last)
    compile: float = 0.0  # a cold torch.compile's benchmark of the first piece (0: eager)

    @property
    def peak(self) -> float:
        return max(self.forward, self.sampler, self.compile)

    @property
    def set_by(self) -> str:
        """What the peak is, in words."""
        phases = {"the forward's peak": self.forward, "the dummy sampler run's peak": self.sampler,
                  "a cold torch.compile's copy of the embedding table and the first piece's outputs": self.compile}
        return max(phases, key=phases.get)


def _table() -> dict:
    return load_table("serving")


def model_runner(inventory: Inventory, draft_method: str | None = None) -> str:
    """The model runner vLLM 0.26 picks: "v2" for a dense model (or a MoE of vLLM's V2 list) unless a hybrid or a
    speculation method V2 does not run, else "v1" (serving.toml [profile_run])."""
    table = _table()["profile_run"]
    shape = inventory.shape
    if shape.recurrent or (draft_method or "") in table["v1_draft_methods"]:
        return "v1"
    if shape.num_experts and shape.architecture not in table["v2_moe_architectures"]:
        return "v1"
    return "v2"


def monolithic(moe_format: str, moe_backend: str | None) -> bool:
    """Whether the experts run as one monolithic kernel, with no workspace in vLLM's workspace manager."""
    return {"format": moe_format, "moe_backend": moe_backend} in _table()["profile_run"]["monolithic_moe"]


def expert_workspace(inventory: Inventory, tp: int = 1) -> float:
    """Elements per token of a fused MoE's two intermediate buffers (TritonExperts / MarlinExperts
    workspace_shapes: (M, top-k, max(intermediate, hidden)) and (M, top-k, max(gate_up width, hidden))); 0
    without experts. A rank's expert slice is narrower, the hidden size is whole."""
    experts = [m for m in inventory.modules if m.role == "moe_experts"]
    if not experts:
        return 0.0
    cfg, shape = text_config(inventory.config), inventory.shape
    hidden = shape.hidden_size
    inter = (config_int(cfg, "moe_intermediate_size") or config_int(cfg, "intermediate_size", default=4 * hidden)) / tp
    layer = experts[0].layer
    per_expert = sum(m.params for m in experts if m.layer == layer) / max(shape.num_experts, 1)
    gated = per_expert > 2.5 * hidden * inter * tp  # gate, up, down (3) or up, down (2: relu^2)
    return max(shape.experts_per_token, 1) * (max(inter, hidden) + max((2 if gated else 1) * inter, hidden))


def _attention_widths(inventory: Inventory, tp: int = 1) -> tuple[float, float, float, float] | None:
    """Elements per token of an attention layer's outputs on one rank: (the q/k/v projection's, the per-head q
    norm's and k norm's where the model has them (Qwen3), the attention's); None without attention heads."""
    cfg, shape = text_config(inventory.config), inventory.shape
    heads = config_int(cfg, "num_attention_heads", default=0)
    if not heads:
        return None
    hidden = shape.hidden_size
    kv_heads = config_int(cfg, "num_key_value_heads", default=heads)
    head_dim = config_int(cfg, "head_dim", default=hidden // heads)
    layer = next((a.layer for a in shape.attention), 0)
    names = {m.name.rsplit(".", 1)[-1] for m in inventory.modules if m.layer == layer}
    qkv_params = sum(m.params for m in inventory.modules if m.layer == layer and m.role == "attention_qkv")
    query = heads / tp * head_dim
    kv = 2 * max(kv_heads / tp, 1) * head_dim  # KV heads fewer than ranks: replicated
    qkv = max(qkv_params / hidden / tp, query + kv) if qkv_params else query + kv
    return qkv, (query if "q_norm" in names else 0.0), (kv / 2 if "k_norm" in names else 0.0), query


def attention_transient(inventory: Inventory, tp: int = 1) -> float:
    """Elements per token alive at an attention layer's output projection: the q/k/v projection's output, the
    per-head q / k norms' outputs where the model has them (Qwen3), the attention's output and o_proj's."""
    widths = _attention_widths(inventory, tp)
    return sum(widths) + inventory.shape.hidden_size if widths else 0.0


def attention_outputs(inventory: Inventory, tp: int = 1) -> float:
    """Elements per token of an attention layer's projection outputs alive in V2's profile forward (which skips the
    attention itself): the q/k/v projection's and the per-head q norm's where the model has one; 0 without
    attention."""
    widths = _attention_widths(inventory, tp) if inventory.shape.attention else None
    return widths[0] + widths[1] if widths else 0.0


def mla_profile_bytes(cfg: dict, tokens: int, seqs: int, max_model_len: int, block: int, dtype: float,
                      tp: int = 1) -> float:
    """An MLA model's peak at its attention in vLLM's profile run: the workspace's up-projected context (rows x
    heads x (qk_nope + v) head dims) beside the step's query (heads x (qk_nope + qk_rope)) and residual stream; 0
    for a model without MLA. A tensor-parallel rank holds its share of the heads."""
    if not config_int(cfg, "kv_lora_rank"):
        return 0.0
    heads = config_int(cfg, "num_attention_heads") / tp
    nope, rope = config_int(cfg, "qk_nope_head_dim"), config_int(cfg, "qk_rope_head_dim")
    value = config_int(cfg, "v_head_dim", default=nope)
    rows = min(max(MLA_WORKSPACE_PER_MODEL_LEN * max_model_len, MLA_WORKSPACE_PAGES_PER_SEQ * seqs * block),
               MLA_WORKSPACE_MAX_TOKENS)
    hidden = config_int(cfg, "hidden_size")
    return (rows * heads * (nope + value) + tokens * (heads * (nope + rope) + 3 * hidden)) * dtype


def recurrent_workspace_bytes(cfg: dict, kinds: set[str], dtype: int) -> float:
    """Bytes per prefill token of a recurrent mixer's forward, the widest kind of those present: its input
    projection's output, the causal conv's output and the mixer's output at the model dtype, plus the chunked
    scan's fp32 states (heads x head dim x state per chunk). Checked against vLLM 0.26.0's profile on the H200
    at 2048-8192 batched tokens (benchmarks/results/vllm_h200_activation)."""
    sizes = [0.0]
    if "mamba" in kinds:  # Mamba2 (Nemotron-H): in_proj -> z, xBC, dt
        heads, head_dim = config_int(cfg, "mamba_num_heads", default=0), config_int(cfg, "mamba_head_dim", default=0)
        state, groups = config_int(cfg, "ssm_state_size", default=0), config_int(cfg, "n_groups", default=1)
        inner, chunk = heads * head_dim, config_int(cfg, "chunk_size", default=256) or 256
        conv = inner + 2 * groups * state  # x, B, C
        projection, output = inner + conv + heads, inner  # z, xBC, dt; y
        sizes.append((projection + conv + output) * dtype + heads * head_dim * state * 4 / chunk)
    if "gdn" in kinds:  # Gated DeltaNet (Qwen3-Next, Qwen3.5/3.6): in_proj_qkvz + ba -> conv(qkv) -> core
        key = config_int(cfg, "linear_num_key_heads", default=0) * config_int(cfg, "linear_key_head_dim", default=0)
        v_heads, v_dim = config_int(cfg, "linear_num_value_heads", default=0), config_int(
            cfg, "linear_value_head_dim", default=0)
        value = v_heads * v_dim
        projection, conv, output = 2 * key + 2 * value + 2 * v_heads, 2 * key + value, value  # qkvz + ba; qkv; o
        sizes.append((projection + conv + output) * dtype
                      + v_heads * config_int(cfg, "linear_key_head_dim", default=0) * v_dim * 4 / GDN_CHUNK_TOKENS)
    return max(sizes)


def _workspace_persists(inventory: Inventory) -> bool:
    """Whether a layer with its own transients runs after the first MoE layer (then the workspace, allocated there
    and never freed, sits under them): false for a model whose only MoE layers come last."""
    moe_layers = [m.layer for m in inventory.modules if m.role == "moe_experts"]
    others = [m.layer for m in inventory.modules if m.role in TRANSIENT_ROLES]
    return bool(moe_layers) and any(layer > min(moe_layers) for layer in others)


def profile_peak(inventory: Inventory, tokens: int, seqs: int, max_model_len: int = 0, block: int = 0, tp: int = 1,
                 runner: str = "v2", moe_format: str = "", moe_backend: str | None = None,
                 sms: int | None = None, compiled: bool = False) -> ProfilePeak:
    """The profile run's peak on one rank of `tp` tensor-parallel ones (each profiles its own forward: the
    column-parallel outputs are split, the residual stream, the layer's output after its all-reduce and the logits
    vLLM gathers to the first rank are whole).

    The forward: `tokens` through the residual stream (3 x hidden) beside the widest transient of one layer (a gated
    MLP's gate_up output and activation, 3 x intermediate; a MoE layer's output and a shared expert's, 2 x hidden;
    an attention layer's (attention_transient); a recurrent mixer's; an MLA model's profile workspace), with the
    modular MoE's workspace under all of them once it persists, or as the MoE layer's own where no layer follows it.
    V2's forward holds the residual stream, the attention's projection and q-norm outputs and the widest other
    transient at once. The sampler (V1): rows = min(seqs, tokens) of logits in the model dtype and three float32
    copies, top-k / top-p's buffer, the workspace and the kept hidden states; (V2) the logits and the kept hidden
    states. `compiled` (torch.compile on, a cold cache): the embedding table's copy and the first piece's outputs."""
    cfg, shape = text_config(inventory.config), inventory.shape
    hidden, vocab = shape.hidden_size, shape.vocab_size
    dtype = dtype_bytes(shape.dtype)
    experts = expert_workspace(inventory, tp)
    # a modular MoE's workspace persists once a later layer runs under it; monolithic experts' buffers (and a
    # workspace whose MoE layers come last) are the MoE layer's own transients
    persists = bool(experts) and not monolithic(moe_format, moe_backend) and _workspace_persists(inventory)
    workspace = experts if persists else 0.0
    transients = [attention_transient(inventory, tp)]
    if any(m.role == "mlp" for m in inventory.modules):
        transients.append(3 * config_int(cfg, "intermediate_size", default=4 * hidden) / tp)
    if experts:  # the layer's output and a shared expert's, beside the experts' buffers where they are its own
        transients.append(2 * hidden + (0.0 if persists else experts))
    recurrent = recurrent_workspace_bytes(cfg, {r.kind for r in shape.recurrent}, dtype) / tp
    forward = tokens * ((3 * hidden + workspace) * dtype + max(max(transients) * dtype, recurrent))
    mla = mla_profile_bytes(cfg, tokens, seqs, max_model_len, block, dtype, tp)
    if mla:
        forward = max(forward, mla + (tokens * workspace * dtype if persists else 0))
    rows = min(seqs, tokens) if tokens else seqs
    kept = tokens * (workspace + KEPT_HIDDEN * hidden) * dtype
    # a rank's embedding is its share of the vocabulary (VocabParallelEmbedding); the outputs are whole
    compile_copy = (_embedding_bytes(inventory) / tp + COMPILE_OUTPUTS * tokens * hidden * dtype) if compiled else 0.0
    if runner == "v2":
        attention = attention_outputs(inventory, tp)
        if attention and not mla:
            forward = tokens * (V2_HIDDEN * hidden + workspace + attention + max(transients[1:], default=0.0)) * dtype
        return ProfilePeak("v2", forward, rows * vocab * dtype + kept, tokens * workspace * dtype, compile_copy)
    table = _table()["profile_run"]
    buffer_rows = _topk_buffer_rows(rows, sms)
    sampler = (rows * vocab * (dtype + table["sampler_float32_copies"] * FLOAT32) + buffer_rows * vocab * FLOAT32
               + kept)
    return ProfilePeak("v1", forward, sampler, tokens * workspace * dtype, compile_copy)


def _embedding_bytes(inventory: Inventory) -> float:
    """The input embedding table's bytes (the first compiled piece's weight input)."""
    return float(sum(m.nbytes for m in inventory.modules if m.role == "embedding" and m.layer is None
                     and "lm_head" not in m.name))


def _topk_buffer_rows(rows: int, sms: int | None) -> int:
    """Rows of top-k / top-p's cached Triton buffer: min(next power of two of min(SMs, rows), SMs); the rows
    themselves where the device's SM count is not in the catalogue."""
    if not rows:
        return 0
    if not sms:
        return rows
    programs = min(sms, rows)
    return min(1 << (programs - 1).bit_length(), sms)


@dataclass(frozen=True)
class GraphEstimate:
    bytes: float
    source: str


def cuda_graph_estimate(layers: int, largest_capture: int, runner: str) -> GraphEstimate:
    """The CUDA-graph memory vLLM 0.26 estimates and subtracts before the KV cache (serving.toml
    [[cuda_graph_estimate]]): none on the V2 runner; else the measured line in layers of the smallest measured
    capture ceiling at or above the engine's (the largest measured one beyond it)."""
    if runner == "v2":
        return GraphEstimate(0.0, "vLLM's V2 model runner estimates no CUDA-graph memory before the KV cache "
                                  "(v1/worker/gpu/model_runner.py profile_cudagraph_memory)")
    rows = sorted(_table()["cuda_graph_estimate"], key=lambda r: r["largest_capture"])
    row = next((r for r in rows if r["largest_capture"] >= largest_capture), rows[-1])
    points = sorted(row["gib_at_layers"])
    if len(points) == 1:
        gib = points[0][1]
    else:
        (l0, g0), (l1, g1) = points[0], points[-1]
        gib = max(g0 + (g1 - g0) * (layers - l0) / (l1 - l0), min(g0, g1))
    return GraphEstimate(gib * 2**30, f"vLLM 0.26.0's logged CUDA-graph estimate at a {row['largest_capture']}-token "
                                      f"capture, by layers ({layers} here; {row['source']})")
