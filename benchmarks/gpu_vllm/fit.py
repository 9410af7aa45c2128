"""Fit the step model's GPU coefficients to real vLLM: every probe result in benchmarks/results/vllm_h200
(probe.py's JSON) and a second machine start's eager steps (FITTED_LATER), the fit set, and the error of the
fitted model in sample, leaving one architecture out, and on the later starts' cases it never fits (HELD_OUT).

    .venv/bin/python benchmarks/gpu_vllm/fit.py            # tables, and benchmarks/results/vllm_h200/fit.json

What is fitted, and from which points:
- CUDA-graph mode (every graphs row): the H200's achievable share of its datasheet bandwidth and the
  floor per replayed kernel, step = sum over segments of max(bytes / (bandwidth x efficiency), compute)
  + graph kernels x floor (roofline/predict/step.py), least squares on log(predicted / measured).
- eager mode (every eager row; every one is host-bound, 3-19x its graph step): the host's cost per
  kernel launched one by one and the Python work of a MoE and of a Mamba layer beyond their launches,
  in launches' worth, host = (eager kernels + MoE layers x m + Mamba layers x a) x cost per kernel.
- weight-only backends (Marlin / Machete: 4-bit weights dequantized in the GEMM, BF16 activations),
  after the above and with it fixed, from their own rows: the rate their weights stream at and the
  share of the tensor rate their GEMMs reach (graph rows), and a GEMM's eager Python in launches' worth
  (eager rows); roofline/data/rules.toml [[backend]] weight_gbps_by_cc / gemm_utilization_by_cc on
  compute capability 9.0, kernels.toml [[gemm]] eager_host_equiv.
Kernel counts are the table's (roofline/data/kernels.toml), itself checked against the profiled steps.

The data tables carry the result (roofline/data/hardware.toml [h200] efficiency, launch.toml
[floor.h200] and [host.x86_server], kernels.toml [python.*]), each naming this file and fit.json;
tests/test_gpu_fit.py fails when they and fit.json part.

Dummy weights and MoE routing: vLLM's dummy loader fills every parameter with small uniform noise. A
softmax router (Qwen3-MoE, Mixtral) then picks experts by tiny, token-dependent logit differences,
spread as real routing is (priced "uniform"); a router that adds a learned score-correction bias before
its top-k (Nemotron-H's sigmoid router, DeepSeek-V3's) picks by the bias alone, the same experts for
every token (priced "shared", engine_fit.DUMMY_ROUTING) -- except where vLLM computes the logits in float32
(DeepSeek-V3's router up to 16 tokens on Hopper, engine_fit.DUMMY_FLOAT32_ROUTER_TOKENS), which keeps the tokens'
differences: priced "uniform" there. gpt-oss's biased softmax router with MXFP4 Marlin experts
fits neither and is left out of the fit (shown in VALIDATION.md).
"""
from __future__ import annotations

import json
import re
import sys
from functools import lru_cache, partial
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
RESULTS = REPO / "benchmarks" / "results" / "vllm_h200"
FIT_FILE = RESULTS / "fit.json"
sys.path.insert(0, str(REPO))

