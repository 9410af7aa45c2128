"""The step model's GPU coefficients and kernel counts against real vLLM on the H200 (the results files
of benchmarks/gpu_vllm, committed): the tables carry what the fit gives, the fit is current, and the
kernel table counts what the profiled steps launched."""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import pytest

from roofline.audit import load_inventory
from roofline.data import load_table
from roofline.predict.hardware import get_hardware
from roofline.predict.kernels import estimate_kernels

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "vllm_h200"
sys.path.insert(0, str(ROOT / "benchmarks" / "gpu_vllm"))

import fit  # noqa: E402  (benchmarks/gpu_vllm/fit.py)


@pytest.fixture(scope="module")
def fitted():
    rows = fit.load_rows()
    return rows, fit.fit(rows)


def test_fit_json_is_what_the_results_give(fitted):
    """fit.json (which the tables cite) is the fit of the results files as they are now."""
    _, model = fitted
    stored = json.loads(fit.FIT_FILE.read_text())["coefficients"]
    assert stored == pytest.approx({"efficiency": model.efficiency, "graph_floor_us_per_kernel": model.floor_us,
                                    "compute_utilization": model.utilization,
                                    "host_us_per_kernel": model.host_us, "moe_layer_host_equiv": model.moe_equiv,
                                    "mamba_layer_host_equiv": model.mamba_equiv})


def test_tables_carry_the_fitted_coefficients():
    stored = json.loads(fit.FIT_FILE.read_text())["coefficients"]
    launch, kernels = load_table("launch"), load_table("kernels")
    h200 = get_hardware("h200")
    assert h200.efficiency == pytest.approx(stored["efficiency"]) and h200.efficiency_kind == "measured"
    assert h200.compute_utilization == pytest.approx(stored["compute_utilization"])
    assert launch["floor"]["h200"]["graph_floor_us_per_kernel"] == pytest.approx(stored["graph_floor_us_per_kernel"])
    assert launch["host"]["x86_server"]["host_us_per_kernel"] == pytest.approx(stored["host_us_per_kernel"])
    assert kernels["python"]["moe"]["eager_host_equiv"] == pytest.approx(stored["moe_layer_host_equiv"])
    assert kernels["python"]["mamba"]["eager_host_equiv"] == pytest.approx(stored["mamba_layer_host_equiv"])
    for entry in (launch["floor"]["h200"], launch["host"]["x86_server"], kernels["python"]["moe"]):
        assert entry["kind"] == "measured" and "fit.json" in entry["source"]


def test_zeroed_biases_route_as_the_steps_show(fitted):
    """A run that zeroed biases after start-up is priced as its tokens routed (engine_fit.ZEROED_BIAS_ROUTING):
    gpt-oss with every bias zeroed by token, in the fit; with its routers' bias alone its tokens share experts, left
    out past one token. The recorded steps say which: with every bias zeroed the 120b's step grows ~5x from 1 to 32 tokens (the
    experts its tokens spread over), with the routers' bias alone less than 2x."""
    rows, _ = fitted
    by_case: dict[str, list] = {}
    for r in rows:
        by_case.setdefault(r.case, []).append(r)
    every, router = by_case["gptoss120b-marlin-rb0all-1202a"], by_case["gptoss120b-marlin-rb0-1202x"]
    assert {r.routing for r in every} == {"uniform"} and not any(fit.left_out(r) for r in every)
    one_tokens_experts = fit.ROUTING["nemotron_h"]  # every token the experts of one: the dummy correction bias's
    assert {r.routing for r in router} == {one_tokens_experts} != {"uniform"}
    assert all(fit.left_out(r) == (r.batch > 1) for r in router)  # one token reads its top-k, whichever they are
    assert {r.routing for r in by_case["nemo13-rb0-1202y"]} == {"uniform"}  # no other bias: by token

    def growth(case_rows):
        steps = {r.batch: r.measured_ms for r in case_rows}
        return steps[32] / steps[1]

    assert growth(every) > 4 and growth(router) < 2


