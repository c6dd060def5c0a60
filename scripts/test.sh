#!/usr/bin/env bash
# Install everything the test suite needs (Debian packages: a JDK, Go and the RabbitMQ
# Java and Go clients for the interop tests, PostgreSQL for the metadata tests, iproute2
# for the network namespace of the loopback_users tests; .venv with Warren and its test
# dependencies) and run the whole suite.
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

debian_packages=()
command -v javac >/dev/null || debian_packages+=(default-jdk-headless)
[ -f /usr/share/java/amqp-client.jar ] || debian_packages+=(librabbitmq-client-java)
[ -f /usr/share/java/slf4j-api.jar ] || debian_packages+=(libslf4j-java)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || debian_packages+=(postgresql)
command -v go >/dev/null || debian_packages+=(golang-go)
command -v ip >/dev/null || debian_packages+=(iproute2)
[ -f /usr/share/gocode/src/github.com/rabbitmq/amqp091-go/channel.go ] \
    || debian_packages+=(golang-github-rabbitmq-amqp091-go-dev)
if [ ${#debian_packages[@]} -gt 0 ]; then
    sudo_if_needed=""
    [ "$(id -u)" = 0 ] || sudo_if_needed=sudo
    $sudo_if_needed apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_if_needed apt-get install -y -qq "${debian_packages[@]}"
fi

source scripts/venv.sh "[test]"
exec .venv/bin/python -m pytest "$@"
