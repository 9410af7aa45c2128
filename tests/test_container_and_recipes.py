"""Deployments as users write them down (#45 items 1, 2, 5, 8): vLLM's own recipe format read as its command
builder reads it, `docker run` / compose lines, --quantization as vLLM resolves it against the checkpoint, and
a backend vLLM refuses for the checkpoint's activation scheme.

Inputs: a real vLLM recipe (tests/fixtures/recipes, its model ids pointed at the reference configs in a copy),
the reference configs (real config.json / hf_quant_config.json files)."""
from __future__ import annotations

import json
import shlex
from pathlib import Path

from inprocess import run

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "tests" / "reference_configs"
DENSE = str(CONFIGS / "Qwen__Qwen3-8B")
W4A16 = str(CONFIGS / "nvidia__Qwen3.6-35B-A3B-NVFP4")  # ModelOpt MIXED_PRECISION: W4A16_NVFP4 experts
W4A4 = str(CONFIGS / "nvidia__Qwen3-30B-A3B-NVFP4")
FP8 = str(CONFIGS / "Qwen__Qwen3-30B-A3B-FP8")
VLLM_RECIPE = REPO / "tests" / "fixtures" / "recipes" / "vllm-Qwen3.6-35B-A3B.yaml"


def _local_recipe(tmp_path: Path) -> Path:
    """The real recipe with its checkpoints read from the reference configs (no hub here)."""
    text = VLLM_RECIPE.read_text()
    for hub, local in (("nvidia/Qwen3.6-35B-A3B-NVFP4", W4A16), ("Qwen/Qwen3.6-35B-A3B-FP8", FP8),
                       ("Qwen/Qwen3.6-35B-A3B", str(CONFIGS / "Qwen__Qwen3.6-35B-A3B"))):
        text = text.replace(f'"{hub}"', f'"{local}"')
    path = tmp_path / "Qwen3.6-35B-A3B.yaml"
    path.write_text(text)
    return path


def _preflight(*args) -> dict:
    ran = run("preflight", "--config-only", "--json", *args)
    assert ran.returncode in (0, 1), ran.err
    return json.loads(ran.out)


def test_vllm_recipe_read_as_its_builder_makes_the_serve_line(tmp_path):
    recipe = _local_recipe(tmp_path)
    out = _preflight("--recipe", recipe, "--set", "variant=nvfp4", "--hardware", "gb10")
    words = shlex.split(out["recipe"]["serve_line"])
    assert words[:3] == ["vllm", "serve", W4A16]
    assert out["recipe"]["chosen"]["hardware"] == "dgx_spark_gb10" and out["recipe"]["chosen"]["variant"] == "nvfp4"
    # base args first, then the variant's GB10 override, the strategy's parallel size, the default-on features
    assert words[3] == "--trust-remote-code" and words[words.index("--tensor-parallel-size") + 1] == "1"
    assert words[words.index("--moe-backend") + 1] == "marlin" and words.count("--kv-cache-dtype") == 1
    assert "--reasoning-parser" in words
    assert "--speculative-config" not in words and "--language-model-only" not in words  # opt-in features stay off
    assert out["deployment"]["kv_cache_dtype"] == "fp8" and out["figures"] is not None
    # an opt-in feature switched on: the recipe's MTP config (moe_backend included) is taken and priced
    spec = _preflight("--recipe", recipe, "--set", "variant=nvfp4", "--set", "spec_decoding=on", "--hardware", "gb10")
    assert "--speculative-config" in spec["recipe"]["serve_line"] and spec["starts"], spec["refusals"]
    assert spec["deployment"]["speculative_config"]["method"] == "mtp"
    # another profile: the variant's own flags for that GPU
    rtx = _preflight("--recipe", recipe, "--set", "variant=nvfp4", "--hardware", "rtx-5090")
    assert rtx["recipe"]["chosen"]["hardware"] == "rtx_5090" and rtx["deployment"]["gpu_memory_utilization"] == 0.95


def test_vllm_recipe_choices_refused_in_one_line(tmp_path):
    recipe = _local_recipe(tmp_path)
    for args, said in ((["--set", "variant=nvfp4", "--hardware", "h100-sxm"], "runs on blackwell GPUs"),
                       (["--set", "variant=int3"], "no variant 'int3'"),
                       (["--set", "strategy=multi_node_tp"], "starts more than one server"),
                       (["--set", "colour=red"], "a vLLM recipe takes --set variant="),
                       (["--set", "reasoning=maybe"], "on or off")):
        ran = run("preflight", "--config-only", "--recipe", recipe, *args)
        assert ran.returncode != 0 and said in ran.err and "Traceback" not in ran.err, (args, ran.err)
        assert len(ran.err.strip().splitlines()) == 1


