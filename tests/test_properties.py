"""Property tests (hypothesis): generated malformed captures, bench files, hardware files and traces,
each one field of a valid file replaced by an arbitrary value. Whatever the value, the command ends
with exit 0 and valid finite JSON, or one clear line and a non-zero exit: never a traceback, a hang
or a non-finite number.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile
from pathlib import Path

import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from roofline.cli import main

ROOT = Path(__file__).parent.parent
QWEN = ROOT / "examples" / "Qwen3-8B"
SETTINGS = settings(max_examples=int(os.environ.get("ROOFLINE_PROPERTY_EXAMPLES", "60")), deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12))
json_values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                             st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                           max_leaves=6)


def run(*args: str, env: dict | None = None) -> tuple[int, str, str]:
    """The CLI in this process: (exit code, stdout, stderr); any exception fails the test."""
    out, err = io.StringIO(), io.StringIO()
    saved = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main([str(a) for a in args])
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return code, out.getvalue(), err.getvalue()


def _no_constant(name):
    raise AssertionError(f"non-finite number {name} in the output")


def check_outcome(code: int, out: str, err: str, partial_ok: bool = False) -> None:
    assert "Traceback" not in err and "Traceback" not in out
    if code == 0 or (partial_ok and code == 3):
        json.loads(out, parse_constant=_no_constant)
    else:
        assert code in (1, 2), (code, err)
        lines = [line for line in err.splitlines() if line.startswith("error: ")]
        assert len(lines) == 1, err
        assert all(ch == "\n" or ch >= " " for ch in err), repr(err)


def _capture_record() -> dict:
    config = json.loads((QWEN / "config.json").read_text())
    config["num_hidden_layers"] = 2
    hidden, vocab = config["hidden_size"], config["vocab_size"]
    row = ["weight", "parameter", "bfloat16", [hidden, hidden], 2 * hidden * hidden, None, None, None]
    modules = [{"name": "model.embed_tokens", "quant_method": "none",
                "tensors": [["weight", "parameter", "bfloat16", [vocab, hidden], 2 * vocab * hidden, None, None, None]]}]
    for layer in range(2):
        modules += [{"name": f"model.layers.{layer}.self_attn.o_proj", "quant_method": "UnquantizedLinearMethod",
                     "tensors": [list(row)]},
                    {"name": f"model.layers.{layer}.mlp.down_proj", "quant_method": "UnquantizedLinearMethod",
                     "tensors": [list(row)]}]
    return {"format": "roofline-vllm-capture", "version": 1, "rank": 0, "world_size": 1, "tp_size": 1,
            "pp_size": 1, "run_id": "r", "model": "m", "enforce_eager": False, "max_model_len": 4096,
            "kv_cache_dtype": "auto", "block_size": 16, "cudagraph_mode": "FULL",
            "speculative": {"method": "mtp", "num_speculative_tokens": 2}, "hf_config": config,
            "modules": modules}


CAPTURE_PATHS = [("rank",), ("world_size",), ("tp_size",), ("pp_size",), ("enforce_eager",), ("max_model_len",),
                 ("kv_cache_dtype",), ("block_size",), ("cudagraph_mode",), ("speculative",),
                 ("speculative", "num_speculative_tokens"), ("hf_config",), ("hf_config", "num_attention_heads"),
                 ("hf_config", "hidden_size"), ("hf_config", "num_hidden_layers"), ("modules",),
                 ("modules", 1, "tensors"), ("modules", 1, "tensors", 0, 3), ("modules", 1, "tensors", 0, 2),
                 ("modules", 1, "tensors", 0, 4), ("modules", 1, "name"), ("modules", 1, "kernels"),
                 ("tensor_fields",), ("version",), ("format",), ("aliases",)]


def _set(document, path, value):
    target = document
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return document


@SETTINGS
@given(path=st.sampled_from(CAPTURE_PATHS), value=json_values)
def test_malformed_captures(path, value):
    record = _set(_capture_record(), path, value)
    with tempfile.TemporaryDirectory() as tmp:
        capture = Path(tmp) / "capture.json"
        capture.write_text(json.dumps(record))  # NaN / Infinity literals included: not JSON, refused
        check_outcome(*run("doctor", "--capture", capture, "--hardware", "gb10", "--json"), partial_ok=True)


BENCH_PATHS = [("decode_tok_s",), ("decode_tok_s", "median"), ("decode_tok_s", "n"), ("mean_context",),
               ("prompt_tokens",), ("sweep",), ("sweep", 0), ("sweep", 0, "concurrency"),
               ("sweep", 0, "aggregate_tok_s"), ("sweep", 0, "aggregate_tok_s", "median"), ("config",),
               ("config", "same_prompt"), ("config", "max_tokens"), ("ttft_s",), ("ttft_s", "median"), ("notes",)]


@SETTINGS
@given(path=st.sampled_from(BENCH_PATHS), value=json_values)
def test_malformed_bench_files(path, value):
    bench = {"decode_tok_s": {"median": 30.0, "min": 29.0, "max": 31.0, "n": 3}, "mean_context": 200,
             "prompt_tokens": 8, "completion_tokens": 384, "ttft_s": {"median": 0.1},
             "config": {"max_tokens": 384, "same_prompt": False},
             "sweep": [{"concurrency": 2, "aggregate_tok_s": {"median": 55.0}}], "notes": []}
    with tempfile.TemporaryDirectory() as tmp:
        path_json = Path(tmp) / "bench.json"
        path_json.write_text(json.dumps(_set(bench, path, value)))
        check_outcome(*run("validate", QWEN, "--bench-json", path_json, "--no-record", "--hardware", "gb10",
                           "--config-only", "--json"))


toml_scalars = st.one_of(st.booleans(), st.integers(-2**63, 2**63 - 1), st.floats(allow_nan=True, allow_infinity=True),
                         st.text(max_size=12))
toml_values = st.recursive(toml_scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                                 st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                           max_leaves=5)
HARDWARE_FIELDS = ["name", "bandwidth_gbps", "memory_gb", "usable_memory_gb", "tensor_tflops", "host", "efficiency",
                   "aliases", "host_us_per_kernel", "graph_floor_us_per_kernel", "compute_capability", "new_field"]


@SETTINGS
@given(field=st.sampled_from(HARDWARE_FIELDS), value=toml_values, key=st.sampled_from(["box", "Box", "b\u00f6x", "a b"]))
def test_malformed_hardware_files(field, value, key):
    entry = {"name": "box", "bandwidth_gbps": 200.0, "bandwidth_source": "t", "memory_gb": 128.0,
             "usable_memory_gb": 120.0, "compute_capability": "", "tensor_tflops": {"bf16": 100.0}, "host": "cpu",
             "efficiency": 0.7, "efficiency_kind": "prior", "efficiency_source": "t"}
    entry[field] = value
    with tempfile.TemporaryDirectory() as tmp:
        hw = Path(tmp) / "hardware.toml"
        hw.write_text(tomli_w.dumps({key: entry}))
        check_outcome(*run("audit", QWEN, "--hardware", "box", "--json", env={"ROOFLINE_HARDWARE_FILE": str(hw)}))


TRACE_FIELDS = ["ph", "cat", "name", "ts", "dur", "pid", "tid", "args"]


@SETTINGS
@given(index=st.integers(0, 2), field=st.sampled_from(TRACE_FIELDS), value=json_values)
def test_malformed_traces(index, field, value):
    events = [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 5.0, "dur": 1.0, "pid": 0,
               "tid": 0, "args": {"correlation": 7}},
              {"ph": "X", "cat": "python_function", "name": "model.layers.0.mlp", "ts": 0.0, "dur": 20.0, "pid": 0,
               "tid": 0},
              {"ph": "X", "cat": "kernel", "name": "nvjet_gemm", "ts": 8.0, "dur": 2.0, "pid": 1, "tid": 7,
               "args": {"correlation": 7}}]
    events[index][field] = value
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.json"
        trace.write_text(json.dumps({"traceEvents": events}))
        check_outcome(*run("kernels", "--trace", trace, "--num-layers", "2", "--hardware", "h100-sxm", "--json"))
