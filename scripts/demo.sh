#!/usr/bin/env bash
# The demo: set up, then a 2-process DDP run of the digits classifier on CPU through the local target.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/trainctl submit examples/digits.yaml --target local --wait "$@"