# cases measured after the fit, to check it out of sample: never fitted on (VALIDATION.md "held out")
# later machine starts' decode runs of the 8-layer MoE models and a 2-layer dense one (the host's time per step),
# kept in their own folders: case name -> the file
LATER = {"mixtral8l-graphs-1127": "vllm_h200_load_steps/mixtral8l-graphs.json",
         "q30b8l-graphs-1127": "vllm_h200_load_steps/q30b8l-graphs.json",
         "mixtral8l-graphs-1127b": "vllm_h200_host/mixtral8l-graphs.json",
         "q30b8l-graphs-1127b": "vllm_h200_host/q30b8l-graphs.json",
         "q06b2l-graphs-1127b": "vllm_h200_host/q06b2l-graphs.json",
         # eager, the calibration's probe arguments (256 tokens, batches 1 and 4), one machine start
         **{f"{name}-eager-1127c": f"vllm_h200_caleager/{name}-cal-eager.json"
            for name in ("q8b-again", "llama8b", "gptoss20b", "qwen3next12l", "mixtral8l", "dsv3-4l")},
         # again, after `roofline calibrate --engine vllm` finished on the same machine start (another host)
         **{f"{name}-eager-1127d": f"vllm_h200_caleager2/{name}-cal-eager.json"
            for name in ("q8b-again", "llama8b", "gptoss20b", "qwen3next12l", "mixtral8l", "dsv3-4l", "q30b-again")},
         # eager again on a third machine start, each step profiled after it was timed (the kernels of
         # kernels.toml's MLA, Gemma-style norm and GDN eager counts)
         **{f"{name}-eager-1128": f"vllm_h200_eagerprof/{name}-prof.json"
            for name in ("llama8b", "dsv3-4l", "mixtral8l", "qwen3next12l", "q30b")},
         # a fourth: DeepSeek-V3's MLA with CUDA graphs, Gemma 4 26B-A4B (the harness's config override) both ways
         **{f"{name}-1128b": f"vllm_h200_gemma4/{name}-prof.json"
            for name in ("dsv3-4l-graphs", "gemma4-eager", "gemma4-graphs")},
         # a fifth: GB10's path for gpt-oss (Marlin experts, Triton's attention) and an NVFP4 MoE on Marlin, eager,
         # beside the calibration's dense model
         **{f"{name}-1128c": f"vllm_h200_marlin_eager/{name}.json"
            for name in ("gptoss20b-marlin-eager-prof", "q30b8l-nvfp4-eager-prof", "q8b-again-cal-eager")},
         # a sixth: Gemma 4's dense 31B at 1, 5 and 10 streams, 1.5k and 16k tokens, Triton's attention; Qwen3-8B
         # eager on Triton's attention and on FlashAttention, one host
         **{f"{name}-1128d": f"vllm_h200_dense_streams/{name}.json"
            for name in ("gemma4-31b-prof", "q8b-triton-eager-prof", "q8b-again-cal-eager")},
         # a seventh: Qwen3-8B with CUDA graphs at 4k and 16k tokens, 1 / 8 / 16 streams, on Triton's attention and
         # on FlashAttention 3 (BF16 and FP8 KV); an NVFP4 MoE and gpt-oss on Marlin (GB10's path), profiled
         **{f"{name}-1128e": f"vllm_h200_decode_kernels/{name}.json"
            for name in ("q8b-triton-ctx-graphs", "q8b-fa3-ctx-graphs", "q8b-fa3-fp8kv-ctx-graphs",
                         "q30b8l-nvfp4-graphs-prof", "gptoss20b-marlin-graphs-prof")},
         # an eighth: the attention backends and KV dtypes priced from the kernels above, checked in real steps: Qwen3-8B
         # on Triton with an FP8 cache, an MoE with FlashAttention 3 on FP8, Gemma 4 31B on an FP8 cache (vLLM's
         # choice: Triton), gpt-oss-20b on Triton and on FlashAttention 3 at 4k and 16k tokens
         **{f"{name}-1128f": f"vllm_h200_attention/{name}.json"
            for name in ("q8b-triton-fp8kv-ctx-graphs", "q30b8l-fp8kv-ctx-graphs", "gemma4-31b-fp8kv-graphs",
                         "gptoss20b-triton-ctx-graphs", "gptoss20b-fa3-ctx-graphs")},
         # a ninth: Triton on an FP8 cache as vLLM runs it (the kernel rows retimed), checked in real steps with each
         # step's kernels profiled: Qwen3-8B, Gemma 4 31B (at 10 and again at 5 sequences at most: a decode batch
         # padded past --max-num-seqs runs in piecewise graphs)
         **{f"{name}-1128g": f"vllm_h200_triton_fp8/{name}.json"
            for name in ("q8b-triton-fp8kv-prof", "gemma4-31b-fp8kv-prof", "gemma4-31b-fp8kv-again")},
         # a tenth and eleventh: GB10's Marlin path eager, gpt-oss-20b and -120b (kernels.toml's gpt-oss Marlin MoE
         # Python is their mean: benchmarks/gpu_vllm/eager_python.py) and Qwen3.6's NVFP4 hybrid MoE, each start
         # beside Qwen3-8B eager
         **{f"{name}-1128h": f"vllm_h200_eager_hosts/{name}.json"
            for name in ("q8b-cal-eager", "q36-nvfp4-eager", "gptoss120b-marlin-eager", "q8b-cal-eager-b",
                         "gptoss20b-marlin-eager-b", "gptoss120b-marlin-eager-b", "q8b-cal-eager-b2")},
         # a twelfth: the dense eager band (family left out by lineage) checked on a fresh host: Qwen3-8B, Llama-3.1-8B
         # and Gemma 4's dense 31B (profiled), a family no dense eager step had run
         **{f"{name}-1129": f"vllm_h200_eager_1129/{name}-1129.json"
            for name in ("q8b-eager", "llama8b-eager", "gemma4-31b-eager")},
         # a thirteenth: the same again on the next start, and Gemma 4's MoE (26B-A4B)
         **{f"{name}-1129b": f"vllm_h200_eager_1129/{name}-1129b.json"
            for name in ("q8b-eager", "gemma4-31b-eager", "gemma4-26b-eager")},
         # a fourteenth: Qwen3.6-35B-A3B whole (GDN hybrid MoE), CUDA graphs at 1, 5 and 10 streams of 1.5k tokens, as
         # the GB10 bench runs it: BF16 (the fit set's model) and NVFP4 on Marlin (GB10's path), two starts each
         **{f"{name}-1129c": f"vllm_h200_qwen36_graphs/{name}.json"
            for name in ("q36-nvfp4-graphs", "q36-nvfp4-graphs-prof", "q36-bf16-graphs-prof", "q36-bf16-graphs-b")},
         # a fifteenth to seventeenth: decode steps in piecewise graphs (3 sequences, --max-num-seqs 3: padded to 4),
         # 1 sequence in a FULL graph beside each; the second start's four set prefill.toml's piecewise rows
         # (benchmarks/gpu_vllm/piecewise.py)
         **{f"{name}-1129{start}": f"vllm_h200_piecewise/{name}.json"
            for name, start in (("q8b-pw", "c"), ("qnext12-pw", "c"), ("nemo13-pw", "c"), ("q8b12l-pw", "d"),
                                ("q8b-pw-b", "d"), ("qnext4l-pw", "d"), ("qnext24l-pw", "d"),
                                ("qnext12l-pw-b", "d"), ("q8b12l-triton-pw", "e"))},
         # an eighteenth: eager steps whose host launches take about the GPU's time (Llama-3.1-70B's layers cut to 8
         # and 16: both ~4 and ~8 ms), CUDA graphs beside them, and Qwen3-8B eager (the host's speed), two runs
         **{case: f"vllm_h200_eager_overlap/{case}.json"
            for case in ("l70-8l-eager-1129f", "l70-8l-graphs-1129f", "l70-16l-eager-1129f", "q8b-eager-1129g",
                         "l70-8l-eager-1129g", "l70-16l-graphs-1129g", "l70-16l-eager-1129g")},
         # a nineteenth: the 8-layer shape with its MLP widened (45,056, 65,536, 98,304: the host's launches 0.71,
         # 0.53 and 0.38 of the GPU's step), eager and graphs; the eager steps set launch.toml [eager_overlap]
         **{f"{name}-{mode}-1129h": f"vllm_h200_eager_overlap/{name}-{mode}-1129h.json"
            for name in ("l70m45", "l70m64", "l70m96") for mode in ("eager", "graphs")},
         # a twentieth: the overlap loss checked on another family (Qwen3's layer at Qwen3-32B's width, 8 layers, its
         # MLP widened to 81,920 and 122,880: the host's launches 0.77 and 0.55 of the GPU's step), held out
         **{f"{name}-{mode}-1129i": f"vllm_h200_eager_overlap/{name}-{mode}-1129i.json"
            for name in ("q32m80", "q32m120") for mode in ("eager", "graphs")},
         # a twenty-first and twenty-second: Gemma 3 12B and 27B whole, a third dense family eager (its Gemma-style
         # norms run as PyTorch's own ops one by one), eager and graphs at 1.5k tokens (past its 1,024-token
         # windows); on the second start Qwen3-8B eager before and after (its host's cost per launch), and the 12B's
         # eager steps between them set kernels.toml's host share of such ops (native_ops.py)
         **{case: f"vllm_h200_gemma3/{case}.json"
            for case in ("g3-12b-graphs-1201", "g3-12b-eager-1201", "g3-12b-eager-prof-1201", "g3-27b-graphs-1201",
                         "g3-27b-eager-1201", "q8b-eager-1201b", "g3-12b-eager-1201b", "g3-27b-eager-1201b",
                         "q8b-eager-1201c")},
         # a twenty-third: Nemotron-3-Nano eager at the calibration's engine settings (640 tokens a step, 4 sequences)
         # and at 16,384 tokens and 128 sequences (the same step: the engine's size does not move a Mamba layer's
         # Python), at 1,024 tokens, and twice more, each beside Qwen3-8B eager (the host's speed), and Qwen3-30B-A3B
         **{case: f"vllm_h200_mamba_eager/{case}.json"
            for case in ("q8b-cal-eager-1202", "nemo-cal-eager-1202", "nemo-big-eager-1202", "q30b-cal-eager-1202",
                         "nemo-ctx-eager-1202", "q8b-cal-eager-1202b", "nemo-cal-eager-1202c", "q8b-cal-eager-1202c",
                         "nemo-cal-eager-1202d", "q8b-cal-eager-1202d")},
         # a twenty-fourth: the speculative steps' host check, Qwen3-8B eager twice, and its plain graph step (the
         # drafted steps themselves are benchmarks/gpu_vllm/spec_steps.py's)
         **{case: f"vllm_h200_spec_async/{case}.json" for case in ("q8b-eager-1202s", "q8b-eager-1202t", "q8-r0-1202s")},
         # a twenty-fifth: Qwen3-8B's plain graph step with async scheduling on, beside its steps without it (not a
         # decode fit's step: benchmarks/gpu_vllm/async_scheduling.py); a twenty-sixth: the third speculative start's
         # host check and DeepSeek-V3's plain MLA step
         "q8-r0-on-1202": "vllm_h200_async/q8-r0-on-1202.json",
         **{case: f"vllm_h200_spec_async/{case}.json" for case in ("q8b-eager-1202u", "ds-r0-1202u")},
         # a twenty-seventh: a third hybrid family, IBM's Granite 4.0-H (Mamba2 layers and four of attention; Tiny's 64
         # routed experts and shared MLP, 1B's shared MLP alone), graphs and eager, with its host check; and DeepSeek-V3's
         # MLA cut profiled at 1, 8 and 32 tokens (its router's float32 logits up to 16: engine_fit.dummy_routing)
         **{case: f"vllm_h200_granite/{case}.json"
            for case in ("q8b-eager-1202v", "g4h-tiny-graphs-1202v", "g4h-tiny-eager-1202v", "g4h-1b-graphs-1202v",
                         "g4h-1b-eager-1202v", "ds-r0-prof-1202v")},
         # a twenty-eighth: the model runner's host time per step timed (probe.py --time-host) with graphs: a 2-layer
         # Qwen3, Granite-4.0-H-1B and -Tiny again, and the 1B cut to ten KV cache groups (9 Mamba2 + 1 attention),
         # whose host time beside the cut to two groups (step_host.py; that cut's config was written on the device)
         # sets launch.toml's per-group host time
         **{case: f"vllm_h200_host_groups/{case}.json"
            for case in ("q06b2l-host-graphs-1202w", "g4h-1b-host-graphs-1202w", "g4h-tiny-host-graphs-1202w",
                         "g4h-1b-9m1a-host-graphs-1202w")},
         # a twenty-ninth: MoE steps of 1-32 streams with the routers' dummy biases zeroed (probe.py --router-bias
         # zero, priced "uniform": engine_fit.rows_for): Nemotron-3-Nano's 13-layer cut and DeepSeek-V3's 4-layer cut,
         # whose layers add no other bias, then route by token; gpt-oss-20b and -120b on GB10's path (Marlin MXFP4
         # experts, Triton's attention; the 120b on two engine starts) and on Hopper's default do not (LEFT_OUT)
         **{case: f"vllm_h200_router_bias/{case}.json"
            for case in ("gptoss20b-marlin-rb0-1202x", "gptoss120b-marlin-rb0-1202x", "gptoss120b-marlin-rb0-b-1202z",
                         "gptoss20b-rb0-1202y", "gptoss20b-rb0-prof-1202z", "nemo13-rb0-1202y", "dsv3-4l-rb0-1202y")},
         # a thirtieth: gpt-oss with every bias zeroed (probe.py --router-bias zero-all: attention, expert and router
         # biases), whose tokens then route by token (engine_fit.ZEROED_BIAS_ROUTING), 1-32 streams: the 120b and 20b on
         # GB10's path (Marlin MXFP4 experts, Triton's attention) with graphs and eager, the 20b on Hopper's default
         # (Triton MXFP4 experts, FlashAttention 3's sinks); the 120b's and the default path's graph steps set their
         # backends' H200 rates (FITTED_LATER), the 20b's on Marlin check them; and the 20b's default path with its
         # biases, one and four tokens profiled
         **{case: f"vllm_h200_router_bias/{case}.json"
            for case in ("gptoss120b-marlin-rb0all-1202a", "gptoss20b-marlin-rb0all-1202a", "gptoss20b-prof1-1202a",
                         "gptoss120b-marlin-rb0all-eager-1202b", "gptoss20b-marlin-rb0all-eager-1202b",
                         "gptoss20b-rb0all-1202b")},
         # a thirty-first: dense models (and one MoE) at 1, 5 and 10 streams of 1.5k and 16k tokens, as the GB10 bench
         # runs them, --max-num-seqs 10 (a batch of 10 pads to 16, past the FULL graphs: piecewise), and Llama-3.1-8B
         # at 8-16 streams with --max-num-seqs 16 (every batch in a FULL graph)
         **{case: f"vllm_h200_streams/{case}.json"
            for case in ("llama70b16l-streams-1202c", "gemma3-27b-streams-1202c", "q30b-streams-1202d",
                         "gemma3-12b-streams-1202d", "llama8b-streams-1202e", "q8b-streams-1202e",
                         "llama8b-pad-1202f")},
         # a thirty-second: gpt-oss with every bias zeroed again, another machine start: the 120b on Hopper's default
         # path (never fitted: the 20b's rate and grouped-GEMM time check it) at 1-32 streams profiled at 1 and 32, at
         # 4k and 16k tokens, and eager; the 20b on Marlin profiled at 1 and 32; eager steps of both on both paths
         # beside Qwen3-8B's on the same start (the host's cost per launch)
         **{case: f"vllm_h200_router_bias/{case}.json"
            for case in ("gptoss120b-rb0all-prof-1202c", "gptoss20b-marlin-rb0all-prof-1202c",
                         "gptoss120b-rb0all-ctx-1202d", "gptoss120b-rb0all-eager-1202d", "q8b-eager-1202e",
                         "gptoss20b-rb0all-eager-1202e", "gptoss120b-marlin-rb0all-eager-1202f",
                         "gptoss20b-marlin-rb0all-eager-1202g", "q8b-eager-1202g")}}