def test_mxfp4_marlin_rate_fitted_on_one_model_prices_another(fitted):
    """The MXFP4 Marlin rate fitted on gpt-oss-120b's steps (rules.toml, cc 9.0) prices gpt-oss-20b's on the same
    path, never fitted, within 10% at every batch of 1-32 tokens."""
    rows, model = fitted
    held = [r for r in rows if r.case == "gptoss20b-marlin-rb0all-1202a"]
    assert len(held) == 6 and "gptoss20b-marlin-rb0all-1202a" in fit.HELD_OUT
    assert all(abs(model.predict_ms(r) / r.measured_ms - 1) < 0.10 for r in held)


def test_a_grouped_expert_gemm_takes_a_fixed_time_beyond_its_bytes(fitted):
    """Each grouped expert GEMM on an MXFP4 path takes a fixed time beyond its bytes at the rate (rules.toml
    routed_call_us, fitted with the rate over 1-32 tokens): gpt-oss's one-token steps the fit never saw (other
    machine starts, contexts and attention backends, both paths) come out within 5% on average with it and more than
    8% fast without it, the rate alone (the same rate: the term, not a refit, is what moves them)."""
    rows, model = fitted
    one = [r for r in rows if r.architecture == "gpt_oss" and r.mode == "graphs" and r.batch == 1 and not fit.fitted(r)]
    assert len(one) >= 10 and {r.backend for r in one} == {"MXFP4 Marlin (W4A16)",
                                                           "MXFP4 Triton (triton_kernels matmul_ogs)"}
    assert all(r.routed_calls == 2 * {"openai__gpt-oss-20b": 24, "openai__gpt-oss-120b": 36}[Path(r.config).name]
               and r.routed_call_us > 0 for r in one)  # two grouped GEMMs a MoE layer

    def mean_error(call_us):
        return statistics.mean(r.graphs_s(model.efficiency, model.floor_us, model.utilization,
                                          routed_call_us=call_us) * 1e3 / r.measured_ms - 1 for r in one)

    assert abs(mean_error(None)) < 0.05 and mean_error(0.0) < -0.08


def test_weight_only_backends_carry_their_fit(fitted):
    """rules.toml's Marlin / Machete rates on compute capability 9.0 and kernels.toml's eager Python of a
    Marlin GEMM are fit.json's: measured where the backend ran, the same figures as estimates where the
    same kernel family runs another format; and fit.json's are what the results give."""
    from roofline.predict.backends import backends

    rows, model = fitted
    stored = json.loads(fit.FIT_FILE.read_text())["weight_only_backends"]
    refitted = fit.fit_weight_only(rows, model)
    assert {name: figures.pop("cases") for name, figures in refitted.items()} == \
        {name: figures["cases"] for name, figures in stored.items()}
    assert refitted == {name: pytest.approx({k: v for k, v in figures.items() if k != "cases"})
                        for name, figures in stored.items()}
    assert {"INT4 W4A16 Marlin", "NVFP4 W4A4 on Marlin"} <= set(stored)
    h200 = get_hardware("h200")
    by_name = {b.name: b for b in backends()}
    for name, figures in stored.items():
        backend = by_name[name]
        assert backend.weight_only and backend.rate(h200).kind == "measured" and "fit.json" in backend.rate(h200).source
        assert (backend.weight_gbps(h200), backend.gemm_utilization(h200), backend.routed_call_us(h200)) == \
            pytest.approx((figures["weight_gbps"], figures["gemm_utilization"], figures["routed_call_us"]))
    for backend in by_name.values():  # an estimate repeats a measured backend's figures
        if backend.rate(h200) and backend.rate(h200).kind == "estimate":
            assert (backend.weight_gbps(h200), backend.gemm_utilization(h200)) in \
                {(f["weight_gbps"], f["gemm_utilization"]) for f in stored.values()}
    marlin = next(g for g in load_table("kernels")["gemm"] if (g["format"], g["backend"]) == ("nvfp4-w4a4", "marlin"))
    assert marlin["eager_host_equiv"] == pytest.approx(stored["NVFP4 W4A4 on Marlin"]["gemm_host_equiv"])
    assert marlin["eager_host_equiv_kind"] == "measured"


