"""Speculative decoding's step, measured on real vLLM beside the step model's price of it, by mechanism:
MTP (a GDN-hybrid MoE and DeepSeek-V3's MLA MoE), EAGLE-3 on a dense model, a draft model, ngram.

    .venv/bin/python benchmarks/gpu_vllm/spec_steps.py            # the table
    .venv/bin/python benchmarks/gpu_vllm/spec_steps.py --table    # and benchmarks/gpu_vllm/spec_steps.json, which
                                                                  # validation.py reads (the speculative steps' band)
    .venv/bin/python benchmarks/gpu_vllm/spec_steps.py --check    # exit 1 when spec_steps.json differs

Runs: benchmarks/results/vllm_h200_spec/ (H200), benchmarks/results/vllm_h100_mtp/ (H100) and
benchmarks/results/vllm_h200_spec_async/ (H200, two more starts: a draft model and DeepSeek-V3's MTP, with vLLM's
asynchronous scheduling on and off on one, Qwen3-8B eager beside them for the host's speed), vLLM 0.26.0,
dummy weights, 1,024-token prompts, `benchmarks/gpu_vllm/probe.py` (the probe `roofline calibrate --engine
vllm` runs). With dummy weights no model draft is accepted, so a step is one verify of 1 + n tokens per
sequence and its n drafts; ngram's drafts are accepted (the dummy model repeats itself) and its verify step
is vLLM's spec-decode counters' drafts over the run. Predicted: `roofline audit CONFIG --hardware <the run's
card> --batch B --context 1024 --speculative-config <the run's> --acceptance-rate 0 --routing <as the dummy weights
route the verify step's tokens: engine_fit.dummy_routing>`. Nothing of the step
model was fitted to these runs except the drafts' kernel and launch counts (data/kernels.toml [draft.*],
counts of vLLM's code) and ngram's host time."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
RUNS = [REPO / "benchmarks" / "results" / name for name in ("vllm_h200_spec", "vllm_h100_mtp", "vllm_h200_spec_async")]
CARDS = {"NVIDIA H200": "h200", "NVIDIA H100 80GB HBM3": "h100-sxm"}


def audited_step_ms(config: str, card: str, batch: int, context: int, *flags: str) -> float:
    """The step `roofline audit CONFIG --json` prices (as a user runs it) at `batch` sequences of `context` tokens."""
    args = [sys.executable, "-m", "roofline.cli", "audit", config, "--hardware", card, "--context", str(context),
            "--batch", str(batch), "--json", *flags]
    out = subprocess.run(args, capture_output=True, text=True, cwd=REPO)
    if out.returncode:
        raise SystemExit(f"{config}: {out.stderr.strip()}")
    return json.loads(out.stdout)["step"]["step_ms"]


def predicted_step_ms(run: dict, batch: int, context: int) -> float:
    args = []
    if run["mode"] == "eager":
        args.append("--enforce-eager")
    if run.get("async_scheduling") is not None:  # as vLLM ran it (recorded since the probe records it; before,
        # vLLM's default, which the tool resolves as vLLM does: the logs say so)
        args.append("--async-scheduling" if run["async_scheduling"] else "--no-async-scheduling")
    if run.get("speculative_config"):
        args += ["--speculative-config", json.dumps(run["speculative_config"]), "--acceptance-rate", "0"]
    # the verify step's 1 + n tokens a sequence, routed as vLLM's dummy weights route that many (the fit's rule)
    from roofline.audit import load_inventory
    from roofline.live.engine_fit import dummy_routing
    from roofline.predict.hardware import get_hardware

    tokens = batch * (1 + (run.get("speculative_config") or {}).get("num_speculative_tokens", 0))
    routing = dummy_routing(load_inventory(str(REPO / run["config"]), config_only=True), tokens,
                            get_hardware(CARDS[run["gpu"]]))
    return audited_step_ms(run["config"], CARDS[run["gpu"]], batch, context, *args, "--routing", routing)


def rows() -> list[dict]:
    out = []
    for folder in RUNS:
        for path in sorted(folder.glob("*.json")):
            run = json.loads(path.read_text())
            spec = run.get("speculative_config") or {}
            for row in run["decode"]:
                measured = row.get("verify_step_ms", row["step_ms"])
                predicted = predicted_step_ms(run, row["batch"], row.get("context", 1024))
                out.append({"run": f"{folder.name}/{path.stem}", "config": run["config"], "card": CARDS[run["gpu"]],
                            "mode": run["mode"],
                            "method": spec.get("method", "-"), "drafts": spec.get("num_speculative_tokens", 0),
                            "batch": row["batch"], "measured_ms": measured, "predicted_ms": predicted,
                            "error": predicted / measured - 1})
    return out


TABLE = Path(__file__).resolve().parent / "spec_steps.json"


def table_json(table: list[dict]) -> str:
    rounded = [{k: round(v, 4) if isinstance(v, float) else v for k, v in r.items()} for r in table]
    return json.dumps({"schema": "roofline.spec_steps/1", "command": "benchmarks/gpu_vllm/spec_steps.py --table",
                       "rows": rounded}, indent=1) + "\n"


def main() -> None:
    table = rows()
    if "--check" in sys.argv[1:]:
        if not TABLE.exists() or TABLE.read_text() != table_json(table):
            raise SystemExit(f"{TABLE.relative_to(REPO)} differs from what the runs and the step model give now: "
                             "rerun with --table")
        print(f"{TABLE.relative_to(REPO)}: up to date")
        return
    if "--table" in sys.argv[1:]:
        TABLE.write_text(table_json(table))
    print(f"{'run':<36} {'card':<9} {'mode':<6} {'method':<11} {'drafts':>6} {'batch':>5} {'measured':>9} "
          f"{'predicted':>9} {'error':>6}")
    for r in table:
        print(f"{r['run']:<36} {r['card']:<9} {r['mode']:<6} {r['method']:<11} {r['drafts']:>6} {r['batch']:>5} "
              f"{r['measured_ms']:>9.2f} {r['predicted_ms']:>9.2f} {100 * r['error']:>+5.0f}%")
    graphs = [r for r in table if r["mode"] == "graphs" and r["drafts"]]
    print(f"graph-mode speculative steps: mean |error| {100 * sum(abs(r['error']) for r in graphs) / len(graphs):.1f}%"
          f" over {len(graphs)}, worst {100 * max((r['error'] for r in graphs), key=abs):+.0f}%")


if __name__ == "__main__":
    main()
