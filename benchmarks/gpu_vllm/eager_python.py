"""The host's Python of a layer under --enforce-eager beyond its launches, fitted on eager steps from several
machine starts: gpt-oss's MoE layer on Marlin (kernels.toml [[moe]] mxfp4 / marlin), Gemma 4's decoder layer
(kernels.toml [layer.gemma4_dense], and [layer.gemma4] for its MoE model, which no start with a host check ran) and a
GDN layer's (kernels.toml [python.gdn]: Qwen3-Next's, and Qwen3.5's, which projects without a split or reorder).

An eager decode step is host-bound: its time is the launches the host makes (roofline/data/kernels.toml's
eager counts) plus a layer's Python beyond them, both at the host's cost per launch. That cost moves between
machine starts by up to ~40% (launch.toml [host.x86_server]), so each start ran Qwen3-8B eager too, and its
step (the model's 560.5 launches) gives that start's cost per launch. A step of a model with L such layers and
K counted launches then gives the layer's Python in launches' worth: (step / cost - K) / L. The table's figure
is the mean over the family's steps (the starts' spread is the error said beside it); a model of another family
run on the same starts checks the counts it never fitted.

    .venv/bin/python benchmarks/gpu_vllm/eager_python.py          # the table, and the fitted term
"""
from __future__ import annotations

import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(REPO))

from roofline.audit import load_inventory  # noqa: E402
from roofline.predict.kernels import estimate_kernels  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"
# each start's host check (Qwen3-8B eager, batch 1), and the steps run beside it (probe JSON, batch 1)
STARTS = {
    "2026-11-27 c": (["vllm_h200_caleager/q8b-again-cal-eager.json"],
                     ["vllm_h200_caleager/qwen3next12l-cal-eager.json"]),
    "2026-11-27 d": (["vllm_h200_caleager2/q8b-again-cal-eager.json"],
                     ["vllm_h200_caleager2/qwen3next12l-cal-eager.json"]),  # a check: never fitted (CHECKS)
    "2026-11-28 a": (["vllm_h200_marlin_eager/q8b-again-cal-eager.json"],
                     ["vllm_h200_marlin_eager/gptoss20b-marlin-eager-prof.json"]),
    "2026-11-28 b": (["vllm_h200_eager_hosts/q8b-cal-eager.json"],
                     ["vllm_h200_eager_hosts/gptoss120b-marlin-eager.json",
                      "vllm_h200_eager_hosts/q36-nvfp4-eager.json"]),
    "2026-11-28 c": (["vllm_h200_eager_hosts/q8b-cal-eager-b.json", "vllm_h200_eager_hosts/q8b-cal-eager-b2.json"],
                     ["vllm_h200_eager_hosts/gptoss20b-marlin-eager-b.json",
                      "vllm_h200_eager_hosts/gptoss120b-marlin-eager-b.json"]),
    "2026-11-29 a": (["vllm_h200_eager_1129/q8b-eager-1129.json"],
                     ["vllm_h200_eager_1129/gemma4-31b-eager-1129.json",
                      "vllm_h200_eager_1129/llama8b-eager-1129.json"]),
    "2026-11-29 b": (["vllm_h200_eager_1129/q8b-eager-1129b.json"],
                     ["vllm_h200_eager_1129/gemma4-31b-eager-1129b.json",
                      "vllm_h200_eager_1129/gemma4-26b-eager-1129b.json"]),
    # one start, its host checked twice (22.3 and 16.9 ms: the host's cost moved within the start), every bias of
    # gpt-oss zeroed (its tokens route by token; an eager step of one token reads its top-k experts either way)
    "2026-12-02 c": (["vllm_h200_router_bias/q8b-eager-1202e.json", "vllm_h200_router_bias/q8b-eager-1202g.json"],
                     ["vllm_h200_router_bias/gptoss120b-marlin-rb0all-eager-1202f.json",
                      "vllm_h200_router_bias/gptoss20b-marlin-rb0all-eager-1202g.json"]),
}
# the families whose layer Python this fits: model_type -> the kernel count (role) that carries it per layer
TERMS = {"gpt_oss": "moe_experts", "gemma4_text": "layer_structure", "qwen3_next": "gdn_core",
         "qwen3_5_moe": "gdn_core"}