# later cases the fit uses: a second machine start's eager steps, the only one beside the fit's own to run a Mamba
# hybrid with the host checked (Qwen3-8B eager on the same start): one start's host set the host's cost per launch,
# and the Mamba layer's Python was fitted on one start's steps alone
FITTED_LATER = {case for case, name in LATER.items() if name.startswith("vllm_h200_mamba_eager/")} | \
    {"gptoss120b-marlin-rb0all-1202a", "gptoss20b-rb0all-1202b"}
# (the first start's gpt-oss run routed by its dummy biases: its one-token step, whose routing is known, checks the
# MXFP4 rate that the run with every bias zeroed sets)
HELD_OUT = {"qwen3-06b-graphs", "mixtral-eager", "dsv3-4l-bf16-graphs", "llama8b-ctx32k-graphs", "qwen3moe8l-graphs",
            "qwen3moe8l-nvfp4-graphs", "qwen3next12l-graphs", "qwen3next12l-eager", "gptoss20b-graphs",
            *(set(LATER) - FITTED_LATER)}
# decode rows that are not one step of their batch, with why: (case, batch, context) -> reason
NOT_A_STEP = {**{("gemma4-31b-prof-1128d", batch, 16384): "the engine's KV pool (80,595 tokens) held fewer than the "
                 "batch's prompts: vLLM ran them in waves, re-prefilling evicted prefixes (at 10 streams the profiled "
                 "steps' GEMMs ran at 8 rows or fewer in 81% of steps, and prompt chunks rode along)" for batch in (5, 10)},
              **{(case, 10, 1536): "Triton compiled the fused MoE kernel for the padded batch (16) inside the timed "
                 "generations (vLLM's log: 'Triton kernel JIT compilation during inference: fused_moe_kernel'); its two "
                 "repeats disagree 2.2x and 1.8x" for case in ("q36-bf16-graphs-prof-1129c", "q36-bf16-graphs-b-1129c")},
              **{(case, 16, 1024): "Triton compiled the fused MoE kernel for the batch inside the first timed generation "
                 "(vLLM's log: 'Triton kernel JIT compilation during inference: fused_moe_kernel'): one repeat 34-35 ms, "
                 "the other 3.8-4.2" for case in ("nemo13-rb0-1202y", "dsv3-4l-rb0-1202y")},
              **{(case, batch, 1024): "Hopper's Triton MXFP4 experts (OAITritonMxfp4ExpertsMonolithic) ran the repeats "
                 "up to 1.5x apart, and at 16 streams the long generations took less than the short ones: not one step "
                 "of the batch (no JIT line in vLLM's log; the cause not traced)"
                 for case in ("gptoss20b-rb0-1202y", "gptoss20b-rb0-prof-1202z") for batch in (4, 8, 16, 32)}}
