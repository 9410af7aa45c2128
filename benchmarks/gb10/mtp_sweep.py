"""The published GB10 MTP sweep (benchmarks/gb10/mtp_sweep.csv) beside the step model's prediction from
vLLM-reported acceptance, converted once (roofline/predict/speculation.py), through the same command a
user runs:  .venv/bin/python benchmarks/gb10/mtp_sweep.py [--context N]

Prints one row per number of draft tokens: measured, predicted, error. Out of sample: nothing of the
step model was fitted to these runs. The MTP head is priced as the checkpoint holds it (every module
read once per draft token); the publishers' context is not stated, 1024 tokens by default."""
from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "examples" / "Qwen3.6-35B-A3B-NVFP4"


def predicted(tokens: int, rate: str, context: int) -> float:
    args = [sys.executable, "-m", "roofline.cli", "audit", str(MODEL), "--hardware", "gb10", "--context", str(context),
            "--json"]
    if tokens:
        args += ["--speculative-config", json.dumps({"method": "mtp", "num_speculative_tokens": tokens}),
                 "--acceptance-rate", rate]
    proc = subprocess.run(args, capture_output=True, text=True, check=True, cwd=REPO)
    return json.loads(proc.stdout)["expected_tok_s"]


def sweep(context: int = 1024) -> list[dict]:
    rows = []
    with open(Path(__file__).with_name("mtp_sweep.csv"), newline="") as handle:
        for row in csv.DictReader(handle):
            tokens = int(row["num_speculative_tokens"])
            tok_s = predicted(tokens, row["vllm_acceptance_rate"], context)
            measured = float(row["decode_tok_s_single_stream"])
            rows.append({"draft_tokens": tokens, "acceptance": row["vllm_acceptance_rate"] or "-",
                         "measured": measured, "predicted": tok_s, "error": tok_s / measured - 1})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--context", type=int, default=1024)
    rows = sweep(parser.parse_args().context)
    print(f"{'drafts':>6}  {'accepted/drafted':>16}  {'measured':>8}  {'predicted':>9}  {'error':>6}")
    for r in rows:
        print(f"{r['draft_tokens']:>6}  {r['acceptance']:>16}  {r['measured']:>8.1f}  {r['predicted']:>9.1f}  "
              f"{100 * r['error']:>+5.0f}%")
    print(f"mean |error| {100 * sum(abs(r['error']) for r in rows) / len(rows):.1f}%")


if __name__ == "__main__":
    main()
