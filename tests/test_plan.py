"""roofline plan: simulation under recipes, the recommender, tensor parallelism; the known
facts of BRIEF §2 / §7 reproduced from the reference configs."""
from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from roofline.advise.recommend import build_plan
from roofline.advise.simulate import get_recipe, simulate
from roofline.errors import RooflineError
from roofline.model.formats import format_label
from roofline.predict.hardware import get_hardware
from roofline.predict.traffic import Scenario, compute_traffic

pytest.importorskip("transformers")

REFERENCE = Path(__file__).parent / "reference_configs"
GB10 = get_hardware("gb10")


@pytest.fixture(scope="module")
def qwen3_8b():
    from roofline.sources.config import load_config_only

    return load_config_only(str(REFERENCE / "Qwen__Qwen3-8B"))


@pytest.fixture(scope="module")
def qwen36():
    from roofline.sources.config import load_config_only

    return load_config_only(str(REFERENCE / "Qwen__Qwen3.6-35B-A3B"))


def bytes_per_token(inv, fmt, recipe="default", context=1024):
    sim = simulate(inv, fmt, get_recipe(recipe))
    return compute_traffic(sim, Scenario(context=context, kv_cache_dtype="fp8")).bytes_per_token


def test_dense_8b_nvfp4_is_about_1_5x_fp8(qwen3_8b):
    fp8, nvfp4 = bytes_per_token(qwen3_8b, "fp8"), bytes_per_token(qwen3_8b, "nvfp4-w4a4")
    # BRIEF §7: 38.59 / 25.65 = 1.50 measured on GB10 (lm_head BF16 in both)
    assert 1.4 < fp8 / nvfp4 < 1.7
    # W4A4 and W4A16 store alike (W4A4 adds one fp32 input scale per module)
    assert bytes_per_token(qwen3_8b, "nvfp4-w4a16") == pytest.approx(nvfp4, rel=1e-5)


def test_simulated_scales_are_counted(qwen3_8b):
    sim = simulate(qwen3_8b, "nvfp4-w4a16", get_recipe("default"))
    down = sim.by_name()["model.layers.0.mlp.down_proj"]
    assert down.format == "nvfp4-w4a16" and down.quant_method == "compressed-tensors"
    assert down.nbytes == down.params // 2 + down.params // 16 + 4
    assert sim.by_name()["lm_head"].format == "bf16"
    aggressive = simulate(qwen3_8b, "nvfp4-w4a16", get_recipe("aggressive"))
    assert aggressive.by_name()["lm_head"].format == "nvfp4-w4a16"


def test_dense_8b_w4a16_first_single_stream(qwen3_8b):
    plan = build_plan(qwen3_8b, GB10, formats=["bf16", "fp8", "nvfp4-w4a16", "nvfp4-w4a4"], recipes=["default"],
                      concurrency=1, context=1024)
    top = plan.top
    assert top.format == "nvfp4-w4a16" and "Marlin" in top.backend.name
    assert "--linear-backend=marlin" in top.flags
    assert top.serve_command().startswith("vllm serve ELVISIO/Qwen3-8B-NVFP4A16 ")  # the published release
    order = [r.format for r in plan.recommendations]
    assert order.index("nvfp4-w4a4") < order.index("fp8") < order.index("bf16")
    # predictions land near BRIEF §7's measurements (efficiency calibrated on them)
    by_format = {r.format: r for r in plan.recommendations}
    assert 22 < by_format["fp8"].single_stream_tok_s < 30
    assert 34 < by_format["nvfp4-w4a16"].single_stream_tok_s < 46


def test_w4a4_preferred_at_high_concurrency(qwen3_8b):
    plan = build_plan(qwen3_8b, GB10, formats=["nvfp4-w4a16", "nvfp4-w4a4"], recipes=["default"],
                      concurrency=128, context=256)
    assert plan.top.format == "nvfp4-w4a4" and plan.top.backend.compute == "fp4"
    w4a16 = next(r for r in plan.recommendations if r.format == "nvfp4-w4a16")
    assert w4a16.aggregate_bound == "compute"
    assert plan.top.aggregate_tok_s > 1.2 * w4a16.aggregate_tok_s
    assert "--max-num-seqs=128" in plan.top.flags


