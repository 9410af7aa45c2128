"""The CLI's conventions: the hardware catalogue as a command, click-style suggestions, usage errors
(exit 2) for a missing MODEL on every command that needs one."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import tomli_w

ROOT = Path(__file__).parent.parent


def roofline(*args, env: dict | None = None) -> subprocess.CompletedProcess:
    import os

    return subprocess.run([sys.executable, "-m", "roofline.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env={**os.environ, **(env or {})})


def test_hardware_lists_every_device_with_the_kind_of_each_figure(tmp_path):
    hw_file = tmp_path / "hardware.toml"
    hw_file.write_text(tomli_w.dumps({"mybox": {
        "name": "my box (calibrated)", "bandwidth_gbps": 101.5, "bandwidth_source": "roofline calibrate (test)",
        "bandwidth_kind": "measured", "memory_gb": 64.0, "usable_memory_gb": 60.0, "compute_capability": "",
        "tensor_tflops": {}, "host": "cpu", "efficiency": 0.7, "efficiency_kind": "prior",
        "efficiency_source": "prior (--efficiency)"}}))
    env = {"ROOFLINE_HARDWARE_FILE": str(hw_file)}
    proc = roofline("hardware", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    payload = json.loads(proc.stdout)
    assert payload["schema"] == "roofline.hardware/1"
    by_key = {entry["key"]: entry for entry in payload["hardware"]}
    # the shipped table, the new Hopper parts among them, and the saved entry beside them
    assert {"gb10", "h100-sxm", "h100-pcie", "h100-nvl", "gh200", "h200", "mybox"} <= set(by_key)
    assert "spark" in by_key["gb10"]["aliases"] and "dgx-spark" in by_key["gb10"]["aliases"]
    assert by_key["gb10"]["efficiency"]["kind"] == "calibrated"
    assert by_key["h100-pcie"]["bandwidth"] == {"gbps": 2000, "kind": "datasheet",
                                                "source": by_key["h100-pcie"]["bandwidth"]["source"]}
    assert "datasheet" in by_key["gh200"]["bandwidth"]["source"] and by_key["gh200"]["host"] == "grace_arm"
    assert by_key["mybox"]["origin"] == str(hw_file) and by_key["mybox"]["bandwidth"]["kind"] == "measured"
    assert by_key["mybox"]["tensor_tflops"]["kind"] == "none"
    assert by_key["h200"]["launch"]["floor_kind"] == "measured"
    assert any(link["key"] == "cx7-200g" for link in payload["links"])

    text = roofline("hardware", env=env)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert any(line.startswith("gh200 ") for line in lines)
    saved = lines.index(next(line for line in lines if line.startswith("saved by `roofline calibrate --save`")))
    assert any(line.startswith("mybox ") for line in lines[saved:])
    one = roofline("hardware", "spark")
    assert one.returncode == 0 and one.stdout.startswith("gb10: NVIDIA DGX Spark (GB10)")
    assert "efficiency      0.705, calibrated" in one.stdout


def test_every_hardware_entry_is_one_audit_away():
    for key in ("h100-pcie", "h100-nvl", "gh200"):
        proc = roofline("audit", "examples/Qwen3-8B", "--hardware", key, "--json")
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["hardware"]["key"] == key


def test_an_unknown_hardware_key_is_one_line():
    proc = roofline("hardware", "nope")
    assert proc.returncode == 1 and proc.stderr.startswith("error: unknown hardware 'nope'")


@pytest.mark.parametrize("args, said", [
    (["audit", "examples/Qwen3-8B", "--hardware", "h1000"], "did you mean h100-sxm or h200"),
    (["plan", "examples/Qwen3-8B", "--formats", "nvfp4"], "did you mean nvfp4-w4a4 or nvfp4-w4a16"),
])
def test_a_near_miss_gets_the_nearest_names_and_the_aliases(args, said):
    proc = roofline(*args)
    assert proc.returncode == 1 and said in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    if "--hardware" in args:
        assert "gb10 (dgx-spark, spark)" in proc.stderr  # every key with its aliases


def test_hardware_as_people_write_it():
    proc = roofline("audit", "examples/Qwen3-8B", "--hardware", "DGX Spark", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["hardware"]["key"] == "gb10"


@pytest.mark.parametrize("args, needle", [
    (["audti"], "Did you mean 'audit'?"),
    (["capcity"], "Did you mean 'capacity'?"),
    (["zzz"], "Commands: audit, plan"),
    (["audit", "examples/Qwen3-8B", "--hw", "gb10"], "No such option: --hw. Did you mean '--hardware'?"),
    (["audit", "examples/Qwen3-8B", "--hardware"], "requires an argument. (see 'roofline audit --help')"),
    (["plan", "examples/Qwen3-8B", "--concurrency"], "requires an argument. (see 'roofline plan --help')"),
])
def test_mistyped_commands_and_options_get_a_suggestion(args, needle):
    proc = roofline(*args)
    assert proc.returncode == 2 and needle in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr


@pytest.mark.parametrize("command", ["audit", "capacity", "kernels", "compare", "plan"])
def test_a_missing_model_is_a_usage_error(command):
    proc = roofline(command)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert proc.stderr.startswith("error: ") and f"roofline {command} --help" in proc.stderr


@pytest.mark.parametrize("spelling, tokens", [("8192", 8192), ("8k", 8000), ("8K", 8192), ("1.5k", 1500),
                                              ("32K", 32768)])
def test_token_counts_take_vllms_spellings(spelling, tokens):
    proc = roofline("audit", "examples/Qwen3-8B", "--context", spelling, "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["scenario"]["context"] == tokens


def test_a_binary_suffix_takes_no_decimals():
    proc = roofline("audit", "examples/Qwen3-8B", "--context", "1.5K")
    assert proc.returncode == 2 and "no decimals with a binary suffix" in proc.stderr, proc.stderr


@pytest.mark.parametrize("spelling, meant", [("fp8_e4m3", "fp8_e4m3"), ("FP8", "fp8"), ("bfloat16", "bf16"),
                                             ("auto", "auto")])
def test_kv_cache_dtype_takes_vllms_spellings(spelling, meant):
    proc = roofline("audit", "examples/Qwen3-8B", "--kv-cache-dtype", spelling, "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["scenario"]["kv_cache_dtype"] == meant


def test_tp_takes_vllms_spellings():
    outputs = [json.loads(roofline("plan", "examples/Qwen3-8B", flag, "2", "--hardware", "h100", "--formats", "fp8",
                                   "--json").stdout)["top_pick"] for flag in ("--tp", "-tp", "--tensor-parallel-size")]
    assert outputs[0] == outputs[1] == outputs[2]


def test_the_validation_record_lives_in_the_user_data_folder(tmp_path):
    import os

    env = {k: v for k, v in os.environ.items() if k != "ROOFLINE_RECORD"}
    env["XDG_DATA_HOME"] = str(tmp_path / "data")
    work = tmp_path / "project"
    work.mkdir()
    proc = subprocess.run([sys.executable, "-m", "roofline.cli", "validate", str(ROOT / "examples" / "Qwen3-8B"),
                           "--measured", "15", "--json"], capture_output=True, text=True, timeout=120, cwd=work, env=env)
    assert proc.returncode == 0, proc.stderr
    record = tmp_path / "data" / "roofline" / "validation.jsonl"
    assert json.loads(proc.stdout)["recorded_in"] == str(record) and record.is_file()
    assert not list(work.iterdir())  # nothing left where the user stood
    help_text = roofline("validate", "--help").stdout
    assert "user data folder" in help_text and "--record" in help_text


def test_a_hub_id_without_a_network_fails_in_about_a_second(tmp_path):
    import socket
    import time

    with socket.socket() as sock:  # a port nothing listens on: connections are refused at once
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {"HF_ENDPOINT": f"http://127.0.0.1:{port}", "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "0"}
    for args in (["audit", "org/model"], ["compare", "--variants", "org/base"]):
        started = time.monotonic()
        proc = roofline(*args, env=env)
        elapsed = time.monotonic() - started
        assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
        assert "cannot be reached" in proc.stderr and elapsed < 8, (elapsed, proc.stderr)


def test_compare_fits_the_terminal_and_wide_shows_every_column():
    import os

    checkpoints = sorted(str(p) for p in (ROOT / "examples" / "compare").iterdir())
    narrow = roofline("compare", *checkpoints, env={"COLUMNS": "100"})
    assert narrow.returncode == 0, narrow.stderr
    lines = narrow.stdout.splitlines()
    assert max(len(line) for line in lines) <= 100, max(lines, key=len)
    assert any("left out to fit the terminal" in line for line in lines)
    assert any(line.split()[:2] == ["1", "Qwen3-30B-A3B-NVFP4"] for line in lines)  # the ranking survives
    wide = roofline("compare", *checkpoints, "--wide", env={"COLUMNS": "100"})
    heading = next(line for line in wide.stdout.splitlines() if line.strip().startswith("#  checkpoint"))
    assert all(column in heading for column in ("on disk", "KV", "state", "BF16 residuals", "vLLM backend"))
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    piped = subprocess.run([sys.executable, "-m", "roofline.cli", "compare", *checkpoints], capture_output=True,
                           text=True, timeout=120, cwd=ROOT, env=env)
    assert "vLLM backend" in piped.stdout and "left out" not in piped.stdout  # a pipe gets every column


def test_plan_and_capacity_fit_the_terminal():
    """Every line within $COLUMNS but the serve line (kept whole, to be copied); the ranking and the
    curve survive; --wide keeps every column of plan's table."""
    for args in (("plan", "examples/Qwen3-8B"), ("plan", "examples/Qwen3-8B", "--concurrency", "8"),
                 ("capacity", "examples/Qwen3-8B", "--hardware", "h100-sxm")):
        narrow = roofline(*args, env={"COLUMNS": "80"})
        assert narrow.returncode == 0, narrow.stderr
        long = [line for line in narrow.stdout.splitlines() if len(line) > 80 and "vllm serve" not in line]
        assert long == [], (args, long)
        if args[0] == "plan":
            assert any(line.split()[:2] == ["1=a", "NVFP4"] or line.split()[:1] == ["1"]
                       for line in narrow.stdout.splitlines())
            wide = roofline(*args, "--wide", env={"COLUMNS": "80"})
            heading = next(line for line in wide.stdout.splitlines() if line.strip().startswith("#  format"))
            assert all(column in heading for column in ("bound", "resident", "total @"))
            assert "left out" not in wide.stdout
        else:
            assert sum(1 for line in narrow.stdout.splitlines() if line.strip().startswith(("1 ", "256 "))) == 2


