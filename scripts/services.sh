#!/usr/bin/env bash
# Starts what Sundial's tests need and is down: PostgreSQL, Redis, NATS (JetStream) and
# RabbitMQ on their usual loopback ports, and Podman's Docker Engine API with a local busybox
# image (scripts/podman-setup.sh); and the tools the suite drives: Debian's chromium and
# chromium-driver, faketime, schemathesis from PyPI, the Standard Webhooks libraries from PyPI
# and npm. Idempotent: a service that answers on its port is left
# alone; a package that is missing is installed from Debian's archive.
#
# Ports: PostgreSQL 5432, Redis 6379, NATS 4222, RabbitMQ 5672, Podman unix:///tmp/podman.sock.
# Exits non-zero, naming the service, when one does not come up within 60 s.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "services: $*" >&2; }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
wait_port() {
  for _ in $(seq 1 120); do port_open "$1" && return 0; sleep 0.5; done
  log "$2 did not come up on port $1"
  return 1
}
apt_updated=0
need() { # need COMMAND PACKAGE...: installs the packages when COMMAND is missing
  local cmd="$1"; shift
  command -v "$cmd" >/dev/null 2>&1 && return 0
  export DEBIAN_FRONTEND=noninteractive
  if [ "$apt_updated" = 0 ]; then apt-get update -qq; apt_updated=1; fi
  log "installing $*"
  apt-get install -y -qq "$@" >/dev/null
}

# The browser suite (crates/bin/tests/browser.rs) drives Debian's headless Chromium.
need chromium chromium
need chromedriver chromium-driver
# The store failover scenario (crates/bin/tests/failure.rs) runs PostgreSQL under Patroni,
# with etcd and HAProxy (scripts/patroni-cluster.sh).
need patroni patroni
need etcd etcd-server
need haproxy haproxy
# The skewed-clock scenario (crates/bin/tests/failure.rs) runs one node under libfaketime.
need faketime faketime
# The API is held to its OpenAPI document by schemathesis (scripts/schemathesis.sh).
if ! command -v schemathesis >/dev/null 2>&1; then
  log "installing schemathesis from PyPI"
  python3 -m pip install --quiet 'schemathesis>=4,<5'
fi
# Signed deliveries are verified by the Standard Webhooks libraries themselves
# (crates/bin/tests/signing.rs): `standardwebhooks` and `cryptography` from PyPI, and
# `standardwebhooks` from npm into crates/bin/tests/signing/node_modules (package-lock.json).
if ! python3 -c 'import standardwebhooks, cryptography' >/dev/null 2>&1; then
  log "installing standardwebhooks and cryptography from PyPI"
  python3 -m pip install --quiet 'standardwebhooks>=1.3,<2' 'cryptography>=41'
fi
need node nodejs
need npm npm
if [ ! -d crates/bin/tests/signing/node_modules/standardwebhooks ]; then
  log "installing standardwebhooks from npm"
  (cd crates/bin/tests/signing && npm ci --silent --no-audit --no-fund)
fi

if ! port_open 5432; then
  if ! ls /etc/postgresql/*/main >/dev/null 2>&1; then need pg_ctlcluster postgresql; fi
  log "starting PostgreSQL"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start
  wait_port 5432 PostgreSQL
fi
if ! port_open 6379; then
  need redis-server redis-server
  log "starting Redis"
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log
  wait_port 6379 Redis
fi
if ! port_open 4222; then
  need nats-server nats-server
  log "starting NATS"
  mkdir -p /var/lib/nats-server
  start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- \
    -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log
  wait_port 4222 NATS
fi
if ! port_open 5672; then
  need rabbitmq-server rabbitmq-server
  log "starting RabbitMQ"
  rabbitmq-server -detached
  wait_port 5672 RabbitMQ
fi
bash scripts/podman-setup.sh
