#!/usr/bin/env bash
# Run pytest on the mypyc-compiled build: copy the checkout's files (tracked and new,
# not ignored ones) to build/compiled, compile the modules there in place with setup.py
# (broker/build.py lists them), and run `.venv/bin/python -m pytest ARGS...` in that
# copy. WARREN_EXPECT_BUILD=compiled makes the test session, and every broker process it
# starts, stop unless they run the compiled modules: a compile that fell back to pure
# Python fails here instead of passing as compiled. Needs .venv (scripts/venv.sh "[test]":
# mypy is a test dependency), gcc and the Python headers.
# Usage: scripts/compiled_tests.sh PYTEST_ARGS...
#        scripts/compiled_tests.sh --build-only     (copy and compile, no tests)
#        scripts/compiled_tests.sh --built PYTEST_ARGS...   (test the copy built before)
# scripts/test.sh compiles with --build-only in the background while the pure-Python run
# goes, then tests with --built.
set -euo pipefail
cd "$(dirname "$0")/.."
venv_python=$PWD/.venv/bin/python
compiled=$PWD/build/compiled
mode=${1:-}
case "$mode" in --build-only|--built) shift ;; *) mode=all ;; esac

if [ "$mode" != --built ]; then
    rm -rf "$compiled"
    mkdir -p "$compiled"
    git ls-files -co --exclude-standard -z | tar --null -cf - -T - | tar -xf - -C "$compiled"
    echo "== compiling amqp_codec and broker/core with mypyc (setup.py build_ext --inplace)"
    start=$SECONDS
    (cd "$compiled" && WARREN_COMPILE=1 "$venv_python" setup.py -q build_ext --inplace)
    echo "== compiled in $((SECONDS - start)) s"
fi
[ "$mode" != --build-only ] || exit 0
cd "$compiled"
WARREN_EXPECT_BUILD=compiled PYTHONPATH=$compiled exec "$venv_python" -m pytest "$@"