def test_fitted_model_meets_its_fit_set(fitted):
    """The fitted step model on its own fit set: the errors fit.json states, and no worse than the
    issue's bars for a fit set (graphs) and what the host's run-to-run spread allows (eager)."""
    rows, model = fitted
    errors = fit.errors([r for r in rows if fit.fitted(r)], model)
    summary = json.loads(fit.FIT_FILE.read_text())["in_sample"]
    for mode in ("graphs", "eager"):
        assert fit.summary(errors[mode])["mean_abs"] == pytest.approx(summary[mode]["mean_abs"])
    assert summary["graphs"]["mean_abs"] < 0.05  # the bar for the H200 fit set
    # eager: two machine starts, one cost per launch for both, where the same Qwen3-8B step ran 15.5-17.8 ms on the
    # first and 17.6-37.7 on the second (benchmarks/RESULTS-gpu.md, 2026-12-02): 15% on one start, 20% on the two
    assert summary["eager"]["mean_abs"] < 0.20


def test_price_step_is_the_fitted_model(fitted):
    """The product's step model (price_step with the tables) prices every row as the fit does, the rows it
    fitted, held out and left out (gpt-oss: triton_kernels' own eager Python stays its own in both): the fit's
    decomposition is the step model's, not a second model."""
    from roofline.predict.backends import backends_for
    from roofline.predict.step import StepConfig, price_step

    rows, model = fitted
    hardware = get_hardware("h200")
    checked = 0
    for row in rows:
        if row.batch not in (1, 32):
            continue
        inventory = load_inventory(str(ROOT / row.config))
        if row.quantization == "fp8":
            from roofline.advise.simulate import get_recipe, simulate
            inventory = simulate(inventory, "fp8", get_recipe("default"))
        # the backend the run ran (a --moe-backend it named), else vLLM's default here
        backend = next((b for b in backends_for(inventory.main_format(), hardware) if b.name == row.backend), None)
        step = price_step(inventory, hardware, StepConfig(batch=row.batch, context=row.context, backend=backend,
                                                          graphs=row.mode == "graphs", routing=row.routing,
                                                          kv_cache_dtype=row.kv_cache_dtype,
                                                          attention_backend=row.attention_backend))
        assert step.step_ms == pytest.approx(model.predict_ms(row), rel=1e-6), row.case
        checked += 1
    assert checked >= 40 and any(r.architecture == "gpt_oss" and r.mode == "eager" for r in rows)


