"""vLLM's CUDA-graph sizes: which decode steps replay a full graph, which run in piecewise graphs. Pure arithmetic.

vLLM captures a graph of each size in `capture_sizes` (vllm/config/vllm.py _set_cudagraph_sizes) and pads a step to
the next one. Under FULL_AND_PIECEWISE (its default) a uniform decode step replays a FULL graph only where the padded
step's requests fit --max-num-seqs (v1/worker/gpu/cudagraph_utils.py _init_candidates: a decode graph per capture
size whose requests are at most max_num_seqs): with --max-num-seqs 5 the sizes are 1, 2, 4, 8, a batch of 5 pads to
8, and no FULL graph of 8 exists, so it runs piecewise, the host running the attention (and a hybrid's mixer) every
layer between the pieces (Gemma 4 31B on an H200 at 5 streams: 37.8 ms a step, its kernels 19.4; at --max-num-seqs
10 the same batch 19.4 ms, benchmarks/results/vllm_h200_triton_fp8). What each such layer costs the host is
prefill.toml [[piecewise.split]] (benchmarks/gpu_vllm/piecewise.py).
"""
from __future__ import annotations


def capture_sizes(largest: int, batched_tokens: int | None = None) -> list[int]:
    """vLLM's default capture sizes up to `largest` tokens: 1, 2, 4, every 8 below 256, every 16 from 256, and the
    step's token budget where it is within `largest`."""
    sizes = {s for s in (1, 2, 4) if s <= largest} | set(range(8, min(largest + 1, 256), 8)) \
        | set(range(256, largest + 1, 16))
    if batched_tokens is not None and batched_tokens <= largest:
        sizes.add(batched_tokens)
    return sorted(sizes)


def full_decode_tokens(max_num_seqs: int, draft_tokens: int, largest: int, batched_tokens: int | None = None) -> int:
    """The largest decode step (tokens) vLLM replays a FULL graph of: capture sizes rounded up to whole requests of
    1 + draft tokens, at most max_num_seqs requests (0: none)."""
    per_request = 1 + draft_tokens
    limit = min(max_num_seqs * per_request, largest)
    rounded = (-(-s // per_request) * per_request for s in capture_sizes(largest, batched_tokens))
    return max((s for s in rounded if s <= limit), default=0)


def past_full_note(max_num_seqs: int, full_sequences: int, captured_sequences: int) -> str | None:
    """What a user is told when --max-num-seqs leaves decode batches within the capture without a FULL graph (None:
    it does not; `captured_sequences`: the requests of the largest captured step)."""
    if full_sequences >= min(max_num_seqs, captured_sequences):
        return None
    return (f"--max-num-seqs {max_num_seqs}: vLLM replays full decode graphs of up to {full_sequences} sequences; a "
            f"larger batch pads to a capture size past --max-num-seqs and runs in piecewise graphs, the host running "
            f"each layer's attention (and a hybrid's GDN or Mamba mixer) between them (a --max-num-seqs that is itself "
            f"a capture size avoids it: 1, 2, 4, a multiple of 8 below 256, of 16 from 256)")
