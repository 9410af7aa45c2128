"""The engine's host time per step, measured under real vLLM serving: a model whose GPU step is ~0.3 ms
(Qwen3-0.6B cut to 2 layers, benchmarks/gpu_vllm/configs/Qwen3-0.6B-2layers) served by `vllm serve` on the
H200 box and driven by `vllm bench serve --max-concurrency N` (256 tokens out: benchmarks/results/vllm_h200_host,
RESULTS-gpu.md has the commands). Each run's time per output token is then what the engine's host takes a step
at a batch of N (scheduling, input preparation, sampling bookkeeping, output processing): with async scheduling
(vLLM's default) the host forms step n + 1 while the GPU runs step n, so a step takes the longer of the two, and
here the GPU's is the shorter. Four server starts on one machine: N = 1-256 with 32-token prompts, N = 48 (32),
N = 8 and 64 with 1,024- and 3,072-token prompts. The same batch took up to 1.6x longer on one start than on
another (1.60 / 2.25 / 2.51 ms at N = 8): the host's speed is this figure's uncertainty, not the prompt length.

Fitted over every run: fixed + per request x N, least squares on the relative error. The x86 row is the measurement; the Grace
and unknown hosts' rows carry it through launch.toml's host cost per eager kernel (the only measure of those
hosts' Python speed the project has), labelled estimates.

Per KV cache group beyond the first: the engine builds every group's attention metadata each step, each kind with
its own builder. Measured by the model runner's own host time per step (probe.py --time-host: execute_model +
sample_tokens, which under async scheduling do not wait on the GPU) of one model in two layouts on one machine start,
per recurrent kind: Granite-4.0-H-1B's layers cut to 9 Mamba2 + 1 attention (ten groups) and to 9 Mamba2 + 9
attention (two groups) (benchmarks/results/vllm_h200_host_groups), and Qwen3-Next's cut to 9 GDN + 1 attention and
9 GDN + 9 attention (benchmarks/results/vllm_h200_host_gdn), at batches 1 and 8: the difference over the eight
groups, the mean of the two batches. Mamba2's is the figure of every kind not timed apart (an attention layout's
sliding windows, other recurrent mixers); GDN's builder has its own row.

    .venv/bin/python benchmarks/serving/step_host.py            # the fit and launch.toml's rows
    .venv/bin/python benchmarks/serving/step_host.py --check    # exit 1 when launch.toml's rows differ
"""
from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(REPO))

from roofline.data import load_table  # noqa: E402

RESULTS = REPO / "benchmarks" / "results" / "vllm_h200_host"
RESULTS_DIR = REPO / "benchmarks" / "results"
CONFIGS = REPO / "benchmarks" / "gpu_vllm" / "configs"
# per recurrent kind, (probe file, its config here) of the two layouts: Granite's 18-layer config was written on the
# device (/tmp/g18, kept as g18-config.json); Qwen3-Next's cuts ran as the 12-layer config with --hf-overrides
# (num_hidden_layers, layer_types: in each probe file), written out here
GROUP_CASES = {"mamba": (("vllm_h200_host_groups/g4h-1b-9m1a-host-graphs-1202w.json",
                          CONFIGS / "Granite-4.0-H-1B-10layers-9m1a"),
                         ("vllm_h200_host_groups/g4h-1b-9m9a-host-graphs-1202w.json",
                          CONFIGS / "Granite-4.0-H-1B-18layers-9m9a")),
               "gdn": (("vllm_h200_host_gdn/qnext-9g1a-host-1202z.json", CONFIGS / "Qwen3-Next-80B-A3B-10layers-9g1a"),
                       ("vllm_h200_host_gdn/qnext-9g9a-host-1202z.json", CONFIGS / "Qwen3-Next-80B-A3B-18layers-9g9a"))}