REFERENCE = "tests/reference_configs/"
CUT = "benchmarks/gpu_vllm/configs/"  # the GPU runs' cut shapes (fewer layers, the same layer kinds)
PROFILED = {  # profiled run (under benchmarks/results) -> its config (under the repository)
    "vllm_h200/llama8b-graphs-prof": REFERENCE + "meta-llama__Llama-3.1-8B-Instruct",
    "vllm_h200/llama8b-eager-prof": REFERENCE + "meta-llama__Llama-3.1-8B-Instruct",
    "vllm_h200/qwen3-8b-eager": REFERENCE + "Qwen__Qwen3-8B",
    "vllm_h200/qwen3moe-graphs-prof": REFERENCE + "Qwen__Qwen3-30B-A3B",
    "vllm_h200/qwen3moe-eager-prof": REFERENCE + "Qwen__Qwen3-30B-A3B",
    "vllm_h200/nemotronh-graphs-prof": REFERENCE + "nvidia__NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",
    "vllm_h200/nemotronh-eager-prof": REFERENCE + "nvidia__NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",
    # eager steps of the MoE and hybrid families beyond Qwen3's: DeepSeek-V3's MLA, Mixtral's MoE, Qwen3-Next's
    # GDN layers and Gemma-style norms (2026-11-28), the last also on an H100
    "vllm_h200_eagerprof/dsv3-4l-prof": CUT + "DeepSeek-V3-4layers-bf16",
    "vllm_h200_eagerprof/mixtral8l-prof": CUT + "Mixtral-8x7B-8layers",
    "vllm_h200_eagerprof/qwen3next12l-prof": CUT + "Qwen3-Next-80B-A3B-12layers",
    "vllm_h100_mtp/e0": CUT + "Qwen3-Next-80B-A3B-12layers",
    "vllm_h100_mtp/r0": CUT + "Qwen3-Next-80B-A3B-12layers",
    # DeepSeek-V3's MLA with CUDA graphs, and Gemma 4's MoE (sandwich norms, sliding windows) in both modes
    "vllm_h200_gemma4/dsv3-4l-graphs-prof": CUT + "DeepSeek-V3-4layers-bf16",
    "vllm_h200_gemma4/gemma4-eager-prof": CUT + "gemma-4-26B-A4B-text",
    "vllm_h200_gemma4/gemma4-graphs-prof": CUT + "gemma-4-26B-A4B-text",
    # Gemma 4's dense layer (Triton's attention with its segment reduction), and Qwen3-8B eager on Triton's attention
    "vllm_h200_dense_streams/gemma4-31b-prof": CUT + "gemma-4-31B-text",
    "vllm_h200_dense_streams/q8b-triton-eager-prof": REFERENCE + "Qwen__Qwen3-8B",
    # GB10's Marlin path run eager on the H200: gpt-oss at 32 and 128 experts (moe_align_block_size's one
    # small-batch kernel, then two), and Qwen3.6's GDN layers and NVFP4 experts
    "vllm_h200_marlin_eager/gptoss20b-marlin-eager-prof": REFERENCE + "openai__gpt-oss-20b",
    "vllm_h200_eager_hosts/gptoss20b-marlin-eager-b": REFERENCE + "openai__gpt-oss-20b",
    "vllm_h200_eager_hosts/gptoss120b-marlin-eager": REFERENCE + "openai__gpt-oss-120b",
    "vllm_h200_eager_hosts/q36-nvfp4-eager": REFERENCE + "nvidia__Qwen3.6-35B-A3B-NVFP4",
    # Gemma 4's dense layer eager (its v_norm, residual adds and layer scalar beyond the roles and cores)
    "vllm_h200_eager_1129/gemma4-31b-eager-1129": CUT + "gemma-4-31B-text",
    # Qwen3.5's GDN and attention layers with CUDA graphs (no reorder; one fused q/k norm, rope and gate kernel)
    "vllm_h200_qwen36_graphs/q36-bf16-graphs-prof": REFERENCE + "Qwen__Qwen3.6-35B-A3B",
    "vllm_h200_qwen36_graphs/q36-nvfp4-graphs-prof": REFERENCE + "nvidia__Qwen3.6-35B-A3B-NVFP4",
    # Gemma 3's sandwich norms (the post-norms without the residual) and q/k norms, op by op eager
    "vllm_h200_gemma3/g3-12b-eager-prof-1201": CUT + "gemma-3-12b-text",
    # Granite 4.0-H's Mamba2 layers (three kernels of their own), its attention without rotary and its scaled residuals
    "vllm_h200_granite/g4h-tiny-graphs-1202v": CUT + "Granite-4.0-H-Tiny",
    "vllm_h200_granite/g4h-tiny-eager-1202v": CUT + "Granite-4.0-H-Tiny",
    "vllm_h200_granite/g4h-1b-graphs-1202v": CUT + "Granite-4.0-H-1B",
}


@pytest.mark.parametrize("case", sorted(PROFILED))
def test_kernel_table_counts_what_vllm_launched(case):
    """kernels.toml's estimate of one decode step (graph or eager counts) within 4% of the kernels the
    torch profiler saw vLLM launch at batch 1."""
    result = json.loads((RESULTS.parent / f"{case}.json").read_text())
    measured = next(p for p in result["profiles"] if p["batch"] == 1)["kernels_per_step"]
    import eager_python  # benchmarks/gpu_vllm/eager_python.py: the run's MoE backend, where it named one

    profile = estimate_kernels(load_inventory(str(ROOT / PROFILED[case])), None, eager_python.moe_backend_of(result))
    estimate = profile.kernels_per_token if result["mode"] == "graphs" else profile.eager_kernels_per_token
    assert estimate == pytest.approx(measured, rel=0.04)


def test_validation_files_are_current():
    """docs/VALIDATION.md and roofline/data/validation.toml are what the results and the shipped step model
    give now (benchmarks/gpu_vllm/validation.py --check)."""
    import subprocess

    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_vllm" / "validation.py"), "--check"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