def test_hybrid_with_bf16_gdn_fp8_competitive(qwen36, qwen3_8b):
    fp8 = bytes_per_token(qwen36, "fp8", "hybrid-safe")
    nvfp4 = bytes_per_token(qwen36, "nvfp4-w4a16", "hybrid-safe")
    dense_gain = bytes_per_token(qwen3_8b, "fp8") / bytes_per_token(qwen3_8b, "nvfp4-w4a16")
    hybrid_gain = fp8 / nvfp4
    assert hybrid_gain < 1.25 < dense_gain
    plan = build_plan(qwen36, GB10, formats=["fp8", "nvfp4-w4a16"], recipes=["hybrid-safe"], context=1024)
    nv = next(r for r in plan.recommendations if r.format == "nvfp4-w4a16")
    text = " ".join(nv.reasons)
    assert "linear_attn.in_proj_qkv stays BF16" in text and "over FP8" in text
    assert "keep CUDA graphs on" in text
    fp8_row = next(r for r in plan.recommendations if r.format == "fp8")
    # MTP is offered priced, never folded into a row: the serve line is what the row's tok/s priced
    assert not any(f.startswith("--speculative-config") for r in plan.recommendations for f in r.flags)
    for row in (nv, fp8_row):
        said = next(r for r in row.reasons if "ships MTP layers" in r)
        assert 0 < float(re.search(r"above (\d+)% acceptance", said).group(1)) < 100, said


def test_plan_mtp_break_even_is_the_priced_one(qwen36):
    """The break-even the row prints is where the step model's speculative tok/s crosses the row's."""
    from roofline.advise.recommend import row_config, Workload
    from roofline.predict.speculation import per_token_acceptance
    from roofline.predict.step import price_step

    plan = build_plan(qwen36, GB10, formats=["fp8"], recipes=["default"], context=1024)
    row = plan.top
    said = next(r for r in row.reasons if "ships MTP layers" in r)
    rate = float(re.search(r"above (\d+)% acceptance", said).group(1)) / 100
    sim = plan.simulated[0].inventory
    config = row_config(Workload(context=1024), row.backend, row.kv_cache_dtype, GB10, 1)
    def tok_s(vllm_rate):
        a = per_token_acceptance(draft_tokens=2, acceptance_rate=vllm_rate)
        return price_step(sim, GB10, replace(config, speculative_tokens=2, acceptance_rate=a)).tok_s
    assert tok_s(rate - 0.02) < row.single_stream_tok_s < tok_s(rate + 0.02)


def test_memory_fit(qwen36):
    plan = build_plan(qwen36, GB10, formats=["bf16", "nvfp4-w4a16"], recipes=["default"], context=131072,
                      concurrency=8, memory_budget_gb=60)
    rows = {r.format: r for r in plan.recommendations}
    assert not rows["bf16"].fits and rows["nvfp4-w4a16"].fits
    assert plan.top.format == "nvfp4-w4a16"
    assert rows["bf16"].resident_gb > 71.9


def test_tensor_parallel_two_gb10(qwen3_8b):
    one = build_plan(qwen3_8b, GB10, formats=["fp8"], recipes=["default"], context=1024)
    two = build_plan(qwen3_8b, GB10, formats=["fp8"], recipes=["default"], context=1024, tp=2)
    tp = two.top.tensor_parallel
    assert tp["ranks"] == 2 and tp["link"] == "cx7-200g"
    assert tp["allreduces_per_step"] == 2 * 36 + 1  # two per layer + the vocab-parallel embedding's
    assert tp["bytes_per_rank"] < 0.55 * one.top.weight_bytes
    # 73 all-reduces x (25 us + 4 KB / 21 GB/s) + the logits' all-gather per token: the link eats part of the gain
    assert 1.5e-3 < tp["comm_seconds_per_step"] < 2.5e-3
    assert one.top.single_stream_tok_s < two.top.single_stream_tok_s < 2 * one.top.single_stream_tok_s
    assert "--tensor-parallel-size=2" in two.top.flags and "--distributed-executor-backend=ray" in two.top.flags


def test_unknown_format_or_recipe():
    from roofline.sources.config import load_config_only

    inv = load_config_only(str(REFERENCE / "Qwen__Qwen3-8B"))
    with pytest.raises(RooflineError, match="unknown format"):
        build_plan(inv, GB10, formats=["fp3"], recipes=["default"])
    with pytest.raises(RooflineError, match="unknown recipe"):
        build_plan(inv, GB10, formats=["fp8"], recipes=["yolo"])


