"""The README's examples are what the commands print today (issue: a screenshot showed a ceiling
from an older version). scripts/readme_examples.py regenerates them; this runs its --check."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_readme_examples_and_report_picture_are_current():
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "readme_examples.py"), "--check"],
                          capture_output=True, text=True, timeout=600, cwd=REPO)
    assert proc.returncode == 0, proc.stderr


# ------------------------------------------------------------------------- every command the README shows
#
# Each `roofline ...` line of a sh block either runs here, with the README's placeholders stood in for
# by the project's own examples, and must exit 0; or needs what a test machine has not (a hub, a
# running server, a GPU, minutes of vLLM): then vLLM-style parsing of its options and values is checked
# (the command's own click parser: a renamed option or a bad value fails), and the table says why.

import re  # noqa: E402
import shlex  # noqa: E402

import pytest  # noqa: E402

STAND_INS = {
    "MODEL": "examples/Qwen3-8B", "./my-checkpoint": "examples/Qwen3-8B",
    "A": "examples/compare/Qwen3-30B-A3B", "./ckpt-a": "examples/compare/Qwen3-30B-A3B",
    "B": "examples/compare/Qwen3-30B-A3B-FP8", "./config-only-c": "examples/compare/Qwen3-30B-A3B-NVFP4",
    "capture.json": "examples/doctor/qwen3-next-nvfp4-eager.capture.json",
    "/tmp/capture.json": "examples/doctor/qwen3-next-nvfp4-eager.capture.json",
    "step.pt.trace.json.gz": "tests/fixtures/traces/h200_hybrid_qwen3_6_24layers_step.json.gz",
    "requests.jsonl": "examples/traces/requests.jsonl",
}
OUTPUTS = ("report.html", "audit.json", "sweep.json")  # files a command writes: into the test's folder
# what only parses here, and why (matched against the command line)
PARSE_ONLY = {
    r"https?://|--url": "a running server",
    r"\b(nvidia|Qwen|deepseek-ai|org)/": "the Hugging Face hub",
    r"^capture\b|--engine vllm": "a vLLM engine start (tests/test_capture*.py and test_calibrate_engine.py run it)",
    r"--device cuda": "a GPU",
    r"--bench-json sweep.json": "a bench result of a running server",
    r"--bench-json rate-8.json": "an open-loop result of a running server (tests/test_load_commands.py replays the "
                                 "recorded H200 runs)",
}


def readme_commands() -> list[str]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    out = []
    for block in re.finditer(r"```(?:sh|bash)\n(.*?)```", text, re.S):
        for line in block.group(1).splitlines():
            if line.startswith("roofline "):
                out.append(line.split("   #")[0].split("  #")[0].strip())
    return out


def stand_in(words: list[str], tmp) -> list[str]:
    out = []
    for word in words:
        if word in OUTPUTS:
            word = str(tmp / word)
        out.append(STAND_INS.get(word, word))
    return out


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    import os

    tmp = tmp_path_factory.mktemp("readme")
    env = dict(os.environ, ROOFLINE_HARDWARE_FILE=str(tmp / "hardware.toml"), ROOFLINE_RECORD=str(tmp / "record.jsonl"),
               HF_HUB_OFFLINE="1", COLUMNS="100")
    return tmp, env


def test_the_readme_shows_commands():
    assert len(readme_commands()) >= 30


@pytest.mark.parametrize("line", readme_commands())
def test_every_readme_command_runs_or_parses(line, sandbox, tmp_path):
    tmp, env = sandbox
    words = shlex.split(line)[1:]
    if ">" in words:  # a shell redirection: the output is the test's
        words = words[:words.index(">")]
    words = stand_in(words, tmp_path)  # each command's own files: a report holds one model
    why = next((reason for pattern, reason in PARSE_ONLY.items() if re.search(pattern, line.split(" ", 1)[1])), None)
    if why is None:
        if words[0] != "calibrate" and "my-host" in words and not (tmp / "hardware.toml").is_file():
            # the README's own `calibrate --save my-host` first: the entry later commands name
            proc = subprocess.run([sys.executable, "-m", "roofline.cli", "calibrate", "--save", "my-host"],
                                  capture_output=True, text=True, timeout=300, cwd=REPO, env=env)
            assert proc.returncode == 0, proc.stderr
        proc = subprocess.run([sys.executable, "-m", "roofline.cli", *words], capture_output=True, text=True,
                              timeout=300, cwd=REPO, env=env)
        assert proc.returncode == 0, f"{line}\n{proc.stderr}"
        return
    from click.testing import CliRunner  # noqa: F401 - click's own parser, without running the command

    from roofline.cli import cli

    context = cli.make_context("roofline", list(words), resilient_parsing=False)
    name, command, rest = cli.resolve_command(context, list(words))
    with command.make_context(name, rest, parent=context):
        pass  # every option known, every value of its type