# held-out cases whose own steps set a table's term (eager_python.py: a layer's eager Python; piecewise.py: the
# piecewise decode rows): not fitted by this fit, and no class's held-out point either (in sample for that term)
SET_A_TERM = {case: "their steps set Gemma 4's decoder-layer eager Python (eager_python.py)"
              for case in ("gemma4-31b-eager-1129", "gemma4-31b-eager-1129b", "gemma4-26b-eager-1129b")} | \
    {f"{name}-1129d": "their steps set the piecewise decode rows of prefill.toml (piecewise.py)"
     for name in ("q8b12l-pw", "q8b-pw-b", "qnext4l-pw", "qnext24l-pw")} | \
    {case: "their steps set the eager overlap loss of launch.toml (eager_overlap.py)"
     for case in ("l70-8l-eager-1129f", "l70-8l-eager-1129g", "l70-16l-eager-1129f", "l70-16l-eager-1129g",
                  "l70m45-eager-1129h", "l70m64-eager-1129h", "l70m96-eager-1129h")}
SET_A_TERM |= {case: "their steps set the host's share of a launch for PyTorch's own ops (native_ops.py)"
               for case in ("g3-12b-eager-1201b",)} | \
    {case: "their steps set a GDN layer's eager Python (eager_python.py)"
     for case in ("qwen3next12l-eager-1127c", "q36-nvfp4-eager-1128h")} | \
    {"g4h-1b-9m1a-host-graphs-1202w": "their host times set the host's time per KV cache group (step_host.py)"}
