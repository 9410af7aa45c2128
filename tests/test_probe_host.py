"""The probe's per-step host timing (roofline/live/vllm_probe.py --time-host): each model-runner method's time per
decode step is the long runs' less the short runs', over the extra tokens, as the step itself is measured."""
from __future__ import annotations

import pytest

from roofline.live.vllm_probe import HOST_METHODS, host_step


def test_host_time_per_step_drops_the_prefill_and_the_warm_up():
    # run(batch 1, 8 tokens) three times (a warm-up first), run(batch 1, 72 tokens) twice: each run's seconds and
    # calls per method; the prompt's step costs 5 ms in every run, a decode step 0.2 ms and one call
    def run(tokens, prefill_s=0.005):
        return {"execute_model": (prefill_s + 0.0002 * (tokens - 1), tokens),
                "_build_attention_metadata": (0.0001 + 0.00003 * (tokens - 1), tokens)}
    runs = {(1, 8, 1024): [run(8, prefill_s=0.5), run(8), run(8)], (1, 72, 1024): [run(72), run(72)]}
    step = host_step(runs, batch=1, short=8, long=72, context=1024)
    assert step["execute_model"] == {"ms": pytest.approx(0.2), "calls": pytest.approx(1.0)}
    assert step["_build_attention_metadata"]["ms"] == pytest.approx(0.03)


def test_the_timed_methods_are_the_model_runners():
    from importlib.util import find_spec

    if find_spec("vllm") is None:
        pytest.skip("vLLM is not installed")
    from roofline.live.vllm_probe import _runner_classes

    runners = _runner_classes()
    assert runners and all(hasattr(runners[0], name) for name in HOST_METHODS)
