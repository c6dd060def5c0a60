#!/usr/bin/env bash
# Callgrind instructions per message of bench/core_hot_path.py in a source tree: the
# difference between runs of 20 and 120 batches (5 rounds of 100-message batches each),
# which cancels start-up, divided by the 50,000 extra messages. Deterministic, so it
# compares two trees on a loaded machine where wall clock cannot (docs/benchmarks.md).
#
#   bench/callgrind_per_message.sh [TREE] [core_hot_path.py arguments]
#   bench/callgrind_per_message.sh /tmp/before --distinct-ids
#
# TREE defaults to this checkout; PYTHON (default .venv/bin/python of this checkout,
# else python3) runs it. Needs valgrind.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
tree="$(cd "${1:-$here}" && pwd)"
[ $# -gt 0 ] && shift
python="${PYTHON:-$here/.venv/bin/python}"
[ -x "$python" ] || python=python3

collected() {
    local batches=$1; shift
    (cd "$tree" && PYTHONHASHSEED=0 PYTHONPATH="$tree" valgrind --tool=callgrind \
        --callgrind-out-file=/dev/null "$python" bench/core_hot_path.py \
        --batches "$batches" "$@" 2>&1 >/dev/null | awk '/Collected/ {print $4}')
}
small=$(collected 20 "$@")
large=$(collected 120 "$@")
echo $(( (large - small) / (5 * 100 * 100) ))
