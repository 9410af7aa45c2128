"""The host's work per layer of a decode step run in vLLM's piecewise CUDA graphs, by what the graph is split at
(prefill.toml [[piecewise.split]]): fitted on one machine start's steps, checked on other starts' and models'.

A decode batch padded to a capture size whose requests exceed --max-num-seqs has no FULL graph: vLLM replays the
piecewise graphs and, at every layer it splits them at (CompilationConfig.splitting_ops: attention, a hybrid's GDN
or Mamba mixer), the host runs the op's Python forward between two replays. The GPU waits on the host: the step is
the engine's own host time (launch.toml [step_host]) plus those layers' (at the host's cost per launch, launch.toml
[host]). With --max-num-seqs 3 the capture sizes are 1, 2 and 4, and a batch of 3 pads to 4: piecewise.

The fit: one start, the same two models at two depths each, so a layer's cost and a step's are told apart: Qwen3-8B
(FlashAttention) at 12 and 36 layers, Qwen3-Next-80B-A3B (GDN, with a FlashAttention layer in four) at 4 and 24.
Least squares on the relative error of the host-bound steps, three terms: a FlashAttention layer, a GDN layer, and
a hybrid step's host time beyond its layers' ("recurrent_step"). Mamba's layer is GDN's, an estimate that
Nemotron's step checks.

    .venv/bin/python benchmarks/gpu_vllm/piecewise.py           # fit, and every piecewise step priced now
    .venv/bin/python benchmarks/gpu_vllm/piecewise.py --table   # write the fitted rows into prefill.toml
    .venv/bin/python benchmarks/gpu_vllm/piecewise.py --check   # the table holds the fit (non-zero if not)
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fit  # noqa: E402

from roofline.audit import load_inventory  # noqa: E402
from roofline.predict.hardware import get_hardware  # noqa: E402
from roofline.predict.launch import launch_costs  # noqa: E402
from roofline.predict.prefill import piecewise_launches  # noqa: E402
from roofline.predict.step import price_step  # noqa: E402

RESULTS = fit.REPO / "benchmarks" / "results"
TABLE = fit.REPO / "roofline" / "data" / "prefill.toml"
FIT_START = "2026-11-29 d"
# start -> the probe results of its piecewise steps
STARTS = {
    FIT_START: ["vllm_h200_piecewise/q8b12l-pw.json", "vllm_h200_piecewise/q8b-pw-b.json",
                "vllm_h200_piecewise/qnext4l-pw.json", "vllm_h200_piecewise/qnext24l-pw.json",
                "vllm_h200_piecewise/qnext12l-pw-b.json"],
    "2026-11-29 c": ["vllm_h200_piecewise/q8b-pw.json", "vllm_h200_piecewise/qnext12-pw.json",
                     "vllm_h200_piecewise/nemo13-pw.json"],
    # Qwen3.6-35B-A3B whole at 10 streams, --max-num-seqs 10 (padded to 16), NVFP4 on Marlin, two starts
    "2026-11-29 a": ["vllm_h200_qwen36_graphs/q36-nvfp4-graphs.json"],
    "2026-11-29 b": ["vllm_h200_qwen36_graphs/q36-nvfp4-graphs-prof.json"],
    # Qwen3-8B at 12 layers on Triton's attention: a check of Triton's row on a model it was not calibrated on
    "2026-11-29 e": ["vllm_h200_piecewise/q8b12l-triton-pw.json"],
    # Gemma 4 31B at 5 streams, --max-num-seqs 5 (padded to 8), Triton's attention: its row's calibration
    "2026-11-28 g": ["vllm_h200_triton_fp8/gemma4-31b-fp8kv-again.json"],
    # dense models (and Qwen3-30B-A3B) at 10 streams, --max-num-seqs 10 (padded to 16), 1.5k and 16k tokens, one start:
    # a batch of 10 whose GPU step is shorter than the layers' host time shows it (Llama-3.1-8B, Qwen3-8B, Gemma 3 12B)
    "2026-12-02 a": ["vllm_h200_streams/llama8b-streams-1202e.json", "vllm_h200_streams/q8b-streams-1202e.json",
                     "vllm_h200_streams/gemma3-12b-streams-1202d.json", "vllm_h200_streams/gemma3-27b-streams-1202c.json",
                     "vllm_h200_streams/llama70b16l-streams-1202c.json", "vllm_h200_streams/q30b-streams-1202d.json"],
}
FITTED = set(STARTS[FIT_START][:4])  # the fit's steps; the same start's 12-layer Qwen3-Next is a check
TERMS = ("attention", "gdn", "recurrent_step")  # what the fit sets (attention: FlashAttention's, all it ran)
ROW = {"attention": "FLASH_ATTN", "gdn": "gdn", "recurrent_step": "recurrent_step"}  # term -> the table's split


@dataclass
class Step:
    start: str
    file: str
    batch: int
    measured_s: float
    priced_s: float  # the step model's, with the table as it is
    device_s: float  # of it, the GPU's part (the step is the longer of it and the host's)
    rest_s: float  # the priced host time outside the piecewise splits (the engine's step)
    splits: dict  # kind -> split layers (and "recurrent_step": 1)
    host_us: float
    attention: str  # the attention backend priced

    @property
    def fitted(self) -> bool:
        return self.file in FITTED


def steps() -> list[Step]:
    """Every decode row of the starts' results that the step model prices in piecewise graphs."""
    hardware = get_hardware(fit.HARDWARE)
    host_us = launch_costs(hardware).host_us_per_kernel
    out = []
    for start, files in STARTS.items():
        for name in files:
            result = json.loads((RESULTS / name).read_text())
            inventory = load_inventory(str(fit.REPO / result["config"]), config_only=True)
            base = fit.ran_config(result, inventory, hardware)
            for row in result["decode"]:
                routing = fit.dummy_routing(inventory, row["batch"], hardware)
                step = price_step(inventory, hardware, replace(
                    base, batch=row["batch"], context=row["context"], routing=routing))
                splits = step.main.piecewise_splits
                if not splits:
                    continue
                pieces = sum(seg.piecewise_host_s for seg in step.main.segments)
                out.append(Step(start, name, row["batch"], row["step_ms"] / 1e3, step.main.period_s(True),
                                step.main.device_period_s(True),
                                step.main.host_s - pieces, splits, host_us, step.attention.backend))
    return out


