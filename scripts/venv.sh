#!/usr/bin/env bash
# Sourced by serve.sh and test.sh: make sure .venv exists with Warren installed.
# Usage: source scripts/venv.sh EXTRAS    (EXTRAS: "" or pip extras such as "[test]")
# Installs only when .venv is new or pyproject.toml changed since the last install of
# these extras, or for no extras of any (Warren is installed editable: code changes need
# no reinstall).
set -euo pipefail
if [ $# -ne 1 ]; then
    echo "usage: source scripts/venv.sh EXTRAS (\"\" for none)" >&2
    return 2
fi
warren_extras=$1
if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
    if [ "$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq python3-venv;
    else sudo apt-get update -qq && sudo apt-get install -y -qq python3-venv; fi
fi
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
warren_stamp=".venv/.warren-installed${warren_extras//[^a-z]/-}"
warren_installed() {
    # Up to date: this install, or for no extras any install (one with extras includes
    # Warren's own dependencies): serve.sh after test.sh installs nothing.
    local stamps=("$warren_stamp") stamp
    [ -n "$warren_extras" ] || stamps=(.venv/.warren-installed*)
    for stamp in "${stamps[@]}"; do
        if [ -f "$stamp" ] && [ ! pyproject.toml -nt "$stamp" ]; then return 0; fi
    done
    return 1
}
if ! warren_installed; then
    .venv/bin/python -m pip install -q --disable-pip-version-check -e ".${warren_extras}"
    touch "$warren_stamp"
fi
