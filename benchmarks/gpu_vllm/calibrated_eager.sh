#!/usr/bin/env bash
# Eager steps after `roofline calibrate --engine vllm`, on the host it measured: the calibration as a user runs
# it (run_probe.sh calibrate), then models it never ran, --enforce-eager, with the calibration's own probe
# arguments, on the same machine start. The chain (~20 min) runs in the background of back-to-back `device`
# calls, from a copy of the tree under /tmp/chain (a call's tree is not kept for the next one):
#   bash benchmarks/gpu_vllm/calibrated_eager.sh start     after `run_probe.sh stage` of all but the last site part;
#                                                          carry the last part and .whl/roofline-deps
#   bash benchmarks/gpu_vllm/calibrated_eager.sh wait 580  the results so far as $OUT/chain.tgz
#   bash benchmarks/gpu_vllm/calibrated_eager.sh start NAME...  only the named cases, without the calibration (e.g.
#       the profiled eager steps of the MoE and hybrid families: dsv3-4l-prof mixtral8l-prof qwen3next12l-prof)
# Then, here: benchmarks/gpu_vllm/calibrated_eager.py (the errors beside the bands the entry prints).
set -euo pipefail
CHAIN=/tmp/chain
# the calibration's probe arguments (roofline/live/engine_calibrate.py run_probe; max_model_len 2 x (256 + 64),
# and a step of at most that many tokens)
CALIBRATION_ARGS="--batches 1,4 --context 256 --short 8 --long 56 --repeats 3 --max-model-len 640 --max-num-batched-tokens 640"
# models the calibration never ran, by family: dense of another family, MoE of three others (gpt-oss's biased
# router, sinks and sliding windows; Mixtral's 8 wide experts; DeepSeek-V3's MLA), a GDN hybrid, Gemma 4's MoE
# with sliding windows; then the calibration's own dense and MoE again (a second engine start of each). Llama and
# the calibration's Qwen3-8B profiled at batch 1 (their kernels and launches a step): the same host's eager Llama
# step came out 1.4x Qwen3-8B's where the model priced 0.78x
CASES=(
  "llama8b-cal-eager:tests/reference_configs/meta-llama__Llama-3.1-8B-Instruct:eager::--profile-batches=1"
  "gptoss20b-cal-eager:tests/reference_configs/openai__gpt-oss-20b:eager"
  "dsv3-4l-cal-eager:benchmarks/gpu_vllm/configs/DeepSeek-V3-4layers-bf16:eager"
  "mixtral8l-cal-eager:benchmarks/gpu_vllm/configs/Mixtral-8x7B-8layers:eager"
  "qwen3next12l-cal-eager:benchmarks/gpu_vllm/configs/Qwen3-Next-80B-A3B-12layers:eager::--additional-config={\"gdn_prefill_backend\":\"triton\"}"
  # a Mamba2 hybrid MoE the calibration never ran (its own hybrid is Nemotron-3-Nano)
  "granite-tiny-cal-eager:benchmarks/gpu_vllm/configs/Granite-4.0-H-Tiny:eager"
  "gemma4-cal-eager:benchmarks/gpu_vllm/configs/gemma-4-26B-A4B-text:eager::--hf-overrides={\"allow_global_per_layer_attribute_access\":true,\"global_head_dim\":512,\"num_global_key_value_heads\":2} --attention-backend=TRITON_ATTN"
  # the calibration's own models on a second engine start, last: what a short device budget drops first
  "q8b-again-cal-eager:roofline/data/engine_models/qwen3-8b:eager::--profile-batches=1"
  "q30b-again-cal-eager:roofline/data/engine_models/qwen3-30b-a3b:eager"
  # one eager decode step profiled at batch 1 (kernels, their launchers, the host's share) of the MoE and hybrid
  # families the calibrated entry priced 41-45% too fast, beside Llama's on the same machine start
  "llama8b-prof:tests/reference_configs/meta-llama__Llama-3.1-8B-Instruct:eager::--profile-batches=1"
  "dsv3-4l-prof:benchmarks/gpu_vllm/configs/DeepSeek-V3-4layers-bf16:eager::--profile-batches=1"
  "mixtral8l-prof:benchmarks/gpu_vllm/configs/Mixtral-8x7B-8layers:eager::--profile-batches=1"
  "qwen3next12l-prof:benchmarks/gpu_vllm/configs/Qwen3-Next-80B-A3B-12layers:eager::--profile-batches=1 --additional-config={\"gdn_prefill_backend\":\"triton\"}"
  "q30b-prof:roofline/data/engine_models/qwen3-30b-a3b:eager::--profile-batches=1"
  # DeepSeek-V3's MLA with CUDA graphs (the graph-mode kernels of kernels.toml [core.mla]); Gemma 4's MoE with
  # sliding windows, both modes. vLLM 0.26 reads Gemma 4's config.head_dim, which the image's transformers marks
  # per-layer (AmbiguousGlobalPerLayerAttributeError), and reads its global layers' shape from global_head_dim and
  # num_global_key_value_heads, which that transformers folds into per-layer overrides and drops: the overrides let
  # vLLM read the global value and give it the two back (without them vLLM built the global layers at 256 x 8);
  # at head size 512 vLLM takes FlashAttention's CuTe kernel, whose Python DSL (cutlass) the pruned site lacks:
  # Triton's attention, vLLM's pick for the 256 x 8 layers and its fallback where FlashAttention cannot run
  "dsv3-4l-graphs-prof:benchmarks/gpu_vllm/configs/DeepSeek-V3-4layers-bf16:graphs::--profile-batches=1"
  "gemma4-eager-prof:benchmarks/gpu_vllm/configs/gemma-4-26B-A4B-text:eager::--profile-batches=1 --hf-overrides={\"allow_global_per_layer_attribute_access\":true,\"global_head_dim\":512,\"num_global_key_value_heads\":2} --attention-backend=TRITON_ATTN"
  "gemma4-graphs-prof:benchmarks/gpu_vllm/configs/gemma-4-26B-A4B-text:graphs::--profile-batches=1 --hf-overrides={\"allow_global_per_layer_attribute_access\":true,\"global_head_dim\":512,\"num_global_key_value_heads\":2} --attention-backend=TRITON_ATTN"
  # GB10's own path for gpt-oss (vLLM 0.26 on compute capability 12.x: MXFP4 experts on Marlin, as no other
  # BF16-activation MXFP4 backend runs there, and Triton's attention, as FlashAttention 2 has no sinks) and for the
  # NVFP4 MoEs of its seeds and fit set (Marlin, vLLM's own pick on Hopper): their eager Python per MoE layer,
  # measured on this host, is what the Grace host's cost prices on GB10
  "gptoss20b-marlin-eager-prof:tests/reference_configs/openai__gpt-oss-20b:eager::--profile-batches=1 --moe-backend=marlin --attention-backend=TRITON_ATTN"
  "gptoss20b-marlin-graphs-prof:tests/reference_configs/openai__gpt-oss-20b:graphs::--profile-batches=1 --moe-backend=marlin --attention-backend=TRITON_ATTN"
  "q30b8l-nvfp4-eager-prof:benchmarks/gpu_vllm/configs/Qwen3-30B-A3B-NVFP4-8layers:eager::--profile-batches=1"
  "q30b8l-nvfp4-graphs-prof:benchmarks/gpu_vllm/configs/Qwen3-30B-A3B-NVFP4-8layers:graphs::--profile-batches=1"
  # a large dense model's decode at several streams (the GB10 bench's 1, 5 and 10 at 1.5k and a long context):
  # Gemma 4 31B, 50 sliding layers of head size 256 and 10 global of 512, on Triton's attention (vLLM's pick at
  # head size 512 where FlashAttention's CuTe kernel cannot run), every kernel's GPU time profiled at 1 and 10
  # streams; the prefix cache on so that the long prompts are prefilled once (the runs' difference is decode)
  "gemma4-31b-prof:benchmarks/gpu_vllm/configs/gemma-4-31B-text:graphs::--batches=1,5,10 --contexts=1536,16384 --prefix-caching --max-model-len=16640 --max-num-batched-tokens=8192 --profile-batches=1,10 --hf-overrides={\"allow_global_per_layer_attribute_access\":true,\"global_head_dim\":512,\"num_global_key_value_heads\":4} --attention-backend=TRITON_ATTN"
  # Triton's attention against FlashAttention's on one dense model and one host (the eager Python of the
  # attention launched from Python): Qwen3-8B eager both ways, profiled at batch 1
  "q8b-triton-eager-prof:roofline/data/engine_models/qwen3-8b:eager::--profile-batches=1 --attention-backend=TRITON_ATTN"
  # Gemma 4's weights as vLLM holds them (0.4 GiB above the checkpoint's tensors, not traced)
  "gemma4-load:benchmarks/gpu_vllm/configs/gemma-4-26B-A4B-text:eager::--batches=1 --repeats=1 --load-trace --hf-overrides={\"allow_global_per_layer_attribute_access\":true,\"global_head_dim\":512,\"num_global_key_value_heads\":2} --attention-backend=TRITON_ATTN"
)
# the default chain: the calibration, then the cases named *-cal-eager
DEFAULT_CASES=()
for case in "${CASES[@]}"; do [[ "${case%%:*}" == *-cal-eager ]] && DEFAULT_CASES+=("$case"); done
case "${1:-}" in
start)
  rm -rf "$CHAIN"
  mkdir -p "$CHAIN/out"
  cp -r . "$CHAIN/repo"
  cd "$CHAIN/repo"
  shift
  setsid nohup bash benchmarks/gpu_vllm/calibrated_eager.sh chain "$@" > "$CHAIN/out/chain.log" 2>&1 < /dev/null &
  echo "chain started"
  ;;