def fitted_terms(table: list[Step]) -> dict[str, float]:
    """Launches' worth per split, least squares on the fit's steps' relative error."""
    rows = [s for s in table if s.fitted]
    design = np.array([[s.splits.get(term, 0) * s.host_us * 1e-6 / s.measured_s for term in TERMS] for s in rows])
    target = np.array([(s.measured_s - s.rest_s) / s.measured_s for s in rows])
    solution, *_ = np.linalg.lstsq(design, target, rcond=None)
    return {term: round(float(x), 1) for term, x in zip(TERMS, solution)}


def refit_s(s: Step, terms: dict[str, float]) -> float:
    """The step's host time with the fitted terms (the table's, as the step model resolves them, for the splits the
    fit does not set)."""
    per_split = {**piecewise_launches(s.attention), **terms, "mamba": terms["gdn"]}
    if s.attention != ROW["attention"]:
        per_split["attention"] = piecewise_launches(s.attention)["attention"]
    return s.rest_s + sum(n * per_split[k] for k, n in s.splits.items()) * s.host_us * 1e-6


def table_rows() -> dict[str, float]:
    import tomllib
    return {row["split"]: row["launches"] for row in tomllib.loads(TABLE.read_text())["piecewise"]["split"]}


def sources(terms: dict[str, float], table: list[Step]) -> dict[str, tuple[float, str, str]]:
    """The rows written: split -> (launches, kind, source)."""
    fitted = sorted({s.file for s in table if s.fitted})
    checks = sorted({s.file for s in table if not s.fitted and s.attention == "FLASH_ATTN"})
    base = (f"fitted (least squares on the relative error) to {len(fitted)} host-bound piecewise decode steps of one "
            f"H200 start ({FIT_START}): Qwen3-8B at 12 and 36 layers and Qwen3-Next-80B-A3B at 4 and 24 layers "
            f"(a FlashAttention layer in four, the rest GDN), 3 sequences with --max-num-seqs 3 (padded to 4: "
            f"piecewise), vLLM 0.26.0, the x86 host's {table[0].host_us:g} us launches (launch.toml; "
            f"benchmarks/results/vllm_h200_piecewise, "
            f"benchmarks/gpu_vllm/piecewise.py); checked on {len(checks)} other runs (the same start's 12-layer "
            f"Qwen3-Next, another start's, Qwen3.6-35B-A3B whole and dense models at 10 streams: docs/VALIDATION.md)")
    return {"FLASH_ATTN": (terms["attention"], "measured", base + ": a FlashAttention layer's forward and piece"),
            "gdn": (terms["gdn"], "measured", base + ": a GDN layer's forward (its conv, gating, recurrent "
                                                      "update) and piece"),
            "recurrent_step": (terms["recurrent_step"], "measured", base + ": a hybrid step's host time beyond "
                               "its layers' and the engine's step, once a step (where it goes in vLLM's code was "
                               "not traced)"),
            "mamba": (terms["gdn"], "estimate", "a GDN layer's (benchmarks/gpu_vllm/piecewise.py): no Mamba "
                      "model's piecewise step was fitted; Nemotron-3-Nano's (6 Mamba and 2 attention layers of 13) "
                      "checks it")}


