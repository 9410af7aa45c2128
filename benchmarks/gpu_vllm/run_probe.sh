#!/usr/bin/env bash
# The GPU harness on the lent machine, in back-to-back `device` calls while it stays warm:
#   benchmarks/gpu_vllm/run_probe.sh stage        (carry .whl/vllm-site/part00, part01, ...: one per call, each
#       with the working tree under the 64 MiB a call carries: `split -b 40M -d -a 2 site.tar.xz part`)
#   benchmarks/gpu_vllm/run_probe.sh run CASES... (carry the last part: unpack the site, run the cases)
#   benchmarks/gpu_vllm/run_probe.sh kernels [--only KINDS]  (carry the last part: prefill_kernels.py, the prompt's
#       kernels timed one by one into $OUT/prefill_kernels.json)
#   benchmarks/gpu_vllm/run_probe.sh decode-kernels [--only KINDS]  (carry the last part: decode_kernels.py, a decode
#       step's kernels timed one by one into $OUT/decode_kernels.json)
#   benchmarks/gpu_vllm/run_probe.sh calibrate [ARGS...]  (roofline calibrate --engine vllm ARGS as a user
#       runs it; carry .whl/roofline-deps too: roofline's own pure-Python requirements the image lacks)
# A case is NAME:CONFIG:MODE[:QUANTIZATION[:PROBE ARGS]] (the args: probe.py options, no spaces inside one,
# e.g. --profile-batches=1,32 --hf-overrides={"num_hidden_layers":4}); results land in $OUT/NAME.json and NAME.log,
# and everything the case printed in $OUT/NAME.out (with --tensor-parallel-size the workers' start-up lines are there
# only: they log from their own processes).
set -euo pipefail
mkdir -p /tmp/parts
for part in .whl/vllm-site/part*; do [ -f "$part" ] && cp "$part" /tmp/parts/; done
ls -la /tmp/parts
[ "${1:-}" = "stage" ] && exit 0
action=$1
shift
if [ ! -d /tmp/site/vllm ]; then
  mkdir -p /tmp/site
  cat /tmp/parts/part* | xz -d | tar -x -C /tmp/site
fi
for wheel in .whl/vllm-extra/*.whl; do [ -f "$wheel" ] && python3 -m zipfile -e "$wheel" /tmp/site; done
export PYTHONPATH=/tmp/site VLLM_USE_FLASHINFER_SAMPLER=0 VLLM_ENABLE_V1_MULTIPROCESSING=0 PYTHONUNBUFFERED=1
python3 -c 'import torch, vllm; print("vllm", vllm.__version__, "torch", torch.__version__, torch.cuda.get_device_name(0))'
if [ "$action" = "kernels" ]; then  # the prefill kernels one by one (prefill_kernels.py ARGS)
  python3 benchmarks/gpu_vllm/prefill_kernels.py --out "$OUT/prefill_kernels.json" "$@" 2>&1 | grep -v "^\s*$" | tail -n 120
  exit 0
fi
if [ "$action" = "decode-kernels" ]; then  # the decode step's kernels one by one (decode_kernels.py ARGS)
  python3 benchmarks/gpu_vllm/decode_kernels.py --out "$OUT/decode_kernels.json" "$@" 2>&1 | grep -v "^\s*$" | tail -n 120
  exit 0
fi
if [ "$action" = "calibrate" ]; then
  mkdir -p /tmp/rdeps
  for wheel in .whl/roofline-deps/*.whl; do [ -f "$wheel" ] && python3 -m zipfile -e "$wheel" /tmp/rdeps; done
  # roofline as a user has it installed: calibrate's vLLM child drops the working directory from its path
  # (roofline/live/child.py), so the package goes beside roofline's missing requirements, not the tree
  rm -rf /tmp/rdeps/roofline && cp -r roofline /tmp/rdeps/roofline
  # the image's own packages first, roofline's missing ones after
  export PYTHONPATH=/tmp/site:/tmp/rdeps ROOFLINE_HARDWARE_FILE=$OUT/hardware.toml
  # the entry named after the card it measured (h100-here, h200-here)
  key=$(python3 -c 'import torch; print("h100-here" if "H100" in torch.cuda.get_device_name(0) else "h200-here")')
  python3 -m roofline.cli calibrate --engine vllm --save "$key" --json "$@" > "$OUT/calibrate.json" \
      || { echo "calibrate failed"; exit 1; }
  tail -c 4000 "$OUT/calibrate.json"
  exit 0
fi
for case in "$@"; do
  IFS=: read -r name config mode quant extra <<<"$case"
  echo "== $name ($config, $mode${quant:+, $quant})"
  python3 benchmarks/gpu_vllm/probe.py --config "$config" --mode "$mode" ${quant:+--quantization "$quant"} \
      --out "$OUT/$name.json" ${PROBE_ARGS:-} ${extra:-} 2>&1 | tee "$OUT/$name.out" | grep -v "^\s*$" | tail -n 40 \
      || echo "case $name failed"
done
