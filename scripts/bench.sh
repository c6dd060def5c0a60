#!/usr/bin/env bash
# Run the side-by-side benchmark (bench/compare.py): Warren and a fresh RabbitMQ node on
# free loopback ports, driven by the RabbitMQ Java client; rewrites docs/benchmarks.md and
# docs/benchmarks.png. Installs what it needs when missing (Debian: rabbitmq-server, a
# JDK, the RabbitMQ Java client and slf4j; .venv with Warren, pika and matplotlib).
# Extra arguments go to compare.py (see --help), e.g. --repeat 1 --only 1p1c-16b.
set -euo pipefail
cd "$(dirname "$0")/.."

debian_packages=()
installing_rabbitmq=""
if [ ! -x /usr/lib/rabbitmq/bin/rabbitmq-server ]; then
    debian_packages+=(rabbitmq-server)
    installing_rabbitmq=yes
fi
command -v javac >/dev/null || debian_packages+=(default-jdk-headless)
[ -f /usr/share/java/amqp-client.jar ] || debian_packages+=(librabbitmq-client-java)
[ -f /usr/share/java/slf4j-api.jar ] || debian_packages+=(libslf4j-java)
if [ ${#debian_packages[@]} -gt 0 ]; then
    sudo_if_needed=""
    [ "$(id -u)" = 0 ] || sudo_if_needed=sudo
    $sudo_if_needed apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_if_needed apt-get install -y -qq "${debian_packages[@]}"
    if [ -n "$installing_rabbitmq" ]; then
        # The package may start a system node on 5672 (Warren's port); compare.py starts
        # its own nodes, so stop that one.
        { $sudo_if_needed systemctl disable --now rabbitmq-server \
            || $sudo_if_needed service rabbitmq-server stop; } >/dev/null 2>&1 || true
    fi
fi

source scripts/venv.sh "[bench]"
exec .venv/bin/python bench/compare.py "$@"