def test_cli_json(capsys):
    from roofline.cli import main

    rc = main(["plan", str(REFERENCE / "nvidia__Qwen3-30B-A3B-NVFP4"), "--formats", "fp8,nvfp4-w4a4",
               "--recipe", "default", "--concurrency", "4", "--json"])
    assert rc == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["schema"] == "roofline.plan/1"
    assert payload["top_pick"]["serve_command"].startswith("vllm serve ")
    assert [r["rank"] for r in payload["recommendations"]] == list(range(1, len(payload["recommendations"]) + 1))
    # a quantized checkpoint is planned from its base, and the recipes are named after the base
    assert payload["base_of"] == "nvidia__Qwen3-30B-A3B-NVFP4" and payload["model"] == "Qwen3-30B-A3B"
    rows = payload["recommendations"]
    assert {r["checkpoint"] for r in rows if not r["given"]} <= {"./Qwen3-30B-A3B-NVFP4", "./Qwen3-30B-A3B-FP8-dynamic"}
    assert payload["notes"][0].startswith("nvidia__Qwen3-30B-A3B-NVFP4 is quantized (modelopt NVFP4)")
    # ...and the checkpoint given is a ranked row of its own, served as the user named it, priced from
    # its own tensors; a simulated row that only repeats it (default NVFP4 W4A4) is not listed twice
    given = [r for r in rows if r["given"]]
    assert given and all(r["recipe"] == "as given" and r["format"] == "nvfp4-w4a4" and not r["quantize_with"]
                         and r["checkpoint"] == str(REFERENCE / "nvidia__Qwen3-30B-A3B-NVFP4") for r in given)
    assert not [r for r in rows if r["format"] == "nvfp4-w4a4" and r["recipe"] == "default"]
    assert len({(r["recipe"], r["backend"]) for r in rows if r["format"] == "nvfp4-w4a4"}) == \
        len([r for r in rows if r["format"] == "nvfp4-w4a4"])


def test_a_published_checkpoint_is_named_instead_of_quantizing(qwen3_8b):
    """Qwen3-8B's NVFP4 W4A16 and FP8 releases are in measurements.toml: the best row of each
    format serves them; a format none was published in is made by the user."""
    plan = build_plan(qwen3_8b, GB10, formats=["fp8", "nvfp4-w4a16", "int4-awq"], recipes=["default"])
    first = {}
    for r in plan.recommendations:
        first.setdefault(r.format, r)
    assert first["nvfp4-w4a16"].checkpoint == "ELVISIO/Qwen3-8B-NVFP4A16" and not first["nvfp4-w4a16"].quantize_with
    assert first["fp8"].checkpoint == "RedHatAI/Qwen3-8B-FP8-dynamic"
    assert any(reason.startswith("published as RedHatAI/Qwen3-8B-FP8-dynamic") for reason in first["fp8"].reasons)
    assert first["int4-awq"].checkpoint.startswith("./") and first["int4-awq"].quantize_with


def test_cli_text_and_bad_input(capsys):
    from roofline.cli import main

    assert main(["plan", str(REFERENCE / "Qwen__Qwen3-8B"), "--formats", "fp8,nvfp4-w4a16"]) == 0
    out = capsys.readouterr().out
    assert "top pick:" in out and "vllm serve" in out
    assert main(["plan", str(REFERENCE / "Qwen__Qwen3-8B"), "--concurrency", "0"]) == 2
    assert "error: Invalid value for '--concurrency'" in capsys.readouterr().err


def test_grouped_expert_records_give_the_per_expert_bytes_exactly():
    """simulate() treats an expert stack as one record per kind of weight with the expert count
    as its leading dimension: its bytes must equal requantizing every expert one by one."""
    from roofline.model.formats import get_format
    from roofline.model.storage import stored_tensors
    from roofline.sources.config import load_config_only

    base = load_config_only(str(REFERENCE / "Qwen__Qwen3-30B-A3B"))
    experts = next(m for m in base.modules if m.role == "moe_experts")
    assert experts.experts == 128 and len(experts.tensors) == 3 * 128
    for fmt in ("nvfp4-w4a16", "nvfp4-w4a4", "fp8", "int4-awq", "mxfp4"):
        sim = simulate(base, fmt, get_recipe("default"))
        stacked = sim.by_name()[experts.name]
        method = stacked.quant_method
        group = get_format(fmt).group_size or 128
        one_by_one = sum(t.nbytes for w in experts.tensors for t in stored_tensors(w, fmt, method, group_size=group))
        assert stacked.nbytes == one_by_one, fmt
        assert stacked.params == experts.params
        assert all(t.shape[0] == 128 for t in stacked.tensors)  # one record per kind, experts leading
        assert all(t.name.startswith(experts.name + ".") for t in stacked.tensors)


