"""The step model and capacity against real vLLM on the GPU: every probe result in
benchmarks/results/vllm_h200 (probe.py's JSON) beside roofline's prediction of the same work.

    .venv/bin/python benchmarks/gpu_vllm/compare.py            # the tables RESULTS-gpu.md quotes

Decode: step time per batch, graphs or eager, predicted by roofline.predict.step.price_step for the
H200 catalogue entry (vLLM's online `quantization="fp8"` priced as the fp8 format simulated from the
BF16 config). KV cache: `roofline capacity`'s token count for the engine's settings (max_model_len,
max_num_seqs, max_num_batched_tokens as vLLM logged them) against vLLM's own start-up line, and the
memory terms beside the ones vLLM reports; then the same for the start-up runs at other token budgets
(benchmarks/results/vllm_h200_activation).
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
RESULTS = REPO / "benchmarks" / "results" / "vllm_h200"
# start-up only (one short decode each): the activation peak of hybrids and a dense model at other token budgets
ACTIVATION = REPO / "benchmarks" / "results" / "vllm_h200_activation"
# start-up only: DeepSeek-V3 (MLA, 256 experts) at 2048-16384 batched tokens, hybrids with an FP8 KV cache
STARTUP = REPO / "benchmarks" / "results" / "vllm_h200_startup"
# start-up only at `vllm serve`'s budget (8,192 tokens, 1,024 sequences): the profile run's allocations traced
# (--memory-trace), and full-size MoE / hybrid models at an H100's memory (0.5211 x the H200's 139.8 GiB = 0.92 x
# 79.18 GiB)
MEMORY = REPO / "benchmarks" / "results" / "vllm_h200_memory"
# start-up only: the weights vLLM holds traced (--load-trace: gpt-oss at an H100's memory) and the dense V2 runner's
# profile run traced at 2,048 and 8,192 tokens, eager and with a cold torch.compile (and one warm start)
LOADTRACE = REPO / "benchmarks" / "results" / "vllm_h200_loadtrace"
# the H100 runs' start-ups (gpt-oss-20b, Qwen3-Next cut to 12 layers without its MTP drafts)
H100 = [REPO / "benchmarks" / "results" / "vllm_h100_gptoss", REPO / "benchmarks" / "results" / "vllm_h100_mtp"]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def engine_from_log(log: Path) -> dict:
    """The scheduler's token budget as vLLM logged it ("Chunked prefill is enabled with
    max_num_batched_tokens=N"), for results whose JSON did not record it."""
    import re

    match = re.search(r"max_num_batched_tokens=(\d+)", log.read_text()) if log.exists() else None
    return {"max_num_batched_tokens": int(match.group(1))} if match else {}


def graph_estimate(log: Path) -> dict:
    """The CUDA-graph memory vLLM estimated and subtracted before the KV cache ("Estimated CUDA graph memory: X GiB
    total"; the V2 runner logs none and subtracts none), for results whose JSON did not record it."""
    import re

    match = re.search(r"Estimated CUDA graph memory: ([\d.]+) GiB", log.read_text()) if log.exists() else None
    return {"cuda_graph_estimate_gib": float(match.group(1))} if match else {}


def compared(folder: Path = RESULTS) -> tuple[list, list]:
    """(decode rows, KV rows): every result beside the step model's and capacity's figures for it."""
    from roofline.advise.capacity import Request, capacity
    from roofline.advise.deploy import deployed_inventory
    from roofline.predict.deployment import Deployment
    from roofline.predict.hardware import get_hardware
    from roofline.predict.step import StepConfig, price_step

    from fit import ran_backend, results

    decode_rows, kv_rows = [], []
    for path, result, inventory, routing in results(folder):
        hardware = get_hardware("h100-sxm" if "H100" in result.get("gpu", "") else "h200")
        graphs = result["mode"] == "graphs"
        backend = ran_backend(result, inventory, hardware)  # a run's --moe-backend, else vLLM's default (None)
        for row in result["decode"]:
            step = price_step(inventory, hardware, StepConfig(batch=row["batch"], context=row["context"],
                                                              graphs=graphs, routing=routing(row["batch"], hardware),
                                                              backend=backend))
            decode_rows.append((path.stem, row["batch"], row["context"], row["step_ms"], step.step_ms,
                                step.breakdown().bound))
        startup = result.get("startup") or {}
        engine = result.get("engine") or engine_from_log(path.with_suffix(".log"))
        if "kv_tokens" in startup and result["decode"][0]["context"] <= 1024 and not result.get("speculative_config"):
            kv_dtype = result.get("kv_cache_dtype") or "auto"
            request = Request(max_model_len=result["max_model_len"],
                              max_num_seqs=engine.get("max_num_seqs") or max(r["batch"] for r in result["decode"]),
                              max_num_batched_tokens=engine.get("max_num_batched_tokens"),
                              gpu_memory_utilization=engine.get("gpu_memory_utilization"),
                              enforce_eager=result["mode"] == "eager", kv_cache_dtype=kv_dtype,
                              prefix_caching=False,  # the probe runs vLLM with enable_prefix_caching=False
                              backend=backend,
                              # the run's own request (its prompt and longest generation): the pool's size
                              # does not depend on it, but a request must fit max_model_len
                              prompt_len=result["decode"][0]["context"],
                              output_len=min(256, result["max_model_len"] - result["decode"][0]["context"]))
            try:
                # what vLLM holds for the run's deployment, as the commands price it (no MTP layers without mtp)
                held = deployed_inventory(inventory, Deployment(kv_cache_dtype=kv_dtype))
                ours = capacity(held, hardware, request)
                terms = {t.name: t.bytes / 2**30 for t in ours.memory_terms}
                kv_rows.append((path.stem, startup["kv_tokens"], ours.kv.tokens,
                                startup | graph_estimate(path.with_suffix(".log")), terms))
            except Exception as exc:  # noqa: BLE001 - a refusal is a row too
                kv_rows.append((path.stem, startup["kv_tokens"], None, startup, {"error": str(exc)}))
    return decode_rows, kv_rows