def test_native_ops_share_is_what_the_runs_give():
    """kernels.toml's host share of PyTorch's own ops (Gemma-style norms run op by op) is native_ops.py's reading of
    the Gemma 3 steps on the host-checked start (--check); it prices every Gemma-style norm's ops below a full
    launch, the GDN hybrids' too, whose layers' own Python ([python.gdn]) is counted beside them."""
    import subprocess

    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_vllm" / "native_ops.py"), "--check"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    share = load_table("kernels")["core"]["block_norm_gemma"]["eager_host_share"]
    assert 0 < share < 1
    gemma = estimate_kernels(load_inventory(str(ROOT / CUT / "gemma-3-12b-text")))
    hybrid = estimate_kernels(load_inventory(str(ROOT / CUT / "Qwen3-Next-80B-A3B-12layers")))
    norms = [c for c in gemma.counts if c.host_share is not None]
    assert norms and all(c.host_share == share and c.host_equiv == pytest.approx(c.eager * (share - 1)) for c in norms)
    assert {c.role for c in hybrid.counts if c.host_share == share} == {"norms"}
    gdn = [c for c in hybrid.counts if c.role == "gdn_core"]
    assert gdn and all(c.host_equiv == load_table("kernels")["python"]["gdn"]["eager_host_equiv"] for c in gdn)


def test_eager_overlap_table_is_what_the_runs_give():
    """launch.toml [eager_overlap] is eager_overlap.py's reading of the eager and graph steps it names (--check), and
    its points run from about no loss (GB10's dense seed, eager as fast as graphs, averaged with any run whose share
    lies within the script's GROUP of it) to a loss where the host's launches take about the GPU's time."""
    import subprocess

    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_vllm" / "eager_overlap.py"), "--check"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    points = load_table("launch")["eager_overlap"]["loss_by_host_share"]
    assert points[0][1] < 0.02 and max(loss for _, loss in points) > 0.3 and points[-1][0] > 0.9


def test_every_tok_s_carries_its_band():
    """audit's expected tok/s: the band of its class on the H200; the H200's as the nearest class on an
    H100 (same generation), widened by the measured transfer error; GB10's own class (dense: from the seeds,
    out of sample); eager off the measured host widened by the host spread, naming calibrate; plan and
    capacity carry the same band."""
    from roofline.cli import main as cli

    def json_of(*args):
        import contextlib
        import io

        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert cli([*args, "--json"]) == 0
        return json.loads(out.getvalue())

    dense = str(ROOT / "tests" / "reference_configs" / "Qwen__Qwen3-8B")
    moe = str(ROOT / "tests" / "reference_configs" / "Qwen__Qwen3-30B-A3B")
    validation = load_table("validation")
    table = {(b["hardware"], b["mode"], b["family"]): b for b in validation["band"] if b["hardware"] == "h200"}
    h200 = json_of("audit", dense, "--hardware", "h200")
    assert h200["expected_band"]["error"] == table[("h200", "graphs", "dense")]["error"]
    assert h200["expected_band"]["exact"] and "±" in h200["expected_band"]["text"]
    assert h200["eager_band"]["error"] == table[("h200", "eager", "dense")]["error"]
    h100 = json_of("audit", moe, "--hardware", "h100-sxm")
    assert h100["expected_band"]["family"] == "moe" and not h100["expected_band"]["exact"]
    assert "nearest: H200" in h100["expected_band"]["text"]
    assert h100["expected_band"]["error"] == pytest.approx(
        table[("h200", "graphs", "moe")]["error"] + validation["transfer"]["error"])
    assert "another GPU" in h100["expected_band"]["text"]
    assert h100["eager_band"]["error"] == pytest.approx(table[("h200", "eager", "moe")]["error"]
                                                        + validation["transfer"]["error"] + validation["host_spread"]["error"])
    assert "roofline calibrate --engine vllm" in h100["eager_band"]["text"]
    gb10 = json_of("audit", dense, "--hardware", "gb10")
    assert gb10["expected_band"]["exact"] and gb10["expected_band"]["validated_on"] == "gb10"
    assert gb10["expected_band"]["basis"] == "out of sample"
    assert h200["eager_band"]["widened"] == []  # the H200's own host was measured
    plan = json_of("plan", dense, "--hardware", "h200")  # the band of its leading row's class and weights
    [lead] = [r for r in plan["recommendations"] if r["leads"]]
    assert plan["band"]["class_error"] == pytest.approx(h200["expected_band"]["class_error"])
    assert (f"{lead['format']} weights" in plan["band"]["text"]) == bool(plan["band"]["widened"])
    assert json_of("capacity", moe, "--hardware", "h200")["band"]["error"] == table[("h200", "graphs", "moe")]["error"]


