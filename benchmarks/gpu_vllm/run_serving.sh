#!/usr/bin/env bash
# The GPU harness's serving cases on the lent machine (after `run_probe.sh stage` carried the vLLM site's parts):
#   benchmarks/gpu_vllm/run_serving.sh CASE [CASE ...]
# A case is NAME|CONFIG|SERVE ARGS|SERVE_LOAD ARGS (benchmarks/gpu_vllm/serve_load.py: --ttft-lengths, --rates,
# --burst, ...; spaces allowed inside the fields, none around the bars). Every file the cases write is packed
# into $OUT/serving-<first case>.tar.xz (the device returns at most 8 files).
set -uo pipefail
mkdir -p /tmp/parts
for part in .whl/vllm-site/part*; do [ -f "$part" ] && cp "$part" /tmp/parts/; done
if [ ! -d /tmp/site/vllm ]; then
  mkdir -p /tmp/site
  cat /tmp/parts/part* | xz -d | tar -x -C /tmp/site
fi
export PYTHONPATH=/tmp/site VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1 VLLM_USE_DEEP_GEMM=0
python3 -c 'import torch, vllm; print("vllm", vllm.__version__, "torch", torch.__version__, torch.cuda.get_device_name(0))'
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader
results=/tmp/serving-results
mkdir -p "$results"
first=""
for case in "$@"; do
  IFS='|' read -r name config serve extra <<<"$case"
  first=${first:-$name}
  echo "== $name ($config; $serve; $extra) $(date +%T)"
  # shellcheck disable=SC2086
  timeout 560 python3 benchmarks/gpu_vllm/serve_load.py --config "$config" --name "$name" --serve-args="$serve" \
      --out "$results" $extra 2>&1 | tail -n 20 || echo "case $name failed"
done
tar -C "$results" -cJf "$OUT/serving-$first.tar.xz" .
ls -la "$OUT"
