#!/usr/bin/env bash
# Alternates two release builds of `sundial` through the benchmarks of the floors BENCHMARKS.md
# tracks (README.md, "Sizing with sundial bench"), in one
# sitting, so that a noisy shared machine weighs on both alike: for each round, each build
# runs `bench burst --jobs 10000`, `bench burst --jobs 100000 --lead-s 20` and
# `bench steady --rate 10000 --duration 60s`, on the embedded store and on PostgreSQL (a
# fresh database `bench_s` for each run). Prints one line per run: round, build, store, bench
# and the bench's closing JSON line.
#
# Usage: scripts/compare_builds.sh BEFORE_BINARY AFTER_BINARY [ROUNDS]   (default 1 round)
# Environment: PG (default postgres://root@127.0.0.1:5432), the server to create bench_s on.
set -euo pipefail
before="$1"; after="$2"; rounds="${3:-1}"
pg="${PG:-postgres://root@127.0.0.1:5432}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
benches=(
  "burst --jobs 10000"
  "burst --jobs 100000 --lead-s 20"
  "steady --rate 10000 --duration 60s"
)
fresh_pg() {
  psql "$pg/postgres" -qc "DROP DATABASE IF EXISTS bench_s WITH (FORCE)" >/dev/null
  psql "$pg/postgres" -qc "CREATE DATABASE bench_s" >/dev/null
}
for round in $(seq 1 "$rounds"); do
  for bench in "${benches[@]}"; do
    for store in sqlite postgres; do
      for build in before after; do
        bin="$before"; [ "$build" = after ] && bin="$after"
        args=()
        if [ "$store" = postgres ]; then fresh_pg; args=(--database-url "$pg/bench_s"); fi
        # shellcheck disable=SC2086
        line="$(cd "$work" && "$bin" bench $bench "${args[@]}" 2>/dev/null | tail -n 1)" || line="FAILED $line"
        echo "$round $build $store [$bench] $line"
      done
    done
  done
done