def test_each_tie_is_marked_as_its_own_group_within_the_stated_tolerance():
    import re

    # at 16 streams the rows rank by aggregate tok/s ("total @16", after the single stream's): two ties there
    proc = roofline("plan", "examples/Qwen3-8B", "--hardware", "gb10", "--concurrency", "16")
    assert proc.returncode == 0, proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines() if re.match(r"^\s+\d+(=[a-z])?\s", line)]
    legend = next(line for line in proc.stdout.splitlines() if ": ties, each within" in line)
    tolerance = float(re.search(r"within (\d+)%", legend).group(1)) / 100
    groups: dict[str, list[float]] = {}
    for row in rows:
        mark = re.match(r"\d+(=[a-z])?", row[0]).group(1)
        if mark:
            single = next(i for i, cell in enumerate(row) if i and re.fullmatch(r"\d+\.\d", cell))
            groups.setdefault(mark, []).append(float(row[single + 1]))  # the aggregate, as ranked
    assert len(groups) >= 2  # the example plan has more than one tie: each its own mark
    for values in groups.values():
        assert min(values) >= max(values) * (1 - tolerance) - 0.05, values


def _stderr_on_a_terminal(*args, env: dict) -> tuple[int, str]:
    """Run roofline with stderr on a pseudo-terminal (stdout a pipe): (exit code, what stderr showed)."""
    import os
    import pty

    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "roofline.cli", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=slave, cwd=ROOT, env={**os.environ, **env})
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 4096)
        except OSError:  # the terminal closed with the process
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=300)
    os.close(master)
    return proc.returncode, b"".join(chunks).decode("utf-8", "replace")


