"""The host's Python of a MoE layer under --enforce-eager, fitted on eager steps from several machine starts.

An eager decode step is host-bound: its time is the launches the host makes (roofline/data/kernels.toml's
eager counts) plus a layer's Python beyond them, both at the host's cost per launch. That cost moves between
machine starts by up to ~40% (launch.toml [host.x86_server]), so each start ran Qwen3-8B eager too, and its
step (the model's 560.5 launches) gives that start's cost per launch. A step of a model with L MoE layers and
K counted launches then gives the layer's Python in launches' worth: (step / cost - K) / L. The table's figure
is the mean over every step (the starts' spread is the error said beside it); a model of another family run
on the same starts checks the counts it never fitted.

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
    "2026-11-28 a": (["vllm_h200_marlin_eager/q8b-again-cal-eager.json"],
                     ["vllm_h200_marlin_eager/gptoss20b-marlin-eager-prof.json"]),
    "2026-11-28 b": (["vllm_h200_eager_hosts/q8b-cal-eager.json"],
                     ["vllm_h200_eager_hosts/gptoss120b-marlin-eager.json",
                      "vllm_h200_eager_hosts/q36-nvfp4-eager.json"]),
    "2026-11-28 c": (["vllm_h200_eager_hosts/q8b-cal-eager-b.json", "vllm_h200_eager_hosts/q8b-cal-eager-b2.json"],
                     ["vllm_h200_eager_hosts/gptoss20b-marlin-eager-b.json",
                      "vllm_h200_eager_hosts/gptoss120b-marlin-eager-b.json"]),
}
FITTED = "gpt_oss"  # the family whose Marlin MoE layer's Python this fits (kernels.toml [[moe]] mxfp4 / marlin)


@dataclass
class Step:
    start: str
    file: str
    model_type: str
    step_ms: float
    launches: float  # counted launches, the fitted family's MoE Python left out
    python: float  # the table's MoE Python now, launches' worth, whole step
    moe_layers: int
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
    """(model type, counted launches without the MoE layers' Python, their Python now, MoE layers)."""
    folder = REPO / result["config"]  # the run's config folder, in this repository
    inventory = load_inventory(str(folder), config_only=True)
    profile = estimate_kernels(inventory, None, moe_backend_of(result))
    moe = [c for c in profile.counts if c.role == "moe_experts"]
    launches = sum(c.eager + c.host_equiv for c in profile.counts if c.role != "moe_experts") \
        + sum(c.eager for c in moe)
    return inventory.config.get("model_type", ""), launches, sum(c.host_equiv for c in moe), len(moe)


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


def fitted_term(table: list[Step]) -> tuple[float, list[float]]:
    """The fitted family's MoE layer Python (launches' worth): the mean over its steps, and each step's."""
    per_layer = [(1e3 * s.step_ms / s.cost_us - s.launches) / s.moe_layers for s in table if s.model_type == FITTED]
    return statistics.mean(per_layer), per_layer


def main() -> int:
    table = steps()
    term, per_layer = fitted_term(table)
    print(f"{'start':<13} {'run':<52} {'host us':>7} {'step ms':>8} {'now ms':>8} {'err':>6} {'fit ms':>8} {'err':>6}")
    for s in table:
        now = s.cost_us * (s.launches + s.python) / 1e3
        fit = s.cost_us * (s.launches + (term * s.moe_layers if s.model_type == FITTED else s.python)) / 1e3
        print(f"{s.start:<13} {s.file:<52} {s.cost_us:7.1f} {s.step_ms:8.2f} {now:8.2f} {now / s.step_ms - 1:+6.0%} "
              f"{fit:8.2f} {fit / s.step_ms - 1:+6.0%}")
    print(f"\n{FITTED} Marlin MoE layer's eager Python: {term:.1f} launches' worth (per step: "
          + ", ".join(f"{x:.1f}" for x in per_layer) + f"; {len(per_layer)} steps, {len(STARTS)} starts)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
