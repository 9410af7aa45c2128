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


# llama-benchy --format md, in the shape its results.py writes (tabulate's pipe table); the figures are ours
BENCHY_ONE = """\
| model          |           test |            t/s |      ttfr (ms) |   est_ppt (ms) |   e2e_ttft (ms) |
|:---------------|---------------:|---------------:|---------------:|---------------:|----------------:|
| Qwen/Qwen3-8B  |         pp2048 | 3312.41 ± 12.02 |  640.39 ± 2.21 |  618.30 ± 2.21 |   640.46 ± 2.21 |
| Qwen/Qwen3-8B  |          tg128 |   12.88 ± 0.05 |                |                |                 |
| Qwen/Qwen3-8B  | pp2048 @ d4096 | 3100.00 ± 10.00 | 1990.00 ± 5.00 | 1968.00 ± 5.00 |  1990.10 ± 5.00 |
| Qwen/Qwen3-8B  |  tg128 @ d4096 |   12.10 ± 0.10 |                |                |                 |
"""
BENCHY_SWEEP = """\
| model         |              test |    t/s (total) |      t/s (req) |      ttfr (ms) |   est_ppt (ms) |   e2e_ttft (ms) |
|:--------------|------------------:|---------------:|---------------:|---------------:|---------------:|----------------:|
| Qwen/Qwen3-8B |       pp512 (c1) |  2100.00 ± 5.00 |  2100.00 ± 5.00 |  250.00 ± 1.00 |  240.00 ± 1.00 |   250.00 ± 1.00 |
| Qwen/Qwen3-8B |        tg64 (c1) |   12.90 ± 0.02 |   12.90 ± 0.02 |                |                |                 |
| Qwen/Qwen3-8B |       pp512 (c4) |  4000.00 ± 9.00 |  1100.00 ± 9.00 |  520.00 ± 3.00 |  510.00 ± 3.00 |   520.00 ± 3.00 |
| Qwen/Qwen3-8B |        tg64 (c4) |   48.00 ± 0.30 |   12.20 ± 0.10 |                |                |                 |
"""


def test_validate_reads_llama_benchys_markdown_table(tmp_path):
    one = tmp_path / "one.md"
    one.write_text(BENCHY_ONE)
    ran = run("validate", DENSE, "--config-only", "--bench-json", one, "--hardware", "gb10", "--no-record", "--json")
    assert ran.returncode == 0, ran.err
    out = json.loads(ran.out)
    assert out["measured_tok_s"] == 12.88  # the smallest context's generation rate
    assert out["scenario"]["context"] == 2048 + 64
    sweep = tmp_path / "sweep.md"
    sweep.write_text(BENCHY_SWEEP)
    out = json.loads(run("validate", DENSE, "--config-only", "--bench-json", sweep, "--hardware", "gb10",
                         "--no-record", "--json").out)
    assert [(row["concurrency"], row["measured_per_stream_tok_s"]) for row in out["curve"]] == [(1, 12.9), (4, 12.2)]
    fit = run("calibrate", "--from-results", f"{DENSE}={sweep}", "--config-only", "--hardware", "gb10", "--json")
    assert fit.returncode == 0, fit.err
    assert [p["streams"] for p in json.loads(fit.out)["points"]] == [1, 4]


def test_a_markdown_file_that_is_no_llama_benchy_table_is_one_line(tmp_path):
    for text, says in (("# notes\nnothing here\n", "neither JSON nor llama-benchy"),
                       (BENCHY_ONE.replace("tg128 @ d4096", "tg128 @ deep"), "is not one llama-benchy writes"),
                       (BENCHY_ONE.replace("12.88 ± 0.05", "fast"), "not a llama-benchy figure")):
        path = tmp_path / "bad.md"
        path.write_text(text)
        ran = run("validate", DENSE, "--config-only", "--bench-json", path, "--hardware", "gb10", "--no-record")
        assert ran.returncode != 0 and says in ran.err and len(ran.err.strip().splitlines()) == 1, ran.err
