#!/usr/bin/env bash
# Sets up (scripts/setup.sh --test) and runs the whole test suite. CI runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --test
# two workers (ROOFLINE_TEST_WORKERS): the 2-core CI machine runs the pure-Python tests beside the vLLM ones,
# which take a lock so that one engine starts at a time; a whole file goes to one worker (--dist loadfile) so
# that its module-scoped engines and fixtures start once, and the files that start engines go to one worker
# together, first (tests/conftest.py pytest_xdist_make_scheduler; units in the collection's order)
exec .venv/bin/python -m pytest -n "${ROOFLINE_TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder "$@"
