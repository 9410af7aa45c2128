#!/usr/bin/env bash
# The main job on an embedded default, no network needed: set up, then audit the bundled
# config of nvidia/Qwen3.6-35B-A3B-NVFP4 (a hybrid GDN + MoE model) for the DGX Spark, write the
# HTML report, and plan formats for the bundled dense Qwen3-8B. Extra arguments go to the audit.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
.venv/bin/roofline audit examples/Qwen3.6-35B-A3B-NVFP4 --html roofline-report.html "$@"
.venv/bin/roofline plan examples/Qwen3-8B