def test_capacity_gives_vllms_kv_tokens_on_the_h200():
    """capacity's KV cache tokens against vLLM 0.26.0's own start-up line on the H200, same settings
    (max_model_len, max_num_seqs, max_num_batched_tokens, --enforce-eager for the eager engines): within
    0.5% on dense, MoE, sliding-window models and the Mamba and GDN hybrids (Nemotron-3-Nano, Qwen3-Next cut to 12
    layers: CUDA's raised attention block, the padded state page, the state in the dtype vLLM picks on CUDA; the
    probe runs vLLM without prefix caching, one state block per request), graphs and eager alike: the profile run
    priced by vLLM's model runner (advise/profile_run.py), the CUDA-graph memory vLLM estimates (none on the V2
    runner of the dense engines). Not checked: DeepSeek-V3's MLA cut to 4 layers with graphs (its compiled
    profile peaks 1 GiB above the eager one's; +1.1%)."""
    import compare  # benchmarks/gpu_vllm/compare.py

    _, kv_rows = compare.compared()
    checked = 0
    # Gemma 4 26B-A4B: vLLM holds 47.46 GiB of weights where the checkpoint's tensors price 47.06 (not traced), so
    # capacity gives +0.46% (graphs) and +0.55% (eager) KV tokens: within the 1% above vLLM's that the KV target allows, not this test's 0.5%
    within = {"gemma4": 0.006}
    # gpt-oss-120b on Hopper's default path (triton_kernels' MXFP4 experts) eager: vLLM logged 1.08 GiB of activation
    # where the profile run is priced 1.49 (its graph engines logged 1.25; eager's peak not traced): capacity 0.64%
    # below vLLM's, within the KV target (never above, 3% below at most)
    below = {"gptoss120b-rb0all-eager-1202d": 0.008}
    # engines that found torch.compile's output of an earlier start of the model in the machine's cache (their logs:
    # "Directly load the compiled graph(s)", benchmarks/results/vllm_h200_router_bias/logs-z.tgz; the probe records it
    # since as startup "compile_cache_hit"): the profile run compiled nothing and vLLM logged 0.29 / 0.18 GiB of
    # activation where the first start of each logged 1.1 (capacity prices a first start), so they held 1.3% / 0.9%
    # more KV tokens: capacity below vLLM's and within the 3% the KV target allows
    warm = {"gptoss120b-marlin-rb0-b-1202z", "gptoss20b-rb0-prof-1202z"}
    for name, theirs, ours, startup, terms in kv_rows:
        if name.startswith(("dsv3", "ds-r0-")):  # the DeepSeek-V3 MLA cut with graphs (docstring), under both names
            continue
        assert ours is not None, (name, terms)
        if name in warm or startup.get("compile_cache_hit"):
            assert theirs * 0.97 <= ours < theirs, name
            continue
        if name in below:
            assert theirs * (1 - below[name]) <= ours < theirs, name
            checked += 1
            continue
        rel = next((v for prefix, v in within.items() if name.startswith(prefix)), 0.005)
        assert ours == pytest.approx(theirs, rel=rel), name
        checked += 1
    assert checked >= 20
    graphs = {name: terms.get("cuda_graphs", 0) for name, _, _, _, terms in kv_rows}
    assert graphs["llama8b-graphs"] == graphs["qwen3-8b-graphs"] == 0  # the V2 runner: no estimate subtracted
    assert graphs["qwen3moe-graphs"] > 0 and graphs["nemotronh-graphs"] > 0  # the V1 runner's


