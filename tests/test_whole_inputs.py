"""What users hand the tool, taken whole (#45): doctor on a saved result alone, doctor and calibrate reading a
model from its config.json alone, as audit --config-only does.

Inputs: the reference configs (real config.json files), result files in vllm bench serve's shape."""
from __future__ import annotations

import json
from pathlib import Path

from inprocess import run

REPO = Path(__file__).resolve().parents[1]
DENSE = str(REPO / "tests" / "reference_configs" / "Qwen__Qwen3-8B")


def _closed_loop(path: Path, tpot_ms: float = 30.0) -> Path:
    path.write_text(json.dumps({"backend": "vllm", "num_prompts": 8, "request_rate": "inf", "max_concurrency": 1,
                                "completed": 8, "total_input_tokens": 8 * 1024, "total_output_tokens": 8 * 128,
                                "median_tpot_ms": tpot_ms}))
    return path


def test_doctor_diagnoses_a_saved_result_alone_from_a_config(tmp_path):
    ran = run("doctor", DENSE, "--config-only", "--bench-json", _closed_loop(tmp_path / "r.json"), "--hardware", "h200",
              "--json")
    assert ran.returncode == 0, ran.err
    out = json.loads(ran.out)
    assert out["inventory_source"].endswith("(config only)") and out["server"]["model"] == "Qwen__Qwen3-8B"
    assert out["measured_tok_s"] == 1e3 / 30.0 and out["url"] is None
    text = run("doctor", DENSE, "--config-only", "--bench-json", _closed_loop(tmp_path / "r.json"), "--hardware",
               "h200").out
    assert text.startswith("doctor: Qwen__Qwen3-8B at (no server: a saved result)")


def test_calibrate_from_results_reads_models_from_their_configs(tmp_path):
    ran = run("calibrate", "--from-results", f"{DENSE}={_closed_loop(tmp_path / 'r.json', 8.0)}", "--config-only",
              "--hardware", "h200", "--json")
    assert ran.returncode == 0, ran.err
    assert json.loads(ran.out)["points"][0]["model"] == DENSE
    refused = run("calibrate", "--config-only", "--device", "cpu")
    assert refused.returncode != 0 and "--config-only applies to --from-results" in refused.err
