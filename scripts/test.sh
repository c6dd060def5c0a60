#!/usr/bin/env bash
# Install everything the test suite needs (Debian packages: a JDK, Go and the RabbitMQ
# Java and Go clients for the interop tests, PostgreSQL for the metadata tests, iproute2
# for the network namespace of the loopback_users tests, RabbitMQ for the differential
# tests, which start a throw-away node of their own; .venv with Warren and its test
# dependencies) and run the suite on both builds, two pytest-xdist workers each: the
# mypyc-compiled build (what `pip install .` gives; docs/install.md) runs the whole
# suite but the `build_independent` tests (storage and harness tests that run no
# compiled module), the pure-Python build all but the `slow` tests (Spark and the
# million-message stream). The compiled build is made in build/compiled in the
# background while the pure run goes, and the integration tests run a third time, also
# beside the pure run, against a throw-away RabbitMQ 3.10.8 node (the suite's line,
# pyproject.toml's warren_rabbitmq; tests/support/rabbitmq_node.py run), Warren-only
# tests and tests of other lines deselected, so every run proves that they pass against
# RabbitMQ too (docs/testing.md, "The CI arrangement").
# Extra arguments go to both Warren runs. The exit status is non-zero when any run
# fails; pytest's 5 (no tests ran) is a failure too.
#
# scripts/test.sh --quick [PYTEST_ARGS...]: the loop to run while editing: the unit
# tests but the slow ones, two workers, on .venv (made on first use); no Debian
# packages, integration tests, RabbitMQ or compiled build (tests/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = --quick ]; then
    shift
    source scripts/venv.sh "[test]"
    exec .venv/bin/python -m pytest tests/unit -n 2 -m "not slow" "$@"
fi

debian_packages=()
command -v javac >/dev/null || debian_packages+=(default-jdk-headless)
[ -f /usr/share/java/amqp-client.jar ] || debian_packages+=(librabbitmq-client-java)
[ -f /usr/share/java/slf4j-api.jar ] || debian_packages+=(libslf4j-java)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || debian_packages+=(postgresql)
command -v go >/dev/null || debian_packages+=(golang-go)
command -v ip >/dev/null || debian_packages+=(iproute2)
[ -x /usr/bin/prometheus ] || debian_packages+=(prometheus)
[ -x /usr/bin/chromium ] || debian_packages+=(chromium)          # the web UI tests
[ -x /usr/bin/chromedriver ] || debian_packages+=(chromium-driver)
[ -f /usr/share/gocode/src/github.com/rabbitmq/amqp091-go/channel.go ] \
    || debian_packages+=(golang-github-rabbitmq-amqp091-go-dev)
