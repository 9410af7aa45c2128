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


def test_router_biases_are_zeroed_in_place_and_nothing_else():
    # the routers as vLLM's models name them: gpt-oss's mlp.router (a bias per expert), DeepSeek-V3's and Nemotron-H's
    # gate with a score correction; an MLP's gate_proj and an attention bias stay as they are
    torch = pytest.importorskip("torch")
    from torch import nn

    from roofline.live.vllm_probe import zero_router_biases

    class Moe(nn.Module):
        def __init__(self, corrected: bool):
            super().__init__()
            self.router = nn.Linear(16, 4, bias=not corrected)
            self.gate = nn.Linear(16, 4, bias=False)
            if corrected:
                self.gate.e_score_correction_bias = nn.Parameter(torch.full((4,), 0.5))
            self.gate_proj = nn.Linear(16, 32, bias=True)

    model = nn.ModuleDict({"a": Moe(corrected=False), "b": Moe(corrected=True)})
    model.add_module("qkv", nn.Linear(16, 16, bias=True))
    for p in model.parameters():
        nn.init.constant_(p, 0.25)
    router_bias = model["a"].router.bias
    assert zero_router_biases(model) == {"router_bias": {"layers": 1, "first": ["a.router"]},
                                         "score_correction_bias": {"layers": 1, "first": ["b.gate"]}}
    assert model["a"].router.bias is router_bias and not router_bias.any()  # in place: a captured graph reads it
    assert not model["b"].gate.e_score_correction_bias.any()
    assert model["a"].gate_proj.bias.eq(0.25).all() and model["qkv"].bias.eq(0.25).all()
    assert model["a"].router.weight.eq(0.25).all()


def test_every_bias_is_zeroed_in_place_with_zero_all():
    # gpt-oss's attention and expert biases give every token's hidden state one common part, which its router follows
    # with its own bias zeroed: zero-all zeroes them all (parameters and buffers named *bias), and nothing else
    torch = pytest.importorskip("torch")
    from torch import nn

    from roofline.live.vllm_probe import zero_all_biases

    model = nn.ModuleDict({"qkv": nn.Linear(8, 8), "router": nn.Linear(8, 4)})
    model.register_parameter("w13_bias", nn.Parameter(torch.ones(4, 16)))
    model.register_buffer("e_score_correction_bias", torch.ones(4))
    model.register_buffer("positions", torch.arange(4))  # not a bias, not a float
    for p in model.parameters():
        nn.init.constant_(p, 0.5)
    weight = model["qkv"].weight
    report = zero_all_biases(model)
    assert report == {"all_biases": {"layers": 4, "by_name": {"w13_bias": 1, "bias": 2, "e_score_correction_bias": 1}}}
    assert not any(t.any() for n, t in [*model.named_parameters(), *model.named_buffers()] if n.endswith("bias"))
    assert model["qkv"].weight is weight and weight.eq(0.5).all() and model.positions.tolist() == [0, 1, 2, 3]
