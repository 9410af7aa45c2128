"""A deployment in vLLM's own words (roofline/data/vllm_args.toml, roofline/predict/deployment.py):
every flag of the table is taken by every pricing command with vLLM's spelling and changes what is
priced as vLLM would behave; a whole serve line and a recipe file answer end to end (`preflight`);
vLLM's refusals are one line; speculation is given in vLLM's terms."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from roofline.cli import cli
from roofline.errors import RooflineError
from roofline.predict.deployment import flags, parse_serve_line, speculation_from_json
from roofline.predict.speculation import per_token_acceptance, vllm_acceptance_rate

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO / "tests" / "reference_configs"
DENSE = str(REFERENCE / "Qwen__Qwen3-8B")
HYBRID_NVFP4 = str(REFERENCE / "nvidia__Qwen3.6-35B-A3B-NVFP4")
MOE = str(REFERENCE / "Qwen__Qwen3-30B-A3B")

# one value per flag of the table, each different from vLLM's default, on the dense BF16 model on an H100
SAMPLE = {
    "quantization": ["--quantization", "fp8"],
    "kv_cache_dtype": ["--kv-cache-dtype", "fp8_e4m3"],
    "linear_backend": ["--linear-backend", "cutlass"],
    "moe_backend": ["--moe-backend", "triton"],
    "attention_backend": ["--attention-backend", "FLASHINFER"],
    "enforce_eager": ["--enforce-eager"],
    "speculative_config": ["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 3}'],
    "tp": ["-tp", "2"],
    "pp": ["-pp", "2"],
    "dp": ["-dp", "2"],
    "expert_parallel": ["--enable-expert-parallel"],
    "max_model_len": ["--max-model-len", "8k"],
    "max_num_seqs": ["--max-num-seqs", "8"],
    "max_num_batched_tokens": ["--max-num-batched-tokens", "4096"],
    "gpu_memory_utilization": ["--gpu-memory-utilization", "0.85"],
    "kv_cache_memory_bytes": ["--kv-cache-memory-bytes", "8G"],
    "block_size": ["--block-size", "32"],
    "prefix_caching": ["--no-enable-prefix-caching"],
    "chunked_prefill": ["--no-enable-chunked-prefill", "--max-num-batched-tokens", "40960"],
    "async_scheduling": ["--no-async-scheduling"],
    "long_prefill_token_threshold": ["--long-prefill-token-threshold", "2048"],
    "max_num_active_seqs": ["--max-num-active-seqs", "64"],
    "max_cudagraph_capture_size": ["--max-cudagraph-capture-size", "256"],
    "cudagraph_mode": ["--compilation-config", '{"cudagraph_mode": "PIECEWISE"}'],
}
COMMANDS = ("audit", "kernels", "compare", "capacity")


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), standalone_mode=False)


def as_json(*args: str) -> dict:
    result = invoke(*args, "--json")
    assert result.exception is None, (args, result.exception, result.output)
    return json.loads(result.stdout)


def test_every_flag_of_the_table_has_a_sample():
    assert {f.field for f in flags()} == set(SAMPLE)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_pricing_command_takes_every_flag_as_vllm_spells_it(command):
    """Each flag, as vLLM spells it, is accepted; it reaches the deployment the JSON reports (or, for
    capacity, the request it sizes), and where it moves the answer, the answer moves."""
    model = MOE if command != "compare" else None
    base_args = [command, *( [MOE, str(REFERENCE / "Qwen__Qwen3-30B-A3B-FP8")] if command == "compare" else [model]), "--hardware", "h100-sxm"]
    if command == "capacity":
        base_args += ["--concurrency", "1,8"]
    baseline = as_json(*base_args)
    for field, words in SAMPLE.items():
        if command == "capacity" and field == "tp":
            words = ["--tensor-parallel-size", "2"]  # capacity's own --tp, spelled as vLLM does
        args = base_args + words
        if field == "expert_parallel":
            args += ["-tp", "2"] if not (command == "capacity") else ["--tensor-parallel-size", "2"]
        result = invoke(*args, "--json")
        if result.exception is not None:
            # only a refusal vLLM makes itself, as one line naming the flag
            assert isinstance(result.exception, RooflineError), (field, result.exception)
            pytest.fail(f"{command} {' '.join(words)}: {result.exception}")
        out = json.loads(result.stdout)
        if command in ("audit", "kernels", "compare"):
            given = {f["field"] for f in out["deployment"]["flags"]}
            assert (field if field != "speculative_config" else "speculative") in given, (field, given)
        # what moves nothing here: attention (priced by bytes and FLOPs whatever the kernel), a backend of a
        # format this BF16 model has none of, memory flags where no memory is sized, limits above the scenario
        unmoved = {"attention_backend", "linear_backend", "moe_backend",
                   # the scheduler's: they move a server under load (TTFT, queueing), not one step's decode
                   "async_scheduling", "long_prefill_token_threshold", "max_num_active_seqs"}
        if command != "capacity":
            unmoved |= {"block_size", "max_num_batched_tokens", "prefix_caching", "gpu_memory_utilization",
                        "kv_cache_memory_bytes", "max_model_len", "max_num_seqs",
                        "dp"}  # one stream: a second data-parallel engine sits idle
        assert out != baseline or field in unmoved, field


def test_doctor_what_if_takes_every_flag_as_vllm_spells_it():
    """doctor's what-if walks the same table over a server's capture (examples/doctor): each flag reaches
    the what-if's deployment, priced or refused as vLLM would refuse it, one line and exit 1."""
    capture = str(REPO / "examples" / "doctor" / "qwen3-next-nvfp4-eager.capture.json")
    for field, words in SAMPLE.items():
        args = ["doctor", "--capture", capture, "--hardware", "h100-sxm", *words]
        if field == "expert_parallel":
            args += ["-tp", "2"]
        proc = subprocess.run([sys.executable, "-m", "roofline.cli", *args, "--json"], capture_output=True,
                              text=True, timeout=120, cwd=REPO)
        assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr, (field, proc.stderr)
        what = json.loads(proc.stdout)["what_if"]
        given = {f["field"] for f in what["deployment"]["flags"]}
        assert (field if field != "speculative_config" else "speculative") in given, (field, given)
        assert (proc.returncode == 1) == bool(what["refusals"]), (field, what)
        assert what["refusals"] or what["what_if_tok_s"] > 0