sudo_if_needed=""
[ "$(id -u)" = 0 ] || sudo_if_needed=sudo
if [ ${#debian_packages[@]} -gt 0 ]; then
    $sudo_if_needed apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_if_needed apt-get install -y -qq "${debian_packages[@]}"
fi
# rabbitmq-server's postinst starts a system node (invoke-rc.d) on 5672, Warren's default
# port: a policy-rc.d answering 101 forbids that start during the install, and the
# service is disabled for later boots. The tests start their own node on a free port.
if [ ! -x /usr/lib/rabbitmq/bin/rabbitmq-server ]; then
    policy=/usr/sbin/policy-rc.d
    saved_policy=""
    if [ -e "$policy" ]; then
        saved_policy=$(mktemp)
        $sudo_if_needed cp -p "$policy" "$saved_policy"
    fi
    printf '#!/bin/sh\nexit 101\n' | $sudo_if_needed tee "$policy" >/dev/null
    $sudo_if_needed chmod 755 "$policy"
    $sudo_if_needed apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_if_needed apt-get install -y -qq rabbitmq-server \
        || install_failed=1
    if [ -n "$saved_policy" ]; then
        $sudo_if_needed mv "$saved_policy" "$policy"
    else
        $sudo_if_needed rm -f "$policy"
    fi
    [ -z "${install_failed:-}" ] || exit 1
    if command -v systemctl >/dev/null; then
        $sudo_if_needed systemctl disable --now rabbitmq-server >/dev/null 2>&1 || true
    else
        $sudo_if_needed update-rc.d rabbitmq-server disable >/dev/null 2>&1 || true
    fi
fi

source scripts/venv.sh "[test]"
# The runs write bytecode even where PYTHONDONTWRITEBYTECODE is set (it is on the
# machines here): otherwise every process the suite starts compiles again what it
# imports. A broker start compiled Warren's modules (about 0.3 s of its 1.3 s), and every
# pytest process (the workers, the plugin's pytester runs) rewrote the assertions of
# about 190 modules (the hypothesis, broker and anyio packages, whose pytest plugins make
# pytest rewrite them) for about 3 s; pytest caches a rewritten module only where
# bytecode may be written.
unset PYTHONDONTWRITEBYTECODE
# Two workers, each with its own broker; --dist loadfile keeps a module's tests (and its
# module-scoped fixtures: a Spark cluster, a dedicated broker) on one worker. Each Warren
# run ends with its 25 slowest tests, where a run's time goes (docs/testing.md).
workers=(-n 2 --dist loadfile --durations=25)
mkdir -p build
# Each run writes its client flakes (a third-party client's own test that failed once
# through a race inside the client and passed when run again alone; docs/testing.md,
# "Client flakes") to a file here, counted at the end.
flakes=$PWD/build/client-flakes
rm -rf "$flakes"
mkdir -p "$flakes"
echo "== compiling the compiled build in the background (log: build/compile.log)"
scripts/compiled_tests.sh --build-only >build/compile.log 2>&1 &
compile_pid=$!

# Not run again against RabbitMQ (docs/testing.md, "The RabbitMQ run"): the Spark tests
# (`slow`), the differential runner (the first run compared Warren with a throw-away node
# already), and the loopback_users test that needs a broker listening on every interface.
# It waits on RabbitMQ about half of its time, so it runs beside the pure run.
echo "== the integration tests against a throw-away RabbitMQ 3.10 node (Warren-only ones and other lines' deselected), in the background (log: build/rabbitmq-run.log)"
rabbitmq_start=$SECONDS
WARREN_CLIENT_FLAKES=$flakes/rabbitmq.txt .venv/bin/python tests/support/rabbitmq_node.py run --line 3.10 -- \
    .venv/bin/python -m pytest tests/integration tests/clients -q -m "not slow" \
    --ignore tests/integration/test_differential.py \
    --deselect tests/integration/test_loopback_users.py::test_guest_is_refused_from_a_non_loopback_address_and_accepted_from_loopback \
    >build/rabbitmq-run.log 2>&1 &
rabbitmq_pid=$!

# The slow tests that are build_independent (the stream log's million messages) stay
# here: the compiled run leaves them out.
echo "== the suite on the pure-Python build, without the slow tests (the compiled run has them)"
start=$SECONDS
pure_status=0
WARREN_CLIENT_FLAKES=$flakes/pure.txt .venv/bin/python -m pytest "${workers[@]}" \
    -m "not slow or build_independent" "$@" \
    || pure_status=$?
echo "== pure-Python run: $((SECONDS - start)) s"

start=$SECONDS
rabbitmq_status=0
wait "$rabbitmq_pid" || rabbitmq_status=$?
cat build/rabbitmq-run.log
echo "== RabbitMQ run: $((SECONDS - rabbitmq_start)) s in all, $((SECONDS - start)) s of it after the pure run"

start=$SECONDS
compiled_status=0
if wait "$compile_pid"; then
    echo "== waited $((SECONDS - start)) s for the compile; $(grep '== compiled in' build/compile.log)"
    echo "== the suite on the compiled build (build/compiled), without the build-independent tests"
    start=$SECONDS
    WARREN_CLIENT_FLAKES=$flakes/compiled.txt \
        scripts/compiled_tests.sh --built "${workers[@]}" -m "not build_independent" "$@" \
        || compiled_status=$?
    echo "== compiled run: $((SECONDS - start)) s"
else
    compiled_status=$?
    cat build/compile.log >&2
    echo "test.sh: the compile failed (exit status $compiled_status)" >&2
fi

# One line per run: how many client flakes it accepted (each is listed in its run's output).
count_flakes() { if [ -f "$flakes/$1.txt" ]; then wc -l <"$flakes/$1.txt"; else echo "not counted"; fi; }
echo "== client flakes: pure-Python run $(count_flakes pure), RabbitMQ run $(count_flakes rabbitmq), compiled run $(count_flakes compiled)"
cat "$flakes"/*.txt 2>/dev/null || true

[ "$pure_status" = 0 ] \
    || echo "test.sh: the suite failed on the pure-Python build (pytest exit status $pure_status)" >&2
[ "$compiled_status" = 0 ] \
    || echo "test.sh: the suite failed on the compiled build (exit status $compiled_status)" >&2
[ "$rabbitmq_status" = 0 ] \
    || echo "test.sh: the run against RabbitMQ failed (exit status $rabbitmq_status)" >&2
for status in "$pure_status" "$compiled_status" "$rabbitmq_status"; do
    if [ "$status" != 0 ]; then exit "$status"; fi
done