# ------------------------------------------------------------------------------- near-ties
def _tie_plan(qwen3_8b, hardware="gb10", record_rows=None):
    return build_plan(qwen3_8b, get_hardware(hardware), formats=["fp8", "nvfp4-w4a16", "nvfp4-w4a4", "mxfp4", "int4-awq"],
                      recipes=["default"], concurrency=1, context=4096, record_rows=record_rows)


def test_near_ties_are_shown_and_broken_by_measurement(qwen3_8b):
    """INT4 AWQ, MXFP4 and NVFP4 W4A16 predict within ~3% of each other on GB10 (inside the
    model's ±5%): a tie. NVFP4 W4A16 has a published measurement on GB10 (roofline/data/measurements.toml): it wins,
    and the plan says so."""
    plan = _tie_plan(qwen3_8b)
    by_format = {}
    for r in plan.recommendations:
        by_format.setdefault(r.format, r)
    awq, w4a16 = by_format["int4-awq"], by_format["nvfp4-w4a16"]
    assert awq.single_stream_tok_s > w4a16.single_stream_tok_s  # the bare prediction prefers AWQ...
    assert plan.top.format == "nvfp4-w4a16"  # ...the evidence prefers the measured one
    assert plan.top.tie_group and awq.tie_group == plan.top.tie_group
    assert "measured on gb10" in plan.top.decided_by and "40.85" in plan.top.decided_by
    assert by_format["fp8"].tie_group == 0  # 25 vs 38 tok/s is no tie
    payload = plan.to_json()
    assert payload["top_pick"]["tie"]["decided_by"] == plan.top.decided_by
    assert payload["tie_tolerance"] == payload["band"]["error"]  # the class's validated band
    assert plan.top.reasons[0].startswith(f"a tie within ±{100 * payload['band']['error']:.0f}%")


def test_your_own_measurement_outweighs_a_published_one(qwen3_8b):
    rows = [{"hardware": "gb10", "model": "me/Qwen3-8B-AWQ", "weight_format": "int4-awq", "measured_tok_s": 44.0,
             "recorded_at": "2026-11-20T10:00:00"}]
    plan = _tie_plan(qwen3_8b, record_rows=rows)
    assert plan.top.format == "int4-awq"
    assert "your validation record" in plan.top.decided_by and "44" in plan.top.decided_by


def test_without_measurements_a_published_checkpoint_decides(qwen3_8b):
    plan = _tie_plan(qwen3_8b, hardware="h100-sxm")
    assert plan.top.tie_group and plan.top.format == "nvfp4-w4a16"
    # no measurement on this hardware: what decides is what is published and needs no calibration
    # data (W4A4 on Hopper runs on Marlin, tied with W4A16 and also published: calibration decides)
    assert not plan.top.decided_by.startswith("measured on")
    # (an H100 has no class of its own: the tie is as wide as the H200's band widened by the transfer error)
    assert plan.top.decided_by in ("a published checkpoint exists: ELVISIO/Qwen3-8B-NVFP4A16",
                                   "NVFP4 W4A16 needs no calibration data; NVFP4 W4A4 does",
                                   "no evidence beyond the prediction: the higher predicted tok/s")
    runner_up = next(r for r in plan.recommendations[1:] if r.tie_group == plan.top.tie_group
                     and r.format != plan.top.format)
    if plan.top.decided_by.startswith("no evidence"):  # then the prediction decides, and says so truly
        assert plan.top.single_stream_tok_s >= runner_up.single_stream_tok_s


def test_base_model_names():
    from roofline.model.naming import base_model_name

    assert base_model_name("RedHatAI/Qwen3-8B-FP8-dynamic") == "Qwen3-8B"
    assert base_model_name("ELVISIO/Qwen3-8B-NVFP4A16") == "Qwen3-8B"
    assert base_model_name("nvidia__Qwen3.6-35B-A3B-NVFP4") == "Qwen3.6-35B-A3B"
    assert base_model_name("Qwen/Qwen3-30B-A3B-GPTQ-Int4") == "Qwen3-30B-A3B"
    assert base_model_name("meta-llama/Llama-3.1-8B") == "Llama-3.1-8B"