def test_online_fp8_quantizes_a_bf16_checkpoint_as_vllm_does():
    plain = as_json("audit", DENSE, "--hardware", "h100-sxm")
    fp8 = as_json("audit", DENSE, "--hardware", "h100-sxm", "--quantization", "fp8")
    assert fp8["quantization"]["method"] == "fp8"
    # every linear layer in FP8, lm_head and embeddings BF16: a bit over half the bytes
    assert 0.5 < fp8["weight_bytes"] / plain["weight_bytes"] < 0.62
    formats = {m["role"]: m["format"] for m in fp8["modules"]}
    assert formats["lm_head"] == "bf16" and formats["embedding"] == "bf16" and formats["attention_qkv"] == "fp8"
    assert fp8["expected_tok_s"] > plain["expected_tok_s"] * 1.3


def test_online_fp8_lets_a_model_fit_that_bf16_does_not():
    """The issue's case: a BF16 model vLLM serves in FP8 on one GPU fits with --quantization fp8."""
    args = ["capacity", MOE, "--hardware", "h100-sxm", "--max-model-len", "8192", "--gpu-memory-utilization", "0.7"]
    refused = invoke(*args)
    assert isinstance(refused.exception, RooflineError) and "does not fit" in str(refused.exception)
    fits = as_json(*args, "--quantization", "fp8")
    assert fits["kv_cache"]["tokens"] > 0 and fits["memory_terms"]["weights"]["bytes"] < 32e9


