"""Headline tok/s of every command on fixed scenarios, as JSON: the figures a change to the step model
moves. Run it on two trees and compare (the issue-23 closing note's before / after table):

    .venv/bin/python benchmarks/command_figures.py > after.json
    .venv/bin/python benchmarks/command_figures.py --tree /path/to/older/checkout > before.json
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
C = "tests/reference_configs"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", default=str(REPO), help="the checkout whose roofline runs (PYTHONPATH)")
    repo = parser.parse_args().tree
    env = dict(os.environ, PYTHONPATH=repo)

    def j(*args):
        out = subprocess.run([sys.executable, "-m", "roofline.cli", *args, "--json"], cwd=repo, env=env,
                             capture_output=True, text=True)
        return json.loads(out.stdout) if out.returncode in (0, 3) else {"error": out.stderr.strip()[-200:]}

    rows = {}
    a = j("audit", f"{C}/Qwen__Qwen3-8B", "--hardware", "h100-sxm", "--context", "4096")
    rows["audit Qwen3-8B BF16 h100 4k expected"] = a["expected_tok_s"]
    p = j("plan", f"{C}/Qwen__Qwen3-8B", "--hardware", "h100-sxm", "--context", "4096", "--formats", "bf16,fp8", "--recipe", "default")
    for r in p["recommendations"]:
        rows[f"plan Qwen3-8B h100 4k {r['format']} 1-stream"] = r["single_stream_tok_s"]
    p = j("plan", f"{C}/Qwen__Qwen3-8B", "--hardware", "h100-sxm", "--context", "4096", "--formats", "bf16", "--recipe", "default", "--tp", "2")
    rows["plan --tp 2 Qwen3-8B BF16 h100 4k"] = p["top_pick"]["single_stream_tok_s"]
    s = j("plan", f"{C}/Qwen__Qwen3-8B", "--hardware", "h100-sxm", "--context", "4096", "--gpus", "2")
    rows["plan --gpus 2 Qwen3-8B BF16 h100 4k TP2"] = next(t["single_stream_tok_s"] for t in s["topologies"] if t["label"] == "TP2")
    p = j("plan", "examples/Qwen3-8B", "--formats", "fp8,nvfp4-w4a16,nvfp4-w4a4,int4-awq", "--recipe", "default")
    for r in p["recommendations"]:
        rows[f"plan Qwen3-8B gb10 4k {r['format']} {r['backend']}"] = r["single_stream_tok_s"]
    p = j("plan", "examples/Qwen3-8B", "--formats", "fp8,nvfp4-w4a16", "--recipe", "default", "--tp", "2")
    for r in p["recommendations"]:
        rows[f"plan --tp 2 Qwen3-8B gb10 {r['format']}"] = r["single_stream_tok_s"]
    p = j("plan", f"{C}/nvidia__NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "--formats", "nvfp4-w4a16,nvfp4-w4a4", "--recipe", "default", "--concurrency", "16")
    for r in p["recommendations"]:
        rows[f"plan Nemotron-3-Nano gb10 c16 {r['backend']} aggregate"] = r["aggregate_tok_s"]
    for model, hw in (("examples/Qwen3.6-35B-A3B-NVFP4", "gb10"), (f"{C}/Qwen__Qwen3-30B-A3B", "h200"), (f"{C}/nvidia__NVIDIA-Nemotron-3-Nano-30B-A3B-NVFP4", "gb10"), (f"{C}/Qwen__Qwen3-8B", "gb10")):
        a = j("audit", model, "--hardware", hw)
        name = model.split("/")[-1]
        rows[f"audit {name} {hw} expected"] = a["expected_tok_s"]
        rows[f"audit {name} {hw} eager"] = a["cuda_graph"]["eager_tok_s"]
    c = j("capacity", f"{C}/Qwen__Qwen3-8B", "--hardware", "h100-sxm", "--concurrency", "1,16,64")
    for pt in c["curve"]:
        rows[f"capacity Qwen3-8B h100 c{pt['concurrency']} aggregate"] = pt["aggregate_tok_s"]
    c = j("capacity", f"{C}/Qwen__Qwen3-30B-A3B", "--hardware", "gb10", "--concurrency", "1,16")
    for pt in c["curve"]:
        rows[f"capacity Qwen3-30B-A3B gb10 c{pt['concurrency']} aggregate"] = pt["aggregate_tok_s"]
    s = j("plan", f"{C}/Qwen__Qwen3.6-35B-A3B", "--config-only", "--boxes", "2", "--context", "4096")
    for t in s["topologies"]:
        if not t["refused_reason"]:
            rows[f"plan --boxes 2 Qwen3.6 gb10 {t['label']}"] = t["single_stream_tok_s"]
    d = j("doctor", "--capture", "examples/doctor/qwen3-next-nvfp4-eager.capture.json", "--hardware", "gb10")
    rows["doctor capture predicted"] = d["predicted_tok_s"]; rows["doctor capture best"] = d["best_tok_s"]
    cmp = j("compare", "examples/compare/Qwen3-30B-A3B", "examples/compare/Qwen3-30B-A3B-FP8", "examples/compare/Qwen3-30B-A3B-NVFP4", "--context", "4096", "--kv-cache-dtype", "fp8")
    for r in cmp["rows"]:
        rows[f"compare {r['name']} expected"] = r["expected_tok_s"]
    json.dump(rows, sys.stdout, indent=0)


if __name__ == "__main__":
    main()