def test_gpt_oss_on_hopper_runs_triton_kernels_and_its_eager_python():
    """vLLM 0.26 runs gpt-oss's MXFP4 experts on Hopper with triton_kernels' matmul_ogs, not Marlin: the profiled
    H200 steps launch its seven kernels per layer (benchmarks/results/vllm_h200_gptoss), and under --enforce-eager
    its Python makes the step 47.9 ms for 465 kernels (103 us each, three times a dense model's), the figure the
    layer's Python is taken from. The H100 box's eager steps (another host, measured the day before) come out up
    to 40% slower than priced: the host's own speed, as for every eager class."""
    from roofline.predict.backends import default_backend
    from roofline.predict.step import StepConfig, price_step

    runs = ROOT / "benchmarks" / "results"
    inventory = load_inventory(str(ROOT / "tests" / "reference_configs" / "openai__gpt-oss-20b"))
    h200 = get_hardware("h200")
    backend = default_backend("mxfp4", h200)
    assert backend.moe_backend == "triton" and default_backend("mxfp4", get_hardware("gb10")).moe_backend == "marlin"
    profiled = json.loads((runs / "vllm_h200_gptoss" / "gptoss20b-eager-prof.json").read_text())
    names = [k["name"] for k in profiled["profiles"][0]["top_kernels"] if k["per_step"] == 24]
    moe_kernels = [n for n in names if n.startswith(("_matmul_ogs", "_combined_routing", "_topk_forward",
                                                     "_sum_bitmatrix", "_reduce_grouped"))]
    counts = estimate_kernels(inventory, backend.linear_backend, backend.moe_backend)
    per_layer = sum(c.kernels for c in counts.counts if c.role == "moe_experts") / inventory.shape.num_layers
    assert per_layer == len(moe_kernels) == 7
    eager = price_step(inventory, h200, StepConfig(batch=1, context=1024, graphs=False)).step_ms
    assert eager == pytest.approx(profiled["decode"][0]["step_ms"], rel=0.05)
    # the H100 box's host was slower: 60-78 ms a step (66.7 at batch 1), 30% above the H200 host's price
    h100 = get_hardware("h100-sxm")
    for row in json.loads((runs / "vllm_h100_gptoss" / "gptoss20b-eager.json").read_text())["decode"]:
        priced = price_step(inventory, h100, StepConfig(batch=row["batch"], context=row["context"], graphs=False))
        assert -0.4 < priced.step_ms / row["step_ms"] - 1 < 0, (row, priced.step_ms)


def test_gpt_oss_marlin_eager_python_is_the_mean_of_its_steps():
    """kernels.toml's eager Python of gpt-oss's Marlin MoE layer is what benchmarks/gpu_vllm/eager_python.py fits
    on the recorded eager steps (several machine starts, each at its start's host cost), and it prices those
    steps nearer than the first step's figure alone did."""
    import eager_python  # benchmarks/gpu_vllm/eager_python.py

    table = eager_python.steps()
    term, per_layer = eager_python.fitted_term(table)
    entry = next(e for e in load_table("kernels")["moe"] if e["format"] == "mxfp4" and e["backend"] == "marlin")
    assert entry["eager_host_equiv"] == pytest.approx(term, abs=0.05) and len(per_layer) >= 4
    assert "eager_python.py" in entry["source"]
    gpt_oss = [s for s in table if s.model_type == eager_python.FITTED]
    assert len({s.start for s in gpt_oss}) >= 4  # several machine starts, each at its own host cost

    def error(s, per_layer_python):
        return abs(s.cost_us * (s.launches + per_layer_python * s.moe_layers) / 1e3 / s.step_ms - 1)

    assert sum(error(s, term) for s in gpt_oss) < sum(error(s, per_layer[0]) for s in gpt_oss)


