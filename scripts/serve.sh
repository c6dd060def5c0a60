#!/usr/bin/env bash
# Start Warren on the embedded default: 127.0.0.1:5672, guest/guest, data in ./data.
# Installs Warren into .venv first. Extra arguments go to `warren serve`.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh ""
exec .venv/bin/warren serve "$@"
