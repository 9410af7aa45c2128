"""The two-GPU benchmarks (issue 17) run on this CPU the way they run on the GPU host: one process
per rank under torchrun, gloo instead of NCCL. Checks the collectives give the right sum, the
JSON carries what RESULTS-gpu.md reads, and the TP=2 decode layers sample one token on every rank."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]


def test_allreduce_benchmark_on_gloo(tmp_path):
    proc = subprocess.run([*TORCHRUN, "benchmarks/gpu_allreduce.py", "--device", "cpu", "--out", str(tmp_path),
                           "--sizes", "4096,65536", "--iters", "5", "--trials", "2"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((tmp_path / "allreduce_nccl.json").read_text())
    assert result["backend"] == "gloo" and result["ranks"] == 2
    assert [row["bytes"] for row in result["rows"]] == [4096, 65536]
    assert all(row["eager_us"] > 0 and row["graph_us"] is None for row in result["rows"])


def test_tp2_decode_layers_on_gloo():
    proc = subprocess.run([*TORCHRUN, "benchmarks/gpu_decode_eager_vs_graph.py", "--smoke",
                           "--models", "dense_qwen3_8b,moe_qwen3_30b_a3b"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [line for line in proc.stdout.splitlines() if " tp=2 ok " in line]
    assert len(lines) == 2, proc.stdout
    # each rank holds half of every split weight: the dense model's TP=2 bytes are about half of TP=1's
    single = subprocess.run([sys.executable, "benchmarks/gpu_decode_eager_vs_graph.py", "--smoke",
                             "--models", "dense_qwen3_8b"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert single.returncode == 0, single.stderr[-3000:]
    def weights(line: str) -> int:  # "<model> <path> tp=N ok <token> {'weights': ..., ...}"
        return ast.literal_eval(line.split(" ok ", 1)[1].split(" ", 1)[1])["weights"]

    one = weights(single.stdout.splitlines()[-1])
    two = weights(lines[0])
    assert 0.49 < two / one < 0.51