# steps a term is checked on, never fitted: Qwen3-Next's on a second start (its calibration's transfer check too)
CHECKS = {"vllm_h200_caleager2/qwen3next12l-cal-eager.json"}
FITTED = "gpt_oss"  # the first: gpt-oss's Marlin MoE layer


@dataclass
class Step:
    start: str
    file: str
    model_type: str
    step_ms: float
    launches: float  # counted launches, the fitted layer's Python left out
    python: float  # the table's Python of those layers now, launches' worth, whole step
    moe_layers: int  # the layers that carry it (MoE layers for gpt-oss, decoder layers for Gemma 4)
    cost_us: float  # this start's host cost per launch


def _probe(name: str) -> dict:
    return json.loads((RESULTS / name).read_text())


def _batch1_ms(result: dict) -> float:
    return next(row["step_ms"] for row in result["decode"] if row["batch"] == 1)


def moe_backend_of(result: dict) -> str | None:
    """The MoE backend a probe run named: its JSON's since 2026-11-28's second start, its command line's before."""
    return result.get("moe_backend") or next(
        (arg.split("=", 1)[1] for arg in result["command"].split() if arg.startswith("--moe-backend=")), None)


def _counts(result: dict) -> tuple[str, float, float, int]:
    """(model type, counted launches without the fitted layers' Python, their Python now, those layers): the
    layers of the role TERMS names for the model's family, the MoE layers for any other."""
    folder = REPO / result["config"]  # the run's config folder, in this repository
    inventory = load_inventory(str(folder), config_only=True)
    profile = estimate_kernels(inventory, None, moe_backend_of(result))
    model_type = inventory.shape.model_type or ""
    role = TERMS.get(model_type, "moe_experts")
    layers = [c for c in profile.counts if c.role == role]
    launches = sum(c.eager + c.host_equiv for c in profile.counts if c.role != role) + sum(c.eager for c in layers)
    return model_type, launches, sum(c.host_equiv for c in layers), len(layers)


def steps() -> list[Step]:
    out = []
    for start, (checks, runs) in STARTS.items():
        check_ms = statistics.mean(_batch1_ms(_probe(name)) for name in checks)
        _, check_launches, check_python, _ = _counts(_probe(checks[0]))
        cost_us = 1e3 * check_ms / (check_launches + check_python)
        for name in runs:
            result = _probe(name)
            model_type, launches, python, layers = _counts(result)
            out.append(Step(start, name, model_type, _batch1_ms(result), launches, python, layers, cost_us))
    return out


def fitted_term(table: list[Step], family: str = FITTED) -> tuple[float, list[float]]:
    """A fitted family's layer Python (launches' worth): the mean over its steps, and each step's."""
    per_layer = [(1e3 * s.step_ms / s.cost_us - s.launches) / s.moe_layers for s in table
                 if s.model_type == family and s.file not in CHECKS]
    return statistics.mean(per_layer), per_layer


def main() -> int:
    table = steps()
    terms = {family: fitted_term(table, family) for family in TERMS}
    print(f"{'start':<13} {'run':<52} {'host us':>7} {'step ms':>8} {'now ms':>8} {'err':>6} {'fit ms':>8} {'err':>6}")
    for s in table:
        now = s.cost_us * (s.launches + s.python) / 1e3
        fitted = terms[s.model_type][0] * s.moe_layers if s.model_type in terms else s.python
        fit = s.cost_us * (s.launches + fitted) / 1e3
        print(f"{s.start:<13} {s.file:<52} {s.cost_us:7.1f} {s.step_ms:8.2f} {now:8.2f} {now / s.step_ms - 1:+6.0%} "
              f"{fit:8.2f} {fit / s.step_ms - 1:+6.0%}")
    for family, (term, per_layer) in terms.items():
        print(f"\n{family}: a {TERMS[family]} layer's eager Python {term:.1f} launches' worth (per step: "
              + ", ".join(f"{x:.1f}" for x in per_layer) + f"; {len(per_layer)} steps, "
              + f"{len({s.start for s in table if s.model_type == family and s.file not in CHECKS})} starts)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
