"""roofline's own Python children (vLLM's probe for `calibrate --engine vllm`, vLLM with the capture plugin)
run the installed modules, never a same-named folder where the user stands (roofline/live/child.py)."""
from __future__ import annotations

import subprocess

from roofline.live.child import module_command

IMPOSTOR = "open('ran-the-impostor', 'w').write('x')\n"


def test_a_roofline_folder_in_the_working_directory_does_not_run(tmp_path):
    for folder in ("roofline", "roofline/live"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "__init__.py").write_text(IMPOSTOR)
    (tmp_path / "roofline" / "live" / "vllm_probe.py").write_text(IMPOSTOR)
    done = subprocess.run(module_command("roofline.live.vllm_probe", ["--help"]), cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "--max-num-batched-tokens" in done.stdout  # the installed probe's own options
    assert not (tmp_path / "ran-the-impostor").exists()


def test_the_child_keeps_the_users_pythonpath(tmp_path):
    """The GPU harness puts vLLM on PYTHONPATH: that stays; only the working directory is dropped."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "extra_module_for_test.py").write_text("print('from PYTHONPATH')\n")
    import os

    env = dict(os.environ, PYTHONPATH=str(site))
    done = subprocess.run(module_command("extra_module_for_test", []), cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "from PYTHONPATH", done.stderr
