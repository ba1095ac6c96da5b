#!/usr/bin/env bash
# A PostgreSQL cluster the way production runs one (README, "A store that fails over"):
# one etcd, two Patroni members with synchronous replication, HAProxy in front sending
# connections to whichever member is the primary (Patroni's REST check `GET /primary`).
#
#   scripts/patroni-cluster.sh start DIR   # prints the address to use, 127.0.0.1:$BASE
#   scripts/patroni-cluster.sh stop DIR
#
# Ports: BASE (default 5440) HAProxy; BASE+1, BASE+2 the members' PostgreSQL; 8008+N their
# REST APIs; 2379/2380 + offset etcd. DIR holds every data directory and log, and the
# members' pids (DIR/member1.pid: Patroni, DIR/member1/postmaster.pid: PostgreSQL).
# Patroni runs as the `postgres` user (PostgreSQL refuses root), through setpriv, which
# execs, so that DIR/memberN.pid is Patroni itself.
set -euo pipefail

cmd=${1:?usage: $0 start|stop DIR}
dir=${2:?usage: $0 start|stop DIR}
base=${PATRONI_BASE_PORT:-5440}
rest=$((base + 2568))           # 8008 for the default base
etcd_client=$((base - 3061))    # 2379
etcd_peer=$((etcd_client + 1))
bin=/usr/lib/postgresql/15/bin

stop() {
  for pidfile in "$dir"/haproxy.pid "$dir"/member1.pid "$dir"/member2.pid "$dir"/etcd.pid; do
    [ -f "$pidfile" ] && kill -9 "$(cat "$pidfile")" 2>/dev/null || true
  done
  for m in member1 member2; do
    if [ -f "$dir/$m/postmaster.pid" ]; then
      kill -9 "$(head -1 "$dir/$m/postmaster.pid")" 2>/dev/null || true
    fi
  done
}

if [ "$cmd" = stop ]; then
  stop
  exit 0
fi

mkdir -p "$dir"
chown postgres: "$dir"
chmod 700 "$dir"

# etcd, one member: Patroni's distributed configuration store.
etcd --name e1 --data-dir "$dir/etcd" \
  --listen-client-urls "http://127.0.0.1:$etcd_client" --advertise-client-urls "http://127.0.0.1:$etcd_client" \
  --listen-peer-urls "http://127.0.0.1:$etcd_peer" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer" \
  --initial-cluster "e1=http://127.0.0.1:$etcd_peer" --enable-v2=true \
  > "$dir/etcd.log" 2>&1 &
echo $! > "$dir/etcd.pid"

for n in 1 2; do
  m=member$n
  cat > "$dir/$m.yml" <<EOF
scope: sundial
name: $m
restapi:
  listen: 127.0.0.1:$((rest + n - 1))
  connect_address: 127.0.0.1:$((rest + n - 1))
etcd3:
  host: 127.0.0.1:$etcd_client
bootstrap:
  dcs:
    ttl: 10
    loop_wait: 1
    retry_timeout: 4
    maximum_lag_on_failover: 0
    synchronous_mode: true
    postgresql:
      use_pg_rewind: true
      parameters:
        max_connections: 200
        wal_level: replica
        hot_standby: "on"
        max_wal_senders: 10
        max_replication_slots: 10
        wal_log_hints: "on"
  initdb:
    - encoding: UTF8
    - auth: trust
  pg_hba:
    - local all all trust
    - host all all 127.0.0.1/32 trust
    - host replication all 127.0.0.1/32 trust
postgresql:
  listen: 127.0.0.1:$((base + n))
  connect_address: 127.0.0.1:$((base + n))
  data_dir: $dir/$m
  bin_dir: $bin
  pgpass: $dir/$m.pgpass
  authentication:
    superuser: {username: postgres}
    replication: {username: postgres}
  parameters:
    unix_socket_directories: $dir
tags: {}
EOF
  chown postgres: "$dir/$m.yml"
  setpriv --reuid postgres --regid postgres --init-groups patroni "$dir/$m.yml" > "$dir/$m.log" 2>&1 &
  echo $! > "$dir/$m.pid"
  if [ "$n" = 1 ]; then
    # The first member bootstraps the cluster; the second then clones it.
    for _ in $(seq 1 60); do
      curl -sf "http://127.0.0.1:$rest/primary" > /dev/null && break
      sleep 0.5
    done
  fi
done

cat > "$dir/haproxy.cfg" <<EOF
global
  maxconn 1000
defaults
  mode tcp
  timeout connect 2s
  timeout client 30m
  timeout server 30m
  timeout check 1s
listen primary
  bind 127.0.0.1:$base
  option httpchk GET /primary
  http-check expect status 200
  default-server inter 500ms fall 2 rise 1 on-marked-down shutdown-sessions
  server member1 127.0.0.1:$((base + 1)) check port $rest
  server member2 127.0.0.1:$((base + 2)) check port $((rest + 1))
EOF
haproxy -f "$dir/haproxy.cfg" > "$dir/haproxy.log" 2>&1 &
echo $! > "$dir/haproxy.pid"

# Ready when the primary answers through HAProxy and a member is the synchronous standby.
ready() {
  psql -Atq "postgres://postgres@127.0.0.1:$base/postgres" -c "SELECT 1" > /dev/null 2>&1 || return 1
  curl -sf "http://127.0.0.1:$rest/sync" > /dev/null 2>&1 || curl -sf "http://127.0.0.1:$((rest + 1))/sync" > /dev/null 2>&1
}
for _ in $(seq 1 120); do
  if ready; then
    echo "127.0.0.1:$base"
    exit 0
  fi
  sleep 0.5
done
echo "patroni-cluster: not ready; logs in $dir" >&2
stop
exit 1