LEFT_OUT = {"gpt_oss": "biased softmax router under dummy weights: routing unknown (with its router's bias zeroed its "
                       "tokens still share experts: its attention and expert biases give every token's hidden state the "
                       "same part), except in runs that zeroed every bias (--router-bias zero-all: by token) and at one "
                       "token (its top-k experts, whichever the router picks), "
                       "benchmarks/results/vllm_h200_router_bias"}
# what a left-out architecture's run zeroed for its routing to be known (engine_fit.ZEROED_BIAS_ROUTING)
ROUTING_KNOWN = {"gpt_oss": "zero-all"}


def left_out(row: Row) -> bool:
    """Whether the row is left out of every fit and class (LEFT_OUT: its architecture's routing under dummy weights
    unknown, unless the run zeroed what ROUTING_KNOWN names, or the step is one token's: it reads its top-k experts
    whichever the router picks)."""
    return row.architecture in LEFT_OUT and row.router_bias != ROUTING_KNOWN.get(row.architecture) and row.batch > 1
HARDWARE = "h200"

from roofline.live import engine_fit  # noqa: E402
from roofline.live.engine_fit import DUMMY_ROUTING as ROUTING, Fit, Row, dummy_routing, errors, rows_for, summary  # noqa: E402,F401,E501
from roofline.predict.step import StepConfig  # noqa: E402


