"""The hub path: `roofline audit org/name` reads config files and safetensors headers over HTTP
range requests, never the weights. The hub is the stand-in of tests/hub_standin.py (a test
double: the real hub is out of reach here) pointed to by HF_ENDPOINT."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from hub_standin import HubStandIn

ROOFLINE = [sys.executable, "-m", "roofline.cli"]


def hub_env(tmp_path, endpoint: str, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_ENDPOINT=endpoint, HF_HOME=str(tmp_path / "hf-home"), HF_HUB_DISABLE_TELEMETRY="1",
               HF_HUB_DISABLE_XET="1", HF_HUB_ETAG_TIMEOUT="5", HF_HUB_DOWNLOAD_TIMEOUT="5")
    env.update(extra)
    return env


def audit(args, env) -> subprocess.CompletedProcess:
    return subprocess.run([*ROOFLINE, "audit", *args], capture_output=True, text=True, env=env, timeout=120)


@pytest.fixture(scope="module")
def sharded(checkpoint):
    return checkpoint("qwen3_sharded")


def test_hub_audit_matches_local_and_reads_only_headers(tmp_path, sharded):
    local = audit([str(sharded), "--json"], None)
    assert local.returncode == 0, local.stderr
    with HubStandIn({"acme/tiny-qwen3": sharded}) as hub:
        proc = audit(["acme/tiny-qwen3", "--json"], hub_env(tmp_path, hub.url))
        assert proc.returncode == 0, proc.stderr
        remote, here = json.loads(proc.stdout), json.loads(local.stdout)
        assert remote["source"] == "hub"
        assert remote["model"] == "acme/tiny-qwen3"
        assert remote["bytes_per_token"] == here["bytes_per_token"]
        assert remote["weight_bytes"] == here["weight_bytes"]
        assert [m["name"] for m in remote["modules"]] == [m["name"] for m in here["modules"]]
        shards = [f for f in os.listdir(sharded) if f.endswith(".safetensors")]
        assert len(shards) > 1, "the fixture must be sharded"
        # every safetensors GET was a range request
        st_gets = [r for r in hub.requests if r[0] == "GET" and r[1].endswith(".safetensors")]
        assert st_gets and all(r[2] and r[2].startswith("bytes=") for r in st_gets)
        assert {r[1].rsplit("/", 1)[1] for r in st_gets} == set(shards)
        # what crossed the wire is the headers (+ small speculative reads) and config files,
        # and what roofline says it read is what the server sent
        total = sum(os.path.getsize(sharded / f) for f in shards)
        assert remote["checkpoint_bytes"] == total
        assert remote["bytes_read"] <= hub.bytes_sent


def test_hub_revision_is_passed(tmp_path, sharded):
    with HubStandIn({"acme/tiny-qwen3": sharded}) as hub:
        proc = audit(["acme/tiny-qwen3", "--revision", "v1.0", "--json"], hub_env(tmp_path, hub.url))
        assert proc.returncode == 0, proc.stderr
        assert any("/resolve/v1.0/config.json" in r[1] for r in hub.requests)


def _one_line_error(proc, fragment):
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], proc.stderr


def test_unknown_repo_is_one_line(tmp_path, sharded):
    with HubStandIn({"acme/tiny-qwen3": sharded}) as hub:
        _one_line_error(audit(["acme/missing"], hub_env(tmp_path, hub.url)), "not found or not accessible")


def test_gated_repo_is_one_line(tmp_path, sharded):
    with HubStandIn({"acme/tiny-qwen3": sharded}, gated={"acme/tiny-qwen3"}) as hub:
        _one_line_error(audit(["acme/tiny-qwen3"], hub_env(tmp_path, hub.url)), "gated")


def test_server_ignoring_ranges_is_refused(tmp_path, checkpoint):
    # a large-ish file: the stand-in sends all of it when it ignores Range
    big = checkpoint("qwen3_dense")
    with HubStandIn({"acme/tiny-qwen3": big}, ignore_range=True) as hub:
        proc = audit(["acme/tiny-qwen3"], hub_env(tmp_path, hub.url))
        _one_line_error(proc, "ignored the HTTP range request")


def test_unreachable_hub_is_one_line(tmp_path):
    # nothing listens on this loopback port
    env = hub_env(tmp_path, "http://127.0.0.1:9")
    _one_line_error(audit(["acme/tiny-qwen3"], env), "acme/tiny-qwen3")


def test_offline_without_cache_is_one_line(tmp_path):
    env = hub_env(tmp_path, "http://127.0.0.1:9", HF_HUB_OFFLINE="1")
    _one_line_error(audit(["acme/tiny-qwen3"], env), "not in the Hugging Face cache")


def test_offline_with_config_only_cached(tmp_path, sharded):
    with HubStandIn({"acme/tiny-qwen3": sharded}) as hub:
        env = hub_env(tmp_path, hub.url)
        assert audit(["acme/tiny-qwen3"], env).returncode == 0  # caches config.json
    offline = hub_env(tmp_path, "http://127.0.0.1:9", HF_HUB_OFFLINE="1")
    _one_line_error(audit(["acme/tiny-qwen3"], offline), "HF_HUB_OFFLINE")


def test_offline_with_cached_snapshot_audits(tmp_path, sharded):
    """A snapshot already in the HF cache (weights downloaded) is audited offline."""
    with HubStandIn({"acme/tiny-qwen3": sharded}) as hub:
        env = hub_env(tmp_path, hub.url)
        # the stand-in does not serve the listing API that snapshot_download uses, so the files
        # are downloaded one by one, as a user's earlier download would have cached them
        files = ["config.json", "model.safetensors.index.json"] + sorted(
            f for f in os.listdir(sharded) if f.endswith(".safetensors"))
        script = ("import sys; from huggingface_hub import hf_hub_download\n"
                  "for f in sys.argv[1:]: hf_hub_download('acme/tiny-qwen3', f)")
        subprocess.run([sys.executable, "-c", script, *files], check=True, env=env, timeout=120)
    offline = hub_env(tmp_path, "http://127.0.0.1:9", HF_HUB_OFFLINE="1")
    proc = audit(["acme/tiny-qwen3", "--json"], offline)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["source"] == "hub-cache"


def test_repo_without_safetensors_yet_is_audited_from_its_config(tmp_path, sharded):
    """A repository with config.json and no weights (yet) gets the config-only audit, as a local
    folder does, through the same skeleton cache."""
    config_only = tmp_path / "config-only"
    config_only.mkdir()
    (config_only / "config.json").write_bytes((sharded / "config.json").read_bytes())
    with HubStandIn({"acme/tiny-qwen3": sharded, "acme/not-yet": config_only}) as hub:
        env = hub_env(tmp_path, hub.url, ROOFLINE_CACHE=str(tmp_path / "cache"))
        proc = audit(["acme/not-yet", "--json"], env)
        assert proc.returncode == 0, proc.stderr
        fallback = json.loads(proc.stdout)
        explicit = json.loads(audit(["acme/tiny-qwen3", "--config-only", "--json"], env).stdout)
    assert fallback["source"] == "config" and fallback["model"] == "acme/not-yet"
    assert fallback["weight_bytes"] == explicit["weight_bytes"] > 0
    assert len(list((tmp_path / "cache" / "skeletons").glob("*.json"))) == 1  # one config, one entry