def test_docker_run_lines_read_as_the_container_runs_them(tmp_path, monkeypatch):
    # vLLM's image: its entrypoint is `vllm serve`; -e switches are the server's environment; a bind mount maps
    # the container's path back to this machine's
    mounted = tmp_path / "models"
    mounted.mkdir()
    (mounted / "qwen").symlink_to(DENSE)
    out = _preflight("--hardware", "gb10", "--", "docker", "run", "--gpus", "all", "-it", "--rm", "-p", "8000:8000",
                     "--ipc=host", "-v", f"{mounted}:/models", "-e", "VLLM_USE_FLASHINFER_MOE_FP4=1",
                     "vllm/vllm-openai:v0.12.0", "/models/qwen", "--max-model-len", "16K", "--kv-cache-dtype", "fp8")
    assert out["model"] == str(mounted / "qwen"), out["model"]
    assert out["deployment"]["max_model_len"] == 16384
    notes = " ".join(out["deployment"]["notes"])
    assert "entrypoint is `vllm serve`" in notes and "(the container's mount of it)" in notes
    assert "VLLM_USE_FLASHINFER_MOE_FP4=1" in notes
    # the Spark images' form: MODEL and VLLM_EXTRA_ARGS read by the image's script, said as a convention; the
    # image's other variables listed as not read; an env file read as Docker reads it
    env_file = tmp_path / "spark.env"
    env_file.write_text("# the box's settings\nVLLM_EXTRA_ARGS=--max-model-len 8192 --gpu-memory-utilization 0.6\n")
    out = _preflight("--hardware", "gb10", "--", "docker", "run", "-d", "--env-file", env_file, "-e", f"MODEL={DENSE}",
                     "-e", "PORT=8000", "some/spark-vllm:latest", "serve")
    assert out["model"] == DENSE and out["deployment"]["max_model_len"] == 8192
    assert out["deployment"]["gpu_memory_utilization"] == 0.6
    notes = " ".join(out["deployment"]["notes"])
    assert "a convention, not vLLM's" in notes and "not read: PORT" in notes
    # a shell around the serve line (NVIDIA's image has no vLLM entrypoint)
    out = _preflight("--hardware", "gb10", "--", "sudo", "docker", "run", "nvcr.io/nvidia/vllm:25.11-py3", "bash",
                     "-c", f"nvidia-smi && exec vllm serve {DENSE} --max-num-seqs 4")
    assert out["deployment"]["max_num_seqs"] == 4
    # a container that runs something else: one line
    ran = run("preflight", "--config-only", "--", "docker", "run", "some/image", "python", "train.py")
    assert ran.returncode != 0 and "not a vLLM serve line" in ran.err and len(ran.err.strip().splitlines()) == 1


def test_compose_files_read_for_the_service_running_vllm(tmp_path):
    compose = tmp_path / "compose.yaml"
    compose.write_text(json.dumps({"services": {
        "webui": {"image": "ghcr.io/open-webui/open-webui:main"},
        "vllm": {"image": "vllm/vllm-openai:latest", "command": [DENSE, "--max-model-len", "16384"],
                 "environment": {"HF_TOKEN": "hf_abcdefghijklmnopqrstuvwxyz0123"}}}}))
    by_recipe = _preflight("--recipe", compose, "--hardware", "gb10")
    by_line = _preflight("--hardware", "gb10", "--", "docker", "compose", "-f", compose, "up", "vllm")
    assert by_recipe["figures"] == by_line["figures"] and by_line["deployment"]["max_model_len"] == 16384
    assert "hf_abcdefghij" not in json.dumps(by_recipe) + json.dumps(by_line)
    ran = run("preflight", "--config-only", "--recipe", compose, "--set", "service=webui")
    assert ran.returncode != 0 and "runs its image's own command" in ran.err


def test_quantization_flag_resolved_as_vllm_resolves_it():
    # a ModelOpt NVFP4 checkpoint is claimed by modelopt_fp4 whatever --quantization says (vLLM takes `fp4`)
    out = _preflight("--hardware", "gb10", "--", "vllm", "serve", W4A4, "--quantization", "fp4")
    assert out["starts"] and any("runs modelopt_fp4" in n for n in out["deployment"]["notes"])
    assert _preflight("--hardware", "gb10", "--", "vllm", "serve", W4A4, "--quantization", "modelopt_fp4")["starts"]
    # an FP8 checkpoint no override claims must match exactly
    out = _preflight("--hardware", "gb10", "--", "vllm", "serve", FP8, "--quantization", "fp4")
    assert not out["starts"] and "does not match" in out["refusals"][0]
    # FP8 on Marlin on SM 12.1, as the published Spark runs used it
    assert _preflight("--hardware", "gb10", "--", "vllm", "serve", FP8, "--linear-backend", "marlin")["starts"]


def test_backend_refused_for_weight_only_nvfp4_experts():
    out = _preflight("--hardware", "gb10", "--", "vllm", "serve", W4A16, "--moe-backend", "flashinfer_cutlass")
    assert not out["starts"] and "does not support the deployment configuration" in out["refusals"][0]
    assert _preflight("--hardware", "gb10", "--", "vllm", "serve", W4A16, "--moe-backend", "marlin")["starts"]
    # the same backend on a checkpoint whose experts take FP4 activations runs
    assert _preflight("--hardware", "gb10", "--", "vllm", "serve", W4A4, "--moe-backend", "flashinfer_cutlass")["starts"]