@lru_cache(maxsize=None)
def inventory_of(config: str):
    """A run's config folder (relative to the repository) as load_inventory reads it, read once a process: the
    checks read each of a few dozen configs for hundreds of runs (the inventory is shared, read-only)."""
    from roofline.audit import load_inventory

    return load_inventory(str(REPO / config))


def results(folder: Path = RESULTS):
    """(path, result, inventory, routing) of every probe result: the inventory as vLLM built the model
    (online `quantization="fp8"` priced as the fp8 format simulated from the BF16 config), and the MoE
    routing its dummy weights give a step of so many tokens on a GPU (routing(tokens, hardware))."""
    from roofline.advise.simulate import get_recipe, simulate

    paths = [path for path in sorted(folder.glob("*.json")) if path != FIT_FILE]
    if folder == RESULTS:
        paths += [RESULTS.parent / name for name in LATER.values()]
    for path in paths:
        result = json.loads(path.read_text())
        inventory = inventory_of(result["config"])
        if result.get("quantization") == "fp8":
            inventory = simulate(inventory, "fp8", get_recipe("default"))
        yield path, result, inventory, partial(dummy_routing, inventory)


def load_rows() -> list[Row]:
    """Every decode row of every probe result, with the step model's terms for it."""
    from roofline.predict.hardware import get_hardware

    hardware = get_hardware(HARDWARE)
    return [row for path, result, inventory, _ in results()
            for row in rows_for(result, inventory, hardware, case_of(path), None,
                                ran_config(result, inventory, hardware))
            if (row.case, row.batch, row.context) not in NOT_A_STEP]


