"""Variant discovery at scale (issue 13): `roofline compare --variants BASE` over 30 hub variants of a
large MoE, against the hub stand-in (tests/hub_standin.py, a test double: the real hub is out of
reach) on loopback, driven through huggingface_hub with HF_ENDPOINT.

Each variant serves the generated 40-shard, 40-layer, 208-expert NVFP4 MoE header set of
bench_audit.py (100,603 tensors, 91.8 GB on paper, sparse on disk); the 30 repositories link to
one copy of it. Measured: bytes the server sent / the variants' total size (target <= 0.1%),
the slowest single variant's header fetch + audit (each variant alone, sequentially), and the
whole discovery with a pool of P against the bound slowest x ceil(30 / P); then a warm rerun
(everything cached by repo and commit).

    .venv/bin/python benchmarks/bench_variants.py [--variants 30] [--pool 8]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_audit import write_checkpoint  # noqa: E402
from hub_standin import HubStandIn  # noqa: E402


def env_for(url: str, home: Path, cache: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_ENDPOINT=url, HF_HOME=str(home), HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_DISABLE_XET="1",
               ROOFLINE_CACHE=str(cache))
    return env


def timed(argv: list[str], env: dict) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "roofline.cli", *argv], capture_output=True, text=True, env=env,
                          timeout=3600)
    if proc.returncode != 0:
        raise SystemExit(f"roofline {' '.join(argv)} failed:\n{proc.stderr}")
    return time.perf_counter() - start, proc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", type=int, default=30)
    parser.add_argument("--pool", type=int, default=8)
    parser.add_argument("--latency-ms", type=float, default=0.0,
                        help="delay the stand-in adds to every answer (a hub across a WAN)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="roofline-bench-variants-") as tmp:
        tmp = Path(tmp)
        shared = tmp / "moe-nvfp4"
        shared.mkdir()
        write_checkpoint(str(shared))
        size = sum(p.stat().st_size for p in shared.iterdir())
        base = "bench/MoE-base"
        repos, models = {}, {}
        for n in range(args.variants):
            name = f"bench/MoE-NVFP4-v{n:02d}"
            link = tmp / f"v{n:02d}"
            link.symlink_to(shared)
            repos[name] = link
            models[name] = {"base_model": base, "downloads": 1000 - n}
        with HubStandIn(repos, models=models, latency_s=args.latency_ms / 1e3) as hub:
            # the slowest variant alone: a header audit of each, one after the other
            singles = []
            for name in list(repos)[: min(5, args.variants)]:
                env = env_for(hub.url, tmp / f"home-{name.split('-')[-1]}", tmp / "cache-single")
                seconds, _ = timed(["audit", name, "--json"], env)
                singles.append(seconds)
            slowest = max(singles)
            hub.bytes_sent = 0
            env = env_for(hub.url, tmp / "home", tmp / "cache")
            cold, proc = timed(["compare", "--variants", base, "--limit", str(args.variants), "--pool",
                                str(args.pool), "--json"], env)
            payload = json.loads(proc.stdout)
            sent = hub.bytes_sent
            warm, _ = timed(["compare", "--variants", base, "--limit", str(args.variants), "--pool",
                             str(args.pool), "--json"], env)
            warm_sent = hub.bytes_sent - sent
            # the same cold discovery one repository at a time: what the pool overlaps
            serial, _ = timed(["compare", "--variants", base, "--limit", str(args.variants), "--pool", "1",
                               "--json"], env_for(hub.url, tmp / "home-serial", tmp / "cache-serial"))
    rows = len(payload["rows"])
    total = size * args.variants
    bound = slowest * math.ceil(args.variants / args.pool)
    print(f"{args.variants} variants x {size / 1e9:.1f} GB on paper ({total / 1e12:.2f} TB), pool {args.pool}, "
          f"hub latency {args.latency_ms:g} ms per request; "
          f"{rows} audited, {len(payload['skipped'])} skipped")
    print(f"{'measure':52}{'value':>16}  target")
    print(f"{'bytes sent by the hub / total size':52}{f'{sent / 1e6:.1f} MB = {100 * sent / total:.4f}%':>16}  <= 0.1%")
    print(f"{'one variant alone, header audit (slowest of 5)':52}{f'{slowest:.2f} s':>16}")
    print(f"{'discovery, cold cache (whole command)':52}{f'{cold:.2f} s':>16}  "
          f"<= slowest x ceil({args.variants}/{args.pool}) = {bound:.2f} s")
    print(f"{'discovery, cold cache, pool 1 (one repo at a time)':52}{f'{serial:.2f} s':>16}")
    print(f"{'rerun, warm cache (whole command)':52}{f'{warm:.2f} s':>16}  ({warm_sent} bytes of files sent)")
    print(f"(python {sys.version.split()[0]}, {os.cpu_count()} cpus)")


if __name__ == "__main__":
    main()
