"""Tensor parallelism as vLLM allows it (issue 12 item 5): vLLM's own divisibility rules
(roofline/data/parallel.toml), KV-head replication past the KV-head count, and a plan that never
prints a `vllm serve` line vLLM or the hardware table would refuse. The attention-head rule is
checked against vLLM itself (ModelConfig.verify_with_parallel_config, no engine)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from roofline.model.roles import role_properties
from roofline.predict.hardware import get_hardware
from roofline.predict.links import link_refusal, named_link
from roofline.predict.step import StepConfig, price_step
from roofline.predict.topology import Topology, tensor_parallel_placement, tp_refusal
from roofline.predict.traffic import Scenario, compute_traffic

REFERENCE = Path(__file__).parent / "reference_configs"


def config(name: str, **change) -> dict:
    return json.loads((REFERENCE / name / "config.json").read_text()) | change


@pytest.mark.parametrize("name, change, tp, expected", [
    ("Qwen__Qwen3-8B", {}, 3, "Total number of attention heads (32) must be divisible by tensor parallel size (3)."),
    ("Qwen__Qwen3-8B", {}, 4, None),
    ("Qwen__Qwen3-8B", {}, 16, None),  # 8 KV heads: 16 ranks replicate them, which vLLM allows
    ("Qwen__Qwen3-8B", {"num_key_value_heads": 6, "num_attention_heads": 48}, 4, "6 KV heads cannot be split over 4"),
    ("Qwen__Qwen3-8B", {"num_key_value_heads": 3, "num_attention_heads": 48}, 8, "3 KV heads cannot be split over 8"),
    ("mistralai__Mixtral-8x7B-v0.1", {}, 16, "Tensor parallel size 16 is greater than the number of experts 8."),
    ("Qwen__Qwen3-Next-80B-A3B-Thinking", {"linear_num_value_heads": 24}, 16,
     "24 linear-attention value heads are not divisible by tensor parallel size 16"),
    ("Qwen__Qwen3-Next-80B-A3B-Thinking", {}, 8, None),
    ("Qwen__Qwen3-30B-A3B", {"moe_intermediate_size": 770}, 4, "Expert intermediate size 770 is not divisible"),
])
def test_tp_rules(name, change, tp, expected):
    reason = tp_refusal(config(name, **change), tp)
    assert (reason is None) if expected is None else (expected in reason), reason


def test_tp_rules_read_text_config():
    gemma = config("google__gemma-4-26B-A4B")
    heads = gemma["text_config"]["num_attention_heads"]
    bad = next(tp for tp in range(2, 64) if heads % tp)
    assert f"attention heads ({heads})" in tp_refusal(gemma, bad)


def test_kv_heads_are_replicated_past_their_count():
    """Qwen3-30B-A3B has 4 KV heads: at TP=8 each rank holds one whole KV head (the cache and the
    k / v projections), not an eighth of the four."""
    from roofline.sources.config import load_config_only

    inventory = load_config_only(str(REFERENCE / "Qwen__Qwen3-30B-A3B"))
    hardware = get_hardware("h100-sxm")
    traffic = compute_traffic(inventory, Scenario(context=4096))
    split4, split8 = (price_step(inventory, hardware, StepConfig(
        context=4096, topology=Topology(tp=n), placement=tensor_parallel_placement(hardware, n))) for n in (4, 8))
    kv_projections = sum(m.nbytes for m in inventory.modules if m.name.endswith((".k_proj", ".v_proj")))
    replicated = sum(m.nbytes for m in inventory.modules if not role_properties(m.role).sharded)
    assert kv_projections > 0 and replicated > 0
    # from 4 to 8 ranks the k / v projections stay at a quarter per rank; everything else sharded halves
    other_sharded_4 = split4.weight_bytes_per_rank - replicated - kv_projections / 4
    other_sharded_8 = split8.weight_bytes_per_rank - replicated - kv_projections / 4
    assert other_sharded_8 == pytest.approx(other_sharded_4 / 2)
    read = {"kv_proj": 0.0, "sharded": 0.0, "replicated": 0.0}
    for module, moved in zip(inventory.modules, traffic.modules):
        kind = ("kv_proj" if module.name.endswith((".k_proj", ".v_proj")) else
                "sharded" if role_properties(module.role).sharded else "replicated")
        read[kind] += moved.bytes_per_token
    for ranks, split in ((4, split4), (8, split8)):
        kv_split = min(ranks, 4)
        expected = (read["sharded"] / ranks + read["kv_proj"] / kv_split + read["replicated"]
                    + traffic.kv_bytes_per_token / kv_split + traffic.state_bytes_per_token / ranks)
        assert split.bytes_per_step_per_rank == pytest.approx(expected)


def test_link_limits():
    cx7 = named_link("cx7-200g")
    assert link_refusal(cx7, 2) is None
    assert "needs 4 boxes" in link_refusal(cx7, 4) and "at most 2 devices" in link_refusal(cx7, 4)
    nvlink = named_link("nvlink4")
    assert link_refusal(nvlink, 8) is None and nvlink.boxes(8) == 1
    assert "needs 2 boxes" in link_refusal(nvlink, 16)


def _plan(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "roofline.cli", "plan", str(REFERENCE / "Qwen__Qwen3-8B"),
                           "--formats", "fp8", "--recipe", "default", *args],
                          capture_output=True, text=True, timeout=300)


def test_plan_refuses_what_vllm_refuses():
    proc = _plan("--tp", "3")
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr == ("error: --tp 3: vLLM refuses this split of Qwen__Qwen3-8B: Total number of attention "
                           "heads (32) must be divisible by tensor parallel size (3).\n")
    proc = _plan("--tp", "4")  # GB10: four boxes, but the table only knows the two-Spark cable
    assert proc.returncode == 1 and "needs 4 boxes" in proc.stderr and "vllm serve" not in proc.stdout


def test_plan_says_how_many_boxes_and_how_to_start_ray():
    proc = _plan("--tp", "2", "--json")
    assert proc.returncode == 0, proc.stderr
    top = json.loads(proc.stdout)["top_pick"]
    assert top["tensor_parallel"]["boxes"] == 2 and top["tensor_parallel"]["link"] == "cx7-200g"
    assert any("needs 2 boxes" in r and "ray start --head" in r for r in top["reasons"])
    assert "--distributed-executor-backend=ray" in top["serve_command"]


@pytest.mark.vllm
@pytest.mark.parametrize("name", ["Qwen__Qwen3-8B", "Qwen__Qwen3-30B-A3B", "mistralai__Mixtral-8x7B-v0.1",
                                  "meta-llama__Llama-3.1-8B-Instruct"])
def test_attention_rule_agrees_with_vllm(name, tmp_path):
    """vLLM's ModelConfig.verify_with_parallel_config (no engine, no weights) is the oracle for the
    model-level rule: where it refuses, roofline refuses with its words, and the reverse."""
    model = tmp_path / name
    model.mkdir()
    shutil.copy(REFERENCE / name / "config.json", model / "config.json")
    code = (
        "import json, sys\n"
        "from vllm.config import ModelConfig, ParallelConfig\n"
        "mc = ModelConfig(model=sys.argv[1], tokenizer=None, skip_tokenizer_init=True)\n"
        "out = {}\n"
        "for tp in range(2, 13):\n"
        "    try:\n"
        "        mc.verify_with_parallel_config(ParallelConfig(tensor_parallel_size=tp)); out[tp] = None\n"
        "    except ValueError as exc:\n"
        "        out[tp] = str(exc)\n"
        "print('ORACLE=' + json.dumps(out))\n")
    proc = subprocess.run([sys.executable, "-c", code, str(model)], capture_output=True, text=True, timeout=300)
    line = next(x for x in proc.stdout.splitlines() if x.startswith("ORACLE="))
    oracle = {int(k): v for k, v in json.loads(line[len("ORACLE="):]).items()}
    cfg = json.loads((model / "config.json").read_text())
    for tp, refused in oracle.items():
        ours = tp_refusal(cfg, tp)
        if refused:
            assert ours == refused, (tp, ours, refused)
        elif ours is not None:
            assert "attention heads" not in ours, (tp, ours)