def ran_config(result: dict, inventory, hardware) -> StepConfig:
    """What a run set besides batch and context, as the step model takes it: the backend, KV dtype, attention
    backend and largest FULL decode graph its engine ran."""
    return StepConfig(backend=ran_backend(result, inventory, hardware),
                      kv_cache_dtype=result.get("kv_cache_dtype") or "auto", attention_backend=ran_attention(result),
                      full_decode_tokens=ran_full_decode(result, inventory, hardware))


def ran_backend(result: dict, inventory, hardware):
    """The backend a run's main format ran on: the one its --moe-backend named (the probe records it; a result
    from before it did names it in its command only), else vLLM's default here (None)."""
    from roofline.predict.backends import backend_named

    named = result.get("moe_backend") or next(iter(re.findall(r"--moe-backend[= ](\S+)", result["command"])), None)
    return backend_named(inventory.main_format(), named, hardware) if named else None


def ran_full_decode(result: dict, inventory, hardware) -> int | None:
    """The largest decode step the run's engine replayed a FULL graph of (its --max-num-seqs and vLLM's default
    capture sizes; None: a result from before the probe recorded its engine, priced FULL as before)."""
    from roofline.predict.cuda_graphs import full_decode_tokens
    from roofline.predict.deployment import default_capture_tokens

    engine = result.get("engine") or {}
    if result["mode"] != "graphs" or not engine.get("max_num_seqs"):
        return None
    seqs, batched = engine["max_num_seqs"], engine["max_num_batched_tokens"]
    largest = default_capture_tokens(seqs, batched, 0, inventory.shape.architecture, hardware)
    return full_decode_tokens(seqs, 0, largest, batched)


def ran_attention(result: dict) -> str | None:
    """The attention backend a run named (--attention-backend; a result from before the probe recorded it names
    it in its command only), else None: vLLM's choice (predict/attention.py)."""
    return result.get("attention_backend") or next(iter(re.findall(r"--attention-backend[= ](\S+)",
                                                                    result["command"])), None)


def case_of(path: Path) -> str:
    """A result's case name: its file's, or LATER's name for a later machine start's file."""
    return next((case for case, name in LATER.items() if RESULTS.parent / name == path), path.stem)


def fitted(row: Row) -> bool:
    """Whether the H200 fit uses the row: not a held-out case, not an architecture left out."""
    return row.case not in HELD_OUT and not left_out(row)


def fit(rows: list[Row]) -> Fit:
    """The H200 fit: every row it uses (fitted())."""
    return engine_fit.fit([r for r in rows if fitted(r)])


def fit_weight_only(rows: list[Row], model: Fit) -> dict[str, dict]:
    """Per weight-only backend (Backend.name) that ran: its weights' rate, its GEMMs' share of the
    tensor rate, a GEMM's eager Python, and the cases they came from."""
    out = {}
    for name in sorted({r.backend for r in rows if r.weight_only and fitted(r)}):
        mine = [r for r in rows if r.weight_only and r.backend == name and fitted(r)]
        graphs = [r for r in mine if r.mode == "graphs"]
        eager = [r for r in mine if r.mode == "eager"]
        entry = {"cases": sorted({r.case for r in mine})}
        if graphs:
            entry["weight_gbps"], entry["gemm_utilization"], entry["routed_call_us"] = \
                engine_fit.fit_weight_backend(graphs, model.efficiency, model.floor_us, model.utilization)
        if eager:
            entry["gemm_host_equiv"] = engine_fit.fit_gemm_python(eager, model)
        out[name] = entry
    return out