@pytest.mark.parametrize("args, fragment", [
    (["--max-model-len", "100000"], "greater than the derived max_model_len"),
    (["--quantization", "awq"], "does not match the quantization method"),
    (["--speculative-config", '{"method": "mtp", "num_speculative_tokens": 2}'], "has no MTP layers"),
    (["--speculative-config", '{"method": "eagle", "num_speculative_tokens": 2}'], "without speculative model"),
    (["--speculative-config", '{"num_speculative_tokens": 2, "methdo": "mtp"}'], "'methdo': Extra inputs are not permitted"),
    (["--gpu-memory-utilization", "1.5"], "out of range"),
    (["--env", "VLLM_USE_FLASHINFER_MOE_FP4=2"], "vLLM takes 0, 1"),
    (["--env", "NOEQUALS"], "KEY=VALUE"),
    (["--context", "5000", "--max-model-len", "4096"], "more than --max-model-len"),
    (["--batch", "9", "--max-num-seqs", "8"], "more than --max-num-seqs"),
    (["--acceptance-rate", "0.3"], "need speculative decoding"),
    (["--async-scheduling", "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 3}'],
     "async scheduling is only supported with EAGLE/MTP/Draft Model/NGram GPU/DSpark"),
])
def test_what_vllm_would_refuse_is_one_line(args, fragment):
    proc = subprocess.run([sys.executable, "-m", "roofline.cli", "audit", DENSE, "--hardware", "h100-sxm", *args],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and fragment in lines[0], proc.stderr


def test_an_fp4_gemm_backend_on_hopper_is_refused_as_vllm_would():
    result = invoke("audit", HYBRID_NVFP4, "--hardware", "h100-sxm", "--moe-backend", "flashinfer_cutlass")
    assert isinstance(result.exception, RooflineError)
    assert "compute capability 10 or newer" in str(result.exception) and "9.0" in str(result.exception)
    # the same flag runs on GB10 (12.1) for experts with FP4 activations (this checkpoint's are weight-only: #45.8)
    assert as_json("audit", str(REFERENCE / "nvidia__Qwen3-30B-A3B-NVFP4"), "--hardware", "gb10", "--moe-backend",
                   "flashinfer_cutlass")


def test_environment_switches_pick_the_backend_a_flag_would():
    # (the W4A4 NVFP4 MoE: the flag is refused for weight-only experts, the 0.22-0.26 switch is not)
    w4a4 = str(REFERENCE / "nvidia__Qwen3-30B-A3B-NVFP4")
    by_env = as_json("audit", w4a4, "--hardware", "gb10", "--env", "VLLM_USE_FLASHINFER_MOE_FP4=1")
    by_flag = as_json("audit", w4a4, "--hardware", "gb10", "--moe-backend", "flashinfer_cutlass")
    marlin = as_json("audit", w4a4, "--hardware", "gb10", "--moe-backend", "marlin")
    assert by_env["step"] == by_flag["step"] and by_env["expected_tok_s"] != marlin["expected_tok_s"]
    assert by_env["deployment"]["env"] == {"VLLM_USE_FLASHINFER_MOE_FP4": "1"}
    # the switch on the weight-only experts is read as those images ran it, not refused
    assert as_json("audit", HYBRID_NVFP4, "--hardware", "gb10", "--env", "VLLM_USE_FLASHINFER_MOE_FP4=1")
    default = as_json("audit", w4a4, "--hardware", "gb10")
    # the flag wins over the deprecated switch, as in vLLM
    both = as_json("audit", w4a4, "--hardware", "gb10", "--env", "VLLM_USE_FLASHINFER_MOE_FP4=1",
                   "--moe-backend", "marlin")
    assert both["expected_tok_s"] == marlin["expected_tok_s"] != default["expected_tok_s"]


def test_acceptance_is_given_as_vllm_reports_it():
    # 4 drafts at 29% accepted / drafted is 1.16 accepted per draft (a + a^2 + a^3 + a^4): a = 0.563
    a = per_token_acceptance(draft_tokens=4, acceptance_rate=0.29)
    assert a == pytest.approx(0.563, abs=0.005)
    assert vllm_acceptance_rate(a, 4) == pytest.approx(0.29, abs=1e-6)
    assert per_token_acceptance(draft_tokens=4, mean_acceptance_length=2.16) == pytest.approx(a, abs=1e-6)
    spec = ["--speculative-config", '{"method": "qwen3_next_mtp", "num_speculative_tokens": 4}']
    by_rate = as_json("audit", HYBRID_NVFP4, "--hardware", "gb10", *spec, "--acceptance-rate", "0.29")
    by_length = as_json("audit", HYBRID_NVFP4, "--hardware", "gb10", *spec, "--mean-acceptance-length", "2.16")
    assert by_rate["expected_tok_s"] == pytest.approx(by_length["expected_tok_s"], rel=1e-6)
    assert by_rate["scenario"]["acceptance_rate"] == pytest.approx(a, abs=1e-6)
    short = as_json("audit", HYBRID_NVFP4, "--hardware", "gb10", "--speculative", "4", "--acceptance-rate", "0.29")
    assert short["expected_tok_s"] == pytest.approx(by_rate["expected_tok_s"], rel=1e-9)


def test_speculative_config_spellings():
    assert speculation_from_json('{"method": "deepseek_mtp", "num_speculative_tokens": 1}').method == "mtp"
    ngram = speculation_from_json('{"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4}')
    assert ngram.method == "ngram" and ngram.model is None
    with pytest.raises(RooflineError, match="num_speculative_tokens"):
        speculation_from_json('{"method": "mtp"}')


def test_ngram_drafts_read_no_weights_and_a_draft_model_reads_its_own(tmp_path):
    plain = as_json("audit", DENSE, "--hardware", "h100-sxm")
    ngram = as_json("audit", DENSE, "--hardware", "h100-sxm", "--speculative-config",
                    '{"method": "ngram", "num_speculative_tokens": 2}', "--acceptance-rate", "0.5")
    assert ngram["weight_bytes"] == plain["weight_bytes"]
    assert ngram["expected_tok_s"] > plain["expected_tok_s"]
    draft = as_json("audit", DENSE, "--hardware", "h100-sxm", "--speculative-config",
                    json.dumps({"method": "draft_model", "model": str(REFERENCE / "Qwen__Qwen3-8B"),
                                "num_speculative_tokens": 2}), "--acceptance-rate", "0.5")
    assert draft["weight_bytes"] == pytest.approx(2 * plain["weight_bytes"], rel=0.01)
    assert any(m["name"].startswith("draft_model.") for m in draft["modules"])


# ----------------------------------------------------------------------------- preflight

def test_a_serve_line_parses_as_vllm_reads_it():
    line = (f"VLLM_USE_FLASHINFER_MOE_FP4=0 vllm serve {HYBRID_NVFP4} --max_model_len 32k --port 8000 "
            "--kv-cache-dtype=fp8 --enforce-eager --speculative-config '{\"method\": \"mtp\", "
            "\"num_speculative_tokens\": 2}' --tool-call-parser qwen3_coder --foo-bar 3 -cc.cudagraph_mode=NONE")
    deployment = parse_serve_line(line)
    assert deployment.model == HYBRID_NVFP4 and deployment.max_model_len == 32000
    assert deployment.kv_cache_dtype == "fp8" and deployment.enforce_eager
    assert deployment.speculative.tokens == 2 and deployment.moe_backend == "cutlass"
    assert "--port" in deployment.ignored and "--tool-call-parser" in deployment.ignored
    assert "--foo-bar 3" in deployment.not_modelled
    assert deployment.cudagraph_mode == "none" and dict(deployment.spelled)["cudagraph_mode"] == \
        "-cc.cudagraph_mode=NONE"
    other = parse_serve_line(["python", "-m", "vllm.entrypoints.openai.api_server", "--model", DENSE, "-tp", "2"])
    assert other.model == DENSE and other.tp == 2
    with pytest.raises(RooflineError, match="not a vLLM serve line"):
        parse_serve_line("llama-server -m x.gguf")


@pytest.mark.parametrize("words, mode, unpriced", [
    (["-O0"], "none", "-O0: torch.compile off"),
    (["-O1"], "piecewise", None),
    (["-O", "3"], "full_and_piecewise", None),
    (["--compilation-config", '{"cudagraph_mode": "FULL_DECODE_ONLY", "pass_config": {}}'], "full_decode_only",
     "--compilation-config {pass_config}"),
    (["-cc", '{"cudagraph_mode": "none"}'], "none", None),
    (["-O.cudagraph_mode", "PIECEWISE"], "piecewise", None),
    (["--compilation-config.cudagraph_mode=FULL"], "full", None),
    (["-O.mode=0"], None, "-O.mode=0"),
])
def test_compilation_flags_set_the_cuda_graph_mode_vllm_runs(words, mode, unpriced):
    """vLLM's -O levels and compilation config (vllm/config/vllm.py OptimizationLevel, compilation.py
    CUDAGraphMode): the graph mode priced, what else they say listed as not priced, never dropped."""
    deployment = parse_serve_line(["vllm", "serve", DENSE, *words])
    assert deployment.cudagraph_mode == mode
    assert deployment.eager == (mode == "none")
    if unpriced:
        assert any(item.startswith(unpriced) for item in deployment.not_modelled), deployment.not_modelled
    else:
        assert deployment.not_modelled == ()


@pytest.mark.parametrize("words, says", [
    (["-O", "7"], "optimization level"),
    (["-cc", "{not json"], "not a JSON object"),
    (["-cc", '{"cudagraph_mode": "SOMETIMES"}'], "not a CUDA-graph mode"),
    (["-cc"], "needs a value"),
])
def test_a_bad_compilation_flag_is_one_line(words, says):
    with pytest.raises(RooflineError, match=says):
        parse_serve_line(["vllm", "serve", DENSE, *words])


def test_graph_modes_price_as_vllm_runs_them():
    """cudagraph_mode NONE (or -O0) is --enforce-eager's price; PIECEWISE launches attention and the recurrent mixers
    from the host every step, which the GPU's time hides on this memory-bound hybrid (as an H200 measured: Gemma 4
    31B's piecewise step at 10 streams of 16k tokens took its kernels' time); the default and FULL_DECODE_ONLY decode
    alike."""
    def one_stream(*words):
        return as_json("audit", HYBRID_NVFP4, "--hardware", "gb10", *words)["expected_tok_s"]
    default, eager = one_stream(), one_stream("--enforce-eager")
    assert one_stream("-O0") == pytest.approx(eager) == one_stream("--compilation-config", '{"cudagraph_mode":"NONE"}')
    assert eager < default / 2  # graphs off costs this launch-bound hybrid most of its speed on the GB10
    assert eager < one_stream("-O1") <= default
    assert one_stream("-O", "3") == pytest.approx(default)
    assert one_stream("-cc", '{"cudagraph_mode":"FULL_DECODE_ONLY"}') == pytest.approx(default)


def preflight(*args: str) -> tuple[subprocess.CompletedProcess, dict | None]:
    proc = subprocess.run([sys.executable, "-m", "roofline.cli", "preflight", *args], capture_output=True,
                          text=True, timeout=240)
    assert "Traceback" not in proc.stderr, proc.stderr
    payload = json.loads(proc.stdout) if "--json" in args and proc.stdout.strip() else None
    return proc, payload


def test_preflight_of_a_serve_line_answers_for_exactly_that_deployment():
    proc, out = preflight("--hardware", "gb10", "--json", "--", "vllm", "serve", HYBRID_NVFP4,
                          "--max-model-len", "32k", "--kv-cache-dtype", "fp8", "--enforce-eager",
                          "--max-num-seqs", "16", "--gpu-memory-utilization", "0.7", "--port", "8000")
    assert proc.returncode == 0, proc.stderr
    assert out["schema"] == "roofline.preflight/1" and out["starts"]
    assert out["capacity"]["request"]["max_model_len"] == 32000
    assert out["at_max_num_seqs"]["concurrency"] == 16
    effects = {e["field"]: e for e in out["effects"]}
    assert effects["enforce_eager"]["change"]["tok_s_one_stream"] < -0.3  # eager costs a hybrid MoE most
    assert effects["kv_cache_dtype"]["change"]["kv_tokens"] > 0.5  # fp8 KV: more tokens than BF16
    assert effects["gpu_memory_utilization"]["change"]["kv_tokens"] < 0
    # the one-stream figure is the audit's, priced at the deployment's own StepConfig (eager here)
    assert out["one_stream"]["aggregate_tok_s"] == pytest.approx(out["audit"]["expected_tok_s"], rel=1e-9)
    text, _ = preflight("--hardware", "gb10", "--", "vllm", "serve", HYBRID_NVFP4, "--max-model-len", "32k",
                        "--enforce-eager")
    assert "--enforce-eager" in text.stdout and "KV cache" in text.stdout and "stayed BF16" in text.stdout


def test_an_attention_backend_measured_slower_than_priced_is_said():
    """Triton's unified attention read the KV cache far below the rate the step model prices (an H200, Gemma 4 31B
    at 10 streams: benchmarks/results/vllm_h200_dense_streams): a serve line naming it is told so beside its
    figures; FlashAttention's, priced as measured, is not."""
    _, out = preflight("--hardware", "h200", "--json", "--", "vllm", "serve", DENSE, "--attention-backend",
                       "TRITON_ATTN", "--max-model-len", "8192")
    assert any(n.startswith("--attention-backend TRITON_ATTN: Triton's unified attention") for n in
               out["deployment"]["notes"])
    _, plain = preflight("--hardware", "h200", "--json", "--", "vllm", "serve", DENSE, "--attention-backend",
                         "FLASH_ATTN", "--max-model-len", "8192")
    assert not any("--attention-backend" in n for n in plain["deployment"]["notes"])
    # and priced as the line says: Triton's decode kernels as timed on an H200 (predict/attention.py; at this short
    # context a little faster than FlashAttention 3's, which is the step model's KV pricing itself)
    triton, flash = out["audit"]["attention"], plain["audit"]["attention"]
    assert (triton["backend"], triton["kernels_measured"]) == ("TRITON_ATTN", True)
    assert triton["kernels_ms_per_step"] != 0 and flash["kernels_ms_per_step"] == 0
    assert out["one_stream"]["aggregate_tok_s"] != plain["one_stream"]["aggregate_tok_s"]


def test_preflight_names_what_vllm_would_refuse_and_exits_non_zero():
    proc, out = preflight("--hardware", "h100-sxm", "--json", "--", "vllm", "serve", HYBRID_NVFP4,
                          "--moe-backend", "flashinfer_cutlass", "--max-model-len", "400000")
    assert proc.returncode == 1
    assert not out["starts"] and len(out["refusals"]) == 2
    assert any("compute capability" in r for r in out["refusals"])


RECIPE = """\
recipe_version: "1"
name: Qwen3.6-NVFP4-MTP
model: nvidia/Qwen3.6-35B-A3B-NVFP4
container: vllm-node
env:
  VLLM_USE_FLASHINFER_MOE_FP4: "0"
defaults:
  port: 8000
  host: 0.0.0.0
  tensor_parallel: 1
  gpu_memory_utilization: 0.7
  max_model_len: 65536
  speculative_config: '{{"method": "qwen3_next_mtp", "num_speculative_tokens": 2}}'
command: |
  vllm serve {model} \\
     --max-model-len {{max_model_len}} \\
     --port {{port}} --host {{host}} \\
     -tp {{tensor_parallel}} \\
     --kv-cache-dtype fp8 \\
     --speculative-config '{{speculative_config}}' \\
     --gpu-memory-utilization {{gpu_memory_utilization}}
"""


def test_preflight_of_a_recipe_fills_its_template_and_takes_overrides(tmp_path):
    recipe = tmp_path / "qwen.yaml"
    recipe.write_text(RECIPE.format(model=HYBRID_NVFP4))
    proc, out = preflight("--recipe", str(recipe), "--set", "max_model_len=32768", "--hardware", "gb10",
                          "--acceptance-rate", "0.47", "--json", "--", "--enforce-eager")
    assert proc.returncode == 0, proc.stderr
    assert out["recipe"]["defaults"]["max_model_len"] == "32768"
    assert "--enforce-eager" in out["recipe"]["serve_line"]
    deployment = out["deployment"]
    assert deployment["max_model_len"] == 32768 and deployment["enforce_eager"]
    assert deployment["speculative_config"]["method"] == "mtp" and deployment["moe_backend"] == "cutlass"
    assert out["workload"]["vllm_acceptance_rate"] == pytest.approx(0.47, abs=1e-6)
    assert out["break_even_acceptance"] is not None


@pytest.mark.parametrize("text, fragment", [
    ("command: [1, 2]\n", "command"),
    ("name: x\n", "command"),
    ("command: vllm serve m --max-model-len {missing}\n", "{missing} has no value"),
    ("- a\n- b\n", "YAML mapping"),
    ("command: 'vllm serve m'\ndefaults: {a: [1]}\n", "defaults"),
    ("key: [unclosed\n", "not a YAML recipe"),
])
def test_a_bad_recipe_is_one_line(tmp_path, text, fragment):
    recipe = tmp_path / "bad.yaml"
    recipe.write_text(text)
    proc, _ = preflight("--recipe", str(recipe))
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode != 0 and len(lines) == 1 and fragment in lines[0], proc.stderr


def test_the_published_mtp_sweep_from_vllm_reported_acceptance():
    """Qwen3.6-35B-A3B NVFP4 on GB10 at 0-4 MTP tokens (benchmarks/gb10/mtp_sweep.csv), predicted from the
    acceptance vLLM reports, converted once, the drafts priced by mechanism (predict/drafting.py: routed MTP
    experts, the shared lm_head, the GDN rollback states, the drafts' launches). Out of sample (nothing was
    fitted to it). #44's 10% is not met: the prediction runs 17-39% fast with drafts (benchmarks/RESULTS-gpu.md);
    this keeps that gap from growing unseen and the slowdown with more drafts."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("mtp_sweep", REPO / "benchmarks" / "gb10" / "mtp_sweep.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rows = module.sweep()
    assert [r["draft_tokens"] for r in rows] == [0, 1, 2, 3, 4]
    assert all(abs(r["error"]) < 0.45 for r in rows), rows
    assert [r["predicted"] for r in rows[1:]] == sorted((r["predicted"] for r in rows[1:]), reverse=True)
