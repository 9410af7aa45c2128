"""One case of real vLLM on the GPU, offline and weightless: decode step time and vLLM's own start-up
figures, as JSON. Runs on the lent GPU machine (run_probe.sh starts one process per case).

    python benchmarks/gpu_vllm/probe.py --config tests/reference_configs/meta-llama__Llama-3.1-8B-Instruct \
        --mode graphs --batches 1,8,32,128 --context 1024 --out $OUT/llama8b-graphs.json

The engine: vllm.LLM(model=<folder with config.json>, load_format="dummy", skip_tokenizer_init=True):
the architecture at full size with random weights, no download; prompts as token ids. In-process
(VLLM_ENABLE_V1_MULTIPROCESSING=0) so that vLLM's log records can be read here.

Decode step time, prefill cancelled: for each batch, the same prompts generate `short` and then
`long` tokens (ignore_eos); step = (t_long - t_short) / (long - short), the median of `repeats`.
Start-up figures are parsed from vLLM's own log lines (model loading GiB, available KV cache GiB,
KV cache tokens, maximum concurrency, CUDA-graph pool GiB).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import re
import statistics
import sys
import time

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")

# vLLM 0.26's start-up lines, and the figure each gives (GiB unless said)
LOG_FIGURES = {
    "weights_gib": r"Model loading took ([\d.]+) GiB",
    "available_kv_gib": r"Available KV cache memory: ([\d.]+) GiB",
    "kv_tokens": r"KV cache size: ([\d,]+) tokens",
    "max_concurrency": r"Maximum concurrency for [\d,]+ tokens per request: ([\d.]+)x",
    "cuda_graph_gib": r"Graph capturing finished in [\d.]+ secs?, took ([\d.-]+) GiB",
    "activation_peak_gib": r"([\d.]+) GiB for peak activation",
    "non_torch_gib": r"([\d.]+) GiB for non-torch memory",
    "block_size": r"Setting attention block size to (\d+) tokens",
}


class Lines(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def figures(lines: list[str]) -> dict:
    out = {}
    for key, pattern in LOG_FIGURES.items():
        for line in lines:
            match = re.search(pattern, line)
            if match:
                out[key] = float(match.group(1).replace(",", ""))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="folder with config.json")
    parser.add_argument("--mode", choices=["graphs", "eager"], default="graphs")
    parser.add_argument("--batches", default="1,8,32,128")
    parser.add_argument("--context", type=int, default=1024)
    parser.add_argument("--short", type=int, default=8)
    parser.add_argument("--long", type=int, default=72)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-model-len", type=int, default=4096)
    parser.add_argument("--quantization", default=None, help="e.g. fp8 (online W8A8 from BF16 weights)")
    parser.add_argument("--kv-cache-dtype", default="auto")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    import torch
    import vllm
    from vllm import LLM, SamplingParams

    # after vLLM's import: its logging setup (vllm/logger.py) configures the "vllm" logger then
    handler = Lines()
    logging.getLogger("vllm").addHandler(handler)

    batches = [int(b) for b in args.batches.split(",")]
    started = time.perf_counter()
    llm = LLM(model=args.config, load_format="dummy", skip_tokenizer_init=True, enforce_eager=args.mode == "eager",
              max_model_len=args.max_model_len, max_num_seqs=max(batches), quantization=args.quantization,
              kv_cache_dtype=args.kv_cache_dtype, seed=0,
              # the same prompts run again: a prefix-cache hit would shorten one run's prefill only
              enable_prefix_caching=False)
    start_s = time.perf_counter() - started
    vocab = llm.llm_engine.model_config.get_vocab_size()

    def run(batch: int, tokens: int) -> float:
        prompts = [{"prompt_token_ids": [(7 + 13 * i + 31 * j) % (vocab - 1) + 1 for j in range(args.context)]}
                   for i in range(batch)]
        params = SamplingParams(max_tokens=tokens, min_tokens=tokens, ignore_eos=True, detokenize=False, temperature=0)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        outputs = llm.generate(prompts, params, use_tqdm=False)
        torch.cuda.synchronize()
        assert all(len(o.outputs[0].token_ids) == tokens for o in outputs)
        return time.perf_counter() - t0

    rows = []
    for batch in batches:
        run(batch, args.short)  # warm-up: compile caches, graph replay paths
        steps = []
        for _ in range(args.repeats):
            short, long = run(batch, args.short), run(batch, args.long)
            steps.append((long - short) / (args.long - args.short))
        step = statistics.median(steps)
        rows.append({"batch": batch, "context": args.context, "step_ms": 1e3 * step, "per_stream_tok_s": 1 / step,
                     "aggregate_tok_s": batch / step, "step_ms_runs": [1e3 * s for s in steps]})
        print(f"batch {batch:4d}: {1e3 * step:7.3f} ms/step, {batch / step:9.1f} tok/s", flush=True)
    result = {
        "schema": "roofline.vllm_probe/1", "config": args.config, "mode": args.mode,
        "quantization": args.quantization, "kv_cache_dtype": args.kv_cache_dtype,
        "max_model_len": args.max_model_len, "vllm_version": vllm.__version__, "torch_version": torch.__version__,
        "gpu": torch.cuda.get_device_name(0), "python": platform.python_version(), "start_s": start_s,
        "startup": figures(handler.lines), "decode": rows,
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
    }
    with open(args.out, "w") as fh:
        json.dump(result, fh, indent=1)
    with open(args.out.replace(".json", ".log"), "w") as fh:
        fh.write("\n".join(handler.lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
