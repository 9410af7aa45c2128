"""capture's engine defaults (roofline.live.capture.capture_defaults): the smallest engine that
starts, unless the user sized it; the KV budget covers one sequence, hybrids' state included. The
real engine start with these defaults is tests/test_hook.py (fp8 fixture)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from roofline.live.capture import MIN_KV_BYTES, capture_defaults, kv_budget, root_cause

REFERENCE = Path(__file__).parent / "reference_configs"


@pytest.fixture()
def dense(tmp_path):
    model = tmp_path / "dense"
    model.mkdir()
    (model / "config.json").write_text((REFERENCE / "Qwen__Qwen3-8B" / "config.json").read_text())
    return model


def _value(args, flag):
    return args[args.index(flag) + 1]


def test_defaults_when_the_user_gives_nothing(dense, monkeypatch):
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    args = capture_defaults(str(dense), [])
    assert _value(args, "--max-model-len") == "256" and _value(args, "--max-num-seqs") == "1"
    budget = int(_value(args, "--kv-cache-memory-bytes"))
    # Qwen3-8B: 36 layers x 2 x 8 KV heads x 128 x 4 B (fp32 bound) x 256 tokens, doubled, + floor
    assert budget >= 2 * 36 * 2 * 8 * 128 * 4 * 256 + MIN_KV_BYTES
    assert budget < 1 << 30


@pytest.mark.parametrize("user, absent", [
    (["--max-model-len", "4096"], "--max-model-len"),
    (["--max_model_len=4096"], "--max-model-len"),
    (["--kv-cache-memory-bytes", "123456789"], "--kv-cache-memory-bytes"),
    (["--gpu-memory-utilization", "0.3"], "--kv-cache-memory-bytes"),
    (["--max-num-seqs=8"], "--max-num-seqs"),
])
def test_the_users_engine_args_win(dense, monkeypatch, user, absent):
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    assert absent not in capture_defaults(str(dense), user)


def test_cpu_kv_space_env_sizes_the_cache(dense, monkeypatch):
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    assert "--kv-cache-memory-bytes" not in capture_defaults(str(dense), [])


def test_short_models_keep_their_own_limit(tmp_path, monkeypatch):
    config = json.loads((REFERENCE / "Qwen__Qwen3-8B" / "config.json").read_text()) | {"max_position_embeddings": 128}
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert _value(capture_defaults(str(tmp_path), []), "--max-model-len") == "128"


def test_hybrid_budget_holds_the_recurrent_state():
    config = json.loads((REFERENCE / "Qwen__Qwen3-Next-80B-A3B-Thinking" / "config.json").read_text())
    from roofline.model.architecture import shape_from_config

    shape = shape_from_config(config)
    state = sum(4 * (r.state_elements + r.conv_elements) for r in shape.recurrent)
    assert shape.recurrent and kv_budget(config, 256) > 2 * state


def test_root_cause_skips_vllms_wrappers(tmp_path):
    log = tmp_path / "vllm.log"
    log.write_text(
        "(EngineCore pid=7) INFO 11-23 14:57:01 [core.py:1] starting\n"
        "(VllmWorker-0 pid=9) ERROR 11-23 14:57:07 [multiproc_executor.py:953] WorkerProc failed to start.\n"
        "(VllmWorker-0 pid=9) ERROR 11-23 14:57:07 [multiproc_executor.py:953] ValueError: Available memory on "
        "node 0 (9.44/10.71 GiB) on startup is less than desired CPU memory utilization (0.92, 9.86 GiB).\n"
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}\n")
    assert root_cause(str(log)).startswith("ValueError: Available memory on node 0")
    log.write_text("RuntimeError: Engine core initialization failed. See root cause above.\n")
    assert root_cause(str(log)) is None
    # the worker's error as torch.distributed prints it, the only copy in a fresh-clone run's log
    log.write_text("[rank0]: Traceback (most recent call last):\n"
                   "[rank0]: RuntimeError: start (0) + length (768) exceeds dimension size (384).\n"
                   "RuntimeError: Engine core initialization failed. See root cause above.\n")
    assert root_cause(str(log)) == "RuntimeError: start (0) + length (768) exceeds dimension size (384)."
    log.write_text("pydantic_core._pydantic_core.ValidationError: 1 validation error for ModelConfig\n"
                   "  Value error, The checkpoint you are trying to load has model type `x` but Transformers "
                   "does not recognize this architecture.\n")
    assert root_cause(str(log)) == ("ValidationError: 1 validation error for ModelConfig: Value error, The "
                                    "checkpoint you are trying to load has model type `x` but Transformers does not "
                                    "recognize this architecture.")


def test_vllms_last_word_is_one_line():
    """A failed start is one line naming vLLM's own error, never a traceback escaped into "\\n"s."""
    from roofline.live import capture

    tail = ["INFO 11-25 loading", "Traceback (most recent call last):", '  File "x.py", line 1, in <module>',
            "error: cannot import vLLM (No module named 'vllm')", ""]
    said = capture._tail_text(tail)
    assert said == "; vLLM's last output: error: cannot import vLLM (No module named 'vllm')"
    assert "\n" not in said
