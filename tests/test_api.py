"""The Python API (roofline/api.py): the README's example runs as written, and its answers are the
CLI's, priced by the same code for the same deployment."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import roofline
from roofline.errors import RooflineError

REPO = Path(__file__).resolve().parents[1]


def readme_example() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## From Python"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_readme_example_runs():
    proc = subprocess.run([sys.executable, "-c", readme_example()], capture_output=True, text=True, timeout=300,
                          cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "tok/s of a" in lines[0] and "KV tokens" in lines[1] and lines[2].startswith("vllm serve")
    assert lines[3].startswith("True ")


def test_the_api_and_the_cli_answer_alike():
    api = roofline.audit("examples/Qwen3-8B", hardware="gb10", kv_cache_dtype="fp8", enforce_eager=True,
                         tensor_parallel_size=1).to_json()
    cli = json.loads(subprocess.run([sys.executable, "-m", "roofline.cli", "audit", "examples/Qwen3-8B", "--hardware",
                                     "gb10", "--kv-cache-dtype", "fp8", "--enforce-eager", "-tp", "1", "--json"],
                                    capture_output=True, text=True, cwd=REPO, check=True).stdout)
    assert api["expected_tok_s"] == pytest.approx(cli["expected_tok_s"], rel=1e-12)
    assert api["step"] == cli["step"]


def test_a_bad_argument_is_the_clis_one_line():
    with pytest.raises(RooflineError, match="not a vLLM argument"):
        roofline.audit("examples/Qwen3-8B", tensor_paralel_size=2)
    with pytest.raises(RooflineError, match="out of range"):
        roofline.capacity("examples/Qwen3-8B", gpu_memory_utilization=1.5)
    with pytest.raises(RooflineError, match="give True or False"):
        roofline.audit("examples/Qwen3-8B", enforce_eager="yes")


def test_import_roofline_stays_light():
    proc = subprocess.run([sys.executable, "-c", "import sys, roofline; print(roofline.__version__); "
                           "print(any(m in sys.modules for m in ('torch', 'transformers', 'vllm', 'roofline.api')))"],
                          capture_output=True, text=True, check=True)
    assert proc.stdout.split() == [roofline.__version__, "False"]