def write_table(rows: dict[str, tuple[float, str, str]]) -> str:
    text = TABLE.read_text()
    for split, (launches, kind, source) in rows.items():
        pattern = re.compile(rf'(split = "{re.escape(split)}"\n)launches = [^\n]*\nkind = [^\n]*\nsource = [^\n]*\n')
        if not pattern.search(text):
            raise SystemExit(f"prefill.toml has no [[piecewise.split]] row for {split}")
        text = pattern.sub(lambda m: f'{m.group(1)}launches = {launches}\nkind = "{kind}"\nsource = '
                           + json.dumps(source) + "\n", text)
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", action="store_true", help="write the fitted rows into prefill.toml")
    parser.add_argument("--check", action="store_true", help="exit non-zero if prefill.toml does not hold the fit")
    args = parser.parse_args()
    table = steps()
    terms = fitted_terms(table)
    rows = sources(terms, table)
    if args.check:
        if write_table(rows) != TABLE.read_text():
            print("prefill.toml's [[piecewise.split]] rows differ from the fit: run piecewise.py --table")
            return 1
        print("prefill.toml holds the piecewise fit")
        return 0
    if args.table:
        text = write_table(rows)
        tmp = TABLE.with_suffix(".toml.tmp")
        tmp.write_text(text)
        tmp.replace(TABLE)
        if {split: table_rows().get(split) for split in rows} != {split: row[0] for split, row in rows.items()}:
            raise SystemExit("prefill.toml did not read back as written")
    print(f"fitted on {FIT_START}: " + ", ".join(f"{ROW[k]} {v:g}" for k, v in terms.items())
          + " launches' worth (mamba: gdn's, an estimate)")
    print(f"\n{'start':<13} {'run':<48} {'batch':>5} {'splits':<34} {'step ms':>8} {'priced':>8} {'err':>6} "
          f"{'refit':>8} {'err':>6}")
    for s in table:
        refit = max(refit_s(s, terms), s.device_s)
        splits = ", ".join(f"{k} {n}" for k, n in s.splits.items())
        mark = "  (fit)" if s.fitted else ""
        print(f"{s.start:<13} {s.file:<48} {s.batch:>5} {splits:<34} {s.measured_s * 1e3:8.2f} "
              f"{s.priced_s * 1e3:8.2f} {s.priced_s / s.measured_s - 1:+6.0%} {refit * 1e3:8.2f} "
              f"{refit / s.measured_s - 1:+6.0%}{mark}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
