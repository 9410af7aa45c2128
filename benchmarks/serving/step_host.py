"""The engine's host time per step, measured under real vLLM serving: a model whose GPU step is ~0.3 ms
(Qwen3-0.6B cut to 2 layers, benchmarks/gpu_vllm/configs/Qwen3-0.6B-2layers) served by `vllm serve` on the
H200 box and driven by `vllm bench serve --max-concurrency N` (256 tokens out: benchmarks/results/vllm_h200_host,
RESULTS-gpu.md has the commands). Each run's time per output token is then what the engine's host takes a step
at a batch of N (scheduling, input preparation, sampling bookkeeping, output processing): with async scheduling
(vLLM's default) the host forms step n + 1 while the GPU runs step n, so a step takes the longer of the two, and
here the GPU's is the shorter. Four server starts on one machine: N = 1-256 with 32-token prompts, N = 48 (32),
N = 8 and 64 with 1,024- and 3,072-token prompts. The same batch took up to 1.6x longer on one start than on
another (1.60 / 2.25 / 2.51 ms at N = 8): the host's speed is this figure's uncertainty, not the prompt length.

Fitted over every run: fixed + per request x N, least squares on the relative error. The x86 row is the measurement; the Grace
and unknown hosts' rows carry it through launch.toml's host cost per eager kernel (the only measure of those
hosts' Python speed the project has), labelled estimates.

    .venv/bin/python benchmarks/serving/step_host.py            # the fit and launch.toml's rows
    .venv/bin/python benchmarks/serving/step_host.py --check    # exit 1 when launch.toml's rows differ
"""
from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(REPO))

from roofline.data import load_table  # noqa: E402

RESULTS = REPO / "benchmarks" / "results" / "vllm_h200_host"
CASES = ("qwen3-06b-2l", "qwen3-06b-2l-load", "qwen3-06b-2l-ctx1k", "qwen3-06b-2l-ctx3k")  # one server start each
SOURCE = ("measured: vLLM 0.26.0 served (`vllm serve`, CUDA graphs, async scheduling) on the x86 host (16 cores) "
          "of roofline's H200 benchmark runs, Qwen3-0.6B cut to 2 layers (a GPU step of ~0.3 ms) under `vllm bench serve --max-concurrency "
          "N`, N = 1-256, prompts of 32-3,072 tokens and 256 tokens out, four server starts (one batch took up to 1.6x "
          "longer on one start than another): the time per output token is the host's step "
          "(benchmarks/serving/step_host.py -> benchmarks/results/vllm_h200_host, 2026-11-27)")


def points() -> list[tuple[str, int, float]]:
    """(run, batch, the run's mean time per output token in ms) of every closed-loop run."""
    out = []
    for case in CASES:
        for path in sorted(RESULTS.glob(f"{case}-conc-*.json.gz")):
            with gzip.open(path, "rt") as fh:
                run = json.load(fh)
            out.append((path.name.removesuffix(".json.gz"), int(run["max_concurrency"]), float(run["mean_tpot_ms"])))
    if len(out) < 3:
        raise SystemExit(f"{RESULTS}: fewer than 3 closed-loop runs")
    return sorted(out, key=lambda p: (p[1], p[0]))


def fit(data: list[tuple[str, int, float]]) -> tuple[float, float]:
    """(fixed us, us per request) minimizing the relative error."""
    batch = np.array([b for _, b, _ in data], dtype=float)
    ms = np.array([m for _, _, m in data])
    design = np.vstack([np.ones_like(batch), batch]).T / ms[:, None]
    fixed, per_request = np.linalg.lstsq(design, np.ones_like(ms), rcond=None)[0]
    return float(fixed * 1e3), float(per_request * 1e3)


def rows(fixed_us: float, per_request_us: float) -> dict[str, dict]:
    """launch.toml's [step_host.*] rows: the x86 host measured, the others through the eager host cost ratio."""
    hosts = load_table("launch")["host"]
    x86 = hosts["x86_server"]["host_us_per_kernel"]
    out = {"x86_server": {"fixed_us": round(fixed_us), "per_request_us": round(per_request_us, 1),
                          "kind": "measured", "source": SOURCE}}
    for host in ("grace_arm", "unknown"):
        ratio = hosts[host]["host_us_per_kernel"] / x86
        out[host] = {"fixed_us": round(fixed_us * ratio), "per_request_us": round(per_request_us * ratio, 1),
                     "kind": "estimate",
                     "source": f"the x86 host's measured step (launch.toml [step_host.x86_server]) x {ratio:.3f}, this "
                               f"host's eager cost per kernel over the x86 host's ([host.{host}] / [host.x86_server]): "
                               "no step of this host measured"}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when launch.toml's rows differ from the fit")
    args = parser.parse_args()
    data = points()
    fixed_us, per_request_us = fit(data)
    print(f"{'run':34}{'batch':>6}{'measured ms':>13}{'fitted ms':>11}{'error':>8}")
    for run, batch, ms in data:
        fitted = (fixed_us + per_request_us * batch) / 1e3
        print(f"{run:34}{batch:>6}{ms:>13.3f}{fitted:>11.3f}{100 * (fitted / ms - 1):>+7.1f}%")
    print(f"\nfixed {fixed_us:.0f} us + {per_request_us:.1f} us per request a step")
    expected = rows(fixed_us, per_request_us)
    table = load_table("launch").get("step_host", {})
    stale = [host for host, row in expected.items()
             if {k: table.get(host, {}).get(k) for k in ("fixed_us", "per_request_us", "kind")} !=
             {k: row[k] for k in ("fixed_us", "per_request_us", "kind")}]
    for host, row in expected.items():
        print(f"\n[step_host.{host}]\nfixed_us = {row['fixed_us']}\nper_request_us = {row['per_request_us']}\n"
              f"kind = \"{row['kind']}\"\nsource = \"{row['source']}\"")
    if stale:
        print(f"\nlaunch.toml's [step_host.*] rows differ from the fit: {', '.join(stale)}", file=sys.stderr)
        return 1 if args.check else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
