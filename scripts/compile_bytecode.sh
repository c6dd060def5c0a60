#!/usr/bin/env bash
# Write the bytecode (__pycache__) of the Python code in the source tree DIR (default:
# this checkout) with .venv's Python: Warren's packages, the Spark connector, the tests
# and the benchmarks. Python reads it even where PYTHONDONTWRITEBYTECODE keeps processes
# from writing it (scripts/test.sh).
# Usage: scripts/compile_bytecode.sh [DIR]
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
cd "${1:-$here}"
"$here/.venv/bin/python" -m compileall -q -j 0 amqp_codec broker storage spark tests bench \
    >/dev/null
