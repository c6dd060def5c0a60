#!/usr/bin/env bash
# Run pytest on the mypyc-compiled build: copy the checkout's files (tracked and new,
# not ignored ones) to build/compiled, compile the modules there in place with setup.py
# (broker/build.py lists them), and run `.venv/bin/python -m pytest ARGS...` in that
# copy. WARREN_EXPECT_BUILD=compiled makes the test session, and every broker process it
# starts, stop unless they run the compiled modules: a compile that fell back to pure
# Python fails here instead of passing as compiled. Needs .venv (scripts/venv.sh "[test]":
# mypy is a test dependency), gcc and the Python headers.
# Usage: scripts/compiled_tests.sh PYTEST_ARGS...
set -euo pipefail
cd "$(dirname "$0")/.."
venv_python=$PWD/.venv/bin/python
compiled=$PWD/build/compiled
rm -rf "$compiled"
mkdir -p "$compiled"
git ls-files -co --exclude-standard -z | tar --null -cf - -T - | tar -xf - -C "$compiled"
cd "$compiled"
echo "== compiling amqp_codec and broker/core with mypyc (setup.py build_ext --inplace)"
start=$SECONDS
WARREN_COMPILE=1 "$venv_python" setup.py -q build_ext --inplace
echo "== compiled in $((SECONDS - start)) s"
WARREN_EXPECT_BUILD=compiled PYTHONPATH=$compiled exec "$venv_python" -m pytest "$@"