def test_a_tie_names_the_row_the_evidence_overruled():
    """The tie's reason is about the fastest row of another format in the tie: "the higher predicted
    tok/s" is never said of a winner slower than a row it beat (MXFP4 197.5 "by the higher predicted
    tok/s" over INT4 AWQ 199.1)."""
    from roofline.sources.config import load_config_only

    inventory = load_config_only(str(REFERENCE / "Qwen__Qwen3-30B-A3B"))
    for hardware in ("rtx-4090", "h100-sxm", "gb10"):
        plan = build_plan(inventory, get_hardware(hardware), formats=["nvfp4-w4a16", "mxfp4", "int4-awq"],
                          recipes=["default"], context=1024)
        top = plan.top
        assert top.tie_group, hardware
        tied = [r for r in plan.recommendations if r.tie_group == top.tie_group and r.format != top.format]
        fastest = max(tied, key=lambda r: r.single_stream_tok_s)
        if top.decided_by.startswith("no evidence"):
            assert top.single_stream_tok_s >= fastest.single_stream_tok_s, (hardware, top.decided_by)
        elif "needs no calibration data" in top.decided_by:
            assert top.decided_by.endswith(f"{format_label(fastest.format)} does"), (hardware, top.decided_by)


def test_the_pick_never_changes_to_a_slower_option():
    from roofline.sources.config import load_config_only

    inventory = load_config_only(str(REFERENCE / "Qwen__Qwen3-30B-A3B"))
    # W4A16 and AWQ tie at 64 streams on GB10; the measured W4A16 is put first, AWQ predicts faster
    plan = build_plan(inventory, GB10, formats=["nvfp4-w4a16", "int4-awq"], recipes=["default"],
                      context=1024, concurrency=64)
    one, top, said = plan.pick_at_one, plan.top, plan.pick_change()
    assert (one.format, top.format) == ("int4-awq", "nvfp4-w4a16") and top.aggregate_tok_s <= one.aggregate_tok_s
    assert said.startswith("at 64 streams") and "ties with" in said and top.decided_by in said
    # a real change names the faster option
    plan = build_plan(inventory, GB10, formats=["nvfp4-w4a4", "int4-awq"], recipes=["default"],
                      context=1024, concurrency=64)
    said = plan.pick_change()
    assert said.startswith("the pick changes") and plan.top.aggregate_tok_s > plan.pick_at_one.aggregate_tok_s


def test_evidence_from_another_model_says_so(qwen3_8b):
    from roofline.sources.config import load_config_only

    inventory = load_config_only(str(REFERENCE / "Qwen__Qwen3-30B-A3B"))
    plan = build_plan(inventory, GB10, formats=["nvfp4-w4a16", "int4-awq"], recipes=["default"], context=1024)
    if plan.top.decided_by.startswith("measured on gb10"):
        assert "on another model, Qwen3-8B, not Qwen3-30B-A3B" in plan.top.decided_by


def test_quantizing_what_the_publisher_kept_says_so():
    """gpt-oss ships MXFP4 experts with BF16 attention: a row that quantizes the attention too carries
    the accuracy caveat first; the release as given, and a row that keeps what it kept, do not."""
    import contextlib
    import io

    from roofline.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["plan", str(REFERENCE / "openai__gpt-oss-20b"), "--json"]) == 0
    rows = json.loads(out.getvalue())["recommendations"]
    given = [r for r in rows if r["given"]]
    assert given and not any("accuracy risk" in reason for r in given for reason in r["reasons"])
    risky = [r for r in rows if not r["given"] and r["format"] != "bf16"]
    assert risky and all(r["reasons"][0].startswith("accuracy risk: quantizes ") and "self_attn" in r["reasons"][0]
                         and "openai__gpt-oss-20b kept in BF16" in r["reasons"][0] for r in risky)
    bf16 = next(r for r in rows if r["format"] == "bf16")
    assert not any("accuracy risk" in reason for reason in bf16["reasons"])


def test_a_row_vllm_would_not_start_does_not_fit(capsys):
    """Nemotron-3-Nano-30B-A3B in BF16 on an H100 at a 4,096-token context: its weights and cache fit the memory, but
    the KV cache left holds fewer Mamba state blocks than vLLM's default 1,024 sequences need for full CUDA graphs,
    and vLLM refuses that serve line at start-up. The plan says so and picks a row that starts (capacity's check,
    the one pricing of start-up memory)."""
    from roofline.cli import main

    rc = main(["plan", str(REFERENCE / "nvidia__NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"), "--hardware", "h100-sxm",
               "--context", "4096", "--formats", "bf16,fp8", "--recipe", "default", "--json"])
    assert rc == 0
    payload = json.loads(capsys.readouterr().out)
    rows = {r["format"]: r for r in payload["recommendations"]}
    assert not rows["bf16"]["fits"] and rows["bf16"]["resident_gb"] < 80 * 0.92
    assert rows["bf16"]["reasons"][0].startswith("does not start: vLLM refuses to start: max_num_seqs (1024) exceeds")
    assert rows["fp8"]["fits"] and payload["top_pick"]["format"] == "fp8"