DEFAULT_KIND = "mamba"  # the kind whose figure every kind not timed apart takes
HOST_METHODS = ("execute_model", "sample_tokens")  # the step's host work; the others run inside execute_model
CASES = ("qwen3-06b-2l", "qwen3-06b-2l-load", "qwen3-06b-2l-ctx1k", "qwen3-06b-2l-ctx3k")  # one server start each
SOURCE = ("measured: vLLM 0.26.0 served (`vllm serve`, CUDA graphs, async scheduling) on the x86 host (16 cores) "
          "of roofline's H200 benchmark runs, Qwen3-0.6B cut to 2 layers (a GPU step of ~0.3 ms) under `vllm bench serve --max-concurrency "
          "N`, N = 1-256, prompts of 32-3,072 tokens and 256 tokens out, four server starts (one batch took up to 1.6x "
          "longer on one start than another): the time per output token is the host's step "
          "(benchmarks/serving/step_host.py -> benchmarks/results/vllm_h200_host, 2026-11-27); per KV cache group beyond "
          "the first, the model runner's own host time per step (probe.py --time-host) of Granite-4.0-H-1B cut to ten "
          "groups and to two on one start, batches 1 and 8 (benchmarks/results/vllm_h200_host_groups, 2026-12-02): "
          "every kind's but GDN's, whose groups Qwen3-Next cut the same way timed (vllm_h200_host_gdn, 2026-12-02)")


def points() -> list[tuple[str, int, float]]:
    """(run, batch, the run's mean time per output token in ms) of every closed-loop run."""
    out = []
    for case in CASES:
        for path in sorted(RESULTS.glob(f"{case}-conc-*.json.gz")):
            with gzip.open(path, "rt") as fh:
                run = json.load(fh)
            out.append((path.name.removesuffix(".json.gz"), int(run["max_concurrency"]), float(run["mean_tpot_ms"])))
    if len(out) < 3:
        raise SystemExit(f"{RESULTS}: fewer than 3 closed-loop runs")
    return sorted(out, key=lambda p: (p[1], p[0]))


def fit(data: list[tuple[str, int, float]]) -> tuple[float, float]:
    """(fixed us, us per request) minimizing the relative error."""
    batch = np.array([b for _, b, _ in data], dtype=float)
    ms = np.array([m for _, _, m in data])
    design = np.vstack([np.ones_like(batch), batch]).T / ms[:, None]
    fixed, per_request = np.linalg.lstsq(design, np.ones_like(ms), rcond=None)[0]
    return float(fixed * 1e3), float(per_request * 1e3)


def group_points(kind: str = DEFAULT_KIND) -> list[tuple[str, int, int, float]]:
    """(case, KV cache groups, batch, the model runner's host ms per step) of the two layouts' runs of a recurrent
    kind (GROUP_CASES)."""
    from roofline.audit import load_inventory
    from roofline.predict.kv_capacity import kv_cache_groups

    out = []
    for name, config in GROUP_CASES[kind]:
        run = json.loads((RESULTS_DIR / name).read_text())
        shape = load_inventory(str(config)).shape
        overrides = run.get("hf_overrides") or {}
        if overrides and (overrides.get("num_hidden_layers") != shape.num_layers
                          or overrides.get("layer_types") != json.loads((config / "config.json").read_text())
                          .get("layer_types")):
            raise SystemExit(f"{config}: not the layers {name} ran with (its hf_overrides)")
        for row in run["decode"]:
            out.append((Path(name).stem, kv_cache_groups(shape), row["batch"],
                        sum(row["host_ms_per_step"][m]["ms"] for m in HOST_METHODS)))
    return out


def per_group_us(data: list[tuple[str, int, int, float]]) -> float:
    """The host's time per KV cache group: each batch's difference between the layouts over their groups' difference,
    the mean over the batches both ran."""
    by_batch: dict[int, list[tuple[int, float]]] = {}
    for _, groups, batch, ms in data:
        by_batch.setdefault(batch, []).append((groups, ms))
    slopes = [(max(p)[1] - min(p)[1]) / (max(p)[0] - min(p)[0]) for p in by_batch.values() if len(p) == 2]
    if not slopes:
        raise SystemExit("no batch that both layouts ran")
    return 1e3 * sum(slopes) / len(slopes)


