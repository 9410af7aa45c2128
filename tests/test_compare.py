"""`roofline compare`: checkpoints side by side, each row the audit's own numbers, ranked, with the
reasons; and `--variants BASE`, discovery through huggingface_hub's own API against the hub
stand-in (tests/hub_standin.py, a test double: the real hub is unreachable) pointed to by
HF_ENDPOINT, serving real safetensors files written by real libraries (the fixtures)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hub_standin import HubStandIn

REFERENCE = Path(__file__).parent / "reference_configs"
ROOFLINE = [sys.executable, "-m", "roofline.cli"]


def run(*args, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([*ROOFLINE, *args], capture_output=True, text=True, timeout=300, env=env)


def audit_json(path, env=None) -> dict:
    proc = run("audit", str(path), "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def three(checkpoint):
    return [checkpoint("ct_nvfp4a16"), checkpoint("qwen3_dense"), checkpoint("ct_fp8_dynamic")]


def test_compare_rows_are_the_audits_ranked_with_reasons(three, tmp_path):
    config_only = tmp_path / "Qwen3-8B-config"
    shutil.copytree(REFERENCE / "Qwen__Qwen3-8B", config_only)
    proc = run("compare", *map(str, three), str(config_only), "--json")
    assert proc.returncode == 0, proc.stderr
    payload = json.loads(proc.stdout)
    assert payload["schema"] == "roofline.compare/1" and payload["skipped"] == []
    rows = payload["rows"]
    assert [r["rank"] for r in rows] == [1, 2, 3, 4]
    expected = [r["expected_tok_s"] for r in rows]
    assert expected == sorted(expected, reverse=True)
    for row in rows:  # each row carries exactly what `roofline audit` prints for the same input
        audit = audit_json(row["input"])
        for key in ("bytes_per_token", "weight_bytes", "ceiling_tok_s", "expected_tok_s", "kv_bytes_per_token"):
            assert row[key] == audit[key], (row["name"], key)
    by_name = {r["name"]: r for r in rows}
    assert by_name["ct_nvfp4a16"]["rank"] == 1 and by_name["ct_nvfp4a16"]["main_format"] == "nvfp4-w4a16"
    assert by_name["ct_fp8_dynamic"]["main_format"] == "fp8" and by_name["qwen3_dense"]["main_format"] == "bf16"
    assert by_name["Qwen3-8B-config"]["source"] == "config"
    # the disagreement lines explain the ranking against the best
    assert any("qwen3_dense keeps mlp." in line and "BF16 where ct_nvfp4a16 has NVFP4 W4A16" in line
               for line in by_name["qwen3_dense"]["differences"])
    assert any("ct_fp8_dynamic stores mlp." in line and "in FP8" in line for line in by_name["ct_fp8_dynamic"]["differences"])
    assert by_name["ct_nvfp4a16"]["residual_top"][0]["label"] == "lm_head"
    assert by_name["ct_nvfp4a16"]["backend"] == "NVFP4 W4A16 Marlin"


def test_compare_terminal_table_and_a_broken_input(three, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    (broken / "model.safetensors").write_bytes(b"\x00" * 4)
    proc = run("compare", *map(str, three), str(broken), str(tmp_path / "missing"))
    # the table of the others is printed; a checkpoint the user named and that could not be read fails the run
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr == f"error: 2 of 5 checkpoints named could not be read: {broken}, {tmp_path / 'missing'} (see skipped)\n"
    out = proc.stdout
    assert out.startswith("3 checkpoints on ")
    assert "ct_nvfp4a16" in out.splitlines()[4] and "why the others read more:" in out
    assert "skipped:" in out and "broken:" in out and "missing:" in out


@pytest.mark.parametrize("args, code, message", [
    ((), 2, "give checkpoints to compare"),  # a usage error, as click gives for a missing argument
    (("a/b",), 1, "at least two"),
    (("a/b", "c/d", "--variants", "e/f"), 2, "not both"),
])
def test_compare_bad_input(args, code, message):
    proc = run("compare", *args)
    assert proc.returncode == code and message in proc.stderr and "Traceback" not in proc.stderr


def test_compare_html_section(three, tmp_path):
    report = tmp_path / "r.html"
    proc = run("compare", *map(str, three), "--html", str(report))
    assert proc.returncode == 0, proc.stderr
    page = report.read_text()
    assert 'id="compare"' in page and "chart-compare" in page and "Bytes read per token by role" in page
    from roofline.reports import read_report_data

    data = read_report_data(report)
    assert data["compare"]["rows"][0]["name"] == "ct_nvfp4a16"
    assert data["audit"]["model"] == "ct_nvfp4a16"  # the report's audit is the best row's


# ------------------------------------------------------------------------------- hub variants
def hub_env(tmp_path, endpoint: str, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_ENDPOINT=endpoint, HF_HOME=str(tmp_path / "hf-home"), HF_HUB_DISABLE_TELEMETRY="1",
               HF_HUB_DISABLE_XET="1", HF_HUB_ETAG_TIMEOUT="5", HF_HUB_DOWNLOAD_TIMEOUT="5",
               ROOFLINE_CACHE=str(tmp_path / "cache"))
    env.update(extra)
    return env


@pytest.fixture()
def hub(checkpoint, tmp_path):
    gguf = tmp_path / "gguf"
    gguf.mkdir()
    (gguf / "config.json").write_bytes((checkpoint("qwen3_dense") / "config.json").read_bytes())
    (gguf / "model-Q4_K_M.gguf").write_bytes(b"GGUF")
    broken = tmp_path / "broken"
    shutil.copytree(checkpoint("ct_fp8_dynamic"), broken)
    (broken / "model.safetensors").write_bytes(b"\xff" * 16)  # a header length past the end
    base = "acme/Qwen3-tiny"
    repos = {base: checkpoint("qwen3_dense"), "acme/Qwen3-tiny-NVFP4A16": checkpoint("ct_nvfp4a16"),
             "acme/Qwen3-tiny-FP8": checkpoint("ct_fp8_dynamic"), "acme/Qwen3-tiny-GGUF": gguf,
             "mlx-community/Qwen3-tiny-4bit": checkpoint("ct_w4a16_int4"),
             "acme/Qwen3-tiny-W4A16-gated": checkpoint("ct_w4a16_int4"), "acme/Qwen3-tiny-broken": broken,
             "other/unrelated": checkpoint("qwen3_moe")}
    models = {"acme/Qwen3-tiny-NVFP4A16": {"base_model": base, "downloads": 50},
              "acme/Qwen3-tiny-FP8": {"base_model": base, "downloads": 900},
              "acme/Qwen3-tiny-GGUF": {"base_model": base, "downloads": 5000, "tags": ["gguf"]},
              "mlx-community/Qwen3-tiny-4bit": {"base_model": base, "downloads": 70, "tags": ["mlx"],
                                                "library_name": "mlx"},
              "acme/Qwen3-tiny-W4A16-gated": {"base_model": base, "downloads": 30},
              "acme/Qwen3-tiny-broken": {"base_model": base, "downloads": 10},
              "other/unrelated": {"base_model": "other/base", "downloads": 1}}
    with HubStandIn(repos, models=models, gated={"acme/Qwen3-tiny-W4A16-gated"}) as server:
        yield server, base


def test_variants_discovered_audited_skipped_and_cached(hub, tmp_path):
    server, base = hub
    env = hub_env(tmp_path, server.url)
    proc = run("compare", "--variants", base, "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    payload = json.loads(proc.stdout)
    assert [r["input"] for r in payload["rows"]] == ["acme/Qwen3-tiny-NVFP4A16", "acme/Qwen3-tiny-FP8"]
    skipped = {s["input"]: s["reason"] for s in payload["skipped"]}
    assert skipped["acme/Qwen3-tiny-GGUF"].startswith("GGUF")
    assert skipped["mlx-community/Qwen3-tiny-4bit"].startswith("MLX")
    assert skipped["acme/Qwen3-tiny-W4A16-gated"] == "needs HF_TOKEN (gated repository)"
    assert "broken" in " ".join(skipped) and "other/unrelated" not in skipped
    # each row is the header audit of that repository, as `roofline audit org/name` gives it
    direct = audit_json("acme/Qwen3-tiny-FP8", env=env)
    fp8 = next(r for r in payload["rows"] if r["input"] == "acme/Qwen3-tiny-FP8")
    assert fp8["bytes_per_token"] == direct["bytes_per_token"] and fp8["downloads"] == 900
    assert fp8["source"] == "hub" and fp8["bytes_read"] < fp8["checkpoint_bytes"]
    # a rerun reads nothing new: the listing again, no file at all
    before = len(server.requests)
    again = run("compare", "--variants", base, "--json", "--sort", "downloads", env=env)
    assert again.returncode == 0, again.stderr
    new = server.requests[before:]
    assert new and all(path.startswith("/api/models") for _, path, _ in new), new
    assert [r["input"] for r in json.loads(again.stdout)["rows"]] == ["acme/Qwen3-tiny-FP8",
                                                                      "acme/Qwen3-tiny-NVFP4A16"]
    # offline: the cached listing and the cached headers
    offline = hub_env(tmp_path, "http://127.0.0.1:9", HF_HUB_OFFLINE="1")
    proc = run("compare", "--variants", base, env=offline)
    assert proc.returncode == 0, proc.stderr
    assert "acme/Qwen3-tiny-NVFP4A16" in proc.stdout and "from the cache" in proc.stderr
    # plan of the base names the published variants the listing found instead of "quantize it"
    proc = run("plan", base, "--formats", "fp8,nvfp4-w4a16,mxfp4", "--recipe", "default", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)["recommendations"]
    named = {r["format"]: (r["checkpoint"], r["quantize_with"]) for r in rows}
    assert named["fp8"] == ("acme/Qwen3-tiny-FP8", "") and named["nvfp4-w4a16"] == ("acme/Qwen3-tiny-NVFP4A16", "")
    assert named["mxfp4"][0].startswith("./") and named["mxfp4"][1]  # none published: made by the user
    assert all(r["serve_command"].startswith(f"vllm serve {r['checkpoint']} ") for r in rows)


def test_variants_filter_limit_and_token(hub, tmp_path):
    server, base = hub
    env = hub_env(tmp_path, server.url)
    proc = run("compare", "--variants", base, "--filter", "nvfp4", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    assert [r["input"] for r in json.loads(proc.stdout)["rows"]] == ["acme/Qwen3-tiny-NVFP4A16"]
    proc = run("compare", "--variants", base, "--limit", "2", "--json", env=env)
    payload = json.loads(proc.stdout)  # the two most downloaded: GGUF (skipped) and FP8
    assert [r["input"] for r in payload["rows"]] == ["acme/Qwen3-tiny-FP8"]
    assert [s["input"] for s in payload["skipped"]] == ["acme/Qwen3-tiny-GGUF"]
    # with a token, the gated repository is tried and the hub's refusal becomes its reason
    proc = run("compare", "--variants", base, "--filter", "gated", "--json", env=dict(env, HF_TOKEN="hf_test"))
    assert proc.returncode == 1 and "gated repository" in proc.stderr
    proc = run("compare", "--variants", "acme/nothing-here", env=env)
    assert proc.returncode == 1 and "lists no quantized variants" in proc.stderr


def test_three_hundred_inputs_are_three_hundred_rows_a_reader_tells_apart(tmp_path):
    """300 checkpoints that all end in a folder called `model` (#36): 300 rows, each named by as much of
    its path as tells it apart, in the JSON and in the terminal."""
    config = (Path(__file__).parents[1] / "examples" / "Qwen3-8B" / "config.json").read_text()
    folders = []
    for i in range(300):
        folder = tmp_path / f"run{i:03d}" / "model"
        folder.mkdir(parents=True)
        (folder / "config.json").write_text(config)
        folders.append(str(folder))
    out = json.loads(run("compare", *folders, "--hardware", "gb10", "--json").stdout)
    names = [row["name"] for row in out["rows"]]
    assert len(names) == 300 and len(set(names)) == 300 and "run000/model" in names
    text = run("compare", *folders, "--hardware", "gb10").stdout
    assert sum(f"run{i:03d}/model" in text for i in range(300)) == 300