chain)
  export OUT="$CHAIN/out"
  shift
  selected=()
  if [ "$#" -eq 0 ]; then
    selected=("${DEFAULT_CASES[@]}")
    date -u +"calibrate from %H:%M:%S"
    bash benchmarks/gpu_vllm/run_probe.sh calibrate > "$OUT/calibrate.log" 2>&1 || echo "calibrate failed"
  else
    for name in "$@"; do
      found=""
      for case in "${CASES[@]}"; do [ "${case%%:*}" = "$name" ] && found=$case; done
      [ -n "$found" ] || { echo "no case named $name"; touch "$OUT/done"; exit 2; }
      selected+=("$found")
    done
  fi
  date -u +"cases from %H:%M:%S"
  PROBE_ARGS="$CALIBRATION_ARGS" bash benchmarks/gpu_vllm/run_probe.sh run "${selected[@]}" || echo "cases failed"
  date -u +"done at %H:%M:%S"
  touch "$OUT/done"
  ;;
wait)
  deadline=$((SECONDS + ${2:-580}))
  while [ ! -f "$CHAIN/out/done" ] && [ "$SECONDS" -lt "$deadline" ]; do sleep 10; done
  tar czf "$OUT/chain.tgz" -C "$CHAIN" out
  ls "$CHAIN/out"
  tail -n 8 "$CHAIN/out/chain.log"
  ;;
*)
  echo "usage: calibrated_eager.sh start | chain | wait SECONDS" >&2
  exit 2
  ;;
esac
