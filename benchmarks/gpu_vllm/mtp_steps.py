"""vLLM's MTP decode step measured beside the step model's price of it: one table from the probe runs in
benchmarks/results/vllm_h100_mtp/ (vLLM 0.26.0, Qwen3-Next-80B-A3B cut to 12 layers plus its one MTP layer,
dummy BF16 weights, one stream, 1024-token prompts; 0-4 draft tokens; the device gave an H100 for a call that
named nvidia-h200, so these runs check the model out of sample and fit nothing).

    .venv/bin/python benchmarks/gpu_vllm/mtp_steps.py

With dummy weights no draft is accepted (mean acceptance length 1.0): a step is one verify of 1 + n tokens
and its n drafts, and yields one token, so the step time is the generation time per token. Columns: the
median step (five pairs of 16- and 112-token generations), the GPU's busy time per step and kernels per step
(torch profiler over one step), the host's launches outside CUDA graphs per step, and `roofline audit
--hardware h100-sxm` of the same config with the same speculation (acceptance 0)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RUNS = REPO / "benchmarks" / "results" / "vllm_h100_mtp"
CONFIG = REPO / "benchmarks" / "gpu_vllm" / "configs" / "Qwen3-Next-80B-A3B-12layers-mtp"


def predicted_step_ms(drafts: int, eager: bool) -> float:
    args = [sys.executable, "-m", "roofline.cli", "audit", str(CONFIG), "--hardware", "h100-sxm", "--context", "1024",
            "--json"] + (["--enforce-eager"] if eager else [])
    if drafts:
        args += ["--speculative-config", json.dumps({"method": "mtp", "num_speculative_tokens": drafts}),
                 "--acceptance-rate", "0"]
    step = json.loads(subprocess.run(args, capture_output=True, text=True, check=True, cwd=REPO).stdout)["step"]
    return step["step_ms"]


def main() -> None:
    print(f"{'run':>4} {'drafts':>6} {'mode':>6} {'step ms':>8} {'GPU busy':>9} {'kernels':>8} {'host launches':>14} "
          f"{'predicted':>10} {'error':>6}")
    for path in sorted(RUNS.glob("*.json")):
        run = json.loads(path.read_text())
        drafts = (run.get("speculative_config") or {}).get("num_speculative_tokens", 0)
        row = run["decode"][0]
        profile = (run.get("profiles") or [{}])[0]
        launches = sum(v for k, v in (profile.get("host_launches_per_step") or {}).items() if "Graph" not in k)
        predicted = predicted_step_ms(drafts, run["mode"] == "eager")
        print(f"{path.stem:>4} {drafts:>6} {run['mode']:>6} {row['step_ms']:>8.2f} "
              f"{profile.get('kernel_busy_ms_per_step', float('nan')):>9.2f} {profile.get('kernels_per_step', 0):>8.0f} "
              f"{launches:>14.0f} {predicted:>10.2f} {100 * (predicted / row['step_ms'] - 1):>+5.0f}%")


if __name__ == "__main__":
    main()