def main() -> int:
    rows = load_rows()
    in_fit = [r for r in rows if fitted(r)]
    model = fit(in_fit)
    print(f"fit on {len(in_fit)} points of {len({r.case for r in in_fit})} cases "
          f"({', '.join(sorted({r.architecture for r in in_fit}))}); left out: "
          + "; ".join(f"{a} ({why})" for a, why in LEFT_OUT.items()))
    print(f"  H200 efficiency {model.efficiency:.3f} of 4800 GB/s, graph floor {model.floor_us:.2f} us per kernel, "
          f"compute utilization {model.utilization:.2f} of the datasheet tensor rate")
    print(f"  host (x86, vLLM eager) {model.host_us:.1f} us per kernel; Python per MoE layer "
          f"{model.moe_equiv:g} launches' worth, per Mamba layer {model.mamba_equiv:g}")
    weight_only = fit_weight_only(rows, model)
    for name, entry in weight_only.items():
        print(f"  {name}: weights at {entry.get('weight_gbps', float('nan')):g} GB/s, GEMMs at "
              f"{entry.get('gemm_utilization', float('nan')):g} of the tensor rate, a grouped expert GEMM "
              f"{entry.get('routed_call_us', 0):g} us beyond its bytes and the floor, eager Python "
              f"{entry.get('gemm_host_equiv', 0):g} launches' worth per GEMM ({', '.join(entry['cases'])})")

    # leave one architecture out: fit on the others, predict it
    held_out: dict[str, dict[str, list[float]]] = {}
    for architecture in sorted({r.architecture for r in in_fit}):
        others = [r for r in in_fit if r.architecture != architecture]
        if not any(r.mode == "eager" for r in others):
            continue
        partial = fit(others)
        held_out[architecture] = errors([r for r in in_fit if r.architecture == architecture], partial)

    print(f"\n{'case':26}{'batch':>6}{'ctx':>6}{'measured ms':>13}{'fitted ms':>11}{'error':>8}")
    for r in rows:
        predicted = model.predict_ms(r)
        mark = "  (left out)" if left_out(r) else "  (sets a term)" if r.case in SET_A_TERM \
            else "  (held out)" if r.case in HELD_OUT else ""
        print(f"{r.case:26}{r.batch:>6}{r.context:>6}{r.measured_ms:>13.3f}{predicted:>11.3f}"
              f"{100 * (predicted / r.measured_ms - 1):>+7.0f}%{mark}")
    held = errors([r for r in rows if r.case in HELD_OUT and r.case not in SET_A_TERM], model)
    for mode, values in held.items():
        if values:
            print(f"held out ({mode}, cases measured after the fit): mean |error| "
                  f"{100 * summary(values)['mean_abs']:.1f}%, max {100 * summary(values)['max_abs']:.0f}% ({len(values)} points)")
    fitted_errors = errors(in_fit, model)
    loao = {"graphs": [e for v in held_out.values() for e in v["graphs"]],
            "eager": [e for v in held_out.values() for e in v["eager"]]}
    print()
    for mode in ("graphs", "eager"):
        s, h = summary(fitted_errors[mode]), summary(loao[mode])
        print(f"{mode:7} in sample: mean |error| {100 * s['mean_abs']:.1f}%, max {100 * s['max_abs']:.0f}% "
              f"({s['points']} points); leaving one architecture out: mean |error| {100 * h['mean_abs']:.1f}%, "
              f"max {100 * h['max_abs']:.0f}% ({h['points']} points)")
    payload = {
        "schema": "roofline.vllm_fit/1",
        "command": ".venv/bin/python benchmarks/gpu_vllm/fit.py",
        "hardware": HARDWARE,
        "vllm_version": sorted({r.vllm_version for r in rows}),
        "gpu": sorted({r.gpu for r in rows}),
        "cases": sorted({r.case for r in in_fit}),
        "left_out": LEFT_OUT,
        "routing": ROUTING,
        "routing_float32_router_tokens": engine_fit.DUMMY_FLOAT32_ROUTER_TOKENS,
        "coefficients": {"efficiency": model.efficiency, "graph_floor_us_per_kernel": model.floor_us,
                         "compute_utilization": model.utilization,
                         "host_us_per_kernel": model.host_us, "moe_layer_host_equiv": model.moe_equiv,
                         "mamba_layer_host_equiv": model.mamba_equiv},
        "weight_only_backends": weight_only,
        "in_sample": {mode: summary(v) for mode, v in fitted_errors.items()},
        "held_out_cases": sorted(HELD_OUT),
        "held_out": {mode: summary(v) for mode, v in held.items()},
        "leave_one_architecture_out": {mode: summary(v) for mode, v in loao.items()},
        "leave_one_architecture_out_by_architecture": {
            a: {mode: summary(v) for mode, v in e.items()} for a, e in held_out.items()},
    }
    FIT_FILE.write_text(json.dumps(payload, indent=1, allow_nan=False) + "\n")
    print(f"\nwrote {FIT_FILE.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