def per_kind_us(by_kind: dict[str, list] | None = None) -> dict[str, float]:
    """The host's time per KV cache group of each recurrent kind timed (GROUP_CASES), from their group_points where
    given (else read)."""
    by_kind = by_kind or {kind: group_points(kind) for kind in GROUP_CASES}
    return {kind: per_group_us(layouts) for kind, layouts in by_kind.items()}


def rows(fixed_us: float, per_request_us: float, per_kind: dict[str, float]) -> dict[str, dict]:
    """launch.toml's [step_host.*] rows: the x86 host measured, the others through the eager host cost ratio;
    per_kv_group_us is DEFAULT_KIND's, per_kv_group_us_by_kind the other kinds timed."""
    hosts = load_table("launch")["host"]
    x86 = hosts["x86_server"]["host_us_per_kernel"]

    def groups(ratio: float) -> dict:
        return {"per_kv_group_us": round(per_kind[DEFAULT_KIND] * ratio),
                "per_kv_group_us_by_kind": {kind: round(us * ratio) for kind, us in sorted(per_kind.items())
                                            if kind != DEFAULT_KIND}}
    out = {"x86_server": {"fixed_us": round(fixed_us), "per_request_us": round(per_request_us, 1), **groups(1.0),
                          "kind": "measured", "source": SOURCE}}
    for host in ("grace_arm", "unknown"):
        ratio = hosts[host]["host_us_per_kernel"] / x86
        out[host] = {"fixed_us": round(fixed_us * ratio), "per_request_us": round(per_request_us * ratio, 1),
                     **groups(ratio),
                     "kind": "estimate",
                     "source": f"the x86 host's measured step (launch.toml [step_host.x86_server]) x {ratio:.3f}, this "
                               f"host's eager cost per kernel over the x86 host's ([host.{host}] / [host.x86_server]): "
                               "no step of this host measured"}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when launch.toml's rows differ from the fit")
    args = parser.parse_args()
    data = points()
    fixed_us, per_request_us = fit(data)
    print(f"{'run':34}{'batch':>6}{'measured ms':>13}{'fitted ms':>11}{'error':>8}")
    for run, batch, ms in data:
        fitted = (fixed_us + per_request_us * batch) / 1e3
        print(f"{run:34}{batch:>6}{ms:>13.3f}{fitted:>11.3f}{100 * (fitted / ms - 1):>+7.1f}%")
    print(f"\nfixed {fixed_us:.0f} us + {per_request_us:.1f} us per request a step")
    print(f"\n{'layout':34}{'kind':>6}{'KV groups':>10}{'batch':>6}{'host ms':>9}")
    by_kind = {kind: group_points(kind) for kind in GROUP_CASES}
    for kind, layouts in by_kind.items():
        for case, count, batch, ms in layouts:
            print(f"{case:34}{kind:>6}{count:>10}{batch:>6}{ms:>9.3f}")
    per_kind = per_kind_us(by_kind)
    for kind, us in per_kind.items():
        print(f"{us:.0f} us per {kind} KV cache group beyond the first")
    expected = rows(fixed_us, per_request_us, per_kind)
    table = load_table("launch").get("step_host", {})
    keys = ("fixed_us", "per_request_us", "per_kv_group_us", "per_kv_group_us_by_kind", "kind")
    stale = [host for host, row in expected.items()
             if {k: table.get(host, {}).get(k) for k in keys} != {k: row[k] for k in keys}]
    for host, row in expected.items():
        print(f"\n[step_host.{host}]\nfixed_us = {row['fixed_us']}\nper_request_us = {row['per_request_us']}\n"
              f"per_kv_group_us = {row['per_kv_group_us']}\n"
              "per_kv_group_us_by_kind = {" + ", ".join(f"{k} = {v}" for k, v in
                                                       row["per_kv_group_us_by_kind"].items()) + "}\n"
              f"kind = \"{row['kind']}\"\nsource = \"{row['source']}\"")
    if stale:
        print(f"\nlaunch.toml's [step_host.*] rows differ from the fit: {', '.join(stale)}", file=sys.stderr)
        return 1 if args.check else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
