"""How roofline starts a Python child of its own (vLLM's probe, vLLM with the capture plugin): the module
runs from the installed packages only. `python -m MODULE` would put the working directory first on the
child's sys.path, so a `roofline/` or `vllm/` folder where the user stands would run instead; PYTHONPATH
and site-packages stay as the user set them (the GPU harness puts vLLM there). `-P` does the same from
Python 3.11 on; this works on any Python the user names."""
from __future__ import annotations

import sys

# drop the working directory ('' or its path) from sys.path, then run the module as `-m` would
_RUN = ("import os, runpy, sys; here = {'', os.getcwd()}; "
        "sys.path[:] = [p for p in sys.path if p not in here and os.path.abspath(p) != os.getcwd()]; "
        "runpy.run_module(MODULE, run_name='__main__', alter_sys=True)")


def module_command(module: str, args: list[str], python: str | None = None) -> list[str]:
    """The argv that runs `module` as a script with `args`, from the installed packages only."""
    return [python or sys.executable, "-c", _RUN.replace("MODULE", repr(module)), *args]
