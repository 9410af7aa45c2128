"""The config path's skeleton cache (roofline.sources.skeleton_cache): a hit gives the same audit
as a build and imports neither torch nor transformers; a corrupt or foreign entry is rebuilt,
never trusted; ROOFLINE_CACHE moves it and --no-cache bypasses it; one build serves a whole
command and every quantized variant of one base config."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from roofline.model.skeleton import Skeleton
from roofline.sources import skeleton_cache
from roofline.sources.skeleton_cache import cached_skeleton, read_entry, skeleton_key

REFERENCE = Path(__file__).parent / "reference_configs"
HEAVY = ("torch", "transformers")


def run(args: list[str], cache: Path) -> tuple[subprocess.CompletedProcess, list[str]]:
    """`roofline ARGS` in a fresh interpreter; also which heavy modules it imported."""
    code = ("import json, sys\nfrom roofline.cli import main\nrc = main(sys.argv[1:])\n"
            f"sys.stderr.write('\\nHEAVY=' + json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})))\n"
            "sys.exit(rc)\n")
    env = dict(os.environ, ROOFLINE_CACHE=str(cache))
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=300)
    heavy = json.loads(proc.stderr.rsplit("HEAVY=", 1)[1]) if "HEAVY=" in proc.stderr else None
    return proc, heavy


def entries(cache: Path) -> list[Path]:
    return sorted((cache / "skeletons").glob("*.json"))


@pytest.fixture()
def qwen3_8b(tmp_path) -> Path:
    model = tmp_path / "Qwen3-8B"
    shutil.copytree(REFERENCE / "Qwen__Qwen3-8B", model)
    return model


def test_a_hit_imports_neither_torch_nor_transformers_and_gives_the_same_audit(tmp_path, qwen3_8b):
    cache = tmp_path / "cache"
    cold, cold_heavy = run(["audit", str(qwen3_8b), "--json"], cache)
    assert cold.returncode == 0, cold.stderr
    assert "torch" in cold_heavy and "transformers" in cold_heavy  # a miss builds with them
    assert len(entries(cache)) == 1
    warm, warm_heavy = run(["audit", str(qwen3_8b), "--json"], cache)
    assert warm.returncode == 0, warm.stderr
    assert warm_heavy == []
    assert json.loads(warm.stdout) == json.loads(cold.stdout)
    plan, plan_heavy = run(["plan", str(qwen3_8b), "--json"], cache)
    assert plan.returncode == 0 and plan_heavy == []


def test_no_cache_bypasses_and_writes_nothing(tmp_path, qwen3_8b):
    cache = tmp_path / "cache"
    proc, heavy = run(["audit", str(qwen3_8b), "--json", "--no-cache"], cache)
    assert proc.returncode == 0 and "transformers" in heavy
    assert entries(cache) == []


def _config(name: str) -> dict:
    return json.loads((REFERENCE / name / "config.json").read_text())


def test_quantized_variants_share_the_base_entry():
    base, fp8 = _config("Qwen__Qwen3-30B-A3B"), _config("Qwen__Qwen3-30B-A3B-FP8")
    assert "quantization_config" in fp8
    assert skeleton_key(base) == skeleton_key(fp8)
    assert skeleton_key(base) != skeleton_key(dict(base, num_hidden_layers=base["num_hidden_layers"] + 1))


def _corruptions(good: dict) -> dict[str, bytes]:
    first = good["tensors"][0]
    return {
        "truncated": json.dumps(good).encode()[:-40],
        "garbage": b"\x00\xffnot json at all",
        "not an object": b"[1, 2, 3]",
        "foreign key": json.dumps(dict(good, key="0" * 64)).encode(),
        "other schema": json.dumps(dict(good, schema="roofline.skeleton/0")).encode(),
        "negative dim": json.dumps(dict(good, tensors=[[first[0], first[1], [-1, 4]]] + good["tensors"][1:])).encode(),
        "huge dim": json.dumps(dict(good, tensors=[[first[0], first[1], [2**40]]] + good["tensors"][1:])).encode(),
        "unknown dtype": json.dumps(dict(good, tensors=[[first[0], "Q7", first[2]]] + good["tensors"][1:])).encode(),
        "linear out of range": json.dumps(dict(good, linear=[len(good["tensors"])])).encode(),
        "float dims": json.dumps(dict(good, tensors=[[first[0], first[1], [1.5]]] + good["tensors"][1:])).encode(),
    }


def test_a_corrupt_or_foreign_entry_is_rebuilt_not_trusted(tmp_path, qwen3_8b):
    cache = tmp_path / "cache"
    cold, _ = run(["audit", str(qwen3_8b), "--json"], cache)
    assert cold.returncode == 0, cold.stderr
    (path,) = entries(cache)
    good_bytes = path.read_bytes()
    good = json.loads(good_bytes)
    key = path.stem
    assert read_entry(path, key) is not None
    for what, bad in _corruptions(good).items():
        path.write_bytes(bad)
        assert read_entry(path, key) is None, what
    # the CLI rebuilds over a corrupt entry (with torch + transformers) and repairs it
    path.write_bytes(_corruptions(good)["negative dim"])
    rebuilt, heavy = run(["audit", str(qwen3_8b), "--json"], cache)
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert "transformers" in heavy
    assert json.loads(rebuilt.stdout) == json.loads(cold.stdout)
    assert read_entry(path, key) is not None


def test_one_build_per_config_per_process(tmp_path, monkeypatch):
    monkeypatch.setenv("ROOFLINE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(skeleton_cache, "_memo", {})
    config = _config("Qwen__Qwen3-8B")
    builds = []

    def build():
        builds.append(1)
        return Skeleton([], set())

    for _ in range(3):
        cached_skeleton(config, build)
    cached_skeleton(dict(config, quantization_config={"quant_method": "fp8"}), build)
    assert len(builds) == 1
    cached_skeleton(config, build, use_cache=False)
    assert len(builds) == 2


def test_roofline_cache_moves_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ROOFLINE_CACHE", str(tmp_path / "elsewhere"))
    assert skeleton_cache.cache_dir() == tmp_path / "elsewhere" / "skeletons"
    monkeypatch.delenv("ROOFLINE_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert skeleton_cache.cache_dir() == tmp_path / "xdg" / "roofline" / "skeletons"


def test_an_unwritable_cache_is_skipped(tmp_path, qwen3_8b):
    blocker = tmp_path / "file-not-dir"
    blocker.write_text("")
    proc, _ = run(["audit", str(qwen3_8b), "--json"], blocker)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["source"] == "config"
