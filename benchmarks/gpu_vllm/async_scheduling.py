"""What vLLM's asynchronous scheduling buys, measured on real vLLM beside the step model's price: with it on the
host forms step n + 1 while the GPU runs step n (a step takes the longer of the two); off (--no-async-scheduling,
and vLLM 0.26's default for a draft model or ngram speculation, or under Ray's executor) the engine's host time
per step (launch.toml [step_host.*]) adds to the GPU's. Nothing here is fitted: the host's step is the one
measured on a 2-layer model (benchmarks/serving/step_host.py).

    .venv/bin/python benchmarks/gpu_vllm/async_scheduling.py

Runs: benchmarks/results/vllm_h200_async/ (H200, one machine start, 2026-12-02, vLLM 0.26.0, dummy weights):
served (`vllm serve`, benchmarks/gpu_vllm/run_serving.sh, `vllm bench serve --max-concurrency N`, 32-token
prompts, 256 tokens out: the mean time per output token is the step) Qwen3-8B and Qwen3-0.6B cut to 2 layers
with --async-scheduling and --no-async-scheduling; offline (benchmarks/gpu_vllm/probe.py --async-scheduling=on|off,
1,024-token prompts) Qwen3-8B. Predicted: `roofline audit CONFIG --hardware h200 --batch N --context C
--[no-]async-scheduling --json`'s step."""
from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from spec_steps import audited_step_ms  # noqa: E402
RUNS = REPO / "benchmarks" / "results" / "vllm_h200_async"
SERVED = {"q8": "tests/reference_configs/Qwen__Qwen3-8B", "q06b2l": "benchmarks/gpu_vllm/configs/Qwen3-0.6B-2layers"}
SERVED_CONTEXT = 32 + 128  # the closed-loop runs' prompt and half their output: the mean context of a step


def predicted_step_ms(config: str, batch: int, context: int, on: bool) -> float:
    return audited_step_ms(config, "h200", batch, context, "--async-scheduling" if on else "--no-async-scheduling")


def rows() -> list[dict]:
    out = []
    for model, config in SERVED.items():
        for on in (True, False):
            for path in sorted(RUNS.glob(f"{model}-async-{'on' if on else 'off'}-conc-*.json.gz")):
                with gzip.open(path, "rt") as fh:
                    run = json.load(fh)
                batch = int(run["max_concurrency"])
                out.append({"run": path.name.removesuffix(".json.gz"), "how": "served", "model": model,
                            "async": on, "batch": batch, "measured_ms": float(run["mean_tpot_ms"]),
                            "predicted_ms": predicted_step_ms(config, batch, SERVED_CONTEXT, on)})
    for path in sorted(RUNS.glob("q8-r0-*.json")):
        run = json.loads(path.read_text())
        for row in run["decode"]:
            out.append({"run": path.stem, "how": "offline", "model": "q8", "async": run["async_scheduling"],
                        "batch": row["batch"], "measured_ms": row["step_ms"],
                        "predicted_ms": predicted_step_ms(run["config"], row["batch"], row["context"],
                                                          run["async_scheduling"])})
    return out


def main() -> None:
    table = rows()
    print(f"{'run':<26} {'how':<8} {'async':<5} {'batch':>5} {'measured':>9} {'predicted':>9} {'error':>6}")
    for r in table:
        print(f"{r['run']:<26} {r['how']:<8} {'on' if r['async'] else 'off':<5} {r['batch']:>5} "
              f"{r['measured_ms']:>9.2f} {r['predicted_ms']:>9.2f} {100 * (r['predicted_ms'] / r['measured_ms'] - 1):>+5.0f}%")
    print("\nwhat turning it off costs a step (off - on, same model, batch and way of running):")
    print(f"{'model':<8} {'how':<8} {'batch':>5} {'measured':>9} {'predicted':>9}")
    for off in (r for r in table if not r["async"]):
        on = next((r for r in table if r["async"] and (r["model"], r["how"], r["batch"]) ==
                   (off["model"], off["how"], off["batch"])), None)
        if on:
            print(f"{off['model']:<8} {off['how']:<8} {off['batch']:>5} "
                  f"{off['measured_ms'] - on['measured_ms']:>+9.2f} {off['predicted_ms'] - on['predicted_ms']:>+9.2f}")


if __name__ == "__main__":
    main()