def main() -> int:
    decode_rows, kv_rows = compared()
    print("decode step, vLLM 0.26.0 on an H200 (measured) vs roofline's step model (predicted)")
    print(f"{'case':24}{'batch':>6}{'ctx':>6}{'measured ms':>13}{'predicted ms':>14}{'error':>8}  bound")
    errors: dict[str, list[float]] = {"graphs": [], "eager": []}
    for name, batch, context, measured, predicted, bound in decode_rows:
        error = predicted / measured - 1
        errors["eager" if "-eager" in name else "graphs"].append(abs(error))
        print(f"{name:24}{batch:>6}{context:>6}{measured:>13.3f}{predicted:>14.3f}{100 * error:>+7.0f}%  {bound}")
    for mode, values in errors.items():
        if values:
            print(f"{mode}: mean |error| {100 * statistics.mean(values):.0f}%, max {100 * max(values):.0f}% "
                  f"over {len(values)} points")
    print()
    print("KV cache tokens at start-up: vLLM's log vs roofline capacity (same max_model_len, max_num_seqs, "
          "max_num_batched_tokens), and the memory terms (GiB; graphs: the CUDA-graph memory vLLM estimated and "
          "subtracted)")
    print_kv(kv_rows)
    print()
    print("the same at other token budgets (max_num_batched_tokens in the name; 'default': vLLM's, 4096 here)")
    print_kv(compared(ACTIVATION)[1])
    print()
    print("MLA and 256 experts at 2048-16384 batched tokens (t<N> in the name), hybrids with an FP8 KV cache")
    print_kv(compared(STARTUP)[1])
    print()
    print("at vllm serve's budget (8,192 tokens, 1,024 sequences; *-h100budget: an H100's memory, 0.5211 of the "
          "H200's), the profile run traced where named *-trace")
    print_kv(compared(MEMORY)[1])
    print()
    print("the weights vLLM holds (*-load*: traced at load) and the dense V2 runner's profile run (eager, a cold "
          "torch.compile; *-warm: the same engine's second start, the compiled graph from vLLM's cache)")
    print_kv(compared(LOADTRACE)[1])
    print()
    print("on an H100 (vLLM 0.26.0, offline)")
    print_kv([row for folder in H100 for row in compared(folder)[1]])
    return 0


def print_kv(kv_rows: list) -> None:
    print(f"{'case':24}{'vLLM tokens':>13}{'roofline':>11}{'error':>8}   vLLM: act / non-torch / graphs"
          "   roofline: act / non-torch / graphs")
    for name, theirs, ours, startup, terms in kv_rows:
        if ours is None:
            print(f"{name:24}{theirs:>13,}{'refused':>11}   {terms['error'][:80]}")
            continue
        print(f"{name:24}{theirs:>13,}{ours:>11,}{100 * (ours / theirs - 1):>+7.1f}%   "
              f"{startup.get('activation_peak_gib', 0):.2f} / {startup.get('non_torch_gib', 0):.2f} / "
              f"{startup.get('cuda_graph_estimate_gib', 0):.2f}"
              f"{'':>13}{terms.get('activation_peak', 0):.2f} / {terms.get('non_torch', 0):.2f} / "
              f"{terms.get('cuda_graphs', 0):.2f}")


if __name__ == "__main__":
    sys.exit(main())
