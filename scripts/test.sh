#!/usr/bin/env bash
# Install everything the test suite needs (Debian packages, .venv with Warren and its
# test dependencies) and run the whole suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh "[test]"
exec .venv/bin/python -m pytest "$@"
