"""Profile one decode step of a model in a live vLLM, with vLLM's own torch-profiler support.

vLLM (0.32) profiles its workers when the engine is built with
`profiler_config={"profiler": "torch", "torch_profiler_dir": DIR}`: `LLM.start_profile()` starts
a torch profiler in every worker and each writes a chrome trace (`*.pt.trace.json.gz`, one per
rank) into DIR when it stops. The per-session `delay_iterations` / `max_iterations` of
`start_profile` pick the engine steps: with one short prompt, step 1 is the prefill and every
later step decodes one token, so `delay_iterations=1 + n, max_iterations=1` records exactly the
n-th decode step. vLLM marks each profiled step with a range named after it
(`execute_context_0(0)_generation_1(1)`: no prefill, one decoding request, one token), which is
checked here so a trace of the wrong step is never handed on.

The engine runs eager (enforce_eager): CUDA-graph replays would launch the layer kernels from a
graph, outside the module ranges that parse_trace attributes them to. Python stacks stay on
(vLLM's default), so module ranges (`nn.Module: Qwen3DecoderLayer_2`) are in the trace.

Run as `python -m roofline.live.vllm_profile MODEL OUT_DIR` it prints the trace paths as JSON (the
engine starts worker processes, so it needs a `__main__` guard: tests run it as a subprocess).
"""
from __future__ import annotations

import glob
import gzip
import json
import os
import re
import sys

from roofline.errors import RooflineError

# token ids, not text: a checkpoint without a tokenizer can be profiled too
DEFAULT_PROMPT = (1, 17, 42, 99, 311, 5, 8, 600)
_DECODE_STEP = re.compile(r"^execute_context_0\(0\)_generation_(\d+)\((\d+)\)$")


def profile_decode_step(model: str, out_dir: str, *, prompt_token_ids=DEFAULT_PROMPT, decode_step: int = 1,
                        **engine_kwargs) -> list[str]:
    """Chrome traces (one per worker rank) of the `decode_step`-th decode step of one request.
    `engine_kwargs` go to vllm.LLM (e.g. max_model_len, tensor_parallel_size, dtype)."""
    if decode_step < 1:
        raise RooflineError(f"decode_step must be 1 or more, not {decode_step}")
    try:
        from vllm import LLM, SamplingParams
        from vllm.inputs import TokensPrompt
    except ImportError as exc:
        raise RooflineError(f"profiling a decode step needs vLLM: {exc}") from None
    out_dir = os.path.abspath(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    before = set(_trace_files(out_dir))
    engine_kwargs.setdefault("enforce_eager", True)
    engine_kwargs.setdefault("max_num_seqs", 1)
    # one short request: the smallest KV cache that starts, as `roofline capture` asks for, unless
    # the caller (or VLLM_CPU_KVCACHE_SPACE) sized it; vLLM's default share fails on small boxes
    from roofline.model.limits import max_positions

    from .capture import CAPTURE_MAX_MODEL_LEN, kv_budget, model_config

    config = model_config(model, [])
    if "max_model_len" not in engine_kwargs:
        engine_kwargs["max_model_len"] = min(CAPTURE_MAX_MODEL_LEN, max_positions(config) or CAPTURE_MAX_MODEL_LEN)
    if not {"kv_cache_memory_bytes", "gpu_memory_utilization"} & set(engine_kwargs) and not os.environ.get(
            "VLLM_CPU_KVCACHE_SPACE"):
        engine_kwargs["kv_cache_memory_bytes"] = kv_budget(config, engine_kwargs["max_model_len"])
    llm = LLM(model=model, profiler_config={
        "profiler": "torch", "torch_profiler_dir": out_dir, "torch_profiler_with_stack": True,
        "ignore_frontend": True,  # the front end's own trace holds no model work
    }, **engine_kwargs)
    # the profiler stops itself before the step after the profiled one: generate past it
    params = SamplingParams(max_tokens=decode_step + 2, temperature=0.0, ignore_eos=True)
    llm.start_profile(delay_iterations=1 + decode_step, max_iterations=1)
    llm.generate([TokensPrompt(prompt_token_ids=list(prompt_token_ids))], params, use_tqdm=False)
    llm.stop_profile()
    traces = [p for p in _trace_files(out_dir) if p not in before]
    if not traces:
        raise RooflineError(f"vLLM wrote no profiler trace into {out_dir}")
    for path in traces:
        steps = profiled_steps(path)
        if len(steps) != 1 or not _DECODE_STEP.match(steps[0]):
            raise RooflineError(f"{path}: expected one decode step, the trace holds {steps or 'no vLLM step'}")
    return traces


def profiled_steps(path: str) -> list[str]:
    """The names of the vLLM engine steps (execute_context_..._generation_...) in a trace."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        events = json.load(f).get("traceEvents", [])
    return [e["name"] for e in events if e.get("ph") == "X" and e.get("cat") == "user_annotation"
            and str(e.get("name", "")).startswith("execute_")]


def _trace_files(out_dir: str) -> list[str]:
    return sorted(glob.glob(os.path.join(out_dir, "*.pt.trace.json*")))


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print("usage: python -m roofline.live.vllm_profile MODEL OUT_DIR [MAX_MODEL_LEN]", file=sys.stderr)
        return 2
    max_model_len = int(argv[2]) if len(argv) == 3 else 256
    try:
        traces = profile_decode_step(argv[0], argv[1], max_model_len=max_model_len)
    except RooflineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(json.dumps({"traces": traces}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
