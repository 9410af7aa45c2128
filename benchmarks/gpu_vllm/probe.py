"""The GPU harness's probe: roofline/live/vllm_probe.py (the same code `roofline calibrate --engine vllm`
runs), started from the repository root with the vLLM site on PYTHONPATH (run_probe.sh)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))

from roofline.live.vllm_probe import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
