"""The measured points the prefill and load fits rest on, read from their raw files:

- H200: `vllm bench serve` result files of real vLLM 0.26.0 on the lent GPU (benchmarks/results/vllm_h200_serving,
  made by benchmarks/gpu_vllm/run_serving.sh -> serve_load.py): each case's NAME.json names the config and the
  serve flags, NAME-ttft.json.gz one request at a time at each prompt length, NAME-rate-R / NAME-burst-N open
  loads with every request's start time, lengths, TTFT and inter-token latencies.
- GB10: the published first-token runs of the fit set (benchmarks/gb10/results_prefill.csv, a copy of the
  project's fit_prefill.csv with its sources): llama-benchy's TTFR (what vllm bench serve calls TTFT) at the
  prompt tokens the server received (prompt_tokens_est).

Each TTFT point is the fastest of its repeats: the first request of a new size can pay a one-time JIT compile
(Triton MoE / GDN kernels for a new token count: 0.4-1.3 s in these runs), which a server pays once.
"""
from __future__ import annotations

import csv
import gzip
import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
H200 = REPO / "benchmarks" / "results" / "vllm_h200_serving"
H200_HELD_OUT = REPO / "benchmarks" / "results" / "vllm_h200_heldout"
H200_HOST = REPO / "benchmarks" / "results" / "vllm_h200_host"  # a later machine start's (the host's time per step)
GB10_PREFILL = REPO / "benchmarks" / "gb10" / "results_prefill.csv"

# the H200 cases: where each config is, the vLLM flags it was served with, its family for leave-one-out
CASES = {
    "qwen3-8b": ("tests/reference_configs/Qwen__Qwen3-8B", "", "dense bf16"),
    "qwen3-8b-fp8": ("tests/reference_configs/Qwen__Qwen3-8B", "--quantization fp8", "dense fp8"),
    "qwen3-30b-a3b": ("tests/reference_configs/Qwen__Qwen3-30B-A3B", "", "moe bf16"),
    "qwen3-30b-a3b-nvfp4-8l": ("benchmarks/gpu_vllm/configs/Qwen3-30B-A3B-NVFP4-8layers", "", "moe nvfp4"),
    "gpt-oss-20b": ("tests/reference_configs/openai__gpt-oss-20b", "", "moe mxfp4"),
    "qwen3-next-12l": ("benchmarks/gpu_vllm/configs/Qwen3-Next-80B-A3B-12layers", "", "hybrid gdn"),
    "nemotron-nano-13l": ("benchmarks/gpu_vllm/configs/Nemotron-3-Nano-13layers", "", "hybrid mamba"),
}

# cases measured to check the model, never fitted: the step budget (--max-num-batched-tokens) chunking a prompt
# (vllm_h200_serving), and two models of families no fit saw, run after the fit was frozen (vllm_h200_heldout,
# 2026-11-27): Llama-3.1-8B (dense BF16) and Mixtral-8x7B cut to 8 layers (8 experts of 14,336, top-2)
HELD_OUT = {
    "qwen3-8b-b2048": ("tests/reference_configs/Qwen__Qwen3-8B", "--max-num-batched-tokens 2048", "dense bf16"),
    "llama31-8b": ("tests/reference_configs/meta-llama__Llama-3.1-8B-Instruct", "", "dense bf16"),
    "mixtral-8x7b-8l": ("benchmarks/gpu_vllm/configs/Mixtral-8x7B-8layers", "", "moe bf16"),
    # a later machine start (vllm_h200_host): the same Mixtral cut again, and a 2-layer Qwen3-0.6B whose steps are
    # the engine's host time (launch.toml [step_host] was fitted on its closed-loop runs, not on these)
    "mixtral-8x7b-8l-host": ("benchmarks/gpu_vllm/configs/Mixtral-8x7B-8layers", "", "moe bf16"),
    "qwen3-06b-2l-load": ("benchmarks/gpu_vllm/configs/Qwen3-0.6B-2layers", "", "dense bf16"),
}


@dataclass
class TtftPoint:
    device: str  # hardware key
    model: str  # the config folder (or hub id of a GB10 run)
    case: str
    family: str
    serve: str  # the vLLM flags beyond the harness's own
    prompt: int
    ttft_s: float  # the fastest of the repeats
    runs: list = field(default_factory=list)
    source: str = ""


def _load(path: Path) -> dict:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        return json.load(fh)


def h200_ttft(cases: dict | None = None) -> list[TtftPoint]:
    """One request at a time at each prompt length, of `cases` (default: the fitted CASES)."""
    out = []
    for case, (config, flags, family) in (CASES if cases is None else cases).items():
        path = next((d / f"{case}-ttft.json.gz" for d in (H200, H200_HELD_OUT) if (d / f"{case}-ttft.json.gz").exists()),
                    None)
        if path is None:
            continue
        data = _load(path)
        by = defaultdict(list)
        for n, t in zip(data["input_lens"], data["ttfts"]):
            by[n].append(t)
        for n, values in sorted(by.items()):
            out.append(TtftPoint("h200", config, case, family, flags, n, min(values), values,
                                 str(path.relative_to(REPO))))
    return out


def h200_loads() -> list[tuple[str, str, dict]]:
    """(case, file name, the vllm bench serve result with every request) of the open-loop runs."""
    out = []
    paths = [p for d in (H200, H200_HELD_OUT, H200_HOST) for pattern in ("*-rate-*.json.gz", "*-burst-*.json.gz")
             for p in sorted(d.glob(pattern))]
    for path in paths:
        case = path.name.split("-rate-")[0].split("-burst-")[0]
        out.append((case, path.name, _load(path)))
    return out


# the published runs' models, as the project has their configs (tests/reference_configs), and their vLLM flags
GB10_MODELS = {
    "openai/gpt-oss-20b": ("tests/reference_configs/openai__gpt-oss-20b", "--max-num-batched-tokens 8192", "moe mxfp4"),
    "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": ("tests/reference_configs/nvidia__NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",
                                                   "--max-num-batched-tokens 8192", "hybrid mamba bf16"),
    "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4": ("tests/reference_configs/nvidia__NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4",
                                                    "--max-num-batched-tokens 8192 --moe-backend marlin "
                                                    "--linear-backend marlin", "hybrid mamba nvfp4"),
    "Qwen/Qwen3.6-35B-A3B": ("tests/reference_configs/Qwen__Qwen3.6-35B-A3B", "", "hybrid gdn bf16"),
}


def gb10_ttft() -> list[TtftPoint]:
    """One request at a time (concurrency 1), the suite's first test left out where the file marks it an
    anomaly (the server's first requests after start-up)."""
    out = []
    with GB10_PREFILL.open() as fh:
        for row in csv.DictReader(fh):
            if row["concurrency"] != "1" or row["model"] not in GB10_MODELS or "ANOMALY" in row["notes"]:
                continue
            config, flags, family = GB10_MODELS[row["model"]]
            out.append(TtftPoint("gb10", config, row["model"], family, f"--kv-cache-dtype {row['kv_dtype']} " + flags,
                                 int(row["prompt_tokens_est"]), float(row["ttfr_ms"]) / 1e3,
                                 [float(row["ttfr_ms"]) / 1e3], f"{row['source']} ({row['test']})"))
    return out


def gb10_bursts() -> list[dict]:
    """The published bursts (N requests sent at once): every request's mean TTFR, for the load model."""
    out = []
    with GB10_PREFILL.open() as fh:
        for row in csv.DictReader(fh):
            if row["concurrency"] == "1" or row["model"] not in GB10_MODELS:
                continue
            out.append(row)
    return out
