"""One step model behind every number: over a matrix of model kinds (dense, MoE, GDN hybrid, Mamba
hybrid), batch 1 and 16, TP 1 and 2, CUDA graphs and eager, GB10 and H100, every command that reports
a decode speed for a scenario reports the step model's number for it (roofline.predict.step), to
0.5%. Commands run in-process through the real CLI (click), on config-only inventories of the
reference configs; doctor's prediction through its own diagnose() for the matrix and once through
the CLI on the bundled capture.

A command that grew its own arithmetic again (a bandwidth-only TP path, a ceiling x efficiency
shortcut, a curve without launches) would differ here by far more than 0.5%; the second test keeps
the step arithmetic itself out of every other module."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from roofline.cli import cli
from roofline.errors import RooflineError
from roofline.predict.hardware import get_hardware
from roofline.predict.step import StepConfig, price_step
from roofline.predict.topology import Topology, tensor_parallel_placement

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO / "tests" / "reference_configs"
MODELS = {"dense": "Qwen__Qwen3-8B", "moe": "Qwen__Qwen3-30B-A3B", "gdn_hybrid": "Qwen__Qwen3-Next-80B-A3B-Thinking",
          "mamba_hybrid": "nvidia__NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"}
HARDWARE = ("gb10", "h100-sxm")
# the scenario every command is asked about; capacity's curve sits at prompt + output / 2 = CONTEXT
CONTEXT, KV, PROMPT, OUTPUT = 1024, "bf16", 768, 512
TOLERANCE = 0.005
# the flags that put two devices under each command: one box of two GPUs, or two boxes of one
TWO_DEVICES = {"gb10": ["--boxes", "2"], "h100-sxm": ["--gpus", "2"]}


def run(*args: str) -> dict:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def inventories():
    from roofline.sources.config import load_config_only

    return {kind: load_config_only(str(REFERENCE / name)) for kind, name in MODELS.items()}


def expected(inventory, hardware: str, batch: int, tp: int, graphs: bool) -> float:
    hw = get_hardware(hardware)
    placement = tensor_parallel_placement(hw, tp) if tp > 1 else None
    step = price_step(inventory, hw, StepConfig(batch=batch, context=CONTEXT, kv_cache_dtype=KV, graphs=graphs,
                                                topology=Topology(tp=tp), placement=placement))
    return step.tok_s


def assert_serve_line_is_priced(row: dict, tp: int, batch: int) -> None:
    """A plan row's serve line names exactly the scenario its tok/s priced: context, streams, the KV
    dtype the row ran, its split, and no flag (speculation) the figures left out."""
    flags = row["flags"]
    assert f"--max-model-len={CONTEXT}" in flags
    assert (f"--max-num-seqs={batch}" in flags) == (batch > 1)
    kv = [f for f in flags if f.startswith("--kv-cache-dtype")]
    assert kv == ([f"--kv-cache-dtype={row['kv_cache_dtype']}"] if row["kv_cache_dtype"].startswith("fp8") else [])
    assert (f"--tensor-parallel-size={tp}" in flags) == (tp > 1)
    assert not any(f.startswith("--speculative-config") for f in flags), flags


def close(reported: float, model: float, what: str) -> None:
    assert reported == pytest.approx(model, rel=TOLERANCE), f"{what}: {reported:.3f} vs the step model's {model:.3f}"


@pytest.mark.parametrize("hardware", HARDWARE)
@pytest.mark.parametrize("kind", list(MODELS))
def test_every_command_reports_the_step_model(inventories, kind, hardware):
    inventory, path = inventories[kind], str(REFERENCE / MODELS[kind])
    scenario = ["--hardware", hardware, "--context", str(CONTEXT), "--kv-cache-dtype", KV]
    model = {(b, tp, g): expected(inventory, hardware, b, tp, g) for b in (1, 16) for tp in (1, 2) for g in (True, False)}
    for batch in (1, 16):
        at = f"{kind} on {hardware}, batch {batch}"
        audit = run("audit", path, *scenario, "--batch", str(batch), "--json")
        close(audit["expected_tok_s"], model[batch, 1, True], f"audit expected ({at})")
        close(audit["cuda_graph"]["graph_tok_s"], model[batch, 1, True], f"audit graphs ({at})")
        close(audit["cuda_graph"]["eager_tok_s"], model[batch, 1, False], f"audit eager ({at})")
        kernels = run("kernels", path, *scenario, "--batch", str(batch), "--json")
        close(kernels["cuda_graph"]["graph_tok_s"], model[batch, 1, True], f"kernels graphs ({at})")
        close(kernels["cuda_graph"]["eager_tok_s"], model[batch, 1, False], f"kernels eager ({at})")
        compare = run("compare", path, str(REFERENCE / "Qwen__Qwen3-8B"), *scenario, "--batch", str(batch), "--json")
        row = next(r for r in compare["rows"] if r["input"] == path)
        close(row["expected_tok_s"], model[batch, 1, True], f"compare ({at})")
        validate = run("validate", path, *scenario, "--batch", str(batch), "--measured", "10", "--no-record", "--json")
        close(validate["expected_tok_s"], model[batch, 1, True], f"validate ({at})")
        for tp in (1, 2):
            plan = run("plan", path, "--hardware", hardware, "--context", str(CONTEXT), "--kv-cache-dtype", KV,
                       "--formats", "bf16", "--recipe", "default", "--concurrency", str(batch), "--tp", str(tp),
                       "--json")
            top = plan["top_pick"]
            # the simulated table prices each format as its default-backend row does, TP included
            for simulated in plan["simulated"]:
                row = next(r for r in plan["recommendations"] if (r["format"], r["recipe"]) ==
                           (simulated["format"], simulated["recipe"]))
                close(simulated["expected_tok_s"], row["single_stream_tok_s"], f"plan simulated table TP{tp} ({at})")
            for row in plan["recommendations"]:
                assert_serve_line_is_priced(row, tp, batch)
            close(top["single_stream_tok_s"], model[1, tp, True], f"plan 1-stream TP{tp} ({at})")
            close(top["aggregate_tok_s"], model[batch, tp, True], f"plan aggregate TP{tp} ({at})")
        scale_args = ("plan", path, "--hardware", hardware, "--context", str(CONTEXT), "--kv-cache-dtype", KV,
                      "--concurrency", str(batch), *TWO_DEVICES[hardware], "--json")
        if kind == "gdn_hybrid" and hardware == "h100-sxm":
            # an 80B in BF16 fits no split of two 80 GB GPUs: refused as a whole, with the reason
            refused = CliRunner().invoke(cli, list(scale_args), standalone_mode=False)
            assert isinstance(refused.exception, RooflineError) and "does not fit" in str(refused.exception)
            continue
        out = run(*scale_args)
        tp2 = next(r for r in out["topologies"] if (r["tp"], r["pp"], r["dp"]) == (2, 1, 1) and not r["expert_parallel"])
        close(tp2["single_stream_tok_s"], model[1, 2, True], f"plan {' '.join(TWO_DEVICES[hardware])} TP2 ({at})")
        close(tp2["aggregate_tok_s"], model[batch, 2, True], f"plan {' '.join(TWO_DEVICES[hardware])} aggregate ({at})")
    capacity_args = ("capacity", path, "--hardware", hardware, "--kv-cache-dtype", KV, "--concurrency", "1,16",
                     "--prompt-len", str(PROMPT), "--output-len", str(OUTPUT), "--kv-cache-memory-bytes", str(8 * 10**9),
                     # 8 GB hold fewer state blocks than vLLM's default 1,024 sequences of a hybrid: refused as vLLM
                     # refuses its full decode graphs (test_activation_peak.py)
                     "--max-num-seqs", "256")
    if inventory.weight_bytes + 8e9 > get_hardware(hardware).memory_gb * 1e9:
        # an 80B in BF16 fits no GB10 and no H100: capacity refuses it, and its curve is the same function's
        refused = CliRunner().invoke(cli, [*capacity_args], standalone_mode=False)
        assert isinstance(refused.exception, RooflineError) and "does not fit" in str(refused.exception)
        from roofline.advise.capacity import decode_curve

        points, _, _ = decode_curve(inventory, get_hardware(hardware), (1, 16), CONTEXT, KV)
        capacity = {"curve": [p.to_json() for p in points], "context": CONTEXT}
    else:
        capacity = run(*capacity_args, "--json")
    assert capacity["context"] == CONTEXT
    for point in capacity["curve"]:
        close(point["aggregate_tok_s"], model[point["concurrency"], 1, True],
              f"capacity at {point['concurrency']} ({kind} on {hardware})")
    from roofline.advise.doctor import predict
    from roofline.predict.serving import Serving

    for tp in (1, 2):
        for graphs in (True, False):
            serving = Serving(kv_cache_dtype=KV, context=CONTEXT, graphs=graphs, tp=tp)
            close(predict(inventory, get_hardware(hardware), serving).tok_s, model[1, tp, graphs],
                  f"doctor TP{tp} {'graphs' if graphs else 'eager'} ({kind} on {hardware})")


@pytest.mark.parametrize("kind", ["dense", "moe"])
def test_plan_prices_the_kv_cache_dtype_asked_for(inventories, kind):
    """--kv-cache-dtype auto (plan's default, vLLM's) prices vLLM's auto: the model's dtype, as audit
    does; FP8 KV is advice priced beside the row, never folded into it unasked."""
    path = str(REFERENCE / MODELS[kind])
    scenario = ["--hardware", "h100-sxm", "--context", "32768"]
    audit = run("audit", path, *scenario, "--batch", "16", "--json")
    plan = run("plan", path, *scenario, "--formats", "bf16", "--recipe", "default", "--concurrency", "16", "--json")
    top = plan["top_pick"]
    assert plan["workload"]["kv_cache_dtype"] == top["kv_cache_dtype"] == "auto"
    close(top["aggregate_tok_s"], audit["expected_tok_s"], f"plan vs audit at kv auto ({kind})")
    assert not any(f.startswith("--kv-cache-dtype") for f in top["flags"])
    offer = next(r for r in top["reasons"] if r.startswith("--kv-cache-dtype fp8 would"))
    fp8 = run("audit", path, *scenario, "--batch", "16", "--kv-cache-dtype", "fp8", "--json")["expected_tok_s"]
    gain = float(re.search(r"([+-]\d+)% tok/s at 16 streams", offer).group(1))
    assert gain == pytest.approx(100 * (fp8 / audit["expected_tok_s"] - 1), abs=0.51)


# quantized checkpoints whose format runs weight-only on Hopper (no FP4 tensor cores there)
WEIGHT_ONLY_ON_HOPPER = ("nvidia__Qwen3-30B-A3B-NVFP4", "openai__gpt-oss-20b")


@pytest.mark.parametrize("name", WEIGHT_ONLY_ON_HOPPER)
def test_weight_only_backends_on_hopper_are_one_price(name):
    """audit, kernels, compare, validate and plan's as-given row price one backend (vLLM's default for
    the format on the H100) and one kernel count: kernels once counted the format's default row
    while the step ran the Marlin path."""
    from roofline.predict.backends import default_backend
    from roofline.sources.config import load_config_only

    path = str(REFERENCE / name)
    inventory = load_config_only(path)
    hardware = get_hardware("h100-sxm")
    step = price_step(inventory, hardware, StepConfig(context=4096, kv_cache_dtype=KV))
    assert step.backend.name == default_backend(inventory.main_format(), hardware).name
    scenario = ["--hardware", "h100-sxm", "--context", "4096", "--kv-cache-dtype", KV]
    close(run("audit", path, *scenario, "--json")["expected_tok_s"], step.tok_s, f"audit ({name})")
    kernels = run("kernels", path, *scenario, "--json")
    close(kernels["cuda_graph"]["graph_tok_s"], step.tok_s, f"kernels ({name})")
    assert kernels["kernels"] == step.profile.to_json()
    compare = run("compare", path, str(REFERENCE / "Qwen__Qwen3-8B"), *scenario, "--json")
    close(next(r for r in compare["rows"] if r["input"] == path)["expected_tok_s"], step.tok_s, f"compare ({name})")
    plan = run("plan", path, *scenario, "--formats", "bf16", "--recipe", "default", "--json")
    given = [r for r in plan["recommendations"] if r["given"]]
    assert given, plan["notes"]
    best = next(r for r in given if r["backend"] == step.backend.name)
    close(best["single_stream_tok_s"], step.tok_s, f"plan as given ({name})")


def test_doctor_cli_on_a_capture_reports_the_step_model():
    """The bundled capture: a GDN hybrid in NVFP4, served eager with an emulated kernel."""
    from roofline.audit import load_inventory
    from roofline.predict.serving import backend_in_use

    capture = str(REPO / "examples" / "doctor" / "qwen3-next-nvfp4-eager.capture.json")
    payload = run("doctor", "--capture", capture, "--hardware", "gb10", "--json")
    inventory = load_inventory("", from_vllm=capture)
    serving = payload["serving_modelled"]
    assert payload["timing"].startswith("eager") and not serving["cuda_graphs"]
    assert serving["backend"] == backend_in_use(inventory) == "emulation"
    from roofline.predict.backends import backend_named

    hardware = get_hardware("gb10")
    step = price_step(inventory, hardware, StepConfig(
        context=serving["context"], kv_cache_dtype=serving["kv_cache_dtype"], graphs=False,
        backend=backend_named(inventory.main_format(), "emulation", hardware)))
    assert step.breakdown().extra_bytes > 0  # the emulated kernel's BF16 copy is priced
    close(payload["predicted_tok_s"], step.tok_s, "doctor --capture")


# Names that only the step model may do arithmetic with: a bandwidth, a launch cost or a tensor rate
# multiplied or divided anywhere else is a second step-time path.
OP = r"(?<![*])[*/](?![*])"  # a product or a quotient, not ** unpacking
PRICED = re.compile(rf"(bandwidth_gbps|host_us_per_kernel|graph_floor_us_per_kernel|tensor_tflops|\.efficiency)\b"
                    rf"[^\n=]*{OP}|{OP}[^\n=]*(bandwidth_gbps|host_us_per_kernel|graph_floor_us_per_kernel|\.efficiency)\b")
# where such arithmetic belongs: the step model; a link's own collective cost; an attention kernel's measured time
# carried to another GPU (the step model adds it); what measures them
ALLOWED = {"roofline/predict/step.py", "roofline/predict/links.py", "roofline/predict/attention.py",
           "roofline/live/launch_cost.py",
           "roofline/live/calibrate.py", "roofline/live/engine_calibrate.py", "roofline/render/audit.py", "reports/charts.py"}


def test_no_second_step_time_path():
    offenders = []
    for path in sorted(list((REPO / "roofline").rglob("*.py")) + list((REPO / "reports").rglob("*.py"))):
        relative = path.relative_to(REPO).as_posix()
        if relative in ALLOWED:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#", 1)[0]
            if PRICED.search(code) and "f\"" not in code and "f'" not in code:
                offenders.append(f"{relative}:{number}: {line.strip()}")
    assert offenders == [], "step arithmetic outside roofline/predict/step.py:\n" + "\n".join(offenders)


def test_doctor_names_the_graph_cause_at_tp2(inventories):
    """Eager at TP=2: the graph cause is found and priced by the same model (it was switched off at
    TP > 1 while the TP path could not time graphs)."""
    from dataclasses import replace

    from roofline.advise.doctor import Context, diagnose, predict
    from roofline.predict.serving import Serving

    hardware = get_hardware("h100-sxm")
    inventory = inventories["moe"]
    serving = Serving(kv_cache_dtype=KV, context=CONTEXT, graphs=False, tp=2)
    diagnosis = diagnose(inventory, hardware, serving, None, Context(hardware, {}, True))
    graphs = next(c for c in diagnosis.causes if c.id == "cuda_graphs")
    alone = predict(inventory, hardware, replace(serving, graphs=True)).tok_s - diagnosis.predicted_tok_s
    assert graphs.alone_gain_tok_s == pytest.approx(alone) and alone > 0
    close(diagnosis.predicted_tok_s, expected(inventory, "h100-sxm", 1, 2, False), "doctor eager TP2")
    assert diagnosis.best_tok_s == pytest.approx(diagnosis.predicted_tok_s + diagnosis.configuration_gain_tok_s)
