#!/usr/bin/env bash
# Sourced by serve.sh and test.sh: make sure .venv exists with Warren installed.
# Usage: source scripts/venv.sh [pip extras, e.g. "[test]"]
set -euo pipefail
if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
    if [ "$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq python3-venv;
    else sudo apt-get update -qq && sudo apt-get install -y -qq python3-venv; fi
fi
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".${1:-}"