def test_progress_on_a_terminal_and_silence_with_quiet_or_a_pipe(tmp_path):
    config = tmp_path / "Qwen3-8B"
    config.mkdir()
    (config / "config.json").write_text((ROOT / "examples" / "Qwen3-8B" / "config.json").read_text())
    env = {"ROOFLINE_CACHE": str(tmp_path / "cache")}
    code, shown = _stderr_on_a_terminal("audit", config, "--no-cache", env=env)
    assert code == 0 and "building the model skeleton from config.json" in shown, shown
    code, quiet = _stderr_on_a_terminal("audit", config, "--no-cache", "--quiet", env=env)
    assert code == 0 and quiet.strip() == "", quiet
    piped = roofline("audit", config, "--no-cache", env=env)
    assert piped.returncode == 0 and piped.stderr == ""
    # calibrate: each kernel as it is timed, on a terminal only
    calibrate = ("calibrate", "--device", "cpu", "--size-mb", "16", "--repetitions", "2")
    code, shown = _stderr_on_a_terminal(*calibrate, env=env)
    assert code == 0 and "copy" in shown.lower(), shown
    code, quiet = _stderr_on_a_terminal(*calibrate, "-q", env=env)
    assert code == 0 and quiet.strip() == "", quiet
    piped = roofline(*calibrate, env=env)
    assert piped.returncode == 0 and piped.stderr == "" and "achievable bandwidth" in piped.stdout
    # capture: vLLM's log is hidden, so the load is announced (here a folder vLLM refuses, quickly)
    empty = tmp_path / "empty-model"
    empty.mkdir()
    code, shown = _stderr_on_a_terminal("capture", empty, "-o", tmp_path / "c.json", env=env)
    assert code == 1 and "capture: vLLM loads" in shown and "error: vLLM failed to start" in shown, shown
    code, quiet = _stderr_on_a_terminal("capture", empty, "-o", tmp_path / "c.json", "-q", env=env)
    assert code == 1 and "capture: vLLM loads" not in quiet and quiet.strip().startswith("error:"), quiet
