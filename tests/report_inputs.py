"""Real audits for the report tests: tiny checkpoints written by real libraries, audited by the
real audit path. Uses the suite's `checkpoint(name)` fixture (tests/conftest.py) when it is there;
without it, builds the unquantized ones with transformers in a temporary folder."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

# the audit JSON of each checkpoint, computed once per test session
_AUDITS: dict[str, dict] = {}

TINY = dict(vocab_size=1024, hidden_size=128, intermediate_size=384, num_hidden_layers=4,
            num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=1024)
TINY_NEXT = dict(TINY, full_attention_interval=4, linear_conv_kernel_dim=4, linear_key_head_dim=32,
                 linear_value_head_dim=32, linear_num_key_heads=2, linear_num_value_heads=4,
                 moe_intermediate_size=64, shared_expert_intermediate_size=64, num_experts=8,
                 num_experts_per_tok=2, decoder_sparse_step=1)


def transformers_checkpoint(name: str, root: Path) -> Path:
    """A tiny random model saved by transformers' save_pretrained (unquantized ones only)."""
    out = root / name
    if (out / "config.json").is_file():
        return out
    import torch
    import transformers

    if name == "qwen3_dense":
        config = transformers.Qwen3Config(**TINY)
        model_class = transformers.Qwen3ForCausalLM
    elif name == "qwen3_next":
        config = transformers.Qwen3NextConfig(**TINY_NEXT)
        model_class = transformers.Qwen3NextForCausalLM
    else:
        pytest.skip(f"{name} needs the fixture checkpoints of tests/conftest.py")
    torch.manual_seed(0)
    model = model_class(config).to(torch.bfloat16)
    model.save_pretrained(out)
    return out


def checkpoint_factory(request, tmp_path_factory):
    try:
        return request.getfixturevalue("checkpoint")
    except pytest.FixtureLookupError:
        root = tmp_path_factory.mktemp("report-checkpoints")
        return lambda name: transformers_checkpoint(name, root)


def audit_json(path: Path) -> dict:
    """`roofline audit PATH --json`, run as a user runs it."""
    key = str(path)
    if key not in _AUDITS:
        proc = subprocess.run([sys.executable, "-m", "roofline.cli", "audit", key, "--json"],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        _AUDITS[key] = json.loads(proc.stdout)
    return json.loads(json.dumps(_AUDITS[key]))  # a fresh copy: tests may change it


# Test double, named as such, until `roofline plan --json` exists: ranked plan rows in the shape
# that command writes. The report only lays them out, so their figures merely need to be
# consistent with the audit they extend.
def plan_from(audit: dict) -> dict:
    bytes_per_token = audit["bytes_per_token"]
    bandwidth = audit["hardware"]["bandwidth_gbps"] * 1e9
    efficiency = audit["efficiency"]["value"]
    rows = []
    for fmt, recipe, scale in (("nvfp4-w4a16", "experts + attention", 0.6), ("fp8", "all linear", 0.8),
                               ("bf16", "as is", 1.0)):
        per_token = bytes_per_token * scale
        rows.append({"format": fmt, "recipe": recipe, "bytes_per_token": per_token,
                     "ceiling_tok_s": bandwidth / per_token, "expected_tok_s": efficiency * bandwidth / per_token})
    return {"schema": "roofline.plan/1", "rows": rows}


def validation_from(audit: dict, measured_share: float = 0.7) -> list[dict]:
    """A real validation record row (roofline.validate + roofline.records, as `roofline validate`
    writes it) for a measurement at measured_share of the ceiling."""
    from roofline.records import record_row
    from roofline.validate import validate

    result = validate(audit, audit["ceiling_tok_s"] * measured_share)
    return [record_row(result, measured_by="test", audit=audit)]