def test_a_model_family_is_its_lineage_not_its_kind():
    """Validation leaves a model family out of the fit at once: Qwen's dense, MoE and GDN architectures are one
    family (roofline/data/lineage.toml), Llama another though both are dense; an architecture the table does
    not list stands alone. Leaving a family out drops every row of it and prices each with the rest."""
    from dataclasses import replace

    from roofline.predict.bands import lineage, model_family

    refs = ROOT / "tests" / "reference_configs"
    qwen = [load_inventory(str(refs / name)) for name in ("Qwen__Qwen3-8B", "Qwen__Qwen3-30B-A3B",
                                                        "Qwen__Qwen3-Next-80B-A3B-Thinking")]
    assert {lineage(i) for i in qwen} == {"Qwen"}
    assert {model_family(i) for i in qwen} == {"dense", "moe", "hybrid"}
    llama = load_inventory(str(refs / "meta-llama__Llama-3.1-8B-Instruct"))
    assert lineage(llama) != "Qwen" and model_family(llama) == model_family(qwen[0])
    unseen = replace(llama, shape=replace(llama.shape, model_type="granite_next"))
    assert lineage(unseen) == "granite_next"

    import validation  # benchmarks/gpu_vllm/validation.py

    rows = [r for r in fit.load_rows() if fit.fitted(r)]
    out = validation.leave_group_out(rows, lambda r: "Qwen" if r.architecture.startswith("qwen") else r.architecture)
    qwen_rows = [r for r in rows if r.architecture.startswith("qwen")]
    assert qwen_rows and all(id(r) in out for r in qwen_rows)
    without = fit.fit([r for r in rows if not r.architecture.startswith("qwen")])
    assert out[id(qwen_rows[0])] == pytest.approx(without.predict_ms(qwen_rows[0]) / qwen_rows[0].measured_ms - 1)


def test_gdn_layer_eager_python_is_what_its_steps_give():
    """kernels.toml [python.gdn] is what eager_python.py fits: Qwen3-Next's GDN layer on one machine start, Qwen3.5's
    (Qwen3.6's step) apart; those steps are in no band (fit.SET_A_TERM), and Qwen3-Next's step on another start,
    which never set it, is priced within 5% at its start's host cost."""
    import eager_python  # benchmarks/gpu_vllm/eager_python.py

    table = eager_python.steps()
    gdn = load_table("kernels")["python"]["gdn"]
    assert gdn["eager_host_equiv"] == pytest.approx(eager_python.fitted_term(table, "qwen3_next")[0], abs=0.05)
    qwen35 = eager_python.fitted_term(table, "qwen3_5_moe")[0]
    assert gdn["eager_host_equiv_by_model_type"]["qwen3_5_moe"] == pytest.approx(qwen35, abs=0.05)
    assert {"qwen3next12l-eager-1127c", "q36-nvfp4-eager-1128h"} <= set(fit.SET_A_TERM)
    (check,) = [s for s in table if s.file in eager_python.CHECKS]
    priced = check.cost_us * (check.launches + check.python) / 1e3
    assert check.model_type == "qwen3_next" and abs(priced / check.step_ms - 1) < 0.05


def test_gemma4_decoder_layer_eager_python_is_what_its_step_gives():
    """kernels.toml's eager Python of Gemma 4's decoder layer is what benchmarks/gpu_vllm/eager_python.py fits on
    the 31B's eager step at its start's host cost, the MoE model's layer carries the same; that step is in no
    band (fit.SET_A_TERM), and Gemma 4 26B-A4B's eager step of another start, which never set it, is priced
    nearer than without it."""
    import eager_python  # benchmarks/gpu_vllm/eager_python.py

    term, per_layer = eager_python.fitted_term(eager_python.steps(), "gemma4_text")
    layers = load_table("kernels")["layer"]
    assert layers["gemma4_dense"]["eager_host_equiv"] == pytest.approx(term, abs=0.05) and per_layer
    assert layers["gemma4"]["eager_host_equiv"] == layers["gemma4_dense"]["eager_host_equiv"]
    assert "gemma4-31b-eager-1129" in fit.SET_A_TERM and "gemma4-31b-eager-1129" in fit.HELD_OUT
    rows = {(r.case, r.batch): r for r in fit.load_rows()}
    model = fit.fit(list(rows.values()))
    moe = rows[("gemma4-eager-1128b", 1)]
    without = model.predict_ms(moe) - 30 * term * model.host_us / 1e3  # its 30 layers' Python taken away
    assert abs(model.predict_ms(moe) / moe.measured_ms - 1) < abs(without / moe.measured_ms - 1)
